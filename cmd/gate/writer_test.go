package main

import (
	"bytes"
	"crypto/rand"
	"strconv"
	"testing"
	"time"
)

// TestWriterNamesDiffer: two gate processes never write under one name, even on one host
// in one millisecond (they would lose each other's counts: the lane's sequence would take
// one's batches for the other's, already applied). Before, the name was host name and
// start time only.
func TestWriterNamesDiffer(t *testing.T) {
	start := time.UnixMilli(1_800_000_000_123)
	a := writerName("node-1", 41, start, rand.Reader)
	b := writerName("node-1", 42, start, rand.Reader)
	c := writerName("node-1", 41, start, rand.Reader) // a PID reused within the ms
	if a == b || a == c || b == c {
		t.Errorf("writer names collide: %q %q %q", a, b, c)
	}
	if got := writerName("node-1", 41, start, bytes.NewReader([]byte{0xde, 0xad, 0xbe, 0xef})); got != "node-1-41-"+strconv.FormatInt(start.UnixMilli(), 36)+"-deadbeef" {
		t.Errorf("writer name %q: want host, pid, start (base 36 ms) and the random part", got)
	}
}
