// Package kafkatest runs Apache Kafka itself, from its own jars on Maven Central, as
// JVM processes on free loopback ports, for tests that must meet a real broker: its
// group coordinator (classic and KIP-848), transaction coordinator, replication,
// retention, quotas and authorizer are Kafka's own code, which franz-go's in-process
// kfake only imitates.
//
// Guarantees:
//
//   - The broker is Apache Kafka Version (maven/pom.xml), resolved once per machine
//     and POM into CacheDir by Maven (dependency:copy-dependencies), under a lock so that test
//     binaries of several packages resolve it once between them (a GATETEST_KAFKA_JARS
//     that already holds kafka_2.13-Version.jar is used as it is), and started with
//     java -cp 'jars/*' kafka.Kafka after kafka.tools.StorageTool format, as the
//     release's bin/ scripts do. Logging goes through maven/log4j2.xml to one file per
//     node, whose tail is printed when a test fails.
//   - The default Options' JVMs map a class-data-sharing archive of a broker's classes,
//     made once per machine, java and jar set beside CacheDir (archive.go): a node is
//     ready on some 2.5 CPU-seconds, not 4.3 to 5.3. A JVM that cannot use it loads the
//     classes itself; one that cannot be made leaves its reason (Tools.ArchiveErr) and
//     every JVM starting as before.
//   - A cluster is one combined broker+controller node, or three (KRaft voters), each
//     listening only on 127.0.0.1; Start returns once a metadata request lists every
//     broker. Options.SASL adds PLAIN users and the StandardAuthorizer.
//   - CreateTopic (NewTopic) takes a topic its own retried create finds existing (the
//     controller answered NOT_CONTROLLER as its quorum moved, after the first attempt made
//     it) when it has the partitions and replicas asked for; one of another shape fails.
//   - Every JVM is killed (SIGKILL) at cleanup, and on Linux also when the test binary
//     dies (parent-death signal), so no broker outlives its tests.
//   - Without Java 17+ or Maven a test skips with one line saying what to install,
//     and fails instead when the environment variable CI is true.
//
// The package keeps no package-level mutable state.
package kafkatest
