// Package rules is the gate's rule set: which limits a record is checked against, keyed
// by what, and what happens to it when one of them is over. It knows no transport: it
// reads and checks a rules file and keeps it in step with its edits; the router
// (route.NewRules) reads each record's fields and decides, and the limiters count.
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
//     one line joined by "; ". A file that is not YAML is one problem in the same form,
//     without a field: FILE:LINE:COL: and the YAML library's message (naming a tab found
//     there, which the library's message often does not), at the line and column where
//     the file stops being YAML (column 1 where finding it would read too much). A file of
//     nothing but comments and --- is an empty file. Unknown fields, duplicate names and
//     windows, empty limits, malformed keys and topics are errors, never ignored. A limit
//     is read as an entry of GATE_LIMITS is, by the same function (ParseLimit): a window
//     of whole seconds, longer than GATE_TICK_INTERVAL (Options.MinWindow), so that a
//     rule's windows' Redis keys never meet.
//   - What a record gets from several rules (the strongest action of the enforced rules
//     over; shadow rules never change it) and how rules count a record another rule sent
//     away are the router's: route.NewRules states them. MaxRules bounds a set.
//   - A Reloader keeps the last good set: a rules file that becomes unreadable or invalid
//     is logged (once per distinct content) and counted in gate_rules_loads_total
//     {result="error"}, and the set in use does not change. A set whose check could not
//     be made (ErrUnchecked) is neither: counted {result="unchecked"} once, it is checked
//     again at the next read. No package-level state.
package rules
