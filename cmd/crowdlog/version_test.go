package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion: `crowdlog version` and `crowdlog --version` print the
// module version and, when the build recorded one, the VCS revision
// (vcs.revision, "+modified" for vcs.modified=true) that `go version -m`
// reads from the binary, which is the ground truth here. The binary is
// built with -buildvcs=auto so a git checkout records its revision even
// where GOFLAGS turns it off.
func TestVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "crowdlog")
	build := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	var modVersion, revision, goVersion string
	modified := false
	for i, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case i == 0 && len(f) == 2:
			goVersion = f[1]
		case len(f) >= 3 && f[0] == "mod":
			modVersion = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			revision = strings.TrimPrefix(f[1], "vcs.revision=")[:12]
		case len(f) == 2 && f[0] == "build" && f[1] == "vcs.modified=true":
			modified = true
		}
	}
	if modVersion == "" || goVersion == "" {
		t.Fatalf("go version -m shows no module or Go version:\n%s", out)
	}
	want := "crowdlog version " + modVersion
	if revision != "" {
		want += " " + revision
		if modified {
			want += "+modified"
		}
	}
	want += " " + goVersion
	for _, args := range [][]string{{"version"}, {"--version"}} {
		got, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("crowdlog %v: %v\n%s", args, err, got)
		}
		if strings.TrimSpace(string(got)) != want {
			t.Errorf("crowdlog %v prints %q, want %q", args, strings.TrimSpace(string(got)), want)
		}
	}
	t.Logf("crowdlog version: %s (vcs.revision recorded: %v)", want, revision != "")
}
