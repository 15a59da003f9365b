package relays_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/relays"
)

// logBuffer is a slog sink tests read while the relay writes to it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRelayCountsPersistentKafkaRefusals: relay b produces to a topic the
// real (kfake) broker does not have, so every produce call is refused with
// UNKNOWN_TOPIC_OR_PARTITION; see checkRefusals. The fix: create the topic.
func TestRelayCountsPersistentKafkaRefusals(t *testing.T) {
	e := newEnv(t, 0)
	const missing = "reports-not-yet"
	w := ikafka.NewWriter(e.broker.Addr, missing)
	t.Cleanup(func() { w.Close() })
	checkRefusals(t, e, w, relays.KafkaRefusedUnknownTopic, func(ctx context.Context) error {
		return ikafka.EnsureTopics(ctx, e.broker.Addr, 4, missing)
	}, func(ctx context.Context) ([]kafka.Message, error) {
		return readTopic(ctx, e.broker.Addr, missing)
	})
}

// TestRelayCountsKafkaACLRefusals: a kfake broker with SASL (SCRAM-SHA-512)
// and ACLs on, relay b's Kafka user without any ACL: every produce call is
// refused; see checkRefusals. The broker hides a topic from a principal
// that may not describe it, so the writer's metadata lookup reports it as
// unknown: kfake (as Kafka for a metadata request of all topics) answers
// UNKNOWN_TOPIC_OR_PARTITION, counted as unknown_topic (a broker that
// answers TOPIC_AUTHORIZATION_FAILED is counted as authorization). The
// fix: the operator grants the relay role's ACLs (ikafka.ApplyACLs, as
// `crowdlog acls` does).
func TestRelayCountsKafkaACLRefusals(t *testing.T) {
	e := newEnv(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := ikafka.Credential{Mechanism: ikafka.MechanismSCRAMSHA512, User: "admin", Password: "admin-pw"}
	relay := ikafka.Credential{Mechanism: ikafka.MechanismSCRAMSHA512, User: "relay", Password: "relay-pw"}
	kb, err := ikafka.Config{Dir: t.TempDir(), Partitions: 4, Admin: &admin, ACLs: true,
		Users: []ikafka.User{{Role: "", Credential: relay}}}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kb.Close)
	as := func(c ikafka.Credential) *ikafka.Auth {
		a, err := c.AuthConfig("").Load()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	adminCtx := ikafka.WithAuth(ctx, as(admin))
	if err := ikafka.EnsureTopics(adminCtx, kb.Addr, 4, topic); err != nil {
		t.Fatal(err)
	}
	w := ikafka.NewWriterAuth(as(relay), kb.Addr, topic)
	t.Cleanup(func() { w.Close() })
	checkRefusals(t, e, w, relays.KafkaRefusedUnknownTopic, func(context.Context) error {
		return ikafka.ApplyACLs(adminCtx, kb.Addr, map[ikafka.Role]string{ikafka.RoleRelay: relay.User})
	}, func(context.Context) ([]kafka.Message, error) {
		return readTopic(adminCtx, kb.Addr, topic)
	})
}

// checkRefusals publishes 200 reports through relays a and b, relay b
// writing with w, which the broker refuses for reason. The refusals are
// counted (Stats.KafkaRefused, crowdlog_relay_kafka_refused_total{reason}),
// the relay logs an ERROR after KafkaRefusalsError (3) consecutive
// refusals, crowdlog_relay_kafka_refusing is 1 and Relay.KafkaErr
// (readiness "kafka_writes") fails; nothing is forwarded, nothing dropped.
// After fix every accepted report arrives (read: none lost, none twice;
// ground truth: the reports published), KafkaErr is nil again, the gauge 0
// and an INFO line says so.
func checkRefusals(t *testing.T, e *env, w relays.KafkaWriter, reason string, fix func(context.Context) error, read func(context.Context) ([]kafka.Message, error)) {
	t.Helper()
	rs := randomReports(200)
	layers := e.onions(t, rs)
	var logs logBuffer
	reg := prometheus.NewRegistry()
	var stB relays.Stats
	rb := e.relayB(t, w, &stB)
	rb.NakDelay = 50 * time.Millisecond
	rb.KafkaRefusalsError = 3
	rb.KafkaRefusalsAfter = time.Hour
	rb.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	rb.Registerer = reg
	runs := []*running{start(e.relayA(t, nil)), start(rb)}
	defer func() {
		for _, r := range runs {
			r.stop(t)
		}
	}()
	if err := rb.KafkaErr(); err != nil {
		t.Fatalf("KafkaErr before any write: %v", err)
	}
	publishAll(t, &publish.Publisher{JS: e.connect(t), Subject: protocol.RelaySubject("a")}, layers, 4)

	deadline := time.Now().Add(90 * time.Second)
	for rb.KafkaErr() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("KafkaErr still nil after 90 s: %+v", stB.Snapshot())
		}
		time.Sleep(50 * time.Millisecond)
	}
	refused := stB.Snapshot()
	metric := seriesValue(t, reg, "crowdlog_relay_kafka_refused_total", reason)
	t.Logf("while refused: KafkaErr = %v; stats %+v; crowdlog_relay_kafka_refused_total{reason=%q} = %v", rb.KafkaErr(), refused, reason, metric)
	if refused.KafkaRefused < uint64(len(rs)) || metric < float64(len(rs)) {
		t.Errorf("refused %d, metric %v; want ≥ %d (every report refused at least once)", refused.KafkaRefused, metric, len(rs))
	}
	if refused.Forwarded != 0 || refused.Dropped() != 0 {
		t.Errorf("while refused: forwarded %d, dropped %d; want 0, 0", refused.Forwarded, refused.Dropped())
	}
	if !strings.Contains(rb.KafkaErr().Error(), reason) {
		t.Errorf("KafkaErr = %v, want the reason %s", rb.KafkaErr(), reason)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "reason="+reason) {
		t.Errorf("no ERROR line naming %s in the relay's log:\n%s", reason, l)
	}
	if g := seriesValue(t, reg, "crowdlog_relay_kafka_refusing", ""); g != 1 {
		t.Errorf("crowdlog_relay_kafka_refusing = %v while refused, want 1", g)
	}

	// the operator fixes it: everything accepted arrives
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := fix(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		msgs, err := read(ctx)
		if err == nil && len(msgs) >= len(rs) {
			if dups := e.checkDelivered(t, rs, msgs); dups != 0 {
				t.Errorf("%d duplicates", dups)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after the fix: %d of %d reports arrived (%v); stats %+v", len(msgs), len(rs), err, stB.Snapshot())
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.waitDrained(t)
	after := stB.Snapshot()
	t.Logf("after the fix: stats %+v", after)
	if err := rb.KafkaErr(); err != nil {
		t.Errorf("KafkaErr after recovery: %v", err)
	}
	if after.Forwarded != uint64(len(rs)) || after.Dropped() != 0 {
		t.Errorf("forwarded %d, dropped %d; want %d, 0", after.Forwarded, after.Dropped(), len(rs))
	}
	if !strings.Contains(logs.String(), "accepts the relay's writes again") {
		t.Errorf("no recovery line in the relay's log")
	}
	if g := seriesValue(t, reg, "crowdlog_relay_kafka_refusing", ""); g != 0 {
		t.Errorf("crowdlog_relay_kafka_refusing = %v after recovery, want 0", g)
	}
}

// seriesValue is the value of reg's series name (with label reason when
// reason is set).
func seriesValue(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := reason == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					match = true
				}
			}
			if !match {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s{reason=%q} not registered", name, reason)
	return 0
}
