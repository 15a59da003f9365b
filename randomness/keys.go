package randomness

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	circloprf "github.com/cloudflare/circl/oprf"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/oprf"
)

// Key directory layout (epoch key lifecycle). One
// directory, shared by every randomness process of a deployment, holds:
//
//	EPOCH.key        the epoch's OPRF private key: the 32-byte scalar
//	                 (RFC 9497 SerializeScalar), mode 0600, random
//	                 (circl circloprf.GenerateKey), written once: by
//	                 OpenEpoch (named epochs) or on the first request of
//	                 a scheduled epoch; never for a client-named epoch
//	EPOCH.destroyed  tombstone of a destroyed key (empty): never regenerated
//	closed           closed epochs, one "EPOCH RFC3339-time" line each
//	~tmp-*           a key being written (removed by Sweep when stale)
//
// Epoch names cannot contain '~' or '/', so no epoch's files collide with
// the temporary or closed files.
const (
	keySuffix       = ".key"
	tombstoneSuffix = ".destroyed"
	closedFile      = "closed"
	tmpPrefix       = "~tmp-"
)

// Lifecycle defaults.
const (
	// DefaultGrace is how long a closed epoch's key survives its close, and
	// a scheduled epoch its end, before the key is destroyed.
	DefaultGrace = time.Hour
	// DefaultSkew is how far ahead of the service's clock a scheduled
	// epoch may start and still be served (client clocks run ahead).
	DefaultSkew = 5 * time.Minute
	// staleTmp is the age after which a temporary key file is an orphan of
	// a crashed writer.
	staleTmp = time.Minute
)

// ScheduleLayout is protocol.ScheduleLayout: the time layout of a
// scheduled epoch's name.
const ScheduleLayout = protocol.ScheduleLayout

// ScheduleEpoch is protocol.ScheduleEpoch: the name of the scheduled
// epoch of the given length that contains t (START-LENGTH).
func ScheduleEpoch(t time.Time, length time.Duration) string {
	return protocol.ScheduleEpoch(t, length)
}

// ParseScheduleEpoch is protocol.ParseScheduleEpoch.
func ParseScheduleEpoch(name string, length time.Duration) (time.Time, error) {
	return protocol.ParseScheduleEpoch(name, length)
}

// Options configure Keys. The zero value is named-epoch mode with
// DefaultGrace and the system clock.
type Options struct {
	// EpochLength > 0 selects schedule mode: epochs are ScheduleEpoch
	// names of this length (a whole number of seconds), a request for an
	// epoch starting more than Skew after now is refused (ErrEpochFuture),
	// and an epoch whose end plus Grace has passed is refused
	// (ErrEpochExpired) and its key destroyed; the schedule opens its
	// epochs (a key is created on an epoch's first request). 0 is
	// named-epoch mode: any valid name (ValidEpoch), no clock, for log
	// replays with historic epochs; an operator opens each epoch
	// (OpenEpoch) before clients use it, and it ends only by Close.
	EpochLength time.Duration
	// Grace is how long a key survives its epoch's Close (and, in schedule
	// mode, its end) before it is destroyed. 0 means DefaultGrace; a
	// negative value means none (destroyed at the next Sweep).
	Grace time.Duration
	// Skew is the clock-skew allowance for future epochs in schedule
	// mode. 0 means DefaultSkew; negative means none.
	Skew time.Duration
	// Now is the clock; nil means time.Now. Tests inject one.
	Now func() time.Time
	// LegacyClosed, when set, is the closed-epochs file of the older seed
	// layout (keys/randomness.seed.closed): its epochs are copied into the
	// key directory's closed file at Open, so an upgrade keeps them closed.
	LegacyClosed string
	// Logger receives lifecycle events (key created, destroyed; never key
	// bytes). nil means slog.Default().
	Logger *slog.Logger
}

