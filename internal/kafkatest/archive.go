package kafkatest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// A broker's JVM spends most of its start loading and verifying Kafka's classes: some
// 2.4 CPU-seconds a node (format and broker) of the 4.3 to 5.3 it takes to be ready, on
// the 2-core machines the suite runs on, where the integration tests start dozens. A
// class-data-sharing archive of the classes a broker loads (JDK 13+'s dynamic archive,
// written by a JVM that exits normally under -XX:ArchiveClassesAtExit) maps them instead:
// a node was ready on 2.9 CPU-seconds, and a second sooner. The archive is made once per
// machine, java and jar set, beside the jar cache, and used by every JVM the default
// Options start (not Throughput's, which run as Kafka's own scripts do). It only speeds
// the start: a JVM that cannot use it (-Xshare:auto, the default) loads the classes
// itself, and an archive that cannot be made leaves a note why (archiveFailed) and every
// JVM starting as before.

// archiveFailed, beside an archive's path, says why it could not be made: read by
// later calls, which then do not try again for every test binary, until it is
// archiveRetry old (a failure that was the machine's at the time, not the setup's).
const archiveFailed = ".failed"

// archiveRetry is how long a failure to make the archive stands.
const archiveRetry = 30 * time.Minute

// failedBefore returns why the archive at path could not be made, if that was less
// than archiveRetry ago.
func failedBefore(path string) error {
	st, err := os.Stat(path + archiveFailed)
	if err != nil || time.Since(st.ModTime()) > archiveRetry {
		return nil
	}
	b, err := os.ReadFile(path + archiveFailed)
	if err != nil {
		return nil
	}
	return errors.New(string(b))
}

// archivePath is where the archive of java (whose -version printed version) for the jars
// in dir lives.
func archivePath(dir, java string, version []byte) string {
	sum := sha256.Sum256(append([]byte(java+"\x00"), version...))
	return dir + ".cds-" + hex.EncodeToString(sum[:6]) + ".jsa"
}

// sharedArchive returns tools' broker class archive, making it first when there is none
// (under a lock: test binaries of several packages call it at once), or "" when it
// cannot be had. why says, when it returns "", what stopped it.
func sharedArchive(tools Tools, version []byte) (path string, why error) {
	path = archivePath(tools.Jars, tools.Java, version)
	if fileExists(path) {
		return path, nil
	}
	if err := failedBefore(path); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("kafkatest: opening the class archive's lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("kafkatest: locking the class archive: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if fileExists(path) {
		return path, nil // made by another process while this one waited
	}
	if err := failedBefore(path); err != nil {
		return "", err
	}
	if err := makeArchive(tools, path); err != nil {
		_ = os.WriteFile(path+archiveFailed, []byte(err.Error()), 0o644)
		return "", err
	}
	return path, nil
}

// makeArchive starts a one-node cluster whose broker writes the classes it loaded to
// path at a controlled shutdown (SIGTERM), and moves the archive into place once whole.
func makeArchive(tools Tools, path string) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), "cds-")
	if err != nil {
		return fmt.Errorf("kafkatest: making the class archive: %w", err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "broker.jsa")
	tools.Archive = ""
	start := time.Now()
	c, err := New(tools, dir, Options{archiveTo: tmp})
	if err != nil {
		return fmt.Errorf("kafkatest: making the class archive, starting a broker: %w", err)
	}
	defer c.Close()
	if err := c.Stop(1); err != nil {
		return fmt.Errorf("kafkatest: making the class archive, stopping the broker: %w", err)
	}
	if st, err := os.Stat(tmp); err != nil || st.Size() == 0 {
		return fmt.Errorf("kafkatest: the broker wrote no class archive at its stop (%v) after %v\n%s", err, time.Since(start).Round(time.Millisecond), c.LogTails())
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("kafkatest: moving the class archive into place: %w", err)
	}
	return nil
}
