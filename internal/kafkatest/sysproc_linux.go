package kafkatest

import "syscall"

// sysProcAttr makes the kernel SIGKILL the broker JVM if the test binary dies
// (e.g. on a test timeout panic), so no server is left running. Strictly,
// Linux delivers it when the OS thread that forked the child exits; the Go
// runtime only retires threads whose goroutine exits while locked with
// runtime.LockOSThread, so a server is killed early only in the rare case
// that such a goroutine happened to run on the thread that started it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
