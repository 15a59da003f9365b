package clickhouse

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMissingBinaryNamesInstallCommand(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := extraDirs
	extraDirs = nil
	defer func() { extraDirs = saved }()
	for _, f := range []func() ([]string, error){ServerBinary, ClientBinary} {
		_, err := f()
		if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), InstallCommand) {
			t.Fatalf("error %q does not wrap ErrNotInstalled or name %q", err, InstallCommand)
		}
	}
}

func TestCombinedBinaryFallback(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "clickhouse")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	saved := extraDirs
	extraDirs = nil
	defer func() { extraDirs = saved }()
	argv, err := ClientBinary()
	if err != nil || len(argv) != 2 || argv[0] != p || argv[1] != "client" {
		t.Fatalf("ClientBinary() = %v, %v; want [%s client]", argv, err, p)
	}
	argv, err = ServerBinary()
	if err != nil || len(argv) != 2 || argv[1] != "server" {
		t.Fatalf("ServerBinary() = %v, %v", argv, err)
	}
}

func TestConfigEscapesDir(t *testing.T) {
	cfg := configXML("/tmp/a&b<c", 1, 2)
	if strings.Contains(cfg, "a&b") || !strings.Contains(cfg, "/tmp/a&amp;b&lt;c/data/") {
		t.Fatalf("dir not escaped in config:\n%s", cfg)
	}
}
