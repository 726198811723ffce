package route

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzEventTime checks what EventTimeFrom promises of a JSON field, for any instant from
// 1973 to 5138 (a number's unit is told by its magnitude: from 10^11, seconds are taken
// for milliseconds) in any zone: its RFC 3339 string, written with 'T' and 'Z' or 't' and 'z'
// or a space between date and time, reads as that instant; its Unix time as a JSON number
// in seconds, milliseconds, microseconds and nanoseconds (within an int64) reads as that
// instant at the unit's resolution; and any value at all reads without a panic as either
// nothing or a time after 1970's first instant.
func FuzzEventTime(f *testing.F) {
	f.Add(int64(1_700_000_000), int64(123_456_789), int16(0), "")
	f.Add(int64(100_000_000), int64(0), int16(330), `"2016-12-31T23:59:60Z"`)
	f.Add(int64(253_402_300_799), int64(999_999_999), int16(-720), `-1`)
	src, err := ParseEventTimeFrom("json:ts")
	if err != nil {
		f.Fatal(err)
	}
	read := func(v string) (time.Time, bool) {
		return src.time(&kgo.Record{Value: []byte(`{"ts":` + v + `}`)})
	}
	f.Fuzz(func(t *testing.T, sec, nsec int64, offMin int16, raw string) {
		if at, ok := read(raw); ok && (at.UnixNano() <= 0 && at.Unix() <= 0) {
			t.Errorf("%s read as %v, before 1970's first instant or at it", raw, at)
		}
		const lo, hi = 100_000_000, 100_000_000_000 // 1973-03-03 to 5138-11-16
		sec = lo + ((sec%(hi-lo))+(hi-lo))%(hi-lo)
		nsec = ((nsec % 1e9) + 1e9) % 1e9
		zone := time.FixedZone("", int(offMin%(24*60))*60)
		at := time.Unix(sec, nsec).In(zone)
		s := at.Format(time.RFC3339Nano)
		for _, v := range []string{s, strings.Replace(strings.Replace(s, "T", "t", 1), "Z", "z", 1), strings.Replace(s, "T", " ", 1)} {
			got, ok := read(strconv.Quote(v))
			if !ok || !got.Equal(at) {
				t.Errorf("%q read as %v, %v; want %v", v, got, ok, at)
			}
		}
		for _, u := range []time.Duration{time.Second, time.Millisecond, time.Microsecond, time.Nanosecond} {
			n := at.UnixNano() / int64(u)
			if sec >= 9_223_372_036 {
				if u == time.Nanosecond {
					continue // past 2262: more nanoseconds than an int64 holds
				}
				n = sec*int64(time.Second/u) + nsec/int64(u) // UnixNano overflows
			}
			want := time.Unix(sec, nsec/int64(u)*int64(u))
			got, ok := read(strconv.FormatInt(n, 10))
			if !ok || !got.Equal(want) {
				t.Errorf("%d (%s) read as %v, %v; want %v", n, u, got, ok, want)
			}
		}
	})
}
