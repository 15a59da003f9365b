// Package rehearsal holds the deployment rehearsal: every operator's Helm
// manifests started on one host, each role as its own `crowdlog` process,
// with TLS and authentication on for NATS, Kafka and ClickHouse
// (docs/operations.md, "Rehearsal: every operator's manifests on one host").
package rehearsal

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/deploy/helm"
	"github.com/crowdlog/crowdlog/infra/gobuild"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/infra/tlstest"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/tests/truth"
)

const (
	bundled = "../../testdata/aol-top1000.tsv.gz"
	users   = 100 // the first users of the bundled log the clients replay
	k       = 3   // release.k, set over release.yaml's 5 so that 100 users release several items
	policy  = "ft-u"
	app     = "query"
)

// Bounds of every wait; each failure names what it waited for.
const (
	readyWait   = 90 * time.Second // a role's /readyz
	jobWait     = 90 * time.Second // one try of a hook Job
	ingestWait  = 4 * time.Minute  // the clients
	drainWait   = 2 * time.Minute  // relays a and b forwarded everything
	releaseWait = 2 * time.Minute  // the release row in the analyst database
)

// natsRole is the NATS role each operator's credential (Secret
// crowdlog-nats, key nkey) belongs to: the aggregator operator's is its
// issuer's (issuer), the randomness operator's serves its OPRF service and
// its issuer (randomness); the pipeline operator's (operator) only checks
// that the relays drained, as `crowdlog run` does.
var natsRole = map[string]natsauth.Role{
	"relay-a": "relay-a", "relay-b": "relay-b", "randomness": "randomness", "aggregator": natsauth.Issuer,
	"pipeline-operator": natsauth.Operator,
}

// keyRole is the `keys generate --role` of the operators that keep a keys
// directory (docs/operations.md, "Keys per operator"); the randomness
// operator's holds only the attester's list it imports (its epoch keys are
// created on its volume), the attester's the enrollment list.
var keyRole = map[string]string{
	"relay-a": keydir.RoleRelayA, "relay-b": keydir.RoleRelayB, "aggregator": keydir.RoleAggregator,
	"randomness": keydir.RoleRandomness, "attester": keydir.RoleAttester, "pipeline-operator": keydir.RoleOperator,
}

