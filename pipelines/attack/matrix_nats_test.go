package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/pipelines/streams"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/relays"
)

// The NATS half of the permission matrix (TestAttackRoleMatrix). Each
// credential attacks a deployment of its own: an embedded nats-server
// started from the generated configuration (natsserver.StartAuth, every
// role's NKey), its streams and buckets created by the admin step
// (streams.EnsureAccounts, each relay's durable consumer included), one
// seeded message in every stream, and stand-ins for the responders: a subscription with the
// responder's own credential on each request subject that answers through
// natsconn.Respond (the reply check every responder uses) and records what
// it received, and a subscription on every role's inbox with that role's
// credential. Operations run in four phases: subscriptions (concurrent),
// JetStream API requests judged by their answer (concurrent), operations
// judged by their effect on someone else's state (one at a time, each in
// its own window) and destructive API requests (last, stream by stream).

// mxWait bounds how long an operation beyond need judged by its effect
// waits for it (after the server took every publish), mxAnswer how long
// a request beyond need waits for its answer (a refused one ends at the
// permission error, one nobody serves at the no-responders status),
// mxSubWait how long a subscription beyond need waits for a message once
// the normal traffic's requests were answered. mxNeeded replaces all
// three for an operation testdata/least-privilege.txt lists: it ends
// when the effect, answer or message arrives (or at the permission
// error), so the long bound costs time only on a real refusal, and a
// loaded machine that delivers late does not pass for a refusal.
// mxLate is how long, after the last window, the effects that name a
// subject of their own (inbox and key-value targets) may still arrive
// and count for the operation whose window they missed.
const (
	mxWait    = 400 * time.Millisecond
	mxAnswer  = 2 * time.Second
	mxSubWait = time.Second
	mxNeeded  = 20 * time.Second
	mxLate    = 5 * time.Second
)

// mxConnect bounds a connection's handshake, on both sides (nats.go's
// connect timeout, the server's auth_timeout): 22 deployments connect
// side by side, and on a loaded machine the 2 s defaults ran out.
const mxConnect = 30 * time.Second

// mxResponders are the request subjects of the responders, the role
// whose credential serves each and the queue group its code subscribes
// with ("": a plain subscription).
var mxResponders = []struct {
	subject string
	owner   natsauth.Role
	queue   string
}{
	// "randomness": the randomness service's queue group (randomness.go)
	{protocol.RandomnessSubject, natsauth.Randomness, "randomness"}, {protocol.RandomnessPublicKeySubject, natsauth.Randomness, "randomness"},
	{protocol.IssuerRandomnessSubject, natsauth.Randomness, issuer.Queue}, {protocol.IssuerRandomnessPublicKeySubject, natsauth.Randomness, issuer.Queue},
	{protocol.IssuerSubject, natsauth.Issuer, issuer.Queue}, {protocol.IssuerPublicKeySubject, natsauth.Issuer, issuer.Queue},
	{protocol.RelayKeysSubject("a"), natsauth.RelayA, relays.ConsumerName("a")}, {protocol.RelayKeysSubject("b"), natsauth.RelayB, relays.ConsumerName("b")},
	{protocol.PDDRegisterSubject, natsauth.Coordinator, protocol.CoordinatorQueueGroup}, {protocol.PDDPingSubject, natsauth.Coordinator, protocol.CoordinatorQueueGroup},
	{protocol.PDDDepositSubject, natsauth.Coordinator, protocol.CoordinatorQueueGroup}, {protocol.PDDBundlesSubject, natsauth.Coordinator, protocol.CoordinatorQueueGroup},
	{protocol.PDDAdvanceSubject, natsauth.Coordinator, protocol.CoordinatorQueueGroup}, {protocol.PDDRecoverySubject, natsauth.Coordinator, protocol.CoordinatorQueueGroup},
	{protocol.Prio3HelperSubject, natsauth.Prio3Helper, ""}, {protocol.Prio3SettingsSubject, natsauth.Prio3Leader, ""},
	{protocol.IssuerPrio3HelperSubject, natsauth.Prio3Helper, issuer.Queue}, {protocol.IssuerPrio3HelperPublicKeySubject, natsauth.Prio3Helper, issuer.Queue},
	{protocol.IssuerPrio3LeaderSubject, natsauth.Prio3Leader, issuer.Queue}, {protocol.IssuerPrio3LeaderPublicKeySubject, natsauth.Prio3Leader, issuer.Queue},
	// aggregator/announce.go: every aggregator process answers (no queue group)
	{protocol.PipelineSubject, natsauth.Aggregator, ""},
}

// mxRequester is the role that sends requests to a responder subject in
// normal operation (the legitimate traffic a subscription could sniff).
func mxRequester(subject string) natsauth.Role {
	switch subject {
	case protocol.PDDAdvanceSubject:
		return natsauth.Operator
	case protocol.PDDRecoverySubject:
		return natsauth.Aggregator
	case protocol.Prio3HelperSubject:
		return natsauth.Prio3Leader
	}
	return natsauth.Client
}

