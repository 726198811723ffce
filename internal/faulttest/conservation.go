package faulttest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// IDHeader is the header holding a test input record's id.
const IDHeader = "test-id"

// sourceHeader is the gate's dead-letter header naming the input record's position, as
// topic/partition/offset. A dead letter the gate had to strip of its headers (thousands
// of them, too large for any topic) is matched to its input through it.
const sourceHeader = "gate-source"

// Position is where a record was read: topic, partition and offset.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
}

func (p Position) String() string { return fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, p.Offset) }

// Report is the outcome of matching a run's input records to its output records.
type Report struct {
	Inputs  int            // input records with an id
	Outputs int            // output records read, on every output topic
	ByTopic map[string]int // output records per topic
	// Lost lists the ids of input records found on no output topic.
	Lost []string
	// Duplicated maps the id of each input record found more than once to its number of
	// copies (2 or more), wherever they are.
	Duplicated map[string]int
	// Extra is the number of copies beyond the first, over all duplicated ids.
	Extra int
	// Strays are output records whose id is missing or matches no input record.
	Strays []Position
	// InputAt gives each input id's position, to tell which partition and offset a lost
	// or duplicated record came from.
	InputAt map[string]Position
	// OutputAt gives, for each id, where its copies were found.
	OutputAt map[string][]Position
}

// OK reports nothing lost, nothing duplicated and no stray output.
func (r Report) OK() bool { return len(r.Lost) == 0 && len(r.Duplicated) == 0 && len(r.Strays) == 0 }

// String summarises the report on one line, with the first few ids of each problem.
func (r Report) String() string {
	var topics []string
	for _, t := range slices.Sorted(mapKeys(r.ByTopic)) {
		topics = append(topics, fmt.Sprintf("%s=%d", t, r.ByTopic[t]))
	}
	s := fmt.Sprintf("inputs=%d outputs=%d (%s) lost=%d duplicated=%d (extra copies %d) strays=%d",
		r.Inputs, r.Outputs, strings.Join(topics, " "), len(r.Lost), len(r.Duplicated), r.Extra, len(r.Strays))
	if len(r.Lost) > 0 {
		s += fmt.Sprintf("; lost ids %v", head(r.Lost))
	}
	if len(r.Duplicated) > 0 {
		s += fmt.Sprintf("; duplicated ids %v", head(slices.Sorted(mapKeys(r.Duplicated))))
	}
	if len(r.Strays) > 0 {
		s += fmt.Sprintf("; strays at %v", r.Strays[:min(len(r.Strays), 5)])
	}
	return s
}

func head[T any](s []T) []T { return s[:min(len(s), 10)] }

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Check matches inputs (the input records, each with an IDHeader) to outputs (every
// record read from every output topic). An input record without an id is ignored; an
// input id that appears twice in the input is an error of the test and panics.
func Check(inputs, outputs []*kgo.Record) Report {
	r := Report{
		ByTopic:    map[string]int{},
		Duplicated: map[string]int{},
		InputAt:    make(map[string]Position, len(inputs)),
		OutputAt:   make(map[string][]Position, len(inputs)),
	}
	byPos := make(map[Position]string, len(inputs))
	for _, in := range inputs {
		id, ok := Header(in, IDHeader)
		if !ok {
			continue
		}
		byPos[Position{in.Topic, in.Partition, in.Offset}] = id
		if _, dup := r.InputAt[id]; dup {
			panic(fmt.Sprintf("faulttest: input id %q appears twice in the input", id))
		}
		r.InputAt[id] = Position{in.Topic, in.Partition, in.Offset}
		r.Inputs++
	}
	for _, out := range outputs {
		r.Outputs++
		r.ByTopic[out.Topic]++
		pos := Position{out.Topic, out.Partition, out.Offset}
		id, ok := Header(out, IDHeader)
		if !ok {
			if src, has := Header(out, sourceHeader); has {
				id, ok = byPos[parsePosition(src)]
			}
		}
		if _, known := r.InputAt[id]; !ok || !known {
			r.Strays = append(r.Strays, pos)
			continue
		}
		r.OutputAt[id] = append(r.OutputAt[id], pos)
	}
	for id := range r.InputAt {
		switch n := len(r.OutputAt[id]); {
		case n == 0:
			r.Lost = append(r.Lost, id)
		case n > 1:
			r.Duplicated[id] = n
			r.Extra += n - 1
		}
	}
	sort.Strings(r.Lost)
	return r
}

// parsePosition reads topic/partition/offset; a malformed one gives the zero Position.
func parsePosition(s string) Position {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return Position{}
	}
	j := strings.LastIndexByte(s[:i], '/')
	if j < 0 {
		return Position{}
	}
	p, err1 := strconv.ParseInt(s[j+1:i], 10, 32)
	o, err2 := strconv.ParseInt(s[i+1:], 10, 64)
	if err1 != nil || err2 != nil {
		return Position{}
	}
	return Position{Topic: s[:j], Partition: int32(p), Offset: o}
}

