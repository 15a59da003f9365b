package randomness

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	circloprf "github.com/cloudflare/circl/oprf"

	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/oprf"
)

// TestAttackEpochFlooding (docs/threat-model.md, "epoch flooding"): a
// client on NATS requests randomness and public keys for 1,000 epoch names
// of its own in named-epoch mode, straight on the wire (RandomnessRequest
// and PublicKeyRequest, as any NATS client can send them, skipping the
// Client's public-key check). Against the real service on an embedded NATS
// server and its real key directory, no request may be served and no key
// file (or any other file) may be created; the epoch the operator opened
// keeps being served under its key. It prints one ATTACK line.
func TestAttackEpochFlooding(t *testing.T) {
	const n = 1000
	e := newEnv(t)
	dir := filepath.Join(e.dir, "keys", "randomness.keys")
	keys, stop := e.serve(dir)
	defer stop()

	// the operator's epoch works as before
	const opened = "2006-03"
	pub, _, err := keys.OpenEpoch(opened)
	if err != nil {
		t.Fatal(err)
	}
	honest := &oprfclient.Client{NC: e.nc}
	in := [][]byte{oprf.OPRFInput("query", opened, "a")}
	if _, err := honest.Evaluate(e.ctx, opened, in); err != nil {
		t.Fatalf("operator-opened epoch refused: %v", err)
	}
	before := dirNames(t, dir)

	// the attacker blinds under a key of its own: the service evaluates
	// whatever element it is sent, so no public key is needed to ask
	atk, err := circloprf.GenerateKey(oprf.OPRFSuite, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var served, refused, created int
	var firstRefusal string
	for i := range n {
		ep := fmt.Sprintf("flood-%04d", i)
		_, q, err := oprf.Blind(atk.Public(), ep, [][]byte{oprf.OPRFInput("query", ep, "x")})
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := q.MarshalBinary()
		m, err := e.nc.RequestWithContext(e.ctx, protocol.RandomnessSubject, rb)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := oprf.ParseRandomnessResponse(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		pb, _ := (&oprf.PublicKeyRequest{Epoch: ep}).MarshalBinary()
		pm, err := e.nc.RequestWithContext(e.ctx, protocol.RandomnessPublicKeySubject, pb)
		if err != nil {
			t.Fatal(err)
		}
		presp, err := oprf.ParsePublicKeyResponse(pm.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []protocol.Refusal{resp.Refusal, presp.Refusal} {
			if !f.Refused() {
				served++
			}
		}
		if errors.Is(resp.Refusal.Err(), ErrEpochNotOpen) && errors.Is(presp.Refusal.Err(), ErrEpochNotOpen) {
			refused++
		} else if firstRefusal == "" {
			firstRefusal = fmt.Sprintf("epoch %s: randomness %q, public key %q", ep, resp.Error, presp.Error)
		}
		if exists(KeyFile(dir, ep)) {
			created++
		}
	}
	fmt.Printf("ATTACK epoch-flooding: %d of %d client-named epochs created a key (%d refused)\n", created, n, refused)
	after := dirNames(t, dir)
	if created > 0 || served > 0 || len(after) != len(before) {
		t.Fatalf("epoch flooding: %d key files created, %d of %d requests served, key directory %d → %d files (first not refused as unopened: %s)",
			created, served, 2*n, len(before), len(after), firstRefusal)
	}
	if refused != n {
		t.Fatalf("%d of %d flooded epochs refused as not opened (%s)", refused, n, firstRefusal)
	}

	// the real Client sees the refusal as ErrEpochNotOpen, with what to do
	_, err = (&oprfclient.Client{NC: e.nc}).Evaluate(e.ctx, "flood-extra", in)
	if !errors.Is(err, ErrEpochNotOpen) || !strings.Contains(err.Error(), "open-epoch") {
		t.Fatalf("client error for an unopened epoch: %v, want ErrEpochNotOpen naming open-epoch", err)
	}
	// the operator's epoch is still served, under the same key
	if p, err := (&oprfclient.Client{NC: e.nc}).PublicKey(e.ctx, opened); err != nil || string(p) != string(pub) {
		t.Fatalf("operator-opened epoch after the flood: %v", err)
	}
	if _, err := honest.Evaluate(e.ctx, opened, in); err != nil {
		t.Fatalf("operator-opened epoch refused after the flood: %v", err)
	}
}

// dirNames lists a directory's entries.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(entries))
	for i, en := range entries {
		names[i] = en.Name()
	}
	return names
}
