package pdd

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/blind"
)

// A client's state — keys, deal secret, sequence number, the rounds it
// submitted to (with their roster hash) and the requests it answered —
// survives a restart, so a restarted client neither answers a second
// unmasking request for a group nor reuses a sequence number.
func TestClientStateSurvivesRestart(t *testing.T) {
	k, _ := blind.GenerateKey()
	_, sk, _ := ed25519.GenerateKey(rand.Reader)
	path := filepath.Join(t.TempDir(), "client.json")
	c := &Client{ID: "00112233445566778899aabbccddeeff", Key: k, SignKey: sk, Campaign: "flu", StatePath: path,
		sent: map[blind.Instance][32]byte{}, answered: map[blind.Instance]bool{}}
	rand.Read(c.Secret[:])
	in := blind.Instance{Campaign: "flu", Round: 13000, Group: 4}
	c.sent[in] = [32]byte{9}
	c.answered[in] = true
	c.sent[blind.Instance{Campaign: "flu", Round: 13001, Group: 0}] = [32]byte{7}
	seq := c.nextSeq()
	if err := c.save(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode: %v %v", fi.Mode(), err)
	}
	r, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != c.ID || !r.Key.Equal(c.Key) || !r.SignKey.Equal(c.SignKey) || r.Secret != c.Secret || r.Campaign != "flu" {
		t.Fatal("keys or identity changed across the restart")
	}
	if !reflect.DeepEqual(r.sent, c.sent) || !reflect.DeepEqual(r.answered, c.answered) {
		t.Fatalf("sent/answered changed: %v %v", r.sent, r.answered)
	}
	if next := r.nextSeq(); next <= seq {
		t.Fatalf("sequence %d after restart, not above %d", next, seq)
	}
	// a corrupt file is a clear error, not a fresh client
	os.WriteFile(path, []byte("{"), 0o600)
	if _, err := Open(path, nil); err == nil {
		t.Fatal("corrupt state accepted")
	}
}
