package consume

import (
	"strings"
	"testing"
	"time"
)

// The transaction timeout the brokers refuse is named as an operator writes it (15m),
// not as time.Duration's String does (15m0s).
func TestTransactionTimeoutMessageWritesDurations(t *testing.T) {
	if got, want := transactionTimeoutMessage(20*time.Minute, "15m"), "GATE_TRANSACTION_TIMEOUT (20m) is above the brokers' transaction.max.timeout.ms (15m)"; !strings.HasPrefix(got, want) {
		t.Errorf("%q, want it to start %q", got, want)
	}
}
