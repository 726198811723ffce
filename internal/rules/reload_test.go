package rules

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capturegate/gate/internal/clock"
)

const (
	oneRule  = "rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n"
	twoRules = "rules:\n  - {name: user, key: json:team_id+distinct_id, limits: [1m:10]}\n  - {name: team, key: json:team_id, limits: [1m:100]}\n"
	badRule  = "rules:\n  - {name: team, key: json:team_id, limits: [1m:zero]}\n"
	// withMerges is oneRule and a rule sending to the topic merges, which a check of the
	// rules' topics looks at.
	withMerges = oneRule + "  - {name: merges, key: json:team_id, limits: [1m:5], action: 'topic:merges'}\n"
)

// A good edit is taken up at the next check after the interval; a bad edit or a removed
// file keeps the last good set, logged once and counted once per distinct state; the file
// fixed again is taken up.
func TestReloaderKeepsTheLastGoodSet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write := func(s string) {
		t.Helper()
		// As Kubernetes updates a ConfigMap volume: a new file swapped in by rename.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(oneRule)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	r, err := NewReloader(path, Options{}, ReloadOptions{Interval: 5 * time.Second, Clock: clk, Log: slog.New(slog.NewTextHandler(&logs, nil)), Reg: reg})
	if err != nil {
		t.Fatal(err)
	}
	ruleNames := func() string { return strings.Join(names(r.Current()), ",") }
	metric := func(result string) float64 { return testutil.ToFloat64(r.loads.WithLabelValues(result)) }
	if ruleNames() != "team" || metric("ok") != 1 || testutil.ToFloat64(r.good) != 1 || testutil.ToFloat64(r.rules) != 1 {
		t.Fatalf("start: %s, ok %v", ruleNames(), metric("ok"))
	}

	write(twoRules)
	if r.Check(t.Context()) || ruleNames() != "team" {
		t.Fatal("read again before the interval passed")
	}
	clk.Advance(5 * time.Second)
	if !r.Check(t.Context()) || ruleNames() != "user,team" || metric("ok") != 2 || testutil.ToFloat64(r.rules) != 2 {
		t.Fatalf("good edit: changed set %s, ok %v", ruleNames(), metric("ok"))
	}
	if !strings.Contains(logs.String(), "rules file reloaded") {
		t.Errorf("no reload line:\n%s", logs.String())
	}

	write(badRule)
	for range 3 {
		clk.Advance(5 * time.Second)
		if r.Check(t.Context()) {
			t.Fatal("a bad edit changed the set")
		}
	}
	if ruleNames() != "user,team" || metric("error") != 1 || testutil.ToFloat64(r.good) != 0 {
		t.Fatalf("bad edit: set %s, errors %v, valid %v", ruleNames(), metric("error"), testutil.ToFloat64(r.good))
	}
	if n := strings.Count(logs.String(), "cannot be used"); n != 1 {
		t.Errorf("bad edit logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `limits[0]: \"1m:zero\"`) || !strings.Contains(logs.String(), "rules.yaml:2:") {
		t.Errorf("the error line does not name the place:\n%s", logs.String())
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if r.Check(t.Context()) || ruleNames() != "user,team" || metric("error") != 2 {
		t.Fatalf("removed file: set %s, errors %v", ruleNames(), metric("error"))
	}

	// Back to what is in use: valid again, nothing reloaded.
	write(twoRules)
	clk.Advance(5 * time.Second)
	if r.Check(t.Context()) || testutil.ToFloat64(r.good) != 1 || metric("ok") != 2 {
		t.Fatalf("restored: valid %v, ok %v", testutil.ToFloat64(r.good), metric("ok"))
	}
	if !strings.Contains(logs.String(), "back to the rules in use") {
		t.Errorf("no recovery line:\n%s", logs.String())
	}
	// A clock stepped back does not hold reads off.
	write(oneRule)
	clk.Set(clk.Now().Add(-time.Hour))
	if !r.Check(t.Context()) || ruleNames() != "team" {
		t.Fatalf("after the clock stepped back: %s", ruleNames())
	}
	// CheckNow reads at once.
	write(twoRules)
	if !r.CheckNow(t.Context()) || ruleNames() != "user,team" {
		t.Fatalf("CheckNow: %s", ruleNames())
	}
	// CheckNowResult says what the read found, for the gate's SIGHUP line.
	for _, tt := range []struct {
		file, want string
		changed    bool
	}{{twoRules, ReadUnchanged, false}, {badRule, ReadRefused, false}, {badRule, ReadRefused, false}, {oneRule, ReadReloaded, true}} {
		write(tt.file)
		if changed, got := r.CheckNowResult(t.Context()); changed != tt.changed || got != tt.want {
			t.Errorf("CheckNowResult: %v %q, want %v %q", changed, got, tt.changed, tt.want)
		}
	}
}

// A file that cannot be read or used stops the gate at start, naming the problem.
func TestNewReloaderRefuses(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewReloader(filepath.Join(dir, "none.yaml"), Options{}, ReloadOptions{}); err == nil || !strings.Contains(err.Error(), "reading the rules file") {
		t.Errorf("missing file: %v", err)
	}
	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte(badRule), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewReloader(path, Options{}, ReloadOptions{}); err == nil || !strings.Contains(err.Error(), "bad.yaml:2:") {
		t.Errorf("bad file: %v", err)
	}
}

// A set the Check refuses (a rule's topic missing, as the gate checks) is refused as a bad
// file is: the rules in use stay, the refusal is logged once and counted once, and the same
// file is taken once the check passes, without another edit.
func TestReloaderCheckRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(oneRule), 0o644); err != nil {
		t.Fatal(err)
	}
	topicThere := false
	check := func(_ context.Context, s *Set) error {
		for _, ru := range s.Rules {
			if ru.Action.Kind == Topic && !topicThere {
				return errors.New(`topic "merges" does not exist: create it (the gate does not)`)
			}
		}
		return nil
	}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	var logs bytes.Buffer
	r, err := NewReloader(path, Options{}, ReloadOptions{Interval: time.Second, Clock: clk, Log: slog.New(slog.NewTextHandler(&logs, nil)), Check: check})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(withMerges), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if r.CheckNow(t.Context()) || len(r.Current().Rules) != 1 {
			t.Fatal("a set naming a missing topic was put in use")
		}
	}
	if n := strings.Count(logs.String(), `topic \"merges\" does not exist`); n != 1 {
		t.Errorf("refusal logged %d times, want once:\n%s", n, logs.String())
	}
	if got := testutil.ToFloat64(r.loads.WithLabelValues("error")); got != 1 {
		t.Errorf("refusals counted %v, want 1", got)
	}
	topicThere = true
	if !r.CheckNow(t.Context()) || len(r.Current().Rules) != 2 {
		t.Error("the set was not taken once its topic exists")
	}
}

