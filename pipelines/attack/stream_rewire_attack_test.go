package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/infra/spent"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/pipelines/streams"
	"github.com/crowdlog/crowdlog/protocol"
)

// rewireRuntimeRoles are the credentials that run the roles: none may
// change a stream.
var rewireRuntimeRoles = []natsauth.Role{natsauth.RelayA, natsauth.RelayB, natsauth.Randomness,
	natsauth.Issuer, natsauth.Coordinator, natsauth.Operator}

// rewireOwned are the streams each runtime role held
// $JS.API.STREAM.CREATE and UPDATE on before the admin step existed (the
// relays and the operator created the relay stream, each key-value
// bucket's owner its bucket).
func rewireOwned(r natsauth.Role) []string {
	switch r {
	case natsauth.RelayA, natsauth.RelayB, natsauth.Operator:
		return []string{protocol.RelayStream}
	case natsauth.Randomness:
		return []string{"KV_" + protocol.SpentTokensBucket, "KV_" + protocol.IssuerRandomnessCountersBucket}
	case natsauth.Issuer:
		return []string{"KV_" + protocol.IssuerCountersBucket}
	case natsauth.Coordinator:
		return []string{"KV_" + protocol.PDDBucket, "KV_" + protocol.PDDRoundsBucket, protocol.PDDActiveStream}
	}
	return nil
}

// rewireOldTable is the permission table before the fix: today's rows
// plus STREAM.CREATE and STREAM.UPDATE of every stream rewireOwned names
// (exactly what streamAdmin gave the runtime roles then).
func rewireOldTable(r natsauth.Role) (natsauth.Permissions, bool) {
	_, ok := natsauth.Table(r)
	p := oneAccountRow(r)
	for _, s := range rewireOwned(r) {
		p.Publish = append(p.Publish, "$JS.API.STREAM.CREATE."+s, "$JS.API.STREAM.UPDATE."+s)
	}
	return p, ok
}

// rewireOldWorld starts an embedded NATS server whose one account holds
// every role but the client with the rows of rewireOldTable (the control).
func rewireOldWorld(t *testing.T, ctx context.Context) *natsWorld {
	t.Helper()
	dir := t.TempDir()
	keyDir := filepath.Join(dir, "keys")
	keys, err := natsauth.GenerateAll(keyDir)
	if err != nil {
		t.Fatal(err)
	}
	q := func(l []string) string {
		s := make([]string, len(l))
		for i, x := range l {
			s[i] = strconv.Quote(x)
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	var users []string
	for _, r := range append(rewireRuntimeRoles, natsauth.Admin) {
		p, _ := rewireOldTable(r)
		users = append(users, fmt.Sprintf("{nkey: %q, permissions: {publish: {allow: %s}, subscribe: {allow: %s}%s}}",
			keys[r], q(p.Publish), q(p.Subscribe), map[bool]string{true: ", allow_responses: true"}[p.Responses]))
	}
	conf := "accounts {\n  CROWDLOG {\n    jetstream: enabled\n    users: [\n      " + strings.Join(users, "\n      ") + "\n    ]\n  }\n}\n"
	path := filepath.Join(keyDir, "old.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ns, err := natsserver.Options{Dir: filepath.Join(dir, "js"), ConfigFile: path}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return &natsWorld{t: t, url: ns.URL, keyDir: keyDir}
}

// rewireResult is what one attacking credential achieved.
type rewireResult struct {
	accepted int // stream create/update requests the server carried out
	tried    int
	read     int // entries of the target bucket delivered to the attacker
}

// rewireEntries is how many keys the target buckets hold.
const rewireEntries = 20

// rewireAttack mounts the attack of role r on a fresh world (old: the
// control's permission table; else the real one): the admin step creates
// every stream (streams.Ensure with the admin credential), the issuer
// writes rewireEntries counters and the randomness service as many spent
// tokens; then r, with its own credential, (1) updates each stream it
// used to own to add the target bucket as a Source and RePublish
// everything to r's own inbox, (2) sets only RePublish, (3) changes the
// stream's subjects to the target's, (4) creates a new stream sourcing
// the target with RePublish. The target is the issuer's counters bucket
// (for the issuer itself, the spent-token bucket). It counts the target's
// entries r receives on its inbox.
func rewireAttack(t *testing.T, r natsauth.Role, old bool) rewireResult {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var w *natsWorld
	if old {
		w = rewireOldWorld(t, ctx)
	} else {
		w = newNATSWorld(t, ctx, true)
	}
	adminNC := w.conn(natsauth.Admin)
	ensure := func() error { return streams.Ensure(ctx, w.js(adminNC), streams.Config{}) }
	if !old {
		ensure = func() error { return streams.EnsureAccounts(ctx, adminNC, streams.Config{}) }
	}
	if err := ensure(); err != nil { // newNATSWorld ran it too: idempotent
		t.Fatal(err)
	}
	// the admin's view of the account that owns stream name
	adminJS := func(name string) jetstream.JetStream {
		for _, owner := range natsauth.JetStreamRoles {
			if slices.Contains(natsauth.Streams(owner), name) {
				js, err := natsconn.AccountJetStream(adminNC, owner, !old)
				if err != nil {
					t.Fatal(err)
				}
				return js
			}
		}
		t.Fatalf("no owner of stream %s", name)
		return nil
	}
	counters, err := issuer.OpenCounters(ctx, w.conn(natsauth.Issuer))
	if err != nil {
		t.Fatal(err)
	}
	st, err := spent.Open(ctx, w.conn(natsauth.Randomness), spent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rewireEntries {
		if _, err := counters.Put(ctx, fmt.Sprintf("id%02d", i), []byte(strconv.Itoa(i+1))); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Spend(ctx, []spent.Spend{{ID: [32]byte{byte(i + 1)}, Binding: [32]byte{7}}}); err != nil {
			t.Fatal(err)
		}
	}
	target := protocol.IssuerCountersBucket
	if r == natsauth.Issuer {
		target = protocol.SpentTokensBucket
	}
	nc := w.conn(r)
	js := w.js(nc)
	inbox := natsauth.InboxPrefix(r) + ".rewire"
	var mu sync.Mutex
	seen := map[string]bool{}
	sub, err := nc.Subscribe(inbox+".>", func(m *nats.Msg) {
		if strings.Contains(m.Subject, ".$KV."+target+".") {
			mu.Lock()
			seen[m.Subject] = true
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	var res rewireResult
	// a refused request ends at its permission error, an accepted one at
	// its answer (a loaded machine may take seconds)
	reqCtx := refusals(nc)
	try := func(do func(context.Context) error) {
		res.tried++
		actx, cancel := reqCtx(ctx, 20*time.Second)
		defer cancel()
		if do(actx) == nil {
			res.accepted++
		}
	}
	source := []*jetstream.StreamSource{{Name: "KV_" + target}}
	republish := &jetstream.RePublish{Source: ">", Destination: inbox + ".>"}
	for _, name := range rewireOwned(r) {
		info, err := adminJS(name).Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.CachedInfo().Config
		try(func(ctx context.Context) error { // republish alone
			c := cfg
			c.RePublish = republish
			_, err := js.UpdateStream(ctx, c)
			return err
		})
		try(func(ctx context.Context) error { // the target's subjects
			c := cfg
			c.Subjects = []string{"$KV." + target + ".>"}
			_, err := js.UpdateStream(ctx, c)
			return err
		})
		try(func(ctx context.Context) error { // sources and republish
			c := cfg
			c.Sources, c.RePublish = source, republish
			_, err := js.UpdateStream(ctx, c)
			return err
		})
	}
	try(func(ctx context.Context) error { // a new stream of its own
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "rewire_" + strings.ReplaceAll(string(r), "-", "_"),
			Sources: source, RePublish: republish, Storage: jetstream.MemoryStorage})
		return err
	})
	// with a change accepted the entries arrive (each of them, within
	// 30 s); with none, 500 ms show whether any arrives anyway
	start := time.Now()
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= rewireEntries || time.Since(start) > 30*time.Second || (res.accepted == 0 && time.Since(start) > 500*time.Millisecond) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	res.read = len(seen)
	mu.Unlock()
	return res
}

// TestAttackStreamRewire: no runtime credential (relays a and b,
// randomness, issuer, coordinator, operator) can change a JetStream
// stream: adding the issuer's counters bucket (the spent-token bucket for
// the issuer) as a Source with RePublish to its own inbox, RePublish
// alone, another subject set, or a new stream sourcing the bucket are all
// refused, and none of the bucket's entries reach the attacker. Streams
// and buckets are created by the admin step (streams.Ensure, `crowdlog
// streams`) with the admin credential. The control mounts the same
// attacks on the permission table in which the runtime roles held
// STREAM.CREATE/UPDATE of their own streams: relay b then reads every
// issuer counter.
func TestAttackStreamRewire(t *testing.T) {
	var after, ctl []string
	totalRead, totalAccepted, totalTried := 0, 0, 0
	ctlRead := map[natsauth.Role]int{}
	ctlAccepted, ctlTried := 0, 0
	for _, r := range rewireRuntimeRoles {
		got := rewireAttack(t, r, false)
		totalRead += got.read
		totalAccepted += got.accepted
		totalTried += got.tried
		after = append(after, fmt.Sprintf("%s %d/%d", r, got.read, rewireEntries))
		if got.read != 0 || got.accepted != 0 {
			t.Errorf("%s: %d of %d stream changes accepted, %d of %d entries of another role's bucket read", r, got.accepted, got.tried, got.read, rewireEntries)
		}
	}
	for _, r := range rewireRuntimeRoles {
		c := rewireAttack(t, r, true)
		ctlRead[r] = c.read
		ctlAccepted += c.accepted
		ctlTried += c.tried
		ctl = append(ctl, fmt.Sprintf("%s %d/%d", r, c.read, rewireEntries))
	}
	fmt.Printf("ATTACK stream-rewire: %d of %d stream create/update requests by runtime credentials accepted, %d entries of another role's bucket read (%s); control old permission table (stream create/update per role): %d of %d accepted, relay-b read %d of %d issuer counters (%s)\n",
		totalAccepted, totalTried, totalRead, strings.Join(after, ", "), ctlAccepted, ctlTried, ctlRead[natsauth.RelayB], rewireEntries, strings.Join(ctl, ", "))
	if ctlRead[natsauth.RelayB] != rewireEntries {
		t.Errorf("control: relay b read %d of %d issuer counters with the old table; the attack should work there", ctlRead[natsauth.RelayB], rewireEntries)
	}
}
