package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	aggprio3 "github.com/crowdlog/crowdlog/aggregator/prio3"
	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/infra/deploy/helm"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/issuer"
)

// TestHelmChartArgs renders the Helm chart for every operator and runs each
// container's arguments and environment through this binary's own parsing:
// the subcommand exists, its flags parse, every CROWDLOG_* variable names
// one of its flags (CROWDLOG_FLAG or CROWDLOG_FLAG_FILE; the configuration
// layer silently skips others), and the configuration layer accepts the
// values with each _FILE path remapped to a file in a temporary directory.
// The pipeline operator's ACLs name the SASL users the other operators'
// roles log in as, its epoch Jobs log in as the ACL role operator (their
// own Secret, not the admin's), and its NATS Secret (not a ConfigMap: a
// cluster block holds the route password) is `crowdlog nats-config`'s text.
// The issuers run at the randomness and aggregator operators only, each
// with --role and a positive budget for the kinds that role issues. The
// Prio3 leader (enabled) runs at the aggregator operator as Kafka user
// prio3-leader and the helper at the prio3-helper operator.
func TestHelmChartArgs(t *testing.T) {
	dir := t.TempDir()
	keys, err := natsauth.EnsureAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	natsConf, err := natsauth.ServerConfig{Users: keys, TLS: &natsauth.TLSFiles{Cert: "/etc/nats/tls.crt", Key: "/etc/nats/tls.key", CA: "/etc/nats/ca.crt"}}.Text()
	if err != nil {
		t.Fatal(err)
	}
	saslUser := map[string]string{} // subcommand -> --kafka-sasl-user
	var acls []string               // --acl values of the topics Job
	var issuers []string            // operator:--role of every issuer container
	var streamsJobs []string        // operator of every streams Job
	var prio3 []string              // operator:--role of every aggregate-prio3 container
	var prio3Leader string          // the Prio3 leader's --kafka-sasl-user
	for _, op := range helm.Operators {
		objs, err := helm.Render(op, map[string]any{"natsConfig": natsConf, "epochs": []any{"2006-03"}, "closeEpochs": []any{"2006-03"},
			"epochJobs": map[string]any{"pipelineDigest": strings.Repeat("5a", 32)}, "prio3": map[string]any{"leader": map[string]any{"enabled": true}}})
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		for _, o := range objs {
			if cm, ok := o.Value.(*corev1.ConfigMap); ok && cm.Data["nats.conf"] != "" {
				t.Errorf("%s: ConfigMap %s holds the NATS configuration; it belongs in a Secret (route password)", op, o.Name)
			}
			if s, ok := o.Value.(*corev1.Secret); ok && o.Name == "crowdlog-nats-config" && s.StringData["nats.conf"] != natsConf {
				t.Errorf("%s: Secret %s does not hold the nats-config text", op, o.Name)
			}
		}
		cs := helm.Containers(objs)
		if len(cs) == 0 {
			t.Errorf("%s: no containers", op)
		}
		for _, c := range cs {
			where := op + " " + c.Owner
			root := rootCmd()
			cmd, rest, err := root.Find(c.Args)
			if err != nil || cmd == root {
				t.Errorf("%s: %v: not a crowdlog subcommand: %v", where, c.Args, err)
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("%s: %v: %v", where, c.Args, err)
				continue
			}
			if n := cmd.Flags().Args(); len(n) > 0 {
				t.Errorf("%s: positional arguments %v", where, n)
			}
			var environ []string
			for _, e := range c.Env {
				if e.ValueFrom != nil || !strings.HasPrefix(e.Name, config.EnvPrefix) {
					continue
				}
				name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(e.Name, config.EnvPrefix), "_", "-"))
				value := e.Value
				if base, ok := strings.CutSuffix(name, "-file"); ok && cmd.Flags().Lookup(base) != nil {
					value = filepath.Join(dir, "files", e.Value)
					if err := os.MkdirAll(filepath.Dir(value), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(value, []byte("s3cret\n"), 0o600); err != nil {
						t.Fatal(err)
					}
				} else if cmd.Flags().Lookup(name) == nil {
					t.Errorf("%s: %s names no flag of %s", where, e.Name, cmd.CommandPath())
				}
				environ = append(environ, e.Name+"="+value)
			}
			if err := applyConfig(cmd, environ); err != nil {
				t.Errorf("%s: environment %v: %v", where, environ, err)
			}
			for _, f := range []string{"kafka-sasl-password", "clickhouse-password"} {
				if fl := cmd.Flags().Lookup(f); fl != nil && cmd.Flags().Lookup(strings.TrimSuffix(f, "password")+"user").Value.String() != "" && fl.Value.String() != "s3cret" {
					t.Errorf("%s: --%s not set from its file", where, f)
				}
			}
			if fl := cmd.Flags().Lookup("kafka-sasl-user"); fl != nil {
				saslUser[cmd.Name()] = fl.Value.String()
			}
			if cmd.Name() == "aggregate-prio3" { // the two Prio3 aggregators, each at its own operator
				role, _ := cmd.Flags().GetString("role")
				prio3 = append(prio3, op+":"+role)
				o := aggprio3.DefaultOptions() // the role's own validation of the chart's values
				fs := pflag.NewFlagSet("aggregate-prio3", pflag.ContinueOnError)
				fs.ParseErrorsAllowlist.UnknownFlags = true // the credential and metrics flags cmd adds
				o.AddFlags(fs)
				if err := fs.Parse(c.Args[1:]); err != nil {
					t.Errorf("%s: %v", where, err)
				} else if err := o.Validate(); err != nil {
					t.Errorf("%s: aggregate-prio3 refuses the chart's flags: %v", where, err)
				}
				if u := cmd.Flags().Lookup("kafka-sasl-user").Value.String(); role == "leader" {
					prio3Leader = u
				} else if u != "" {
					t.Errorf("%s: the Prio3 %s logs in to Kafka as %q: only the leader reads and writes Kafka", where, role, u)
				}
			}
			if n := cmd.Name(); n == "open-epoch" || n == "close-epoch" { // the epoch Jobs: the operator's credential, never the admin's
				secrets := map[string]bool{}
				for _, v := range c.Pod.Volumes {
					if v.Name == "kafka" && v.Secret != nil {
						secrets[v.Secret.SecretName] = true
					}
				}
				if u := cmd.Flags().Lookup("kafka-sasl-user").Value.String(); u != "operator" || !secrets["crowdlog-kafka-operator"] || len(secrets) != 1 {
					t.Errorf("%s: %s logs in to Kafka as %q with Secrets %v; want user operator (ACL role operator) and Secret crowdlog-kafka-operator only", where, n, u, secrets)
				}
				if d, _ := cmd.Flags().GetString("pipeline-digest"); d != strings.Repeat("5a", 32) {
					t.Errorf("%s: %s signs for pipeline digest %q", where, n, d)
				}
			}
			if cmd.Name() == "topics" {
				acls, _ = cmd.Flags().GetStringSlice("acl")
			}
			for _, v := range c.Pod.Volumes { // the admin NATS credential: the streams Job's alone
				if v.Name == "nats" && v.Secret != nil && (v.Secret.SecretName == "crowdlog-nats-admin") != (cmd.Name() == "streams") {
					t.Errorf("%s: %s mounts NATS Secret %s; only the streams Job mounts the admin's (crowdlog-nats-admin)", where, cmd.Name(), v.Secret.SecretName)
				}
			}
			if cmd.Name() == "streams" {
				streamsJobs = append(streamsJobs, op)
			}
			if cmd.Name() == "issuer" { // each issuer runs at a verifier, for its kinds, with their budgets
				role, _ := cmd.Flags().GetString("role")
				rk, ok := keydir.RoleOf(role)
				if !ok || len(rk.IssuerKinds) == 0 {
					t.Errorf("%s: issuer --role %q: want aggregator or randomness (the verifier it issues for)", where, role)
				}
				n, _ := cmd.Flags().GetInt("randomness-tokens")
				d, _ := cmd.Flags().GetInt("report-tokens")
				if err := issuer.CheckBudgets(rk.IssuerKinds, issuer.Limits{RandomnessTokens: n, ReportTokens: d}); err != nil {
					t.Errorf("%s: %v", where, err)
				}
				issuers = append(issuers, op+":"+role)
			}
		}
	}
	if want := []string{"aggregator:leader", "prio3-helper:helper"}; !slices.Equal(prio3, want) {
		t.Errorf("Prio3 aggregators %v, want %v (leader and helper at two operators)", prio3, want)
	}
	if prio3Leader != "prio3-leader" || !slices.Contains(acls, "prio3-leader="+prio3Leader) {
		t.Errorf("the Prio3 leader logs in to Kafka as %q, topics --acl %v: want prio3-leader (its own user, not the aggregate role's) with the ACL role prio3-leader", prio3Leader, acls)
	}
	if !slices.Equal(streamsJobs, []string{"pipeline-operator"}) {
		t.Errorf("streams Jobs at %v, want one at the pipeline operator (every stream exists before the roles start)", streamsJobs)
	}
	if want := []string{"randomness:randomness", "aggregator:aggregator"}; !slices.Equal(issuers, want) {
		t.Errorf("issuers %v, want %v (each token issued where it is verified)", issuers, want)
	}
	for role, sub := range map[string]string{"relay": "relay", "aggregator": "aggregate", "release": "release", "operator": "open-epoch"} {
		if want := role + "=" + saslUser[sub]; saslUser[sub] == "" || !slices.Contains(acls, want) {
			t.Errorf("topics --acl %v: want %s (the user %s logs in as)", acls, want, sub)
		}
	}
}
