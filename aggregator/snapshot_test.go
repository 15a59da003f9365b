package aggregator

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// bundledMessages is bundledLayers(users) between an open and a close of
// epoch e1, with the first 2,000 redelivered before the close.
func bundledMessages(t testing.TB, key *onion.KeyPair, users int) []Message {
	msgs := []Message{ctl(t, protocol.ControlOpenEpoch, "query", "e1")}
	for _, l := range bundledLayers(t, key, users) {
		msgs = append(msgs, Message{Value: l})
	}
	// redelivered reports (duplicates), of groups that opened and of
	// groups that did not
	msgs = append(msgs, msgs[1:min(len(msgs), 2001)]...)
	return append(msgs, ctl(t, protocol.ControlCloseEpoch, "query", "e1"))
}

// writeSnapshot writes p's state to store as of offset (as Service does
// after a commit) and returns the state unsealed.
func writeSnapshot(t testing.TB, store *snapStore, p *Partition, offset int64) []byte {
	t.Helper()
	state, segs, err := p.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	plain := bytes.Clone(state) // write seals state in place
	if err := store.write(p.ID, p.Count, offset, state, segs, false); err != nil {
		t.Fatal(err)
	}
	return plain
}

// runWithSnapshots applies msgs to a partition made by mk whose snapshot
// store is store; at each cut it writes a snapshot (as Service does after
// a commit), drops the partition, restores the newest snapshot at or
// below the cut into a new one and goes on there. It returns what the
// whole run emitted, in order, and the last partition.
func runWithSnapshots(t *testing.T, mk func() *Partition, store *snapStore, msgs []Message, cuts []int) ([][]protocol.Decrypted, *Partition) {
	t.Helper()
	p := mk()
	var emits [][]protocol.Decrypted
	next := 0
	for i, m := range msgs {
		for next < len(cuts) && i == cuts[next] {
			next++
			writeSnapshot(t, store, p, int64(i))
			p.Close()
			var at int64
			p, at = store.restore(0, 1, int64(i), mk, func(o int64, err error) { t.Fatalf("snapshot at %d: %v", o, err) })
			if p == nil || at != int64(i) {
				t.Fatalf("cut %d: restored %v at %d", i, p != nil, at)
			}
		}
		emits = append(emits, p.Apply(m))
	}
	if p.Err() != nil {
		t.Fatal(p.Err())
	}
	return emits, p
}

