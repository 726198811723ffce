package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/endpoints"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/load"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
)

const (
	// devGates is how many gates gate-dev runs in its consumer group.
	devGates = 2
	// devDrainTimeout bounds waiting, once the load has stopped, for the gates to route
	// what it produced.
	devDrainTimeout = 5 * time.Second
	// devRetentionBytes is what the embedded broker keeps per partition, and
	// devRetentionEvery how often it drops the rest: it holds every record in memory,
	// so without a bound a long run grows by megabytes a second.
	devRetentionBytes = 2 << 20
	devRetentionEvery = 5 * time.Second
)

// devDefaults are the GATE_ settings gate-dev uses when the environment does not set
// them: a short window and a low threshold, so limiting shows within seconds; its own
// Redis key prefix, so it never shares counters with a real fleet; quiet text logs, as
// stdout is the view; the team view on, for gate team (the HTTP ports are loopback).
func devDefaults() map[string]string {
	return map[string]string{
		"GATE_WINDOW":        "10s",
		"GATE_THRESHOLD":     "2000",
		"GATE_SYNC_INTERVAL": "5s",
		"GATE_REDIS_PREFIX":  "gate-dev",
		"GATE_LOG_FORMAT":    "text",
		"GATE_LOG_LEVEL":     "warn",
		"GATE_TEAM_API":      "true",
		// Outcome rows, as an operator would turn them on: gate outcomes TEAM reads them.
		"GATE_OUTCOMES_TOPIC": "events_outcomes",
	}
}

// devUserShare is the demo's user rule's threshold as a share of its team rule's.
const devUserShare = 10

// devRules are the demo's rules: a limit per user within a team, listed first, at a tenth
// of the team's, then the team's own limit, GATE_WINDOW:GATE_THRESHOLD. The load's
// runaway user is diverted by the first; its team's other users are accepted, as the
// team rule does not count what the user rule sent away.
func devRules(cfg config.Config) (*rules.Set, error) {
	set, err := rules.Parse("gate-dev's rules", []byte(devRulesYAML(cfg)), cfg.RulesOptions())
	if err != nil {
		return nil, fmt.Errorf("the demo's rules: %w", err)
	}
	return set, nil
}

// devRulesIgnore are the variables that a rules file replaces (config's list, less
// GATE_WINDOW, GATE_THRESHOLD and GATE_LIMIT_MODE, which devRulesYAML carries into the
// demo's rules): with the demo's rules they would do nothing.
var devRulesIgnore = []string{"GATE_KEY_FROM", "GATE_LIMITS", "GATE_COST", "GATE_THRESHOLD_MODE", "GATE_OVERRIDES", "GATE_FORCE_OVERFLOW"}

// devRulesYAML is devRules as a rules file.
func devRulesYAML(cfg config.Config) string {
	w := cfg.Window.String()
	return fmt.Sprintf("rules:\n"+
		"  - {name: team-user, key: \"json:team_id+distinct_id\", missing: skip, limits: [\"%s:%d\"], mode: %s}\n"+
		"  - {name: team, key: json:team_id, limits: [\"%s:%d\"], mode: %s}\n",
		w, max(cfg.Threshold/devUserShare, 1), cfg.LimitMode, w, cfg.Threshold, cfg.LimitMode)
}

// devDeps is what the tests replace.
type devDeps struct {
	// lookPath finds redis-server (exec.LookPath).
	lookPath func(string) (string, error)
	// isTerminal reports whether w is a terminal, to redraw a view rather than print lines.
	isTerminal func(w io.Writer) bool
}

func realDevDeps() devDeps {
	return devDeps{
		lookPath: exec.LookPath,
		isTerminal: func(w io.Writer) bool {
			f, ok := w.(*os.File)
			return ok && term.IsTerminal(int(f.Fd()))
		},
	}
}

// devOptions are gate-dev's flags.
type devOptions struct {
	spec       load.Spec // the load
	kafkaAddr  string
	httpAddr   string // gate 1's; gate 2 listens on the next port
	partitions int
	top        int
	threshold  int64
	window     time.Duration
}

