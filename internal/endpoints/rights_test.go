package endpoints

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/redistest"
)

// TestReadinessWaitsForTheTicksRights: a gate whose Redis user answers PING but may not
// run the tick's commands (an ACL written before the write script, without +eval; one
// without +pexpire, whose counters would never expire) was ready, and every tick was
// refused: the counts reached no other gate, each gate limiting alone, N gates letting
// N times a limit through, with only GateRedisErrors to say so after five minutes. A
// rollout with such an ACL must stop at its first pod, as one with a topic's ACL missing
// does: /readyz names the refusal until the rights are granted.
func TestReadinessWaitsForTheTicksRights(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, tc := range []struct{ user, acl, refused string }{
		{"old", "+get +set +incrby +pexpire +mget +ping +hello +info", "'eval'"},
		// Redis 7.0 names no command refused inside a script: the reason names it
		// (the script's calls were all listed, the missing one not said).
		{"noexpire", "+eval +get +set +incrby +mget +ping +hello +info", "the call refused: PEXPIRE, +pexpire missing"},
		{"keys", "+eval +get +set +incrby +pexpire +mget +ping +hello +info", "one of the keys"},
		// GATE_COST=bytes keeps the counters under gate/bytes: ~gate:* alone refuses them.
		{"bytes", "+eval +get +set +incrby +pexpire +mget +ping +hello +info", "gate/bytes:probe:rights"},
	} {
		pattern := "~gate:*"
		if tc.user == "keys" {
			pattern = "~other:*"
		}
		args := []any{"ACL", "SETUSER", tc.user, "on", ">pw", "resetkeys", pattern, "-@all"}
		for _, a := range strings.Fields(tc.acl) {
			args = append(args, a)
		}
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"GATE_REDIS_URLS": srv.URLAs(tc.user, "pw")}
		if tc.user == "bytes" {
			env["GATE_COST"] = "bytes"
		}
		r, logs := readinessFromEnv(t, env)
		waitFor := func(what string, cond func() bool) {
			t.Helper()
			for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: no %s in 30s; /readyz %q; log:\n%s", tc.user, what, r.reasons(), logs.String())
				}
			}
		}
		waitFor("reason naming the refusal", func() bool {
			why := strings.Join(r.reasons(), "; ")
			return strings.Contains(why, "refuses the tick's commands") && strings.Contains(why, tc.refused)
		})
		// The probe sets the reason, then logs: the line may follow /readyz's answer.
		waitFor("warning of the refusal", func() bool {
			return strings.Contains(logs.String(), "redis answers but refuses the tick's commands")
		})
		if err := admin.Do(ctx, "ACL", "SETUSER", tc.user, "~gate:*", "~gate/bytes:*", "+eval", "+pexpire").Err(); err != nil {
			t.Fatal(err)
		}
		waitFor("readiness once granted", func() bool { return len(r.reasons()) == 0 })
	}
}
