package gobuild

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
