package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
)

// pathFlags are flags whose names say secret but whose value is a file
// path (the secret stays in the file).
var pathFlags = map[string]bool{"route-secret": true}

// TestSecretFlagsMarked: every flag of every command whose name says it
// takes a password or a secret (and is not a file path or a switch) is
// marked secret, so a value on the command line is refused.
func TestSecretFlagsMarked(t *testing.T) {
	secretName := regexp.MustCompile(`pass(word)?|secret|passwd|sasl-pass`)
	var marked []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !secretName.MatchString(f.Name) || strings.HasSuffix(f.Name, "-file") || pathFlags[f.Name] || f.Value.Type() == "bool" {
				return
			}
			if !config.IsSecret(f) {
				t.Errorf("%s --%s takes a secret but is not config.MarkSecret: its value would be accepted on the command line", c.CommandPath(), f.Name)
			}
			if !slices.Contains(marked, f.Name) {
				marked = append(marked, f.Name)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(rootCmd())
	slices.Sort(marked)
	if want := []string{"clickhouse-password", "kafka-sasl-password", "writer-password"}; !slices.Equal(marked, want) {
		t.Errorf("secret flags %v, want %v", marked, want)
	}
}

// TestAttackSecretArgv: a password on the command line (a
// secret flag, or a URL with user:password@) exits 2 with an error that
// says how to pass it (file or environment) and never repeats it; the
// same password from CROWDLOG_<FLAG>_FILE is taken.
func TestAttackSecretArgv(t *testing.T) {
	const pw = "s3cret-on-argv"
	accepted, lines := 0, 0
	defer func() {
		fmt.Printf("ATTACK secret-argv: %d of %d command lines with a password accepted\n", accepted, lines)
	}()
	for _, c := range []struct {
		args []string
		env  string
	}{
		{[]string{"clickhouse", "init", "--clickhouse", "ch:9000", "--writer", "w", "--writer-password", pw}, "CROWDLOG_WRITER_PASSWORD_FILE"},
		{[]string{"release", "--clickhouse", "ch:9000", "--clickhouse-user", "w", "--clickhouse-password", pw}, "CROWDLOG_CLICKHOUSE_PASSWORD_FILE"},
		{[]string{"relay", "--name", "a", "--kafka", "k:9093", "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "u", "--kafka-sasl-password", pw}, "CROWDLOG_KAFKA_SASL_PASSWORD_FILE"},
		{[]string{"randomness", "--nats", "nats://relay:" + pw + "@n1:4222"}, "CROWDLOG_NATS_FILE"},
		{[]string{"relay", "--name", "a", "--nats", "nats://n0:4222,tls://relay:" + pw + "@n1:4222"}, "CROWDLOG_NATS_FILE"},
	} {
		root := rootCmd()
		root.SetArgs(c.args)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.ExecuteContext(context.Background())
		lines++
		var ec exitCode
		if !errors.As(err, &ec) || ec.code != 2 || !strings.Contains(err.Error(), c.env) || !strings.Contains(err.Error(), "command line") {
			accepted++
			t.Errorf("%v: %v, want exit 2 naming %s", c.args, err, c.env)
			continue
		}
		if strings.Contains(err.Error()+out.String(), pw) {
			t.Errorf("%v: the error repeats the password: %v", c.args, err)
		}
	}
	// the same value from its file is taken
	p := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, err := configured(t, []string{"clickhouse", "init"}, []string{"--writer", "w"}, []string{"CROWDLOG_WRITER_PASSWORD_FILE=" + p})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := cmd.Flags().GetString("writer-password"); got != pw {
		t.Fatalf("--writer-password from its file = %q", got)
	}
	// a URL without a password stays accepted on the command line
	if _, err := configured(t, []string{"relay"}, []string{"--nats", "nats://relay@n1:4222,tls://n2:4222"}, nil); err != nil {
		t.Fatalf("a NATS URL without a password: %v", err)
	}
}
