package arc

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"testing"

	"github.com/cloudflare/circl/group"
)

// TestHashToCurveMatchesCircl compares hashToCurve (RFC 9380
// P256_XMD:SHA-256_SSWU_RO_ over group.go's own field arithmetic) with
// circl's HashToElement, which its tests check against RFC 9380's vectors,
// on many messages and DSTs (a long DST takes the H2C-OVERSIZE-DST path).
func TestHashToCurveMatchesCircl(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	dsts := [][]byte{
		[]byte("QUUX-V01-CS02-with-P256_XMD:SHA-256_SSWU_RO_"),
		[]byte("HashToGroup-ARCV1-P256Tag"),
		[]byte("HashToGroup-ARCV1-P256generatorH"),
		bytes.Repeat([]byte("long dst "), 40),
	}
	msgs := [][]byte{{}, []byte("abc"), []byte("abcdef0123456789"), bytes.Repeat([]byte{'a'}, 512)}
	n := 600
	if testing.Short() {
		n = 150
	}
	for i := 0; i < n; i++ {
		m := make([]byte, rng.IntN(200))
		for j := range m {
			m[j] = byte(rng.Uint32())
		}
		msgs = append(msgs, m)
	}
	for i, m := range msgs {
		dst := dsts[i%len(dsts)]
		want, _ := group.P256.HashToElement(m, dst).MarshalBinaryCompress()
		if got := mustEncode(hashToCurve(m, dst)); !bytes.Equal(got, want) {
			t.Fatalf("hash_to_curve(%x, %q) = %x, circl %x", m, dst, got, want)
		}
		if got := mustEncode(hashToCurveStraight(m, dst)); !bytes.Equal(got, want) {
			t.Fatalf("straight-line hash_to_curve(%x, %q) = %x, circl %x", m, dst, got, want)
		}
		ws, _ := group.P256.HashToScalar(m, dst).MarshalBinary()
		if got := encodeScalar(scalarWide(expandMessageXMD(m, dst, 48))); !bytes.Equal(got, ws) {
			t.Fatalf("hash_to_scalar(%x, %q) = %x, circl %x", m, dst, got, ws)
		}
	}
	// the suite's generator H
	wantH, _ := group.P256.HashToElement(mustEncode(genG), []byte("HashToGroup-ARCV1-P256generatorH")).MarshalBinaryCompress()
	if !bytes.Equal(mustEncode(genH), wantH) {
		t.Errorf("H = %x, circl %x", mustEncode(genH), wantH)
	}
}

// TestScalarWide checks the wide reduction against math/big.
func TestScalarWide(t *testing.T) {
	cases := [][]byte{{}, {1}, bytes.Repeat([]byte{0xff}, 48), orderN.Bytes(), new(big.Int).Add(orderN, big.NewInt(5)).Bytes()}
	for i := 0; i < 200; i++ {
		b := make([]byte, 1+i%48)
		rand.Read(b)
		cases = append(cases, b)
	}
	for _, b := range cases {
		want := new(big.Int).Mod(new(big.Int).SetBytes(b), orderN).FillBytes(make([]byte, 32))
		if got := encodeScalar(scalarWide(b)); !bytes.Equal(got, want) {
			t.Fatalf("%x mod p = %x, want %x", b, got, want)
		}
	}
	if x := scalarFromInt(7); !scEqual(scMul(scInv(x), x), scalarFromInt(1)) {
		t.Error("7^−1·7 ≠ 1")
	}
}

// TestMSMVarTime compares the variable-time multi-scalar multiplication
// with a sum of constant-time multiplications, edge scalars and repeated,
// opposite and fixed points included.
func TestMSMVarTime(t *testing.T) {
	rs := func() scalar { s, _ := readerRandomness{rand.Reader}.secret(); return s }
	pt := func() element { return mul(genG, rs()) }
	nm1 := scNeg(scalarFromInt(1))
	edge := []scalar{newScalar(), scalarFromInt(1), scalarFromInt(2), scalarFromInt(15), scalarFromInt(16), scalarFromInt(17), nm1,
		scNeg(scalarFromInt(15)), scalarWide(bytes.Repeat([]byte{0xff}, 32)), scalarWide(append([]byte{0x80}, make([]byte, 31)...))}
	for i := 0; i < 60; i++ {
		n := 1 + i%5
		s := make([]scalar, n)
		e := make([]element, n)
		for j := range s {
			if (i+j)%3 == 0 {
				s[j] = edge[(i*7+j)%len(edge)]
			} else {
				s[j] = rs()
			}
			switch (i + j) % 6 {
			case 0:
				e[j] = genG
			case 1:
				e[j] = genH
			case 2:
				if j > 0 {
					e[j] = e[j-1] // the same point twice
				} else {
					e[j] = pt()
				}
			case 3:
				if j > 0 {
					e[j] = sub(identity(), e[j-1]) // its opposite
				} else {
					e[j] = pt()
				}
			default:
				e[j] = pt()
			}
		}
		want := identity()
		for j := range s {
			want = add(want, mul(e[j], s[j]))
		}
		if got := msmVarTime(s, e); !equal(got, want) {
			t.Fatalf("case %d: msm %s ≠ Σ s·e %s", i, enc2(got), enc2(want))
		}
	}
	// a sum that vanishes: s·P + (−s)·P
	s := rs()
	if !isIdentity(msmVarTime([]scalar{s, scNeg(s)}, []element{genH, genH})) {
		t.Error("s·H − s·H is not the identity")
	}
}

func enc2(e element) string {
	if isIdentity(e) {
		return "identity"
	}
	return fmt.Sprintf("%x", mustEncode(e))
}

func BenchmarkHashToGroup(b *testing.B) {
	for b.Loop() {
		hashToGroup([]byte("crowdlog-v1 arc benchmark context"), "Tag")
	}
}

func BenchmarkHashToGroupCircl(b *testing.B) {
	for b.Loop() {
		group.P256.HashToElement([]byte("crowdlog-v1 arc benchmark context"), []byte("HashToGroup-ARCV1-P256Tag"))
	}
}
