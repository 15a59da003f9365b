package aggregator

import (
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// checkToken judges a report's token (RFC 9576 §3.5, RFC 9578
// §5.4) and returns the drop reason, or "" after recording the token as
// spent in the epoch: the token must be present ("no-token"), parse, carry
// the nonce token.ReportNonce(r.UnsignedBytes()) — bound to every byte of
// the report before the trailer, id included — and verify under the
// epoch's report-token key ("bad-token"; "token-key" when the epoch has no
// key), and must not have been accepted before in this epoch and partition
// ("spent-token": a replayed report; the token binds the report id, and
// the tag bucket routes every copy to this partition). The stateless part
// (parse, binding, VOPRF verification) is done by Prepare (c, from
// checkTokenBytes), possibly on another goroutine; the verdicts are taken
// here in the order above, so they are Apply's. A token moved to another
// report fails the binding without a verification; a replay's token hits
// the Service's verifyCache. A token is spent even when the report is
// dropped later for other reasons (epoch-full, bad-share): the verdict is
// the same on replay.
func (p *Partition) checkToken(e *epochState, c *reportChecks) string {
	if c.tokenPre != "" {
		return c.tokenPre
	}
	if _, spent := e.spent[c.spend]; spent {
		return "spent-token"
	}
	if c.tokenPost != "" {
		return c.tokenPost
	}
	if e.spent == nil {
		e.spent = map[[32]byte]struct{}{}
	}
	e.spent[c.spend] = struct{}{}
	p.countSpent()
	return ""
}

// countSpent adds one accepted report token to the Service's TokensSpent
// (a metric only: the partition's state never depends on it).
func (p *Partition) countSpent() {
	if p.tokensSpent != nil {
		p.tokensSpent.Add(1)
	}
}

// reportKey returns the epoch's report-token key, loaded once (with
// load); nil when it is not loaded (without load) or ReportKeys fails for
// it (retried at the next report).
func (p *Partition) reportKey(epoch string, load bool) *token.PrivateKey {
	p.keysMu.Lock()
	defer p.keysMu.Unlock()
	if k := p.reportKeys[epoch]; k != nil || !load {
		return k
	}
	k, err := p.ReportKeys(epoch)
	if err != nil || k == nil || k.Kind() != token.KindReport || k.Epoch() != epoch {
		return nil
	}
	if p.reportKeys == nil {
		p.reportKeys = map[string]*token.PrivateKey{}
	}
	p.reportKeys[epoch] = k
	return k
}

// arcKey returns the epoch's ARC verifier, loaded once (with load); nil
// when it is not loaded (without load) or ARCKeys fails.
func (p *Partition) arcKey(epoch string, load bool) *arcVerifier {
	p.keysMu.Lock()
	defer p.keysMu.Unlock()
	if v := p.arcKeys[epoch]; v != nil || !load {
		return v
	}
	k, err := p.ARCKeys(epoch)
	if err != nil || k == nil {
		return nil
	}
	v, err := newARCVerifier(k)
	if err != nil {
		return nil
	}
	if p.arcKeys == nil {
		p.arcKeys = map[string]*arcVerifier{}
	}
	p.arcKeys[epoch] = v
	return v
}

// arcVerifier verifies presentations under one ARC key from any
// goroutine, with its own copy of the key (several partitions may get the
// same *arc.PrivateKey from ARCKeys). protocol/arc encodes copies of its
// shared elements, so verifications run in parallel on the Prepare pool.
type arcVerifier struct {
	pub []byte // the public key's encoding
	key *arc.PrivateKey
}

func newARCVerifier(k *arc.PrivateKey) (*arcVerifier, error) {
	raw, err := k.MarshalBinary()
	if err != nil {
		return nil, err
	}
	own, err := arc.ParsePrivateKey(raw)
	if err != nil {
		return nil, err
	}
	pub, err := own.Public().MarshalBinary()
	if err != nil {
		return nil, err
	}
	return &arcVerifier{pub: pub, key: own}, nil
}

// verify is VerifyPresentation with limit 1.
func (v *arcVerifier) verify(p *arc.Presentation, presentationContext []byte) error {
	return v.key.VerifyPresentation(p, presentationContext, 1)
}

// checkPresentation judges an FT_u report's ARC presentation (x: its
// share's x, xKey) and returns
// the drop reason, or "": it must verify under the epoch's ARC key for the
// presentation context of the report's own fields (star.Report.ARCContext:
// "crowdlog-v1 arc" ‖ release context ‖ tag) with limit 1 — one
// presentation per credential and artifact — and the share's x must be
// the one its tag gives (star.Report.CheckARCShare), so one credential adds one
// share however many user secrets its holder tries. A good verdict is kept
// per (group, x): a repeated impression of one (credential, artifact)
// carries the same x and is accepted when its presentation carries the
// verified tag. The verification itself is stateless and done by Prepare
// (c, from checkPresentationBytes); with the Service's verifyCache, a
// client's repeated impressions with the same presentation bytes are
// verified once.
func (p *Partition) checkPresentation(arcOK *map[[32]byte][32]byte, x [32]byte, c *reportChecks) string {
	if !c.presPresent {
		return "bad-presentation"
	}
	if want, ok := (*arcOK)[x]; ok && c.quickOK && c.quickTag == want {
		return ""
	}
	if c.presVerdict != "" {
		return c.presVerdict
	}
	p.arcVerified++
	if *arcOK == nil {
		*arcOK = map[[32]byte][32]byte{}
	}
	(*arcOK)[x] = c.tag
	return ""
}

// presentationTag is the tag's bytes inside an encoded presentation (U ‖
// U' commit ‖ m1 commit ‖ tag ‖ …, draft-ietf-privacypass-arc-crypto),
// without decoding any point; false when b is too short.
func presentationTag(b []byte) ([]byte, bool) {
	if len(b) < arc.PresentationSize(1) {
		return nil, false
	}
	return b[3*arc.ElementSize : 4*arc.ElementSize], true
}
