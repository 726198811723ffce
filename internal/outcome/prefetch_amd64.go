package outcome

// prefetch has the processor fetch the line at p into its caches without waiting for it:
// PREFETCHT0, which retires at once, where a load whose value is kept would hold the
// instructions after it from retiring until the line came (Agg.Touch).
//
//go:noescape
func prefetch(p *slot)
