package prio3

import (
	"encoding/binary"
	"math"
	"sort"

	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// State encoding (restart safety). Layout, big-endian:
//
//	version(1) ‖ role(1: 'L' or 'H') ‖ campaign(len8) ‖ length(u32) ‖ stats ‖
//	n batches(u32) ‖ n × batch ‖ [leader: n pending(u32) ‖ n × pending ‖
//	n collecting(u32) ‖ n × day(u32)]
//	stats = uploads, prepared, collected (u64 each) ‖ rejected map ‖ refused map
//	map   = n(u16) ‖ n × (label(len8) ‖ value(u64))
//	batch = day(u32) ‖ count(u64) ‖ checksum(32) ‖ aggregate(len32: L × 16 B) ‖
//	        collected(1) ‖ n ids(u32) ‖ n × (id(16) [helper: ‖ digest(16)]) ‖
//	        noise
//	        (version 4; before it no collected flag and the helper's ids
//	        carry a 32-byte digest and the prep message(len8); a collected
//	        batch has no ids)
//	noise = 0(1) | 1(1) ‖ epsilon(u64: IEEE 754 bits) ‖ L × draw(i64)
//	        (version 2 only; version 1 states, which have no noise field,
//	        are still read: their batches have no draw)
//	pending = id(16) ‖ day(u32) ‖ public(len32) ‖ sealed(len32) ‖ state(len32) ‖ share(len32) ‖
//	          helper token(len16) (version 3 on)
//
// A restored leader re-sends every pending report on its next tick; the
// helper answers a retry of a committed report (same request item) with the
// same prep message and counts it once.
const stateVersion byte = 4

// stateVersionDigest32 is the version before the collected flag and the
// truncated digests.
const stateVersionDigest32 byte = 3

// stateVersionNoToken is the version before the pending reports' helper
// token (read: their reports go to the helper without one).
const stateVersionNoToken byte = 2

// stateVersionNoNoise is the version before the noise field.
const stateVersionNoNoise byte = 1

func putU64(w *protocol.Writer, x uint64) { w.B = binary.BigEndian.AppendUint64(w.B, x) }

func getU64(r *protocol.Reader, what string) uint64 {
	p := r.Take(8, what)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

func putMap(w *protocol.Writer, m map[string]uint64) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w.U16(uint16(len(keys)))
	for _, k := range keys {
		w.Bytes8([]byte(k))
		putU64(w, m[k])
	}
}

func getMap(r *protocol.Reader) map[string]uint64 {
	n := int(r.U16("map size"))
	m := map[string]uint64{}
	for i := 0; i < n && r.Err == nil; i++ {
		k := string(r.Bytes8("label"))
		m[k] = getU64(r, "counter")
	}
	return m
}

func putStats(w *protocol.Writer, s *Stats) {
	putU64(w, s.Uploads)
	putU64(w, s.Prepared)
	putU64(w, s.Collected)
	putMap(w, s.Rejected)
	putMap(w, s.CollectRefused)
}

func getStats(r *protocol.Reader) Stats {
	return Stats{Uploads: getU64(r, "uploads"), Prepared: getU64(r, "prepared"), Collected: getU64(r, "collected"),
		Rejected: getMap(r), CollectRefused: getMap(r)}
}

func sortedDays[T any](m map[p3.Day]T) []p3.Day {
	d := make([]p3.Day, 0, len(m))
	for k := range m {
		d = append(d, k)
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d
}

func putBatches(w *protocol.Writer, bs map[p3.Day]*batch, helper bool) {
	w.U32(uint32(len(bs)))
	for _, d := range sortedDays(bs) {
		w.U32(uint32(d))
		putBatch(w, bs[d], helper)
	}
}

// putBatch encodes b (state version 4): count ‖ checksum ‖ aggregate ‖
// collected(1) ‖ ids ‖ noise.
func putBatch(w *protocol.Writer, b *batch, helper bool) {
	putU64(w, b.count)
	w.Raw(b.checksum[:])
	w.Bytes32(p3.EncodeAggregate(&b.agg))
	if b.collected {
		w.U8(1)
	} else {
		w.U8(0)
	}
	ids := make([]p3.ReportID, 0, len(b.ids))
	for id := range b.ids {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	putIDs(w, b, ids, helper)
	putNoise(w, b)
}

// putIDs encodes ids: n(u32) ‖ n × (id(16) [helper: ‖ digest(16)]).
func putIDs(w *protocol.Writer, b *batch, ids []p3.ReportID, helper bool) {
	w.U32(uint32(len(ids)))
	for _, id := range ids {
		w.Raw(id[:])
		if helper {
			c := b.ids[id]
			w.Raw(c[:])
		}
	}
}

// putNoise encodes b's noise field: 0(1) | 1(1) ‖ epsilon(u64) ‖ L × i64.
func putNoise(w *protocol.Writer, b *batch) {
	if b.noise == nil {
		w.U8(0)
		return
	}
	w.U8(1)
	putU64(w, math.Float64bits(b.noiseEps))
	for _, x := range b.noise {
		putU64(w, uint64(x))
	}
}

func getBatches(r *protocol.Reader, v *p3.VDAF, helper bool, version byte) map[p3.Day]*batch {
	bs := map[p3.Day]*batch{}
	n := r.U32("batches")
	if r.Err == nil && int(n) > len(r.B)/48 {
		r.Err = protocol.Malformed("prio3 state claims %d batches", n)
	}
	for i := 0; i < int(n) && r.Err == nil; i++ {
		d := p3.Day(r.U32("day"))
		b := getBatch(r, v, helper, version)
		if r.Err == nil && b.ids != nil && !sameIDs(b) {
			r.Err = protocol.Malformed("prio3 state: batch %s count or checksum does not match its ids", d)
		}
		if _, dup := bs[d]; dup && r.Err == nil {
			r.Err = protocol.Malformed("prio3 state: batch %s twice", d)
		}
		bs[d] = b
	}
	return bs
}

// sameIDs reports whether b's count and checksum are those of its ids.
func sameIDs(b *batch) bool {
	var sum p3.Checksum
	for id := range b.ids {
		sum.Add(id)
	}
	return sum == b.checksum && uint64(len(b.ids)) == b.count
}

// getBatch decodes one batch of a state of version (putBatch; versions 1
// to 3 keep 32-byte digests and prep messages, no collected flag).
func getBatch(r *protocol.Reader, v *p3.VDAF, helper bool, version byte) *batch {
	b := &batch{count: getU64(r, "count"), ids: map[p3.ReportID]digest{}}
	copy(b.checksum[:], r.Take(32, "checksum"))
	agg := r.Bytes32("aggregate")
	if r.Err != nil {
		return b
	}
	a, err := v.DecodeAggregate(agg)
	if err != nil {
		r.Err = err
		return b
	}
	b.agg = a
	if version >= stateVersion {
		switch f := r.U8("collected"); {
		case r.Err != nil:
		case f == 1:
			b.collected = true
		case f != 0:
			r.Err = protocol.Malformed("prio3 state: collected flag %d", f)
		}
	}
	getIDs(r, b, helper, version)
	if b.collected {
		if len(b.ids) > 0 && r.Err == nil {
			r.Err = protocol.Malformed("prio3 state: a collected batch with report ids")
		}
		b.ids = nil
	}
	if version >= stateVersionNoToken {
		getNoise(r, b, v.Config.Length)
	}
	return b
}

// getIDs reads ids (putIDs) into b.ids; versions before 4 carry a
// 32-byte digest and the prep message per id (the digest is truncated,
// the message dropped: retries are prepared again).
func getIDs(r *protocol.Reader, b *batch, helper bool, version byte) []p3.ReportID {
	k := r.U32("ids")
	if r.Err == nil && int(k) > len(r.B)/p3.NonceSize {
		r.Err = protocol.Malformed("prio3 state claims %d ids", k)
	}
	var out []p3.ReportID
	for j := 0; j < int(k) && r.Err == nil; j++ {
		var id p3.ReportID
		copy(id[:], r.Take(p3.NonceSize, "report id"))
		var c digest
		if helper {
			if version >= stateVersion {
				copy(c[:], r.Take(DigestSize, "digest"))
			} else {
				copy(c[:], r.Take(32, "digest"))
				r.Bytes8("prep message")
			}
		}
		if _, dup := b.ids[id]; dup && r.Err == nil {
			r.Err = protocol.Malformed("prio3 state: report id twice in a batch")
		}
		b.ids[id] = c
		out = append(out, id)
	}
	return out
}

// getNoise reads a batch's noise field (version 2).
func getNoise(r *protocol.Reader, b *batch, length int) {
	switch f := r.U8("noise flag"); {
	case r.Err != nil || f == 0:
		return
	case f != 1:
		r.Err = protocol.Malformed("prio3 state: noise flag %d", f)
		return
	}
	eps := math.Float64frombits(getU64(r, "noise epsilon"))
	if r.Err == nil && (!(eps > 0) || math.IsInf(eps, 1)) {
		r.Err = protocol.Malformed("prio3 state: noise epsilon %v", eps)
	}
	if r.Err == nil && length > len(r.B)/8 {
		r.Err = protocol.Malformed("prio3 state: noise of %d entries in %d bytes", length, len(r.B))
	}
	if r.Err != nil {
		return
	}
	b.noise, b.noiseEps = make([]int64, length), eps
	for i := range b.noise {
		b.noise[i] = int64(getU64(r, "noise draw"))
	}
}

// readStateHeader reads the header and returns the state's version
// (stateVersion or stateVersionNoNoise).
func readStateHeader(r *protocol.Reader, role byte, cfg *Config) byte {
	v := r.U8("state version")
	if r.Err == nil && v != stateVersion && v != stateVersionDigest32 && v != stateVersionNoToken && v != stateVersionNoNoise {
		r.Err = protocol.Malformed("prio3 state version %d, want %d to %d", v, stateVersionNoNoise, stateVersion)
	}
	if x := r.U8("role"); r.Err == nil && x != role {
		r.Err = protocol.Malformed("prio3 state of role %q, want %q", x, role)
	}
	if c := string(r.Bytes8("campaign")); r.Err == nil && c != cfg.Campaign {
		r.Err = protocol.Malformed("prio3 state of campaign %q, configured %q (wrong state directory?)", c, cfg.Campaign)
	}
	if n := r.U32("length"); r.Err == nil && int(n) != cfg.Measurement.Length {
		r.Err = protocol.Malformed("prio3 state of %d keywords, configured %d", n, cfg.Measurement.Length)
	}
	return v
}

// MarshalBinary encodes the leader's state (see the layout above).
func (l *Leader) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{}
	w.U8(stateVersion)
	w.U8('L')
	w.Bytes8([]byte(l.cfg.Campaign))
	w.U32(uint32(l.cfg.Measurement.Length))
	putStats(&w, &l.Stats)
	putBatches(&w, l.batches, false)
	ids := make([]p3.ReportID, 0, len(l.pending))
	n := 0
	for id, ps := range l.pending {
		ids = append(ids, id)
		n += len(ps)
	}
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	w.U32(uint32(n))
	for _, id := range ids {
		for _, p := range l.pending[id] {
			w.Raw(id[:])
			w.U32(uint32(p.day))
			w.Bytes32(p.public)
			w.Bytes32(p.sealed)
			w.Bytes32(p.state)
			w.Bytes32(p.share)
			w.Bytes16(p.token)
		}
	}
	days := sortedDays(l.collecting)
	w.U32(uint32(len(days)))
	for _, d := range days {
		w.U32(uint32(d))
	}
	return w.B, nil
}

// RestoreLeader rebuilds a leader from cfg and its encoded state. Errors
// wrap protocol.ErrMalformed (including a state of another campaign or
// vector length) or ErrConfig.
func RestoreLeader(cfg Config, b []byte) (*Leader, error) {
	l, err := NewLeader(cfg)
	if err != nil {
		return nil, err
	}
	r := protocol.Reader{B: b}
	version := readStateHeader(&r, 'L', &cfg)
	l.Stats = getStats(&r)
	l.batches = getBatches(&r, l.vdaf, false, version)
	n := r.U32("pending")
	if r.Err == nil && int(n) > len(r.B)/36 {
		r.Err = protocol.Malformed("prio3 state claims %d pending reports", n)
	}
	for i := 0; i < int(n) && r.Err == nil; i++ {
		var id p3.ReportID
		copy(id[:], r.Take(p3.NonceSize, "report id"))
		p := &pending{day: p3.Day(r.U32("day")), public: r.Bytes32("public share"), sealed: r.Bytes32("sealed share"),
			state: r.Bytes32("prep state"), share: r.Bytes32("prep share")}
		if version >= stateVersionDigest32 {
			if p.token = r.Bytes16("helper token"); len(p.token) == 0 {
				p.token = nil
			}
		}
		l.pending[id] = append(l.pending[id], p)
	}
	k := r.U32("collecting")
	if r.Err == nil && int(k) > len(r.B)/4 {
		r.Err = protocol.Malformed("prio3 state claims %d collecting days", k)
	}
	for i := 0; i < int(k) && r.Err == nil; i++ {
		l.collecting[p3.Day(r.U32("day"))] = true
	}
	if err := r.Done("prio3 leader state"); err != nil {
		return nil, err
	}
	return l, nil
}

// MarshalBinary encodes the helper's state (see the layout above).
func (h *Helper) MarshalBinary() ([]byte, error) {
	w := protocol.Writer{}
	w.U8(stateVersion)
	w.U8('H')
	w.Bytes8([]byte(h.cfg.Campaign))
	w.U32(uint32(h.cfg.Measurement.Length))
	putStats(&w, &h.Stats)
	putBatches(&w, h.batches, true)
	return w.B, nil
}

// RestoreHelper rebuilds a helper from cfg and its encoded state. Errors
// wrap protocol.ErrMalformed or ErrConfig.
func RestoreHelper(cfg Config, b []byte) (*Helper, error) {
	h, err := NewHelper(cfg)
	if err != nil {
		return nil, err
	}
	r := protocol.Reader{B: b}
	version := readStateHeader(&r, 'H', &cfg)
	h.Stats = getStats(&r)
	h.batches = getBatches(&r, h.vdaf, true, version)
	if err := r.Done("prio3 helper state"); err != nil {
		return nil, err
	}
	return h, nil
}
