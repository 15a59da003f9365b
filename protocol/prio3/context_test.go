package prio3

import (
	"errors"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/protocol/onion"
)

// TestContextBindsL1: the L1 bound S is in the VDAF context, so a report
// a client sharded under one S prepares only at aggregators of the same S:
// under another S (a larger one announced to clients, or none) the
// helper's proof check refuses it.
func TestContextBindsL1(t *testing.T) {
	hk, err := onion.GenerateKeyPair(2)
	if err != nil {
		t.Fatal(err)
	}
	var vk [VerifyKeySize]byte
	copy(vk[:], "a verify key of thirty-two bytes")
	day := DayOf(time.Date(2006, 3, 2, 0, 0, 0, 0, time.UTC))
	counts := []uint64{3, 0, 7, 1, 0, 2, 0, 0}
	base := Config{Kind: KindSumVec, Length: 8, Bits: 4, L1: 20}
	prep := func(client, aggs Config) error {
		vc, err := New("c", client)
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := vc.ShardReport("c", day, counts, hk.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		va, err := New("c", aggs)
		if err != nil {
			t.Fatal(err)
		}
		lp, err := va.PrepInit(vk, r.ID, 0, r.PublicShare, r.LeaderShare)
		if err != nil {
			return err
		}
		share, err := OpenHelperShare(hk, "c", day, r.ID, r.PublicShare, r.SealedHelper)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = va.PrepHelper(vk, r.ID, r.PublicShare, share, lp.Share)
		return err
	}
	if err := prep(base, base); err != nil {
		t.Fatalf("the same S: %v", err)
	}
	for _, l1 := range []uint64{40, 0} {
		other := base
		other.L1 = l1
		err := prep(other, base)
		if !errors.Is(err, ErrProof) && !errors.Is(err, ErrJointRand) {
			t.Errorf("client S = %d, aggregators S = 20: %v, want a proof or joint-randomness refusal", l1, err)
		}
	}
	if string(Context("c", Config{Kind: KindSumVec, Length: 8, Bits: 4})) != "crowdlog prio3 c" {
		t.Error("without an L1 bound the context must stay the campaign's alone")
	}
}
