package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"testing"

	"github.com/capturegate/gate/internal/config"
)

func TestOneLine(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("building the limiter: %w", errors.Join(errors.New("a"), errors.New("b")))
	if got := OneLine(err); got != "building the limiter: a; b" {
		t.Errorf("OneLine = %q", got)
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	_, cfgErr := config.Load(func(string) string { return "" }, []string{"GATE_TRESHOLD"})
	for _, tt := range []struct {
		err  error
		want int
	}{
		{&UsageError{Msg: "bad flag"}, 2},
		{fmt.Errorf("gate dev: %w", &UsageError{Msg: "bad flag"}), 2},
		{cfgErr, 2},
		{errors.New("Kafka consumer stopped"), 1},
	} {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	fs := func() *flag.FlagSet {
		fs := flag.NewFlagSet("gate load", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Int("rate", 1, "")
		return fs
	}
	if err := ParseFlags(fs(), []string{"-rate", "2"}); err != nil {
		t.Errorf("good flags: %v", err)
	}
	if err := ParseFlags(fs(), []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	var ue *UsageError
	if err := ParseFlags(fs(), []string{"-bogus"}); !errors.As(err, &ue) || err.Error() != "gate load: flag provided but not defined: -bogus" {
		t.Errorf("-bogus: %v", err)
	}
	if err := ParseFlags(fs(), []string{"extra"}); !errors.As(err, &ue) || err.Error() != `gate load takes flags only, got ["extra"]` {
		t.Errorf("extra: %v", err)
	}
}
