package redistest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Refusal is a way a running Redis refuses writes while it still serves reads, as
// production servers do: see RefuseWrites.
type Refusal uint8

// The refusals RefuseWrites can put a server in.
const (
	// RefuseOOM: used memory above maxmemory under maxmemory-policy noeviction. Commands
	// that may grow memory (INCRBY, SET) fail with "OOM command not allowed when used
	// memory > 'maxmemory'."; others (EXPIRE, DEL, MGET) still run.
	RefuseOOM Refusal = iota + 1
	// RefuseReadOnly: a primary demoted to a replica (REPLICAOF, as in a failover) of
	// another server this package starts. Writes fail with "READONLY You can't write
	// against a read only replica."; reads answer from the replica's data, which the
	// first sync replaced with the new primary's (empty).
	RefuseReadOnly
	// RefuseMisconf: the last RDB snapshot failed while snapshots are configured and
	// stop-writes-on-bgsave-error is yes. Writes fail with "MISCONF ... unable to persist
	// to disk"; reads still run.
	RefuseMisconf
	// RefuseNoReplicas: min-replicas-to-write 1 on a server with no replica in sync, as a
	// primary cut off from its replicas. Writes fail with "NOREPLICAS Not enough good
	// replicas to write."; reads still run.
	RefuseNoReplicas
)

func (r Refusal) String() string {
	switch r {
	case RefuseOOM:
		return "oom"
	case RefuseReadOnly:
		return "readonly"
	case RefuseMisconf:
		return "misconf"
	case RefuseNoReplicas:
		return "noreplicas"
	}
	return "Refusal(" + strconv.Itoa(int(r)) + ")"
}

// errPrefix is how Redis starts the error it refuses a write with.
func (r Refusal) errPrefix() string {
	switch r {
	case RefuseOOM:
		return "OOM "
	case RefuseReadOnly:
		return "READONLY "
	case RefuseMisconf:
		return "MISCONF "
	case RefuseNoReplicas:
		return "NOREPLICAS "
	}
	return ""
}

// snapshotBlocker is the directory RefuseMisconf puts where the server's snapshot goes.
func snapshotBlocker(dir, dbfile string) string { return filepath.Join(dir, dbfile) }

// RefuseWrites makes the running server refuse writes the way how says, while it keeps
// serving reads, and returns once a write is refused (checked with an INCRBY that fails).
// AcceptWrites undoes it. A server started by Restart accepts writes again.
//
// RefuseMisconf works whatever the user (root included): the snapshot's final rename
// fails because a directory stands where the snapshot file goes.
func (s *Server) RefuseWrites(t testing.TB, how Refusal) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	c := s.rawClient()
	defer c.Close()
	do := func(args ...any) string {
		t.Helper()
		v, err := c.Do(ctx, args...).Text()
		if err != nil {
			t.Fatalf("redistest: RefuseWrites(%s) on %s: %v: %v\n%s", how, s.Addr(), args, err, s.logTail())
		}
		return v
	}
	deadline := time.Now().Add(topologyTimeout)
	switch how {
	case RefuseOOM:
		do("CONFIG", "SET", "maxmemory-policy", "noeviction")
		do("CONFIG", "SET", "maxmemory", "1") // any server uses more than one byte
	case RefuseReadOnly:
		// No wait for more replicas before the first sync (5 s by default).
		primary := start(t, nil, []string{"--repl-diskless-sync-delay", "0"}, Options{})
		do("REPLICAOF", "127.0.0.1", strconv.Itoa(primary.port))
		// Until the first sync is done, reads may answer LOADING: wait for the link.
		waitFor(t, deadline, s, func(info string) bool { return field(info, "master_link_status") == "up" }, "INFO", "replication")
	case RefuseMisconf:
		dir := configGet(ctx, t, c, "dir")
		if err := os.Mkdir(snapshotBlocker(dir, configGet(ctx, t, c, "dbfilename")), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatalf("redistest: RefuseWrites(%s): %v", how, err)
		}
		do("CONFIG", "SET", "stop-writes-on-bgsave-error", "yes")
		// Writes are refused only while some save point is configured; this one is never
		// reached in a test (an hour).
		do("CONFIG", "SET", "save", "3600 1")
		do("BGSAVE")
		waitFor(t, deadline, s, func(info string) bool {
			return field(info, "rdb_bgsave_in_progress") == "0" && field(info, "rdb_last_bgsave_status") == "err"
		}, "INFO", "persistence")
	case RefuseNoReplicas:
		do("CONFIG", "SET", "min-replicas-max-lag", "10")
		do("CONFIG", "SET", "min-replicas-to-write", "1")
	default:
		t.Fatalf("redistest: RefuseWrites: unknown refusal %d", how)
	}
	err := c.IncrBy(ctx, "redistest:probe", 1).Err()
	if err == nil || !strings.HasPrefix(err.Error(), how.errPrefix()) {
		t.Fatalf("redistest: RefuseWrites(%s) on %s: a write got %v, want an error starting %q\n%s",
			how, s.Addr(), err, how.errPrefix(), s.logTail())
	}
	s.mu.Lock()
	s.refusal = how
	s.mu.Unlock()
}

// AcceptWrites undoes RefuseWrites: maxmemory back to none, the replica promoted again
// (REPLICAOF NO ONE), or snapshots off again (as Start has them) and the blocking
// directory removed. It returns once a write is accepted; the write it checks with is
// undone. Without a RefuseWrites before it, AcceptWrites does nothing.
func (s *Server) AcceptWrites(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	how := s.refusal
	s.refusal = 0
	s.mu.Unlock()
	if how == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	c := s.rawClient()
	defer c.Close()
	do := func(args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("redistest: AcceptWrites (%s) on %s: %v: %v\n%s", how, s.Addr(), args, err, s.logTail())
		}
	}
	switch how {
	case RefuseOOM:
		do("CONFIG", "SET", "maxmemory", "0")
	case RefuseReadOnly:
		do("REPLICAOF", "NO", "ONE")
	case RefuseMisconf:
		do("CONFIG", "SET", "save", "")
		dir := configGet(ctx, t, c, "dir")
		if err := os.Remove(snapshotBlocker(dir, configGet(ctx, t, c, "dbfilename"))); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("redistest: AcceptWrites (%s): %v", how, err)
		}
	case RefuseNoReplicas:
		do("CONFIG", "SET", "min-replicas-to-write", "0")
	}
	if err := c.IncrBy(ctx, "redistest:probe", 1).Err(); err != nil {
		t.Fatalf("redistest: AcceptWrites (%s) on %s: a write still fails: %v\n%s", how, s.Addr(), err, s.logTail())
	}
	do("DEL", "redistest:probe")
}

// configGet returns one CONFIG GET value.
func configGet(ctx context.Context, t testing.TB, c *redis.Client, name string) string {
	t.Helper()
	m, err := c.ConfigGet(ctx, name).Result()
	if err != nil || m[name] == "" {
		t.Fatalf("redistest: CONFIG GET %s: %v (got %v)", name, err, m)
	}
	return m[name]
}
