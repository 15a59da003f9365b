package prio3

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

func keys(t testing.TB) (leader, helper, collector *onion.KeyPair) {
	t.Helper()
	var err error
	if leader, err = onion.GenerateKeyPair(1); err != nil {
		t.Fatal(err)
	}
	if helper, err = onion.GenerateKeyPair(2); err != nil {
		t.Fatal(err)
	}
	if collector, err = onion.GenerateKeyPair(3); err != nil {
		t.Fatal(err)
	}
	return
}

// prepBoth runs the whole preparation of one upload in the test, returning
// the two output shares.
func prepBoth(t testing.TB, v *VDAF, l, h *onion.KeyPair, vk [32]byte, upload []byte) ([]int64, error) {
	r, err := OpenReport([]*onion.KeyPair{l}, upload)
	if err != nil {
		return nil, err
	}
	hs, err := OpenHelperShare(h, r.Campaign, r.Day, r.ID, r.PublicShare, r.SealedHelper)
	if err != nil {
		return nil, err
	}
	lp, err := v.PrepInit(vk, r.ID, 0, r.PublicShare, r.LeaderShare)
	if err != nil {
		return nil, err
	}
	hp, err := v.PrepInit(vk, r.ID, 1, r.PublicShare, hs)
	if err != nil {
		return nil, err
	}
	msg, err := v.PrepSharesToPrep(lp.Share, hp.Share)
	if err != nil {
		return nil, err
	}
	lo, err := v.PrepNext(lp.State, msg)
	if err != nil {
		return nil, err
	}
	// the helper's one-call path gives the same message
	msg2, ho, err := v.PrepHelper(vk, r.ID, r.PublicShare, hs, lp.Share)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(msg, msg2) {
		return nil, fmt.Errorf("PrepHelper's message differs")
	}
	a := v.NewAggregate()
	v.Update(&a, lo)
	v.Update(&a, ho)
	sum, err := DecodeVec(EncodeAggregate(&a), v.Config.Length)
	if err != nil {
		return nil, err
	}
	return Signed(sum)
}

