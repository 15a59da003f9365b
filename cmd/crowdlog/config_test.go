package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/crowdlog/crowdlog/infra/config"
)

// configured builds a fresh root command, finds the subcommand at path,
// parses args and applies the configuration of environ (and of --config
// when args has it) as the root's PersistentPreRunE does.
func configured(t *testing.T, path, args, environ []string) (*cobra.Command, error) {
	t.Helper()
	cmd, rest, err := rootCmd().Find(path)
	if err != nil || len(rest) != 0 {
		t.Fatalf("%v: %v %v", path, rest, err)
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("%v %v: %v", path, args, err)
	}
	return cmd, applyConfig(cmd, environ)
}

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "crowdlog.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testValues are four distinct valid values (file section, environment,
// command line, file top level) for a flag of type typ, or nil.
func testValues(typ string) []string {
	switch typ {
	case "string":
		return []string{"from-section", "from-env", "from-argv", "from-top"}
	case "int", "int64", "uint64":
		return []string{"11", "12", "13", "14"}
	case "float64":
		return []string{"0.25", "0.5", "0.75", "0.125"}
	case "duration":
		return []string{"11s", "12s", "13s", "14s"}
	case "stringSlice":
		return []string{"f:1", "e:2", "a:3", "t:4"}
	}
	return nil
}

// testFlag picks a flag of c (parsed) to configure: its own first
// (strings, then numbers, durations, lists), else the inherited
// --log-format.
func testFlag(c *cobra.Command) *pflag.Flag {
	types := []string{"string", "int", "int64", "uint64", "float64", "duration", "stringSlice"}
	var best *pflag.Flag
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		r := slices.Index(types, f.Value.Type())
		if config.NotConfigurable[f.Name] || config.IsSecret(f) || f.Hidden || f.Deprecated != "" || r < 0 {
			return
		}
		if best == nil || r < slices.Index(types, best.Value.Type()) {
			best = f
		}
	})
	if best == nil {
		return c.Flags().Lookup("log-format")
	}
	return best
}

// TestConfigEveryCommand: for every subcommand, one of its flags is set
// by the config file (its section winning over the top level), by
// CROWDLOG_<FLAG> over the file, and by the command line over both.
func TestConfigEveryCommand(t *testing.T) {
	n := 0
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, s := range c.Commands() {
			p := append(slices.Clone(path), s.Name())
			walk(s, p)
			// s.Flags() holds the inherited flags once parsed: probe a copy.
			probe, _, _ := rootCmd().Find(p)
			if err := probe.ParseFlags(nil); err != nil {
				t.Fatal(err)
			}
			f := testFlag(probe)
			if f == nil {
				t.Errorf("%v: no flag to configure", p)
				continue
			}
			n++
			checkPrecedence(t, p, f.Name, f.Value.Type() == "stringSlice", testValues(f.Value.Type()))
		}
	}
	walk(rootCmd(), nil)
	// Only the root's hook may exist: cobra runs the nearest one, and a
	// subcommand's own would skip the configuration.
	var hooks func(c *cobra.Command)
	hooks = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			if s.PersistentPreRun != nil || s.PersistentPreRunE != nil {
				t.Errorf("%s has its own PersistentPreRun: it must call applyConfig too", s.CommandPath())
			}
			hooks(s)
		}
	}
	hooks(rootCmd())
	if n < 20 {
		t.Fatalf("only %d subcommands checked", n)
	}
	t.Logf("%d subcommands checked", n)
}

// checkPrecedence checks flag name of the command at path with the values
// of testValues.
func checkPrecedence(t *testing.T, path []string, name string, slice bool, vals []string) {
	t.Helper()
	yamlValue := func(v string) any { // a slice flag gets a YAML list
		if slice {
			return []string{v, "x:9"}
		}
		return v
	}
	show := func(v string, fromFile bool) string { // how the flag prints it
		switch {
		case slice && fromFile:
			return "[" + v + ",x:9]"
		case slice:
			return "[" + v + "]"
		}
		return v
	}
	// The command's section (nested for "aggregate close": aggregate:
	// {close: {...}}) and, with another value, the top-level key.
	var section any = map[string]any{name: yamlValue(vals[0])}
	for i := len(path) - 1; i >= 1; i-- {
		section = map[string]any{path[i]: section}
	}
	doc := map[string]any{path[0]: section}
	if name != path[0] { // else a flag named like its command (clickhouse)
		doc[name] = yamlValue(vals[3])
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	file := writeConfig(t, string(b))
	env := config.EnvName(name) + "=" + vals[1]
	argv := "--" + name + "=" + vals[2]
	for _, c := range []struct {
		what    string
		args    []string
		environ []string
		want    string
	}{
		{"file section over top level", []string{"--config", file}, nil, show(vals[0], true)},
		{"env over file", []string{"--config", file}, []string{env, "OTHER=1"}, show(vals[1], false)},
		{"argv over env and file", []string{"--config", file, argv}, []string{env}, show(vals[2], false)},
		{"file from CROWDLOG_CONFIG", nil, []string{config.Env + "=" + file}, show(vals[0], true)},
	} {
		cmd, err := configured(t, path, c.args, c.environ)
		if err != nil {
			t.Errorf("%v --%s, %s: %v", path, name, c.what, err)
			continue
		}
		f := cmd.Flags().Lookup(name)
		if got := f.Value.String(); got != c.want {
			t.Errorf("%v --%s, %s: got %s, want %s", path, name, c.what, got, c.want)
		}
		if !f.Changed {
			t.Errorf("%v --%s, %s: not marked as given", path, name, c.what)
		}
	}
}

func exitStatus(err error) int {
	var ec exitCode
	if errors.As(err, &ec) {
		return ec.code
	}
	if err != nil {
		return 1
	}
	return 0
}

// TestConfigErrors: unknown keys and refused values are usage errors
// (exit status 2) that name the key and the file, or the variable.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		what, doc string
		environ   []string
		want      []string
	}{
		{"unknown key", "clickhous: ch:9000\n", nil, []string{"clickhous", "crowdlog.yaml"}},
		{"unknown key in a section", "release:\n  nats: x\n", nil, []string{"release.nats", "crowdlog.yaml"}},
		{"unknown section", "relese:\n  k: 3\n", nil, []string{"relese", "crowdlog.yaml"}},
		{"config in the file", "config: other.yaml\n", nil, []string{"key config"}},
		{"bad value in the file", "release:\n  k: three\n", nil, []string{"key release.k", "crowdlog.yaml", "--k"}},
		{"list for a one-value flag", "database: [a, b]\n", nil, []string{"key database", "a list"}},
		{"bad YAML", "k: [\n", nil, []string{"crowdlog.yaml"}},
		{"key given twice", "k: 3\nk: 4\n", nil, []string{"crowdlog.yaml", "k given twice"}},
		{"not a mapping", "- k\n", nil, []string{"crowdlog.yaml", "mapping"}},
		{"bad value in the environment", "", []string{"CROWDLOG_K=three"}, []string{"CROWDLOG_K", "--k", "three"}},
		{"bad float in the environment", "", []string{"CROWDLOG_BUDGET_EPSILON=lots"}, []string{"CROWDLOG_BUDGET_EPSILON"}},
	} {
		args := []string{}
		if c.doc != "" {
			args = []string{"--config", writeConfig(t, c.doc)}
		}
		_, err := configured(t, []string{"release"}, args, c.environ)
		if exitStatus(err) != 2 {
			t.Errorf("%s: exit status %d (%v), want 2", c.what, exitStatus(err), err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not name %q", c.what, err, w)
			}
		}
	}
	// A missing file is an error too, but not a usage error.
	if _, err := configured(t, []string{"release"}, []string{"--config", filepath.Join(t.TempDir(), "none.yaml")}, nil); exitStatus(err) != 1 {
		t.Errorf("missing config file: %v", err)
	}
	// Variables of other tools and other commands' flags are ignored.
	if _, err := configured(t, []string{"release"}, nil, []string{"CROWDLOG_SCALE_PROCS=x", "CROWDLOG_NATS=x", "CROWDLOG_k=x", "PATH=/bin"}); err != nil {
		t.Errorf("unrelated variables: %v", err)
	}
	// A key of another command's flag at the top level is fine.
	if _, err := configured(t, []string{"release"}, []string{"--config", writeConfig(t, "nats: nats://n:4222\nclickhouse: ch:9000\n")}, nil); err != nil {
		t.Errorf("shared file: %v", err)
	}
}