// Header returns the value of rec's last header named key.
func Header(rec *kgo.Record, key string) (string, bool) {
	for i := len(rec.Headers) - 1; i >= 0; i-- {
		if rec.Headers[i].Key == key {
			return string(rec.Headers[i].Value), true
		}
	}
	return "", false
}

// ReadTopics reads every partition of topics from the start up to the end it has when
// ReadTopics is called (the cluster's high watermark), and returns the records in
// partition and offset order. opts are added to the reading client's options (TLS, SASL;
// ReadCommitted reads what a read-committed consumer sees).
// It fails the test if the records cannot all be read within timeout.
func ReadTopics(t testing.TB, c *kfake.Cluster, timeout time.Duration, opts []kgo.Opt, topics ...string) []*kgo.Record {
	t.Helper()
	waitStable(t, c, timeout, topics...)
	want := map[string]map[int32]kgo.Offset{}
	ends := map[string]map[int32]int64{}
	left := 0
	for _, topic := range topics {
		want[topic] = map[int32]kgo.Offset{}
		ends[topic] = map[int32]int64{}
		for _, p := range c.PartitionInfos(topic) {
			if p.HighWatermark > 0 {
				want[topic][p.Partition] = kgo.NewOffset().AtStart()
				ends[topic][p.Partition] = p.HighWatermark
				left++
			}
		}
	}
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(want),
		kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.MetadataMinAge(50 * time.Millisecond),
		kgo.FetchMaxBytes(64 << 20),
		kgo.FetchMaxPartitionBytes(32 << 20),
		// Transaction markers take offsets too, the last one's often: without them a
		// transactional partition's end is never seen. They are not returned.
		kgo.KeepControlRecords(),
	}, opts...)...)
	if err != nil {
		t.Fatalf("faulttest: reading %v: %v", topics, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	byPart := map[Position][]*kgo.Record{} // Offset unused: the key is topic and partition
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("faulttest: reading %v: %d partitions not read to their end within %s", topics, left, timeout)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Logf("faulttest: reading %s/%d: %v (retried)", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := ends[r.Topic][r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset == end-1 {
				left--
			}
			if r.Attrs.IsControl() {
				return // a transaction marker
			}
			k := Position{Topic: r.Topic, Partition: r.Partition}
			byPart[k] = append(byPart[k], r)
		})
	}
	var out []*kgo.Record
	keys := slices.SortedFunc(mapKeys(byPart), func(a, b Position) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	for _, k := range keys {
		out = append(out, byPart[k]...)
	}
	return out
}

// waitStable waits until no partition of topics has a transaction open (its last stable
// offset is its high watermark). A producer killed mid-transaction leaves its records
// below the end until the broker aborts them at the transaction timeout, and the abort
// marker then lands past an end taken before it: a read_committed reader, which skips the
// aborted records, would never reach that end. A transaction open for longer than timeout
// fails the test, naming the partitions.
func waitStable(t testing.TB, c *kfake.Cluster, timeout time.Duration, topics ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var open []string
		for _, topic := range topics {
			for _, p := range c.PartitionInfos(topic) {
				if p.LastStableOffset < p.HighWatermark {
					open = append(open, fmt.Sprintf("%s/%d (stable to %d of %d)", topic, p.Partition, p.LastStableOffset, p.HighWatermark))
				}
			}
		}
		if len(open) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("faulttest: reading %v: transactions still open after %s on %v", topics, timeout, open)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Conservation reads the input topic and the output topics to their ends and matches them.
func Conservation(t testing.TB, c *kfake.Cluster, opts []kgo.Opt, input string, outputs ...string) Report {
	t.Helper()
	in := ReadTopics(t, c, 60*time.Second, opts, input)
	out := ReadTopics(t, c, 60*time.Second, opts, outputs...)
	return Check(in, out)
}

// ReadCommitted are the reading options of a consumer with isolation.level=read_committed:
// records of aborted transactions are skipped.
func ReadCommitted() []kgo.Opt {
	return []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
}
