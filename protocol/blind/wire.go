package blind

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire format of the messages on Kafka topic "vectors" (through the relays,
// or written by the coordinator) and "group-sums": a version byte, a kind
// byte, then big-endian fixed fields and explicit lengths; vectors are
// little-endian uint64s. Every parser returns errors wrapping ErrMalformed
// and has a fuzz target.

// Version is the wire version of this package's messages.
const Version byte = 2

// Kind says which message follows the version byte.
type Kind byte

const (
	KindSubmission Kind = 1 // a member's blinded vector Y_i (client → relays → vectors)
	KindAnswer     Kind = 2 // a survivor's recovery answer (client → relays → vectors)
	KindRoster     Kind = 3 // a group formed (coordinator → vectors)
	KindTick       Kind = 4 // a new day began (coordinator → every partition of vectors)
	KindOutcome    Kind = 5 // a group's sum or loss (aggregator → group-sums)
	KindCommit     Kind = 6 // a dealer's share commitments (coordinator → vectors)
)

// MaxL bounds the vector length a parser accepts (the monitored list size).
const MaxL = 1 << 20

// ErrMalformed is wrapped by every decoding error of this package.
var ErrMalformed = errors.New("blind: malformed message")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

type wbuf struct{ b []byte }

func (w *wbuf) u8(v byte)    { w.b = append(w.b, v) }
func (w *wbuf) u16(v uint16) { w.b = binary.BigEndian.AppendUint16(w.b, v) }
func (w *wbuf) u32(v uint32) { w.b = binary.BigEndian.AppendUint32(w.b, v) }
func (w *wbuf) u64(v uint64) { w.b = binary.BigEndian.AppendUint64(w.b, v) }
func (w *wbuf) head(k Kind)  { w.u8(Version); w.u8(byte(k)) }
func (w *wbuf) instance(in Instance) {
	w.u8(byte(len(in.Campaign)))
	w.b = append(w.b, in.Campaign...)
	w.u32(uint32(in.Round))
	w.u32(in.Group)
}
func (w *wbuf) vector(v []uint64) {
	w.u32(uint32(len(v)))
	for _, x := range v {
		w.b = binary.LittleEndian.AppendUint64(w.b, x)
	}
}

type rbuf struct {
	b   []byte
	err error
}

func (r *rbuf) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = malformed("truncated %s", what)
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}
func (r *rbuf) u8(what string) byte {
	if p := r.take(1, what); p != nil {
		return p[0]
	}
	return 0
}
func (r *rbuf) u16(what string) uint16 {
	if p := r.take(2, what); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}
func (r *rbuf) u32(what string) uint32 {
	if p := r.take(4, what); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}
func (r *rbuf) u64(what string) uint64 {
	if p := r.take(8, what); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}
func (r *rbuf) instance() Instance {
	n := int(r.u8("campaign length"))
	c := r.take(n, "campaign")
	if r.err == nil && !ValidCampaign(string(c)) {
		r.err = malformed("campaign name %q", c)
	}
	return Instance{Campaign: string(c), Round: int32(r.u32("round")), Group: r.u32("group")}
}
func (r *rbuf) vector() []uint64 {
	n := r.u32("vector length")
	if r.err != nil {
		return nil
	}
	if n > MaxL || int(n)*8 > len(r.b) {
		r.err = malformed("vector of %d entries in %d bytes", n, len(r.b))
		return nil
	}
	p := r.take(int(n)*8, "vector")
	if n == 0 {
		return nil
	}
	v := make([]uint64, n)
	for k := range v {
		v[k] = binary.LittleEndian.Uint64(p[8*k:])
	}
	return v
}
func (r *rbuf) share() SeedShare {
	s := SeedShare{X: r.u16("share x")}
	for l := range s.Y {
		s.Y[l] = r.u64("share limb")
		if s.Y[l] >= p61 && r.err == nil {
			r.err = malformed("share limb out of the field")
		}
	}
	return s
}
func (r *rbuf) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = malformed("%d trailing bytes", len(r.b))
	}
	return r.err
}

