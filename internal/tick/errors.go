// Redis errors: their causes, as the errors metric labels them, and their logs. An error
// is counted and logged, never returned to a check. The log says when an instance starts
// failing, then at most once a minute while it goes on (sooner for a cause no line named
// within the minute), and when it works again: not a line a tick.

package tick

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/throttle"
	"github.com/capturegate/gate/internal/tlsreload"
)

// report counts and logs what failed in instance i's pipelines this tick, once a tick
// (both phases of a split one): a stretch of refused writes under answered reads is one
// failure a tick, not a failure and a recovery.
// In cluster mode the errors are counted by the primary they came from (its address),
// so that an operator can tell which node fails; an error of no node's (no slot map) on
// the instance.
func (t *Ticker) report(i int, p *plan) {
	label := strconv.Itoa(i)
	if p.err == nil {
		t.errLogs[i].recovered(t.log, label, p.dur)
		return
	}
	if p.nodeCauses == nil {
		t.countCauses(p.causes, label)
	} else {
		for node, cs := range p.nodeCauses {
			t.countCauses(cs, cmp.Or(node, label))
		}
	}
	t.errLogs[i].failed(t.log, label, p)
}

func (t *Ticker) countCauses(cs causeSet, instance string) {
	for c := range numCauses {
		if cs.has(c) {
			t.countError(c, instance)
		}
	}
}

// countError counts one failure of cause c on instance: its index in the instances
// (strconv.Itoa), or in cluster mode a primary's address.
func (t *Ticker) countError(c cause, instance string) {
	t.m.errors.WithLabelValues(c.String(), instance).Inc()
}

// trackNodes keeps the errors and pipeline duration metrics' series of the cluster's
// primaries as the tick finds them (p.nodes: every primary it sent to, its ClusterShards
// lanes covering them all): each new primary's at zero, so that its first failure is an
// increase to rate(), and those of any primary the tick no longer sends to deleted. A
// cluster's nodes change address over failovers and resharding (a pod rescheduled), and
// each would otherwise keep its series for the process's life. Deleted whenever errNodes
// holds more than p.nodes, not only when a primary is new: a tick whose slot map changed
// while it looked its lanes up (the client reloads it in the background) sent to the old
// primary and its successor both, and the next, which has no new one, kept the old one's
// for good (TestTrackNodesDeletesAPrimaryGoneAfterItsSuccessorCame). A tick of an
// unchanged set costs a lookup a primary.
func (t *Ticker) trackNodes(p *plan) {
	n := 0
	for _, node := range p.nodes {
		if node != "" {
			t.nodeSeries(node)
			n++ // one pipeline a primary: p.nodes holds each once
		}
	}
	if len(t.errNodes) <= n {
		return
	}
	for node := range t.errNodes {
		if !slices.Contains(p.nodes, node) {
			t.m.errors.DeletePartialMatch(prometheus.Labels{"redis_instance": node})
			t.m.pipelineDur.DeleteLabelValues(node)
			delete(t.errNodes, node)
		}
	}
}

// nodeSeries makes the series of node, a cluster primary's address, at zero unless it
// has them (errNodes): the next trackNodes deletes them if the tick does not send to it
// (the fleet count or the clock check met it, the slot map not yet read again).
func (t *Ticker) nodeSeries(node string) {
	if _, ok := t.errNodes[node]; node == "" || ok {
		return
	}
	if t.errNodes == nil {
		t.errNodes = make(map[string]struct{})
	}
	t.errNodes[node] = struct{}{}
	for c := range numCauses {
		t.m.errors.WithLabelValues(c.String(), node)
	}
	t.m.pipelineDur.WithLabelValues(node)
}

// countOn counts one failure of cause c of a command sent outside the tick's pipelines
// (the fleet count, the clock check) on the node that answered it: in cluster mode the
// primary's address, its series made as the tick's (nodeSeries); else, or with no node
// known (no slot map), instance 0, which those commands go to.
func (t *Ticker) countOn(c cause, node string) {
	if node == "" {
		t.countError(c, "0")
		return
	}
	t.nodeSeries(node)
	t.countError(c, node)
}

