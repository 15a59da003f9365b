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
// UNKNOWN_TOPIC_OR_PARTITION. The refusals are counted
// (Stats.KafkaRefused, crowdlog_relay_kafka_refused_total{reason=
// "unknown_topic"}), the relay logs an ERROR after KafkaRefusalsError
// consecutive refusals and Relay.KafkaErr (readiness "kafka_writes")
// fails; nothing is forwarded, nothing dropped. Once the topic is created
// every accepted report arrives (none lost, ground truth: the reports
// published), KafkaErr is nil again and an INFO line says so.
func TestRelayCountsPersistentKafkaRefusals(t *testing.T) {
	e := newEnv(t, 0)
	const missing = "reports-not-yet"
	rs := randomReports(200)
	layers := e.onions(t, rs)
	w := ikafka.NewWriter(e.broker.Addr, missing)
	t.Cleanup(func() { w.Close() })
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
	metric := seriesValue(t, reg, "crowdlog_relay_kafka_refused_total", "unknown_topic")
	t.Logf("while refused: KafkaErr = %v; stats %+v; crowdlog_relay_kafka_refused_total{reason=\"unknown_topic\"} = %v", rb.KafkaErr(), refused, metric)
	if refused.KafkaRefused < uint64(len(rs)) || metric < float64(len(rs)) {
		t.Errorf("refused %d, metric %v; want ≥ %d (every report refused at least once)", refused.KafkaRefused, metric, len(rs))
	}
	if refused.Forwarded != 0 || refused.Dropped() != 0 {
		t.Errorf("while the topic is missing: forwarded %d, dropped %d; want 0, 0", refused.Forwarded, refused.Dropped())
	}
	if !strings.Contains(rb.KafkaErr().Error(), "unknown_topic") {
		t.Errorf("KafkaErr = %v, want the reason unknown_topic", rb.KafkaErr())
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "reason=unknown_topic") {
		t.Errorf("no ERROR line naming unknown_topic in the relay's log:\n%s", l)
	}
	if g := seriesValue(t, reg, "crowdlog_relay_kafka_refusing", ""); g != 1 {
		t.Errorf("crowdlog_relay_kafka_refusing = %v while refused, want 1", g)
	}

	// the operator creates the topic: everything accepted arrives
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := ikafka.EnsureTopics(ctx, e.broker.Addr, 4, missing); err != nil {
		t.Fatal(err)
	}
	for {
		msgs, err := readTopic(ctx, e.broker.Addr, missing)
		if err == nil && len(msgs) >= len(rs) {
			if dups := e.checkDelivered(t, rs, msgs); dups != 0 {
				t.Errorf("%d duplicates", dups)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after the topic was created: %d of %d reports arrived (%v); stats %+v", len(msgs), len(rs), err, stB.Snapshot())
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.waitDrained(t)
	after := stB.Snapshot()
	t.Logf("after the topic was created: stats %+v", after)
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
