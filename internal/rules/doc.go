// Package rules is the gate's rule set: which limits a record is checked against, keyed
// by what, and what happens to it when one of them is over. It knows no transport: it
// reads and checks a rules file, says which rules a record's fields select, and turns the
// rules' verdicts into one outcome; the router reads the fields and the limiters count.
//
// A rule has a stable name, a key (the GATE_KEY_FROM language: json:FIELD[+FIELD...],
// header:NAME or key) and what a record without that key gets (dead_letter, as today, or
// skip: the rule does not apply to it), an optional match on a field's value (in a list, or not in it), its
// limits (WINDOW:THRESHOLD, as GATE_LIMITS), a threshold mode (static or adaptive, for its
// first limit), a mode (divert or cap), a cost (events or bytes), an action when over
// (overflow, tag, or topic:NAME) and whether it is a shadow rule (counted, measured and
// logged as if enforced, never changing where a record goes).
//
// Guarantees:
//
//   - Parse reads a whole file or nothing: every problem is reported, each naming the
//     file, its line and column, and the field at fault (rules[2] "merges".limits[0]), on
//     one line joined by "; ". Unknown fields, duplicate names and windows, empty limits,
//     malformed keys and topics are errors, never ignored.
//   - Outcome is deterministic and total: the strongest action of the rules over wins
//     (a topic of its own, then overflow, then tag, then none; between two topics, the
//     earlier rule's), and every rule that was over is named, enforced and shadow apart.
//     A shadow rule never changes an outcome.
//   - Counting across rules (Plan): rules are taken in file order. A divert rule counts
//     every record it matches (its window measures the key's offered rate). A cap rule
//     counts the records it admits, except those an earlier enforced rule already sent
//     away (overflow or a topic): a runaway user diverted by a user rule listed first does
//     not use up its team's cap. Tagged records stay on accepted and are counted by every
//     later rule. Put the narrowest rules first.
//   - A Reloader keeps the last good set: a rules file that becomes unreadable or invalid
//     is logged (once per distinct content) and counted in gate_rules_loads_total
//     {result="error"}, and the set in use does not change. No package-level state.
package rules
