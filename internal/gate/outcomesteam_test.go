package gate

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/redistest"
)

// With outcomes on, the rules line says what the rows' team is read by and whose rows are
// filed after it: a file without team: whose rules start with two fields (a team rule,
// and one keyed by an IP and a user agent) takes the IP for the team, the team rule's
// rows then under each IP, said nowhere but by gate rules check (a review). A reload's
// line says it again.
func TestRulesLineSaysTheOutcomesTeam(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, "rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n  - {name: ipua, key: json:ip+ua, limits: [1m:100]}\n")
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS":  "127.0.0.1:1",
		"GATE_REDIS_URLS":     srv.URL(),
		"GATE_RULES_FILE":     path,
		"GATE_OUTCOMES_TOPIC": "events_outcomes",
	})
	g, logs := startReloadingLogged(t, cfg, "outcomes-team-test")
	g.LogRules()
	if want := `outcomes_team=json:ip outcomes_team_from="not given: `; !strings.Contains(logs.String(), want) {
		t.Errorf("the rules line lacks %s:\n%s", want, logs)
	}
	if want := `outcomes_rows_after_the_team=[team]`; !strings.Contains(logs.String(), want) {
		t.Errorf("the rules line lacks %s:\n%s", want, logs)
	}
	writeRules(t, path, "team: json:team_id\nrules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n  - {name: ipua, key: json:ip+ua, limits: [1m:100]}\n")
	waitFor(t, "the reload's rules line", func() bool {
		return strings.Contains(logs.String(), `generation=2`) && strings.Contains(logs.String(), `outcomes_team=json:team_id outcomes_team_from=team: outcomes_rows_after_the_team=[ipua]`)
	})
}
