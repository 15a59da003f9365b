package attack

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	agg "github.com/crowdlog/crowdlog/aggregator/prio3"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestAttackPrio3DoubleUpload: one enrolled client identity uploads two
// Prio3 reports (two fresh report ids, its own client's once-a-day check
// bypassed) for one campaign-day, and a third that carries its one helper
// token copied from the first. The helper operator's real issuer
// (keys directory of role prio3-helper, counters in JetStream KV on an
// embedded NATS server) issues one helper token per identity per
// campaign-day, and the real leader and helper state machines prepare the
// reports: 1 counted. Control: a helper that needs no token (the code
// before helper tokens) counts 3.
func TestAttackPrio3DoubleUpload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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

	// the helper's operator: its keys directory (HPKE key, token seed) and
	// its issuer, with one enrolled identity
	keys := filepath.Join(t.TempDir(), "prio3-helper")
	if err := keydir.GenerateRole(keys, keydir.RolePrio3Helper); err != nil {
		t.Fatal(err)
	}
	pub, id, _ := ed25519.GenerateKey(rand.Reader)
	if err := keydir.EnrollIdentity(keys, pub); err != nil {
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
	awaitResponders(t, nc, protocol.IssuerPrio3HelperPublicKeySubject) // its subscriptions are in place (the token subject's first)
	seed, err := keydir.LoadPrio3TokenSeed(filepath.Join(keys, keydir.Prio3HelperTokenSeed))
	if err != nil {
		t.Fatal(err)
	}
	hk, err := onion.LoadKeyPair(filepath.Join(keys, keydir.Prio3HelperKey))
	if err != nil {
		t.Fatal(err)
	}
	lk, _ := onion.GenerateKeyPair(1)
	ck, _ := onion.GenerateKeyPair(1)

	const camp = "dbl"
	m := p3.Config{Kind: p3.KindSumVec, Length: 10, Bits: 4}
	now := time.Now().UTC()
	day := p3.DayOf(now)
	v, err := p3.New(camp, m)
	if err != nil {
		t.Fatal(err)
	}
	// the attacker's reports, each asking the issuer for its own token
	tc := &tokenclient.Client{NC: nc, Identity: id}
	var uploads [][]byte
	var first []byte
	issued, refused := 0, 0
	for i := range 3 {
		r, _, err := v.ShardReport(camp, day, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, hk.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			tok, err := tc.Prio3HelperToken(ctx, camp, uint32(day), r.HelperNonce())
			switch {
			case err == nil:
				issued++
				r.HelperToken = tok
				first = tok
			case errors.Is(err, token.ErrBudget):
				refused++
			default:
				t.Fatal(err)
			}
		} else {
			r.HelperToken = first // the one token, moved to another report
		}
		up, err := r.Seal(lk.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		uploads = append(uploads, up)
	}

	count := func(withTokens bool) (uint64, map[string]uint64) {
		var vk [32]byte
		rand.Read(vk[:])
		base := agg.Config{Campaign: camp, Measurement: m, KeyEpoch: 1, VerifyKeys: map[uint32][32]byte{1: vk},
			Grace: time.Hour, MinBatchSize: 1, Collector: ck.PublicKey()}
		cl, ch := base, base
		cl.Keys, ch.Keys = []*onion.KeyPair{lk}, []*onion.KeyPair{hk}
		if withTokens {
			ch.TokenSeed = seed
		}
		l, err := agg.NewLeader(cl)
		if err != nil {
			t.Fatal(err)
		}
		h, err := agg.NewHelper(ch)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range uploads {
			if _, err := l.Apply(agg.Event{Now: now, Kind: agg.EventUpload, Msg: u}); err != nil {
				t.Fatal(err)
			}
		}
		outs, err := l.Apply(agg.Event{Now: now, Kind: agg.EventTick})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			resp, err := h.Apply(agg.Event{Now: now, Kind: agg.EventAggregateReq, Msg: o.Msg})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range resp {
				if _, err := l.Apply(agg.Event{Now: now, Kind: agg.EventAggregateResp, Msg: r.Msg}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if l.Stats.Prepared != h.Stats.Prepared {
			t.Fatalf("leader committed %d, helper %d", l.Stats.Prepared, h.Stats.Prepared)
		}
		return h.Stats.Prepared, h.Stats.Rejected
	}
	after, reasons := count(true)
	before, _ := count(false)
	fmt.Printf("ATTACK prio3-double-upload: one identity uploads 3 reports for one campaign-day: helper tokens issued %d, refused at issuance %d (over budget), helper refused %d (%v), counted %d (before: %d counted)\n",
		issued, refused, 3-after, reasons, after, before)
	if issued != 1 || refused != 1 || after != 1 {
		t.Fatal("one identity counted more than once for a campaign-day")
	}
	if before != 3 {
		t.Fatalf("control: a helper without tokens should count all 3 reports, counted %d", before)
	}
}
