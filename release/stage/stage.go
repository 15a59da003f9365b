// Package stage is the release stage loop: it reads the aggregator's
// "decrypted" topic, drops duplicates of at-least-once delivery, and when
// every reports partition has closed an epoch it builds that epoch's
// histogram — exact counts for the threshold policies FT_a and FT_u
// (CrowdLogging §3.2.1–3.2.2), or noisy counts under a configured
// differentially private policy (release/policy: DP_a, DP_u, ZEALOUS) whose
// spend is recorded in the privacy ledger — and writes it to ClickHouse.
package stage

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/metrics"
	"github.com/crowdlog/crowdlog/infra/retry"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
)

// Sink receives a finished release (satisfied by *release.Writer).
type Sink interface {
	WriteRelease(ctx context.Context, items []release.Item, undec []release.Undecrypted, releasedAt time.Time) error
}

type epochKey struct{ app, epoch string }

type itemKey struct {
	policy   string
	k        int
	pipeline string // digest of the pipeline definition (hex; "" none)
	item     string
}

type itemAcc struct {
	reports  map[string]struct{}
	units    map[string]int // reports per pseudonymous unit id
	variants map[string]int
}

type summaryKey struct {
	partition int
	policy    string
	k         int
	pipeline  string
}

type epochAcc struct {
	items   map[itemKey]*itemAcc
	summary map[summaryKey]protocol.Decrypted // latest summary per partition, policy and k
	closed  map[int]bool
	parts   int
	written bool
}

// State is the release stage's accumulation over the decrypted topic.
type State struct {
	epochs     map[epochKey]*epochAcc
	Duplicates int64 // item messages dropped as already seen (same tag and report id)
	Malformed  int64 // undecodable messages, counted and dropped
}

// NewState returns an empty State.
func NewState() *State { return &State{epochs: map[epochKey]*epochAcc{}} }

func (s *State) epoch(app, epoch string) *epochAcc {
	k := epochKey{app, epoch}
	e := s.epochs[k]
	if e == nil {
		e = &epochAcc{items: map[itemKey]*itemAcc{}, summary: map[summaryKey]protocol.Decrypted{}, closed: map[int]bool{}}
		s.epochs[k] = e
	}
	return e
}

// Apply adds one decrypted-topic message. It returns (app, epoch, true) when
// this message completed an epoch (every partition closed it) that was not
// released yet.
func (s *State) Apply(b []byte) (string, string, bool) {
	d, err := protocol.ParseDecrypted(b)
	if err != nil {
		s.Malformed++
		return "", "", false
	}
	e := s.epoch(d.App, d.Epoch)
	switch d.Kind {
	case protocol.KindItem:
		k := itemKey{d.Policy, d.K, d.Pipeline, d.Item}
		a := e.items[k]
		if a == nil {
			a = &itemAcc{reports: map[string]struct{}{}, units: map[string]int{}, variants: map[string]int{}}
			e.items[k] = a
		}
		id := d.Tag + "/" + d.Report
		if _, dup := a.reports[id]; dup {
			s.Duplicates++
			return "", "", false
		}
		a.reports[id] = struct{}{}
		a.units[d.Unit]++
		a.variants[d.Variant]++
	case protocol.KindSummary:
		// keyed by partition: a summary re-emitted after an aggregator
		// restart replaces, never adds to, the first
		e.summary[summaryKey{d.Partition, d.Policy, d.K, d.Pipeline}] = *d
	case protocol.KindClosed:
		e.closed[d.Partition] = true
		e.parts = d.Partitions
		if !e.written && e.parts > 0 && len(e.closed) >= e.parts {
			e.written = true
			return d.App, d.Epoch, true
		}
	}
	return "", "", false
}

// Release returns the histogram of a completed epoch: per (policy, k, item)
// impressions = distinct reports, users = distinct unit ids, variant = the
// most frequent original form (ties: the smallest); and the undecrypted
// summary. Counts are exact; ReleasePolicy applies a DP policy.
func (s *State) Release(app, epoch string) ([]release.Item, []release.Undecrypted) {
	return s.release(app, epoch, 0, true, nil)
}

