package release

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// TestViews writes made-up releases of the query, reformulation, click, url,
// ltr and keyword apps and reads them back through the analyst views on a
// real ClickHouse server (18.16 here, or whatever is installed).
func TestViews(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	item := func(app, it string, imp, users uint64) Item {
		return Item{App: app, Epoch: "e1", Policy: "ft-u", K: 2, Item: it, Impressions: imp, Users: users}
	}
	write := func(app string, items ...Item) {
		t.Helper()
		if err := w.WriteKeyedRelease(ctx, Key{app, "e1", "ft-u", 2}, items, nil, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	write("query", item("query", "dog", 10, 6), item("query", `a→b\c`, 4, 3))
	write("reformulation",
		item("reformulation", "dog → puppy", 5, 4),
		item("reformulation", "dog → dog food", 2, 2),
		item("reformulation", "cat → kitten", 3, 2), // cat: no query-app release
		item("reformulation", `a\u2192b\u005cc → dog`, 4, 3))
	write("click", item("click", `dog → www.example.com`, 7, 5))
	write("url", item("url", "www.example.com", 9, 6))
	write("ltr", item("ltr", "dog → www.example.com → dwell → 1m-5m", 3, 2))
	write("keyword", item("keyword", "dog", 12, 7))
	// an unfinished release (no releases row) must not show
	if err := w.insertItems(ctx, Key{"reformulation", "e2", "ft-u", 2},
		[]Item{{App: "reformulation", Epoch: "e2", Policy: "ft-u", K: 2, Item: "x → y", Impressions: 9, Users: 9}}, time.Now()); err != nil {
		t.Fatal(err)
	}

	type prop struct {
		source, target    string
		rem               uint8
		imp               uint64
		released, srcImp  uint64
		ofReleased, ofSrc *float64
	}
	rows, err := w.conn.Query(ctx, `SELECT source, target, is_remainder, impressions, source_released, source_impressions,
		share_of_released, share_of_source FROM reformulation_proportions ORDER BY source, is_remainder, impressions DESC`)
	if err != nil {
		t.Fatal(err)
	}
	var got []prop
	for rows.Next() {
		var p prop
		if err := rows.Scan(&p.source, &p.target, &p.rem, &p.imp, &p.released, &p.srcImp, &p.ofReleased, &p.ofSrc); err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	want := []prop{
		{`a→b\c`, "dog", 0, 4, 4, 4, f(1), f(1)},
		{`a→b\c`, "?", 1, 0, 4, 4, nil, f(0)},
		{"cat", "kitten", 0, 3, 3, 0, f(1), nil},
		{"dog", "puppy", 0, 5, 7, 10, f(5.0 / 7), f(0.5)},
		{"dog", "dog food", 0, 2, 7, 10, f(2.0 / 7), f(0.2)},
		{"dog", "?", 1, 3, 7, 10, nil, f(0.3)},
	}
	if len(got) != len(want) {
		t.Fatalf("reformulation_proportions: %d rows, want %d: %+v", len(got), len(want), got)
	}
	feq := func(a, b *float64) bool {
		return (a == nil) == (b == nil) && (a == nil || math.Abs(*a-*b) < 1e-9)
	}
	for i, w := range want {
		g := got[i]
		if g.source != w.source || g.target != w.target || g.rem != w.rem || g.imp != w.imp || g.released != w.released ||
			g.srcImp != w.srcImp || !feq(g.ofReleased, w.ofReleased) || !feq(g.ofSrc, w.ofSrc) {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
	}

	one := func(q string, dest ...any) {
		t.Helper()
		if err := w.conn.QueryRow(ctx, q).Scan(dest...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var a, b, c, d string
	var imp, users uint64
	one("SELECT query, url, impressions FROM click_pairs", &a, &b, &imp)
	if a != "dog" || b != "www.example.com" || imp != 7 {
		t.Errorf("click_pairs: %q %q %d", a, b, imp)
	}
	one("SELECT url, impressions, users FROM url_popularity", &a, &imp, &users)
	if a != "www.example.com" || imp != 9 || users != 6 {
		t.Errorf("url_popularity: %q %d %d", a, imp, users)
	}
	one("SELECT query, url, feature, bucket, impressions FROM ltr_features", &a, &b, &c, &d, &imp)
	if a != "dog" || b != "www.example.com" || c != "dwell" || d != "1m-5m" || imp != 3 {
		t.Errorf("ltr_features: %q %q %q %q %d", a, b, c, d, imp)
	}
	one("SELECT keyword, impressions FROM keyword_counts", &a, &imp)
	if a != "dog" || imp != 12 {
		t.Errorf("keyword_counts: %q %d", a, imp)
	}
	// qualified names work from another database too
	one("SELECT count() FROM "+w.Database()+".reformulation_pairs", &imp)
	if imp != 4 {
		t.Errorf("reformulation_pairs has %d rows, want 4 (the unfinished release must not show)", imp)
	}
	// and from a session whose current database is another one
	def, err := dial(ctx, srv.TCPAddr, "default")
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	if err := def.QueryRow(ctx, "SELECT count() FROM "+w.Database()+".reformulation_proportions").Scan(&imp); err != nil || imp != 6 {
		t.Errorf("reformulation_proportions from database default: %d rows, %v; want 6", imp, err)
	}
	for _, s := range ViewStatements() {
		if !strings.HasPrefix(s, "CREATE VIEW IF NOT EXISTS ") {
			t.Errorf("view statement does not start with CREATE VIEW IF NOT EXISTS: %.40s", s)
		}
	}
}
