package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/infra/spent"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/pipelines/streams"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/randomness"
)

// reflectLayout says which of the two defences against reflected
// replies a reflectWorld runs with: clients in their own NATS account
// (natsauth.ServerConfig) and responders answering only requester inboxes
// (natsconn.Respond). Neither is the configuration before both: every
// role, the client included, in one account, responders answering any
// reply subject, one shared client inbox "_INBOX.client".
type reflectLayout struct {
	accounts, replyCheck bool
}

func (l reflectLayout) String() string {
	switch {
	case l.accounts && l.replyCheck:
		return "accounts+reply-check"
	case l.accounts:
		return "accounts only"
	case l.replyCheck:
		return "reply-check only"
	}
	return "pre-fix"
}

// reflectWorld is one embedded NATS server with the permission table on,
// in layout l, its streams and buckets created by the admin credential
// (streams.Ensure), and the issuer and the randomness service (spent
// tokens on) answering with their own credentials.
type reflectWorld struct {
	t      *testing.T
	ctx    context.Context
	url    string
	keyDir string
	l      reflectLayout
}

// preFixAccount is the one account of every role before the clients'
// account and the account per role.
const preFixAccount = "CROWDLOG"

// oneAccountRow is role r's Table row for a server whose roles share one
// account: the admin's and the operator's imported JetStream API subjects
// ("$JS.<account>.API.…") become the account's own ("$JS.API.…").
func oneAccountRow(r natsauth.Role) natsauth.Permissions {
	p, _ := natsauth.Table(r)
	var pub []string
	for _, s := range p.Publish {
		if rest, ok := strings.CutPrefix(s, "$JS.CROWDLOG_"); ok {
			if _, api, ok := strings.Cut(rest, ".API."); ok {
				s = "$JS.API." + api
			}
		}
		if !slices.Contains(pub, s) {
			pub = append(pub, s)
		}
	}
	p.Publish = pub
	return p
}

