package tests

import (
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/ingest/pdd"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// TestAttackPDDKeySubstitution: someone other than the coordinator answers
// a PDD groups device's requests (crowdlog.pdd.register, .ping, .deposit)
// — under `crowdlog nats-config` only the coordinator's credential may,
// so a holder of that credential or whoever runs nats-server; here an
// embedded server without permissions (the control: anyone may). It
// assigns the device to a group whose other n−1 members are keys it holds
// (signing the task with a key of its own) and collects the device's
// deposit. With its members' keys it derives every pair seed the device
// shares with them and opens the bundles addressed to them — n−1 shares
// of the device's self-mask seed, more than the threshold t — so the
// device's blinded vector, which the vectors aggregator receives (its
// onion is peeled here with the route's keys, as that operator would),
// unmasks to the device's keyword counts.
//
// Before (roster unchecked): the device submits, and its counts are read
// exactly. After: the device refuses the task (ErrCoordinatorSignature,
// the coordinator's key pinned from Config.KeysDir): nothing is blinded,
// dealt or sent.
func TestAttackPDDKeySubstitution(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := keydir.EnsureKeys(keys); err != nil {
		t.Fatal(err)
	}
	// the real coordinator operator's key: the device is given its .pub
	if _, err := keydir.EnsureSigningKey(filepath.Join(keys, keydir.CoordinatorSignKey)); err != nil {
		t.Fatal(err)
	}
	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	words := []string{"weather", "news", "recipe", "football", "movies", "music"}
	list, err := keywords.Parse(strings.NewReader(strings.Join(words, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	const campaign, n = "substitution", 5
	const round int32 = 3
	in := blind.Instance{Campaign: campaign, Round: round, Group: 7}

	// the forger: n−1 member keys and a signing key of its own
	att := make([]*ecdh.PrivateKey, n)
	for j := 1; j < n; j++ {
		if att[j], err = blind.GenerateKey(); err != nil {
			t.Fatal(err)
		}
	}
	_, forgerSign, _ := ed25519.GenerateKey(rand.Reader)
	fnc, err := natsconn.Connect(ns.URL, "forger")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fnc.Close)
	hash := list.Hash()
	var mu sync.Mutex
	var device []byte
	var sealed []blind.SealedBundle
	reply := func(m *nats.Msg, v any) { b, _ := json.Marshal(v); m.Respond(b) }
	handle := func(subject string, f func(m *nats.Msg)) {
		if _, err := fnc.Subscribe(subject, f); err != nil {
			t.Fatal(err)
		}
	}
	handle(protocol.PDDRegisterSubject, func(m *nats.Msg) {
		r, err := blind.ParseRegister(m.Data)
		if err != nil {
			reply(m, blind.RegisterReply{Error: err.Error()})
			return
		}
		mu.Lock()
		device = r.PublicKey
		mu.Unlock()
		reply(m, blind.RegisterReply{ClientID: "0123456789abcdef0123456789abcdef", Campaign: campaign, Keywords: "test", L: list.Len(), ListHash: hash[:]})
	})
	handle(protocol.PDDPingSubject, func(m *nats.Msg) {
		mu.Lock()
		members := [][]byte{device}
		mu.Unlock()
		for j := 1; j < n; j++ {
			members = append(members, att[j].PublicKey().Bytes())
		}
		task := blind.Task{Round: round, Group: in.Group, Member: 0, Members: members, T: blind.Threshold(n), Deadline: round + 5}
		blind.SignTask(forgerSign, campaign, &task)
		reply(m, blind.Instructions{Day: round + 1, Campaign: campaign, Keywords: "test", L: list.Len(), ListHash: hash[:], Tasks: []blind.Task{task}})
	})
	handle(protocol.PDDDepositSubject, func(m *nats.Msg) {
		d, _, err := blind.ParseDeposit(m.Data)
		if err != nil {
			reply(m, blind.Reply{Error: err.Error()})
			return
		}
		mu.Lock()
		sealed = append(sealed, d.Bundles...)
		mu.Unlock()
		reply(m, blind.Reply{})
	})
	if err := fnc.Flush(); err != nil {
		t.Fatal(err)
	}

	// the device, as examples/pdd-groups builds it; its onions are
	// captured where relay a would store them
	tr, err := pdd.Dial(ctx, pdd.Config{NATS: ns.URL, KeysDir: keys, SkipRouteCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	var onions [][]byte
	tr.Publish = func(ctx context.Context, o []byte) error { onions = append(onions, o); return nil }
	c, err := pdd.Register(ctx, tr, campaign, list, filepath.Join(dir, "pdd-client.json"))
	if err != nil {
		t.Fatal(err)
	}
	queries := []string{"weather", "news", "weather", "football"} // no two alike in a row (one instance, design decision 7)
	day := keywords.Day(round)
	var recs []aol.Record
	for i, q := range queries {
		recs = append(recs, aol.Record{Line: i + 1, AnonID: "1", Query: q, QueryTime: day.Time().Add(time.Duration(i) * time.Minute)})
	}
	c.Counts = list.Counts(recs, nil)
	st, pingErr := c.Ping(ctx, tr)
	// ground truth: the device's searches of the day, one keyword each
	truth := make([]uint64, list.Len())
	for _, q := range queries {
		for i, w := range words {
			if w == q {
				truth[i]++
			}
		}
	}

	// the attack: the vector the aggregator receives, unmasked with the
	// forger's keys
	read, opened := 0, 0
	if len(onions) > 0 {
		var kps []*onion.KeyPair
		for _, name := range []string{keydir.RelayAKey, keydir.RelayBKey, keydir.AggregatorKey} {
			kp, err := onion.LoadKeyPair(filepath.Join(keys, name))
			if err != nil {
				t.Fatal(err)
			}
			kps = append(kps, kp)
		}
		layer := onions[0]
		for {
			hop, inner, err := onion.Peel(kps, layer)
			if err != nil {
				t.Fatal(err)
			}
			layer = inner
			if hop.Kind == onion.HopDeliver {
				break
			}
		}
		msg, err := blind.Parse(layer)
		if err != nil {
			t.Fatal(err)
		}
		sub := msg.Submission
		if sub == nil {
			t.Fatalf("the device's first onion carries no submission: %+v", msg)
		}
		seeds := make([]blind.Seed, n)
		var shares []blind.SeedShare
		for j := 1; j < n; j++ {
			if seeds[j], err = blind.PairSeed(att[j], device, in); err != nil {
				t.Fatal(err)
			}
			for _, sb := range sealed {
				if sb.From != 0 || sb.To != uint16(j) {
					continue
				}
				b, err := blind.OpenBundle(att[j], in, uint16(j), sb)
				if err != nil {
					continue
				}
				opened++
				for _, s := range b.Shares {
					if s.J == 0 {
						shares = append(shares, s.Share)
					}
				}
			}
		}
		self, err := blind.CombineSeed(shares, blind.Threshold(n))
		if err != nil {
			t.Fatal(err)
		}
		mask := blind.Blind(make([]uint64, list.Len()), 0, seeds, self)
		for i := range truth {
			if sub.Y[i]-mask[i] == truth[i] {
				read++
			}
		}
	}
	fmt.Printf("ATTACK pdd-key-substitution: forged roster of %d (t=%d, %d forger keys): device submitted %d, bundles opened by the forger %d, keyword counts read exactly %d of %d; refused with ErrCoordinatorSignature=%v\n",
		n, blind.Threshold(n), n-1, st.Submitted, opened, read, list.Len(), errors.Is(pingErr, pdd.ErrCoordinatorSignature))
	if st.Submitted != 0 || len(onions) != 0 || read != 0 || !errors.Is(pingErr, pdd.ErrCoordinatorSignature) {
		t.Errorf("the device blinded for a forged roster: submitted %d, %d onions, %d of %d counts read; err %v", st.Submitted, len(onions), read, list.Len(), pingErr)
	} else {
		t.Logf("refused: %v", pingErr)
	}
}