// TestRehearsal installs every operator's chart as `helm install -f
// values/OPERATOR.yaml` would render it and runs each Deployment's
// container (its replicas) and each hook Job as its own `crowdlog`
// process with the rendered args and env. The test only maps addresses
// (the nats.url, kafka.brokers and clickhouse.address values; the
// metrics port per process) and mount paths (each volume to a directory
// filled as the operator's Secrets and ConfigMaps would be). NATS runs
// from the ConfigMap the pipeline operator's release renders (`crowdlog
// nats-config` with TLS and every role's NKey), kfake with TLS, SCRAM
// users and ACLs from the topics Job, ClickHouse with TLS on the native
// port and the writer and analyst users of `crowdlog clickhouse init`.
// Clients replay the first 100 users of the bundled log with tokens on:
// each device's identity is enrolled at the attester, whose list both
// issuers mount; each fetches report tokens and its ARC credential from the
// aggregator operator's issuer and randomness tokens from the randomness
// operator's, and the aggregator and the randomness service check them.
// The epoch is opened and closed by the pipeline operator's hook Jobs
// (signed control records); the release read as the analyst must equal the
// one computed from the raw log, and the aggregator must have accepted a
// report token for every report.
func TestRehearsal(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process rehearsal in -short mode")
	}
	if _, err := clickhouse.ServerBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ClickHouse is required in CI: %v", err)
		}
		t.Skipf("no ClickHouse: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	began := time.Now()
	r := &rehearsal{t: t, dir: t.TempDir(), secrets: map[string]string{}}
	r.logs = filepath.Join(r.dir, "logs")
	must(t, os.MkdirAll(r.logs, 0o755))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("role logs: %s (CROWDLOG_KEEP=1 keeps them after the test)", r.logs)
		}
	})
	if os.Getenv("CROWDLOG_KEEP") == "1" {
		r.dir, _ = os.MkdirTemp("", "rehearsal-")
		r.logs = filepath.Join(r.dir, "logs")
		must(t, os.MkdirAll(r.logs, 0o755))
	}
	r.bin = buildBinary(t, r.dir)
	input, err := truth.Subset(bundled, r.dir, users)
	must(t, err)

	// TLS material: one test CA; servers present server.pem, every role
	// client.pem (NATS verifies client certificates).
	tlsDir := filepath.Join(r.dir, "tls")
	must(t, os.MkdirAll(tlsDir, 0o700))
	serverTLS, ca := tlstest.TLS(t, tlsDir)
	r.ca = ca
	r.clientCert, r.clientKey = filepath.Join(tlsDir, "client.pem"), filepath.Join(tlsDir, "client-key.pem")

	// Keys per operator: each generates its own, exports the public parts,
	// and imports what it needs from the others; the clients' identities
	// are enrolled at the attester, whose list both issuers import.
	r.clientState = filepath.Join(r.dir, "ops", "client", "state")
	r.keysOperators(ctx, input)

	// NATS credentials: each operator makes its role's NKey and hands the
	// public key to whoever runs NATS, who generates the configuration.
	natsPort := freePort(t)
	pubs := filepath.Join(r.dir, "nats-pub")
	must(t, os.MkdirAll(pubs, 0o700))
	for _, op := range append(slices.Sorted(maps.Keys(natsRole)), "client") {
		role := natsauth.Role(op)
		if rr, ok := natsRole[op]; ok {
			role = rr
		}
		nk := r.opDir(op, "nats-nkey")
		r.cmd(ctx, op+"-nats-nkey", nil, "nats-config", "nkey", "--role", string(role), "--dir", nk)
		copyFile(t, filepath.Join(nk, natsauth.PublicFile(role)), filepath.Join(pubs, natsauth.PublicFile(role)), 0o644)
	}
	// the pipeline operator's admin credential: its streams Job creates
	// every stream and bucket; no role's own credential may
	adminNK := r.opDir("pipeline-operator", "nats-nkey-admin")
	r.cmd(ctx, "admin-nats-nkey", nil, "nats-config", "nkey", "--role", string(natsauth.Admin), "--dir", adminNK)
	copyFile(t, filepath.Join(adminNK, natsauth.PublicFile(natsauth.Admin)), filepath.Join(pubs, natsauth.PublicFile(natsauth.Admin)), 0o644)
	natsConf := r.cmd(ctx, "nats-config", nil, "nats-config", "--nkeys", pubs,
		"--tls-cert", filepath.Join(tlsDir, "server.pem"), "--tls-key", filepath.Join(tlsDir, "server-key.pem"), "--tls-ca", ca,
		"--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(natsPort)), "--store-dir", filepath.Join(r.dir, "nats-store"))

	// Kafka: TLS, SCRAM users, ACLs on; the users get their rights only
	// from the pipeline operator's topics Job (--acl).
	r.kafkaPW = map[string]string{}
	var kusers []kafka.User
	for _, u := range []string{"relay-b", "aggregator", "release", "operator"} {
		r.kafkaPW[u] = randomPassword()
		kusers = append(kusers, kafka.User{Credential: kafka.Credential{Mechanism: kafka.MechanismSCRAMSHA512, User: u, Password: r.kafkaPW[u]}})
	}
	r.kafkaPW["admin"] = randomPassword()
	kb, err := kafka.Config{Dir: filepath.Join(r.dir, "kafka"), TLS: serverTLS, ACLs: true, Users: kusers,
		Admin: &kafka.Credential{Mechanism: kafka.MechanismSCRAMSHA512, User: "admin", Password: r.kafkaPW["admin"]}}.Start(ctx)
	must(t, err)
	t.Cleanup(kb.Close)

	// ClickHouse: TLS on the native port; the administrator (user default,
	// loopback only) runs init, which makes the writer and the analyst.
	chPort := freePort(t)
	chDir := filepath.Join(r.dir, "clickhouse")
	must(t, clickhouse.WriteTLSConfig(chDir, filepath.Join(tlsDir, "server.pem"), filepath.Join(tlsDir, "server-key.pem"), chPort))
	ch, err := clickhouse.Start(ctx, chDir)
	must(t, err)
	t.Cleanup(func() { ch.Stop() })
	chSecure := net.JoinHostPort("127.0.0.1", strconv.Itoa(chPort))
	r.writerPW, r.analystPW = randomPassword(), randomPassword()
	r.cmd(ctx, "clickhouse-init", []string{"CROWDLOG_WRITER_PASSWORD_FILE=" + r.secretFile("writer-password", r.writerPW)},
		"clickhouse", "init", "--clickhouse", ch.TCPAddr, "--users-d", clickhouse.UsersDir(ch.Dir), "--insecure-passwordless-default",
		"--writer", "crowdlog_writer", "--analyst", "analyst", "--password-file", r.secretFile("analyst-password", r.analystPW))

	// The values every operator sets for this host: where NATS, Kafka and
	// ClickHouse listen, and the smaller k.
	set := func() map[string]any {
		return map[string]any{
			"nats":       map[string]any{"url": "tls://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(natsPort))},
			"kafka":      map[string]any{"brokers": kb.Bootstrap()},
			"clickhouse": map[string]any{"address": chSecure},
			"release":    map[string]any{"k": k},
			"issuer":     map[string]any{"randomnessTokens": r.randomnessTokens, "reportTokens": r.reportTokens},
		}
	}
	rendered := map[string][]helm.Object{}
	for _, op := range helm.Operators {
		objs, err := helm.Render(op, set())
		if err != nil {
			t.Fatalf("render %s: %v", op, err)
		}
		rendered[op] = objs
	}
	t.Logf("issuer budgets per identity and epoch: %d randomness tokens, %d report tokens (the largest user's needs)", r.randomnessTokens, r.reportTokens)
	// Tokens on: the randomness service requires them, the aggregator
	// checks them, and the randomness service and both issuers schedule
	// epochs of one length, the clients' epoch.
	if !slices.Contains(deploymentArgs(t, rendered["randomness"], "randomness"), "--require-tokens") {
		t.Fatal("randomness: no --require-tokens: the chart does not turn the randomness tokens on")
	}
	if flagValue(t, rendered["aggregator"], "aggregate", "--keys") == "" {
		t.Fatal("aggregate: no --keys: the chart does not check report tokens and ARC presentations")
	}
	epochLength := flagValue(t, rendered["randomness"], "randomness", "--epoch-length")
	for _, op := range []string{"randomness", "aggregator"} {
		if l := flagValue(t, rendered[op], "issuer", "--epoch-length"); l != epochLength {
			t.Fatalf("%s's issuer --epoch-length %s, randomness %s: the issuer refuses the clients' epoch", op, l, epochLength)
		}
	}
	length, err := time.ParseDuration(epochLength)
	must(t, err)
	epoch := protocol.ScheduleEpoch(time.Now(), length)
	t.Logf("epoch %s (--epoch-length %s)", epoch, epochLength)

	// The pipeline operator's install: the NATS Secret and the hook
	// Jobs (topics with the ACLs, then the epoch's open).
	po := set()
	po["natsConfig"], po["epochs"] = natsConf, []any{epoch}
	// the epoch Jobs log in as Kafka user operator (Write on reports
	// only) and bind a pipeline digest into their signed records; the
	// chart's aggregator serves every definition (no --pipeline), so
	// any digest applies here
	po["epochJobs"] = map[string]any{"pipelineDigest": strings.Repeat("00", 32)}
	poObjs, err := helm.Render("pipeline-operator", po)
	must(t, err)
	r.populate("pipeline-operator", poObjs)
	conf := ""
	for _, o := range poObjs {
		if s, ok := o.Value.(*corev1.Secret); ok && o.Name == "crowdlog-nats-config" {
			conf = s.StringData["nats.conf"]
		}
	}
	if conf == "" {
		t.Fatal("pipeline-operator: no Secret crowdlog-nats-config with nats.conf: the NATS release has no configuration")
	}
	confPath := filepath.Join(r.dir, "nats.conf")
	must(t, os.WriteFile(confPath, []byte(conf), 0o600))
	ns, err := natsserver.Options{Dir: filepath.Join(r.dir, "nats-store"), Port: natsPort, ConfigFile: confPath,
		Logger: slog.New(slog.NewTextHandler(r.logFile("nats-server"), nil))}.Start(ctx)
	must(t, err)
	t.Cleanup(ns.Shutdown)
	r.runJobs(ctx, "pipeline-operator", poObjs)

	// Every other operator's Deployments, each replica its own process.
	// The Prio3 helper operator serves only Prio3 campaigns (PDD): this
	// rehearsal is threshold mode, and its chart is checked by the Helm
	// tests (TestPrio3Aggregators, TestHelmPrio3Files) while
	// tests/TestPrio3EndToEnd runs the helper and the leader as processes.
	var procs []*proc
	for _, op := range helm.Operators {
		if op == "pipeline-operator" || op == "prio3-helper" {
			continue
		}
		r.populate(op, rendered[op])
		procs = append(procs, r.startDeployments(ctx, op, rendered[op])...)
	}
	for _, p := range procs {
		p.waitReady(ctx, readyWait)
	}
	t.Logf("%d role processes ready after %v", len(procs), time.Since(began).Round(time.Second))
	r.checkAuthOn(ctx, ns.URL, kb.Addr, chSecure)

	// The clients: not in the chart (they are the users' devices); they
	// hold the client NATS credential, the public keys they imported and
	// their enrolled identities (--state), and fetch their tokens from both
	// issuers.
	ictx, icancel := context.WithTimeout(ctx, ingestWait)
	nk := r.opDir("client", "nats-nkey")
	r.cmd(ictx, "ingest", nil, "ingest", "--input", input, "--app", app, "--policy", policy, "--k", strconv.Itoa(k),
		"--epoch", epoch, "--nats", "tls://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(natsPort)),
		"--nats-nkey", filepath.Join(nk, natsauth.SeedFile(natsauth.Client)), "--nats-ca", ca,
		"--nats-cert", r.clientCert, "--nats-key", r.clientKey,
		"--keys", r.opDir("client", "keys"), "--state", r.clientState, "--workers", "4", "--no-progress")
	icancel()
	if b, _ := os.ReadFile(filepath.Join(r.logs, "ingest.log")); !bytes.Contains(b, []byte("tokens on")) {
		t.Fatalf("ingest did not send with tokens (no \"tokens on\" in its log):\n%s", tail(filepath.Join(r.logs, "ingest.log"), 20))
	}
	t.Logf("clients done after %v", time.Since(began).Round(time.Second))

	r.waitDrained(ctx, ns.URL)

	// Close the epoch: the pipeline operator's upgrade with closeEpochs.
	po["closeEpochs"] = []any{epoch}
	poObjs, err = helm.Render("pipeline-operator", po)
	must(t, err)
	r.runJobs(ctx, "pipeline-operator", poObjs)

	got := r.readRelease(ctx, chSecure, epoch)
	for _, p := range procs {
		p.checkRunning()
	}
	want, err := truth.Release(input, policy, k, 0)
	must(t, err)
	if len(want) == 0 {
		t.Fatalf("the reference release of the first %d users at k=%d is empty: nothing to compare", users, k)
	}
	if d := truth.Diff(want, got, 10); len(d) > 0 {
		t.Fatalf("the release in ClickHouse differs from the raw-log reference (%d vs %d items):\n%s", len(got), len(want), strings.Join(d, "\n"))
	}
	r.checkLogs(want)
	r.checkTokens(procs)
	t.Logf("release of %d items equals the reference; rehearsal took %v", len(got), time.Since(began).Round(time.Second))
}

type rehearsal struct {
	t                   *testing.T
	bin, dir, logs      string
	ca                  string
	clientCert          string
	clientKey           string
	kafkaPW             map[string]string // SASL user -> password
	writerPW, analystPW string
	secrets             map[string]string // "op/Secret or ConfigMap name" -> directory holding its keys
	jobsRun             int
	clientState         string // ingest --state: the devices' state, their identity keys included
	// the most OPRF elements (distinct artifacts) and reports one user of
	// the replayed log needs: the issuers' budgets N and d, so that the
	// release is exact (ft-u sets no per-user limit)
	randomnessTokens, reportTokens int
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// buildBinary builds cmd/crowdlog into dir.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "crowdlog")
	if err := gobuild.Build(context.Background(), bin, "../../cmd/crowdlog"); err != nil {
		t.Fatal(err)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomPassword() string { return "pw-" + rand.Text() }

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	must(t, err)
	must(t, os.MkdirAll(filepath.Dir(dst), 0o700))
	os.Remove(dst)
	must(t, os.WriteFile(dst, b, mode))
}

// opDir returns (and creates, 0700) the directory sub of operator op.
func (r *rehearsal) opDir(op, sub string) string {
	d := filepath.Join(r.dir, "ops", op, sub)
	must(r.t, os.MkdirAll(d, 0o700))
	return d
}

func (r *rehearsal) secretFile(name, value string) string {
	p := filepath.Join(r.dir, "secrets", name)
	must(r.t, os.MkdirAll(filepath.Dir(p), 0o700))
	must(r.t, os.WriteFile(p, []byte(value+"\n"), 0o600))
	return p
}

func (r *rehearsal) logFile(name string) *os.File {
	f, err := os.OpenFile(filepath.Join(r.logs, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	must(r.t, err)
	r.t.Cleanup(func() { f.Close() })
	return f
}

// cmd runs the binary to completion (bounded by ctx) with the extra
// environment, logging to logs/NAME.log; it returns stdout and fails the
// test with the log's tail when the command fails.
func (r *rehearsal) cmd(ctx context.Context, name string, env []string, args ...string) string {
	r.t.Helper()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, jobWait)
		defer cancel()
	}
	c := exec.CommandContext(ctx, r.bin, args...)
	c.Env = append(cleanEnv(), env...)
	c.Dir = r.dir
	var out bytes.Buffer
	lf := r.logFile(name)
	c.Stdout, c.Stderr = io.MultiWriter(&out, lf), lf
	c.WaitDelay = 5 * time.Second
	if err := c.Run(); err != nil {
		r.t.Fatalf("%s (crowdlog %s): %v (bounded by %v)\n%s", name, args[0], err, deadlineLeft(ctx), tail(lf.Name(), 30))
	}
	return out.String()
}

func deadlineLeft(ctx context.Context) string {
	if d, ok := ctx.Deadline(); ok {
		return "deadline " + d.Format(time.TimeOnly)
	}
	return "no deadline"
}

// cleanEnv is the test's environment without CROWDLOG_ variables, so
// that a role reads only what its manifest gives it.
func cleanEnv() []string {
	var out []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CROWDLOG_") && !strings.HasPrefix(e, "GOMAXPROCS=") {
			out = append(out, e)
		}
	}
	return out
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// keysOperators does docs/operations.md's "Keys per operator": each key
// holder generates its own keys in its own directory and exports the
// public parts; the aggregator imports the pipeline operator's control
// key, the clients relay a's, relay b's and the aggregator's public keys.
// Every device of input makes its identity key (in its ingest state, where
// `ingest --state` finds it) and hands the public half to the attester,
// who enrolls them all (`keys enroll`) and exports the list, which the
// aggregator and randomness operators import for their issuers.
func (r *rehearsal) keysOperators(ctx context.Context, input string) {
	bundles := map[string]string{}
	for _, op := range slices.Sorted(maps.Keys(keyRole)) {
		dir := r.opDir(op, "keys")
		r.cmd(ctx, op+"-keys", nil, "keys", "generate", "--role", keyRole[op], "--keys", dir)
	}
	var pubs []string
	miner, err := apps.Lookup(app)
	must(r.t, err)
	_, err = aol.ReadUsers(input, func(u aol.User) error {
		p := filepath.Join(ingest.UserDir(r.clientState, u.AnonID), ingest.IdentityKeyFile)
		if _, err := keydir.EnsureIdentityKey(p); err != nil {
			return err
		}
		pubs = append(pubs, p+".pub")
		arts := miner.Mine(u.Records)
		distinct := map[string]bool{}
		for _, a := range arts {
			distinct[a.Primary] = true
		}
		r.randomnessTokens = max(r.randomnessTokens, len(distinct))
		r.reportTokens = max(r.reportTokens, len(arts))
		return nil
	})
	must(r.t, err)
	if len(pubs) != users {
		r.t.Fatalf("%d client identities for %d users", len(pubs), users)
	}
	r.cmd(ctx, "attester-enroll", nil, append([]string{"keys", "enroll", "--keys", r.opDir("attester", "keys")}, pubs...)...)
	for _, op := range slices.Sorted(maps.Keys(keyRole)) {
		bundles[op] = filepath.Join(r.dir, "bundles", op)
		r.cmd(ctx, op+"-export", nil, "keys", "export-public", "--keys", r.opDir(op, "keys"), "--out", bundles[op])
	}
	r.cmd(ctx, "aggregator-import", nil, "keys", "import-public", "--keys", r.opDir("aggregator", "keys"), bundles["pipeline-operator"], bundles["attester"])
	r.cmd(ctx, "randomness-import", nil, "keys", "import-public", "--keys", r.opDir("randomness", "keys"), bundles["attester"])
	client := r.opDir("client", "keys")
	r.cmd(ctx, "client-keys", nil, "keys", "generate", "--role", keydir.RoleClient, "--keys", client)
	r.cmd(ctx, "client-import", nil, "keys", "import-public", "--keys", client, bundles["relay-a"], bundles["relay-b"], bundles["aggregator"])
}

// populate creates what operator op creates before `helm install`
// (docs/operations.md, the Secrets and ConfigMaps its values name): the
// NATS, Kafka and ClickHouse credentials, its keys, the public keys it
// imported and the enrollment list, as directories the mounts copy from.
func (r *rehearsal) populate(op string, objs []helm.Object) {
	t := r.t
	for _, c := range helm.Containers(objs) {
		for _, v := range c.Pod.Volumes {
			name, items := "", []corev1.KeyToPath(nil)
			switch {
			case v.Secret != nil:
				name, items = v.Secret.SecretName, v.Secret.Items
			case v.ConfigMap != nil:
				name, items = v.ConfigMap.Name, v.ConfigMap.Items
			default:
				continue
			}
			id := op + "/" + name
			if _, ok := r.secrets[id]; ok {
				continue
			}
			dir := filepath.Join(r.dir, "ops", op, "objects", name)
			must(t, os.MkdirAll(dir, 0o700))
			put := func(key, value string) { must(t, os.WriteFile(filepath.Join(dir, key), []byte(value), 0o600)) }
			cp := func(key, src string) { copyFile(t, src, filepath.Join(dir, key), 0o600) }
			switch v.Name {
			case "nats":
				role, ok := natsRole[op]
				if !ok {
					t.Fatalf("%s: mounts NATS credentials, but the operator holds no NATS role in this test", op)
				}
				nkDir := r.opDir(op, "nats-nkey")
				if op == "pipeline-operator" && name == "crowdlog-nats-admin" { // the streams Job's
					role, nkDir = natsauth.Admin, r.opDir(op, "nats-nkey-admin")
				}
				cp("ca.crt", r.ca)
				cp("tls.crt", r.clientCert)
				cp("tls.key", r.clientKey)
				cp("nkey", filepath.Join(nkDir, natsauth.SeedFile(role)))
			case "kafka":
				user := argAfter(c.Args, "--kafka-sasl-user")
				pw, ok := r.kafkaPW[user]
				if !ok {
					t.Fatalf("%s %s: Kafka user %q has no SCRAM credential on the broker", op, c.Owner, user)
				}
				cp("ca.crt", r.ca)
				put("password", pw+"\n")
			case "clickhouse":
				if user := argAfter(c.Args, "--clickhouse-user"); user != "crowdlog_writer" {
					t.Fatalf("%s %s: ClickHouse user %q: init made crowdlog_writer", op, c.Owner, user)
				}
				cp("ca.crt", r.ca)
				put("password", r.writerPW+"\n")
			case "keys", "public":
				src := filepath.Join(r.dir, "ops", op, "keys")
				for _, it := range items {
					cp(it.Key, filepath.Join(src, it.Key))
				}
			case "enrollment": // the attester's list, as the operator imported it
				for _, it := range items {
					cp(it.Key, filepath.Join(r.dir, "ops", op, "keys", it.Key))
				}
			default:
				t.Fatalf("%s %s: volume %s (%s) is not known to the rehearsal: add how its operator fills it", op, c.Owner, v.Name, name)
			}
			r.secrets[id] = dir
		}
	}
}

func argAfter(args []string, flag string) string {
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

// deploymentArgs returns the args of the container of Deployment name.
func deploymentArgs(t *testing.T, objs []helm.Object, name string) []string {
	t.Helper()
	for _, c := range helm.Containers(objs) {
		if c.Owner == "Deployment/"+name {
			return c.Args
		}
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

// flagValue returns flag's value in the container of Deployment name.
func flagValue(t *testing.T, objs []helm.Object, name, flag string) string {
	t.Helper()
	for _, c := range helm.Containers(objs) {
		if c.Owner == "Deployment/"+name {
			if v := argAfter(c.Args, flag); v != "" {
				return v
			}
		}
	}
	t.Fatalf("Deployment %s has no %s", name, flag)
	return ""
}

// mounts materializes the volume mounts of c for process dir procDir and
// returns the mapping from mount path to host directory or file, longest
// mount path first. Secret and ConfigMap volumes are filled from the
// operator's objects with their items and modes; a PersistentVolumeClaim
// is one directory per claim, shared by the replicas; an emptyDir one per
// process. A mount below another (a subPath file) lands inside it.
func (r *rehearsal) mounts(op string, c helm.Container, procDir string) [][2]string {
	t := r.t
	ms := slices.Clone(c.VolumeMounts)
	sort.Slice(ms, func(i, j int) bool { return len(ms[i].MountPath) < len(ms[j].MountPath) })
	var out [][2]string
	for _, m := range ms {
		var vol *corev1.Volume
		for i := range c.Pod.Volumes {
			if c.Pod.Volumes[i].Name == m.Name {
				vol = &c.Pod.Volumes[i]
			}
		}
		if vol == nil {
			t.Fatalf("%s %s: mount %s names no volume %s", op, c.Owner, m.MountPath, m.Name)
		}
		host := ""
		for _, o := range out { // below an earlier mount: inside its directory
			if rel, ok := strings.CutPrefix(m.MountPath, strings.TrimSuffix(o[0], "/")+"/"); ok {
				host = filepath.Join(o[1], rel)
			}
		}
		src, items, mode := "", []corev1.KeyToPath(nil), int32(0o644)
		switch {
		case vol.Secret != nil:
			src, items = r.secrets[op+"/"+vol.Secret.SecretName], vol.Secret.Items
			if vol.Secret.DefaultMode != nil {
				mode = *vol.Secret.DefaultMode
			}
		case vol.ConfigMap != nil:
			src, items = r.secrets[op+"/"+vol.ConfigMap.Name], vol.ConfigMap.Items
			if vol.ConfigMap.DefaultMode != nil {
				mode = *vol.ConfigMap.DefaultMode
			}
		case vol.PersistentVolumeClaim != nil:
			if host == "" {
				host = filepath.Join(r.dir, "ops", op, "pvc", vol.PersistentVolumeClaim.ClaimName)
			}
		case vol.EmptyDir != nil:
			if host == "" {
				host = filepath.Join(procDir, "volumes", m.Name)
			}
		default:
			t.Fatalf("%s %s: volume %s of a kind the rehearsal does not map", op, c.Owner, vol.Name)
		}
		if (vol.Secret != nil || vol.ConfigMap != nil) && src == "" {
			t.Fatalf("%s %s: volume %s: its Secret or ConfigMap was not created", op, c.Owner, vol.Name)
		}
		if host == "" {
			host = filepath.Join(procDir, "volumes", m.Name)
		}
		if src != "" {
			// the mount is the volume (its items), or with subPath one item
			for _, it := range items {
				m0 := mode
				if it.Mode != nil {
					m0 = *it.Mode
				}
				dst := filepath.Join(host, it.Path)
				if m.SubPath != "" {
					if it.Path != m.SubPath {
						continue
					}
					dst = host
				}
				// the process runs as this user: keep the owner's read bit
				// where the mode grants the group (fsGroup) read
				fm := os.FileMode(m0) & 0o700
				if m0&0o040 != 0 || m0&0o004 != 0 {
					fm |= 0o400
				}
				copyFile(t, filepath.Join(src, it.Key), dst, fm)
			}
		} else {
			must(t, os.MkdirAll(host, 0o700))
		}
		out = append(out, [2]string{m.MountPath, host})
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i][0]) > len(out[j][0]) })
	return out
}

// mapPath maps an absolute path of the container to the host through the
// longest mount that holds it.
func mapPath(t *testing.T, where string, ms [][2]string, p string) string {
	for _, m := range ms {
		if p == m[0] {
			return m[1]
		}
		if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(m[0], "/")+"/"); ok {
			return filepath.Join(m[1], rel)
		}
	}
	t.Fatalf("%s: path %s lies under none of its mounts", where, p)
	return ""
}