// TestShardPrepRoundTrip: a client's clipped counts (SumVec) and presence
// come back exactly from the two output shares; a report opened at the
// wrong key, or whose helper share is bound to another day, fails.
func TestShardPrepRoundTrip(t *testing.T) {
	l, h, _ := keys(t)
	var vk [32]byte
	vk[0] = 7
	for _, c := range []Config{{Kind: KindSumVec, Length: 50, Bits: 4}, {Kind: KindSumVec, Length: 50, Bits: 1}, {Kind: KindPresence, Length: 50, MaxWeight: 5}} {
		v, err := New("kw-test", c)
		if err != nil {
			t.Fatal(err)
		}
		counts := make([]uint64, 50)
		counts[3], counts[7], counts[49] = 2, 40, 1
		up, _, clipped, err := v.Shard("kw-test", 20000, counts, l.PublicKey(), h.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		wantClipped := 1
		if c.Kind == KindPresence || c.Bits == 1 {
			wantClipped = 2
		}
		if clipped != wantClipped {
			t.Fatalf("%+v: clipped %d, want %d", c, clipped, wantClipped)
		}
		got, err := prepBoth(t, v, l, h, vk, up)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range counts {
			if want := int64(min(x, c.Max())); got[i] != want {
				t.Fatalf("%+v: keyword %d: %d, want %d", c, i, got[i], want)
			}
		}
		if _, err := OpenReport([]*onion.KeyPair{h}, up); !errors.Is(err, onion.ErrUnknownKey) {
			t.Fatalf("opened at the helper: %v", err)
		}
		r, _ := OpenReport([]*onion.KeyPair{l}, up)
		if _, err := OpenHelperShare(h, r.Campaign, r.Day+1, r.ID, r.PublicShare, r.SealedHelper); !errors.Is(err, protocol.ErrMalformed) {
			t.Fatalf("helper share opened for another day: %v", err)
		}
	}
}

// TestPresenceWeight: a presence report over the max weight is refused by
// the client.
func TestPresenceWeight(t *testing.T) {
	l, h, _ := keys(t)
	v, _ := New("kw", Config{Kind: KindPresence, Length: 10, MaxWeight: 2})
	if _, _, _, err := v.Shard("kw", 1, []uint64{1, 1, 1, 0, 0, 0, 0, 0, 0, 0}, l.PublicKey(), h.PublicKey()); !errors.Is(err, ErrTooManyKeywords) {
		t.Fatalf("err %v", err)
	}
}

// TestSigned: negative totals (noise) decode; circl's Unshard refuses them.
func TestSigned(t *testing.T) {
	v := make([]int64, 0)
	for _, x := range []int64{0, 1, -1, 1 << 40, -(1 << 40), 15} {
		v = append(v, x)
	}
	f := make([]byte, 0)
	for _, x := range v {
		e := FieldOf(x)
		b, _ := e.MarshalBinary()
		f = append(f, b...)
	}
	vec, err := DecodeVec(f, len(v))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Signed(vec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range v {
		if got[i] != v[i] {
			t.Fatalf("%d: %d, want %d", i, got[i], v[i])
		}
	}
}

// TestMessagesRoundTrip: every leader–helper message encodes and parses back
// to itself; a truncated one is malformed.
func TestMessagesRoundTrip(t *testing.T) {
	var id ReportID
	id[0] = 9
	q := &AggregateReq{Campaign: "c", Day: 3, KeyEpoch: 2, Items: []PrepItem{{ID: id, PublicShare: []byte{1}, SealedHelper: []byte{2, 3}, LeaderPrep: []byte{4}}}}
	p := &AggregateResp{Campaign: "c", Day: 3, Results: []PrepResult{{ID: id, Message: []byte{5}}, {ID: id, Reason: "proof"}}}
	c := &CollectReq{Campaign: "c", Day: 3, Count: 12, Checksum: Checksum{1}}
	a := &AggShare{Role: 1, Campaign: "c", Day: 3, Count: 12, Checksum: Checksum{1}, Epsilon: 0.5, Sealed: []byte{1, 2}}
	r := &Report{Campaign: "c", Day: 3, ID: id, PublicShare: []byte{1}, LeaderShare: []byte{2}, SealedHelper: []byte{3}}
	type codec struct {
		m     interface{ MarshalBinary() ([]byte, error) }
		parse func([]byte) (any, error)
	}
	for _, cd := range []codec{
		{q, func(b []byte) (any, error) { return ParseAggregateReq(b) }},
		{p, func(b []byte) (any, error) { return ParseAggregateResp(b) }},
		{c, func(b []byte) (any, error) { return ParseCollectReq(b) }},
		{a, func(b []byte) (any, error) { return ParseAggShare(b) }},
		{r, func(b []byte) (any, error) { return ParseReport(b) }},
	} {
		b, err := cd.m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		back, err := cd.parse(b)
		if err != nil {
			t.Fatalf("%T: %v", cd.m, err)
		}
		b2, _ := back.(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
		if !bytes.Equal(b, b2) {
			t.Fatalf("%T: round trip differs", cd.m)
		}
		if _, err := cd.parse(b[:len(b)-1]); !errors.Is(err, protocol.ErrMalformed) {
			t.Fatalf("%T truncated: %v", cd.m, err)
		}
	}
}

func fuzzParse(f *testing.F, seed interface{ MarshalBinary() ([]byte, error) }, parse func([]byte) (interface{ MarshalBinary() ([]byte, error) }, error)) {
	b, _ := seed.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parse(b)
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		again, err := m.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}

func FuzzParseReport(f *testing.F) {
	// a seed with a leader token too
	lt, _ := (&Report{Campaign: "c", Day: 1, PublicShare: []byte{1}, LeaderShare: []byte{2}, SealedHelper: []byte{3}, HelperToken: []byte{4, 5}, LeaderToken: []byte{6}}).MarshalBinary()
	f.Add(lt)
	fuzzParse(f, &Report{Campaign: "c", Day: 1, PublicShare: []byte{1}, LeaderShare: []byte{2}, SealedHelper: []byte{3}, HelperToken: []byte{4, 5}},
		func(b []byte) (interface{ MarshalBinary() ([]byte, error) }, error) { return ParseReport(b) })
}

func FuzzParseAggregateReq(f *testing.F) {
	fuzzParse(f, &AggregateReq{Campaign: "c", Items: []PrepItem{{PublicShare: []byte{1}}, {SealedHelper: []byte{2}, HelperToken: []byte{3}}}},
		func(b []byte) (interface{ MarshalBinary() ([]byte, error) }, error) { return ParseAggregateReq(b) })
}

func FuzzParseAggregateResp(f *testing.F) {
	fuzzParse(f, &AggregateResp{Campaign: "c", Results: []PrepResult{{Reason: "proof"}, {Message: []byte{1}}}},
		func(b []byte) (interface{ MarshalBinary() ([]byte, error) }, error) { return ParseAggregateResp(b) })
}

func FuzzParseCollectReq(f *testing.F) {
	fuzzParse(f, &CollectReq{Campaign: "c", Count: 3},
		func(b []byte) (interface{ MarshalBinary() ([]byte, error) }, error) { return ParseCollectReq(b) })
}

func FuzzParseAggShare(f *testing.F) {
	fuzzParse(f, &AggShare{Campaign: "c", Count: 3, Reason: "small_batch"},
		func(b []byte) (interface{ MarshalBinary() ([]byte, error) }, error) { return ParseAggShare(b) })
}

// FuzzOpenReport: arbitrary uploads never panic and fail with
// ErrMalformed or ErrUnknownKey.
func FuzzOpenReport(f *testing.F) {
	l, h, _ := keys(f)
	v, _ := New("c", Config{Kind: KindSumVec, Length: 4, Bits: 2})
	up, _, _, _ := v.Shard("c", 1, []uint64{1, 2, 3, 0}, l.PublicKey(), h.PublicKey())
	f.Add(up)
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := OpenReport([]*onion.KeyPair{l}, b); err != nil && !errors.Is(err, protocol.ErrMalformed) && !errors.Is(err, onion.ErrUnknownKey) {
			t.Fatal(err)
		}
	})
}

// Example: a client shards its day's counts for a 5-keyword campaign
// clipped to 3 (b = 2); the report is sealed to the leader, with the
// helper's share sealed to the helper inside.
func Example() {
	leader, _ := onion.GenerateKeyPair(1)
	helper, _ := onion.GenerateKeyPair(2)
	v, _ := New("flu", Config{Kind: KindSumVec, Length: 5, Bits: 2})
	upload, _, clipped, err := v.Shard("flu", DayOf(Day(20000).Start()), []uint64{0, 1, 7, 0, 2}, leader.PublicKey(), helper.PublicKey())
	if err != nil {
		panic(err)
	}
	r, _ := OpenReport([]*onion.KeyPair{leader}, upload)
	fmt.Println(r.Campaign, r.Day, clipped, len(r.PublicShare))
	// Output: flu 2024-10-04 1 64
}

func FuzzParseSignedReq(f *testing.F) {
	fuzzParse(f, &SignedReq{Issued: time.UnixMilli(1_700_000_000_000), Body: []byte{WireVersion, msgCollectReq}},
		func(b []byte) (interface{ MarshalBinary() ([]byte, error) }, error) { return ParseSignedReq(b) })
}

// TestSignedReq: a signed request verifies under the leader's key only,
// and any change of its id, time or body breaks the signature.
func TestSignedReq(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	other, _, _ := ed25519.GenerateKey(nil)
	body, _ := (&CollectReq{Campaign: "c", Day: 7, Count: 3}).MarshalBinary()
	now := time.UnixMilli(1_700_000_000_123)
	b, err := SignReq(key, body, now)
	if err != nil {
		t.Fatal(err)
	}
	if !IsSignedReq(b) {
		t.Fatal("IsSignedReq false")
	}
	q, err := ParseSignedReq(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Verify(pub); err != nil {
		t.Fatal(err)
	}
	if !q.Issued.Equal(now) || !bytes.Equal(q.Body, body) || q.Kind() != msgCollectReq {
		t.Fatalf("decoded %+v", q)
	}
	if err := q.Verify(other); !errors.Is(err, ErrBadSignature) {
		t.Errorf("foreign key: %v", err)
	}
	for i := 2; i < len(b)-ed25519.SignatureSize; i++ {
		c := bytes.Clone(b)
		c[i] ^= 1
		if q, err := ParseSignedReq(c); err == nil && q.Verify(pub) == nil {
			t.Fatalf("byte %d changed, signature still verifies", i)
		}
	}
}

// TestClipL1: a SumVec client over its L1 bound keeps its most searched
// keywords (ties: the earlier one), the first that does not fit whole
// keeps the rest of the bound; Sensitivity is L1, or L·Max() without it.
func TestClipL1(t *testing.T) {
	c := Config{Kind: KindSumVec, Length: 6, Bits: 2, L1: 7}
	got, clipped := c.Clip([]uint64{1, 5, 2, 2, 0, 1})
	// clipped to 3: [1 3 2 2 0 1], sum 9 > 7; order by raw count: #1 (5), #2, #3 (2, tie → earlier first), #0, #5
	want := []uint64{0, 3, 2, 2, 0, 0}
	if !slices.Equal(got, want) || clipped != 3 {
		t.Fatalf("Clip = %v (%d clipped), want %v (3)", got, clipped, want)
	}
	c.L1 = 6
	if got, _ := c.Clip([]uint64{1, 5, 2, 2, 0, 1}); !slices.Equal(got, []uint64{0, 3, 2, 1, 0, 0}) {
		t.Fatalf("L1 6: %v", got)
	}
	if c.Sensitivity() != 6 {
		t.Fatalf("sensitivity %d", c.Sensitivity())
	}
	c.L1 = 0
	if got, _ := c.Clip([]uint64{1, 5, 2, 2, 0, 1}); !slices.Equal(got, []uint64{1, 3, 2, 2, 0, 1}) || c.Sensitivity() != 18 {
		t.Fatalf("no L1: %v, sensitivity %d", got, c.Sensitivity())
	}
	if p := (Config{Kind: KindPresence, Length: 6, MaxWeight: 2, L1: 1}); p.Sensitivity() != 2 {
		t.Fatalf("presence sensitivity %d", p.Sensitivity())
	}
}
