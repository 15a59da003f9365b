//go:build unix && !linux

package clickhouse

import "syscall"

// sysProcAttr puts the server in its own process group so Stop can signal it
// and its children without touching the caller's group.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }
