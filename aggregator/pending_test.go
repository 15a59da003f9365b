package aggregator

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"reflect"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// TestGroupIndex checks the open-addressing index against a Go map over
// random inserts, finds and removes (backward-shift deletion must keep
// every remaining entry findable), with ids clustered on few home slots
// so probe runs are long.
func TestGroupIndex(t *testing.T) {
	p := NewPartition(0, 1, nil)
	ref := map[groupID]int32{}
	rng := mrand.New(mrand.NewPCG(1, 2))
	var ids []groupID
	for i := 0; i < 5000; i++ {
		var g groupID
		home := rng.Uint64() & 0x7ff // 2048 homes at most: long runs
		for j := 0; j < 8; j++ {
			g[j] = byte(home >> (8 * j))
		}
		g[8], g[9], g[10] = byte(i), byte(i>>8), byte(i>>16)
		ids = append(ids, g)
	}
	for step := 0; step < 40000; step++ {
		g := ids[rng.IntN(len(ids))]
		gi, ok := p.pend.find(p, &g)
		want, wok := ref[g]
		if ok != wok || ok && gi != want {
			t.Fatalf("step %d: find = %d, %v; want %d, %v", step, gi, ok, want, wok)
		}
		if ok && rng.IntN(2) == 0 {
			p.releaseGroup(gi, g)
			delete(ref, g)
		} else if !ok {
			ref[g] = p.newGroup(pendingGroup{gid: g, head: -1, tail: -1})
		}
		if p.pend.n != len(ref) {
			t.Fatalf("step %d: %d entries, want %d", step, p.pend.n, len(ref))
		}
	}
	for g, want := range ref {
		if gi, ok := p.pend.find(p, &g); !ok || gi != want {
			t.Fatalf("lost %x: %d %v, want %d", g[:4], gi, ok, want)
		}
	}
}

// spillScenario applies a mix of artifacts to p: some reach k (with FT_u
// repeats and a redelivered report), some stay below, one tampered
// repeat; then closes the epoch. It returns every output.
func spillScenario(t *testing.T, p *Partition, key *onion.KeyPair, seed uint64) []protocol.Decrypted {
	t.Helper()
	rng := mrand.New(mrand.NewPCG(seed, 7))
	const k = 3
	var out []protocol.Decrypted
	var msgs [][]byte
	for a := 0; a < 60; a++ {
		art := fmt.Sprintf("spill artifact %d", a)
		s := sealing(t, art, star.FTu, k)
		for u := 0; u < 1+a%5; u++ {
			sec, _ := star.NewUserSecret()
			for rep := 0; rep < 1+rng.IntN(20); rep++ { // up to 20 impressions: groups past idSetFew
				r, err := s.Seal(&sec, art, art)
				if err != nil {
					t.Fatal(err)
				}
				if a == 7 && u == 0 && rep == 1 {
					// a tampered repeat: same x, another y
					r.Share.Y = protocol.G.RandomScalar(rand.Reader)
				}
				msgs = append(msgs, wrap(t, key, r))
			}
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	msgs = append(msgs, msgs[3], msgs[40]) // redelivered
	for _, m := range msgs {
		out = append(out, p.Apply(Message{Value: m})...)
	}
	out = append(out, p.Apply(Message{Control: true, Value: []byte(`{"op":"close-epoch","app":"query","epoch":"e1","partitions":1}`)})...)
	return out
}

// TestSpillDirSameResult: a partition with its spill in files gives
// exactly the outputs and counters of one with its spill in memory, and
// leaves no file in the directory (unlinked at creation).
func TestSpillDirSameResult(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	mem := NewPartition(0, 1, []*onion.KeyPair{key})
	dir := t.TempDir()
	file := NewPartition(0, 1, []*onion.KeyPair{key})
	file.SpillDir = dir
	want := spillScenario(t, mem, key, 1)
	got := spillScenario(t, file, key, 1)
	// the shuffles are the same but the sealings are fresh: compare what
	// does not depend on the randomness of a seal
	norm := func(ds []protocol.Decrypted) []string {
		var s []string
		for _, d := range ds {
			s = append(s, fmt.Sprintf("%s %s %d %v", d.Kind, d.Item, len(d.Summary), d.Summary))
		}
		return s
	}
	if !reflect.DeepEqual(norm(got), norm(want)) {
		t.Fatalf("file spill outputs differ from memory spill:\n%v\n%v", norm(got), norm(want))
	}
	if !reflect.DeepEqual(file.Stats, mem.Stats) {
		t.Fatalf("stats: file %+v, memory %+v", file.Stats, mem.Stats)
	}
	if mem.Stats.Decrypted == 0 || mem.Stats.Dropped["bad-share"] == 0 || mem.Stats.Dropped["duplicate"] != 2 {
		t.Fatalf("scenario did not exercise recovery, a tampered repeat and duplicates: %+v", mem.Stats)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("spill files left in the directory: %v", ents)
	}
	if file.Err() != nil {
		t.Fatal(file.Err())
	}
}

// TestSpillTampered: a spill record changed on disk fails the read
// (ChaCha20-Poly1305) and becomes the partition's error, instead of
// entering a recovery.
func TestSpillTampered(t *testing.T) {
	s, err := newFileSpill(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	var refs []uint64
	for i := 0; i < 5000; i++ { // past the 1 MiB buffer: some records on disk
		ref, err := s.put(bytes.Repeat([]byte{byte(i)}, 300))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	for i, ref := range refs {
		b, err := s.get(ref)
		if err != nil || !bytes.Equal(b, bytes.Repeat([]byte{byte(i)}, 300)) {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if s.size == 0 {
		t.Fatal("nothing flushed to the file")
	}
	if _, err := s.f.WriteAt([]byte{0xff}, int64(refs[1])+10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.get(refs[1]); err == nil {
		t.Fatal("a changed record was read back")
	}
}

// TestAttackSpillFileTheft mounts the disk thief of docs/threat-model.md
// against the spill (pending.go): an image of the aggregator's disk taken
// while reports are pending holds its spill files. The thief knows the
// record layout (encodeSpill) and looks for what a plaintext spill would
// give away: each pending group's tag (so per-artifact report counts:
// attack.TestFrequencySummary's input) and share y values. Control: the
// same records as the code would write them without the sealing. The
// attack succeeds when the thief finds any tag of a pending group.
func TestAttackSpillFileTheft(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	p.SpillDir = t.TempDir()
	var tags [][32]byte
	var plain bytes.Buffer // the control: the records unsealed
	for a := 0; a < 200; a++ {
		art := fmt.Sprintf("pending artifact %d", a)
		s := sealing(t, art, star.FTu, 5)
		sec, _ := star.NewUserSecret()
		for rep := 0; rep < 1+a%3; rep++ {
			r, err := s.Seal(&sec, art, art)
			if err != nil {
				t.Fatal(err)
			}
			p.Apply(Message{Value: wrap(t, key, r)})
			plain.Write(encodeSpill(r, rep == 0, false))
			if rep == 0 {
				tags = append(tags, r.Tag)
			}
		}
	}
	if p.PendingTags() != 200 {
		t.Fatalf("%d pending groups, want 200", p.PendingTags())
	}
	// the disk image: every byte of the spill file (unlinked, so read
	// through the descriptor, as a block-level image would)
	var image []byte
	for _, e := range p.eps {
		fs := e.spill.(*fileSpill)
		if err := fs.flush(); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, fs.size)
		if _, err := fs.f.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		image = append(image, b...)
	}
	got, control := countTags(image, tags), countTags(plain.Bytes(), tags)
	entropy := byteEntropy(image)
	fmt.Printf("ATTACK spill-file-theft: the disk image of %d pending groups' spill (%d B) shows %d of %d tags (%.3f bits/byte); an unsealed spill would show %d of %d\n",
		len(tags), len(image), got, len(tags), entropy, control, len(tags))
	if control != len(tags) {
		t.Fatalf("control: the unsealed records show %d of %d tags; the thief's search is broken", control, len(tags))
	}
	if got != 0 {
		t.Fatalf("the disk image shows %d tags of pending groups", got)
	}
}

// countTags is the number of tags found in img, a thief's search.
func countTags(img []byte, tags [][32]byte) (n int) {
	for _, tag := range tags {
		if bytes.Contains(img, tag[:]) {
			n++
		}
	}
	return n
}

// byteEntropy is the Shannon entropy of b's byte histogram in bits per
// byte (8: indistinguishable from random by this measure).
func byteEntropy(b []byte) float64 {
	var h [256]float64
	for _, c := range b {
		h[c]++
	}
	e := 0.0
	for _, n := range h {
		if n > 0 {
			q := n / float64(len(b))
			e -= q * math.Log2(q)
		}
	}
	return e
}

// FuzzDecodeSpill: a spill record read back (after its AEAD check) never
// crashes the decoder, and a record that decodes re-encodes to itself.
func FuzzDecodeSpill(f *testing.F) {
	s := sealing(f, "fuzz spill", star.FTu, 3)
	sec, _ := star.NewUserSecret()
	r, err := s.Seal(&sec, "fuzz spill", "")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(encodeSpill(r, true, false))
	f.Add(encodeSpill(r, false, false))
	f.Add(encodeSpill(r, true, true))
	f.Add(encodeSpill(r, false, true))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		sp, err := decodeSpill(b)
		if err != nil {
			return
		}
		re := []byte{b[0]}
		if sp.head {
			re = append(re, sp.tag[:]...)
			re = append(re, byte(len(sp.commitment)>>8), byte(len(sp.commitment)))
			re = append(re, sp.commitment...)
		}
		if sp.checks {
			for _, f := range [][]byte{sp.token, sp.presentation} {
				re = append(re, byte(len(f)>>8), byte(len(f)))
				re = append(re, f...)
			}
		}
		re = append(append(re, sp.y...), sp.ct...)
		if !bytes.Equal(re, b) {
			t.Fatalf("record %x decodes to one that encodes as %x", b, re)
		}
	})
}

// TestServiceReleasesMovedPartitions: a rebalance that leaves a member
// without a partition it kept closes that partition's state (its pending
// reports and spill) and forgets its pending-tag count; the partitions it
// still owns keep theirs. Before, such a state stayed until the partition
// came back, and PendingTags went on counting it.
func TestServiceReleasesMovedPartitions(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	s := &Service{kept: map[int]keptState{}, pending: map[int]int{}}
	parts := make([]*Partition, 3)
	for id := range parts {
		p := NewPartition(id, 3, []*onion.KeyPair{key})
		p.SpillDir = t.TempDir()
		art := fmt.Sprintf("moved artifact %d", id)
		sec, _ := star.NewUserSecret()
		sl := sealing(t, art, star.FTa, 5)
		r, err := sl.Seal(&sec, art, art)
		if err != nil {
			t.Fatal(err)
		}
		p.Apply(Message{Value: wrap(t, key, r)})
		if p.PendingTags() != 1 {
			t.Fatalf("partition %d: %d pending tags, want 1", id, p.PendingTags())
		}
		parts[id] = p
		s.keep(id, p, 1)
		s.account(id, p, &totals{})
	}
	s.release([]int{1})
	if len(s.kept) != 1 || s.kept[1].st != parts[1] {
		t.Fatalf("kept after release: %v, want partition 1 only", s.kept)
	}
	if got := s.PendingTags(); got != 1 {
		t.Fatalf("PendingTags after release %d, want 1 (partition 1's)", got)
	}
	for id, p := range parts {
		open := 0
		for _, e := range p.eps {
			if e != nil && e.spill != nil {
				open++
			}
		}
		if want := map[bool]int{true: 1, false: 0}[id == 1]; open != want {
			t.Errorf("partition %d: %d open spills, want %d", id, open, want)
		}
	}
	s.release(nil) // an assignment of nothing frees everything
	if len(s.kept) != 0 || s.PendingTags() != 0 {
		t.Fatalf("after an empty assignment: kept %v, %d pending tags", s.kept, s.PendingTags())
	}
}
