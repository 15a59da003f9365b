// Package audit reconciles what reached Kafka with what the aggregator
// emitted, report id by report id, to locate the hop where a report was lost
// or counted twice. It reads the whole "reports" topic (peeling the
// aggregator's onion layer with its key, like aggregator.Partition.Apply)
// and the whole "decrypted" topic, and counts per partition. It never
// prints or returns payloads, tags or user ids: only counts and offsets.
//
// It is a diagnostic for tests and operators after a run, not a service:
// it holds every report id of the epoch in memory (~50 bytes each).
package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/aggregator"
	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// Partition is what one partition of the reports topic held and what the
// aggregator emitted for it.
type Partition struct {
	ID int
	// Messages is every record read (reports, controls and undecodable).
	Messages int
	// CloseOffset is the offset of the first close record of (app, epoch)
	// (opens and other epochs' closes do not end it),
	// -1 when there is none.
	CloseOffset int64
	// RefusedControl counts control records the aggregator refuses under
	// the control key (RunVerified): unsigned, forged or replayed.
	RefusedControl int
	// Reports counts distinct report ids before the close record; Copies
	// counts every report record before it (Copies−Reports = duplicates
	// of at-least-once delivery).
	Reports, Copies int
	// Late counts distinct report ids whose first copy came after the
	// close record: reports the aggregator drops as "late", lost unless
	// the release already had them.
	Late int
	// LateOffsets are the offsets of the first Late copies (at most 10).
	LateOffsets []int64
	// Undecodable counts records that did not peel or parse.
	Undecodable int
	// Decrypted counts distinct report ids emitted on the decrypted
	// topic by this partition's groups; Missing counts ids before the
	// close record whose tag was decrypted but which were never emitted.
	Decrypted, Missing int
	// MissingOffsets are the offsets of the first Missing reports (at
	// most 10).
	MissingOffsets []int64
}

// Result is an audit of one (app, epoch).
type Result struct {
	Partitions []Partition
	// Reports is the number of distinct report ids in the reports topic
	// (before and after the close records).
	Reports int
	// Emitted is the number of distinct report ids on the decrypted topic.
	Emitted int
	// Orphans counts decrypted report ids never seen in the reports topic.
	Orphans int
}

// Lost sums Late and Missing over the partitions.
func (r *Result) Lost() (late, missing int) {
	for _, p := range r.Partitions {
		late += p.Late
		missing += p.Missing
	}
	return late, missing
}

// String is a one-line-per-partition table of counts.
func (r *Result) String() string {
	var b strings.Builder
	late, missing := r.Lost()
	fmt.Fprintf(&b, "audit: %d distinct reports in Kafka, %d emitted decrypted, %d late (after close), %d missing (tag opened, report not emitted), %d orphans\n",
		r.Reports, r.Emitted, late, missing, r.Orphans)
	for _, p := range r.Partitions {
		fmt.Fprintf(&b, "  partition %d: %d records, close at %d, %d reports (%d copies), %d late %v, %d undecodable, %d decrypted, %d missing %v",
			p.ID, p.Messages, p.CloseOffset, p.Reports, p.Copies, p.Late, p.LateOffsets, p.Undecodable, p.Decrypted, p.Missing, p.MissingOffsets)
		if p.RefusedControl > 0 {
			fmt.Fprintf(&b, ", %d control records refused (unsigned, forged or replayed)", p.RefusedControl)
		}
		b.WriteString("\n")
	}
	return b.String()
}

type seen struct {
	partition int
	offset    int64
	tag       string
	late      bool
}

// Run audits (app, epoch) on the reports and decrypted topics at brokers,
// peeling reports with keys (the aggregator's). It reads each partition up
// to its high watermark at the time of the call. Errors: a topic cannot be
// listed or read.
func Run(ctx context.Context, brokers []string, reportsTopic, decryptedTopic string, keys []*onion.KeyPair, app, epoch string) (*Result, error) {
	return RunVerified(ctx, brokers, reportsTopic, decryptedTopic, keys, nil, app, epoch)
}

