package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/keydir"
)

// TestKeysPrio3Verify: `keys prio3-verify --out FILE` writes epoch 1, then
// adds epoch 2 with another key; the file loads; without --out it fails.
func TestKeysPrio3Verify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := filepath.Join(t.TempDir(), "prio3.verify")
	run := func(args ...string) error {
		c := keysCmd()
		c.SetArgs(args)
		c.SetOut(io.Discard)
		c.SetErr(io.Discard)
		return c.ExecuteContext(ctx)
	}
	for range 2 {
		if err := run("prio3-verify", "--out", out); err != nil {
			t.Fatal(err)
		}
	}
	k, err := keydir.LoadVerifyKeys(out)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := k.Newest(); len(k) != 2 || e != 2 || k[1] == k[2] {
		t.Fatalf("%d epochs, newest %d, epochs 1 and 2 equal: %v", len(k), e, k[1] == k[2])
	}
	if err := run("prio3-verify"); err == nil {
		t.Error("prio3-verify without --out succeeded")
	}
}
