// Package integration runs the built gate binary against Apache Kafka itself and a real
// Redis. The in-process broker of the other suites (kfake) speaks the protocol but not
// every broker behaviour; these tests are where the gate meets the real group and
// transaction coordinators, replication, retention, quotas and the authorizer.
//
// A test gets its broker one of two ways (GATETEST_IT_BROKER: auto, jvm or container):
// Kafka's own jars run as JVM processes (internal/kafkatest: the Kafka version
// pinned in its pom.xml, resolved from Maven Central), or the apache/kafka image of
// the same version through testcontainers-go where a container runtime answers
// (auto's choice there, as on GitHub's runners). Single-broker tests share one JVM
// broker per test binary, each with topics and a group named after it, and the SASL
// tests another (ACLs on their own topics, groups and transactional ids only); a test
// that needs three brokers or broker settings of its own starts its own.
//
// The tests guarantee, on the real broker:
//
//   - conservation: three gates in one group through a join, a leave and a SIGKILL,
//     on the classic and the KIP-848 group protocol, at-least-once (nothing lost) and
//     exactly-once (a read_committed reader sees every input once);
//   - three brokers: the leader of input and output partitions SIGKILLed, restarted
//     and given its partitions back by a preferred-leader election while both delivery
//     modes route; every input partition keeps making progress, nothing is lost;
//   - exactly-once through the SIGKILL and restart of a gate's transaction coordinator
//     on three brokers (not the only broker: Kafka 4.3.1 can lose a transaction's
//     markers then, see TestExactlyOnceBrokerRestart), read with read_committed by
//     franz-go and by librdkafka (kcat);
//   - at least once, the group coordinator's SIGKILL on three brokers: nothing lost,
//     the gates hold their fetches while no commit succeeds, duplicates bounded;
//   - a hanging transaction holding the group's offsets: named in /readyz, nothing
//     routed until it is aborted, then every record once;
//   - output topics with min.insync.replicas=2 while one, then two of three brokers are
//     down: NOT_ENOUGH_REPLICAS named in /readyz, nothing rerouted or lost, ready again
//     by itself once the brokers are back;
//   - records deleted below a lagging gate (DeleteRecords, retention.bytes) counted
//     exactly in gate_records_lost_total, the rest routed once;
//   - a produce quota on the gate's client id: throttling in
//     gate_broker_throttled_seconds_total and a warning, nothing lost;
//   - records produced by librdkafka (kcat) with gzip, snappy, lz4 and zstd routed
//     intact, once;
//   - the refusals: a timestamp the accepted topic refuses, a dead-letter topic whose
//     max.message.bytes is smaller than the (compressed) record, a missing output
//     topic, a SASL user lacking an ACL, a transaction timeout above the brokers'
//     transaction.max.timeout.ms, a fresh cluster's first group, Redis under maxmemory
//     with noeviction: each named in /readyz, rerouted, or waited out as the design
//     says, and the gate never exits for them.
//
// They run in make test. Without Java 17+ and Maven (and no container runtime) each
// test skips with one line saying what to install, and fails instead under CI=true.
package integration
