package faulttest

import "syscall"

// sysProcAttr makes the kernel SIGKILL a child (gate, redis-server) if the test binary
// dies, so none is left running (see internal/redistest for the caveat).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
