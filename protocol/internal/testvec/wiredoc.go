package testvec

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// PrintWireVectors makes the packages' vector tests print the blocks their
// hand assembly gives (to paste into docs/wire.md after a deliberate
// change), before they check the document.
var PrintWireVectors = flag.Bool("wirevec.print", false, "print the docs/wire.md vector blocks assembled by hand in this package's vector tests, then check")

// WireDoc reads every fenced vector block of docs/wire.md (path: the
// document relative to the test's package directory), by name:
//
//	```vector name=NAME        hex: the hex digits of each line before any
//	02 07 323030362d3033        '#', spaces ignored
//	```
//	```vector name=NAME text   text: the single line is the bytes
//
// The same reading as protocol's TestWireDocVectors. A duplicate name, a
// block without a name, bad hex or an unclosed or empty block fails t.
func WireDoc(t testing.TB, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	vec := map[string][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		rest, ok := strings.CutPrefix(sc.Text(), "```vector ")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			t.Fatalf("%s:%d: vector block without name=", path, line)
		}
		name, ok := strings.CutPrefix(fields[0], "name=")
		if !ok || name == "" {
			t.Fatalf("%s:%d: vector block without name=", path, line)
		}
		if _, dup := vec[name]; dup {
			t.Fatalf("%s:%d: vector %s twice", path, line, name)
		}
		text := len(fields) > 1 && fields[1] == "text"
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
					t.Fatalf("%s:%d: text vector %s has more than one line", path, line, name)
				}
				b = []byte(l)
				continue
			}
			if i := strings.IndexByte(l, '#'); i >= 0 {
				l = l[:i]
			}
			h, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(l), " ", ""))
			if err != nil {
				t.Fatalf("%s:%d: vector %s: bad hex: %v", path, line, name, err)
			}
			b = append(b, h...)
		}
		if !closed || len(b) == 0 {
			t.Fatalf("%s:%d: vector %s is empty or not closed", path, start, name)
		}
		vec[name] = b
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return vec
}

// Field is one annotated run of bytes of a vector assembled by hand.
type Field struct {
	B    []byte
	Note string
}

// Fields is a vector assembled by hand, field by field.
type Fields []Field

// Bytes is the concatenation of the fields.
func (fs Fields) Bytes() []byte {
	var b []byte
	for _, f := range fs {
		b = append(b, f.B...)
	}
	return b
}

// Block is the fenced vector block of docs/wire.md for fs: 32 bytes of hex
// a line at most, each field's note after '#' on its first line.
func (fs Fields) Block(name string) string {
	var s strings.Builder
	fmt.Fprintf(&s, "```vector name=%s\n", name)
	for _, f := range fs {
		h := hex.EncodeToString(f.B)
		note := ""
		if f.Note != "" {
			note = "# " + f.Note
		}
		for {
			chunk := h[:min(64, len(h))]
			h = h[len(chunk):]
			if note == "" {
				s.WriteString(chunk + "\n")
			} else {
				fmt.Fprintf(&s, "%-64s  %s\n", chunk, note)
			}
			note = ""
			if h == "" {
				break
			}
		}
	}
	s.WriteString("```\n")
	return s.String()
}

// DocEq fails t unless the document's vector name is want (the bytes a
// test assembled by hand). With -wirevec.print a missing vector is an
// error, not fatal, so that every block gets printed.
func DocEq(t testing.TB, doc map[string][]byte, name string, want []byte) {
	t.Helper()
	got, ok := doc[name]
	if !ok && *PrintWireVectors {
		t.Errorf("docs/wire.md has no vector %s yet: paste the printed block", name)
		return
	}
	if !ok {
		t.Fatalf("docs/wire.md has no vector %s", name)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/wire.md vector %s is\n%x\nthe hand assembly of the documented layout gives\n%x", name, got, want)
	}
}

// CheckSigned is what a verifier does with a signed message of the
// document, with crypto/ed25519 alone: signedName is the block of the
// signed bytes (domain ‖ body), encName the message as sent (body ‖
// signature[64]). The body is the signed bytes less the domain, the
// signature the 64 bytes after it, nothing follows, and the signature
// verifies over the signed bytes under pub and over no other (one byte
// changed at either end of the domain or of the body). It returns the
// body and the signature.
func CheckSigned(t testing.TB, doc map[string][]byte, domain, signedName, encName string, pub ed25519.PublicKey) (body, sig []byte) {
	t.Helper()
	signed, enc := doc[signedName], doc[encName]
	if !bytes.HasPrefix(signed, []byte(domain)) {
		t.Fatalf("%s does not start with the domain %q", signedName, domain)
	}
	body = signed[len(domain):]
	if len(body) == 0 || len(enc) != len(body)+ed25519.SignatureSize || !bytes.Equal(enc[:len(body)], body) {
		t.Fatalf("%s is not %s without its domain, then a 64-byte signature", encName, signedName)
	}
	sig = enc[len(body):]
	if !ed25519.Verify(pub, signed, sig) {
		t.Fatalf("%s: the signature does not verify (crypto/ed25519) over %s", encName, signedName)
	}
	for _, i := range []int{0, len(domain) - 1, len(domain), len(signed) - 1} {
		c := bytes.Clone(signed)
		c[i] ^= 1
		if ed25519.Verify(pub, c, sig) {
			t.Errorf("%s: the signature verifies with byte %d of %s changed", encName, i, signedName)
		}
	}
	return body, sig
}

// F is a Field.
func F(b []byte, note string) Field { return Field{B: b, Note: note} }
