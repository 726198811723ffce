// Package buildinfo says which build of the gate is running: its version and commit,
// stamped in at link time, and the Go and franz-go versions it was built with, read from
// the binary's own build information.
//
// Guarantees:
//
//   - Version and Commit are set only by the linker (-ldflags "-X"; see the Makefile's
//     LDFLAGS and the Dockerfile); nothing in the program assigns them. A binary built
//     without the flags reports "dev" and "unknown", never an empty string.
//   - Get never fails: a field the binary does not record (a test binary, a build
//     without module information) reads "unknown".
//   - The same Info feeds `gate version`, the start-up log line and the gate_build_info
//     metric, so the three always agree.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Commit are stamped in at link time:
//
//	go build -ldflags "-X github.com/capturegate/gate/internal/buildinfo.Version=0.1.0 \
//	  -X github.com/capturegate/gate/internal/buildinfo.Commit=$(git rev-parse HEAD)"
//
// They are package-level variables because -X can only set those; they are never
// written at run time.
var (
	Version = "dev"
	Commit  = "unknown"
)

// franzGo is the module path whose version Info reports.
const franzGo = "github.com/twmb/franz-go"

// Info is one build's identity.
type Info struct {
	Version   string // the release, "dev" when not stamped
	Commit    string // the source revision, "unknown" when not stamped nor recorded by Go
	GoVersion string // the Go toolchain that built the binary
	FranzGo   string // the franz-go module version linked in, "unknown" when not recorded
}

// Get returns this binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	return from(Version, Commit, bi, ok)
}

// from builds an Info from the stamped values and the binary's build information.
func from(version, commit string, bi *debug.BuildInfo, ok bool) Info {
	in := Info{Version: version, Commit: commit, GoVersion: runtime.Version(), FranzGo: "unknown"}
	if in.Version == "" {
		in.Version = "dev"
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	if !ok || bi == nil {
		return in
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	for _, d := range bi.Deps {
		if d.Path == franzGo {
			if d.Replace != nil {
				d = d.Replace
			}
			if d.Version != "" {
				in.FranzGo = d.Version
			}
			break
		}
	}
	if in.Commit == "unknown" {
		// go build in a git checkout records the revision itself (-buildvcs).
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				in.Commit = s.Value
			}
		}
	}
	return in
}

// String is the text of `gate version`: one "name: value" line per field.
func (i Info) String() string {
	return fmt.Sprintf("version: %s\ncommit: %s\ngo: %s\nfranz-go: %s\n", i.Version, i.Commit, i.GoVersion, i.FranzGo)
}

// LogAttrs returns the fields as slog key-value pairs, for the start-up line.
func (i Info) LogAttrs() []any {
	return []any{"version", i.Version, "commit", i.Commit, "go_version", i.GoVersion, "franz_go_version", i.FranzGo}
}
