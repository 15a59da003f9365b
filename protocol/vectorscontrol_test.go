package protocol

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"
)

func TestVectorsControlRoundTrip(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	other, _, _ := ed25519.GenerateKey(nil)
	to := VectorsTarget{Topic: VectorsTopic, Partition: 3, Campaign: "flu-2026"}
	issued := time.Unix(1767225600, 0)
	body := []byte{2, 4, 0, 0, 0, 9}
	b, err := SignVectorsControl(key, body, to, issued, ControlValidity)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseVectorsControl(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.Topic != to.Topic || c.Partition != 3 || c.Campaign != "flu-2026" || c.Issued != issued.Unix() ||
		c.NotAfter != issued.Add(ControlValidity).Unix() || !bytes.Equal(c.Body, body) {
		t.Fatalf("decoded %+v", c)
	}
	if err := c.Verify(pub); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(other); !errors.Is(err, ErrControlSignature) {
		t.Fatalf("foreign key: %v", err)
	}
	// every byte is covered: a flip anywhere either fails to parse or
	// fails to verify
	for i := range b {
		x := bytes.Clone(b)
		x[i] ^= 0x01
		if c, err := ParseVectorsControl(x); err == nil && c.Verify(pub) == nil {
			t.Fatalf("byte %d flipped and still verifies", i)
		}
	}
	// an unsigned PDD message is not a record, nor a truncated one
	if _, err := ParseVectorsControl(body); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unsigned body parsed: %v", err)
	}
	if _, err := ParseVectorsControl(b[:len(b)-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated record parsed: %v", err)
	}
	if _, err := SignVectorsControl(key, body, VectorsTarget{Topic: VectorsTopic, Campaign: "bad name"}, issued, ControlValidity); err == nil {
		t.Fatal("signed a record with an invalid campaign")
	}
}

// FuzzParseVectorsControl: whatever parses is within the documented
// limits, re-encodes to the same bytes, and verifies only when it is
// exactly what the key signed.
func FuzzParseVectorsControl(f *testing.F) {
	pub, key, _ := ed25519.GenerateKey(nil)
	for _, body := range [][]byte{{2, 4, 0, 0, 0, 9}, bytes.Repeat([]byte{7}, 100)} {
		b, _ := SignVectorsControl(key, body, VectorsTarget{Topic: VectorsTopic, Partition: 1, Campaign: "pdd"}, time.Unix(1767225600, 0), ControlValidity)
		f.Add(b)
	}
	f.Add([]byte{VectorsControlVersion})
	f.Add([]byte{2, 4, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseVectorsControl(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if c.Topic == "" || len(c.Topic) > 255 || c.Partition < 0 || c.Partition >= MaxControlPartitions || !validCampaign(c.Campaign) ||
			c.Issued < 0 || c.NotAfter < c.Issued || len(c.Body) < 2 || len(c.Body) > MaxVectorsControl || len(c.Sig) != ed25519.SignatureSize {
			t.Fatalf("accepted %+v", c)
		}
		if re := append(c.head(), c.Sig...); !bytes.Equal(re, b) {
			t.Fatalf("re-encoded %x, parsed %x", re, b)
		}
		if c.Verify(pub) == nil {
			want, err := SignVectorsControl(key, c.Body, VectorsTarget{c.Topic, c.Partition, c.Campaign}, time.Unix(c.Issued, 0), time.Duration(c.NotAfter-c.Issued)*time.Second)
			if err != nil || !bytes.Equal(want, b) {
				t.Fatalf("verifies but is not what the key signed: %x", b)
			}
		}
	})
}
