package attack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/spent"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// madeUp returns n made-up unique queries.
func madeUp(prefix string, n int) []string {
	var b [4]byte
	rand.Read(b[:])
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s %d %s", prefix, i, hex.EncodeToString(b[:]))
	}
	return out
}

// probeFound evaluates cands through rc in batches of batch, stopping at
// the first refusal, and counts the candidates whose FT_u tag (k) is among
// pending; it returns the count, how many were evaluated and the refusal.
func probeFound(t *testing.T, ctx context.Context, rc *oprfclient.Client, cands []string, pending map[[32]byte]bool, k, batch int) (found, evaluated int, err error) {
	for lo := 0; lo < len(cands); lo += batch {
		hi := min(lo+batch, len(cands))
		var inputs [][]byte
		for _, q := range cands[lo:hi] {
			inputs = append(inputs, oprf.OPRFInput(fxApp, tokEpoch, q))
		}
		ws, err := rc.Evaluate(ctx, tokEpoch, inputs)
		if err != nil {
			return found, evaluated, err
		}
		for _, w := range ws {
			evaluated++
			if pending[tagOf(t, w, tokEpoch, star.FTu, k)] {
				found++
			}
		}
	}
	return found, evaluated, nil
}

// TestAttackProbeAsClient: the aggregator's operator, holding C = 100
// pending (sub-threshold) FT_u artifacts, probes the real randomness
// service as a client to name them (CrowdLogging §5.4). With tokens it is
// one enrolled identity with a budget of N = 10 randomness tokens: it
// takes every token the issuer gives, evaluates what they pay for, and
// tries for more without tokens, with its spent tokens again, with
// "randomness tokens" minted under the report-token key it holds (the
// aggregator verifies report tokens, so it has that key), and as an
// unenrolled identity. It must name at most N. Control: the same probe
// against the service without tokens (the code before them) names
// all C.
func TestAttackProbeAsClient(t *testing.T) {
	const C, N, k = 100, 10, 5
	e := newTokenEnv(t, issuer.Limits{RandomnessTokens: N, ReportTokens: N})
	_, stopRand := e.startRandomness(true)
	cands := madeUp("made up pending", C)
	p := e.newPartition(false)
	for _, q := range cands { // one victim report each, below k
		u, _ := star.NewUserSecret()
		r, err := e.sealing(q, star.FTu, k).Seal(&u, q, q)
		if err != nil {
			t.Fatal(err)
		}
		p.ApplyReport(r)
	}
	pending := map[[32]byte]bool{}
	for _, g := range p.Pending() {
		b, _ := hex.DecodeString(g.Tag)
		pending[[32]byte(b)] = true
	}
	if len(pending) != C {
		t.Fatalf("%d pending groups, want %d", len(pending), C)
	}

	att := e.identity(true)
	if _, err := att.Tokens(e.ctx, token.KindRandomness, e.epoch, make([][32]byte, C)); !errors.Is(err, token.ErrBudget) {
		t.Fatalf("asking for %d randomness tokens on a budget of %d: %v, want ErrBudget", C, N, err)
	}
	toks := e.takeAll(att, token.KindRandomness, N/2)
	found, evaluated, err := probeFound(t, e.ctx, e.omegaClient(&tokenQueue{toks: toks}), cands, pending, k, N/2)
	if err == nil || evaluated != len(toks) {
		t.Fatalf("probe with %d tokens evaluated %d candidates, err %v", len(toks), evaluated, err)
	}
	rest := cands[evaluated:]
	more := 0
	// no tokens
	f, _, err := probeFound(t, e.ctx, e.omegaClient(nil), rest, pending, k, N)
	more += f
	if !errors.Is(err, oprf.ErrTokensMissing) {
		t.Fatalf("without tokens: %v, want ErrTokensMissing", err)
	}
	// its spent tokens again
	f, _, err = probeFound(t, e.ctx, e.omegaClient(&tokenQueue{toks: toks}), rest, pending, k, N/2)
	more += f
	if !errors.Is(err, oprf.ErrTokenSpent) {
		t.Fatalf("spent tokens again: %v, want ErrTokenSpent", err)
	}
	// randomness tokens minted under the aggregator's report-token key
	repKey, err := keydir.LoadTokenKey(e.keys, token.KindReport, e.epoch)
	if err != nil {
		t.Fatal(err)
	}
	forged := mint(t, repKey, token.KindRandomness, N)
	randKey, err := keydir.LoadTokenKey(e.keys, token.KindRandomness, e.epoch)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range forged {
		if randKey.Verify(tk) == nil {
			t.Fatal("a token minted under the report-token key verifies as a randomness token")
		}
	}
	f, _, err = probeFound(t, e.ctx, e.omegaClient(&tokenQueue{toks: forged}), rest, pending, k, N)
	more += f
	if !errors.Is(err, oprf.ErrTokenInvalid) {
		t.Fatalf("forged randomness tokens: %v, want ErrTokenInvalid", err)
	}
	// an identity nobody enrolled
	if _, err := e.identity(false).Tokens(e.ctx, token.KindRandomness, e.epoch, make([][32]byte, 1)); !errors.Is(err, token.ErrNotEnrolled) {
		t.Fatalf("unenrolled identity: %v, want ErrNotEnrolled", err)
	}
	stopRand()

	// control: the service without tokens
	_, stopCtl := e.startRandomness(false)
	ctlFound, _, err := probeFound(t, e.ctx, e.omegaClient(nil), cands, pending, k, C)
	stopCtl()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ATTACK probe-as-client: the aggregator as one enrolled client (N=%d randomness tokens) named %d of %d pending artifacts (+%d without tokens, with spent tokens, with tokens minted under its report-token key; unenrolled: refused); without tokens: %d of %d\n",
		N, found, C, more, ctlFound, C)
	if ctlFound != C {
		t.Fatalf("control: the probe without tokens named %d of %d", ctlFound, C)
	}
	if found+more > N || len(toks) != N {
		t.Fatalf("with tokens the probe named %d (+%d) with %d tokens, want at most N=%d", found, more, len(toks), N)
	}
}

