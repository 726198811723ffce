//go:build unix && !linux

package main

import "syscall"

// childProcAttr puts a child (gate-dev's redis-server) in a process group of its own, so
// that Ctrl-C, which a terminal sends to its whole foreground process group, reaches
// gate-dev only: gate-dev stops the child itself, after the gates' final flush. Outside
// Linux there is no parent-death signal: a gate-dev killed outright (a second Ctrl-C,
// SIGKILL) leaves its redis-server running.
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
