package prio3

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// The leader's consumer of the uploads topic (protocol.Prio3UploadsTopic):
// one reader per partition, partitions added to the topic while the leader
// runs picked up without a restart, and records keyed for another campaign
// skipped without being opened.
//
// Keying: relay b produces every upload with the Kafka message key its
// client put in relay b's onion layer (onion.HopKafkaPrio3), the campaign
// name — which relay b learns anyway, and which the leader learns of every
// upload it opens. A leader runs one campaign (LeaderService.Config.Campaign)
// and hands only records whose key is exactly that name to the state
// machine; the others (another campaign's uploads, or a record without a
// key) are counted (LeaderService.OtherCampaign,
// crowdlog_prio3_uploads_skipped_total) and never opened: no HPKE open, no
// preparation. A client that keys its upload for campaign A but seals
// campaign B inside is still refused as "campaign" by A's leader after the
// open, and never reaches B's leader: it loses only its own upload.

// DefaultPartitionRefresh is the default LeaderService.PartitionRefresh:
// the uploads topic's partitions are listed again every 30 s.
const DefaultPartitionRefresh = 30 * time.Second

// MinPartitionRefresh bounds LeaderService.PartitionRefresh from below
// (one metadata request per interval to the brokers).
const MinPartitionRefresh = 100 * time.Millisecond

// readUploads starts a reader for every partition of the uploads topic
// (from next[p], the snapshot's offset, or the first offset), feeding in,
// and then lists the partitions again every PartitionRefresh (bounded by
// MinPartitionRefresh), starting a reader from the first offset for each
// new one. It returns after the first listing: an error when the topic
// cannot be listed then (later failures are logged and retried at the
// next refresh). All readers stop when ctx ends; wait waits for them.
func (s *LeaderService) readUploads(ctx context.Context, next map[int]int64, in chan<- upload, log *slog.Logger) (parts int, wait func(), err error) {
	first, err := uploadPartitions(ctx, s.Brokers)
	if err != nil {
		return 0, nil, err
	}
	from := maps.Clone(next) // the step loop owns next
	var wg sync.WaitGroup
	started := map[int]bool{}
	startNew := func(ps []int) int {
		n := 0
		for _, p := range ps {
			if started[p] {
				continue
			}
			started[p] = true
			off, ok := from[p]
			if !ok {
				off = kafka.FirstOffset
			}
			wg.Go(func() { s.read(ctx, p, off, in, log) })
			n++
		}
		return n
	}
	startNew(first)
	every := max(s.PartitionRefresh, MinPartitionRefresh)
	if s.PartitionRefresh <= 0 {
		every = DefaultPartitionRefresh
	}
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ps, err := uploadPartitions(ctx, s.Brokers)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("prio3 leader: listing the uploads topic's partitions failed; trying again at the next refresh", "in", every, "err", err)
				}
				continue
			}
			if n := startNew(ps); n > 0 {
				log.Info("prio3 leader: reading new partitions of the uploads topic", "new", n, "partitions", len(started))
			}
		}
	})
	return len(first), wg.Wait, nil
}

// forCampaign reports whether an uploads-topic record is keyed for this
// leader's campaign (else it is skipped unopened).
func (s *LeaderService) forCampaign(m *kafka.Message) bool {
	if string(m.Key) == s.Config.Campaign {
		return true
	}
	s.OtherCampaign.Add(1)
	return false
}
