// Package profile starts CPU profiles for the benchmarks' child processes
// (the aggregator-service and relay lines of `make bench-bounds`), which
// the parent's -cpuprofile does not cover, and for `crowdlog run` (every
// in-process role in one profile): set CROWDLOG_BOUND_CPUPROFILE=FILE and
// read FILE with `go tool pprof`.
package profile

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// EnvCPU names the environment variable whose value, when set, is the file
// a child process writes its CPU profile to.
const EnvCPU = "CROWDLOG_BOUND_CPUPROFILE"

// StartCPU starts a CPU profile to the file named by EnvCPU and returns the
// function that stops it and closes the file; both do nothing when the
// variable is empty. Errors when the file cannot be created or a profile
// is already running.
func StartCPU() (stop func(), err error) {
	path := os.Getenv(EnvCPU)
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("profile: %s: %w", EnvCPU, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("profile: %s: %w", EnvCPU, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// EnvHeap names the environment variable whose value, when set, is the file
// WriteHeap writes a heap profile to.
const EnvHeap = "CROWDLOG_BOUND_HEAPPROFILE"

// WriteHeap writes a heap profile (in-use and allocated space, as of the
// last garbage collection) to the file named by EnvHeap; nothing when the
// variable is empty. Read it with `go tool pprof -sample_index=inuse_space`.
func WriteHeap() error {
	path := os.Getenv(EnvHeap)
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("profile: %s: %w", EnvHeap, err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("profile: %s: %w", EnvHeap, err)
	}
	return f.Close()
}
