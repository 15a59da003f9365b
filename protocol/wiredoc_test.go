package protocol_test

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/circl/group"
	"github.com/cloudflare/circl/hpke"
	"golang.org/x/crypto/chacha20poly1305"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// The vectors of docs/wire.md. Each fenced block
//
//	```vector name=NAME        hex: the bytes are the hex digits of each line
//	02 07 323030362d3033        before any '#', spaces ignored
//	```
//	```vector name=NAME text   text: the single line is the bytes
//
// is decoded here with the package's parser and its fields compared with
// what the document states, and whatever the document derives is derived
// again from its inputs with independent primitives (the standard
// library, x/crypto, circl's group and HPKE) — never with the helper that
// produced it. Every block must be checked: an unknown name fails, and so
// does a missing one.

var printWireVectors = flag.Bool("wiredoc.print", false, "print the vector blocks of docs/wire.md computed by the independent generators of this test (to edit the document), then check")

const wireDoc = "../docs/wire.md"

// docVectors reads every vector block of the document, in order.
func docVectors(t *testing.T) (map[string][]byte, []string) {
	t.Helper()
	f, err := os.Open(wireDoc)
	if err != nil {
		t.Fatalf("open %s: %v", wireDoc, err)
	}
	defer f.Close()
	vec := map[string][]byte{}
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		rest, ok := strings.CutPrefix(s, "```vector ")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		name, ok := strings.CutPrefix(fields[0], "name=")
		if !ok || name == "" {
			t.Fatalf("%s:%d: vector block without name=", wireDoc, line)
		}
		text := len(fields) > 1 && fields[1] == "text"
		if _, dup := vec[name]; dup {
			t.Fatalf("%s:%d: vector %s twice", wireDoc, line, name)
		}
		start := line
		var b []byte
		closed := false
		for sc.Scan() {
			line++
			l := sc.Text()
			if l == "```" {
				closed = true
				break
			}
			if text {
				if b != nil {
					t.Fatalf("%s:%d: text vector %s has more than one line", wireDoc, line, name)
				}
				b = []byte(l)
				continue
			}
			if i := strings.IndexByte(l, '#'); i >= 0 {
				l = l[:i]
			}
			h, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(l), " ", ""))
			if err != nil {
				t.Fatalf("%s:%d: vector %s: bad hex: %v", wireDoc, line, name, err)
			}
			b = append(b, h...)
		}
		if !closed || len(b) == 0 {
			t.Fatalf("%s:%d: vector %s is empty or not closed", wireDoc, start, name)
		}
		vec[name] = b
		order = append(order, name)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return vec, order
}

// wire is the document's vectors with a record of which were checked.
type wire struct {
	t    *testing.T
	v    map[string][]byte
	used map[string]bool
}

func (w *wire) get(name string) []byte {
	w.t.Helper()
	b, ok := w.v[name]
	if !ok {
		w.t.Fatalf("docs/wire.md has no vector %s", name)
	}
	w.used[name] = true
	return b
}

func (w *wire) eq(name string, got []byte, what string) {
	w.t.Helper()
	if want := w.get(name); !bytes.Equal(got, want) {
		w.t.Errorf("vector %s: %s gives %x, the document %x", name, what, got, want)
	}
}

// golden reads a package's golden file (checked against the code by that
// package's tests); the document's vectors must be the same bytes.
func golden(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (w *wire) sameAsGolden(g map[string]string, pairs ...string) {
	w.t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		if hex.EncodeToString(w.get(pairs[i])) != g[pairs[i+1]] {
			w.t.Errorf("vector %s differs from golden %s", pairs[i], pairs[i+1])
		}
	}
}

// cut is an independent reader of the documented layouts.
type cut struct {
	t    *testing.T
	name string
	b    []byte
}

func (c *cut) n(k int) []byte {
	c.t.Helper()
	if k > len(c.b) {
		c.t.Fatalf("vector %s: truncated (want %d more bytes, %d left)", c.name, k, len(c.b))
	}
	p := c.b[:k]
	c.b = c.b[k:]
	return p
}
func (c *cut) u8() int      { return int(c.n(1)[0]) }
func (c *cut) u16() int     { return int(binary.BigEndian.Uint16(c.n(2))) }
func (c *cut) u32() int     { return int(binary.BigEndian.Uint32(c.n(4))) }
func (c *cut) str8() string { return string(c.n(c.u8())) }
func (c *cut) done() {
	c.t.Helper()
	if len(c.b) != 0 {
		c.t.Errorf("vector %s: %d bytes after the documented fields", c.name, len(c.b))
	}
}

func (w *wire) cut(name string) *cut { return &cut{t: w.t, name: name, b: w.get(name)} }

var g = group.Ristretto255

func scalar(t *testing.T, b []byte) group.Scalar {
	t.Helper()
	s := g.NewScalar()
	if err := s.UnmarshalBinary(b); err != nil {
		t.Fatalf("scalar %x: %v", b, err)
	}
	return s
}

func element(t *testing.T, b []byte) group.Element {
	t.Helper()
	e := g.NewElement()
	if err := e.UnmarshalBinary(b); err != nil {
		t.Fatalf("element %x: %v", b, err)
	}
	return e
}

func enc(m interface{ MarshalBinary() ([]byte, error) }) []byte {
	b, err := m.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return b
}

func encE(e group.Element) []byte {
	b, err := e.MarshalBinaryCompress()
	if err != nil {
		panic(err)
	}
	return b
}

func u16(n int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(n)) }

// RFC 9497 §4.1 ristretto255-SHA512, verifiable mode (0x01).
const voprfContext = "OPRFV1-\x01-ristretto255-SHA512"

func hashToGroup(input []byte) group.Element {
	return g.HashToElement(input, []byte("HashToGroup-"+voprfContext))
}

func hashToScalar(msg []byte) group.Scalar {
	return g.HashToScalar(msg, []byte("HashToScalar-"+voprfContext))
}

// verifyDLEQ is RFC 9497 §2.2.2 VerifyProof with A = G, B = pkS, C the
// blinded and D the evaluated elements, proof = c ‖ s.
func verifyDLEQ(t *testing.T, pk []byte, cs, ds [][]byte, proof []byte) bool {
	t.Helper()
	lp := func(b []byte) []byte { return append(u16(len(b)), b...) }
	seedDST := []byte("Seed-" + voprfContext)
	h := sha512.New()
	h.Write(lp(pk))
	h.Write(lp(seedDST))
	seed := h.Sum(nil)
	m, z := g.Identity(), g.Identity()
	for i := range cs {
		in := lp(seed)
		in = append(in, u16(i)...)
		in = append(in, lp(cs[i])...)
		in = append(in, lp(ds[i])...)
		in = append(in, "Composite"...)
		d := hashToScalar(in)
		m.Add(m, g.NewElement().Mul(element(t, cs[i]), d))
		z.Add(z, g.NewElement().Mul(element(t, ds[i]), d))
	}
	c, s := scalar(t, proof[:32]), scalar(t, proof[32:])
	t2 := g.NewElement().Add(g.NewElement().MulGen(s), g.NewElement().Mul(element(t, pk), c))
	t3 := g.NewElement().Add(g.NewElement().Mul(m, s), g.NewElement().Mul(z, c))
	var in []byte
	for _, e := range [][]byte{pk, encE(m), encE(z), encE(t2), encE(t3)} {
		in = append(in, lp(e)...)
	}
	in = append(in, "Challenge"...)
	return hashToScalar(in).IsEqual(c)
}

// finalizeOPRF is RFC 9497 §3.3.2 Finalize for one input.
func finalizeOPRF(input []byte, blindScalar group.Scalar, evaluated group.Element) []byte {
	inv := g.NewScalar().Inv(blindScalar)
	n := encE(g.NewElement().Mul(evaluated, inv))
	h := sha512.New()
	h.Write(u16(len(input)))
	h.Write(input)
	h.Write(u16(len(n)))
	h.Write(n)
	h.Write([]byte("Finalize"))
	return h.Sum(nil)
}

// deriveKeyPair is RFC 9497 §3.2.1 DeriveKeyPair in verifiable mode.
func deriveKeyPair(seed []byte, info string) group.Scalar {
	in := append(append(append([]byte{}, seed...), u16(len(info))...), info...)
	for counter := 0; counter < 256; counter++ {
		sk := g.HashToScalar(append(append([]byte{}, in...), byte(counter)), []byte("DeriveKeyPair"+voprfContext))
		if !sk.IsZero() {
			return sk
		}
	}
	panic("DeriveKeyPair: no key")
}

const (
	docEpoch = "2006-03"
	docApp   = "query"
)

var docArtifacts = []string{"new york weather", "google"}

func oprfInput(app, epoch, artifact string) []byte {
	b := []byte("crowdlog-v1")
	for _, s := range []string{app, epoch, artifact} {
		b = append(append(b, 0), s...)
	}
	return b
}

