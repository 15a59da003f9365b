package aggregator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// pipelineMsgs: one artifact sealed for two pipeline digests (FT_u, k =
// 3), 2 users each, then a third user of each; spill in memory.
func pipelineMsgs(t *testing.T, key *onion.KeyPair, d1, d2 [32]byte) []Message {
	msgs := []Message{ctl(t, protocol.ControlOpenEpoch, "query", "e1")}
	seal := func(d [32]byte) star.Sealing {
		s, err := star.DeriveSealingIn(star.LocalOmega("query", "e1", "made up"), star.Context{App: "query", Epoch: "e1", Policy: star.FTu, K: 3, Pipeline: d})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1, s2 := seal(d1), seal(d2)
	for round := range 2 {
		n := 2
		if round == 1 {
			n = 1
		}
		for _, s := range []star.Sealing{s1, s2} {
			for range n {
				u, _ := star.NewUserSecret()
				r, err := s.Seal(&u, "made up", "Made up")
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, Message{Value: wrap(t, key, r)})
			}
		}
	}
	return append(msgs, ctl(t, protocol.ControlCloseEpoch, "query", "e1"))
}

// TestPipelineDigestGroups: reports of one artifact sealed for two
// pipeline definitions never combine (2 + 2 users open nothing at k = 3),
// each opens at its own third user with items carrying its digest, and a
// partition snapshotted and restored while both are pending (stateVersion
// 3: the digests of pending groups) emits exactly the same.
func TestPipelineDigestGroups(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	d1, d2 := sha256.Sum256([]byte("one")), sha256.Sum256([]byte("two"))
	msgs := pipelineMsgs(t, key, d1, d2)
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	var want [][]protocol.Decrypted
	items := map[string]int{}
	for i, m := range msgs {
		out := p.Apply(m)
		want = append(want, out)
		for _, d := range out {
			if d.Kind == protocol.KindItem {
				if i < 5 {
					t.Fatalf("message %d opened a group: shares of two definitions combined", i)
				}
				items[d.Pipeline]++
			}
		}
	}
	if items[hex.EncodeToString(d1[:])] != 3 || items[hex.EncodeToString(d2[:])] != 3 || len(items) != 2 {
		t.Fatalf("items by pipeline digest: %v, want 3 of each", items)
	}
	store, err := newSnapStore(t.TempDir(), key)
	if err != nil {
		t.Fatal(err)
	}
	mk := func() *Partition {
		q := NewPartition(0, 1, []*onion.KeyPair{key})
		q.snap = store
		return q
	}
	got, _ := runWithSnapshots(t, mk, store, msgs, []int{3, 5})
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got)
	if !bytes.Equal(wj, gj) {
		t.Fatalf("restored partition emitted\n%s\nuninterrupted\n%s", gj, wj)
	}
}

// TestPipelineMismatch: an aggregator that serves one definition drops
// the other's reports as pipeline-mismatch (nothing of them is held), and
// the service logs the refused digest once, naming both digests.
func TestPipelineMismatch(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	d1, d2 := sha256.Sum256([]byte("one")), sha256.Sum256([]byte("two"))
	var logs bytes.Buffer
	s := &Service{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Pipelines: map[[32]byte]bool{d1: true}}
	p := NewPartition(0, 1, []*onion.KeyPair{key})
	p.Pipelines, p.OnPipelineMismatch = s.Pipelines, s.pipelineMismatch
	items := 0
	for _, m := range pipelineMsgs(t, key, d1, d2) {
		for _, d := range p.Apply(m) {
			if d.Kind == protocol.KindItem {
				items++
				if d.Pipeline != hex.EncodeToString(d1[:]) {
					t.Fatalf("an item of digest %s", d.Pipeline)
				}
			}
		}
	}
	if items != 3 || p.Stats.Dropped["pipeline-mismatch"] != 3 {
		t.Fatalf("%d items, %d dropped pipeline-mismatch; want 3 and 3", items, p.Stats.Dropped["pipeline-mismatch"])
	}
	l := logs.String()
	if strings.Count(l, "pipeline-mismatch") != 1 || !strings.Contains(l, hex.EncodeToString(d1[:])) || !strings.Contains(l, hex.EncodeToString(d2[:])) {
		t.Fatalf("log does not name both digests once:\n%s", l)
	}
}
