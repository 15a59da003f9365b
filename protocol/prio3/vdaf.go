// Package prio3 is the wire contract of PDD's Prio3 mode: a keyword
// campaign's measurement as a Prio3 VDAF (draft-irtf-cfrg-vdaf-14 §7, as
// implemented by github.com/cloudflare/circl v1.6.5 vdaf/prio3, whose wire
// format is VDAF-13/14, so crowdlog is not interoperable with DAP-18
// deployments), the client's report in DAP's layout (draft-ietf-ppm-dap §4.5:
// the public share and the leader's input share sealed to the leader, the
// helper's input share HPKE-sealed to the helper inside), and the messages
// leader, helper and collector exchange. Every message starts with
// WireVersion; every decoding error wraps protocol.ErrMalformed.
//
// Two aggregators (the leader, aggregator id 0, and the helper, id 1) each
// hold one share of every client's vector; only the sum of both aggregate
// shares of a batch reveals anything, and only the batch total.
package prio3

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"

	"github.com/cloudflare/circl/vdaf/prio3/arith/fp128"
	"github.com/cloudflare/circl/vdaf/prio3/mhcv"
	"github.com/cloudflare/circl/vdaf/prio3/sumvec"

	"github.com/crowdlog/crowdlog/protocol"
)

// WireVersion is the first byte of every Prio3-mode message.
const WireVersion byte = 1

// Kind is the campaign's measurement.
type Kind byte

const (
	// KindSumVec: per keyword the day's count clipped to 2^Bits − 1
	// (circl sumvec, VDAF-14 §7.4.3 Prio3SumVec).
	KindSumVec Kind = 1
	// KindPresence: per keyword 1 if the client searched it that day, at
	// most MaxWeight ones (circl mhcv, Prio3MultihotCountVec, VDAF-14 §7.4.5).
	KindPresence Kind = 2
)

// DefaultBits is the default SumVec bit width: counts clipped to 15.
const DefaultBits = 4

// NonceSize, VerifyKeySize: the VDAF nonce (= the report id) and verify key
// lengths in bytes (VDAF-14 §7: 16 and 32 for Prio3 with TurboSHAKE128).
const (
	NonceSize     = 16
	VerifyKeySize = 32
)

// MaxLength bounds a campaign's keyword count (the vector length L).
const MaxLength = 1 << 20

// Config is a campaign's measurement. Length is the number of monitored
// keywords L (vector index = the keyword's position in the campaign's
// list); Bits the SumVec bit width b (1..16, KindSumVec only); MaxWeight
// the most keywords a presence report may set (KindPresence only); Chunk
// the FLP gadget's chunk length (0 = DefaultChunk). L1 (KindSumVec only)
// is the campaign's per-client daily bound S on the sum of the clipped
// counts: an honest client keeps its most searched keywords within it
// (Clip) and the aggregators' noise is calibrated to it (Sensitivity); 0 =
// no bound but the proof's, L·(2^Bits − 1). The FLP proof does not
// enforce L1 (a malicious client can exceed it, harming only its own
// privacy); it bounds each entry, which keeps guarding robustness.
type Config struct {
	Kind      Kind
	Length    int
	Bits      int
	MaxWeight int
	Chunk     int
	L1        uint64
}

// DefaultL1 is the default SumVec L1 bound S: the 90th percentile (22)
// of the bundled AOL log's per-client daily sums of counts clipped to
// 15 over the default 10,000-keyword list (61,379 client-days: median 6,
// p95 31, p99 55, max 267) rounded down to 20, which keeps 83 % of the
// clipped mass (docs/decisions.md, "Per-person ε in Prio3 mode").
const DefaultL1 = 20

// Sensitivity is the L1 sensitivity of a day's aggregate to one honest
// client's report: how much one person can move the sum of the L totals
// (Dwork & Roth, "The Algorithmic Foundations of Differential Privacy",
// Def. 3.1). Presence: MaxWeight (the proof enforces it); SumVec: L1 when
// 0 < L1 < L·Max(), else L·Max().
func (c Config) Sensitivity() uint64 {
	if c.Kind == KindPresence {
		return uint64(max(c.MaxWeight, 0))
	}
	dense := uint64(max(c.Length, 0)) * c.Max()
	if c.L1 > 0 && c.L1 < dense {
		return c.L1
	}
	return dense
}