// release is Release with each unit's reports capped at unitCap (> 0),
// of the items and summary lines whose (policy, k, pipeline) keep accepts
// (nil: all). Items of one (policy, k, item) sealed for several pipeline
// digests are summed: their tags, hence their report ids and unit ids,
// differ. Without variants every Variant is "": the reports' original
// forms are not read at all (a DP release, ReleasePolicy).
func (s *State) release(app, epoch string, unitCap int, variants bool, keep func(policy string, k int, pipeline string) bool) ([]release.Item, []release.Undecrypted) {
	e := s.epochs[epochKey{app, epoch}]
	if e == nil {
		return nil, nil
	}
	type rowKey struct {
		policy string
		k      int
		item   string
	}
	type row struct {
		impressions, users uint64
		variants           map[string]int
	}
	rows := make(map[rowKey]*row, len(e.items))
	for k, a := range e.items {
		if keep != nil && !keep(k.policy, k.k, k.pipeline) {
			continue
		}
		impressions := uint64(len(a.reports))
		if unitCap > 0 {
			impressions = 0
			for _, n := range a.units {
				impressions += uint64(min(n, unitCap))
			}
		}
		rk := rowKey{k.policy, k.k, k.item}
		r := rows[rk]
		if r == nil {
			r = &row{variants: map[string]int{}}
			rows[rk] = r
		}
		r.impressions += impressions
		r.users += uint64(len(a.units))
		if !variants {
			continue
		}
		for v, n := range a.variants {
			r.variants[v] += n
		}
	}
	items := make([]release.Item, 0, len(rows))
	for k, r := range rows {
		best, bestN := "", -1
		for v, n := range r.variants {
			if n > bestN || (n == bestN && v < best) {
				best, bestN = v, n
			}
		}
		items = append(items, release.Item{App: app, Epoch: epoch, Policy: k.policy, K: k.k, Item: k.item,
			Variant: best, Impressions: r.impressions, Users: r.users})
	}
	release.SortItems(items)
	merged := map[release.Undecrypted]uint64{}
	for _, d := range e.summary {
		if keep != nil && !keep(d.Policy, d.K, d.Pipeline) {
			continue
		}
		for _, r := range d.Summary {
			u := release.Undecrypted{App: app, Epoch: epoch, Policy: d.Policy, K: d.K, Reports: r.Reports, Users: r.Shares}
			merged[u] += r.Tags
		}
	}
	undec := make([]release.Undecrypted, 0, len(merged))
	for u, tags := range merged {
		u.Tags = tags
		undec = append(undec, u)
	}
	sort.Slice(undec, func(i, j int) bool { return undec[i].Reports > undec[j].Reports })
	return items, undec
}