// RunVerified is Run that takes a close record into account only when the
// aggregator would apply it under the pipeline operator's Ed25519 public
// key controlKey (aggregator.ControlVerifier: signed for the partition,
// within its validity, not replayed); nil: every close record that
// parses, as Run. Records it refuses are counted in
// Partition.RefusedControl.
func RunVerified(ctx context.Context, brokers []string, reportsTopic, decryptedTopic string, keys []*onion.KeyPair, controlKey ed25519.PublicKey, app, epoch string) (*Result, error) {
	res := &Result{}
	ids := map[[16]byte]*seen{}
	parts, err := partitions(ctx, brokers[0], reportsTopic)
	if err != nil {
		return nil, err
	}
	for _, p := range parts {
		ap := Partition{ID: p, CloseOffset: -1}
		cv := aggregator.ControlVerifier{Key: controlKey, Partition: p}
		err := readPartition(ctx, brokers, reportsTopic, p, func(m kafkago.Message) {
			ap.Messages++
			for _, h := range m.Headers {
				if h.Key == protocol.ControlHeader {
					// only the close of (app, epoch) ends it: opens (and
					// other epochs' markers) come before its reports
					c, reason := cv.Check(m.Value, m.Time)
					if reason != "" && reason != "malformed-control" {
						ap.RefusedControl++
					}
					if c != nil && c.Op == protocol.ControlCloseEpoch && c.App == app && c.Epoch == epoch && ap.CloseOffset < 0 {
						ap.CloseOffset = m.Offset
					}
					return
				}
			}
			hop, inner, err := onion.Peel(keys, m.Value)
			if err != nil || hop.Kind != onion.HopDeliver {
				ap.Undecodable++
				return
			}
			r, err := star.ParseReport(inner)
			if err != nil {
				ap.Undecodable++
				return
			}
			if r.App != app || r.Epoch != epoch {
				return
			}
			late := ap.CloseOffset >= 0
			if !late {
				ap.Copies++
			}
			if _, ok := ids[r.ID]; ok {
				return // a later copy: offsets ascend, so the first decided late
			}
			ids[r.ID] = &seen{partition: p, offset: m.Offset, tag: hex.EncodeToString(r.Tag[:]), late: late}
			if late {
				ap.Late++
				if len(ap.LateOffsets) < 10 {
					ap.LateOffsets = append(ap.LateOffsets, m.Offset)
				}
			} else {
				ap.Reports++
			}
		})
		if err != nil {
			return nil, err
		}
		res.Partitions = append(res.Partitions, ap)
	}
	res.Reports = len(ids)

	emitted := map[string]bool{} // hex report id
	openTags := map[string]bool{}
	dparts, err := partitions(ctx, brokers[0], decryptedTopic)
	if err != nil {
		return nil, err
	}
	for _, p := range dparts {
		err := readPartition(ctx, brokers, decryptedTopic, p, func(m kafkago.Message) {
			d, err := protocol.ParseDecrypted(m.Value)
			if err != nil || d.Kind != protocol.KindItem || d.App != app || d.Epoch != epoch {
				return
			}
			emitted[d.Report] = true
			openTags[d.Tag] = true
		})
		if err != nil {
			return nil, err
		}
	}
	res.Emitted = len(emitted)
	byID := map[int]*Partition{}
	for i := range res.Partitions {
		byID[res.Partitions[i].ID] = &res.Partitions[i]
	}
	known := map[string]bool{}
	type miss struct {
		p   int
		off int64
	}
	var misses []miss
	for id, s := range ids {
		h := hex.EncodeToString(id[:])
		known[h] = true
		ap := byID[s.partition]
		if emitted[h] {
			ap.Decrypted++
			continue
		}
		if !s.late && openTags[s.tag] {
			ap.Missing++
			misses = append(misses, miss{s.partition, s.offset})
		}
	}
	sort.Slice(misses, func(i, j int) bool { return misses[i].off < misses[j].off })
	for _, m := range misses {
		ap := byID[m.p]
		if len(ap.MissingOffsets) < 10 {
			ap.MissingOffsets = append(ap.MissingOffsets, m.off)
		}
	}
	for h := range emitted {
		if !known[h] {
			res.Orphans++
		}
	}
	return res, nil
}

func partitions(ctx context.Context, broker, topic string) ([]int, error) {
	conn, err := infrakafka.Dialer(ctx).DialContext(ctx, "tcp", broker)
	if err != nil {
		return nil, fmt.Errorf("audit: dial kafka %s: %w", broker, err)
	}
	defer conn.Close()
	ps, err := conn.ReadPartitions(topic)
	if err != nil {
		return nil, fmt.Errorf("audit: topic %s: %w", topic, err)
	}
	var ids []int
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	sort.Ints(ids)
	return ids, nil
}

// readPartition calls fn for every record of topic/partition from its first
// offset to its high watermark as of the call, in offset order.
func readPartition(ctx context.Context, brokers []string, topic string, partition int, fn func(kafkago.Message)) error {
	conn, err := infrakafka.Dialer(ctx).DialLeader(ctx, "tcp", brokers[0], topic, partition)
	if err != nil {
		return fmt.Errorf("audit: %s/%d: %w", topic, partition, err)
	}
	first, last, err := conn.ReadOffsets()
	conn.Close()
	if err != nil {
		return fmt.Errorf("audit: %s/%d offsets: %w", topic, partition, err)
	}
	if last <= first {
		return nil
	}
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: brokers, Topic: topic, Partition: partition,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 200 * time.Millisecond, Dialer: infrakafka.Dialer(ctx)})
	defer r.Close()
	if err := r.SetOffset(first); err != nil {
		return err
	}
	for next := first; ; {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := r.FetchMessage(rctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return fmt.Errorf("audit: %s/%d: no record at offset %d (high watermark %d) within 30 s", topic, partition, next, last)
			}
			return fmt.Errorf("audit: %s/%d: %w", topic, partition, err)
		}
		fn(m)
		if next = m.Offset + 1; next >= last {
			return nil
		}
	}
}
