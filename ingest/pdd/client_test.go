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
	keys := make([]*ecdh.PrivateKey, n)
	pubs := make([][]byte, n)
	for i := range keys {
		keys[i], _ = blind.GenerateKey()
		pubs[i] = keys[i].PublicKey().Bytes()
	}
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
