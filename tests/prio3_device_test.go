package tests

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/gobuild"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/release"
)

// TestPrio3Device: examples/prio3 (the Prio3 device, ingest/prio3 Device,
// through its public API only) built and run as a program against the
// real roles (startPrio3Devices; the device uses the client NKey). Four devices upload one day's searches
// (one of them twice: the second run sends nothing); the released
// keyword counts must equal the count of the arguments (per device and
// keyword, the searches containing the keyword, clipped to 2^bits − 1).
// Wrong-settings arms — another bit width, another keyword list, a key
// that is not the leader's — must fail at the device, before anything is
// sent, with an error naming the value and the Config field.
func TestPrio3Device(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := startPrio3Devices(t, ctx)
	words, day, public, logs, roleDir, device, enroll := p.words, p.day, p.public, p.logs, p.roleDir, p.device, p.enroll
	dir := p.dir
	runs := []struct {
		name    string
		queries []string
	}{
		{"d1", []string{"weather today", "weather tomorrow", "weather rome", "weather paris", "football news"}}, // weather 4, clipped to 3
		{"d2", []string{"news of the day", "recipe for bread", "made up query"}},
		{"d3", []string{"music", "movies and music", "weather"}},
		{"d4", nil},                       // active, nothing searched: an all-zero report
		{"d1", []string{"weather again"}}, // the rerun: nothing sent
	}
	// ground truth from the arguments: per device, searches containing
	// each keyword as a word, clipped to 2^bits − 1; a rerun adds nothing
	want := map[string]int64{}
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.name] {
			continue
		}
		seen[r.name] = true
		per := map[string]int64{}
		for _, q := range r.queries {
			for _, w := range words {
				if strings.Contains(" "+q+" ", " "+w+" ") {
					per[w]++
				}
			}
		}
		var sum int64
		for w, n := range per {
			want[w] += min(n, 1<<p3dBits-1)
			sum += min(n, 1<<p3dBits-1)
		}
		if sum > p3dL1 {
			t.Fatalf("device %s's day exceeds S = %d: the truth above does not bound it", r.name, p3dL1)
		}
	}
	// device d3 pins the leader's key to the fingerprint its operator
	// published (sha256sum of the file)
	realLeader, err := os.ReadFile(filepath.Join(public, keydir.Prio3LeaderKey+".pub"))
	must(t, err)
	fp := fmt.Sprintf("%s=%x", keydir.Prio3LeaderKey+".pub", sha256.Sum256(realLeader))
	uploads := 0
	for i, r := range runs {
		if i < 4 {
			enroll(r.name)
		}
		var extra []string
		if r.name == "d3" {
			extra = []string{"--fingerprint", fp}
		}
		out, err := device(r.name, extra, r.queries...)
		if err != nil {
			t.Fatalf("examples/prio3 %s: %v\n%s\n%s", r.name, err, out, logTails(logs, 10))
		}
		wantOut := "uploaded the report of " + day.String()
		if i == 4 {
			wantOut = "already uploaded for " + day.String()
		} else {
			uploads++
		}
		if !strings.Contains(out, wantOut) {
			t.Fatalf("examples/prio3 %s: %q, want %q", r.name, out, wantOut)
		}
	}

	// wrong settings: refused at the device, before anything is sent
	otherList := filepath.Join(dir, "other-keywords.txt")
	must(t, os.WriteFile(otherList, []byte("weather\nnews\nrecipe\nfootball\nmovies\njazz\n"), 0o644))
	wrongKeys := filepath.Join(dir, "wrong-keys")
	must(t, os.MkdirAll(wrongKeys, 0o755))
	for _, name := range []string{keydir.RelayAKey + ".pub", keydir.RelayBKey + ".pub", keydir.Prio3HelperKey + ".pub", keydir.Prio3LeaderSignKey + ".pub"} {
		copyFile(t, filepath.Join(public, name), filepath.Join(wrongKeys, name))
	}
	copyFile(t, filepath.Join(roleDir[keydir.RolePrio3Helper], keydir.Prio3HelperKey+".pub"), filepath.Join(wrongKeys, keydir.Prio3LeaderKey+".pub"))
	arms := []struct {
		name         string
		extra        []string
		value, field string
	}{
		{"bits", []string{"--bits", "3"}, "bits", "Config.Measurement.Bits"},
		{"l1", []string{"--l1", "15"}, "L1 bound S", "Config.Measurement.L1"},
		{"list", []string{"--keywords", otherList}, "keyword list hash", "Config.Keywords"},
		{"digest", []string{"--digest", strings.Repeat("00", 32)}, "campaign digest", "Config.Digest"},
		{"leader-key", []string{"--keys", wrongKeys}, "leader report key", "Config.KeysDir"},
	}
	for _, a := range arms {
		began := time.Now()
		out, err := device("wrong-"+a.name, a.extra, "weather today") // the later flag wins
		if err == nil {
			t.Fatalf("wrong %s: the device uploaded: %s", a.name, out)
		}
		if !strings.Contains(out, a.value) || !strings.Contains(out, a.field) {
			t.Fatalf("wrong %s: %q does not name %q and %q", a.name, out, a.value, a.field)
		}
		t.Logf("wrong %s: refused after %s: %s", a.name, time.Since(began).Round(time.Millisecond), strings.TrimSpace(out))
	}

	// a key that differs from the one pinned on the first run is refused,
	// unless its published fingerprint vouches for it; a key whose
	// fingerprint differs from the published one is refused outright
	if out, err := device("d2", []string{"--keys", wrongKeys}, "weather"); err == nil || !strings.Contains(out, "changed since this device pinned it") ||
		!strings.Contains(out, "Config.Fingerprints") {
		t.Fatalf("a substituted leader key over a pinned one: %v %q", err, out)
	}
	if out, err := device("wrong-fingerprint", []string{"--keys", wrongKeys, "--fingerprint", fp}, "weather"); err == nil ||
		!strings.Contains(out, "does not match its published fingerprint") {
		t.Fatalf("a leader key whose fingerprint differs from the published one: %v %q", err, out)
	}

	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", p.leaderMetrics)
	var prepared, rejected float64
	waitUntil(t, ctx, logs, fmt.Sprintf("the leader to prepare (or reject) all %d uploads", uploads), 2*time.Minute, func() bool {
		prepared, _ = scrape(metricsURL, "crowdlog_prio3_prepared_total")
		rejected, _ = scrape(metricsURL, "crowdlog_prio3_rejected_total")
		return prepared+rejected >= float64(uploads)
	})
	if rejected != 0 || prepared != float64(uploads) {
		t.Fatalf("the leader prepared %v and rejected %v of %d uploads\n%s", prepared, rejected, uploads, logTails(logs, 15))
	}
	p.setClock((day + 1).Time().Add(p3dGrace + time.Minute))
	w, err := release.Open(ctx, p.clickhouse, "crowdlog")
	must(t, err)
	defer w.Close()
	var rounds []release.PDDRound
	waitUntil(t, ctx, logs, "the day's release", 2*time.Minute, func() bool {
		rounds, err = w.ReadPDDRounds(ctx, p3dCampaign)
		return err == nil && len(rounds) >= 1
	})
	if rounds[0].Decrypted != uint32(uploads) {
		t.Fatalf("%d reports released, want %d", rounds[0].Decrypted, uploads)
	}
	rows, err := w.ReadKeywordDaily(ctx, p3dCampaign)
	must(t, err)
	got := map[string]int64{}
	for _, r := range rows {
		got[r.Keyword] = r.Count
	}
	for _, kw := range words {
		if got[kw] != want[kw] {
			t.Fatalf("keyword %q: released %d, the arguments give %d (all: released %v, want %v)", kw, got[kw], want[kw], got, want)
		}
	}
	t.Logf("%d devices, %d reports released; keyword counts %v equal the arguments' clipped counts", len(seen), rounds[0].Decrypted, got)
}

