package kafkatest

import (
	"archive/zip"
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
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
	// An mvn that resolves offline: the broker jar (a readable one: resolve opens each),
	// and a copy of the POM it was given.
	bin := t.TempDir()
	jar := filepath.Join(bin, "broker.jar")
	if err := os.WriteFile(jar, []byte(jarBytes(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	mvn := `#!/bin/sh
for a; do case "$a" in -DoutputDirectory=*) out="${a#*=}";; esac; done
prev=""; for a; do [ "$prev" = -f ] && pom="$a"; prev="$a"; done
mkdir -p "$out" && cp "` + jar + `" "$out/kafka_2.13-` + Version + `.jar" && cp "$pom" "$out/resolved-from.xml"
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

// TestWaitBrokersNoticesAnExitedController: with Options.Controller the brokers cannot
// be listed without their controller; one that exited while starting (its port taken)
// ends the wait with exitedError, which New retries on fresh ports. Checking the brokers'
// processes alone waited out the whole start timeout (3 min) and failed the cluster (a
// review).
func TestWaitBrokersNoticesAnExitedController(t *testing.T) {
	free := freePort(t)
	running := &process{done: make(chan struct{})}
	exited := &process{done: make(chan struct{}), waitErr: errors.New("exit status 1")}
	close(exited.done)
	c := &Cluster{opts: Options{Controller: true}, nodes: []*node{
		{id: 1, port: free(), proc: running}, // no broker lists anything without its controller
		{id: 2, controller: true, ctrl: free(), proc: exited},
	}}
	err := c.waitBrokers(20*time.Second, c.nodeIDs()...)
	var ex *exitedError
	if !errors.As(err, &ex) || ex.node != 2 {
		t.Fatalf("waitBrokers = %v, want the controller's exit", err)
	}
}

// freePort returns a function that gives a port free when asked.
func freePort(t *testing.T) func() int {
	return func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
}

// fakeJava is a cluster whose "java" is script (a shell script), with one node: for the
// node lifecycle without a JVM.
func fakeJava(t *testing.T, script string) (*Cluster, *node) {
	t.Helper()
	dir := t.TempDir()
	java := filepath.Join(dir, "java")
	if err := os.WriteFile(java, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	n := &node{id: 1, dir: dir, logPath: filepath.Join(dir, "log")}
	c := &Cluster{tools: Tools{Java: java}, nodes: []*node{n}}
	t.Cleanup(c.Close)
	return c, n
}

// TestStopKeepsAProcessStartedMeanwhile: a node Killed and started again while Stop waits
// for its process (a controlled shutdown that takes its time) keeps the new process:
// Running says so and Close kills it. Stop forgot it whatever it was, in 50 of 50 runs,
// a JVM that outlived its cluster (a review).
func TestStopKeepsAProcessStartedMeanwhile(t *testing.T) {
	// Ignores SIGTERM, saying so in "term" (its first line written once it is set).
	c, n := fakeJava(t, "trap 'echo term >> term' TERM\necho ready >> term\nwhile :; do sleep 0.05; done\n")
	term := filepath.Join(n.dir, "term")
	lines := func() int {
		b, _ := os.ReadFile(term)
		return strings.Count(string(b), "\n")
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 20s", what)
			}
		}
	}
	for i := range 3 {
		_ = os.Remove(term)
		if err := c.launch(n); err != nil {
			t.Fatal(err)
		}
		waitFor("trap set", func() bool { return lines() >= 1 })
		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(1) }()
		waitFor("SIGTERM taken", func() bool { return lines() >= 2 }) // Stop waits now
		if err := c.Kill(1); err != nil {
			t.Fatal(err)
		}
		if err := c.launch(n); err != nil { // Restart's first step
			t.Fatal(err)
		}
		n.mu.Lock()
		started := n.proc
		n.mu.Unlock()
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		n.mu.Lock()
		kept := n.proc == started
		n.mu.Unlock()
		if !kept || !c.Running(1) {
			t.Fatalf("run %d: the process started while Stop waited is forgotten (Running %v)", i, c.Running(1))
		}
		if err := c.Kill(1); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRestartAfterACrash: a node whose process exited by itself (a crash, the OOM killer,
// a kill from outside) is not Running, and starting it again works, as Restart's doc
// says. It answered "node 1 is already running" until Kill was called first (a review).
func TestRestartAfterACrash(t *testing.T) {
	c, n := fakeJava(t, "exec sleep 60\n")
	if err := c.launch(n); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil { // from outside: n.proc stays set
		t.Fatal(err)
	}
	<-p.done
	if c.Running(1) {
		t.Fatal("Running(1) after its process exited")
	}
	if err := c.launch(n); err != nil {
		t.Fatalf("starting a crashed node again: %v", err)
	}
	if !c.Running(1) {
		t.Fatal("not Running after it was started again")
	}
}

// TestRestartWaitsForTheControllerPort: a dedicated controller has no client listener
// and is never a broker in metadata; Restart waits for its controller port instead (it
// waited for metadata listing it, 3 min, and failed with the controller back: a review),
// and fails early when it exits.
func TestRestartWaitsForTheControllerPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	running := &process{done: make(chan struct{})}
	n := &node{id: 2, controller: true, ctrl: l.Addr().(*net.TCPAddr).Port, proc: running}
	c := &Cluster{nodes: []*node{{id: 1}, n}}
	if err := c.waitListening(n, 20*time.Second); err != nil {
		t.Fatalf("waitListening on a listening controller: %v", err)
	}
	exited := &process{done: make(chan struct{}), waitErr: errors.New("exit status 1")}
	close(exited.done)
	n.proc, n.ctrl = exited, freePort(t)()
	var ex *exitedError
	if err := c.waitListening(n, 20*time.Second); !errors.As(err, &ex) {
		t.Fatalf("waitListening on an exited controller = %v, want its exit", err)
	}
}

// TestKeepLogsTwice: GATETEST_LOG_DIR's copy of a cluster replaces an earlier run's of the
// same test: a second run into one directory (-count=2, or a rerun chasing a flake)
// failed every Kafka test with "file exists" (a review).
func TestKeepLogsTwice(t *testing.T) {
	keep, dir := t.TempDir(), t.TempDir()
	for run := range 2 {
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "data", ".lock"), []byte{byte('0' + run)}, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := keepLogs(keep, "TestX/sub", dir); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(keep, "TestX_sub-kafka", "data", ".lock")); err != nil || string(b) != "1" {
		t.Fatalf("kept %q, %v; want the second run's", b, err)
	}
}

// fakeMvn puts on PATH an mvn that copies files (name: content) into its
// -DoutputDirectory, failing unless given -C (checksums checked), and returns the
// environment FindTools reads, with GATETEST_KAFKA_JARS set to jars when not "".
func fakeMvn(t *testing.T, jars string, files map[string]string) map[string]string {
	t.Helper()
	bin, src := t.TempDir(), t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := "#!/bin/sh\nstrict=\nfor a; do case \"$a\" in -DoutputDirectory=*) out=\"${a#*=}\";; -C) strict=1;; esac; done\n" +
		"[ -n \"$strict\" ] || { echo 'checksums not checked' >&2; exit 1; }\nmkdir -p \"$out\" && cp " + src + "/* \"$out\"/\n"
	if err := os.WriteFile(filepath.Join(bin, "mvn"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	env := map[string]string{"XDG_CACHE_HOME": t.TempDir(), "JAVA_HOME": os.Getenv("JAVA_HOME")}
	if jars != "" {
		env["GATETEST_KAFKA_JARS"] = jars
	}
	return env
}

// jarBytes is a readable jar holding one file.
func jarBytes(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	f, err := w.Create("META-INF/MANIFEST.MF")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("Manifest-Version: 1.0\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestJarsDirOfTheUsersIsKept: GATETEST_KAFKA_JARS naming a directory of the user's
// without this version's jars (another release's libs/) is refused, naming it, not
// resolved into and replaced, the user's files with it (a review).
func TestJarsDirOfTheUsersIsKept(t *testing.T) {
	if _, _, err := findJava(os.Getenv); err != nil {
		t.Skipf("FindTools checks java first: %v", err)
	}
	libs := filepath.Join(t.TempDir(), "libs")
	if err := os.MkdirAll(libs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kafka_2.13-4.0.0.jar", "README-mine.txt"} {
		if err := os.WriteFile(filepath.Join(libs, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := fakeMvn(t, libs, map[string]string{"kafka_2.13-" + Version + ".jar": jarBytes(t)})
	_, err := FindTools(func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "GATETEST_KAFKA_JARS="+libs) {
		t.Errorf("FindTools = %v, want it to refuse the directory, naming it", err)
	}
	if _, err := os.Stat(filepath.Join(libs, "README-mine.txt")); err != nil {
		t.Errorf("the user's file in GATETEST_KAFKA_JARS is gone: %v", err)
	}
}

// TestTruncatedJarIsNotCached: a jar Maven hands over that is no readable zip (a proxy's
// truncated answer under a checksum Maven did not check: its default policy only warns,
// and -q hides it) fails the resolution, naming the jar, and nothing is marked complete:
// it was cached for good, every broker failing to start with a missing class (a review).
func TestTruncatedJarIsNotCached(t *testing.T) {
	jars := filepath.Join(t.TempDir(), "jars") // ours to fill: missing
	good := jarBytes(t)
	fakeMvn(t, jars, map[string]string{"kafka_2.13-" + Version + ".jar": good[:len(good)/2], "kafka-clients-" + Version + ".jar": good})
	err := resolve(jars)
	if err == nil || !strings.Contains(err.Error(), "kafka_2.13-"+Version+".jar") || !strings.Contains(err.Error(), "not a readable jar") {
		t.Errorf("resolve = %v, want it to name the truncated jar", err)
	}
	if fileExists(filepath.Join(jars, completeMark)) {
		t.Error("a resolution holding a truncated jar is marked complete")
	}
	// And a whole one is taken.
	fakeMvn(t, jars, map[string]string{"kafka_2.13-" + Version + ".jar": good})
	if err := resolve(jars); err != nil || !fileExists(filepath.Join(jars, completeMark)) {
		t.Errorf("resolve of readable jars = %v (complete: %v)", err, fileExists(filepath.Join(jars, completeMark)))
	}
}

// TestFreePortsBelowTheEphemeralRange: a cluster's ports come from below the kernel's
// ephemeral range, which every listen on port 0 and every outgoing connection take from:
// a node down for a failover test keeps its ports through Restart, and one of them taken
// meanwhile by another test's listener failed the restart (a review).
func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	lo, hi := lowPorts()
	if hi <= lo {
		t.Skip("no room below the ephemeral range here (or not Linux): freePorts takes the kernel's")
	}
	ports, err := freePorts(9)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < lo || p >= hi || seen[p] {
			t.Errorf("ports %v: want 9 distinct in [%d, %d)", ports, lo, hi)
			break
		}
		seen[p] = true
	}
}
