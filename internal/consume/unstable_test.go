package consume

import "testing"

// TestGroupOffsetsPartition: the partition of __consumer_offsets that holds a group is
// Kafka's (values from Java: (s.hashCode() & 0x7fffffff) % n), non-ASCII and a
// character outside the BMP included.
func TestGroupOffsetsPartition(t *testing.T) {
	for _, c := range []struct {
		group string
		n     int
		want  int
	}{
		{"capture-gate", 50, 22},
		{"capture-gate", 3, 1},
		{"testhangingtransaction", 50, 34},
		{"testhangingtransaction", 3, 2},
		{"gruppe-ä-😀", 50, 48},
		{"gruppe-ä-😀", 3, 1},
		{"", 50, 0},
	} {
		if got := groupOffsetsPartition(c.group, c.n); got != c.want {
			t.Errorf("groupOffsetsPartition(%q, %d) = %d, want %d", c.group, c.n, got, c.want)
		}
	}
}
