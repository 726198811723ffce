// Package load makes the demo traffic that cmd/gate's load command and cmd/gate-dev
// produce: power-law (Zipf) traffic over many teams, one hot team far above any sensible
// limit, and a trickle of malformed records, at a steady rate and reproducible from a seed.
package load

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/durtext"
)

// The teams of the load, and the generator's pace.
const (
	// HotTeam is the team_id of the team that takes Spec.HotShare of the records.
	HotTeam = 1
	// FirstTailTeam is the team_id of the Zipf tail's busiest team; the tail's teams are
	// FirstTailTeam, FirstTailTeam+1, ... in falling order of traffic.
	FirstTailTeam = 1000
	// RunawayTeam and RunawayUser are the team and the user (distinct_id user-999999)
	// that take Spec.RunawayShare of the records: one user far above what the rest of a
	// team well under its limit sends, as a runaway SDK or a load test.
	RunawayTeam = FirstTailTeam + 5
	RunawayUser = 999_999
	// loadStep is how often the generator tops up to its rate.
	loadStep = 10 * time.Millisecond
	// loadFlushTimeout bounds waiting for the last records' acknowledgements at stop.
	loadFlushTimeout = 5 * time.Second
)

// Spec is the shape of the generated traffic.
type Spec struct {
	Duration time.Duration // how long to produce; 0 means until stopped
	Teams    int           // teams in the Zipf tail
	Rate     int           // records per second, all teams together
	HotShare float64       // share of the records from HotTeam
	// RunawayShare is the share of the records from RunawayUser of RunawayTeam.
	RunawayShare float64
	ZipfS        float64 // Zipf exponent of the tail, above 1; larger is more skewed
	BadEvery     int     // one malformed record in this many; 0 for none
	Seed         uint64  // the random sequence; the same seed makes the same records
}

// AddFlags registers the spec's flags on fs, with the spec's current values as defaults.
func (s *Spec) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&s.Duration, "duration", s.Duration, "how long to run, such as 30s; 0 runs until Ctrl-C or SIGTERM")
	fs.IntVar(&s.Teams, "teams", s.Teams, "teams in the power-law tail (team_id 1000, 1001, ... in falling order of traffic)")
	fs.IntVar(&s.Rate, "rate", s.Rate, "records per second produced to the input topic, all teams together")
	fs.Float64Var(&s.HotShare, "hot-share", s.HotShare, "share of the records from the hot team (team_id 1), which runs far above its limit")
	fs.Float64Var(&s.RunawayShare, "runaway-share", s.RunawayShare, "share of the records from one runaway user (distinct_id user-999999) of team_id 1005, a team otherwise well under its limit")
	fs.Float64Var(&s.ZipfS, "zipf", s.ZipfS, "Zipf exponent of the tail, above 1 (larger: a few teams take more of the traffic)")
	fs.IntVar(&s.BadEvery, "bad-every", s.BadEvery, "one malformed record (not JSON, no team_id, truncated, oversized team) in this many; 0 for none")
	fs.Uint64Var(&s.Seed, "seed", s.Seed, "random seed; the same seed produces the same records")
}

// DefaultSpec is the demo's load: 5000 records/s over 1000 tail teams, 30% of them from
// HotTeam, 3% from the runaway user, one in 200 malformed.
func DefaultSpec() Spec {
	return Spec{Teams: 1000, Rate: 5000, HotShare: 0.3, RunawayShare: 0.03, ZipfS: 1.1, BadEvery: 200, Seed: 1}
}

// Check returns every problem with s, each naming its flag, joined.
func (s Spec) Check() error {
	var errs []error
	if s.Duration < 0 {
		errs = append(errs, fmt.Errorf("-duration %s is negative", durtext.String(s.Duration)))
	}
	if s.Teams < 1 {
		errs = append(errs, fmt.Errorf("-teams %d: want at least 1", s.Teams))
	}
	if s.Rate < 1 {
		errs = append(errs, fmt.Errorf("-rate %d: want at least 1 record per second", s.Rate))
	}
	if !(s.HotShare >= 0 && s.HotShare < 1) {
		errs = append(errs, fmt.Errorf("-hot-share %g: want a share from 0 to below 1", s.HotShare))
	}
	if !(s.RunawayShare >= 0 && s.HotShare+s.RunawayShare < 1) {
		errs = append(errs, fmt.Errorf("-runaway-share %g: want a share from 0, below 1 with -hot-share (%g)", s.RunawayShare, s.HotShare))
	}
	if !(s.ZipfS > 1) || math.IsInf(s.ZipfS, 1) { // math/rand's Zipf never answers at +Inf
		errs = append(errs, fmt.Errorf("-zipf %g: want a finite exponent above 1", s.ZipfS))
	}
	if s.BadEvery < 0 {
		errs = append(errs, fmt.Errorf("-bad-every %d is negative", s.BadEvery))
	}
	return errors.Join(errs...)
}

