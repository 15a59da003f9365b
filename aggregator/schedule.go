package aggregator

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"sort"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
)

// Schedule makes a Service open and close scheduled epochs on its own
// clock: epochs of Length named START-LENGTH as the randomness service's
// schedule names them (protocol.ScheduleEpoch), for each of Apps.
// Every Every (default 10 s) the service writes an EpochOpen of the
// current epoch (and of the next one within Lead of its start) unless
// this process wrote it already, and an EpochClose of every scheduled
// epoch open in its partitions whose end + CloseDelay has passed. Both
// are control records on the reports topic, like an operator's, so the
// partitions' state stays a function of the topic and a replay gives the
// same verdicts; several processes of a group write the same records,
// which the partitions apply once (an open of an open epoch and a close of
// a closed one change nothing). Epochs with other names are left to the
// operator's open-epoch and close-epoch.
type Schedule struct {
	Apps       []string
	Length     time.Duration // > 0, whole seconds
	CloseDelay time.Duration // after an epoch's end, before its close: the time its last reports need to cross the relays
	Lead       time.Duration // open the next epoch this long before it starts (clients whose clocks run ahead); default 1 min
	Every      time.Duration // the clock's tick; default 10 s
	Now        func() time.Time
	// Key signs the records (OpenEpoch, CloseEpoch): the pipeline
	// operator's Ed25519 private key (RFC 8032), which this process then
	// holds. nil: unsigned records, which aggregators with a control
	// verifying key refuse.
	Key ed25519.PrivateKey
	// Pipelines gives, per app of Apps, the pipeline digest its signed
	// records bind (ControlSigner.Pipeline; pipeline.Definition.Digest of
	// the scheduled definition). An app missing here signs for the zero
	// digest, which an aggregator serving named pipelines refuses.
	Pipelines map[string][32]byte
}

// openEpochKeys lists the open epochs of the partition's state: Service
// records them after each batch (account) for the schedule's closes.
func (p *Partition) openEpochKeys() []epochKey {
	out := make([]epochKey, 0, len(p.epochs))
	for k, e := range p.epochs {
		if e.open {
			out = append(out, k)
		}
	}
	return out
}

// runSchedule is the Schedule's clock; it returns when ctx ends. Control
// records that fail to write are retried at the next tick (logged).
func (s *Service) runSchedule(ctx context.Context, log *slog.Logger) {
	sc := s.Schedule
	every, lead, now := sc.Every, sc.Lead, sc.Now
	if every <= 0 {
		every = 10 * time.Second
	}
	if lead <= 0 {
		lead = time.Minute
	}
	if now == nil {
		now = time.Now
	}
	opened := map[epochKey]bool{}
	closed := map[epochKey]bool{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		at := now()
		for _, ek := range s.scheduleDue(at, lead, opened, closed) {
			op, write := "open", OpenEpoch
			if ek.close {
				op, write = "close", CloseEpoch
			}
			wctx, cancel := context.WithTimeout(ctx, every)
			var signer *ControlSigner
			if sc.Key != nil {
				signer = &ControlSigner{Key: sc.Key, Pipeline: sc.Pipelines[ek.app]}
			}
			err := write(wctx, s.Brokers, signer, ek.app, ek.epoch)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Warn("aggregator: scheduled epoch "+op+" not written; retried at the next tick", "app", ek.app, "epoch", ek.epoch, "err", err)
				continue
			}
			if ek.close {
				closed[ek.epochKey] = true
			} else {
				opened[ek.epochKey] = true
			}
			log.Info("aggregator: scheduled epoch "+op+" written", "app", ek.app, "epoch", ek.epoch)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// dueControl is one control record the schedule writes.
type dueControl struct {
	epochKey
	close bool
}

// scheduleDue returns the opens and closes due at time at: the current
// epoch of each app (and the next one within lead of its start) not in
// opened, and every scheduled epoch of Length open in this process's
// partitions that ended at least CloseDelay ago and is not in closed;
// closes first, in name order.
func (s *Service) scheduleDue(at time.Time, lead time.Duration, opened, closed map[epochKey]bool) []dueControl {
	sc := s.Schedule
	var due []dueControl
	s.mu.Lock()
	var open []epochKey
	for _, eks := range s.openEpochs {
		open = append(open, eks...)
	}
	s.mu.Unlock()
	apps := map[string]bool{}
	for _, a := range sc.Apps {
		apps[a] = true
	}
	seen := map[epochKey]bool{}
	for _, ek := range open {
		if !apps[ek.app] || seen[ek] || closed[ek] {
			continue
		}
		seen[ek] = true
		start, err := protocol.ParseScheduleEpoch(ek.epoch, sc.Length)
		if err != nil {
			continue // a named epoch: the operator's
		}
		if !at.Before(start.Add(sc.Length).Add(sc.CloseDelay)) {
			due = append(due, dueControl{ek, true})
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].app+"\x00"+due[i].epoch < due[j].app+"\x00"+due[j].epoch })
	for _, a := range sc.Apps {
		cur := protocol.ScheduleEpoch(at, sc.Length)
		next := protocol.ScheduleEpoch(at.Add(lead), sc.Length)
		for i, e := range []string{cur, next} {
			ek := epochKey{a, e}
			if !opened[ek] && !closed[ek] && (i == 0 || next != cur) {
				due = append(due, dueControl{ek, false})
			}
		}
	}
	return due
}
