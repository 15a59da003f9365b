package prio3

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// Helper is the helper aggregator's state (aggregator id 1). It never sees
// a client's upload, only the leader's AggregateReq and CollectReq.
type Helper struct {
	cfg     Config
	vdaf    *p3.VDAF
	batches map[p3.Day]*batch
	Stats   Stats
	// tokenKeys: day → the helper token key of that campaign-day (derived
	// from Config.TokenSeed on first use)
	tokenKeys map[p3.Day]*token.PrivateKey

	// Attack tests' controls only: skip the proof check (take the helper's
	// own joint-randomness seed as the prep message), the report-id
	// uniqueness check, the count/checksum comparison, the minimum batch
	// size.
	skipProofCheck, skipReplayCheck, skipBatchCheck, skipMinBatch bool
}

// Helper token refusal reasons (labels of crowdlog_prio3_rejected_total):
// no token, a token that does not decode or verify under the campaign-day's
// key, a valid token bound to another report.
const (
	ReasonTokenMissing = "token_missing"
	ReasonTokenInvalid = "token_invalid"
	ReasonTokenBinding = "token_binding"
)

// checkToken verifies it's helper token for day (Config.TokenSeed) and
// returns a refusal reason or "".
func (h *Helper) checkToken(day p3.Day, it *p3.PrepItem) string {
	if len(it.HelperToken) == 0 {
		return ReasonTokenMissing
	}
	t, err := token.ParseToken(it.HelperToken)
	if err != nil {
		return ReasonTokenInvalid
	}
	if t.Nonce != token.Prio3Nonce(h.cfg.Campaign, uint32(day), it.ID, it.PublicShare, it.SealedHelper) {
		return ReasonTokenBinding
	}
	k := h.tokenKeys[day]
	if k == nil {
		if k, err = token.DeriveKey(token.KindPrio3Helper, token.Prio3Epoch(h.cfg.Campaign, uint32(day)), h.cfg.TokenSeed); err != nil {
			return ReasonTokenInvalid
		}
		if h.tokenKeys == nil {
			h.tokenKeys = map[p3.Day]*token.PrivateKey{}
		}
		h.tokenKeys[day] = k
	}
	if k.Verify(t) != nil {
		return ReasonTokenInvalid
	}
	return ""
}

// NewHelper returns an empty helper state.
func NewHelper(cfg Config) (*Helper, error) {
	v, err := checkConfig(&cfg)
	if err != nil {
		return nil, err
	}
	return &Helper{cfg: cfg, vdaf: v, batches: map[p3.Day]*batch{}}, nil
}

// Apply handles EventAggregateReq and EventCollectReq and returns the
// answer for the leader. Rejected reports are answered with their reason
// and counted in Stats.Rejected; a refused collection is answered with its
// reason and counted in Stats.CollectRefused. Errors: malformed messages
// (wrapping protocol.ErrMalformed), another campaign.
func (h *Helper) Apply(ev Event) ([]Output, error) {
	var msg []byte
	var err error
	switch ev.Kind {
	case EventAggregateReq:
		msg, err = h.aggregate(ev)
	case EventCollectReq:
		msg, err = h.collectReq(ev)
	default:
		return nil, fmt.Errorf("%w: helper got event %d", ErrWrongRole, ev.Kind)
	}
	if err != nil {
		return nil, err
	}
	return []Output{{To: ToLeader, Msg: msg}}, nil
}

// forget drops the state of every final batch expired at now
// (Config.Retain after its close) and returns the days it dropped; a batch
// that could still be collected is kept whatever its age. Final: collected
// (its share went out or was refused), or closed with fewer than
// MinBatchSize reports: a closed batch takes no new report (late), so its
// count never reaches the minimum and every collection of it is refused
// small_batch; the leader, whose count is at most the helper's, refuses
// it itself and never asks. A later request for a dropped day is answered
// late (reports) or unknown_batch (collection).
func (h *Helper) forget(now time.Time) []p3.Day {
	var n []p3.Day
	for d, b := range h.batches {
		small := !h.skipMinBatch && b.count < h.cfg.MinBatchSize
		if (b.collected || small) && expired(&h.cfg, d, now) {
			delete(h.batches, d)
			n = append(n, d)
		}
	}
	for d := range h.tokenKeys {
		if closed(&h.cfg, d, now) {
			delete(h.tokenKeys, d)
		}
	}
	return n
}

// itemDigest is the SHA-256 of a request item's fields (length-prefixed),
// truncated to DigestSize bytes.
func itemDigest(it *p3.PrepItem) digest {
	d := sha256.New()
	parts := [][]byte{it.ID[:], it.PublicShare, it.SealedHelper, it.LeaderPrep}
	if len(it.HelperToken) > 0 {
		// only when present: the digests of states written before helper
		// tokens stay those of their retries
		parts = append(parts, it.HelperToken)
	}
	for _, b := range parts {
		var n [4]byte
		n[0], n[1], n[2], n[3] = byte(len(b)>>24), byte(len(b)>>16), byte(len(b)>>8), byte(len(b))
		d.Write(n[:])
		d.Write(b)
	}
	return digest(d.Sum(nil)[:DigestSize])
}

func (h *Helper) aggregate(ev Event) ([]byte, error) {
	q, err := p3.ParseAggregateReq(ev.Msg)
	if err != nil {
		return nil, err
	}
	if q.Campaign != h.cfg.Campaign {
		return nil, fmt.Errorf("prio3: aggregate request for campaign %q, this helper runs %q", q.Campaign, h.cfg.Campaign)
	}
	resp := &p3.AggregateResp{Campaign: q.Campaign, Day: q.Day}
	vk, keyOK := h.cfg.VerifyKeys[q.KeyEpoch]
	isClosed := closed(&h.cfg, q.Day, ev.Now)
	for i := range q.Items {
		it := &q.Items[i]
		msg, reason := h.prepare(ev.Now, q.Day, vk, keyOK, isClosed, it)
		if reason != "" {
			h.Stats.reject(reason)
		}
		resp.Results = append(resp.Results, p3.PrepResult{ID: it.ID, Reason: reason, Message: msg})
	}
	return resp.MarshalBinary()
}

// prepare runs the helper's side of one report and commits it; it returns
// the prep message or a rejection reason.
func (h *Helper) prepare(now time.Time, day p3.Day, vk [p3.VerifyKeySize]byte, keyOK, isClosed bool, it *p3.PrepItem) ([]byte, string) {
	h.Stats.Uploads++
	b := h.batches[day]
	digest := itemDigest(it)
	if b != nil && !h.skipReplayCheck {
		if c, ok := b.ids[it.ID]; ok {
			if c == digest && keyOK {
				// the leader's retry of the same request (a lost answer,
				// the leader's restart): the same answer (preparation
				// is deterministic, so it is computed again rather than
				// kept), counted once, also once the batch closed (the
				// report was committed while it was open)
				return h.reprepare(day, vk, it)
			}
			return nil, "replay"
		}
	}
	if !keyOK {
		return nil, "key_epoch"
	}
	if isClosed {
		return nil, "late"
	}
	if future(day, now) {
		return nil, "future"
	}
	if h.cfg.TokenSeed != nil {
		// before the share is opened or prepared: a report nobody's
		// credential stands for costs the helper nothing and counts for
		// nothing (spent below: the committed id refuses the token's
		// second use as a replay)
		if reason := h.checkToken(day, it); reason != "" {
			return nil, reason
		}
	}
	msg, out, reason := h.prep(day, vk, it)
	if reason != "" {
		return nil, reason
	}
	if b == nil {
		b = newBatch(h.vdaf)
		h.batches[day] = b
	}
	b.add(h.vdaf, it.ID, out, digest)
	h.Stats.Prepared++
	return msg, ""
}

// prep opens the helper's input share of it and prepares it (the proof
// check included); it returns the prep message and the output share, or a
// rejection reason.
func (h *Helper) prep(day p3.Day, vk [p3.VerifyKeySize]byte, it *p3.PrepItem) ([]byte, *p3.OutShare, string) {
	share, err := p3.OpenHelperShare(h.cfg.Keys[0], h.cfg.Campaign, day, it.ID, it.PublicShare, it.SealedHelper)
	for _, k := range h.cfg.Keys[1:] {
		if err == nil {
			break
		}
		share, err = p3.OpenHelperShare(k, h.cfg.Campaign, day, it.ID, it.PublicShare, it.SealedHelper)
	}
	if err != nil {
		return nil, nil, "decrypt"
	}
	msg, out, err := h.vdaf.PrepHelper(vk, it.ID, it.PublicShare, share, it.LeaderPrep)
	if errors.Is(err, p3.ErrProof) && h.skipProofCheck {
		msg, out, err = h.prepareUnchecked(vk, it, share)
	}
	if err != nil {
		return nil, nil, p3.Reason(err)
	}
	return msg, out, ""
}

// reprepare answers a retried item of a committed report: the prep
// message computed again, nothing committed.
func (h *Helper) reprepare(day p3.Day, vk [p3.VerifyKeySize]byte, it *p3.PrepItem) ([]byte, string) {
	msg, _, reason := h.prep(day, vk, it)
	return msg, reason
}

// prepareUnchecked is the attack tests' control path without the proof
// check: the helper's own joint-randomness seed (the end of its encoded
// PrepState) stands in for the prep message.
func (h *Helper) prepareUnchecked(vk [p3.VerifyKeySize]byte, it *p3.PrepItem, share []byte) ([]byte, *p3.OutShare, error) {
	prep, err := h.vdaf.PrepInit(vk, it.ID, 1, it.PublicShare, share)
	if err != nil {
		return nil, nil, err
	}
	msg := prep.State[len(prep.State)-32:]
	out, err := h.vdaf.PrepNext(prep.State, msg)
	return msg, out, err
}

// collectReq hands the helper's aggregate share, sealed to the collector,
// when the batch is closed, the leader's count and checksum equal the
// helper's and the batch has at least MinBatchSize reports.
func (h *Helper) collectReq(ev Event) ([]byte, error) {
	q, err := p3.ParseCollectReq(ev.Msg)
	if err != nil {
		return nil, err
	}
	if q.Campaign != h.cfg.Campaign {
		return nil, fmt.Errorf("prio3: collect request for campaign %q, this helper runs %q", q.Campaign, h.cfg.Campaign)
	}
	refuse := func(reason string) ([]byte, error) {
		h.Stats.refuse(reason)
		a := &p3.AggShare{Role: 1, Campaign: q.Campaign, Day: q.Day, Count: q.Count, Checksum: q.Checksum, Reason: reason}
		return a.MarshalBinary()
	}
	b := h.batches[q.Day]
	switch {
	case !closed(&h.cfg, q.Day, ev.Now):
		return refuse("batch_open")
	case b == nil:
		return refuse("unknown_batch")
	case !h.skipBatchCheck && (b.count != q.Count || b.checksum != q.Checksum):
		return refuse("mismatch")
	case !h.skipMinBatch && b.count < h.cfg.MinBatchSize:
		// final: a closed batch never grows
		b.markCollected()
		return refuse("small_batch")
	}
	h.Stats.Collected++
	out, err := sealShare(&h.cfg, 1, q.Day, b)
	if err == nil {
		b.markCollected()
	}
	return out, err
}
