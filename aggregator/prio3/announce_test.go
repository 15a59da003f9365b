package prio3

import (
	"crypto/ed25519"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// TestLeaderSettingsStatus: the leader announces its status (ε_c, δ)
// (Config.StatusEpsilon, StatusDelta), signed: the default 0.1 × ε with
// δ 10⁻⁶, and the exact rule (--status-epsilon 0) as (0, 0) whatever
// --status-delta says, so a device can refuse it.
func TestLeaderSettingsStatus(t *testing.T) {
	kp, err := onion.GenerateKeyPair(1)
	if err != nil {
		t.Fatal(err)
	}
	_, sign, _ := ed25519.GenerateKey(nil)
	for _, c := range []struct {
		statusEps, statusDelta, wantEps, wantDelta float64
	}{
		{p3.StatusEpsilonOf(p3.AutoStatusEpsilon, 1), p3.DefaultStatusDelta, 0.1, 1e-6},
		{0, p3.DefaultStatusDelta, 0, 0},
		{50, 1e-3, 50, 1e-3},
	} {
		ls := &LeaderService{Config: Config{Campaign: "c", Measurement: p3.Config{Kind: p3.KindSumVec, Length: 3, Bits: 4, L1: 20},
			MinBatchSize: 100, Epsilon: 1, Keys: []*onion.KeyPair{kp}, StatusEpsilon: c.statusEps, StatusDelta: c.statusDelta}}
		st, err := ls.Settings([32]byte{1})
		if err != nil {
			t.Fatal(err)
		}
		b, err := p3.SignSettings(sign, st)
		if err != nil {
			t.Fatalf("ε_c %v: sign: %v", c.statusEps, err)
		}
		a, err := p3.ParseSignedSettings(b)
		if err != nil || a.Settings.StatusEpsilon != c.wantEps || a.Settings.StatusDelta != c.wantDelta {
			t.Fatalf("ε_c %v, δ %v announced as %+v (%v), want (%v, %v)", c.statusEps, c.statusDelta, a, err, c.wantEps, c.wantDelta)
		}
	}
}