// command returns the args and environment of c for this host: paths
// through its mounts, --metrics on a free loopback port (returned), and
// GOMAXPROCS from its CPU request as the Downward API gives it.
func (r *rehearsal) command(op string, c helm.Container, procDir string) (args, env []string, metrics string) {
	t := r.t
	where := op + " " + c.Owner
	ms := r.mounts(op, c, procDir)
	for i := 0; i < len(c.Args); i++ {
		a := c.Args[i]
		switch {
		case a == "--metrics" && i+1 < len(c.Args):
			metrics = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
			args = append(args, a, metrics)
			i++
			continue
		case strings.HasPrefix(a, "/"):
			a = mapPath(t, where, ms, a)
		case strings.HasPrefix(a, "--") && strings.Contains(a, "=/"):
			f, v, _ := strings.Cut(a, "=")
			a = f + "=" + mapPath(t, where, ms, v)
		}
		args = append(args, a)
	}
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
			ref := e.ValueFrom.ResourceFieldRef
			q, ok := c.Resources.Requests[corev1.ResourceName(strings.TrimPrefix(ref.Resource, "requests."))]
			if !ok || !strings.HasPrefix(ref.Resource, "requests.") {
				t.Fatalf("%s: %s from %s: the container requests no such resource", where, e.Name, ref.Resource)
			}
			v = strconv.FormatInt(max(1, (q.MilliValue()+999)/1000), 10)
		case e.ValueFrom != nil:
			t.Fatalf("%s: %s: a valueFrom the rehearsal does not map", where, e.Name)
		case strings.HasPrefix(e.Name, "CROWDLOG_") && strings.HasSuffix(e.Name, "_FILE"):
			v = mapPath(t, where, ms, v)
		}
		env = append(env, e.Name+"="+v)
	}
	return args, env, metrics
}