// A check cut short by the end of the read's context (the gate stopping while a rule's
// topic is being asked about) neither refuses the set nor takes it: nothing is logged or
// counted, the rules in use stay, and the next read asks again.
func TestReloaderCheckCutShort(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(oneRule), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	check := func(cctx context.Context, _ *Set) error {
		if ctx.Err() == nil {
			cancel() // the gate stops while the topics are being checked
			select {
			case <-cctx.Done():
				return cctx.Err()
			case <-time.After(30 * time.Second):
				return errors.New("the check was not given the read's context")
			}
		}
		return nil
	}
	r, logs := checkedReloader(t, path, check)
	if err := os.WriteFile(path, []byte(withMerges), 0o644); err != nil {
		t.Fatal(err)
	}
	if r.CheckNow(ctx) || len(r.Current().Rules) != 1 {
		t.Fatal("a set whose check was cut short was put in use")
	}
	if got := testutil.ToFloat64(r.loads.WithLabelValues("error")); got != 0 || testutil.ToFloat64(r.good) != 1 || strings.Contains(logs.String(), "cannot be used") {
		t.Errorf("a check cut short was taken for a refusal: %v counted, good %v:\n%s", got, testutil.ToFloat64(r.good), logs.String())
	}
	if !r.CheckNow(t.Context()) || len(r.Current().Rules) != 2 {
		t.Error("the set was not asked about again at the next read")
	}
}

