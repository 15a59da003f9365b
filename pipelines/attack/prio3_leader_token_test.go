package attack

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestPrio3LeaderTokenIssuance: the two aggregator operators' real issuers
// (keys directories of roles prio3-helper and prio3-leader, counters in
// JetStream KV on one embedded NATS server) each issue one token per
// enrolled identity per campaign-day to one tokenclient.Client (one pin
// file: the two keys of one epoch are pinned apart). The leader token
// verifies under the key the leader's seed derives and not under the
// helper's; a second leader token for the day is refused (over budget).
func TestPrio3LeaderTokenIssuance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := natsserver.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	pub, id, _ := ed25519.GenerateKey(rand.Reader)
	seeds := map[string][]byte{}
	for role, seedFile := range map[string]string{keydir.RolePrio3Helper: keydir.Prio3HelperTokenSeed, keydir.RolePrio3Leader: keydir.Prio3LeaderTokenSeed} {
		keys := filepath.Join(t.TempDir(), role)
		if err := keydir.GenerateRole(keys, role); err != nil {
			t.Fatal(err)
		}
		if err := keydir.EnrollIdentity(keys, pub); err != nil {
			t.Fatal(err)
		}
		if seeds[role], err = keydir.LoadPrio3TokenSeed(filepath.Join(keys, seedFile)); err != nil {
			t.Fatal(err)
		}
		is, err := issuer.New(nc, keys, issuer.Limits{}, quiet())
		if err != nil {
			t.Fatal(err)
		}
		ictx, icancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- is.Run(ictx) }()
		defer func() { icancel(); <-done }()
	}
	// their subscriptions are in place (each token subject's before its key subject's)
	awaitResponders(t, nc, protocol.IssuerPrio3HelperPublicKeySubject, protocol.IssuerPrio3LeaderPublicKeySubject)

	const camp = "lt"
	day := p3.DayOf(time.Now())
	v, err := p3.New(camp, p3.Config{Kind: p3.KindSumVec, Length: 4, Bits: 2})
	if err != nil {
		t.Fatal(err)
	}
	hk, _ := onion.GenerateKeyPair(2)
	r, _, err := v.ShardReport(camp, day, []uint64{1, 0, 2, 3}, hk.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	tc := &tokenclient.Client{NC: nc, Identity: id, PinFile: filepath.Join(t.TempDir(), "issuer.pins")}
	if r.HelperToken, err = tc.Prio3HelperToken(ctx, camp, uint32(day), r.HelperNonce()); err != nil {
		t.Fatal(err)
	}
	if r.LeaderToken, err = tc.Prio3LeaderToken(ctx, camp, uint32(day), r.HelperNonce()); err != nil {
		t.Fatal(err)
	}
	epoch := token.Prio3Epoch(camp, uint32(day))
	lt, err := token.ParseToken(r.LeaderToken)
	if err != nil {
		t.Fatal(err)
	}
	lkey, _ := token.DeriveKey(token.KindPrio3Leader, epoch, seeds[keydir.RolePrio3Leader])
	hkey, _ := token.DeriveKey(token.KindPrio3Helper, epoch, seeds[keydir.RolePrio3Helper])
	if err := lkey.Verify(lt); err != nil {
		t.Errorf("leader token under the leader's key: %v", err)
	}
	if hkey.Verify(lt) == nil {
		t.Error("a leader token verifies under the helper's key")
	}
	ht, _ := token.ParseToken(r.HelperToken)
	if lkey.Verify(ht) == nil {
		t.Error("a helper token verifies under the leader's key")
	}
	if _, err := tc.Prio3LeaderToken(ctx, camp, uint32(day), r.HelperNonce()); !errors.Is(err, token.ErrBudget) {
		t.Errorf("second leader token of the day: %v, want ErrBudget", err)
	}
	// the report carries both through its seal
	lk, _ := onion.GenerateKeyPair(1)
	up, err := r.Seal(lk.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	back, err := p3.OpenReport([]*onion.KeyPair{lk}, up)
	if err != nil {
		t.Fatal(err)
	}
	if string(back.LeaderToken) != string(r.LeaderToken) || string(back.HelperToken) != string(r.HelperToken) {
		t.Error("the tokens did not survive the seal")
	}
}