func checkOPRF(w *wire) {
	t := w.t
	w.eq("oprf-input", oprfInput(docApp, docEpoch, docArtifacts[0]), "crowdlog-v1 ‖ 0 ‖ app ‖ 0 ‖ epoch ‖ 0 ‖ artifact")
	w.eq("oprf-input", oprf.OPRFInput(docApp, docEpoch, docArtifacts[0]), "oprf.OPRFInput")

	// public key request and response
	c := w.cut("oprf-public-key-request")
	if c.u8() != 2 || c.str8() != docEpoch {
		t.Error("oprf-public-key-request: not version 2, epoch 2006-03")
	}
	c.done()
	pq, err := oprf.ParsePublicKeyRequest(w.get("oprf-public-key-request"))
	if err != nil || pq.Epoch != docEpoch {
		t.Errorf("oprf-public-key-request parses to %+v, %v", pq, err)
	} else {
		w.eq("oprf-public-key-request", enc(pq), "re-encoding")
	}
	pkS := w.get("oprf-public-key")
	if e := element(t, pkS); e.IsIdentity() {
		t.Error("oprf-public-key is the identity")
	}
	skS := deriveKeyPair(w.get("oprf-key-seed"), "crowdlog-v1 epoch "+docEpoch)
	w.eq("oprf-private-key", enc(skS), "RFC 9497 DeriveKeyPair(seed, \"crowdlog-v1 epoch 2006-03\")")
	w.eq("oprf-public-key", encE(g.NewElement().MulGen(skS)), "skS·G")
	c = w.cut("oprf-public-key-response")
	if c.u8() != 2 || c.u8() != 0 || c.str8() != docEpoch || !bytes.Equal(c.n(32), pkS) {
		t.Error("oprf-public-key-response: not version 2, status 0, epoch 2006-03, oprf-public-key")
	}
	c.done()
	pr, err := oprf.ParsePublicKeyResponse(w.get("oprf-public-key-response"))
	if err != nil || pr.Refused() || pr.Epoch != docEpoch || !bytes.Equal(pr.Key, pkS) {
		t.Errorf("oprf-public-key-response parses to %+v, %v", pr, err)
	} else if _, err := oprf.ParseOPRFPublicKey(pr.Key); err != nil {
		t.Errorf("oprf-public-key: %v", err)
	}

	// the batch: blinded elements r_i · HashToGroup(input_i)
	var inputs [][]byte
	var blinds []group.Scalar
	var blinded [][]byte
	for i, a := range docArtifacts {
		in := oprfInput(docApp, docEpoch, a)
		r := scalar(t, w.get(fmt.Sprintf("oprf-blind-%d", i)))
		inputs, blinds = append(inputs, in), append(blinds, r)
		blinded = append(blinded, encE(g.NewElement().Mul(hashToGroup(in), r)))
	}
	c = w.cut("oprf-randomness-request")
	if c.u8() != 2 || c.str8() != docEpoch || c.u16() != len(inputs) {
		t.Error("oprf-randomness-request: not version 2, epoch 2006-03, count 2")
	}
	for i := range inputs {
		if e := c.n(32); !bytes.Equal(e, blinded[i]) {
			t.Errorf("oprf-randomness-request element %d is %x; r_%d·HashToGroup(input_%d) is %x", i, e, i, i, blinded[i])
		}
	}
	c.done()
	q, err := oprf.ParseRandomnessRequest(w.get("oprf-randomness-request"))
	if err != nil || q.Epoch != docEpoch || len(q.Elements) != len(inputs) {
		t.Fatalf("oprf-randomness-request parses to %+v, %v", q, err)
	}
	for i := range inputs {
		if !bytes.Equal(q.Elements[i], blinded[i]) {
			t.Errorf("oprf-randomness-request: parser's element %d differs", i)
		}
	}
	w.eq("oprf-randomness-request", enc(q), "re-encoding")

	c = w.cut("oprf-randomness-response")
	if c.u8() != 2 || c.u8() != 0 || c.u16() != len(inputs) {
		t.Error("oprf-randomness-response: not version 2, status 0, count 2")
	}
	var evaluated [][]byte
	for i := range inputs {
		evaluated = append(evaluated, c.n(32))
		if want := encE(g.NewElement().Mul(element(t, blinded[i]), skS)); !bytes.Equal(evaluated[i], want) {
			t.Errorf("oprf-randomness-response element %d is not skS·B_%d", i, i)
		}
	}
	proof := c.n(64)
	c.done()
	if !verifyDLEQ(t, pkS, blinded, evaluated, proof) {
		t.Error("oprf-randomness-response: the DLEQ proof does not verify (RFC 9497 §2.2.2, recomputed here)")
	}
	if verifyDLEQ(t, pkS, blinded, [][]byte{evaluated[1], evaluated[0]}, proof) {
		t.Error("the DLEQ check here accepts swapped elements")
	}
	resp, err := oprf.ParseRandomnessResponse(w.get("oprf-randomness-response"))
	if err != nil || resp.Refused() || len(resp.Elements) != len(inputs) || !bytes.Equal(resp.Proof, proof) {
		t.Fatalf("oprf-randomness-response parses to %+v, %v", resp, err)
	}
	for i := range inputs {
		if !bytes.Equal(resp.Elements[i], evaluated[i]) {
			t.Errorf("oprf-randomness-response: parser's element %d differs", i)
		}
		w.eq(fmt.Sprintf("oprf-omega-%d", i), finalizeOPRF(inputs[i], blinds[i], element(t, evaluated[i])), "RFC 9497 Finalize")
	}
	w.eq("oprf-randomness-response", enc(resp), "re-encoding")
	// the service's code evaluates the request to the same elements, with a
	// fresh proof that the independent check accepts
	sk, err := oprf.DeriveOPRFKey(w.get("oprf-key-seed"), docEpoch)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := oprf.Evaluate(sk, q)
	if err != nil {
		t.Fatalf("oprf.Evaluate of oprf-randomness-request: %v", err)
	}
	for i := range inputs {
		if !bytes.Equal(ev.Elements[i], evaluated[i]) {
			t.Errorf("oprf.Evaluate: element %d differs from the document", i)
		}
	}
	if !verifyDLEQ(t, pkS, blinded, ev.Elements, ev.Proof) {
		t.Error("oprf.Evaluate's proof does not verify under the documented check")
	}

	c = w.cut("oprf-randomness-response-closed")
	const closedMsg = "epoch 2006-02 closed"
	if c.u8() != 2 || c.u8() != 2 || string(c.n(c.u16())) != closedMsg {
		t.Error("oprf-randomness-response-closed: not version 2, status 2, message")
	}
	c.done()
	cl, err := oprf.ParseRandomnessResponse(w.get("oprf-randomness-response-closed"))
	if err != nil || !cl.Closed || cl.Error != closedMsg {
		t.Errorf("oprf-randomness-response-closed parses to %+v, %v", cl, err)
	}

	w.sameAsGolden(golden(t, "oprf/testdata/golden-randomness.json"),
		"oprf-public-key", "public_key", "oprf-blind-0", "blind0", "oprf-blind-1", "blind1",
		"oprf-randomness-request", "request", "oprf-randomness-response", "response",
		"oprf-omega-0", "omega0", "oprf-omega-1", "omega1", "oprf-public-key-request", "pubkey_request",
		"oprf-public-key-response", "pubkey_response", "oprf-randomness-response-closed", "response_closed")
}

func checkRelayKeys(w *wire) {
	t := w.t
	c := w.cut("relaykeys-request")
	if c.u8() != 2 || c.str8() != "a" {
		t.Error("relaykeys-request: not version 2, relay a")
	}
	c.done()
	q, err := onion.ParseRelayKeysRequest(w.get("relaykeys-request"))
	if err != nil || q.Relay != "a" {
		t.Errorf("relaykeys-request parses to %+v, %v", q, err)
	}
	pub := w.get("onion-key-relay-a-public")
	c = w.cut("relaykeys-response")
	if c.u8() != 2 || c.u8() != 0 || c.str8() != "a" || c.u8() != 2 {
		t.Error("relaykeys-response: not version 2, status 0, relay a, 2 keys")
	}
	for _, id := range []int{1, 2} {
		if c.u8() != id || c.u8() != 32 || !bytes.Equal(c.n(32), pub) {
			t.Errorf("relaykeys-response: key %d is not relay a's public key", id)
		}
	}
	c.done()
	p, err := onion.ParseRelayKeysResponse(w.get("relaykeys-response"))
	if err != nil || p.Relay != "a" || !bytes.Equal(p.IDs(), []byte{1, 2}) {
		t.Fatalf("relaykeys-response parses to %+v, %v", p, err)
	}
	for _, id := range []byte{1, 2} {
		if k, ok := p.Lookup(id); !ok || !bytes.Equal(k, pub) {
			t.Errorf("relaykeys-response: key id %d", id)
		}
	}
	w.eq("relaykeys-response", enc(p), "re-encoding")
	c = w.cut("relaykeys-response-refused")
	if c.u8() != 2 || c.u8() != 1 || string(c.n(c.u16())) != "relay shutting down" {
		t.Error("relaykeys-response-refused: not version 2, status 1, message")
	}
	c.done()
	if r, err := onion.ParseRelayKeysResponse(w.get("relaykeys-response-refused")); err != nil || r.Error != "relay shutting down" {
		t.Errorf("relaykeys-response-refused parses to %+v, %v", r, err)
	}
	w.sameAsGolden(golden(t, "onion/testdata/golden-relaykeys.json"), "relaykeys-request", "request",
		"relaykeys-response", "response", "relaykeys-response-refused", "response_refused")
}

// starCtx is the documented release context of the report vector.
func starCtx(app, epoch string, policy byte, k int) []byte {
	b := append([]byte{byte(len(app))}, app...)
	b = append(append(b, byte(len(epoch))), epoch...)
	return append(append(b, policy), u16(k)...)
}

