package release

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/clickhouse/chtest"
)

// srv is the package's shared ClickHouse server (chtest), set by
// openTestWriter for the tests that dial it themselves.
var srv *clickhouse.Server

func TestMain(m *testing.M) { chtest.Main(m) }

// openTestWriter returns a Writer on a fresh database of the shared server.
// A missing binary skips, unless CI=true, where it fails.
func openTestWriter(t *testing.T) *Writer {
	t.Helper()
	srv = chtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := fmt.Sprintf("t_%d", time.Now().UnixNano())
	w, err := Open(ctx, srv.TCPAddr, db)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// rawCount counts physical rows (no FINAL) of key in table: what an
// analyst's plain SELECT sees.
func rawCount(t *testing.T, w *Writer, table string, key Key) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n uint64
	if err := w.conn.QueryRow(ctx, "SELECT count() FROM "+table+keyWhere, keyArgs(key)...).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func makeItems(key Key, n int) []Item {
	items := make([]Item, n)
	for i := range items {
		items[i] = Item{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K,
			Item: fmt.Sprintf("item %05d", i), Variant: fmt.Sprintf("Item %d", i),
			Impressions: uint64(1000 - i%97), Users: uint64(5 + i%13)}
	}
	return items
}

// sortedCopy orders like ReleasedItems promises (impressions desc, item asc),
// written independently of SortItems.
func sortedCopy(items []Item) []Item {
	out := append([]Item(nil), items...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Impressions != out[j].Impressions {
			return out[i].Impressions > out[j].Impressions
		}
		return out[i].Item < out[j].Item
	})
	return out
}

func ctx30(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestWriteReleaseTwiceIsIdempotent(t *testing.T) {
	w := openTestWriter(t)
	ctx := ctx30(t)
	key := Key{"query", "2006-03", "ft-u", 5}
	items := makeItems(key, 200)
	items = append(items, Item{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K,
		Item: "tab\tand\nnewline ünï 'quote' \\", Impressions: 7, Users: 5})
	undec := []Undecrypted{
		{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K, Reports: 194, Users: 4, Tags: 5},
		{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K, Reports: 1, Users: 1, Tags: 9000},
		{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K, Reports: 1, Users: 1, Tags: 1000},
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := 0; i < 2; i++ {
		if err := w.WriteRelease(ctx, items, undec, at.Add(time.Duration(i)*time.Hour)); err != nil {
			t.Fatalf("WriteRelease #%d: %v", i+1, err)
		}
	}
	got, err := w.ReleasedItems(ctx, key.App, key.Epoch, key.Policy, key.K)
	if err != nil {
		t.Fatal(err)
	}
	if want := sortedCopy(items); !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %d items, want %d equal items", len(got), len(want))
	}
	if n := rawCount(t, w, "released_items", key); n != uint64(len(items)) {
		t.Fatalf("released_items holds %d physical rows, want %d", n, len(items))
	}
	if n := rawCount(t, w, "releases", key); n != 1 {
		t.Fatalf("releases holds %d rows for the key, want 1", n)
	}
	gotU, err := w.UndecryptedSummary(ctx, key.App, key.Epoch, key.Policy, key.K)
	if err != nil {
		t.Fatal(err)
	}
	wantU := []Undecrypted{undec[0], undec[1]}
	wantU[1].Tags = 10000 // the two (1 report, 1 user) lines merged
	if !reflect.DeepEqual(gotU, wantU) {
		t.Fatalf("undecrypted summary = %+v, want %+v", gotU, wantU)
	}
	// The release log carries counts of the first (only) write.
	var nItems, impr uint64
	var relAt time.Time
	if err := w.conn.QueryRow(ctx, "SELECT items, impressions, released_at FROM releases"+keyWhere, keyArgs(key)...).
		Scan(&nItems, &impr, &relAt); err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, it := range items {
		sum += it.Impressions
	}
	if nItems != uint64(len(items)) || impr != sum || !relAt.Equal(at) {
		t.Fatalf("releases row = (%d, %d, %v), want (%d, %d, %v)", nItems, impr, relAt, len(items), sum, at)
	}
	// Other keys are untouched and independent.
	other, err := w.ReleasedItems(ctx, key.App, key.Epoch, "dp-u", key.K)
	if err != nil || len(other) != 0 {
		t.Fatalf("other key: %v items, err %v", len(other), err)
	}
}

func TestRedoAfterCrashLeavesNoDuplicates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stage   string
		after   int // hook calls at stage before crashing
		rowsMid uint64
	}{
		{"after all items before releases row", "before-releases-row", 0, 50},
		{"after two item batches", "items-batch", 1, 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := openTestWriter(t)
			ctx := ctx30(t)
			w.BatchSize = 7
			key := Key{"query", "e1", "ft-a", 3}
			items := makeItems(key, 50)
			undec := []Undecrypted{{App: key.App, Epoch: key.Epoch, Policy: key.Policy, K: key.K, Reports: 2, Users: 2, Tags: 11}}
			calls := 0
			crash := errors.New("simulated crash")
			w.Hook = func(stage string) error {
				if stage != tc.stage {
					return nil
				}
				calls++
				if calls > tc.after {
					return crash
				}
				return nil
			}
			err := w.WriteRelease(ctx, items, undec, time.Unix(1700000000, 0))
			if !errors.Is(err, crash) {
				t.Fatalf("first attempt: err = %v, want the simulated crash", err)
			}
			if n := rawCount(t, w, "released_items", key); n != tc.rowsMid {
				t.Fatalf("after crash released_items has %d rows, want %d", n, tc.rowsMid)
			}
			if done, err := w.IsReleased(ctx, key); err != nil || done {
				t.Fatalf("IsReleased after crash = %v, %v; want false", done, err)
			}

			// The restarted release stage: a new Writer, same inputs.
			w.Hook = nil
			w2, err := Open(ctx, srv.TCPAddr, w.Database())
			if err != nil {
				t.Fatal(err)
			}
			defer w2.Close()
			if err := w2.WriteRelease(ctx, items, undec, time.Unix(1700000100, 0)); err != nil {
				t.Fatalf("redo: %v", err)
			}
			if n := rawCount(t, w2, "released_items", key); n != uint64(len(items)) {
				t.Fatalf("after redo released_items has %d physical rows, want %d", n, len(items))
			}
			if n := rawCount(t, w2, "undecrypted_summary", key); n != 1 {
				t.Fatalf("after redo undecrypted_summary has %d rows, want 1", n)
			}
			if n := rawCount(t, w2, "releases", key); n != 1 {
				t.Fatalf("after redo releases has %d rows, want 1", n)
			}
			got, err := w2.ReleasedItems(ctx, key.App, key.Epoch, key.Policy, key.K)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, sortedCopy(items)) {
				t.Fatalf("read back after redo differs from input (%d vs %d rows)", len(got), len(items))
			}
		})
	}
}

func TestWriteReleaseManyBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 120k rows")
	}
	w := openTestWriter(t)
	ctx := ctx30(t)
	key := Key{"query", "all", "ft-u", 5}
	items := makeItems(key, 120_001) // three 50k batches, the last partial
	if err := w.WriteRelease(ctx, items, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	var n, sum uint64
	if err := w.conn.QueryRow(ctx, "SELECT count(), sum(impressions) FROM released_items"+keyWhere, keyArgs(key)...).Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, it := range items {
		want += it.Impressions
	}
	if n != uint64(len(items)) || sum != want {
		t.Fatalf("count, sum = %d, %d; want %d, %d", n, sum, len(items), want)
	}
}

func TestEmptyKeyedReleaseIsRecorded(t *testing.T) {
	w := openTestWriter(t)
	ctx := ctx30(t)
	key := Key{"query", "e9", "dp-u", 14}
	if err := w.WriteKeyedRelease(ctx, key, nil, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	done, err := w.IsReleased(ctx, key)
	if err != nil || !done {
		t.Fatalf("IsReleased = %v, %v; want true", done, err)
	}
}

func TestWriteKeyedReleaseRejectsBadInput(t *testing.T) {
	w := &Writer{} // validation happens before any I/O
	key := Key{"query", "e1", "ft-u", 5}
	ctx := context.Background()
	other := Item{App: "query", Epoch: "e2", Policy: "ft-u", K: 5, Item: "x"}
	if err := w.WriteKeyedRelease(ctx, key, []Item{other}, nil, time.Time{}); err == nil {
		t.Error("item of another key accepted")
	}
	dup := Item{App: "query", Epoch: "e1", Policy: "ft-u", K: 5, Item: "x"}
	if err := w.WriteKeyedRelease(ctx, key, []Item{dup, dup}, nil, time.Time{}); err == nil {
		t.Error("duplicate item accepted")
	}
	if err := w.WriteKeyedRelease(ctx, Key{K: -1}, nil, nil, time.Time{}); err == nil {
		t.Error("negative k accepted")
	}
	if _, err := Open(ctx, "127.0.0.1:1", "bad-name;"); err == nil {
		t.Error("bad database name accepted")
	}
}
