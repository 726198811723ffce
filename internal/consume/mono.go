package consume

import "time"

// mono is the consumer's clock for how long ago something happened: progress (the
// watchdog), the last acknowledgement and the oldest records waiting (outputs.go), a
// lag's measurement and an assignment (lag.go), the last fetch refused. It reads the
// monotonic clock, as Unix time cannot be: a step of the wall clock (an NTP correction,
// a VM resumed) moved every such age by the step. A step back blinded the checks for
// its length (the outputs never stuck, a lag never stale, a lifted fetch refusal
// keeping the gate not ready); a step forward made them all fire at once, a stall past
// GATE_STALL_RESTART failing /healthz on a gate that was progressing. A wall and a
// monotonic reading of one instant (time.Now takes them one after the other) can also
// be a preemption apart.
type mono struct{ born time.Time }

func newMono() mono { return mono{born: time.Now()} }

// now is the reading: ns since born, at least 1, so that 0 can mean never.
func (m mono) now() int64 { return max(int64(time.Since(m.born)), 1) }

// since is how long before now the reading at was.
func (m mono) since(at int64) time.Duration { return time.Duration(m.now() - at) }
