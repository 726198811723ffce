package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/endpoints"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

const teamUsage = `Usage: gate team [-addr HOST:PORT] TEAM
       gate team [-addr HOST:PORT] -top N

Asks a running gate (its GATE_HTTP_ADDR; -addr overrides) how it sees TEAM, from
GET /v1/teams/TEAM, and prints it as a table; with -top N, lists its N teams closest to or
over their limits (highest pressure first, N from 1 to 1000), from GET /v1/teams?top=N.
Each gate sees the teams of the partitions it owns: ask the gates that consume them. A
team the gate has no state for (it has sent nothing there lately) is an error: exit
status 1. The gate serves these with GATE_TEAM_API=true only. UNDER IN is how long a
limited team's level takes to drain under its threshold if it sends nothing more: a team
still sending is limited longer.
`

// teamLimit bounds gate team's request, so that a gate that does not answer (overloaded,
// or -addr a port that accepts and says nothing) does not hold the command for ever.
const teamLimit = 5 * time.Second

// teamFlags is gate team's flag set, bound to addr and top.
func teamFlags(addr *string, top *int) *flag.FlagSet {
	fs := flag.NewFlagSet("team", flag.ContinueOnError)
	fs.StringVar(addr, "addr", "", "the `HOST:PORT` of the gate's HTTP server (default: from GATE_HTTP_ADDR, else 127.0.0.1:8080)")
	fs.IntVar(top, "top", 0, "list the gate's `N` teams closest to or over their limits, in place of one TEAM (N from 1 to 1000)")
	return fs
}

// teamCmd runs `gate team TEAM` and `gate team -top N`.
func teamCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var addr string
	var top int
	fs := teamFlags(&addr, &top)
	args, done, err := parseCommand(fs, teamUsage, args, stderr)
	if done || err != nil {
		return err
	}
	topSet := cli.Set(fs, "top")
	switch {
	case topSet && len(args) > 0:
		fs.Usage()
		return &cli.UsageError{Msg: fmt.Sprintf("team: -top lists teams and takes no TEAM, got %q", args)}
	case topSet && (top < 1 || top > endpoints.MaxTop):
		return &cli.UsageError{Msg: fmt.Sprintf("team: -top %d: want a number of teams from 1 to %d", top, endpoints.MaxTop)}
	case !topSet && (len(args) != 1 || args[0] == ""):
		fs.Usage()
		return &cli.UsageError{Msg: fmt.Sprintf("team: want one TEAM, or -top N to list the teams closest to their limits; got %q", args)}
	}
	base, err := gateURL("team", addr, fs, getenv)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, teamLimit)
	defer cancel()
	if topSet {
		err = teamTop(rctx, base, top, stdout)
	} else {
		err = teamOne(rctx, base, args[0], stdout)
	}
	// The deadline alone reads "context deadline exceeded": say it is the command's own
	// (the caller's context still live), and how long it waited for which gate.
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("team: no answer from the gate at %s within %s, the command's limit (is it overloaded, or is that not its HTTP address?): %w",
			strings.TrimPrefix(base, "http://"), durtext.String(teamLimit), err)
	}
	return err
}