func hkdf32(t *testing.T, ikm []byte, info string) []byte {
	out, err := hkdf.Key(sha256.New, ikm, []byte("crowdlog-v2"), info, 32)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// docPipelineCanonical is the canonical text of the document's pipeline
// definition (query, no options, ft-u, k = 3), written out by hand as
// docs/wire.md states it, not by pipelines/pipeline.Canonical.
const docPipelineCanonical = "crowdlog-v1 pipeline\napp=query\noptions=\npolicy=ft-u\nshamir_k=3\n"

// starPipelineCtx is ctx with a pipeline digest: ctx ‖ str8(meaning)
// (00 when empty) ‖ pipeline[32].
func starPipelineCtx(app, epoch string, policy byte, k int, meaning string, digest []byte) []byte {
	b := append(starCtx(app, epoch, policy, k), byte(len(meaning)))
	return append(append(b, meaning...), digest...)
}

// starDerived is what the document derives from ω and a ctx, with the
// standard library's HKDF and SHA-256 and circl's group only.
type starDerived struct {
	tag, seed, commit, key []byte
	coeffs                 []group.Scalar
}

func deriveStar(t *testing.T, omega, ctx []byte, k int) starDerived {
	var d starDerived
	d.tag = hkdf32(t, omega, "crowdlog-v2 tag"+string(ctx))
	d.seed = hkdf32(t, omega, "crowdlog-v2 poly"+string(ctx))
	for i := 0; i < k; i++ {
		a := g.HashToScalar(append(append([]byte{}, d.seed...), u16(i)...), []byte("crowdlog-v1 poly"))
		d.coeffs = append(d.coeffs, a)
		d.commit = append(d.commit, encE(g.NewElement().MulGen(a))...)
	}
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 key"))
	h.Write(d.tag)
	h.Write(enc(d.coeffs[0]))
	d.key = h.Sum(nil)
	return d
}

// ftuShare is the FT_u share of a user secret for a derivation: x =
// HashToScalar(secret ‖ tag, "crowdlog-v1 ftu-x"), y = f(x), and the unit
// id HMAC-SHA-256(secret, "unit" ‖ tag)[:16].
func (d starDerived) ftuShare(user []byte) (x, y group.Scalar, unit []byte) {
	x = g.HashToScalar(append(append([]byte{}, user...), d.tag...), []byte("crowdlog-v1 ftu-x"))
	y = g.NewScalar()
	for i := len(d.coeffs) - 1; i >= 0; i-- {
		y.Mul(y, x)
		y.Add(y, d.coeffs[i])
	}
	m := hmac.New(sha256.New, user)
	m.Write([]byte("unit"))
	m.Write(d.tag)
	return x, y, m.Sum(nil)[:16]
}

func checkStar(w *wire) {
	t := w.t
	const k = 3
	omega := w.get("star-omega")
	user := w.get("star-user-secret")
	ctx := starCtx(docApp, docEpoch, 2, k)
	w.eq("star-ctx", ctx, "u8 len(app) ‖ app ‖ u8 len(epoch) ‖ epoch ‖ u8 policy ‖ u16 k")
	tag := hkdf32(t, omega, "crowdlog-v2 tag"+string(ctx))
	w.eq("star-tag", tag, "HKDF-SHA-256(ω, \"crowdlog-v2\", \"crowdlog-v2 tag\" ‖ ctx)")
	seed := hkdf32(t, omega, "crowdlog-v2 poly"+string(ctx))
	w.eq("star-poly-seed", seed, "HKDF-SHA-256(ω, \"crowdlog-v2\", \"crowdlog-v2 poly\" ‖ ctx)")
	var coeffs []group.Scalar
	var commit []byte
	for i := 0; i < k; i++ {
		a := g.HashToScalar(append(append([]byte{}, seed...), u16(i)...), []byte("crowdlog-v1 poly"))
		coeffs = append(coeffs, a)
		commit = append(commit, encE(g.NewElement().MulGen(a))...)
	}
	w.eq("star-commitment", commit, "C_i = a_i·G")
	w.eq("star-secret-f0", enc(coeffs[0]), "f(0) = a_0")
	h := sha256.New()
	h.Write([]byte("crowdlog-v1 key"))
	h.Write(tag)
	h.Write(enc(coeffs[0]))
	key := h.Sum(nil)
	w.eq("star-aead-key", key, "SHA-256(\"crowdlog-v1 key\" ‖ tag ‖ f(0))")
	x := g.HashToScalar(append(append([]byte{}, user...), tag...), []byte("crowdlog-v1 ftu-x"))
	y := g.NewScalar()
	for i := k - 1; i >= 0; i-- {
		y.Mul(y, x)
		y.Add(y, coeffs[i])
	}
	m := hmac.New(sha256.New, user)
	m.Write([]byte("unit"))
	m.Write(tag)
	unit := m.Sum(nil)[:16]
	w.eq("star-unit-id", unit, "HMAC-SHA-256(user secret, \"unit\" ‖ tag)[:16]")

	// the payload
	const primary, secondary = "new york weather", "New York  Weather"
	c := w.cut("star-payload")
	if c.u8() != 2 || string(c.n(c.u16())) != primary || string(c.n(c.u16())) != secondary || !bytes.Equal(c.n(16), unit) {
		t.Error("star-payload: not version 2, primary, secondary, unit")
	}
	c.done()
	pl, err := star.ParsePayload(w.get("star-payload"))
	if err != nil || pl.Primary != primary || pl.Secondary != secondary || !bytes.Equal(pl.Unit[:], unit) {
		t.Errorf("star-payload parses to %+v, %v", pl, err)
	}

	// the report, field by field
	c = w.cut("star-report")
	if c.u8() != 2 || c.str8() != docApp || c.str8() != docEpoch || c.u8() != 2 || c.u16() != k {
		t.Error("star-report: not version 2, query, 2006-03, FT_u, k = 3")
	}
	id := c.n(16)
	if !bytes.Equal(c.n(32), tag) || !bytes.Equal(c.n(32), enc(x)) || !bytes.Equal(c.n(32), enc(y)) {
		t.Error("star-report: tag or share differs from the derivation")
	}
	if c.u16() != k || !bytes.Equal(c.n(32*k), commit) {
		t.Error("star-report: commitment differs from the derivation")
	}
	ct := c.n(c.u32())
	c.done()
	w.eq("star-report-id", id, "the report's id field")
	ad := append(append(append([]byte("crowdlog-v2 report"), ctx...), id...), tag...)
	a, err := chacha20poly1305.NewX(key)
	if err != nil {
		t.Fatal(err)
	}
	w.eq("star-aead-nonce", ct[:24], "the ciphertext's first 24 bytes")
	pt, err := a.Open(nil, ct[:24], ct[24:], ad)
	if err != nil {
		t.Fatalf("star-report does not open with XChaCha20-Poly1305 under the derived key and the documented AD: %v", err)
	}
	w.eq("star-payload", pt, "the report's AEAD plaintext")
	rep, err := star.ParseReport(w.get("star-report"))
	if err != nil {
		t.Fatalf("star-report does not parse: %v", err)
	}
	if rep.App != docApp || rep.Epoch != docEpoch || rep.Policy != star.FTu || rep.K != k || !bytes.Equal(rep.ID[:], id) ||
		!bytes.Equal(rep.Tag[:], tag) || !rep.Share.X.IsEqual(x) || !rep.Share.Y.IsEqual(y) || !bytes.Equal(rep.Commitment, commit) || !bytes.Equal(rep.Ciphertext, ct) {
		t.Errorf("star-report parses to other fields: %+v", rep)
	}
	if s, err := star.DeriveSealing(omega, docApp, docEpoch, star.FTu, k); err != nil || !bytes.Equal(s.Tag[:], tag) || !bytes.Equal(s.Commitment(), commit) {
		t.Errorf("star.DeriveSealing disagrees with the document: %v", err)
	}
	var k32 [32]byte
	copy(k32[:], key)
	if p, err := star.OpenPayload(k32, rep); err != nil || p != pl {
		t.Errorf("star.OpenPayload of star-report: %+v, %v", p, err)
	}
	if k2 := star.KeyFromSecret(rep.Tag, coeffs[0]); !bytes.Equal(k2[:], key) {
		t.Error("star.KeyFromSecret disagrees with the document")
	}
	w.eq("star-report", enc(rep), "re-encoding")

	// an application with options: click with url-level=domain
	ctxM := append(starCtx("click", docEpoch, 2, k), byte(len("url-level=domain")))
	ctxM = append(ctxM, "url-level=domain"...)
	w.eq("star-ctx-click", ctxM, "ctx ‖ str8(meaning)")
	tagM := hkdf32(t, omega, "crowdlog-v2 tag"+string(ctxM))
	w.eq("star-tag-click", tagM, "HKDF-SHA-256(ω, \"crowdlog-v2\", \"crowdlog-v2 tag\" ‖ ctx with meaning)")
	if s, err := star.DeriveSealingIn(omega, star.Context{App: "click", Meaning: "url-level=domain", Epoch: docEpoch, Policy: star.FTu, K: k}); err != nil || !bytes.Equal(s.Tag[:], tagM) {
		t.Errorf("star.DeriveSealingIn with a meaning disagrees with the document: %v", err)
	}

	checkStarPipeline(w, omega, user, w.get("star-report-id"), w.get("star-aead-nonce"))

	gs := golden(t, "star/testdata/golden-sealing.json")
	w.sameAsGolden(gs, "star-omega", "omega", "star-user-secret", "user_secret", "star-tag", "tag",
		"star-commitment", "commitment", "star-secret-f0", "secret_f0", "star-aead-key", "aead_key", "star-unit-id", "unit_id")
	if gs["share_x"] != hex.EncodeToString(enc(x)) || gs["share_y"] != hex.EncodeToString(enc(y)) {
		t.Error("the golden share differs from the document's derivation")
	}
	w.sameAsGolden(golden(t, "star/testdata/golden-payload.json"), "star-payload", "encoded")
	w.sameAsGolden(golden(t, "star/testdata/golden-report.json"), "star-report", "encoded", "star-report-id", "id")
}

// checkStarPipeline checks the pipeline sealing (query / ft-u / k = 3
// bound to the digest of its canonical text) and its version-3 report,
// sealed with star-report's id and nonce.
func checkStarPipeline(w *wire, omega, user, id, nonce []byte) {
	t := w.t
	const k = 3
	const primary, secondary = "new york weather", "New York  Weather"
	canon := w.get("star-pipeline-canonical")
	if string(canon) != docPipelineCanonical {
		t.Errorf("star-pipeline-canonical is %q, the document's text %q", canon, docPipelineCanonical)
	}
	digest := sha256.Sum256(canon)
	w.eq("star-pipeline-digest", digest[:], "SHA-256 of star-pipeline-canonical")
	ctx := starPipelineCtx(docApp, docEpoch, 2, k, "", digest[:])
	w.eq("star-ctx-pipeline", ctx, "u8 len(app) ‖ app ‖ u8 len(epoch) ‖ epoch ‖ u8 policy ‖ u16 k ‖ str8(\"\") ‖ pipeline")
	d := deriveStar(t, omega, ctx, k)
	w.eq("star-tag-pipeline", d.tag, "HKDF-SHA-256(ω, \"crowdlog-v2\", \"crowdlog-v2 tag\" ‖ ctx with the pipeline digest)")
	x, y, unit := d.ftuShare(user)

	// the report, field by field: version 3, the digest after k
	c := w.cut("star-report-pipeline")
	if c.u8() != 3 || c.str8() != docApp || c.str8() != docEpoch || c.u8() != 2 || c.u16() != k {
		t.Error("star-report-pipeline: not version 3, query, 2006-03, FT_u, k = 3")
	}
	if !bytes.Equal(c.n(32), digest[:]) {
		t.Error("star-report-pipeline: the field after k is not star-pipeline-digest")
	}
	if !bytes.Equal(c.n(16), id) {
		t.Error("star-report-pipeline: id is not star-report-id")
	}
	if !bytes.Equal(c.n(32), d.tag) || !bytes.Equal(c.n(32), enc(x)) || !bytes.Equal(c.n(32), enc(y)) {
		t.Error("star-report-pipeline: tag or share differs from the pipeline derivation")
	}
	if c.u16() != k || !bytes.Equal(c.n(32*k), d.commit) {
		t.Error("star-report-pipeline: commitment differs from the pipeline derivation")
	}
	ct := c.n(c.u32())
	c.done()
	if len(ct) < 24+16 || !bytes.Equal(ct[:24], nonce) {
		t.Fatal("star-report-pipeline: the ciphertext does not start with star-aead-nonce")
	}
	ad := append([]byte("crowdlog-v2 report"), starCtx(docApp, docEpoch, 2, k)...)
	ad = append(append(append(ad, digest[:]...), id...), d.tag...)
	a, err := chacha20poly1305.NewX(d.key)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := a.Open(nil, ct[:24], ct[24:], ad)
	if err != nil {
		t.Fatalf("star-report-pipeline does not open with XChaCha20-Poly1305 under the pipeline sealing's key and the documented AD (with the digest): %v", err)
	}
	pc := &cut{t: t, name: "star-report-pipeline payload", b: pt}
	if pc.u8() != 2 || string(pc.n(pc.u16())) != primary || string(pc.n(pc.u16())) != secondary || !bytes.Equal(pc.n(16), unit) {
		t.Error("star-report-pipeline: payload is not version 2, primary, secondary, the unit id of the pipeline tag")
	}
	pc.done()

	rep, err := star.ParseReport(w.get("star-report-pipeline"))
	if err != nil {
		t.Fatalf("star-report-pipeline does not parse: %v", err)
	}
	if rep.App != docApp || rep.Epoch != docEpoch || rep.Policy != star.FTu || rep.K != k || rep.Pipeline != digest || !bytes.Equal(rep.ID[:], id) ||
		!bytes.Equal(rep.Tag[:], d.tag) || !rep.Share.X.IsEqual(x) || !rep.Share.Y.IsEqual(y) || !bytes.Equal(rep.Commitment, d.commit) || !bytes.Equal(rep.Ciphertext, ct) {
		t.Errorf("star-report-pipeline parses to other fields: %+v", rep)
	}
	w.eq("star-report-pipeline", enc(rep), "re-encoding")
	s, err := star.DeriveSealingIn(omega, star.Context{App: docApp, Epoch: docEpoch, Policy: star.FTu, K: k, Pipeline: digest})
	if err != nil || !bytes.Equal(s.Tag[:], d.tag) || !bytes.Equal(s.Commitment(), d.commit) || s.Pipeline != digest {
		t.Errorf("star.DeriveSealingIn with a pipeline digest disagrees with the document: %v", err)
	}
	var k32 [32]byte
	copy(k32[:], d.key)
	if p, err := star.OpenPayload(k32, rep); err != nil || p.Primary != primary || p.Secondary != secondary || !bytes.Equal(p.Unit[:], unit) {
		t.Errorf("star.OpenPayload of star-report-pipeline: %+v, %v", p, err)
	}
	// the digest is bound by the AD: relabelled to another digest, or to
	// none, the report does not open under its key
	for _, other := range [][32]byte{{}, sha256.Sum256([]byte("another pipeline"))} {
		r2 := *rep
		r2.Pipeline = other
		if _, err := star.OpenPayload(k32, &r2); err == nil {
			t.Errorf("star-report-pipeline relabelled to digest %x still opens", other)
		}
	}

	gp := golden(t, "star/testdata/golden-report-pipeline.json")
	if gp["canonical_text"] != string(canon) {
		t.Error("star-pipeline-canonical differs from golden canonical_text")
	}
	w.sameAsGolden(gp, "star-pipeline-digest", "pipeline", "star-ctx-pipeline", "ctx", "star-tag-pipeline", "tag",
		"star-report-pipeline", "encoded", "star-report-id", "id")
	for name, want := range map[string][]byte{"commitment": d.commit, "secret_f0": enc(d.coeffs[0]), "aead_key": d.key,
		"share_x": enc(x), "share_y": enc(y), "unit_id": unit, "payload": pt, "ciphertext": ct} {
		if gp[name] != hex.EncodeToString(want) {
			t.Errorf("golden-report-pipeline.json %s differs from the document's derivation", name)
		}
	}
}

// The onion route of the document: the star-report vector wrapped for
// [relay-a, relay-b, aggregator], key ids 1, 2, 3, each layer's HPKE
// ephemeral key derived from its ikmE vector (RFC 9180 §7.1.3 DeriveKeyPair).
var onionHops = []struct {
	role, layer string
	id          byte
	kind        onion.HopKind
	size        int
}{
	{"aggregator", "onion-layer-aggregator", 3, onion.HopDeliver, 512},
	{"relay-b", "onion-layer-relay-b", 2, onion.HopKafka, 1024},
	{"relay-a", "onion-layer-relay-a", 1, onion.HopRelay, 1536},
}

var hpkeSuite = hpke.NewSuite(hpke.KEM_X25519_HKDF_SHA256, hpke.KDF_HKDF_SHA256, hpke.AEAD_ChaCha20Poly1305)

// onionPlaintext is the documented layer plaintext: version ‖ kind ‖ hop
// field ‖ u32 len inner ‖ inner ‖ zeros up to size − 50.
func onionPlaintext(kind onion.HopKind, field []byte, hasField bool, inner []byte, size int) []byte {
	pt := []byte{2, byte(kind)}
	if hasField {
		pt = append(append(pt, byte(len(field))), field...)
	}
	pt = binary.BigEndian.AppendUint32(pt, uint32(len(inner)))
	pt = append(pt, inner...)
	return append(pt, make([]byte, size-2-32-16-len(pt))...)
}

// sealOnion seals each layer with circl's HPKE from the documented inputs.
func sealOnion(t *testing.T, pubs map[string][]byte, ikm map[string][]byte, report []byte) map[string][]byte {
	t.Helper()
	kem := hpke.KEM_X25519_HKDF_SHA256.Scheme()
	out := map[string][]byte{}
	inner := report
	for _, h := range onionHops {
		pk, err := kem.UnmarshalBinaryPublicKey(pubs[h.role])
		if err != nil {
			t.Fatal(err)
		}
		var field []byte
		switch h.kind {
		case onion.HopKafka:
			field = report[1+1+len(docApp)+1+len(docEpoch)+1+2+16:][:1] // the tag's first byte
		case onion.HopRelay:
			field = []byte("crowdlog.relay.b")
		}
		pt := onionPlaintext(h.kind, field, h.kind != onion.HopDeliver, inner, h.size)
		snd, err := hpkeSuite.NewSender(pk, []byte("crowdlog-v2 onion "+h.role))
		if err != nil {
			t.Fatal(err)
		}
		encap, sealer, err := snd.Setup(bytes.NewReader(ikm[h.role]))
		if err != nil {
			t.Fatal(err)
		}
		hdr := []byte{2, h.id}
		ct, err := sealer.Seal(pt, hdr)
		if err != nil {
			t.Fatal(err)
		}
		layer := append(append(hdr, encap...), ct...)
		out[h.layer] = layer
		inner = layer
	}
	return out
}

func checkOnion(w *wire) {
	t := w.t
	pubs, ikm := map[string][]byte{}, map[string][]byte{}
	var keys []*onion.KeyPair
	kem := hpke.KEM_X25519_HKDF_SHA256.Scheme()
	for _, h := range onionHops {
		priv := w.get("onion-key-" + h.role + "-private")
		pub := w.get("onion-key-" + h.role + "-public")
		sk, err := ecdh.X25519().NewPrivateKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sk.PublicKey().Bytes(), pub) {
			t.Errorf("onion-key-%s-public is not X25519(private, 9)", h.role)
		}
		pubs[h.role], ikm[h.role] = pub, w.get("onion-ikme-"+h.role)
		ksk, err := kem.UnmarshalBinaryPrivateKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		kp := &onion.KeyPair{ID: h.id, Private: ksk, Role: h.role}
		if err := kp.Prepare(); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, kp)
	}
	report := w.get("star-report")
	sealed := sealOnion(t, pubs, ikm, report)
	for _, h := range onionHops {
		layer := w.get(h.layer)
		if len(layer) != h.size || !onion.IsSizeClass(len(layer)) {
			t.Errorf("%s: %d bytes, the document says %d", h.layer, len(layer), h.size)
		}
		w.eq(h.layer, sealed[h.layer], "HPKE base mode (circl) of the documented plaintext, info and AAD")
	}
	// independent opening of relay a's layer: the plaintext as documented
	la := w.get("onion-layer-relay-a")
	ksk, _ := kem.UnmarshalBinaryPrivateKey(w.get("onion-key-relay-a-private"))
	rcv, err := hpkeSuite.NewReceiver(ksk, []byte("crowdlog-v2 onion relay-a"))
	if err != nil {
		t.Fatal(err)
	}
	op, err := rcv.Setup(la[2:34])
	if err != nil {
		t.Fatal(err)
	}
	pt, err := op.Open(la[34:], la[:2])
	if err != nil {
		t.Fatalf("onion-layer-relay-a does not open with HPKE (info \"crowdlog-v2 onion relay-a\", AAD version ‖ key id): %v", err)
	}
	c := &cut{t: t, name: "onion-layer-relay-a plaintext", b: pt}
	if c.u8() != 2 || c.u8() != 1 || c.str8() != "crowdlog.relay.b" || !bytes.Equal(c.n(c.u32()), w.get("onion-layer-relay-b")) {
		t.Error("onion-layer-relay-a's plaintext is not version 2, HopRelay, crowdlog.relay.b, relay b's layer")
	}
	if slices.ContainsFunc(c.b, func(b byte) bool { return b != 0 }) {
		t.Error("onion-layer-relay-a: non-zero padding")
	}
	// the code peels the route
	layer := la
	for i := len(onionHops) - 1; i >= 0; i-- {
		h := onionHops[i]
		hop, next, err := onion.Peel(keys, layer)
		if err != nil || hop.Kind != h.kind {
			t.Fatalf("onion.Peel of %s: %+v, %v", h.layer, hop, err)
		}
		switch h.kind {
		case onion.HopRelay:
			if hop.Subject != protocol.RelaySubject("b") {
				t.Errorf("%s names %q", h.layer, hop.Subject)
			}
		case onion.HopKafka:
			rep, _ := star.ParseReport(report)
			if rep == nil || !bytes.Equal(hop.Key, onion.ReportKey(rep.Tag)) {
				t.Errorf("%s's Kafka key %x is not the tag's first byte", h.layer, hop.Key)
			}
		}
		layer = next
	}
	if !bytes.Equal(layer, report) {
		t.Error("the aggregator's layer does not hold star-report")
	}
	// a layer for one role does not open at another
	wrong := *keys[2] // relay a's key pair, id 1, under relay b's role
	wrong.Role = "relay-b"
	if _, _, err := onion.Peel([]*onion.KeyPair{&wrong}, la); err == nil {
		t.Error("relay a's layer opens under another role's info")
	}
	sum := sha256.Sum256(la)
	id := base64.RawURLEncoding.EncodeToString(sum[:16])
	w.eq("onion-layer-relay-a-msgid", []byte(id), "base64url(SHA-256(layer)[:16])")
	w.eq("onion-layer-relay-a-msgid", []byte(protocol.LayerMsgID(la)), "protocol.LayerMsgID")

	gk := golden(t, "onion/testdata/golden-onion.json")
	w.sameAsGolden(gk, "onion-key-relay-a-private", "key1_private", "onion-key-relay-a-public", "key1_public",
		"onion-key-relay-b-private", "key2_private", "onion-key-relay-b-public", "key2_public",
		"onion-key-aggregator-private", "key3_private", "onion-key-aggregator-public", "key3_public")
}

