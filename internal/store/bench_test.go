package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
		if _, _, err := s.Put(ctx, "ns/a", manyTags(100, "v"), time.Now()); err != nil {
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
		name string
		opts []Option
	}{{"closed-reader", []Option{ReadOnly()}}, {"closed-writer", nil}} {
		b.Run(mode.name, func(b *testing.B) {
			dir := b.TempDir()
			seed := New(dir)
			for i := range 100 {
				if _, _, err := seed.Put(ctx, fmt.Sprintf("ns/r%d", i), manyTags(1000, "v"), time.Now()); err != nil {
					b.Fatal(err)
				}
			}
			seed.Close()
			for b.Loop() {
				s := New(dir, mode.opts...)
				if _, err := s.Revision(ctx, "ns/r1"); err != nil {
					b.Fatal(err)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGet100k and BenchmarkPut100k move one list of 100k tags.
func BenchmarkGet100k(b *testing.B) {
	ctx := context.Background()
	s := New(b.TempDir(), WithLinger(time.Hour))
	defer s.Close()
	if _, _, err := s.Put(ctx, "ns/big", manyTags(100_000, "v"), time.Now()); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Get(ctx, "ns/big"); err != nil {
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
		if _, _, err := s.Put(ctx, "ns/big", lists[i%2], time.Now()); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkHandover measures how long a writer waits for the directory
// while a reader process reads without pause, and how long that reader
// waits in turn.
func BenchmarkHandover(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	s := New(dir)
	defer s.Close()
	for _, k := range []string{"ns/put", "ns/add"} {
		if _, _, err := s.Put(ctx, k, genTags(0, smallGen(0)), time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	reader := startHelper(b, "reader", dir, "")
	time.Sleep(100 * time.Millisecond)
	var lat []time.Duration
	g := 1
	for b.Loop() {
		start := time.Now()
		if _, _, err := s.Put(ctx, "ns/put", genTags(g, smallGen(g)), time.Now()); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		g++
		// Let the reader back in before the next write.
		time.Sleep(20 * time.Millisecond)
	}
	b.StopTimer()
	w := summarize(lat, 0, 0)
	r := reader.summary()
	b.ReportMetric(w.P50ms, "writer-p50-ms")
	b.ReportMetric(w.P99ms, "writer-p99-ms")
	b.ReportMetric(r.P50ms, "reader-p50-ms")
	b.ReportMetric(r.P99ms, "reader-p99-ms")
}

// BenchmarkPeakRSS runs a process that writes 1,000 repositories of 1,000
// tags and reports its peak RSS: in sessions of ten writes, as the scan
// function would, and in one session, as the cron reconciler would; with
// the store's options and with Badger's defaults.
func BenchmarkPeakRSS(b *testing.B) {
	for _, arg := range []string{"store/10", "store/1000", "defaults/10", "defaults/1000"} {
		b.Run(strings.ReplaceAll(arg, "/", "-per-session-"), func(b *testing.B) {
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
