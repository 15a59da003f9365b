package gobuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Build makes a binary that runs; a package that does not exist fails with
// go build's own message; Once builds once and returns the same path.
func TestBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hello")
	if err := Build(context.Background(), bin, "./testdata/hello"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin).Output()
	if err != nil || strings.TrimSpace(string(out)) != "hello from a bounded build" {
		t.Fatalf("built binary printed %q (%v)", out, err)
	}
	err = Build(context.Background(), filepath.Join(t.TempDir(), "x"), "./testdata/missing")
	if err == nil || !strings.Contains(err.Error(), "go build ./testdata/missing") {
		t.Fatalf("missing package: %v", err)
	}
	var o Once
	defer o.Remove()
	a, err := o.Path("./testdata/hello")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := o.Path("./testdata/hello")
	if a != b {
		t.Fatalf("Once built twice: %s, %s", a, b)
	}
}

// A context already done starts no attempt and says so.
func TestBuildCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Build(ctx, filepath.Join(t.TempDir(), "x"), "./testdata/hello"); err == nil {
		t.Fatal("a canceled build succeeded")
	}
}

// processTree finds this test's own child and says its state.
func TestProcessTree(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer cmd.Process.Kill()
	tree := processTree(os.Getpid())
	if !strings.Contains(tree, fmt.Sprintf("%d %d ", cmd.Process.Pid, os.Getpid())) || !strings.Contains(tree, "sleep 30") {
		t.Fatalf("process tree of %d lacks its child %d:\n%s", os.Getpid(), cmd.Process.Pid, tree)
	}
}

// A go command that never finishes is stopped after the bound, started
// again once, and the error shows its process tree.
func TestBuildTimesOut(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go"), []byte("#!/bin/sh\necho started >&2\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	defer func(d time.Duration) { attemptTimeout = d }(attemptTimeout)
	attemptTimeout = time.Second
	err := Build(context.Background(), filepath.Join(dir, "x"), "./testdata/hello")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not finish") ||
		!strings.Contains(err.Error(), "sleep 600") || !strings.Contains(err.Error(), "started") {
		t.Fatalf("a hung go build: %v", err)
	}
}
