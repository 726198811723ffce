package main

import "syscall"

// childProcAttr puts a child (gate-dev's redis-server) in a process group of its own, so
// that Ctrl-C, which a terminal sends to its whole foreground process group, reaches
// gate-dev only: gate-dev stops the child itself, after the gates' final flush. The
// kernel SIGKILLs the child if gate-dev dies without stopping it, for example on a
// second Ctrl-C.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