// Keys holds one OPRF key per epoch (RFC 9497 verifiable mode over
// ristretto255), stored in a key directory shared by every randomness
// process of a deployment. A key is created at random — in named-epoch
// mode only by an operator (OpenEpoch, `crowdlog randomness open-epoch`),
// in schedule mode by the schedule on the epoch's first request, never by a
// client naming an epoch (Lookup refuses unopened named epochs with
// ErrEpochNotOpen: no client can fill the directory with key files) — and
// written atomically with first-writer-wins semantics (a hard link from a
// fully written temporary file: processes racing on a new epoch all end up
// with the file that won). It is destroyed — overwritten, removed and
// replaced by a tombstone — once the epoch is closed (Close) or, in
// schedule mode, has ended, plus a grace period. A closed, expired or
// destroyed epoch is never given a new key: forward secrecy for the
// artifacts that were still pending when it closed (docs/threat-model.md).
// Keys is safe for concurrent use; key bytes are never logged.
type Keys struct {
	dir    string
	o      Options
	log    *slog.Logger
	mu     sync.Mutex
	byEp   map[string]*circloprf.PrivateKey
	closed map[string]time.Time // epoch → when it was closed
	stamp  fileStamp            // of the closed file when last read
}

type fileStamp struct {
	size  int64
	mtime time.Time
}

// Open opens (creating, mode 0700) the key directory dir, reads its closed
// epochs and imports o.LegacyClosed. It destroys nothing: Sweep does (and
// Service.Run calls it), so a tool that only closes an epoch never applies
// its own grace period. Errors for an unusable directory, a bad EpochLength
// or an unreadable closed file.
func Open(dir string, o Options) (*Keys, error) {
	if o.EpochLength < 0 || o.EpochLength%time.Second != 0 {
		return nil, fmt.Errorf("randomness: epoch length %s: use 0 (named epochs) or a positive whole number of seconds, e.g. 24h", o.EpochLength)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	switch {
	case o.Grace == 0:
		o.Grace = DefaultGrace
	case o.Grace < 0:
		o.Grace = 0
	}
	switch {
	case o.Skew == 0:
		o.Skew = DefaultSkew
	case o.Skew < 0:
		o.Skew = 0
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("randomness: key directory: %w", err)
	}
	k := &Keys{dir: dir, o: o, log: log, byEp: map[string]*circloprf.PrivateKey{}, closed: map[string]time.Time{}}
	k.mu.Lock()
	err := k.reloadClosed()
	if err == nil && o.LegacyClosed != "" {
		err = k.importLegacy(o.LegacyClosed)
	}
	k.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return k, nil
}

// Dir returns the key directory.
func (k *Keys) Dir() string { return k.dir }

// EpochLength returns the schedule's epoch length; 0 in named-epoch mode.
func (k *Keys) EpochLength() time.Duration { return k.o.EpochLength }

// SpendTTL is how long the spent-token store must keep a spend (its
// bucket's TTL, spent.Options.TTL): 0, forever, in named-epoch mode, whose
// epochs end only when an operator closes them; in schedule mode twice the
// longest a token of one epoch can still be spent, 2·(EpochLength + Grace
// + Skew). Past that the epoch is refused (ErrEpochExpired) before any of
// its tokens is looked at, so a forgotten spend cannot be spent again, and
// the store stops growing with the epochs.
func (k *Keys) SpendTTL() time.Duration {
	if k.o.EpochLength == 0 {
		return 0
	}
	return 2 * (k.o.EpochLength + k.o.Grace + k.o.Skew)
}

// Current returns the scheduled epoch containing the clock's now; "" in
// named-epoch mode.
func (k *Keys) Current() string {
	if k.o.EpochLength == 0 {
		return ""
	}
	return ScheduleEpoch(k.o.Now(), k.o.EpochLength)
}

// KeyFile returns the path of epoch's key file in the key directory dir
// (for tools that read keys offline, e.g. the attack suite).
func KeyFile(dir, epoch string) string { return filepath.Join(dir, epoch+keySuffix) }

// ReadKeyFile reads an epoch key file. Errors say which file is bad and
// never include key bytes; a missing file wraps fs.ErrNotExist.
func ReadKeyFile(path string) (*circloprf.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("randomness: epoch key: %w", err)
	}
	sk := new(circloprf.PrivateKey)
	if len(b) != protocol.ScalarSize || sk.UnmarshalBinary(oprf.OPRFSuite, b) != nil {
		return nil, fmt.Errorf("randomness: epoch key file %s is not a %d-byte OPRF private key (damaged or half-destroyed: close the epoch)", path, protocol.ScalarSize)
	}
	// circl computes the public key lazily on first use; do it now, before
	// concurrent requests share sk (cf. onion.KeyPair.Prepare)
	sk.Public()
	return sk, nil
}

