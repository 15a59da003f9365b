package stage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/clickhouse/chtest"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
)

func TestMain(m *testing.M) { chtest.Main(m) }

// The child process of TestAttackNoiseRedraw is this test binary run with
// these variables set: it releases one DP epoch into database DB at ADDR
// and SIGKILLs itself at the CRASH step ("step:n", the n-th Hook call of
// that step; empty: no crash), after writing the candidate draw the stage
// handed to the writer to OUT (JSON of the items).
const (
	redrawAddr  = "CROWDLOG_REDRAW_ADDR"
	redrawDB    = "CROWDLOG_REDRAW_DB"
	redrawCrash = "CROWDLOG_REDRAW_CRASH"
	redrawOut   = "CROWDLOG_REDRAW_OUT"
)

// redrawArtifacts is the number of artifacts of the child's epoch; artifact
// i has 30 + i distinct users (one report each), all far above dp-u's
// release threshold, so every one is released with a noisy count.
const redrawArtifacts = 60

// redrawPolicy is the child's policy: dp-u at ε = ln 10, d = 1, U = 1,000
// (δ = 1/1001), as in CrowdLogging's experiments.
func redrawPolicy() (*policy.Policy, error) {
	return policy.New(policy.Params{Kind: policy.DPu, Epsilon: math.Log(10), D: 1, Users: 1000})
}

// candidateSink records the candidate draw the stage hands the writer,
// then writes as the writer does.
type candidateSink struct {
	*release.Writer
	out string
}

func (c candidateSink) WriteDrawnRelease(ctx context.Context, key release.Key, items []release.Item, undec []release.Undecrypted,
	at time.Time, spend release.Spend, budget release.Budget) ([]release.Item, []release.Undecrypted, error) {
	if c.out != "" {
		b, err := json.Marshal(sortedItems(items))
		if err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(c.out, b, 0o600); err != nil {
			return nil, nil, err
		}
	}
	return c.Writer.WriteDrawnRelease(ctx, key, items, undec, at, spend, budget)
}

func sortedItems(items []release.Item) []release.Item {
	out := append([]release.Item{}, items...)
	release.SortItems(out)
	return out
}

