package stage

import (
	"encoding/json"
	"testing"

	"github.com/crowdlog/crowdlog/protocol"
)

func msg(t testing.TB, d protocol.Decrypted) []byte {
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStateDedupAndClose(t *testing.T) {
	s := NewState()
	item := func(report, unit, variant string) []byte {
		return msg(t, protocol.Decrypted{Kind: protocol.KindItem, App: "query", Epoch: "e", Policy: "ft-u", K: 2,
			Tag: "t1", Report: report, Unit: unit, Item: "weather", Variant: variant})
	}
	for _, b := range [][]byte{item("r1", "u1", "Weather"), item("r2", "u1", "weather"), item("r3", "u2", "weather"),
		item("r1", "u1", "Weather") /* redelivered */, []byte("not json")} {
		if _, _, done := s.Apply(b); done {
			t.Fatal("released before every partition closed")
		}
	}
	sum := msg(t, protocol.Decrypted{Kind: protocol.KindSummary, App: "query", Epoch: "e", Policy: "ft-u", K: 2,
		Summary: []protocol.SummaryRow{{Reports: 3, Shares: 1, Tags: 4}}, Partition: 1, Partitions: 2})
	s.Apply(sum)
	closed := func(p int) []byte {
		return msg(t, protocol.Decrypted{Kind: protocol.KindClosed, App: "query", Epoch: "e", Partition: p, Partitions: 2})
	}
	if _, _, done := s.Apply(closed(1)); done {
		t.Fatal("released after one of two partitions")
	}
	s.Apply(sum) // re-emitted after a restart: not counted again
	if app, epoch, done := s.Apply(closed(0)); !done || app != "query" || epoch != "e" {
		t.Fatal("not released after both partitions closed")
	}
	if _, _, done := s.Apply(closed(0)); done {
		t.Fatal("released twice")
	}
	items, undec := s.Release("query", "e")
	if len(items) != 1 || items[0].Impressions != 3 || items[0].Users != 2 || items[0].Variant != "weather" {
		t.Fatalf("items %+v", items)
	}
	if len(undec) != 1 || undec[0].Tags != 4 || undec[0].Reports != 3 {
		t.Fatalf("undecrypted %+v", undec)
	}
	if s.Duplicates != 1 || s.Malformed != 1 {
		t.Fatalf("duplicates %d malformed %d", s.Duplicates, s.Malformed)
	}
}

func FuzzApply(f *testing.F) {
	f.Add([]byte(`{"kind":"item","app":"a","epoch":"e","tag":"t","report":"r"}`))
	f.Add([]byte(`{"kind":"closed","app":"a","epoch":"e","partitions":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := NewState()
		if app, epoch, done := s.Apply(b); done {
			s.Release(app, epoch)
		}
	})
}
