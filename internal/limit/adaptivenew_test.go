package limit

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/spike"
)

// firstFolded runs one gate, alone on a store this test keeps, for hours: team sends 100
// records a minute in the first burst of every hour (burst an hour: always), the gate
// sweeping every 15 s and applying each read and profile look as the tick does, the store
// holding the counts it hands over and no profile. It returns how many minutes after the
// team was met the first window of its first profile write is, -1 when none was written.
func firstFolded(t *testing.T, burst time.Duration, hours int) int64 {
	t.Helper()
	l := adaptiveLimiter(t, Config{})
	const team = "new"
	counts := map[int64]int64{} // the store's count of each window
	met := int64(-1)
	for now := adaptT0; now.Before(adaptT0.Add(time.Duration(hours) * time.Hour)); now = now.Add(15 * time.Second) {
		ep := l.Epoch(now)
		if now.Sub(adaptT0)%time.Hour < burst {
			l.CheckAt(now, team, 25)
			if met < 0 {
				met = ep
			}
		}
		var sw Sweep
		l.Sweep(now.Add(time.Second), &sw)
		for _, c := range sw.Counts { // written to the store
			counts[c.Epoch] += c.N
		}
		for i := range sw.Reads {
			r := &sw.Reads[i]
			l.ApplyRead(r, counts[r.Epoch], counts[r.Epoch-1], now)
			if !r.Profile {
				continue
			}
			var n int64
			if r.Fold {
				n = counts[r.Epoch-2]
			}
			if w, ok := l.ApplyProfile(r, spike.Profile{}, false, n, now); ok && w.Profile.Windows > 0 {
				return w.Profile.Epoch - met
			}
		}
	}
	return -1
}

// TestDesignStatesWhenANewTeamIsLearned: a team met with no profile and nothing two
// windows back is looked at again a fold period on (so that a key met once leaves no
// profile in the store), so its first windows are not learned, and a team sending in
// bursts shorter than that is never learned (each look finds the window it folds silent,
// or the team gone from the cache): it stays on the static threshold. docs/design.md says how long, and which bursts; it said a fleet
// learned nothing of a team's first two windows only.
func TestDesignStatesWhenANewTeamIsLearned(t *testing.T) {
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	first := firstFolded(t, time.Hour, 2)
	if first < 2 {
		t.Fatalf("a new team sending every minute: first folded window %d minutes after it was met, want 2 or more", first)
	}
	m := regexp.MustCompile(`learns\s+nothing\s+of\s+a\s+team's\s+first\s+(\d+)\s+minutes`).FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/design.md does not say how much of a new team is not learned; the gate learns nothing of its first %d minutes", first)
	}
	if n, _ := strconv.ParseInt(string(m[1]), 10, 64); n != first {
		t.Errorf("docs/design.md says %q, the gate's first fold of a new team is %d minutes in", m[0], first)
	}
	m = regexp.MustCompile(`a\s+cron\s+job's\s+(\d+)\s+minutes\s+an\s+hour\)\s+is\s+never\s+learned`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/design.md does not say that a team sending in short bursts is never learned")
	}
	burst, _ := strconv.Atoi(string(m[1]))
	if got := firstFolded(t, time.Duration(burst)*time.Minute, 12); got >= 0 {
		t.Errorf("docs/design.md says %q; such a team was folded, from %d minutes after it was met", m[0], got)
	}
}
