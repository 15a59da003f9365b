// Package stage is the release stage loop: it reads the aggregator's
// "decrypted" topic, drops duplicates of at-least-once delivery, and when
// every reports partition has closed an epoch it builds that epoch's
// histogram — exact counts for the threshold policies FT_a and FT_u
// (CrowdLogging §3.2.1–3.2.2) — and writes it to ClickHouse.
package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/release"
)

// Sink receives a finished release (satisfied by *release.Writer).
type Sink interface {
	WriteRelease(ctx context.Context, items []release.Item, undec []release.Undecrypted, releasedAt time.Time) error
}

type epochKey struct{ app, epoch string }

type itemKey struct {
	policy string
	k      int
	item   string
}

type itemAcc struct {
	reports  map[string]struct{}
	units    map[string]struct{}
	variants map[string]int
}

type summaryKey struct {
	partition int
	policy    string
	k         int
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
		k := itemKey{d.Policy, d.K, d.Item}
		a := e.items[k]
		if a == nil {
			a = &itemAcc{reports: map[string]struct{}{}, units: map[string]struct{}{}, variants: map[string]int{}}
			e.items[k] = a
		}
		id := d.Tag + "/" + d.Report
		if _, dup := a.reports[id]; dup {
			s.Duplicates++
			return "", "", false
		}
		a.reports[id] = struct{}{}
		a.units[d.Unit] = struct{}{}
		a.variants[d.Variant]++
	case protocol.KindSummary:
		// keyed by partition: a summary re-emitted after an aggregator
		// restart replaces, never adds to, the first
		e.summary[summaryKey{d.Partition, d.Policy, d.K}] = *d
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
// summary.
func (s *State) Release(app, epoch string) ([]release.Item, []release.Undecrypted) {
	e := s.epochs[epochKey{app, epoch}]
	if e == nil {
		return nil, nil
	}
	items := make([]release.Item, 0, len(e.items))
	for k, a := range e.items {
		best, bestN := "", -1
		for v, n := range a.variants {
			if n > bestN || (n == bestN && v < best) {
				best, bestN = v, n
			}
		}
		items = append(items, release.Item{App: app, Epoch: epoch, Policy: k.policy, K: k.k, Item: k.item,
			Variant: best, Impressions: uint64(len(a.reports)), Users: uint64(len(a.units))})
	}
	release.SortItems(items)
	merged := map[release.Undecrypted]uint64{}
	for _, d := range e.summary {
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

// Stage reads the decrypted topic from its beginning (one reader per
// partition) and writes each completed epoch to Sink. Restart safety: on
// restart it re-reads the topic and rewrites; the Sink's writes are
// idempotent per release key, so nothing is written twice.
type Stage struct {
	Brokers []string
	Topic   string // default "decrypted"
	Sink    Sink
	Logger  *slog.Logger

	Released atomic.Int64 // epochs written
	Rows     atomic.Int64 // item rows written
	// OnRelease, when set, is called after an epoch was written.
	OnRelease func(app, epoch string, items []release.Item)
}

// Run serves until ctx ends.
func (st *Stage) Run(ctx context.Context) error {
	topic := st.Topic
	if topic == "" {
		topic = "decrypted"
	}
	log := st.Logger
	if log == nil {
		log = slog.Default()
	}
	conn, err := (&kafka.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", st.Brokers[0])
	if err != nil {
		return fmt.Errorf("release: dial kafka: %w", err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return fmt.Errorf("release: topic %s: %w", topic, err)
	}
	msgs := make(chan []byte, 4096)
	var wg sync.WaitGroup
	rctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	for _, p := range parts {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: st.Brokers, Topic: topic, Partition: id,
				MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 200 * time.Millisecond})
			defer r.Close()
			r.SetOffset(kafka.FirstOffset)
			for {
				m, err := r.ReadMessage(rctx)
				if err != nil {
					if rctx.Err() == nil {
						log.Error("release: read decrypted", "partition", id, "err", err)
					}
					return
				}
				select {
				case msgs <- m.Value:
				case <-rctx.Done():
					return
				}
			}
		}(p.ID)
	}
	state := NewState()
	for {
		select {
		case <-ctx.Done():
			return nil
		case b := <-msgs:
			app, epoch, done := state.Apply(b)
			if !done {
				continue
			}
			items, undec := state.Release(app, epoch)
			if err := st.write(ctx, items, undec, log); err != nil {
				return err
			}
			st.Released.Add(1)
			st.Rows.Add(int64(len(items)))
			log.Info("release: epoch released", "app", app, "epoch", epoch, "items", len(items),
				"undecrypted_lines", len(undec), "duplicates_dropped", state.Duplicates)
			if st.OnRelease != nil {
				st.OnRelease(app, epoch, items)
			}
		}
	}
}

// write retries the sink until it succeeds or ctx ends (a ClickHouse outage
// delays the release; it does not lose it).
func (st *Stage) write(ctx context.Context, items []release.Item, undec []release.Undecrypted, log *slog.Logger) error {
	backoff := 200 * time.Millisecond
	for {
		err := st.Sink.WriteRelease(ctx, items, undec, time.Now())
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		log.Warn("release: write to ClickHouse failed, retrying", "err", err, "in", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}
