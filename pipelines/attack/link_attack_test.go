package attack

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/bits"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// linker guesses, for each token the aggregator saw, the identity it was
// issued to from the issuer's state, by a fixed deterministic rule: the
// identity whose state blobs share the most 8-byte windows with the
// token's encoding (or its hex), ties broken by the smallest Hamming
// distance between SHA-256 of the token and of the identity's first blob.
// It knows every enrolled identity.
func linker(state map[string][][]byte, tok []byte) string {
	hx := []byte(hex.EncodeToString(tok))
	th := sha256.Sum256(tok)
	best, bestScore, bestDist := "", -1, 1<<30
	ids := make([]string, 0, len(state))
	for id := range state {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		score := 0
		for _, blob := range state[id] {
			for _, src := range [][]byte{tok, hx} {
				for i := 0; i+8 <= len(src); i += 4 {
					if bytes.Contains(blob, src[i:i+8]) {
						score++
					}
				}
			}
		}
		dist := 0
		if len(state[id]) > 0 {
			h := sha256.Sum256(state[id][0])
			for i := range h {
				dist += bits.OnesCount8(h[i] ^ th[i])
			}
		}
		if score > bestScore || (score == bestScore && dist < bestDist) {
			best, bestScore, bestDist = id, score, dist
		}
	}
	return best
}

