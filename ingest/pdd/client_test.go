package pdd

import (
	"testing"

	"github.com/crowdlog/crowdlog/protocol/blind"
)

// A client blinds only for a roster that lists its own key at its index,
// with the group's threshold; anything else is refused before any seed is
// derived or anything is sent.
func TestClientChecksRoster(t *testing.T) {
	me, _ := blind.GenerateKey()
	other, _ := blind.GenerateKey()
	third, _ := blind.GenerateKey()
	c := &Client{Key: me, Campaign: "c"}
	members := [][]byte{other.PublicKey().Bytes(), me.PublicKey().Bytes(), third.PublicKey().Bytes()}
	ok := blind.Task{Round: 1, Group: 0, Member: 1, Members: members, T: blind.Threshold(3)}
	seeds, err := c.seeds(ok)
	if err != nil || len(seeds) != 3 {
		t.Fatalf("valid roster refused: %v", err)
	}
	// the seeds agree with the other members' (PDD eq. 3 needs s_ij = s_ji)
	s0, _ := blind.Seeds(other, 0, members, ok.Instance("c"))
	if s0[1] != seeds[0] {
		t.Fatal("pair seed differs between the two members")
	}
	bad := ok
	bad.Member = 0
	if _, err := c.seeds(bad); err == nil {
		t.Fatal("a roster naming another key at our index was accepted")
	}
	bad = ok
	bad.T = 1
	if _, err := c.seeds(bad); err == nil {
		t.Fatal("a threshold below the group's was accepted")
	}
}
