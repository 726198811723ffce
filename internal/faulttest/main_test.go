package faulttest_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/faulttest"
)

// gateBin is the gate binary built once for this test binary; empty under -short.
var gateBin string

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if !testing.Short() {
			dir, err := os.MkdirTemp("", "gate-faulttest-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			if gateBin, err = faulttest.BuildGate(dir); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		code := m.Run()
		if testing.Verbose() {
			figures.Lock()
			for _, row := range figures.rows {
				fmt.Println("FIGURES", row)
			}
			figures.Unlock()
		}
		return code
	}()
	os.Exit(code)
}

// needGate skips under -short (the binary is not built then).
func needGate(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the built gate binary")
	}
}

// soak reports whether the long versions run: GATETEST_SOAK=1 (make soak).
func soak() bool { return os.Getenv("GATETEST_SOAK") == "1" }

// dur returns short in make test and long under make soak.
func dur(short, long time.Duration) time.Duration {
	if soak() {
		return long
	}
	return short
}
