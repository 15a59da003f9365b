package aggregator

import (
	"crypto/sha256"

	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// checkToken judges a report's token (issue 17; RFC 9576 §3.5, RFC 9578
// §5.4) and returns the drop reason, or "" after recording the token as
// spent in the epoch: the token must be present ("no-token"), parse, carry
// the nonce token.ReportNonce(r.UnsignedBytes()) — bound to every byte of
// the report before the trailer, id included — and verify under the
// epoch's report-token key ("bad-token"; "token-key" when the epoch has no
// key), and must not have been accepted before in this epoch and partition
// ("spent-token": a replayed report; the token binds the report id, and
// the tag bucket routes every copy to this partition). The nonce and spent
// checks come before the VOPRF verification, so replays and tokens moved
// to other reports cost a hash and a map lookup. A token is spent even when the report is dropped later for
// other reasons (epoch-full, bad-share): the verdict is the same on
// replay.
func (p *Partition) checkToken(e *epochState, r *star.Report) string {
	if len(r.Token) == 0 {
		return "no-token"
	}
	t, err := token.ParseToken(r.Token)
	if err != nil {
		return "bad-token"
	}
	unsigned, err := r.UnsignedBytes()
	if err != nil || t.Nonce != token.ReportNonce(unsigned) {
		return "bad-token"
	}
	id := t.SpendID()
	if _, spent := e.spent[id]; spent {
		return "spent-token"
	}
	key := p.reportKey(r.Epoch)
	if key == nil {
		return "token-key"
	}
	if key.Verify(t) != nil {
		return "bad-token"
	}
	if e.spent == nil {
		e.spent = map[[32]byte]struct{}{}
	}
	e.spent[id] = struct{}{}
	return ""
}

// reportKey returns the epoch's report-token key, loaded once; nil when
// ReportKeys fails for it (retried at the next report).
func (p *Partition) reportKey(epoch string) *token.PrivateKey {
	if k := p.reportKeys[epoch]; k != nil {
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

// arcKey returns the epoch's ARC key, loaded once; nil when ARCKeys fails.
func (p *Partition) arcKey(epoch string) *arc.PrivateKey {
	if k := p.arcKeys[epoch]; k != nil {
		return k
	}
	k, err := p.ARCKeys(epoch)
	if err != nil || k == nil {
		return nil
	}
	if p.arcKeys == nil {
		p.arcKeys = map[string]*arc.PrivateKey{}
	}
	p.arcKeys[epoch] = k
	return k
}

// checkPresentation judges an FT_u report's ARC presentation and returns
// the drop reason, or "": it must verify under the epoch's ARC key for the
// presentation context of the report's own fields (star.Report.ARCContext:
// "crowdlog-v1 arc" ‖ release context ‖ tag) with limit 1 — one
// presentation per credential and artifact — and the share's x must be
// the one its tag gives (star.Report.CheckARCShare), so one credential adds one
// share however many user secrets its holder tries. A good verdict is kept
// per (group, x): repeated impressions of one (credential, artifact) carry
// the same x and cost no second verification; a repeat must still carry a
// presentation whose tag is the verified one's.
func (p *Partition) checkPresentation(t *tagState, r *star.Report) string {
	if len(r.Presentation) == 0 {
		return "bad-presentation"
	}
	x := xKey(r.Share)
	if want, ok := t.arcOK[x]; ok {
		if tag, ok := presentationTag(r.Presentation); ok && sha256.Sum256(tag) == want {
			return ""
		}
	}
	key := p.arcKey(r.Epoch)
	if key == nil {
		return "arc-key"
	}
	pres, err := arc.ParsePresentation(r.Presentation)
	if err != nil {
		return "bad-presentation"
	}
	if key.VerifyPresentation(pres, r.ARCContext(), 1) != nil {
		return "bad-presentation"
	}
	tag := pres.Tag()
	if r.CheckARCShare(tag) != nil {
		return "bad-presentation"
	}
	p.arcVerified++
	if t.arcOK == nil {
		t.arcOK = map[[32]byte][32]byte{}
	}
	t.arcOK[x] = sha256.Sum256(tag)
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