// mint issues n tokens of kind under key (any key the attacker holds).
func mint(t *testing.T, key *token.PrivateKey, kind token.Kind, n int) []*token.Token {
	t.Helper()
	nonces := make([][32]byte, n)
	for i := range nonces {
		rand.Read(nonces[i][:])
	}
	pd, blinded, err := token.NewRequest(key.Public(), kind, tokEpoch, nonces)
	if err != nil {
		t.Fatal(err)
	}
	ev, proof, err := key.Issue(blinded)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := pd.Finalize(ev, proof)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// TestAttackReportBudget: one enrolled identity with a budget of d = 3
// report tokens sends d+1 = 4 reports (FT_a). The issuer refuses the 4th
// token; the 4th report sent without a token, or with the token of another
// report, is dropped by the aggregator (a real Partition verifying under
// the epoch's report-token key): d accepted. Control: the aggregator
// without tokens (the code before them) accepts all d+1.
func TestAttackReportBudget(t *testing.T) {
	const d = 3
	e := newTokenEnv(t, issuer.Limits{RandomnessTokens: 10, ReportTokens: d})
	att := e.identity(true)
	p, ctl := e.newPartition(true), e.newPartition(false)
	u, _ := star.NewUserSecret()
	var refused error
	var first []byte
	for i, q := range madeUp("made up budget", d+1) {
		r, err := e.sealing(q, star.FTa, 100).Seal(&u, q, q)
		if err != nil {
			t.Fatal(err)
		}
		ctl.ApplyReport(r)
		if err := e.withReportToken(att, r); err != nil {
			if i < d || !errors.Is(err, token.ErrBudget) {
				t.Fatalf("report token %d of %d: %v", i+1, d, err)
			}
			refused = err
			p.ApplyReport(r) // without a token
			r.Token = first  // with another report's token
			p.ApplyReport(r)
			continue
		}
		if first == nil {
			first = r.Token
		}
		p.ApplyReport(r)
	}
	fmt.Printf("ATTACK report-budget: one identity (d=%d) got %d of %d report tokens and the aggregator accepted %d of its %d reports (dropped: %d no-token, %d bad-token); without tokens: %d of %d\n",
		d, d, d+1, p.Stats.Reports, d+1, p.Stats.Dropped["no-token"], p.Stats.Dropped["bad-token"], ctl.Stats.Reports, d+1)
	if ctl.Stats.Reports != d+1 {
		t.Fatalf("control: the aggregator without tokens accepted %d of %d", ctl.Stats.Reports, d+1)
	}
	if refused == nil || p.Stats.Reports != d || p.Stats.Dropped["no-token"] != 1 || p.Stats.Dropped["bad-token"] != 1 {
		t.Fatalf("with tokens: issuer refusal %v, %d reports accepted (drops %v), want the (d+1)-th refused and %d accepted", refused, p.Stats.Reports, p.Stats.Dropped, d)
	}
}

// memSpent is a spent-token store that a restart forgets (a control: the
// service's store before JetStream KV held it).
type memSpent struct {
	mu sync.Mutex
	m  map[[32]byte][32]byte
}

func (s *memSpent) Spend(_ context.Context, spends []spent.Spend) ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[[32]byte][32]byte{}
	}
	double := make([]bool, len(spends))
	for i, sp := range spends {
		if b, ok := s.m[sp.ID]; ok && b != sp.Binding {
			double[i] = true
			continue
		}
		s.m[sp.ID] = sp.Binding
	}
	return double, nil
}

