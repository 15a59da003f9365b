package pdd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
	"github.com/crowdlog/crowdlog/release"
)

// One ClickHouse server for the package's integration tests (the harness
// of release/writer_test.go).
var (
	srvOnce sync.Once
	srv     *clickhouse.Server
	srvErr  error
	srvDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		_ = srv.Stop()
	}
	if srvDir != "" {
		os.RemoveAll(srvDir)
	}
	os.Exit(code)
}

// openTestWriter returns a Writer on a fresh database of the shared server.
// A missing binary skips, unless CI=true, where it fails.
func openTestWriter(t *testing.T) *release.Writer {
	t.Helper()
	srvOnce.Do(func() {
		srvDir, srvErr = os.MkdirTemp("", "crowdlog-pdd-ch-")
		if srvErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		srv, srvErr = clickhouse.Start(ctx, srvDir)
	})
	if errors.Is(srvErr, clickhouse.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v", srvErr)
	}
	if srvErr != nil {
		t.Fatalf("start ClickHouse: %v", srvErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := release.Open(ctx, srv.TCPAddr, fmt.Sprintf("t_%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// flaky fails the first Fail calls of each method, then passes through.
type flaky struct {
	Sink
	fail          int32
	writes, reads atomic.Int32
}

func (f *flaky) WritePDDRound(ctx context.Context, r release.PDDRound, at time.Time) error {
	if f.writes.Add(1) <= f.fail {
		return errors.New("injected ClickHouse outage")
	}
	return f.Sink.WritePDDRound(ctx, r, at)
}

func (f *flaky) IsPDDReleased(ctx context.Context, campaign string, day time.Time) (bool, error) {
	if f.reads.Add(1) <= f.fail {
		return false, errors.New("injected ClickHouse outage")
	}
	return f.Sink.IsPDDReleased(ctx, campaign, day)
}

// synthCampaign returns the outcomes of rounds of a campaign (each
// re-emitted once, as after an aggregator crash) and the keyword_daily rows
// the rounds must produce, computed from the clients.
func synthCampaign(t *testing.T, rng *rand.Rand, list *keywords.List, campaign string, rounds []int32) ([]kafkago.Message, []release.KeywordDaily) {
	var msgs []kafkago.Message
	var want []release.KeywordDaily
	for _, round := range rounds {
		gs := synthRound(rng, list.Len(), []blind.Status{blind.StatusComplete, blind.StatusRecovered, blind.StatusLost, blind.StatusComplete})
		var grouped, decrypted uint32
		truth := make([]int64, list.Len())
		for _, g := range gs {
			grouped += uint32(len(g.members))
			if g.status == blind.StatusLost {
				continue
			}
			for _, c := range g.members {
				if c.submitted {
					decrypted++
					for i, v := range c.counts {
						truth[i] += int64(v)
					}
				}
			}
		}
		active := grouped + 3
		for _, g := range gs {
			b := outcome(t, list, campaign, round, g, uint32(len(gs)), active, grouped)
			m := kafkago.Message{Key: []byte(fmt.Sprintf("%s/%d/%d", campaign, round, g.id)), Value: b}
			msgs = append(msgs, m, m)
		}
		for i, c := range truth {
			if c != 0 {
				want = append(want, release.KeywordDaily{Campaign: campaign, Day: keywords.Day(round).Time(),
					Keyword: list.Words[i], Count: c, Confidence: float64(decrypted) / float64(active)})
			}
		}
	}
	sort.Slice(want, func(i, j int) bool {
		if !want[i].Day.Equal(want[j].Day) {
			return want[i].Day.Before(want[j].Day)
		}
		return want[i].Keyword < want[j].Keyword
	})
	return msgs, want
}

// runStage runs st until n rounds were reported and settled (when not nil)
// holds, then stops it. settled lets a test wait for messages that follow
// the last round in the topic (duplicates, mismatches) to be consumed too;
// both waits are bounded by one minute.
func runStage(t *testing.T, st *Stage, n int, settled func() bool) []Released {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var got []Released
	enough := make(chan struct{})
	st.OnRound = func(r Released) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
		if len(got) == n {
			close(enough)
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- st.Run(ctx) }()
	select {
	case <-enough:
	case err := <-errc:
		t.Fatalf("stage stopped: %v", err)
	case <-ctx.Done():
		t.Fatalf("only %d of %d rounds released", len(got), n)
	}
	for settled != nil && !settled() {
		select {
		case err := <-errc:
			t.Fatalf("stage stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("rounds released but the stage did not settle within a minute")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("stage: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return got
}

func TestStageReleasesExactCountsAndRestarts(t *testing.T) {
	w := openTestWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	broker, err := kafka.Start(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	if err := kafka.EnsureTopics(ctx, broker.Addr, 3, protocol.GroupSumsTopic); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	list := testList(t, 60)
	msgs, want := synthCampaign(t, rng, list, "flu", []int32{13210, 13211})
	other, _ := synthCampaign(t, rng, testList(t, 61), "other-list", []int32{13210}) // dropped: list mismatch
	msgs = append(msgs, other...)
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	kw := kafka.NewWriter(broker.Addr, protocol.GroupSumsTopic)
	if err := kw.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	kw.Close()

	sink := &flaky{Sink: w, fail: 1}
	st := &Stage{Brokers: []string{broker.Addr}, Writer: sink, List: list}
	accepted := 2 * 4 // two rounds of four groups
	got := runStage(t, st, 2, func() bool { return st.Dropped.Load() >= int64(len(msgs)-accepted) })
	for _, r := range got {
		if !r.Written || r.Row.Epsilon != 0 {
			t.Fatalf("round %s: written %v epsilon %v", r.Row.Day, r.Written, r.Row.Epsilon)
		}
	}
	if sink.writes.Load() != 3 || st.Rounds.Load() != 2 || st.Dropped.Load() != int64(len(msgs)-accepted) {
		t.Fatalf("writes %d (want 3, one failed), rounds %d, dropped %d (want %d duplicates and mismatches)",
			sink.writes.Load(), st.Rounds.Load(), st.Dropped.Load(), len(msgs)-accepted)
	}
	daily, err := w.ReadKeywordDaily(ctx, "flu")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(daily, want) {
		t.Fatalf("keyword_daily has %d rows, want %d equal rows\n got %v\nwant %v", len(daily), len(want), daily, want)
	}
	var buf bytes.Buffer
	if err := Export(ctx, w, "flu", &buf); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"); len(lines) != len(want)+1 ||
		lines[0] != "campaign\tday\tkeyword\tcount\tconfidence" ||
		lines[1] != fmt.Sprintf("flu\t%s\t%s\t%d\t%v", want[0].Day.Format("2006-01-02"), want[0].Keyword, want[0].Count, want[0].Confidence) {
		t.Fatalf("export: %d lines, first %q", len(lines), lines[:2])
	}

	// A restarted stage finds both days written and writes nothing.
	st2 := &Stage{Brokers: []string{broker.Addr}, Writer: w, List: list}
	for _, r := range runStage(t, st2, 2, nil) {
		if r.Written || r.Row.Counts != nil {
			t.Fatalf("restart rewrote %s", r.Row.Day)
		}
	}
	if st2.Skipped.Load() != 2 || st2.Rounds.Load() != 0 {
		t.Fatalf("restart: skipped %d written %d", st2.Skipped.Load(), st2.Rounds.Load())
	}
	if again, _ := w.ReadKeywordDaily(ctx, "flu"); !reflect.DeepEqual(again, want) {
		t.Fatal("keyword_daily changed after the restart")
	}

	// With noise, into a fresh database: every keyword of the list is noised
	// and the day records ε and the clip.
	wn := openTestWriter(t)
	st3 := &Stage{Brokers: []string{broker.Addr}, Writer: wn, List: list, Epsilon: 1, MaxCount: 2}
	for _, r := range runStage(t, st3, 2, nil) {
		if !r.Written || r.Row.Epsilon != 1 || r.Row.MaxCount != 2 {
			t.Fatalf("noisy round %+v", r.Row)
		}
	}
	rounds, err := wn.ReadPDDRounds(ctx, "flu")
	if err != nil || len(rounds) != 2 || rounds[0].Epsilon != 1 || rounds[0].MaxCount != 2 {
		t.Fatalf("noisy pdd_rounds %+v, %v", rounds, err)
	}
	noisy, _ := wn.ReadKeywordDaily(ctx, "flu")
	// Lap(2) rounded is 0 with probability 1 − e^{−1/4} ≈ 0.22, so about
	// 78% of the 2·60 (day, keyword) pairs have a row.
	if len(noisy) < 60 || len(noisy) > 118 {
		t.Fatalf("%d noisy rows for 120 (day, keyword) pairs", len(noisy))
	}
}

func TestStageConfig(t *testing.T) {
	for name, st := range map[string]*Stage{
		"no brokers":   {Writer: &flaky{}},
		"no writer":    {Brokers: []string{"x"}},
		"neg epsilon":  {Brokers: []string{"x"}, Writer: &flaky{}, Epsilon: -1},
		"neg maxcount": {Brokers: []string{"x"}, Writer: &flaky{}, MaxCount: -3},
	} {
		if err := st.Run(context.Background()); err == nil {
			t.Errorf("%s: Run accepted the configuration", name)
		}
	}
}