// ValidCampaign reports whether s is a campaign name: 1–64 bytes of
// [A-Za-z0-9._-].
func ValidCampaign(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Submission is member Member's blinded vector Y for an instance.
type Submission struct {
	Instance Instance
	Member   uint16
	Y        []uint64
}

// MarshalBinary encodes s: version ‖ kind ‖ instance ‖ member ‖ vector.
func (s *Submission) MarshalBinary() ([]byte, error) {
	w := wbuf{b: make([]byte, 0, 32+len(s.Instance.Campaign)+8*len(s.Y))}
	w.head(KindSubmission)
	w.instance(s.Instance)
	w.u16(s.Member)
	w.vector(s.Y)
	return w.b, nil
}

// MarshalBinary encodes a: version ‖ kind ‖ instance ‖ member ‖ u32 m ‖
// m×(from u16 ‖ j u16 ‖ x u16 ‖ 3×u64 ‖ nonce 16 ‖ index u16 ‖ u8 p ‖
// p×32-byte proof hashes).
func (a *Answer) MarshalBinary() ([]byte, error) {
	w := wbuf{}
	w.head(KindAnswer)
	w.instance(a.Instance)
	w.u16(a.Member)
	w.u32(uint32(len(a.Reveals)))
	for _, rv := range a.Reveals {
		if len(rv.Proof) > maxProof {
			return nil, fmt.Errorf("blind: proof of %d hashes", len(rv.Proof))
		}
		w.u16(rv.From)
		w.u16(rv.J)
		putShare(&w, rv.Share)
		w.b = append(w.b, rv.Nonce[:]...)
		w.u16(rv.Index)
		w.u8(byte(len(rv.Proof)))
		for _, h := range rv.Proof {
			w.b = append(w.b, h[:]...)
		}
	}
	return w.b, nil
}

// maxProof bounds a Merkle proof: 16 levels cover 65,536 leaves per bundle.
const maxProof = 16

func putShare(w *wbuf, s SeedShare) {
	w.u16(s.X)
	for _, y := range s.Y {
		w.u64(y)
	}
}

func (b *Bundle) marshal() []byte {
	w := wbuf{b: make([]byte, 0, 16+len(b.Shares)*44)}
	w.u8(Version)
	w.u16(b.From)
	w.u16(b.To)
	w.u32(uint32(len(b.Shares)))
	for _, s := range b.Shares {
		w.u16(s.J)
		putShare(&w, s.Share)
		w.b = append(w.b, s.Nonce[:]...)
	}
	return w.b
}

func parseBundle(p []byte) (*Bundle, error) {
	r := rbuf{b: p}
	if v := r.u8("version"); r.err == nil && v != Version {
		return nil, malformed("bundle version %d", v)
	}
	b := &Bundle{From: r.u16("from"), To: r.u16("to")}
	n := r.u32("share count")
	if r.err == nil && int(n)*44 > len(r.b) {
		return nil, malformed("%d shares in %d bytes", n, len(r.b))
	}
	for k := 0; k < int(n) && r.err == nil; k++ {
		bs := BundleShare{J: r.u16("j")}
		bs.Share = r.share()
		copy(bs.Nonce[:], r.take(NonceSize, "nonce"))
		b.Shares = append(b.Shares, bs)
	}
	if r.err == nil && (len(b.Shares) == 0 || b.Shares[0].J != b.From) {
		return nil, malformed("bundle without the dealer's self-mask share first")
	}
	return b, r.end()
}

// MarshalBinary encodes c: version ‖ kind ‖ instance ‖ member ‖ u16 n ‖
// n×32-byte roots.
func (c *Commitments) MarshalBinary() ([]byte, error) {
	w := wbuf{b: make([]byte, 0, 16+len(c.Instance.Campaign)+32*len(c.Roots))}
	w.head(KindCommit)
	w.instance(c.Instance)
	w.u16(c.Member)
	w.u16(uint16(len(c.Roots)))
	for _, r := range c.Roots {
		w.b = append(w.b, r[:]...)
	}
	return w.b, nil
}

// Roster announces a group of Instance: N members, threshold T, submissions
// accepted until the end of day Deadline (round + 1 + delay), recovery
// answers until the end of day RecoverBy (Deadline + recovery days); Groups is the
// number of groups of the round, Active the clients active on the round's
// day and Grouped those put in groups (PDD §4.5 confidence uses Active); L
// and ListHash identify the monitored keyword list.
type Roster struct {
	Instance  Instance
	N, T      uint16
	Deadline  int32
	RecoverBy int32
	Groups    uint32
	Active    uint32
	Grouped   uint32
	L         uint32
	ListHash  [32]byte
}

// MarshalBinary encodes r.
func (r *Roster) MarshalBinary() ([]byte, error) {
	w := wbuf{}
	w.head(KindRoster)
	w.instance(r.Instance)
	w.u16(r.N)
	w.u16(r.T)
	w.u32(uint32(r.Deadline))
	w.u32(uint32(r.RecoverBy))
	w.u32(r.Groups)
	w.u32(r.Active)
	w.u32(r.Grouped)
	w.u32(r.L)
	w.b = append(w.b, r.ListHash[:]...)
	return w.b, nil
}

// Tick says day Day began: groups whose Deadline < Day are finalized.
type Tick struct{ Day int32 }

// MarshalBinary encodes t.
func (t *Tick) MarshalBinary() ([]byte, error) {
	w := wbuf{}
	w.head(KindTick)
	w.u32(uint32(t.Day))
	return w.b, nil
}

// Status is a group's final state.
type Status byte

const (
	StatusComplete  Status = 1 // every member submitted; Sum = Σ V_i
	StatusRecovered Status = 2 // some dropped; Sum = Σ_{i∈S} V_i after recovery
	StatusLost      Status = 3 // nothing recoverable; no Sum
)

func (s Status) String() string {
	switch s {
	case StatusComplete:
		return "complete"
	case StatusRecovered:
		return "recovered"
	case StatusLost:
		return "lost"
	}
	return fmt.Sprintf("status(%d)", byte(s))
}

// Outcome is the aggregator's result for one group: the roster, how many
// members' vectors the sum covers (Decrypted), Sum (nil when lost), and
// the holders whose revealed shares failed their commitments (Bad,
// ascending).
type Outcome struct {
	Roster    Roster
	Status    Status
	Decrypted uint16
	Sum       []uint64
	Bad       []uint16
}

// MarshalBinary encodes o.
func (o *Outcome) MarshalBinary() ([]byte, error) {
	rb, _ := o.Roster.MarshalBinary()
	w := wbuf{b: make([]byte, 0, len(rb)+16+8*len(o.Sum))}
	w.head(KindOutcome)
	w.b = append(w.b, rb[2:]...)
	w.u8(byte(o.Status))
	w.u16(o.Decrypted)
	w.vector(o.Sum)
	w.u16(uint16(len(o.Bad)))
	for _, h := range o.Bad {
		w.u16(h)
	}
	return w.b, nil
}

// Message is one parsed message: exactly one field is set.
type Message struct {
	Submission *Submission
	Answer     *Answer
	Roster     *Roster
	Tick       *Tick
	Outcome    *Outcome
	Commit     *Commitments
}

func (r *rbuf) roster() *Roster {
	ro := &Roster{Instance: r.instance(), N: r.u16("n"), T: r.u16("t"), Deadline: int32(r.u32("deadline")),
		RecoverBy: int32(r.u32("recover by")), Groups: r.u32("groups"), Active: r.u32("active"), Grouped: r.u32("grouped"), L: r.u32("L")}
	copy(ro.ListHash[:], r.take(32, "list hash"))
	if r.err == nil && (ro.N < MinGroup || ro.RecoverBy < ro.Deadline || int(ro.T) != Threshold(int(ro.N)) || ro.L == 0 || ro.L > MaxL) {
		r.err = malformed("roster n=%d t=%d L=%d", ro.N, ro.T, ro.L)
	}
	return ro
}

// Parse decodes any message of this package. Errors wrap ErrMalformed.
func Parse(b []byte) (Message, error) {
	r := rbuf{b: b}
	if v := r.u8("version"); r.err == nil && v != Version {
		return Message{}, malformed("version %d, want %d", v, Version)
	}
	k := Kind(r.u8("kind"))
	var m Message
	switch k {
	case KindSubmission:
		s := &Submission{Instance: r.instance(), Member: r.u16("member")}
		s.Y = r.vector()
		m.Submission = s
	case KindAnswer:
		a := &Answer{Instance: r.instance(), Member: r.u16("member")}
		ns := r.u32("reveal count")
		if r.err == nil && int(ns)*47 > len(r.b) {
			return Message{}, malformed("%d reveals in %d bytes", ns, len(r.b))
		}
		for i := 0; i < int(ns) && r.err == nil; i++ {
			rv := Reveal{From: r.u16("from"), J: r.u16("j")}
			rv.Share = r.share()
			copy(rv.Nonce[:], r.take(NonceSize, "nonce"))
			rv.Index = r.u16("index")
			np := int(r.u8("proof length"))
			if np > maxProof && r.err == nil {
				r.err = malformed("proof of %d hashes", np)
			}
			for k := 0; k < np && r.err == nil; k++ {
				var h [32]byte
				copy(h[:], r.take(32, "proof hash"))
				rv.Proof = append(rv.Proof, h)
			}
			a.Reveals = append(a.Reveals, rv)
		}
		m.Answer = a
	case KindCommit:
		c := &Commitments{Instance: r.instance(), Member: r.u16("member")}
		n := int(r.u16("root count"))
		if r.err == nil && (n < MinGroup || int(c.Member) >= n || n*32 > len(r.b)) {
			return Message{}, malformed("commitments of member %d with %d roots in %d bytes", c.Member, n, len(r.b))
		}
		for k := 0; k < n && r.err == nil; k++ {
			var h [32]byte
			copy(h[:], r.take(32, "root"))
			c.Roots = append(c.Roots, h)
		}
		m.Commit = c
	case KindRoster:
		m.Roster = r.roster()
	case KindTick:
		m.Tick = &Tick{Day: int32(r.u32("day"))}
	case KindOutcome:
		o := &Outcome{Roster: *r.roster(), Status: Status(r.u8("status")), Decrypted: r.u16("decrypted")}
		o.Sum = r.vector()
		nb := int(r.u16("bad count"))
		if r.err == nil && 2*nb > len(r.b) {
			r.err = malformed("%d bad holders in %d bytes", nb, len(r.b))
		}
		for k := 0; k < nb && r.err == nil; k++ {
			o.Bad = append(o.Bad, r.u16("bad holder"))
		}
		if r.err == nil {
			switch {
			case o.Status != StatusComplete && o.Status != StatusRecovered && o.Status != StatusLost:
				r.err = malformed("status %d", o.Status)
			case o.Status != StatusLost && len(o.Sum) != int(o.Roster.L):
				r.err = malformed("sum of %d entries for L=%d", len(o.Sum), o.Roster.L)
			case o.Decrypted > o.Roster.N:
				r.err = malformed("%d decrypted of %d", o.Decrypted, o.Roster.N)
			}
		}
		m.Outcome = o
	default:
		if r.err == nil {
			return Message{}, malformed("unknown kind %d", k)
		}
	}
	if err := r.end(); err != nil {
		return Message{}, err
	}
	return m, nil
}