// PDD vectors: a client's Ed25519 signing key from a 32-byte seed (RFC 8032
// §5.1.5), its X25519 key, and its signed register and ping requests.
func pddSigned(t *testing.T, seed []byte, purpose, body string) string {
	sig := ed25519.Sign(ed25519.NewKeyFromSeed(seed), append([]byte("crowdlog-v2 pdd "+purpose+"\x00"), body...))
	return `{"body":` + body + `,"sig":"` + base64.StdEncoding.EncodeToString(sig) + `"}`
}

const (
	pddClientID = "5f2c1e0a9b8d7c6e5f4a3b2c1d0e9f8a"
	pddCampaign = "health-2006"
	pddSeq      = 1700000000000000001
)

func pddBodies(seed, x25519Priv []byte) (register, ping string) {
	spub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	xk, _ := ecdh.X25519().NewPrivateKey(x25519Priv)
	b64 := base64.StdEncoding.EncodeToString
	register = `{"public_key":"` + b64(xk.PublicKey().Bytes()) + `","sign_key":"` + b64(spub) + `"}`
	ping = fmt.Sprintf(`{"client_id":%q,"campaign":%q,"seq":%d}`, pddClientID, pddCampaign, uint64(pddSeq))
	return register, ping
}

var pddSubmissionY = []uint64{1, 0xfffffffffffffffe, 0x0123456789abcdef}

