package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/infra/gobuild"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/pipelines/runner"
)

// TestPipelineFlagForms: the flag form of each example pipeline builds the
// same Pipeline value as its file (runner.PipelineOf of the flags'
// Config), and the file applied to a run Config reads back as itself.
func TestPipelineFlagForms(t *testing.T) {
	cases := map[string][]string{
		"query-ftu-k5":        {"--input", "x"},
		"query-ftu-k3-weekly": {"--input", "x", "--k", "3", "--epoch-length", "168h"},
		"query-dpu":           {"--input", "x", "--policy", "dp-u", "--epsilon", "2.302585092994046", "--d", "3", "--users", "1000", "--dataset", "aol", "--budget-epsilon", "5"},
		"click-fta-domain":    {"--input", "x", "--app", "click", "--url-level", "domain", "--policy", "ft-a", "--k", "10", "--summary", "none", "--epoch", "2006-03", "--partitions", "4"},
	}
	files, _ := filepath.Glob("../../testdata/pipelines/*.yaml")
	if len(files) != len(cases) {
		t.Fatalf("%d example pipelines, %d flag forms here: add the new one's", len(files), len(cases))
	}
	for name, args := range cases {
		p, err := pipeline.Load("../../testdata/pipelines/" + name + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		c, cfg := newRunCmd()
		if err := c.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		if got, want := runner.PipelineOf(name, *cfg), p.Defaults(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: flags build %+v, the file %+v", name, got, want)
		}
		var applied runner.Config
		runner.ApplyPipeline(&applied, p)
		if got := runner.PipelineOf(name, applied); !reflect.DeepEqual(got, p.Defaults()) {
			t.Errorf("%s: applied file reads back as %+v", name, got)
		}
	}
}

// TestPipelineExitStatus: the real binary exits 0 on a valid file, 2 on an
// invalid one (naming the field), 2 on --pipeline with a pipeline flag,
// 2 on an unknown --log-level, and prints a version.
func TestPipelineExitStatus(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "crowdlog")
	if err := gobuild.Build(context.Background(), bin, "."); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("name: x\napp:\n  name: query\npolicy:\n  kind: ft-u\n  k: 500000\n"), 0o600)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"pipeline", "validate", "../../testdata/pipelines/query-dpu.yaml"}, 0, "is valid"},
		{[]string{"pipeline", "validate", bad}, 2, "policy.k"},
		{[]string{"pipeline", "show", "../../testdata/pipelines/query-ftu-k5.yaml"}, 0, "partitions: 8"},
		{[]string{"run", "-f", "../../testdata/pipelines/query-ftu-k5.yaml", "--k", "3", "--input", "x"}, 2, "--k"},
		{[]string{"--log-level", "loud", "pipeline", "show", "x"}, 2, "--log-level"},
		{[]string{"--log-format", "xml", "pipeline", "show", "x"}, 2, "--log-format"},
		{[]string{"--version"}, 0, "crowdlog version"},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("crowdlog %v: exit %d, want %d; output %q should name %q", c.args, code, c.code, out, c.want)
		}
	}
}
