package spike

import (
	"encoding/binary"
	"math"
	"testing"
	"time"
)

// FuzzProfileStaysReadable folds arbitrary counts at arbitrary gaps, by Fold, FoldSpan
// and FoldScheduled, and checks that the profile stays one UnmarshalBinary reads (finite,
// not negative) and its threshold a number within the floor and the ceiling: a profile
// that turned unreadable would be refused by every gate, and its team never learned
// from again until it expired.
func FuzzProfileStaysReadable(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 1, 5, 200, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 255, 255, 255, 255, 255, 255, 255, 127, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Config{Window: time.Minute, Ceiling: 1e6}.WithDefaults()
		if err != nil {
			t.Fatal(err)
		}
		var p Profile
		e := int64(28_000_000)
		for len(b) >= 10 {
			op, gap := b[0]%3, int64(b[1])+1
			cnt := float64(binary.LittleEndian.Uint64(b[2:10]) >> (b[0] / 3 % 64))
			b = b[10:]
			e += gap
			switch op {
			case 0:
				c.Fold(&p, e, cnt)
			case 1:
				c.FoldSpan(&p, e, cnt, gap)
			case 2:
				c.FoldScheduled(&p, e, cnt)
			}
			bin, _ := p.MarshalBinary()
			var q Profile
			if err := q.UnmarshalBinary(bin); err != nil {
				t.Fatalf("after folding %g at %d: %v (%+v)", cnt, e, err, p)
			}
			if thr, ok := c.Threshold(&p, e+1); ok && (math.IsNaN(thr) || thr < c.Floor || thr > c.Ceiling) {
				t.Fatalf("after folding %g at %d: threshold %g", cnt, e, thr)
			}
		}
	})
}