// TestAttackDoubleSpend: tokens spent once are refused when spent again.
// At the randomness service: 5 randomness tokens pay for 5 elements, then
// the same tokens for 5 other elements are refused — by the same service
// and by a restarted one (the spends live in JetStream KV). At the
// aggregator: a report accepted with its token, then replayed (same
// bytes) and its token moved to another report, is counted once — and a
// partition rebuilt by replaying the same messages (a restart) gives the
// same verdicts. Controls: a service without tokens evaluates both
// batches, and one whose spends a restart forgets (in memory) accepts the
// double spend after the restart; an aggregator without tokens counts the
// second report.
func TestAttackDoubleSpend(t *testing.T) {
	e := newTokenEnv(t, issuer.Limits{RandomnessTokens: 10, ReportTokens: 10})
	att := e.identity(true)
	toks := e.takeAll(att, token.KindRandomness, 5)[:5]
	cands := madeUp("made up double", 10)
	none := map[[32]byte]bool{}
	_, stop := e.startRandomness(true)
	if _, _, err := probeFound(t, e.ctx, e.omegaClient(&tokenQueue{toks: toks}), cands[:5], none, 5, 5); err != nil {
		t.Fatalf("first spend: %v", err)
	}
	_, _, errSame := probeFound(t, e.ctx, e.omegaClient(&tokenQueue{toks: toks}), cands[5:], none, 5, 5)
	stop()
	_, stop = e.startRandomness(true) // a restarted service
	_, _, errRestart := probeFound(t, e.ctx, e.omegaClient(&tokenQueue{toks: toks}), cands[5:], none, 5, 5)
	stop()
	randRefused := 0
	for _, err := range []error{errSame, errRestart} {
		if errors.Is(err, oprf.ErrTokenSpent) {
			randRefused++
		}
	}
	// controls: no tokens; spends in memory, forgotten by a restart
	_, stop = e.startRandomness(false)
	_, ctlNoTok, errCtl := probeFound(t, e.ctx, e.omegaClient(nil), cands, none, 5, 5)
	stop()
	if errCtl != nil {
		t.Fatal(errCtl)
	}
	memToks := e.takeAll(e.identity(true), token.KindRandomness, 5)[:5]
	stop = e.startRandomnessWith(&memSpent{})
	if _, _, err := probeFound(t, e.ctx, e.omegaClient(&tokenQueue{toks: memToks}), cands[:5], none, 5, 5); err != nil {
		t.Fatal(err)
	}
	stop()
	stop = e.startRandomnessWith(&memSpent{}) // restarted: forgot
	_, _, errMem := probeFound(t, e.ctx, e.omegaClient(&tokenQueue{toks: memToks}), cands[5:], none, 5, 5)
	stop()

	// the aggregator
	rep := e.identity(true)
	u, _ := star.NewUserSecret()
	q := "made up double report"
	s := e.sealing(q, star.FTa, 100)
	r1, _ := s.Seal(&u, q, "first")
	if err := e.withReportToken(rep, r1); err != nil {
		t.Fatal(err)
	}
	r2, _ := s.Seal(&u, q, "second")
	r2.Token = r1.Token
	seq := []*star.Report{r1, r1, r2}
	p := e.newPartition(true)
	for _, r := range seq {
		p.ApplyReport(r)
	}
	restarted := e.newPartition(true)
	for _, r := range seq {
		restarted.ApplyReport(r)
	}
	ctl := e.newPartition(false)
	r2.Token = nil
	for _, r := range seq {
		ctl.ApplyReport(r)
	}
	fmt.Printf("ATTACK double-spend: randomness service refused %d of 2 double spends (same service, after a restart); aggregator counted %d of 3 reports on one token (%d after a restart by replay); without tokens: the service evaluated %d of %d elements, with spends in memory a restart accepted the double spend (%v), the aggregator counted %d of 3\n",
		randRefused, p.Stats.Reports, restarted.Stats.Reports, ctlNoTok, len(cands), errMem == nil, ctl.Stats.Reports)
	if ctlNoTok != len(cands) || errMem != nil || ctl.Stats.Reports != 2 {
		t.Fatalf("controls: evaluated %d of %d without tokens; in-memory spends after restart: %v; aggregator without tokens counted %d (want 2: the replay is a duplicate)",
			ctlNoTok, len(cands), errMem, ctl.Stats.Reports)
	}
	if randRefused != 2 {
		t.Fatalf("randomness double spends: same service %v, after restart %v; want both refused (ErrTokenSpent)", errSame, errRestart)
	}
	if p.Stats.Reports != 1 || restarted.Stats.Reports != 1 {
		t.Fatalf("aggregator counted %d (restarted %d) reports on one token, want 1; drops %v", p.Stats.Reports, restarted.Stats.Reports, p.Stats.Dropped)
	}
}
