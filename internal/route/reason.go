package route

import "fmt"

// Route is where a record goes.
type Route uint8

// The three destinations. Every record gets exactly one.
const (
	Accepted Route = iota
	Overflow
	DeadLetter
	// RuleTopic is a rule's own topic (action topic:NAME), with rules only.
	RuleTopic
	// Dropped is nowhere: a rule's drop action, with outcomes on only (the record is
	// counted in its outcome row, and its offset committed, but it is not produced).
	Dropped
	numRoutes
)

// String returns the route's name as used in metrics: accepted, overflow or dead_letter.
func (r Route) String() string {
	switch r {
	case Accepted:
		return "accepted"
	case Overflow:
		return "overflow"
	case DeadLetter:
		return "dead_letter"
	case RuleTopic:
		return "rule_topic"
	case Dropped:
		return "dropped"
	}
	return fmt.Sprintf("Route(%d)", uint8(r))
}

// Reasons, as given in Outcome.Reason, the reason label of the metrics and the gate's
// headers. Each belongs to one route.
const (
	// Accepted.
	ReasonAllowed = "allowed" // the team is under its threshold
	ReasonDryRun  = "dry_run" // dry run: accepted although enforcement would have sent it elsewhere
	ReasonTagged  = "tagged"  // rules: accepted with a gate-tag header from a tagging rule over

	// Overflow, also the value of the gate-overflow-reason header.
	ReasonRateLimited = "rate_limited" // the team's level reached its threshold
	ReasonForced      = "forced"       // the team is in Config.ForceOverflow
	// ReasonKeyCardinality: rules, a key of a team rotating identities (more distinct keys
	// in a window than the rule's max_keys) under on_cardinality: overflow.
	ReasonKeyCardinality = "key_cardinality"

	// Dropped.
	ReasonDropped = "dropped" // rules: a dropping rule (action drop) was over

	// Dead letter, also the value of the gate-error header.
	ReasonNotJSON       = "not_json"       // json source: value empty, not valid JSON, or not an object
	ReasonFieldMissing  = "field_missing"  // json source: field absent or null
	ReasonFieldType     = "field_type"     // json source: field is a boolean, object or array
	ReasonFieldEmpty    = "field_empty"    // json field is "", or the header is present but empty
	ReasonAmbiguousTeam = "ambiguous_team" // json source: the field, or a part of its path, appears more than once
	ReasonKeyTooLong    = "key_too_long"   // team key longer than Config.MaxKeyBytes
	ReasonHeaderMissing = "header_missing" // header source: no header of that name
	ReasonKeyMissing    = "key_missing"    // key source: record key nil or empty
	ReasonRejected      = "rejected"       // DeadLetter: the broker refused the routed record for good
)

// DeadLetterReasons are the gate-error values a dead letter can carry, the reasons whose
// route is DeadLetter in reasonCode's order: what gate redrive -reason takes.
func DeadLetterReasons() []string {
	var out []string
	for c := reasonNone + 1; c < numReasons; c++ {
		if c.route() == DeadLetter {
			out = append(out, c.String())
		}
	}
	return out
}

// reasonCode is a reason as a small integer, to index the pre-resolved metrics and header
// values without a map lookup.
type reasonCode uint8

const (
	reasonNone reasonCode = iota // no failure
	reasonAllowed
	reasonDryRun
	reasonTagged
	reasonRateLimited
	reasonForced
	reasonNotJSON
	reasonFieldMissing
	reasonFieldType
	reasonFieldEmpty
	reasonAmbiguousTeam
	reasonKeyTooLong
	reasonHeaderMissing
	reasonKeyMissing
	reasonRejected
	reasonKeyCardinality
	reasonDropped
	numReasons
)

// reasonNames is read-only.
var reasonNames = [numReasons]string{
	reasonNone:           "",
	reasonAllowed:        ReasonAllowed,
	reasonDryRun:         ReasonDryRun,
	reasonTagged:         ReasonTagged,
	reasonRateLimited:    ReasonRateLimited,
	reasonForced:         ReasonForced,
	reasonNotJSON:        ReasonNotJSON,
	reasonFieldMissing:   ReasonFieldMissing,
	reasonFieldType:      ReasonFieldType,
	reasonFieldEmpty:     ReasonFieldEmpty,
	reasonAmbiguousTeam:  ReasonAmbiguousTeam,
	reasonKeyTooLong:     ReasonKeyTooLong,
	reasonHeaderMissing:  ReasonHeaderMissing,
	reasonKeyMissing:     ReasonKeyMissing,
	reasonRejected:       ReasonRejected,
	reasonKeyCardinality: ReasonKeyCardinality,
	reasonDropped:        ReasonDropped,
}

func (c reasonCode) String() string {
	if c < numReasons {
		return reasonNames[c]
	}
	return fmt.Sprintf("reasonCode(%d)", uint8(c))
}

// route returns the route a reason belongs to.
func (c reasonCode) route() Route {
	switch c {
	case reasonAllowed, reasonDryRun, reasonTagged:
		return Accepted
	case reasonRateLimited, reasonForced, reasonKeyCardinality:
		return Overflow
	case reasonDropped:
		return Dropped
	}
	return DeadLetter
}
