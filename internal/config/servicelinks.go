package config

import (
	"log/slog"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Kubernetes service links. Unless a pod spec sets enableServiceLinks: false (the chart
// does), the kubelet gives every container, for every Service of its namespace that has
// a cluster IP, these variables, SVC being the Service's name upper-cased with '-' as '_'
// (pkg/kubelet/envvars in Kubernetes):
//
//	SVC_SERVICE_HOST=10.0.0.1               the cluster IP
//	SVC_SERVICE_PORT=8080                   the first port
//	SVC_SERVICE_PORT_HTTP=8080              each named port, the name as SVC is made
//	SVC_PORT=tcp://10.0.0.1:8080            the first port, as Docker links have it
//	SVC_PORT_8080_TCP=tcp://10.0.0.1:8080   each port: protocol TCP, UDP or SCTP
//	SVC_PORT_8080_TCP_PROTO=tcp
//	SVC_PORT_8080_TCP_PORT=8080
//	SVC_PORT_8080_TCP_ADDR=10.0.0.1
//
// A Service named gate or gate-anything (a release named gate makes them) so puts GATE_
// names in every pod of the namespace, which Load would refuse as unknown. It
// ignores them instead, and serve logs them at debug level.
//
// A name is taken for a service link only when both the name and the value are of a
// form listed above, with the parts that must agree agreeing (the port in the name and
// in the value, the protocol in the name and in _PROTO): a mistyped setting such as
// GATE_HTTP_PORT=9090 or GATE_KAFKA_BROKER=kafka:9092 is still refused. A name of
// Config is never one: Load checks its own names first, and a test keeps every
// Config name out of these forms.

// linkService is SVC for a GATE_ name: GATE, or GATE_ and more of a DNS label's
// characters, ending in a letter or digit.
const linkService = envPrefix + `(?:_[A-Z0-9_]*[A-Z0-9])?`

// linkPort is _PORT_<port>_<PROTO>: a port number without leading zeros and a protocol.
const linkPort = `_PORT_([1-9][0-9]{0,4})_(TCP|UDP|SCTP)`

var (
	linkServiceHost = regexp.MustCompile(`^` + linkService + `_SERVICE_HOST$`)
	linkServicePort = regexp.MustCompile(`^` + linkService + `_SERVICE_PORT(?:_[A-Z0-9](?:[A-Z0-9_]*[A-Z0-9])?)?$`)
	linkFirstPort   = regexp.MustCompile(`^` + linkService + `_PORT$`)
	linkPortURL     = regexp.MustCompile(`^` + linkService + linkPort + `$`)
	linkPortPart    = regexp.MustCompile(`^` + linkService + linkPort + `_(PROTO|PORT|ADDR)$`)
)

// isServiceLink reports whether name=value is a variable Kubernetes sets for a Service.
func isServiceLink(name, value string) bool {
	if linkServiceHost.MatchString(name) && isIP(value) {
		return true
	}
	if linkServicePort.MatchString(name) && isLinkPort(value) {
		return true
	}
	if linkFirstPort.MatchString(name) {
		if proto, rest, ok := strings.Cut(value, "://"); ok && (proto == "tcp" || proto == "udp" || proto == "sctp") {
			if i := strings.LastIndexByte(rest, ':'); i > 0 && isLinkPort(rest[i+1:]) && isIP(strings.Trim(rest[:i], "[]")) {
				return true
			}
		}
	}
	if m := linkPortURL.FindStringSubmatch(name); m != nil && isLinkPort(m[1]) {
		port, proto := m[1], strings.ToLower(m[2])
		if host, ok := strings.CutPrefix(value, proto+"://"); ok {
			if host, ok := strings.CutSuffix(host, ":"+port); ok && isIP(strings.Trim(host, "[]")) {
				return true
			}
		}
	}
	if m := linkPortPart.FindStringSubmatch(name); m != nil && isLinkPort(m[1]) {
		switch port, proto := m[1], strings.ToLower(m[2]); m[3] {
		case "PROTO":
			return value == proto
		case "PORT":
			return value == port
		case "ADDR":
			return isIP(value)
		}
	}
	return false
}

// isIP: a cluster IP, v4 or v6, as Kubernetes writes it.
func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// isLinkPort: a Service port, 1 to 65535, as strconv.Itoa writes it.
func isLinkPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == s
}

// ServiceLinks returns, sorted, the names among names that Load ignores as
// Kubernetes service links.
func ServiceLinks(getenv func(string) string, names []string) []string {
	known := make(map[string]bool)
	for _, f := range configFields() {
		known[f.key] = true
	}
	var out []string
	for _, n := range slices.Compact(slices.Sorted(slices.Values(names))) {
		if strings.HasPrefix(n, envPrefix+"_") && !known[n] && isServiceLink(n, getenv(n)) {
			out = append(out, n)
		}
	}
	return out
}

// LogServiceLinks says, at debug level, which variables were ignored as service links.
func LogServiceLinks(log *slog.Logger, getenv func(string) string, names []string) {
	if links := ServiceLinks(getenv, names); len(links) > 0 {
		log.Debug("ignoring Kubernetes service link variables (set enableServiceLinks: false on the pod to leave them out)",
			"names", links)
	}
}