// DefaultChunk returns the chunk length near √(encoded length): √(L·b) for
// SumVec, √L for presence — the FLP proof's size and the prover's time are
// smallest there (VDAF-14 §7.4.3 "chunk_length"; measured in
// docs/benchmarks.md).
func DefaultChunk(c Config) int {
	n := c.Length
	if c.Kind == KindSumVec {
		n *= c.Bits
	}
	if n <= 0 {
		return 1
	}
	return max(1, int(math.Round(math.Sqrt(float64(n)))))
}

// ErrConfig is wrapped when a Config is unusable.
var ErrConfig = errors.New("prio3: invalid campaign measurement")

// Max is the largest value one client may add to one keyword.
func (c Config) Max() uint64 {
	if c.Kind == KindPresence {
		return 1
	}
	return 1<<uint(c.Bits) - 1
}

// Check validates c.
func (c Config) Check() error {
	if c.Length <= 0 || c.Length > MaxLength {
		return fmt.Errorf("%w: length %d outside 1..%d", ErrConfig, c.Length, MaxLength)
	}
	if c.Chunk < 0 || c.Chunk > c.Length*max(c.Bits, 1) {
		return fmt.Errorf("%w: chunk length %d", ErrConfig, c.Chunk)
	}
	switch c.Kind {
	case KindSumVec:
		if c.Bits < 1 || c.Bits > 16 {
			return fmt.Errorf("%w: bits %d outside 1..16", ErrConfig, c.Bits)
		}
	case KindPresence:
		if c.MaxWeight < 1 || c.MaxWeight > c.Length {
			return fmt.Errorf("%w: max weight %d outside 1..%d", ErrConfig, c.MaxWeight, c.Length)
		}
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrConfig, c.Kind)
	}
	return nil
}

// VDAF is a campaign's Prio3 instance for two aggregators. The VDAF context
// string is Context(campaign, c) ("crowdlog prio3 " ‖ campaign, and the L1 bound), so reports of one campaign never
// prepare under another's. A VDAF is not safe for concurrent use: circl's
// Prio3 keeps one XOF state per instance (concurrent Shard calls panic in
// its sha3 buffer); build one per goroutine.
type VDAF struct {
	Config Config
	sv     *sumvec.SumVec
	mh     *mhcv.MultiHotCountVec
}

