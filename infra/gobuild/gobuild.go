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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Timeout bounds one attempt of Build. A cold build of cmd/crowdlog takes
// about 2 min on a 2-core machine and a cached one about 2 s.
const Timeout = 6 * time.Minute

// attemptTimeout is Timeout; tests shorten it.
var attemptTimeout = Timeout

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
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	args := append([]string{"build", "-buildvcs=false"}, flags...)
	args = append(args, "-o", out, pkg)
	cmd := exec.CommandContext(actx, "go", args...)
	// out of time: note the go command's process tree (a stopped or
	// waiting child shows there), then SIGQUIT it so its goroutine dump
	// says what it waited for; 10 s later Wait kills it and stops waiting
	// for the output pipe a child may still hold
	var tree string
	cmd.Cancel = func() error {
		tree = processTree(cmd.Process.Pid)
		return cmd.Process.Signal(syscall.SIGQUIT)
	}
	cmd.WaitDelay = 10 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	t0 := time.Now()
	err = cmd.Run()
	if actx.Err() != nil {
		return ctx.Err() == nil, fmt.Errorf("go build %s did not finish in %s (is the disk full, or another go command holding the build cache?): %w\nits processes (pid ppid state wchan command):\n%s\nits output (SIGQUIT's goroutine dump, first %d bytes):\n%s",
			pkg, time.Since(t0).Round(time.Second), errors.Join(actx.Err(), err), tree, maxDump, head(buf.Bytes(), maxDump))
	}
	if err != nil {
		return false, fmt.Errorf("go build %s: %w\n%s", pkg, err, buf.Bytes())
	}
	return false, nil
}

// maxDump bounds the output of a timed-out build kept in its error.
const maxDump = 16 << 10

func head(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// processTree lists pid and its descendants from /proc, one line each:
// pid, parent, state (T: stopped, D: waiting on I/O), kernel wait channel
// and command line; "" where /proc cannot be read.
func processTree(root int) string {
	type proc struct {
		pid, ppid   int
		state, line string
	}
	var all []proc
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		wchan, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "wchan"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		all = append(all, proc{pid, ppid, f[0], fmt.Sprintf("%d %d %s %s %s", pid, ppid, f[0], wchan,
			strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))})
	}
	in := map[int]bool{root: true}
	for changed := true; changed; {
		changed = false
		for _, p := range all {
			if !in[p.pid] && in[p.ppid] {
				in[p.pid], changed = true, true
			}
		}
	}
	var b strings.Builder
	for _, p := range all {
		if in[p.pid] {
			b.WriteString(p.line)
			b.WriteByte('\n')
		}
	}
	return b.String()
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