// ReleasePolicy returns the release of a completed epoch under pol, the
// pipeline's policy, and pipeline, the digest of its definition (hex, as
// protocol.Decrypted carries it; "" = sealed without one): only items and
// summary lines sealed for pol (pol.Sealing() and k = pol.ShamirK) and for
// that digest are released. Under an FT pol their
// counts are exact. Under a DP pol each item goes through pol.Decide (DP_a
// counts capped at d reports per unit id, so several devices of one user
// count at most d), items it rejects are dropped, and the survivors and
// summary lines are relabelled (Policy = pol.Kind, K = pol.ShamirK); their
// Variant is "" (no original form: it would be chosen exactly from the
// reports, docs/policies.md); the returned spend is true. Items of any other (policy, k) or digest — a
// pipeline this stage was not given — are never released (Foreign counts them): an exact
// release of items sealed for a DP pipeline, or noise under parameters the
// clients did not use, would break its promise. A nil pol (library use
// without a pipeline) releases every (policy, k) of the epoch exactly, as
// Release does.
func (s *State) ReleasePolicy(app, epoch string, pol *policy.Policy, pipeline string) ([]release.Item, []release.Undecrypted, bool, error) {
	if pol == nil {
		items, undec := s.Release(app, epoch)
		return items, undec, false, nil
	}
	seal := pol.Sealing().String()
	matches := func(p string, k int, d string) bool { return p == seal && k == pol.ShamirK && d == pipeline }
	if !pol.Kind.IsDP() {
		items, undec := s.release(app, epoch, 0, true, matches)
		return items, undec, false, nil
	}
	// no variant: the most frequent original form is an exact function of
	// the reports, outside the mechanism's (ε, δ) (one added user flips a
	// tie); a DP row is the normalized item and its noisy counts only
	capped, undec := s.release(app, epoch, pol.PerUnitCap(), false, matches) // another pipeline's items: never released here
	out := make([]release.Item, 0, len(capped))
	for _, it := range capped {
		o, err := pol.Decide(it.Impressions, it.Users)
		if err != nil {
			return nil, nil, false, err
		}
		if !o.Released {
			continue
		}
		it.Policy, it.K, it.Impressions, it.Users = string(pol.Kind), pol.ShamirK, o.Impressions, o.Users
		out = append(out, it)
	}
	for i := range undec {
		undec[i].Policy = string(pol.Kind)
	}
	release.SortItems(out)
	return out, undec, true, nil
}

// Foreign returns how many items of the completed epoch (app, epoch) were
// sealed for another (policy, k) than pol's or another pipeline digest
// than pipeline — items ReleasePolicy does not release — and those
// (policy, k, digest) triples as "policy/k=K/pipeline=DIGEST" (DIGEST
// "none" for items sealed without one), sorted. 0 and nil for a nil pol.
func (s *State) Foreign(app, epoch string, pol *policy.Policy, pipeline string) (int, []string) {
	e := s.epochs[epochKey{app, epoch}]
	if e == nil || pol == nil {
		return 0, nil
	}
	seal := pol.Sealing().String()
	n, keys := 0, map[string]bool{}
	for k := range e.items {
		if k.policy != seal || k.k != pol.ShamirK || k.pipeline != pipeline {
			n++
			keys[fmt.Sprintf("%s/k=%d/pipeline=%s", k.policy, k.k, digestName(k.pipeline))] = true
		}
	}
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return n, out
}

// Publish is ReleasePolicy with the summary shaped for publication
// (release.ShapeSummary under mode, "" = coarse): under a DP pol the summary
// lines of the DP release are withheld, whatever the mode.
func (s *State) Publish(app, epoch string, pol *policy.Policy, pipeline string, mode release.SummaryMode) ([]release.Item, []release.Undecrypted, bool, error) {
	items, undec, dp, err := s.ReleasePolicy(app, epoch, pol, pipeline)
	if err != nil {
		return nil, nil, false, err
	}
	if mode == "" {
		mode = release.SummaryCoarse
	}
	var withhold func(string, int) bool
	if pol != nil && pol.Kind.IsDP() {
		withhold = func(p string, k int) bool { return p == string(pol.Kind) && k == pol.ShamirK }
	}
	return items, release.ShapeSummary(undec, mode, withhold), dp, nil
}

// SpendingSink writes a differentially private release together with its
// privacy-ledger row, refusing it when the budget would be exceeded
// (satisfied by *release.Writer).
type SpendingSink interface {
	// WriteDrawnRelease writes the release of key with items and undec as
	// this attempt's candidate draw and returns what the release holds (a
	// stored draw of an earlier attempt wins: release.Writer).
	WriteDrawnRelease(ctx context.Context, key release.Key, items []release.Item, undec []release.Undecrypted,
		releasedAt time.Time, spend release.Spend, budget release.Budget) ([]release.Item, []release.Undecrypted, error)
}