func pddSubmission() []byte {
	b := []byte{2, 1, byte(len(pddCampaign))}
	b = append(b, pddCampaign...)
	b = binary.BigEndian.AppendUint32(b, 13210)
	b = binary.BigEndian.AppendUint32(b, 7)
	b = binary.BigEndian.AppendUint16(b, 2)
	b = binary.BigEndian.AppendUint32(b, uint32(len(pddSubmissionY)))
	for _, y := range pddSubmissionY {
		b = binary.LittleEndian.AppendUint64(b, y)
	}
	return b
}

func checkPDD(w *wire) {
	t := w.t
	seed, xpriv := w.get("pdd-sign-seed"), w.get("pdd-x25519-private")
	spub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	w.eq("pdd-sign-public", spub, "Ed25519 public key of the seed")
	regBody, pingBody := pddBodies(seed, xpriv)
	w.eq("pdd-register", []byte(pddSigned(t, seed, blind.PurposeRegister, regBody)), "the signed register request")
	w.eq("pdd-ping", []byte(pddSigned(t, seed, blind.PurposePing, pingBody)), "the signed ping request")
	w.eq("pdd-ping-signed-bytes", append([]byte("crowdlog-v2 pdd ping\x00"), pingBody...), "the bytes the ping's signature covers")

	reg, err := blind.ParseRegister(w.get("pdd-register"))
	if err != nil || !bytes.Equal(reg.SignKey, spub) {
		t.Errorf("pdd-register: %+v, %v", reg, err)
	}
	p, s, err := blind.ParsePing(w.get("pdd-ping"))
	if err != nil || p.ClientID != pddClientID || p.Campaign != pddCampaign || p.Seq != pddSeq {
		t.Fatalf("pdd-ping parses to %+v, %v", p, err)
	}
	if err := s.Verify(spub, blind.PurposePing); err != nil {
		t.Errorf("pdd-ping: %v", err)
	}
	if err := s.Verify(spub, blind.PurposeDeposit); err == nil {
		t.Error("pdd-ping's signature verifies as a deposit")
	}
	if !ed25519.Verify(spub, w.get("pdd-ping-signed-bytes"), s.Sig) {
		t.Error("pdd-ping's signature does not cover pdd-ping-signed-bytes")
	}
	if signed, err := blind.SignMessage(ed25519.NewKeyFromSeed(seed), blind.PurposePing, p); err != nil {
		t.Fatal(err)
	} else if b, _ := json.Marshal(signed); !bytes.Equal(b, w.get("pdd-ping")) {
		t.Errorf("blind.SignMessage gives %s", b)
	}

	w.eq("pdd-submission", pddSubmission(), "version ‖ kind ‖ instance ‖ member ‖ vector")
	m, err := blind.Parse(w.get("pdd-submission"))
	if err != nil || m.Submission == nil {
		t.Fatalf("pdd-submission parses to %+v, %v", m, err)
	}
	sub := m.Submission
	want := blind.Instance{Campaign: pddCampaign, Round: 13210, Group: 7}
	if sub.Instance != want || sub.Member != 2 || !slices.Equal(sub.Y, pddSubmissionY) {
		t.Errorf("pdd-submission parses to %+v", sub)
	}
	w.eq("pdd-submission", enc(sub), "re-encoding")
	w.eq("pdd-vectors-key", []byte(want.String()), "Instance.String()")
}

