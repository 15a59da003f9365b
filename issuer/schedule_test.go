package issuer

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
)

// TestScheduleRollsKeys: the issuer's clock creates the current epoch's
// keys (and the next one's within the lead) without a restart, serves
// them, and destroys an epoch's keys — files and memory — once its end +
// grace has passed, leaving a named epoch's keys alone.
func TestScheduleRollsKeys(t *testing.T) {
	dir := t.TempDir()
	s := &Service{KeysDir: dir}
	if err := keydir.EnsureIssuerKeys(dir, "named"); err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	t0 := time.Date(2006, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := t0
	sc := Schedule{Length: day, Grace: time.Hour, Lead: time.Minute, Now: func() time.Time { return clock }}
	e1 := protocol.ScheduleEpoch(t0, day)
	if _, err := s.epochKeys(e1); !errors.Is(err, ErrEpochNotOpen) {
		t.Fatalf("before the schedule ran, epoch %s: %v", e1, err)
	}
	if err := s.Roll(sc); err != nil {
		t.Fatal(err)
	}
	if _, err := s.epochKeys(e1); err != nil {
		t.Fatalf("the current epoch's keys: %v", err)
	}
	// a minute before midnight: the next epoch opens
	clock = time.Date(2006, 3, 1, 23, 59, 30, 0, time.UTC)
	if err := s.Roll(sc); err != nil {
		t.Fatal(err)
	}
	e2 := protocol.ScheduleEpoch(clock.Add(time.Minute), day)
	if _, err := s.epochKeys(e2); err != nil || e2 == e1 {
		t.Fatalf("the next epoch %s within the lead: %v", e2, err)
	}
	// within the grace: e1 survives; past it: destroyed
	clock = time.Date(2006, 3, 2, 0, 59, 0, 0, time.UTC)
	s.Roll(sc)
	if _, err := os.Stat(keydir.ARCKeyPath(dir, e1)); err != nil {
		t.Fatalf("e1's keys gone within the grace: %v", err)
	}
	clock = time.Date(2006, 3, 2, 1, 0, 0, 0, time.UTC)
	if err := s.Roll(sc); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, keydir.IssuerKeys, e1+".*"))
	if len(left) != 0 {
		t.Fatalf("e1's key files after its grace: %v", left)
	}
	if _, err := s.epochKeys(e1); !errors.Is(err, ErrEpochNotOpen) {
		t.Fatalf("e1 after its grace: %v, want refused as not open", err)
	}
	if _, err := s.epochKeys("named"); err != nil {
		t.Fatalf("the named epoch's keys: %v", err)
	}
}