// Stage reads the decrypted topic from its beginning (one reader per
// partition: infra/kafka.ServeGroup without a group) and writes each
// completed epoch to Sink. Restart safety: on restart it re-reads the topic
// and rewrites; the Sink's writes are idempotent per release key, so
// nothing is written twice.
type Stage struct {
	Brokers []string
	Topic   string // default "decrypted"
	Sink    Sink
	Logger  *slog.Logger

	// Policy is the pipeline's policy: only items sealed for it are
	// released (State.ReleasePolicy), exactly under FT_a/FT_u, with noise
	// and a ledger row under a DP policy (Sink must then be a
	// SpendingSink); items of other pipelines are counted in Foreign and
	// logged. nil releases every (policy, k) exactly (library use; the
	// release role always sets it).
	Policy *policy.Policy
	// Pipeline is the digest of the pipeline definition this stage was
	// given (pipelines/pipeline.Digest): with Policy, only items sealed for
	// this digest are released; items sealed for another digest, or for
	// none when it is set, are counted in Foreign and logged naming both.
	// Zero: only items sealed without a digest (library use).
	Pipeline [32]byte
	// Dataset names the privacy budget the DP releases spend from (with the
	// epoch); default "default".
	Dataset string
	// Budget is the per-(dataset, epoch) budget; zero fields = no limit.
	Budget release.Budget
	// Summary is how much of the undecrypted summary is published
	// (release.ShapeSummary): "" or coarse (the default), exact or none.
	// Under a DP Policy the lines of the DP release are withheld whatever
	// the mode: an exact count of undecrypted tags is outside the recorded
	// (ε, δ).
	Summary release.SummaryMode
	// OnRefused, when set, is called when a DP release was refused (the
	// error wraps release.ErrOverBudget); the stage goes on serving.
	OnRefused func(app, epoch string, err error)

	Released atomic.Int64 // epochs written
	Rows     atomic.Int64 // item rows written
	// Foreign counts items not released because they were sealed for
	// another (policy, k) than Policy's (State.Foreign).
	Foreign atomic.Int64
	// OnRelease, when set, is called after an epoch was written.
	OnRelease func(app, epoch string, items []release.Item)

	mxOnce       sync.Once
	writeSeconds prometheus.Histogram // Collectors
	lastRelease  *prometheus.GaugeVec
	tail         atomic.Pointer[infrakafka.Tail] // the Tail Run reads (ConsumerLag)
}

// Collectors returns the stage's metrics, for a registry
// (pipelines/runner.RegisterRelease): crowdlog_release_write_seconds, the
// time to write one epoch's release to ClickHouse (ReleaseEpoch's writes,
// retries included), and
// crowdlog_release_last_release_timestamp_seconds{app,policy,k}, the Unix
// time of the last epoch written per app and pipeline (policy and k of
// Policy; "any" and 0 without one).
func (st *Stage) Collectors() []prometheus.Collector {
	st.initMetrics()
	return []prometheus.Collector{st.writeSeconds, st.lastRelease}
}

func (st *Stage) initMetrics() {
	st.mxOnce.Do(func() {
		st.writeSeconds = metrics.NewHistogram("crowdlog_release_write_seconds",
			"Time to write one epoch's release to ClickHouse (retries included).", nil, metrics.RequestBuckets)
		st.lastRelease = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "crowdlog_release_last_release_timestamp_seconds",
			Help: "Unix time of the last epoch release written, per app and pipeline policy and k."}, []string{"app", "policy", "k"})
	})
}

// ConsumerLag returns, per partition of the decrypted topic, the messages
// behind its end as of the last read (infra/kafka.Tail.Lag); empty while
// Run is not reading.
func (st *Stage) ConsumerLag() map[int]int64 {
	return st.tail.Load().Lag()
}

