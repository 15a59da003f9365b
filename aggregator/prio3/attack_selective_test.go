package prio3

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// turboSHAKE128 is TurboSHAKE128 (RFC 9861 §2.2: Keccak-p[1600, 12
// rounds], rate 168 bytes, domain byte d) of msg, n bytes out. The
// malicious leader needs it to recompute its joint-randomness part
// (VDAF-14 §6.2 XofTurboShake128) over a tampered measurement share;
// checked below against the client's own part.
func turboSHAKE128(msg []byte, d byte, n int) []byte {
	const rate = 168
	var st [25]uint64
	buf := append(append([]byte(nil), msg...), d)
	for len(buf)%rate != 0 {
		buf = append(buf, 0)
	}
	buf[len(buf)-1] ^= 0x80
	for off := 0; off < len(buf); off += rate {
		for i := 0; i < rate/8; i++ {
			st[i] ^= binary.LittleEndian.Uint64(buf[off+8*i:])
		}
		keccakP12(&st)
	}
	var out []byte
	for {
		for i := 0; i < rate/8; i++ {
			out = binary.LittleEndian.AppendUint64(out, st[i])
		}
		if len(out) >= n {
			return out[:n]
		}
		keccakP12(&st)
	}
}

var keccakRC = [24]uint64{0x0000000000000001, 0x0000000000008082, 0x800000000000808A, 0x8000000080008000,
	0x000000000000808B, 0x0000000080000001, 0x8000000080008081, 0x8000000000008009, 0x000000000000008A,
	0x0000000000000088, 0x0000000080008009, 0x000000008000000A, 0x000000008000808B, 0x800000000000008B,
	0x8000000000008089, 0x8000000000008003, 0x8000000000008002, 0x8000000000000080, 0x000000000000800A,
	0x800000008000000A, 0x8000000080008081, 0x8000000000008080, 0x0000000080000001, 0x8000000080008008}
var keccakRot = [24]int{1, 3, 6, 10, 15, 21, 28, 36, 45, 55, 2, 14, 27, 41, 56, 8, 25, 43, 62, 18, 39, 61, 20, 44}
var keccakPi = [24]int{10, 7, 11, 17, 18, 3, 5, 16, 8, 21, 24, 4, 15, 23, 19, 13, 12, 2, 20, 14, 22, 9, 6, 1}

// keccakP12 is Keccak-p[1600, 12]: the last 12 rounds of Keccak-f[1600].
func keccakP12(st *[25]uint64) {
	for r := 12; r < 24; r++ {
		var bc [5]uint64
		for i := range 5 {
			bc[i] = st[i] ^ st[i+5] ^ st[i+10] ^ st[i+15] ^ st[i+20]
		}
		for i := range 5 {
			t := bc[(i+4)%5] ^ bits.RotateLeft64(bc[(i+1)%5], 1)
			for j := 0; j < 25; j += 5 {
				st[j+i] ^= t
			}
		}
		t := st[1]
		for i := range 24 {
			j := keccakPi[i]
			bc[0] = st[j]
			st[j] = bits.RotateLeft64(t, keccakRot[i])
			t = bc[0]
		}
		for j := 0; j < 25; j += 5 {
			for i := range 5 {
				bc[i] = st[j+i]
			}
			for i := range 5 {
				st[j+i] ^= ^bc[(i+1)%5] & bc[(i+2)%5]
			}
		}
		st[0] ^= keccakRC[r]
	}
}

// jointRandPart is VDAF-14 Prio3 joint_rand_part for aggregator aggID of
// the SumVec (algorithm id 3) of this package's campaign: XofTurboShake128
// with dst = version 12 ‖ class 0 ‖ id ‖ usage 7 ‖ context, seed blind,
// binder aggID ‖ nonce ‖ encoded measurement share (context p3.Context).
func jointRandPart(m p3.Config, blind []byte, aggID byte, nonce p3.ReportID, measShare []byte) []byte {
	ctx := p3.Context(campaign, m)
	var b []byte
	b = binary.LittleEndian.AppendUint16(b, uint16(8+len(ctx)))
	b = append(b, 12, 0)
	b = binary.BigEndian.AppendUint32(b, 3)
	b = binary.BigEndian.AppendUint16(b, 7)
	b = append(b, ctx...)
	b = append(b, 32) // SEED_SIZE
	b = append(b, blind...)
	b = append(b, aggID)
	b = append(b, nonce[:]...)
	b = append(b, measShare...)
	return turboSHAKE128(b, 1, 32)
}

// addOne adds 1 (in Field128) to the 16-byte element at index i of an
// encoded vector, in place.
func addOne(t testing.TB, enc []byte, i int) {
	t.Helper()
	e, err := p3.DecodeVec(enc[16*i:16*i+16], 1)
	if err != nil {
		t.Fatal(err)
	}
	one := p3.FieldOf(1)
	e[0].Add(&e[0], &one)
	copy(enc[16*i:], p3.EncodeVec(e))
}

