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

// Timeout bounds one attempt of Build. A cold build of cmd/crowdlog takes
// about 2 min on a 2-core machine and a cached one about 2 s.
const Timeout = 6 * time.Minute

// Attempts is how many times Build starts go build when an attempt runs
// past Timeout (a build that fails is not retried).
const Attempts = 2

// Build runs `go build -buildvcs=false [flags] -o out pkg` in the current
// directory, each attempt bounded by Timeout, all by ctx; an attempt that
// runs out of time is killed and started again, up to Attempts.
// -buildvcs=false: the tests do not read the VCS stamp, and without it go
// build runs no git command. Errors wrap the command's error
// (context.DeadlineExceeded when every attempt ran out of time) and carry
// its output.
func Build(ctx context.Context, out, pkg string, flags ...string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("go build %s not started: %w", pkg, err)
	}
	var err error
	for i := 0; i < Attempts && ctx.Err() == nil; i++ {
		var timedOut bool
		if timedOut, err = build(ctx, out, pkg, flags); !timedOut {
			return err
		}
		fmt.Fprintf(os.Stderr, "gobuild: %v; starting it again\n", err)
	}
	return err
}

// build is one attempt of Build; timedOut reports that it ran past Timeout.
func build(ctx context.Context, out, pkg string, flags []string) (timedOut bool, err error) {
	actx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	args := append([]string{"build", "-buildvcs=false"}, flags...)
	args = append(args, "-o", out, pkg)
	cmd := exec.CommandContext(actx, "go", args...)
	// after a kill, stop waiting for the output pipe a child of go build
	// may still hold
	cmd.WaitDelay = 10 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	t0 := time.Now()
	err = cmd.Run()
	if actx.Err() != nil {
		return ctx.Err() == nil, fmt.Errorf("go build %s did not finish in %s (is the disk full, or another go command holding the build cache?): %w\n%s",
			pkg, time.Since(t0).Round(time.Second), errors.Join(actx.Err(), err), buf.Bytes())
	}
	if err != nil {
		return false, fmt.Errorf("go build %s: %w\n%s", pkg, err, buf.Bytes())
	}
	return false, nil
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
