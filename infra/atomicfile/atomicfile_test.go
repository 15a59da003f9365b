package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWriteFile: the content is replaced, a file already right is left
// alone (same inode, same mtime), no temporary file stays behind.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	if err := WriteFile(p, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two\n" {
		t.Fatalf("content %q", b)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	old := time.Unix(1_000_000, 0)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi2, _ := os.Stat(p); !os.SameFile(fi, fi2) || !fi2.ModTime().Equal(old) {
		t.Error("a file already holding the data was rewritten")
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("directory holds %d entries, want 1", len(es))
	}
}

// TestCreateOnce: the first writer wins, the second gets fs.ErrExist.
func TestCreateOnce(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	if err := CreateOnce(p, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CreateOnce(p, []byte("second"), 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second create: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "first" {
		t.Fatalf("content %q", b)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("directory holds %d entries, want 1", len(es))
	}
}
