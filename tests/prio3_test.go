package tests

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	ingestprio3 "github.com/crowdlog/crowdlog/ingest/prio3"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
	"github.com/crowdlog/crowdlog/relays"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// prio3Client is one user of the log as a Prio3-mode client.
type prio3Client struct {
	id     string
	active map[keywords.Day]bool
	c      *ingestprio3.Client
}

// TestPrio3EndToEnd: the bundled log's 1,000 users over its first 7 days,
// one batch per day, through separate
// processes — relays a and b, the leader and the helper aggregator
// (`crowdlog aggregate-prio3`, each with its own key directory, NATS NKey
// and copy of the verify key, both on a --clock-file the test moves), and
// `crowdlog release-pdd --mode prio3` writing to ClickHouse — with kfake
// (SASL SCRAM-SHA-512 and ACLs on: relays, leader and release stage each
// their own Kafka user) and an embedded NATS server whose permission table
// is on (each role its own NKey). The test plays
// the clients (ingest/prio3, L = the embedded list's first 1,000
// keywords, counts clipped to 15, each client's day bounded by the default
// L1 bound S = 20): every client active on a day uploads once, except
// that on the last day every tenth is left out. Both aggregators are told
// --epsilon 0 --exact-shares (exact shares must be asked for by name).
//
// It checks every (day, keyword) count in keyword_daily against the raw
// log's counts clipped and L1-bounded per client and day, computed by
// tests/truth
// (absent rows and zero counts alike), confidence 1 everywhere, and each
// day's report count (pdd_rounds) against the clients active that day in
// the raw log, less the left-out ones: a dropped client costs only its own
// counts.
func TestPrio3EndToEnd(t *testing.T) {
	if _, err := clickhouse.ServerBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ClickHouse is required in CI: %v", err)
		}
		t.Skipf("no ClickHouse: %v", err)
	}
	if testing.Short() {
		t.Skip("multi-process run in -short mode (and so in the race run)")
	}
	const users, days, length = 1000, 7, 1000
	const campaign, bits, partitions = "prio3-e2e", 4, 2
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := buildBinary(t)
	logs := filepath.Join(dir, "logs")
	must(t, os.MkdirAll(logs, 0o755))
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("crowdlog %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	// NATS with the permission table on: each role its own NKey
	natsKeys := filepath.Join(dir, "nats-keys")
	ns, err := natsserver.Options{Dir: filepath.Join(dir, "nats")}.StartAuth(ctx, natsKeys, nil)
	must(t, err)
	t.Cleanup(ns.Shutdown)
	nkey := func(r natsauth.Role) string { return natsconn.RoleSecurity(natsKeys, r).NKeyFile }
	// kfake with SASL and ACLs on: each Kafka role its own user
	secrets := filepath.Join(dir, "secrets")
	must(t, os.MkdirAll(secrets, 0o700))
	kcred := map[string]kafka.Credential{}
	kafkaEnv := map[string][]string{}
	var kusers []kafka.User
	for user, role := range map[string]kafka.Role{"admin": "", "relay-a": kafka.RoleRelay, "relay-b": kafka.RoleRelay,
		"prio3-leader": kafka.RolePrio3Leader, "release": kafka.RoleRelease} {
		c := kafka.Credential{Mechanism: kafka.MechanismSCRAMSHA512, User: user, Password: "pw-" + rand.Text()}
		kcred[user] = c
		pw := filepath.Join(secrets, "kafka-"+user)
		must(t, os.WriteFile(pw, []byte(c.Password), 0o600))
		kafkaEnv[user] = []string{"CROWDLOG_KAFKA_SASL_PASSWORD_FILE=" + pw}
		if user != "admin" {
			kusers = append(kusers, kafka.User{Role: role, Credential: c})
		}
	}
	admin := kcred["admin"]
	kb, err := kafka.Config{Dir: filepath.Join(dir, "kafka"), Partitions: partitions, SyncWrites: true,
		Admin: &admin, Users: kusers, ACLs: true}.Start(ctx)
	must(t, err)
	t.Cleanup(kb.Close)
	kafkaArgs := func(user string) []string {
		return []string{"--kafka", kb.Bootstrap(), "--kafka-sasl-mechanism", kafka.MechanismSCRAMSHA512, "--kafka-sasl-user", user}
	}
	runEnv(ctx, t, bin, kafkaEnv["admin"], append([]string{"topics", "--partitions", strconv.Itoa(partitions)}, kafkaArgs("admin")...)...)
	run("streams", "--nats", ns.URL, "--nats-nkey", nkey(natsauth.Admin))
	ch, err := clickhouse.Start(ctx, filepath.Join(dir, "clickhouse"))
	must(t, err)
	t.Cleanup(func() { ch.Stop() })
	c := &cluster{t: t, bin: bin}
	writer := c.writerArgs(ch.TCPAddr, ch.Dir)

	// each operator's key directory: the relays', the leader's, the
	// helper's, the collector's; the verify key, one copy per aggregator
	relayKeys := filepath.Join(dir, "keys-relays")
	run("keys", "generate", "--keys", relayKeys)
	roleDir := map[string]string{}
	for _, role := range []string{keydir.RolePrio3Leader, keydir.RolePrio3Helper, keydir.RolePrio3Collector} {
		roleDir[role] = filepath.Join(dir, "keys-"+role)
		run("keys", "generate", "--role", role, "--keys", roleDir[role])
	}
	// the helper verifies every request with the leader's public signing
	// key, from the leader operator's public bundle
	leaderBundle := filepath.Join(dir, "prio3-leader.public")
	run("keys", "export-public", "--keys", roleDir[keydir.RolePrio3Leader], "--out", leaderBundle)
	run("keys", "import-public", "--keys", roleDir[keydir.RolePrio3Helper], leaderBundle)
	leaderVerify := filepath.Join(roleDir[keydir.RolePrio3Leader], "prio3-verify.keys")
	run("keys", "prio3-verify", "--out", leaderVerify)
	helperVerify := filepath.Join(roleDir[keydir.RolePrio3Helper], "prio3-verify.keys")
	copyFile(t, leaderVerify, helperVerify)

	// the campaign: the first `length` keywords of the embedded list
	listPath := filepath.Join(dir, "keywords.txt")
	words := keywords.Default().Words[:length]
	must(t, os.WriteFile(listPath, []byte(strings.Join(words, "\n")+"\n"), 0o644))
	list, err := keywords.Load(listPath)
	must(t, err)
	m := p3.Config{Kind: p3.KindSumVec, Length: list.Len(), Bits: bits, L1: p3.DefaultL1}

	// the clients, from the log
	input := subset(t, users)
	var clients []*prio3Client
	first := keywords.Day(1 << 30)
	_, err = aol.ReadUsers(input, func(u aol.User) error {
		pc := &prio3Client{id: u.AnonID, active: map[keywords.Day]bool{},
			c: &ingestprio3.Client{Campaign: campaign, List: list, Counts: list.Counts(u.Records, nil), Config: m}}
		for _, r := range u.Records {
			d := keywords.DayOf(r.QueryTime)
			pc.active[d] = true
			first = min(first, d)
		}
		clients = append(clients, pc)
		return nil
	})
	must(t, err)
	last := first + keywords.Day(days) - 1
	open, closed, grace := runner.ReplayTimes(first, last)
	clock := filepath.Join(dir, "clock")
	setClock := func(at time.Time) { must(t, os.WriteFile(clock, []byte(at.Format(time.RFC3339)+"\n"), 0o644)) }
	setClock(open)

	// the roles, each its own process
	start := func(name string, env []string, args ...string) {
		startEnv(t, bin, filepath.Join(logs, name+".log"), env, args...)
	}
	for _, name := range []string{"a", "b"} {
		start("relay-"+name, kafkaEnv["relay-"+name], append([]string{"relay", "--name", name, "--nats", ns.URL, "--nats-nkey", nkey(natsauth.RelayRole(name)),
			"--key", filepath.Join(relayKeys, "relay-"+name+".key")}, kafkaArgs("relay-"+name)...)...)
	}
	measurement := []string{"--campaign", campaign, "--keywords", listPath, "--kind", "sumvec", "--bits", strconv.Itoa(bits), "--min-batch-size", "10"}
	collectorPub := filepath.Join(roleDir[keydir.RolePrio3Collector], keydir.Prio3CollectorKey+".pub")
	aggregator := func(role, verify string, extra ...string) []string {
		custody := "prio3-" + role
		return append(append([]string{"aggregate-prio3", "--role", role, "--nats", ns.URL, "--nats-nkey", nkey(natsauth.Role(custody)),
			"--keys", roleDir[custody], "--collector-pub", collectorPub, "--verify-key", verify,
			"--state-dir", filepath.Join(dir, "state-"+role), "--clock-file", clock, "--grace", grace.String(),
			"--epsilon", "0", "--exact-shares"}, measurement...), extra...)
	}
	start("helper", nil, aggregator("helper", helperVerify)...)
	// the helper's operator's issuer of helper tokens, on the helper's keys
	// directory (its token seed), with every client's identity enrolled
	ids := map[*prio3Client]ed25519.PrivateKey{}
	var pubs []ed25519.PublicKey
	for _, pc := range clients {
		pk, sk, err := ed25519.GenerateKey(nil)
		must(t, err)
		ids[pc], pubs = sk, append(pubs, pk)
	}
	must(t, keydir.EnrollIdentities(roleDir[keydir.RolePrio3Helper], pubs))
	start("issuer-prio3-helper", nil, "issuer", "--role", keydir.RolePrio3Helper, "--keys", roleDir[keydir.RolePrio3Helper],
		"--nats", ns.URL, "--nats-nkey", nkey(natsauth.Prio3Helper))
	// and the leader's operator's issuer of leader tokens, likewise
	must(t, keydir.EnrollIdentities(roleDir[keydir.RolePrio3Leader], pubs))
	start("issuer-prio3-leader", nil, "issuer", "--role", keydir.RolePrio3Leader, "--keys", roleDir[keydir.RolePrio3Leader],
		"--nats", ns.URL, "--nats-nkey", nkey(natsauth.Prio3Leader))
	leaderMetrics := freePort(t)
	start("leader", kafkaEnv["prio3-leader"], aggregator("leader", leaderVerify, append(kafkaArgs("prio3-leader"),
		"--metrics", fmt.Sprintf("127.0.0.1:%d", leaderMetrics))...)...)
	start("release", kafkaEnv["release"], append(append(append([]string{"release-pdd", "--mode", "prio3", "--clickhouse", ch.TCPAddr,
		"--collector-key", filepath.Join(roleDir[keydir.RolePrio3Collector], keydir.Prio3CollectorKey)}, measurement...), writer...),
		kafkaArgs("release")...)...)

	// the clients' side: the client NKey, relay a's subject, the operators'
	// public keys as a client pins them
	cnc, err := natsconn.ConnectAs(ns.URL, "prio3-e2e-clients", natsconn.RoleSecurity(natsKeys, natsauth.Client))
	must(t, err)
	t.Cleanup(cnc.Close)
	cjs, err := jetstream.New(cnc)
	must(t, err)
	onc, err := natsconn.ConnectAs(ns.URL, "prio3-e2e-operator", natsconn.RoleSecurity(natsKeys, natsauth.Operator))
	must(t, err)
	t.Cleanup(onc.Close)
	// the operator reaches each relay's stream through its account's
	// imports (one account per role)
	ojs := func(name string) jetstream.JetStream {
		js, err := natsconn.AccountJetStream(onc, natsauth.RelayRole(name), true)
		must(t, err)
		return js
	}
	a, b, _, err := keydir.LoadRoute(relayKeys)
	must(t, err)
	lk, err := onion.LoadPublicKey(filepath.Join(roleDir[keydir.RolePrio3Leader], keydir.Prio3LeaderKey+".pub"))
	must(t, err)
	hk, err := onion.LoadPublicKey(filepath.Join(roleDir[keydir.RolePrio3Helper], keydir.Prio3HelperKey+".pub"))
	must(t, err)
	pub := &publish.Publisher{JS: cjs, Subject: protocol.RelaySubject("a")}
	defer pub.Close(context.Background())
	tr := &ingestprio3.Transport{Route: ingest.Route{RelayA: a, RelayB: b, SubjectB: protocol.RelaySubject("b")},
		Leader: lk, Helper: hk, Publish: pub.Publish}
	// each client fetches its day's helper token with its own identity
	for _, pc := range clients {
		tc := &tokenclient.Client{NC: cnc, Identity: ids[pc]}
		pc.c.HelperToken = func(ctx context.Context, campaign string, day p3.Day, nonce [32]byte) ([]byte, error) {
			return tc.Prio3HelperToken(ctx, campaign, uint32(day), nonce)
		}
		pc.c.LeaderToken = func(ctx context.Context, campaign string, day p3.Day, nonce [32]byte) ([]byte, error) {
			return tc.Prio3LeaderToken(ctx, campaign, uint32(day), nonce)
		}
	}
	for _, subject := range []string{protocol.IssuerPrio3HelperPublicKeySubject, protocol.IssuerPrio3LeaderPublicKeySubject} {
		waitUntil(t, ctx, logs, "the aggregator operators' issuers to answer", time.Minute, func() bool {
			b, _ := (&token.KeysRequest{Epoch: token.Prio3Epoch(campaign, uint32(first))}).MarshalBinary()
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := cnc.RequestWithContext(rctx, subject, b)
			return err == nil
		})
	}

	// upload day by day; on the last day every tenth active client is
	// left out
	dropped := map[string]map[string]bool{}
	sent := map[string]int{}
	var uploads atomic.Int64
	for d := first; d <= last; d++ {
		var online []*prio3Client
		for i, pc := range clients {
			if !pc.active[d] {
				continue
			}
			if d == last && i%10 == 0 {
				if dropped[d.String()] == nil {
					dropped[d.String()] = map[string]bool{}
				}
				dropped[d.String()][pc.id] = true
				continue
			}
			online = append(online, pc)
		}
		g, gctx := errgroup.WithContext(ctx)
		work := make(chan *prio3Client)
		for range 4 {
			g.Go(func() error {
				v, err := p3.New(campaign, m)
				if err != nil {
					return err
				}
				for pc := range work {
					if _, err := pc.c.Upload(gctx, tr, v, d); err != nil {
						return fmt.Errorf("client %s, %s: %w", pc.id, d, err)
					}
					uploads.Add(1)
				}
				return nil
			})
		}
		g.Go(func() error {
			defer close(work)
			for _, pc := range online {
				select {
				case work <- pc:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			return nil
		})
		must(t, g.Wait())
		must(t, pub.Flush(ctx))
		sent[d.String()] = len(online)
	}
	sentAt := time.Since(began)
	waitUntil(t, ctx, logs, "the relays to drain", 2*time.Minute, func() bool {
		ok, err := relays.DrainedEach(ctx, ojs, "a", "b")
		return err == nil && ok
	})
	// every upload prepared at both before the clock closes the batches
	want := uploads.Load()
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", leaderMetrics)
	var prepared, rejected float64
	waitUntil(t, ctx, logs, fmt.Sprintf("the leader to prepare (or reject) all %d uploads", want), 4*time.Minute, func() bool {
		prepared, _ = scrape(metricsURL, "crowdlog_prio3_prepared_total")
		rejected, _ = scrape(metricsURL, "crowdlog_prio3_rejected_total")
		return prepared+rejected >= float64(want)
	})
	if rejected != 0 || prepared != float64(want) {
		t.Fatalf("the leader prepared %v and rejected %v of %d uploads\n%s", prepared, rejected, want, logTails(logs, 15))
	}
	uploadedAt := time.Since(began)
	setClock(closed)

	w, err := release.Open(ctx, ch.TCPAddr, "crowdlog")
	must(t, err)
	defer w.Close()
	var rounds []release.PDDRound
	waitUntil(t, ctx, logs, fmt.Sprintf("the release of %d days", days), 3*time.Minute, func() bool {
		rounds, err = w.ReadPDDRounds(ctx, campaign)
		return err == nil && len(rounds) >= days
	})
	rows, err := w.ReadKeywordDaily(ctx, campaign)
	must(t, err)

	// ground truth from the raw log
	dc, err := truth.KeywordClients(input, users, listPath, last.String(), nil)
	must(t, err)
	wantCounts := dc.ClippedL1(1<<bits-1, p3.DefaultL1, words, func(day, user string) bool { return dropped[day][user] })
	got := map[string]map[string]int64{}
	for _, r := range rows {
		day := r.Day.Format("2006-01-02")
		if r.Confidence != 1 {
			t.Fatalf("%s: confidence %v, want 1", day, r.Confidence)
		}
		if got[day] == nil {
			got[day] = map[string]int64{}
		}
		if _, dup := got[day][r.Keyword]; dup {
			t.Fatalf("%s: a keyword released twice", day)
		}
		got[day][r.Keyword] = r.Count
	}
	nonzero, clippedCells := 0, 0
	for day, users := range dc.Counts {
		for user, kw := range users {
			for _, n := range kw {
				if n > 1<<bits-1 && !dropped[day][user] {
					clippedCells++
				}
			}
		}
	}
	for d := first; d <= last; d++ {
		day := d.String()
		if len(got[day]) == 0 {
			t.Fatalf("%s: no keyword_daily rows", day)
		}
		for i, kw := range words {
			if int64(wantCounts[day][kw]) != got[day][kw] {
				t.Fatalf("%s keyword #%d: released %d, raw log clipped %d", day, i, got[day][kw], wantCounts[day][kw])
			}
			if wantCounts[day][kw] != 0 {
				nonzero++
			}
		}
		for kw := range got[day] {
			if list.Index(kw) < 0 {
				t.Fatalf("%s: a keyword outside the campaign's list released", day)
			}
		}
	}
	perDay := map[string]uint32{}
	for _, r := range rounds {
		day := r.Day.Format("2006-01-02")
		perDay[day] = r.Decrypted
		active := len(dc.Active[day]) - len(dropped[day])
		if int(r.Decrypted) != active || int(r.Active) != active || sent[day] != active {
			t.Fatalf("%s: %d reports released (active %d), %d sent; the raw log has %d clients active, %d left out",
				day, r.Decrypted, r.Active, sent[day], len(dc.Active[day]), len(dropped[day]))
		}
		if r.Confidence != 1 {
			t.Fatalf("%s: round confidence %v", day, r.Confidence)
		}
	}
	t.Logf("%d users, %d days, L = %d, b = %d: %d reports (per day %v; %d left out on the last day), %d non-zero (day, keyword) counts equal the raw log's clipped counts, %d clipped cells; uploads sent after %s, prepared after %s, released after %s",
		users, days, length, bits, want, perDay, len(dropped[last.String()]), nonzero, clippedCells,
		sentAt.Round(time.Second), uploadedAt.Round(time.Second), time.Since(began).Round(time.Second))
}

// startEnv runs one role as a process with env added to the test's
// environment (a role's secret files), logging to logPath; it is stopped
// at test cleanup.
func startEnv(t *testing.T, bin, logPath string, env []string, args ...string) {
	t.Helper()
	p := &proc{t: t, bin: bin, args: args}
	var err error
	if p.log, err = os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(syscall.SIGTERM); p.log.Close() })
}

// runEnv runs one crowdlog command to its end with env added, failing the
// test with its output when it fails.
func runEnv(ctx context.Context, t *testing.T, bin string, env []string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("crowdlog %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// waitUntil polls cond every 200 ms for at most bound (and ctx); on
// timeout it fails the test naming what it waited for, with the tail of
// every role's log.
func waitUntil(t *testing.T, ctx context.Context, logs, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("waited %s for %s\n%s", bound, what, logTails(logs, 15))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// logTails returns the last n lines of every log in dir.
func logTails(dir string, n int) string {
	var sb strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		fmt.Fprintf(&sb, "--- %s\n%s\n", filepath.Base(f), strings.Join(lines[max(0, len(lines)-n):], "\n"))
	}
	return sb.String()
}

// scrape returns the sum of the samples of metric at a Prometheus text
// endpoint (every label set), or an error when it cannot be read.
func scrape(url, metric string) (float64, error) {
	cl := &http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		rest := line[len(metric):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	must(t, err)
	must(t, os.WriteFile(dst, b, 0o600))
}
