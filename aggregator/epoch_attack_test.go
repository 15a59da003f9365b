package aggregator

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// floodReport seals one report of a fresh artifact (k = 5: it stays below
// threshold) for (app, epoch) in the aggregator's onion layer, as a client
// does.
func floodReport(t testing.TB, key *onion.KeyPair, app, epoch, artifact string) []byte {
	t.Helper()
	s, err := star.DeriveSealing(star.LocalOmega(app, epoch, artifact), app, epoch, star.FTu, 5)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := star.NewUserSecret()
	r, err := s.Seal(&u, artifact, artifact)
	if err != nil {
		t.Fatal(err)
	}
	return wrap(t, key, r)
}

func controlMsg(t testing.TB, v any) Message {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return Message{Control: true, Value: b}
}

// TestAttackEpochFloodingAggregator (docs/threat-model.md, resource
// exhaustion): a client sends reports for 1,000 epoch names it made up, and
// floods the one open epoch with fresh artifacts beyond the pending cap,
// against the partition state the Service runs (Service.newPartition: only
// MaxPendingReports is lowered, to 1,000, to keep the test short). Before
// epochs had to be opened, every made-up epoch kept a pending group until
// someone closed that exact (app, epoch): 1,000 of 1,000.
func TestAttackEpochFloodingAggregator(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	const fresh, limit, flood = 1000, 1000, 1500
	s := &Service{Keys: []*onion.KeyPair{key}, MaxPendingReports: limit}
	p := s.newPartition(0, 1)
	var log []Message // what the topic holds, for the replay check
	apply := func(m Message) {
		log = append(log, m)
		p.Apply(m)
	}
	apply(controlMsg(t, protocol.EpochOpen{Op: protocol.ControlOpenEpoch, App: "query", Epoch: "2006-03", Partitions: 1}))

	// 1. reports for 1,000 epochs nobody opened
	for i := 0; i < fresh; i++ {
		apply(Message{Value: floodReport(t, key, "query", fmt.Sprintf("flood-%04d", i), "a")})
	}
	kept := map[string]bool{}
	for _, g := range p.Pending() {
		if strings.HasPrefix(g.Epoch, "flood-") {
			kept[g.Epoch] = true
		}
	}
	unknown := p.Stats.Dropped["unknown-epoch"]

	// 2. the open epoch, flooded with fresh artifacts beyond the cap
	for i := 0; i < flood; i++ {
		apply(Message{Value: floodReport(t, key, "query", "2006-03", fmt.Sprintf("junk-%05d", i))})
	}
	held := 0
	for _, g := range p.Pending() {
		if g.Epoch == "2006-03" {
			held += g.Reports
		}
	}
	full := p.Stats.Dropped["epoch-full"]
	fmt.Printf("ATTACK aggregator-epoch-flooding: %d of %d client-named epochs kept pending state (%d dropped as unknown-epoch); cap: %d of %d reports of an open epoch kept pending with MaxPendingReports %d (%d dropped as epoch-full)\n",
		len(kept), fresh, unknown, held, flood, limit, full)
	if len(kept) > 0 || unknown != fresh {
		t.Fatalf("%d of %d client-named epochs kept pending state; %d dropped as unknown-epoch", len(kept), fresh, unknown)
	}
	if held != limit || full != flood-limit {
		t.Fatalf("open epoch holds %d pending reports (cap %d), %d dropped as epoch-full, want %d", held, limit, full, flood-limit)
	}

	// restart by replay rebuilds the same state
	q := s.newPartition(0, 1)
	for _, m := range log {
		q.Apply(m)
	}
	if !reflect.DeepEqual(q.Pending(), p.Pending()) || !reflect.DeepEqual(q.Stats, p.Stats) {
		t.Fatalf("replay differs: %v vs %v", q.Stats, p.Stats)
	}
}