// The campaign of TestPrio3Device and TestAttackPrio3KeySubstitution:
// counts clipped to 2^bits − 1 = 3, L1 bound S, a day is released with at
// least minBatch reports.
const (
	p3dCampaign = "prio3-device"
	p3dBits     = 2
	p3dL1       = 20
	p3dMinBatch = 3
	p3dGrace    = time.Hour
)

// prio3Devices is a running Prio3 deployment for examples/prio3
// (startPrio3Devices).
type prio3Devices struct {
	dir, example, logs, public, listPath, kafka, clickhouse string
	words                                                   []string
	day                                                     keywords.Day
	roleDir                                                 map[string]string
	leaderMetrics                                           int
	run                                                     func(args ...string)
	setClock                                                func(time.Time)
	// device runs examples/prio3 as device name (its own state
	// directory) with the campaign's flags, extra flags and queries.
	device func(name string, extra []string, queries ...string) (string, error)
	// enroll creates device name's identity and enrolls it at the helper's
	// operator.
	enroll func(name string)
}

// startPrio3Devices builds crowdlog and examples/prio3 and starts the
// roles, each its own process — relays a and b, the leader and the helper
// (`crowdlog aggregate-prio3`), the helper operator's issuer of helper
// tokens and `crowdlog release-pdd --mode prio3` — on an embedded NATS
// server with the permission table on, kfake and ClickHouse. The clock of
// both aggregators is at noon of today (UTC); the public key files a
// device is given are in public.
func startPrio3Devices(t *testing.T, ctx context.Context) *prio3Devices {
	t.Helper()
	if _, err := clickhouse.ServerBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ClickHouse is required in CI: %v", err)
		}
		t.Skipf("no ClickHouse: %v", err)
	}
	if testing.Short() {
		t.Skip("multi-process run in -short mode")
	}
	dir := t.TempDir()
	bin := buildBinary(t)
	example := filepath.Join(dir, "prio3-example")
	if err := gobuild.Build(ctx, example, "../examples/prio3"); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(dir, "logs")
	must(t, os.MkdirAll(logs, 0o755))
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("crowdlog %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	natsKeys := filepath.Join(dir, "nats-keys")
	ns, err := natsserver.Options{Dir: filepath.Join(dir, "nats")}.StartAuth(ctx, natsKeys, nil)
	must(t, err)
	t.Cleanup(ns.Shutdown)
	nkey := func(r natsauth.Role) string { return natsconn.RoleSecurity(natsKeys, r).NKeyFile }
	kb, err := kafka.Config{Dir: filepath.Join(dir, "kafka"), Partitions: 1, SyncWrites: true}.Start(ctx)
	must(t, err)
	t.Cleanup(kb.Close)
	run("topics", "--partitions", "1", "--kafka", kb.Bootstrap())
	run("streams", "--nats", ns.URL, "--nats-nkey", nkey(natsauth.Admin))
	ch, err := clickhouse.Start(ctx, filepath.Join(dir, "clickhouse"))
	must(t, err)
	t.Cleanup(func() { ch.Stop() })
	writer := (&cluster{t: t, bin: bin}).writerArgs(ch.TCPAddr, ch.Dir)

	// each operator's keys; the public files a device is given
	relayKeys := filepath.Join(dir, "keys-relays")
	run("keys", "generate", "--keys", relayKeys)
	roleDir := map[string]string{}
	for _, role := range []string{keydir.RolePrio3Leader, keydir.RolePrio3Helper, keydir.RolePrio3Collector} {
		roleDir[role] = filepath.Join(dir, "keys-"+role)
		run("keys", "generate", "--role", role, "--keys", roleDir[role])
	}
	leaderBundle := filepath.Join(dir, "prio3-leader.public")
	run("keys", "export-public", "--keys", roleDir[keydir.RolePrio3Leader], "--out", leaderBundle)
	run("keys", "import-public", "--keys", roleDir[keydir.RolePrio3Helper], leaderBundle)
	leaderVerify := filepath.Join(roleDir[keydir.RolePrio3Leader], "prio3-verify.keys")
	run("keys", "prio3-verify", "--out", leaderVerify)
	helperVerify := filepath.Join(roleDir[keydir.RolePrio3Helper], "prio3-verify.keys")
	copyFile(t, leaderVerify, helperVerify)
	public := filepath.Join(dir, "public-keys")
	must(t, os.MkdirAll(public, 0o755))
	for _, f := range [][2]string{
		{relayKeys, keydir.RelayAKey + ".pub"}, {relayKeys, keydir.RelayBKey + ".pub"},
		{roleDir[keydir.RolePrio3Leader], keydir.Prio3LeaderKey + ".pub"}, {roleDir[keydir.RolePrio3Helper], keydir.Prio3HelperKey + ".pub"},
		{roleDir[keydir.RolePrio3Leader], keydir.Prio3LeaderSignKey + ".pub"},
	} {
		copyFile(t, filepath.Join(f[0], f[1]), filepath.Join(public, f[1]))
	}

	// the campaign: six made-up keywords
	words := []string{"weather", "news", "recipe", "football", "movies", "music"}
	listPath := filepath.Join(dir, "keywords.txt")
	must(t, os.WriteFile(listPath, []byte(strings.Join(words, "\n")+"\n"), 0o644))
	day := keywords.DayOf(time.Now().UTC())
	clock := filepath.Join(dir, "clock")
	setClock := func(at time.Time) { must(t, os.WriteFile(clock, []byte(at.Format(time.RFC3339)+"\n"), 0o644)) }
	setClock(day.Time().Add(12 * time.Hour))

	start := func(name string, args ...string) { startEnv(t, bin, filepath.Join(logs, name+".log"), nil, args...) }
	for _, name := range []string{"a", "b"} {
		start("relay-"+name, "relay", "--name", name, "--nats", ns.URL, "--nats-nkey", nkey(natsauth.RelayRole(name)),
			"--key", filepath.Join(relayKeys, "relay-"+name+".key"), "--kafka", kb.Bootstrap())
	}
	measurement := []string{"--campaign", p3dCampaign, "--keywords", listPath, "--kind", "sumvec", "--bits", strconv.Itoa(p3dBits),
		"--min-batch-size", strconv.Itoa(p3dMinBatch)}
	collectorPub := filepath.Join(roleDir[keydir.RolePrio3Collector], keydir.Prio3CollectorKey+".pub")
	leaderMetrics := freePort(t)
	aggregator := func(role, verify string, extra ...string) []string {
		custody := "prio3-" + role
		return append(append([]string{"aggregate-prio3", "--role", role, "--nats", ns.URL, "--nats-nkey", nkey(natsauth.Role(custody)),
			"--keys", roleDir[custody], "--collector-pub", collectorPub, "--verify-key", verify, "--kafka", kb.Bootstrap(),
			"--state-dir", filepath.Join(dir, "state-"+role), "--clock-file", clock, "--grace", p3dGrace.String(),
			"--l1", strconv.Itoa(p3dL1), "--epsilon", "0", "--exact-shares"}, measurement...), extra...)
	}
	start("helper", aggregator("helper", helperVerify)...)
	start("issuer-prio3-helper", "issuer", "--role", keydir.RolePrio3Helper, "--keys", roleDir[keydir.RolePrio3Helper],
		"--nats", ns.URL, "--nats-nkey", nkey(natsauth.Prio3Helper))
	start("issuer-prio3-leader", "issuer", "--role", keydir.RolePrio3Leader, "--keys", roleDir[keydir.RolePrio3Leader],
		"--nats", ns.URL, "--nats-nkey", nkey(natsauth.Prio3Leader))
	start("leader", aggregator("leader", leaderVerify, "--metrics", fmt.Sprintf("127.0.0.1:%d", leaderMetrics))...)
	start("release", append(append([]string{"release-pdd", "--mode", "prio3", "--clickhouse", ch.TCPAddr, "--kafka", kb.Bootstrap(),
		"--collector-key", filepath.Join(roleDir[keydir.RolePrio3Collector], keydir.Prio3CollectorKey)}, measurement...), writer...)...)

	states := filepath.Join(dir, "devices")
	device := func(name string, extra []string, queries ...string) (string, error) {
		args := append([]string{"--nats", ns.URL, "--nats-nkey", nkey(natsauth.Client), "--keys", public,
			"--state", filepath.Join(states, name), "--campaign", p3dCampaign, "--keywords", listPath,
			"--bits", strconv.Itoa(p3dBits), "--l1", strconv.Itoa(p3dL1), "--day", day.String(),
			// the campaign's terms: exact shares, a minimum batch of 3, the
			// exact status rule (--epsilon 0 makes the default ε_c 0)
			"--allow-exact-shares", "--min-batch-floor", strconv.Itoa(p3dMinBatch), "--allow-exact-status"}, extra...)
		out, err := exec.CommandContext(ctx, example, append(args, queries...)...).CombinedOutput()
		return string(out), err
	}
	// each device's identity, enrolled by both aggregators' operators
	enroll := func(name string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, example, "--state", filepath.Join(states, name), "--identity").Output()
		must(t, err)
		pub, err := keydir.LoadSigningPublic(strings.TrimSpace(string(out)))
		must(t, err)
		must(t, keydir.EnrollIdentity(roleDir[keydir.RolePrio3Helper], pub))
		must(t, keydir.EnrollIdentity(roleDir[keydir.RolePrio3Leader], pub))
	}
	waitUntil(t, ctx, logs, "the leader to announce its settings", time.Minute, func() bool {
		b, _ := os.ReadFile(filepath.Join(logs, "leader.log"))
		return strings.Contains(string(b), "announcing the campaign settings")
	})
	return &prio3Devices{dir: dir, example: example, logs: logs, public: public, listPath: listPath, kafka: kb.Bootstrap(), clickhouse: ch.TCPAddr,
		words: words, day: day, roleDir: roleDir, leaderMetrics: leaderMetrics, run: run, setClock: setClock, device: device, enroll: enroll}
}