// New builds the VDAF of campaign with measurement c.
func New(campaign string, c Config) (*VDAF, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Chunk == 0 {
		c.Chunk = DefaultChunk(c)
	}
	ctx := Context(campaign, c)
	v := &VDAF{Config: c}
	var err error
	if c.Kind == KindSumVec {
		v.sv, err = sumvec.New(2, uint(c.Length), uint(c.Bits), uint(c.Chunk), ctx)
	} else {
		v.mh, err = mhcv.New(2, uint(c.Length), uint(c.MaxWeight), uint(c.Chunk), ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return v, nil
}

// Context is the VDAF application context string (draft-irtf-cfrg-vdaf
// §4: bound into every XOF, so into the joint randomness and the proof's
// randomness) of campaign with measurement c: "crowdlog prio3 " ‖
// campaign, and for a SumVec campaign with an L1 bound S below the
// proof's own (Sensitivity < L·Max) " l1=" ‖ S. The bound S thus binds
// the client's clipping to the aggregators' noise scale S/ε: a report
// sharded under another S fails the helper's proof check, so an operator
// that announced a larger S to clients than the helper calibrates its
// noise to gets their reports refused, not counted.
func Context(campaign string, c Config) []byte {
	ctx := "crowdlog prio3 " + campaign
	if c.Kind == KindSumVec && c.L1 > 0 && c.L1 < uint64(max(c.Length, 0))*c.Max() {
		ctx += " l1=" + strconv.FormatUint(c.L1, 10)
	}
	return []byte(ctx)
}

// RandSize is the randomness Shard consumes, in bytes.
func (v *VDAF) RandSize() int {
	if v.sv != nil {
		p := v.sv.Params()
		return int(p.RandSize())
	}
	p := v.mh.Params()
	return int(p.RandSize())
}

// shard splits a measurement (already clipped and in range) into the
// public share and the two input shares, encoded.
func (v *VDAF) shard(m []uint64, nonce [NonceSize]byte, rnd []byte) (pub, leader, helper []byte, err error) {
	n := sumvec.Nonce(nonce)
	var ps sumvec.PublicShare
	var is []sumvec.InputShare
	if v.sv != nil {
		ps, is, err = v.sv.Shard(m, &n, rnd)
	} else {
		b := make([]bool, len(m))
		for i, x := range m {
			b[i] = x != 0
		}
		ps, is, err = v.mh.Shard(b, &n, rnd)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if leader, err = is[0].MarshalBinary(); err != nil {
		return nil, nil, nil, err
	}
	if helper, err = is[1].MarshalBinary(); err != nil {
		return nil, nil, nil, err
	}
	return ps, leader, helper, nil
}

// Prepared is one aggregator's state for a report between PrepInit and
// PrepNext: State is circl's encoded PrepState, Share the encoded prep
// share this aggregator sends to the other (VDAF-14 §7.2.2).
type Prepared struct {
	State []byte
	Share []byte
}

// Prepare errors, one per rejection reason (Reason maps them to labels).
var (
	ErrInputShare = errors.New("prio3: undecodable input share")
	ErrJointRand  = errors.New("prio3: joint randomness mismatch")
	ErrProof      = errors.New("prio3: proof verification failed")
	ErrPrepShare  = errors.New("prio3: undecodable prep share or message")
)

// PrepInit runs VDAF-14 §7.2.2 prep_init for aggregator aggID (0 leader, 1
// helper) on an encoded public share and input share. Errors: ErrInputShare,
// ErrJointRand (the share does not match the public share: a tampered or
// out-of-range vector whose joint-randomness part was not recomputed).
func (v *VDAF) PrepInit(vk [VerifyKeySize]byte, nonce [NonceSize]byte, aggID uint8, pub, share []byte) (Prepared, error) {
	var is sumvec.InputShare
	if v.sv != nil {
		p := v.sv.Params()
		is.New(&p, uint(aggID))
	} else {
		p := v.mh.Params()
		is.New(&p, uint(aggID))
	}
	if err := is.UnmarshalBinary(share); err != nil {
		return Prepared{}, fmt.Errorf("%w: %w", ErrInputShare, err)
	}
	key := sumvec.VerifyKey(vk)
	n := sumvec.Nonce(nonce)
	var st *sumvec.PrepState
	var ps *sumvec.PrepShare
	var err error
	if v.sv != nil {
		st, ps, err = v.sv.PrepInit(&key, &n, aggID, sumvec.PublicShare(pub), is)
	} else {
		st, ps, err = v.mh.PrepInit(&key, &n, aggID, sumvec.PublicShare(pub), is)
	}
	if err != nil {
		return Prepared{}, fmt.Errorf("%w: %w", ErrJointRand, err)
	}
	var out Prepared
	if out.State, err = st.MarshalBinary(); err != nil {
		return Prepared{}, err
	}
	if out.Share, err = ps.MarshalBinary(); err != nil {
		return Prepared{}, err
	}
	return out, nil
}

func (v *VDAF) decodePrepShare(b []byte) (sumvec.PrepShare, error) {
	var ps sumvec.PrepShare
	if v.sv != nil {
		p := v.sv.Params()
		ps.New(&p)
	} else {
		p := v.mh.Params()
		ps.New(&p)
	}
	if err := ps.UnmarshalBinary(b); err != nil {
		return ps, fmt.Errorf("%w: %w", ErrPrepShare, err)
	}
	return ps, nil
}

// PrepSharesToPrep combines the leader's and the helper's encoded prep
// shares into the encoded prep message (VDAF-14 §7.2.2): this is the proof
// check. Errors: ErrPrepShare, ErrProof.
func (v *VDAF) PrepSharesToPrep(leader, helper []byte) ([]byte, error) {
	l, err := v.decodePrepShare(leader)
	if err != nil {
		return nil, err
	}
	h, err := v.decodePrepShare(helper)
	if err != nil {
		return nil, err
	}
	var msg *sumvec.PrepMessage
	if v.sv != nil {
		msg, err = v.sv.PrepSharesToPrep([]sumvec.PrepShare{l, h})
	} else {
		msg, err = v.mh.PrepSharesToPrep([]sumvec.PrepShare{l, h})
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProof, err)
	}
	return msg.MarshalBinary()
}

// Aggregate is an aggregator's running sum of output shares (VDAF-14
// §7.2.4 agg_share: L Field128 elements).
type Aggregate = sumvec.AggShare

// OutShare is one report's output share (L Field128 elements).
type OutShare = sumvec.OutShare

// NewAggregate returns an empty aggregate share (agg_init).
func (v *VDAF) NewAggregate() Aggregate {
	if v.sv != nil {
		return v.sv.AggregateInit()
	}
	return v.mh.AggregateInit()
}

// Update adds an output share to an aggregate share (agg_update).
func (v *VDAF) Update(a *Aggregate, o *OutShare) {
	if v.sv != nil {
		v.sv.AggregateUpdate(a, o)
	} else {
		v.mh.AggregateUpdate(a, o)
	}
}

// EncodeAggregate encodes an aggregate share: L × 16 B (VDAF-14 §6.1).
func EncodeAggregate(a *Aggregate) []byte {
	b, _ := a.MarshalBinary()
	return b
}

// DecodeAggregate decodes an aggregate share of this VDAF. Errors wrap
// protocol.ErrMalformed.
func (v *VDAF) DecodeAggregate(b []byte) (Aggregate, error) {
	a := v.NewAggregate()
	if len(b) != v.Config.Length*fp128.Size {
		return a, protocol.Malformed("prio3: aggregate share of %d bytes, want %d", len(b), v.Config.Length*fp128.Size)
	}
	if err := a.UnmarshalBinary(b); err != nil {
		return a, protocol.Malformed("prio3: aggregate share: %v", err)
	}
	return a, nil
}

func (v *VDAF) prepNext(st *sumvec.PrepState, m *sumvec.PrepMessage) (*OutShare, error) {
	var out *sumvec.OutShare
	var err error
	if v.sv != nil {
		out, err = v.sv.PrepNext(st, m)
	} else {
		out, err = v.mh.PrepNext(st, m)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrJointRand, err)
	}
	return out, nil
}

// PrepNext finishes preparation: the output share of a report whose
// encoded PrepState is state and prep message is msg. Errors: ErrPrepShare,
// ErrJointRand (msg is not the one of this report).
func (v *VDAF) PrepNext(state, msg []byte) (*OutShare, error) {
	var st sumvec.PrepState
	var m sumvec.PrepMessage
	if v.sv != nil {
		p := v.sv.Params()
		st.New(&p)
		m.New(&p)
	} else {
		p := v.mh.Params()
		st.New(&p)
		m.New(&p)
	}
	if err := st.UnmarshalBinary(state); err != nil {
		return nil, fmt.Errorf("%w: state: %w", ErrPrepShare, err)
	}
	if err := m.UnmarshalBinary(msg); err != nil {
		return nil, fmt.Errorf("%w: message: %w", ErrPrepShare, err)
	}
	return v.prepNext(&st, &m)
}

// PrepHelper is the helper's whole preparation of one report in one call,
// without encoding its PrepState: PrepInit as aggregator 1, the proof check
// against the leader's encoded prep share, PrepNext. It returns the
// encoded prep message for the leader and the output share. Errors as
// PrepInit, PrepSharesToPrep and PrepNext.
func (v *VDAF) PrepHelper(vk [VerifyKeySize]byte, nonce [NonceSize]byte, pub, share, leaderPrep []byte) ([]byte, *OutShare, error) {
	var is sumvec.InputShare
	if v.sv != nil {
		p := v.sv.Params()
		is.New(&p, 1)
	} else {
		p := v.mh.Params()
		is.New(&p, 1)
	}
	if err := is.UnmarshalBinary(share); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInputShare, err)
	}
	key := sumvec.VerifyKey(vk)
	n := sumvec.Nonce(nonce)
	var st *sumvec.PrepState
	var hs *sumvec.PrepShare
	var err error
	if v.sv != nil {
		st, hs, err = v.sv.PrepInit(&key, &n, 1, sumvec.PublicShare(pub), is)
	} else {
		st, hs, err = v.mh.PrepInit(&key, &n, 1, sumvec.PublicShare(pub), is)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrJointRand, err)
	}
	ls, err := v.decodePrepShare(leaderPrep)
	if err != nil {
		return nil, nil, err
	}
	var msg *sumvec.PrepMessage
	if v.sv != nil {
		msg, err = v.sv.PrepSharesToPrep([]sumvec.PrepShare{ls, *hs})
	} else {
		msg, err = v.mh.PrepSharesToPrep([]sumvec.PrepShare{ls, *hs})
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrProof, err)
	}
	out, err := v.prepNext(st, msg)
	if err != nil {
		return nil, nil, err
	}
	mb, err := msg.MarshalBinary()
	return mb, out, err
}

