package relays_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/relays"
)

// TestRelayAnnouncesKeys: a running relay answers ingest.FetchRelayKeys with exactly the
// key ids and public keys it was started with (two during a rotation); the
// request is answered by the relay, not stored in the relay stream; a
// relay that is not running gives ingest.ErrNoRelayKeysAnswer; a request naming
// another relay is refused.
func TestRelayAnnouncesKeys(t *testing.T) {
	e := newEnv(t, 0)
	rotated, err := onion.GenerateKeyPair(7)
	if err != nil {
		t.Fatal(err)
	}
	r := e.relayA(t, &relays.Stats{})
	r.Keys = append(r.Keys, rotated)
	run := start(r)
	defer run.stop(t)

	nc := e.connect(t).Conn()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ann *onion.RelayKeysResponse
	for deadline := time.Now().Add(30 * time.Second); ; { // Run subscribes asynchronously
		ann, err = ingest.FetchRelayKeys(ctx, nc, "a")
		if err == nil || !errors.Is(err, ingest.ErrNoRelayKeysAnswer) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if ann.Relay != "a" || !bytes.Equal(ann.IDs(), []byte{e.a.ID, rotated.ID}) {
		t.Fatalf("announcement %s ids %v, want relay a ids [%d %d]", ann.Relay, ann.IDs(), e.a.ID, rotated.ID)
	}
	for _, k := range []*onion.KeyPair{e.a, rotated} {
		want, _ := k.Public.MarshalBinary()
		if got, ok := ann.Lookup(k.ID); !ok || !bytes.Equal(got, want) {
			t.Fatalf("key id %d: announced public key differs from the relay's", k.ID)
		}
	}
	info, err := e.js.Stream(ctx, relays.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := info.Info(ctx); st.State.Msgs != 0 {
		t.Fatalf("the key request was stored in the relay stream (%d messages)", st.State.Msgs)
	}

	sctx, scancel := context.WithTimeout(ctx, time.Second)
	defer scancel()
	if _, err := ingest.FetchRelayKeys(sctx, nc, "b"); !errors.Is(err, ingest.ErrNoRelayKeysAnswer) {
		t.Fatalf("relay b not running: %v, want ErrNoRelayKeysAnswer", err)
	}
	q, _ := (&onion.RelayKeysRequest{Relay: "b"}).MarshalBinary()
	m, err := nc.RequestWithContext(ctx, protocol.RelayKeysSubject("a"), q)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := onion.ParseRelayKeysResponse(m.Data); err != nil || !strings.Contains(p.Error, "not b") {
		t.Fatalf("request for b at a's subject: %+v %v, want a refusal", p, err)
	}
	m, err = nc.RequestWithContext(ctx, protocol.RelayKeysSubject("a"), []byte{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := onion.ParseRelayKeysResponse(m.Data); err != nil || p.Error == "" {
		t.Fatalf("malformed request: %+v %v, want a refusal", p, err)
	}
}
