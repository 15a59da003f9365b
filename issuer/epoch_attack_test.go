package issuer

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// TestAttackIssuerEpochFlooding: clients name epochs of their own in key
// requests and in signed issuance requests over real NATS. Each used to make
// the issuer create three key files (an epoch's token and ARC keys on first
// use): unbounded files and key material nobody opened. Now only an
// operator creates an epoch's keys; requests for other epochs are refused
// and write nothing, while the opened epoch keeps being served.
func TestAttackIssuerEpochFlooding(t *testing.T) {
	e := newEnv(t)
	if err := keydir.EnsureIssuerKeys(e.keys, epoch); err != nil { // the operator opens one epoch
		t.Fatal(err)
	}
	_, stop := e.start(Limits{RandomnessTokens: 10, ReportTokens: 10})
	defer stop()
	nc := e.conn()
	id := e.identity(true)
	const n = 500
	var keysRefused, issueRefused int
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("flood-%d", i)
		b, _ := (&token.KeysRequest{Epoch: name}).MarshalBinary()
		m, err := nc.RequestWithContext(e.ctx, protocol.IssuerPublicKeySubject, b)
		if err != nil {
			t.Fatal(err)
		}
		kr, err := token.ParseKeysResponse(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if kr.Refusal.Error != "" {
			keysRefused++
		}
		// a signed request of an enrolled identity for a made-up epoch
		q := &token.IssueRequest{Kind: token.KindRandomness, Epoch: name, Timestamp: now(), Blinded: [][]byte{blindedElement(t)}}
		if err := q.Sign(id); err != nil {
			t.Fatal(err)
		}
		qb, err := q.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := e.ask(nc, qb).Err(); err != nil {
			issueRefused++
		}
	}
	files, err := os.ReadDir(filepath.Join(e.keys, keydir.IssuerKeys))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	created := len(files) - 3 // the opened epoch's three keys
	// the opened epoch is still served
	served := e.tokens(nc, id, token.KindRandomness, 1) == nil
	fmt.Printf("ATTACK issuer-epoch-flooding: %d client-named epochs: %d key files created, %d of %d key requests and %d of %d issuance requests refused; the opened epoch served: %v\n",
		n, created, keysRefused, n, issueRefused, n, served)
	if created != 0 || keysRefused != n || issueRefused != n || !served {
		t.Fatalf("issuer created %d key files for client-named epochs (refused %d key and %d issuance requests of %d); served the opened epoch: %v",
			created, keysRefused, issueRefused, n, served)
	}
}

// blindedElement is a valid encoded ristretto255 element (a blinded input
// for the epoch's randomness-token key; any key's public element shape).
func blindedElement(t *testing.T) []byte {
	key, err := token.GenerateKey(token.KindRandomness, "any")
	if err != nil {
		t.Fatal(err)
	}
	var nonce [32]byte
	rand.Read(nonce[:])
	_, blinded, err := token.NewRequest(key.Public(), token.KindRandomness, "any", [][32]byte{nonce})
	if err != nil {
		t.Fatal(err)
	}
	return blinded[0]
}
