package rules

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/clock"
)

// DefaultReloadInterval is the least time between two reads of the rules file.
const DefaultReloadInterval = 5 * time.Second

// ErrUnchecked is wrapped by a ReloadOptions.Check error that says the check could not
// be made (Kafka could not be asked about a rule's topic), not that the set fails it.
var ErrUnchecked = errors.New("rules not checked")

// ReloadOptions are a Reloader's surroundings.
type ReloadOptions struct {
	// Interval is the least time between two reads of the file (0: DefaultReloadInterval).
	Interval time.Duration
	Clock    clock.Clock // nil: the wall clock
	Log      *slog.Logger
	Reg      prometheus.Registerer // nil: not registered
	// Check, if set, is asked about every changed set that parses, before it is put in
	// use: an error refuses it as a bad file is refused (the rules in use stay, the
	// refusal counted once, and logged once for each kind of refusal: refusalKind), and
	// the set is asked about again at the next read, so that it is taken once what failed
	// is fixed. The gate checks that each rule's topic exists and takes its writes. Not
	// asked about the set read at start, whose topics the gate's start-up check covers.
	// It is given the context of the read
	// (Reloader.Check's): a check cut short by its end neither refuses nor takes the set,
	// which is asked about again at the next read. Nor does an error wrapping ErrUnchecked
	// (the check could not be made: Kafka not answering): the set is neither refused nor
	// taken, gate_rules_file_valid is 1 (the file parses: an earlier refused edit is
	// fixed), and it is logged and counted (result "unchecked") once an edit.
	Check func(context.Context, *Set) error
}

// Reloader keeps a rule set in step with its file (GATE_RULES_FILE). Current is safe for
// concurrent use and costs one atomic load; Check is called by one goroutine (the tick's).
type Reloader struct {
	path     string
	opts     Options
	check    func(context.Context, *Set) error
	interval time.Duration
	clock    clock.Clock
	log      *slog.Logger

	cur atomic.Pointer[Set]
	// readFile reads the file: os.ReadFile, a test's stand-in for a read that meets a
	// volume's swap.
	readFile func(string) ([]byte, error)

	mu      sync.Mutex
	next    time.Time // when the file is next read
	raw     []byte    // what the file held when cur was made from it
	lastBad string    // the last bad state logged (readState), "" when good
	// badKinds are the kinds of refusal logged for lastBad (refusalKind): the same edit is
	// said again when what refuses it changes (its topic created, but not writable), but
	// not when a kind said already comes back (brokers' answers lagging each other would
	// have it said at every read).
	badKinds []string
	// unchecked is the last state whose check could not be made, logged once.
	unchecked string

	loads *prometheus.CounterVec
	rules prometheus.Gauge
	good  prometheus.Gauge
}

