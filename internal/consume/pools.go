package consume

import (
	"math/bits"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchPools lends the Kafka client the memory it decodes fetched records into (franz-go's
// kgo.WithPools): the []kgo.Record of each record batch and the buffer a compressed batch
// is decompressed into. The gate gives both back by recycling each input record
// (kgo.Record.Recycle) once it is done with it, at-least-once when the record's batch is
// complete (Consumer.ackBatch); the client puts a record batch's slices back here when its
// last record is recycled.
//
// Without it the client allocates, per record, its 160-byte kgo.Record and its share of
// the decompressed batch (the record's key, value and headers, and their framing): about
// 370 of the ~490 bytes the gate allocated a record (BenchmarkEndToEnd's alloc-B/record),
// and the garbage collector's work follows allocation.
//
// A record batch never recycled (its partition revoked or lost with records in flight,
// records left unrouted, exactly-once delivery, which does not recycle) is not put back
// and goes to the garbage collector, as without pools: a missed Recycle costs an
// allocation, never a corruption. A recycled one is reused, so nothing may read an input
// record, or any string or slice viewing its key, value or headers, after its Recycle:
// the limiter copies the team keys it keeps (limit.newEntry), and the consumer reads
// every input field it needs before the acknowledgement that can complete a batch.
type fetchPools struct {
	recs [recClasses]sync.Pool // class k holds []kgo.Record of capacity 1 << k
	buf  [bufClasses]sync.Pool // class k holds []byte of capacity in [1 << k, 1 << (k+1))
}

const (
	// recClasses bounds pooled record slices at 1 << 17 records a batch: Kafka's default
	// batch of 1 MB holds that many records of 8 bytes; a larger one is allocated.
	recClasses = 18
	// bufClasses bounds pooled buffers below 1 << 27 bytes (128 MiB, past the client's
	// default decompression limit); a larger one is allocated and dropped.
	bufClasses = 27
	// unknownRatio is the decompressed size guessed per compressed byte when the
	// codec's header does not say it (gzip, lz4, xerial-framed snappy, zstd without a
	// content size): JSON events compress 4-10 ×. A guess too small costs the codec one
	// growth, its grown buffer comes back in a class of its own.
	unknownRatio = 8
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

// PutRecords keeps rs (kgo.PoolRecords). It is not cleared again: Recycle cleared every
// record it was called on, the client clears a batch none of whose records it kept,
// and the decoder sets every field of a record it reuses. What may be left are the few
// records of a batch the client kept back (below the offset fetched), which point into
// that batch's own buffer, pooled as well.
func (p *fetchPools) PutRecords(rs []kgo.Record) {
	c := cap(rs)
	k := bits.Len(uint(c - 1))
	if c == 0 || c != 1<<k || k >= recClasses {
		return
	}
	rs = rs[:0]
	p.recs[k].Put(&rs)
}

// GetDecompressBytes returns a buffer to decompress compressed into
// (kgo.PoolDecompressBytes): of the size snappy's or zstd's header says, else a guess.
func (p *fetchPools) GetDecompressBytes(compressed []byte, codec kgo.CompressionCodecType) []byte {
	want := decompressedSize(compressed, codec)
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

// decompressedSize is how large compressed is once decompressed: exact where the codec's
// header says it (snappy blocks, zstd frames that carry their content size), else
// unknownRatio × its size.
func decompressedSize(compressed []byte, codec kgo.CompressionCodecType) int {
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
	return len(compressed) * unknownRatio
}

// xerial reports whether a snappy batch is in the xerial framing of Java's older clients
// (a magic header, then blocks), whose first bytes are no block header.
func xerial(b []byte) bool {
	const magic = "\x82SNAPPY\x00"
	return len(b) > len(magic) && string(b[:len(magic)]) == magic
}
