package prio3

import (
	"math"

	"github.com/cloudflare/circl/kem"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// Message types (the byte after WireVersion).
const (
	msgAggregateReq  byte = 1
	msgAggregateResp byte = 2
	msgCollectReq    byte = 3
	msgAggShare      byte = 4
)

// MaxItems bounds the reports of one AggregateReq.
const MaxItems = 1 << 16

// MaxMessage bounds every leader–helper message (256 MB).
const MaxMessage = 256 << 20

// PrepItem is one report in an AggregateReq: what the helper needs to
// prepare it (its sealed input share, the public share) and the leader's
// prep share (VDAF-14 §7.2.2; about 5 KB for SumVec L = 10,000, b = 4).
type PrepItem struct {
	ID           ReportID
	PublicShare  []byte
	SealedHelper []byte
	LeaderPrep   []byte
	HelperToken  []byte // the client's Report.HelperToken, forwarded as is
}

// AggregateReq is the leader's preparation request to the helper (DAP's
// AggregationJobInitReq, one round): the batch (campaign, day), the verify
// key epoch both use, and the reports.
type AggregateReq struct {
	Campaign string
	Day      Day
	KeyEpoch uint32
	Items    []PrepItem
}

func header(w *protocol.Writer, typ byte, campaign string, day Day) {
	w.U8(WireVersion)
	w.U8(typ)
	w.Bytes8([]byte(campaign))
	w.U32(uint32(day))
}

func readHeader(r *protocol.Reader, typ byte, what string) (string, Day) {
	readVersion(r, what)
	if t := r.U8(what + " type"); r.Err == nil && t != typ {
		r.Err = protocol.Malformed("%s: message type %d, want %d", what, t, typ)
	}
	return readCampaign(r), Day(r.U32("day"))
}

// MarshalBinary: version ‖ type 1 ‖ campaign(len8) ‖ day(u32) ‖
// key epoch(u32) ‖ n(u32) ‖ n × (id(16) ‖ public(len32) ‖ sealed
// helper share(len32) ‖ leader prep share(len32) ‖ helper token(len16)).
func (q *AggregateReq) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{}
	header(&w, msgAggregateReq, q.Campaign, q.Day)
	w.U32(q.KeyEpoch)
	w.U32(uint32(len(q.Items)))
	for _, it := range q.Items {
		w.Raw(it.ID[:])
		w.Bytes32(it.PublicShare)
		w.Bytes32(it.SealedHelper)
		w.Bytes32(it.LeaderPrep)
		w.Bytes16(it.HelperToken)
	}
	return w.B, nil
}

// ParseAggregateReq decodes an AggregateReq. Errors wrap
// protocol.ErrMalformed.
func ParseAggregateReq(b []byte) (*AggregateReq, error) {
	if len(b) > MaxMessage {
		return nil, protocol.Malformed("prio3: aggregate request of %d bytes", len(b))
	}
	r := protocol.Reader{B: b}
	q := &AggregateReq{}
	q.Campaign, q.Day = readHeader(&r, msgAggregateReq, "prio3 aggregate request")
	q.KeyEpoch = r.U32("key epoch")
	n := r.U32("items")
	if r.Err == nil && (n > MaxItems || int(n) > len(r.B)/(NonceSize+14)) {
		return nil, protocol.Malformed("prio3: aggregate request claims %d items", n)
	}
	for i := 0; i < int(n) && r.Err == nil; i++ {
		var it PrepItem
		copy(it.ID[:], r.Take(NonceSize, "report id"))
		it.PublicShare = r.Bytes32("public share")
		it.SealedHelper = r.Bytes32("sealed helper share")
		it.LeaderPrep = r.Bytes32("leader prep share")
		it.HelperToken = readToken(&r)
		q.Items = append(q.Items, it)
	}
	if err := r.Done("prio3 aggregate request"); err != nil {
		return nil, err
	}
	return q, nil
}

// PrepResult is the helper's answer for one report: the prep message
// (Reason == "") or the reason it rejected the report (a label of
// crowdlog_prio3_rejected_total: the leader learns the helper's reason).
type PrepResult struct {
	ID      ReportID
	Reason  string
	Message []byte
}

// AggregateResp is the helper's answer to an AggregateReq (DAP's
// AggregationJobResp), one result per item, in order.
type AggregateResp struct {
	Campaign string
	Day      Day
	Results  []PrepResult
}

// MarshalBinary: version ‖ type 2 ‖ campaign(len8) ‖ day(u32) ‖ n(u32) ‖
// n × (id(16) ‖ reason(len8) ‖ prep message(len32), empty when rejected).
func (p *AggregateResp) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{}
	header(&w, msgAggregateResp, p.Campaign, p.Day)
	w.U32(uint32(len(p.Results)))
	for _, it := range p.Results {
		w.Raw(it.ID[:])
		w.Bytes8([]byte(it.Reason))
		w.Bytes32(it.Message)
	}
	return w.B, nil
}

// ParseAggregateResp decodes an AggregateResp. Errors wrap
// protocol.ErrMalformed.
func ParseAggregateResp(b []byte) (*AggregateResp, error) {
	if len(b) > MaxMessage {
		return nil, protocol.Malformed("prio3: aggregate response of %d bytes", len(b))
	}
	r := protocol.Reader{B: b}
	p := &AggregateResp{}
	p.Campaign, p.Day = readHeader(&r, msgAggregateResp, "prio3 aggregate response")
	n := r.U32("results")
	if r.Err == nil && (n > MaxItems || int(n) > len(r.B)/(NonceSize+5)) {
		return nil, protocol.Malformed("prio3: aggregate response claims %d results", n)
	}
	for i := 0; i < int(n) && r.Err == nil; i++ {
		var it PrepResult
		copy(it.ID[:], r.Take(NonceSize, "report id"))
		it.Reason = string(r.Bytes8("reason"))
		it.Message = r.Bytes32("prep message")
		if r.Err == nil && (it.Reason == "") == (len(it.Message) == 0) {
			r.Err = protocol.Malformed("prio3: result needs exactly one of a reason and a prep message")
		}
		p.Results = append(p.Results, it)
	}
	if err := r.Done("prio3 aggregate response"); err != nil {
		return nil, err
	}
	return p, nil
}

// CollectReq is the leader's request for the helper's aggregate share of a
// closed batch (DAP's AggregateShareReq): the leader's report count and
// checksum, which must equal the helper's.
type CollectReq struct {
	Campaign string
	Day      Day
	Count    uint64
	Checksum Checksum
}

// MarshalBinary: version ‖ type 3 ‖ campaign(len8) ‖ day(u32) ‖
// count(u64) ‖ checksum(32).
func (q *CollectReq) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{}
	header(&w, msgCollectReq, q.Campaign, q.Day)
	u64(&w, q.Count)
	w.Raw(q.Checksum[:])
	return w.B, nil
}

// ParseCollectReq decodes a CollectReq. Errors wrap protocol.ErrMalformed.
func ParseCollectReq(b []byte) (*CollectReq, error) {
	r := protocol.Reader{B: b}
	q := &CollectReq{}
	q.Campaign, q.Day = readHeader(&r, msgCollectReq, "prio3 collect request")
	q.Count = readU64(&r, "count")
	copy(q.Checksum[:], r.Take(32, "checksum"))
	if err := r.Done("prio3 collect request"); err != nil {
		return nil, err
	}
	return q, nil
}

// ReasonSmallBatch is the AggShare.Reason of a batch under the minimum
// batch size: the helper's refusal to the leader, and the leader's notice
// to the collector (role 0, count 0, written to the shares topic) that the
// day is withheld.
const ReasonSmallBatch = "small_batch"

// AggShare is one aggregator's answer for a batch's collection: its
// aggregate share sealed to the collector (Reason == "") or why it refuses
// ("batch_open", "mismatch", ReasonSmallBatch, "unknown_batch"). The
// leader forwards only ReasonSmallBatch to the collector, as a notice
// without a count.
type AggShare struct {
	Role     byte // 0 leader, 1 helper
	Campaign string
	Day      Day
	Count    uint64
	Checksum Checksum
	Reason   string
	// Epsilon is the ε of the integer Laplace noise the aggregator added to
	// each entry of its share (scale Δ/ε, Δ the measurement's per-client
	// maximum; 0 = none). It is in the HPKE AAD, so neither the leader nor
	// the topic can change the helper's claim; the collector releases a
	// pair only when both claim its configured ε.
	Epsilon float64
	Sealed  []byte // enc(32) ‖ HPKE ciphertext of L × 16 B Field128 elements
}

func (a *AggShare) aad() []byte {
	w := protocol.Writer{}
	header(&w, msgAggShare, a.Campaign, a.Day)
	w.U8(a.Role)
	u64(&w, a.Count)
	w.Raw(a.Checksum[:])
	u64(&w, math.Float64bits(a.Epsilon))
	return w.B
}

// SealAggShare seals an aggregate share v to the collector's key; the AAD
// binds role, campaign, day, count, checksum and epsilon.
func SealAggShare(collector onion.PublicKey, a *AggShare, v []byte) error {
	s, err := seal(collector.Key, infoAggShare, a.aad(), v)
	a.Sealed = s
	return err
}

// Open opens a's share with the collector's private key. Errors wrap
// protocol.ErrMalformed.
func (a *AggShare) Open(collector kem.PrivateKey) ([]byte, error) {
	return open(collector, infoAggShare, a.aad(), a.Sealed)
}

// MarshalBinary: version ‖ type 4 ‖ campaign(len8) ‖ day(u32) ‖ role(1) ‖
// count(u64) ‖ checksum(32) ‖ reason(len8) ‖ epsilon(u64: IEEE 754 bits) ‖
// sealed share(len32).
func (a *AggShare) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{}
	header(&w, msgAggShare, a.Campaign, a.Day)
	w.U8(a.Role)
	u64(&w, a.Count)
	w.Raw(a.Checksum[:])
	w.Bytes8([]byte(a.Reason))
	u64(&w, math.Float64bits(a.Epsilon))
	w.Bytes32(a.Sealed)
	return w.B, nil
}

// ParseAggShare decodes an AggShare. Errors wrap protocol.ErrMalformed.
func ParseAggShare(b []byte) (*AggShare, error) {
	if len(b) > MaxMessage {
		return nil, protocol.Malformed("prio3: aggregate share of %d bytes", len(b))
	}
	r := protocol.Reader{B: b}
	a := &AggShare{}
	a.Campaign, a.Day = readHeader(&r, msgAggShare, "prio3 aggregate share")
	a.Role = r.U8("role")
	a.Count = readU64(&r, "count")
	copy(a.Checksum[:], r.Take(32, "checksum"))
	a.Reason = string(r.Bytes8("reason"))
	a.Epsilon = math.Float64frombits(readU64(&r, "epsilon"))
	a.Sealed = r.Bytes32("sealed share")
	if r.Err == nil && (a.Role > 1 || (a.Reason == "") == (len(a.Sealed) == 0)) {
		r.Err = protocol.Malformed("prio3: aggregate share: role %d, needs exactly one of a reason and a share", a.Role)
	}
	if r.Err == nil && !(a.Epsilon >= 0 && !math.IsInf(a.Epsilon, 1)) {
		r.Err = protocol.Malformed("prio3: aggregate share: epsilon %v (want finite and ≥ 0)", a.Epsilon)
	}
	if err := r.Done("prio3 aggregate share"); err != nil {
		return nil, err
	}
	return a, nil
}
