package consume

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestExactlyOnceUnmappedIDsAtTheBound: a transactional id found unmapped again and again
// (another instance maps it each time) is recovered from up to the bound; past it, the
// error said "1 outlived the transaction timeout, 5 ended with an unknown outcome", none
// of which happened. It names another instance using the id.
func TestExactlyOnceUnmappedIDsAtTheBound(t *testing.T) {
	t.Parallel()
	c := &Consumer{}
	c.cfg.TransactionalID, c.cfg.TransactionTimeout = "gate-a", 10*time.Second
	for range maxRecoveries {
		c.recoveries = append(c.recoveries, recovery{at: time.Now(), unmapped: true})
	}
	err := c.recoverFenced(kerr.InvalidProducerIDMapping, time.Second, false)
	if err == nil || !strings.Contains(err.Error(), "another live instance is using it") || strings.Contains(err.Error(), "outlived") {
		t.Errorf("six unmapped ids in 10 min reported as %v", err)
	}
}