// reloadClosed re-reads the closed file when its size or mtime changed, so
// a Close by another process sharing the directory takes effect. Callers
// hold mu.
func (k *Keys) reloadClosed() error {
	path := filepath.Join(k.dir, closedFile)
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("randomness: closed-epochs file: %w", err)
	}
	stamp := fileStamp{st.Size(), st.ModTime()}
	if stamp == k.stamp {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("randomness: read closed-epochs file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		// a line without a (valid) time is closed since forever: its key
		// is due for destruction at once (safe side)
		var at time.Time
		if len(fields) > 1 {
			at, _ = time.Parse(time.RFC3339, fields[1])
		}
		if old, ok := k.closed[fields[0]]; !ok || at.Before(old) {
			k.closed[fields[0]] = at
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("randomness: read closed-epochs file: %w", err)
	}
	k.stamp = stamp
	return nil
}

// importLegacy copies the epochs of an older closed-epochs file (one name a
// line) into the closed file. Callers hold mu.
func (k *Keys) importLegacy(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("randomness: legacy closed-epochs file: %w", err)
	}
	var at time.Time
	if st, err := os.Stat(path); err == nil {
		at = st.ModTime()
	}
	for _, line := range strings.Split(string(b), "\n") {
		e := strings.TrimSpace(line)
		if _, done := k.closed[e]; e == "" || done || !ValidEpoch(e) {
			continue
		}
		if err := k.appendClosed(e, at); err != nil {
			return err
		}
	}
	return nil
}