// Run serves until ctx ends (then it returns nil). Errors: the topic's
// partitions cannot be listed ("release: topic decrypted: …", the topic does
// not exist yet; "release: dial kafka …"), a DP Policy without a
// SpendingSink, a policy that fails to decide, or ctx ends while a write is
// retried; ClickHouse errors are retried (200 ms doubling to 10 s).
func (st *Stage) Run(ctx context.Context) error {
	topic := st.Topic
	if topic == "" {
		topic = protocol.DecryptedTopic
	}
	log := st.Logger
	if log == nil {
		log = slog.Default()
	}
	// every partition read from its first offset, the values applied and
	// written on this goroutine alone
	tail := infrakafka.ReadTopic(ctx, st.Brokers, topic, "release", log)
	defer tail.Stop()
	st.tail.Store(tail)
	state := NewState()
	for {
		select {
		case <-ctx.Done():
			return tail.Stop() // nil, unless ctx ended while the partitions were listed
		case <-tail.Done:
			// before ctx ends only when the partitions cannot be listed:
			// "release: topic decrypted: …" or "release: dial kafka …"
			return tail.Err()
		case b := <-tail.Msgs:
			app, epoch, done := state.Apply(b)
			if !done {
				continue
			}
			if err := st.ReleaseEpoch(ctx, state, app, epoch); err != nil {
				return err
			}
		}
	}
}

// ReleaseEpoch builds the release of the completed epoch (app, epoch) of
// state (State.Publish under Policy and Summary) and writes it to Sink,
// retrying ClickHouse errors until ctx ends; Run calls it when the last
// partition closed the epoch. A DP release over the budget is refused
// (logged, OnRefused) and returns nil; the DP key's noise is drawn once
// (a redo releases the stored draw: release.Writer.WriteDrawnRelease).
// Errors: a policy that fails to decide, a DP Policy without a
// SpendingSink, ctx ending while a write is retried, an unreadable stored
// draw.
func (st *Stage) ReleaseEpoch(ctx context.Context, state *State, app, epoch string) error {
	log := st.Logger
	if log == nil {
		log = slog.Default()
	}
	digest := DigestHex(st.Pipeline)
	items, undec, dp, err := state.Publish(app, epoch, st.Policy, digest, st.Summary)
	if err != nil {
		return err
	}
	if n, keys := state.Foreign(app, epoch, st.Policy, digest); n > 0 {
		st.Foreign.Add(int64(n))
		log.Error("release: items sealed for another pipeline are not released; give this stage the pipeline file their clients used (or run one stage per pipeline)",
			"app", app, "epoch", epoch, "items", n, "sealed_for", keys,
			"this_stage", fmt.Sprintf("%s/k=%d/pipeline=%s", st.Policy.Sealing(), st.Policy.ShamirK, digestName(digest)), "policy", string(st.Policy.Kind))
	}
	st.initMetrics()
	start := time.Now()
	if dp {
		items, err = st.writeDP(ctx, app, epoch, items, undec, log)
	} else {
		err = st.write(ctx, items, undec, log)
		if err == nil && st.Policy != nil && len(items) == 0 && len(undec) == 0 {
			// nothing of the pipeline opened nor stayed encrypted: the
			// epoch's release is empty, and still complete
			err = st.writeEmpty(ctx, release.Key{App: app, Epoch: epoch, Policy: string(st.Policy.Kind), K: st.Policy.ShamirK}, log)
		}
	}
	if err == nil {
		st.writeSeconds.Observe(time.Since(start).Seconds())
	}
	if errors.Is(err, release.ErrOverBudget) {
		log.Error("release: refused, over the privacy budget; nothing released", "app", app, "epoch", epoch, "err", err)
		if st.OnRefused != nil {
			st.OnRefused(app, epoch, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	st.Released.Add(1)
	st.Rows.Add(int64(len(items)))
	pol, k := "any", 0
	if st.Policy != nil {
		pol, k = string(st.Policy.Kind), st.Policy.ShamirK
	}
	st.lastRelease.WithLabelValues(app, pol, strconv.Itoa(k)).Set(float64(time.Now().UnixNano()) / 1e9)
	log.Info("release: epoch released", "app", app, "epoch", epoch, "items", len(items),
		"undecrypted_lines", len(undec), "duplicates_dropped", state.Duplicates)
	if st.OnRelease != nil {
		st.OnRelease(app, epoch, items)
	}
	return nil
}

// writeDP writes the DP release of (app, epoch) with its ledger row, and the
// epoch's other (exact) keys as write does, and returns the epoch's items
// as released (the DP key's from its draw). The DP key is written even
// when it released nothing (the spend happened). Retries like write,
// except that an over-budget refusal or an unreadable stored draw is
// returned at once.
func (st *Stage) writeDP(ctx context.Context, app, epoch string, items []release.Item, undec []release.Undecrypted, log *slog.Logger) ([]release.Item, error) {
	ss, ok := st.Sink.(SpendingSink)
	if !ok {
		return nil, fmt.Errorf("release: policy %s needs a sink with a privacy ledger (release.Writer)", st.Policy.Kind)
	}
	key := release.Key{App: app, Epoch: epoch, Policy: string(st.Policy.Kind), K: st.Policy.ShamirK}
	var dpItems, rest []release.Item
	for _, it := range items {
		if it.Key() == key {
			dpItems = append(dpItems, it)
		} else {
			rest = append(rest, it)
		}
	}
	var dpUndec, restUndec []release.Undecrypted
	for _, u := range undec {
		if u.Key() == key {
			dpUndec = append(dpUndec, u)
		} else {
			restUndec = append(restUndec, u)
		}
	}
	dataset := st.Dataset
	if dataset == "" {
		dataset = "default"
	}
	p := st.Policy
	spend := release.Spend{Dataset: dataset, Epoch: epoch, App: app, Policy: key.Policy, K: key.K,
		Epsilon: p.AchievedEpsilon, Delta: p.AchievedDelta, Params: p.String()}
	var drawn []release.Item
	if err := retry.Forever(ctx, log, "release: write to ClickHouse", 200*time.Millisecond, 10*time.Second, func() error {
		var err error
		drawn, _, err = ss.WriteDrawnRelease(ctx, key, dpItems, dpUndec, time.Now(), spend, st.Budget)
		if errors.Is(err, release.ErrOverBudget) || errors.Is(err, release.ErrBadDraw) {
			return retry.Permanent(err) // refused or unreadable, not failed: never retried
		}
		return err
	}); err != nil {
		return nil, err
	}
	out := append(drawn, rest...)
	release.SortItems(out)
	if len(rest) == 0 && len(restUndec) == 0 {
		return out, nil
	}
	return out, st.write(ctx, rest, restUndec, log)
}

// write retries the sink until it succeeds or ctx ends (a ClickHouse outage
// delays the release; it does not lose it).
func (st *Stage) write(ctx context.Context, items []release.Item, undec []release.Undecrypted, log *slog.Logger) error {
	return retry.Forever(ctx, log, "release: write to ClickHouse", 200*time.Millisecond, 10*time.Second,
		func() error { return st.Sink.WriteRelease(ctx, items, undec, time.Now()) })
}

// KeyedSink writes the release of one key, also an empty one (satisfied
// by *release.Writer).
type KeyedSink interface {
	WriteKeyedRelease(ctx context.Context, key release.Key, items []release.Item, undec []release.Undecrypted, releasedAt time.Time) error
}

// writeEmpty writes the empty release of key (its releases row: the epoch
// is complete with nothing to publish) when the Sink can, retrying as
// write does.
func (st *Stage) writeEmpty(ctx context.Context, key release.Key, log *slog.Logger) error {
	ks, ok := st.Sink.(KeyedSink)
	if !ok {
		return nil
	}
	return retry.Forever(ctx, log, "release: write to ClickHouse", 200*time.Millisecond, 10*time.Second,
		func() error { return ks.WriteKeyedRelease(ctx, key, nil, nil, time.Now()) })
}

// DigestHex is a pipeline digest as protocol.Decrypted carries it: 64 hex
// digits, "" for the zero digest.
func DigestHex(d [32]byte) string {
	if d == ([32]byte{}) {
		return ""
	}
	return hex.EncodeToString(d[:])
}

// digestName is a digest in hex as logs name it ("none" for "").
func digestName(d string) string {
	if d == "" {
		return "none"
	}
	return d
}
