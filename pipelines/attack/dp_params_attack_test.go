package attack

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/release/policy"
)

// colsWriteLog writes an AOL TSV log of users made-up users (one query
// each) to a file in dir and returns its path.
func colsWriteLog(t *testing.T, dir, name string, users int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n")
	for u := range users {
		fmt.Fprintf(&b, "%d\tweather\t2006-03-01 10:00:00\t\t\n", 100+u)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAttackDPParamsFromData: a DP release's parameters must not be read
// from the data. Neighbouring logs D (50 users) and D' (D plus one user)
// go through `crowdlog run` (runner.Run) under every DP policy given ε
// but no U, and through a pipeline file without policy.users: both are
// refused before anything starts, naming the missing U, on D and D'
// alike; with U configured the resolved policy (δ, thresholds, noise
// scales: the ledger's params column) is the same for D and D'. Control:
// the rule `crowdlog run` had — U = the AnonIDs counted in the input,
// δ = 1/(U+1) — resolves different (δ, threshold, scale) on D and D'
// under every DP policy, so the ledger's params (U) and the noise itself
// tell whether the extra user is in the log.
func TestAttackDPParamsFromData(t *testing.T) {
	dir := t.TempDir()
	d := colsWriteLog(t, dir, "d.tsv", 50)
	dn := colsWriteLog(t, dir, "dn.tsv", 51)
	var refused, differ []string
	for _, kind := range policy.Kinds() {
		if !kind.IsDP() {
			continue
		}
		var errs []string
		for _, in := range []string{d, dn} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			start := time.Now()
			_, err := runner.Run(ctx, runner.Config{Input: in, App: "query", Policy: string(kind), TokensOff: true,
				DP: policy.Params{Epsilon: math.Ln10}, StateDir: filepath.Join(dir, "state-"+string(kind)), Database: "never"})
			cancel()
			if err == nil || !strings.Contains(err.Error(), "--users") {
				t.Fatalf("%s on %s without U: %v, want a refusal naming --users", kind, filepath.Base(in), err)
			}
			if el := time.Since(start); el > 20*time.Second {
				t.Errorf("%s: refused only after %s: it must fail before any server starts", kind, el)
			}
			errs = append(errs, err.Error())
		}
		if errs[0] != errs[1] {
			t.Errorf("%s: D and D' refused differently: %q vs %q", kind, errs[0], errs[1])
		}
		if _, err := pipeline.Parse([]byte(fmt.Sprintf("name: p\napp: {name: query}\npolicy: {kind: %s, epsilon: 2.302585092994046}\n", kind))); !errors.Is(err, pipeline.ErrInvalid) || !strings.Contains(err.Error(), "policy.users") {
			t.Errorf("%s: a pipeline file without policy.users: %v, want ErrInvalid naming policy.users", kind, err)
		}
		refused = append(refused, string(kind))
		// configured U: the same policy whatever the log
		cfg := policy.Params{Epsilon: math.Ln10, Users: 1000}
		a, err := runner.ResolvePolicy(string(kind), 0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := runner.ResolvePolicy(string(kind), 0, cfg); a.String() != b.String() {
			t.Errorf("%s: configured U resolves %s and %s", kind, a, b)
		}
		// control: U counted from each log, δ = 1/(U+1)
		var pols []*policy.Policy
		for _, u := range []int{50, 51} {
			p, err := policy.New(policy.Params{Kind: kind, Epsilon: math.Ln10, Users: u})
			if err != nil {
				t.Fatal(err)
			}
			pols = append(pols, p)
		}
		if pols[0].String() == pols[1].String() {
			t.Errorf("control %s: counting U gave the same policy on D and D' (%s): the control cannot see a data-dependent parameter", kind, pols[0])
		} else {
			differ = append(differ, fmt.Sprintf("%s δ %.4g→%.4g T %.3f→%.3f", kind, pols[0].Delta, pols[1].Delta, pols[0].Threshold, pols[1].Threshold))
		}
	}
	fmt.Printf("ATTACK dp-params-from-data: D (50 users) vs D' (51): %d DP policies without a configured U refused before starting on both (%s), a pipeline file without policy.users invalid, configured U = 1000 resolves one policy for both; control (U counted from the input, δ = 1/(U+1)): %d of %d policies differ between D and D' [%s]\n",
		len(refused), strings.Join(refused, ", "), len(differ), len(refused), strings.Join(differ, "; "))
}