// Generator makes the records of a Spec. It is not safe for concurrent use.
type Generator struct {
	spec Spec
	rng  *rand.Rand
	zipf *rand.Zipf
	n    uint64 // records made
	bad  uint64 // malformed records made
	now  func() time.Time
}

// NewGenerator makes spec's records, stamping their events with now.
func NewGenerator(spec Spec, now func() time.Time) *Generator {
	rng := rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15))
	return &Generator{
		spec: spec,
		rng:  rng,
		zipf: rand.NewZipf(rng, spec.ZipfS, 1, uint64(spec.Teams-1)),
		now:  now,
	}
}

// Next returns the next record: a capture event keyed by team and user, as producers
// write them, or a malformed one. Every BadEvery-th record is malformed, the first
// being record BadEvery-1, so a short run always has some.
func (g *Generator) Next() *kgo.Record {
	g.n++
	if g.spec.BadEvery > 0 && g.n%uint64(g.spec.BadEvery) == 0 {
		g.bad++
		return g.malformed()
	}
	team := FirstTailTeam + int(g.zipf.Uint64())
	r := g.rng.Float64()
	if r < g.spec.HotShare {
		team = HotTeam
	}
	user := g.rng.IntN(5000)
	if r >= g.spec.HotShare && r < g.spec.HotShare+g.spec.RunawayShare {
		team, user = RunawayTeam, RunawayUser
	}
	return &kgo.Record{
		Key:   fmt.Appendf(nil, "%d:user-%d", team, user),
		Value: g.event(team, user),
	}
}

// event is a capture event, shaped as in testdata/events.
func (g *Generator) event(team, user int) []byte {
	pages := [...]string{"/", "/pricing", "/docs/getting-started", "/dashboard/12", "/insights/new", "/settings/project"}
	b := make([]byte, 0, 384)
	b = append(b, `{"uuid":"`...)
	b = fmt.Appendf(b, "%016x-%016x", g.rng.Uint64(), g.n)
	b = append(b, `","event":"$pageview","distinct_id":"user-`...)
	b = strconv.AppendInt(b, int64(user), 10)
	b = append(b, `","properties":{"$current_url":"https://app.example.com`...)
	b = append(b, pages[g.rng.IntN(len(pages))]...)
	b = append(b, `","$browser":"Firefox","$lib":"web","$lib_version":"1.139.2"},"timestamp":"`...)
	b = g.now().UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","team_id":`...)
	b = strconv.AppendInt(b, int64(team), 10)
	return append(b, '}')
}

// malformed cycles through the bad records a gate must dead-letter.
func (g *Generator) malformed() *kgo.Record {
	var v string
	switch g.bad % 4 {
	case 0:
		v = "event=$pageview team_id=7 distinct_id=user-1" // not JSON
	case 1:
		v = `{"uuid":"missing-team","event":"$pageview","distinct_id":"user-1","properties":{}}` // no team_id
	case 2:
		v = `{"uuid":"truncated","event":"$pagev` // cut short
	default:
		v = `{"event":"$pageview","team_id":"` + strings.Repeat("x", 300) + `"}` // team over 256 bytes
	}
	return &kgo.Record{Key: []byte("malformed"), Value: []byte(v)}
}

// Counts are the records a producer has handed to its client (Sent), and of those the
// ones acknowledged or refused; the rest are unanswered.
type Counts struct {
	Sent     atomic.Int64
	Produced atomic.Int64
	Failed   atomic.Int64
	// Skipped is the records not produced because the run fell more than a tenth of a
	// second behind the rate (a broker too slow for it, or this process not scheduled):
	// they are skipped, not sent later in a burst.
	Skipped atomic.Int64
}

