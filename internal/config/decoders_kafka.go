package config

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/keypart"
	"github.com/capturegate/gate/internal/route"
)

// brokerList is GATE_KAFKA_BROKERS: host:port entries separated by commas.
type brokerList []string

func (brokerList) want() string {
	return "host:port entries separated by commas such as kafka-1:9092,kafka-2:9092"
}

// Decode refuses an '@' first, without repeating the value: no host:port holds one, and
// one here is a URL's or its user info's (redis://:password@sentinel:26379), whose
// password the error would show, or the gate's start line and /readyz, had the rest read
// as a host name (password@sentinel).
func (b *brokerList) Decode(text string) error {
	if i := slices.IndexFunc(strings.Split(text, ","), func(s string) bool { return strings.Contains(s, "@") }); i >= 0 {
		return fmt.Errorf("entry %d holds an '@', as a URL's user name or password would: want host:port alone, the credentials set by their own variables", i+1)
	}
	var out brokerList
	for i, s := range strings.Split(text, ",") {
		s = strings.TrimSpace(s)
		host, port, err := net.SplitHostPort(s)
		switch {
		case s == "":
			return fmt.Errorf("entry %d is empty", i+1)
		case err != nil || host == "" || !validPort(port) || strings.Trim(port, "0") == "": // port 0 or 00
			return fmt.Errorf("entry %q is not host:port", s)
		case strings.ContainsFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
			// No host name or address holds one: the gate would start and wait, not ready,
			// on a name no resolver answers.
			return fmt.Errorf("entry %q: host %q holds a space or control character", s, host)
		}
		out = append(out, s)
	}
	*b = out
	return nil
}

func (brokerList) redact(s string) string { return redactHosts(s) }

// redactHosts is a host:port list as errors show it: whole, unless it holds an '@' (see
// brokerList.Decode), and then none of it, as a password may hold a ',' too.
func redactHosts(s string) string {
	if strings.Contains(s, "@") {
		return "(redacted: it holds an '@')"
	}
	return s
}

// startOffset is GATE_KAFKA_START_OFFSET.
type startOffset string

func (startOffset) want() string { return "earliest or latest" }

func (s *startOffset) Decode(text string) error {
	switch v := strings.ToLower(text); v {
	case "earliest", "latest":
		*s = startOffset(v)
		return nil
	}
	return fmt.Errorf("unknown start offset %q", text)
}

func (s startOffset) value() consume.StartOffset {
	if s == "latest" {
		return consume.StartLatest
	}
	return consume.StartEarliest
}

// keyFrom is GATE_KEY_FROM.
type keyFrom struct{ route.KeyFrom }

func (keyFrom) want() string { return "json:FIELD, json:FIELD+FIELD, header:NAME or key" }

// delivery is GATE_DELIVERY.
type delivery string

func (delivery) want() string {
	return consume.AtLeastOnce.String() + " or " + consume.ExactlyOnce.String()
}

// Decode takes the names consume.ParseDelivery reads, in any case.
func (d *delivery) Decode(text string) error {
	v, err := consume.ParseDelivery(strings.ToLower(text))
	if err != nil {
		return fmt.Errorf("unknown delivery %q", text)
	}
	*d = delivery(v.String())
	return nil
}

func (d delivery) value() consume.Delivery {
	v, _ := consume.ParseDelivery(string(d))
	return v
}

// groupProtocol is GATE_KAFKA_GROUP_PROTOCOL.
type groupProtocol string

func (groupProtocol) want() string {
	return consume.GroupClassic.String() + " or " + consume.GroupConsumer.String()
}

// Decode takes the names consume.ParseGroupProtocol reads, in any case.
func (g *groupProtocol) Decode(text string) error {
	v, err := consume.ParseGroupProtocol(strings.ToLower(text))
	if err != nil {
		return fmt.Errorf("unknown group protocol %q", text)
	}
	*g = groupProtocol(v.String())
	return nil
}

func (g groupProtocol) value() consume.GroupProtocol {
	v, _ := consume.ParseGroupProtocol(string(g))
	return v
}

// onUndeliverable is GATE_ON_UNDELIVERABLE.
type onUndeliverable string

func (onUndeliverable) want() string { return "stop or skip" }