// mxStreamSubjects are the subjects JetStream captures that a role
// publishes to in normal operation, with the role that does.
var mxStreamSubjects = []struct {
	subject string
	owner   natsauth.Role
}{
	{protocol.RelaySubject("a"), natsauth.Client},
	{protocol.RelaySubject("b"), natsauth.RelayA},
	{protocol.PDDActiveSubjectPrefix + "matrix.1", natsauth.Coordinator},
}

// mxBuckets are the key-value buckets of a deployment and their owners.
var mxBuckets = []struct {
	bucket string
	owner  natsauth.Role
}{
	{protocol.IssuerCountersBucket, natsauth.Issuer},
	{protocol.IssuerRandomnessCountersBucket, natsauth.Randomness},
	{protocol.SpentTokensBucket, natsauth.Randomness},
	{protocol.IssuerPrio3HelperCountersBucket, natsauth.Prio3Helper},
	{protocol.IssuerPrio3LeaderCountersBucket, natsauth.Prio3Leader},
	{protocol.PDDBucket, natsauth.Coordinator},
	{protocol.PDDRoundsBucket, natsauth.Coordinator},
}

// mxTarget is where a steered message may land: another role's inbox, a
// key of a bucket, a stream subject or a responder's request subject.
type mxTarget struct {
	name    string // as in the operation's name
	subject string // the subject steered to ("%d": a number per use)
	spy     string // the spy that sees it, "" for none
	owner   natsauth.Role
	queue   string // the queue group the spy subscribes with
}

func mxTargets() []mxTarget {
	var ts []mxTarget
	for _, r := range natsauth.Roles {
		if r != natsauth.Client { // a client's inbox carries 130 random bits
			ts = append(ts, mxTarget{"inbox:" + string(r), natsauth.InboxPrefix(r) + ".matrix.%d", "inbox:" + string(r), r, ""})
		}
	}
	for _, b := range mxBuckets {
		ts = append(ts, mxTarget{"kv:" + b.bucket, "$KV." + b.bucket + ".matrix-%d", "", b.owner, ""})
	}
	ts = append(ts, mxTarget{"subject:" + protocol.RelaySubject("a"), protocol.RelaySubject("a"), "", natsauth.RelayA, ""},
		mxTarget{"subject:" + protocol.RelaySubject("b"), protocol.RelaySubject("b"), "", natsauth.RelayB, ""},
		mxTarget{"subject:" + mxStreamSubjects[2].subject, mxStreamSubjects[2].subject, "", natsauth.Coordinator, ""})
	for _, r := range mxResponders {
		ts = append(ts, mxTarget{"subject:" + r.subject, r.subject, r.subject, r.owner, r.queue})
	}
	return ts
}

// mxStream is a stream of the deployment as the server holds it after the
// setup: name, configuration (JSON, for create and update requests),
// first sequence, the subject of its seed message and its consumers.
type mxStream struct {
	account, name string
	config        []byte
	subjects      []string
	first         uint64
	seedSubject   string
	consumers     []mxConsumer
}

type mxConsumer struct {
	name, filter string
	config       []byte
	ackReply     string // the reply subject of a message delivered and not acknowledged
}

// mxHit is a message a spy received: the spy's name and the subject.
type mxHit struct{ spy, subject string }

// mxWorld is one deployment attacked by one credential.
type mxWorld struct {
	t      *testing.T
	ctx    context.Context
	ns     *natsserver.Server
	keyDir string
	conns  map[natsauth.Role]*nats.Conn

	mu   sync.Mutex
	hits []mxHit // in arrival order

	streams []mxStream
}

