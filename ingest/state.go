package ingest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/gofrs/flock"
)

// A device's state directory (Config.StateDir) holds, all mode 0600 in a
// 0700 directory, each file written with fsync of the file and the
// directory:
//
//	secret-EPOCH       the 32-byte user secret of EPOCH (star.UserSecret), created once
//	keys/*.key.pub     the route's public keys the device seals for (copied from Config.KeysDir)
//	randomness.pins    "EPOCH hex-key" lines: the epoch's VOPRF public key, pinned on first use
//	sent/APP_EPOCH_POLICY_K.log
//	                   what was sent under one release context: one line per
//	                   artifact instance ("i" and a 16-byte id) and per distinct
//	                   artifact ("p" and an id); ids are HMAC-SHA-256 under the
//	                   epoch's secret, never the artifact itself
//	lock               empty; flock(2)ed by the Device using the directory
//	                   (New refuses a second one with ErrStateInUse)
//	issuer.pins        with Config.Tokens: "EPOCH hex-fingerprint" lines, the
//	                   issuer's public keys of the epoch pinned on first use
//	                   (tokenclient.Client.PinFile); other keys are refused
//	identity.key       with Config.Tokens: the device's Ed25519 identity key, which
//	                   the operator enrolls at the issuer (keydir.EnsureIdentityKey)
//	arc-EPOCH          with Config.Tokens under FT_u: the ARC credential of EPOCH
//	                   with its secrets (arc.Credential), issued once per identity
//	                   and epoch
const (
	stateKeys       = "keys"
	stateSent       = "sent"
	statePins       = "randomness.pins"
	stateIssuerPins = "issuer.pins"
	stateSecretPf   = "secret-"
	stateIdentity   = IdentityKeyFile
	stateARCPf      = "arc-"
)

// IdentityKeyFile is the file of a device's Ed25519 identity key in its
// state directory (Config.Tokens; keydir.EnsureIdentityKey's format).
const IdentityKeyFile = "identity.key"

// epochName is the epoch syntax of the randomness service (1–64 of
// [A-Za-z0-9._-]); it also makes the epoch safe in a file name.
var epochName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// sendKey is one release context a device sends under: the aggregator
// counts and releases per (app, epoch, policy, k).
type sendKey struct {
	App, Epoch string
	Policy     star.Policy
	K          int
}

func (k sendKey) file() string {
	return fmt.Sprintf("%s_%s_%s_%d.log", k.App, k.Epoch, k.Policy, k.K)
}

// sentRecord is what one device sent under one sendKey: how many instances
// of each instance id, and which distinct artifacts.
type sentRecord struct {
	instances map[[16]byte]int
	primaries map[[16]byte]bool
	total     int
}

// store keeps a device's state: on disk (diskStore) or in memory
// (memStore, for replays and tests).
type store interface {
	// secret returns the user secret of epoch, creating it once.
	secret(epoch string) (*star.UserSecret, error)
	// sent returns the record of k (empty when nothing was sent).
	sent(k sendKey) (*sentRecord, error)
	// record durably appends the instance and primary ids to k's record
	// before the reports are published.
	record(k sendKey, inst, prim [][16]byte) error
	// pin returns the pinned VOPRF key of epoch, or nil.
	pin(epoch string) ([]byte, error)
	// setPin pins key for epoch.
	setPin(epoch string, key []byte) error
	// credential returns the encoded ARC credential of epoch, or nil.
	credential(epoch string) ([]byte, error)
	// setCredential durably keeps the encoded ARC credential of epoch.
	setCredential(epoch string, b []byte) error
}

// memStore is a store in memory: a restart forgets everything (a new
// secret counts the user again), which is what a replay of a log wants.
type memStore struct {
	mu      sync.Mutex
	secrets map[string]*star.UserSecret
	records map[sendKey]*sentRecord
	pins    map[string][]byte
	creds   map[string][]byte
}

func newMemStore() *memStore {
	return &memStore{secrets: map[string]*star.UserSecret{}, records: map[sendKey]*sentRecord{}, pins: map[string][]byte{},
		creds: map[string][]byte{}}
}

func (m *memStore) credential(epoch string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.creds[epoch], nil
}

func (m *memStore) setCredential(epoch string, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.creds[epoch] = append([]byte(nil), b...)
	return nil
}

func (m *memStore) secret(epoch string) (*star.UserSecret, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.secrets[epoch]; s != nil {
		return s, nil
	}
	s, err := star.NewUserSecret()
	if err != nil {
		return nil, err
	}
	m.secrets[epoch] = &s
	return &s, nil
}

