package tick

import (
	"os"
	"testing"

	"github.com/capturegate/gate/internal/testflags"
)

// TestMain runs six parallel tests at a time: they mostly wait (on Sentinel failovers,
// hung nodes, ticks), and six took the package from 119 s to 84 s of wall time under
// -race on two cores, its CPU time the same (43 s).
func TestMain(m *testing.M) {
	testflags.Parallel(6)
	os.Exit(m.Run())
}