func parseDevFlags(args []string, stderr io.Writer) (devOptions, map[string]string, error) {
	o := devOptions{spec: load.DefaultSpec(), kafkaAddr: "127.0.0.1:19092", httpAddr: "127.0.0.1:8081", partitions: 6, top: 8, threshold: 2000, window: 10 * time.Second}
	fs := flag.NewFlagSet("gate-dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.spec.AddFlags(fs)
	fs.StringVar(&o.kafkaAddr, "kafka-addr", o.kafkaAddr, "loopback host:port the embedded Kafka broker listens on, for kcat -b; port 0 picks a free one")
	fs.StringVar(&o.httpAddr, "http-addr", o.httpAddr, "host:port of gate 1's HTTP endpoints (/metrics, /healthz, /readyz, /v1/teams), gate 2's on the next port; port 0 picks free ones")
	fs.IntVar(&o.partitions, "partitions", o.partitions, "partitions of the input topic, shared by the two gates")
	fs.IntVar(&o.top, "top", o.top, "keys (teams, or team:user) listed as the top sent away, to overflow or a rule's topic (piped, the first 3 at most)")
	fs.Int64Var(&o.threshold, "threshold", o.threshold, "records per window a team may send (GATE_THRESHOLD; this flag wins over it)")
	fs.DurationVar(&o.window, "window", o.window, "length of the limit's window (GATE_WINDOW; this flag wins over it)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: gate-dev [flags]

Runs, in this process, an in-memory Kafka broker (kfake) on a fixed loopback port, a Redis
(GATE_REDIS_URLS if set, else a redis-server started on a free port, else an embedded
miniredis), two gates in one consumer group sharing the limit, and a load generator, and
shows what they route, once a second, until the duration ends or Ctrl-C. Other GATE_*
variables apply to both gates, but for those the demo's rules replace (GATE_KEY_FROM,
GATE_LIMITS, GATE_COST, GATE_THRESHOLD_MODE, GATE_OVERRIDES, GATE_FORCE_OVERFLOW: refused
without GATE_RULES_FILE; say them in a rules file) (gate-dev defaults: GATE_WINDOW=10s, GATE_THRESHOLD=2000,
GATE_SYNC_INTERVAL=5s, GATE_REDIS_PREFIX=gate-dev, GATE_LOG_LEVEL=warn, GATE_LOG_FORMAT=text,
GATE_TEAM_API=true, GATE_OUTCOMES_TOPIC=events_outcomes). Each gate serves its HTTP
endpoints, as gate serve does, on -http-addr and the port after it (GATE_HTTP_ADDR is not
used). This is the demo, not the
production binary: that is gate (cmd/gate), which links none of this.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return o, nil, err
	}
	if err := o.spec.Check(); err != nil {
		return o, nil, &cli.UsageError{Msg: "gate-dev: " + cli.OneLine(err)}
	}
	if _, _, err := splitDevAddr(o.kafkaAddr, 1); err != nil {
		return o, nil, &cli.UsageError{Msg: fmt.Sprintf("gate-dev: -kafka-addr %q: want host:port such as 127.0.0.1:19092", o.kafkaAddr)}
	}
	if _, _, err := splitDevAddr(o.httpAddr, devGates); err != nil {
		return o, nil, &cli.UsageError{Msg: fmt.Sprintf("gate-dev: -http-addr %q: want host:port such as 127.0.0.1:8081 (gate 2 takes the next port)", o.httpAddr)}
	}
	if o.partitions < 1 || o.top < 0 {
		return o, nil, &cli.UsageError{Msg: fmt.Sprintf("gate-dev: -partitions %d, -top %d: want at least 1 partition and 0 or more teams", o.partitions, o.top)}
	}
	// Flags given on the command line win over the environment.
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "threshold":
			set["GATE_THRESHOLD"] = strconv.FormatInt(o.threshold, 10)
		case "window":
			set["GATE_WINDOW"] = o.window.String()
		}
	})
	return o, set, nil
}