// Reason is the rejection label of a preparation error ("input_share",
// "joint_rand", "proof", "prep_share"; "other" for anything else): the
// reason label of crowdlog_prio3_rejected_total.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrInputShare):
		return "input_share"
	case errors.Is(err, ErrJointRand):
		return "joint_rand"
	case errors.Is(err, ErrProof):
		return "proof"
	case errors.Is(err, ErrPrepShare):
		return "prep_share"
	}
	return "other"
}

// DecodeVec decodes n Field128 elements (16 bytes each, little-endian,
// canonical: VDAF-14 §6.1 encode_vec). Errors wrap protocol.ErrMalformed.
func DecodeVec(b []byte, n int) (fp128.Vec, error) {
	if n < 0 || n > MaxLength || len(b) != n*fp128.Size {
		return nil, protocol.Malformed("prio3: vector of %d bytes, want %d elements of %d", len(b), n, fp128.Size)
	}
	v := make(fp128.Vec, n)
	if err := v.UnmarshalBinary(b); err != nil {
		return nil, protocol.Malformed("prio3: vector: %v", err)
	}
	return v, nil
}

// EncodeVec encodes v (VDAF-14 §6.1 encode_vec).
func EncodeVec(v fp128.Vec) []byte {
	b, _ := v.MarshalBinary()
	return b
}

