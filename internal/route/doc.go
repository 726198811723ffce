// Package route turns each raw record into exactly one output record: it reads the
// record's team key (a JSON field of the value, a header or the record key, see KeyFrom),
// asks the limiter whether the team is over its threshold, and builds the record to
// produce on the accepted, overflow or dead-letter topic.
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
//   - For a team already cached by the limiter, Route allocates only the output record and
//     its header slice. The team key is read in place: a json: key from an unsafe string
//     view of the value, with gjson finding the field without decoding the event; a
//     composite key is joined in the caller's Scratch. Exceptions, all rare: a JSON string
//     holding backslash escapes, or a field name that needs escaping in a gjson path, cost
//     one allocation; dead-letter records cost a few more.
//   - The limiter is called once per routed record, exactly as when enforcing even in dry
//     run, with n = 1, except for forced teams in Cap mode (n = 0: only accepted records
//     count in Cap mode).
//
// The values the gate puts in its headers are shared between output records and the team
// key aliases the input record: neither may be modified. The limiter copies a team key
// when it caches it. The package keeps no global state: metrics go to the registerer
// given to New.
package route
