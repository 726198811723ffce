//go:build !linux

package main

import "syscall"

// childProcAttr: outside Linux there is no parent-death signal; gate-dev stops its
// redis-server itself at exit.
func childProcAttr() *syscall.SysProcAttr { return nil }
