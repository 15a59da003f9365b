package runner

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
)

const pddPipelineHead = "name: kw\napp:\n  name: keyword\npolicy:\n  kind: ft-u\n  k: 5\n"

// TestPDDPipelineFlagForms: `crowdlog pdd`'s flag form of each pdd section
// builds the same section as its file (PDDPipelineOf of the parsed flags
// equals the file's defaults), and the file applied to a Config reads back
// as itself: the two forms share every default.
func TestPDDPipelineFlagForms(t *testing.T) {
	cases := []struct {
		yaml string
		args []string
	}{
		{"", nil},
		{"pdd:\n  mode: groups\n", []string{"--mode", "groups"}},
		{"pdd:\n  group_size: 50\n", []string{"--group-size", "50"}},
		{"pdd:\n  mode: prio3\n", []string{"--mode", "prio3"}},
		{"pdd:\n  mode: prio3\n  bits: 1\n  min_batch_size: 100\n", []string{"--mode", "prio3", "--bits", "1", "--min-batch-size", "100"}},
		{"pdd:\n  mode: prio3\n  measurement: presence\n  max_weight: 20\n  chunk: 50\n",
			[]string{"--mode", "prio3", "--measurement", "presence", "--max-weight", "20", "--chunk", "50"}},
		{"pdd:\n  mode: prio3\n  l1: 50\n", []string{"--mode", "prio3", "--l1", "50"}},
		{"pdd:\n  mode: prio3\n  exact_shares: true\n", []string{"--mode", "prio3", "--exact-shares"}},
	}
	for _, c := range cases {
		p, err := pipeline.Parse([]byte(pddPipelineHead + c.yaml))
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		var cfg PDDConfig
		f := pflag.NewFlagSet("pdd", pflag.ContinueOnError)
		cfg.AddFlags(f)
		if err := f.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		want := p.Defaults().PDD
		if got := PDDPipelineOf(cfg); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: flags %v build %+v, the file %+v", c.yaml, c.args, got, want)
		}
		var applied PDDConfig
		ApplyPipelinePDD(&applied, p)
		if got := PDDPipelineOf(applied); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: the applied file reads back as %+v, want %+v", c.yaml, got, want)
		}
		// the flags' Config passes the run's checks as the file's does
		applied.Input, cfg.Input = "x", "x"
		if err := cfg.defaults(); err != nil {
			t.Errorf("%v: %v", c.args, err)
		}
		if err := applied.defaults(); err != nil {
			t.Errorf("%q: %v", c.yaml, err)
		}
	}
}

// TestPDDPipelineComplete: --pipeline applies the file's pdd section and
// refuses a pdd flag beside it; invalid sections are refused naming the
// field.
func TestPDDPipelineComplete(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(pddPipelineHead+"pdd:\n  mode: prio3\n  bits: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg PDDConfig
	f := pflag.NewFlagSet("pdd", pflag.ContinueOnError)
	cfg.AddFlags(f)
	if err := f.Parse([]string{"--pipeline", path}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Complete(f); err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != ModePrio3 || cfg.Bits != 2 || cfg.MinBatchSize != pipeline.DefaultMinBatchSize {
		t.Fatalf("applied: mode %q bits %d min batch %d", cfg.Mode, cfg.Bits, cfg.MinBatchSize)
	}
	f2 := pflag.NewFlagSet("pdd", pflag.ContinueOnError)
	var cfg2 PDDConfig
	cfg2.AddFlags(f2)
	if err := f2.Parse([]string{"--pipeline", path, "--bits", "3"}); err != nil {
		t.Fatal(err)
	}
	var ue config.UsageError
	if err := cfg2.Complete(f2); !errors.As(err, &ue) {
		t.Fatalf("--bits beside --pipeline: %v", err)
	}
	for _, bad := range []string{
		"pdd:\n  mode: pairs\n",
		"pdd:\n  bits: 4\n",
		"pdd:\n  l1: 20\n",
		"pdd:\n  exact_shares: true\n",
		"pdd:\n  mode: prio3\n  l1: -1\n",
		"pdd:\n  mode: prio3\n  measurement: presence\n  max_weight: 3\n  l1: 5\n",
		"pdd:\n  mode: prio3\n  group_size: 10\n",
		"pdd:\n  mode: prio3\n  measurement: presence\n",
		"pdd:\n  mode: prio3\n  bits: 17\n",
		"pdd:\n  mode: prio3\n  measurement: presence\n  max_weight: 3\n  bits: 2\n",
	} {
		if _, err := pipeline.Parse([]byte(pddPipelineHead + bad)); !errors.Is(err, pipeline.ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}
