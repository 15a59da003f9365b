package main

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/release/policy"
)

// TestPolicyDefaultsFlagsMatchFile: for every policy kind, the policy a
// run builds from the flags (only the required ones given: ε and U for DP,
// k for FT) equals the one it builds from the minimal pipeline file with
// the same fields — every default (d or m, δ, count share, slack, Shamir
// k, λ) is the same in both forms — and so does the policy of the flags
// the ingest and release roles register (policyFlags). A DP policy
// without U is refused in both forms, naming it: U is configuration,
// never counted from the input.
func TestPolicyDefaultsFlagsMatchFile(t *testing.T) {
	const eps = "2.302585092994046"
	for _, kind := range policy.Kinds() {
		var args []string
		file := fmt.Sprintf("name: p\napp: {name: query}\npolicy: {kind: %s, ", kind)
		if kind.IsDP() {
			args = []string{"--input", "x", "--policy", string(kind), "--epsilon", eps, "--users", "1000"}
			file += "epsilon: " + eps + ", users: 1000}\n"
		} else {
			args = []string{"--input", "x", "--policy", string(kind), "--k", "5"}
			file += "k: 5}\n"
		}
		c, cfg := newRunCmd()
		if err := c.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		fromFlags, err := runner.ResolvePolicy(cfg.Policy, cfg.K, cfg.DP)
		if err != nil {
			t.Fatalf("%s from flags %v: %v", kind, args, err)
		}
		p, err := pipeline.Parse([]byte(file))
		if err != nil {
			t.Fatalf("%s: minimal file %q: %v", kind, file, err)
		}
		var rc runner.Config
		runner.ApplyPipeline(&rc, p)
		fromFile, err := runner.ResolvePolicy(rc.Policy, rc.K, rc.DP)
		if err != nil {
			t.Fatalf("%s from file: %v", kind, err)
		}
		if !reflect.DeepEqual(fromFlags, fromFile) {
			t.Errorf("%s: the flag form resolves to %+v, the file form to %+v", kind, *fromFlags, *fromFile)
		}
		if !kind.IsDP() {
			continue
		}
		// the roles' flag set (crowdlog ingest, crowdlog release)
		var dp policy.Params
		f := pflag.NewFlagSet("role", pflag.ContinueOnError)
		dp.AddFlags(f)
		if err := f.Parse([]string{"--epsilon", eps, "--users", "1000"}); err != nil {
			t.Fatal(err)
		}
		fromRole, err := runner.ResolvePolicy(string(kind), 0, dp)
		if err != nil {
			t.Fatalf("%s from the roles' flags: %v", kind, err)
		}
		if !reflect.DeepEqual(fromRole, fromFile) {
			t.Errorf("%s: the roles' flags resolve to %+v, the file to %+v", kind, *fromRole, *fromFile)
		}
		// without U: refused in both forms
		c, cfg = newRunCmd()
		if err := c.Flags().Parse(args[:len(args)-2]); err != nil {
			t.Fatal(err)
		}
		if _, err := runner.ResolvePolicy(cfg.Policy, cfg.K, cfg.DP); err == nil || !strings.Contains(err.Error(), "--users") {
			t.Errorf("%s from flags without --users: %v, want an error naming --users", kind, err)
		}
		if _, err := pipeline.Parse([]byte(strings.Replace(file, ", users: 1000", "", 1))); !errors.Is(err, pipeline.ErrInvalid) || !strings.Contains(err.Error(), "policy.users") {
			t.Errorf("%s from a file without users: %v, want ErrInvalid naming policy.users", kind, err)
		}
	}
}
