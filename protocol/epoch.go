package protocol

import (
	"fmt"
	"strings"
	"time"
)

// ScheduleLayout is the time layout of a scheduled epoch's name: the
// epoch's UTC start in ISO 8601 basic format.
const ScheduleLayout = "20060102T150405Z"

// ScheduleEpoch returns the name of the scheduled epoch of the given length
// that contains t: its absolute UTC start floor(unix(t)/length)·length in
// ScheduleLayout, "-", and the length ("24h", "90m", "45s": the largest
// whole unit). Example: 2006-03-01 13:00 UTC with length 24h is
// "20060301T000000Z-24h". The length is part of the name so that changing
// the schedule never gives two epochs of different lengths one name (and
// one key). Boundaries depend only on the clock, never on process uptime.
// length must be a positive whole number of seconds.
func ScheduleEpoch(t time.Time, length time.Duration) string {
	l := int64(length / time.Second)
	s := t.Unix()
	start := s / l * l
	if s < 0 && s%l != 0 {
		start -= l
	}
	return time.Unix(start, 0).UTC().Format(ScheduleLayout) + "-" + lengthName(length)
}

func lengthName(d time.Duration) string {
	switch s := int64(d / time.Second); {
	case s%3600 == 0:
		return fmt.Sprintf("%dh", s/3600)
	case s%60 == 0:
		return fmt.Sprintf("%dm", s/60)
	default:
		return fmt.Sprintf("%ds", s)
	}
}

// ParseScheduleEpoch returns the start of a scheduled epoch named by
// ScheduleEpoch for the given length. Errors when the name has another
// form, another length, or a start that is not a boundary.
func ParseScheduleEpoch(name string, length time.Duration) (time.Time, error) {
	ts, ln, ok := strings.Cut(name, "-")
	want := lengthName(length)
	if !ok || ln != want {
		return time.Time{}, fmt.Errorf("epoch %q is not a scheduled epoch of length %s (want START-%s, START in UTC as %s, e.g. %s)",
			name, length, want, ScheduleLayout, ScheduleEpoch(time.Now(), length))
	}
	start, err := time.Parse(ScheduleLayout, ts)
	if err != nil {
		return time.Time{}, fmt.Errorf("epoch %q: start is not %s: %w", name, ScheduleLayout, err)
	}
	if ScheduleEpoch(start, length) != name {
		return time.Time{}, fmt.Errorf("epoch %q does not start on a %s boundary (the epoch containing it is %s)",
			name, length, ScheduleEpoch(start, length))
	}
	return start, nil
}