// NewReloader reads and checks the rules file at path once: an error (unreadable, or
// every problem in it) stops the gate at start.
func NewReloader(path string, o Options, ro ReloadOptions) (*Reloader, error) {
	r := &Reloader{
		path: path, opts: o, interval: ro.Interval, clock: ro.Clock, log: ro.Log, check: ro.Check, readFile: os.ReadFile,
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gate_rules_loads_total",
			Help: "Reads of GATE_RULES_FILE that found it changed, by result: ok (put in use), error (unreadable or invalid: the last good rules stay in use) or unchecked (its rules could not be checked now, Kafka not answering about a rule's topic: neither taken nor refused, checked again at the next read; once an edit)."}, []string{"result"}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gate_rules", Help: "Rules in use."}),
		good: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gate_rules_file_valid",
			Help: "0 while an edit of GATE_RULES_FILE that cannot be used (unreadable, invalid, or a rule topic Kafka says is missing or unwritable) is ignored; 1 otherwise, also while an edit waits for Kafka to answer about its rule topics (gate_rules_loads_total{result=\"unchecked\"})."}),
	}
	if r.interval <= 0 {
		r.interval = DefaultReloadInterval
	}
	if r.clock == nil {
		r.clock = clock.Real{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	raw, err := readRaw(path)
	if err != nil {
		return nil, err
	}
	s, err := Parse(path, raw, o)
	if err != nil {
		return nil, err
	}
	r.cur.Store(s)
	r.raw = raw
	r.next = r.clock.Now().Add(r.interval)
	r.loads.WithLabelValues("ok").Inc()
	r.loads.WithLabelValues("error")
	r.loads.WithLabelValues("unchecked")
	r.rules.Set(float64(len(s.Rules)))
	r.good.Set(1)
	if ro.Reg != nil {
		for _, c := range []prometheus.Collector{r.loads, r.rules, r.good} {
			if err := ro.Reg.Register(c); err != nil {
				return nil, fmt.Errorf("registering the rules metrics: %w", err)
			}
		}
	}
	return r, nil
}

// ReadFile reads and checks the rules file at path, as a gate reads GATE_RULES_FILE.
func ReadFile(path string, o Options) (*Set, error) {
	raw, err := readRaw(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, raw, o)
}

// readRaw is the rules file at path, its error wrapping ErrRules.
func readRaw(path string) ([]byte, error) { return readWith(os.ReadFile, path) }

// readWith is readRaw with read for os.ReadFile.
func readWith(read func(string) ([]byte, error), path string) ([]byte, error) {
	raw, err := read(path)
	if err != nil {
		return nil, fmt.Errorf("%w: reading the rules file: %w", ErrRules, err)
	}
	return raw, nil
}

// Current is the rule set in use.
func (r *Reloader) Current() *Set { return r.cur.Load() }

// Check reads the file again if Interval has passed since the last read (or the clock
// stepped back), and puts what it holds in use if it changed and is valid; it reports
// whether the set in use changed. A file that cannot be read or used leaves the last good
// set in use, logged once per distinct state (readState) and counted.
func (r *Reloader) Check(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	if now.Before(r.next) && !now.Before(r.next.Add(-r.interval)) {
		return false
	}
	changed, _ := r.read(ctx, now)
	return changed
}

// CheckNow is Check without waiting for the interval: for a caller that paces the reads
// itself (the gate's tick loop).
func (r *Reloader) CheckNow(ctx context.Context) bool {
	changed, _ := r.CheckNowResult(ctx)
	return changed
}

// What a read of the rules file found (CheckNowResult), for a caller that says it to an
// operator (the gate's SIGHUP line).
const (
	ReadUnchanged   = "unchanged: the rules in use stay"
	ReadReloaded    = "reloaded: its rules are put in use"
	ReadRefused     = "changed but cannot be used: the last good rules stay in use (see the error line)"
	ReadUnchecked   = "changed but its rule topics could not be checked now: the rules in use stay, it is checked again at the next read"
	ReadInterrupted = "read cut short: the gate is stopping"
)

// CheckNowResult is CheckNow, also saying what the read found (one of the Read constants).
func (r *Reloader) CheckNowResult(ctx context.Context) (changed bool, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read(ctx, r.clock.Now())
}

// read is Check's read of the file at now, and what it found; r.mu is held.
func (r *Reloader) read(ctx context.Context, now time.Time) (bool, string) {
	r.next = now.Add(r.interval)
	raw, err := readWith(r.readFile, r.path)
	if err != nil {
		// A Kubernetes ConfigMap volume swaps its files by renaming a new ..data symlink
		// over the old one, then deletes the old directory: a read that resolved the path
		// through the old link just before may find the file gone. The swap is atomic, so
		// a second read finds the new file; only a file unreadable twice is a bad one.
		raw, err = readWith(r.readFile, r.path)
	}
	if err == nil && bytes.Equal(raw, r.raw) {
		r.unchecked = ""
		if r.lastBad != "" {
			r.lastBad = ""
			r.good.Set(1)
			r.log.Info("rules file is back to the rules in use", "file", r.path)
		}
		return false, ReadUnchanged
	}
	state := readState(raw, err)
	var s *Set
	kind := "unreadable" // its words are in state
	if err == nil {
		kind = "invalid"
		s, err = Parse(r.path, raw, r.opts)
	}
	if err == nil && r.check != nil {
		if cerr := r.check(ctx, s); cerr != nil {
			if ctx.Err() != nil {
				// Cut short (the gate stopping): nothing is known of the set.
				return false, ReadInterrupted
			}
			if errors.Is(cerr, ErrUnchecked) && state == r.lastBad {
				// This very edit was refused already: a read Kafka does not answer (a
				// rolling restart) says nothing new of it. Clearing the refusal here had the
				// next answer refuse, count and log it again, the gauge flapping.
				return false, ReadRefused
			}
			if errors.Is(cerr, ErrUnchecked) {
				// Nor when the check could not be made: the file parses, and what is
				// pending is Kafka's answer, not an operator's fix. Counting it invalid,
				// or keeping a refused edit's 0 once that edit is fixed, would raise or
				// hold GateRulesFileInvalid for a broker's blip; the pending check is
				// the warn line and {result="unchecked"}.
				fixed := r.lastBad != ""
				r.lastBad = ""
				r.good.Set(1)
				if state != r.unchecked {
					r.unchecked = state
					r.loads.WithLabelValues("unchecked").Inc()
					r.log.Warn("rules file changed but could not be checked now; the rules in use stay, and it is checked again at every read",
						"file", r.path, "err", cerr, "rules_in_use", names(r.cur.Load()), "replaces_refused_edit", fixed)
				}
				return false, ReadUnchecked
			}
			kind = refusalKind(cerr)
			if ps := Problems(nil); errors.As(cerr, &ps) {
				err = fmt.Errorf("%w: %w", ErrRules, cerr) // each names the file, at its place
			} else {
				err = fmt.Errorf("%w: %s: %w", ErrRules, r.path, cerr)
			}
		}
	}
	if err != nil {
		r.good.Set(0)
		if state != r.lastBad {
			r.lastBad, r.badKinds = state, nil
			r.loads.WithLabelValues("error").Inc() // once an edit: a read that found it changed
		}
		if !slices.Contains(r.badKinds, kind) {
			r.badKinds = append(r.badKinds, kind)
			r.log.Error("rules file changed but cannot be used; the last good rules stay in use until it is fixed",
				"file", r.path, "err", err, "rules_in_use", names(r.cur.Load()), "reason_changed", len(r.badKinds) > 1)
		}
		return false, ReadRefused
	}
	old := r.cur.Swap(s)
	r.raw, r.lastBad, r.badKinds, r.unchecked = raw, "", nil, ""
	r.loads.WithLabelValues("ok").Inc()
	r.rules.Set(float64(len(s.Rules)))
	r.good.Set(1)
	r.log.Info("rules file reloaded", "file", r.path, "rules", names(s), "before", names(old))
	return true, ReadReloaded
}

// readState is what a read of the file found: its content, or (err) why it could not be
// read. A file that cannot be used is counted once a state, an edit, and logged once a
// state and kind of refusal (refusalKind), however the error is worded at each read (a
// check's words are Kafka's, and change).
func readState(raw []byte, err error) string {
	if err != nil {
		return "\x00" + err.Error()
	}
	return "\x01" + string(raw)
}

// refusalKind is what kind of refusal a check's error err is, in terms that stay while
// it does: the kinds of the problems it holds that give one (Problem.Kind, a rule topic's
// at the rule that names it), else "refused". Not its words, which are Kafka's and may
// change from one read to the next with nothing changed.
func refusalKind(err error) string {
	var kinds []string
	var walk func(error)
	walk = func(e error) {
		if p, ok := e.(*Problem); ok && p.Kind != "" {
			kinds = append(kinds, p.Path+": "+p.Kind)
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			if w := u.Unwrap(); w != nil {
				walk(w)
			}
		case interface{ Unwrap() []error }:
			for _, w := range u.Unwrap() {
				walk(w)
			}
		}
	}
	walk(err)
	if len(kinds) == 0 {
		return "refused"
	}
	slices.Sort(kinds)
	return strings.Join(slices.Compact(kinds), "; ")
}

func names(s *Set) []string {
	out := make([]string, len(s.Rules))
	for i, r := range s.Rules {
		out[i] = r.Name
	}
	return out
}