// dev is the whole of gate-dev. names are the GATE_ variables set in the environment,
// checked for typos as gate serve does.
func dev(ctx context.Context, args []string, getenv func(string) string, names []string, stdout, stderr io.Writer, deps devDeps) (err error) {
	o, flagEnv, err := parseDevFlags(args, stderr)
	if err != nil {
		return err
	}
	if getenv("GATE_RULES_FILE") != "" {
		for _, f := range []string{"threshold", "window"} {
			if _, set := flagEnv["GATE_"+strings.ToUpper(f)]; set {
				return &cli.UsageError{Msg: fmt.Sprintf("gate-dev: -%s: with GATE_RULES_FILE each rule says its own limits", f)}
			}
		}
	} else {
		// The demo's rules take GATE_WINDOW, GATE_THRESHOLD and GATE_LIMIT_MODE; the other
		// variables a rules file replaces would be ignored (GATE_LIMITS refused as set
		// beside the demo's own GATE_WINDOW and GATE_THRESHOLD): say so.
		var set []string
		for _, k := range devRulesIgnore {
			if strings.TrimSpace(getenv(k)) != "" {
				set = append(set, k)
			}
		}
		if len(set) > 0 {
			return &cli.UsageError{Msg: fmt.Sprintf("gate-dev: %s: the demo's rules say their own key, limits, cost, threshold mode and forced keys (they take GATE_WINDOW, GATE_THRESHOLD and GATE_LIMIT_MODE only); write a rules file (docs/rules.md) and run it with GATE_RULES_FILE",
				strings.Join(set, ", "))}
		}
	}
	defaults := devDefaults()
	// The broker and Redis are set below, once started; these stand in for the checks.
	defaults["GATE_KAFKA_BROKERS"] = "127.0.0.1:9092"
	defaults["GATE_REDIS_URLS"] = "redis://127.0.0.1:6379/0"
	devGetenv := func(k string) string {
		if v, ok := flagEnv[k]; ok {
			return v
		}
		if k == "GATE_KAFKA_BROKERS" {
			return defaults[k] // gate-dev always uses its own broker
		}
		if v := getenv(k); v != "" {
			return v
		}
		if (k == "GATE_WINDOW" || k == "GATE_THRESHOLD") && getenv("GATE_RULES_FILE") != "" {
			return "" // the rules file's rules say their own
		}
		return defaults[k]
	}
	cfg, err := config.Load(devGetenv, names)
	if err != nil {
		// A flag's value is checked as the variable it sets: say which flag that was, or
		// the line names a GATE_ variable the user never set (a review).
		var set []string
		for _, f := range []string{"threshold", "window"} {
			if k := "GATE_" + strings.ToUpper(f); strings.Contains(err.Error(), k+"=") { // not GATE_THRESHOLD_MODE's
				if _, ok := flagEnv[k]; ok {
					set = append(set, "-"+f+" sets "+k)
				}
			}
		}
		if len(set) > 0 {
			return fmt.Errorf("%w (%s)", err, strings.Join(set, ", "))
		}
		return err
	}
	// The demo's rules take the window as theirs, and a rule's window is a whole number of
	// seconds (gate serve's GATE_WINDOW may be 1.5s): say so of the flag or variable given,
	// not of lines of the demo's own rules, which the user never wrote.
	if cfg.RulesFile == "" && cfg.Window%time.Second != 0 {
		const why = "the demo's rules take it as their window, a whole number of seconds such as 10s"
		if _, ok := flagEnv["GATE_WINDOW"]; ok {
			return &cli.UsageError{Msg: fmt.Sprintf("gate-dev: -window %s: %s", durtext.String(cfg.Window), why)}
		}
		return config.Problems{fmt.Errorf("GATE_WINDOW=%q: %s", getenv("GATE_WINDOW"), why)}
	}
	log := gate.NewLogger(cfg, stderr)
	redis.SetLogger(gate.RedisLogger{Log: log.With("component", "redis")})

	// 0. The gates' HTTP ports, taken first: one in use fails the start before anything runs.
	lns, err := devHTTPListeners(o.httpAddr, devGates)
	if err != nil {
		return err
	}
	defer func() {
		for _, ln := range lns {
			_ = ln.Close() // closed already once served
		}
	}()

	// The rules: the demo's, or GATE_RULES_FILE's, read here too for the header and for
	// their own topics, which the broker must have (a gate does not start consuming
	// while one is missing). The gates read the file themselves, and again when it changes.
	var set *rules.Set
	if cfg.RulesFile == "" {
		set, err = devRules(cfg)
	} else if set, err = rules.ReadFile(cfg.RulesFile, cfg.RulesOptions()); err != nil {
		err = config.Problems{fmt.Errorf("GATE_RULES_FILE=%q: %w", cfg.RulesFile, err)}
	}
	if err != nil {
		return err
	}

	// 1. The broker, with the gate's topics and the rules'.
	cluster, err := startDevBroker(o.kafkaAddr, o.partitions, cfg, ruleTopics(set))
	if err != nil {
		return err
	}
	defer cluster.Close()
	retentionCtx, stopRetention := context.WithCancel(context.WithoutCancel(ctx))
	retentionDone := make(chan struct{})
	go func() {
		defer close(retentionDone)
		t := time.NewTicker(devRetentionEvery)
		defer t.Stop()
		for {
			select {
			case <-retentionCtx.Done():
				return
			case <-t.C:
				cluster.ApplyRetention()
			}
		}
	}()
	defer func() { stopRetention(); <-retentionDone }() // before Close, deferred above
	brokerAddr := cluster.ListenAddrs()[0]
	cfg.KafkaBrokers = []string{brokerAddr}

	// 2. Redis.
	rd, err := startDevRedis(ctx, getenv("GATE_REDIS_URLS"), cfg.RedisURLs.String(), deps.lookPath, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it ran (Ctrl-C), as a run that ends: status 0
		}
		return err
	}
	defer func() {
		if serr := rd.stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stopping Redis: %w", serr))
		}
	}()
	if getenv("GATE_REDIS_URLS") == "" {
		cfg.RedisURLs = []string{rd.url} // the Redis started above; else config's list, as parsed
	}

	// 3. Two gates, built as gate serve builds one, counting their outcomes in stats, with
	// the demo's rules unless GATE_RULES_FILE names others.
	var demoRules *rules.Set
	if cfg.RulesFile == "" {
		demoRules = set
	}
	stats := newDevStats()
	var gates []*gate.Gate
	var gcfgs []config.Config
	defer func() {
		for _, g := range gates {
			g.CloseRedis(log)
		}
	}()
	for i := 1; i <= devGates; i++ {
		gcfg := cfg
		if gcfg.TransactionalID == "" {
			// One per gate: two gates of one process share a host name.
			gcfg.TransactionalID = cfg.GroupID + "-dev-" + strconv.Itoa(i)
		} else {
			// GATE_TRANSACTIONAL_ID: one per gate too, or each fences the other.
			gcfg.TransactionalID += "-" + strconv.Itoa(i)
		}
		g, err := gate.New(gcfg, log.With("gate", i), gate.Options{
			WrapRouter: stats.wrap,
			ClientOpts: devClientOpts(cfg, i),
			// Each gate its own name in its outcome rows (gate outcomes counts the gates
			// by it), as for the transactional id: two gates of one process share a host.
			Host:  devHost() + "-dev-" + strconv.Itoa(i),
			Rules: demoRules, // nil: GATE_RULES_FILE's
		})
		if err != nil {
			return fmt.Errorf("gate %d: %w", i, err)
		}
		gates = append(gates, g)
		gcfgs = append(gcfgs, gcfg)
	}

	// 4. The load's producer.
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr), kgo.ClientID(cfg.KafkaClientID+"-dev-load"),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MetadataMinAge(200*time.Millisecond))
	if err != nil {
		return fmt.Errorf("creating the load's Kafka client: %w", err)
	}
	defer producer.Close()

	// What the header tells to try: a third gate needs the rules the demo's run.
	rulesFile := cfg.RulesFile
	if rulesFile == "" {
		dir, err := os.MkdirTemp("", "gate-dev-")
		if err != nil {
			return fmt.Errorf("writing the demo's rules for gate serve: %w", err)
		}
		defer os.RemoveAll(dir)
		rulesFile = filepath.Join(dir, "rules.yaml")
		if err := os.WriteFile(rulesFile, []byte(devRulesYAML(cfg)), 0o644); err != nil {
			return fmt.Errorf("writing the demo's rules for gate serve: %w", err)
		}
	} else if abs, err := filepath.Abs(rulesFile); err == nil {
		rulesFile = abs
	}
	httpAddrs := make([]string, len(lns))
	for i, ln := range lns {
		httpAddrs[i] = ln.Addr().String()
	}
	header := devHeader(o, cfg, set, devPlaces{broker: brokerAddr, redisWhat: rd.what, redisURLs: cfg.RedisURLs.String(), http: httpAddrs, rulesFile: rulesFile})
	terminal := deps.isTerminal(stdout)
	if !terminal {
		if _, err := io.WriteString(stdout, header); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
	}

	// 5. Start: the gates, then the load.
	runCtx := ctx
	if o.spec.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, o.spec.Duration)
		defer cancel()
	}
	gateCtx, stopGates := context.WithCancel(context.WithoutCancel(ctx))
	defer stopGates()
	gateErrs := make(chan error, len(gates))
	for i, g := range gates {
		go func() { gateErrs <- runDevGate(gateCtx, g, i+1) }()
	}
	running := len(gates)
	httpErrs, stopHTTP := serveDevHTTP(ctx, gates, gcfgs, lns, log)
	defer stopHTTP() // before the gates' Redis clients are closed, deferred above
	loadCtx, stopLoad := context.WithCancel(runCtx)
	defer stopLoad()
	var counts load.Counts
	spec := o.spec
	spec.Duration = 0 // runCtx ends the load
	loadDone := make(chan error, 1)
	go func() { loadDone <- load.Produce(loadCtx, producer, cfg.InputTopic, spec, &counts, log) }()

	// 6. The view, once a second.
	start := time.Now()
	regs := make([]*prometheus.Registry, len(gates))
	for i, g := range gates {
		regs[i] = g.Reg
	}
	prev := stats.snapshot(start, 0, regs)
	var last devRates
	show := func(now time.Time) error {
		cur := stats.snapshot(now, counts.Produced.Load(), regs)
		r := rates(prev, cur, last, start, o.top)
		prev, last = cur, r
		if terminal {
			return r.writeScreen(stdout, header)
		}
		return r.writeLine(stdout)
	}
	var runErr error
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
view:
	for {
		select {
		case <-runCtx.Done():
			break view
		case err := <-gateErrs:
			running--
			runErr = fmt.Errorf("a gate stopped early: %w", cmp.Or(err, errors.New("its consumer returned")))
			break view
		case err := <-httpErrs:
			runErr = err
			break view
		case err := <-loadDone:
			loadDone <- err // read again below
			// The load also stops when the run's duration ends; both can be ready at once.
			if runCtx.Err() == nil {
				runErr = fmt.Errorf("the load generator stopped: %w", cmp.Or(err, errors.New("it returned early")))
			}
			break view
		case now := <-tick.C:
			if err := show(now); err != nil {
				runErr = fmt.Errorf("writing output: %w", err)
				break view
			}
		}
	}

	// 7. Stop in order: the load, then (once they have routed it) the gates, whose
	// consumers commit and leave the group and whose ticks flush, then their HTTP
	// endpoints; deferred, the Redis clients, then Redis, then the broker.
	stopLoad()
	if err := <-loadDone; err != nil && runErr == nil {
		runErr = err
	}
	if runErr == nil {
		drainDeadline := time.Now().Add(devDrainTimeout)
		for routedTotal(stats) < counts.Produced.Load() && time.Now().Before(drainDeadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	stopGates()
	for ; running > 0; running-- {
		if err := <-gateErrs; err != nil && runErr == nil {
			runErr = fmt.Errorf("a gate stopped: %w", err)
		}
	}
	stopHTTP() // as gate serve does: once the consumers and ticks have stopped
	if err := show(time.Now()); err != nil && runErr == nil {
		runErr = fmt.Errorf("writing output: %w", err)
	}
	s := stats.snapshot(time.Now(), counts.Produced.Load(), nil)
	if _, err := fmt.Fprintf(stdout, "gate-dev stopped after %s: in=%d accepted=%d overflow=%d rule_topics=%d dead_letter=%d dropped=%d load_failed=%d\n",
		durtext.String(time.Since(start).Round(time.Second)), s.produced, s.routed[route.Accepted], s.routed[route.Overflow], s.routed[route.RuleTopic], s.routed[route.DeadLetter],
		s.routed[route.Dropped], counts.Failed.Load()); err != nil && runErr == nil {
		runErr = fmt.Errorf("writing output: %w", err)
	}
	return runErr
}

func routedTotal(s *devStats) int64 {
	var n int64
	for i := range s.routed {
		n += s.routed[i].Load()
	}
	return n
}

// runDevGate runs one gate's tick and consumer until ctx ends, and stops them as gate
// serve does: the consumer first (commit, leave the group), then the tick with its final flush.
func runDevGate(ctx context.Context, g *gate.Gate, i int) error {
	tickCtx, stopTick := context.WithCancel(context.WithoutCancel(ctx))
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		g.RunTick(tickCtx) // and the rules' overrides, and a rules file's edits
	}()
	err := g.Consumer.Run(ctx)
	stopTick()
	<-tickDone
	if err != nil {
		return fmt.Errorf("gate %d: %w", i, err)
	}
	return nil
}