// TestSnapshotRestoreExact: a partition snapshotted, dropped and restored
// at several points of a message sequence, going on from each restore,
// emits exactly what one uninterrupted partition emits (the JSON of every
// output, in order) and ends with the same counters and pending groups.
// Two sequences: the bundled log's query reports (groups that open with
// many reports, groups that never do, duplicates; the close's summary)
// and prepareFixture (report tokens spent, ARC presentations kept for
// pending groups, every drop reason) and junkScenario (unverified
// candidates, verification rounds that drop junk and re-share an x, the
// opening at the last message). The uninterrupted partition keeps
// its spill in memory; the restored ones in segment files, several per
// epoch after two restores.
func TestSnapshotRestoreExact(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole bundled log: the full suite (make test) runs it; -short (and so the race run) does not")
	}
	key, _ := onion.GenerateKeyPair(1)
	fix := newPrepareFixture(t)
	junk := newJunkScenario(t)
	for _, tc := range []struct {
		name   string
		msgs   []Message
		mk     func() *Partition
		closes bool // the last message closes the only epoch with pending reports
		opens  bool // the last message opens the only group (nothing decrypted before)
	}{
		{"bundled log", bundledMessages(t, key, 120), func() *Partition {
			p := NewPartition(0, 1, []*onion.KeyPair{key})
			p.RequireOpen = true
			return p
		}, true, false},
		{"tokens and ARC", fix.msgs, fix.partition, false, false},
		// candidates verified at the threshold, dropped, re-shared, and
		// the group opening at the last message
		{"junk at the threshold", append(junk.msgs, junk.last), junk.partition, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.msgs)
			want, wantP := runWithSnapshots(t, tc.mk, nil, tc.msgs[:n-1], nil)
			store, err := newSnapStore(t.TempDir(), tc.mk().Keys[0])
			if err != nil {
				t.Fatal(err)
			}
			mk := func() *Partition { p := tc.mk(); p.snap = store; return p }
			cuts := []int{1, n / 3, n / 3, 2 * n / 3, n - 2}
			got, gotP := runWithSnapshots(t, mk, store, tc.msgs[:n-1], cuts)
			w, g := resultOf(t, wantP, want), resultOf(t, gotP, got)
			if !bytes.Equal(w.emits, g.emits) {
				t.Fatalf("emits differ after restores:\n got %d bytes\nwant %d bytes", len(g.emits), len(w.emits))
			}
			if !reflect.DeepEqual(w.stats, g.stats) || !reflect.DeepEqual(w.pending, g.pending) {
				t.Fatalf("state differs after restores:\n got %+v, %d pending\nwant %+v, %d pending", g.stats, len(g.pending), w.stats, len(w.pending))
			}
			if len(g.pending) == 0 || g.stats.Decrypted == 0 && !tc.opens {
				t.Fatalf("the sequence left nothing pending or decrypted nothing: %+v", g.stats)
			}
			last := tc.msgs[n-1]
			w2, g2 := wantP.Apply(last), gotP.Apply(last)
			if !reflect.DeepEqual(w2, g2) {
				t.Fatalf("the last message emits differ:\n got %+v\nwant %+v", g2, w2)
			}
			if tc.opens && len(g2) == 0 {
				t.Fatal("the last message opened nothing")
			}
			ents, _ := os.ReadDir(store.dir(0))
			var snaps, segs int
			for _, e := range ents {
				switch filepath.Ext(e.Name()) {
				case ".snap":
					snaps++
				case ".seg":
					segs++
				}
			}
			t.Logf("%d messages, %d pending groups, %d decrypted; %d snapshots kept, %d segments after the close", n, len(g.pending), g.stats.Decrypted, snaps, segs)
			if snaps != snapKeep {
				t.Fatalf("%d snapshots kept, want %d", snaps, snapKeep)
			}
			if tc.closes && segs != 0 {
				t.Fatalf("%d spill segments left after the epoch's close; its pending shares must be deleted", segs)
			}
			gotP.Close()
			wantP.Close()
		})
	}
}

// TestSnapshotFallback: a snapshot changed on disk does not restore (its
// AEAD fails) and the restore falls back to the older one; a snapshot of
// another onion key or partition count is skipped; a spill segment
// changed on disk fails the read of its records (Partition.Err), so the
// Service replays.
func TestSnapshotFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole bundled log: the full suite (make test) runs it; -short (and so the race run) does not")
	}
	key, _ := onion.GenerateKeyPair(1)
	msgs := bundledMessages(t, key, 40)
	store, err := newSnapStore(t.TempDir(), key)
	if err != nil {
		t.Fatal(err)
	}
	mk := func() *Partition {
		p := NewPartition(0, 1, []*onion.KeyPair{key})
		p.RequireOpen, p.snap = true, store
		return p
	}
	p := mk()
	for i, m := range msgs[:len(msgs)-1] {
		if i == 100 || i == 200 {
			writeSnapshot(t, store, p, int64(i))
		}
		p.Apply(m)
	}
	defer p.Close()
	var skipped []string
	skip := func(o int64, err error) { skipped = append(skipped, fmt.Sprintf("%d: %v", o, err)) }
	newest := store.path(0, 200)
	b, _ := os.ReadFile(newest)
	b[len(b)-100] ^= 1
	os.WriteFile(newest, b, 0o600)
	r, at := store.restore(0, 1, 1000, mk, skip)
	if r == nil || at != 100 || len(skipped) != 1 || !strings.Contains(skipped[0], "does not authenticate") {
		t.Fatalf("a changed newest snapshot: restored %v at %d, skipped %v; want the older one at 100", r != nil, at, skipped)
	}
	r.Close()
	if r, _ := store.restore(0, 2, 1000, mk, skip); r != nil || !strings.Contains(skipped[len(skipped)-1], "partitions") {
		t.Fatalf("a snapshot of another partition count restored (skipped %v)", skipped)
	}
	other, _ := onion.GenerateKeyPair(1)
	ostore, _ := newSnapStore(store.root, other)
	if r, _ := ostore.restore(0, 1, 1000, mk, skip); r != nil || !strings.Contains(skipped[len(skipped)-1], "another onion key") {
		t.Fatalf("a snapshot of another onion key restored (skipped %v)", skipped)
	}
	// a changed segment record: the restored partition fails at the read
	r, _ = store.restore(0, 1, 100, mk, skip)
	defer r.Close()
	segs, _ := filepath.Glob(filepath.Join(store.dir(0), "*.seg"))
	for _, s := range segs {
		f, _ := os.OpenFile(s, os.O_RDWR, 0)
		for off := int64(10); off < 1<<20; off += 50 {
			f.WriteAt([]byte{0xff}, off)
		}
		f.Close()
	}
	r.Pending()
	if r.Err() == nil || !strings.Contains(r.Err().Error(), "does not authenticate") {
		t.Fatalf("records of a changed segment read back: err %v", r.Err())
	}
}