// TestConfigSecretFile: CROWDLOG_<FLAG>_FILE reads the value from a file
// (trailing newline trimmed) and does not repeat it in an error.
func TestConfigSecretFile(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "nats-url")
	os.WriteFile(secret, []byte("nats://user:s3cret@n1:4222,nats://user:s3cret@n2:4222\n"), 0o600)
	cmd, err := configured(t, []string{"relay"}, nil, []string{"CROWDLOG_NATS_FILE=" + secret})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := cmd.Flags().GetString("nats"); got != "nats://user:s3cret@n1:4222,nats://user:s3cret@n2:4222" {
		t.Errorf("--nats from CROWDLOG_NATS_FILE: %q", got)
	}
	// The command line still wins.
	cmd, _ = configured(t, []string{"relay"}, []string{"--nats", "nats://argv:4222"}, []string{"CROWDLOG_NATS_FILE=" + secret})
	if got, _ := cmd.Flags().GetString("nats"); got != "nats://argv:4222" {
		t.Errorf("--nats on the command line: %q", got)
	}
	// The command line wins without reading the file.
	if _, err := configured(t, []string{"relay"}, []string{"--nats", "nats://argv:4222"}, []string{"CROWDLOG_NATS_FILE=/nonexistent"}); err != nil {
		t.Errorf("--nats on the command line, a missing CROWDLOG_NATS_FILE: %v", err)
	}
	// One trailing newline is trimmed, not more.
	two := filepath.Join(t.TempDir(), "two")
	os.WriteFile(two, []byte("line\n\n"), 0o600)
	cmd, _ = configured(t, []string{"relay"}, nil, []string{"CROWDLOG_NATS_FILE=" + two})
	if got, _ := cmd.Flags().GetString("nats"); got != "line\n" {
		t.Errorf("--nats from a file ending in two newlines: %q", got)
	}
	// Both forms at once are refused.
	if _, err := configured(t, []string{"relay"}, nil, []string{"CROWDLOG_NATS=nats://x:4222", "CROWDLOG_NATS_FILE=" + secret}); exitStatus(err) != 2 || !strings.Contains(err.Error(), "CROWDLOG_NATS_FILE") {
		t.Errorf("both CROWDLOG_NATS and CROWDLOG_NATS_FILE: %v", err)
	}
	// A refused secret names the variable, not the value.
	bad := filepath.Join(t.TempDir(), "k")
	os.WriteFile(bad, []byte("s3cret\n"), 0o600)
	if _, err := configured(t, []string{"release"}, nil, []string{"CROWDLOG_K_FILE=" + bad}); exitStatus(err) != 2 || !strings.Contains(err.Error(), "CROWDLOG_K_FILE") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("bad secret: %v", err)
	}
	// A missing secret file is an error naming the variable.
	if _, err := configured(t, []string{"relay"}, nil, []string{"CROWDLOG_NATS_FILE=" + bad + ".none"}); err == nil || !strings.Contains(err.Error(), "CROWDLOG_NATS_FILE") {
		t.Errorf("missing secret file: %v", err)
	}
	// A flag whose own name ends in -file is set by its variable as is.
	cmd, err = configured(t, []string{"clickhouse", "init"}, nil, []string{"CROWDLOG_PASSWORD_FILE=/run/secrets/pw"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := cmd.Flags().GetString("password-file"); got != "/run/secrets/pw" {
		t.Errorf("--password-file from CROWDLOG_PASSWORD_FILE: %q", got)
	}
}

// TestConfigSlicesAndRequired: a YAML list or a comma-separated variable
// replaces a slice flag's default (not appended to it), and a value from
// the environment satisfies a required flag.
func TestConfigSlicesAndRequired(t *testing.T) {
	file := writeConfig(t, "kafka: [a:9092, b:9092]\nrelease:\n  database: prod\n  budget-epsilon: 1e-1\n")
	cmd, err := configured(t, []string{"release"}, []string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := cmd.Flags().GetStringSlice("kafka"); !reflect.DeepEqual(got, []string{"a:9092", "b:9092"}) {
		t.Errorf("--kafka from a YAML list: %v", got)
	}
	if got, _ := cmd.Flags().GetString("database"); got != "prod" {
		t.Errorf("--database from the release section: %q", got)
	}
	if got, _ := cmd.Flags().GetFloat64("budget-epsilon"); got != 0.1 {
		t.Errorf("--budget-epsilon from a YAML float: %v", got)
	}
	cmd, _ = configured(t, []string{"release"}, []string{"--config", file}, []string{"CROWDLOG_KAFKA=c:9092,d:9092"})
	if got, _ := cmd.Flags().GetStringSlice("kafka"); !reflect.DeepEqual(got, []string{"c:9092", "d:9092"}) {
		t.Errorf("--kafka from CROWDLOG_KAFKA: %v", got)
	}
	cmd, _ = configured(t, []string{"release"}, []string{"--config", file, "--kafka", "e:9092"}, []string{"CROWDLOG_KAFKA=c:9092"})
	if got, _ := cmd.Flags().GetStringSlice("kafka"); !reflect.DeepEqual(got, []string{"e:9092"}) {
		t.Errorf("--kafka on the command line: %v", got)
	}

	// YAML scalars reach the flag as written: a date stays a date string.
	cmd, _ = configured(t, []string{"randomness", "close-epoch"}, []string{"--config", writeConfig(t, "epoch: 2026-11-26\n")}, nil)
	if got, _ := cmd.Flags().GetString("epoch"); got != "2026-11-26" {
		t.Errorf("--epoch from a YAML date: %q", got)
	}

	cmd, _ = configured(t, []string{"randomness", "close-epoch"}, nil, nil)
	if err := cmd.ValidateRequiredFlags(); err == nil {
		t.Fatal("close-epoch without --epoch accepted")
	}
	cmd, _ = configured(t, []string{"randomness", "close-epoch"}, nil, []string{"CROWDLOG_EPOCH=2026-11"})
	if err := cmd.ValidateRequiredFlags(); err != nil {
		t.Errorf("--epoch from CROWDLOG_EPOCH: %v", err)
	}
}

// TestConfigExecute: 'crowdlog pipeline validate' (no servers) run as
// main runs it takes --log-format from the environment and the file, in
// that order, after the command line; a bad key exits 2.
func TestConfigExecute(t *testing.T) {
	valid := "../../testdata/pipelines/query-dpu.yaml"
	xml := writeConfig(t, "log-format: xml\n")
	for _, c := range []struct {
		what string
		env  string
		args []string
		code int
		want string
	}{
		{"environment", "xml", nil, 2, "--log-format"},
		{"command line over environment", "xml", []string{"--log-format", "json"}, 0, "is valid"},
		{"file", "", []string{"--config", xml}, 2, "--log-format"},
		{"environment over file", "text", []string{"--config", xml}, 0, "is valid"},
		{"unknown key", "", []string{"--config", writeConfig(t, "log-colour: red\n")}, 2, "log-colour"},
		{"plain", "", nil, 0, "is valid"},
	} {
		t.Run(c.what, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("CROWDLOG_LOG_FORMAT", c.env)
			}
			root := rootCmd()
			var out strings.Builder
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(append(c.args, "pipeline", "validate", valid))
			err := root.ExecuteContext(context.Background())
			msg := out.String()
			if err != nil {
				msg += err.Error()
			}
			if exitStatus(err) != c.code || !strings.Contains(msg, c.want) {
				t.Errorf("exit status %d (want %d), output %q (want %q)", exitStatus(err), c.code, msg, c.want)
			}
		})
	}
	// Every command's help says where flags come from.
	root := rootCmd()
	var out strings.Builder
	root.SetOut(&out)
	root.SetArgs([]string{"release", "--help"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "CROWDLOG_<FLAG>_FILE") {
		t.Errorf("release --help: %v\n%s", err, out.String())
	}
}
