package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/crowdlog/crowdlog/infra/keydir"
)

// composeServices reads the services of infra/deploy/compose.yaml: image,
// command and volumes (the YAML merge key << applied by the decoder).
func composeServices(t *testing.T) map[string]struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Volumes     []string          `yaml:"volumes"`
	Environment map[string]string `yaml:"environment"`
	Networks    []string          `yaml:"networks"`
	Profiles    []string          `yaml:"profiles"`
	Tmpfs       []string          `yaml:"tmpfs"`
} {
	t.Helper()
	b, err := os.ReadFile("../../infra/deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Volumes     []string          `yaml:"volumes"`
			Environment map[string]string `yaml:"environment"`
			Networks    []string          `yaml:"networks"`
			Profiles    []string          `yaml:"profiles"`
			Tmpfs       []string          `yaml:"tmpfs"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.Services
}

// TestComposeMounts: in infra/deploy/compose.yaml no container mounts the
// keys or NKey directory whole; a private key of the custody table
// (keydir.Custody) and an NKey seed (*.nk) are mounted only into the
// containers whose command names that file, or names the directory it is
// mounted in as --keys (the role loads its keys from there); no container
// mounts private keys of two custody roles; control-sign.key into none;
// the NATS servers mount no seed.
func TestComposeMounts(t *testing.T) {
	private := map[string]string{} // file -> custody role
	for _, r := range keydir.Custody {
		for _, p := range r.Private {
			private[p] = r.Role
		}
	}
	n := 0
	for name, s := range composeServices(t) {
		args := strings.Join(s.Command, " ")
		keysDir := composeFlag(s.Command, "--keys")
		roles := map[string]bool{}
		for _, v := range s.Volumes {
			src, rest, _ := strings.Cut(v, ":")
			dst, _, _ := strings.Cut(rest, ":")
			src = path.Clean(src)
			if src == "keys" || src == "nats-auth" {
				t.Errorf("service %s mounts the whole %s directory (%s)", name, src, v)
			}
			base := path.Base(src)
			if (private[base] != "" || strings.HasSuffix(base, ".nk")) && !strings.Contains(args, "/"+base) && (keysDir == "" || path.Dir(dst) != keysDir) {
				t.Errorf("service %s mounts %s, which its command does not use", name, base)
			}
			if r := private[base]; r != "" {
				roles[r] = true
			}
			if base == keydir.ControlSignKey {
				t.Errorf("service %s mounts the pipeline operator's %s", name, base)
			}
			n++
		}
		if len(roles) > 1 {
			t.Errorf("service %s mounts private keys of %d custody roles %v", name, len(roles), slices.Sorted(maps.Keys(roles)))
		}
	}
	if n < 10 {
		t.Fatalf("only %d volume mounts in compose.yaml", n)
	}
}

// TestComposeRoutesAuthorized starts a NATS server from the command line
// and environment of compose's nats-1 (parsed by nats-server's own flag
// and configuration parsers, with infra/deploy/nats-cluster.conf, listening
// on loopback) and a rogue server that solicits a route to it: without
// the route user and password the route must be refused (a route is not
// subject to the permission table: it reads and writes every subject).
// The password is in the environment, never on the command line.
// Controls: the same rogue with the password joins, and the route-open
// command line compose had before (--cluster nats://0.0.0.0:6222, no
// user) lets the rogue join without one.
func TestComposeRoutesAuthorized(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS servers")
	}
	svc, ok := composeServices(t)["nats-1"]
	if !ok {
		t.Fatal("compose.yaml has no service nats-1")
	}
	const pw = "route-test-pw"
	envRE := regexp.MustCompile(`\$\{NATS_ROUTE_PASSWORD[^}]*\}`)
	if cmdline := strings.Join(svc.Command, " "); strings.Contains(cmdline, "NATS_ROUTE_PASSWORD") || strings.Contains(cmdline, "@") {
		t.Errorf("nats-1 command %v carries the route password: every user of the host reads it (ps)", svc.Command)
	}
	if !strings.Contains(svc.Environment["NATS_ROUTE_PASSWORD"], "${NATS_ROUTE_PASSWORD") {
		t.Errorf("nats-1 environment %v does not take the route password from $NATS_ROUTE_PASSWORD", svc.Environment)
	}
	for k, v := range svc.Environment {
		t.Setenv(k, envRE.ReplaceAllString(v, pw))
	}
	// the -c file beside a stand-in for the generated permission config
	// (not needed for routes), as compose mounts them
	confDir := t.TempDir()
	var args []string
	for i := 0; i < len(svc.Command); i++ {
		if svc.Command[i] == "-c" && i+1 < len(svc.Command) {
			i++
			b, err := os.ReadFile(filepath.Join("../../infra/deploy", path.Base(svc.Command[i])))
			if err != nil {
				t.Fatalf("nats-1 -c %s: %v", svc.Command[i], err)
			}
			conf := filepath.Join(confDir, path.Base(svc.Command[i]))
			if err := os.WriteFile(conf, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(confDir, "nats-server.conf"), []byte("# the generated permission config\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(args, "-c", conf)
			continue
		}
		args = append(args, svc.Command[i])
	}
	old := []string{"-js", "--name", "nats-1", "--cluster_name", "crowdlog", "--cluster", "nats://0.0.0.0:6222",
		"--routes", "nats://nats-1:6222,nats://nats-2:6222,nats://nats-3:6222"}

	// joins starts a server from argv and a rogue route to it (with user
	// and password when given) and reports whether the route came up.
	// joins reports whether a rogue route joins within `within` (a refused
	// route never does: 3 s show it; a joining one is waited for up to 30 s)
	joins := func(argv []string, user, pass string, within time.Duration) bool {
		t.Helper()
		fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
		o, err := server.ConfigureOptions(fs, argv, func() {}, func() {}, func() {})
		if err != nil {
			t.Fatalf("nats-server flags %v: %v", argv, err)
		}
		o.Host, o.Port, o.HTTPPort = "127.0.0.1", -1, 0
		o.Cluster.Host, o.Cluster.Port = "127.0.0.1", -1
		o.Routes, o.RoutesStr = nil, "" // the compose host names do not resolve here
		o.JetStream, o.StoreDir = false, ""
		o.NoLog, o.NoSigs = true, true
		victim, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go victim.Start()
		defer victim.Shutdown()
		if !victim.ReadyForConnections(30 * time.Second) {
			t.Fatal("nats server not ready")
		}
		u := "nats://" + victim.ClusterAddr().String()
		if user != "" {
			u = "nats://" + user + ":" + pass + "@" + victim.ClusterAddr().String()
		}
		ro := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "crowdlog", Host: "127.0.0.1", Port: -1}, Routes: server.RoutesFromStr(u)}
		rogue, err := server.NewServer(ro)
		if err != nil {
			t.Fatal(err)
		}
		go rogue.Start()
		defer rogue.Shutdown()
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if victim.NumRoutes() > 0 {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	}
	if joins(args, "", "", 3*time.Second) {
		t.Error("a route without the route user and password joined compose's NATS server")
	}
	if !joins(args, "route", pw, 30*time.Second) {
		t.Error("control: the route with compose's user and password did not join")
	}
	if !joins(old, "", "", 30*time.Second) {
		t.Error("control: the former route-open command line refused the unauthorized route")
	}
	if slices.Contains(args, "nats://0.0.0.0:6222") {
		t.Error("nats-1 still listens for routes without authorization")
	}
}

// TestReleaseRequiresWriter: `release` and `release-pdd` without
// --clickhouse-user, or with user default, are usage errors (exit 2) that
// name the writer of `crowdlog clickhouse init --writer`; they never fall
// back to the administrator.
func TestReleaseRequiresWriter(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"release", "--kafka", "127.0.0.1:1", "--clickhouse", "127.0.0.1:1", "--policy", "ft-u", "--k", "2"}, "give --clickhouse-user NAME"},
		{[]string{"release", "--kafka", "127.0.0.1:1", "--clickhouse", "127.0.0.1:1", "--policy", "ft-u", "--k", "2", "--clickhouse-user", "default"}, "never writes as user default"},
		{[]string{"release-pdd", "--kafka", "127.0.0.1:1", "--clickhouse", "127.0.0.1:1"}, "give --clickhouse-user NAME"},
		{[]string{"release-pdd", "--kafka", "127.0.0.1:1", "--clickhouse", "127.0.0.1:1", "--clickhouse-user", "default"}, "never writes as user default"},
	} {
		root := rootCmd()
		root.SetArgs(c.args)
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		err := root.ExecuteContext(context.Background())
		var ec exitCode
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ec) || ec.code != 2 {
			t.Errorf("%v: %v; want a usage error saying %q", c.args, err, c.want)
		}
	}
}

// TestComposePrio3Issuers: compose's prio3 profile runs each Prio3
// aggregator's token issuer beside it: `issuer --role prio3-leader` with the
// leader and `issuer --role prio3-helper` with the helper, each on the
// network of its aggregator's operator, with its aggregator's NKey and the
// token seed and custody marker its aggregator reads (the same host files),
// in a writable in-memory --keys directory with the attester's list. The
// leader's operator and the helper's share no host file but public ones
// (the collector's and the leader's public keys, the enrollment list).
func TestComposePrio3Issuers(t *testing.T) {
	svcs := composeServices(t)
	mounts := func(name string) map[string]string { // destination -> host file
		out := map[string]string{}
		for _, v := range svcs[name].Volumes {
			src, rest, _ := strings.Cut(v, ":")
			dst, _, _ := strings.Cut(rest, ":")
			out[dst] = path.Clean(src)
		}
		return out
	}
	for _, c := range []struct{ role, agg, seed string }{
		{"prio3-leader", "prio3-leader", keydir.Prio3LeaderTokenSeed},
		{"prio3-helper", "prio3-helper", keydir.Prio3HelperTokenSeed},
	} {
		name := c.role + "-issuer"
		s, ok := svcs[name]
		if !ok {
			t.Errorf("compose.yaml has no service %s", name)
			continue
		}
		a := svcs[c.agg]
		if len(s.Command) < 3 || s.Command[0] != "issuer" || composeFlag(s.Command, "--role") != c.role {
			t.Errorf("%s: command %v, want issuer --role %s", name, s.Command, c.role)
		}
		if !slices.Equal(s.Profiles, []string{"prio3"}) || !slices.Equal(a.Profiles, []string{"prio3"}) {
			t.Errorf("%s profiles %v, %s profiles %v: want [prio3] (off unless Prio3 mode is started)", name, s.Profiles, c.agg, a.Profiles)
		}
		if !slices.Equal(s.Networks, a.Networks) {
			t.Errorf("%s on networks %v, its aggregator on %v: want its operator's", name, s.Networks, a.Networks)
		}
		if n := composeFlag(s.Command, "--nats-nkey"); n == "" || n != composeFlag(a.Command, "--nats-nkey") || mounts(name)[n] != mounts(c.agg)[n] {
			t.Errorf("%s: NKey %q (%s), its aggregator's %q (%s)", name, n, mounts(name)[n], composeFlag(a.Command, "--nats-nkey"), mounts(c.agg)[n])
		}
		keys := composeFlag(s.Command, "--keys")
		if !slices.Contains(s.Tmpfs, keys) {
			t.Errorf("%s: --keys %q is not a tmpfs (%v): the issuer writes its keys directory", name, keys, s.Tmpfs)
		}
		m, am := mounts(name), mounts(c.agg)
		seed := am[composeFlag(a.Command, "--token-seed")]
		if seed == "" || m[keys+"/"+c.seed] != seed {
			t.Errorf("%s: seed %q at %s/%s, its aggregator's --token-seed is %q", name, m[keys+"/"+c.seed], keys, c.seed, seed)
		}
		if m[keys+"/"+keydir.CustodyFile] == "" || m[keys+"/"+keydir.CustodyFile] != am[composeFlag(a.Command, "--keys")+"/"+keydir.CustodyFile] {
			t.Errorf("%s: custody marker %q, its aggregator's %q", name, m[keys+"/"+keydir.CustodyFile], am[composeFlag(a.Command, "--keys")+"/"+keydir.CustodyFile])
		}
		if m[keys+"/"+keydir.EnrollmentFile] == "" {
			t.Errorf("%s: no enrollment list at %s/%s", name, keys, keydir.EnrollmentFile)
		}
	}
	for _, name := range []string{"prio3-leader", "prio3-leader-issuer", "prio3-helper", "prio3-helper-issuer"} { // the binary's own flags
		root := rootCmd()
		cmd, rest, err := root.Find(svcs[name].Command)
		if err != nil || cmd == root {
			t.Errorf("%s: %v: not a crowdlog subcommand: %v", name, svcs[name].Command, err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil || len(cmd.Flags().Args()) > 0 {
			t.Errorf("%s: %v: %v %v", name, svcs[name].Command, err, cmd.Flags().Args())
		}
	}
	side := map[string]string{} // host file -> operator side
	for _, op := range []string{"prio3-leader", "prio3-helper"} {
		for _, svc := range []string{op, op + "-issuer"} {
			for _, src := range mounts(svc) {
				if strings.HasSuffix(src, ".pub") || path.Base(src) == keydir.EnrollmentFile || !strings.Contains(src, "/") {
					continue // public files; named volumes
				}
				if o := side[src]; o != "" && o != op {
					t.Errorf("%s is mounted by both the %s and the %s operator", src, o, op)
				}
				side[src] = op
			}
		}
	}
}

// composeFlag returns the value of flag in a compose command ("--f v"
// or "--f=v"), or "".
func composeFlag(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}
