package kafkatest

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWaitBrokersFindsAnExitedNodeBehindAnother: a node that exited while starting (its
// port taken by another process) ends the wait with exitedError, which New retries on
// fresh ports, even while a node before it cannot list it. Checking each node's process
// only when the nodes before it were ready waited out the whole start timeout instead,
// and the cluster was not retried (CI, 2026-11-29: TestGroupCoordinatorDies, "brokers
// [1 2 3] not all listed within 3m0s: node 1: metadata lists brokers [1 3], not yet 2",
// node 2's log: "Address already in use").
func TestWaitBrokersFindsAnExitedNodeBehindAnother(t *testing.T) {
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	running := &process{done: make(chan struct{})}
	exited := &process{done: make(chan struct{}), waitErr: errors.New("exit status 1")}
	close(exited.done)
	c := &Cluster{nodes: []*node{
		{id: 1, port: free(), proc: running}, // nothing listens: it never lists node 2
		{id: 2, port: free(), proc: exited},
	}}
	err := c.waitBrokers(20*time.Second, 1, 2)
	var ex *exitedError
	if !errors.As(err, &ex) || ex.node != 2 {
		t.Fatalf("waitBrokers = %v, want node 2's exit", err)
	}
}

// TestJarCacheFollowsThePom: the jars are resolved again when the POM changes. A cache
// keyed by Version alone kept the jars of whatever POM first resolved them (a log4j or
// SLF4J binding moved, a dependency added): a machine that had run the tests went on
// starting the old classpath, and a POM that no longer resolved passed there while a new
// machine failed.
func TestJarCacheFollowsThePom(t *testing.T) {
	cache := t.TempDir()
	env := map[string]string{"XDG_CACHE_HOME": cache, "JAVA_HOME": os.Getenv("JAVA_HOME")}
	getenv := func(k string) string { return env[k] }
	// What an earlier POM of the same Version left: complete, with a broker jar.
	stale := filepath.Join(cache, "capture-gate", "kafka-"+Version)
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{completeMark, "kafka_2.13-" + Version + ".jar"} {
		if err := os.WriteFile(filepath.Join(stale, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// An mvn that resolves offline: the broker jar, and a copy of the POM it was given.
	bin := t.TempDir()
	mvn := `#!/bin/sh
for a; do case "$a" in -DoutputDirectory=*) out="${a#*=}";; esac; done
prev=""; for a; do [ "$prev" = -f ] && pom="$a"; prev="$a"; done
mkdir -p "$out" && : > "$out/kafka_2.13-` + Version + `.jar" && cp "$pom" "$out/resolved-from.xml"
`
	if err := os.WriteFile(filepath.Join(bin, "mvn"), []byte(mvn), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	tools, err := FindTools(getenv)
	if IsMissing(err) && !inCI(os.Getenv) {
		t.Skipf("%v; skipping (set CI=true to make this a failure)", err) // no Java 17: FindTools stops before the jars
	}
	if err != nil {
		t.Fatal(err)
	}
	if tools.Jars == stale {
		t.Fatalf("FindTools used %s, resolved by an earlier POM, without resolving this one", stale)
	}
	got, err := os.ReadFile(filepath.Join(tools.Jars, "resolved-from.xml"))
	if err != nil {
		t.Fatalf("the jars in %s were not resolved from this POM: %v", tools.Jars, err)
	}
	want, err := os.ReadFile(filepath.Join("maven", "pom.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("the jars in %s were resolved from another POM", tools.Jars)
	}
	// The brokers' logging configuration is the source's, wherever the test binary was
	// built (make test builds with -trimpath: no source directory to find it in).
	log4j, err := os.ReadFile(tools.Log4j)
	if err != nil {
		t.Fatalf("the brokers' log4j configuration %s: %v", tools.Log4j, err)
	}
	if want, _ := os.ReadFile(filepath.Join("maven", "log4j2.xml")); string(log4j) != string(want) {
		t.Fatalf("%s is not maven/log4j2.xml", tools.Log4j)
	}
	// Another POM, another directory.
	a, errA := cacheDir(getenv, []byte("<project>a</project>"))
	b, errB := cacheDir(getenv, []byte("<project>b</project>"))
	if errA != nil || errB != nil || a == b {
		t.Fatalf("cacheDir of two POMs: %q (%v), %q (%v); want two directories", a, errA, b, errB)
	}
}

// TestWriteOnceReplacesAnotherContent: writeOnce names a file by its content, writes it
// when absent, leaves it when it holds that content, and writes it again when it holds
// anything else (cut short by a full disk, say), never handing back a file that differs.
func TestWriteOnceReplacesAnotherContent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache") // created by the first call
	p, err := writeOnce(dir, "conf", ".xml", []byte("<a/>"))
	if err != nil {
		t.Fatal(err)
	}
	if q, err := writeOnce(dir, "conf", ".xml", []byte("<a/>")); err != nil || q != p {
		t.Fatalf("the same content again: %q, %v; want %q", q, err, p)
	}
	if q, _ := writeOnce(dir, "conf", ".xml", []byte("<b/>")); q == p {
		t.Fatalf("another content shares the file %s", p)
	}
	if err := os.WriteFile(p, []byte("<"), 0o644); err != nil {
		t.Fatal(err)
	}
	if q, err := writeOnce(dir, "conf", ".xml", []byte("<a/>")); err != nil || q != p {
		t.Fatalf("after the file was cut short: %q, %v; want %q", q, err, p)
	}
	if b, _ := os.ReadFile(p); string(b) != "<a/>" {
		t.Fatalf("%s holds %q, want <a/>", p, b)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.partial")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