// splitDevAddr checks addr, host:port, for n gates listening on port, port+1, ...; port 0
// gives each a free port.
func splitDevAddr(addr string, n int) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || host == "" || (p != 0 && int(p)+n-1 > 65535) {
		return "", 0, fmt.Errorf("bad host:port %q", addr)
	}
	return host, int(p), nil
}

// devHTTPListeners listens on addr for gate 1 and on the ports after it for the others
// (port 0: a free port each).
func devHTTPListeners(addr string, n int) ([]net.Listener, error) {
	host, port, err := splitDevAddr(addr, n)
	if err != nil {
		return nil, &cli.UsageError{Msg: fmt.Sprintf("gate-dev: -http-addr %q: %v", addr, err)}
	}
	var lns []net.Listener
	for i := range n {
		a := addr
		if port != 0 {
			a = net.JoinHostPort(host, strconv.Itoa(port+i))
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, fmt.Errorf("gate %d's HTTP endpoints on %s (another gate-dev running? try -http-addr 127.0.0.1:0): %w", i+1, a, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// serveDevHTTP serves each gate's endpoints on its listener, built as gate serve builds
// them (endpoints.ForGate), and runs their readiness probes. A server that fails is sent
// on the channel; stop shuts the servers down and waits for the probes, once.
func serveDevHTTP(ctx context.Context, gates []*gate.Gate, cfgs []config.Config, lns []net.Listener, log *slog.Logger) (<-chan error, func()) {
	errs := make(chan error, len(gates))
	probeCtx, stopProbes := context.WithCancel(context.WithoutCancel(ctx))
	var probes sync.WaitGroup
	servers := make([]*http.Server, len(gates))
	for i, g := range gates {
		glog := log.With("gate", i+1)
		mux, ready := endpoints.ForGate(cfgs[i], g, glog)
		servers[i] = endpoints.NewServer(mux, glog)
		probes.Go(func() { ready.Run(probeCtx) })
		go func() {
			if err := servers[i].Serve(lns[i]); !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("gate %d's HTTP server on %s: %w", i+1, lns[i].Addr(), err)
			}
		}()
	}
	var once sync.Once
	return errs, func() {
		once.Do(func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), config.HTTPShutdownTimeout)
			defer cancel()
			for i, srv := range servers {
				if err := srv.Shutdown(sctx); err != nil {
					log.Warn("HTTP server shutdown incomplete", "gate", i+1, "err", err)
				}
			}
			stopProbes()
			probes.Wait()
		})
	}
}

