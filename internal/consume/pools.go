package consume

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchPools lends the Kafka client the memory it decodes fetched records into (franz-go's
// kgo.WithPools): the []kgo.Record of each record batch and the buffer a compressed batch
// is decompressed into. The gate gives both back by recycling each input record
// (kgo.Record.Recycle) once it is done with it, when the record's batch is complete
// (Consumer.ackBatch): at-least-once at the acknowledgement of its last record,
// exactly-once at the last promise (a batch with a failed produce is kept); the client
// puts a record batch's slices back here when its last record is recycled.
//
// Without it the client allocates, per record, its 160-byte kgo.Record and its share of
// the decompressed batch (the record's key, value and headers, and their framing): about
// 370 of the ~490 bytes the gate allocated a record (BenchmarkEndToEnd's alloc-B/record),
// and the garbage collector's work follows allocation.
//
// A record batch never recycled (its partition revoked or lost with records in flight,
// records left unrouted, a transaction's batch with a failed produce) is not put back
// and goes to the garbage collector, as without pools: a missed Recycle costs an
// allocation, never a corruption. A recycled one is reused, so nothing may read an input
// record, or any string or slice viewing its key, value or headers, after its Recycle:
// the limiter copies the team keys it keeps (limit.newEntry), and the consumer reads
// every input field it needs before the acknowledgement that can complete a batch.
//
// Memory: a buffer is lent at the decompressed size rounded up to a power of two (at
// most twice it), or taken from the class above (at most four times); it is held until
// its batch's last record is recycled, outside the producer's buffer limits, like the
// client's own buffers without pools.
type fetchPools struct {
	recs [recClasses]sync.Pool // class k holds []kgo.Record of capacity 1 << k
	buf  [bufClasses]sync.Pool // class k holds []byte of capacity in [1 << k, 1 << (k+1))
	// ratio is, by codec (kgo.CompressionCodecType), the float64 bits of how many
	// decompressed bytes a compressed one gave in recent batches (OnFetchBatchRead),
	// for codecs whose header does not say (decompressedSize); 0: none seen yet.
	ratio [5]atomic.Uint64
}

// What the client is given fetchPools as (Consumer.clientOpts).
var (
	_ kgo.PoolRecords         = (*fetchPools)(nil)
	_ kgo.PoolDecompressBytes = (*fetchPools)(nil)
	_ kgo.HookFetchBatchRead  = (*fetchPools)(nil)
)

const (
	// recClasses bounds pooled record slices at 1 << 17 records a batch: Kafka's default
	// batch of 1 MB holds that many records of 8 bytes; a larger one is allocated.
	recClasses = 18
	// bufClasses bounds the buffers lent at 64 MiB and those kept under 128 MiB; a batch
	// larger than that decompresses into memory of the codec's own, as without pools.
	bufClasses = 27
	// firstRatio is the decompressed size guessed per compressed byte before any batch
	// of the codec was read: JSON events compress 4-10 ×. A guess too small costs the
	// codec one growth, and the grown buffer comes back a class up, where the next batch
	// looks too.
	firstRatio = 4
)

// GetRecords returns an empty slice with capacity at least n (kgo.PoolRecords).
func (p *fetchPools) GetRecords(n int) []kgo.Record {
	k := bits.Len(uint(n - 1))
	if n <= 0 || k >= recClasses {
		return make([]kgo.Record, 0, max(n, 0))
	}
	if s, ok := p.recs[k].Get().(*[]kgo.Record); ok {
		return (*s)[:0]
	}
	return make([]kgo.Record, 0, 1<<k)
}

// PutRecords keeps rs (kgo.PoolRecords). Recycle cleared every record it was called on,
// the client clears a batch none of whose records it kept, and its decoder sets every
// field of a record it reuses; what is left are the records of a batch the client kept
// back, below the offset fetched, always its first ones. They are cleared here (up to
// the first record recycled), so that a pooled slice does not pin their bytes: an
// uncompressed batch's are the fetch response's.
func (p *fetchPools) PutRecords(rs []kgo.Record) {
	c := cap(rs)
	k := bits.Len(uint(c - 1))
	if c == 0 || c != 1<<k || k >= recClasses {
		return
	}
	rs = rs[:c]
	for i := range rs {
		if rs[i].Context == nil { // recycled, or never decoded into
			break
		}
		rs[i] = kgo.Record{}
	}
	rs = rs[:0]
	p.recs[k].Put(&rs)
}

// GetDecompressBytes returns a buffer to decompress compressed into
// (kgo.PoolDecompressBytes), of the size decompressedSize expects.
func (p *fetchPools) GetDecompressBytes(compressed []byte, codec kgo.CompressionCodecType) []byte {
	want := p.decompressedSize(compressed, codec)
	k := bits.Len(uint(want - 1)) // the least class whose every buffer holds want
	if want <= 0 || k >= bufClasses {
		return nil // the codec allocates, as without a pool
	}
	for j := k; j < min(k+2, bufClasses); j++ { // a buffer grown by the codec lands a class or two up
		if b, ok := p.buf[j].Get().(*[]byte); ok {
			return (*b)[:0]
		}
	}
	return make([]byte, 0, 1<<k)
}

// PutDecompressBytes keeps b (kgo.PoolDecompressBytes); the client has zeroed it.
func (p *fetchPools) PutDecompressBytes(b []byte) {
	c := cap(b)
	k := bits.Len(uint(c)) - 1 // the class whose range holds c
	if c == 0 || k >= bufClasses {
		return
	}
	b = b[:0]
	p.buf[k].Put(&b)
}

// OnFetchBatchRead learns, by codec, how much a compressed byte decompresses to
// (kgo.HookFetchBatchRead: the client reports every batch it read, with both sizes, as
// franz-go suggests for sizing this pool). The ratio rises to a batch's at once and falls
// a sixteenth of the way to it per batch, so one well-compressed batch does not make the
// next buffers too small for the usual ones.
func (p *fetchPools) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	c := int(m.CompressionType)
	if c <= 0 || c >= len(p.ratio) || m.CompressedBytes <= 0 || m.UncompressedBytes <= 0 {
		return
	}
	seen := float64(m.UncompressedBytes) / float64(m.CompressedBytes)
	r := math.Float64frombits(p.ratio[c].Load())
	if seen < r {
		seen = r - (r-seen)/16
	}
	// Fetch goroutines race here: one batch's figure lost to another's is harmless.
	p.ratio[c].Store(math.Float64bits(seen))
}

