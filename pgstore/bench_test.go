package pgstore

// Benchmarks against the server TestMain starts (fsync and
// synchronous_commit on, on this machine's disk), beside the floor: the
// same round trip without the store (SELECT 1) and a bare autocommit
// INSERT of one key into a one-column table (the commit the store cannot
// avoid). p50-ns and p99-ns are per-operation latencies.

import (
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// quantiles reports the p50 and p99 of ds as metrics.
func quantiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkFloorSelect1 is one round trip through the same pool.
func BenchmarkFloorSelect1(b *testing.B) {
	pool := needServer(b).pool(b)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		var one int
		if err := pool.QueryRow(bg(), `SELECT 1`).Scan(&one); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	quantiles(b, lat)
}

// BenchmarkFloorInsert is a bare autocommit INSERT of a fresh key: one
// commit, flushed to disk.
func BenchmarkFloorInsert(b *testing.B) {
	pool := needServer(b).pool(b)
	if _, err := pool.Exec(bg(), `CREATE TABLE IF NOT EXISTS bench_floor (key bytea PRIMARY KEY)`); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pool.Exec(bg(), `DROP TABLE IF EXISTS bench_floor`) })
	prefix := uniquePrefix()
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		if _, err := pool.Exec(bg(), `INSERT INTO bench_floor (key) VALUES ($1)`, []byte(prefix+strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	quantiles(b, lat)
}

// BenchmarkClaim is one first claim: one statement, one commit.
func BenchmarkClaim(b *testing.B) {
	s := newTestStore(b)
	until := time.Now().Add(time.Hour)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		if first, err := s.Claim(bg(), strconv.Itoa(i), until); !first || err != nil {
			b.Fatal(first, err)
		}
		lat = append(lat, time.Since(start))
	}
	quantiles(b, lat)
}

// BenchmarkClaimReplayed is a claim of an ID already claimed: refused
// without a write.
func BenchmarkClaimReplayed(b *testing.B) {
	s := newTestStore(b)
	until := time.Now().Add(time.Hour)
	if first, err := s.Claim(bg(), "taken", until); !first || err != nil {
		b.Fatal(first, err)
	}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if first, err := s.Claim(bg(), "taken", until); first || err != nil {
			b.Fatal(first, err)
		}
		lat = append(lat, time.Since(start))
	}
	quantiles(b, lat)
}

// BenchmarkClaimParallel is first claims from GOMAXPROCS goroutines (times
// -cpu) sharing one pool of 16 connections: group commit.
func BenchmarkClaimParallel(b *testing.B) {
	s := newTestStore(b)
	until := time.Now().Add(time.Hour)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if first, err := s.Claim(bg(), strconv.FormatInt(n.Add(1), 10), until); !first || err != nil {
				b.Errorf("first = %v, err = %v", first, err)
				return
			}
		}
	})
}

// BenchmarkLeaseAcquireConfirm is a webhook delivery's two store steps:
// AcquireLease of a fresh ID, then ConfirmLease (two statements, two
// commits).
func BenchmarkLeaseAcquireConfirm(b *testing.B) {
	s := newTestStore(b)
	until := time.Now().Add(time.Hour)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		id := strconv.Itoa(i)
		start := time.Now()
		l, err := s.AcquireLease(bg(), id, time.Minute)
		if err != nil || l.Token == "" {
			b.Fatal(l, err)
		}
		if err := s.ConfirmLease(bg(), id, l.Token, until); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	quantiles(b, lat)
}

// BenchmarkSweep is deleting expired rows, per row, in the default batches;
// rows-left counts the expired rows still in the table afterwards.
func BenchmarkSweep(b *testing.B) {
	p := needServer(b)
	pool := p.pool(b)
	s := newTestStore(b)
	if _, err := pool.Exec(bg(), `INSERT INTO `+s.table+` (key, state, token, until)
		SELECT convert_to($1 || g::text, 'UTF8'), 'c', '', now() - interval '1 second' FROM generate_series(1, $2) g`,
		s.prefix, b.N); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for { // a backlog over 100 batches takes more than one call
		n, err := s.Sweep(bg())
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	b.StopTimer()
	var left int
	if err := pool.QueryRow(bg(), `SELECT count(*) FROM `+s.table+` WHERE until < now() AND state <> 'm'`).Scan(&left); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(left), "rows-left")
}

// BenchmarkRecordAcquireConfirm is an idempotent request's two store
// steps, as BenchmarkLeaseAcquireConfirm (its floor, with
// BenchmarkFloorInsert) but carrying a record: AcquireRecord of a fresh
// ID with a 32-byte fingerprint, then ConfirmRecord with a result of the
// sub-benchmark's size (two statements, two commits; a result over about
// 2 KiB is compressed or moved out of line by PostgreSQL's TOAST).
func BenchmarkRecordAcquireConfirm(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 256 << 10} {
		b.Run("result="+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			s := newTestStore(b)
			until := time.Now().Add(time.Hour)
			fp := make([]byte, 32)
			result := benchResult(size)
			var lat []time.Duration
			i := 0
			for b.Loop() {
				i++
				id := strconv.Itoa(i)
				start := time.Now()
				r, err := s.AcquireRecord(bg(), id, time.Minute, fp)
				if err != nil || r.Token == "" {
					b.Fatal(r, err)
				}
				if err := s.ConfirmRecord(bg(), id, r.Token, until, fp, result); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			quantiles(b, lat)
		})
	}
}

// BenchmarkRecordReplayed is a retry of a completed request: AcquireRecord
// of a recorded ID, which reads the fingerprint and the result (of the
// sub-benchmark's size) without a write.
func BenchmarkRecordReplayed(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 256 << 10} {
		b.Run("result="+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			s := newTestStore(b)
			fp := make([]byte, 32)
			r, err := s.AcquireRecord(bg(), "done", time.Minute, fp)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.ConfirmRecord(bg(), "done", r.Token, time.Now().Add(time.Hour), fp, benchResult(size)); err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if r, err := s.AcquireRecord(bg(), "done", time.Minute, fp); err != nil || len(r.Result) != size {
					b.Fatal(r.State, len(r.Result), err)
				}
				lat = append(lat, time.Since(start))
			}
			quantiles(b, lat)
		})
	}
}

// benchResult is a response-like result of n bytes: JSON-ish text that
// compresses somewhat, not a run of one byte.
func benchResult(n int) []byte {
	out := make([]byte, 0, n+64)
	for i := 0; len(out) < n; i++ {
		out = strconv.AppendInt(append(out, `{"id":"pay_`...), int64(i*7919), 36)
		out = append(out, `","amount":1999,"currency":"eur"},`...)
	}
	return out[:n]
}
