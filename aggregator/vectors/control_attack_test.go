package vectors

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/tlstest"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// chanRecoverer is the coordinator's side of recovery for the attack: it
// passes each unmasking request on to the test, which has the survivors
// answer through the relays.
type chanRecoverer chan blind.Request

func (c chanRecoverer) Ask(_ context.Context, req blind.Request) error {
	c <- req
	return nil
}

// forgeryRun is what one run of the vectors-control-forgery scenario gave.
type forgeryRun struct {
	status  map[uint32]blind.Status // final status per group
	dropped map[string]int64        // the service's drops by reason
}

func (r forgeryRun) count(st blind.Status) int {
	n := 0
	for _, s := range r.status {
		if s == st {
			n++
		}
	}
	return n
}

// honestDropped are the drops of honest submissions and answers (every
// reason but the refused control records').
func (r forgeryRun) honestDropped() int64 {
	var n int64
	for reason, v := range r.dropped {
		switch reason {
		case DropUnsignedControl, DropBadControlSignature, DropReplayedControl, DropMalformedControl:
		default:
			n += v
		}
	}
	return n
}

func (r forgeryRun) forgedDropped() int64 {
	return r.dropped[DropUnsignedControl] + r.dropped[DropBadControlSignature] + r.dropped[DropReplayedControl] + r.dropped[DropMalformedControl]
}