// Produce produces spec's records to topic through cl at spec.Rate until ctx ends or
// spec.Duration passes, then waits (bounded) for the last acknowledgements. Record i
// (from 0) is due i/Rate after the start, the first at once, so a run of spec.Duration
// makes ceil(Duration x Rate) records, those due before its end, when the broker keeps
// up; the records a stall (a broker slow, refusing them with a retriable error, or not
// answering) put more than a tenth of a second behind are skipped, so the rate holds after
// it and the run ends on time. A refused record is counted and logged
// once per reason; it stops nothing.
func Produce(ctx context.Context, cl *kgo.Client, topic string, spec Spec, counts *Counts, log *slog.Logger) error {
	gen := NewGenerator(spec, time.Now)
	var warned atomic.Bool
	done := func(_ *kgo.Record, err error) {
		switch {
		case err == nil:
			counts.Produced.Add(1)
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			// stopping: the record was never sent
		default:
			counts.Failed.Add(1)
			if !warned.Swap(true) {
				log.Warn("producing load failed; counting further failures quietly", "topic", topic, "err", err)
			}
		}
	}
	// The run's end is a timer, not a deadline on ctx, and the records are produced with
	// a context that ends with neither: those handed to the client, the last step's at
	// the end or the linger's at Ctrl-C, are sent and waited for (flush), not withdrawn
	// unsent. Produce does not block (room, below), so nothing waits on ctx there.
	rctx := context.WithoutCancel(ctx)
	total := int64(math.MaxInt64)
	var end <-chan time.Time
	if spec.Duration > 0 {
		total = recordsIn(spec.Duration, spec.Rate)
		timer := time.NewTimer(spec.Duration)
		defer timer.Stop()
		end = timer.C
	}
	var sent, skipped int64
	// A record is handed to the client only while its buffer has room for it: Produce
	// blocks on a full buffer until the broker takes records, which one refusing them (a
	// retriable error, retried for ever) or not answering never does, and the run would
	// not end. Records not handed over stay due, and are skipped as any fallen behind.
	maxRecs, _ := cl.OptValue(kgo.MaxBufferedRecords).(int64)
	maxBytes, _ := cl.OptValue(kgo.MaxBufferedBytes).(int64)
	room := func(r *kgo.Record) bool { // as the client counts a record: key and value (no headers)
		return (maxRecs <= 0 || cl.BufferedProduceRecords() < maxRecs) &&
			(maxBytes <= 0 || cl.BufferedProduceBytes()+int64(len(r.Key)+len(r.Value)) <= maxBytes)
	}
	var next *kgo.Record // made but not yet handed over, for want of room
	produce := func(due int64) {
		for ; sent < due && ctx.Err() == nil; sent++ {
			if next == nil {
				next = gen.Next()
				next.Topic = topic
			}
			if !room(next) {
				return
			}
			counts.Sent.Add(1)
			cl.Produce(rctx, next, done)
			next = nil
		}
	}
	// step produces the records due, counted from the run's start. After a stall (a broker too slow for the rate, the client's buffer full), it catches
	// up by at most a tenth of a second of records and skips the rest for good: the
	// backlog is not sent later at up to ten times the rate, nor at the run's end.
	step := func(due int64) {
		due = min(due, total) - skipped
		if most := sent + int64(spec.Rate)/10 + 1; due > most {
			skipped += due - most
			counts.Skipped.Add(due - most)
			due = most
		}
		produce(due)
	}
	start := time.Now()
	tick := time.NewTicker(loadStep)
	defer tick.Stop()
	produce(min(1, total))
	for {
		select {
		case <-ctx.Done():
			return flush(ctx, cl)
		case <-end:
			step(total) // those due since the last tick
			// Those still not handed over (the client's buffer full) are skipped: the
			// run ends on time, and its records, sent and skipped, are its schedule's.
			if rest := total - skipped - sent; rest > 0 && ctx.Err() == nil {
				skipped += rest
				counts.Skipped.Add(rest)
			}
			return flush(ctx, cl)
		case now := <-tick.C:
			step(int64(now.Sub(start).Seconds()*float64(spec.Rate)) + 1)
		}
	}
}

// flush waits, at most loadFlushTimeout, for the acknowledgements of the records produced.
func flush(ctx context.Context, cl *kgo.Client) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadFlushTimeout)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return fmt.Errorf("waiting for the last load records: %w", err)
	}
	return nil
}

// recordsIn is the number of records due within d at rate records a second, the first at
// its start: ceil(d x rate), in integers, so that 300ms at 10/s is 3, not 4.
func recordsIn(d time.Duration, rate int) int64 {
	hi, lo := bits.Mul64(uint64(d), uint64(rate))
	if hi >= uint64(time.Second) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(time.Second))
	if r > 0 {
		q++
	}
	return int64(min(q, math.MaxInt64))
}
