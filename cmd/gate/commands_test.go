package main

import (
	"bytes"
	"flag"
	"regexp"
	"strings"
	"testing"
)

// gate help lists every command and, under it, every flag its flag set defines (the set
// the command parses its arguments with), so that help cannot leave one out; and a
// command's own usage (-h, or a usage error) lists its flags too.
func TestHelpListsEveryFlag(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"help"}, testHost(nil), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	help := stdout.String()
	nflags := 0
	for _, c := range commands() {
		// The command's section: from its line to the next command's.
		i := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c.name) + `\b`).FindStringIndex(help)
		if i == nil {
			t.Errorf("help does not list %s:\n%s", c.name, help)
			continue
		}
		section := help[i[0]:]
		if j := regexp.MustCompile(`(?m)^  \S`).FindStringIndex(section[2:]); j != nil {
			section = section[:j[0]+2]
		}
		if c.flags == nil {
			continue
		}
		c.flags().VisitAll(func(f *flag.Flag) {
			nflags++
			if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(f.Name) + `\b`).MatchString(section) {
				t.Errorf("help does not list %s -%s under %s:\n%s", c.name, f.Name, c.name, section)
			}
		})
	}
	// The ones an operator missed: gate overrides -rule, gate healthcheck -timeout.
	for _, want := range []string{"-rule RULE", "-timeout duration", "-top N", "-addr HOST:PORT", "-rate int"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if nflags < 14 {
		t.Errorf("found %d flags over the commands' flag sets; want every command's", nflags)
	}

	// Each command's own usage lists its flags as well.
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"overrides", "-h"}, []string{"Usage: gate overrides", "-rule RULE"}},
		{[]string{"team", "-h"}, []string{"Usage: gate team", "-addr HOST:PORT", "-top N"}},
		{[]string{"healthcheck", "-h"}, []string{"Usage: gate healthcheck", "-addr HOST:PORT", "-path PATH", "-timeout duration", "(default 2s)"}},
		{[]string{"env", "-h"}, []string{"Usage: gate env [-check]", "Markdown table", "exit status 2", "-check"}},
		// The gate's own headers left out, a producer's gate-* kept: it said every gate-*.
		{[]string{"redrive", "-h"}, []string{"Usage: gate redrive", "gate-rule-topic-missing) are left out", "a producer's own header\nthat starts gate- is kept"}},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), tt.args, testHost(nil), &stdout, &stderr); err != nil {
			t.Errorf("%q: %v", tt.args, err)
		}
		for _, want := range tt.want {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("%q: usage lacks %q:\n%s", tt.args, want, stderr.String())
			}
		}
	}
}