// A refusal is counted and logged once an edit, whatever its words: a check whose error
// text changes from one read to the next (a topic's problem as Kafka words it) does not
// count the same file as invalid again at every read.
func TestReloaderCheckRefusalOncePerEdit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(oneRule), 0o644); err != nil {
		t.Fatal(err)
	}
	asked := 0
	check := func(context.Context, *Set) error {
		asked++
		return fmt.Errorf(`topic "merges": no permission to write it (read %d)`, asked)
	}
	r, logs := checkedReloader(t, path, check)
	if err := os.WriteFile(path, []byte(withMerges), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if r.CheckNow(t.Context()) {
			t.Fatal("a refused set was put in use")
		}
	}
	if got := testutil.ToFloat64(r.loads.WithLabelValues("error")); got != 1 || asked != 3 {
		t.Errorf("one edit refused at 3 reads (asked %d times): counted %v, want 1", asked, got)
	}
	if n := strings.Count(logs.String(), "cannot be used"); n != 1 {
		t.Errorf("one edit's refusal logged %d times, want once:\n%s", n, logs.String())
	}
}

// A check that could not be made (an error wrapping ErrUnchecked: Kafka not answering
// about a rule's topic) neither refuses the set nor takes it: the file is not counted
// invalid nor gate_rules_file_valid set to 0, it is counted as unchecked and logged once,
// saying so, and the next read asks again; a refusal after it is counted as ever.
func TestReloaderCheckUnanswered(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(oneRule), 0o644); err != nil {
		t.Fatal(err)
	}
	answer := fmt.Errorf("%w: checking the rule topics merges: metadata: context deadline exceeded", ErrUnchecked)
	check := func(context.Context, *Set) error { return answer }
	r, logs := checkedReloader(t, path, check)
	if err := os.WriteFile(path, []byte(withMerges), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if r.CheckNow(t.Context()) || len(r.Current().Rules) != 1 {
			t.Fatal("a set whose check could not be made was put in use")
		}
	}
	metric := func(result string) float64 { return testutil.ToFloat64(r.loads.WithLabelValues(result)) }
	if metric("error") != 0 || testutil.ToFloat64(r.good) != 1 || strings.Contains(logs.String(), "cannot be used") {
		t.Errorf("a check that could not be made was taken for a refusal: %v counted, valid %v:\n%s", metric("error"), testutil.ToFloat64(r.good), logs.String())
	}
	if metric("unchecked") != 1 || strings.Count(logs.String(), "could not be checked") != 1 || !strings.Contains(logs.String(), "context deadline exceeded") {
		t.Errorf("unchecked counted %v, want 1, and logged once with why:\n%s", metric("unchecked"), logs.String())
	}

	answer = errors.New(`topic "merges" does not exist: create it (the gate does not)`)
	if r.CheckNow(t.Context()) || metric("error") != 1 || testutil.ToFloat64(r.good) != 0 {
		t.Errorf("a missing topic once Kafka answers: counted %v, valid %v; want refused", metric("error"), testutil.ToFloat64(r.good))
	}
	answer = nil
	if !r.CheckNow(t.Context()) || len(r.Current().Rules) != 2 {
		t.Error("the set was not taken once its check passed")
	}
}

// A bad edit fixed while the fixed file's check cannot be made is no longer invalid:
// gate_rules_file_valid goes back to 1 (GateRulesFileInvalid clears, the file now
// parsing), the pending check is counted unchecked and logged as such, and an edit back to
// the same bad file is refused, counted and logged again. Before, the gauge stayed 0 until
// the check could be made.
func TestReloaderFixedFileUncheckedNotInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(oneRule), 0o644); err != nil {
		t.Fatal(err)
	}
	var answer error
	check := func(context.Context, *Set) error { return answer }
	r, logs := checkedReloader(t, path, check)
	metric := func(result string) float64 { return testutil.ToFloat64(r.loads.WithLabelValues(result)) }
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(badRule)
	if r.CheckNow(t.Context()) || metric("error") != 1 || testutil.ToFloat64(r.good) != 0 {
		t.Fatalf("the bad edit: counted %v, valid %v; want refused", metric("error"), testutil.ToFloat64(r.good))
	}

	answer = fmt.Errorf("%w: checking the rule topics merges: metadata: context deadline exceeded", ErrUnchecked)
	write(withMerges)
	for range 3 {
		if r.CheckNow(t.Context()) || len(r.Current().Rules) != 1 {
			t.Fatal("a set whose check could not be made was put in use")
		}
		if testutil.ToFloat64(r.good) != 1 {
			t.Fatalf("the fixed file, its check not made: gate_rules_file_valid %v, want 1", testutil.ToFloat64(r.good))
		}
	}
	if metric("unchecked") != 1 || metric("error") != 1 || strings.Count(logs.String(), "could not be checked") != 1 {
		t.Errorf("the fixed file: unchecked %v, error %v; want 1 and 1 (the bad edit), logged once:\n%s", metric("unchecked"), metric("error"), logs.String())
	}

	write(badRule)
	if r.CheckNow(t.Context()) || metric("error") != 2 || testutil.ToFloat64(r.good) != 0 || strings.Count(logs.String(), "cannot be used") != 2 {
		t.Errorf("back to the bad edit: counted %v, valid %v; want refused again, logged again:\n%s", metric("error"), testutil.ToFloat64(r.good), logs.String())
	}
}