// nodeOf is the address of the cluster primary that serves key, as the client's slot map
// has it, or "" outside cluster mode or with no slot map.
func (t *Ticker) nodeOf(ctx context.Context, key string) string {
	cc, ok := t.instances[0].(*redis.ClusterClient)
	if !ok {
		return ""
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// reloadSlotsAfter has the cluster client read its slot map again (at once, in the
// background) after err, a failure of the fleet count or the clock check that may mean
// the map is out of date (slotMapStale). Those commands go to a primary's own client
// (MasterForKey), whose failures leave the map as it is: when the primary died, they
// went on to it until the client's own refresh a minute later, on a quiet gate whose
// tick sent nothing that would have had it refreshed. Once per failed command at most,
// each once a tick or less; the client folds reloads asked while one runs into one.
func (t *Ticker) reloadSlotsAfter(ctx context.Context, err error) {
	if cc, ok := t.instances[0].(*redis.ClusterClient); ok && slotMapStale(err) {
		cc.ReloadState(ctx)
	}
}

// slotMapStale reports whether err says the node a command went to may no longer serve
// its slot: no answer (the node dead or out of reach, or slow: the tick's causes on which
// it reloads the map too), READONLY (a demoted primary), MOVED (the slot moved) or
// CLUSTERDOWN (a failover under way). A refusal by a node that serves the slot (OOM, an
// ACL), nil, redis.Nil or the gate stopping says nothing of the map.
func slotMapStale(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) {
		return false
	}
	if _, moved := redis.IsMovedError(err); moved || redis.HasErrorPrefix(err, "CLUSTERDOWN") {
		return true
	}
	switch classify(err) {
	case causeTimeout, causeConnection, causeReadOnly, causeTLS:
		return true
	}
	return false
}

// laneInstance names lane li of instance i for the errors metric and the log: in
// cluster mode the address of the primary its commands went to in p's last send
// (pipelines), else (or with no slot map) the instance's index.
func (t *Ticker) laneInstance(i int, p *plan, li int) string {
	if j := t.partOf[li]; t.cfg.Mode == ModeCluster && j < len(p.nodes) && p.nodes[j] != "" {
		return p.nodes[j]
	}
	return strconv.Itoa(i)
}

// nodesFailed says p.nodeCauses for a log line, sorted: "10.0.0.3:6379=oom 10.0.0.4:6379=timeout".
func nodesFailed(p *plan) string {
	nodes := make([]string, 0, len(p.nodeCauses))
	for node, cs := range p.nodeCauses {
		nodes = append(nodes, cmp.Or(node, "unknown")+"="+cs.String())
	}
	slices.Sort(nodes)
	return strings.Join(nodes, " ")
}

// cause is why a Redis command failed, as the errors metric labels it.
type cause uint8

// The causes of Redis errors.
const (
	causeTimeout    cause = iota // no answer in time
	causeConnection              // no connection, or it broke
	causeTLS                     // the TLS handshake failed: a certificate, or a TLS version the two do not share (tlsreload.Failed)
	causeRedis                   // an error reply not named below
	causeOOM                     // write refused: used memory over maxmemory under noeviction
	causeReadOnly                // write refused: a replica (a demoted primary)
	causeMisconf                 // write refused: the last snapshot failed (stop-writes-on-bgsave-error)
	causeNoReplicas              // write refused: too few replicas in sync (min-replicas-to-write)
	causeParse                   // a counter that is not an integer
	numCauses
)

func (c cause) String() string {
	switch c {
	case causeTimeout:
		return "timeout"
	case causeConnection:
		return "connection"
	case causeTLS:
		return "tls"
	case causeRedis:
		return "redis"
	case causeOOM:
		return "oom"
	case causeReadOnly:
		return "readonly"
	case causeMisconf:
		return "misconf"
	case causeNoReplicas:
		return "noreplicas"
	case causeParse:
		return "parse"
	}
	return "unknown"
}

// causeSet is a set of causes, one bit each.
type causeSet uint16

// refusals are the causes of a Redis that refuses writes while it answers reads.
const refusals causeSet = 1<<causeOOM | 1<<causeReadOnly | 1<<causeMisconf | 1<<causeNoReplicas

// fleetRefusals are the refusals every gate writing to the instance meets alike (apply.go,
// fleetRefused): not READONLY, which a gate whose client has not followed a failover
// meets alone.
const fleetRefusals causeSet = 1<<causeOOM | 1<<causeMisconf | 1<<causeNoReplicas

func (s *causeSet) add(c cause)     { *s |= 1 << c }
func (s causeSet) has(c cause) bool { return s&(1<<c) != 0 }

// String lists the causes, comma-separated.
func (s causeSet) String() string {
	var b strings.Builder
	for c := range numCauses {
		if s.has(c) {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(c.String())
		}
	}
	return b.String()
}

// resentOn reports whether err, an error reply, is one go-redis's cluster client resends
// a pipeline on (after a lost reply too) within one Exec, whatever MaxRetries says: the
// batch may have run on an earlier attempt whose reply was lost, so its answer says
// nothing of whether it was applied. Resent as it is, its number kept, the script tells.
func resentOn(err error) bool {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask || redis.IsTryAgainError(err) || redis.IsClusterDownError(err) || redis.IsLoadingError(err) ||
		redis.IsReadOnlyError(err) || redis.IsMasterDownError(err)
}

// classify names an error's cause for the errors metric. A Redis before 7.0 wraps the
// error a script's command met in its own (scriptError), which is classed as the error
// inside: otherwise a full Redis 6 refusing the write script counted as redis, not oom.
func classify(err error) cause {
	if inner, ok := scriptError(err); ok {
		err = inner
	}
	var ne net.Error
	var re redis.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return causeTimeout
	case redis.IsOOMError(err):
		return causeOOM
	case redis.IsReadOnlyError(err):
		return causeReadOnly
	case redis.HasErrorPrefix(err, "MISCONF"):
		return causeMisconf
	case redis.HasErrorPrefix(err, "NOREPLICAS"):
		return causeNoReplicas
	case errors.As(err, &re):
		return causeRedis
	case tlsreload.Failed(err):
		return causeTLS // a Redis that answers, but whose certificate or the gate's is refused, or that shares no TLS version with the gate
	}
	return causeConnection
}