// TestAttackSnapshotTheft mounts the disk thief of docs/threat-model.md
// against the snapshot directory: a copy of it (a backup, a disk image, a
// stolen volume) holds a partition's state and its pending reports'
// spill. The thief knows the formats (encodeState, encodeSpill) and looks
// for what they would give away: the tags of pending groups (per-artifact
// report counts) and of recovered ones (which artifacts opened). Control:
// the same state and records unsealed. The attack succeeds when the copy
// shows any tag.
func TestAttackSnapshotTheft(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	store, err := newSnapStore(t.TempDir(), key)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	p.snap = store
	var tags [][32]byte
	var plain bytes.Buffer // the control: the spill records unsealed
	for a := 0; a < 200; a++ {
		art := fmt.Sprintf("snapshot artifact %d", a)
		s := sealing(t, art, star.FTu, 3)
		users := 1 + a%4 // a%4 == 2, 3: the group opens
		for u := 0; u < users; u++ {
			sec, _ := star.NewUserSecret()
			r, err := s.Seal(&sec, art, art)
			if err != nil {
				t.Fatal(err)
			}
			p.Apply(Message{Value: wrap(t, key, r)})
			if users < 3 {
				plain.Write(encodeSpill(r, u == 0, false))
			}
			if u == 0 {
				tags = append(tags, r.Tag)
			}
		}
	}
	plain.Write(writeSnapshot(t, store, p, 1000))
	var image []byte
	filepath.Walk(store.root, func(path string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(path)
			image = append(image, b...)
		}
		return nil
	})
	got, control := countTags(image, tags), countTags(plain.Bytes(), tags)
	fmt.Printf("ATTACK snapshot-theft: a copy of the snapshot directory (%d B: %d pending and %d recovered groups) shows %d of %d tags (%.3f bits/byte); unsealed it would show %d of %d\n",
		len(image), p.PendingTags(), p.Stats.Recoveries, got, len(tags), byteEntropy(image), control, len(tags))
	p.Close()
	if control != len(tags) {
		t.Fatalf("control: the unsealed state and records show %d of %d tags; the thief's search is broken", control, len(tags))
	}
	if got != 0 {
		t.Fatalf("the copy of the snapshot directory shows %d tags", got)
	}
}

// FuzzDecodeState: partition state bytes (what a snapshot holds after its
// AEAD check) never crash or hang the decoder, and state that decodes
// encodes again to state that decodes to the same counters and pending
// groups.
func FuzzDecodeState(f *testing.F) {
	key, _ := onion.GenerateKeyPair(1)
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	for a := 0; a < 30; a++ {
		art := fmt.Sprintf("fuzz artifact %d", a)
		s := sealing(f, art, star.FTu, 2)
		for u := 0; u < 1+a%3; u++ {
			sec, _ := star.NewUserSecret()
			r, _ := s.Seal(&sec, art, "")
			p.Apply(Message{Value: wrap(f, key, r)})
		}
	}
	seed, _, err := p.encodeState()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		q := NewPartition(0, 1, []*onion.KeyPair{key})
		if err := q.decodeState(b, nil); err != nil {
			return
		}
		defer q.Close()
		again, _, err := q.encodeState()
		if err != nil {
			t.Fatal(err)
		}
		r := NewPartition(0, 1, []*onion.KeyPair{key})
		if err := r.decodeState(again, nil); err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		defer r.Close()
		if !reflect.DeepEqual(q.Stats, r.Stats) || q.PendingTags() != r.PendingTags() {
			t.Fatalf("re-encoded state differs: %+v %d, %+v %d", q.Stats, q.PendingTags(), r.Stats, r.PendingTags())
		}
	})
}