// teamOne runs `gate team TEAM` against the gate at base.
func teamOne(ctx context.Context, base, team string, stdout io.Writer) error {
	// "." and ".." are path segments a server cleans away (the mux redirects
	// /v1/teams/. to /v1/teams): escape their dots, which the mux unescapes in the value.
	seg := url.PathEscape(team)
	if team == "." || team == ".." {
		seg = strings.Repeat("%2E", len(team))
	}
	u := base + "/v1/teams/" + seg
	code, body, err := askGate(ctx, u, 1<<20)
	if err != nil {
		return err
	}
	switch code {
	case http.StatusOK:
	case http.StatusNotFound:
		// The team view's own 404 (JSON) says the gate has no state for the team: a failure,
		// as a script asking about a team must be able to tell.
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("team %s: no state on the gate at %s: %s", cli.Shown(team), strings.TrimPrefix(base, "http://"), e.Error)
		}
		return fmt.Errorf("asking %s: 404 (is GATE_TEAM_API off on that gate?)", u)
	default:
		return fmt.Errorf("asking %s: %d %s: %s", u, code, http.StatusText(code), strings.TrimSpace(string(body)))
	}
	var t endpoints.TeamJSON
	if err := json.Unmarshal(body, &t); err != nil {
		return fmt.Errorf("reading the answer from %s: %w", u, err)
	}
	state := "under its limits"
	if t.Limited {
		state = "LIMITED"
	}
	// The team asked, as the tables show it: the answer's JSON has any byte that is not
	// UTF-8 replaced, and a newline or an escape sequence would reach the terminal.
	if _, err := fmt.Fprintf(stdout, "team %s: %s\n", cli.Shown(team), state); err != nil {
		return err
	}
	// Whose view this is: a gate counts with the fleet under its Redis prefix only, and
	// `gate overrides` must be given the same prefix to change this team's limit there.
	if t.Gate != nil {
		if _, err := fmt.Fprintf(stdout, "as seen by the gate at %s: Redis prefix %q (GATE_REDIS_PREFIX for gate overrides), consumer group %q\n",
			strings.TrimPrefix(base, "http://"), t.Gate.RedisPrefix, t.Gate.ConsumerGroup); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	// With rules, a row per limit of each rule that has state for the key: the rule first.
	byRule := slices.ContainsFunc(t.Limits, func(l endpoints.LimitJSON) bool { return l.Rule != "" })
	if byRule {
		fmt.Fprint(tw, "RULE\t")
	}
	fmt.Fprintln(tw, "WINDOW\tTHRESHOLD\tLEVEL\tPRESSURE\tTIER\tLIMITED\tUNDER IN\tGLOBAL EST.\tEST. AGE\tPENDING\tSHARE\tDIVERTED SINCE\tRELEASE AT\tBASELINE\tSPIKE SINCE")
	for _, l := range t.Limits {
		thr := thresholdText(l)
		base, spiking := "-", "-"
		if l.Baseline != nil {
			base = strconv.FormatFloat(*l.Baseline, 'f', 0, 64)
		}
		if l.SpikeSince != nil {
			spiking = l.SpikeSince.UTC().Format(time.RFC3339)
		}
		age := "never read"
		if l.EstimateAgeSeconds != nil {
			age = durtext.String((time.Duration(*l.EstimateAgeSeconds * float64(time.Second))).Round(100 * time.Millisecond))
			if l.EstimateLocal {
				age += " (Redis unread: local)" // the last read failed: the estimate is this gate's
			}
		}
		under := underText(l)
		since, release := "-", "-"
		if l.DivertedSince != nil && l.ReleaseAt != nil {
			since = l.DivertedSince.UTC().Format(time.RFC3339)
			release = "not before " + l.ReleaseAt.UTC().Format(time.RFC3339)
		}
		if byRule {
			fmt.Fprintf(tw, "%s\t", ruleText(l.Rule, l.Shadow))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f%%\t%s\t%v\t%s\t%.0f\t%s\t%d\t%.2f\t%s\t%s\t%s\t%s\n",
			windowText(l.Window), thr, l.Level, 100*l.Pressure, l.Tier, l.Limited, under, l.GlobalEstimate, age, l.Pending, l.FleetShare, since, release, base, spiking)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// A forced key: why it is limited whatever its figures, once per rule.
	forcedBy := map[string]bool{}
	for _, l := range t.Limits {
		if !l.Forced || forcedBy[l.Rule] {
			continue
		}
		forcedBy[l.Rule] = true
		why := "forced by GATE_FORCE_OVERFLOW: every record of it goes to overflow (reason forced)"
		switch {
		case l.Shadow:
			why = "in shadow rule " + l.Rule + "'s force list: every record of it the rule matches is counted as forced, and goes where the other rules send it,"
		case l.Rule != "":
			why = "forced by rule " + l.Rule + "'s force list: every record of it the rule matches takes the rule's action (reason forced)"
		}
		if _, err := fmt.Fprintf(stdout, "%s whatever its level; its threshold applies once it is taken out of the list\n", why); err != nil {
			return err
		}
	}
	// Keys under the floor, and teams rotating identities: what the table's figures mean.
	for _, l := range t.Limits {
		if l.UnderFloor {
			// In the rule's unit and the table's window text (a review: "records" of a
			// bytes rule, "1m0s" beside the table's "1m").
			unit := "records"
			if l.Unit == route.CostBytes.String() {
				unit = "bytes"
			}
			if _, err := fmt.Fprintf(stdout, "rule %s (%s window): under its floor on this gate (%d %s a window): counted in the rule's sketch (the level: at least its %s), neither written to Redis nor read; it is cached at its floor\n",
				l.Rule, windowText(l.Window), l.Floor, unit, unit); err != nil {
				return err
			}
		}
	}
	for _, r := range t.Rotating {
		if _, err := fmt.Fprintf(stdout, "rule %s: rotating identities since %s: about %d distinct keys this window on this gate, more than the rule's max_keys; its keys under the floor take on_cardinality: %s (docs/rules.md)\n",
			r.Rule, r.Since.UTC().Format(time.RFC3339), r.Keys, r.OnCardinality); err != nil {
			return err
		}
	}
	// Why a team is over by spike protection, and what ends it.
	for _, l := range t.Limits {
		if len(l.PatternHoursUTC) > 0 {
			hours := make([]string, len(l.PatternHoursUTC))
			for i, h := range l.PatternHoursUTC {
				hours[i] = fmt.Sprintf("%02d:00", h)
			}
			if _, err := fmt.Fprintf(stdout, "spike protection (%s window): daily pattern at %s UTC (a burst there three days running, such as a nightly import): the threshold of those hours follows their highest windows; a day without a burst there ends it\n",
				windowText(l.Window), strings.Join(hours, ", ")); err != nil {
				return err
			}
		}
		if l.SpikeSince == nil || l.LearnedThreshold == nil || l.Baseline == nil {
			continue
		}
		if _, err := fmt.Fprintf(stdout, "spike protection (%s window): over its learned threshold %d (its usual %.0f a window at this hour and day, times GATE_ADAPTIVE_FACTOR) since %s; if it stays over, it is re-learned at its new volume and accepted by %s (GATE_ADAPTIVE_MAX_SPIKE); an override or GATE_ADAPTIVE_CEILING still caps it\n",
			windowText(l.Window), *l.LearnedThreshold, *l.Baseline, l.SpikeSince.UTC().Format(time.RFC3339), l.SpikeEnds.UTC().Format(time.RFC3339)); err != nil {
			return err
		}
	}
	return nil
}

// askGate GETs u and returns the status and the body, of at most limit bytes.
func askGate(ctx context.Context, u string, limit int64) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("asking %s: %w", u, err)
	}
	resp, err := directClient().Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("asking the gate at %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer from %s: %w", u, err)
	}
	return resp.StatusCode, body, nil
}

