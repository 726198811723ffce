package replay

import (
	"os"
	"testing"

	"github.com/capturegate/gate/internal/testflags"
)

// TestMain runs four parallel tests at a time, not GOMAXPROCS's two: of the package's
// parallel tests, three mostly wait (TestReadKeepsRecordsOfALatePoll sleeps out a stall,
// TestReadFailsWhenALeaderIsUnavailable waits for the client to give a partition up, some
// 10 s each; TestReadWaitsForAnOpenTransaction, on a transaction) and two replay (CPU).
// At two at a time the waits queued behind the CPU-bound pair: the parallel phase took
// 22 s under -race on two cores; at four, the waits overlap it, and no more tests use
// the CPU at once than before (the two that replay).
func TestMain(m *testing.M) {
	testflags.Parallel(4)
	os.Exit(m.Run())
}