// TestServiceRestoresSnapshot runs the Service with snapshots over kfake:
// 60 artifacts (FT_a, k = 3) of 1 to 5 users each on 2 partitions. A first
// service consumes every report (snapshots every 10 messages) and stops;
// a second one, in a new process state, restores both partitions from
// their snapshots (no replay from the first offset; at most the messages
// after the snapshot) and closes the epoch. Ground truth from the sealed
// reports: the decrypted items are exactly the reports of the artifacts
// with ≥ 3 users, and the close's summaries count exactly the others'
// groups and reports.
func TestServiceRestoresSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions, k = 2, 3
	kb, brokers := startBroker(ctx, t, t.TempDir(), partitions)
	onionKey, _ := onion.GenerateKeyPair(1)
	if err := OpenEpoch(ctx, brokers, nil, "query", "e1"); err != nil {
		t.Fatal(err)
	}
	good := map[string]bool{}
	var pendingGroups, pendingReports uint64
	var msgs []kafkago.Message
	for a := range 60 {
		art := fmt.Sprintf("snapshot artifact %d", a)
		s := sealing(t, art, star.FTa, k)
		users := 1 + a%5
		for range users {
			u, _ := star.NewUserSecret()
			r, err := s.Seal(&u, art, "")
			if err != nil {
				t.Fatal(err)
			}
			if users >= k {
				good[hex.EncodeToString(r.ID[:])] = true
			}
			msgs = append(msgs, kafkago.Message{Key: onion.TagBucket(r.Tag), Value: wrap(t, onionKey, r)})
		}
		if users < k {
			pendingGroups++
			pendingReports += uint64(users)
		}
	}
	w := infrakafka.NewWriter(kb.Addr, protocol.ReportsTopic)
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	snapDir := t.TempDir()
	newService := func() (*Service, logRecorder) {
		rec := logRecorder{mu: &sync.Mutex{}, recs: &[]loggedEvent{}}
		return &Service{Brokers: brokers, Keys: []*onion.KeyPair{onionKey}, Logger: slog.New(rec), GroupID: "snap",
			MaxBatch: 10, MaxWait: 20 * time.Millisecond, SessionTimeout: 6 * time.Second,
			SnapshotDir: snapDir, SnapshotEvery: 10}, rec
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 90 s: %s", what)
			}
		}
	}
	a, _ := newService()
	actx, stopA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() { aDone <- a.Run(actx) }()
	waitFor("a accepts every report and writes snapshots", func() bool {
		return a.Reports.Load() == int64(len(msgs)) && a.Snapshots.Load() >= 4
	})
	stopA()
	<-aDone
	// a segment nobody lists, as a member that died while writing it
	// leaves: the member that takes the partition removes it when it
	// starts there, not only at its next snapshot
	stale := filepath.Join(snapDir, "p0000", segName([16]byte{0xde, 0xad}))
	if err := os.WriteFile(stale, make([]byte, 100), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * segGrace)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}

	b, bLog := newService()
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	go func() { _ = b.Run(bctx) }()
	waitFor("b restores both partitions", func() bool { return b.Restores.Load() == partitions })
	// the collector runs as the partition starts, beside the restore
	// counter's update: wait for it (bounded) rather than race it
	waitFor(fmt.Sprintf("an unlisted segment older than %v removed after the partition moved", segGrace), func() bool {
		_, err := os.Stat(stale)
		return errors.Is(err, fs.ErrNotExist)
	})
	if err := CloseEpoch(ctx, brokers, nil, "query", "e1"); err != nil {
		t.Fatal(err)
	}
	tail := infrakafka.ReadTopic(ctx, brokers, protocol.DecryptedTopic, "test", slog.New(slog.DiscardHandler))
	defer tail.Stop()
	items, summaries := readUntilClosed(t, tail, partitions)
	var groups, reports uint64
	for _, d := range summaries {
		for _, r := range d.Summary {
			groups += r.Tags
			reports += r.Tags * r.Reports
		}
	}
	if !reflect.DeepEqual(items, good) {
		t.Errorf("%d distinct items; want the %d reports of artifacts with ≥ %d users", len(items), len(good), k)
	}
	if groups != pendingGroups || reports != pendingReports {
		t.Errorf("summaries count %d groups of %d reports; want %d of %d", groups, reports, pendingGroups, pendingReports)
	}
	// the close deleted the epoch's pending state on disk: one snapshot per
	// partition, written after it, and no spill segment
	files := func() (snaps, segs int) {
		for p := range partitions {
			ents, _ := os.ReadDir(filepath.Join(snapDir, fmt.Sprintf("p%04d", p)))
			for _, e := range ents {
				switch filepath.Ext(e.Name()) {
				case ".snap":
					snaps++
				case ".seg":
					segs++
				}
			}
		}
		return
	}
	waitFor("one snapshot per partition and no spill segment after the close", func() bool {
		snaps, segs := files()
		return snaps == partitions && segs == 0
	})
	t.Logf("a wrote %d snapshots; b restored %d partitions, replayed the tails of %v", a.Snapshots.Load(), b.Restores.Load(), bLog.events("aggregator: rebuilding partition state by replay"))
}

