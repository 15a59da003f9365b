package relays

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// fakeMsg is a jetstream.Msg carrying only data (other methods unused).
type fakeMsg struct {
	jetstream.Msg
	data []byte
}

func (f fakeMsg) Data() []byte { return f.data }

// FuzzClassify feeds arbitrary inbox bytes to the relay's peel-and-check
// step: it must never panic (a recovered panic would show as malformed, so
// Peel is also called bare) and must keep only layers a relay may forward.
func FuzzClassify(f *testing.F) {
	k, err := onion.GenerateKeyPair(1)
	if err != nil {
		f.Fatal(err)
	}
	seal := func(h onion.Hop, inner []byte) []byte {
		l, err := onion.SealLayer(k.PublicKey(), h, inner)
		if err != nil {
			f.Fatal(err)
		}
		return l
	}
	f.Add(seal(onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("b")}, []byte("inner")))
	f.Add(seal(onion.Hop{Kind: onion.HopKafka, Key: []byte{1, 2}}, []byte("inner")))
	f.Add(seal(onion.Hop{Kind: onion.HopDeliver}, []byte("report")))
	f.Add(seal(onion.Hop{Kind: onion.HopRelay, Subject: "crowdlog.relay.>"}, nil))
	f.Add([]byte{})
	f.Add([]byte{protocol.Version, 1})
	f.Add(make([]byte, 100))
	r := &Relay{Name: "a", Keys: []*onion.KeyPair{k}, Kafka: nilWriter{}}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _ = onion.Peel(r.Keys, data) // must not panic
		it := &item{m: fakeMsg{data: data}}
		r.peel(it)
		if it.reason != keep {
			return
		}
		switch it.hop.Kind {
		case onion.HopRelay:
			if !strings.HasPrefix(it.hop.Subject, protocol.RelaySubjectPrefix) || it.hop.Subject == protocol.RelaySubject(r.Name) ||
				strings.ContainsAny(it.hop.Subject[len(protocol.RelaySubjectPrefix):], "*>. \t\r\n") {
				t.Fatalf("kept a forward to an invalid subject %q", it.hop.Subject)
			}
		case onion.HopKafka:
		default:
			t.Fatalf("kept hop kind %d", it.hop.Kind)
		}
	})
}

// FuzzValidForward checks the subject rule on arbitrary strings.
func FuzzValidForward(f *testing.F) {
	for _, s := range []string{"crowdlog.relay.b", "crowdlog.relay.a", "crowdlog.relay.>", "crowdlog.relay.b.c", "x", "crowdlog.relay.", "crowdlog.relay.b "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !validForward(s, "a") {
			return
		}
		name := strings.TrimPrefix(s, protocol.RelaySubjectPrefix)
		if name == s || name == "a" || !ValidName(name) || strings.ContainsAny(name, "*>. \t\r\n") {
			t.Fatalf("validForward accepted %q", s)
		}
	})
}

type nilWriter struct{ KafkaWriter }
