package prio3

import (
	"github.com/segmentio/kafka-go"
)

// The leader's consumer of the uploads topic (protocol.Prio3UploadsTopic)
// reads the partition its campaign's key hashes to (and every partition it
// read before), picks up the new one when the topic grows without a
// restart (LeaderService.Run, watchPartitions), and skips records keyed for
// another campaign without opening them.
//
// Keying: relay b produces every upload with the Kafka message key its
// client put in relay b's onion layer (onion.HopKafkaPrio3), the campaign
// name — which relay b learns anyway, and which the leader learns of every
// upload it opens. A leader runs one campaign (LeaderService.Config.Campaign)
// and hands only records whose key is exactly that name to the state
// machine; the others (another campaign's uploads) are counted (LeaderService.OtherCampaign,
// crowdlog_prio3_uploads_skipped_total) and never opened: no HPKE open, no
// preparation. A client that keys its upload for campaign A but seals
// campaign B inside is still refused as "campaign" by A's leader after the
// open, and never reaches B's leader: it loses only its own upload.
//
// A skipped record still passes through the step loop, in partition order
// (upload.skip, without its value): the snapshot's next offset moves past
// it as past an applied upload, so a restart does not read it again.

// forCampaign reports whether an uploads-topic record is keyed for this
// leader's campaign (else it is skipped unopened).
// A record without a key (written by a tool, not a relay) is opened and
// checked by the state machine, as before keying.
func (s *LeaderService) forCampaign(m *kafka.Message) bool {
	if len(m.Key) == 0 || string(m.Key) == s.Config.Campaign {
		return true
	}
	s.OtherCampaign.Add(1)
	return false
}
