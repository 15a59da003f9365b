package release

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestDrawRoundTrip: a draw decodes to the items and lines it was encoded
// from; a draw of another key, another version, unknown fields or junk is
// refused with ErrBadDraw.
func TestDrawRoundTrip(t *testing.T) {
	key := Key{"query", "e1", "dp-u", 3}
	items := makeItems(key, 5)
	undec := []Undecrypted{{App: "query", Epoch: "e1", Policy: "dp-u", K: 3, Reports: 4, Users: 2, Tags: 7}}
	b, err := encodeDraw(items, undec)
	if err != nil {
		t.Fatal(err)
	}
	gi, gu, err := DecodeDraw(key, b)
	if err != nil || !reflect.DeepEqual(gi, items) || !reflect.DeepEqual(gu, undec) {
		t.Fatalf("round trip: %v, %+v %+v", err, gi, gu)
	}
	if gi, gu, err := DecodeDraw(key, mustEncode(t, nil, nil)); err != nil || len(gi) != 0 || len(gu) != 0 {
		t.Fatalf("empty draw: %v %v %v", gi, gu, err)
	}
	other := Key{"query", "e2", "dp-u", 3}
	for name, bad := range map[string][]byte{
		"other key":     b,
		"junk":          []byte("not json"),
		"version":       []byte(`{"v":2,"items":[],"undec":[]}`),
		"unknown field": []byte(`{"v":1,"items":[],"undec":[],"seed":"00"}`),
	} {
		k := key
		if name == "other key" {
			k = other
		}
		if _, _, err := DecodeDraw(k, bad); !errors.Is(err, ErrBadDraw) {
			t.Errorf("%s: err %v, want ErrBadDraw", name, err)
		}
	}
	day := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	r := PDDRound{Campaign: "flu", Day: day, Active: 3, Counts: []KeywordCount{{"fever", 4}}}
	if _, err := decodePDDDraw("cold", day, mustPDD(t, r)); !errors.Is(err, ErrBadDraw) {
		t.Errorf("PDD draw of another campaign: %v", err)
	}
	got, err := decodePDDDraw("flu", day, mustPDD(t, r))
	if err != nil || got.Campaign != "flu" || !got.Day.Equal(day) || !reflect.DeepEqual(got.Counts, r.Counts) {
		t.Errorf("PDD draw: %+v %v", got, err)
	}
}

func mustEncode(t *testing.T, items []Item, undec []Undecrypted) []byte {
	b, err := encodeDraw(items, undec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustPDD(t *testing.T, r PDDRound) []byte {
	b, err := encodePDDDraw(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeDraw: a stored draw is read back from ClickHouse; whatever the
// bytes, decoding returns items of the key or an error, never panics.
func FuzzDecodeDraw(f *testing.F) {
	key := Key{"query", "e1", "dp-u", 3}
	b, _ := encodeDraw(makeItems(key, 2), nil)
	f.Add(b)
	f.Add([]byte(`{"v":1,"items":null,"undec":null}`))
	f.Add([]byte(`{"v":1,"round":{"Campaign":"flu"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		items, undec, err := DecodeDraw(key, b)
		if err != nil {
			return
		}
		for _, it := range items {
			if it.Key() != key {
				t.Fatalf("item of %s accepted", it.Key())
			}
		}
		for _, u := range undec {
			if u.Key() != key {
				t.Fatalf("line of %s accepted", u.Key())
			}
		}
		decodePDDDraw("flu", time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC), b)
	})
}
