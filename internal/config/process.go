package config

import "net"

// Process is Config's variables for the process: its HTTP server and its log.
type Process struct {
	// The process.
	HTTPAddr  string    `envconfig:"HTTP_ADDR" default:":8080" desc:"Address the HTTP server listens on for /metrics, /healthz, /readyz and the team view, as host:port, port 0 choosing a free one (default :8080); a 127.0.0.1 host keeps them off the network."`
	TeamAPI   bool      `envconfig:"TEAM_API" default:"false" desc:"Serve the read-only team view on GATE_HTTP_ADDR: GET /v1/teams/{team} (threshold, override, level, last global estimate and its age, pending, tier, limited, seconds until under) and GET /v1/teams?top=N (this gate's teams closest to or over their limits), which gate team reads (default false: it lists team names and their rates to anyone who reaches the port, so it is turned on deliberately); off, the server answers only /metrics, /healthz and /readyz."`
	LogLevel  logLevel  `envconfig:"LOG_LEVEL" default:"info" desc:"Least severe log level written to stderr: debug, info, warn or error (default info); debug is noisy (it adds the Kafka client's own lines, from=franz-go), error hides the start-up line with the effective settings."`
	LogFormat logFormat `envconfig:"LOG_FORMAT" default:"json" desc:"Log line format on stderr: json for log collectors or text for people (default json)."`
	// Read by serve (cmd/gate), which sets the runtime's limit before anything starts.
	MemoryLimitRatio float64 `envconfig:"MEMORY_LIMIT_RATIO" default:"0.9" desc:"Share of the container's memory limit (its cgroup's) that serve sets as the Go runtime's soft memory limit when GOMEMLIMIT is unset, from 0 to 1 (default 0.9): near it the runtime collects harder rather than let the kernel kill the process, the rest being left for memory the runtime does not count (kernel socket buffers are charged to the container too); 0 sets none, as does a container without a memory limit; a GOMEMLIMIT set wins. The start-up line gives the limit and where it came from; the container's is read again every minute, so that a pod resized in place keeps the share (each change logged)."`
}

// validate checks the process's variables' values.
func (c Process) validate(bad report) {
	if _, port, err := net.SplitHostPort(c.HTTPAddr); err != nil || !validPort(port) {
		bad("HTTP_ADDR", "host:port such as :8080 or 127.0.0.1:8080")
	}
	// A share over 1 would let the heap grow past what the kernel allows, to no purpose.
	if !(c.MemoryLimitRatio >= 0 && c.MemoryLimitRatio <= 1) {
		bad("MEMORY_LIMIT_RATIO", "a share from 0 (no limit) to 1 such as 0.9")
	}
}