// directClient is the client gate team and gate healthcheck ask a gate with. Not
// http.DefaultClient: its HTTP_PROXY / HTTPS_PROXY, set in many containers for their way
// out, would take the question to a gate (a GATE_HTTP_ADDR host other than a loopback
// address, or -addr's) to a proxy, which fails it or answers for another.
func directClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy, tr.DisableKeepAlives = nil, true
	return &http.Client{Transport: tr}
}

// teamTop runs `gate team -top n` against the gate at base: its n teams closest to or
// over their limits, as the gate ranks them (the highest pressure over a team's limits
// first), a row per limit of each.
func teamTop(ctx context.Context, base string, n int, stdout io.Writer) error {
	u := base + "/v1/teams?top=" + strconv.Itoa(n)
	// Up to endpoints.MaxTop teams of a row per limit each: far more than one team's answer.
	code, body, err := askGate(ctx, u, 64<<20)
	if err != nil {
		return err
	}
	switch code {
	case http.StatusOK:
	case http.StatusNotFound:
		return fmt.Errorf("asking %s: 404 (is GATE_TEAM_API off on that gate?)", u)
	default:
		return fmt.Errorf("asking %s: %d %s: %s", u, code, http.StatusText(code), strings.TrimSpace(string(body)))
	}
	var a endpoints.TopAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return fmt.Errorf("reading the answer from %s: %w", u, err)
	}
	where := strings.TrimPrefix(base, "http://")
	// A gate not ready (starting, stopped on a partition) caches no team, or fewer, for
	// that reason: said, not blamed on the teams' traffic.
	notReady := ""
	if len(a.NotReady) > 0 {
		notReady = "it is not ready (/readyz): " + strings.Join(a.NotReady, "; ")
	}
	if len(a.Teams) == 0 {
		_, err := fmt.Fprintf(stdout, "no teams cached on the gate at %s: %s\n", where, cmp.Or(notReady, "none has sent anything there lately"))
		return err
	}
	if notReady != "" {
		if _, err := fmt.Fprintf(stdout, "the gate at %s: %s\n", where, notReady); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(stdout, "%d teams on the gate at %s, closest to or over their limits first: Redis prefix %q (GATE_REDIS_PREFIX for gate overrides), consumer group %q\n",
		len(a.Teams), where, a.Gate.RedisPrefix, a.Gate.ConsumerGroup); err != nil {
		return err
	}
	byRule := slices.ContainsFunc(a.Teams, func(t endpoints.TeamJSON) bool {
		return len(t.Rotating) > 0 || slices.ContainsFunc(t.Limits, func(l endpoints.LimitJSON) bool { return l.Rule != "" })
	})
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "TEAM\t")
	if byRule {
		fmt.Fprint(tw, "RULE\t")
	}
	fmt.Fprintln(tw, "WINDOW\tTHRESHOLD\tLEVEL\tPRESSURE\tTIER\tLIMITED\tUNDER IN")
	for _, t := range a.Teams {
		for _, l := range t.Limits {
			fmt.Fprintf(tw, "%s\t", shownTeam(t))
			if byRule {
				fmt.Fprintf(tw, "%s\t", orDash(ruleText(l.Rule, l.Shadow)))
			}
			under := underText(l)
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f%%\t%s\t%v\t%s\n", windowText(l.Window), thresholdText(l), l.Level, 100*l.Pressure, l.Tier, l.Limited, under)
		}
		// A team rotating identities may have no limit row at all (on_cardinality overflow
		// or tag caches none of its keys under the floor): a row of its own, so that no
		// team the heading counts is missing from the table.
		for _, r := range t.Rotating {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\trotating\t%v\t-\n", shownTeam(t), ruleText(r.Rule, r.Shadow), r.OnCardinality == limit.CardinalityOverflow.String() && !r.Shadow)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range a.Teams {
		for _, r := range t.Rotating {
			if _, err := fmt.Fprintf(stdout, "%s: rotating identities under rule %s since %s: about %d distinct keys this window on this gate, more than its max_keys; its keys under the floor take on_cardinality: %s\n",
				shownTeam(t), r.Rule, r.Since.UTC().Format(time.RFC3339), r.Keys, r.OnCardinality); err != nil {
				return err
			}
		}
	}
	return nil
}

