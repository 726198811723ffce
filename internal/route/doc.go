// Package route turns each raw record into exactly one output record: it reads the
// record's team key (a JSON field of the value, a header or the record key, see KeyFrom),
// asks the limiter whether the team is over its threshold, and builds the record to
// produce on the accepted, overflow or dead-letter topic (or a rule's own topic).
//
// There is one routing path (Router.RouteInto), for a gate with a rules file (NewRules)
// and one without (New, NewMulti), which runs one implicit rule: GATE_KEY_FROM's key,
// GATE_LIMITS' limits, GATE_FORCE_OVERFLOW's teams, the overflow action. That rule has no
// name, so it adds no gate-overflow-rule header and no gate_rule_* series: a gate without
// a rules file writes what it always wrote (TestGoldenFileless). A record's dead letter
// names the rule whose field could not be read ("rule user: json field ... not found"),
// never for a value that is not JSON, which is no rule's fault.
//
// Guarantees:
//
//   - Every record gets exactly one destination. None is dropped, and no content of a
//     record (value, key, headers, whatever their bytes) makes Route fail or panic: a
//     record whose team cannot be read goes to the dead-letter topic, with the reason in
//     a gate-error header, a sentence in gate-error-detail and the input's
//     topic/partition/offset in gate-source, so an operator can trace and replay it.
//   - The output is a new record; the input stays the caller's. It carries the input's
//     value (the same bytes, not a copy), its headers in order (in a new slice) followed
//     by the gate's own, and its timestamp. Accepted and dead-letter records keep the key;
//     overflow records drop it unless Config.OverflowKeepKey, and say why they overflowed
//     in gate-overflow-reason. Partition is left for the producer to choose.
//   - A json: team is read only from a field that appears once where it is read: the
//     field in the event's object, or for a dotted path each part in the object holding it.
//     A record where one appears more than once is dead-lettered, with or without
//     Config.ValidateJSON (ambiguous_team; not_json if the value is not valid JSON
//     either), as gjson-style readers take the first occurrence and most decoders
//     downstream the last: no client can count against one team and be seen downstream
//     as another by repeating the field. Names compare decoded ("team\u005fid" is
//     team_id) and case-sensitive: a decoder that matches names ignoring case, as
//     encoding/json does into a struct, would also take a later "TEAM_ID", which is not
//     looked for. Nor are duplicates elsewhere in the value.
//   - Distinct values make distinct team keys. A single-field key (json:FIELD, header:NAME,
//     key) is the value as is (a JSON number's text: 42 and "42" are one team). A
//     composite key (json:A+B) joins its fields' values with ':' after writing each
//     value's '%' as %25 and ':' as %3A, an encoding that is one-to-one
//     (FuzzCompositeKey): ("x:y", "z") is x%3Ay:z and ("x", "y:z") is x:y%3Az. Values
//     holding neither byte appear as is.
//   - For a team already cached by the limiter, Route allocates only the output record and
//     its header slice. The team key is read in place: a json: key from an unsafe string
//     view of the value, by a scanner that reads the object's members without decoding
//     the event (scan.go); a composite key is joined in the caller's Scratch. Exceptions,
//     all rare: a JSON string holding backslash escapes costs one allocation; dead-letter
//     records cost a few more.
//   - The limiter is called once per routed record, exactly as when enforcing even in dry
//     run, with n = 1, except for forced teams in Cap mode (n = 0: only accepted records
//     count in Cap mode).
//
// Team keys in Redis: the team key, byte for byte as routed (a composite one encoded), is
// what the limiter counts, what internal/tick writes at {prefix}:{team}:{epoch} (at
// {prefix}:{<team>}:{epoch} in Redis Cluster, the team as hash tag with '%', '{' and '}'
// percent-escaped; at {prefix}:w{seconds}:... for each further limit; {prefix}/bytes in
// place of {prefix} with GATE_COST=bytes), and what
// Config.ForceOverflow, GATE_OVERRIDES and the live overrides hash ({prefix}:overrides,
// field = team) name: token phc_x and distinct_id user:1 count at
// gate:phc_x:user%3A1:{epoch}, and an override for them is phc_x:user%3A1=LIMIT.
//
// The values the gate puts in its headers are shared between output records and the team
// key aliases the input record: neither may be modified. The limiter copies a team key
// when it caches it. The package keeps no global state: metrics go to the registerer
// given to New.
package route