// scriptReply is the error a script's command met, as scriptError takes it out.
type scriptReply string

func (e scriptReply) Error() string { return string(e) }
func (scriptReply) RedisError()     {}

// scriptError returns the error inside a Redis before 7.0's reply to a script whose
// command failed: "ERR Error running script (call to f_<sha>): @user_script:6:
// @user_script: 6: -OOM command not allowed when used memory > 'maxmemory'." (the error
// handler's location, then luaPushError's for a refusal the script met before the command
// ran, as OOM, READONLY and MISCONF; the command's own error has the first alone).
// Redis 7 returns the command's error as it is, its location after it ("OOM command not
// allowed ... script: <sha>, on @user_script:6."), whose prefix classify reads as it is.
func scriptError(err error) (redis.Error, bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return nil, false
	}
	rest, ok := strings.CutPrefix(strings.TrimPrefix(re.Error(), "ERR "), "Error running script (call to ")
	if !ok {
		return nil, false
	}
	if _, rest, ok = strings.Cut(rest, "): "); !ok {
		return nil, false
	}
	for strings.HasPrefix(rest, "@") {
		after, ok := cutScriptLocation(rest)
		if !ok {
			break
		}
		rest = after
	}
	return scriptReply(strings.TrimSpace(strings.TrimPrefix(rest, "-"))), true
}

// cutScriptLocation cuts a script location, "@user_script:6: " or "@user_script: 6: ",
// off the front of s.
func cutScriptLocation(s string) (string, bool) {
	_, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s, false
	}
	rest = strings.TrimPrefix(rest, " ")
	digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
	if digits == 0 {
		return s, false
	}
	rest, ok = strings.CutPrefix(rest[digits:], ": ")
	return rest, ok
}

// loginRefusal reports whether err is Redis refusing the gate's login or rights, which
// no retry cures: NOAUTH (no password given), WRONGPASS (the wrong user or password),
// NOPERM (an ACL without a command or key the tick uses; inside a script, Redis 7.0 says
// "The user executing the script can't …"), or the protocol error Redis
// answers a command of more than ten arguments (or a long one) from a client not logged
// in with, closing the connection: "unauthenticated multibulk length" (or "bulk length").
func loginRefusal(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && (redis.HasErrorPrefix(err, "NOAUTH") || redis.HasErrorPrefix(err, "WRONGPASS") ||
		redis.HasErrorPrefix(err, "NOPERM") || strings.Contains(err.Error(), "Protocol error: unauthenticated") ||
		strings.Contains(err.Error(), "The user executing the script can't"))
}

