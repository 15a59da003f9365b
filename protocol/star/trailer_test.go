package star

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// trailerReport is the golden report of TestGoldenPayloadAndReport.
func trailerReport(t testing.TB) (*Report, []byte) {
	omega := testvec.FixedBytes("omega", 64)
	s, err := DeriveSealing(omega, "query", "2006-03", FTu, 3)
	if err != nil {
		t.Fatal(err)
	}
	var u UserSecret
	copy(u[:], testvec.FixedBytes("user", 32))
	r, err := s.seal(testvec.FixedReader("report"), &u, s.ShareX(&u), "new york weather", "New York  Weather")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return r, b
}

// TestReportTrailer: the trailing section is u16 len ‖ token ‖ u16 len ‖
// presentation appended to the plain encoding (built here by hand from the
// plain bytes), UnsignedBytes is the plain encoding whatever the trailer,
// and the trailer round-trips.
func TestReportTrailer(t *testing.T) {
	r, plain := trailerReport(t)
	if want := testvec.LoadGolden(t, "report")["encoded"]; want != "" && !bytes.Equal(plain, testvec.MustHex(t, want)) {
		t.Fatal("a report without token encodes differently from the golden vector")
	}
	cases := []struct {
		name        string
		token, pres []byte
	}{
		{"token", bytes.Repeat([]byte{0xAA}, 162), nil},
		{"presentation", nil, bytes.Repeat([]byte{0xBB}, 300)},
		{"both", []byte{1, 2, 3}, []byte{4, 5}},
	}
	for _, c := range cases {
		r.Token, r.Presentation = c.token, c.pres
		b, err := r.MarshalBinary()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := append([]byte(nil), plain...)
		want = binary.BigEndian.AppendUint16(want, uint16(len(c.token)))
		want = append(want, c.token...)
		want = binary.BigEndian.AppendUint16(want, uint16(len(c.pres)))
		want = append(want, c.pres...)
		if !bytes.Equal(b, want) {
			t.Fatalf("%s: encoding\n%x\nwant\n%x", c.name, b, want)
		}
		u, err := r.UnsignedBytes()
		if err != nil || !bytes.Equal(u, plain) {
			t.Fatalf("%s: UnsignedBytes = %x, %v; want the plain encoding", c.name, u, err)
		}
		back, err := ParseReport(b)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(back.Token, c.token) || !bytes.Equal(back.Presentation, c.pres) || back.ID != r.ID || !bytes.Equal(back.Ciphertext, r.Ciphertext) {
			t.Fatalf("%s: parsed token %x presentation %x", c.name, back.Token, back.Presentation)
		}
		if u2, _ := back.UnsignedBytes(); !bytes.Equal(u2, plain) {
			t.Fatalf("%s: parsed report's UnsignedBytes differ", c.name)
		}
	}
	bad := map[string][]byte{
		"empty trailer":     append(append([]byte(nil), plain...), 0, 0, 0, 0),
		"truncated token":   append(append([]byte(nil), plain...), 0, 5, 1, 2),
		"no presentation":   append(append([]byte(nil), plain...), 0, 1, 9),
		"one trailing byte": append(append([]byte(nil), plain...), 7),
		"bytes after":       append(append([]byte(nil), plain...), 0, 1, 9, 0, 0, 1),
	}
	for name, b := range bad {
		if _, err := ParseReport(b); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("%s: ParseReport = %v, want ErrMalformed", name, err)
		}
	}
	r.Token = make([]byte, MaxTrailerField+1)
	if _, err := r.MarshalBinary(); err == nil {
		t.Error("a token over MaxTrailerField encodes")
	}
}
