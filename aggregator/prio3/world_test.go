package prio3

import (
	"bufio"
	"compress/gzip"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

const (
	bundledLog  = "../../testdata/aol-top1000.tsv.gz"
	keywordList = "../../ingest/keywords/google-10000-english.txt"
	campaign    = "kw-prio3"
)

// world is a leader, a helper and a collector in one process, each with its
// own HPKE key, sharing a verify key; route delivers messages between them.
type world struct {
	l          *Leader
	h          *Helper
	c          *p3.Collector
	v          *p3.VDAF
	lk, hk, ck *onion.KeyPair
	cfgL, cfgH Config
}

func newWorld(t testing.TB, m p3.Config, minBatch uint64) *world {
	t.Helper()
	w := &world{}
	var err error
	for i, k := range []**onion.KeyPair{&w.lk, &w.hk, &w.ck} {
		if *k, err = onion.GenerateKeyPair(byte(i + 1)); err != nil {
			t.Fatal(err)
		}
	}
	var vk [32]byte
	copy(vk[:], "a verify key of thirty-two bytes")
	base := Config{Campaign: campaign, Measurement: m, KeyEpoch: 1, VerifyKeys: map[uint32][32]byte{1: vk},
		Grace: time.Hour, MinBatchSize: minBatch, Collector: w.ck.PublicKey()}
	w.cfgL, w.cfgH = base, base
	w.cfgL.Keys = []*onion.KeyPair{w.lk}
	w.cfgH.Keys = []*onion.KeyPair{w.hk}
	if w.l, err = NewLeader(w.cfgL); err != nil {
		t.Fatal(err)
	}
	if w.h, err = NewHelper(w.cfgH); err != nil {
		t.Fatal(err)
	}
	if w.v, err = p3.New(campaign, m); err != nil {
		t.Fatal(err)
	}
	w.c = &p3.Collector{Campaign: campaign, Measurement: m, Key: w.ck, MinBatchSize: minBatch}
	return w
}

// route delivers outs (and everything they cause) and returns what reached
// the collector and the first error a role returned.
func (w *world) route(now time.Time, outs []Output) ([][]byte, error) {
	var toCollector [][]byte
	var first error
	for len(outs) > 0 {
		o := outs[0]
		outs = outs[1:]
		var more []Output
		var err error
		switch {
		case o.To == ToCollector:
			toCollector = append(toCollector, o.Msg)
		case o.To == ToHelper && o.Msg[1] == 1:
			more, err = w.h.Apply(Event{Now: now, Kind: EventAggregateReq, Msg: o.Msg})
		case o.To == ToHelper && o.Msg[1] == 3:
			more, err = w.h.Apply(Event{Now: now, Kind: EventCollectReq, Msg: o.Msg})
		case o.To == ToLeader && o.Msg[1] == 2:
			more, err = w.l.Apply(Event{Now: now, Kind: EventAggregateResp, Msg: o.Msg})
		case o.To == ToLeader && o.Msg[1] == 4:
			more, err = w.l.Apply(Event{Now: now, Kind: EventAggShare, Msg: o.Msg})
		}
		if err != nil && first == nil {
			first = err
		}
		outs = append(outs, more...)
	}
	return toCollector, first
}

// upload delivers uploads to the leader at now and ticks.
func (w *world) upload(t testing.TB, now time.Time, uploads [][]byte) {
	t.Helper()
	for _, u := range uploads {
		if _, err := w.l.Apply(Event{Now: now, Kind: EventUpload, Msg: u}); err != nil {
			t.Fatal(err)
		}
	}
	outs, err := w.l.Apply(Event{Now: now, Kind: EventTick})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.route(now, outs); err != nil {
		t.Fatal(err)
	}
}

// collect runs collection of day after its close and unshards.
func (w *world) collect(day p3.Day) (*p3.Result, error) {
	now := day.Start().Add(24*time.Hour + 2*time.Hour)
	outs, err := w.l.Apply(Event{Now: now, Kind: EventCollect, Day: day})
	if err != nil {
		return nil, err
	}
	got, err := w.route(now, outs)
	if err != nil {
		return nil, err
	}
	if len(got) != 2 {
		return nil, ErrRefused
	}
	return w.c.Unshard(got[0], got[1])
}

// shardAll shards every client's counts in parallel.
func (w *world) shardAll(t testing.TB, day p3.Day, clients [][]uint64) [][]byte {
	t.Helper()
	out := make([][]byte, len(clients))
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		v, err := p3.New(campaign, w.v.Config)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], _, _, errs[i] = v.Shard(campaign, day, clients[i], w.lk.PublicKey(), w.hk.PublicKey())
			}
		}()
	}
	for i := range clients {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// clientDays reads the raw log: for the first maxUsers users, per UTC day
// of the first days days, per user, the count of query instances
// containing each of the first length keywords of the list (a token counted
// once per instance) — the same reading as tests/truth.KeywordDaily,
// without clipping; keyword index = position in the list.
func clientDays(t testing.TB, maxUsers, days, length int) (dayList []string, counts map[string][][]uint64, words []string) {
	t.Helper()
	kf, err := os.Open(keywordList)
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	index := map[string]int{}
	sc := bufio.NewScanner(kf)
	for sc.Scan() && len(words) < length {
		w := strings.ToLower(strings.TrimSpace(sc.Text()))
		if _, dup := index[w]; w != "" && !dup {
			index[w] = len(words)
			words = append(words, w)
		}
	}
	f, err := os.Open(bundledLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	type run struct{ user, q, day string }
	var users []string
	last := map[string]string{} // user → last non-empty normalized query
	perUser := map[string]map[string][]uint64{}
	ls := bufio.NewScanner(gz)
	ls.Buffer(make([]byte, 1<<20), 1<<20)
	for ls.Scan() {
		fl := strings.Split(ls.Text(), "\t")
		if len(fl) < 3 || fl[0] == "AnonID" {
			continue
		}
		u := fl[0]
		if _, ok := perUser[u]; !ok {
			if len(users) == maxUsers {
				break
			}
			users = append(users, u)
			perUser[u] = map[string][]uint64{}
		}
		q := strings.Join(strings.Fields(strings.ToLower(norm.NFKC.String(fl[1]))), " ")
		if q == "" || q == "-" || q == last[u] {
			continue // empty, placeholder, or the same instance repeated
		}
		last[u] = q
		tm, err := time.Parse("2006-01-02 15:04:05", fl[2])
		if err != nil {
			t.Fatal(err)
		}
		day := tm.Format("2006-01-02")
		seen := map[int]bool{}
		for _, tok := range strings.Split(q, " ") {
			if i, ok := index[tok]; ok && !seen[i] {
				seen[i] = true
				if perUser[u][day] == nil {
					perUser[u][day] = make([]uint64, len(words))
				}
				perUser[u][day][i]++
			}
		}
	}
	all := map[string]bool{}
	for _, m := range perUser {
		for d := range m {
			all[d] = true
		}
	}
	for d := range all {
		dayList = append(dayList, d)
	}
	sort.Strings(dayList)
	if len(dayList) > days {
		dayList = dayList[:days]
	}
	counts = map[string][][]uint64{}
	for _, u := range users {
		for _, d := range dayList {
			if c := perUser[u][d]; c != nil {
				counts[d] = append(counts[d], c)
			}
		}
	}
	return dayList, counts, words
}

func dayOf(t testing.TB, s string) p3.Day {
	tm, err := time.Parse("2006-01-02", s)
	if err != nil {
		t.Fatal(err)
	}
	return p3.DayOf(tm)
}
