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
// step of relay a and of relay b: it must never panic (a recovered panic
// would show as malformed, so Peel is also called bare) and must keep only
// layers the relay's place on the route allows: relay a forwards only to
// relay b's subject, relay b only to Kafka.
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
	f.Add(seal(onion.Hop{Kind: onion.HopRelay, Subject: protocol.RelaySubject("a")}, []byte("inner")))
	f.Add(seal(onion.Hop{Kind: onion.HopKafka, Key: []byte{1, 2}}, []byte("inner")))
	f.Add(seal(onion.Hop{Kind: onion.HopKafkaVectors, Key: []byte("c/1/2")}, []byte("inner")))
	f.Add(seal(onion.Hop{Kind: onion.HopKafkaPrio3, Key: []byte("campaign")}, []byte("upload")))
	f.Add(seal(onion.Hop{Kind: onion.HopDeliver}, []byte("report")))
	f.Add(seal(onion.Hop{Kind: onion.HopRelay, Subject: "crowdlog.relay.>"}, nil))
	f.Add([]byte{})
	f.Add([]byte{protocol.Version, 1})
	f.Add(make([]byte, 100))
	ra := &Relay{Name: "a", Keys: []*onion.KeyPair{k}, Kafka: nilWriter{}, Vectors: nilWriter{}, Prio3: nilWriter{}}
	rb := &Relay{Name: "b", Keys: []*onion.KeyPair{k}, Kafka: nilWriter{}, Vectors: nilWriter{}, Prio3: nilWriter{}}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _ = onion.Peel(ra.Keys, data) // must not panic
		it := &item{m: fakeMsg{data: data}}
		ra.peel(it)
		if it.reason == keep && (it.hop.Kind != onion.HopRelay || it.hop.Subject != protocol.RelaySubject("b")) {
			t.Fatalf("relay a kept hop kind %d to %q; only relay b's subject is allowed", it.hop.Kind, it.hop.Subject)
		}
		it = &item{m: fakeMsg{data: data}}
		rb.peel(it)
		if it.reason == keep && it.hop.Kind != onion.HopKafka && it.hop.Kind != onion.HopKafkaVectors && it.hop.Kind != onion.HopKafkaPrio3 {
			t.Fatalf("relay b kept hop kind %d (%q); only Kafka is allowed", it.hop.Kind, it.hop.Subject)
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
