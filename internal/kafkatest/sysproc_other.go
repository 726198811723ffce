//go:build !linux

package kafkatest

import "syscall"

// sysProcAttr has nothing to add outside Linux (no parent-death signal).
func sysProcAttr() *syscall.SysProcAttr { return nil }