// BenchmarkBoundPartitionMove measures what a partition move costs with
// snapshots when the partition holds CROWDLOG_BOUND_MOVE pending reports
// (default 1,000,000; synthetic, as BenchmarkBoundPendingBytes, in one
// open epoch): the new owner restores the newest snapshot (read, AEAD
// open, decode, index rebuild) and then replays the messages after it, at
// most the Service's interval at that size (CROWDLOG_BOUND_MOVE_TAIL,
// default max(SnapshotEvery 20,000, pending/SnapshotPerPending): 40,000
// at a million; onion-wrapped reports of new artifacts, prepared on the
// pool and applied as the Service does). move-s = restore-s + tail-s, the
// bound is 3 s. snapshot-s is what the old owner spent
// writing the snapshot (encode in its loop, encode-s; the rest in the
// background); snapshot-cpu-% is that snapshot's CPU time against the
// CPU time of applying the tail, the messages between two snapshots: what
// snapshots add to the service's CPU at this state size. Kafka's fetch of
// the tail and the group's rebalance are not included
// (TestScaleAggregators measures whole moves).
func BenchmarkBoundPartitionMove(b *testing.B) {
	n := envInt("CROWDLOG_BOUND_MOVE", 1_000_000)
	// the Service's interval at this size (snapshotDue)
	tailN := envInt("CROWDLOG_BOUND_MOVE_TAIL", max(20_000, n/SnapshotPerPending))
	key, _ := onion.GenerateKeyPair(1)
	if err := onion.PrepareKeys([]*onion.KeyPair{key}); err != nil {
		b.Fatal(err)
	}
	sec, _ := star.NewUserSecret()
	ms := sealing(b, "any", star.FTu, 5)
	model, err := ms.Seal(&sec, "any", "")
	if err != nil {
		b.Fatal(err)
	}
	model.Epoch = "e1"
	// the tail: new artifacts' reports, 1 to 8 users each
	var tail []Message
	for a := 0; len(tail) < tailN; a++ {
		art := fmt.Sprintf("tail artifact %d", a)
		s, err := star.DeriveSealing(star.LocalOmega("query", "e1", art), "query", "e1", star.FTu, 5)
		if err != nil {
			b.Fatal(err)
		}
		for u := 0; u < 1+a%8 && len(tail) < tailN; u++ {
			us, _ := star.NewUserSecret()
			r, err := s.Seal(&us, art, "")
			if err != nil {
				b.Fatal(err)
			}
			tail = append(tail, Message{Value: wrap(b, key, r)})
		}
	}
	for b.Loop() {
		store, err := newSnapStore(b.TempDir(), key)
		if err != nil {
			b.Fatal(err)
		}
		mk := func() *Partition {
			p := NewPartition(0, 1, []*onion.KeyPair{key})
			p.RequireOpen, p.snap = true, store
			p.MaxPendingReports, p.MaxPendingBytes = int64(n+tailN)+1, 1<<50
			return p
		}
		p := mk()
		p.Apply(ctl(b, protocol.ControlOpenEpoch, "query", "e1"))
		model.App = "query"
		applyPending(b, p, model, n)
		if p.PendingTags() != n || p.Err() != nil {
			b.Fatalf("%d pending groups (want %d), err %v, dropped %v", p.PendingTags(), n, p.Err(), p.Stats.Dropped)
		}
		start, cpu0 := time.Now(), processCPU(b)
		state, segs, err := p.encodeState()
		if err != nil {
			b.Fatal(err)
		}
		encoded := time.Since(start)
		if err := store.write(0, 1, int64(n+1), state, segs, false); err != nil {
			b.Fatal(err)
		}
		snapshotted, snapCPU := time.Since(start), processCPU(b)-cpu0
		p.Close()
		runtime.GC()

		start = time.Now()
		q, at := store.restore(0, 1, int64(n+1), mk, func(o int64, err error) { b.Fatalf("snapshot at %d: %v", o, err) })
		if q == nil || at != int64(n+1) {
			b.Fatal("the snapshot did not restore")
		}
		restored, cpu1 := time.Since(start), processCPU(b)
		for i := 0; i < len(tail); i += 2000 {
			batch := tail[i:min(len(tail), i+2000)]
			prepared := q.PrepareBatch(batch)
			for j := range prepared {
				q.ApplyPrepared(&prepared[j])
			}
		}
		moved, tailCPU := time.Since(start), processCPU(b)-cpu1
		if q.Err() != nil || q.Stats.Reports != int64(n+tailN) {
			b.Fatalf("after the move: %d reports (want %d), err %v, dropped %v", q.Stats.Reports, n+tailN, q.Err(), q.Stats.Dropped)
		}
		q.Close()
		b.ReportMetric(float64(n), "pending")
		b.ReportMetric(float64(len(state))/float64(n), "state-B/report")
		b.ReportMetric(encoded.Seconds(), "encode-s")
		b.ReportMetric(snapshotted.Seconds(), "snapshot-s")
		// a snapshot's CPU (encode, seal, write; not the fsync's wait)
		// against the CPU of applying the SnapshotEvery messages between
		// two snapshots: the overhead snapshots add at this state size
		b.ReportMetric(float64(snapCPU)/1e9, "snapshot-cpu-s")
		b.ReportMetric(100*float64(snapCPU)/float64(tailCPU), "snapshot-cpu-%")
		b.ReportMetric(restored.Seconds(), "restore-s")
		b.ReportMetric((moved - restored).Seconds(), "tail-s")
		b.ReportMetric(moved.Seconds(), "move-s")
	}
}

// FuzzSnapshotHeader: a snapshot file's header (read before the AEAD
// check, from a directory other processes write) never crashes the
// parser, and a header that parses encodes back to its bytes.
func FuzzSnapshotHeader(f *testing.F) {
	h := snapHeader{partition: 3, count: 8, offset: 12345, segments: [][16]byte{{1}, {2}}}
	hb := h.encode()
	f.Add(append(append([]byte(snapMagic), byte(len(hb)), 0, 0, 0), append(hb, "sealed state"...)...))
	f.Add([]byte(snapMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, hb, _, err := readSnapHeader(b)
		if err != nil {
			return
		}
		if !bytes.Equal(h.encode(), hb) {
			t.Fatalf("header %x parses to one that encodes as %x", hb, h.encode())
		}
	})
}

// TestSnapshotDue: the interval is SnapshotEvery messages until the
// partition holds more than SnapshotPerPending·SnapshotEvery pending
// reports, then pending/SnapshotPerPending.
func TestSnapshotDue(t *testing.T) {
	for _, c := range []struct {
		applied, every int
		pending        int64
		due            bool
	}{
		{19_999, 20_000, 0, false},
		{20_000, 20_000, 0, true},
		{20_000, 20_000, 500_000, true},
		{20_000, 20_000, 1_000_000, false},
		{39_999, 20_000, 1_000_000, false},
		{40_000, 20_000, 1_000_000, true},
		{500, 500, 100_000, false},
		{4_000, 500, 100_000, true},
	} {
		if got := snapshotDue(c.applied, c.every, c.pending); got != c.due {
			t.Errorf("snapshotDue(applied %d, every %d, pending %d) = %v, want %v", c.applied, c.every, c.pending, got, c.due)
		}
	}
}
