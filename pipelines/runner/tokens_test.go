package runner

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/normalize"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/release/policy"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// TestRunTokens runs `crowdlog run` with tokens on (the default: an
// issuer in process, one enrolled identity per AnonID, randomness and
// report tokens, ARC under FT_u) on the first 60 users of the bundled log
// and compares each export with tests/truth's release from the raw log;
// then the same run with a report budget below one user's needs stops
// with an error wrapping token.ErrBudget (bounded, no hang), and with
// --tokens off still releases exactly.
func TestRunTokens(t *testing.T) {
	needClickHouse(t)
	if testing.Short() {
		t.Skip("end-to-end runs in -short mode")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ch := startClickHouse(ctx, t, dir)
	defer ch.Stop()
	input := writeSubset(t, dir, 60)
	run := func(t *testing.T, db string, cfg Config) (*Summary, string, error) {
		sub := t.TempDir()
		out := filepath.Join(sub, "out.tsv")
		cfg.Input, cfg.App, cfg.Export, cfg.StateDir, cfg.Partitions = input, "query", out, filepath.Join(sub, "state"), 2
		cfg.ClickHouse, cfg.Database, cfg.Timeout = ch.TCPAddr, db, 3*time.Minute
		before := goroutineStacks()
		sum, err := Run(ctx, cfg)
		checkNoLeaks(t, before)
		return sum, out, err
	}
	for i, c := range []struct {
		policy string
		k      int
		off    bool
	}{{"ft-u", 2, false}, {"ft-a", 3, false}, {"ft-u", 2, true}} {
		name := c.policy
		if c.off {
			name += "/tokens-off"
		}
		t.Run(name, func(t *testing.T) {
			sum, out, err := run(t, "tok"+string(rune('a'+i)), Config{Policy: c.policy, K: c.k, TokensOff: c.off})
			if err != nil {
				t.Fatal(err)
			}
			want, err := truth.Release(input, c.policy, c.k, 0)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := truth.ReadExport(out)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s k=%d: %d items expected, %d released; %s; sent %d decrypted %d dropped %d",
				c.policy, c.k, len(want), len(got), sum.Tokens, sum.Sent, sum.Decrypted, sum.AggregatorDropped)
			if d := truth.Diff(want, got, 10); len(d) > 0 {
				t.Fatalf("export differs from the raw-log release (%d vs %d items):\n%v", len(got), len(want), d)
			}
			if len(want) == 0 {
				t.Fatal("nothing to release: the subset is too small to test anything")
			}
			if c.off != (sum.Tokens == "off") || (!c.off && !strings.HasPrefix(sum.Tokens, "on:")) {
				t.Fatalf("summary says tokens %q", sum.Tokens)
			}
			if sum.AggregatorDropped != 0 {
				t.Fatalf("the aggregator dropped %d reports", sum.AggregatorDropped)
			}
		})
	}
	t.Run("budget", func(t *testing.T) {
		t0 := time.Now()
		_, _, err := run(t, "tokbudget", Config{Policy: "ft-a", K: 3, ReportTokens: 1})
		if !errors.Is(err, token.ErrBudget) {
			t.Fatalf("report budget 1: %v, want an error wrapping token.ErrBudget", err)
		}
		t.Logf("report budget 1: stopped after %s: %v", time.Since(t0).Round(time.Millisecond), err)
	})
}

// TestTokenBudgets: the default budgets are the log's largest per-user
// needs under FT (computed here directly from the raw records) and d
// under the DP policies; flags override them.
func TestTokenBudgets(t *testing.T) {
	input := writeSubset(t, t.TempDir(), 30)
	app, _ := apps.Lookup("query")
	ft, err := ResolvePolicy("ft-u", 5, policy.Params{})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planTokens(input, aol.Options{}, app, ft, "")
	if err != nil {
		t.Fatal(err)
	}
	// independent truth: per user, distinct normalized queries and query
	// instances (a repeat of the previous query, e.g. a next-page request,
	// is not a new instance)
	wantN, wantD := 0, 0
	users := map[string]map[string]bool{}
	recs := map[string]int{}
	_, err = aol.ReadUsers(input, func(u aol.User) error {
		users[u.AnonID] = map[string]bool{}
		prev := "\x00"
		for _, r := range u.Records {
			q, ok := normalize.Query(r.Query)
			if !ok || q == prev {
				continue
			}
			prev = q
			users[u.AnonID][q] = true
			recs[u.AnonID]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, qs := range users {
		wantN, wantD = max(wantN, len(qs)), max(wantD, recs[id])
	}
	if n, d := plan.budgets(0, 0, ft); n != wantN || d != wantD || len(plan.keys) != 30 {
		t.Fatalf("FT budgets %d, %d for %d identities; want %d, %d for 30", n, d, len(plan.keys), wantN, wantD)
	}
	if n, d := plan.budgets(7, 9, ft); n != 7 || d != 9 {
		t.Fatalf("given budgets: %d, %d", n, d)
	}
	dp, err := ResolvePolicy("dp-u", 0, policy.Params{Epsilon: 1, D: 3, Users: 30})
	if err != nil {
		t.Fatal(err)
	}
	if n, d := plan.budgets(0, 0, dp); n != 3 || d != 3 {
		t.Fatalf("dp-u d=3 budgets %d, %d", n, d)
	}
}
