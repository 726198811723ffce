package route

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/limit"
)

// With CostBytes a record counts its value's size: a team sending few large events is
// limited once its bytes reach the threshold, and the limiter is handed the bytes.
func TestCostBytes(t *testing.T) {
	t.Parallel()
	for _, mode := range []limit.Mode{limit.Divert, limit.Cap} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Config{Cost: CostBytes, ForceOverflow: []string{"forced"}}, limit.Config{Threshold: 1000, Mode: mode})
			value := []byte(`{"team_id":"big","pad":"` + strings.Repeat("x", 300-26) + `"}`)
			if len(value) != 300 {
				t.Fatalf("value is %d bytes", len(value))
			}
			var s Scratch
			var routes []Route
			for range 6 {
				_, o := f.r.Route(t0, &kgo.Record{Topic: topicIn, Value: value}, &s)
				routes = append(routes, o.Route)
			}
			// Levels before each record: 0, 300, 600, 900 (allowed), then 1200 ≥ 1000.
			want := []Route{Accepted, Accepted, Accepted, Accepted, Overflow, Overflow}
			for i := range want {
				if routes[i] != want[i] {
					t.Fatalf("routes %v, want %v", routes, want)
				}
			}
			_, _ = f.r.Route(t0, &kgo.Record{Topic: topicIn, Value: []byte(`{"team_id":"forced"}`)}, &s)
			counts := f.counts()
			wantBig := int64(6 * 300) // divert counts every record
			wantForced := int64(len(`{"team_id":"forced"}`))
			if mode == limit.Cap {
				wantBig, wantForced = 4*300, 0 // cap counts accepted records only
			}
			if counts["big"] != wantBig || counts["forced"] != wantForced {
				t.Errorf("counted %v, want big=%d forced=%d", counts, wantBig, wantForced)
			}
		})
	}
}

func TestCostParse(t *testing.T) {
	t.Parallel()
	var c Cost
	if err := c.UnmarshalText([]byte("bytes")); err != nil || c != CostBytes || c.String() != "bytes" {
		t.Errorf("bytes: %v %v", c, err)
	}
	if err := c.UnmarshalText([]byte("events")); err != nil || c != CostEvents || c.String() != "events" {
		t.Errorf("events: %v %v", c, err)
	}
	if err := c.UnmarshalText([]byte("records")); err == nil || !strings.Contains(err.Error(), "want events or bytes") {
		t.Errorf("records: %v", err)
	}
	// An empty value costs 1 byte: every record counts for something.
	if got := costOf(CostBytes, &kgo.Record{}, &Scratch{}); got != 1 {
		t.Errorf("cost of an empty value %d, want 1", got)
	}
}