// appendClosed appends "epoch time" to the closed file (fsynced) and
// records it. Callers hold mu.
func (k *Keys) appendClosed(epoch string, at time.Time) error {
	f, err := os.OpenFile(filepath.Join(k.dir, closedFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("randomness: close epoch %s: %w", epoch, err)
	}
	if _, err := fmt.Fprintf(f, "%s %s\n", epoch, at.UTC().Format(time.RFC3339)); err != nil {
		f.Close()
		return fmt.Errorf("randomness: close epoch %s: %w", epoch, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("randomness: close epoch %s: %w", epoch, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("randomness: close epoch %s: %w", epoch, err)
	}
	k.closed[epoch] = at
	delete(k.byEp, epoch)
	return nil
}

// Close marks epoch closed now: it is appended (fsynced) to the closed file
// and from then on Epoch refuses it (protocol.ErrEpochClosed), in this
// process at once and in processes sharing the directory at their next
// request. Its key is destroyed by the first Sweep after the grace period.
// Idempotent: closing again keeps the first close time.
func (k *Keys) Close(epoch string) error {
	if !ValidEpoch(epoch) {
		return fmt.Errorf("invalid epoch name %q", epoch)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.reloadClosed(); err != nil {
		return err
	}
	if _, ok := k.closed[epoch]; ok {
		return nil
	}
	if err := k.appendClosed(epoch, k.o.Now()); err != nil {
		return err
	}
	k.log.Info("randomness: epoch closed; its key will be destroyed after the grace period", "epoch", epoch, "grace", k.o.Grace)
	return nil
}

// Closed reports whether epoch was closed with Close (scheduled epochs that
// merely expired are not listed; see Epoch).
func (k *Keys) Closed(epoch string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reloadClosed()
	_, ok := k.closed[epoch]
	return ok
}

// window returns a scheduled epoch's start and end; errors for a name that
// is not an epoch of the schedule.
func (k *Keys) window(epoch string) (start, end time.Time, err error) {
	start, err = ParseScheduleEpoch(epoch, k.o.EpochLength)
	if err != nil {
		return start, end, fmt.Errorf("invalid epoch name: %w", err)
	}
	return start, start.Add(k.o.EpochLength), nil
}

// ErrEpochNotOpen is wrapped when a named epoch was never opened (it has no
// key file): in named-epoch mode only an operator creates epochs
// (Keys.OpenEpoch, `crowdlog randomness open-epoch`), so a client cannot
// make the service create keys by naming new epochs. It is
// protocol.ErrEpochNotOpen, which the client's refusal decoding wraps.
var ErrEpochNotOpen = protocol.ErrEpochNotOpen

// OpenEpoch opens a named epoch: it creates the epoch's key file
// (EPOCH.key, 32-byte RFC 9497 ristretto255 scalar, mode 0600) unless it
// exists, and returns the epoch's 32-byte encoded OPRF public key (what
// clients pin; publish it out of band to detect a split view) and whether
// this call created the key file (false: the epoch was open). This is the
// operator's action (`crowdlog randomness open-epoch`, `crowdlog run` for
// its own epoch); the service never calls it for a request. Idempotent:
// opening an open epoch returns its key unchanged, also across processes
// sharing the directory. Errors: an invalid name (or, in schedule mode, a
// name not of the schedule); protocol.ErrEpochClosed for a closed or
// destroyed epoch (never reopened); in schedule mode ErrEpochFuture and
// ErrEpochExpired as Lookup; I/O errors of the key directory.
func (k *Keys) OpenEpoch(epoch string) (pub []byte, created bool, err error) {
	key, created, err := k.get(epoch, true)
	if err != nil {
		return nil, false, err
	}
	pub, err = key.Public().MarshalBinary()
	return pub, created, err
}

// Lookup returns the OPRF private key of an open epoch; it is what the
// service uses for every request. In named-epoch mode an epoch is open once
// an operator opened it (OpenEpoch, in this or another process sharing the
// directory); a name without a key file is refused with ErrEpochNotOpen and
// nothing is written. In schedule mode the schedule opens epochs: the key
// of an epoch within its window is created on first use. Errors: an invalid
// name (or, in schedule mode, a name not of the schedule); ErrEpochNotOpen;
// protocol.ErrEpochClosed for a closed or destroyed epoch; in schedule mode
// protocol.ErrEpochFuture for an epoch starting more than Skew from now and
// protocol.ErrEpochExpired for one whose end plus Grace has passed (its key
// is destroyed on the way); I/O errors of the key directory.
func (k *Keys) Lookup(epoch string) (*circloprf.PrivateKey, error) {
	key, _, err := k.get(epoch, k.o.EpochLength > 0)
	return key, err
}

// Epoch returns the OPRF private key of an epoch, opening it (creating its
// key) when needed: OpenEpoch for tools that hold the key directory and need
// the private key (tests, the attack suite's key-directory thief). It is an
// operator action: code answering a client must use Lookup, which never
// creates a named epoch. Errors like OpenEpoch.
func (k *Keys) Epoch(epoch string) (*circloprf.PrivateKey, error) {
	key, _, err := k.get(epoch, true)
	return key, err
}

// get returns epoch's key after the name, close and schedule checks; when
// the key file is missing it creates it if create is set and refuses with
// ErrEpochNotOpen otherwise. created reports a new key file.
func (k *Keys) get(epoch string, create bool) (key *circloprf.PrivateKey, created bool, err error) {
	if !ValidEpoch(epoch) {
		return nil, false, fmt.Errorf("invalid epoch name %q (use 1-64 letters, digits, '.', '_' or '-')", epoch)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.reloadClosed(); err != nil {
		return nil, false, err
	}
	if _, ok := k.closed[epoch]; ok {
		return nil, false, k.closedErr(epoch)
	}
	if k.o.EpochLength > 0 {
		start, end, err := k.window(epoch)
		if err != nil {
			return nil, false, err
		}
		now := k.o.Now()
		if start.After(now.Add(k.o.Skew)) {
			return nil, false, fmt.Errorf("%w: epoch %s starts at %s, the service's clock says %s (current epoch: %s); check the client's clock and epoch name",
				protocol.ErrEpochFuture, epoch, start.Format(time.RFC3339), now.UTC().Format(time.RFC3339), ScheduleEpoch(now, k.o.EpochLength))
		}
		if !now.Before(end.Add(k.o.Grace)) {
			delete(k.byEp, epoch)
			if err := k.destroy(epoch); err != nil {
				k.log.Error("randomness: destroy expired epoch key", "epoch", epoch, "err", err)
			}
			return nil, false, fmt.Errorf("%w: epoch %s ended at %s (grace %s): its key is destroyed; seal under the current epoch %s",
				protocol.ErrEpochExpired, epoch, end.Format(time.RFC3339), k.o.Grace, ScheduleEpoch(now, k.o.EpochLength))
		}
	}
	if key, ok := k.byEp[epoch]; ok {
		return key, false, nil
	}
	key, created, err = k.loadOrCreate(epoch, create)
	if err != nil {
		return nil, false, err
	}
	k.byEp[epoch] = key
	return key, created, nil
}

func (k *Keys) notOpenErr(epoch string) error {
	return fmt.Errorf("%w: epoch %s has no key; named epochs are opened by an operator (crowdlog randomness open-epoch --keys DIR --epoch %s), never by a request: check the epoch name or ask the operator to open it",
		ErrEpochNotOpen, epoch, epoch)
}

func (k *Keys) closedErr(epoch string) error {
	return fmt.Errorf("%w: epoch %s no longer gives out randomness (reports for it would never be aggregated)", protocol.ErrEpochClosed, epoch)
}

// loadOrCreate reads epoch's key file or, when create is set, creates it: a
// fresh key written to a temporary file (0600, fsynced) and hard-linked to
// EPOCH.key, which fails when another process linked first — then that
// process's key is read. Without create a missing file is ErrEpochNotOpen
// and nothing is written. A tombstone refuses the epoch. created reports a
// key file this call linked. Callers hold mu.
func (k *Keys) loadOrCreate(epoch string, create bool) (key *circloprf.PrivateKey, created bool, err error) {
	path := KeyFile(k.dir, epoch)
	tomb := filepath.Join(k.dir, epoch+tombstoneSuffix)
	if _, err := os.Stat(tomb); err == nil {
		return nil, false, k.closedErr(epoch)
	}
	key, err = ReadKeyFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	if !create {
		return nil, false, k.notOpenErr(epoch)
	}
	fresh, err := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	if err != nil {
		return nil, false, err
	}
	fresh.Public() // fill circl's lazy cache before sharing (see ReadKeyFile)
	raw, err := fresh.MarshalBinary()
	if err != nil {
		return nil, false, err
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	tmp := filepath.Join(k.dir, tmpPrefix+hex.EncodeToString(nonce[:]))
	if err := writeSynced(tmp, raw); err != nil {
		os.Remove(tmp)
		return nil, false, fmt.Errorf("randomness: write epoch key: %w", err)
	}
	lerr := os.Link(tmp, path)
	if lerr == nil {
		os.Remove(tmp) // the key lives on under path: unlink only
	} else {
		overwriteRemove(tmp)
	}
	switch {
	case lerr == nil:
		syncDir(k.dir)
		// a Close + destroy by another process may have raced with us
		// between the checks above and the link: never serve then
		if _, err := os.Stat(tomb); err == nil {
			overwriteRemove(path)
			return nil, false, k.closedErr(epoch)
		}
		k.log.Info("randomness: epoch key created", "epoch", epoch, "file", path)
		return fresh, true, nil
	case errors.Is(lerr, fs.ErrExist):
		key, err = ReadKeyFile(path) // another process won the race
		return key, false, err
	default:
		return nil, false, fmt.Errorf("randomness: store epoch key (the key directory must support hard links): %w", lerr)
	}
}

// PublicKey returns the 32-byte encoded OPRF public key of an open epoch
// (what clients pin); like Lookup it never opens a named epoch. Errors like
// Lookup.
func (k *Keys) PublicKey(epoch string) ([]byte, error) {
	key, err := k.Lookup(epoch)
	if err != nil {
		return nil, err
	}
	return key.Public().MarshalBinary()
}

// Sweep destroys every key that is due: of epochs closed at least Grace
// ago, with a tombstone (a destruction interrupted by a crash), and in
// schedule mode of epochs whose end plus Grace has passed; it also removes
// temporary files orphaned by crashed writers. It returns the epochs whose
// keys it destroyed. Service.Run calls it at start and periodically;
// several processes may sweep one directory at once (give them the same
// Grace: the shortest wins).
func (k *Keys) Sweep() ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.reloadClosed(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		return nil, fmt.Errorf("randomness: key directory: %w", err)
	}
	now := k.o.Now()
	var destroyed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTmp {
				k.removeTmp(filepath.Join(k.dir, name), info, entries)
			}
			continue
		}
		epoch, ok := strings.CutSuffix(name, keySuffix)
		if !ok {
			continue
		}
		if !k.due(epoch, now) {
			continue
		}
		delete(k.byEp, epoch)
		if err := k.destroy(epoch); err != nil {
			errs = append(errs, err)
			continue
		}
		destroyed = append(destroyed, epoch)
	}
	// keys of closed epochs still cached but due (their file already gone)
	for epoch := range k.byEp {
		if k.due(epoch, now) {
			delete(k.byEp, epoch)
		}
	}
	return destroyed, errors.Join(errs...)
}

// removeTmp removes an orphaned temporary key file. A writer that crashed
// between linking it to EPOCH.key and unlinking it left a second name of a
// live key: that one is only unlinked; others are overwritten first.
func (k *Keys) removeTmp(path string, info fs.FileInfo, entries []fs.DirEntry) {
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), keySuffix) {
			continue
		}
		if ki, err := e.Info(); err == nil && os.SameFile(info, ki) {
			os.Remove(path)
			return
		}
	}
	overwriteRemove(path)
}

