// Package integration runs the built gate binary against a real Apache Kafka broker (the
// official apache/kafka image, KRaft) and a real Redis, both started in containers through
// testcontainers-go. The in-process broker of the other suites speaks the protocol but
// not every broker behaviour; these tests are where the gate meets one.
//
// The tests carry the build tag integration and run with make test-integration. They
// guarantee:
//
//   - conservation: with three gates in one group and rebalances (one joining, one
//     leaving), every input record reaches exactly one output topic;
//   - exactly-once: a read_committed consumer sees every input once, with a gate
//     SIGKILLed mid-load and restarted under its transactional id;
//   - the hardening cases on real broker settings: a timestamp the accepted topic
//     refuses (message.timestamp.after.max.ms), a dead-letter topic whose
//     max.message.bytes is smaller than the record, a missing output topic, a SASL user
//     lacking an ACL: each named in /readyz or rerouted as the design says;
//   - Redis under maxmemory with noeviction: writes refused, routing goes on (fail
//     open), and the counts land once Redis has room again.
//
// Where no container runtime answers (testcontainers' provider health check), each test
// skips with one line saying why; that includes CI=true, as the project's CI machines
// have none. make check vets the package with -tags integration so that it cannot rot.
package integration
