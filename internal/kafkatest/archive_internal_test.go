package kafkatest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBrokersMapTheClassArchive: a default broker's JVM starts from the class archive
// (it is mapped into the process), which FindTools made or found.
func TestBrokersMapTheClassArchive(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{})
	if c.tools.Archive == "" {
		t.Fatalf("no class archive: %v", c.tools.ArchiveErr)
	}
	n := c.nodes[0]
	n.mu.Lock()
	pid := n.proc.cmd.Process.Pid
	n.mu.Unlock()
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil && !inCI(os.Getenv) {
		t.Skipf("no /proc maps to look in: %v; skipping (set CI=true to make this a failure)", err)
	}
	if err != nil {
		t.Fatalf("no /proc maps to look in: %v; CI is set, so this is a failure, not a skip", err)
	}
	if !strings.Contains(string(maps), c.tools.Archive) {
		t.Errorf("the broker (pid %d) has not mapped %s", pid, c.tools.Archive)
	}
}

// TestClassArchiveFailureIsTriedOnce: an archive that cannot be made is tried once: the
// reason is kept beside its path, and a later call (another test binary) returns it
// without starting a JVM again.
func TestClassArchiveFailureIsTriedOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	java := filepath.Join(dir, "java")
	script := "#!/bin/sh\necho x >> " + calls + "\necho 'no java here' >&2\nexit 1\n"
	if err := os.WriteFile(java, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tools := Tools{Java: java, Jars: filepath.Join(dir, "jars"), Log4j: filepath.Join(dir, "log4j2.xml")}
	path, err := sharedArchive(tools, []byte("version"))
	if path != "" || err == nil || !strings.Contains(err.Error(), "no java here") {
		t.Fatalf("sharedArchive = %q, %v; want none and the java's complaint", path, err)
	}
	ran, _ := os.ReadFile(calls)
	path, err2 := sharedArchive(tools, []byte("version"))
	again, _ := os.ReadFile(calls)
	if path != "" || err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second sharedArchive = %q, %v; want none and the first reason", path, err2)
	}
	if len(again) != len(ran) {
		t.Errorf("the second call ran java again (%d runs, then %d)", strings.Count(string(ran), "x"), strings.Count(string(again), "x"))
	}
}

// TestClassArchiveFailureExpires: a failure older than archiveRetry is tried again.
func TestClassArchiveFailureExpires(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tools := Tools{Java: "/nonexistent/java", Jars: filepath.Join(dir, "jars")}
	path := archivePath(tools.Jars, tools.Java, []byte("v"))
	if err := os.WriteFile(path+archiveFailed, []byte("long ago"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-archiveRetry - time.Minute)
	if err := os.Chtimes(path+archiveFailed, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := sharedArchive(tools, []byte("v")); err == nil || err.Error() == "long ago" {
		t.Fatalf("sharedArchive = %v; want a new attempt's error, not the expired one", err)
	}
}
