package pdd

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/blind"
)

// A client blinds only for a roster that lists its own key at its index,
// with the group's threshold; anything else is refused before any seed is
// derived or anything is sent.
func TestClientChecksRoster(t *testing.T) {
	me, _ := blind.GenerateKey()
	other, _ := blind.GenerateKey()
	third, _ := blind.GenerateKey()
	c := &Client{Key: me, Campaign: "c"}
	members := [][]byte{other.PublicKey().Bytes(), me.PublicKey().Bytes(), third.PublicKey().Bytes()}
	ok := blind.Task{Round: 1, Group: 0, Member: 1, Members: members, T: blind.Threshold(3)}
	seeds, err := c.seeds(ok)
	if err != nil || len(seeds) != 3 {
		t.Fatalf("valid roster refused: %v", err)
	}
	// the seeds agree with the other members' (PDD eq. 3 needs s_ij = s_ji)
	s0, _ := blind.Seeds(other, 0, members, ok.Instance("c"))
	if s0[1] != seeds[0] {
		t.Fatal("pair seed differs between the two members")
	}
	bad := ok
	bad.Member = 0
	if _, err := c.seeds(bad); err == nil {
		t.Fatal("a roster naming another key at our index was accepted")
	}
	bad = ok
	bad.T = 1
	if _, err := c.seeds(bad); err == nil {
		t.Fatal("a threshold below the group's was accepted")
	}
}

