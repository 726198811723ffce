package load

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

// The generator's records route as intended: teams by a power law with the hot team
// first, and every malformed one, at its fixed cadence, to dead letter.
func TestGeneratorRoutes(t *testing.T) {
	t.Parallel()
	spec := DefaultSpec()
	spec.BadEvery = 10
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1 << 40}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := route.New(route.Config{AcceptedTopic: "a", OverflowTopic: "o", DeadLetterTopic: "d"}, lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Unix(1718000000, 0) }
	gen, again := NewGenerator(spec, now), NewGenerator(spec, now)
	perTeam, perUser := map[string]int{}, map[string]int{}
	reasons := map[string]int{}
	const n = 4000
	for i := 1; i <= n; i++ {
		rec := gen.Next()
		if rec2 := again.Next(); !bytes.Equal(rec.Value, rec2.Value) || !bytes.Equal(rec.Key, rec2.Key) {
			t.Fatalf("record %d differs between two generators with one seed", i)
		}
		rec.Topic = "events"
		_, o := r.Route(now(), rec, nil)
		if bad := i%spec.BadEvery == 0; bad != (o.Route == route.DeadLetter) {
			t.Fatalf("record %d: %+v (malformed: %v) %q", i, o, bad, rec.Value)
		}
		if o.Route == route.DeadLetter {
			reasons[o.Reason]++
			continue
		}
		perTeam[o.Team]++
		perUser[string(rec.Key)]++
		if want := o.Team + ":user-"; !strings.HasPrefix(string(rec.Key), want) {
			t.Errorf("record %d: key %q, want %s...", i, rec.Key, want)
		}
	}
	for _, reason := range []string{route.ReasonNotJSON, route.ReasonFieldMissing, route.ReasonKeyTooLong} {
		if reasons[reason] == 0 {
			t.Errorf("no malformed record dead-lettered as %s: %v", reason, reasons)
		}
	}
	// The runaway user is about its share of every record.
	if got := perUser[fmt.Sprintf("%d:user-%d", RunawayTeam, RunawayUser)]; got < n*2/100 || got > n*4/100 {
		t.Errorf("runaway user: %d of %d records, want about %.0f%%", got, n, spec.RunawayShare*100)
	}
	// The hot team leads, then the tail's head; the tail is long.
	if !(perTeam["1"] > perTeam["1000"] && perTeam["1000"] > perTeam["1001"] && perTeam["1001"] > 0) || len(perTeam) < 100 {
		t.Errorf("teams 1, 1000, 1001: %d %d %d, %d teams", perTeam["1"], perTeam["1000"], perTeam["1001"], len(perTeam))
	}
}

// Check refuses an infinite -zipf exponent: "> 1" lets +Inf through (flag parses "inf"),
// and math/rand's Zipf then never returns a value, so the generator spins for ever and
// gate load never ends, -duration or not.
func TestCheckZipfFinite(t *testing.T) {
	t.Parallel()
	spec := DefaultSpec()
	spec.ZipfS = math.Inf(1)
	if err := spec.Check(); err == nil || !strings.Contains(err.Error(), "-zipf") {
		t.Errorf("Check with -zipf +Inf = %v, want an error naming -zipf", err)
	}
	spec.ZipfS = 1e300 // large but finite: a Zipf that answers
	if err := spec.Check(); err != nil {
		t.Errorf("Check with -zipf 1e300 = %v", err)
	}
}

// A negative -duration is refused, written as an operator writes it (-1m, not -1m0s).
func TestCheckNegativeDuration(t *testing.T) {
	s := DefaultSpec()
	s.Duration = -time.Minute
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), "-duration -1m is negative") {
		t.Errorf("Check with -duration -1m: %v", err)
	}
}
