//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/redistest"
)

// demoDocs are the pages that show kcat commands against the demo's broker.
var demoDocs = []string{"README.md", "docs/demo.md"}

// kcatBlocks returns the ```sh blocks of the page at path (from the repository's root)
// whose every line runs kcat against the demo's broker, each as a script; a page that
// does not exist has none.
func kcatBlocks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		lines := strings.Split(strings.TrimSpace(m[1]), "\n")
		ok := len(lines) > 0
		for _, l := range lines {
			ok = ok && strings.Contains(l, "kcat -b 127.0.0.1:19092 ")
		}
		if ok {
			blocks = append(blocks, m[1])
		}
	}
	return blocks
}

// runKcat runs script, kcat commands, with bash against broker instead of the demo's
// default address, and returns its output; it fails the test if the script fails or
// does not finish within 30 s.
func runKcat(t *testing.T, script, broker string) string {
	t.Helper()
	script = strings.ReplaceAll(script, "127.0.0.1:19092", broker)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	// At the deadline, kill the script's kcat processes too, which hold its output open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Errorf("still running after 30s (as printed, it never returns):\n%s\noutput:\n%.500s", script, out)
	} else if err != nil {
		t.Errorf("%v:\n%s\noutput:\n%.500s", err, script, out)
	}
	return string(out)
}

var headerKcat = regexp.MustCompile(`try: (kcat .*)\n`)

// TestDocsKcatExamples runs the kcat commands the README, docs/demo.md and the demo's
// header print against a running demo, as printed but for the broker's port: each
// returns, and shows what its comment says.
func TestDocsKcatExamples(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		if redistest.InCI() {
			t.Fatalf("kcat not on PATH (%v); CI=%s, so this is a failure, not a skip", err, os.Getenv("CI"))
		}
		t.Skip("kcat not on PATH (the Debian package kcat; set CI=true to make this a failure)")
	}
	t.Parallel()
	out := startDevInProcess(t, devArgs("-duration", "0"), nil).String()
	m := regexp.MustCompile(`on (127\.0\.0\.1:\d+); events`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no broker address in the header:\n%s", out)
	}
	broker := m[1]
	var all strings.Builder
	for _, doc := range demoDocs {
		blocks := kcatBlocks(t, doc)
		if doc == "README.md" && len(blocks) == 0 {
			t.Errorf("%s has no kcat block", doc)
		}
		for _, b := range blocks {
			t.Logf("%s:\n%s", doc, b)
			all.WriteString(runKcat(t, b, broker))
		}
	}
	h := headerKcat.FindStringSubmatch(out)
	if h == nil {
		t.Fatalf("no kcat line in the header:\n%s", out)
	}
	for _, cmd := range strings.Split(h[1], "   |   ") {
		all.WriteString(runKcat(t, cmd, broker))
	}
	for _, want := range []string{"gate-overflow-reason=rate_limited", "gate-error=", "gate-source=events/", `{"team_id":"me","event":"hi"}`} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the kcat examples did not show %q:\n%.3000s", want, all.String())
		}
	}
}

// TestDocsListTheDemoDefaults: every GATE_ setting the demo uses where the environment
// sets none (devDefaults) is listed, as NAME=VALUE, by docs/demo.md and by gate-dev -h,
// and every topic one of them names is among the topics README.md and docs/demo.md say
// the demo's broker has.
func TestDocsListTheDemoDefaults(t *testing.T) {
	var help strings.Builder
	if _, _, err := parseDevFlags([]string{"-h"}, &help); err == nil {
		t.Fatal("gate-dev -h: no error")
	}
	texts := map[string]string{"gate-dev -h": strings.Join(strings.Fields(help.String()), " ")}
	for _, doc := range demoDocs {
		b, err := os.ReadFile(filepath.Join("..", "..", doc))
		if err != nil {
			t.Fatal(err)
		}
		texts[doc] = strings.Join(strings.Fields(string(b)), " ")
	}
	for name, value := range devDefaults() {
		for _, where := range []string{"gate-dev -h", "docs/demo.md"} {
			if !strings.Contains(texts[where], name+"="+value) {
				t.Errorf("%s does not list the demo's default %s=%s", where, name, value)
			}
		}
		if strings.HasSuffix(name, "_TOPIC") {
			for _, doc := range demoDocs {
				if !strings.Contains(texts[doc], "`"+value+"`") {
					t.Errorf("%s does not name the topic %s (%s) among the demo broker's", doc, value, name)
				}
			}
		}
	}
}

// TestDocsStateHowLongTheDemoKeepsRecords: README.md and docs/demo.md tell readers how
// long a record stays on the demo's broker (how soon they must read it back), and the
// broker keeps devRetentionBytes a partition, which at the default load is 20 to 45 s
// (measured with kcat, the oldest record of events, events_accepted and events_overflow
// partition 0 against the clock, at 50 to 85 s into a run: 30 to 45 s on one machine,
// 22 to 33 s on another, by how the load compresses). Each page says that span, and none
// says "a few seconds", which sent readers rushing, or another span.
func TestDocsStateHowLongTheDemoKeepsRecords(t *testing.T) {
	const span = "20 to 45 seconds"
	for _, doc := range demoDocs {
		b, err := os.ReadFile(filepath.Join("..", "..", doc))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		if !strings.Contains(text, span) {
			t.Errorf("%s does not say the demo keeps a busy partition's last %s", doc, span)
		}
		for _, wrong := range regexp.MustCompile(`(a few|\d+ to \d+) seconds`).FindAllString(text, -1) {
			if wrong != span {
				t.Errorf("%s says the demo keeps %q of a partition; it keeps %s at the default load", doc, wrong, span)
			}
		}
	}
}