// decompressedSize is how large compressed is once decompressed: exact where the codec's
// header says it (snappy blocks, zstd frames that carry their content size), else the
// codec's recent ratio (OnFetchBatchRead) times its size.
func (p *fetchPools) decompressedSize(compressed []byte, codec kgo.CompressionCodecType) int {
	switch codec {
	case kgo.CodecSnappy:
		if n, err := s2.DecodedLen(compressed); err == nil && !xerial(compressed) {
			return n
		}
	case kgo.CodecZstd:
		var h zstd.Header
		if h.Decode(compressed) == nil && h.HasFCS && h.FrameContentSize < 1<<bufClasses {
			return int(h.FrameContentSize)
		}
	}
	r := float64(firstRatio)
	if c := int(codec); c > 0 && c < len(p.ratio) {
		if v := math.Float64frombits(p.ratio[c].Load()); v > 0 {
			r = v
		}
	}
	return int(min(math.Ceil(float64(len(compressed))*r), 1<<bufClasses))
}

// xerial reports whether a snappy batch is in the xerial framing of Java's older clients
// (a magic header, then blocks), whose first bytes are no block header.
func xerial(b []byte) bool {
	const magic = "\x82SNAPPY\x00"
	return len(b) > len(magic) && string(b[:len(magic)]) == magic
}