// runJobs runs op's hook Jobs in hook-weight order, each to completion;
// like the Job controller it retries a failed pod up to backoffLimit.
func (r *rehearsal) runJobs(ctx context.Context, op string, objs []helm.Object) {
	t := r.t
	var jobs []*batchv1.Job
	for _, o := range objs {
		if j, ok := o.Value.(*batchv1.Job); ok {
			jobs = append(jobs, j)
		}
	}
	weight := func(j *batchv1.Job) int { w, _ := strconv.Atoi(j.Annotations["helm.sh/hook-weight"]); return w }
	sort.SliceStable(jobs, func(i, j int) bool { return weight(jobs[i]) < weight(jobs[j]) })
	if len(jobs) == 0 {
		t.Fatalf("%s: no hook Jobs rendered", op)
	}
	for _, j := range jobs {
		objs := []helm.Object{{Kind: "Job", Name: j.Name, Value: j}}
		for _, c := range helm.Containers(objs) {
			r.jobsRun++
			name := fmt.Sprintf("%s-job-%s-%d", op, j.Name, r.jobsRun)
			procDir := filepath.Join(r.dir, "procs", name)
			args, env, _ := r.command(op, c, procDir)
			tries := 1
			if j.Spec.BackoffLimit != nil {
				tries += int(*j.Spec.BackoffLimit)
			}
			tries = min(tries, 3)
			for try := 1; ; try++ {
				err := r.runOnce(ctx, name, procDir, args, env)
				if err == nil {
					break
				}
				if try == tries {
					t.Fatalf("%s: Job %s failed %d times: %v\n%s", op, j.Name, try, err, tail(filepath.Join(r.logs, name+".log"), 30))
				}
				time.Sleep(2 * time.Second)
			}
		}
	}
}

