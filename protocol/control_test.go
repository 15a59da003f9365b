package protocol

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseControl(t *testing.T) {
	open, _ := json.Marshal(EpochOpen{Op: ControlOpenEpoch, App: "query", Epoch: "2006-03", Partitions: 8})
	closeOld, _ := json.Marshal(EpochClose{App: "query", Epoch: "2006-03", Partitions: 8})
	for _, c := range []struct {
		b  []byte
		op string
	}{{open, ControlOpenEpoch}, {closeOld, ControlCloseEpoch},
		{[]byte(`{"op":"close-epoch","app":"a","epoch":"e"}`), ControlCloseEpoch}} {
		got, err := ParseControl(c.b)
		if err != nil || got.Op != c.op || got.App == "" || got.Epoch == "" {
			t.Fatalf("%s: %+v %v", c.b, got, err)
		}
	}
	for _, b := range []string{``, `{}`, `{"app":"a"}`, `{"op":"reopen","app":"a","epoch":"e"}`, `[1]`} {
		if _, err := ParseControl([]byte(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", b, err)
		}
	}
}

func TestSignedControl(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	otherPub, otherKey, _ := ed25519.GenerateKey(nil)
	at := time.Unix(1767225600, 0)
	b, err := SignControl(key, ControlCloseEpoch, "query", "2006-03", 3, 8, at, ControlValidity)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseControl(b)
	if err != nil || c.Version != ControlSigned || c.Op != ControlCloseEpoch || c.App != "query" || c.Epoch != "2006-03" ||
		c.Partition != 3 || c.Partitions != 8 || c.Issued != at.Unix() || c.NotAfter != at.Add(ControlValidity).Unix() {
		t.Fatalf("%s: %+v %v", b, c, err)
	}
	if err := c.Verify(pub); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(otherPub); !errors.Is(err, ErrControlSignature) {
		t.Errorf("verifies under another key: %v", err)
	}
	// every signed field is covered: change one, the signature fails
	for _, change := range []func(*Control){
		func(c *Control) { c.Op = ControlOpenEpoch }, func(c *Control) { c.App = "queryx" },
		func(c *Control) { c.Epoch = "2006-04" }, func(c *Control) { c.Partition = 2 },
		func(c *Control) { c.Partitions = 9 }, func(c *Control) { c.Issued++ }, func(c *Control) { c.NotAfter++ },
	} {
		d := *c
		change(&d)
		if err := d.Verify(pub); !errors.Is(err, ErrControlSignature) {
			t.Errorf("changed %+v verifies: %v", d, err)
		}
	}
	forged, _ := SignControl(otherKey, ControlOpenEpoch, "query", "fake", 0, 1, at, time.Minute)
	if f, err := ParseControl(forged); err != nil || !errors.Is(f.Verify(pub), ErrControlSignature) {
		t.Errorf("forged: %+v %v", f, err)
	}
	old, _ := json.Marshal(EpochOpen{Op: ControlOpenEpoch, App: "query", Epoch: "2006-03", Partitions: 8})
	if u, err := ParseControl(old); err != nil || u.Version != ControlUnsigned || !errors.Is(u.Verify(pub), ErrUnsignedControl) {
		t.Errorf("unsigned: %+v %v", u, err)
	}
	for _, bad := range []string{
		`{"v":3,"op":"open-epoch","app":"a","epoch":"e"}`,
		`{"v":2,"app":"a","epoch":"e","partitions":1,"sig":"` + strings.Repeat("A", 86) + `=="}`,
		`{"v":2,"op":"open-epoch","app":"a","epoch":"e","partitions":1,"partition":1,"sig":"` + strings.Repeat("A", 86) + `=="}`,
		`{"v":2,"op":"open-epoch","app":"a","epoch":"e","partitions":0,"sig":"` + strings.Repeat("A", 86) + `=="}`,
		`{"v":2,"op":"open-epoch","app":"a","epoch":"e","partitions":1,"issued":5,"not_after":4,"sig":"` + strings.Repeat("A", 86) + `=="}`,
		`{"v":2,"op":"open-epoch","app":"a","epoch":"e","partitions":1,"sig":"AAAA"}`,
		`{"v":2,"op":"open-epoch","app":"a","epoch":"e","partitions":1}`,
		`{"op":"open-epoch","app":"a","epoch":"e","partitions":1,"sig":"AAAA"}`,
	} {
		if _, err := ParseControl([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", bad, err)
		}
	}
	if _, err := SignControl(key[:10], ControlOpenEpoch, "a", "e", 0, 1, at, time.Minute); err == nil {
		t.Error("signed with a short key")
	}
}

func FuzzParseControl(f *testing.F) {
	f.Add([]byte(`{"op":"open-epoch","app":"query","epoch":"2006-03","partitions":8}`))
	f.Add([]byte(`{"app":"query","epoch":"2006-03","partitions":8}`))
	f.Add([]byte(`{"op":"close-epoch","app":"a","epoch":"e"}`))
	pub, key, _ := ed25519.GenerateKey(nil)
	for _, op := range []string{ControlOpenEpoch, ControlCloseEpoch} {
		b, _ := SignControl(key, op, "query", "2006-03", 1, 8, time.Unix(1767225600, 0), ControlValidity)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseControl(b)
		if err != nil {
			return
		}
		if c.App == "" || c.Epoch == "" || (c.Op != ControlOpenEpoch && c.Op != ControlCloseEpoch) {
			t.Fatalf("accepted %+v", c)
		}
		switch c.Version {
		case ControlUnsigned:
			if !errors.Is(c.Verify(pub), ErrUnsignedControl) {
				t.Fatalf("unsigned %+v verifies", c)
			}
		case ControlSigned:
			if c.Partition < 0 || c.Partition >= c.Partitions || c.Partitions > MaxControlPartitions || c.Issued < 0 || c.NotAfter < c.Issued || len(c.Sig) != ed25519.SignatureSize {
				t.Fatalf("accepted signed %+v", c)
			}
			// the signature covers the decoded fields: a changed message
			// verifies only when its fields are the signed ones
			if c.Verify(pub) == nil {
				want, _ := SignControl(key, c.Op, c.App, c.Epoch, c.Partition, c.Partitions, time.Unix(c.Issued, 0), time.Duration(c.NotAfter-c.Issued)*time.Second)
				w, _ := ParseControl(want)
				if w == nil || w.App != c.App || w.Epoch != c.Epoch || w.Op != c.Op || w.Issued != c.Issued || w.NotAfter != c.NotAfter {
					t.Fatalf("verifies with fields %+v", c)
				}
			}
		default:
			t.Fatalf("version %d", c.Version)
		}
	})
}
