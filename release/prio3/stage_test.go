package prio3

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/clickhouse/chtest"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/pdd"
)

func TestMain(m *testing.M) { chtest.Main(m) }

// openTestWriter returns a Writer on a fresh database of the shared
// ClickHouse 18.16 server. A missing binary skips, unless CI=true.
func openTestWriter(t *testing.T) *release.Writer {
	t.Helper()
	srv := chtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := release.Open(ctx, srv.TCPAddr, fmt.Sprintf("t_%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// counting counts the writes that reach the Sink and fails the first fail
// of them (a ClickHouse outage the stage must retry through).
type counting struct {
	pdd.Sink
	fail   int32
	writes atomic.Int32
}

// WritePDDWithheld and WritePDDCampaign pass through (pdd.WithheldSink,
// pdd.CampaignSink).
func (c *counting) WritePDDWithheld(ctx context.Context, r release.PDDWithheld, at time.Time) error {
	return c.Sink.(pdd.WithheldSink).WritePDDWithheld(ctx, r, at)
}

func (c *counting) WritePDDCampaign(ctx context.Context, r release.PDDCampaign, at time.Time) error {
	return c.Sink.(pdd.CampaignSink).WritePDDCampaign(ctx, r, at)
}

func (c *counting) WritePDDRound(ctx context.Context, r release.PDDRound, at time.Time) error {
	if c.writes.Add(1) <= c.fail {
		return errors.New("injected ClickHouse outage")
	}
	return c.Sink.WritePDDRound(ctx, r, at)
}

// runStage runs st until n days were reported and settled holds (both
// bounded by one minute), then stops it.
func runStage(t *testing.T, st *Stage, n int, settled func() bool) []Released {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var got []Released
	enough := make(chan struct{})
	st.OnDay = func(r Released) {
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
		mu.Lock()
		t.Fatalf("only %d of %d days released within a minute", len(got), n)
	}
	for settled != nil && !settled() {
		select {
		case err := <-errc:
			t.Fatalf("stage stopped: %v", err)
		case <-ctx.Done():
			t.Fatalf("days released but the stage did not read the rest of the topic within a minute (dropped %v)", st.DroppedBy())
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

// TestStageIntoClickHouse: on the ClickHouse 18.16 server.
func TestStageIntoClickHouse(t *testing.T) { testStage(t, openTestWriter(t)) }

// testStage: a few clients per day, their uploads prepared and aggregated
// by the real leader and helper state machines, both aggregate shares of
// each day written to a kfake topic (with a re-emitted pair, a small
// batch, a malformed message and another campaign's share); the stage
// writes keyword_daily, whose rows equal the clients' clipped counts summed
// here, blacklisted keyword left out, confidence 1; a restarted stage
// writes nothing.
func testStage(t *testing.T, w *release.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	broker, err := kafka.Start(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	if err := kafka.EnsureTopics(ctx, broker.Addr, 3, protocol.Prio3SharesTopic); err != nil {
		t.Fatal(err)
	}
	const campaign, length, minBatch = "kw-prio3", 30, 3
	rng := rand.New(rand.NewPCG(21, 22))
	list := testList(t, length)
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: 4}
	ck := genKey(t, 7)
	days := []p3.Day{20000, 20001, 20002}
	clients := map[p3.Day][][]uint64{}
	var msgs []kafkago.Message
	msg := func(day p3.Day, v []byte) kafkago.Message {
		return kafkago.Message{Key: []byte(campaign + "/" + day.String()), Value: v}
	}
	for i, d := range days {
		clients[d] = randomClients(rng, 4+i, length)
		sh := aggregate(t, campaign, m, ck.PublicKey(), minBatch, d, clients[d])
		msgs = append(msgs, msg(d, sh[0]), msg(d, sh[1]))
		if i == 0 { // a leader that collected twice (a restart before its offsets were saved)
			msgs = append(msgs, msg(d, sh[0]), msg(d, sh[1]))
		}
	}
	small := p3.Day(20003) // two clients, collected by aggregators with minimum 1: never released
	sh := aggregate(t, campaign, m, ck.PublicKey(), 1, small, randomClients(rng, 2, length))
	other := aggregate(t, "another", m, ck.PublicKey(), 1, days[0], randomClients(rng, 3, length))
	msgs = append(msgs, msg(small, sh[0]), msg(small, sh[1]), msg(days[0], []byte("not a share")), msg(days[0], other[0]))
	dropped := len(msgs) - 2*len(days)
	// the leader's notice of a day under the minimum batch (twice: a
	// re-emit after a restart), and another campaign's: recorded once as
	// below_min_batch, the other campaign's ignored
	withheld := p3.Day(20004)
	notice, _ := (&p3.AggShare{Role: 0, Campaign: campaign, Day: withheld, Reason: p3.ReasonSmallBatch}).MarshalBinary()
	otherNotice, _ := (&p3.AggShare{Role: 0, Campaign: "another", Day: withheld + 1, Reason: p3.ReasonSmallBatch}).MarshalBinary()
	msgs = append(msgs, msg(withheld, notice), msg(withheld, notice), msg(withheld+1, otherNotice))
	dropped++
	kw := kafka.NewWriter(broker.Addr, protocol.Prio3SharesTopic)
	if err := kw.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	kw.Close()

	// the expected rows, from the clients' counts alone
	blacklisted := ""
	var want []release.KeywordDaily
	for _, d := range days {
		for i, c := range clipped(clients[d], length, 15) {
			if c == 0 {
				continue
			}
			if blacklisted == "" {
				blacklisted = list.Words[i] // the first keyword anybody counted
				continue
			}
			if list.Words[i] != blacklisted {
				want = append(want, release.KeywordDaily{Campaign: campaign, Day: d.Start(), Keyword: list.Words[i], Count: c, Confidence: 1})
			}
		}
	}
	sort.Slice(want, func(i, j int) bool {
		if !want[i].Day.Equal(want[j].Day) {
			return want[i].Day.Before(want[j].Day)
		}
		return want[i].Keyword < want[j].Keyword
	})
	if len(want) < 20 {
		t.Fatalf("only %d expected rows: the test's clients count too little", len(want))
	}

	sink := &counting{Sink: w, fail: 1}
	// the blacklist as an operator may type it: normalized like the list
	newStage := func(s pdd.Sink) *Stage {
		return &Stage{Brokers: []string{broker.Addr}, Writer: s, List: list, Blacklist: []string{" " + strings.ToUpper(blacklisted)},
			Collector: p3.Collector{Campaign: campaign, Measurement: m, Key: ck, MinBatchSize: minBatch}}
	}
	st := newStage(sink)
	got := runStage(t, st, len(days), func() bool { return st.Dropped.Load() >= int64(dropped) && st.Withheld.Load() >= 1 })
	for _, r := range got {
		if !r.Written {
			t.Fatalf("day %s not written by the first run", r.Batch.Day)
		}
	}
	by := st.DroppedBy()
	if sink.writes.Load() != int32(len(days))+1 || st.Days.Load() != int64(len(days)) || st.Dropped.Load() != int64(dropped) ||
		by[DropSmallBatch] != 2 || by[DropCampaign] != 2 || by[DropMalformed] != 1 || by[DropDuplicate]+by[DropLate] != 2 {
		t.Fatalf("writes %d (want %d, one failed), days %d, dropped %v (want %d)", sink.writes.Load(), len(days)+1, st.Days.Load(), by, dropped)
	}
	// the notice: one pdd_withheld row, and the campaign's mode
	if wh, err := w.ReadPDDWithheld(ctx, campaign); err != nil || len(wh) != 1 || !wh[0].Day.Equal(withheld.Start()) ||
		wh[0].Reason != release.WithheldMinBatch || st.Withheld.Load() != 1 {
		t.Fatalf("pdd_withheld %+v (%v), %d recorded; want %s below_min_batch once", wh, err, st.Withheld.Load(), withheld)
	}
	if cs, err := w.ReadPDDCampaigns(ctx, campaign); err != nil || len(cs) != 1 || cs[0].Mode != release.PDDModePrio3 || cs[0].K != minBatch {
		t.Fatalf("pdd_campaigns %+v, %v", cs, err)
	}
	checkMetrics(t, st, map[string]float64{"crowdlog_prio3_release_days_total": float64(len(days)),
		`crowdlog_prio3_release_dropped_total{reason="small_batch"}`: 2, `crowdlog_prio3_release_dropped_total{reason="malformed"}`: 1,
		`crowdlog_prio3_release_dropped_total{reason="mismatch"}`: 0, "crowdlog_prio3_release_skipped_total": 0})
	daily, err := w.ReadKeywordDaily(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(daily, want) {
		t.Fatalf("keyword_daily has %d rows, want %d equal rows\n got %v\nwant %v", len(daily), len(want), daily, want)
	}
	rounds, err := w.ReadPDDRounds(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	if len(rounds) != len(days) {
		t.Fatalf("%d pdd_rounds rows, want %d", len(rounds), len(days))
	}
	for i, r := range rounds {
		n := uint32(len(clients[days[i]]))
		if !r.Day.Equal(days[i].Start()) || r.Active != n || r.Grouped != n || r.Decrypted != n || r.Groups != 1 || r.Complete != 1 ||
			r.Recovered != 0 || r.Lost != 0 || r.Confidence != 1 || r.Epsilon != 0 || r.MaxCount != 15 {
			t.Fatalf("pdd_rounds row %+v, want day %s with %d clients in one complete group, confidence 1, max count 15", r, days[i], n)
		}
	}

	// A restarted stage re-reads the topic, finds every day written and
	// writes nothing.
	again := &counting{Sink: w}
	st2 := newStage(again)
	for _, r := range runStage(t, st2, len(days), func() bool { return st2.Dropped.Load() >= int64(dropped) }) {
		if r.Written || r.Row.Counts != nil {
			t.Fatalf("restart rewrote %s", r.Batch.Day)
		}
	}
	if again.writes.Load() != 0 || st2.Skipped.Load() != int64(len(days)) || st2.Days.Load() != 0 {
		t.Fatalf("restart: %d writes, skipped %d, written %d", again.writes.Load(), st2.Skipped.Load(), st2.Days.Load())
	}
	if daily, err := w.ReadKeywordDaily(ctx, campaign); err != nil || !reflect.DeepEqual(daily, want) {
		t.Fatalf("keyword_daily changed after the restart (%v)", err)
	}
	if rounds, err := w.ReadPDDRounds(ctx, campaign); err != nil || len(rounds) != len(days) {
		t.Fatalf("pdd_rounds has %d rows after the restart (%v)", len(rounds), err)
	}
}

// checkMetrics registers st's metrics on a fresh registry and compares the
// scraped values of want (name{label="value"} → value).
func checkMetrics(t *testing.T, st *Stage, want map[string]float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	st.Register(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("metric %s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

func TestStageConfig(t *testing.T) {
	list := testList(t, 4)
	ck := genKey(t, 1)
	good := p3.Collector{Campaign: "c", Measurement: p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 4}, Key: ck, MinBatchSize: 2}
	short := good
	short.Measurement.Length = 5
	noKey := good
	noKey.Key = nil
	for name, st := range map[string]*Stage{
		"no brokers":    {Writer: &counting{}, List: list, Collector: good},
		"no writer":     {Brokers: []string{"x"}, List: list, Collector: good},
		"no list":       {Brokers: []string{"x"}, Writer: &counting{}, Collector: good},
		"length ≠ list": {Brokers: []string{"x"}, Writer: &counting{}, List: list, Collector: short},
		"no key":        {Brokers: []string{"x"}, Writer: &counting{}, List: list, Collector: noKey},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := st.Run(ctx); err == nil {
			t.Errorf("%s: Run accepted the configuration", name)
		}
		cancel()
	}
}
