package consume

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A fetch loop franz-go stops with nothing left to start it again. franz-go runs one
// fetch loop per broker, started when a consumer session begins or a partition becomes
// fetchable, and a start asked for while a loop runs is left to that loop (it goes round
// once more). As its code reads, a loop that loaded its session just before the session
// was stopped finds it cancelled and ends (kgo v1.22.2 and v1.22.3, source.loopFetch:
// workLoop.hardFinish), dropping any start asked for meanwhile: that of the next session,
// when two sessions follow each other that fast. The gate restarts the session twice in a row when it moves a
// partition right after a transaction ends (the end resets the session to the committed
// offsets, the move resets it again): a broker's loss below the last commit
// (resumeTxnGaps), an aborted transaction's partitions put back where it began
// (rewindTxnStarts). The next session then fetches nothing: its partitions are fetchable
// already, so nothing asks for a start again, and the gate polled nothing more, its
// records unread, until the watchdog took it for stalled (TestBrokerLossNewLogCounted:
// 30 s without a fetch in a CI run, and in 2 of about 150 runs of four beside two busy
// loops; each time no fetch loop in the goroutine dump).
//
// So a poll for new records (at least once, every poll; exactly once, the one a
// transaction opens with, which follows the restarts) waits at most nudgeAfter, and one
// that returns no record asks every broker's fetch loop to start (nudgeFetch): a loop
// running takes it as one more round, a loop stopped for good starts. A stranded gate
// fetches again within nudgeAfter. With the fix, the test above passed 296 runs of four
// under the load that failed 2 of 99 without it.

// nudgeAfter is how long a poll waits for records before it returns with none, and the
// fetch loops are asked to start.
const nudgeAfter = time.Second

// nudgeFetch asks every broker's fetch loop of cl to start (franz-go's
// ResumeFetchPartitions does so whatever it resumes: here nothing, so no partition the
// gate paused is resumed).
func nudgeFetch(cl *kgo.Client, fetches kgo.Fetches) {
	if fetches.NumRecords() == 0 && !fetches.IsClientClosed() {
		cl.ResumeFetchPartitions(map[string][]int32{})
	}
}