// TestAttackLinkTokens: the issuer and the aggregator pool their state to
// link report tokens and ARC presentations to the identities they were
// issued to. M = 20 enrolled identities each get 3
// report tokens and an ARC credential and present it once; the issuer's
// side is everything it received and answered (a wiretap on its NATS
// subject and the replies: identity, timestamp, blinded elements,
// evaluations, proofs, credential requests and responses), its counters
// in JetStream KV and its log; the aggregator's side is every token and
// presentation, in the relays' shuffled order. A deterministic linker
// (linker) guesses each token's identity: it must do no better than chance
// (1/M per token; the bound allows the binomial tail). Control: the same
// linker on the state of an issuer that saw what it signs (non-blind
// issuance: each request carries the token's input) links every token.
func TestAttackLinkTokens(t *testing.T) {
	const M, per = 20, 3
	e := newTokenEnv(t, issuer.Limits{RandomnessTokens: 1, ReportTokens: per + 1})
	var logs syncBuffer
	is, err := issuer.New(e.nc, e.keys, issuer.Limits{RandomnessTokens: 1, ReportTokens: per + 1}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	e.run("logged issuer", is.Run, "") // a second member of the issuer's queue group, logging everything

	// the issuer's wiretap: every request and its reply
	var mu sync.Mutex
	replyOf := map[string]string{} // reply subject → identity hex
	state := map[string][][]byte{} // identity hex → blobs
	tap, err := e.nc.Subscribe(protocol.IssuerSubject, func(m *nats.Msg) {
		q, err := token.ParseIssueRequest(m.Data)
		if err != nil {
			return
		}
		id := hex.EncodeToString(q.Identity)
		mu.Lock()
		replyOf[m.Reply] = id
		state[id] = append(state[id], append([]byte(nil), m.Data...))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Unsubscribe()
	var replies [][2][]byte // reply subject, data
	rtap, err := e.nc.Subscribe("_INBOX.>", func(m *nats.Msg) {
		mu.Lock()
		replies = append(replies, [2][]byte{[]byte(m.Subject), append([]byte(nil), m.Data...)})
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rtap.Unsubscribe()
	e.nc.Flush()

	ids := e.identities(M)
	truth := map[string]string{} // token or presentation hex → identity hex
	var seen [][]byte            // what the aggregator saw
	isPres := map[int]bool{}     // which of seen are presentations
	nonBlind := map[string][][]byte{}
	s := e.sealing("made up linked query", star.FTu, 5)
	for _, c := range ids {
		id := hex.EncodeToString(c.Identity.Public().(ed25519.PublicKey))
		nonces := make([][32]byte, per)
		for i := range nonces {
			rand.Read(nonces[i][:])
		}
		toks, err := c.Tokens(e.ctx, token.KindReport, e.epoch, nonces)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range toks {
			b, _ := tk.MarshalBinary()
			truth[hex.EncodeToString(b)] = id
			seen = append(seen, b)
			nonBlind[id] = append(nonBlind[id], tk.Nonce[:])
		}
		r := e.arcReport(c, s, "made up linked query", "x")
		truth[hex.EncodeToString(r.Presentation)] = id
		seen = append(seen, r.Presentation)
		isPres[len(seen)-1] = true
		nonBlind[id] = append(nonBlind[id], r.Presentation[:64])
		time.Sleep(2 * time.Millisecond)
	}
	e.nc.Flush()
	time.Sleep(200 * time.Millisecond) // the taps' callbacks have run
	mu.Lock()
	for _, r := range replies {
		if id, ok := replyOf[string(r[0])]; ok {
			state[id] = append(state[id], r[1])
		}
	}
	mu.Unlock()
	// the counters in JetStream KV, attributed by recomputing their keys
	js, _ := jetstream.New(e.nc)
	kv, err := js.KeyValue(e.ctx, protocol.IssuerCountersBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := kv.Keys(e.ctx)
	byKey := map[string]string{}
	for _, c := range ids {
		pub := c.Identity.Public().(ed25519.PublicKey)
		for _, kind := range []token.Kind{token.KindRandomness, token.KindReport, token.KindARC} {
			byKey[issuer.CounterKey(issuer.IdentityOf(pub), e.epoch, kind)] = hex.EncodeToString(pub)
		}
	}
	for _, k := range keys {
		if id, ok := byKey[k]; ok {
			v, err := kv.Get(context.Background(), k)
			if err == nil {
				state[id] = append(state[id], append([]byte(k), v.Value()...))
			}
		}
	}
	// the log, line by line, to the identities it names (by hex prefix)
	for _, line := range bytes.Split(logs.b.Bytes(), []byte("\n")) {
		for id := range state {
			if bytes.Contains(line, []byte(id[:16])) {
				state[id] = append(state[id], line)
			}
		}
	}
	if len(state) != M {
		t.Fatalf("the issuer's state covers %d identities, want %d", len(state), M)
	}
	// the aggregator's view, shuffled as the relays shuffle
	perm := make([]int, len(seen))
	for i := range perm {
		perm[i] = i
	}
	for i := len(perm) - 1; i > 0; i-- {
		var b [1]byte
		rand.Read(b[:])
		j := int(b[0]) % (i + 1)
		perm[i], perm[j] = perm[j], perm[i]
	}
	link := func(st map[string][][]byte) (right, rightPres int) {
		for _, i := range perm {
			if linker(st, seen[i]) == truth[hex.EncodeToString(seen[i])] {
				right++
				if isPres[i] {
					rightPres++
				}
			}
		}
		return right, rightPres
	}
	right, rightPres := link(state)
	for id, b := range nonBlind { // what a non-blind issuer would also hold
		state[id] = append(state[id], b...)
	}
	ctlRight, _ := link(state)
	n := len(seen)
	fmt.Printf("ATTACK link-tokens: issuer (requests, replies, KV counters, log) + aggregator (%d tokens and presentations of %d identities) linked %d of %d to their identity (%d of %d presentations; chance %.1f); with non-blind issuance: %d of %d\n",
		n, M, right, n, rightPres, M, float64(n)/M, ctlRight, n)
	if ctlRight != n {
		t.Fatalf("control: the linker linked %d of %d with non-blind issuance state", ctlRight, n)
	}
	// chance: Binomial(n = 80, p = 1/20), mean 4; P(X ≥ 13) < 1e-4
	if right >= 13 {
		t.Fatalf("the linker linked %d of %d (chance %.1f)", right, n, float64(n)/M)
	}
}