// newMXWorld starts a deployment: with split, from the generated
// configuration (one account per operator); without, the control: the
// configuration before the split (beforeSplitConfig: every role but the
// client in one account).
func newMXWorld(t *testing.T, ctx context.Context, split bool) *mxWorld {
	t.Helper()
	dir := t.TempDir()
	w := &mxWorld{t: t, ctx: ctx, keyDir: filepath.Join(dir, "keys"), conns: map[natsauth.Role]*nats.Conn{}}
	var (
		ns  *natsserver.Server
		err error
	)
	if split {
		ns, err = natsserver.Options{Dir: filepath.Join(dir, "js"), AuthTimeout: mxConnect}.StartAuth(ctx, w.keyDir, nil)
	} else {
		var keys map[natsauth.Role]string
		if keys, err = natsauth.GenerateAll(w.keyDir); err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(w.keyDir, natsserver.ConfigFileName)
		if err := os.WriteFile(conf, []byte(beforeSplitConfig(keys)), 0o600); err != nil {
			t.Fatal(err)
		}
		ns, err = natsserver.Options{Dir: filepath.Join(dir, "js"), ConfigFile: conf, AuthTimeout: mxConnect}.Start(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	w.ns = ns
	for _, r := range natsauth.Roles {
		w.conns[r] = w.dial(r, nil)
	}
	if split {
		err = streams.EnsureAccounts(ctx, w.conns[natsauth.Admin], streams.Config{})
	} else {
		// without the account split streams.Ensure leaves the relays'
		// consumers to the relays, which the table no longer lets create
		// them: the admin makes them, as the admin step does with accounts
		err = streams.Ensure(ctx, w.js(natsauth.Admin), streams.Config{})
		for _, name := range []string{"a", "b"} {
			if err == nil {
				err = relays.EnsureConsumer(ctx, w.js(natsauth.Admin), name, 0)
			}
		}
	}
	if err != nil {
		t.Fatalf("the admin step: %v", err)
	}
	w.relayConsumers()
	w.seed()
	w.spies()
	w.snapshotStreams()
	return w
}

// dial connects as r with its own NKey (and inbox prefix); cb, when set,
// receives the connection's asynchronous errors.
func (w *mxWorld) dial(r natsauth.Role, cb nats.ErrHandler) *nats.Conn {
	w.t.Helper()
	opts, err := natsconn.RoleSecurity(w.keyDir, r).Options()
	if err != nil {
		w.t.Fatal(err)
	}
	opts = append(opts, nats.Name("matrix-"+string(r)), nats.Timeout(mxConnect))
	if cb != nil {
		opts = append(opts, nats.ErrorHandler(cb))
	} else {
		opts = append(opts, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	}
	nc, err := nats.Connect(w.ns.URL, opts...)
	if err != nil {
		w.t.Fatalf("connect as %s: %v", r, err)
	}
	w.t.Cleanup(nc.Close)
	return nc
}

func (w *mxWorld) js(r natsauth.Role) jetstream.JetStream {
	js, err := jetstream.New(w.conns[r])
	if err != nil {
		w.t.Fatal(err)
	}
	return js
}

// relayConsumers checks, with each relay's own credential, that the
// admin step created the relay's durable consumer (no relay may create
// one).
func (w *mxWorld) relayConsumers() {
	for _, name := range []string{"a", "b"} {
		if _, err := w.js(natsauth.RelayRole(name)).Consumer(w.ctx, relays.Stream, relays.ConsumerName(name)); err != nil {
			w.t.Fatalf("relay %s's consumer after the admin step: %v", name, err)
		}
	}
}

// seed puts messages into every stream with the owners' credentials: two
// in each relay inbox (one of them then fetched and not acknowledged by
// the relay), one key per bucket, one entry of the active index.
func (w *mxWorld) seed() {
	ctx := w.ctx
	for _, s := range mxStreamSubjects {
		js := w.js(s.owner)
		for i := range 2 {
			if _, err := js.Publish(ctx, s.subject, fmt.Appendf(nil, "seed-%d", i)); err != nil {
				w.t.Fatalf("seed %s as %s: %v", s.subject, s.owner, err)
			}
		}
	}
	for _, b := range mxBuckets {
		kv, err := w.js(b.owner).KeyValue(ctx, b.bucket)
		if err != nil {
			w.t.Fatalf("bucket %s as %s: %v", b.bucket, b.owner, err)
		}
		if _, err := kv.Put(ctx, "seed", []byte("seed")); err != nil {
			w.t.Fatalf("seed %s as %s: %v", b.bucket, b.owner, err)
		}
	}
}

// spies subscribes, with each owner's credential, to every responder
// subject as its code does (queue group or plain; answering through
// natsconn.Respond) and to every role's inbox.
func (w *mxWorld) spies() {
	hit := func(name, subject string) {
		w.mu.Lock()
		w.hits = append(w.hits, mxHit{name, subject})
		w.mu.Unlock()
	}
	for _, r := range mxResponders {
		subj := r.subject
		answer := func(m *nats.Msg) {
			hit(subj, m.Subject)
			_ = natsconn.Respond(m, []byte("matrix-answer"))
		}
		var err error
		if r.queue == "" {
			_, err = w.conns[r.owner].Subscribe(subj, answer)
		} else {
			_, err = w.conns[r.owner].QueueSubscribe(subj, r.queue, answer)
		}
		if err != nil {
			w.t.Fatal(err)
		}
	}
	for _, r := range natsauth.Roles {
		if r == natsauth.Client {
			continue
		}
		name := "inbox:" + string(r)
		if _, err := w.dial(r, nil).Subscribe(natsauth.InboxPrefix(r)+".>", func(m *nats.Msg) { hit(name, m.Subject) }); err != nil {
			w.t.Fatal(err)
		}
	}
	for _, nc := range w.conns {
		if err := nc.FlushTimeout(30 * time.Second); err != nil {
			w.t.Fatal(err)
		}
	}
}

// jsz is the server's view of every account's streams and consumers.
func (w *mxWorld) jsz() []*server.AccountDetail {
	info, err := w.ns.NATS().Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, Config: true})
	if err != nil {
		w.t.Fatal(err)
	}
	return info.AccountDetails
}

// snapshotStreams records every stream and consumer the server holds
// after the setup; each relay fetches one message and keeps it
// unacknowledged, so its consumer has an acknowledgement to forge.
func (w *mxWorld) snapshotStreams() {
	seedSubject := func(subjects []string) string {
		for _, s := range mxStreamSubjects {
			if mxMatchAny(subjects, s.subject) {
				return s.subject
			}
		}
		for _, b := range mxBuckets {
			if subj := "$KV." + b.bucket + ".seed"; mxMatchAny(subjects, subj) {
				return subj
			}
		}
		return ""
	}
	for _, a := range w.jsz() {
		for _, sd := range a.Streams {
			cfg, err := json.Marshal(sd.Config)
			if err != nil {
				w.t.Fatal(err)
			}
			st := mxStream{account: a.Name, name: sd.Name, config: cfg, subjects: sd.Config.Subjects, first: sd.State.FirstSeq,
				seedSubject: seedSubject(sd.Config.Subjects)}
			for _, ci := range sd.Consumer {
				cc, err := json.Marshal(ci.Config)
				if err != nil {
					w.t.Fatal(err)
				}
				st.consumers = append(st.consumers, mxConsumer{name: ci.Name, filter: ci.Config.FilterSubject, config: cc})
			}
			w.streams = append(w.streams, st)
		}
	}
	slices.SortFunc(w.streams, func(a, b mxStream) int { return strings.Compare(a.account+a.name, b.account+b.name) })
	for i := range w.streams {
		for j := range w.streams[i].consumers {
			c := &w.streams[i].consumers[j]
			name, ok := strings.CutPrefix(c.name, "relay-")
			if !ok {
				continue
			}
			cons, err := w.js(natsauth.RelayRole(name)).Consumer(w.ctx, w.streams[i].name, c.name)
			if err != nil {
				w.t.Fatal(err)
			}
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(30*time.Second)) // ends at the message
			if err != nil {
				w.t.Fatal(err)
			}
			for m := range batch.Messages() {
				c.ackReply = m.Reply()
			}
			if c.ackReply == "" {
				w.t.Fatalf("relay %s fetched nothing from its consumer", name)
			}
		}
	}
}