// ruleText is a rule's name as the tables show it: a shadow rule's marked, as its rows
// say what it would do, not what happens to the records.
func ruleText(rule string, shadow bool) string {
	if shadow {
		return rule + " (shadow)"
	}
	return rule
}

// shownTeam is t's key as gate team shows a key (cli.Shown): from team_quoted when it is
// not UTF-8, as the JSON's team has each such byte U+FFFD.
func shownTeam(t endpoints.TeamJSON) string {
	return cmp.Or(t.TeamQuoted, cli.Shown(t.Team))
}

// underText is the UNDER IN column of l: how long its level takes to drain under its
// threshold, for a limited team, or "forced" for a forced key, which no level releases. A wait of 0 for a team over its threshold and not held
// is no wait: under the event clock the view gives none (how soon depends on the
// partitions' event time), and "0s" would read as under now.
func underText(l endpoints.LimitJSON) string {
	if l.Forced {
		return "forced" // never under while it is in the force list
	}
	if !l.Limited || l.SecondsUntilUnder <= 0 && l.DivertedSince == nil {
		return "-"
	}
	d := time.Duration(l.SecondsUntilUnder * float64(time.Second))
	if d < time.Second/2 && !l.Forced && l.SecondsUntilUnder > 0 {
		return "<1s" // rounded, "0s" beside LIMITED true read as a contradiction
	}
	return durtext.String(d.Round(time.Second))
}

