package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
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
					t.Errorf("%s: issuer --role %q: want aggregator, randomness, prio3-leader or prio3-helper (the verifier it issues for)", where, role)
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
	if want := []string{"randomness:randomness", "aggregator:aggregator", "aggregator:prio3-leader", "prio3-helper:prio3-helper"}; !slices.Equal(issuers, want) {
		t.Errorf("issuers %v, want %v (each token issued where it is verified)", issuers, want)
	}
	for role, sub := range map[string]string{"relay": "relay", "aggregator": "aggregate", "release": "release", "operator": "open-epoch"} {
		if want := role + "=" + saslUser[sub]; saslUser[sub] == "" || !slices.Contains(acls, want) {
			t.Errorf("topics --acl %v: want %s (the user %s logs in as)", acls, want, sub)
		}
	}
}

// TestHelmPrio3Files: the Prio3 aggregators find every file they read in
// what the chart mounts, and nothing more. For the leader (aggregator
// operator, prio3.leader.enabled) and the helper (prio3-helper operator)
// the test generates the role's keys (keydir.GenerateRole), a verify key
// (keydir.AddVerifyKeyEpoch) and the collector's key pair, lays out a tree
// holding exactly the items each keys, verify-key and public volume
// projects at its mount path, moves the container's absolute paths into
// that tree and runs the role's own Options.Config: the custody marker
// admits the role, its key, the collector's public key and the verify key
// load. The other role's keys Secret does not: a leader given the helper's
// Secret is refused (keydir.ErrNotCustodian).
func TestHelmPrio3Files(t *testing.T) {
	gen := t.TempDir()
	src := map[string]string{} // Secret or ConfigMap name + "/" + item key -> file
	for _, c := range []struct{ role, secret string }{
		{keydir.RolePrio3Leader, "crowdlog-prio3-leader-keys"},
		{keydir.RolePrio3Helper, "crowdlog-prio3-helper-keys"},
		{keydir.RolePrio3Collector, ""},
	} {
		dir := filepath.Join(gen, c.role)
		if err := keydir.GenerateRole(dir, c.role); err != nil {
			t.Fatal(err)
		}
		if c.secret != "" {
			src[c.secret+"/"+c.role+".key"] = filepath.Join(dir, c.role+".key")
			src[c.secret+"/"+keydir.CustodyFile] = filepath.Join(dir, keydir.CustodyFile)
		}
	}
	src["crowdlog-public/"+keydir.Prio3CollectorKey+".pub"] = filepath.Join(gen, keydir.RolePrio3Collector, keydir.Prio3CollectorKey+".pub")
	// the leader's signing key in its Secret, its public half (the
	// leader's bundle) in the public ConfigMap the helper reads
	src["crowdlog-prio3-leader-keys/"+keydir.Prio3LeaderSignKey] = filepath.Join(gen, keydir.RolePrio3Leader, keydir.Prio3LeaderSignKey)
	src["crowdlog-prio3-leader-keys/"+keydir.Prio3LeaderTokenSeed] = filepath.Join(gen, keydir.RolePrio3Leader, keydir.Prio3LeaderTokenSeed)
	src["crowdlog-public/"+keydir.Prio3LeaderSignKey+".pub"] = filepath.Join(gen, keydir.RolePrio3Leader, keydir.Prio3LeaderSignKey+".pub")
	// the helper's token seed in its Secret (aggregate-prio3 --token-seed)
	src["crowdlog-prio3-helper-keys/"+keydir.Prio3HelperTokenSeed] = filepath.Join(gen, keydir.RolePrio3Helper, keydir.Prio3HelperTokenSeed)
	vk := filepath.Join(gen, "prio3-verify.key")
	if _, err := keydir.AddVerifyKeyEpoch(vk); err != nil {
		t.Fatal(err)
	}
	src["crowdlog-prio3-verify/prio3-verify.key"] = vk
	for _, c := range []struct {
		op, role, keysSecret string
		refused              bool
	}{
		{"aggregator", "leader", "", false},
		{"prio3-helper", "helper", "", false},
		{"aggregator", "leader", "crowdlog-prio3-helper-keys", true},
	} {
		set := map[string]any{"prio3": map[string]any{"leader": map[string]any{"enabled": true}}}
		if c.keysSecret != "" {
			set["prio3"] = map[string]any{"leader": map[string]any{"enabled": true, "keysSecret": c.keysSecret}}
		}
		objs, err := helm.Render(c.op, set)
		if err != nil {
			t.Fatal(err)
		}
		var ctr *helm.Container
		for _, x := range helm.Containers(objs) {
			if x.Name == "prio3-"+c.role {
				ctr = &x
			}
		}
		if ctr == nil {
			t.Fatalf("%s: no prio3-%s container", c.op, c.role)
		}
		root := t.TempDir()
		for _, m := range ctr.VolumeMounts {
			for _, v := range ctr.Pod.Volumes {
				if v.Name != m.Name {
					continue
				}
				var name string
				var items []corev1.KeyToPath
				switch {
				case v.Secret != nil:
					name, items = v.Secret.SecretName, v.Secret.Items
				case v.ConfigMap != nil:
					name, items = v.ConfigMap.Name, v.ConfigMap.Items
				}
				for _, it := range items {
					from, ok := src[name+"/"+it.Key]
					if !ok {
						continue // credentials Config does not read (NATS, Kafka)
					}
					b, err := os.ReadFile(from)
					if err != nil {
						t.Fatal(err)
					}
					to := filepath.Join(root, m.MountPath, it.Path)
					if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(to, b, 0o440); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		args := slices.Clone(ctr.Args[1:])
		for i, a := range args {
			if strings.HasPrefix(a, "/etc/crowdlog/") || strings.HasPrefix(a, "/var/lib/crowdlog") {
				args[i] = filepath.Join(root, a)
			}
		}
		o := aggprio3.DefaultOptions()
		fs := pflag.NewFlagSet("aggregate-prio3", pflag.ContinueOnError)
		fs.ParseErrorsAllowlist.UnknownFlags = true
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.Config()
		switch {
		case c.refused:
			if !errors.Is(err, keydir.ErrNotCustodian) {
				t.Errorf("%s %s with Secret %s: %v, want keydir.ErrNotCustodian", c.op, c.role, c.keysSecret, err)
			}
		case err != nil:
			t.Errorf("%s %s: the chart's files do not load: %v", c.op, c.role, err)
		case len(cfg.Keys) != 1 || len(cfg.VerifyKeys) != 1 || cfg.Collector.Key == nil:
			t.Errorf("%s %s: %d keys, %d verify keys, collector %v", c.op, c.role, len(cfg.Keys), len(cfg.VerifyKeys), cfg.Collector.Key)
		}
		if c.refused {
			continue
		}
		// the signing key (leader) or its public half (helper) loads from
		// the chart's files; they are read before NATS is dialled
		noNATS := func() (*nats.Conn, error) { return nil, errors.New("no NATS here") }
		if c.role == "leader" {
			_, _, err = o.Leader(noNATS, nil)
		} else {
			_, _, err = o.Helper(noNATS, nil)
		}
		if err == nil || !strings.Contains(err.Error(), "no NATS here") {
			t.Errorf("%s %s: signing key from the chart's files: %v", c.op, c.role, err)
		}
	}
}

// TestHelmPrio3Issuers: each Prio3 token issuer of the chart (the
// leader's at the aggregator operator, the helper's at the prio3-helper
// operator) starts on what the chart mounts: a tree holding its keys
// Secret's items (from keydir.GenerateRole of its aggregator's role) and
// the enrollment list where its mounts put them, with its own arguments,
// passes the issuer's Options.Config with exactly its token kind, and uses
// its aggregator's token seed (the file is not replaced by a fresh one).
func TestHelmPrio3Issuers(t *testing.T) {
	for _, c := range []struct{ op, role, secret, seed string }{
		{"aggregator", keydir.RolePrio3Leader, "crowdlog-prio3-leader-keys", keydir.Prio3LeaderTokenSeed},
		{"prio3-helper", keydir.RolePrio3Helper, "crowdlog-prio3-helper-keys", keydir.Prio3HelperTokenSeed},
	} {
		gen := filepath.Join(t.TempDir(), c.role)
		if err := keydir.GenerateRole(gen, c.role); err != nil {
			t.Fatal(err)
		}
		objs, err := helm.Render(c.op, map[string]any{"prio3": map[string]any{"leader": map[string]any{"enabled": true}}})
		if err != nil {
			t.Fatal(err)
		}
		var ctr *helm.Container
		for _, x := range helm.Containers(objs) {
			if x.Name == c.role+"-issuer" {
				ctr = &x
			}
		}
		if ctr == nil {
			t.Fatalf("%s: no %s-issuer container", c.op, c.role)
		}
		root := t.TempDir()
		for _, m := range ctr.VolumeMounts {
			for _, v := range ctr.Pod.Volumes {
				if v.Name != m.Name {
					continue
				}
				var items []corev1.KeyToPath
				from := func(key string) string { return "" }
				switch {
				case v.Secret != nil && v.Secret.SecretName == c.secret:
					items, from = v.Secret.Items, func(key string) string { return filepath.Join(gen, key) }
				case v.ConfigMap != nil && v.ConfigMap.Name == "crowdlog-enrollment":
					items = v.ConfigMap.Items
				case v.EmptyDir != nil:
					if err := os.MkdirAll(filepath.Join(root, m.MountPath), 0o700); err != nil {
						t.Fatal(err)
					}
				}
				for _, it := range items {
					to := filepath.Join(root, m.MountPath, it.Path)
					if m.SubPath != "" {
						if it.Path != m.SubPath {
							continue
						}
						to = filepath.Join(root, m.MountPath)
					}
					var b []byte // the enrollment list: empty
					if f := from(it.Key); f != "" {
						if b, err = os.ReadFile(f); err != nil {
							t.Fatal(err)
						}
					}
					if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(to, b, 0o440); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		args := slices.Clone(ctr.Args[1:])
		for i, a := range args {
			if strings.HasPrefix(a, "/var/lib/crowdlog") {
				args[i] = filepath.Join(root, a)
			}
		}
		o := issuer.NewOptions()
		fs := pflag.NewFlagSet("issuer", pflag.ContinueOnError)
		fs.ParseErrorsAllowlist.UnknownFlags = true // --metrics, added by the command
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		cfg, err := o.Config()
		if err != nil {
			t.Errorf("%s %s-issuer: the chart's files do not start it: %v", c.op, c.role, err)
			continue
		}
		if !slices.Equal(cfg.Kinds, []string{c.role}) {
			t.Errorf("%s %s-issuer: kinds %v, want [%s]", c.op, c.role, cfg.Kinds, c.role)
		}
		want, _ := os.ReadFile(filepath.Join(gen, c.seed))
		got, _ := os.ReadFile(filepath.Join(o.Keys, c.seed))
		if len(want) == 0 || !bytes.Equal(got, want) {
			t.Errorf("%s %s-issuer: token seed is not its aggregator's (%d bytes, want %d)", c.op, c.role, len(got), len(want))
		}
	}
}