// checkVectorsControl checks the signed control record of topic vectors:
// the signed bytes cut by hand, the signature made again with
// crypto/ed25519 over them, the record assembled by hand, then
// ParseVectorsControl, VectorsControlSignedBytes, VectorsControl.Verify,
// blind.Parse of the body and protocol.SignVectorsControl.
func checkVectorsControl(w *wire) {
	t := w.t
	key := ed25519.NewKeyFromSeed(w.get("control-sign-seed"))
	pub := key.Public().(ed25519.PublicKey)
	const ctx = "crowdlog-v1 pdd vectors control\x00"
	c := w.cut("vectors-control-signed-bytes")
	if got := string(c.n(len(ctx))); got != ctx {
		t.Errorf("vectors-control-signed-bytes: context %q", got)
	}
	version := c.u8()
	topic := c.str8()
	partition := c.u32()
	campaign := c.str8()
	issued, notAfter := binary.BigEndian.Uint64(c.n(8)), binary.BigEndian.Uint64(c.n(8))
	body := c.n(c.u32())
	c.done()
	if version != 0x83 || topic != "vectors" || partition != 1 || campaign != "health-2006" || issued != 1767225600 || notAfter != 1767225600+3600 ||
		!bytes.Equal(body, []byte{2, 4, 0, 0, 0x33, 0x9a}) {
		t.Errorf("vectors-control-signed-bytes: %#x %s %d %s %d %d %x", version, topic, partition, campaign, issued, notAfter, body)
	}
	signed := w.get("vectors-control-signed-bytes")
	rec := append(bytes.Clone(signed[len(ctx):]), ed25519.Sign(key, signed)...)
	w.eq("vectors-control-tick-signed", rec, "the signed tick assembled by hand")

	got, err := protocol.ParseVectorsControl(w.get("vectors-control-tick-signed"))
	if err != nil || got.Topic != topic || got.Partition != partition || got.Campaign != campaign || got.Issued != int64(issued) ||
		got.NotAfter != int64(notAfter) || !bytes.Equal(got.Body, body) {
		t.Fatalf("vectors-control-tick-signed parses to %+v, %v", got, err)
	}
	w.eq("vectors-control-signed-bytes", protocol.VectorsControlSignedBytes(got), "protocol.VectorsControlSignedBytes")
	if err := got.Verify(pub); err != nil {
		t.Errorf("vectors-control-tick-signed: %v", err)
	}
	if m, err := blind.Parse(got.Body); err != nil || m.Tick == nil || m.Tick.Day != 13210 {
		t.Errorf("vectors-control-tick-signed: body %+v, %v", m, err)
	}
	for _, change := range []func(*protocol.VectorsControl){
		func(c *protocol.VectorsControl) { c.Partition = 0 }, func(c *protocol.VectorsControl) { c.Campaign = "health-2007" },
		func(c *protocol.VectorsControl) { c.Topic = "reports" }, func(c *protocol.VectorsControl) { c.Issued-- },
	} {
		other := *got
		change(&other)
		if other.Verify(pub) == nil {
			t.Errorf("vectors-control-tick-signed verifies changed to %+v", other)
		}
	}
	again, err := protocol.SignVectorsControl(key, body, protocol.VectorsTarget{Topic: topic, Partition: partition, Campaign: campaign},
		time.Unix(int64(issued), 0), time.Duration(notAfter-issued)*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w.eq("vectors-control-tick-signed", again, "protocol.SignVectorsControl")
}

// checkControl checks the signed epoch control record: the signed bytes
// cut by hand, the signature made again with crypto/ed25519 over them,
// the JSON written by hand, then ParseControl, Control.Verify and
// protocol.SignControl.
func checkControl(w *wire) {
	t := w.t
	seed := w.get("control-sign-seed")
	key := ed25519.NewKeyFromSeed(seed)
	pub := key.Public().(ed25519.PublicKey)
	w.eq("control-sign-public", pub, "Ed25519 public key of the seed")
	c := w.cut("control-signed-bytes")
	if ctx := string(c.n(len("crowdlog-v1 epoch control bound") + 1)); ctx != "crowdlog-v1 epoch control bound\x00" {
		t.Errorf("control-signed-bytes: context %q", ctx)
	}
	op, app, epoch := c.str8(), c.str8(), c.str8()
	pipe := [32]byte(c.n(32))
	topic := c.str8()
	partitions, partition := c.u32(), c.u32()
	issued, notAfter := binary.BigEndian.Uint64(c.n(8)), binary.BigEndian.Uint64(c.n(8))
	c.done()
	if op != "close-epoch" || app != "query" || epoch != "2006-03" || pipe != controlVectorPipeline() || topic != "reports" ||
		partitions != 8 || partition != 3 || issued != 1767225600 || notAfter != 1767225600+3600 {
		t.Errorf("control-signed-bytes: %s %s %s %x %s %d %d %d %d", op, app, epoch, pipe, topic, partitions, partition, issued, notAfter)
	}
	sig := ed25519.Sign(key, w.get("control-signed-bytes"))
	rec := fmt.Sprintf(`{"v":3,"op":%q,"app":%q,"epoch":%q,"pipeline":"%x","topic":%q,"partitions":%d,"partition":%d,"issued":%d,"not_after":%d,"sig":%q}`,
		op, app, epoch, pipe, topic, partitions, partition, issued, notAfter, base64.StdEncoding.EncodeToString(sig))
	w.eq("control-close-signed", []byte(rec), "the signed close written by hand")

	got, err := protocol.ParseControl(w.get("control-close-signed"))
	if err != nil || got.Version != protocol.ControlBound || got.Op != op || got.App != app || got.Epoch != epoch || got.Pipeline != pipe || got.Topic != topic ||
		got.Partitions != partitions || got.Partition != partition || got.Issued != int64(issued) || got.NotAfter != int64(notAfter) {
		t.Fatalf("control-close-signed parses to %+v, %v", got, err)
	}
	w.eq("control-signed-bytes", protocol.ControlSignedBytes(got), "protocol.ControlSignedBytes")
	if err := got.Verify(pub); err != nil {
		t.Errorf("control-close-signed: %v", err)
	}
	for _, change := range []func(*protocol.Control){
		func(c *protocol.Control) { c.Epoch = "2006-04" }, func(c *protocol.Control) { c.Pipeline[0] ^= 1 },
		func(c *protocol.Control) { c.Topic = "decrypted" },
	} {
		other := *got
		change(&other)
		if other.Verify(pub) == nil {
			t.Errorf("control-close-signed verifies changed to %+v", other)
		}
	}
	b, err := protocol.SignControl(key, op, app, epoch, protocol.ControlTarget{Pipeline: pipe, Topic: topic, Partition: partition, Partitions: partitions},
		time.Unix(int64(issued), 0), protocol.ControlValidity)
	if err != nil {
		t.Fatal(err)
	}
	w.eq("control-close-signed", b, "protocol.SignControl")
}

// controlVectorPipeline is the pipeline digest of the control vector:
// the bytes 0x00, 0x01, …, 0x1f.
func controlVectorPipeline() (d [32]byte) {
	for i := range d {
		d[i] = byte(i)
	}
	return d
}

// The mask vectors: member 0 (pdd-x25519-private) and member 1
// (pdd-peer-x25519-private) of a group of two in the submission's instance.
var pddV = []uint64{5, 0, 1}

func pddInfo() []byte {
	b := append([]byte("crowdlog-v1 pdd pair\x00"), byte(len(pddCampaign)))
	b = append(b, pddCampaign...)
	b = binary.BigEndian.AppendUint32(b, 13210)
	return binary.BigEndian.AppendUint32(b, 7)
}

// aesPRG is the first n bytes of the AES-128-CTR keystream of key, zero IV.
func aesPRG(key []byte, n int) []byte {
	blk, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	out := make([]byte, n)
	cipher.NewCTR(blk, make([]byte, aes.BlockSize)).XORKeyStream(out, out)
	return out
}

// pddMasks derives the pair seed, the first L words of its mask, the self
// mask seed and the blinded vector of member 0 from the documented inputs.
func pddMasks(t *testing.T, xi, xj, secret []byte) (pair, mask, self, y []byte) {
	ski, err := ecdh.X25519().NewPrivateKey(xi)
	if err != nil {
		t.Fatal(err)
	}
	skj, err := ecdh.X25519().NewPrivateKey(xj)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := ski.ECDH(skj.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if pair, err = hkdf.Key(sha256.New, shared, nil, string(pddInfo()), 16); err != nil {
		t.Fatal(err)
	}
	mask = aesPRG(pair, 8*len(pddV))
	k, err := hkdf.Key(sha256.New, secret, nil, "crowdlog-v2 pdd deal\x00"+string(pddInfo()), 48)
	if err != nil {
		t.Fatal(err)
	}
	self = k[:16]
	selfMask := aesPRG(self, 8*len(pddV))
	for i, v := range pddV { // member 0 < member 1: sign +1
		v += binary.LittleEndian.Uint64(selfMask[8*i:]) + binary.LittleEndian.Uint64(mask[8*i:])
		y = binary.LittleEndian.AppendUint64(y, v)
	}
	return pair, mask, self, y
}

func checkPDDMasks(w *wire) {
	t := w.t
	xi, xj, secret := w.get("pdd-x25519-private"), w.get("pdd-peer-x25519-private"), w.get("pdd-client-secret")
	pair, mask, self, y := pddMasks(t, xi, xj, secret)
	w.eq("pdd-pair-seed", pair, "HKDF-SHA-256(X25519(x_0, y_1), no salt, info_in, 16)")
	w.eq("pdd-pair-mask", mask, "AES-128-CTR(s_01, zero IV)")
	w.eq("pdd-self-seed", self, "HKDF-SHA-256(client secret, no salt, deal info, 48)[:16]")
	w.eq("pdd-blinded-y", y, "V + PRG(b_0) + PRG(s_01)")

	in := blind.Instance{Campaign: pddCampaign, Round: 13210, Group: 7}
	ski, _ := ecdh.X25519().NewPrivateKey(xi)
	skj, _ := ecdh.X25519().NewPrivateKey(xj)
	s01, err := blind.PairSeed(ski, skj.PublicKey().Bytes(), in)
	if err != nil || !bytes.Equal(s01[:], pair) {
		t.Errorf("blind.PairSeed(x_0, y_1) = %x, %v", s01, err)
	}
	if s10, err := blind.PairSeed(skj, ski.PublicKey().Bytes(), in); err != nil || s10 != s01 {
		t.Errorf("blind.PairSeed is not symmetric: %x, %v", s10, err)
	}
	b, _, err := blind.DealSecret(secret, in)
	if err != nil || !bytes.Equal(b[:], self) {
		t.Errorf("blind.DealSecret = %x, %v", b, err)
	}
	var got []byte
	for _, v := range blind.Blind(pddV, 0, []blind.Seed{{}, s01}, b) {
		got = binary.LittleEndian.AppendUint64(got, v)
	}
	w.eq("pdd-blinded-y", got, "blind.Blind")
}

// pddDeal is member 0's deposit in the group of two (the mask vectors'
// keys and secret), made by the client's code path (blind.DealSecret,
// blind.Deal: deterministic from the client secret), signed as chunk 0 of
// 1, and holder 1's answer to the request "nobody dropped". Only the
// printer calls it; checkPDDDeal decodes its output independently.
func pddDeal(t *testing.T, seed, xi, xj, secret []byte) (deposit string, answer []byte) {
	in := blind.Instance{Campaign: pddCampaign, Round: 13210, Group: 7}
	sk0, _ := ecdh.X25519().NewPrivateKey(xi)
	sk1, _ := ecdh.X25519().NewPrivateKey(xj)
	members := [][]byte{sk0.PublicKey().Bytes(), sk1.PublicKey().Bytes()}
	seeds, err := blind.Seeds(sk0, 0, members, in)
	if err != nil {
		t.Fatal(err)
	}
	self, rnd, err := blind.DealSecret(secret, in)
	if err != nil {
		t.Fatal(err)
	}
	d, err := blind.Deal(in, 0, seeds, self, members, blind.Threshold(2), rnd)
	if err != nil {
		t.Fatal(err)
	}
	roots := make([][]byte, len(d.Commit.Roots))
	for h := range roots {
		roots[h] = d.Commit.Roots[h][:]
	}
	req := blind.DepositRequest{ClientID: pddClientID, Seq: pddSeq + 1, Roots: roots, Campaign: pddCampaign, Round: 13210, Group: 7,
		From: 0, Bundles: d.Bundles, Chunk: 0, Chunks: 1}
	signed, err := blind.SignMessage(ed25519.NewKeyFromSeed(seed), blind.PurposeDeposit, req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(signed)
	opened, err := blind.OpenBundle(sk1, in, 1, d.Bundles[1])
	if err != nil {
		t.Fatal(err)
	}
	a, err := blind.MakeAnswer(&blind.Request{Instance: in, N: 2, T: blind.Threshold(2)}, 1, []*blind.Bundle{opened})
	if err != nil {
		t.Fatal(err)
	}
	return string(b), enc(a)
}

const p61 = 1<<61 - 1

// bundleShare is one share of a bundle, cut by hand.
type bundleShare struct {
	j, x  int
	y     [3]uint64
	nonce []byte
}

// pddLeaf is the documented commitment leaf of a share.
func pddLeaf(from, to int, s bundleShare) [32]byte {
	h := sha256.New()
	h.Write([]byte("crowdlog-v2 pdd leaf\x00"))
	h.Write(pddInfo())
	for _, v := range []int{from, to, s.j, s.x} {
		h.Write(u16(v))
	}
	for _, y := range s.y {
		h.Write(binary.BigEndian.AppendUint64(nil, y))
	}
	h.Write(s.nonce)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// merkleRoot pads the leaves with zero hashes to a power of two and hashes
// pairs with SHA-256(0x01 ‖ left ‖ right).
func merkleRoot(leaves [][32]byte) [32]byte {
	n := 1
	for n < len(leaves) {
		n *= 2
	}
	lv := make([][32]byte, n)
	copy(lv, leaves)
	for len(lv) > 1 {
		up := make([][32]byte, len(lv)/2)
		for k := range up {
			up[k] = sha256.Sum256(append(append([]byte{1}, lv[2*k][:]...), lv[2*k+1][:]...))
		}
		lv = up
	}
	return lv[0]
}

// combine interpolates the three limbs at 0 over GF(2^61 − 1) with
// math/big and packs them as 7 ‖ 7 ‖ 2 little-endian bytes.
func combine(shares []bundleShare) []byte {
	p := big.NewInt(p61)
	var seed []byte
	for l, width := range []int{7, 7, 2} {
		acc := new(big.Int)
		for a, sa := range shares {
			num, den := big.NewInt(1), big.NewInt(1)
			for b, sb := range shares {
				if a != b {
					num.Mul(num, big.NewInt(int64(sb.x)))
					den.Mul(den, big.NewInt(int64(sb.x-sa.x)))
				}
			}
			den.Mod(den, p)
			lam := num.Mul(num, new(big.Int).ModInverse(den, p))
			acc.Add(acc, lam.Mul(lam, new(big.Int).SetUint64(sa.y[l])))
		}
		acc.Mod(acc, p)
		le := binary.LittleEndian.AppendUint64(nil, acc.Uint64())
		seed = append(seed, le[:width]...)
	}
	return seed
}

func checkPDDDeal(w *wire) {
	t := w.t
	seed, xi, xj := w.get("pdd-sign-seed"), w.get("pdd-x25519-private"), w.get("pdd-peer-x25519-private")
	spub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	dep := w.get("pdd-deposit")
	// the envelope and its signature, by hand
	rest, ok := bytes.CutPrefix(dep, []byte(`{"body":`))
	i := bytes.LastIndex(rest, []byte(`,"sig":"`))
	if !ok || i < 0 || !bytes.HasSuffix(rest, []byte(`"}`)) {
		t.Fatal("pdd-deposit is not {\"body\":…,\"sig\":\"…\"}")
	}
	body := rest[:i]
	sig, err := base64.StdEncoding.DecodeString(string(rest[i+len(`,"sig":"`) : len(rest)-2]))
	if err != nil || !ed25519.Verify(spub, append([]byte("crowdlog-v2 pdd deposit\x00"), body...), sig) {
		t.Errorf("pdd-deposit: the signature does not cover \"crowdlog-v2 pdd deposit\" 00 ‖ body: %v", err)
	}
	var m struct {
		ClientID string   `json:"client_id"`
		Seq      uint64   `json:"seq"`
		Roots    [][]byte `json:"roots"`
		Campaign string   `json:"campaign"`
		Round    int      `json:"round"`
		Group    int      `json:"group"`
		From     int      `json:"from"`
		Bundles  []struct {
			From, To   int
			Ciphertext []byte
		} `json:"bundles"`
		Chunk  int `json:"chunk"`
		Chunks int `json:"chunks"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("pdd-deposit body: %v", err)
	}
	if m.ClientID != pddClientID || m.Seq != pddSeq+1 || m.Campaign != pddCampaign || m.Round != 13210 || m.Group != 7 ||
		m.From != 0 || m.Chunk != 0 || m.Chunks != 1 || len(m.Roots) != 2 || len(m.Bundles) != 2 {
		t.Fatalf("pdd-deposit body has other fields than documented: %s", body)
	}
	// each bundle opens with HPKE and its shares hash to the holder's root
	kem := hpke.KEM_X25519_HKDF_SHA256.Scheme()
	var selfShares []bundleShare
	var opened [2][]bundleShare
	for h, priv := range [][]byte{xi, xj} {
		sb := m.Bundles[h]
		if sb.From != 0 || sb.To != h {
			t.Fatalf("pdd-deposit bundle %d is %d→%d", h, sb.From, sb.To)
		}
		sk, _ := kem.UnmarshalBinaryPrivateKey(priv)
		rcv, err := hpkeSuite.NewReceiver(sk, append([]byte("crowdlog-v2 pdd bundle\x00"), pddInfo()...))
		if err != nil {
			t.Fatal(err)
		}
		op, err := rcv.Setup(sb.Ciphertext[:32])
		if err != nil {
			t.Fatal(err)
		}
		pt, err := op.Open(sb.Ciphertext[32:], append(u16(0), u16(h)...))
		if err != nil {
			t.Fatalf("pdd-deposit bundle %d does not open with HPKE (documented info and aad): %v", h, err)
		}
		c := &cut{t: t, name: fmt.Sprintf("pdd-deposit bundle %d", h), b: pt}
		if c.u8() != 2 || c.u16() != 0 || c.u16() != h {
			t.Errorf("bundle %d: not version 2, from 0, to %d", h, h)
		}
		n := c.u32()
		var leaves [][32]byte
		for k := 0; k < n; k++ {
			s := bundleShare{j: c.u16(), x: c.u16()}
			for l := range s.y {
				s.y[l] = binary.BigEndian.Uint64(c.n(8))
			}
			s.nonce = c.n(16)
			if s.x != h+1 {
				t.Errorf("bundle %d: share x = %d, want holder + 1", h, s.x)
			}
			leaves = append(leaves, pddLeaf(0, h, s))
			opened[h] = append(opened[h], s)
			if s.j == 0 {
				selfShares = append(selfShares, s)
			}
		}
		c.done()
		// holder 0 gets b_0 and s_01, holder 1 only b_0 (never a share of its own pair)
		if wantJ := [][]int{{0, 1}, {0}}[h]; len(opened[h]) != len(wantJ) || opened[h][0].j != 0 || (h == 0 && opened[h][1].j != 1) {
			t.Errorf("bundle %d holds shares %+v, want j = %v", h, opened[h], wantJ)
		}
		if root := merkleRoot(leaves); !bytes.Equal(root[:], m.Roots[h]) {
			t.Errorf("pdd-deposit root %d is not the Merkle root of bundle %d's leaves", h, h)
		}
	}
	w.eq("pdd-self-seed", combine(selfShares), "b_0 interpolated from the two holders' shares")

	// the code reads the same
	d, s, err := blind.ParseDeposit(dep)
	if err != nil || d.ClientID != pddClientID || len(d.Bundles) != 2 || !d.Last() {
		t.Fatalf("blind.ParseDeposit(pdd-deposit) = %+v, %v", d, err)
	}
	if err := s.Verify(spub, blind.PurposeDeposit); err != nil {
		t.Errorf("pdd-deposit: %v", err)
	}
	in := blind.Instance{Campaign: pddCampaign, Round: 13210, Group: 7}
	sk1, _ := ecdh.X25519().NewPrivateKey(xj)
	b1, err := blind.OpenBundle(sk1, in, 1, d.Bundles[1])
	if err != nil || len(b1.Shares) != 1 || b1.Shares[0].Share.X != 2 || b1.Shares[0].Share.Y != opened[1][0].y || !bytes.Equal(b1.Shares[0].Nonce[:], opened[1][0].nonce) {
		t.Fatalf("blind.OpenBundle of bundle 1: %+v, %v", b1, err)
	}

	// holder 1's answer: its share of b_0, leaf 0, an empty proof
	c := w.cut("pdd-answer")
	if c.u8() != 2 || c.u8() != 2 || c.str8() != pddCampaign || c.u32() != 13210 || c.u32() != 7 || c.u16() != 1 || c.u32() != 1 {
		t.Error("pdd-answer: not version 2, kind 2, the instance, member 1, one reveal")
	}
	rv := bundleShare{}
	from := c.u16()
	rv.j, rv.x = c.u16(), c.u16()
	for l := range rv.y {
		rv.y[l] = binary.BigEndian.Uint64(c.n(8))
	}
	rv.nonce = c.n(16)
	if from != 0 || rv.j != 0 || rv.x != 2 || rv.y != opened[1][0].y || !bytes.Equal(rv.nonce, opened[1][0].nonce) {
		t.Error("pdd-answer does not reveal bundle 1's share of b_0")
	}
	if idx, np := c.u16(), c.u8(); idx != 0 || np != 0 {
		t.Errorf("pdd-answer: leaf index %d with %d proof hashes, want 0 and 0", idx, np)
	}
	c.done()
	if lf := pddLeaf(0, 1, rv); !bytes.Equal(lf[:], m.Roots[1]) {
		t.Error("pdd-answer's revealed share is not root 1's leaf")
	}
	msg, err := blind.Parse(w.get("pdd-answer"))
	if err != nil || msg.Answer == nil || msg.Answer.Member != 1 || len(msg.Answer.Reveals) != 1 || msg.Answer.Reveals[0].Share.Y != rv.y {
		t.Fatalf("blind.Parse(pdd-answer) = %+v, %v", msg, err)
	}
	w.eq("pdd-answer", enc(msg.Answer), "re-encoding")
}

// TestWireDocVectors checks every vector of docs/wire.md (see the top of
// this file).
func TestWireDocVectors(t *testing.T) {
	if *printWireVectors {
		printVectors(t)
	}
	vec, order := docVectors(t)
	w := &wire{t: t, v: vec, used: map[string]bool{}}
	checkOPRF(w)
	checkRelayKeys(w)
	checkStar(w)
	checkOnion(w)
	checkPDD(w)
	checkPDDMasks(w)
	checkPDDDeal(w)
	checkTokens(w)
	checkRandomnessTokens(w)
	checkARC(w)
	checkReportTrailer(w)
	checkControl(w)
	checkVectorsControl(w)
	checkedInPackages(w)
	for _, name := range order {
		if !w.used[name] {
			t.Errorf("docs/wire.md: vector %s is checked by nothing (add a check to protocol/wiredoc_test.go)", name)
		}
	}
}

// vectorsInPackages are the vectors that the format's own package checks
// (its vectors_test.go reads this document, assembles the bytes by hand
// and checks the signatures with crypto/ed25519), by the test file that
// does: checkedInPackages requires each file to name each of its vectors.
var vectorsInPackages = map[string][]string{
	"pipelinespec/vectors_test.go": {"aggregator-sign-seed", "aggregator-sign-public",
		"pipeline-announcement-signed-bytes", "pipeline-announcement-signed",
		"pipeline-answer-nonce", "pipeline-answer-signed-bytes", "pipeline-answer-signed"},
	"prio3/vectors_test.go": {"prio3-leader-sign-seed", "prio3-leader-sign-public",
		"prio3-settings-signed-bytes", "prio3-settings-signed", "prio3-campaign-digest",
		"prio3-report", "prio3-helper-nonce", "prio3-leader-request-signed-bytes", "prio3-leader-request",
		"prio3-upload", "prio3-helper-share-aad", "prio3-aggregate-response", "prio3-collect-request",
		"prio3-aggregate-share", "prio3-aggregate-share-aad"},
	"blind/vectors_test.go": {"pdd-task-signed-bytes", "pdd-task-signature", "pdd-task",
		"pdd-recovery-signed-bytes", "pdd-recovery", "operator-sign-seed", "pdd-advance-signed-bytes", "pdd-advance",
		"pdd-roster", "pdd-commitments"},
	"token/vectors_test.go": {"prio3-token-seeds", "issuer-keys-response-prio3-helper", "issuer-keys-response-prio3-leader"},
	"vectors_test.go":       {"control-v2-signed-bytes", "control-v2-close-signed"},
}

func checkedInPackages(w *wire) {
	for file, names := range vectorsInPackages {
		src, err := os.ReadFile(file)
		if err != nil {
			w.t.Errorf("the vectors %v are checked in %s: %v", names, file, err)
			continue
		}
		for _, name := range names {
			w.get(name)
			if !bytes.Contains(src, []byte(`"`+name+`"`)) {
				w.t.Errorf("docs/wire.md: vector %s is not named in %s, which should check it", name, file)
			}
		}
	}
}

// field is one annotated run of bytes of a printed vector.
type field struct {
	b    []byte
	note string
}

func fhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func label32(label string) []byte {
	h := sha256.Sum256([]byte("crowdlog wire " + label))
	return h[:]
}

// block prints one vector block, 32 bytes a line, each field's note on its
// first line.
func block(name string, fs ...field) {
	fmt.Printf("```vector name=%s\n", name)
	for _, f := range fs {
		for i := 0; i < len(f.b) || i == 0; i += 32 {
			chunk := hex.EncodeToString(f.b[i:min(i+32, len(f.b))])
			if i == 0 && f.note != "" {
				fmt.Printf("%-64s  # %s\n", chunk, f.note)
			} else {
				fmt.Println(chunk)
			}
		}
	}
	fmt.Print("```\n\n")
}

func textBlock(name, s string) { fmt.Printf("```vector name=%s text\n%s\n```\n\n", name, s) }

func str8(s, what string) []field {
	return []field{{[]byte{byte(len(s))}, "u8 len " + what}, {[]byte(s), fmt.Sprintf("%s %q", what, s)}}
}

func fs(parts ...any) []field {
	var out []field
	for _, p := range parts {
		switch v := p.(type) {
		case field:
			out = append(out, v)
		case []field:
			out = append(out, v...)
		}
	}
	return out
}

// printVectors prints every block of the document: the golden files'
// bytes and, where no golden file exists, bytes made by this test's
// independent generators.
func printVectors(t *testing.T) {
	go1 := golden(t, "oprf/testdata/golden-randomness.json")
	V := field{[]byte{2}, "version 2"}
	fmt.Println("---- OPRF")
	block("oprf-input", field{oprfInput(docApp, docEpoch, docArtifacts[0]), `"crowdlog-v1" 00 "query" 00 "2006-03" 00 "new york weather"`})
	seed := testvec.FixedBytes("oprf seed", 32)
	block("oprf-key-seed", field{seed, "seed"})
	block("oprf-private-key", field{enc(deriveKeyPair(seed, "crowdlog-v1 epoch "+docEpoch)), "skS (scalar, little-endian)"})
	block("oprf-public-key", field{fhex(go1["public_key"]), "pkS"})
	block("oprf-public-key-request", fs(V, str8(docEpoch, "epoch"))...)
	pkr := fhex(go1["pubkey_response"])
	block("oprf-public-key-response", fs(V, field{[]byte{0}, "status 0 (ok)"}, str8(docEpoch, "epoch"), field{pkr[len(pkr)-32:], "pkS"})...)
	block("oprf-blind-0", field{fhex(go1["blind0"]), "r_0 (scalar, little-endian)"})
	block("oprf-blind-1", field{fhex(go1["blind1"]), "r_1"})
	rq := fhex(go1["request"])
	block("oprf-randomness-request", fs(V, str8(docEpoch, "epoch"), field{rq[9:11], "u16 count = 2"},
		field{rq[11:43], "blinded element 0 = r_0·HashToGroup(input_0)"}, field{rq[43:75], "blinded element 1"})...)
	rs := fhex(go1["response"])
	block("oprf-randomness-response", V, field{rs[1:2], "status 0 (ok)"}, field{rs[2:4], "u16 count = 2"},
		field{rs[4:36], "evaluated element 0 = skS·blinded_0"}, field{rs[36:68], "evaluated element 1"},
		field{rs[68:100], "proof c"}, field{rs[100:132], "proof s"})
	block("oprf-omega-0", field{fhex(go1["omega0"]), `ω of "new york weather"`})
	block("oprf-omega-1", field{fhex(go1["omega1"]), `ω of "google"`})
	rc := fhex(go1["response_closed"])
	block("oprf-randomness-response-closed", V, field{rc[1:2], "status 2 (epoch closed)"}, field{rc[2:4], "u16 len"}, field{rc[4:], `"epoch 2006-02 closed"`})

	fmt.Println("---- relay keys")
	gr := golden(t, "onion/testdata/golden-relaykeys.json")
	block("relaykeys-request", fs(V, str8("a", "relay name"))...)
	rk := fhex(gr["response"])
	block("relaykeys-response", fs(V, field{[]byte{0}, "status 0 (ok)"}, str8("a", "relay name"), field{rk[4:5], "u8 count = 2"},
		field{rk[5:6], "key id 1"}, field{rk[6:7], "u8 len = 32"}, field{rk[7:39], "X25519 public key"},
		field{rk[39:40], "key id 2"}, field{rk[40:41], "u8 len = 32"}, field{rk[41:73], "X25519 public key"})...)
	rr := fhex(gr["response_refused"])
	block("relaykeys-response-refused", V, field{rr[1:2], "status 1 (refused)"}, field{rr[2:4], "u16 len"}, field{rr[4:], `"relay shutting down"`})

	fmt.Println("---- star")
	gs := golden(t, "star/testdata/golden-sealing.json")
	block("star-omega", field{fhex(gs["omega"]), "ω (64 bytes)"})
	block("star-user-secret", field{fhex(gs["user_secret"]), "user secret"})
	ctx := starCtx(docApp, docEpoch, 2, 3)
	block("star-ctx", fs(str8(docApp, "app"), str8(docEpoch, "epoch"), field{[]byte{2}, "policy FT_u"}, field{u16(3), "u16 k = 3"})...)
	omega := fhex(gs["omega"])
	block("star-tag", field{fhex(gs["tag"]), "tag"})
	block("star-poly-seed", field{hkdf32(t, omega, "crowdlog-v2 poly"+string(ctx)), "seed"})
	cm := fhex(gs["commitment"])
	block("star-commitment", field{cm[:32], "C_0"}, field{cm[32:64], "C_1"}, field{cm[64:], "C_2"})
	ctxM := append(starCtx("click", docEpoch, 2, 3), byte(len("url-level=domain")))
	ctxM = append(ctxM, "url-level=domain"...)
	block("star-ctx-click", fs(str8("click", "app"), str8(docEpoch, "epoch"), field{[]byte{2}, "policy FT_u"}, field{u16(3), "u16 k = 3"}, str8("url-level=domain", "meaning"))...)
	block("star-tag-click", field{hkdf32(t, omega, "crowdlog-v2 tag"+string(ctxM)), "tag of the same ω for click, url-level=domain"})
	block("star-secret-f0", field{fhex(gs["secret_f0"]), "f(0) = a_0"})
	block("star-aead-key", field{fhex(gs["aead_key"]), "key"})
	block("star-unit-id", field{fhex(gs["unit_id"]), "unit id"})
	gp := golden(t, "star/testdata/golden-payload.json")
	pb := fhex(gp["encoded"])
	block("star-payload", V, field{pb[1:3], "u16 len = 16"}, field{pb[3:19], `primary "new york weather"`},
		field{pb[19:21], "u16 len = 17"}, field{pb[21:38], `secondary "New York  Weather"`}, field{pb[38:], "unit id"})
	grp := golden(t, "star/testdata/golden-report.json")
	r := fhex(grp["encoded"])
	block("star-report-id", field{fhex(grp["id"]), "report id"})
	block("star-aead-nonce", field{fhex(grp["ciphertext"])[:24], "XChaCha20-Poly1305 nonce"})
	o := 1 + 6 + 8 + 3
	block("star-report", fs(V, str8(docApp, "app"), str8(docEpoch, "epoch"), field{[]byte{2}, "policy FT_u"}, field{u16(3), "u16 k = 3"},
		field{r[o : o+16], "id"}, field{r[o+16 : o+48], "tag"}, field{r[o+48 : o+80], "share x"}, field{r[o+80 : o+112], "share y"},
		field{r[o+112 : o+114], "u16 commitment count = k"}, field{r[o+114 : o+146], "C_0"}, field{r[o+146 : o+178], "C_1"}, field{r[o+178 : o+210], "C_2"},
		field{r[o+210 : o+214], "u32 len ciphertext = 94"}, field{r[o+214 : o+238], "nonce"}, field{r[o+238 : len(r)-16], "XChaCha20 ciphertext of star-payload"},
		field{r[len(r)-16:], "Poly1305 tag"})...)

	fmt.Println("---- star pipeline (Sealing derivation)")
	var canon []field
	for _, l := range strings.SplitAfter(docPipelineCanonical, "\n") {
		if l != "" {
			canon = append(canon, field{[]byte(l), fmt.Sprintf("%q", l)})
		}
	}
	block("star-pipeline-canonical", canon...)
	digest := sha256.Sum256([]byte(docPipelineCanonical))
	block("star-pipeline-digest", field{digest[:], "pipeline = SHA-256(star-pipeline-canonical)"})
	block("star-ctx-pipeline", fs(str8(docApp, "app"), str8(docEpoch, "epoch"), field{[]byte{2}, "policy FT_u"}, field{u16(3), "u16 k = 3"},
		field{[]byte{0}, "u8 len meaning = 0 (empty meaning, present with a digest)"}, field{digest[:], "pipeline (star-pipeline-digest)"})...)
	block("star-tag-pipeline", field{hkdf32(t, omega, "crowdlog-v2 tag"+string(starPipelineCtx(docApp, docEpoch, 2, 3, "", digest[:]))), "tag of the same ω for the pipeline sealing"})
	fmt.Println("---- star pipeline (Report)")
	gpp := golden(t, "star/testdata/golden-report-pipeline.json")
	rp := fhex(gpp["encoded"])
	o = 1 + 6 + 8 + 3
	block("star-report-pipeline", fs(field{[]byte{3}, "version 3 (star.ReportVersionPipeline)"}, str8(docApp, "app"), str8(docEpoch, "epoch"), field{[]byte{2}, "policy FT_u"}, field{u16(3), "u16 k = 3"},
		field{rp[o : o+32], "pipeline (star-pipeline-digest)"}, field{rp[o+32 : o+48], "id (star-report-id)"}, field{rp[o+48 : o+80], "tag (star-tag-pipeline)"},
		field{rp[o+80 : o+112], "share x"}, field{rp[o+112 : o+144], "share y"},
		field{rp[o+144 : o+146], "u16 commitment count = k"}, field{rp[o+146 : o+178], "C_0"}, field{rp[o+178 : o+210], "C_1"}, field{rp[o+210 : o+242], "C_2"},
		field{rp[o+242 : o+246], "u32 len ciphertext = 94"}, field{rp[o+246 : o+270], "nonce (star-aead-nonce)"},
		field{rp[o+270 : len(rp)-16], "XChaCha20 ciphertext of the payload (unit id of this tag)"}, field{rp[len(rp)-16:], "Poly1305 tag"})...)

	fmt.Println("---- onion")
	gk := golden(t, "onion/testdata/golden-onion.json")
	pubs, ikm := map[string][]byte{}, map[string][]byte{}
	for i, role := range []string{"relay-a", "relay-b", "aggregator"} {
		block("onion-key-"+role+"-private", field{fhex(gk[fmt.Sprintf("key%d_private", i+1)]), role + " private key (X25519)"})
		block("onion-key-"+role+"-public", field{fhex(gk[fmt.Sprintf("key%d_public", i+1)]), role + " public key, key id " + fmt.Sprint(i+1)})
		pubs[role] = fhex(gk[fmt.Sprintf("key%d_public", i+1)])
		ikm[role] = label32("ikmE " + role)
		block("onion-ikme-"+role, field{ikm[role], "ikmE of " + role + "'s layer"})
	}
	layers := sealOnion(t, pubs, ikm, r)
	for _, h := range onionHops {
		l := layers[h.layer]
		block(h.layer, field{l[:1], "version 2"}, field{l[1:2], "key id"}, field{l[2:34], "enc (X25519 ephemeral public key)"},
			field{l[34:], fmt.Sprintf("HPKE ciphertext (%d bytes plaintext + 16 tag)", len(l)-50)})
	}
	textBlock("onion-layer-relay-a-msgid", protocol.LayerMsgID(layers["onion-layer-relay-a"]))

	fmt.Println("---- pdd")
	var xpriv []byte
	seed, xpriv = label32("pdd sign seed"), label32("pdd x25519")
	block("pdd-sign-seed", field{seed, "Ed25519 seed (RFC 8032 private key)"})
	block("pdd-sign-public", field{ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey), "Ed25519 public key"})
	block("pdd-x25519-private", field{xpriv, "X25519 private key"})
	reg, ping := pddBodies(seed, xpriv)
	textBlock("pdd-register", pddSigned(t, seed, blind.PurposeRegister, reg))
	textBlock("pdd-ping", pddSigned(t, seed, blind.PurposePing, ping))
	block("pdd-ping-signed-bytes", field{[]byte("crowdlog-v2 pdd ping\x00"), `"crowdlog-v2 pdd ping" 00`}, field{[]byte(ping), "the body's JSON"})
	sb := pddSubmission()
	block("pdd-submission", field{sb[:1], "version 2"}, field{sb[1:2], "kind 1 (submission)"}, field{sb[2:3], "u8 len campaign"},
		field{sb[3:14], `campaign "health-2006"`}, field{sb[14:18], "u32 round = 13210"}, field{sb[18:22], "u32 group = 7"},
		field{sb[22:24], "u16 member = 2"}, field{sb[24:28], "u32 L = 3"}, field{sb[28:36], "Y[0] = 1 (u64 little-endian)"},
		field{sb[36:44], "Y[1] = 2^64 − 2"}, field{sb[44:52], "Y[2] = 0x0123456789abcdef"})
	xj, secret := label32("pdd peer x25519"), label32("pdd client secret")
	pair, mask, self, y := pddMasks(t, xpriv, xj, secret)
	block("pdd-peer-x25519-private", field{xj, "member 1's X25519 private key"})
	block("pdd-pair-seed", field{pair, "s_01"})
	block("pdd-pair-mask", field{mask[:8], "PRG(s_01) word 0 (u64 little-endian)"}, field{mask[8:16], "word 1"}, field{mask[16:], "word 2"})
	block("pdd-client-secret", field{secret, "member 0's client secret"})
	block("pdd-self-seed", field{self, "b_0"})
	block("pdd-blinded-y", field{y[:8], "Y_0 = 5 + PRG(b_0)_0 + PRG(s_01)_0"}, field{y[8:16], "Y_1 = 0 + …"}, field{y[16:], "Y_2 = 1 + …"})
	deposit, answer := pddDeal(t, seed, xpriv, xj, secret)
	textBlock("pdd-deposit", deposit)
	block("pdd-answer", field{answer[:2], "version 2, kind 2 (answer)"}, field{answer[2:14], `str8 campaign "health-2006"`},
		field{answer[14:22], "u32 round, u32 group"}, field{answer[22:24], "u16 member = 1"}, field{answer[24:28], "u32 reveals = 1"},
		field{answer[28:32], "u16 from = 0, u16 j = 0 (b_0)"}, field{answer[32:34], "u16 x = 2"}, field{answer[34:58], "3 × u64 y"},
		field{answer[58:74], "nonce"}, field{answer[74:76], "u16 leaf index = 0"}, field{answer[76:], "u8 proof hashes = 0"})
	textBlock("pdd-vectors-key", blind.Instance{Campaign: pddCampaign, Round: 13210, Group: 7}.String())
	printTokenVectors(t)
}
