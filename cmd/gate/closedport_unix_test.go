//go:build unix

package main

import (
	"fmt"
	"syscall"
	"testing"
)

// closedPort returns a loopback address nothing listens on, and nothing can until t ends
// (unix only, as redistest is, which stops servers with SIGSTOP):
// a TCP socket bound to it and not listening refuses every connection, and holds the
// port. It sets no SO_REUSEADDR, which a second bind of the port needs on both sockets
// (redis-server's and Go's listeners set it). A port merely closed after a listener on
// it went, in CI, to a redis-server another parallel test started on the free port it
// was handed: the binary meant to meet a Redis that is down met that one and succeeded
// (TestBinaryOverridesRedisDownOneLine).
func closedPort(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("a socket to hold a closed port: %v", err)
	}
	syscall.CloseOnExec(fd) // the binaries the tests start must not inherit it
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("binding a socket to hold a closed port: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("the held port: %v", err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("the held port: address %T", sa)
	}
	return fmt.Sprintf("127.0.0.1:%d", in.Port)
}