// order is Field128's modulus p, read as (p − 1) + 1 through the field's own
// canonical encoding.
var order = func() *big.Int {
	var zero, one, m fp128.Fp
	_ = one.SetUint64(1)
	m.Sub(&zero, &one)
	return new(big.Int).Add(leInt(&m), big.NewInt(1))
}()

func leInt(z *fp128.Fp) *big.Int {
	b, _ := z.MarshalBinary()
	for l, r := 0, len(b)-1; l < r; l, r = l+1, r-1 {
		b[l], b[r] = b[r], b[l]
	}
	return new(big.Int).SetBytes(b)
}

// Signed decodes aggregate field elements as signed integers: x ≤ (p−1)/2 is
// x, larger x is x − p (Field128's p = 2^66·4611686018427387897 + 1). circl's
// Unshard refuses values ≥ 2^64, so noisy (possibly negative) totals are
// decoded here. Errors when a value is outside int64.
func Signed(v fp128.Vec) ([]int64, error) {
	half := new(big.Int).Rsh(order, 1)
	out := make([]int64, len(v))
	for i := range v {
		x := leInt(&v[i])
		if x.Cmp(half) > 0 {
			x.Sub(x, order)
		}
		if !x.IsInt64() {
			return nil, fmt.Errorf("prio3: aggregate element %d outside int64 (a corrupted share?)", i)
		}
		out[i] = x.Int64()
	}
	return out, nil
}

// FieldOf returns x as a Field128 element (negative x as p + x): how
// noise is added to an aggregate share.
func FieldOf(x int64) fp128.Fp {
	var z fp128.Fp
	if x >= 0 {
		_ = z.SetUint64(uint64(x))
		return z
	}
	var m fp128.Fp
	_ = m.SetUint64(uint64(-x))
	z.Sub(&z, &m)
	return z
}