// ruleTopics are the topics of set's rules (action topic:NAME), each once, in file order.
func ruleTopics(set *rules.Set) []string {
	var topics []string
	for _, r := range set.Rules {
		if r.Action.Kind == rules.Topic && !slices.Contains(topics, r.Action.Topic) {
			topics = append(topics, r.Action.Topic)
		}
	}
	return topics
}

// startDevBroker starts kfake on addr with the input topic, the three outputs and the
// rules' topics.
func startDevBroker(addr string, partitions int, cfg config.Config, ruleTopics []string) (*kfake.Cluster, error) {
	_, p, err := splitDevAddr(addr, 1)
	if err != nil {
		return nil, &cli.UsageError{Msg: fmt.Sprintf("gate-dev: -kafka-addr %q: want host:port such as 127.0.0.1:19092", addr)}
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(p),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, addr) }),
		kfake.SeedTopics(int32(partitions), cfg.InputTopic),
		kfake.SeedTopics(3, append(cfg.Kafka.OutputTopics(), ruleTopics...)...),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
		// Retention frees whole segments: small ones, so that it frees memory soon.
		kfake.BrokerConfigs(map[string]string{
			"log.retention.bytes": strconv.Itoa(devRetentionBytes),
			"log.segment.bytes":   strconv.Itoa(devRetentionBytes / 4),
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded Kafka broker on %s (another gate-dev running? try -kafka-addr 127.0.0.1:0): %w", addr, err)
	}
	return c, nil
}