func (m *memStore) sent(k sendKey) (*sentRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recordOf(k), nil
}

func (m *memStore) recordOf(k sendKey) *sentRecord {
	r := m.records[k]
	if r == nil {
		r = &sentRecord{instances: map[[16]byte]int{}, primaries: map[[16]byte]bool{}}
		m.records[k] = r
	}
	return r
}

func (m *memStore) record(k sendKey, inst, prim [][16]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recordOf(k).add(inst, prim)
	return nil
}

func (m *memStore) pin(epoch string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pins[epoch], nil
}

func (m *memStore) setPin(epoch string, key []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pins[epoch] = append([]byte(nil), key...)
	return nil
}

func (r *sentRecord) add(inst, prim [][16]byte) {
	for _, id := range inst {
		r.instances[id]++
		r.total++
	}
	for _, id := range prim {
		r.primaries[id] = true
	}
}

// diskStore is a store in a directory (layout above); one process at a
// time may use a directory.
type diskStore struct {
	dir     string
	mu      sync.Mutex
	secrets map[string]*star.UserSecret
	records map[sendKey]*sentRecord
}

// stateLock is the lock file of a state directory (flock(2), held by the
// device that uses the directory).
const stateLock = "lock"

// ErrStateInUse is wrapped by New when another process holds the state
// directory: two devices on one state would each send what the other
// already sent.
var ErrStateInUse = errors.New("device state directory in use by another process")

// lockStateDir takes the state directory's lock without waiting; errors
// wrap ErrStateInUse when another process holds it.
func lockStateDir(dir string) (*flock.Flock, error) {
	l := flock.New(filepath.Join(dir, stateLock), flock.SetPermissions(0o600))
	ok, err := l.TryLock()
	if err != nil {
		return nil, fmt.Errorf("device state %s: lock: %w", dir, err)
	}
	if !ok {
		return nil, fmt.Errorf("ingest: %w: %s (stop the other device, or give this one its own Config.StateDir)", ErrStateInUse, dir)
	}
	return l, nil
}

// unlockStateDir releases l (nil: nothing to release).
func unlockStateDir(l *flock.Flock) {
	if l != nil {
		_ = l.Unlock()
	}
}

// openDiskStore creates dir (0700) when missing.
func openDiskStore(dir string) (*diskStore, error) {
	for _, d := range []string{dir, filepath.Join(dir, stateSent), filepath.Join(dir, stateKeys)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("device state %s: %w (give Config.StateDir a writable directory)", d, err)
		}
	}
	return &diskStore{dir: dir, secrets: map[string]*star.UserSecret{}, records: map[sendKey]*sentRecord{}}, nil
}

func (d *diskStore) secret(epoch string) (*star.UserSecret, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.secrets[epoch]; s != nil {
		return s, nil
	}
	path := filepath.Join(d.dir, stateSecretPf+epoch)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		s, err := star.NewUserSecret()
		if err != nil {
			return nil, err
		}
		if err := writeFileSync(path, s[:]); err != nil {
			return nil, fmt.Errorf("device state: save the user secret of epoch %s: %w", epoch, err)
		}
		d.secrets[epoch] = &s
		return &s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("device state: read the user secret of epoch %s: %w", epoch, err)
	}
	var s star.UserSecret
	if len(b) != len(s) {
		return nil, fmt.Errorf("device state: %s holds %d bytes, not a 32-byte user secret: the file is damaged; a new secret would count this device twice in epoch %s, so wait for the next epoch or remove the file knowingly", path, len(b), epoch)
	}
	copy(s[:], b)
	d.secrets[epoch] = &s
	return &s, nil
}

func (d *diskStore) sent(k sendKey) (*sentRecord, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.load(k)
}

func (d *diskStore) load(k sendKey) (*sentRecord, error) {
	if r := d.records[k]; r != nil {
		return r, nil
	}
	r := &sentRecord{instances: map[[16]byte]int{}, primaries: map[[16]byte]bool{}}
	path := filepath.Join(d.dir, stateSent, k.file())
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		d.records[k] = r
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("device state: %w", err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i+1 < len(data) {
		// a torn last line (a crash while appending, before any publish):
		// drop it, so the next append starts on a line of its own
		data = data[:i+1]
		if err := os.Truncate(path, int64(i+1)); err != nil {
			return nil, fmt.Errorf("device state: repair %s: %w", path, err)
		}
	}
	for n, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		kind, hx, ok := strings.Cut(line, " ")
		raw, err := hex.DecodeString(hx)
		if !ok || err != nil || len(raw) != 16 || (kind != "i" && kind != "p") {
			return nil, fmt.Errorf("device state: %s line %d is damaged: restore the file or remove it knowingly (then this device may send its artifacts of epoch %s again)", path, n+1, k.Epoch)
		}
		var id [16]byte
		copy(id[:], raw)
		if kind == "i" {
			r.add([][16]byte{id}, nil)
		} else {
			r.add(nil, [][16]byte{id})
		}
	}
	d.records[k] = r
	return r, nil
}