func (u *onUndeliverable) Decode(text string) error {
	v := strings.ToLower(text)
	if _, err := consume.ParseUndeliverable(v); err != nil {
		return fmt.Errorf("unknown policy %q", text)
	}
	*u = onUndeliverable(v)
	return nil
}

func (u onUndeliverable) value() consume.Undeliverable {
	p, _ := consume.ParseUndeliverable(string(u))
	return p
}

// onDataLoss is GATE_ON_DATA_LOSS.
type onDataLoss string

func (onDataLoss) want() string { return "continue or stop" }

func (d *onDataLoss) Decode(text string) error {
	v := strings.ToLower(text)
	if _, err := consume.ParseDataLoss(v); err != nil {
		return fmt.Errorf("unknown policy %q", text)
	}
	*d = onDataLoss(v)
	return nil
}

func (d onDataLoss) value() consume.DataLoss {
	p, _ := consume.ParseDataLoss(string(d))
	return p
}

// cost is GATE_COST.
type cost struct{ route.Cost }

func (cost) want() string { return "events or bytes" }

// Decode reads GATE_COST, saying only what is wrong: the router's own error names its
// package and the values wanted, which the line's want says already.
func (c *cost) Decode(text string) error {
	if err := c.Cost.UnmarshalText([]byte(strings.ToLower(text))); err != nil { // in any case, as every enumeration
		return fmt.Errorf("unknown cost %q", text)
	}
	return nil
}

// teamList is GATE_FORCE_OVERFLOW: team names separated by commas.
type teamList []string

func (teamList) want() string { return "team names separated by commas such as team1,team2" }

func (l *teamList) Decode(text string) error {
	var out teamList
	seen := map[string]bool{}
	for i, s := range strings.Split(text, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
			return fmt.Errorf("entry %d is empty", i+1)
		case seen[s]:
			return fmt.Errorf("team %q appears twice", s)
		}
		if err := listSeparatorIn(s, false); err != nil {
			return err
		}
		if err := invisibleAtEdge(s); err != nil {
			return err
		}
		seen[s] = true
		out = append(out, s)
	}
	*l = out
	return nil
}

// saslMechanism is GATE_KAFKA_SASL_MECHANISM.
type saslMechanism string

func (saslMechanism) want() string { return "none, plain, scram-sha-256 or scram-sha-512" }

func (m *saslMechanism) Decode(text string) error {
	switch s := strings.ToLower(text); s {
	case "none", "plain", "scram-sha-256", "scram-sha-512":
		*m = saslMechanism(s)
		return nil
	}
	return fmt.Errorf("unknown mechanism %q", text)
}

// afterLimit finds, in what GATE_OVERRIDES read as one entry's team, an entry's limit
// and a separator other than a comma after it: team1=5000;team2 or team1=5000 team2.
var afterLimit = regexp.MustCompile(`=[0-9]+[\s;]`)

// listSeparatorIn refuses a team of GATE_OVERRIDES or GATE_FORCE_OVERFLOW that holds a
// line break or other control character (a Helm block scalar of one entry a line), or,
// found, entries separated by something other than a comma: read as one team named so,
// the teams listed got nothing of it, silently (a review: team1=5000 and team2=200000 a
// line each made one override, of a team "team1=5000\nteam2").
func listSeparatorIn(team string, found bool) error {
	if found || strings.ContainsFunc(team, unicode.IsControl) {
		return fmt.Errorf("team %q holds a line break, a control character or another entry: entries are separated by commas", team)
	}
	return nil
}

// invisibleAtEdge refuses a team of GATE_OVERRIDES or GATE_FORCE_OVERFLOW that starts or
// ends with a format character (category Cf: a zero-width space, a word joiner, a byte
// order mark), which editors and logs show as nothing: copied with the team from a page,
// it named a key no record has, taken without a word. Spaces there, a non-breaking one
// too, are trimmed before (strings.TrimSpace); a rules file's force entries are refused
// so too (internal/rules), and gate overrides' keys (keypart.OddAtEdge, shared with it).
func invisibleAtEdge(team string) error {
	if r, what := keypart.OddAtEdge(team); r != 0 {
		return fmt.Errorf("team %q starts or ends with %s (U+%04X): remove it", team, what, r)
	}
	return nil
}