// devHost is os.Hostname, or "pid" and the process id when there is none, as gate
// serve names its host in its outcome rows.
func devHost() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "pid" + strconv.Itoa(os.Getpid())
	}
	return h
}

// devClientOpts make a dev gate's group react in a fraction of a second against the
// in-process broker (franz-go's defaults suit a real cluster: rebalances take seconds).
func devClientOpts(cfg config.Config, i int) []kgo.Opt {
	return []kgo.Opt{
		kgo.ClientID(fmt.Sprintf("%s-dev-%d", cfg.KafkaClientID, i)),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.MetadataMinAge(200 * time.Millisecond),
		kgo.SessionTimeout(3 * time.Second),
		kgo.HeartbeatInterval(250 * time.Millisecond),
	}
}

// devPlaces are where the demo's parts listen, for the header.
type devPlaces struct {
	broker    string   // the broker's address
	redisWhat string   // which Redis, where
	redisURLs string   // GATE_REDIS_URLS for another gate, passwords redacted
	http      []string // each gate's HTTP address
	rulesFile string   // the rules in use as a file, for another gate
}

// devHeader is what the view shows above its figures: the rules, where each part
// listens, and the load. With the demo's rules it says what each rule does to the load;
// with GATE_RULES_FILE it lists the file's rules as they were at start and says what
// the load sends, and the view shows what each rule sends away.
func devHeader(o devOptions, cfg config.Config, set *rules.Set, at devPlaces) string {
	var b strings.Builder
	if cfg.RulesFile != "" {
		fmt.Fprintf(&b, "gate-dev: %d gates in consumer group %s share the %d rules of %s (as at start; the gates read it again when it changes):\n",
			devGates, cfg.GroupID, len(set.Rules), at.rulesFile)
		for _, r := range set.Rules {
			fmt.Fprintf(&b, "       %s\n", describeRule(r))
		}
	} else {
		lc := cfg.LimitConfig()
		fmt.Fprintf(&b, "gate-dev: %d gates in consumer group %s share two rules: team-user, %d records per %s window per user within a team, then team, %d per team (%s mode)\n",
			devGates, cfg.GroupID, max(lc.Threshold/devUserShare, 1), durtext.String(lc.Window), lc.Threshold, lc.Mode)
	}
	topics := strings.Join([]string{cfg.AcceptedTopic, cfg.OverflowTopic, cfg.DeadLetterTopic}, ", ")
	if rt := ruleTopics(set); len(rt) > 0 {
		topics += "; the rules' topics " + strings.Join(rt, ", ")
	}
	if cfg.OutcomesTopic != "" {
		topics += "; outcomes to " + cfg.OutcomesTopic + " (gate outcomes TEAM reads them)"
	}
	fmt.Fprintf(&b, "kafka: kfake (in-process Kafka-protocol broker) on %s; %s (%d partitions) -> %s\n",
		at.broker, cfg.InputTopic, o.partitions, topics)
	fmt.Fprintf(&b, "       keeps the last %d MiB of each partition; try: kcat -b %s -L   |   kcat -b %s -C -t %s -o -5 -c 5 -q -f '%%h %%s\\n'\n", devRetentionBytes>>20, at.broker, at.broker, cfg.OverflowTopic)
	fmt.Fprintf(&b, "redis: %s\n", at.redisWhat)
	devHeaderHTTP(&b, cfg, at)
	bad := "none malformed"
	if o.spec.BadEvery > 0 {
		bad = fmt.Sprintf("1 in %d malformed", o.spec.BadEvery)
	}
	hotRate := o.spec.HotShare * float64(o.spec.Rate)
	runawayRate := o.spec.RunawayShare * float64(o.spec.Rate)
	if cfg.RulesFile != "" {
		// What a record meets depends on the file's rules: say what is sent, per second.
		fmt.Fprintf(&b, "load:  %d records/s over %d teams (team_id %d.. by Zipf s=%g), $pageview events with a team_id and a distinct_id; team_id %d sends %.0f%% (%.0f/s); %s\n",
			o.spec.Rate, o.spec.Teams, load.FirstTailTeam, o.spec.ZipfS, load.HotTeam, o.spec.HotShare*100, hotRate, bad)
		if o.spec.RunawayShare > 0 {
			fmt.Fprintf(&b, "       one runaway user, distinct_id user-%d of team_id %d, sends %.0f%% (%.0f/s); the view shows what each rule sends away\n",
				load.RunawayUser, load.RunawayTeam, o.spec.RunawayShare*100, runawayRate)
		}
		return b.String()
	}
	lc := cfg.LimitConfig()
	perWindow := hotRate * lc.Window.Seconds()
	fmt.Fprintf(&b, "load:  %d records/s over %d teams (team_id %d.. by Zipf s=%g); team_id %d sends %.0f%% (%.0f per window, %.1fx its limit); %s\n",
		o.spec.Rate, o.spec.Teams, load.FirstTailTeam, o.spec.ZipfS, load.HotTeam, o.spec.HotShare*100, perWindow, perWindow/float64(lc.Threshold), bad)
	if o.spec.RunawayShare > 0 {
		runaway := runawayRate * lc.Window.Seconds()
		fmt.Fprintf(&b, "       one runaway user, %d:user-%d, sends %.0f%% (%.0f per window) inside team_id %d, a team otherwise under its limit: the user rule diverts it, the team's others are accepted\n",
			load.RunawayTeam, load.RunawayUser, o.spec.RunawayShare*100, runaway, load.RunawayTeam)
	}
	return b.String()
}