// commandMissing reports whether err is Redis answering that it has no such command: one
// renamed or disabled on the server (rename-command; a managed Redis without scripting),
// which no retry cures either.
func commandMissing(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && redis.HasErrorPrefix(err, "unknown command") // it takes "ERR " off
}

// commandMissingHint is what a line says of a command the server does not have.
const commandMissingHint = "the server has no such command: renamed or disabled (rename-command, or a Redis without scripting), where the gate needs EVAL, MGET, SET, GET, INCRBY and PEXPIRE as they are"

// loginRefusedMsg is what the tick's line says of a refused login or right.
const loginRefusedMsg = "redis refuses the gate's commands: its login or rights, not the network (NOAUTH, or a protocol error " +
	"naming unauthenticated: Redis wants a password the gate does not give, GATE_REDIS_PASSWORD or GATE_REDIS_URLS's; " +
	"WRONGPASS: the user or password is not Redis's; NOPERM: the user's ACL lacks a command or key the tick uses, " +
	"docs/operations.md)"

// valueKind is a kind of value the tick reads from Redis, as the log of one it cannot
// read names it.
type valueKind uint8

const (
	valueCounter valueKind = iota
	valueHold
	valueProfile
	numValueKinds
)

func (k valueKind) String() string {
	return [...]string{"counter", "hold flag", "profile"}[k]
}

// unreadableDoes is what the tick does with a value of kind k it cannot read, for its log.
func unreadableDoes(k valueKind) string {
	switch k {
	case valueCounter:
		return "the team's view is rebuilt from this gate's own counts, as when a read fails"
	case valueHold:
		return "the fleet's hold of the team is not taken up"
	}
	return "refused: the team keeps its static threshold, looked at again a fold period on"
}

// maxValueLog is how much of a value it cannot read the tick logs: enough to tell what
// wrote it, not every byte of a key that can hold 512 MB.
const maxValueLog = 64

// unreadable counts a value read on instance (laneInstance: a cluster's primary) that does not parse (cause parse, which the
// chart's GateRedisErrors alert fires on) and logs it with its key and what it held, at
// most once per errorLogInterval for each kind of value (Ticker.parseLogs): a corrupt
// counter is read every tick, and one kind must not hide another. err, when not nil, says
// why it does not parse; it must not hold the whole value.
func (t *Ticker) unreadable(instance string, kind valueKind, key string, v any, err error) {
	t.countError(causeParse, instance)
	ok, quiet := t.parseLogs[kind].Allow()
	if !ok {
		return
	}
	shown, size := fmt.Sprintf("(a %T)", v), -1
	if x, isStr := v.(string); isStr {
		shown, size = x[:min(len(x), maxValueLog)], len(x)
	}
	attrs := []any{"instance", instance, "cause", causeParse.String(), "kind", kind.String(), "key", key,
		"value", shown, "value_bytes", size, "unreadable_unlogged", quiet}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	t.log.Warn("redis value unreadable: "+unreadableDoes(kind)+" (logged once a minute at most for each kind)", attrs...)
}

// errorLogInterval is how often, at most, the tick logs the failures of one Redis
// instance while they go on: a tick a second must not log a line a second through an
// outage or a stretch of refused writes.
const errorLogInterval = time.Minute

// errLog rate-limits one Redis instance's failure logs: the first failed pipeline is
// logged at once, then one line per errorLogInterval (its pace), or sooner for a cause
// no line named within it, each saying how many failed since the last; the first
// pipeline to succeed after logged failures is logged too. The pace outlasts a recovery: failures
// that come and go (a Redis at its maxmemory whose keys expire, one answering near the
// timeout) fail and recover tick after tick, and a fresh pace at each recovery logged
// both, two lines a tick. Wall time, not the limiter's clock: it paces a log.
type errLog struct {
	pace    *throttle.Every // errorLogInterval; nil until the first failure
	clock   clock.Clock     // wall time, for failing_for
	failing bool
	logged  bool      // a line said these failures: their end is logged too
	since   time.Time // when the failures began
	ticks   int       // failed pipelines since the failures began
	// causeLogged is when a line last named each cause: a cause is logged at once only
	// when no line named it within errorLogInterval, so that failures whose causes
	// alternate (a full Redis that also stalls: oom, then timeout) are not a line a tick.
	causeLogged [numCauses]time.Time
}

