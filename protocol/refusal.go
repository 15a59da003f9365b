package protocol

import (
	"errors"
	"fmt"
	"strings"
)

// ErrEpochClosed is wrapped when the randomness service refused an epoch
// because it is closed: its randomness is no longer given out (and its key
// is destroyed after a grace period, never regenerated).
var ErrEpochClosed = errors.New("epoch closed by the randomness service")

// ErrEpochExpired is wrapped when the randomness service refused an epoch of
// its schedule whose end plus grace period has passed: its key is destroyed.
// Reports for it would never be aggregated; seal under the current epoch.
var ErrEpochExpired = errors.New("epoch expired at the randomness service")

// ErrEpochFuture is wrapped when the randomness service refused an epoch of
// its schedule that has not started yet (beyond its clock-skew allowance):
// check the client's clock and epoch name.
var ErrEpochFuture = errors.New("epoch not started yet at the randomness service")

// ErrEpochNotOpen is wrapped when a named epoch was never opened at the
// randomness service (no operator ran `crowdlog randomness open-epoch`). On
// the wire it is a plain refusal (status 1) whose message starts with this
// error's text; Refusal.Err wraps it again, so errors.Is works on both
// sides.
var ErrEpochNotOpen = errors.New("epoch not opened at the randomness service")

// Status bytes of RandomnessResponse and PublicKeyResponse.
const (
	statusOK      = 0
	statusError   = 1 // refused; a message follows
	statusClosed  = 2 // refused because the epoch is closed; a message follows
	statusExpired = 3 // refused because the scheduled epoch expired; a message follows
	statusFuture  = 4 // refused because the scheduled epoch has not started; a message follows
)

// maxErrorMessage bounds refusal messages on the wire, in bytes.
const maxErrorMessage = 1024

// Refusal is why the randomness service refused a request, shared by
// RandomnessResponse and PublicKeyResponse. The zero value is "not refused".
// At most one of Closed, Expired and Future is set; each needs no Error
// (a default message is sent), a plain refusal needs one.
type Refusal struct {
	Error   string // why; empty when not refused
	Closed  bool   // the epoch is closed (wire status 2, ErrEpochClosed)
	Expired bool   // the scheduled epoch's end plus grace passed (status 3, ErrEpochExpired)
	Future  bool   // the scheduled epoch has not started (status 4, ErrEpochFuture)
}

// Refused reports whether f is a refusal.
func (f Refusal) Refused() bool { return f.Error != "" || f.Closed || f.Expired || f.Future }

// Err returns the refusal as an error for the client: wrapping
// ErrEpochClosed, ErrEpochExpired or ErrEpochFuture for those statuses,
// plain for others, nil when not refused.
func (f Refusal) Err() error {
	var sentinel error
	switch {
	case f.Closed:
		sentinel = ErrEpochClosed
	case f.Expired:
		sentinel = ErrEpochExpired
	case f.Future:
		sentinel = ErrEpochFuture
	case strings.HasPrefix(f.Error, ErrEpochNotOpen.Error()):
		return fmt.Errorf("randomness service: %w%s", ErrEpochNotOpen, strings.TrimPrefix(f.Error, ErrEpochNotOpen.Error()))
	case f.Error != "":
		return fmt.Errorf("randomness service: %s", f.Error)
	default:
		return nil
	}
	// the service's message usually starts with the sentinel's text already
	msg := strings.TrimPrefix(f.Error, sentinel.Error()+": ")
	if msg == "" || msg == sentinel.Error() {
		return fmt.Errorf("randomness service: %w", sentinel)
	}
	return fmt.Errorf("randomness service: %w: %s", sentinel, msg)
}

// RefusalOf classifies a service-side error for the wire: errors wrapping
// ErrEpochClosed, ErrEpochExpired or ErrEpochFuture get their status, others
// a plain refusal. nil gives the zero Refusal.
func RefusalOf(err error) Refusal {
	if err == nil {
		return Refusal{}
	}
	return Refusal{Error: err.Error(), Closed: errors.Is(err, ErrEpochClosed),
		Expired: errors.Is(err, ErrEpochExpired), Future: errors.Is(err, ErrEpochFuture)}
}

// WriteStatus writes the status byte and, for a refusal, its message; it
// reports whether f was a refusal.
func WriteStatus(w *Writer, f Refusal) bool {
	msg := f.Error
	switch {
	case f.Closed:
		w.U8(statusClosed)
		if msg == "" {
			msg = ErrEpochClosed.Error()
		}
	case f.Expired:
		w.U8(statusExpired)
		if msg == "" {
			msg = ErrEpochExpired.Error()
		}
	case f.Future:
		w.U8(statusFuture)
		if msg == "" {
			msg = ErrEpochFuture.Error()
		}
	case msg != "":
		w.U8(statusError)
	default:
		w.U8(statusOK)
		return false
	}
	if len(msg) > maxErrorMessage {
		msg = msg[:maxErrorMessage]
	}
	w.Bytes16([]byte(msg))
	return true
}

// ReadStatus reads what WriteStatus wrote: ok for statusOK, otherwise the
// refusal. Unknown statuses and empty messages set r.Err.
func ReadStatus(r *Reader) (ok bool, f Refusal) {
	st := r.U8("status")
	if r.Err != nil {
		return false, f
	}
	switch st {
	case statusOK:
		return true, f
	case statusError, statusClosed, statusExpired, statusFuture:
		msg := string(r.Bytes16("error"))
		if r.Err == nil && (msg == "" || len(msg) > maxErrorMessage) {
			r.Err = Malformed("error message of %d bytes (want 1..%d)", len(msg), maxErrorMessage)
		}
		return false, Refusal{Error: msg, Closed: st == statusClosed, Expired: st == statusExpired, Future: st == statusFuture}
	}
	r.Err = Malformed("unknown status %d", st)
	return false, f
}