// thresholdText is l's threshold as the tables show it, in bytes when it counts bytes
// (GATE_COST=bytes: the level beside it too), with where it comes from when it is not
// the configured one.
func thresholdText(l endpoints.LimitJSON) string {
	thr := strconv.FormatInt(l.Threshold, 10)
	if l.Unit == route.CostBytes.String() {
		thr += " bytes"
	}
	switch {
	case l.Override:
		thr += " (override)"
	case l.ThresholdMode == "adaptive":
		thr += " (" + l.ThresholdSource + ")" // learned, or static until learned
	}
	return thr
}

// gateURL is the http:// base of the gate a subcommand (cmd) asks: addr, else
// GATE_HTTP_ADDR, else :8080, a listen-anywhere host meaning this machine's gate. fs is the
// subcommand's parsed flags: an -addr given empty (a variable of a script unset, say) is
// refused rather than taken as not given, which asked another gate than the one meant.
func gateURL(cmd, addr string, fs *flag.FlagSet, getenv func(string) string) (string, error) {
	if addr == "" && cli.Set(fs, "addr") {
		return "", &cli.UsageError{Msg: fmt.Sprintf("%s: -addr is empty: want HOST:PORT such as 127.0.0.1:8080 (or leave -addr out for GATE_HTTP_ADDR's)", cmd)}
	}
	// Trimmed, as config.Load reads it: the address the gate listens on.
	env := strings.TrimSpace(getenv("GATE_HTTP_ADDR"))
	target := cmp.Or(addr, env, ":8080")
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		if addr == "" { // from the environment: name the variable, as config.Load does
			return "", config.Problems{fmt.Errorf("GATE_HTTP_ADDR=%q: want host:port such as :8080 or 127.0.0.1:8080 (or give %s -addr HOST:PORT)", env, cmd)}
		}
		return "", &cli.UsageError{Msg: fmt.Sprintf("%s: -addr %q is not host:port", cmd, target)}
	}
	// Port 0 has the gate listen on a free port it chooses at start (its start-up line's
	// http_addr): asked at port 0, the dial failed as if no gate ran.
	if strings.Trim(port, "0") == "" && port != "" {
		if addr == "" {
			return "", config.Problems{fmt.Errorf("GATE_HTTP_ADDR=%q: port 0 has the gate choose a free port at start, which %s cannot know: give %s -addr HOST:PORT, the start-up line's http_addr", env, cmd, cmd)}
		}
		return "", &cli.UsageError{Msg: fmt.Sprintf("%s: -addr %q: port 0 is no port to ask: give the gate's, the start-up line's http_addr", cmd, target)}
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1" // a listen-anywhere address: ask the local gate
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// windowText is a limit's window, the API's time.Duration text (1m0s), as a rules file
// and GATE_LIMITS write it (1m); the JSON keeps its text.
func windowText(w string) string {
	if d, err := time.ParseDuration(w); err == nil {
		return durtext.String(d)
	}
	return w
}