// mxMatch reports whether subject falls under the NATS filter f.
func mxMatch(f, subject string) bool {
	ft, st := strings.Split(f, "."), strings.Split(subject, ".")
	for i, t := range ft {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) || (t != "*" && t != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

func mxMatchAny(filters []string, subject string) bool {
	return slices.ContainsFunc(filters, func(f string) bool { return mxMatch(f, subject) })
}

// streamState is what a window compares: the last sequence of each
// stream capturing subject, by account/stream; for subject "*" every
// stream's, and each consumer's acknowledgement floor and pending count
// by account/stream/consumer.
func (w *mxWorld) streamState(subject string) map[string][2]uint64 {
	out := map[string][2]uint64{}
	for _, a := range w.jsz() {
		for _, sd := range a.Streams {
			if subject != "*" && (sd.Config == nil || !mxMatchAny(sd.Config.Subjects, subject)) {
				continue
			}
			out[a.Name+"/"+sd.Name] = [2]uint64{sd.State.LastSeq}
			if subject != "*" {
				continue
			}
			for _, ci := range sd.Consumer {
				out[a.Name+"/"+sd.Name+"/"+ci.Name] = [2]uint64{ci.AckFloor.Consumer, uint64(ci.NumAckPending)}
			}
		}
	}
	return out
}

// kvHolds reports whether the bucket of subject "$KV.<bucket>.<key>"
// holds key, read with the bucket owner's credential.
func (w *mxWorld) kvHolds(subject string) bool {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(subject, "$KV."), ".")
	i := slices.IndexFunc(mxBuckets, func(b struct {
		bucket string
		owner  natsauth.Role
	}) bool {
		return b.bucket == bucket
	})
	if i < 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(w.ctx, mxAnswer)
	defer cancel()
	kv, err := w.js(mxBuckets[i].owner).KeyValue(ctx, bucket)
	if err != nil {
		return false
	}
	_, err = kv.Get(ctx, key)
	return err == nil
}

// mxAttacker is the attacking credential's connection; it remembers the
// subjects the server refused it to publish to and to subscribe to.
type mxAttacker struct {
	w       *mxWorld
	role    natsauth.Role
	nc      *nats.Conn
	account string          // the NATS account the server put the credential in
	spec    map[string]bool // the least-privilege specification

	mu         sync.Mutex
	refused    map[string]bool
	subRefused map[string]bool
}

// needed reports whether the specification lists op ("pub S", "js …")
// for the attacker's credential.
func (a *mxAttacker) needed(op string) bool { return a.spec["nats/"+string(a.role)+" "+op] }

// answerWait is how long op's requests wait for an answer: mxNeeded when
// the specification lists op, else mxAnswer.
func (a *mxAttacker) answerWait(op string) time.Duration {
	if a.needed(op) {
		return mxNeeded
	}
	return mxAnswer
}

var mxQuoted = regexp.MustCompile(`"([^"]*)"`)

func (w *mxWorld) attacker(r natsauth.Role, spec map[string]bool) *mxAttacker {
	a := &mxAttacker{w: w, role: r, spec: spec, refused: map[string]bool{}, subRefused: map[string]bool{}}
	a.nc = w.dial(r, func(_ *nats.Conn, _ *nats.Subscription, err error) {
		e := strings.ToLower(err.Error())
		m := mxQuoted.FindStringSubmatch(err.Error())
		if m == nil {
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		switch {
		case strings.Contains(e, "permissions violation for publish"):
			a.refused[m[1]] = true
		case strings.Contains(e, "permissions violation for subscription"):
			a.subRefused[m[1]] = true
		}
	})
	cid, err := a.nc.GetClientID()
	if err != nil {
		w.t.Fatal(err)
	}
	cz, err := w.ns.NATS().Connz(&server.ConnzOptions{CID: cid, Username: true})
	if err != nil || len(cz.Conns) != 1 {
		w.t.Fatalf("connection of %s: %v", r, err)
	}
	a.account = cz.Conns[0].Account
	return a
}

// apiPrefixes are the JetStream API prefixes through which the attacker
// may reach stream s: its own account's "$JS.API." when s lives there, and
// the import prefix "$JS.<account>.API." of s's account (how the admin and
// the operator reach other accounts' streams when each operator has an
// account of its own); every JetStream account's for s == nil.
func (a *mxAttacker) apiPrefixes(s *mxStream) []string {
	var out []string
	if s == nil || s.account == a.account {
		out = append(out, "$JS.API.")
	}
	for _, st := range a.w.streams {
		if p := "$JS." + st.account + ".API."; (s == nil || st.account == s.account) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// api sends body to the JetStream API subject rest ("STREAM.INFO.…") of
// stream s (nil: the account-wide API) through each of apiPrefixes and
// reports whether one answered without an error within wait.
func (a *mxAttacker) api(wait time.Duration, s *mxStream, rest string, body any) bool {
	var b []byte
	switch v := body.(type) {
	case nil:
	case []byte:
		b = v
	default:
		b, _ = json.Marshal(v)
	}
	for _, p := range a.apiPrefixes(s) {
		if apiOK(a.request(p+rest, b, wait)) {
			return true
		}
	}
	return false
}

func (a *mxAttacker) wasRefused(subject string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refused[subject]
}

func (a *mxAttacker) wasSubRefused(subject string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.subRefused[subject]
}

// publish sends m and reports whether the server refused it (its
// permission error arrives before the flush's answer, and its callback
// within a few milliseconds).
func (a *mxAttacker) publish(m *nats.Msg) (refused bool) {
	if err := a.nc.PublishMsg(m); err != nil {
		return true
	}
	_ = a.nc.FlushTimeout(30 * time.Second)
	for range 10 {
		if a.wasRefused(m.Subject) {
			return true
		}
		time.Sleep(3 * time.Millisecond)
	}
	return false
}

// request sends body to subject and returns the first answer, or nil when
// the server refused the publish, nobody answered or wait passed.
func (a *mxAttacker) request(subject string, body []byte, wait time.Duration) *nats.Msg {
	inbox := a.nc.NewRespInbox()
	sub, err := a.nc.SubscribeSync(inbox)
	if err != nil {
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := a.nc.PublishRequest(subject, inbox, body); err != nil {
		return nil
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if m, err := sub.NextMsg(10 * time.Millisecond); err == nil {
			if m.Header.Get("Status") == "503" { // no responders
				return nil
			}
			return m
		}
		if a.wasRefused(subject) {
			return nil
		}
	}
	return nil
}

// apiOK reports whether m is a JetStream API answer without an error
// (JSON without "error") or a message a get or fetch returned (no Status
// header).
func apiOK(m *nats.Msg) bool {
	if m == nil || m.Header.Get("Status") != "" {
		return false
	}
	var r struct {
		Error *json.RawMessage `json:"error"`
		Type  string           `json:"type"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Type == "" {
		return len(m.Data) > 0 // a direct get or a fetched message: raw bytes
	}
	return r.Error == nil
}

// mxResult is one operation of one credential and whether it succeeded.
type mxResult struct {
	op string
	ok bool
}

// natsMatrix runs every operation of role r against its own deployment
// (split: one account per operator; else the control, newMXWorld).
func natsMatrix(t *testing.T, ctx context.Context, r natsauth.Role, spec map[string]bool, split bool) []mxResult {
	w := newMXWorld(t, ctx, split)
	a := w.attacker(r, spec)
	var (
		mu  sync.Mutex
		out []mxResult
	)
	add := func(op string, ok bool) {
		mu.Lock()
		out = append(out, mxResult{op, ok})
		mu.Unlock()
	}
	a.subscriptions(add)
	a.readAPI(add)
	a.effects(add)
	a.destructive(add)
	// streams of one name in several accounts (each relay's inbox stream
	// when each operator has an account) are one resource: an operation
	// on it succeeded when it did on one of them
	merged := map[string]bool{}
	for _, r := range out {
		merged[r.op] = merged[r.op] || r.ok
	}
	out = out[:0]
	for op, ok := range merged {
		out = append(out, mxResult{op, ok})
	}
	return out
}

// subscriptions: the attacker subscribes to every request subject, stream
// subject and inbox; then each is used as in normal operation (requests by
// their requesters, publishes by their publishers, a request by each
// role, answered into its inbox). A subscription succeeded when a message
// reached it within mxSubWait (mxNeeded when the specification lists it;
// a refused one ends at the permission error) once the traffic's
// requests were answered (or mxAnswer passed).
func (a *mxAttacker) subscriptions(add func(string, bool)) {
	w := a.w
	var subjects []string
	for _, r := range mxResponders {
		subjects = append(subjects, r.subject)
	}
	for _, s := range mxStreamSubjects[:2] {
		subjects = append(subjects, s.subject)
	}
	subjects = append(subjects, protocol.PDDActiveSubjectPrefix+">")
	for _, r := range natsauth.Roles {
		if r == natsauth.Client {
			subjects = append(subjects, natsauth.InboxPrefix(r)+".*.>")
		} else {
			subjects = append(subjects, natsauth.InboxPrefix(r)+".>")
		}
	}
	subs := make([]*nats.Subscription, len(subjects))
	for i, s := range subjects {
		subs[i], _ = a.nc.SubscribeSync(s)
	}
	_ = a.nc.FlushTimeout(30 * time.Second) // the subscriptions are in place before the traffic
	var wg sync.WaitGroup
	for _, r := range mxResponders {
		wg.Go(func() { _, _ = w.conns[mxRequester(r.subject)].Request(r.subject, []byte("legit"), mxAnswer) })
	}
	for _, s := range mxStreamSubjects {
		_ = w.conns[s.owner].Publish(s.subject, []byte("legit"))
	}
	// every role's inbox gets an answer: a client's from the randomness
	// stand-in, the others' from JetStream's account info (or a
	// no-responders status), in their own account or through an import
	for _, r := range natsauth.Roles {
		subjects := []string{"$JS.API.INFO"}
		if r == natsauth.Client {
			subjects = []string{protocol.RandomnessPublicKeySubject}
		}
		for _, s := range w.streams {
			subjects = append(subjects, "$JS."+s.account+".API.STREAM.INFO."+s.name)
		}
		for _, subj := range subjects {
			wg.Go(func() { _, _ = w.conns[r].Request(subj, nil, mxAnswer) })
		}
	}
	wg.Wait()
	got := make([]bool, len(subjects))
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		pending := false
		for i, s := range subjects {
			if got[i] || subs[i] == nil {
				continue
			}
			if _, err := subs[i].NextMsg(0); err == nil {
				got[i] = true
				continue
			}
			wait := mxSubWait
			if a.needed("sub " + s) {
				wait = mxNeeded
			}
			if time.Since(start) < wait && !a.wasSubRefused(s) {
				pending = true
			}
		}
		if !pending {
			break
		}
	}
	for i, s := range subjects {
		if subs[i] != nil {
			_ = subs[i].Unsubscribe()
		}
		add("sub "+s, got[i])
	}
}

// readAPI: JetStream API requests that change nothing another role holds
// (or only its own new consumer), judged by their answer: account info,
// and per stream info, message get, direct get, create and update with
// the stream's own configuration, a new consumer (ephemeral, named,
// named with a filter), a durable consumer; per existing consumer,
// re-creating it with its own configuration, its info and a fetch.
func (a *mxAttacker) readAPI(add func(string, bool)) {
	var wg sync.WaitGroup
	try := func(op string, fn func(wait time.Duration) bool) { wg.Go(func() { add(op, fn(a.answerWait(op))) }) }
	try("js INFO", func(wait time.Duration) bool { return a.api(wait, nil, "INFO", nil) })
	newConsumer := func(name string) map[string]any {
		c := map[string]any{"ack_policy": "none", "deliver_policy": "all", "inactive_threshold": int64(10 * time.Minute)}
		if name != "" {
			c["name"] = name
		}
		return c
	}
	for _, s := range a.w.streams {
		try("js STREAM.INFO "+s.name, func(wait time.Duration) bool { return a.api(wait, &s, "STREAM.INFO."+s.name, nil) })
		try("js STREAM.MSG.GET "+s.name, func(wait time.Duration) bool {
			return a.api(wait, &s, "STREAM.MSG.GET."+s.name, map[string]any{"seq": s.first})
		})
		try("js DIRECT.GET "+s.name, func(wait time.Duration) bool {
			return a.api(wait, &s, "DIRECT.GET."+s.name, map[string]any{"seq": s.first}) ||
				(s.seedSubject != "" && a.api(wait, &s, "DIRECT.GET."+s.name+"."+s.seedSubject, nil))
		})
		try("js STREAM.CREATE "+s.name, func(wait time.Duration) bool { return a.api(wait, &s, "STREAM.CREATE."+s.name, s.config) })
		try("js STREAM.UPDATE "+s.name, func(wait time.Duration) bool { return a.api(wait, &s, "STREAM.UPDATE."+s.name, s.config) })
		try("js CONSUMER.CREATE "+s.name, func(wait time.Duration) bool {
			name := "mx-" + string(a.role)
			filtered := newConsumer(name + "f")
			filtered["filter_subject"] = s.seedSubject
			return a.api(wait, &s, "CONSUMER.CREATE."+s.name, map[string]any{"stream_name": s.name, "config": newConsumer("")}) ||
				a.api(wait, &s, "CONSUMER.CREATE."+s.name+"."+name, map[string]any{"stream_name": s.name, "config": newConsumer(name)}) ||
				(s.seedSubject != "" && a.api(wait, &s, "CONSUMER.CREATE."+s.name+"."+name+"f."+s.seedSubject, map[string]any{"stream_name": s.name, "config": filtered}))
		})
		try("js CONSUMER.DURABLE.CREATE "+s.name, func(wait time.Duration) bool {
			name := "mxd-" + string(a.role)
			c := newConsumer("")
			c["durable_name"] = name
			return a.api(wait, &s, "CONSUMER.DURABLE.CREATE."+s.name+"."+name, map[string]any{"stream_name": s.name, "config": c})
		})
		for _, c := range s.consumers {
			rest := "CONSUMER.CREATE." + s.name + "." + c.name
			if c.filter != "" {
				rest += "." + c.filter
			}
			body := []byte(`{"stream_name":"` + s.name + `","config":` + string(c.config) + `}`)
			try("js CONSUMER.CREATE "+s.name+" "+c.name, func(wait time.Duration) bool { return a.api(wait, &s, rest, body) })
			try("js CONSUMER.INFO "+s.name+" "+c.name, func(wait time.Duration) bool { return a.api(wait, &s, "CONSUMER.INFO."+s.name+"."+c.name, nil) })
			try("js CONSUMER.MSG.NEXT "+s.name+" "+c.name, func(wait time.Duration) bool {
				return a.api(wait, &s, "CONSUMER.MSG.NEXT."+s.name+"."+c.name, map[string]any{"batch": 1, "no_wait": true})
			})
		}
	}
	wg.Wait()
}

// effects: operations judged by what they do to state the attacker does
// not hold, one at a time, each in a window of at most mxWait, or
// mxNeeded for an operation the specification lists (shorter when the
// server refused every publish of the operation). An operation succeeded
// when, in its window, a spy (a responder stand-in or an inbox) received
// a message, a stream capturing the target subject grew, or a consumer's
// acknowledgements moved. An operation whose window showed nothing but
// that names a subject of its own (kv-put, and steering onto an inbox or
// a bucket key: "…matrix-N") succeeded too when, by the end of the phase
// and at least mxLate after its window, its spy received a message on
// that subject or the bucket holds that key: its effect came late.
//
//   - pub S: a plain publish to every request and stream subject;
//   - kv-put B: a publish to $KV.B.<key>;
//   - ack STREAM CONSUMER: "+ACK" to the reply subject of a message the
//     consumer's owner holds unacknowledged;
//   - reply-to T: a request to every responder naming T as reply subject;
//   - puback-to T: a publish into every stream not holding T, naming T as
//     reply subject (JetStream acknowledges there);
//   - deliver-to T: a push consumer on every stream not holding T with T
//     as deliver subject (operations last: the consumers keep running).
func (a *mxAttacker) effects(add func(string, bool)) {
	w := a.w
	var res []mxResult
	// late: operations whose window showed nothing, with the check of
	// their own subject and when their late window ends
	type lateCheck struct {
		i     int
		until time.Time
		check func() bool
	}
	var late []lateCheck
	n := 0
	uniq := func(s string) string {
		n++
		if strings.Contains(s, "%d") {
			return fmt.Sprintf(s, n)
		}
		return s
	}
	// window runs act (which says whether everything it sent was refused)
	// and waits for spy, one of the streams capturing subject or (subject
	// "*") any consumer's acknowledgements to change; when nothing did,
	// lateSubj (a spy's subject or a bucket's key subject of this
	// operation only, "" for none) is checked again at the end.
	window := func(op, spy, subject, lateSubj string, act func() (allRefused bool)) {
		ok := a.window(op, spy, subject, act)
		res = append(res, mxResult{op, ok})
		if ok || lateSubj == "" {
			return
		}
		l := lateCheck{i: len(res) - 1, until: time.Now().Add(mxLate)}
		if spy != "" {
			l.check = func() bool {
				w.mu.Lock()
				defer w.mu.Unlock()
				return slices.Contains(w.hits, mxHit{spy, lateSubj})
			}
		} else {
			l.check = func() bool { return w.kvHolds(lateSubj) }
		}
		late = append(late, l)
	}

	// pub: plainly, then as a request (replies to the attacker's own
	// inbox), as the roles' code publishes
	pub := func(subj string) func() bool {
		return func() bool {
			plain := a.publish(&nats.Msg{Subject: subj, Data: []byte("matrix")})
			return a.publish(&nats.Msg{Subject: subj, Reply: a.nc.NewRespInbox(), Data: []byte("matrix")}) && plain
		}
	}
	for _, r := range mxResponders {
		window("pub "+r.subject, r.subject, "", "", pub(r.subject))
	}
	for _, s := range mxStreamSubjects {
		window("pub "+s.subject, "", s.subject, "", pub(s.subject))
	}
	for _, b := range mxBuckets {
		subj := uniq("$KV." + b.bucket + ".matrix-%d")
		window("kv-put "+b.bucket, "", subj, subj, pub(subj))
	}
	for _, s := range w.streams {
		for _, c := range s.consumers {
			if c.ackReply == "" {
				continue
			}
			window("ack "+s.name+" "+c.name, "", "*", "", func() bool {
				return a.publish(&nats.Msg{Subject: c.ackReply, Data: []byte("+ACK")})
			})
		}
	}
	holds := func(s mxStream, subject string) bool { return mxMatchAny(s.subjects, subject) }
	// steering: only onto what another role owns and the credential may
	// not publish to itself (steering there gains nothing)
	targets := slices.DeleteFunc(mxTargets(), func(t mxTarget) bool {
		return t.owner == a.role || a.needed("pub "+t.subject)
	})
	var candidates []string // subjects a stream captures
	for _, s := range mxStreamSubjects {
		candidates = append(candidates, s.subject)
	}
	for _, b := range mxBuckets {
		candidates = append(candidates, "$KV."+b.bucket+".matrix-src")
	}
	// steer runs one operation per target, each in its own window: the
	// spy of the target, or the streams holding its subject
	steer := func(kind string, act func(t mxTarget, subj string) (allRefused bool)) {
		for _, t := range targets {
			subj := uniq(t.subject)
			sinkSubj, lateSubj := subj, ""
			if t.spy != "" {
				sinkSubj = "" // responders and inboxes: no stream holds them
			}
			if subj != t.subject { // a subject of this operation's own
				lateSubj = subj
			}
			window(kind+" "+t.name, t.spy, sinkSubj, lateSubj, func() bool { return act(t, subj) })
		}
	}
	steer("reply-to", func(_ mxTarget, subj string) bool {
		all := true
		for _, r := range mxResponders {
			if r.subject != subj {
				all = a.publish(&nats.Msg{Subject: r.subject, Reply: subj, Data: []byte("matrix")}) && all
			}
		}
		return all
	})
	steer("puback-to", func(_ mxTarget, subj string) bool {
		all := true
		for _, src := range candidates {
			if slices.ContainsFunc(w.streams, func(s mxStream) bool { return holds(s, src) && holds(s, subj) }) {
				continue
			}
			all = a.publish(&nats.Msg{Subject: src, Reply: subj, Data: []byte("matrix")}) && all
		}
		return all
	})
	steer("deliver-to", func(t mxTarget, subj string) bool {
		all := true
		for _, s := range w.streams {
			if holds(s, subj) {
				continue
			}
			// without a deliver group, and in the spy's queue group (the
			// names are in the code): a push consumer delivers only where
			// a plain or its group's subscription listens
			for _, group := range slices.Compact([]string{"", t.queue}) {
				name := fmt.Sprintf("mxp%d", n)
				n++
				cfg := map[string]any{"name": name, "deliver_subject": subj, "ack_policy": "none", "deliver_policy": "all",
					"inactive_threshold": int64(10 * time.Minute)}
				if group != "" {
					cfg["deliver_group"] = group
				}
				body, _ := json.Marshal(map[string]any{"stream_name": s.name, "config": cfg})
				if a.api(mxAnswer, &s, "CONSUMER.CREATE."+s.name+"."+name, body) || a.api(mxAnswer, &s, "CONSUMER.CREATE."+s.name, body) {
					all = false
				}
			}
		}
		return all
	})
	// effects that came late: each named subject is checked until it is
	// found or its late window has passed
	for {
		late = slices.DeleteFunc(late, func(l lateCheck) bool {
			if l.check() {
				res[l.i].ok = true
				return true
			}
			return false
		})
		if !slices.ContainsFunc(late, func(l lateCheck) bool { return time.Now().Before(l.until) }) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, r := range res {
		add(r.op, r.ok)
	}
}

// window runs act (which says whether everything it sent was refused)
// and waits, mxWait or (op listed in the specification) mxNeeded, for
// spy, one of the streams capturing subject or (subject "*") any
// consumer's acknowledgements to change; it reports whether one did.
func (a *mxAttacker) window(op, spy, subject string, act func() (allRefused bool)) bool {
	w := a.w
	wait := mxWait
	if a.needed(op) {
		wait = mxNeeded
	}
	w.mu.Lock()
	from := len(w.hits)
	w.mu.Unlock()
	var before map[string][2]uint64
	if subject != "" {
		before = w.streamState(subject)
	}
	refused := act()
	deadline := time.Now().Add(wait)
	for {
		w.mu.Lock()
		hit := spy != "" && slices.ContainsFunc(w.hits[from:], func(h mxHit) bool { return h.spy == spy })
		w.mu.Unlock()
		if hit {
			return true
		}
		if subject != "" {
			for k, v := range w.streamState(subject) {
				b, ok := before[k]
				if subject == "*" && strings.Count(k, "/") == 2 && ok && (v[0] > b[0] || v[1] < b[1]) {
					return true
				}
				if subject != "*" && (!ok || v[0] > b[0]) {
					return true
				}
			}
		}
		if refused || time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// destructive: per stream, one after the other, deleting its first
// message, each of its consumers, purging it and deleting it, judged by
// the API's answer (streams side by side).
func (a *mxAttacker) destructive(add func(string, bool)) {
	var wg sync.WaitGroup
	for _, s := range a.w.streams {
		wg.Go(func() {
			try := func(op, rest string, body any) { add(op, a.api(a.answerWait(op), &s, rest, body)) }
			try("js STREAM.MSG.DELETE "+s.name, "STREAM.MSG.DELETE."+s.name, []byte(fmt.Sprintf(`{"seq":%d,"no_erase":true}`, s.first)))
			for _, c := range s.consumers {
				try("js CONSUMER.DELETE "+s.name+" "+c.name, "CONSUMER.DELETE."+s.name+"."+c.name, nil)
			}
			try("js STREAM.PURGE "+s.name, "STREAM.PURGE."+s.name, []byte("{}"))
			try("js STREAM.DELETE "+s.name, "STREAM.DELETE."+s.name, nil)
		})
	}
	wg.Wait()
}
