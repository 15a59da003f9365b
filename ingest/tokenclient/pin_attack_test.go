package tokenclient_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestAttackIssuerSplitView is the attack of a malicious issuer on key
// consistency (RFC 9576 §6.2): it shows a returning client — a device
// restarted, so with no keys in memory — public keys of its own for the
// epoch. Tokens issued under keys that only this client holds are linked
// to it wherever they are spent (the aggregator, colluding, tries the
// keys). Two real issuers with their own keys directories stand for the
// issuer's honest and its client-specific view of one epoch. The client
// pins the first view in its pin file (PinFile); after the restart it must
// refuse the second view (ErrKeyChanged) and take no token under it. The
// control, the same restart without a pin file (the client before pin
// files), takes every token it asks for under the second view.
func TestAttackIssuerSplitView(t *testing.T) {
	limits := issuer.Limits{RandomnessTokens: 100, ReportTokens: 10}
	ctxA, ncA, keysA := setup(t, limits) // the view every client sees
	_, ncB, keysB := setup(t, limits)    // keys shown to this client only
	pins := filepath.Join(t.TempDir(), "issuer.pins")
	const n = 20

	first := client(t, ncA, keysA, true)
	first.PinFile = pins
	if _, err := first.Tokens(ctxA, token.KindRandomness, epoch, nonces(n)); err != nil {
		t.Fatal(err)
	}

	// the restarted device, same identity, same state directory, now
	// answered by the split view
	restarted := client(t, ncB, keysB, true)
	restarted.PinFile = pins
	toks, err := restarted.Tokens(ctxA, token.KindRandomness, epoch, nonces(n))
	taken := len(toks)

	// control: without a pin file the restart trusts the new keys
	control := client(t, ncB, keysB, true)
	ctoks, cerr := control.Tokens(ctxA, token.KindRandomness, epoch, nonces(n))

	fmt.Printf("ATTACK issuer-split-view: a restarted client shown its own issuer keys for epoch %s took %d of %d tokens under them (refused: %v); without a pin file %d of %d\n",
		epoch, taken, n, errors.Is(err, tokenclient.ErrKeyChanged), len(ctoks), n)
	if cerr != nil || len(ctoks) != n {
		t.Fatalf("control: a client without a pin file got %d of %d tokens from the second view: %v (the attack's setup is broken)", len(ctoks), n, cerr)
	}
	if taken != 0 || !errors.Is(err, tokenclient.ErrKeyChanged) {
		t.Fatalf("the restarted client took %d tokens under keys only it was shown: %v", taken, err)
	}
	if !strings.Contains(err.Error(), "epoch "+epoch) || !strings.Contains(err.Error(), pins) {
		t.Fatalf("the refusal does not name the epoch and the pin file: %v", err)
	}
}

// TestPinFileSameKeys: a restarted client of an honest issuer (same keys)
// is served, and the pin file keeps one line per epoch however many
// clients share it.
func TestPinFileSameKeys(t *testing.T) {
	ctx, nc, keys := setup(t, issuer.Limits{RandomnessTokens: 10, ReportTokens: 10})
	pins := filepath.Join(t.TempDir(), "state", "issuer.pins") // its directory is created
	for i := 0; i < 3; i++ {
		c := client(t, nc, keys, true)
		c.PinFile = pins
		if _, err := c.Tokens(ctx, token.KindRandomness, epoch, nonces(2)); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	b, err := os.ReadFile(pins)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], epoch+" ") || len(lines[0]) != len(epoch)+1+64 {
		t.Fatalf("pin file:\n%s\nwant one line \"%s <64 hex digits>\"", b, epoch)
	}
	// a corrupt pin is an error, never a silent re-pin
	if err := os.WriteFile(pins, []byte(epoch+" not-hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := client(t, nc, keys, true)
	c.PinFile = pins
	if _, err := c.Keys(ctx, epoch); err == nil || !strings.Contains(err.Error(), "bad fingerprint") {
		t.Fatalf("corrupt pin file: %v", err)
	}
}