func (d *diskStore) record(k sendKey, inst, prim [][16]byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.load(k)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, id := range inst {
		fmt.Fprintf(&b, "i %x\n", id)
	}
	for _, id := range prim {
		fmt.Fprintf(&b, "p %x\n", id)
	}
	path := filepath.Join(d.dir, stateSent, k.file())
	if err := appendSync(path, b.Bytes()); err != nil {
		return fmt.Errorf("device state: record what is about to be sent (%s): %w; nothing was sent", path, err)
	}
	r.add(inst, prim)
	return nil
}

func (d *diskStore) pin(epoch string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(d.dir, statePins))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("device state: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == epoch {
			k, err := hex.DecodeString(f[1])
			if err != nil {
				return nil, fmt.Errorf("device state: %s: bad key for epoch %s: %w", statePins, epoch, err)
			}
			return k, nil
		}
	}
	return nil, nil
}

func (d *diskStore) setPin(epoch string, key []byte) error {
	return appendSync(filepath.Join(d.dir, statePins), fmt.Appendf(nil, "%s %x\n", epoch, key))
}

func (d *diskStore) credential(epoch string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(d.dir, stateARCPf+epoch))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("device state: read the ARC credential of epoch %s: %w", epoch, err)
	}
	return b, nil
}

func (d *diskStore) setCredential(epoch string, b []byte) error {
	if err := writeFileSync(filepath.Join(d.dir, stateARCPf+epoch), b); err != nil {
		return fmt.Errorf("device state: save the ARC credential of epoch %s: %w", epoch, err)
	}
	return nil
}

// writeFileSync writes path with data atomically (infra/atomicfile: a synced
// temporary file renamed over it) and syncs its directory, so the content
// survives a crash once it returns.
func writeFileSync(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// appendSync appends data to path (creating it 0600) and syncs it.
func appendSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	st, _ := f.Stat()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if st != nil && st.Size() == 0 {
		return syncDir(filepath.Dir(path))
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// instanceIDs returns, for each artifact, its instance id under secret and
// k: HMAC-SHA-256(secret, "crowdlog-v1 sent" ‖ context ‖ primary ‖
// secondary ‖ time ‖ n)[:16], where n counts the earlier artifacts of arts
// with equal (Primary, Secondary, Time). Equal artifacts are one instance
// per occurrence: a call with the same artifact twice sends two; a later
// call with it once again sends none.
func instanceIDs(secret *star.UserSecret, k sendKey, arts []apps.Artifact) [][16]byte {
	type ident struct {
		p, s string
		t    int64
	}
	seen := map[ident]uint32{}
	out := make([][16]byte, len(arts))
	for i, a := range arts {
		id := ident{a.Primary, a.Secondary, a.Time.UnixNano()}
		n := seen[id]
		seen[id] = n + 1
		m := hmac.New(sha256.New, secret[:])
		writeContext(m, "crowdlog-v1 sent", k)
		writeField(m, a.Primary)
		writeField(m, a.Secondary)
		var tail [12]byte
		binary.BigEndian.PutUint64(tail[:8], uint64(id.t))
		binary.BigEndian.PutUint32(tail[8:], n)
		m.Write(tail[:])
		copy(out[i][:], m.Sum(nil))
	}
	return out
}

// primaryID is the id of a distinct artifact in k's record.
func primaryID(secret *star.UserSecret, k sendKey, primary string) [16]byte {
	m := hmac.New(sha256.New, secret[:])
	writeContext(m, "crowdlog-v1 sent-primary", k)
	writeField(m, primary)
	var id [16]byte
	copy(id[:], m.Sum(nil))
	return id
}

func writeContext(w io.Writer, label string, k sendKey) {
	writeField(w, label)
	writeField(w, k.App)
	writeField(w, k.Epoch)
	var b [5]byte
	b[0] = byte(k.Policy)
	binary.BigEndian.PutUint32(b[1:], uint32(k.K))
	w.Write(b[:])
}

func writeField(w io.Writer, s string) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(s)))
	w.Write(n[:])
	io.WriteString(w, s)
}
