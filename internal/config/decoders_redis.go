package config

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/capturegate/gate/internal/tick"
)

// redisMode is GATE_REDIS_MODE.
type redisMode string

func (redisMode) want() string {
	return fmt.Sprintf("%s, %s or %s", tick.ModeStandalone, tick.ModeCluster, tick.ModeSentinel)
}

// Decode takes the names tick.ParseMode reads, in any case.
func (m *redisMode) Decode(text string) error {
	v, err := tick.ParseMode(strings.ToLower(text))
	if err != nil {
		return fmt.Errorf("unknown mode %q", text)
	}
	*m = redisMode(v)
	return nil
}

func (m redisMode) value() tick.Mode { return tick.Mode(m) }

// sentinelAddrs is GATE_REDIS_SENTINEL_ADDRS: host:port entries, checked like brokers.
type sentinelAddrs []string

func (sentinelAddrs) want() string {
	return "host:port entries separated by commas such as sentinel-1:26379,sentinel-2:26379"
}

func (a *sentinelAddrs) Decode(text string) error {
	var b brokerList
	if err := b.Decode(text); err != nil {
		return err
	}
	*a = sentinelAddrs(b)
	return nil
}

func (sentinelAddrs) redact(s string) string { return redactHosts(s) }

// sentinelMaster is GATE_REDIS_SENTINEL_MASTER: a name as sentinel.conf takes it, one word.
type sentinelMaster string

func (sentinelMaster) want() string { return "a master name without spaces or commas such as mymaster" }

func (m *sentinelMaster) Decode(text string) error {
	if strings.ContainsAny(text, " \t,") {
		return fmt.Errorf("name %q has a space or comma", text)
	}
	*m = sentinelMaster(text)
	return nil
}

// redisURLs is GATE_REDIS_URLS. Its String redacts passwords, so a Config can be logged.
type redisURLs []string

func (redisURLs) want() string {
	return "redis:// or rediss:// URLs separated by commas such as redis://127.0.0.1:6379/0"
}

// Decode checks every URL with the same parser Dial uses, and rejects an instance
// listed twice: the tick needs distinct instances, and a duplicate would count a team's
// events on two keys without either seeing the sum.
func (u *redisURLs) Decode(text string) error {
	pieces := strings.Split(text, ",")
	// A ',' in a password splits its URL, the rest of the password going to a piece with
	// an '@' and no scheme: said first, as the URL's first piece fails to parse too, in a
	// way that does not point at the ','.
	for i, s := range pieces {
		if i > 0 && !strings.Contains(s, "://") && strings.Contains(s, "@") {
			return fmt.Errorf("entry %d has an '@' and no scheme: a ',' in a password splits its URL in two; escape it as %%2C", i+1)
		}
	}
	var out redisURLs
	seen := make(map[string]int)
	for i, s := range pieces {
		s = strings.TrimSpace(s)
		if s == "" {
			return fmt.Errorf("entry %d is empty", i+1)
		}
		opt, err := tick.ParseURL(s)
		if err != nil {
			return err // names the URL with its password redacted
		}
		if err := gateSetOption(s); err != nil {
			return err
		}
		id := fmt.Sprintf("%s/%d", opt.Addr, opt.DB)
		if j, dup := seen[id]; dup {
			return fmt.Errorf("entries %d and %d are the same instance (%s)", j+1, i+1, id)
		}
		seen[id] = i
		out = append(out, s)
	}
	*u = out
	return nil
}

// gateOwnOptions are the URL options the gate's clients set themselves over a URL's
// (tick.Dial, DialCluster, DialSentinel), with what sets them instead.
var gateOwnOptions = []struct{ name, instead string }{
	{"dial_timeout", "set GATE_REDIS_DIAL_TIMEOUT instead"},
	{"read_timeout", "set GATE_REDIS_READ_TIMEOUT instead"},
	{"write_timeout", "set GATE_REDIS_WRITE_TIMEOUT instead"},
	{"pool_size", "the gate sets its own pool size"},
	{"max_retries", "the gate retries at its next tick, never within one"},
}

// gateSetOption refuses a URL option the gate's clients would override: taken, it was
// ignored in silence (an operator's ?read_timeout=2s for a slow Redis left 250ms).
// u parses (tick.ParseURL), and the error names only the option, never the URL.
func gateSetOption(u string) error {
	pu, err := url.Parse(u)
	if err != nil {
		return nil
	}
	q := pu.Query()
	for _, o := range gateOwnOptions {
		if q.Has(o.name) {
			return fmt.Errorf("option %s is not used: %s", o.name, o.instead)
		}
	}
	return nil
}

// redact redacts each URL of s. A piece without a scheme is the rest of the URL before
// it, split by a ',' in its password (Decode refuses it): redacted alone, the URL's first
// piece was shown as is, the password's head with it.
func (redisURLs) redact(s string) string {
	var parts []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if n := len(parts); n > 0 && !strings.Contains(p, "://") {
			parts[n-1] += "," + p
			continue
		}
		parts = append(parts, p)
	}
	for i, p := range parts {
		parts[i] = redactURL(p)
	}
	return strings.Join(parts, ",")
}

// String returns the URLs with passwords replaced by "xxxxx".
func (u redisURLs) String() string { return u.redact(strings.Join(u, ",")) }

func redactURL(s string) string {
	if tick.UnescapedPassword(s) {
		return "(redacted: an '@' outside the user info)" // a password, or a part of one
	}
	pu, err := url.Parse(s)
	if err != nil {
		if strings.Contains(s, "@") {
			return "(unparsable URL)" // it may hold a password
		}
		return s
	}
	return tick.Redacted(pu)
}
