package prio3

import (
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// Settings is what the leader announces to clients on
// protocol.Prio3SettingsSubject (p3.Settings): its campaign, measurement,
// the keyword list's hash (listHash, keywords.List.Hash), the batch
// size, ε, its report public keys and the (ε_c, δ) of each day's status
// (Config.StatusEpsilon, StatusDelta; δ announced 0 with ε_c = 0, the
// exact minimum batch rule), so a device can refuse a status rule weaker
// than its floor.
func (s *LeaderService) Settings(listHash [32]byte) (*p3.Settings, error) {
	st := &p3.Settings{Campaign: s.Config.Campaign, Measurement: s.Config.Measurement, ListHash: listHash,
		MinBatchSize: s.Config.MinBatchSize, Epsilon: s.Config.Epsilon, StatusEpsilon: s.Config.StatusEpsilon}
	if st.StatusEpsilon > 0 {
		st.StatusDelta = s.Config.StatusDelta
	}
	for _, k := range s.Config.Keys {
		b, err := k.Public.MarshalBinary()
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("prio3 leader: report key %d: not an X25519 key", k.ID)
		}
		lk := p3.LeaderKey{ID: k.ID}
		copy(lk.Key[:], b)
		st.LeaderKeys = append(st.LeaderKeys, lk)
	}
	return st, nil
}

// ServeSettings answers every request on protocol.Prio3SettingsSubject
// (on s.NATS) with the leader's settings for s.ListHash, signed with
// s.SignKey: the same bytes for every client. A client compares them with
// its own and refuses to upload on a mismatch or on privacy settings
// weaker than its floor (ingest/prio3 Device). Run calls it when ListHash
// is set; the caller unsubscribes. log nil means slog.Default().
func (s *LeaderService) ServeSettings(log *slog.Logger) (*nats.Subscription, error) {
	if log == nil {
		log = slog.Default()
	}
	st, err := s.Settings(s.ListHash)
	if err != nil {
		return nil, err
	}
	signed, err := p3.SignSettings(s.SignKey, st)
	if err != nil {
		return nil, fmt.Errorf("prio3 leader: sign the campaign settings: %w", err)
	}
	d := st.Digest()
	sub, err := s.NATS.Subscribe(protocol.Prio3SettingsSubject, func(m *nats.Msg) {
		if err := natsconn.Respond(m, signed); err != nil {
			log.Warn("prio3 leader: settings request not answered", "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("prio3 leader: subscribe %s: %w", protocol.Prio3SettingsSubject, err)
	}
	log.Info("prio3 leader: announcing the campaign settings", "subject", protocol.Prio3SettingsSubject, "digest", fmt.Sprintf("%x", d))
	return sub, nil
}