// configMapVolume lays rules.yaml out as the kubelet does for a ConfigMap volume: the file
// lives in a timestamped directory, ..data links to it, and rules.yaml links through
// ..data. update writes a new directory, renames a new ..data link over the old one and
// deletes the old directory, as the kubelet's atomic writer does.
type configMapVolume struct {
	t   *testing.T
	dir string
	gen int
}

func newConfigMapVolume(t *testing.T, content string, mtime time.Time) *configMapVolume {
	v := &configMapVolume{t: t, dir: t.TempDir()}
	v.update(content, mtime)
	if err := os.Symlink(filepath.Join("..data", "rules.yaml"), v.path()); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v *configMapVolume) path() string { return filepath.Join(v.dir, "rules.yaml") }

func (v *configMapVolume) update(content string, mtime time.Time) {
	t := v.t
	t.Helper()
	v.gen++
	gen := fmt.Sprintf("..2026_11_30_10_00_00.%d", 12345+v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, gen), 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(v.dir, gen, "rules.yaml")
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	if err := os.Symlink(gen, filepath.Join(v.dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// A ConfigMap volume update (a ..data symlink swap, the old directory deleted) is taken at
// the next read, also when only the content changed at the same size and the new file's
// mtime is older than the old one's; swapped back, the first set is taken again.
func TestReloaderConfigMapSymlinkSwap(t *testing.T) {
	sameSize := strings.Replace(oneRule, "1m:100", "1m:200", 1)
	if len(sameSize) != len(oneRule) {
		t.Fatal("test contents differ in size")
	}
	t0 := time.Unix(1_800_000_000, 0)
	r, v, clk, logs := configMapReloader(t, oneRule, t0)
	threshold := func() int64 { return r.Current().Rules[0].Limits[0].Threshold }
	if threshold() != 100 {
		t.Fatalf("start: threshold %d", threshold())
	}
	// Same size, mtime an hour back.
	v.update(sameSize, t0.Add(-time.Hour))
	clk.Advance(5 * time.Second)
	if !r.Check(t.Context()) || threshold() != 200 {
		t.Fatalf("same-size update, older mtime: threshold %d\n%s", threshold(), logs.String())
	}
	// Another rule, mtime further back still.
	v.update(twoRules, t0.Add(-2*time.Hour))
	clk.Advance(5 * time.Second)
	if !r.Check(t.Context()) || strings.Join(names(r.Current()), ",") != "user,team" {
		t.Fatalf("second update: %v\n%s", names(r.Current()), logs.String())
	}
	v.update(oneRule, t0)
	clk.Advance(5 * time.Second)
	if !r.Check(t.Context()) || threshold() != 100 {
		t.Fatalf("swapped back: threshold %d\n%s", threshold(), logs.String())
	}
	// Nothing changed: nothing reloaded, nothing refused.
	clk.Advance(5 * time.Second)
	if r.Check(t.Context()) {
		t.Fatal("reloaded with nothing changed")
	}
	if n := testutil.ToFloat64(r.loads.WithLabelValues("error")); n != 0 || strings.Contains(logs.String(), "cannot be used") {
		t.Errorf("errors %v on good swaps:\n%s", n, logs.String())
	}
}

// A read that finds the file gone once, as one that resolved a ConfigMap volume's path
// through the old ..data link just before the kubelet deleted the old directory: the
// update is put in use at that read, with no error logged or counted and
// gate_rules_file_valid never 0. Before, that read was a bad file: an error line, a
// count of result="error" and the gauge at 0 until the next read, for a good update.
func TestReloaderReadOnceGoneDuringSwap(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	r, v, clk, logs := configMapReloader(t, oneRule, t0)
	v.update(twoRules, t0)
	gone := true
	r.readFile = func(p string) ([]byte, error) {
		if gone {
			gone = false
			return nil, &os.PathError{Op: "open", Path: p, Err: syscall.ENOENT}
		}
		return os.ReadFile(p)
	}
	clk.Advance(5 * time.Second)
	if !r.Check(t.Context()) || strings.Join(names(r.Current()), ",") != "user,team" {
		t.Errorf("the update, read once gone: rules in use %v\n%s", names(r.Current()), logs.String())
	}
	if n, valid := testutil.ToFloat64(r.loads.WithLabelValues("error")), testutil.ToFloat64(r.good); n != 0 || valid != 1 || strings.Contains(logs.String(), "cannot be used") {
		t.Errorf("a read gone once during a swap: result=error %v, gate_rules_file_valid %v:\n%s", n, valid, logs.String())
	}
}

// configMapReloader is a Reloader, read every 5 s on a fake clock at t0 and logging to
// logs, of a rules file holding content on a ConfigMap volume.
func configMapReloader(t *testing.T, content string, t0 time.Time) (*Reloader, *configMapVolume, *clock.Fake, *bytes.Buffer) {
	t.Helper()
	v := newConfigMapVolume(t, content, t0)
	clk := clock.NewFake(t0)
	logs := new(bytes.Buffer)
	r, err := NewReloader(v.path(), Options{}, ReloadOptions{Interval: 5 * time.Second, Clock: clk, Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return r, v, clk, logs
}

// An edit refused (its topic missing) whose later checks Kafka answers only some of the
// time (a rolling restart of the brokers) stays one refusal: counted and logged once, and
// gate_rules_file_valid stays 0 while the reads Kafka does not answer say nothing new of
// it. Before, each unanswered read set the gauge back to 1 and forgot the refusal, and
// the next answer refused the same edit again: counted and logged at every other read,
// GateRulesFileInvalid flapping.
func TestReloaderRefusedEditStaysRefusedWhileUnanswered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(oneRule), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := errors.New(`topic "merges" does not exist: create it (the gate does not)`)
	unanswered := fmt.Errorf("%w: checking the rule topics merges: metadata: context deadline exceeded", ErrUnchecked)
	answer := missing
	check := func(context.Context, *Set) error { return answer }
	r, logs := checkedReloader(t, path, check)
	if err := os.WriteFile(path, []byte(withMerges), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		answer = missing
		if i%2 == 1 {
			answer = unanswered
		}
		if r.CheckNow(t.Context()) {
			t.Fatal("a refused set was put in use")
		}
		if got := testutil.ToFloat64(r.good); got != 0 {
			t.Errorf("read %d (%v): gate_rules_file_valid %v, want 0 for the refused edit", i, answer, got)
		}
	}
	if got := testutil.ToFloat64(r.loads.WithLabelValues("error")); got != 1 {
		t.Errorf("one edit refused: counted %v, want 1", got)
	}
	if n := strings.Count(logs.String(), "cannot be used"); n != 1 {
		t.Errorf("one edit's refusal logged %d times, want once:\n%s", n, logs.String())
	}
	// The topic created, Kafka answering: the edit is taken.
	answer = nil
	if !r.CheckNow(t.Context()) || len(r.Current().Rules) != 2 || testutil.ToFloat64(r.good) != 1 {
		t.Error("the edit was not taken once its check passed")
	}
}

// On a ConfigMap volume (the kubelet's ..data swap): an invalid update keeps the rules in
// use, said once (at FILE:LINE:COL) however many reads find it; the valid update after it
// is put in use; the file gone for a while (..data pointing at nothing) is one error, the
// gate going on with its rules, and its return clears it.
func TestReloaderConfigMapInvalidThenValidSwap(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	r, v, clk, logs := configMapReloader(t, oneRule, t0)
	refused := func() float64 { return testutil.ToFloat64(r.loads.WithLabelValues("error")) }
	v.update(badRule, t0)
	for range 3 {
		clk.Advance(5 * time.Second)
		if r.Check(t.Context()) {
			t.Fatal("an invalid update was put in use")
		}
	}
	if n := strings.Count(logs.String(), "cannot be used"); n != 1 || refused() != 1 || testutil.ToFloat64(r.good) != 0 {
		t.Errorf("invalid update: logged %d times, counted %v, valid %v; want once, 1, 0:\n%s", n, refused(), testutil.ToFloat64(r.good), logs.String())
	}
	if want := filepath.Join(v.dir, "rules.yaml") + ":2:46: "; !strings.Contains(logs.String(), want) {
		t.Errorf("the error line does not name %s:\n%s", want, logs.String())
	}
	v.update(twoRules, t0)
	clk.Advance(5 * time.Second)
	if !r.Check(t.Context()) || strings.Join(names(r.Current()), ",") != "user,team" || testutil.ToFloat64(r.good) != 1 {
		t.Fatalf("the valid update after an invalid one: rules %v, valid %v\n%s", names(r.Current()), testutil.ToFloat64(r.good), logs.String())
	}
	gen, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	if err := os.Rename(filepath.Join(v.dir, gen), filepath.Join(v.dir, "aside")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		clk.Advance(5 * time.Second)
		if r.Check(t.Context()) {
			t.Fatal("a missing file changed the rules")
		}
	}
	if strings.Join(names(r.Current()), ",") != "user,team" || refused() != 2 {
		t.Errorf("file gone: rules %v, errors %v; want user,team and 2", names(r.Current()), refused())
	}
	if err := os.Rename(filepath.Join(v.dir, "aside"), filepath.Join(v.dir, gen)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	if r.Check(t.Context()) || testutil.ToFloat64(r.good) != 1 || !strings.Contains(logs.String(), "back to the rules in use") {
		t.Errorf("file back: valid %v\n%s", testutil.ToFloat64(r.good), logs.String())
	}
}

// A refused edit is logged once a kind of refusal (Problem.Kind), whatever the words: a
// topic missing, then not writable, is said twice; the same kinds again, worded anew, or
// a kind already said coming back (a broker's lagging answer), are not said again. The
// edit is counted once.
func TestReloaderCheckRefusalOncePerKind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(oneRule), 0o644); err != nil {
		t.Fatal(err)
	}
	kind, asked := "missing", 0
	check := func(_ context.Context, s *Set) error {
		asked++
		return s.TopicProblems("merges", kind, fmt.Sprintf("topic merges: %s (read %d)", kind, asked))
	}
	r, logs := checkedReloader(t, path, check)
	if err := os.WriteFile(path, []byte(withMerges), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"missing", "missing", "write refused", "write refused", "missing", "write refused"} {
		kind = k
		if r.CheckNow(t.Context()) {
			t.Fatal("a refused set was put in use")
		}
	}
	if n := strings.Count(logs.String(), "cannot be used"); n != 2 {
		t.Errorf("one edit refused for two kinds of reason logged %d times, want twice:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "topic merges: missing (read 1)") || !strings.Contains(logs.String(), "topic merges: write refused (read 3)") {
		t.Errorf("the refusals logged are not the first of each kind:\n%s", logs.String())
	}
	if got := testutil.ToFloat64(r.loads.WithLabelValues("error")); got != 1 {
		t.Errorf("one edit refused: counted %v, want 1", got)
	}
}

// checkedReloader is a reloader of path, reading it every second of a clock at rest,
// that checks a changed set with check and logs to the buffer it returns.
func checkedReloader(t *testing.T, path string, check func(context.Context, *Set) error) (*Reloader, *bytes.Buffer) {
	t.Helper()
	logs := new(bytes.Buffer)
	r, err := NewReloader(path, Options{}, ReloadOptions{Interval: time.Second, Clock: clock.NewFake(time.Unix(1_800_000_000, 0)),
		Log: slog.New(slog.NewTextHandler(logs, nil)), Check: check})
	if err != nil {
		t.Fatal(err)
	}
	return r, logs
}
