package main

import "syscall"

// childProcAttr makes the kernel SIGKILL a child (gate-dev's redis-server) if the gate
// dies without stopping it, for example on a second Ctrl-C.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
