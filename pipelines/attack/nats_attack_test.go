package attack

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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
	"github.com/crowdlog/crowdlog/relays"
)

// natsWorld is one embedded NATS server with the permission table on
// (auth) or off (the control: anyone who reaches NATS may do anything),
// and a connection per role.
type natsWorld struct {
	t      *testing.T
	url    string
	keyDir string // "" with auth off
}

func newNATSWorld(t *testing.T, ctx context.Context, auth bool) *natsWorld {
	t.Helper()
	dir := t.TempDir()
	w := &natsWorld{t: t}
	var (
		ns  *natsserver.Server
		err error
	)
	if auth {
		w.keyDir = filepath.Join(dir, "keys")
		ns, err = natsserver.Options{Dir: filepath.Join(dir, "js")}.StartAuth(ctx, w.keyDir, nil)
	} else {
		ns, err = natsserver.Start(ctx, filepath.Join(dir, "js"))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	w.url = ns.URL
	// the admin step (`crowdlog streams`): every stream and bucket exists
	// before a role starts; no role's own credential may create one
	// (with auth each in its owner's account, one account per role)
	ensure := func() error { return streams.Ensure(ctx, w.js(w.conn(natsauth.Admin)), streams.Config{}) }
	if auth {
		ensure = func() error { return streams.EnsureAccounts(ctx, w.conn(natsauth.Admin), streams.Config{}) }
	}
	if err := ensure(); err != nil {
		t.Fatal(err)
	}
	return w
}

// conn connects as role r: its own NKey with auth on, no credential with
// auth off.
func (w *natsWorld) conn(r natsauth.Role) *nats.Conn {
	w.t.Helper()
	sec := natsconn.Security{Role: r}
	if w.keyDir != "" {
		sec = natsconn.RoleSecurity(w.keyDir, r)
	}
	nc, err := natsconn.ConnectAs(w.url, "attack-"+string(r), sec)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(nc.Close)
	return nc
}

func (w *natsWorld) js(nc *nats.Conn) jetstream.JetStream {
	js, err := jetstream.New(nc)
	if err != nil {
		w.t.Fatal(err)
	}
	return js
}

// relayBypass mounts the attack once: the admin step created the relay
// streams and consumers, relays a and b bind their consumers with their
// own credentials, a client publishes n messages to
// relay a (legitimate), n to relay b over JetStream and n more as plain
// NATS publishes, relay a forwards m to relay b. It returns how many
// messages relay b's consumer then holds from the client and from relay a,
// and how many of the client's relay-a messages relay a holds.
func relayBypass(t *testing.T, auth bool, n, m int) (fromClient, fromA, toA int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := newNATSWorld(t, ctx, auth)
	consumer := func(name string) jetstream.Consumer {
		// with auth the admin step created the relay's consumer and the
		// relay binds it; without, the relay makes its own
		js := w.js(w.conn(natsauth.RelayRole(name)))
		if !auth {
			if err := relays.EnsureConsumer(ctx, js, name, 0); err != nil {
				t.Fatal(err)
			}
		}
		c, err := js.Consumer(ctx, relays.Stream, relays.ConsumerName(name))
		if err != nil {
			t.Fatalf("relay %s consumer: %v", name, err)
		}
		return c
	}
	ca, cb := consumer("a"), consumer("b")
	client := w.js(w.conn(natsauth.Client))
	clientNC := client.Conn()
	for i := range n {
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second) // ends at the acknowledgement
		if _, err := client.Publish(pctx, protocol.RelaySubject("a"), fmt.Appendf(nil, "client-a-%d", i)); err != nil {
			t.Fatalf("the client's legitimate publish to relay a: %v", err)
		}
		pcancel()
	}
	for i := range n {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, _ = client.Publish(pctx, protocol.RelaySubject("b"), fmt.Appendf(nil, "client-b-js-%d", i)) // refused: no ack
		pcancel()
		_ = clientNC.Publish(protocol.RelaySubject("b"), fmt.Appendf(nil, "client-b-core-%d", i))
	}
	if err := clientNC.FlushTimeout(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	relayA := w.js(w.conn(natsauth.RelayA))
	for i := range m {
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		if _, err := relayA.Publish(pctx, protocol.RelaySubject("b"), fmt.Appendf(nil, "relay-a-%d", i)); err != nil {
			t.Fatalf("relay a's legitimate forward to relay b: %v", err)
		}
		pcancel()
	}
	// count fetches until done says the messages that must be there
	// arrived (30 s at most: a loaded machine delivers late), at least
	// once, for 1 s
	count := func(c jetstream.Consumer, done func(client, relay int) bool) (client, relay int) {
		for start := time.Now(); ; {
			batch, err := c.Fetch(4*n+m, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for msg := range batch.Messages() {
				if string(msg.Data()[:6]) == "client" {
					client++
				} else {
					relay++
				}
				_ = msg.Ack()
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				t.Fatal(err)
			}
			if done(client, relay) || time.Since(start) > 30*time.Second {
				return client, relay
			}
		}
	}
	toA, _ = count(ca, func(client, _ int) bool { return client >= n })
	// with auth off the client's 2n bypassing messages must arrive too
	fromClient, fromA = count(cb, func(client, relay int) bool { return relay >= m && (auth || client >= 2*n) })
	return fromClient, fromA, toA
}

// TestAttackRelayBBypass: a client credential publishing straight to
// relay b's inbox (skipping relay a's mixing) is refused by the server's
// permission table: relay b's consumer receives none of the client's
// messages, JetStream or plain, while relay a's forwards and the client's
// messages to relay a arrive. The control, the same run with auth off,
// shows the attack working: every bypassing message reaches relay b.
func TestAttackRelayBBypass(t *testing.T) {
	const n, m = 20, 5
	got, fromA, toA := relayBypass(t, true, n, m)
	ctlGot, ctlFromA, _ := relayBypass(t, false, n, m)
	fmt.Printf("ATTACK relay-b-bypass: %d of %d client messages reached relay b with per-role NATS credentials (%d JetStream, %d plain publishes refused; relay a's %d of %d forwards and the client's %d of %d to relay a arrived); control with auth off: %d of %d reached relay b\n",
		got, 2*n, n, n, fromA, m, toA, n, ctlGot, 2*n)
	if got != 0 {
		t.Errorf("%d client messages reached relay b's inbox with auth on; want 0", got)
	}
	if fromA != m || toA != n {
		t.Errorf("legitimate traffic lost with auth on: relay b got %d of relay a's %d, relay a %d of the client's %d", fromA, m, toA, n)
	}
	if ctlGot != 2*n || ctlFromA != m {
		t.Errorf("control (auth off): %d of %d client messages and %d of %d relay-a forwards reached relay b; the attack should work there", ctlGot, 2*n, ctlFromA, m)
	}
}

// kvTamper mounts the attack once: the issuer writes a counter and the
// randomness service marks a token spent (each with its own credential,
// through issuer.OpenCounters and spent.Open), then a client credential
// tries, on each bucket, a put of the key, a delete, a purge of the key, a
// purge of the bucket's stream and a delete of it, as raw NATS requests
// (the key-value API refuses to bind a bucket it may not look up). After
// each try the owner checks the key; a changed or missing key counts as
// tampered and is restored. It returns tampered and tried.
func kvTamper(t *testing.T, auth bool) (tampered, tried int, detail []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := newNATSWorld(t, ctx, auth)
	counters, err := issuer.OpenCounters(ctx, w.conn(natsauth.Issuer))
	if err != nil {
		t.Fatal(err)
	}
	rnc := w.conn(natsauth.Randomness)
	st, err := spent.Open(ctx, rnc, spent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, binding := [32]byte{1, 2, 3}, [32]byte{9}
	if double, err := st.Spend(ctx, []spent.Spend{{ID: id, Binding: binding}}); err != nil || double[0] {
		t.Fatalf("spend: %v %v", double, err)
	}
	spentKV, err := w.js(rnc).KeyValue(ctx, protocol.SpentTokensBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := counters.Put(ctx, "counter", []byte("5")); err != nil {
		t.Fatal(err)
	}
	type bucket struct {
		name, key string
		value     []byte
		kv        jetstream.KeyValue
		reopen    func() (jetstream.KeyValue, error)
	}
	buckets := []*bucket{
		{name: protocol.IssuerCountersBucket, key: "counter", value: []byte("5"), kv: counters},
		{name: protocol.SpentTokensBucket, key: spent.Key(id), value: binding[:], kv: spentKV},
	}
	attacker := w.conn(natsauth.Client)
	try := func(subj string, hdr nats.Header, data []byte) {
		m := &nats.Msg{Subject: subj, Header: hdr, Data: data}
		_, _ = attacker.RequestMsg(m, 500*time.Millisecond)
	}
	for _, b := range buckets {
		kvSubj := "$KV." + b.name + "." + b.key
		stream := "KV_" + b.name
		ops := []struct {
			name string
			do   func()
		}{
			{"put", func() { try(kvSubj, nil, []byte("0")) }},
			{"delete", func() { try(kvSubj, nats.Header{"KV-Operation": {"DEL"}}, nil) }},
			{"purge key", func() { try(kvSubj, nats.Header{"KV-Operation": {"PURGE"}, "Nats-Rollup": {"sub"}}, nil) }},
			{"purge bucket", func() { try("$JS.API.STREAM.PURGE."+stream, nil, []byte("{}")) }},
			{"delete bucket", func() { try("$JS.API.STREAM.DELETE."+stream, nil, nil) }},
		}
		for _, op := range ops {
			op.do()
			tried++
			e, err := b.kv.Get(ctx, b.key)
			if err == nil && string(e.Value()) == string(b.value) {
				continue
			}
			tampered++
			detail = append(detail, b.name+" "+op.name)
			if op.name != "delete bucket" {
				if _, err := b.kv.Put(ctx, b.key, b.value); err != nil {
					t.Fatalf("restore %s after %s: %v", b.name, op.name, err)
				}
			}
		}
	}
	return tampered, tried, detail
}

// TestAttackKVTamper: a client credential can neither put, delete nor
// purge a key of the issuer's budget bucket or of the spent-token bucket,
// nor purge or delete either bucket (a budget reset, a double spend): the
// permission table lets only the issuer touch its bucket and only the
// randomness service the spent-token bucket. The control with auth off
// shows every one of those tamperings taking effect.
func TestAttackKVTamper(t *testing.T) {
	got, tried, detail := kvTamper(t, true)
	ctl, ctlTried, _ := kvTamper(t, false)
	fmt.Printf("ATTACK kv-tamper: %d of %d tamperings by a client credential took effect on %s and %s (put, delete, purge key, purge bucket, delete bucket on each); control with auth off: %d of %d took effect\n",
		got, tried, protocol.IssuerCountersBucket, protocol.SpentTokensBucket, ctl, ctlTried)
	if got != 0 {
		t.Errorf("with auth on a client tampered with: %v", detail)
	}
	if ctl != ctlTried {
		t.Errorf("control (auth off): only %d of %d tamperings took effect; the attack should work there", ctl, ctlTried)
	}
}