// TestNoiseRedrawChild is the release stage process of
// TestAttackNoiseRedraw; it does nothing unless run by it.
func TestNoiseRedrawChild(t *testing.T) {
	addr := os.Getenv(redrawAddr)
	if addr == "" {
		t.Skip("the child process of TestAttackNoiseRedraw")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := release.Open(ctx, addr, os.Getenv(redrawDB))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.BatchSize = 25 // three released_items batches
	if c := os.Getenv(redrawCrash); c != "" {
		step, n, _ := strings.Cut(c, ":")
		at, _ := strconv.Atoi(n)
		calls := map[string]int{}
		w.Hook = func(s string) error {
			calls[s]++
			if s == step && calls[s] == at {
				syscall.Kill(os.Getpid(), syscall.SIGKILL) // no deferred cleanup, no flush: a crash
				time.Sleep(time.Minute)
			}
			return nil
		}
	}
	pol, err := redrawPolicy()
	if err != nil {
		t.Fatal(err)
	}
	state := NewState()
	seal := pol.Sealing().String()
	for i := range redrawArtifacts {
		for u := range 30 + i {
			state.Apply(msg(t, protocol.Decrypted{Kind: protocol.KindItem, App: "query", Epoch: "e1", Policy: seal, K: pol.ShamirK,
				Tag: fmt.Sprintf("t%02d", i), Report: fmt.Sprintf("r%02d-%03d", i, u), Unit: fmt.Sprintf("u%03d", u),
				Item: fmt.Sprintf("made up artifact %02d", i), Variant: fmt.Sprintf("Made up artifact %02d", i)}))
		}
	}
	if _, _, done := state.Apply(msg(t, protocol.Decrypted{Kind: protocol.KindClosed, App: "query", Epoch: "e1", Partitions: 1})); !done {
		t.Fatal("epoch not complete")
	}
	st := &Stage{Sink: candidateSink{w, os.Getenv(redrawOut)}, Policy: pol, Dataset: "aol"}
	if err := st.ReleaseEpoch(ctx, state, "query", "e1"); err != nil {
		t.Fatal(err)
	}
}

// TestAttackNoiseRedraw: an analyst who sees two noise draws of one DP
// release averages them (about 2ε spent, ε recorded). A real release
// stage process (dp-u, 60 artifacts, 25 items a batch) is SIGKILLed at
// each point between two of its writes — after the stored draw, the
// ledger row, the clearing of partial rows, each released_items batch, the
// last write before the releases row and after it — then restarted; one
// run is killed twice (a batch, then the redo's clearing) and one is
// followed by a second stage. Each time the release must end with the
// first attempt's draw, byte for byte (items, variants, counts), and one
// ledger row. Control: the draw each restart made itself — what the code
// before the stored draw released — differs from the first in most counts.
func TestAttackNoiseRedraw(t *testing.T) {
	srv := chtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pol, err := redrawPolicy()
	if err != nil {
		t.Fatal(err)
	}
	key := release.Key{App: "query", Epoch: "e1", Policy: string(pol.Kind), K: pol.ShamirK}
	dir := t.TempDir()
	child := func(db, crash, out string) (killed bool) {
		t.Helper()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNoiseRedrawChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), redrawAddr+"="+srv.TCPAddr, redrawDB+"="+db, redrawCrash+"="+crash, redrawOut+"="+out)
		outb, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && crash != "" {
				return true
			}
		}
		if err != nil {
			t.Fatalf("release stage (crash %q): %v\n%s", crash, err, outb)
		}
		if crash != "" {
			t.Fatalf("release stage did not reach crash point %s", crash)
		}
		return false
	}
	readJSON := func(path string) []release.Item {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var items []release.Item
		if err := json.Unmarshal(b, &items); err != nil {
			t.Fatal(err)
		}
		return items
	}
	type run struct {
		name    string
		crashes []string
		second  bool // a second release stage after the release completed
	}
	runs := []run{
		{"draw", []string{"draw:1"}, false},
		{"ledger", []string{"ledger:1"}, false},
		{"cleared", []string{"cleared:1"}, false},
		{"batch-1", []string{"items-batch:1"}, false},
		{"batch-2", []string{"items-batch:2"}, false},
		{"batch-3", []string{"items-batch:3"}, false},
		{"before-releases-row", []string{"before-releases-row:1"}, false},
		{"releases-row", []string{"releases-row:1"}, true},
		{"batch-2+redo-cleared", []string{"items-batch:2", "cleared:1"}, false},
	}
	var differ, compared, points, held int
	for i, r := range runs {
		db := fmt.Sprintf("redraw_%d_%d", time.Now().UnixNano(), i)
		w, err := release.Open(ctx, srv.TCPAddr, db)
		if err != nil {
			t.Fatal(err)
		}
		first := filepath.Join(dir, fmt.Sprintf("%d-first.json", i))
		for j, crash := range r.crashes {
			out := first
			if j > 0 {
				out = filepath.Join(dir, fmt.Sprintf("%d-crash-%d.json", i, j))
			}
			if !child(db, crash, out) {
				t.Fatalf("%s: not killed at %s", r.name, crash)
			}
			points++
		}
		restart := filepath.Join(dir, fmt.Sprintf("%d-restart.json", i))
		child(db, "", restart)
		if r.second {
			child(db, "", filepath.Join(dir, fmt.Sprintf("%d-second.json", i)))
		}

		want := readJSON(first)
		got, err := w.ReleasedItems(ctx, key.App, key.Epoch, key.Policy, key.K)
		if err != nil {
			t.Fatal(err)
		}
		wb, _ := json.Marshal(sortedItems(want))
		gb, _ := json.Marshal(sortedItems(got))
		ok := true
		if len(want) != redrawArtifacts || string(wb) != string(gb) {
			t.Errorf("%s: released %d items that differ from the first attempt's draw of %d", r.name, len(got), len(want))
			ok = false
		}
		ledger, err := w.Ledger(ctx, "aol", "e1")
		if err != nil {
			t.Fatal(err)
		}
		if len(ledger) != 1 {
			t.Errorf("%s: %d ledger rows, want 1", r.name, len(ledger))
			ok = false
		}
		if done, _ := w.IsReleased(ctx, key); !done {
			t.Errorf("%s: release not complete after the restart", r.name)
			ok = false
		}
		if ok {
			held++
		}
		// control: the restart's own fresh draw, which the code before
		// the stored draw would have released
		if fresh, err := os.ReadFile(restart); err == nil {
			var items []release.Item
			if err := json.Unmarshal(fresh, &items); err != nil {
				t.Fatal(err)
			}
			byItem := map[string]release.Item{}
			for _, it := range want {
				byItem[it.Item] = it
			}
			for _, it := range items {
				compared++
				if o := byItem[it.Item]; o.Impressions != it.Impressions || o.Users != it.Users {
					differ++
				}
			}
		}
		w.Close()
	}
	fmt.Printf("ATTACK noise-redraw: a dp-u release stage SIGKILLed at %d points between its writes (%d runs) and restarted released the first attempt's draw, byte for byte with 1 ledger row, in %d of %d runs; the restarts' own fresh draws (the code before: noise drawn again) differed in %d of %d counts\n",
		points, len(runs), held, len(runs), differ, compared)
	if compared == 0 || differ*2 < compared {
		t.Fatalf("control: fresh draws differed in only %d of %d counts: the test cannot tell two draws apart", differ, compared)
	}
}