// TestAttackPrio3SelectiveFailure: a malicious leader tries to learn one
// bit of each honest client's vector — bit 0 of keyword 0's clipped count
// — from the helper's accept or refuse (selective failure,
// draft-irtf-cfrg-vdaf §9; the helper answers per report with its reason).
// It adds 1 to its share of that bit, so the tampered vector is still in
// range exactly when the bit is 0, and sends the tampered report to the
// real helper state machine before forwarding the untampered one, in
// three ways: (prep) its honest prep share with one verifier element
// shifted; (share) its prep share computed over the tampered measurement
// share, with the joint-randomness part recomputed from it (TurboSHAKE128
// here) and the client's public share kept (the token's binding and the
// HPKE AAD of the helper share hold); (public) the same with the public
// share patched to the recomputed part, so that both aggregators derive
// one joint randomness. Bits learned = N × the empirical mutual
// information between the helper's answer and the true bit.
//
// What defeats it: Prio3's FLP (BBCGI19 §4, VDAF-14 §7.3) blinds every
// wire polynomial with a random seed of the client's, so the verifier of a
// shifted share fails for any measurement (the gadget test differs by a
// term in the uniformly random wire value), and the helper's input share
// is sealed with the public share in its AAD and the helper token binds
// it. The control is the oracle such a refusal would be without the
// zero-knowledge proof: a helper that refused exactly the tampered vectors
// out of range (computed from the client's true vector).
func TestAttackPrio3SelectiveFailure(t *testing.T) {
	const length, nBits, clients = 4, 4, 200
	m := p3.Config{Kind: p3.KindSumVec, Length: length, Bits: nBits}
	day := p3.DayOf(time.Date(2006, 3, 2, 0, 0, 0, 0, time.UTC))
	now := day.Start().Add(12 * time.Hour)
	w := newWorld(t, m, 10)
	seed := newSeed(t)
	w.cfgH.TokenSeed = seed
	h, err := NewHelper(w.cfgH)
	if err != nil {
		t.Fatal(err)
	}
	w.h = h
	rng := mrand.New(mrand.NewPCG(46, 9))
	truth := make([]uint64, clients) // bit 0 of keyword 0, from the client's vector
	want := make([]int64, length)
	var uploads [][]byte
	for i := range clients {
		counts := make([]uint64, length)
		for j := range counts {
			counts[j] = uint64(rng.IntN(16))
			want[j] += int64(counts[j])
		}
		truth[i] = counts[0] & 1
		_, up := w.shardWithToken(t, day, counts, seed)
		uploads = append(uploads, up)
	}
	vk := w.cfgL.VerifyKeys[w.cfgL.KeyEpoch]
	measLen := length * nBits
	type tally struct {
		n       [2][2]int // [bit][accepted]
		reasons map[string]int
	}
	ways := []string{"prep", "share", "public", "unbound"}
	res := map[string]*tally{}
	checked := 0
	for _, way := range ways {
		res[way] = &tally{reasons: map[string]int{}}
	}
	sanity, err := NewHelper(w.cfgH)
	if err != nil {
		t.Fatal(err)
	}
	for i, up := range uploads {
		r, err := p3.OpenReport([]*onion.KeyPair{w.lk}, up)
		if err != nil {
			t.Fatal(err)
		}
		share := append([]byte(nil), r.LeaderShare...)
		blind := share[len(share)-32:]
		if got := jointRandPart(m, blind, 0, r.ID, share[:16*measLen]); string(got) != string(r.PublicShare[:32]) {
			t.Fatalf("recomputed joint-randomness part %x, the client's %x", got, r.PublicShare[:32])
		}
		checked++
		if i < 5 {
			// the tampering machinery itself: untampered, the unbound
			// path prepares at a fresh helper
			plain, err := p3.OpenHelperShare(w.hk, campaign, day, r.ID, r.PublicShare, r.SealedHelper)
			if err != nil {
				t.Fatal(err)
			}
			r2 := *r
			if err := r2.SealHelper(w.hk.PublicKey(), plain); err != nil {
				t.Fatal(err)
			}
			prep, err := w.v.PrepInit(vk, r.ID, 0, r.PublicShare, share)
			if err != nil {
				t.Fatal(err)
			}
			it := p3.PrepItem{ID: r.ID, PublicShare: r.PublicShare, SealedHelper: r2.SealedHelper, LeaderPrep: prep.Share, HelperToken: mintHelperToken(t, seed, &r2)}
			if _, reason := sanity.prepare(now, day, vk, true, false, &it); reason != "" {
				t.Fatalf("untampered report refused %q: the attack's machinery is broken", reason)
			}
		}
		addOne(t, share, 0) // the leader's share of keyword 0's bit 0
		patched := append([]byte(nil), r.PublicShare...)
		copy(patched, jointRandPart(m, blind, 0, r.ID, share[:16*measLen]))
		for _, way := range ways {
			it := p3.PrepItem{ID: r.ID, PublicShare: r.PublicShare, SealedHelper: r.SealedHelper, HelperToken: r.HelperToken}
			switch way {
			case "prep":
				prep, err := w.v.PrepInit(vk, r.ID, 0, r.PublicShare, r.LeaderShare)
				if err != nil {
					t.Fatal(err)
				}
				it.LeaderPrep = append([]byte(nil), prep.Share...)
				addOne(t, it.LeaderPrep, 0)
			case "share", "public":
				prep, err := w.v.PrepInit(vk, r.ID, 0, patched, share)
				if err != nil {
					t.Fatal(err)
				}
				it.LeaderPrep = prep.Share
				if way == "public" {
					it.PublicShare = patched
				}
			case "unbound":
				// without the bindings: the helper share sealed and the
				// token minted for the patched public share (as if the
				// client had sent it), so only the proof check remains
				plain, err := p3.OpenHelperShare(w.hk, campaign, day, r.ID, r.PublicShare, r.SealedHelper)
				if err != nil {
					t.Fatal(err)
				}
				r2 := *r
				r2.PublicShare = patched
				if err := r2.SealHelper(w.hk.PublicKey(), plain); err != nil {
					t.Fatal(err)
				}
				prep, err := w.v.PrepInit(vk, r.ID, 0, patched, share)
				if err != nil {
					t.Fatal(err)
				}
				it = p3.PrepItem{ID: r.ID, PublicShare: patched, SealedHelper: r2.SealedHelper, LeaderPrep: prep.Share, HelperToken: mintHelperToken(t, seed, &r2)}
			}
			q := p3.AggregateReq{Campaign: campaign, Day: day, KeyEpoch: w.cfgL.KeyEpoch, Items: []p3.PrepItem{it}}
			msg, err := q.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			outs, err := w.h.Apply(Event{Now: now, Kind: EventAggregateReq, Msg: msg})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := p3.ParseAggregateResp(outs[0].Msg)
			if err != nil {
				t.Fatal(err)
			}
			acc := 0
			if resp.Results[0].Reason == "" {
				acc = 1
			} else {
				res[way].reasons[resp.Results[0].Reason]++
			}
			res[way].n[truth[i]][acc]++
		}
	}
	// then the leader forwards the untampered uploads: the refusals spent
	// nothing, the batch counts every client and sums their true vectors
	w.upload(t, now, uploads)
	out, err := w.collect(day)
	if err != nil {
		t.Fatal(err)
	}
	exact := 0
	for j := range want {
		if out.Totals[j] == want[j] {
			exact++
		}
	}
	// control: the refusal as a validity oracle of the tampered vector
	// (bit + 1 ∈ {0, 1} exactly when the bit is 0)
	control := &tally{}
	for _, b := range truth {
		acc := 0
		if b+1 <= 1 {
			acc = 1
		}
		control.n[b][acc]++
	}
	learned := func(x *tally) (float64, float64) {
		return clients * mutualInfo(x.n), accuracy(x.n)
	}
	var parts []string
	worst := 0.0
	for _, way := range ways {
		bitsL, acc := learned(res[way])
		worst = math.Max(worst, bitsL)
		acc0 := res[way].n[0][1] + res[way].n[1][1]
		parts = append(parts, fmt.Sprintf("%s: %d accepted, refused %s, %.2f bits of %d, guess accuracy %.3f", way, acc0, reasons(res[way].reasons), bitsL, clients, acc))
	}
	cBits, cAcc := learned(control)
	fmt.Printf("ATTACK prio3-selective-failure: leader shifts its share of one bit of each of %d honest reports (4 ways) and reads the helper's per-report answer: %s; then the untampered reports: count %d, %d of %d totals exact (control, a refusal that tells whether the tampered vector is in range: %.1f bits of %d, accuracy %.3f)\n",
		clients, strings.Join(parts, "; "), out.Count, exact, length, cBits, clients, cAcc)
	if checked != clients {
		t.Fatal("the joint-randomness part was not checked for every report")
	}
	if worst > 1 || out.Count != clients || exact != length {
		t.Fatalf("selective failure: %.2f bits learned (max 1 allowed), count %d, %d exact", worst, out.Count, exact)
	}
	if cAcc != 1 {
		t.Fatalf("control: the validity oracle should give every bit (%.1f bits, accuracy %.3f)", cBits, cAcc)
	}
}

// mutualInfo is the empirical mutual information, in bits, between the two
// indices of n (n[x][y] counts).
func mutualInfo(n [2][2]int) float64 {
	tot := float64(n[0][0] + n[0][1] + n[1][0] + n[1][1])
	mi := 0.0
	for x := range 2 {
		for y := range 2 {
			if n[x][y] == 0 {
				continue
			}
			pxy := float64(n[x][y]) / tot
			px := float64(n[x][0]+n[x][1]) / tot
			py := float64(n[0][y]+n[1][y]) / tot
			mi += pxy * math.Log2(pxy/(px*py))
		}
	}
	return mi
}

// accuracy is the best guess of x from y's share of right guesses.
func accuracy(n [2][2]int) float64 {
	tot := float64(n[0][0] + n[0][1] + n[1][0] + n[1][1])
	right := 0
	for y := range 2 {
		right += max(n[0][y], n[1][y])
	}
	return float64(right) / tot
}

func reasons(m map[string]int) string {
	var ks []string
	for k, v := range m {
		ks = append(ks, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(ks)
	return "{" + strings.Join(ks, " ") + "}"
}
