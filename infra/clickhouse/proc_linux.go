//go:build linux

package clickhouse

import "syscall"

// sysProcAttr puts the server in its own process group (so Stop can signal
// it and its children without touching the caller's group) and asks the
// kernel to SIGTERM it if the starting thread dies, so a crashed test binary
// does not leave servers behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }
