package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAcquire measures taking the lease: "open" when the database is
// already open, "closed-*" for a full open and close of the directory.
func BenchmarkAcquire(b *testing.B) {
	ctx := context.Background()
	b.Run("open", func(b *testing.B) {
		s := New(b.TempDir(), WithLinger(time.Hour))
		defer s.Close()
		if _, _, err := s.Put(ctx, "ns/a", testID, manyTags(100, "v"), time.Now()); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			_, err := s.acquire(ctx, false)
			if err != nil {
				b.Fatal(err)
			}
			s.release()
		}
	})
	for _, mode := range []struct {
		name     string
		readOnly bool
	}{
		{"closed-reader", true},
		{"closed-writer", false},
	} {
		b.Run(mode.name, func(b *testing.B) {
			dir := b.TempDir()
			seed := New(dir)
			for i := range 100 {
				if _, _, err := seed.Put(ctx, fmt.Sprintf("ns/r%d", i), testID, manyTags(1000, "v"), time.Now()); err != nil {
					b.Fatal(err)
				}
			}
			seed.Close()
			var opts []Option
			if mode.readOnly {
				opts = append(opts, ReadOnly())
			}
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				s := New(dir, opts...)
				if _, err := s.Revision(ctx, "ns/r1", testID); err != nil {
					b.Fatal(err)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			sum := summarize(lat, 0, 0)
			b.ReportMetric(sum.P50ms, "p50-ms")
			b.ReportMetric(lat[len(lat)*9/10].Seconds()*1000, "p90-ms")
		})
	}
}