// due reports whether epoch's key must be destroyed at now. Callers hold mu.
func (k *Keys) due(epoch string, now time.Time) bool {
	if at, ok := k.closed[epoch]; ok && !now.Before(at.Add(k.o.Grace)) {
		return true
	}
	if _, err := os.Stat(filepath.Join(k.dir, epoch+tombstoneSuffix)); err == nil {
		return true
	}
	if k.o.EpochLength > 0 {
		if _, end, err := k.window(epoch); err == nil && !now.Before(end.Add(k.o.Grace)) {
			return true
		}
	}
	return false
}

// destroy writes epoch's tombstone, then overwrites its key file with
// zeros, fsyncs and removes it. The tombstone comes first, so a crash in
// between leaves an epoch that is refused and swept again. Overwriting
// cannot reach copies a copy-on-write filesystem or an SSD keeps; see
// docs/operations.md. Callers hold mu.
func (k *Keys) destroy(epoch string) error {
	tomb := filepath.Join(k.dir, epoch+tombstoneSuffix)
	if err := writeSynced(tomb, nil); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("randomness: tombstone of epoch %s: %w", epoch, err)
	}
	path := KeyFile(k.dir, epoch)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := overwriteRemove(path); err != nil {
		return fmt.Errorf("randomness: destroy key of epoch %s: %w", epoch, err)
	}
	syncDir(k.dir)
	k.log.Info("randomness: epoch key destroyed", "epoch", epoch)
	return nil
}

// writeSynced creates path exclusively (mode 0600), writes b and fsyncs.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// overwriteRemove overwrites a file's bytes with zeros in place, fsyncs and
// removes it. A file already gone is not an error.
func overwriteRemove(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		if _, err := f.WriteAt(make([]byte, st.Size()), 0); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// syncDir fsyncs a directory so that links and removals are durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
