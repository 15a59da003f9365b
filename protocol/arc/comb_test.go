package arc

import (
	"bytes"
	"crypto/rand"
	"testing"

	"filippo.io/nistec"
)

// TestCombTable: k·P through a comb table equals nistec's ScalarMult for
// random k and the edge scalars 0, 1, p−1.
func TestCombTable(t *testing.T) {
	p := mul(genG, scalarFromInt(12345))
	tab := newCombTable(p)
	scalars := []scalar{newScalar(), scalarFromInt(1), scNeg(scalarFromInt(1)), scNeg(scalarFromInt(2)), scalarFromInt(16), scalarFromInt(15), scalarFromInt(31), scalarFromInt(32), scalarFromInt(33), scalarWide([]byte{0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})}
	for range 200 {
		s, err := readerRandomness{rand.Reader}.secret()
		if err != nil {
			t.Fatal(err)
		}
		scalars = append(scalars, s)
	}
	for i, s := range scalars {
		want, _ := nistec.NewP256Point().ScalarMult(p, encodeScalar(s))
		got := identity()
		tab.mulAdd(got, encodeScalar(s))
		if !equal(got, want) {
			t.Fatalf("scalar %d: comb table and ScalarMult differ", i)
		}
		if !equal(mul(genH, s), func() element { r, _ := nistec.NewP256Point().ScalarMult(genH, encodeScalar(s)); return r }()) {
			t.Fatalf("scalar %d: H's comb table and ScalarMult differ", i)
		}
	}
}

// replayRandomness returns the same scalars on every run from seed.
type replayRandomness struct{ rr readerRandomness }

func newReplay(seed byte) replayRandomness {
	return replayRandomness{readerRandomness{bytes.NewReader(bytes.Repeat([]byte{seed, 0x5a, 0x33}, 4096))}}
}
func (r replayRandomness) secret() (scalar, error) { return r.rr.secret() }
func (r replayRandomness) nonce() (scalar, error)  { return r.rr.secret() }

// TestPresentTablesSameBytes: a credential's presentations are the same
// bytes before and after it builds its comb tables (same randomness), and
// they verify.
func TestPresentTablesSameBytes(t *testing.T) {
	sk, _ := GenerateKey(rand.Reader)
	secrets, req, _ := NewCredentialRequest(rand.Reader)
	resp, _ := sk.Issue(rand.Reader, req)
	cold, err := secrets.Finalize(sk.Public(), req, resp)
	if err != nil {
		t.Fatal(err)
	}
	warm, err := secrets.Finalize(sk.Public(), req, resp)
	if err != nil {
		t.Fatal(err)
	}
	for range presentTablesAfter + 1 {
		warm.bases()
	}
	if warm.tables.Load() == nil {
		t.Fatal("no tables after presentTablesAfter presentations")
	}
	for _, limit := range []int{1, 16} {
		ctx := []byte("comb tables")
		a, err := cold.presentUnchecked(newReplay(byte(limit)), ctx, limit-1, limit)
		if err != nil {
			t.Fatal(err)
		}
		cold.presented.Store(0)
		b, err := warm.presentUnchecked(newReplay(byte(limit)), ctx, limit-1, limit)
		if err != nil {
			t.Fatal(err)
		}
		ab, _ := a.MarshalBinary()
		bb, _ := b.MarshalBinary()
		if !bytes.Equal(ab, bb) {
			t.Fatalf("limit %d: presentation differs with comb tables", limit)
		}
		if err := sk.VerifyPresentation(b, ctx, limit); err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
	}
}

func BenchmarkCombMult(b *testing.B) {
	tab := newCombTable(mul(genG, scalarFromInt(7)))
	k := encodeScalar(scNeg(scalarFromInt(3)))
	for b.Loop() {
		tab.mulAdd(identity(), k)
	}
}

func BenchmarkCombTable(b *testing.B) {
	p := mul(genG, scalarFromInt(7))
	for b.Loop() {
		newCombTable(p)
	}
}

func BenchmarkScalarMult(b *testing.B) {
	p := mul(genG, scalarFromInt(7))
	k := encodeScalar(scNeg(scalarFromInt(3)))
	for b.Loop() {
		nistec.NewP256Point().ScalarMult(p, k)
	}
}