func (r *rehearsal) runOnce(ctx context.Context, name, procDir string, args, env []string) error {
	ctx, cancel := context.WithTimeout(ctx, jobWait)
	defer cancel()
	c := exec.CommandContext(ctx, r.bin, args...)
	c.Env, c.Dir = append(cleanEnv(), env...), procDir
	lf := r.logFile(name)
	c.Stdout, c.Stderr = lf, lf
	c.WaitDelay = 5 * time.Second
	if err := c.Run(); err != nil {
		return fmt.Errorf("%w (bounded by %v)", err, jobWait)
	}
	return nil
}

// proc is one role process of a Deployment replica.
type proc struct {
	t       *testing.T
	name    string
	op, ctr string // operator and container
	metrics string
	log     string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// startDeployments starts every replica of op's Deployments.
func (r *rehearsal) startDeployments(ctx context.Context, op string, objs []helm.Object) []*proc {
	t := r.t
	var out []*proc
	for _, o := range objs {
		d, ok := o.Value.(*appsv1.Deployment)
		if !ok {
			continue
		}
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = int(*d.Spec.Replicas)
		}
		for i := 0; i < replicas; i++ {
			for _, c := range helm.Containers([]helm.Object{o}) {
				name := fmt.Sprintf("%s-%s-%d", op, c.Name, i)
				procDir := filepath.Join(r.dir, "procs", name)
				must(t, os.MkdirAll(procDir, 0o700))
				args, env, metrics := r.command(op, c, procDir)
				if metrics == "" {
					t.Fatalf("%s %s: no --metrics: its readiness probe has nothing to ask", op, c.Owner)
				}
				p := &proc{t: t, name: name, op: op, ctr: c.Name, metrics: metrics, log: filepath.Join(r.logs, name+".log"), done: make(chan struct{})}
				p.cmd = exec.Command(r.bin, args...)
				p.cmd.Env, p.cmd.Dir = append(cleanEnv(), env...), procDir
				lf := r.logFile(name)
				p.cmd.Stdout, p.cmd.Stderr = lf, lf
				must(t, p.cmd.Start())
				go func() { p.err = p.cmd.Wait(); close(p.done) }()
				t.Cleanup(p.stop)
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no Deployment rendered", op)
	}
	return out
}

// waitReady polls the readiness probe's /readyz until it answers 200.
func (p *proc) waitReady(ctx context.Context, bound time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(bound)
	url := "http://" + p.metrics + "/readyz"
	cl := &http.Client{Timeout: 2 * time.Second}
	last := ""
	for {
		select {
		case <-p.done:
			p.t.Fatalf("%s exited before it was ready: %v\n%s", p.name, p.err, tail(p.log, 30))
		default:
		}
		resp, err := cl.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.t.Fatalf("%s: not ready within %v (its readinessProbe %s last said: %s)\n%s", p.name, bound, url, last, tail(p.log, 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (p *proc) checkRunning() {
	p.t.Helper()
	select {
	case <-p.done:
		p.t.Errorf("%s exited during the rehearsal: %v\n%s", p.name, p.err, tail(p.log, 30))
	default:
	}
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// waitDrained waits until relays a and b hold no message (none pending,
// none unacknowledged): everything the clients sent reached Kafka. It asks
// JetStream with the pipeline operator's NATS credential, as `crowdlog
// run` does.
func (r *rehearsal) waitDrained(ctx context.Context, url string) {
	t := r.t
	nk := r.opDir("pipeline-operator", "nats-nkey")
	nc, err := natsconn.ConnectAs(strings.Replace(url, "nats://", "tls://", 1), "rehearsal-drain", natsconn.Security{Role: natsauth.Operator,
		NKeyFile: filepath.Join(nk, natsauth.SeedFile(natsauth.Operator)), CAFile: r.ca, CertFile: r.clientCert, KeyFile: r.clientKey})
	must(t, err)
	defer nc.Close()
	deadline := time.Now().Add(drainWait)
	calm, last := 0, ""
	for {
		var parts []string
		empty := true
		for _, n := range []string{"a", "b"} {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			// relay n's stream lives in relay n's account; the operator
			// reaches it through its import (one account per role)
			js, err := natsconn.AccountJetStream(nc, natsauth.RelayRole(n), true)
			must(t, err)
			cons, err := js.Consumer(cctx, relays.Stream, relays.ConsumerName(n))
			var info *jetstream.ConsumerInfo
			if err == nil {
				info, err = cons.Info(cctx)
			}
			cancel()
			if err != nil {
				empty = false
				parts = append(parts, fmt.Sprintf("relay %s: %v", n, err))
				continue
			}
			if info.NumPending != 0 || info.NumAckPending != 0 {
				empty = false
			}
			parts = append(parts, fmt.Sprintf("relay %s: %d waiting, %d unacknowledged", n, info.NumPending, info.NumAckPending))
		}
		last = strings.Join(parts, "; ")
		if empty {
			if calm++; calm == 3 {
				return
			}
		} else {
			calm = 0
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("relays a and b did not drain within %v (JetStream consumers: %s)", drainWait, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// readRelease waits for the epoch's completed release in the analyst
// database and reads its items as the analyst, over TLS.
func (r *rehearsal) readRelease(ctx context.Context, addr, epoch string) map[string]truth.Row {
	t := r.t
	login, err := clickhouse.LoginConfig{User: "analyst", Password: r.analystPW, CAFile: r.ca}.Load()
	must(t, err)
	ctx = clickhouse.WithLogin(ctx, login)
	adb := release.AnalystDatabase(release.DefaultDatabase)
	conn, err := release.DialAs(ctx, addr, adb, "analyst", r.analystPW)
	must(t, err)
	defer conn.Close()
	where := fmt.Sprintf("app = '%s' AND epoch = '%s' AND policy = '%s' AND k = %d", app, epoch, policy, k)
	deadline := time.Now().Add(releaseWait)
	for {
		var n uint64
		err := conn.QueryRow(ctx, "SELECT count() FROM releases WHERE "+where).Scan(&n)
		if err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("no release of %s/%s/%s/k=%d in %s.releases within %v (the release stage writes it once every partition closed the epoch; last: %d rows, %v)",
				app, epoch, policy, k, adb, releaseWait, n, err)
		}
		time.Sleep(time.Second)
	}
	rows, err := conn.Query(ctx, "SELECT item, impressions, users FROM released_items FINAL WHERE "+where)
	must(t, err)
	defer rows.Close()
	got := map[string]truth.Row{}
	for rows.Next() {
		var item string
		var imp, us uint64
		must(t, rows.Scan(&item, &imp, &us))
		if _, dup := got[item]; dup {
			t.Fatalf("an item is released twice in %s.released_items", adb)
		}
		got[item] = truth.Row{Item: item, Impressions: int(imp), Users: int(us)}
	}
	must(t, rows.Err())
	return got
}

// checkLogs fails when a role's log holds a released item (a plaintext
// artifact): roles log counts, never artifacts. Items shorter than 8
// bytes are skipped (they match ordinary words of log lines).
func (r *rehearsal) checkLogs(want map[string]truth.Row) {
	entries, err := os.ReadDir(r.logs)
	must(r.t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(r.logs, e.Name()))
		must(r.t, err)
		n := 0
		for item := range want {
			if len(item) >= 8 && bytes.Contains(b, []byte(item)) {
				n++
			}
		}
		if n > 0 {
			r.t.Errorf("log %s holds %d released items in plaintext", e.Name(), n)
		}
	}
}

// checkAuthOn checks that the servers the roles just used refuse what
// lacks TLS or a credential: NATS without an NKey and without a client
// certificate, Kafka over TLS without SASL, ClickHouse's secure port
// without TLS. Each try is bounded.
func (r *rehearsal) checkAuthOn(ctx context.Context, natsURL, kafkaAddr, chSecure string) {
	t := r.t
	url := strings.Replace(natsURL, "nats://", "tls://", 1)
	seed := filepath.Join(r.opDir("client", "nats-nkey"), natsauth.SeedFile(natsauth.Client))
	for what, sec := range map[string]natsconn.Security{
		"without an NKey":              {CAFile: r.ca, CertFile: r.clientCert, KeyFile: r.clientKey},
		"without a client certificate": {Role: natsauth.Client, NKeyFile: seed, CAFile: r.ca},
	} {
		if nc, err := natsconn.ConnectAs(url, "rehearsal-refused", sec); err == nil {
			nc.Close()
			t.Errorf("NATS accepted a connection %s", what)
		}
	}
	r.checkNoStreamAdmin(ctx, url)
	a, err := kafka.AuthConfig{CAFile: r.ca}.Load()
	must(t, err)
	kctx, cancel := context.WithTimeout(kafka.WithAuth(ctx, a), 10*time.Second)
	defer cancel()
	if _, err := kafka.Partitions(kctx, kafkaAddr, protocol.ReportsTopic); err == nil {
		t.Error("Kafka answered metadata over TLS without SASL")
	}
	cctx, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	if _, err := release.Probe(cctx, chSecure); err == nil {
		t.Error("ClickHouse's secure port answered a client without TLS")
	}
}

// checkTokens checks that tokens were on end to end, from the roles'
// metrics and logs: the aggregator accepted report tokens
// (crowdlog_aggregator_tokens_spent_total > 0) and dropped no report for
// its token or ARC presentation, neither it nor the randomness service
// logged that tokens are not checked, and both operators' issuers issued
// (crowdlog_issuer_issued_total > 0) and refused nothing.
func (r *rehearsal) checkTokens(procs []*proc) {
	t := r.t
	sums := map[string]float64{} // "operator/container/sample" -> sum over the replicas
	for _, p := range procs {
		for name, v := range scrape(t, p.metrics) {
			sums[p.op+"/"+p.ctr+"/"+name] += v
		}
		b, err := os.ReadFile(p.log)
		must(t, err)
		for _, warn := range []string{"not checked", "tokens not required"} {
			if bytes.Contains(b, []byte(warn)) {
				t.Errorf("%s logged %q: tokens are not checked there", p.name, warn)
			}
		}
	}
	if n := sums["aggregator/aggregate/crowdlog_aggregator_tokens_spent_total"]; n <= 0 {
		t.Errorf("the aggregator accepted %v report tokens: its token checks are off", n)
	} else {
		t.Logf("the aggregator accepted %v report tokens for %v reports", n, sums["aggregator/aggregate/crowdlog_aggregator_reports_total"])
	}
	for k, v := range sums {
		for _, reason := range []string{"no-token", "bad-token", "spent-token", "token-key", "bad-presentation", "arc-key", "unit-mismatch"} {
			if strings.HasSuffix(k, `crowdlog_aggregator_dropped_total{reason="`+reason+`"}`) && v > 0 {
				t.Errorf("the aggregator dropped %v reports as %s", v, reason)
			}
		}
		if strings.Contains(k, "crowdlog_issuer_refused_total") && v > 0 {
			t.Errorf("%s = %v: an issuer refused an enrolled client", k, v)
		}
		if strings.Contains(k, "crowdlog_randomness_token_refused_total") && v > 0 {
			t.Errorf("%s = %v: the randomness service refused a client's tokens", k, v)
		}
	}
	for _, op := range []string{"aggregator", "randomness"} {
		if n := sums[op+"/issuer/crowdlog_issuer_issued_total"]; n <= 0 {
			t.Errorf("the %s operator's issuer issued %v tokens", op, n)
		}
	}
}

// scrape reads the Prometheus text exposition of the role listening on
// addr: each sample's name with its labels → value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// checkNoStreamAdmin: the streams exist (the pipeline operator's streams
// Job created them with the admin credential) and no role's own
// credential may change one: relay b's attempt to RePublish the relay
// stream onto its inbox, and the aggregator operator's issuer's to change
// its counters bucket, are refused.
func (r *rehearsal) checkNoStreamAdmin(ctx context.Context, url string) {
	t := r.t
	for _, c := range []struct {
		op     string
		role   natsauth.Role
		stream string
	}{
		{"relay-b", natsauth.RelayB, protocol.RelayStream},
		{"aggregator", natsauth.Issuer, "KV_" + protocol.IssuerCountersBucket},
	} {
		sec := natsconn.Security{Role: c.role, NKeyFile: filepath.Join(r.opDir(c.op, "nats-nkey"), natsauth.SeedFile(c.role)),
			CAFile: r.ca, CertFile: r.clientCert, KeyFile: r.clientKey}
		nc, err := natsconn.ConnectAs(url, "rehearsal-stream-admin", sec)
		must(t, err)
		js, err := jetstream.New(nc)
		must(t, err)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := js.Stream(sctx, c.stream)
		if err != nil {
			t.Errorf("%s: stream %s not found (did the streams Job run?): %v", c.role, c.stream, err)
		} else {
			cfg := st.CachedInfo().Config
			cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: natsauth.InboxPrefix(c.role) + ".copy.>"}
			uctx, ucancel := context.WithTimeout(sctx, time.Second)
			if _, err := js.UpdateStream(uctx, cfg); err == nil {
				t.Errorf("%s updated stream %s (RePublish to its inbox): a runtime role holds a stream-admin right", c.role, c.stream)
			}
			ucancel()
		}
		cancel()
		nc.Close()
	}
}
