package aggregator

import (
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// Verification at the threshold. With report tokens or ARC presentations
// on (ReportKeys, ARCKeys) and VerifyOnArrival off — the default — a
// report pays at arrival only for the checks that cost a hash:
//
//   - its report token parses and is bound to the report's bytes (RFC 9577
//     §2.2 nonce, token.ReportNonce), and its spend id is not among the
//     epoch's spent tokens;
//   - under FT_u its presentation has the size of one with limit 1, and
//     the share's x is the one the presentation's tag gives
//     (star.Report.CheckARCShare on the tag bytes), so the tag is
//     deterministic per (credential, artifact) and names the candidate.
//
// It then joins its group as a candidate (repUnverified), its token and
// presentation kept in its spill record. When a group's live reports reach
// k distinct candidate shares, verifyGroup checks every unverified one, in
// arrival order and by cost: the report token (VOPRF, ~50 µs) first, then,
// only when the token verified and was not spent, the ARC presentation
// (draft-ietf-privacypass-arc-crypto VerifyPresentation, ~0.6 ms). A
// report that fails is dropped for it ("bad-token", "spent-token",
// "bad-presentation") and its id stays for duplicates, so the same bytes
// are never checked twice. The share at an x is the first candidate there
// that verified: a failed candidate never blocks a later one at the same
// x, so nobody who learns a victim's presentation tag can pre-empt the
// victim with junk under it. Recovery runs only when k distinct verified
// shares remain; otherwise the group waits for more. Reports of a group
// that already opened are verified on arrival, before they are counted.
//
// The rules that make this sound:
//   - nothing is decrypted or released before k distinct verified shares
//     (recoverGroup sees only verified reports);
//   - a spend is recorded only once its token verified;
//   - the epoch's keys are loaded at the first report of the epoch
//     (reportKey, arcKey) and kept for the partition's life, so every group
//     of the epoch is checked under the keys its reports arrived with;
//   - every report is verified at most once, so a flood of junk that
//     pushes every group to k costs what verifying at arrival costs, and a
//     report whose token fails never costs an ARC verification.
//
// On the bundled log (FT_u, k = 5) about 13 % of reports belong to groups
// that ever reach k: the other 87 % are never verified.

// deferred reports whether the partition verifies report tokens and ARC
// presentations at the threshold.
func (p *Partition) deferred() bool {
	return !p.VerifyOnArrival && (p.ReportKeys != nil || p.ARCKeys != nil)
}

// checkDeferred is check for verification at the threshold: the cheap
// checks only (no key needed, so never c.later).
func (p *Partition) checkDeferred(r *star.Report, c *reportChecks) {
	if c.tokenOn {
		p.tokenBinding(r, c)
	}
	if c.arcOn && r.Policy == star.FTu && len(r.Presentation) > 0 {
		c.presPresent = true
		if tag, ok := presentationTag(r.Presentation); ok && len(r.Presentation) == arc.PresentationSize(1) {
			c.quickOK, c.quickTag = true, star.ARCTagDigest(tag)
			c.xOK = r.CheckARCShare(tag) == nil
		}
	}
}

// tokenBinding is the part of checkTokenBytes that needs no key: the
// token parses and carries the report's nonce (c.tokenPre), and its spend
// id (c.spend).
func (p *Partition) tokenBinding(r *star.Report, c *reportChecks) *token.Token {
	if len(r.Token) == 0 {
		c.tokenPre = "no-token"
		return nil
	}
	t, err := token.ParseToken(r.Token)
	if err != nil {
		c.tokenPre = "bad-token"
		return nil
	}
	unsigned, err := r.UnsignedBytes()
	if err != nil || t.Nonce != token.ReportNonce(unsigned) {
		c.tokenPre = "bad-token"
		return nil
	}
	c.spend = t.SpendID()
	return t
}

// arrivalToken judges a report's token at arrival under verification at
// the threshold: the drop reason, or "". The epoch's key is loaded here
// (once per epoch), so a report of an epoch without one is dropped now
// ("token-key"), never after it waited.
func (p *Partition) arrivalToken(e *epochState, c *reportChecks) string {
	if p.ReportKeys == nil {
		return ""
	}
	if c.tokenPre != "" {
		return c.tokenPre
	}
	if _, spent := e.spent[c.spend]; spent {
		return "spent-token"
	}
	if p.reportKey(e.epoch, true) == nil {
		return "token-key"
	}
	return ""
}

// arrivalPresentation judges an FT_u report's presentation at arrival
// under verification at the threshold (with ARCKeys): present, of the
// size of one with limit 1, its tag giving the share's x, and the
// epoch's ARC key loaded ("arc-key"). The drop reason, or "".
func (p *Partition) arrivalPresentation(e *epochState, r *star.Report, c *reportChecks) string {
	if p.ARCKeys == nil || r.Policy != star.FTu {
		return ""
	}
	if !c.presPresent || !c.quickOK || !c.xOK {
		return "bad-presentation"
	}
	if p.arcKey(e.epoch, true) == nil {
		return "arc-key"
	}
	return ""
}

// verifyReport verifies one report's token and presentation in full, by
// cost: the report token under the epoch's key, its spend (recorded in
// e.spent when it verified and was not spent), then, under FT_u with
// ARCKeys, the presentation for ctxOf's context — accepted without a
// verification when an earlier report at x verified a presentation with
// the same tag (a repeated impression of one credential) — recording the
// verified tag's digest at x in arcOK. Returns the drop reason, or "".
// tok and pres are the report's token and presentation bytes; ctxOf
// carries the fields of the presentation context (star.Report.ARCContext).
func (p *Partition) verifyReport(e *epochState, ctxOf *star.Report, x [32]byte, tok, pres []byte, arcOK *map[[32]byte][32]byte) string {
	if p.ReportKeys != nil {
		t, err := token.ParseToken(tok)
		if err != nil {
			return "bad-token" // parsed at arrival: kept for safety
		}
		key := p.reportKey(e.epoch, true)
		if key == nil {
			return "token-key"
		}
		id := key.KeyID()
		ck := cacheKey("crowdlog-v1 aggregator verified token", []byte(e.epoch), id[:], tok)
		if !p.cache.has(ck) {
			p.tokenChecks.Add(1)
			if key.Verify(t) != nil {
				return "bad-token"
			}
			p.cache.add(ck)
		}
		spend := t.SpendID()
		if _, spent := e.spent[spend]; spent {
			return "spent-token"
		}
		if e.spent == nil {
			e.spent = map[[32]byte]struct{}{}
		}
		e.spent[spend] = struct{}{}
		p.countSpent()
	}
	if p.ARCKeys == nil || ctxOf.Policy != star.FTu {
		return ""
	}
	quick, ok := presentationTag(pres)
	if !ok {
		return "bad-presentation" // checked at arrival: kept for safety
	}
	digest := star.ARCTagDigest(quick)
	if want, ok := (*arcOK)[x]; ok && want == digest {
		return ""
	}
	key := p.arcKey(e.epoch, true)
	if key == nil {
		return "arc-key"
	}
	ctx := ctxOf.ARCContext()
	ck := cacheKey("crowdlog-v1 aggregator verified presentation", key.pub, ctx, pres)
	if !p.cache.has(ck) {
		p.arcChecks.Add(1)
		pr, err := arc.ParsePresentation(pres)
		if err != nil || key.verify(pr, ctx) != nil {
			return "bad-presentation"
		}
		p.cache.add(ck)
	}
	// the tag verified is the quick tag: the same bytes of pres, whose x
	// was checked at arrival
	p.arcVerified++
	if *arcOK == nil {
		*arcOK = map[[32]byte][32]byte{}
	}
	(*arcOK)[x] = digest
	return ""
}

// verifyGroup verifies every unverified live report of pending group gi
// (verifyReport, in arrival order), drops those that fail, and makes the
// first verified report at each x its share (reshare). After it the
// group's shares are verified ones; it recovers when k remain. False
// after a spill error.
func (p *Partition) verifyGroup(gi int32, gid groupID) bool {
	g := p.group(gi)
	e := p.eps[g.ep]
	head, err := p.load(e, g.head)
	if err != nil {
		p.fail(err)
		return false
	}
	ctxOf := &star.Report{App: e.app, Epoch: e.epoch, Policy: g.policy, K: g.k, Tag: head.tag}
	ok := p.pendARC[gid]
	dropped := false
	for i := g.head; i >= 0; i = p.rep(i).next {
		if !p.rep(i).unverified() {
			continue
		}
		sp, err := p.load(e, i)
		if err != nil {
			p.fail(err)
			return false
		}
		if reason := p.verifyReport(e, ctxOf, p.rep(i).x, sp.token, sp.presentation, &ok); reason != "" {
			p.dropRep(gi, gid, i, reason)
			dropped = true
			if p.preemptControl {
				p.dropAtX(gi, gid, p.rep(i).x, reason)
			}
			continue
		}
		p.rep(i).meta &^= repUnverified
	}
	if ok != nil {
		p.pendARC[gid] = ok
	}
	if dropped {
		p.reshare(gi, gid)
	}
	return true
}

// reshare makes the first live report at each x of pending group gi its
// share (repShare) and the later ones repeats, after reports were dropped
// by verifyGroup: a candidate that failed never keeps a later one at its
// x from counting.
func (p *Partition) reshare(gi int32, gid groupID) {
	g := p.group(gi)
	bg := p.big[gid]
	seen := make(map[[32]byte]bool, g.shares+1)
	g.shares = 0
	for i := g.head; i >= 0; i = p.rep(i).next {
		r := p.rep(i)
		if !r.live() {
			continue
		}
		if seen[r.x] {
			r.meta &^= repShare
			continue
		}
		seen[r.x] = true
		r.meta |= repShare
		g.shares++
		if bg != nil {
			bg.xs[r.x] = struct{}{}
		}
	}
}

// dropAtX drops every live report at x of pending group gi: what a
// verifier that lets a failed candidate pre-empt its x would do. Only
// the control of the junk-presentations attack sets preemptControl.
func (p *Partition) dropAtX(gi int32, gid groupID, x [32]byte, reason string) {
	for i := p.group(gi).head; i >= 0; i = p.rep(i).next {
		if p.rep(i).live() && p.rep(i).x == x {
			p.dropRep(gi, gid, i, reason)
		}
	}
}
