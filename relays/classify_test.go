package relays

import (
	"testing"

	"github.com/crowdlog/crowdlog/protocol/onion"
)

// TestClassifyPrio3: a HopKafkaPrio3 layer is kept only by the route's
// last relay with a Prio3 writer; relay a (not the last hop, even with a
// writer) and a relay b without one drop it as wrong_hop.
func TestClassifyPrio3(t *testing.T) {
	k, err := onion.GenerateKeyPair(1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := onion.SealLayer(k.PublicKey(), onion.Hop{Kind: onion.HopKafkaPrio3, Key: []byte("campaign")}, []byte("upload"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		r    *Relay
		want dropReason
	}{
		{"relay b with a Prio3 writer", &Relay{Name: "b", Keys: []*onion.KeyPair{k}, Kafka: nilWriter{}, Prio3: nilWriter{}}, keep},
		{"relay b without a Prio3 writer", &Relay{Name: "b", Keys: []*onion.KeyPair{k}, Kafka: nilWriter{}, Vectors: nilWriter{}}, dropWrongHop},
		{"relay a with a Prio3 writer", &Relay{Name: "a", Keys: []*onion.KeyPair{k}, Prio3: nilWriter{}}, dropWrongHop},
	} {
		it := &item{m: fakeMsg{data: l}}
		c.r.peel(it)
		if it.reason != c.want {
			t.Errorf("%s: reason %q, want %q", c.name, reasonNames[it.reason], reasonNames[c.want])
		}
		if c.want == keep && (string(it.hop.Key) != "campaign" || string(it.inner) != "upload") {
			t.Errorf("%s: kept key %q inner %q, want the hop's", c.name, it.hop.Key, it.inner)
		}
	}
}
