// Package gobuild builds the project's commands for the tests that run them
// as processes. Each build is bounded in time, and an error says what the
// build waited for and what it printed, so a stuck `go build` fails its test
// in minutes with a reason instead of hanging the suite until go test's own
// timeout.
package gobuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// Timeout bounds one build. A cold build of cmd/crowdlog takes about 2 min
// on a 2-core machine and a cached one about 2 s.
const Timeout = 10 * time.Minute

// Build runs `go build -buildvcs=false [flags] -o out pkg` in the current
// directory, bounded by ctx and Timeout. -buildvcs=false: the tests do not
// read the VCS stamp, and without it go build runs no git command.
// Errors wrap the command's error (context.DeadlineExceeded when the bound
// ran out) and carry its output.
func Build(ctx context.Context, out, pkg string, flags ...string) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	args := append([]string{"build", "-buildvcs=false"}, flags...)
	args = append(args, "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	// after a kill, stop waiting for the output pipe a child of go build
	// may still hold
	cmd.WaitDelay = 10 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	t0 := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("go build %s did not finish in %s (is the disk full, or another go command holding the build cache?): %w\n%s",
			pkg, time.Since(t0).Round(time.Second), errors.Join(ctx.Err(), err), buf.Bytes())
	}
	if err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, buf.Bytes())
	}
	return nil
}

// Once builds one package once per process.
type Once struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// Path builds pkg into a temporary folder on the first call (Build, with
// context.Background) and returns the binary's path; later calls return
// the same path or the same error. pkg is relative to the caller's
// package directory, as for go build.
func (o *Once) Path(pkg string) (string, error) {
	o.once.Do(func() {
		o.dir, o.err = os.MkdirTemp("", "crowdlog-bin-")
		if o.err != nil {
			return
		}
		bin := filepath.Join(o.dir, filepath.Base(pkg))
		if o.err = Build(context.Background(), bin, pkg); o.err == nil {
			o.bin = bin
		}
	})
	return o.bin, o.err
}

// Remove deletes the folder Path built into (call it from TestMain after
// m.Run).
func (o *Once) Remove() {
	if o.dir != "" {
		os.RemoveAll(o.dir)
	}
}