// describeRule is r on one line: its name, key, match, limits, mode and action, as gate
// rules check lists them.
func describeRule(r rules.Rule) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: key %s", r.Name, r.Key)
	if r.SkipMissing {
		b.WriteString(" (skip if missing)")
	}
	for i, m := range r.Match {
		op := "in"
		if m.Not {
			op = "not in"
		}
		join := " where"
		if i > 0 {
			join = " and"
		}
		fmt.Fprintf(&b, "%s %s %s [%s]", join, cli.Shown(m.Field.String()), op, cli.ShownList(m.Values))
	}
	lims := make([]string, len(r.Limits))
	for i, l := range r.Limits {
		lims[i] = l.String()
	}
	mode := r.Mode.String()
	if r.Adaptive {
		mode += ", adaptive"
	}
	fmt.Fprintf(&b, ", limits %s (%s mode), over them: %s", strings.Join(lims, ","), mode, r.Action)
	if len(r.Force) > 0 {
		fmt.Fprintf(&b, ", %d keys forced", len(r.Force))
	}
	if r.Shadow {
		b.WriteString(" (shadow: counted, never enforced)")
	}
	return b.String()
}

// devHeaderHTTP is the header's http lines: where each gate serves its endpoints, and how
// to point gate team, curl and a third gate (gate serve) at the demo.
func devHeaderHTTP(b *strings.Builder, cfg config.Config, at devPlaces) {
	var where []string
	for i, a := range at.http {
		where = append(where, fmt.Sprintf("gate %d on http://%s", i+1, a))
	}
	served := "/metrics /healthz /readyz /v1/teams"
	if !cfg.TeamAPI {
		served = "/metrics /healthz /readyz (the team view is off: GATE_TEAM_API=false)"
	}
	fmt.Fprintf(b, "http:  %s: %s, as gate serve serves them\n", strings.Join(where, ", "), served)
	try := fmt.Sprintf("curl -s %s/metrics | grep ^gate_records_total   |   curl -s %s/readyz", at.http[0], at.http[len(at.http)-1])
	if cfg.TeamAPI {
		try = fmt.Sprintf("bin/gate team -addr %s %d   |   %s", at.http[0], load.HotTeam, try)
	}
	fmt.Fprintf(b, "       try: %s\n", try)
	// The demo's own defaults its gates run with, which gate serve's differ from (the
	// window and threshold are in the rules file): without them a third gate would write
	// no outcome rows, and gate outcomes would leave out what it routes.
	demo := fmt.Sprintf(" GATE_SYNC_INTERVAL=%s", durtext.String(cfg.SyncInterval))
	if cfg.OutcomesTopic != "" {
		demo += " GATE_OUTCOMES_TOPIC=" + cfg.OutcomesTopic
	}
	fmt.Fprintf(b, "       a third gate in the group: GATE_KAFKA_BROKERS=%s GATE_REDIS_URLS=%s GATE_REDIS_PREFIX=%s GATE_RULES_FILE=%s GATE_TEAM_API=true%s GATE_HTTP_ADDR=%s bin/gate serve\n",
		at.broker, at.redisURLs, cfg.RedisPrefix, at.rulesFile, demo, thirdGateAddr(at.http))
}

// thirdGateAddr is where the header's third gate serves its endpoints: gate serve's
// default port, 127.0.0.1:8080, unless one of the demo's gates has that port
// (-http-addr 127.0.0.1:8079 puts gate 2 on it), then the first port after it that
// neither gate has, so that the command pasted does not fail to listen.
func thirdGateAddr(gates []string) string {
	taken := make(map[string]bool, len(gates))
	for _, a := range gates {
		if _, p, err := net.SplitHostPort(a); err == nil {
			taken[p] = true
		}
	}
	port := 8080
	for taken[strconv.Itoa(port)] {
		port++
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
