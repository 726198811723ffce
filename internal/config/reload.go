package config

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/tlsreload"
)

// Reload is what the TLS files' reloaders (internal/tlsreload) take from the caller of
// ConsumeConfig and DialRedis. The zero value reads the files by the wall clock, logs
// nothing and registers no metrics.
type Reload struct {
	Clock clock.Clock           // paces the reads of the files; clock.Real if nil
	Log   *slog.Logger          // the reload and warning lines; none if nil
	Reg   prometheus.Registerer // gate_tls_* metrics; none if nil
}

func (r Reload) options(target string) tlsreload.Options {
	return tlsreload.Options{Target: target, Clock: r.Clock, Log: r.Log, Reg: r.Reg}
}
