package arc

import (
	"bytes"
	"crypto/rand"
	"errors"
	"math/big"
	"testing"

	"github.com/cloudflare/circl/group"
	"github.com/crowdlog/crowdlog/protocol"
)

// issue runs the whole issuance flow through the encodings, as the wire
// would.
func issue(t testing.TB, sk *PrivateKey) *Credential {
	t.Helper()
	secrets, req, err := NewCredentialRequest(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := req.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	req2, err := ParseCredentialRequest(rb)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sk.Issue(rand.Reader, req2)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := resp.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	resp2, err := ParseCredentialResponse(pb)
	if err != nil {
		t.Fatal(err)
	}
	pkb, _ := sk.Public().MarshalBinary()
	pk, err := ParsePublicKey(pkb)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := secrets.Finalize(pk, req, resp2)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := cred.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	cred2, err := ParseCredential(cb)
	if err != nil {
		t.Fatal(err)
	}
	return cred2
}

func newKey(t testing.TB) *PrivateKey {
	t.Helper()
	sk, err := GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := sk.MarshalBinary()
	sk2, err := ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return sk2
}

// wire sends p through MarshalBinary/ParsePresentation.
func wire(t testing.TB, p *Presentation) *Presentation {
	t.Helper()
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParsePresentation(b)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

func TestRoundTrip(t *testing.T) {
	sk := newKey(t)
	cred := issue(t, sk)
	ctx := []byte("crowdlog-v1 arc test context")
	for _, limit := range []int{1, 2, 3, 5} {
		tags := map[string]bool{}
		for nonce := 0; nonce < limit; nonce++ {
			p, err := cred.Present(rand.Reader, ctx, nonce, limit)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := p.MarshalBinary()
			if len(b) != PresentationSize(limit) {
				t.Errorf("limit %d: presentation of %d bytes, PresentationSize says %d", limit, len(b), PresentationSize(limit))
			}
			p = wire(t, p)
			if err := sk.VerifyPresentation(p, ctx, limit); err != nil {
				t.Fatalf("limit %d nonce %d: %v", limit, nonce, err)
			}
			tags[string(p.Tag())] = true
		}
		if len(tags) != limit {
			t.Errorf("limit %d: %d distinct tags, want %d", limit, len(tags), limit)
		}
	}
}

// TestTagDeterministic: the same (credential, context, nonce) gives the same
// tag in two unlinkable presentations (different U); another context or
// another credential gives another tag. The tag is checked against its
// definition (m1+nonce)^−1·HashToGroup(ctx, "Tag") computed here.
func TestTagDeterministic(t *testing.T) {
	sk := newKey(t)
	c1, c2 := issue(t, sk), issue(t, sk)
	ctx := []byte("ctx a")
	p1, _ := c1.Present(rand.Reader, ctx, 0, 1)
	p2, _ := c1.Present(rand.Reader, ctx, 0, 1)
	if !bytes.Equal(p1.Tag(), p2.Tag()) {
		t.Error("same credential, context and nonce: tags differ")
	}
	if bytes.Equal(mustEncode(p1.U), mustEncode(p2.U)) {
		t.Error("two presentations share U (linkable)")
	}
	// recomputed with circl's P-256 group, independently of group.go
	cg := group.P256
	inv := cg.NewScalar()
	if err := inv.UnmarshalBinary(encodeScalar(c1.m1)); err != nil {
		t.Fatal(err)
	}
	inv.Inv(inv)
	want, _ := cg.NewElement().Mul(cg.HashToElement(ctx, []byte("HashToGroup-ARCV1-P256Tag")), inv).MarshalBinaryCompress()
	if !bytes.Equal(p1.Tag(), want) {
		t.Errorf("tag %x, want m1^-1·HashToGroup(ctx) = %x", p1.Tag(), want)
	}
	p3, _ := c1.Present(rand.Reader, []byte("ctx b"), 0, 1)
	p4, _ := c2.Present(rand.Reader, ctx, 0, 1)
	if bytes.Equal(p1.Tag(), p3.Tag()) || bytes.Equal(p1.Tag(), p4.Tag()) {
		t.Error("another context or credential gave the same tag")
	}
}

func TestSoundness(t *testing.T) {
	sk := newKey(t)
	cred := issue(t, sk)
	ctx := []byte("release ctx ‖ artifact tag")
	const limit = 3
	fresh := func() *Presentation {
		p, err := cred.Present(rand.Reader, ctx, 1, limit)
		if err != nil {
			t.Fatal(err)
		}
		return wire(t, p)
	}
	if err := sk.VerifyPresentation(fresh(), ctx, limit); err != nil {
		t.Fatalf("honest presentation refused: %v", err)
	}
	other := hashToCurve([]byte("x"), []byte("some other point"))
	cases := []struct {
		name   string
		mutate func(p *Presentation)
		ctx    []byte
		limit  int
		key    *PrivateKey
	}{
		{name: "tag changed", mutate: func(p *Presentation) { p.TagElement = other }},
		{name: "tag of another nonce", mutate: func(p *Presentation) {
			q, _ := cred.Present(rand.Reader, ctx, 2, limit)
			p.TagElement = q.TagElement
		}},
		{name: "nonce commitment changed", mutate: func(p *Presentation) { p.NonceCommit = add(p.NonceCommit, genG) }},
		{name: "bit commitment changed", mutate: func(p *Presentation) { p.D[0] = add(p.D[0], genH) }},
		{name: "U changed", mutate: func(p *Presentation) { p.U = add(p.U, genG) }},
		{name: "U' commitment changed", mutate: func(p *Presentation) { p.UPrimeCommit = add(p.UPrimeCommit, genG) }},
		{name: "m1 commitment changed", mutate: func(p *Presentation) { p.M1Commit = add(p.M1Commit, genG) }},
		{name: "proof byte flipped", mutate: func(p *Presentation) { p.Proof[40] ^= 1 }},
		{name: "other context", ctx: []byte("release ctx ‖ another artifact")},
		{name: "other limit", limit: 4},
		{name: "smaller limit", limit: 2},
		{name: "other key", key: newKey(t)},
	}
	for _, c := range cases {
		p := fresh()
		if c.mutate != nil {
			c.mutate(p)
		}
		vctx, vlimit, vkey := ctx, limit, sk
		if c.ctx != nil {
			vctx = c.ctx
		}
		if c.limit != 0 {
			vlimit = c.limit
		}
		if c.key != nil {
			vkey = c.key
		}
		if err := vkey.VerifyPresentation(p, vctx, vlimit); !errors.Is(err, ErrInvalidPresentation) {
			t.Errorf("%s: VerifyPresentation = %v, want ErrInvalidPresentation", c.name, err)
		}
	}
	// A credential issued under another key does not verify under sk.
	foreign := issue(t, newKey(t))
	p, _ := foreign.Present(rand.Reader, ctx, 0, limit)
	if err := sk.VerifyPresentation(p, ctx, limit); !errors.Is(err, ErrInvalidPresentation) {
		t.Errorf("credential of another key: %v, want ErrInvalidPresentation", err)
	}
	// Another request context (m2) does not verify.
	if err := sk.VerifyPresentationWithContext(fresh(), []byte("other request ctx"), ctx, limit); !errors.Is(err, ErrInvalidPresentation) {
		t.Errorf("other request context: %v, want ErrInvalidPresentation", err)
	}
}

// TestNonceBeyondLimit: Present refuses nonce ≥ limit, and a presentation
// built anyway (nonce = limit, limit+1) does not verify, for limit 1 (the
// crowdlog extension) and limits 2..6.
func TestNonceBeyondLimit(t *testing.T) {
	sk := newKey(t)
	cred := issue(t, sk)
	ctx := []byte("ctx")
	for limit := 1; limit <= 6; limit++ {
		if _, err := cred.Present(rand.Reader, ctx, limit, limit); !errors.Is(err, ErrLimit) {
			t.Errorf("limit %d: Present(nonce=limit) = %v, want ErrLimit", limit, err)
		}
		for _, nonce := range []int{limit, limit + 1} {
			p, err := cred.presentUnchecked(readerRandomness{rand.Reader}, ctx, nonce, limit)
			if err != nil {
				t.Fatal(err)
			}
			if err := sk.VerifyPresentation(p, ctx, limit); !errors.Is(err, ErrInvalidPresentation) {
				t.Errorf("limit %d nonce %d: VerifyPresentation = %v, want ErrInvalidPresentation", limit, nonce, err)
			}
		}
	}
	if _, err := cred.Present(rand.Reader, ctx, -1, 2); !errors.Is(err, ErrLimit) {
		t.Errorf("nonce -1: %v, want ErrLimit", err)
	}
}

// TestBases checks ComputeBases against values worked out by hand from the
// draft's pseudocode, and that every nonce in [0, limit) — and no larger
// one — has the canonical decomposition summing to it.
func TestBases(t *testing.T) {
	// e.g. limit 10: k = 4, powers 1, 2, 4, remainder 10−7−1 = 2 → sorted 4, 2, 2, 1;
	// limit 100: k = 7, powers 1..32 (sum 63), remainder 100−63−1 = 36.
	want := map[int][]int{1: nil, 2: {1}, 3: {1, 1}, 4: {2, 1}, 5: {2, 1, 1}, 8: {4, 2, 1}, 10: {4, 2, 2, 1}, 100: {36, 32, 16, 8, 4, 2, 1}}
	for limit, w := range want {
		got := bases(limit)
		if len(got) != len(w) {
			t.Errorf("bases(%d) = %v, want %v", limit, got, w)
			continue
		}
		for i := range w {
			if got[i] != w[i] {
				t.Errorf("bases(%d) = %v, want %v", limit, got, w)
				break
			}
		}
	}
	for limit := 2; limit <= 70; limit++ {
		bs := bases(limit)
		for nonce := 0; nonce <= limit; nonce++ {
			rem, sum := nonce, 0
			for _, b := range bs {
				if rem >= b {
					rem -= b
					sum += b
				}
			}
			if (sum == nonce) != (nonce < limit) {
				t.Errorf("limit %d nonce %d: canonical decomposition sums to %d", limit, nonce, sum)
			}
		}
	}
}

func TestIssueRejects(t *testing.T) {
	sk := newKey(t)
	_, req, _ := NewCredentialRequest(rand.Reader)
	req.M2Enc = add(req.M2Enc, genG)
	if _, err := sk.Issue(rand.Reader, req); !errors.Is(err, ErrInvalidProof) {
		t.Errorf("altered request: %v, want ErrInvalidProof", err)
	}
	secrets, req, _ := NewCredentialRequest(rand.Reader)
	resp, err := sk.Issue(rand.Reader, req)
	if err != nil {
		t.Fatal(err)
	}
	// A response checked against another public key, or altered, is refused.
	if _, err := secrets.Finalize(newKey(t).Public(), req, resp); !errors.Is(err, ErrInvalidProof) {
		t.Errorf("other public key: %v, want ErrInvalidProof", err)
	}
	resp.EncUPrime = add(resp.EncUPrime, genG)
	if _, err := secrets.Finalize(sk.Public(), req, resp); !errors.Is(err, ErrInvalidProof) {
		t.Errorf("altered response: %v, want ErrInvalidProof", err)
	}
}

// TestParseRejects: bad lengths, points off the curve, bad prefixes,
// scalars ≥ p or zero all wrap protocol.ErrMalformed.
func TestParseRejects(t *testing.T) {
	sk := newKey(t)
	cred := issue(t, sk)
	p, _ := cred.Present(rand.Reader, []byte("c"), 0, 2)
	pb, _ := p.MarshalBinary()
	skb, _ := sk.MarshalBinary()
	pkb, _ := sk.Public().MarshalBinary()
	cb, _ := cred.MarshalBinary()
	_, req, _ := NewCredentialRequest(rand.Reader)
	rqb, _ := req.MarshalBinary()
	resp, _ := sk.Issue(rand.Reader, req)
	rsb, _ := resp.MarshalBinary()

	offCurve := offCurvePoint()
	xTooBig := append([]byte{2}, bytes.Repeat([]byte{0xff}, 32)...) // x ≥ field prime
	allFF := bytes.Repeat([]byte{0xff}, 32)
	parsers := []struct {
		name  string
		parse func([]byte) error
		good  []byte
		elts  []int // offsets of elements
		scls  []int // offsets of scalars that must be < p
	}{
		{"private key", func(b []byte) error { _, err := ParsePrivateKey(b); return err }, skb, nil, []int{0, 32, 64, 96}},
		{"public key", func(b []byte) error { _, err := ParsePublicKey(b); return err }, pkb, []int{0, 33, 66}, nil},
		{"credential", func(b []byte) error { _, err := ParseCredential(b); return err }, cb, []int{32, 65, 98}, []int{0}},
		{"request", func(b []byte) error { _, err := ParseCredentialRequest(b); return err }, rqb, []int{0, 33}, []int{66, 98}},
		{"response", func(b []byte) error { _, err := ParseCredentialResponse(b); return err }, rsb, []int{0, 33, 66, 99, 132, 165}, []int{198}},
		{"presentation", func(b []byte) error { _, err := ParsePresentation(b); return err }, pb, []int{0, 33, 66, 99, 132, 165}, []int{198}},
	}
	for _, ps := range parsers {
		if err := ps.parse(ps.good); err != nil {
			t.Fatalf("%s: good encoding refused: %v", ps.name, err)
		}
		bad := map[string][]byte{
			"empty":     nil,
			"truncated": ps.good[:len(ps.good)-1],
			"extended":  append(append([]byte(nil), ps.good...), 0),
		}
		for _, off := range ps.elts {
			b := append([]byte(nil), ps.good...)
			copy(b[off:], offCurve)
			bad["off-curve element"] = b
			b = append([]byte(nil), ps.good...)
			copy(b[off:], xTooBig)
			bad["x not below the field prime"] = b
			b = append([]byte(nil), ps.good...)
			b[off] = 4
			bad["uncompressed prefix"] = b
			b = append([]byte(nil), ps.good...)
			b[off] = 0
			bad["identity prefix"] = b
			for name, x := range bad {
				if err := ps.parse(x); !errors.Is(err, protocol.ErrMalformed) {
					t.Errorf("%s, %s at %d: %v, want ErrMalformed", ps.name, name, off, err)
				}
			}
		}
		for _, off := range ps.scls {
			b := append([]byte(nil), ps.good...)
			copy(b[off:], allFF)
			if err := ps.parse(b); !errors.Is(err, protocol.ErrMalformed) {
				t.Errorf("%s, scalar ≥ p at %d: %v, want ErrMalformed", ps.name, off, err)
			}
		}
		for name, x := range bad {
			if err := ps.parse(x); !errors.Is(err, protocol.ErrMalformed) {
				t.Errorf("%s, %s: %v, want ErrMalformed", ps.name, name, err)
			}
		}
	}
	zero := append([]byte(nil), skb...)
	copy(zero[32:64], make([]byte, 32))
	if _, err := ParsePrivateKey(zero); !errors.Is(err, protocol.ErrMalformed) {
		t.Errorf("private key with x1 = 0: %v, want ErrMalformed", err)
	}
	if _, err := ParsePresentation(make([]byte, MaxPresentationSize+129)); !errors.Is(err, protocol.ErrMalformed) {
		t.Errorf("oversized presentation: %v", err)
	}
}

// offCurvePoint returns 0x02 ‖ x for the smallest x whose x³ − 3x + b is
// not a square mod the P-256 prime (computed with math/big, not circl).
func offCurvePoint() []byte {
	p, _ := new(big.Int).SetString("ffffffff00000001000000000000000000000000ffffffffffffffffffffffff", 16)
	b, _ := new(big.Int).SetString("5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604b", 16)
	for x := int64(1); ; x++ {
		bx := big.NewInt(x)
		y2 := new(big.Int).Exp(bx, big.NewInt(3), p)
		y2.Sub(y2, new(big.Int).Mul(big.NewInt(3), bx))
		y2.Add(y2, b).Mod(y2, p)
		if big.Jacobi(y2, p) == -1 {
			return append([]byte{2}, bx.FillBytes(make([]byte, 32))...)
		}
	}
}
