// Package faulttest holds what the gate's fault, bad-input and security tests share: a
// conservation checker that matches every input record to exactly one output record, a
// launcher for the built gate binary as a real OS process, an in-process Kafka broker
// tuned so that consumer groups react in seconds, test-generated TLS certificates, and
// redis-server processes with a password or TLS.
//
// Records are matched by an id the test sets in the IDHeader header of each input record.
// The gate copies an input's headers onto its output unchanged, on every route (accepted,
// overflow and dead letter), so the id survives routing.
//
// It is imported by tests only.
package faulttest
