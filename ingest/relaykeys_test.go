package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/onion"
)

// TestCheckRelayKeys: the client refuses a route whose key id a relay does
// not hold, or holds with another public key, with an error naming the
// relay, the id and the ids it holds; an unanswered relay is a warning.
func TestCheckRelayKeys(t *testing.T) {
	gen := func(id byte) *onion.KeyPair {
		k, err := onion.GenerateKeyPair(id)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a4, a5, b1 := gen(4), gen(5), gen(1)
	held := map[string][]*onion.KeyPair{"a": {a4, a5}, "b": {b1}}
	asked := map[string]int{}
	fetch := func(_ context.Context, relay string) (*onion.RelayKeysResponse, error) {
		asked[relay]++
		ks, ok := held[relay]
		if !ok {
			return nil, errors.New("no responders")
		}
		return onion.RelayKeysOf(relay, ks)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx := context.Background()

	if err := CheckRelayKeys(ctx, fetch, []RelayHop{{"a", a5.PublicKey()}, {"b", b1.PublicKey()}}, log); err != nil {
		t.Fatalf("held keys refused: %v", err)
	}
	if asked["a"] != 1 || asked["b"] != 1 {
		t.Fatalf("each relay must be asked once: %v", asked)
	}

	stale := gen(3)
	err := CheckRelayKeys(ctx, fetch, []RelayHop{{"a", stale.PublicKey()}, {"b", b1.PublicKey()}}, log)
	want := fmt.Sprintf("relay a does not hold key id 3 (it holds %d,%d)", a4.ID, a5.ID)
	if !errors.Is(err, ErrRelayKeyUnknown) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "relay-a.key.pub") {
		t.Fatalf("unknown key id: %v, want ErrRelayKeyUnknown saying %q", err, want)
	}

	other := gen(1) // id 1 like relay b's, another key: a regenerated deployment
	err = CheckRelayKeys(ctx, fetch, []RelayHop{{"a", a4.PublicKey()}, {"b", other.PublicKey()}}, log)
	if !errors.Is(err, ErrRelayKeyUnknown) || !strings.Contains(err.Error(), "relay b holds key id 1 with another public key") {
		t.Fatalf("same id, other key: %v", err)
	}

	logs.Reset()
	if err := CheckRelayKeys(ctx, fetch, []RelayHop{{"c", stale.PublicKey()}}, log); err != nil {
		t.Fatalf("unanswered relay must not fail the client: %v", err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "relay=c") {
		t.Fatalf("unanswered relay: want a warning naming it, logs %q", logs.String())
	}
}
