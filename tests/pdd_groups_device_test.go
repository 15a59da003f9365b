package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/gobuild"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/release"
)

// TestPDDGroupsDevice: examples/pdd-groups (the groups-mode client,
// ingest/pdd through its public API: Dial, Register, Open, Ping, a state
// file) built and run as a program against the roles started as the
// README starts them, each its own process — relays a and b, `crowdlog
// coordinator` (its day moved by `crowdlog coordinator advance`, signed
// with the operator's key), `crowdlog aggregate-vectors` and `crowdlog
// release-pdd` — on an embedded NATS server with the permission table on
// (the device uses the client NKey), kfake and ClickHouse. Four devices
// are active on day D and form one group on day D+1; they submit their
// blinded vectors, answer the unmasking request, and the released
// keyword counts of D must equal the count of the arguments (per keyword,
// the searches containing it as a word, summed over the devices). A
// device of another campaign or with another keyword list fails at
// registration, before it sends anything, with an error naming the value.
func TestPDDGroupsDevice(t *testing.T) {
	if _, err := clickhouse.ServerBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ClickHouse is required in CI: %v", err)
		}
		t.Skipf("no ClickHouse: %v", err)
	}
	if testing.Short() {
		t.Skip("multi-process run in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := buildBinary(t)
	example := filepath.Join(dir, "pdd-groups-example")
	if err := gobuild.Build(ctx, example, "../examples/pdd-groups"); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(dir, "logs")
	must(t, os.MkdirAll(logs, 0o755))
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("crowdlog %s: %v\n%s\n%s", strings.Join(args, " "), err, out, logTails(logs, 10))
		}
		return string(out)
	}
	natsKeys := filepath.Join(dir, "nats-keys")
	ns, err := natsserver.Options{Dir: filepath.Join(dir, "nats")}.StartAuth(ctx, natsKeys, nil)
	must(t, err)
	t.Cleanup(ns.Shutdown)
	nkey := func(r natsauth.Role) string { return natsconn.RoleSecurity(natsKeys, r).NKeyFile }
	kb, err := kafka.Config{Dir: filepath.Join(dir, "kafka"), Partitions: 1, SyncWrites: true}.Start(ctx)
	must(t, err)
	t.Cleanup(kb.Close)
	run("topics", "--partitions", "1", "--kafka", kb.Bootstrap()) // vectors and group-sums too
	run("streams", "--nats", ns.URL, "--nats-nkey", nkey(natsauth.Admin))
	ch, err := clickhouse.Start(ctx, filepath.Join(dir, "clickhouse"))
	must(t, err)
	t.Cleanup(func() { ch.Stop() })
	writer := (&cluster{t: t, bin: bin}).writerArgs(ch.TCPAddr, ch.Dir)

	// single host: one keys directory (README, "Running each role")
	keys := filepath.Join(dir, "keys")
	run("keys", "generate", "--keys", keys)
	key := func(name string) string { return filepath.Join(keys, name) }
	public := filepath.Join(dir, "public-keys") // what a device is given
	must(t, os.MkdirAll(public, 0o755))
	for _, f := range []string{"relay-a.key.pub", "relay-b.key.pub", "aggregator.key.pub", "coordinator-sign.key.pub"} {
		copyFile(t, key(f), filepath.Join(public, f))
	}
	words := []string{"weather", "news", "recipe", "football", "movies", "music"}
	listPath := filepath.Join(dir, "keywords.txt")
	must(t, os.WriteFile(listPath, []byte(strings.Join(words, "\n")+"\n"), 0o644))
	const campaign = "groups-device"

	start := func(name string, args ...string) { startEnv(t, bin, filepath.Join(logs, name+".log"), nil, args...) }
	for _, name := range []string{"a", "b"} {
		start("relay-"+name, "relay", "--name", name, "--key", key("relay-"+name+".key"), "--nats", ns.URL,
			"--nats-nkey", nkey(natsauth.RelayRole(name)), "--kafka", kb.Bootstrap())
	}
	start("coordinator", "coordinator", "--campaign", campaign, "--keywords", listPath, "--group-size", "3", "--delay", "1",
		"--aggregator-key", key("aggregator-sign.key.pub"), "--sign-key", key("coordinator-sign.key"),
		"--operator-key", key("operator-sign.key.pub"), "--nats", ns.URL, "--nats-nkey", nkey(natsauth.Coordinator), "--kafka", kb.Bootstrap())
	start("aggregate-vectors", "aggregate-vectors", "--key", key("aggregator.key"), "--sign-key", key("aggregator-sign.key"),
		"--coordinator-pub", key("coordinator-sign.key.pub"), "--nats", ns.URL, "--nats-nkey", nkey(natsauth.Aggregator), "--kafka", kb.Bootstrap())
	start("release-pdd", append([]string{"release-pdd", "--kafka", kb.Bootstrap(), "--clickhouse", ch.TCPAddr, "--keywords", listPath}, writer...)...)
	waitUntil(t, ctx, logs, "the coordinator to serve", time.Minute, func() bool {
		b, _ := os.ReadFile(filepath.Join(logs, "coordinator.log"))
		return strings.Contains(string(b), "coordinator: serving")
	})
	day := keywords.DayOf(time.Now().UTC())
	advance := func(d keywords.Day) string {
		return run("coordinator", "advance", "--day", d.String(), "--key", key("operator-sign.key"), "--nats", ns.URL, "--nats-nkey", nkey(natsauth.Operator))
	}
	states := filepath.Join(dir, "devices")
	device := func(name string, extra []string, queries ...string) (string, error) {
		args := append([]string{"--nats", ns.URL, "--nats-nkey", nkey(natsauth.Client), "--keys", public,
			"--state", filepath.Join(states, name), "--campaign", campaign, "--keywords", listPath, "--day", day.String()}, extra...)
		out, err := exec.CommandContext(ctx, example, append(args, queries...)...).CombinedOutput()
		return string(out), err
	}
	devices := map[string][]string{
		"d1": {"weather today", "weather rome", "football news"},
		"d2": {"news of the day", "recipe for bread", "made up query"},
		"d3": {"music", "movies and music", "weather"},
		"d4": nil, // active, nothing searched: an all-zero vector
	}
	// ground truth from the arguments: per keyword, the searches that
	// contain it as a word (the searches are distinct and lower case)
	want := map[string]int64{}
	for _, qs := range devices {
		for _, q := range qs {
			for _, w := range words {
				if strings.Contains(" "+q+" ", " "+w+" ") {
					want[w]++
				}
			}
		}
	}
	pingAll := func(what string) (submitted, answered int) {
		t.Helper()
		for name, qs := range devices {
			out, err := device(name, nil, qs...)
			if err != nil {
				t.Fatalf("examples/pdd-groups %s (%s): %v\n%s\n%s", name, what, err, out, logTails(logs, 10))
			}
			var s, a, n int
			if i := strings.Index(out, "pinged: "); i >= 0 {
				_, _ = fmtSscanf(out[i:], &s, &a, &n)
			}
			submitted, answered = submitted+s, answered+a
		}
		return submitted, answered
	}

	t.Logf("day %s: %s", day, strings.TrimSpace(advance(day)))
	pingAll("registration, active on D")
	rep := advance(day + 1)
	if !strings.Contains(rep, "1 groups from 4 active clients") {
		t.Fatalf("advance to D+1: %q, want one group of the 4 devices", rep)
	}
	if s, _ := pingAll("submission"); s != len(devices) {
		t.Fatalf("%d vectors submitted, want %d", s, len(devices))
	}

	// wrong settings: refused at registration, before anything is sent
	otherList := filepath.Join(dir, "other-keywords.txt")
	must(t, os.WriteFile(otherList, []byte(strings.Join(append(words[:5:5], "jazz"), "\n")+"\n"), 0o644))
	for _, a := range []struct {
		name  string
		extra []string
		value string
	}{
		{"campaign", []string{"--campaign", "other"}, `campaign "other", the coordinator runs "` + campaign + `"`},
		{"list", []string{"--keywords", otherList}, "L=6"},
	} {
		began := time.Now()
		out, err := device("wrong-"+a.name, a.extra, "weather today")
		if err == nil || !strings.Contains(out, a.value) {
			t.Fatalf("wrong %s: %v %q, want a refusal naming %q", a.name, err, out, a.value)
		}
		t.Logf("wrong %s: refused after %s: %s", a.name, time.Since(began).Round(time.Millisecond), strings.TrimSpace(out))
	}

	// the unmasking request reaches the devices once the aggregator has
	// all four vectors; they answer on their next contact
	w, err := release.Open(ctx, ch.TCPAddr, "crowdlog")
	must(t, err)
	defer w.Close()
	var rounds []release.PDDRound
	answered := 0
	waitUntil(t, ctx, logs, "the group's release", 3*time.Minute, func() bool {
		_, a := pingAll("answers")
		answered += a
		rounds, err = w.ReadPDDRounds(ctx, campaign)
		return err == nil && len(rounds) >= 1
	})
	if rounds[0].Decrypted != uint32(len(devices)) || rounds[0].Complete != 1 {
		t.Fatalf("round %+v: want one complete group of %d", rounds[0], len(devices))
	}
	rows, err := w.ReadKeywordDaily(ctx, campaign)
	must(t, err)
	got := map[string]int64{}
	for _, r := range rows {
		if keywords.DayOf(r.Day) != day {
			t.Fatalf("a count released for %s, want only %s", r.Day.Format(time.DateOnly), day)
		}
		got[r.Keyword] = r.Count
	}
	for _, kw := range words {
		if got[kw] != want[kw] {
			t.Fatalf("keyword %q: released %d, the arguments give %d (all: released %v, want %v)", kw, got[kw], want[kw], got, want)
		}
	}
	t.Logf("%d devices, %d answers, one group released: keyword counts %v equal the arguments' counts", len(devices), answered, got)
}

// fmtSscanf reads the counts of examples/pdd-groups' "pinged: S rounds
// submitted, A unmasking requests answered (N searches …" line.
func fmtSscanf(line string, s, a, n *int) (int, error) {
	return fmt.Sscanf(line, "pinged: %d rounds submitted, %d unmasking requests answered (%d", s, a, n)
}
