// The tick's settings: Config, its defaults and its checks. A zero field takes its
// default; KeyTTL is raised, for each limiter, to its KeyLifetime (NewMulti). Every problem of the settings is reported at once, joined in
// one error that wraps ErrBadConfig, and New refuses a Config with any.

package tick

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capturegate/gate/internal/durtext"
)

// Config holds the tick's settings. The zero value of a field means its default.
type Config struct {
	// Mode is the Redis topology: standalone (default: one pipeline per instance, teams
	// spread by InstanceFor), cluster (one ClusterClient; hash-tagged keys, see
	// ClusterKey) or sentinel (one FailoverClient that follows the primary).
	Mode Mode
	// TickInterval is how often counts are written and due reads are made. Default 1 s.
	TickInterval time.Duration
	// KeyPrefix starts every Redis key: {prefix}:{team}:{epoch}. Default "gate".
	KeyPrefix string
	// KeyTTL is the expiry set on each epoch key, raised for each limiter to 2 × its own
	// window (3 × with learned thresholds, whose folds read the window two back; plus its
	// MaxEventAge under the event clock: limit.Limiter.KeyLifetime), or
	// the previous epoch would vanish while still in use and over-limit teams get free
	// traffic; a limiter's floor is its own, not the first one's, so that a minute
	// limit's keys beside an hour's expire after minutes. Default 0: each one's floor.
	KeyTTL time.Duration
	// KeysPerCommand is how many keys one MGET carries. Default 200.
	KeysPerCommand int
	// KeysPerTick bounds the keys one tick touches across all instances (each write is
	// one key, each read the keys its MGET carries: readCost); the rest waits for the
	// next tick, writes first, leaving two keys for reads while some are due. Default
	// 500,000.
	KeysPerTick int
	// MaxPendingWrites bounds the (team, epoch) counts kept waiting for Redis, for example
	// while it is down. Past it new counts are dropped and counted. Default 1,000,000.
	MaxPendingWrites int
	// MaxReadsPerTick bounds the reads one tick makes; the teams nearest their limit go
	// first (readPriority; a read put off gaining on them each tick: readAging) and the
	// rest are planned again next tick. Default 100,000.
	MaxReadsPerTick int
	// FlushTimeout bounds the final flush when Run stops, tried again until then while
	// Redis fails it. Default 5 s.
	FlushTimeout time.Duration
	// TickTimeout bounds one tick's wait for Redis. Default 3/4 of TickInterval: a
	// server or node that hangs costs its own teams that tick's writes and reads (resent
	// and read again next tick), never the next tick's start.
	TickTimeout time.Duration
	// KeepConfirmed is how long batches Redis confirmed are kept, to be sent again if
	// Redis loses them: a Sentinel failover drops what the old primary acknowledged
	// after its last replication, and the client learns of the switch 1-2 s after the
	// promotion, and up to 4.6 s in the tests with 100 ms ticks (docs/design.md, "Redis
	// failover and lost counts"). Counted in ticks whose writes Redis answered on the
	// batch's lane (forgetConfirmed): only an answer reveals a loss, so an outage ages
	// nothing. Default 10 s: ten ticks' writes in memory, about 48 bytes per count written.
	KeepConfirmed time.Duration
	// Writer names this process in Redis: each lane's sequence key carries it, which is
	// what makes a resent write harmless (writeScript). It must differ between every two
	// processes writing at the same time, and a process must not reuse an earlier one's
	// while that one's keys live. Default: 16 random hex digits. The gate passes its host
	// name and start time.
	Writer string
	// LiveRules are, with a rules file, its rules' names: the live key says so
	// (LiveValue), so that gate overrides can tell an operator who writes a hash the
	// gates do not read (the gate's own without a rule, a rule they do not run).
	LiveRules []string
	// LiveLimits describes the limits this gate enforces, every setting that changes how
	// a key is counted or judged (agree.go): the fleet's gates compare its hash
	// (LimitsHash) once a minute and warn when they disagree. Empty: not compared.
	LiveLimits string
	// Redirects, when set, is the cluster client's redirect counter, made and watching
	// the client before this tick (NewRedirects): a gate's successive rule sets' ticks
	// share it. Nil: the tick makes its own, with its metrics, and watches a cluster
	// client itself.
	Redirects *Redirects
	// Fleet, when set, is the gate's count of its fleet (NewFleet), shared by its
	// successive rule sets' ticks: a new one neither counts the gate again in a slot
	// another counted it in nor starts its limiters at a fleet of one. Nil: the tick's
	// own.
	Fleet *Fleet
	// Evictions, when set, is the gate's watch of Redis's evictions (NewEvictions),
	// shared by its successive rule sets' ticks: a new one looks at the minute the
	// gate's last look is due, and counts what Redis evicted since. Nil: the tick's own,
	// whose first look a minute after it starts only notes each node's count.
	Evictions *Evictions
	// Unwritten, when set, is what the gate's retired ticks hold that Redis does not
	// (NewUnwritten, Retire), shared by its successive rule sets' ticks: each adds it to
	// its reads. Nil: nothing is shared.
	Unwritten *Unwritten
	// Dropped, when set, is the counter of counts dropped unwritten (NewDropped,
	// registered by its maker), shared by a gate's successive rule sets' ticks: a retired
	// one's drops are counted where the gate's metrics show them. Nil: the tick makes its
	// own, with its metrics.
	Dropped *Dropped
	// Warnings, when set, is the pace of the clock check's warnings and the run of checks
	// the fleet's disagreement on limits is warned after (NewWarnings), shared by a gate's
	// successive rule sets' ticks: a new one neither repeats a warning just given nor
	// starts that run again. Nil: the tick's own.
	Warnings *Warnings
}