// reflectPreFixConfig is the server configuration as natsauth generated it
// before the clients' account: one account preFixAccount with every
// role of keys, the client's inbox "_INBOX.client.>".
func reflectPreFixConfig(keys map[natsauth.Role]string) string {
	q := func(s []string) string {
		out := make([]string, len(s))
		for i, x := range s {
			out[i] = strconv.Quote(x)
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "jetstream: enabled\naccounts: {\n  %s: {\n    jetstream: enabled\n    users: [\n", preFixAccount)
	for _, r := range natsauth.Roles {
		key, ok := keys[r]
		if !ok {
			continue
		}
		p := oneAccountRow(r)
		sub := p.Subscribe
		if r == natsauth.Client {
			sub = []string{natsauth.InboxPrefix(r) + ".>"}
		}
		fmt.Fprintf(&b, "      {nkey: %q, permissions: {publish: {allow: %s}, subscribe: {allow: %s}", key, q(p.Publish), q(sub))
		if p.Responses {
			b.WriteString(", allow_responses: true")
		}
		b.WriteString("}}\n")
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.String()
}

func newReflectWorld(t *testing.T, ctx context.Context, l reflectLayout) *reflectWorld {
	t.Helper()
	if !l.replyCheck {
		t.Cleanup(natsconn.AnswerAnyReplyForTesting())
	}
	dir := t.TempDir()
	w := &reflectWorld{t: t, ctx: ctx, keyDir: filepath.Join(dir, "nats"), l: l}
	keys, err := natsauth.GenerateAll(w.keyDir)
	if err != nil {
		t.Fatal(err)
	}
	text := reflectPreFixConfig(keys)
	if l.accounts {
		if text, err = (natsauth.ServerConfig{Users: keys}).Text(); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(w.keyDir, natsserver.ConfigFileName)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ns, err := natsserver.Options{Dir: filepath.Join(dir, "js"), ConfigFile: conf}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	w.url = ns.URL
	if l.accounts {
		err = streams.EnsureAccounts(ctx, w.conn(natsauth.Admin), streams.Config{})
	} else {
		admin, jerr := jetstream.New(w.conn(natsauth.Admin))
		if jerr != nil {
			t.Fatal(jerr)
		}
		err = streams.Ensure(ctx, admin, streams.Config{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// conn connects as role r with its own NKey; a client gets the inbox
// prefix of the layout (its own per connection with accounts, the shared
// "_INBOX.client" before).
func (w *reflectWorld) conn(r natsauth.Role) *nats.Conn {
	w.t.Helper()
	sec := natsconn.RoleSecurity(w.keyDir, r)
	var extra []nats.Option
	if r == natsauth.Client && !w.l.accounts {
		sec.Role = ""
		extra = append(extra, nats.CustomInboxPrefix(natsauth.InboxPrefix(natsauth.Client)))
	}
	opts, err := sec.Options()
	if err != nil {
		w.t.Fatal(err)
	}
	nc, err := nats.Connect(w.url, append(append(opts, nats.Name("reflect-"+string(r))), extra...)...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(nc.Close)
	return nc
}

// responders starts the issuer and the randomness service (tokens
// required, so it opens the spent-token bucket) with their own
// credentials; they answer until the test ends.
func (w *reflectWorld) responders() {
	w.t.Helper()
	keys := filepath.Join(w.t.TempDir(), "keys")
	if err := keydir.EnsureKeys(keys); err != nil {
		w.t.Fatal(err)
	}
	if err := keydir.EnsureIssuerKeys(keys, tokEpoch); err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(w.ctx)
	w.t.Cleanup(cancel)
	is, err := issuer.New(w.conn(natsauth.Issuer), keys, issuer.Limits{RandomnessTokens: 5, ReportTokens: 5}, quiet())
	if err != nil {
		w.t.Fatal(err)
	}
	rs, err := randomness.New(ctx, w.conn(natsauth.Randomness), keys, randomness.Options{}, quiet())
	if err != nil {
		w.t.Fatal(err)
	}
	rs.RequireTokens = true
	for _, run := range []func(context.Context) error{is.Run, rs.Run} {
		go func() { _ = run(ctx) }()
	}
	// both answer their public-key subject once subscribed
	cl := w.conn(natsauth.Client) // public keys are the clients' requests
	for _, subj := range []string{protocol.IssuerPublicKeySubject, protocol.RandomnessPublicKeySubject} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := cl.Request(subj, []byte("{}"), time.Second); err == nil {
				break
			}
			if time.Now().After(deadline) {
				w.t.Fatalf("%s does not answer", subj)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// reflectState is what the attacks try to destroy: the issuer's counter
// values, the spent-token bucket's entries, the relay stream's messages.
type reflectState struct {
	counters, spentKV jetstream.KeyValue
	// relay a's and relay b's inbox streams (one stream without accounts)
	relay, relayB jetstream.Stream
}

func (w *reflectWorld) state() reflectState {
	w.t.Helper()
	var s reflectState
	var err error
	if s.counters, err = issuer.OpenCounters(w.ctx, w.conn(natsauth.Issuer)); err != nil {
		w.t.Fatal(err)
	}
	rjs, _ := jetstream.New(w.conn(natsauth.Randomness))
	if s.spentKV, err = rjs.KeyValue(w.ctx, protocol.SpentTokensBucket); err != nil {
		w.t.Fatal(err)
	}
	op := w.conn(natsauth.Operator)
	ojs, _ := natsconn.AccountJetStream(op, natsauth.RelayA, w.l.accounts)
	if s.relay, err = ojs.Stream(w.ctx, protocol.RelayStream); err != nil {
		w.t.Fatal(err)
	}
	ojs, _ = natsconn.AccountJetStream(op, natsauth.RelayB, w.l.accounts)
	if s.relayB, err = ojs.Stream(w.ctx, protocol.RelayStream); err != nil {
		w.t.Fatal(err)
	}
	return s
}

func (w *reflectWorld) msgs(st jetstream.Stream) uint64 {
	info, err := st.Info(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	return info.State.Msgs
}

func (w *reflectWorld) kvMsgs(kv jetstream.KeyValue) uint64 {
	s, err := kv.Status(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	return s.Values()
}

// reflectReplies mounts the reply-reflection attack on layout l: the
// issuer holds 4 counters, the spent-token bucket 1 spent token, the relay
// stream 4 onions; a client sends junk to crowdlog.issuer and
// crowdlog.randomness with reply subjects "$JS.API.STREAM.PURGE.<stream>"
// of each of the three and "$KV.<counters>.<key>". It returns how many
// stored messages were lost or overwritten within wait (polling; ending
// when all were), of how many, whether the spent token is then accepted
// again with another binding (double spend) and how long it waited.
func reflectReplies(t *testing.T, l reflectLayout, wait time.Duration) (lost, total int, doubleSpend bool, took time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := newReflectWorld(t, ctx, l)
	w.responders()
	s := w.state()
	keys := []string{"id-a.e1", "id-b.e1", "id-c.e1", "id-d.e1"}
	for _, k := range keys {
		if _, err := s.counters.Put(ctx, k, []byte("3")); err != nil {
			t.Fatal(err)
		}
	}
	st, err := spent.Open(ctx, w.conn(natsauth.Randomness), spent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := [32]byte{7}
	if double, err := st.Spend(ctx, []spent.Spend{{ID: id, Binding: [32]byte{1}}}); err != nil || double[0] {
		t.Fatalf("spend: %v %v", double, err)
	}
	client := w.conn(natsauth.Client)
	cjs, _ := jetstream.New(client)
	for i := range 4 {
		if _, err := cjs.Publish(ctx, protocol.RelaySubject("a"), fmt.Appendf(nil, "onion-%d", i)); err != nil {
			t.Fatalf("client publish to relay a (%s): %v", l, err)
		}
	}
	before := w.kvMsgs(s.counters) + w.kvMsgs(s.spentKV) + w.msgs(s.relay)
	replies := []string{"$KV." + protocol.IssuerCountersBucket + "." + keys[0]}
	for _, stream := range []string{"KV_" + protocol.IssuerCountersBucket, "KV_" + protocol.SpentTokensBucket, protocol.RelayStream} {
		replies = append(replies, "$JS.API.STREAM.PURGE."+stream)
	}
	for _, subj := range []string{protocol.IssuerSubject, protocol.RandomnessSubject} {
		for _, reply := range replies {
			if err := client.PublishRequest(subj, reply, []byte("junk")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := client.FlushTimeout(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	// the responders answer
	lost, took = settle(wait, int(before), func() int {
		after := w.kvMsgs(s.counters) + w.kvMsgs(s.spentKV) + w.msgs(s.relay)
		n := int(before) - int(after)
		if e, err := s.counters.Get(ctx, keys[0]); err == nil && string(e.Value()) != "3" && after == before {
			n++ // overwritten, not deleted
		}
		return n
	})
	double, err := st.Spend(ctx, []spent.Spend{{ID: id, Binding: [32]byte{2}}})
	if err != nil {
		t.Fatal(err)
	}
	return lost, int(before), !double[0], took
}

// TestAttackReplyReflection: a client names a JetStream API or key-value
// subject as the reply subject of a request to a responder; the responder
// answers it with its own rights (allow_responses), JetStream takes the
// refusal body as "purge everything". With the clients in their own
// account and the responders answering only requester inboxes nothing is
// lost and a spent token stays spent; each defence alone suffices; the
// pre-fix control loses the stored state and accepts the token again.
// The control runs first and waits until every stored message is lost
// (30 s at most); the others then wait 3 times as long as it took, at
// least 500 ms (calibratedWait).
func TestAttackReplyReflection(t *testing.T) {
	type res struct {
		lost, total int
		double      bool
		took        time.Duration
	}
	run := func(l reflectLayout, wait time.Duration) res {
		var r res
		t.Run(l.String(), func(t *testing.T) { r.lost, r.total, r.double, r.took = reflectReplies(t, l, wait) })
		return r
	}
	ctl := run(reflectLayout{}, settleControl)
	wait := calibratedWait(ctl.took, 500*time.Millisecond)
	fixed := run(reflectLayout{accounts: true, replyCheck: true}, wait)
	acc := run(reflectLayout{accounts: true}, wait)
	chk := run(reflectLayout{replyCheck: true}, wait)
	fmt.Printf("ATTACK reply-reflection: %d of %d stored messages lost (issuer counters, spent tokens, relay stream), spent token accepted again: %v; accounts only: %d lost, reply check only: %d lost; control pre-fix (one account, any reply answered): %d of %d lost, spent token accepted again: %v\n",
		fixed.lost, fixed.total, fixed.double, acc.lost, chk.lost, ctl.lost, ctl.total, ctl.double)
	for name, r := range map[string]res{"fixed": fixed, "accounts only": acc, "reply check only": chk} {
		if r.lost != 0 || r.double {
			t.Errorf("%s: %d stored messages lost, double spend %v", name, r.lost, r.double)
		}
	}
	if ctl.lost == 0 || !ctl.double {
		t.Errorf("control: %d lost, double spend %v; the attack should work on the pre-fix configuration", ctl.lost, ctl.double)
	}
}

// reflectPubAck mounts the PubAck-reflection attack on layout l: the
// issuer holds 4 counters; a client publishes 4 onions to relay a with
// reply "$KV.<counters>.<key>" (one per key) and 4 with reply relay b's
// inbox. It returns how many counters no longer parse as a number and how
// many messages landed on relay b's subject within wait (polling; ending
// when all 8 did), and how long it waited.
func reflectPubAck(t *testing.T, l reflectLayout, wait time.Duration) (corrupted, toB int, took time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := newReflectWorld(t, ctx, l)
	s := w.state()
	keys := []string{"id-a.e1", "id-b.e1", "id-c.e1", "id-d.e1"}
	for _, k := range keys {
		if _, err := s.counters.Put(ctx, k, []byte("3")); err != nil {
			t.Fatal(err)
		}
	}
	client := w.conn(natsauth.Client)
	for i, k := range keys {
		_ = client.PublishRequest(protocol.RelaySubject("a"), "$KV."+protocol.IssuerCountersBucket+"."+k, fmt.Appendf(nil, "onion-%d", i))
		_ = client.PublishRequest(protocol.RelaySubject("a"), protocol.RelaySubject("b"), fmt.Appendf(nil, "onion-b-%d", i))
	}
	if err := client.FlushTimeout(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	_, took = settle(wait, 2*len(keys), func() int {
		corrupted = 0
		for _, k := range keys {
			e, err := s.counters.Get(ctx, k)
			if err != nil {
				corrupted++
				continue
			}
			if _, err := strconv.Atoi(string(e.Value())); err != nil {
				corrupted++
			}
		}
		info, err := s.relayB.Info(ctx, jetstream.WithSubjectFilter(protocol.RelaySubject("b")))
		if err != nil {
			t.Fatal(err)
		}
		toB = int(info.State.Subjects[protocol.RelaySubject("b")])
		return corrupted + toB
	})
	return corrupted, toB, took
}

// TestAttackPubAckReflection: JetStream acknowledges a client's publish to
// relay a on the reply subject the client names. With the clients in
// their own account that subject is the clients' account's, so no
// counter is overwritten and nothing reaches relay b's inbox; the pre-fix
// control (one account) has the acknowledgement JSON written as the
// counters' values (the issuer then refuses those identities) and the
// acknowledgements stored in relay b's inbox. The control runs first and
// waits for all 8 writes (30 s at most); the fixed run then waits 3 times
// as long as it took, at least 300 ms (calibratedWait).
func TestAttackPubAckReflection(t *testing.T) {
	var fc, fb, cc, cb int
	var took time.Duration
	t.Run("control", func(t *testing.T) { cc, cb, took = reflectPubAck(t, reflectLayout{}, settleControl) })
	t.Run("fixed", func(t *testing.T) {
		fc, fb, _ = reflectPubAck(t, reflectLayout{accounts: true, replyCheck: true}, calibratedWait(took, 300*time.Millisecond))
	})
	fmt.Printf("ATTACK puback-reflection: %d of 4 issuer counters corrupted, %d of 4 acknowledgements in relay b's inbox; control pre-fix (one account): %d of 4 corrupted, %d of 4 in relay b's inbox\n",
		fc, fb, cc, cb)
	if fc != 0 || fb != 0 {
		t.Errorf("fixed: %d counters corrupted, %d messages in relay b's inbox", fc, fb)
	}
	if cc == 0 || cb == 0 {
		t.Errorf("control: %d corrupted, %d in relay b's inbox; the attack should work on the pre-fix configuration", cc, cb)
	}
}

// reflectInbox mounts the shared-inbox attack on layout l: client 2
// subscribes to "_INBOX.client.>" (the shared inbox of the pre-fix
// table) and to "_INBOX.client.*.>" (every per-connection inbox); client 1
// asks the issuer n times. It returns the replies client 2 saw through
// each subscription (a refused subscription sees none).
func reflectInbox(t *testing.T, l reflectLayout, n int) (shared, wildcard int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := newReflectWorld(t, ctx, l)
	w.responders()
	c1, c2 := w.conn(natsauth.Client), w.conn(natsauth.Client)
	var sh, wc atomic.Int64
	var shRefused atomic.Bool // the server refused the shared-inbox subscription
	c2.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if strings.Contains(strings.ToLower(err.Error()), "permissions violation for subscription") &&
			strings.Contains(err.Error(), `"`+natsauth.InboxPrefix(natsauth.Client)+`.>"`) {
			shRefused.Store(true)
		}
	})
	for _, sub := range []struct {
		subj string
		n    *atomic.Int64
	}{{natsauth.InboxPrefix(natsauth.Client) + ".>", &sh}, {natsauth.InboxPrefix(natsauth.Client) + ".*.>", &wc}} {
		if _, err := c2.Subscribe(sub.subj, func(*nats.Msg) { sub.n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := c2.FlushTimeout(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // a refused subscription's error arrives
	for range n {
		if _, err := c1.Request(protocol.IssuerSubject, []byte("junk"), 20*time.Second); err != nil {
			t.Fatalf("client 1's request: %v", err)
		}
	}
	// both layouts let "_INBOX.client.*.>" see every reply; the shared
	// inbox's subscription sees them too unless the server refused it
	settle(settleControl, 1, func() int {
		if wc.Load() >= int64(n) && (sh.Load() >= int64(n) || shRefused.Load()) {
			return 1
		}
		return 0
	})
	return int(sh.Load()), int(wc.Load())
}

// TestAttackClientInbox: another client reads a client's issuer replies.
// Each client connection now has an inbox prefix of its own (130 random
// bits) and may not subscribe to "_INBOX.client.>"; the pre-fix control
// shares "_INBOX.client" and reads every reply there. What one credential
// shared by all devices cannot stop is measured too: a subscription to
// "_INBOX.client.*.>" fits the allow rule (NATS matches "*" against "*")
// and still sees every reply; docs/operations.md says so.
func TestAttackClientInbox(t *testing.T) {
	const n = 5
	var fs, fw, cs, cw int
	t.Run("fixed", func(t *testing.T) { fs, fw = reflectInbox(t, reflectLayout{accounts: true, replyCheck: true}, n) })
	t.Run("control", func(t *testing.T) { cs, cw = reflectInbox(t, reflectLayout{}, n) })
	fmt.Printf("ATTACK client-inbox: client 2 read %d of %d of client 1's issuer replies through a subscription to _INBOX.client.>, %d of %d through _INBOX.client.*.> (not enforceable with one shared credential); control pre-fix (shared inbox): %d of %d through _INBOX.client.>, %d through _INBOX.client.*.>\n",
		fs, n, fw, n, cs, n, cw)
	if fs != 0 {
		t.Errorf("fixed: client 2 read %d replies through the shared inbox", fs)
	}
	if cs != n {
		t.Errorf("control: client 2 read %d of %d replies; the attack should work on the pre-fix configuration", cs, n)
	}
}
