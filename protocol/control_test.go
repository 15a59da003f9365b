package protocol

import (
	"encoding/json"
	"errors"
	"testing"
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

func FuzzParseControl(f *testing.F) {
	f.Add([]byte(`{"op":"open-epoch","app":"query","epoch":"2006-03","partitions":8}`))
	f.Add([]byte(`{"app":"query","epoch":"2006-03","partitions":8}`))
	f.Add([]byte(`{"op":"close-epoch","app":"a","epoch":"e"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseControl(b)
		if err == nil && (c.App == "" || c.Epoch == "" || (c.Op != ControlOpenEpoch && c.Op != ControlCloseEpoch)) {
			t.Fatalf("accepted %+v", c)
		}
	})
}