// A real deposit of a group of 150 (≈ 1 MB, over NATS's default payload)
// splits into chunks whose signed JSON each stays within
// blind.MaxMessageBytes: the bundles in order, every one once, the roots
// only in the last chunk, chunk numbers 0..k−1 of k.
func TestDepositChunksFit(t *testing.T) {
	const n = 150
	in := blind.Instance{Campaign: "c", Round: 1, Group: 0}
	keys, pubs := groupKeys(n)
	c := &Client{ID: "0123456789abcdef0123456789abcdef", Key: keys[7], Campaign: "c"}
	_, c.SignKey, _ = ed25519.GenerateKey(rand.Reader)
	tk := blind.Task{Round: 1, Group: 0, Member: 7, Members: pubs, T: blind.Threshold(n)}
	seeds, err := c.seeds(tk)
	if err != nil {
		t.Fatal(err)
	}
	selfSeed, rnd, _ := blind.DealSecret(c.Secret[:], in)
	d, err := blind.Deal(in, 7, seeds, selfSeed, pubs, tk.T, rnd)
	if err != nil {
		t.Fatal(err)
	}
	roots := make([][]byte, n)
	for h := range roots {
		roots[h] = d.Commit.Roots[h][:]
	}
	whole := blind.DepositRequest{ClientID: c.ID, Seq: 1 << 62, Roots: roots, Campaign: "c", Round: 1, From: 7, Bundles: d.Bundles}
	if s, _ := blind.SignMessage(c.SignKey, blind.PurposeDeposit, whole); len(mustMarshal(t, s)) <= blind.MaxMessageBytes {
		t.Fatalf("a deposit of %d bytes needs no chunking: pick a larger group", len(mustMarshal(t, s)))
	}
	chunks, err := blind.SplitDeposit(whole, maxChunkBytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 2 {
		t.Fatalf("%d chunk(s)", len(chunks))
	}
	var got []blind.SealedBundle
	for k, ch := range chunks {
		ch.Seq = 1<<64 - 1 // the widest sequence number
		s, _ := blind.SignMessage(c.SignKey, blind.PurposeDeposit, ch)
		b := mustMarshal(t, s)
		if len(b) > blind.MaxMessageBytes {
			t.Fatalf("chunk %d: %d bytes of JSON > %d", k, len(b), blind.MaxMessageBytes)
		}
		p, _, err := blind.ParseDeposit(b)
		if err != nil {
			t.Fatalf("chunk %d: %v", k, err)
		}
		if p.Chunk != k || p.Chunks != len(chunks) || (len(p.Roots) > 0) != (k == len(chunks)-1) || p.Last() != (k == len(chunks)-1) {
			t.Fatalf("chunk %d: numbered %d of %d, %d roots", k, p.Chunk, p.Chunks, len(p.Roots))
		}
		got = append(got, p.Bundles...)
	}
	if !reflect.DeepEqual(got, d.Bundles) || !reflect.DeepEqual(chunks[len(chunks)-1].Roots, roots) {
		t.Fatal("the chunks' bundles or roots differ from the deposit's")
	}
	t.Logf("n=%d: %d bundles in %d chunks", n, len(got), len(chunks))
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An answer split into parts (here of 2 KiB, a few reveals each) recovers
// a group as the whole answers do: every part stays within the limit, the
// parts hold the answer's reveals in order, and the aggregator's Recovery,
// fed every survivor's parts, removes the masks from the survivors' sum.
func TestSplitAnswerRecovers(t *testing.T) {
	const n, L, dropped = 9, 16, 8
	in := blind.Instance{Campaign: "c", Round: 1, Group: 0}
	keys, pubs := groupKeys(n)
	T := blind.Threshold(n)
	sum, want := make([]uint64, L), make([]uint64, L)
	commits := map[uint16]*blind.Commitments{}
	sealed := make([][]blind.SealedBundle, n) // sealed[to]
	for i := 0; i < n; i++ {
		seeds, err := blind.Seeds(keys[i], i, pubs, in)
		if err != nil {
			t.Fatal(err)
		}
		var secret [32]byte
		rand.Read(secret[:])
		selfSeed, rnd, _ := blind.DealSecret(secret[:], in)
		d, err := blind.Deal(in, i, seeds, selfSeed, pubs, T, rnd)
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range d.Bundles {
			sealed[sb.To] = append(sealed[sb.To], sb)
		}
		if i == dropped {
			continue // dealt, never submitted
		}
		commits[uint16(i)] = &d.Commit
		v := make([]uint64, L)
		for k := range v {
			v[k] = uint64(i*100 + k)
		}
		blind.Sum(want, v)
		blind.Sum(sum, blind.Blind(v, i, seeds, selfSeed))
	}
	req := blind.Request{Instance: in, N: n, T: T, Dropped: []uint16{dropped}}
	rec, err := blind.NewRecovery(req, commits)
	if err != nil {
		t.Fatal(err)
	}
	parts := 0
	for h := 0; h < n; h++ {
		if h == dropped {
			continue
		}
		var opened []*blind.Bundle
		for _, sb := range sealed[h] {
			b, err := blind.OpenBundle(keys[h], in, uint16(h), sb)
			if err != nil {
				t.Fatal(err)
			}
			opened = append(opened, b)
		}
		a, err := blind.MakeAnswer(&req, h, opened)
		if err != nil {
			t.Fatal(err)
		}
		var again []blind.Reveal
		for _, p := range splitAnswer(a, 2048) {
			b, _ := p.MarshalBinary()
			if len(b) > 2048 || p.Instance != in || p.Member != uint16(h) || len(p.Reveals) == 0 {
				t.Fatalf("holder %d: a part of %d bytes with %d reveals", h, len(b), len(p.Reveals))
			}
			again = append(again, p.Reveals...)
			if _, bad := rec.Add(p); bad != 0 {
				t.Fatalf("holder %d: %d shares of a part failed", h, bad)
			}
			parts++
		}
		if !reflect.DeepEqual(again, a.Reveals) {
			t.Fatalf("holder %d: the parts' reveals differ from the answer's", h)
		}
	}
	if parts <= n-1 || !rec.Ready() {
		t.Fatalf("%d parts from %d holders, ready %v", parts, n-1, rec.Ready())
	}
	if err := rec.Correct(sum); err != nil || !reflect.DeepEqual(sum, want) {
		t.Fatalf("recovered sum %v (%v), want %v", sum[:4], err, want[:4])
	}
}

// groupKeys draws n members' long-term keys and their public halves.
func groupKeys(n int) ([]*ecdh.PrivateKey, [][]byte) {
	keys := make([]*ecdh.PrivateKey, n)
	pubs := make([][]byte, n)
	for i := range keys {
		keys[i], _ = blind.GenerateKey()
		pubs[i] = keys[i].PublicKey().Bytes()
	}
	return keys, pubs
}
