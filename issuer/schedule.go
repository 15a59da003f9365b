package issuer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
)

// Schedule rolls the issuer's epoch keys on its own clock: epochs of
// Length named START-LENGTH as the randomness service's schedule names
// them (protocol.ScheduleEpoch). Every Every (default 10 s) the current
// epoch's keys — and the next epoch's within Lead of its start (default
// 1 min) — are created in the keys directory if missing (keydir.
// EnsureIssuerKeys), so a new epoch needs no restart; the keys of every
// scheduled epoch of this length whose end + Grace has passed are deleted
// from the directory and from memory, so nothing issued or redeemed under
// them can be checked again (tokens of a destroyed epoch are refused).
// Keys of epochs with other names are left to the operator.
type Schedule struct {
	Length, Grace time.Duration
	Lead, Every   time.Duration
	Now           func() time.Time
}

// RunSchedule runs the Schedule until ctx ends (then it returns nil).
// Errors: a Length that is not a positive whole number of seconds or a
// negative Grace; a failure to create or delete keys is logged and tried
// again at the next tick.
func (s *Service) RunSchedule(ctx context.Context, sc Schedule) error {
	if sc.Length <= 0 || sc.Length%time.Second != 0 || sc.Grace < 0 {
		return fmt.Errorf("issuer: schedule: epoch length %s (want a positive whole number of seconds) or grace %s (want ≥ 0)", sc.Length, sc.Grace)
	}
	if sc.Every <= 0 {
		sc.Every = 10 * time.Second
	}
	if sc.Lead <= 0 {
		sc.Lead = time.Minute
	}
	if sc.Now == nil {
		sc.Now = time.Now
	}
	t := time.NewTicker(sc.Every)
	defer t.Stop()
	for {
		if err := s.Roll(sc); err != nil {
			s.log().Warn("issuer: scheduled keys: retried at the next tick", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Roll is one tick of RunSchedule: it creates the keys of the current
// (and, within Lead, the next) epoch and destroys those past their grace.
func (s *Service) Roll(sc Schedule) error {
	now := sc.Now()
	var errs []error
	for _, at := range []time.Time{now, now.Add(sc.Lead)} {
		e := protocol.ScheduleEpoch(at, sc.Length)
		if err := keydir.EnsureIssuerKeys(s.KeysDir, e); err != nil {
			errs = append(errs, err)
		}
	}
	dir := filepath.Join(s.KeysDir, keydir.IssuerKeys)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("issuer: scheduled keys: %w", err))...)
	}
	for _, ent := range ents {
		epoch, _, ok := strings.Cut(ent.Name(), ".")
		if !ok {
			continue
		}
		start, err := protocol.ParseScheduleEpoch(epoch, sc.Length)
		if err != nil || now.Before(start.Add(sc.Length).Add(sc.Grace)) {
			continue // a named epoch, another schedule's, or still in its grace
		}
		if err := os.Remove(filepath.Join(dir, ent.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		s.keys.Delete(epoch)
		s.log().Info("issuer: epoch key destroyed after its grace", "epoch", epoch, "file", ent.Name())
	}
	return errors.Join(errs...)
}
