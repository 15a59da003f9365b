package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsauth"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/pipelines/streams"
	"github.com/crowdlog/crowdlog/protocol"
)

// accountWorld is one embedded NATS server with the permission table on,
// either as natsauth generates it (one account per role) or, for the
// control, as it was generated before the account split: every role but
// the client in one account with JetStream ("CROWDLOG"), the client in
// its own account importing the client subjects, and the bucket owners'
// rows with the consumer rights they held then (streamUse: create any
// consumer, push or pull, on their own buckets). Streams, buckets and
// relay consumers are made by the admin step.
type accountWorld struct {
	t      *testing.T
	ctx    context.Context
	url    string
	keyDir string
	split  bool // one account per role
}

// oldConsumerRights are the consumer subjects a key-value bucket's owner
// held on its bucket's stream before the split (the consumer half of the
// table's streamUse, then part of every owner's row).
func oldConsumerRights(stream string) []string {
	return []string{"$JS.API.CONSUMER.CREATE." + stream, "$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.INFO." + stream + ".>", "$JS.API.CONSUMER.DELETE." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>", "$JS.ACK." + stream + ".>", "$JS.FC." + stream + ".>"}
}

// beforeSplitConfig renders the control's server configuration (see
// accountWorld): the roles' rows as in one account (oneAccountRow) plus
// oldConsumerRights for the issuer's and the randomness service's
// buckets, the client in its own account.
func beforeSplitConfig(keys map[natsauth.Role]string) string {
	q := func(s []string) string {
		out := make([]string, len(s))
		for i, x := range s {
			out[i] = strconv.Quote(x)
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	clientSubjects, _ := natsauth.Table(natsauth.Client)
	var b strings.Builder
	fmt.Fprintf(&b, "jetstream: enabled\naccounts: {\n  %s: {\n    jetstream: enabled\n    users: [\n", preFixAccount)
	for _, r := range natsauth.Roles {
		if r == natsauth.Client {
			continue
		}
		p := oneAccountRow(r)
		if r == natsauth.Issuer || r == natsauth.Randomness {
			for _, s := range natsauth.Streams(r) {
				p.Publish = append(p.Publish, oldConsumerRights(s)...)
			}
		}
		fmt.Fprintf(&b, "      {nkey: %q, permissions: {publish: {allow: %s}, subscribe: {allow: %s}", keys[r], q(p.Publish), q(p.Subscribe))
		if p.Responses {
			b.WriteString(", allow_responses: true")
		}
		b.WriteString("}}\n")
	}
	b.WriteString("    ]\n    exports: [\n")
	var services []string
	for _, s := range clientSubjects.Publish {
		if !strings.HasSuffix(s, "*") {
			services = append(services, s)
		}
	}
	services = append(services, protocol.RelayKeysSubject("a"), protocol.RelayKeysSubject("b"))
	for _, s := range services {
		fmt.Fprintf(&b, "      {service: %q, accounts: [%q]}\n", s, natsauth.ClientAccount)
	}
	fmt.Fprintf(&b, "    ]\n  }\n  %s: {\n    users: [\n      {nkey: %q, permissions: {publish: {allow: %s}, subscribe: {allow: %s}}}\n    ]\n    imports: [\n",
		natsauth.ClientAccount, keys[natsauth.Client], q(clientSubjects.Publish), q(clientSubjects.Subscribe))
	for _, s := range services {
		fmt.Fprintf(&b, "      {service: {account: %q, subject: %q}}\n", preFixAccount, s)
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.String()
}

func newAccountWorld(t *testing.T, ctx context.Context, split bool) *accountWorld {
	t.Helper()
	dir := t.TempDir()
	w := &accountWorld{t: t, ctx: ctx, keyDir: filepath.Join(dir, "nats"), split: split}
	keys, err := natsauth.GenerateAll(w.keyDir)
	if err != nil {
		t.Fatal(err)
	}
	text := beforeSplitConfig(keys)
	if split {
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
	admin := w.conn(natsauth.Admin)
	if split {
		err = streams.EnsureAccounts(ctx, admin, streams.Config{})
	} else {
		js, jerr := jetstream.New(admin)
		if jerr != nil {
			t.Fatal(jerr)
		}
		err = streams.Ensure(ctx, js, streams.Config{})
	}
	if err != nil {
		t.Fatalf("the admin step: %v", err)
	}
	return w
}

// conn connects as role r with its own NKey.
func (w *accountWorld) conn(r natsauth.Role) *nats.Conn {
	w.t.Helper()
	nc, err := natsconn.ConnectAs(w.url, "account-attack-"+string(r), natsconn.RoleSecurity(w.keyDir, r))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(nc.Close)
	return nc
}

// bucket opens key-value bucket name with the credential of its owner.
func (w *accountWorld) bucket(owner natsauth.Role, name string) jetstream.KeyValue {
	w.t.Helper()
	js, err := jetstream.New(w.conn(owner))
	if err != nil {
		w.t.Fatal(err)
	}
	kv, err := js.KeyValue(w.ctx, name)
	if err != nil {
		w.t.Fatalf("%s opens its bucket %s: %v", owner, name, err)
	}
	return kv
}

// pubAckTarget is another operator's bucket an attacker names as the
// reply subject of its own JetStream publish.
type pubAckTarget struct {
	owner  natsauth.Role
	bucket string
}

// rolePubAckReflection mounts the attack on a fresh world: the issuer
// holds pubAckKeys counters at 3 per attacker (CounterKey is computable
// from public values); relay a (publishing into relay b's inbox), the randomness
// service (into its spent-token bucket) and the coordinator (into its PDD
// bucket) each publish pubAckKeys messages per target naming as reply
// subject a key of another operator's bucket: the issuer's counters, the
// randomness service's spent tokens, the coordinator's clients. It
// returns how many of those writes landed (a counter no longer 3, a new
// key in the spent-token or PDD bucket) within wait (polling; ending
// when all did), how many were tried and how long it waited.
func rolePubAckReflection(t *testing.T, split bool, wait time.Duration) (landed, tried int, detail []string, took time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := newAccountWorld(t, ctx, split)
	const pubAckKeys = 5
	targets := []pubAckTarget{{natsauth.Issuer, protocol.IssuerCountersBucket}, {natsauth.Randomness, protocol.SpentTokensBucket},
		{natsauth.Coordinator, protocol.PDDBucket}}
	attackers := []struct {
		role    natsauth.Role
		subject func(i int) string // a subject it may publish into a stream of
	}{
		{natsauth.RelayA, func(int) string { return protocol.RelaySubject("b") }},
		{natsauth.Randomness, func(i int) string { return fmt.Sprintf("$KV.%s.own-%d", protocol.SpentTokensBucket, i) }},
		{natsauth.Coordinator, func(i int) string { return fmt.Sprintf("$KV.%s.own-%d", protocol.PDDBucket, i) }},
	}
	key := func(attacker natsauth.Role, target pubAckTarget, i int) string {
		if target.bucket == protocol.IssuerCountersBucket {
			return fmt.Sprintf("id-%s-%d.e1", attacker, i) // an existing identity's counter
		}
		return fmt.Sprintf("reflected-%s-%d", attacker, i)
	}
	counters := w.bucket(natsauth.Issuer, protocol.IssuerCountersBucket)
	for _, a := range attackers {
		for i := range pubAckKeys {
			if _, err := counters.Put(ctx, key(a.role, targets[0], i), []byte("3")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, a := range attackers {
		nc := w.conn(a.role)
		for _, target := range targets {
			if target.owner == a.role {
				continue
			}
			for i := range pubAckKeys {
				tried++
				reply := "$KV." + target.bucket + "." + key(a.role, target, i)
				if err := nc.PublishRequest(a.subject(i), reply, fmt.Appendf(nil, "junk-%d", i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := nc.FlushTimeout(30 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	buckets := map[string]jetstream.KeyValue{}
	for _, target := range targets {
		buckets[target.bucket] = w.bucket(target.owner, target.bucket)
	}
	count := func() int {
		landed, detail = 0, nil
		for _, target := range targets {
			kv := buckets[target.bucket]
			n := 0
			for _, a := range attackers {
				if a.role == target.owner {
					continue
				}
				for i := range pubAckKeys {
					e, err := kv.Get(ctx, key(a.role, target, i))
					switch {
					case target.bucket == protocol.IssuerCountersBucket:
						if err != nil || string(e.Value()) != "3" {
							n++
						}
					case err == nil:
						n++
					}
				}
			}
			landed += n
			detail = append(detail, fmt.Sprintf("%s %d", target.bucket, n))
		}
		return landed
	}
	_, took = settle(wait, tried, count) // JetStream acknowledges
	return landed, tried, detail, took
}

// TestAttackRolePubAckReflection: a role that may publish into a
// JetStream stream names another operator's key as the reply subject, and
// JetStream writes its acknowledgement there. With one account per role
// the reply subject is a subject of the publisher's own account, where no
// other operator's bucket lives: no write lands. The control (every role
// but the client in one account, as generated before the split) has the
// acknowledgement JSON overwrite the issuer's counters (the issuer then
// refuses those identities as over budget) and create keys in the
// spent-token and PDD buckets. The control runs first and waits for every
// write to land (30 s at most); the split run then waits 3 times as long
// as the control took, at least 500 ms (calibratedWait).
func TestAttackRolePubAckReflection(t *testing.T) {
	var landed, tried, cLanded, cTried int
	var detail, cDetail []string
	var took time.Duration
	t.Run("control", func(t *testing.T) { cLanded, cTried, cDetail, took = rolePubAckReflection(t, false, settleControl) })
	t.Run("split", func(t *testing.T) {
		landed, tried, detail, _ = rolePubAckReflection(t, true, calibratedWait(took, 500*time.Millisecond))
	})
	fmt.Printf("ATTACK role-puback-reflection: %d of %d acknowledgements landed in another operator's bucket (%s; relay a, randomness and coordinator credentials); control before the account split (one account): %d of %d (%s)\n",
		landed, tried, strings.Join(detail, ", "), cLanded, cTried, strings.Join(cDetail, ", "))
	if landed != 0 {
		t.Errorf("%d of %d reflected acknowledgements landed in another operator's bucket", landed, tried)
	}
	if cLanded == 0 {
		t.Error("control: no acknowledgement landed; the attack should work with every role in one account")
	}
}

// pushConsumerInject mounts the attack on a fresh world: the issuer puts
// 5 chosen entries into its own counters bucket, then, with its own
// credential, creates a push consumer on the bucket whose deliver subject
// is the Prio3 helper's request subject; the coordinator (the one runtime
// role that still creates consumers, ordered ones on its own buckets)
// does the same on its PDD bucket. A subscriber with the Prio3 helper's
// credential counts what arrives on crowdlog.prio3.helper within wait
// (polling; ending when 5 did, one bucket's entries). It returns the messages delivered,
// which consumer creates were accepted and how long it waited.
func pushConsumerInject(t *testing.T, split bool, wait time.Duration) (delivered int, accepted []string, took time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := newAccountWorld(t, ctx, split)
	helper := w.conn(natsauth.Prio3Helper)
	var got atomic.Int64
	sub, err := helper.Subscribe(protocol.Prio3HelperSubject, func(*nats.Msg) { got.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := helper.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		role   natsauth.Role
		bucket string
	}{{natsauth.Issuer, protocol.IssuerCountersBucket}, {natsauth.Coordinator, protocol.PDDBucket}} {
		kv := w.bucket(a.role, a.bucket)
		for i := range 5 {
			if _, err := kv.Put(ctx, fmt.Sprintf("chosen-%d", i), []byte("a forged prio3 request")); err != nil {
				t.Fatal(err)
			}
		}
		nc := w.conn(a.role)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		// a refused request ends at its permission error, an accepted
		// one at its answer
		cctx, ccancel := refusals(nc)(ctx, 20*time.Second)
		start := time.Now()
		_, err = js.CreateOrUpdatePushConsumer(cctx, "KV_"+a.bucket, jetstream.ConsumerConfig{DeliverSubject: protocol.Prio3HelperSubject})
		ccancel()
		t.Logf("%s's consumer create: %v (%s)", a.role, err, time.Since(start).Round(time.Millisecond))
		if err == nil {
			accepted = append(accepted, string(a.role))
		}
	}
	// the issuer's 5 entries (acknowledged by nobody: redelivered after
	// the consumer's 30 s acknowledgement wait, so no later count)
	n, took := settle(wait, 5, func() int { return int(got.Load()) })
	return n, accepted, took
}

// TestAttackPushConsumerInject: nats-server does not check a push
// consumer's deliver subject against its creator's publish permissions.
// With one account per role the issuer may not create a consumer at all,
// and a deliver subject the coordinator names is a subject of its own
// account, which imports nothing: nothing reaches the Prio3 helper. The
// control (one account, the owners' old consumer rights) delivers the
// issuer's chosen bytes to the helper, which it may not publish to.
//
// The control runs first and waits for 5 messages (30 s at most);
// the split run then waits 3 times as long as the control took, at least
// 1 s (calibratedWait).
func TestAttackPushConsumerInject(t *testing.T) {
	var n, cn int
	var acc, cacc []string
	var took time.Duration
	t.Run("control", func(t *testing.T) { cn, cacc, took = pushConsumerInject(t, false, settleControl) })
	t.Run("split", func(t *testing.T) { n, acc, _ = pushConsumerInject(t, true, calibratedWait(took, time.Second)) })
	fmt.Printf("ATTACK push-consumer-inject: %d messages reached the Prio3 helper through push consumers of the issuer and the coordinator (consumer creates accepted: %v); control before the account split (one account, owners may create consumers): %d messages (accepted: %v)\n",
		n, acc, cn, cacc)
	if n != 0 {
		t.Errorf("%d messages reached the Prio3 helper", n)
	}
	if cn == 0 {
		t.Error("control: nothing reached the helper; the attack should work with every role in one account")
	}
}

// TestRelayConsumerIsTheAdminStep: with one account per role the admin
// step has created each relay's durable consumer in the relay's account;
// the relay's own credential binds it but may neither change it nor
// create another (a consumer's creator chooses its deliver subject).
func TestRelayConsumerIsTheAdminStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := newAccountWorld(t, ctx, true)
	for _, r := range []natsauth.Role{natsauth.RelayA, natsauth.RelayB} {
		name, _ := natsauth.RelayName(r)
		js, err := jetstream.New(w.conn(r))
		if err != nil {
			t.Fatal(err)
		}
		c, err := js.Consumer(ctx, protocol.RelayStream, protocol.RelayConsumerName(name))
		if err != nil {
			t.Fatalf("%s binds the admin step's consumer: %v", r, err)
		}
		if got := c.CachedInfo().Config.FilterSubject; got != protocol.RelaySubject(name) {
			t.Errorf("%s's consumer filters %q", r, got)
		}
		for what, cfg := range map[string]jetstream.ConsumerConfig{
			"change its own":   {Durable: protocol.RelayConsumerName(name), FilterSubject: protocol.RelaySubject(name), AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1},
			"create another":   {Durable: "extra", AckPolicy: jetstream.AckExplicitPolicy},
			"create push to b": {DeliverSubject: protocol.RelaySubject("b"), AckPolicy: jetstream.AckExplicitPolicy},
		} {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			if cfg.DeliverSubject != "" {
				_, err = js.CreateOrUpdatePushConsumer(cctx, protocol.RelayStream, cfg)
			} else {
				_, err = js.CreateOrUpdateConsumer(cctx, protocol.RelayStream, cfg)
			}
			ccancel()
			if err == nil {
				t.Errorf("%s could %s consumer", r, what)
			}
		}
	}
}
