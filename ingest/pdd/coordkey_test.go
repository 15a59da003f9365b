package pdd

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"path/filepath"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/blind"
)

// The coordinator key is pinned in the state file on first use; a
// Transport with another key is refused unless a fingerprint vouched for
// it; a task signed by another key does not verify.
func TestCoordinatorKeyPinned(t *testing.T) {
	k, _ := blind.GenerateKey()
	_, sk, _ := ed25519.GenerateKey(rand.Reader)
	pub1, coord1, _ := ed25519.GenerateKey(rand.Reader)
	pub2, _, _ := ed25519.GenerateKey(rand.Reader)
	path := filepath.Join(t.TempDir(), "client.json")
	c := &Client{ID: "00112233445566778899aabbccddeeff", Key: k, SignKey: sk, Campaign: "flu", StatePath: path}
	if got, err := c.coordinatorKey(&Transport{CoordinatorKey: pub1}); err != nil || !got.Equal(pub1) {
		t.Fatalf("first use: %v", err)
	}
	r, err := Open(path, nil)
	if err != nil || !r.CoordinatorKey.Equal(pub1) {
		t.Fatalf("pinned in the state file: %v", err)
	}
	if got, err := r.coordinatorKey(&Transport{}); err != nil || !got.Equal(pub1) {
		t.Fatalf("no key given: the pinned one, got %v", err)
	}
	if _, err := r.coordinatorKey(&Transport{CoordinatorKey: pub2}); !errors.Is(err, ErrCoordinatorKeyChanged) {
		t.Fatalf("another key: %v, want ErrCoordinatorKeyChanged", err)
	}
	if got, err := r.coordinatorKey(&Transport{CoordinatorKey: pub2, coordVouched: true}); err != nil || !got.Equal(pub2) {
		t.Fatalf("a vouched rotation: %v", err)
	}
	task := blind.Task{Round: 3, Group: 1, Member: 0, Members: [][]byte{k.PublicKey().Bytes(), k.PublicKey().Bytes()}, T: 2, Deadline: 5}
	blind.SignTask(coord1, "flu", &task)
	if err := blind.VerifyTask(pub1, "flu", &task); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"other key":      blind.VerifyTask(pub2, "flu", &task),
		"other campaign": blind.VerifyTask(pub1, "cold", &task),
		"other member": func() error {
			u := task
			u.Member = 1
			return blind.VerifyTask(pub1, "flu", &u)
		}(),
		"unsigned": func() error { u := task; u.Sig = nil; return blind.VerifyTask(pub1, "flu", &u) }(),
	} {
		if !errors.Is(err, blind.ErrTaskSignature) {
			t.Errorf("%s: %v, want ErrTaskSignature", name, err)
		}
	}
}