// TestEpochOpenBounds: opens beyond MaxOpenEpochs per app are refused (and
// a close frees a slot), a closed epoch does not reopen, reports of closed
// epochs stay "late", MaxPendingBytes caps like MaxPendingReports, and a
// group that recovered takes reports beyond the cap.
func TestEpochOpenBounds(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	s := &Service{Keys: []*onion.KeyPair{key}, MaxOpenEpochs: 2}
	p := s.newPartition(0, 1)
	open := func(app, epoch string) {
		p.Apply(controlMsg(t, protocol.EpochOpen{Op: protocol.ControlOpenEpoch, App: app, Epoch: epoch, Partitions: 1}))
	}
	closeE := func(app, epoch string) []protocol.Decrypted {
		return p.Apply(controlMsg(t, protocol.EpochClose{Op: protocol.ControlCloseEpoch, App: app, Epoch: epoch, Partitions: 1}))
	}
	open("query", "e1")
	open("query", "e1") // repeated: no-op
	open("query", "e2")
	open("query", "e3") // beyond 2
	open("other", "e3") // another app has its own bound
	if p.Stats.Dropped["open-refused"] != 1 || p.OpenEpochs("query") != 2 || p.OpenEpochs("other") != 1 {
		t.Fatalf("opens: %v, query %d open", p.Stats.Dropped, p.OpenEpochs("query"))
	}
	p.Apply(Message{Value: floodReport(t, key, "query", "e3", "a")})
	if p.Stats.Dropped["unknown-epoch"] != 1 {
		t.Fatalf("report of a refused epoch: %v", p.Stats.Dropped)
	}
	if out := closeE("query", "e1"); len(out) == 0 || out[len(out)-1].Kind != protocol.KindClosed {
		t.Fatalf("close: %+v", out)
	}
	open("query", "e1") // closed: never reopens
	open("query", "e3") // the close freed a slot
	if p.Stats.Dropped["open-after-close"] != 1 || p.OpenEpochs("query") != 2 {
		t.Fatalf("after close: %v, query %d open", p.Stats.Dropped, p.OpenEpochs("query"))
	}
	p.Apply(Message{Value: floodReport(t, key, "query", "e1", "a")})
	if p.Stats.Dropped["late"] != 1 {
		t.Fatalf("report of a closed epoch: %v", p.Stats.Dropped)
	}

	// bytes: room for two k = 2 reports of one group, then a third group's
	// report is dropped; the group recovers at its second share, and frees
	// its bytes
	s2 := &Service{Keys: []*onion.KeyPair{key}}
	q := s2.newPartition(0, 1)
	q.Apply(controlMsg(t, protocol.EpochOpen{Op: protocol.ControlOpenEpoch, App: "query", Epoch: "e1", Partitions: 1}))
	x := sealing(t, "x", star.FTu, 2)
	y := sealing(t, "y", star.FTu, 2)
	seal := func(s star.Sealing, art string) *star.Report {
		u, _ := star.NewUserSecret()
		r, err := s.Seal(&u, art, art)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r1, r2, ry := seal(x, "x"), seal(x, "x"), seal(y, "y")
	q.MaxPendingBytes = reportBytes(r1) + reportBytes(ry)
	q.ApplyReport(r1)
	q.ApplyReport(ry)
	if out := q.ApplyReport(r2); len(out) != 0 || q.Stats.Dropped["epoch-full"] != 1 {
		t.Fatalf("beyond the byte cap: %d emitted, %v", len(out), q.Stats.Dropped)
	}
	q.MaxPendingBytes = reportBytes(r1) + reportBytes(ry) + reportBytes(r2)
	if out := q.ApplyReport(r2); len(out) != 2 {
		t.Fatalf("recovery at k: %d emitted, %v", len(out), q.Stats.Dropped)
	}
	q.MaxPendingReports = 1                                // y's report is held: full for new groups ...
	if out := q.ApplyReport(seal(x, "x")); len(out) != 1 { // ... not for a recovered group
		t.Fatalf("report of a recovered group at the cap: %d emitted, %v", len(out), q.Stats.Dropped)
	}
	q.ApplyReport(seal(sealing(t, "z", star.FTu, 2), "z"))
	if q.Stats.Dropped["epoch-full"] != 2 {
		t.Fatalf("new group at the cap: %v", q.Stats.Dropped)
	}
}