// Defaults for Config.
const (
	DefaultTickInterval     = time.Second
	DefaultKeyPrefix        = "gate"
	DefaultKeysPerCommand   = 200
	DefaultKeysPerTick      = 500_000
	DefaultMaxPendingWrites = 1_000_000
	DefaultMaxReadsPerTick  = 100_000
	DefaultFlushTimeout     = 5 * time.Second
	DefaultKeepConfirmed    = 10 * time.Second
)

// ErrBadConfig wraps every configuration error.
var ErrBadConfig = errors.New("tick: invalid configuration")

func (c Config) withDefaults() (Config, error) {
	if c.Mode == "" {
		c.Mode = ModeStandalone
	}
	if c.TickInterval == 0 {
		c.TickInterval = DefaultTickInterval
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.KeysPerCommand == 0 {
		c.KeysPerCommand = DefaultKeysPerCommand
	}
	if c.KeysPerTick == 0 {
		c.KeysPerTick = DefaultKeysPerTick
	}
	if c.MaxPendingWrites == 0 {
		c.MaxPendingWrites = DefaultMaxPendingWrites
	}
	if c.MaxReadsPerTick == 0 {
		c.MaxReadsPerTick = DefaultMaxReadsPerTick
	}
	if c.FlushTimeout == 0 {
		c.FlushTimeout = DefaultFlushTimeout
	}
	if c.KeepConfirmed == 0 {
		c.KeepConfirmed = DefaultKeepConfirmed
	}
	if c.TickTimeout == 0 {
		c.TickTimeout = c.TickInterval * 3 / 4
	}
	if c.Writer == "" {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		c.Writer = hex.EncodeToString(b[:])
	}
	var errs []error
	if err := c.Mode.valid(); err != nil {
		errs = append(errs, err)
	}
	if err := CheckKeyPrefix(c.Mode, c.KeyPrefix); err != nil {
		errs = append(errs, err)
	}
	if c.TickInterval < 0 {
		errs = append(errs, fmt.Errorf("tick interval %s: must be positive", durtext.String(c.TickInterval)))
	}
	if c.KeepConfirmed < 0 {
		errs = append(errs, fmt.Errorf("keep confirmed %s: must be positive", durtext.String(c.KeepConfirmed)))
	}
	if c.TickTimeout < 0 {
		errs = append(errs, fmt.Errorf("tick timeout %s: must be positive", durtext.String(c.TickTimeout)))
	}
	if c.Mode == ModeCluster && strings.ContainsAny(c.Writer, "{}") {
		errs = append(errs, fmt.Errorf("writer %q: must not contain braces in cluster mode", c.Writer))
	}
	if c.KeysPerCommand < 2 {
		errs = append(errs, fmt.Errorf("keys per command %d: must be at least 2", c.KeysPerCommand))
	}
	if c.KeysPerTick < 2 {
		errs = append(errs, fmt.Errorf("keys per tick %d: must be at least 2", c.KeysPerTick))
	}
	if c.MaxPendingWrites < 1 || c.MaxReadsPerTick < 1 {
		errs = append(errs, fmt.Errorf("max pending writes %d, max reads per tick %d: must be at least 1", c.MaxPendingWrites, c.MaxReadsPerTick))
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("%w: %w", ErrBadConfig, errors.Join(errs...))
	}
	return c, nil
}
