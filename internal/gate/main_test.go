package gate

import (
	"os"
	"testing"

	"github.com/capturegate/gate/internal/testflags"
)

// TestMain runs eight parallel tests at a time: the reload tests mostly wait (on the rules
// file's period, ticks, a topic check left unanswered), the package using some 10 s of CPU
// in 80 s of wall time under -race on two cores when they ran one at a time.
func TestMain(m *testing.M) {
	testflags.Parallel(8)
	os.Exit(m.Run())
}
