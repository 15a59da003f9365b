package dleq

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/cloudflare/circl/group"
	circldleq "github.com/cloudflare/circl/zk/dleq"
	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

var g = group.Ristretto255

// circlParams are circl's DLEQ parameters for the same suite (what
// circl/oprf's verifiable ristretto255-SHA512 client and server use).
var circlParams = circldleq.Params{G: g, H: crypto.SHA512, DST: []byte(contextString)}

func enc(t testing.TB, m interface{ MarshalBinary() ([]byte, error) }) []byte {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// batch makes a key k, pk = k·G, n random C_i and D_i = k·C_i, as circl
// values and encodings.
type batch struct {
	k        group.Scalar
	pk       group.Element
	ce, de   []group.Element
	kb, pkb  []byte
	cb, db   [][]byte
	rb       []byte
	r        group.Scalar
	circlPrf *circldleq.Proof
}

func newBatch(t testing.TB, n int) *batch {
	t.Helper()
	b := &batch{k: g.RandomScalar(rand.Reader), r: g.RandomScalar(rand.Reader)}
	b.pk = g.NewElement().MulGen(b.k)
	for i := 0; i < n; i++ {
		c := g.RandomElement(rand.Reader)
		d := g.NewElement().Mul(c, b.k)
		b.ce, b.de = append(b.ce, c), append(b.de, d)
		b.cb, b.db = append(b.cb, enc(t, c)), append(b.db, enc(t, d))
	}
	b.kb, b.pkb, b.rb = enc(t, b.k), enc(t, b.pk), enc(t, b.r)
	var err error
	b.circlPrf, err = circldleq.Prover{Params: circlParams}.ProveBatchWithRandomnessRFC9497(b.k, b.pk, b.ce, b.de, b.r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// circlVerify is circl's verdict on encoded inputs: false for anything it
// cannot decode or for the identity (which circl/oprf's client and key
// parsing refuse before the proof check, as Verify does).
func circlVerify(pk []byte, c, d [][]byte, proof []byte) bool {
	dec := func(b []byte) group.Element {
		e := g.NewElement()
		if e.UnmarshalBinary(b) != nil || e.IsIdentity() {
			return nil
		}
		return e
	}
	pke := dec(pk)
	if pke == nil || len(c) != len(d) {
		return false
	}
	ce, de := make([]group.Element, len(c)), make([]group.Element, len(d))
	for i := range c {
		if ce[i], de[i] = dec(c[i]), dec(d[i]); ce[i] == nil || de[i] == nil {
			return false
		}
	}
	p := new(circldleq.Proof)
	if p.UnmarshalBinary(g, proof) != nil {
		return false
	}
	return circldleq.Verifier{Params: circlParams}.VerifyBatchRFC9497(pke, ce, de, p)
}

// TestProveMatchesCircl: with the same nonce, our proof is circl's byte for
// byte, and each verifier accepts the other's.
func TestProveMatchesCircl(t *testing.T) {
	for _, n := range []int{1, 2, 7, 33} {
		b := newBatch(t, n)
		want := enc(t, b.circlPrf)
		got, err := ProveWithRandomness(b.kb, b.pkb, b.cb, b.db, b.rb)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("n=%d: proof %x, circl %x", n, got, want)
		}
		if err := Verify(b.pkb, b.cb, b.db, want); err != nil {
			t.Fatalf("n=%d: circl's proof rejected: %v", n, err)
		}
		rnd, err := Prove(b.kb, b.pkb, b.cb, b.db, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if !circlVerify(b.pkb, b.cb, b.db, rnd) {
			t.Fatalf("n=%d: circl rejects our random-nonce proof", n)
		}
		d, proof, err := Evaluate(b.kb, b.pkb, b.cb, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		for i := range d {
			if !bytes.Equal(d[i], b.db[i]) {
				t.Fatalf("n=%d: D[%d] = %x, circl %x", n, i, d[i], b.db[i])
			}
		}
		if !circlVerify(b.pkb, b.cb, d, proof) {
			t.Fatalf("n=%d: circl rejects Evaluate's proof", n)
		}
	}
}

// TestVerifyAgreesWithCircl: on valid proofs and on tampered ones (a bit
// flipped in the proof, an element swapped, replaced or dropped, another
// key, scalars at or above ℓ) Verify accepts exactly when circl does.
func TestVerifyAgreesWithCircl(t *testing.T) {
	for trial := 0; trial < 30; trial++ {
		n := 1 + trial%5
		b := newBatch(t, n)
		proof := enc(t, b.circlPrf)
		other := newBatch(t, n)
		type tc struct {
			name  string
			pk    []byte
			c, d  [][]byte
			proof []byte
		}
		flip := func(p []byte, bit int) []byte {
			q := append([]byte(nil), p...)
			q[bit/8] ^= 1 << (bit % 8)
			return q
		}
		swap := func(l [][]byte) [][]byte {
			m := append([][]byte(nil), l...)
			if len(m) > 1 {
				m[0], m[1] = m[1], m[0]
			} else {
				m[0] = other.cb[0]
			}
			return m
		}
		big := append([]byte(nil), proof...)
		for i := 32; i < 64; i++ {
			big[i] = 0xff
		}
		cases := []tc{
			{"valid", b.pkb, b.cb, b.db, proof},
			{"flip c", b.pkb, b.cb, b.db, flip(proof, trial%256)},
			{"flip s", b.pkb, b.cb, b.db, flip(proof, 256+trial%248)},
			{"other key", other.pkb, b.cb, b.db, proof},
			{"other proof", b.pkb, b.cb, b.db, enc(t, other.circlPrf)},
			{"swap C", b.pkb, swap(b.cb), b.db, proof},
			{"swap D", b.pkb, b.cb, swap(b.db), proof},
			{"swap both", b.pkb, swap(b.cb), swap(b.db), proof},
			{"drop", b.pkb, b.cb[1:], b.db[1:], proof},
			{"C as D", b.pkb, b.db, b.cb, proof},
			{"s ≥ ℓ", b.pkb, b.cb, b.db, big},
		}
		for _, c := range cases {
			want := len(c.c) > 0 && circlVerify(c.pk, c.c, c.d, c.proof)
			err := Verify(c.pk, c.c, c.d, c.proof)
			if (err == nil) != want {
				t.Fatalf("trial %d %s: Verify = %v, circl accepts = %v", trial, c.name, err, want)
			}
			if c.name == "valid" && err != nil {
				t.Fatalf("valid proof rejected: %v", err)
			}
		}
	}
}

func TestVerifyErrors(t *testing.T) {
	b := newBatch(t, 2)
	proof := enc(t, b.circlPrf)
	if err := Verify(b.pkb, nil, nil, proof); !errors.Is(err, ErrBatch) {
		t.Fatalf("empty batch: %v", err)
	}
	if err := Verify(b.pkb, b.cb, b.db[:1], proof); !errors.Is(err, ErrBatch) {
		t.Fatalf("uneven batch: %v", err)
	}
	if err := Verify(b.pkb, b.cb, b.db, proof[:63]); !errors.Is(err, ErrEncoding) {
		t.Fatalf("short proof: %v", err)
	}
	id := make([]byte, 32)
	if err := Verify(b.pkb, b.cb, [][]byte{b.db[0], id}, proof); !errors.Is(err, ErrEncoding) {
		t.Fatalf("identity D: %v", err)
	}
	if err := Verify(id, b.cb, b.db, proof); !errors.Is(err, ErrEncoding) {
		t.Fatalf("identity key: %v", err)
	}
	bad := flipByte(proof, 5)
	if err := Verify(b.pkb, b.cb, b.db, bad); !errors.Is(err, ErrProof) {
		t.Fatalf("tampered: %v", err)
	}
	if _, _, err := Evaluate(b.kb, b.pkb, [][]byte{b.cb[0], id}, rand.Reader); !errors.Is(err, ErrEncoding) {
		t.Fatalf("Evaluate on the identity: %v", err)
	} else if ee := new(ElementError); !errors.As(err, &ee) || ee.Index != 1 {
		t.Fatalf("Evaluate error does not name element 1: %v", err)
	}
}

func flipByte(p []byte, i int) []byte {
	q := append([]byte(nil), p...)
	q[i] ^= 1
	return q
}

// TestRFC9497ProofVectors: GenerateProof with the RFC's nonce r gives the
// RFC's proof, and Verify accepts it (RFC 9497 Appendix A.1.2,
// ristretto255-SHA512 VOPRF).
func TestRFC9497ProofVectors(t *testing.T) {
	var v struct {
		SkSm, PkSm string
		Vectors    []struct {
			BlindedElement, EvaluationElement string
			Proof                             struct{ Proof, R string }
		}
	}
	testvec.ReadJSON(t, "../../oprf/testdata/rfc9497-ristretto255-sha512-voprf.json", &v)
	sk, pk := testvec.MustHex(t, v.SkSm), testvec.MustHex(t, v.PkSm)
	for i, tv := range v.Vectors {
		c, d := testvec.HexList(t, tv.BlindedElement), testvec.HexList(t, tv.EvaluationElement)
		want := testvec.MustHex(t, tv.Proof.Proof)
		got, err := ProveWithRandomness(sk, pk, c, d, testvec.MustHex(t, tv.Proof.R))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("vector %d: proof %x, RFC %x", i, got, want)
		}
		if err := Verify(pk, c, d, want); err != nil {
			t.Fatalf("vector %d: RFC proof rejected: %v", i, err)
		}
		ev, _, err := Evaluate(sk, pk, c, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		for j := range d {
			if !bytes.Equal(ev[j], d[j]) {
				t.Fatalf("vector %d: evaluation %d = %x, RFC %x", i, j, ev[j], d[j])
			}
		}
	}
}

// FuzzVerify: Verify never panics on arbitrary bytes and accepts exactly
// when circl does.
func FuzzVerify(f *testing.F) {
	b := newBatch(f, 2)
	seed := append(append(append(append(append([]byte(nil), b.pkb...), b.cb[0]...), b.db[0]...), b.cb[1]...), b.db[1]...)
	f.Add(append(seed, enc(f, b.circlPrf)...))
	f.Add(make([]byte, 32+64+64))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 32+64+64 {
			return
		}
		pk, proof, rest := in[:32], in[len(in)-64:], in[32:len(in)-64]
		var c, d [][]byte
		for len(rest) >= 64 && len(c) < 8 {
			c, d = append(c, rest[:32]), append(d, rest[32:64])
			rest = rest[64:]
		}
		if len(c) == 0 {
			return
		}
		err := Verify(pk, c, d, proof)
		if want := circlVerify(pk, c, d, proof); (err == nil) != want {
			t.Fatalf("Verify = %v, circl accepts = %v", err, want)
		}
	})
}
