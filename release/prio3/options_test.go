package prio3

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/clickhouse/chtest"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/pdd"
)

func TestOptionsValidate(t *testing.T) {
	d := DefaultOptions()
	if err := d.Validate(); err != nil || d.Mode != ModeGroups {
		t.Fatalf("defaults: mode %q, %v", d.Mode, err)
	}
	parse := func(args ...string) (Options, error) {
		o := DefaultOptions()
		f := pflag.NewFlagSet("t", pflag.ContinueOnError)
		o.AddFlags(f)
		if err := f.Parse(args); err != nil {
			return o, err
		}
		return o, o.Validate()
	}
	good := []string{"--mode", "prio3", "--campaign", "flu", "--collector-key", "c.key", "--min-batch-size", "10"}
	o, err := parse(good...)
	if err != nil || o.Kind != KindSumVec || o.Bits != p3.DefaultBits || o.MinBatchSize != 10 || o.Campaign != "flu" {
		t.Fatalf("%+v, %v", o, err)
	}
	for name, args := range map[string][]string{
		"mode":       {"--mode", "threshold"},
		"campaign":   {"--mode", "prio3", "--collector-key", "c.key", "--min-batch-size", "10"},
		"long name":  {"--mode", "prio3", "--campaign", strings.Repeat("c", 65), "--min-batch-size", "10"},
		"min batch":  {"--mode", "prio3", "--campaign", "flu", "--collector-key", "c.key"},
		"no key":     {"--mode", "prio3", "--campaign", "flu", "--collector-key", "", "--min-batch-size", "10"},
		"kind":       append(good, "--kind", "histogram"),
		"bits (New)": append(good, "--bits", "17"),
	} {
		o, err := parse(args...)
		if err == nil {
			_, err = o.Measurement(10)
		}
		if err == nil {
			t.Errorf("%s: %v accepted", name, args)
		}
	}
	o, _ = parse(append(good, "--kind", "presence", "--max-weight", "3")...)
	if m, err := o.Measurement(10); err != nil || m != (p3.Config{Kind: p3.KindPresence, Length: 10, MaxWeight: 3}) {
		t.Fatalf("presence: %+v, %v", m, err)
	}
}

// TestOptionsNew: New reads the list and the collector key and opens
// ClickHouse; it takes --epsilon, --dataset and --budget-epsilon and
// refuses a negative ε and a --max-count other than the measurement's
// bound.
func TestOptionsNew(t *testing.T) {
	dir := t.TempDir()
	ck := genKey(t, 5)
	keyPath := filepath.Join(dir, "collector.key")
	if err := onion.SaveKeyPair(keyPath, "prio3-collector", ck); err != nil {
		t.Fatal(err)
	}
	old := genKey(t, 4)
	oldPath := filepath.Join(dir, "collector.1.key")
	if err := onion.SaveKeyPair(oldPath, "prio3-collector", old); err != nil {
		t.Fatal(err)
	}
	listPath := filepath.Join(dir, "list.txt")
	if err := os.WriteFile(listPath, []byte("flu\nfever\ncough\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Mode: ModePrio3, Campaign: "flu", CollectorKey: []string{keyPath, oldPath}, Kind: KindSumVec, Bits: 2, MinBatchSize: 4, Blacklist: []string{"fever"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := pdd.DefaultOptions()
	base.Keywords, base.Epsilon = listPath, -1
	if _, _, err := o.New(ctx, base, nil); err == nil || !strings.Contains(err.Error(), "epsilon") {
		t.Fatalf("negative epsilon accepted: %v", err)
	}
	base.Epsilon, base.MaxCount = 1, 10
	if _, _, err := o.New(ctx, base, nil); err == nil || !strings.Contains(err.Error(), "--max-count 10") {
		t.Fatalf("--max-count 10 accepted for a bound of 3: %v", err)
	}
	srv := chtest.Server(t)
	base.MaxCount, base.ClickHouse, base.Database = 3, srv.TCPAddr, fmt.Sprintf("t_%d", time.Now().UnixNano())
	base.Dataset, base.Budget = "ds", release.Budget{Epsilon: 7}
	st, w, err := o.New(ctx, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := st.Collector
	if c.Campaign != "flu" || c.MinBatchSize != 4 || c.Measurement != (p3.Config{Kind: p3.KindSumVec, Length: 3, Bits: 2}) ||
		!c.Key.Public.Equal(ck.Public) || len(st.OldKeys) != 1 || !st.OldKeys[0].Public.Equal(old.Public) || st.List.Len() != 3 || len(st.Blacklist) != 1 ||
		st.Epsilon != 1 || st.Dataset != "ds" || st.Budget.Epsilon != 7 {
		t.Fatalf("stage %+v", st)
	}
}

// TestFiniteBudget: a Prio3 release never runs without an ε budget: 0
// (no limit elsewhere) becomes DefaultBudgetEpsilon, a given one stays.
func TestFiniteBudget(t *testing.T) {
	if b := finiteBudget(release.Budget{}); b.Epsilon != DefaultBudgetEpsilon || !(DefaultBudgetEpsilon > 0) {
		t.Fatalf("zero budget became %+v", b)
	}
	if b := finiteBudget(release.Budget{Epsilon: 3, Delta: 1e-6}); b.Epsilon != 3 || b.Delta != 1e-6 {
		t.Fatalf("given budget became %+v", b)
	}
	o := DefaultOptions()
	if o.L1 != p3.DefaultL1 {
		t.Fatalf("default --l1 %d", o.L1)
	}
	o.Mode, o.Campaign = ModePrio3, "c"
	if m, err := o.Measurement(300); err != nil || m.L1 != p3.DefaultL1 || m.Sensitivity() != p3.DefaultL1 {
		t.Fatalf("measurement %+v, %v", m, err)
	}
}
