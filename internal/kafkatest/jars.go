package kafkatest

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// Version is the Apache Kafka release the tests run: kafka.version in maven/pom.xml.
// 4.3 because franz-go asks for 4.3 or later before it runs the KIP-848 consumer group
// protocol (earlier brokers can answer a commit with STALE_MEMBER_EPOCH that the client
// cannot handle), and because kafka.tools.StorageTool and kafka.Kafka, which the
// release's bin/ scripts start, are still in kafka_2.13 there.
const Version = "4.3.1"

// minJava is the oldest Java Kafka 4.x brokers run on.
const minJava = 17

// Tools are what starting a broker needs: a java of at least minJava and the
// directory holding Kafka's jars.
type Tools struct {
	Java  string // the java binary
	Jars  string // directory of the runtime jars (java -cp 'Jars/*')
	Log4j string // our log4j2 configuration: maven/log4j2.xml, written out (writeOnce)
	// Archive is the class-data-sharing archive of a broker's classes (archive.go) the
	// default Options' JVMs map, or "" for none; ArchiveErr says why there is none.
	Archive    string
	ArchiveErr error
}

// missingError says which tool is missing and what to install.
type missingError struct{ what string }

func (e *missingError) Error() string { return e.what }

// IsMissing reports whether err says a tool (Java 17+, Maven) is not installed, as
// opposed to a failure of an installed one.
func IsMissing(err error) bool {
	var m *missingError
	return errors.As(err, &m)
}

// The POM Kafka's jars are resolved from and the brokers' logging configuration, built
// into the package rather than read from its source directory: found through the
// compiler's file names (runtime.Caller), they were lost to -trimpath, which make test
// builds with so that a clone in another directory reuses the build cache.
var (
	//go:embed maven/pom.xml
	pomXML []byte
	//go:embed maven/log4j2.xml
	log4jXML []byte
)

// CacheDir is where the jars are resolved to: $GATETEST_KAFKA_JARS when set, else
// kafka-Version-<digest of maven/pom.xml> under the user's cache directory
// ($XDG_CACHE_HOME or ~/.cache), which outlives a checkout so that a machine resolves
// them once per POM: an edited POM (a dependency added, a version moved) is resolved
// afresh, as on a new machine, instead of finding the jars an earlier POM resolved.
func CacheDir(getenv func(string) string) (string, error) {
	if d := getenv("GATETEST_KAFKA_JARS"); d != "" {
		return d, nil
	}
	return cacheDir(getenv, pomXML)
}

// cacheDir is CacheDir for the POM pom, without GATETEST_KAFKA_JARS.
func cacheDir(getenv func(string) string, pom []byte) (string, error) {
	base, err := cacheBase(getenv)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(pom)
	return filepath.Join(base, "kafka-"+Version+"-"+hex.EncodeToString(sum[:6])), nil
}

// cacheBase is the directory kafkatest keeps what outlives a checkout in: capture-gate
// under $XDG_CACHE_HOME, else under ~/.cache.
func cacheBase(getenv func(string) string) (string, error) {
	base := getenv("XDG_CACHE_HOME")
	if base == "" {
		home := getenv("HOME")
		if home == "" {
			return "", errors.New("kafkatest: neither XDG_CACHE_HOME nor HOME is set: set GATETEST_KAFKA_JARS to a directory for Kafka's jars")
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "capture-gate"), nil
}

// writeOnce returns the path of a file in dir holding content, named prefix, a digest
// of content and suffix, writing it first when there is none: concurrent callers (test
// binaries of several packages) write the same bytes, each to a file of its own renamed
// into place, so none reads a file half written.
func writeOnce(dir, prefix, suffix string, content []byte) (string, error) {
	sum := sha256.Sum256(content)
	path := filepath.Join(dir, prefix+"-"+hex.EncodeToString(sum[:6])+suffix)
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, content) {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, prefix+"-*.partial")
	if err != nil {
		return "", fmt.Errorf("kafkatest: writing %s: %w", path, err)
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("kafkatest: writing %s: %w", path, err)
	}
	return path, nil
}

// FindTools finds java (JAVA_HOME's, else the one on PATH) and checks that it is at
// least Java 17, then resolves Kafka's jars with Maven into CacheDir unless a previous
// resolution completed there. Concurrent callers (test binaries of several packages)
// serialize on a lock file; the first resolves, the others find the result. A missing
// java or mvn is a *missingError (IsMissing).
func FindTools(getenv func(string) string) (Tools, error) {
	java, version, err := findJava(getenv)
	if err != nil {
		return Tools{}, err
	}
	dir, err := CacheDir(getenv)
	if err != nil {
		return Tools{}, err
	}
	// Jars put in GATETEST_KAFKA_JARS by hand (a Kafka release's libs/, as the missing-mvn
	// message suggests) carry no completeMark: they are used as they are, not resolved
	// again, which would replace (remove) that directory.
	byHand := getenv("GATETEST_KAFKA_JARS") != "" && fileExists(filepath.Join(dir, "kafka_2.13-"+Version+".jar"))
	if !byHand && getenv("GATETEST_KAFKA_JARS") != "" && !fileExists(filepath.Join(dir, completeMark)) {
		// A directory of the user's without this version's jars (another release's
		// libs/, say): resolving into it would replace it, their files with it.
		if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
			return Tools{}, fmt.Errorf("kafkatest: GATETEST_KAFKA_JARS=%s holds no kafka_2.13-%s.jar: put Apache Kafka %s's libs/ there, or name an empty or missing directory for Maven to fetch them into, or unset it", dir, Version, Version)
		}
	}
	if !byHand {
		if err := resolve(dir); err != nil {
			return Tools{}, err
		}
	}
	base, err := cacheBase(getenv)
	if err != nil {
		base = os.TempDir() // jars in GATETEST_KAFKA_JARS need no cache of ours
	}
	log4j, err := writeOnce(base, "log4j2", ".xml", log4jXML)
	if err != nil {
		return Tools{}, err
	}
	tools := Tools{Java: java, Jars: dir, Log4j: log4j}
	tools.Archive, tools.ArchiveErr = sharedArchive(tools, version)
	return tools, nil
}

var javaVersionRE = regexp.MustCompile(`version "(\d+)(?:\.(\d+))?`)

// findJava returns the java to run and what its -version printed.
func findJava(getenv func(string) string) (string, []byte, error) {
	java := ""
	if h := getenv("JAVA_HOME"); h != "" {
		if p := filepath.Join(h, "bin", "java"); fileExists(p) {
			java = p
		}
	}
	if java == "" {
		p, err := exec.LookPath("java")
		if err != nil {
			return "", nil, &missingError{fmt.Sprintf("kafkatest: no java on PATH: install Java %d or later (Debian: apt-get install openjdk-17-jre-headless) and Maven (apt-get install maven)", minJava)}
		}
		java = p
	}
	out, err := exec.Command(java, "-version").CombinedOutput()
	if err != nil {
		return "", nil, fmt.Errorf("kafkatest: %s -version: %w\n%s", java, err, out)
	}
	m := javaVersionRE.FindSubmatch(out)
	if m == nil {
		return "", nil, fmt.Errorf("kafkatest: cannot read the version of %s from %q", java, out)
	}
	v, _ := strconv.Atoi(string(m[1]))
	if v == 1 && len(m[2]) > 0 { // 1.8 style
		v, _ = strconv.Atoi(string(m[2]))
	}
	if v < minJava {
		return "", nil, &missingError{fmt.Sprintf("kafkatest: %s is Java %d; Kafka %s needs Java %d or later (set JAVA_HOME to one)", java, v, Version, minJava)}
	}
	return java, out, nil
}

// completeMark is written into the cache directory once every jar is in it.
const completeMark = ".complete"

// resolve copies the runtime dependencies of maven/pom.xml (pomXML) into dir with Maven,
// unless dir holds a completed resolution. It resolves into a sibling directory and
// renames it, so a resolution cut short leaves nothing that looks complete.
func resolve(dir string) error {
	if fileExists(filepath.Join(dir, completeMark)) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("kafkatest: creating the jar cache: %w", err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("kafkatest: opening the jar cache's lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("kafkatest: locking the jar cache: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if fileExists(filepath.Join(dir, completeMark)) {
		return nil // another process resolved it while we waited
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return &missingError{fmt.Sprintf("kafkatest: no mvn on PATH: install Maven (Debian: apt-get install maven) to fetch Apache Kafka %s's jars, or put them in GATETEST_KAFKA_JARS", Version)}
	}
	tmp := dir + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("kafkatest: clearing %s: %w", tmp, err)
	}
	// Maven reads a POM from a file: this one's, beside the cache, gone once resolved.
	pomDir, err := os.MkdirTemp(filepath.Dir(dir), "pom-")
	if err != nil {
		return fmt.Errorf("kafkatest: writing the POM for Maven: %w", err)
	}
	defer os.RemoveAll(pomDir)
	pom := filepath.Join(pomDir, "pom.xml")
	if err := os.WriteFile(pom, pomXML, 0o644); err != nil {
		return fmt.Errorf("kafkatest: writing the POM for Maven: %w", err)
	}
	start := time.Now()
	// -C: a checksum that does not match fails the download (Maven's default only
	// warns, and -q hides the warning: a truncated jar was cached for good). Bounded, so
	// that a download that hangs says so rather than the test binary's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), mavenTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "-C", "-f", pom, "dependency:copy-dependencies",
		"-DoutputDirectory="+tmp, "-DincludeScope=runtime")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("not done within %v: %w", mavenTimeout, err)
		}
		return fmt.Errorf("kafkatest: resolving Apache Kafka %s with Maven (internal/kafkatest/maven/pom.xml): %w\n%s", Version, err, tail(out.Bytes(), 4<<10))
	}
	if !fileExists(filepath.Join(tmp, "kafka_2.13-"+Version+".jar")) {
		return fmt.Errorf("kafkatest: Maven resolved internal/kafkatest/maven/pom.xml without kafka_2.13-%s.jar", Version)
	}
	if err := jarsReadable(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, completeMark), []byte(time.Since(start).String()+"\n"), 0o644); err != nil {
		return fmt.Errorf("kafkatest: marking the jar cache complete: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("kafkatest: clearing %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("kafkatest: moving the resolved jars into place: %w", err)
	}
	return nil
}

// mavenTimeout bounds a resolution: some 100 MB of jars on a slow link.
const mavenTimeout = 15 * time.Minute

// jarsReadable checks that every jar in dir opens as a zip: one cut short (a proxy's
// truncated answer, checksummed or not) is otherwise cached for good, and every broker
// then fails to start with a missing class, not naming the jar.
func jarsReadable(dir string) error {
	jars, err := filepath.Glob(filepath.Join(dir, "*.jar"))
	if err != nil {
		return err
	}
	for _, j := range jars {
		r, err := zip.OpenReader(j)
		if err != nil {
			return fmt.Errorf("kafkatest: Maven gave %s, which is not a readable jar (%w): delete it from Maven's local repository (~/.m2/repository) and run the tests again, which fetch it anew", filepath.Base(j), err)
		}
		r.Close()
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
