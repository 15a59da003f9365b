package randomness

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/oprf"
)

// clock is an injectable clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func open(t *testing.T, dir string, o Options) *Keys {
	t.Helper()
	k, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// TestKeyFiles: an epoch key is a 0600 file in a 0700 directory, holds the
// private key whose public half the service publishes, and several Keys
// instances (processes) racing on a new epoch agree on one key: one file,
// no temporary files left behind.
func TestKeyFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "randomness.keys")
	const procs = 8
	ks := make([]*Keys, procs)
	for i := range ks {
		ks[i] = open(t, dir, Options{})
	}
	pubs := make([][]byte, procs)
	var wg sync.WaitGroup
	for i := range ks {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var err error
			if pubs[i], _, err = ks[i].OpenEpoch("2006-03"); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	for i := range pubs {
		if !bytes.Equal(pubs[i], pubs[0]) {
			t.Fatalf("instance %d has another key for the same epoch", i)
		}
	}
	// ground truth: the one file on disk
	sk, err := ReadKeyFile(KeyFile(dir, "2006-03"))
	if err != nil {
		t.Fatal(err)
	}
	if pub, _ := sk.Public().MarshalBinary(); !bytes.Equal(pub, pubs[0]) {
		t.Fatal("served public key is not the stored key's")
	}
	st, err := os.Stat(KeyFile(dir, "2006-03"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("key directory mode %v, want 0700", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("key directory holds %v, want only 2006-03.key", names)
	}
	other, _, _ := ks[0].OpenEpoch("2006-04")
	if bytes.Equal(other, pubs[0]) {
		t.Fatal("two epochs share a key")
	}

	// orphans of crashed writers: a temporary name still linked to a live
	// key is only unlinked (the key survives), an unlinked one is removed
	linked, orphan := filepath.Join(dir, tmpPrefix+"linked"), filepath.Join(dir, tmpPrefix+"orphan")
	if err := os.Link(KeyFile(dir, "2006-03"), linked); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(orphan, make([]byte, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{linked, orphan} {
		os.Chtimes(p, old, old)
	}
	if _, err := ks[1].Sweep(); err != nil {
		t.Fatal(err)
	}
	if exists(linked) || exists(orphan) {
		t.Fatal("stale temporary files must be removed")
	}
	if sk, err := ReadKeyFile(KeyFile(dir, "2006-03")); err != nil {
		t.Fatalf("removing a temporary name damaged the live key: %v", err)
	} else if pub, _ := sk.Public().MarshalBinary(); !bytes.Equal(pub, pubs[0]) {
		t.Fatal("live key changed")
	}
}

// TestDestroyAfterGrace: a closed epoch's key file survives the grace
// period and is gone after it (tombstone left); the epoch stays refused in
// every instance, across a restart, and even when the closed file is lost:
// its key is never regenerated.
func TestDestroyAfterGrace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "randomness.keys")
	c := &clock{t: time.Date(2006, 3, 31, 12, 0, 0, 0, time.UTC)}
	o := Options{Grace: time.Hour, Now: c.now}
	k := open(t, dir, o)
	peer := open(t, dir, o)
	pub, _, err := k.OpenEpoch("2006-03")
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := peer.PublicKey("2006-03"); !bytes.Equal(p, pub) {
		t.Fatal("peer disagrees")
	}
	keyFile := KeyFile(dir, "2006-03")
	if err := k.Close("2006-03"); err != nil {
		t.Fatal(err)
	}
	c.set(c.now().Add(time.Hour - time.Second))
	if gone, _ := peer.Sweep(); len(gone) != 0 || !exists(keyFile) {
		t.Fatalf("destroyed within the grace period: %v", gone)
	}
	c.set(c.now().Add(time.Second))
	if gone, err := peer.Sweep(); err != nil || len(gone) != 1 || gone[0] != "2006-03" {
		t.Fatalf("sweep after grace destroyed %v (%v), want [2006-03]", gone, err)
	}
	if exists(keyFile) || !exists(filepath.Join(dir, "2006-03"+tombstoneSuffix)) {
		t.Fatal("after the grace period the key file must be gone and a tombstone left")
	}
	for name, inst := range map[string]*Keys{"closer": k, "peer": peer, "restarted": open(t, dir, o)} {
		if _, err := inst.Epoch("2006-03"); !errors.Is(err, protocol.ErrEpochClosed) {
			t.Fatalf("%s: destroyed epoch gives %v, want ErrEpochClosed", name, err)
		}
	}
	if _, _, err := open(t, dir, o).OpenEpoch("2006-03"); !errors.Is(err, protocol.ErrEpochClosed) {
		t.Fatalf("the operator reopening a destroyed epoch: %v, want ErrEpochClosed", err)
	}
	if exists(keyFile) {
		t.Fatal("a refused epoch was given a new key file")
	}
	// the closed file lost (operator error): the tombstone still refuses
	if err := os.Remove(filepath.Join(dir, closedFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, dir, o).Epoch("2006-03"); !errors.Is(err, protocol.ErrEpochClosed) || exists(keyFile) {
		t.Fatalf("tombstoned epoch without closed file: %v (file regenerated: %v)", err, exists(keyFile))
	}
	if _, err := k.Epoch("2006-04"); err != nil {
		t.Fatalf("an open epoch is refused: %v", err)
	}
}

// TestLegacyClosedImported: epochs closed under the older seed layout stay
// closed after the upgrade.
func TestLegacyClosedImported(t *testing.T) {
	root := t.TempDir()
	legacy := filepath.Join(root, "randomness.seed.closed")
	if err := os.WriteFile(legacy, []byte("2006-02\n2006-03\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "randomness.keys")
	k := open(t, dir, Options{LegacyClosed: legacy})
	for _, ep := range []string{"2006-02", "2006-03"} {
		if _, err := k.Epoch(ep); !errors.Is(err, protocol.ErrEpochClosed) {
			t.Fatalf("legacy closed %s: %v", ep, err)
		}
	}
	if !open(t, dir, Options{}).Closed("2006-02") {
		t.Fatal("import must be persisted in the key directory")
	}
}

// scheduleStart is the ground truth of a scheduled epoch's start: unix
// seconds rounded down to a multiple of the length.
func scheduleStart(t time.Time, length time.Duration) time.Time {
	l := int64(length / time.Second)
	s := t.Unix()
	q := s / l
	if s%l != 0 && s < 0 {
		q--
	}
	return time.Unix(q*l, 0).UTC()
}

// TestScheduleNames: ScheduleEpoch names the absolute UTC start, and
// ParseScheduleEpoch inverts it and refuses misaligned or foreign names.
func TestScheduleNames(t *testing.T) {
	if got := ScheduleEpoch(time.Date(2006, 3, 1, 13, 5, 0, 0, time.UTC), 24*time.Hour); got != "20060301T000000Z-24h" {
		t.Fatalf("documented example: %s", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, length := range []time.Duration{24 * time.Hour, time.Hour, 90 * time.Minute, 45 * time.Second, 7 * 24 * time.Hour} {
		for i := 0; i < 200; i++ {
			at := time.Unix(r.Int64N(4e9)-1e9, 0)
			name := ScheduleEpoch(at, length)
			start, err := ParseScheduleEpoch(name, length)
			want := scheduleStart(at, length)
			if err != nil || !start.Equal(want) || start.After(at) || !at.Before(start.Add(length)) {
				t.Fatalf("%s at %s: %s → %s (%v), want start %s", length, at.UTC(), name, start, err, want)
			}
		}
	}
	for _, bad := range []string{"all", "20060301T010000Z-24h", "20060301T000000Z-1h", "2006-03-01-24h", "20060301T000000Z"} {
		if _, err := ParseScheduleEpoch(bad, 24*time.Hour); err == nil {
			t.Errorf("%q accepted as a 24h epoch", bad)
		}
	}
}

// TestSchedule: with absolute 24h epochs, the current epoch is served and
// is the same across a restart at the same clock or later within the day;
// an epoch starting beyond the skew allowance is refused as future, and one
// whose end plus grace passed is refused as expired with its key destroyed
// — over NATS the client gets errors wrapping ErrEpochFuture and
// ErrEpochExpired. Names outside the schedule are refused.
func TestSchedule(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.dir, "randomness.keys")
	day := 24 * time.Hour
	c := &clock{t: time.Date(2006, 3, 1, 13, 0, 0, 0, time.UTC)}
	o := Options{EpochLength: day, Grace: time.Hour, Skew: 5 * time.Minute, Now: c.now}
	keys, stop := e.serve(dir, o)
	defer func() { stop() }()

	cur := keys.Current()
	if cur != ScheduleEpoch(c.now(), day) || cur != "20060301T000000Z-24h" {
		t.Fatalf("current epoch %q", cur)
	}
	client := &oprfclient.Client{NC: e.nc}
	in := [][]byte{oprf.OPRFInput("query", cur, "a")}
	w1, err := client.Evaluate(e.ctx, cur, in)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := keys.PublicKey(cur)

	// "restart" at the same clock, and one later the same day: same epoch, same key
	for _, at := range []time.Time{c.now(), c.now().Add(10 * time.Hour)} {
		c.set(at)
		re := open(t, dir, o)
		if re.Current() != cur {
			t.Fatalf("after a restart at %s the current epoch is %s, want %s", at, re.Current(), cur)
		}
		if p, err := re.PublicKey(cur); err != nil || !bytes.Equal(p, pub) {
			t.Fatalf("after a restart the key of %s changed (%v)", cur, err)
		}
	}
	c.set(time.Date(2006, 3, 1, 13, 0, 0, 0, time.UTC))

	next := ScheduleEpoch(c.now().Add(day), day)
	if _, err := client.Evaluate(e.ctx, next, in); !errors.Is(err, protocol.ErrEpochFuture) || !strings.Contains(err.Error(), next) {
		t.Fatalf("future epoch: %v, want ErrEpochFuture naming it", err)
	}
	if exists(KeyFile(dir, next)) {
		t.Fatal("a key was created for a future epoch")
	}
	c.set(time.Date(2006, 3, 1, 23, 56, 0, 0, time.UTC)) // within the skew of the next start
	if _, err := keys.Epoch(next); err != nil {
		t.Fatalf("next epoch within the skew allowance: %v", err)
	}

	// the first epoch lives until its end + grace, then it is expired
	c.set(time.Date(2006, 3, 2, 0, 59, 59, 0, time.UTC))
	w2, err := client.Evaluate(e.ctx, cur, in)
	if err != nil || !bytes.Equal(w1[0], w2[0]) {
		t.Fatalf("within the grace period the epoch must still be served unchanged (%v)", err)
	}
	c.set(time.Date(2006, 3, 2, 1, 0, 0, 0, time.UTC))
	_, err = client.Evaluate(e.ctx, cur, in)
	if !errors.Is(err, protocol.ErrEpochExpired) || !strings.Contains(err.Error(), cur) {
		t.Fatalf("expired epoch: %v, want ErrEpochExpired naming it", err)
	}
	if exists(KeyFile(dir, cur)) {
		t.Fatal("an expired epoch's key file must be destroyed")
	}
	if _, err := (&oprfclient.Client{NC: e.nc}).PublicKey(e.ctx, cur); !errors.Is(err, protocol.ErrEpochExpired) {
		t.Fatalf("public key of an expired epoch: %v", err)
	}
	// a sweep alone destroys expired keys nobody asks for
	c.set(time.Date(2006, 3, 3, 1, 0, 0, 0, time.UTC))
	if gone, err := keys.Sweep(); err != nil || len(gone) != 1 || gone[0] != next {
		t.Fatalf("sweep destroyed %v (%v), want [%s]", gone, err, next)
	}
	for _, bad := range []string{"all", "20060303T010000Z-24h", "20060303T000000Z-1h"} {
		if _, err := keys.Epoch(bad); err == nil || !strings.Contains(err.Error(), "invalid epoch") {
			t.Fatalf("%q in schedule mode: %v", bad, err)
		}
	}
	if _, err := Open(dir, Options{EpochLength: 1500 * time.Millisecond}); err == nil {
		t.Fatal("epoch length that is not whole seconds accepted")
	}
}

// TestServiceSweeps: a running service destroys a closed epoch's key by
// itself once the grace period (here none) has passed.
func TestServiceSweeps(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.dir, "randomness.keys")
	keys := open(t, dir, Options{Grace: -1})
	if _, err := keys.Epoch("2006-03"); err != nil {
		t.Fatal(err)
	}
	s := &Service{NC: e.nc, Keys: keys, SweepEvery: 10 * time.Millisecond}
	ctx, stop := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { stop(); <-done }()
	if err := keys.Close("2006-03"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for exists(KeyFile(dir, "2006-03")) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if exists(KeyFile(dir, "2006-03")) {
		t.Fatal("the service did not destroy the closed epoch's key")
	}
}

// TestOpenEpoch: in named-epoch mode Lookup (the service's path) refuses an
// epoch no operator opened with ErrEpochNotOpen and writes nothing; an
// operator opening it in another process (OpenEpoch, idempotent) makes it
// served under the key of its file. In schedule mode the schedule opens
// epochs: Lookup creates the current epoch's key.
func TestOpenEpoch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "randomness.keys")
	svc := open(t, dir, Options{})
	if _, err := svc.Lookup("2006-03"); !errors.Is(err, ErrEpochNotOpen) || !strings.Contains(err.Error(), "open-epoch") {
		t.Fatalf("unopened epoch: %v, want ErrEpochNotOpen naming open-epoch", err)
	}
	if _, err := svc.PublicKey("2006-03"); !errors.Is(err, ErrEpochNotOpen) {
		t.Fatalf("public key of an unopened epoch: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused lookup wrote %d files", len(entries))
	}
	op := open(t, dir, Options{}) // the operator's command, another process
	pub, created, err := op.OpenEpoch("2006-03")
	if err != nil || !created || len(pub) != protocol.ElementSize {
		t.Fatalf("OpenEpoch: %d-byte key, created %v, %v", len(pub), created, err)
	}
	again, created, err := op.OpenEpoch("2006-03")
	if err != nil || created || !bytes.Equal(again, pub) {
		t.Fatalf("reopening an open epoch: created %v, same key %v, %v", created, bytes.Equal(again, pub), err)
	}
	if p, err := svc.PublicKey("2006-03"); err != nil || !bytes.Equal(p, pub) {
		t.Fatalf("service after the operator opened the epoch: %v", err)
	}
	if _, _, err := op.OpenEpoch("bad/epoch"); err == nil || !strings.Contains(err.Error(), "invalid epoch") {
		t.Fatalf("invalid name: %v", err)
	}
	if err := op.Close("2006-03"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := op.OpenEpoch("2006-03"); !errors.Is(err, protocol.ErrEpochClosed) {
		t.Fatalf("reopening a closed epoch: %v, want ErrEpochClosed", err)
	}

	c := &clock{t: time.Date(2006, 3, 1, 13, 0, 0, 0, time.UTC)}
	sched := open(t, filepath.Join(t.TempDir(), "randomness.keys"), Options{EpochLength: 24 * time.Hour, Now: c.now})
	if _, err := sched.Lookup(sched.Current()); err != nil {
		t.Fatalf("schedule mode: the current epoch must be served without an operator: %v", err)
	}
}
