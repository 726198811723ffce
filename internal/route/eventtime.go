package route

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrBadEventTimeFrom is returned for an unreadable GATE_EVENT_TIME_FROM.
var ErrBadEventTimeFrom = errors.New("route: bad event time source")

// EventTimeFrom says where a record's event time is read when the limiter counts in event
// time (GATE_CLOCK=event): the Kafka record timestamp (the zero value, "timestamp"), or a
// JSON field of the value ("json:FIELD", dotted for nested fields). A field holds an RFC
// 3339 string or a Unix time as a number, in seconds, milliseconds, microseconds or
// nanoseconds told apart by magnitude (below 10^11 seconds, 10^14 milliseconds, 10^17
// microseconds: the ranges do not overlap for any date after 1973). A time before 1970
// is no time, as a negative number is not, nor is 1970's first instant, 0: the zero value
// a producer's unset integer or epoch-based date marshals to.
type EventTimeFrom struct {
	field string // gjson path; empty: the record timestamp
	name  string
}

// ParseEventTimeFrom reads "timestamp" or "json:FIELD".
func ParseEventTimeFrom(s string) (EventTimeFrom, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "timestamp" {
		return EventTimeFrom{}, nil
	}
	kind, rest, ok := strings.Cut(s, ":")
	if !ok || kind != "json" {
		return EventTimeFrom{}, fmt.Errorf("%w %q (want timestamp or json:FIELD)", ErrBadEventTimeFrom, s)
	}
	fields, err := parseFields(rest)
	if err != nil {
		return EventTimeFrom{}, fmt.Errorf("%w %q: %w", ErrBadEventTimeFrom, s, err)
	}
	if len(fields) != 1 {
		return EventTimeFrom{}, fmt.Errorf("%w %q: one field only", ErrBadEventTimeFrom, s)
	}
	return EventTimeFrom{field: fields[0].path, name: rest}, nil
}

// UnmarshalText lets configuration decoders read an EventTimeFrom.
func (f *EventTimeFrom) UnmarshalText(b []byte) error {
	v, err := ParseEventTimeFrom(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// String returns the source as configured.
func (f EventTimeFrom) String() string {
	if f.field == "" {
		return "timestamp"
	}
	return "json:" + f.name
}

// time returns rec's event time, or false when the field is missing or unreadable (or,
// for the record timestamp, unset).
func (f EventTimeFrom) time(rec *kgo.Record) (time.Time, bool) {
	if f.field == "" {
		return recordTime(rec)
	}
	if len(rec.Value) == 0 || tooDeep(rec.Value) {
		return time.Time{}, false
	}
	r := gjson.Get(bytesString(rec.Value), f.field)
	switch r.Type {
	case gjson.String:
		t, ok := parseRFC3339(r.Str)
		if ok && (t.Unix() < 0 || t.Unix() == 0 && t.Nanosecond() == 0) {
			// Before 1970, as a negative number is, or 1970's first instant, as 0 is: a
			// producer's unset time (Go's zero time.Time is "0001-01-01T00:00:00Z",
			// JavaScript's new Date(0) "1970-01-01T00:00:00.000Z"), which would otherwise
			// be judged now, uncounted, as the zero time is, or clamped to
			// GATE_MAX_EVENT_AGE and counted in a window that old.
			return time.Time{}, false
		}
		return t, ok
	case gjson.Number:
		if n, err := strconv.ParseInt(r.Raw, 10, 64); err == nil {
			return unixInt(n) // exact: a float64 loses nanoseconds past 2^53
		}
		return unixTime(r.Num)
	}
	return time.Time{}, false
}

// parseRFC3339 reads an RFC 3339 timestamp as the RFC has it, which time.Parse does not
// wholly: its "T" and "Z" may be written "t" and "z" (section 5.6), or the two halves
// parted by a space (the RFC's own note), and a positive leap second reads 23:59:60 (taken
// as the next second's start, as Unix time has it). Such a string is rewritten on the
// stack and parsed again; the usual one is parsed once.
func parseRFC3339(s string) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, true
	}
	// 2006-01-02T15:04:05 then a fraction and a zone: at least 20 bytes.
	var buf [64]byte
	if len(s) < 20 || len(s) > len(buf) {
		return time.Time{}, false
	}
	b := buf[:copy(buf[:], s)]
	if c := b[10]; c == 't' || c == ' ' {
		b[10] = 'T'
	}
	if b[len(b)-1] == 'z' {
		b[len(b)-1] = 'Z'
	}
	// A leap second ends a UTC minute: second 60 of the minute that is 59 in UTC, which
	// in the zone written is another one when the offset is not whole hours (05:29:60+05:30).
	leap := string(b[16:19]) == ":60"
	if leap {
		b[17] = '5'
		b[18] = '9'
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return time.Time{}, false
	}
	if leap {
		if t.UTC().Minute() != 59 {
			return time.Time{}, false
		}
		t = t.Add(time.Second)
	}
	return t, true
}

// recordTime is rec's Kafka timestamp, or false when it has none: the zero time (a v0
// message), a negative one (-1, Kafka's NO_TIMESTAMP, decoded by franz-go as
// time.Unix(0, -1e6); brokers refuse any other negative timestamp) or 0, a producer's
// unset one.
func recordTime(rec *kgo.Record) (time.Time, bool) {
	if rec.Timestamp.IsZero() || rec.Timestamp.UnixMilli() <= 0 {
		return time.Time{}, false
	}
	return rec.Timestamp, true
}

// unixInt is unixTime for an integer, without rounding.
func unixInt(v int64) (time.Time, bool) {
	switch {
	case v <= 0:
		return time.Time{}, false
	case v < 1e11:
		return time.Unix(v, 0), true
	case v < 1e14:
		return time.UnixMilli(v), true
	case v < 1e17:
		return time.UnixMicro(v), true
	}
	return time.Unix(0, v), true
}

// unixTime reads a Unix time whose unit is told by its magnitude.
func unixTime(v float64) (time.Time, bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return time.Time{}, false
	}
	var ns float64
	switch {
	case v < 1e11:
		ns = v * 1e9
	case v < 1e14:
		ns = v * 1e6
	case v < 1e17:
		ns = v * 1e3
	default:
		ns = v
	}
	if ns >= math.MaxInt64 {
		// Past 2262, more nanoseconds than an int64 holds: a time far in the future all
		// the same, as the integer is (unixInt), which the limiter clamps to now.
		return time.Unix(int64(min(ns/1e9, math.MaxInt64/2)), 0), true
	}
	return time.Unix(0, int64(ns)), true
}
