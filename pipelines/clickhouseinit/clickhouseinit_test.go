package clickhouseinit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/release"
)

// TestAnalystPasswordNeverPrinted: without a password init refuses (a
// usage error) instead of drawing one and printing it; a missing
// --password-file is created with a random password (mode 0600), the
// report names the file and never holds the password, and a rerun reads
// the same password back.
func TestAnalystPasswordNeverPrinted(t *testing.T) {
	noEnv := func(string) string { return "" }
	o := InitOptions{InitOptions: release.InitOptions{Addr: "ch:9000", Analyst: release.Analyst{Name: "analyst"}}}
	if err := o.Complete(noEnv); !errors.As(err, new(config.UsageError)) || !strings.Contains(err.Error(), "--password-file") {
		t.Fatalf("no password: %v, want a usage error naming --password-file", err)
	}
	o.PasswordFile = filepath.Join(t.TempDir(), "analyst-password")
	if err := o.Complete(noEnv); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(o.PasswordFile)
	if err != nil || fi.Mode().Perm() != 0o600 || len(o.Analyst.Password) < 20 {
		t.Fatalf("password file %v %v, password of %d bytes; want mode 0600 and a random password", fi, err, len(o.Analyst.Password))
	}
	var out bytes.Buffer
	o.print(&out, release.InitResult{AnalystDatabase: "crowdlog_analyst"})
	if strings.Contains(out.String(), o.Analyst.Password) || !strings.Contains(out.String(), o.PasswordFile) {
		t.Fatalf("init printed:\n%s\nwant the file's name and never the password", out.String())
	}
	again := InitOptions{InitOptions: release.InitOptions{Addr: "ch:9000", Analyst: release.Analyst{Name: "analyst"}}, PasswordFile: o.PasswordFile}
	if err := again.Complete(noEnv); err != nil || again.Analyst.Password != o.Analyst.Password || again.generated {
		t.Fatalf("rerun: %v, same password %v, generated %v", err, again.Analyst.Password == o.Analyst.Password, again.generated)
	}
}