func (e *errLog) failed(log *slog.Logger, instance string, p *plan) {
	if e.clock == nil {
		e.clock = clock.Real{}
	}
	if e.pace == nil {
		e.pace = throttle.NewEvery(errorLogInterval, e.clock)
	}
	now := e.clock.Now()
	if !e.failing {
		e.failing, e.since, e.ticks = true, now, 0
	}
	e.ticks++
	for c := range numCauses {
		if p.causes.has(c) && (e.causeLogged[c].IsZero() || now.Sub(e.causeLogged[c]) >= errorLogInterval) {
			e.pace.Reset() // a cause no line named within the interval is logged at once
			break
		}
	}
	ok, quiet := e.pace.Allow()
	if !ok {
		return
	}
	for c := range numCauses {
		if p.causes.has(c) {
			e.causeLogged[c] = now
		}
	}
	msg := "redis pipeline failed; counts kept for the next tick, views go stale"
	switch {
	case p.causes.has(causeTLS):
		// Not the network: a certificate, or a TLS version, which no retry cures.
		msg = "redis TLS handshake failed on a certificate, not the network: check GATE_REDIS_TLS_CA_FILE against Redis's " +
			"(of another CA, expired, not for its host name) or, on a remote error, GATE_REDIS_TLS_CERT_FILE and " +
			"GATE_REDIS_TLS_KEY_FILE (Redis refuses the gate's); counts kept for the next tick, views go stale"
		if !p.tlsCert {
			msg = "redis TLS handshake failed, not the network: Redis refuses it with an alert about no certificate " +
				"(a TLS version or cipher the two do not share: its tls-protocols); counts kept for the next tick, views go stale"
		}
	case p.causes == 1<<causeTimeout:
		// No answer in time: the operator's question is whether Redis is slow or gone.
		msg = "redis pipeline failed: no answer within the timeout (GATE_REDIS_READ_TIMEOUT and GATE_REDIS_WRITE_TIMEOUT, " +
			"250ms by default, GATE_REDIS_DIAL_TIMEOUT for a connection, the tick's own bound: a Redis slower than that, one not answering, " +
			"or the network between); counts kept for the next tick, views go stale"
	case p.missingCommand:
		msg = "redis refuses the gate's commands: " + commandMissingHint + "; this gate's counts are kept for the next tick and reach no other gate meanwhile: each gate so refused limits by its own counts alone"
	case p.refusedLogin && p.failedReads == 0 && p.failedWrites > 0:
		// Reads answered, writes refused (an ACL without +eval): the views are fresh,
		// but hold none of this gate's counts, nor those of any gate refused alike.
		msg = loginRefusedMsg + "; this gate's counts are kept for the next tick and reach no other gate meanwhile: each gate refused so limits by its own counts alone"
	case p.refusedLogin:
		msg = loginRefusedMsg + "; counts kept for the next tick, views go stale"
	case p.causes&^refusals == 0:
		msg = "redis refused writes; counts kept in the level and for the next tick"
	}
	attrs := []any{"instance", instance, "cause", p.causes.String()}
	if p.nodeCauses != nil {
		attrs = append(attrs, "nodes", nodesFailed(p)) // cluster mode: which primaries failed, and how
	}
	log.Warn(msg, append(attrs,
		"failed_writes", p.failedWrites, "writes", p.writes, "failed_reads", p.failedReads, "reads", p.reads,
		"failed_unlogged", quiet, "failing_for", now.Sub(e.since).Round(time.Millisecond), "err", p.err)...)
	e.logged = true
}

func (e *errLog) recovered(log *slog.Logger, instance string, took time.Duration) {
	if !e.failing {
		return
	}
	if e.logged {
		log.Info("redis pipeline succeeds again; counts kept meanwhile are written from now on", "instance", instance,
			"failed_ticks", e.ticks, "failing_for", e.clock.Now().Sub(e.since).Round(time.Millisecond), "pipeline", took)
		// The stretch's failures left unlogged are in failed_ticks: not counted again as
		// the next stretch's first line's failed_unlogged (a refusal of another cause,
		// logged at once, said 29 of the OOM stretch before it).
		e.pace.Forget()
	}
	// The pace and when each cause was last logged stay: the next failures are logged at
	// once only past errorLogInterval, or with a cause not logged within it.
	e.failing, e.logged = false, false
}