// runVectorsForgery mounts the attack of TestAttackVectorsControlForgery
// on a kfake broker with TLS, SASL/SCRAM and the ACL table: relay b, with
// the relay principal's credential (Write on vectors), forges PDD control
// records around two honest groups of 4 (3 members submit, 1 drops) while
// the real aggregate-vectors Service reads the topic with the aggregator's
// credential. signing: the coordinator signs its records and the service
// verifies them under its key; otherwise both run as before signing
// existed (unsigned records, no key).
func runVectorsForgery(t *testing.T, signing bool) forgeryRun {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions = 2
	dir := t.TempDir()
	srvTLS, caFile := tlstest.TLS(t, dir)
	cred := func(u string) infrakafka.Credential {
		return infrakafka.Credential{Mechanism: infrakafka.MechanismSCRAMSHA512, User: u, Password: u + "-secret"}
	}
	admin := cred("admin")
	b, err := infrakafka.Config{Dir: filepath.Join(dir, "kafka"), Partitions: partitions, TLS: srvTLS, Admin: &admin, ACLs: true,
		Users: []infrakafka.User{{Role: infrakafka.RoleRelay, Credential: cred("relay-b")},
			{Role: infrakafka.RoleAggregator, Credential: cred("aggregator")},
			{Role: infrakafka.RoleCoordinator, Credential: cred("coordinator")}}}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	as := func(c infrakafka.Credential) *infrakafka.Auth {
		a, err := c.AuthConfig(caFile).Load()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	adminAuth, relayAuth, coordAuth := as(admin), as(cred("relay-b")), as(cred("coordinator"))
	if err := infrakafka.EnsureTopics(infrakafka.WithAuth(ctx, adminAuth), b.Addr, partitions, protocol.VectorsTopic, protocol.GroupSumsTopic); err != nil {
		t.Fatal(err)
	}
	// every record names its partition (header), computed as the relays'
	// kafka.Hash balancer does for keyed ones
	writer := func(a *infrakafka.Auth) *kafkago.Writer {
		w := infrakafka.NewWriterAuth(a, b.Addr, protocol.VectorsTopic)
		w.Balancer = kafkago.BalancerFunc(func(m kafkago.Message, ps ...int) int {
			for _, h := range m.Headers {
				if h.Key == protocol.PartitionHeader {
					p, _ := strconv.Atoi(string(h.Value))
					return ps[p%len(ps)]
				}
			}
			return ps[0]
		})
		return w
	}
	relay, coord := writer(relayAuth), writer(coordAuth)
	defer relay.Close()
	defer coord.Close()
	write := func(w *kafkago.Writer, msgs ...kafkago.Message) {
		t.Helper()
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	partitionOf := func(in blind.Instance) int {
		return (&kafkago.Hash{}).Balance(kafkago.Message{Key: []byte(in.String())}, 0, 1)
	}
	at := func(p int) kafkago.Header {
		return kafkago.Header{Key: protocol.PartitionHeader, Value: []byte(strconv.Itoa(p))}
	}
	control := func(kind string) kafkago.Header {
		return kafkago.Header{Key: protocol.ControlHeader, Value: []byte(kind)}
	}

	coordPub, coordKey, _ := ed25519.GenerateKey(nil)
	_, relayKey, _ := ed25519.GenerateKey(nil) // relay b's own key: a foreign signer
	onionKey, _ := onion.GenerateKeyPair(1)
	// the coordinator's record: signed for (vectors, p, campaign) with
	// signing, the bare message without
	coordRec := func(kind string, body []byte, p int, key []byte) kafkago.Message {
		now := time.Now()
		v := body
		if signing {
			var err error
			if v, err = protocol.SignVectorsControl(coordKey, body, protocol.VectorsTarget{Topic: protocol.VectorsTopic, Partition: p, Campaign: "c"}, now, protocol.ControlValidity); err != nil {
				t.Fatal(err)
			}
		}
		return kafkago.Message{Key: key, Value: v, Time: now, Headers: []kafkago.Header{control(kind), at(p)}}
	}
	// relay-delivered messages: the aggregator's onion layer around a
	// member's submission or answer
	delivered := func(in blind.Instance, body []byte) kafkago.Message {
		l, err := onion.SealLayer(onionKey.PublicKey(), onion.Hop{Kind: onion.HopDeliver}, body)
		if err != nil {
			t.Fatal(err)
		}
		return kafkago.Message{Key: []byte(in.String()), Value: l, Headers: []kafkago.Header{at(partitionOf(in))}}
	}

	// two groups of 4 in different partitions, round 500: deadline 503,
	// recovery by 504
	rng := rand.New(rand.NewPCG(45, 45))
	g1, g2 := newTestGroup(t, rng, 4, 16, 500), newTestGroup(t, rng, 4, 16, 500)
	for gid := uint32(2); ; gid++ {
		g2.in.Group, g2.roster.Instance.Group = gid, gid
		if partitionOf(g2.in) != partitionOf(g1.in) {
			break
		}
	}
	groups := []*testGroup{g1, g2}
	p1, p2 := partitionOf(g1.in), partitionOf(g2.in)
	const dropped = 3 // member 3 of each group never submits

	// 1. relay b writes first: a roster of group 2 with L = 1 (every
	// honest vector then has the wrong length); with signing also a copy
	// of the coordinator's signed roster of group 1 in group 2's partition
	forged := 0
	bad := g2.roster
	bad.L = 1
	write(relay, kafkago.Message{Key: []byte(g2.in.String()), Value: enc(t, &bad), Time: time.Now(), Headers: []kafkago.Header{control("roster"), at(p2)}})
	forged++
	r1 := coordRec("roster", enc(t, &g1.roster), p1, []byte(g1.in.String()))
	if signing {
		copied := r1
		copied.Headers = []kafkago.Header{control("roster"), at(p2)}
		write(relay, copied)
		forged++
	}
	// 2. the coordinator's rosters
	write(coord, r1, coordRec("roster", enc(t, &g2.roster), p2, []byte(g2.in.String())))
	// 3. relay b: a tick for day MaxInt32 in group 1's partition
	// (unsigned; with signing also one signed by its own key)
	tick := enc(t, &blind.Tick{Day: math.MaxInt32})
	write(relay, kafkago.Message{Value: tick, Time: time.Now(), Headers: []kafkago.Header{control("tick"), at(p1)}})
	forged++
	if signing {
		v, err := protocol.SignVectorsControl(relayKey, tick, protocol.VectorsTarget{Topic: protocol.VectorsTopic, Partition: p1, Campaign: "c"}, time.Now(), protocol.ControlValidity)
		if err != nil {
			t.Fatal(err)
		}
		write(relay, kafkago.Message{Value: v, Time: time.Now(), Headers: []kafkago.Header{control("tick"), at(p1)}})
		forged++
	}
	// 4. the members' commitments (through the coordinator) and their
	// vectors (through the relays): 6 honest submissions
	for _, g := range groups {
		for i := range dropped {
			write(coord, coordRec("commit", g.deal(t, i), partitionOf(g.in), []byte(g.in.String())))
		}
	}
	for _, g := range groups {
		for i := range dropped {
			write(relay, delivered(g.in, g.submit(t, i)))
		}
	}
	// 5. the coordinator's tick of day 504 in every partition: the
	// deadline passed, member 3 is missing, recovery starts
	for p := range partitions {
		write(coord, coordRec("tick", enc(t, &blind.Tick{Day: 504}), p, nil))
	}

	asks := make(chanRecoverer, 8)
	s := &Service{Brokers: []string{b.Addr}, Keys: []*onion.KeyPair{onionKey}, Logger: slog.New(slog.DiscardHandler),
		MaxWait: 20 * time.Millisecond, SessionTimeout: 6 * time.Second, Recoverer: asks}
	if signing {
		s.ControlKey = coordPub
	}
	sctx, stop := context.WithCancel(infrakafka.WithAuth(ctx, as(cred("aggregator"))))
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	defer func() {
		stop()
		<-done
	}()
	tail := infrakafka.ReadTopic(infrakafka.WithAuth(ctx, adminAuth), []string{b.Addr}, protocol.GroupSumsTopic, "test", slog.New(slog.DiscardHandler))
	defer tail.Stop()

	out := forgeryRun{status: map[uint32]blind.Status{}}
	deadline := time.After(90 * time.Second)
	for len(out.status) < len(groups) {
		select {
		case req := <-asks:
			// the survivors answer the unmasking request through the relays
			g := g1
			if req.Instance == g2.in {
				g = g2
			}
			for _, h := range req.Survivors() {
				write(relay, delivered(g.in, g.answer(t, req, int(h))))
			}
		case v := <-tail.Msgs:
			m, err := blind.Parse(v)
			if err != nil || m.Outcome == nil {
				t.Fatalf("group-sums record %x: %v", v, err)
			}
			out.status[m.Outcome.Roster.Instance.Group] = m.Outcome.Status
		case <-deadline:
			t.Fatalf("in 90 s: outcomes %v, drops %v", out.status, s.DroppedByReason())
		case err := <-done:
			t.Fatalf("the service stopped: %v", err)
		}
	}
	// every record read: 2 rosters, the forged ones, 6 commitments,
	// 6 submissions, 2 ticks, and the answers
	// (a partition's drops are counted just after its outcomes are
	// written: wait until they stay unchanged for 500 ms, and with signing
	// until every forged record is counted; at most 10 s)
	stable := time.Now()
	for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
		now := s.DroppedByReason()
		if !maps.Equal(now, out.dropped) {
			out.dropped, stable = now, time.Now()
		}
		if time.Since(stable) >= 500*time.Millisecond && (!signing || out.forgedDropped() >= int64(forged)) {
			break
		}
	}
	return out
}

// TestAttackVectorsControlForgery (docs/threat-model.md, forged PDD
// coordination): relay b's Kafka credential may write to topic vectors
// (it forwards the members' vectors). With it, relay b writes a roster of
// an honest group before the coordinator's (same group, L = 1) and a tick
// for day MaxInt32 into the other group's partition; each group has 4
// members, 3 submit and one drops, so an honest run recovers both groups.
// With the coordinator's records signed and aggregate-vectors verifying
// them under its key (--coordinator-pub), the forgeries — and, with
// signing on, a tick relay b signed with its own key and a copy of the
// coordinator's signed roster in another partition — are dropped and
// counted, both groups are recovered and no honest message is dropped.
// The control (before signing: unsigned records, no key) freezes the day
// clock and poisons the roster.
func TestAttackVectorsControlForgery(t *testing.T) {
	on := runVectorsForgery(t, true)
	off := runVectorsForgery(t, false)
	fmt.Printf("ATTACK vectors-control-forgery: %d of 2 groups recovered, %d honest dropped, %d forged records dropped (%d unsigned, %d foreign key, %d replayed into another partition) — before signing (unsigned records, no key): %d of 2 recovered, %d lost, %d honest dropped (%d late, %d bad_member)\n",
		on.count(blind.StatusRecovered), on.honestDropped(), on.forgedDropped(), on.dropped[DropUnsignedControl], on.dropped[DropBadControlSignature], on.dropped[DropReplayedControl],
		off.count(blind.StatusRecovered), off.count(blind.StatusLost), off.honestDropped(), off.dropped[DropLate], off.dropped[DropBadMember])
	if on.count(blind.StatusRecovered) != 2 || on.honestDropped() != 0 || on.dropped[DropUnsignedControl] != 2 ||
		on.dropped[DropBadControlSignature] != 1 || on.dropped[DropReplayedControl] != 1 {
		t.Errorf("with signing: outcomes %v, drops %v; want 2 recovered, 0 honest dropped, 2 unsigned, 1 foreign, 1 replayed", on.status, on.dropped)
	}
	// the control: group 1 lost at the forged tick (its 3 commitments and
	// 3 vectors late), group 2's vectors refused by the forged roster
	if off.count(blind.StatusRecovered) != 0 || off.count(blind.StatusLost) != 2 || off.dropped[DropLate] != 6 || off.dropped[DropBadMember] != 3 {
		t.Errorf("control (before signing): outcomes %v, drops %v; the forged records should have stopped both groups", off.status, off.dropped)
	}
}
