//go:build !unix

package main

import "syscall"

// childProcAttr: outside Unix there are neither process groups to leave nor a
// parent-death signal; gate-dev stops its redis-server itself at exit.
func childProcAttr() *syscall.SysProcAttr { return nil }
