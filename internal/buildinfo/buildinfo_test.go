package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromStampedAndRecorded(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Deps: []*debug.Module{
			{Path: "github.com/redis/go-redis/v9", Version: "v9.23.0"},
			{Path: franzGo, Version: "v1.22.2"},
		},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}},
	}
	got := from("0.1.0", "deadbeef", bi, true)
	want := Info{Version: "0.1.0", Commit: "deadbeef", GoVersion: "go1.26.0", FranzGo: "v1.22.2"}
	if got != want {
		t.Fatalf("from = %+v, want %+v", got, want)
	}
	// Not stamped: the revision Go recorded stands in for the commit.
	if got := from("", "", bi, true); got.Version != "dev" || got.Commit != "abc123" {
		t.Errorf("unstamped: %+v, want version dev and the recorded revision", got)
	}
}

func TestFromReplacedAndMissing(t *testing.T) {
	bi := &debug.BuildInfo{Deps: []*debug.Module{{Path: franzGo, Version: "v1.0.0", Replace: &debug.Module{Path: "../franz-go", Version: "v1.22.3-fork"}}}}
	if got := from("dev", "unknown", bi, true).FranzGo; got != "v1.22.3-fork" {
		t.Errorf("replaced franz-go: %q, want the replacement's version", got)
	}
	got := from("dev", "unknown", nil, false)
	if got.FranzGo != "unknown" || got.Commit != "unknown" || got.GoVersion == "" {
		t.Errorf("no build info: %+v, want unknown franz-go and commit, the runtime's Go", got)
	}
}

func TestStringAndAttrs(t *testing.T) {
	i := Info{Version: "0.1.0", Commit: "c", GoVersion: "go1.26.0", FranzGo: "v1.22.2"}
	s := i.String()
	for _, line := range []string{"version: 0.1.0", "commit: c", "go: go1.26.0", "franz-go: v1.22.2"} {
		if !strings.Contains(s, line+"\n") {
			t.Errorf("String() = %q, missing line %q", s, line)
		}
	}
	if a := i.LogAttrs(); len(a) != 8 || a[0] != "version" || a[1] != "0.1.0" {
		t.Errorf("LogAttrs() = %v", a)
	}
}

func TestGetInTestBinary(t *testing.T) {
	// A test binary records its dependencies: franz-go is not one of this package's,
	// so only the always-present fields are checked.
	i := Get()
	if i.Version == "" || i.Commit == "" || !strings.HasPrefix(i.GoVersion, "go") || i.FranzGo == "" {
		t.Errorf("Get() = %+v: every field must be set", i)
	}
}