// BenchmarkGet100k and BenchmarkPut100k move one list of 100k tags.
func BenchmarkGet100k(b *testing.B) {
	ctx := context.Background()
	s := New(b.TempDir(), WithLinger(time.Hour))
	defer s.Close()
	if _, _, err := s.Put(ctx, "ns/big", testID, manyTags(100_000, "v"), time.Now()); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Get(ctx, "ns/big", testID); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPut100k(b *testing.B) {
	ctx := context.Background()
	s := New(b.TempDir(), WithLinger(time.Hour))
	defer s.Close()
	lists := [][]string{manyTags(100_000, "v"), manyTags(100_000, "w")}
	i := 0
	for b.Loop() {
		if _, _, err := s.Put(ctx, "ns/big", testID, lists[i%2], time.Now()); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkPutUnchanged100k writes the same list of 100k tags again, as every scan of a
// repository whose tags did not change does.
func BenchmarkPutUnchanged100k(b *testing.B) {
	ctx := context.Background()
	s := New(b.TempDir(), WithLinger(time.Hour))
	defer s.Close()
	tags := manyTags(100_000, "v")
	for b.Loop() {
		if _, _, err := s.Put(ctx, "ns/big", testID, tags, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandover measures how long a writer waits for the directory
// while reader processes read without pause, and how long the reads that
// wait for the writer take. A write that waits past a second counts as a
// timeout.
func BenchmarkHandover(b *testing.B) {
	for _, readers := range []int{1, 3} {
		b.Run(fmt.Sprintf("readers-%d", readers), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			seedRoles(b, dir)
			s := New(dir)
			defer s.Close()
			var helpers []*helper
			for range readers {
				helpers = append(helpers, startHelper(b, "reader", dir, ""))
			}
			for _, h := range helpers {
				h.next() // each reader has read once: the writes contend with all of them
			}
			var lat []time.Duration
			timeouts := 0
			g := 1
			// 20 ms after each write let the readers back in.
			pace := time.NewTimer(0)
			for b.Loop() {
				<-pace.C
				start := time.Now()
				wctx, cancel := context.WithTimeout(ctx, time.Second)
				_, _, err := s.Put(wctx, "ns/put", testID, genTags(g, smallGen(g)), time.Now())
				cancel()
				if errors.Is(err, ErrLocked) {
					timeouts++
				} else if err != nil {
					b.Fatal(err)
				} else {
					lat = append(lat, time.Since(start))
					g++
				}
				pace.Reset(20 * time.Millisecond)
			}
			b.StopTimer()
			w := summarize(lat, 0, 0)
			var waits summary
			for _, r := range helpers {
				sum := r.summary()
				if sum.P50ms > waits.P50ms {
					waits.P50ms = sum.P50ms
				}
				if sum.P99ms > waits.P99ms {
					waits.P99ms = sum.P99ms
				}
			}
			b.ReportMetric(w.P50ms, "writer-p50-ms")
			b.ReportMetric(w.P99ms, "writer-p99-ms")
			b.ReportMetric(float64(timeouts), "writer-timeouts")
			b.ReportMetric(waits.P50ms, "reader-wait-p50-ms")
			b.ReportMetric(waits.P99ms, "reader-wait-p99-ms")
		})
	}
}

// BenchmarkPeakRSS runs a process that writes 1,000 repositories of 1,000
// tags and reports its peak RSS: in sessions of ten writes, as the scan
// function would, and in one session, as the cron reconciler would.
func BenchmarkPeakRSS(b *testing.B) {
	for _, arg := range []string{"10", "1000"} {
		b.Run("store-per-session-"+arg, func(b *testing.B) {
			var kib int64
			for b.Loop() {
				h := startHelper(b, "rss", b.TempDir(), arg)
				var err error
				if kib, err = strconv.ParseInt(h.stop(), 10, 64); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(kib)/1024, "peak-RSS-MiB")
		})
	}
}

// BenchmarkPushStep10k is what the scan of a push does to a stored list of 10,000 tags: Push
// leaves out pushed tags the list holds and adds the others as a delta. Every hundred
// additions or so fill a value-log file; add-p99-ms and add-max-ms show what the addition that
// fills one waits for.
func BenchmarkPushStep10k(b *testing.B) {
	ctx := context.Background()
	s := New(b.TempDir(), WithLinger(time.Hour))
	defer s.Close()
	if _, _, err := s.Put(ctx, "ns/app", testID, manyTags(10_000, "v"), time.Now()); err != nil {
		b.Fatal(err)
	}
	var adds []time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		if _, err := s.Push(ctx, "ns/app", testID, []string{"w" + strconv.Itoa(i)}, ""); err != nil {
			b.Fatal(err)
		}
		adds = append(adds, time.Since(start))
	}
	slices.Sort(adds)
	b.ReportMetric(float64(adds[len(adds)*99/100].Microseconds())/1000, "add-p99-ms")
	b.ReportMetric(float64(adds[len(adds)-1].Microseconds())/1000, "add-max-ms")
}

// BenchmarkPush is the store's part of a push: one new tag added to a list of 100, 10,000 and
// 100,000 tags with the scan's calls, Missing for which of the pushed tags are missing, then Push,
// which returns the count and the greatest tags rather than the list. push-B is what the push's
// transaction writes (keys and values), compact-B the bytes of the compactions the pushes made
// due, per push; ns/op includes the background compactions' share only as far as they compete
// for the CPU. Run with -benchtime of a few thousand pushes, the compactions that the deltas call
// for are part of compact-B/op.
func BenchmarkPush(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("tags=%d", n), func(b *testing.B) {
			s := New(b.TempDir(), WithLinger(time.Hour))
			defer s.Close()
			if _, _, err := s.Put(ctx, "ns/app", testID, manyTags(n, "v"), time.Now()); err != nil {
				b.Fatal(err)
			}
			// The first push rebuilds nothing: Put wrote the index.
			written, compacted := s.written.Load(), s.compacted.Load()
			i := 0
			for b.Loop() {
				i++
				tags := []string{"sha-" + strconv.Itoa(1_000_000+i)}
				missing, rev, err := s.Missing(ctx, "ns/app", testID, tags)
				if err != nil || len(missing) != 1 {
					b.Fatal(missing, err)
				}
				p, err := s.Push(ctx, "ns/app", testID, missing, rev)
				if err != nil || p.Count != n+i {
					b.Fatal(p.Count, err)
				}
			}
			b.StopTimer()
			reportWritten(b, s, i, written, compacted)
		})
	}
}

// reportWritten reports the bytes that the pushes of a benchmark wrote, apart from those of the
// compactions they called for, per push: push-B/op and compact-B/op.
func reportWritten(b *testing.B, s *Store, pushes int, written, compacted int64) {
	waitNoCompaction(s)
	compacted = s.compacted.Load() - compacted
	written = s.written.Load() - written - compacted
	b.ReportMetric(float64(written)/float64(pushes), "push-B/op")
	b.ReportMetric(float64(compacted)/float64(pushes), "compact-B/op")
}

// BenchmarkGetWithDeltas is a full read of a list of 100,000 tags as a listing left it and with
// the 1,000 one-tag deltas of pushes since, fewer than a compaction waits for at that size: what
// merging deltas adds to a reader.
func BenchmarkGetWithDeltas(b *testing.B) {
	ctx := context.Background()
	for _, deltas := range []int{0, 1000, maxDeltas - 1} {
		b.Run(fmt.Sprintf("deltas=%d", deltas), func(b *testing.B) {
			s := New(b.TempDir(), WithLinger(time.Hour))
			defer s.Close()
			if _, _, err := s.Put(ctx, "ns/app", testID, manyTags(100_000, "v"), time.Now()); err != nil {
				b.Fatal(err)
			}
			for i := range deltas {
				if _, err := s.Push(ctx, "ns/app", testID, []string{"sha-" + strconv.Itoa(1_000_000+i)}, ""); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if _, err := s.Get(ctx, "ns/app", testID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWriterSession measures what a push costs the scan function's heap when the store is
// closed between pushes: open, one tag pushed to an entry of 10,000 tags, close (which flushes
// the memtable and compacts L0). B/op is the garbage a push leaves.
func BenchmarkWriterSession(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	seed := New(dir)
	if _, _, err := seed.Put(ctx, "ns/app", testID, manyTags(10_000, "v"), time.Now()); err != nil {
		b.Fatal(err)
	}
	if err := seed.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		s := New(dir)
		if p, err := s.Push(ctx, "ns/app", testID, []string{fmt.Sprintf("1.%d.0", i)}, ""); err != nil || len(p.Tags) != 1 {
			b.Fatalf("pushing a tag: added %v, %v", p.Tags, err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
