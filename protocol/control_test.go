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

// testPipeline is a pipeline digest for the signed control tests.
var testPipeline = [32]byte{1, 2, 3}

// target is the ControlTarget of partition of partitions on ReportsTopic
// for testPipeline.
func target(partition, partitions int) ControlTarget {
	return ControlTarget{Pipeline: testPipeline, Topic: ReportsTopic, Partition: partition, Partitions: partitions}
}

// signV2 is a version 2 (ControlSigned) record as crowdlog wrote it
// before version 3: no pipeline, no topic.
func signV2(key ed25519.PrivateKey, op, app, epoch string, partition, partitions int, issued time.Time) []byte {
	c := &Control{Version: ControlSigned, Op: op, App: app, Epoch: epoch, Partitions: partitions, Partition: partition,
		Issued: issued.Unix(), NotAfter: issued.Add(ControlValidity).Unix()}
	c.Sig = ed25519.Sign(key, ControlSignedBytes(c))
	b, _ := json.Marshal(SignedControl{V: ControlSigned, Op: op, App: app, Epoch: epoch, Partitions: partitions,
		Partition: partition, Issued: c.Issued, NotAfter: c.NotAfter, Sig: c.Sig})
	return b
}

func TestSignedControl(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	otherPub, otherKey, _ := ed25519.GenerateKey(nil)
	at := time.Unix(1767225600, 0)
	b, err := SignControl(key, ControlCloseEpoch, "query", "2006-03", target(3, 8), at, ControlValidity)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseControl(b)
	if err != nil || c.Version != ControlBound || c.Op != ControlCloseEpoch || c.App != "query" || c.Epoch != "2006-03" ||
		c.Pipeline != testPipeline || c.Topic != ReportsTopic ||
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
		func(c *Control) { c.Pipeline[31] ^= 1 }, func(c *Control) { c.Topic = DecryptedTopic },
		func(c *Control) { c.Version = ControlSigned }, // the same fields under the version 2 layout
	} {
		d := *c
		change(&d)
		if err := d.Verify(pub); !errors.Is(err, ErrControlSignature) {
			t.Errorf("changed %+v verifies: %v", d, err)
		}
	}
	// a version 2 record still parses and verifies (its signature), but
	// carries no pipeline or topic: aggregators refuse it by version
	v2 := signV2(key, ControlCloseEpoch, "query", "2006-03", 3, 8, at)
	if c2, err := ParseControl(v2); err != nil || c2.Version != ControlSigned || c2.Pipeline != ([32]byte{}) || c2.Topic != "" || c2.Verify(pub) != nil {
		t.Errorf("version 2: %+v %v", c2, err)
	} else if c2.Version, c2.Pipeline, c2.Topic = ControlBound, testPipeline, ReportsTopic; c2.Verify(pub) == nil {
		t.Error("a version 2 signature verifies as version 3")
	}
	forged, _ := SignControl(otherKey, ControlOpenEpoch, "query", "fake", target(0, 1), at, time.Minute)
	if f, err := ParseControl(forged); err != nil || !errors.Is(f.Verify(pub), ErrControlSignature) {
		t.Errorf("forged: %+v %v", f, err)
	}
	old, _ := json.Marshal(EpochOpen{Op: ControlOpenEpoch, App: "query", Epoch: "2006-03", Partitions: 8})
	if u, err := ParseControl(old); err != nil || u.Version != ControlUnsigned || !errors.Is(u.Verify(pub), ErrUnsignedControl) {
		t.Errorf("unsigned: %+v %v", u, err)
	}
	sig := `"sig":"` + strings.Repeat("A", 86) + `=="`
	pipe := `"pipeline":"` + strings.Repeat("0a", 32) + `"`
	for _, bad := range []string{
		`{"v":4,"op":"open-epoch","app":"a","epoch":"e"}`,
		`{"v":3,"op":"open-epoch","app":"a","epoch":"e","partitions":1,"topic":"reports",` + sig + `}`,
		`{"v":3,"op":"open-epoch","app":"a","epoch":"e","partitions":1,"pipeline":"` + strings.Repeat("0A", 32) + `","topic":"reports",` + sig + `}`,
		`{"v":3,"op":"open-epoch","app":"a","epoch":"e","partitions":1,"pipeline":"` + strings.Repeat("0a", 31) + `","topic":"reports",` + sig + `}`,
		`{"v":3,"op":"open-epoch","app":"a","epoch":"e","partitions":1,` + pipe + `,` + sig + `}`,
		`{"v":3,"op":"open-epoch","app":"a","epoch":"e","partitions":1,` + pipe + `,"topic":"` + strings.Repeat("t", 256) + `",` + sig + `}`,
		`{"v":2,"op":"open-epoch","app":"a","epoch":"e","partitions":1,` + pipe + `,` + sig + `}`,
		`{"op":"open-epoch","app":"a","epoch":"e","partitions":1,"topic":"reports"}`,
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
	if _, err := SignControl(key[:10], ControlOpenEpoch, "a", "e", target(0, 1), at, time.Minute); err == nil {
		t.Error("signed with a short key")
	}
}

func FuzzParseControl(f *testing.F) {
	f.Add([]byte(`{"op":"open-epoch","app":"query","epoch":"2006-03","partitions":8}`))
	f.Add([]byte(`{"app":"query","epoch":"2006-03","partitions":8}`))
	f.Add([]byte(`{"op":"close-epoch","app":"a","epoch":"e"}`))
	pub, key, _ := ed25519.GenerateKey(nil)
	for _, op := range []string{ControlOpenEpoch, ControlCloseEpoch} {
		b, _ := SignControl(key, op, "query", "2006-03", target(1, 8), time.Unix(1767225600, 0), ControlValidity)
		f.Add(b)
		f.Add(signV2(key, op, "query", "2006-03", 1, 8, time.Unix(1767225600, 0)))
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
		case ControlSigned, ControlBound:
			if (c.Version == ControlSigned) != (c.Topic == "") || c.Partition < 0 || c.Partition >= c.Partitions || c.Partitions > MaxControlPartitions || c.Issued < 0 || c.NotAfter < c.Issued || len(c.Sig) != ed25519.SignatureSize {
				t.Fatalf("accepted signed %+v", c)
			}
			// the signature covers the decoded fields: a changed message
			// verifies only when its fields are the signed ones
			if c.Verify(pub) == nil {
				want, _ := SignControl(key, c.Op, c.App, c.Epoch, ControlTarget{c.Pipeline, c.Topic, c.Partition, c.Partitions},
					time.Unix(c.Issued, 0), time.Duration(c.NotAfter-c.Issued)*time.Second)
				if c.Version == ControlSigned {
					want = signV2(key, c.Op, c.App, c.Epoch, c.Partition, c.Partitions, time.Unix(c.Issued, 0))
				}
				w, _ := ParseControl(want)
				if w == nil || w.App != c.App || w.Epoch != c.Epoch || w.Op != c.Op || w.Issued != c.Issued || w.NotAfter != c.NotAfter ||
					w.Pipeline != c.Pipeline || w.Topic != c.Topic || w.Version != c.Version {
					t.Fatalf("verifies with fields %+v", c)
				}
			}
		default:
			t.Fatalf("version %d", c.Version)
		}
	})
}
