package tick

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestClockSkewWarnedOnceTimeIsAllowed: the clock check warned that TIME was refused (an
// ACL without +time); the operator allows it, and the next check finds the clock 5 s off
// Redis's. That is warned of at once: the two warnings shared one pace, and the refusal's
// held the skew's back for ten minutes (a review).
func TestClockSkewWarnedOnceTimeIsAllowed(t *testing.T) {
	srv := redistest.Start(t)
	gate := dialGate(t, srv, "+time")
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	tk, err := New(l, []redis.UniversalClient{gate}, Config{}, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	tk.checkClock(context.Background())
	if len(logs.lines("clock check cannot run TIME")) != 1 {
		t.Fatalf("TIME's refusal not warned of; log:\n%s", logs.buf.String())
	}
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "gate", "+time").Err(); err != nil {
		t.Fatal(err)
	}
	tk.clockCheck.wall = &lateAnswerClock{off: 5 * time.Second}
	tk.clockCheck.last = time.Time{} // the next minute's check
	tk.checkClock(context.Background())
	if len(logs.lines("clock is off")) != 1 {
		t.Errorf("a clock 5 s off Redis's not warned of once TIME is allowed; log:\n%s", logs.buf.String())
	}
}
