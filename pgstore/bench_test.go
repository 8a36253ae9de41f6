package pgstore

// Benchmarks against the server TestMain starts (fsync and
// synchronous_commit on, on this machine's disk), beside the floors: the
// same round trip without the store (SELECT 1) and a bare autocommit
// INSERT of one key into a one-column table; BenchmarkClaimPaired has the
// floors of issue 34 beside a claim. p50-ns and p99-ns are per-operation
// latencies.

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// timed runs op once per iteration (i counts from 1) and reports its p50
// and p99 latencies (p50-ns, p99-ns) and the CPU per operation
// (cpuPerOp).
func timed(b *testing.B, pool *pgxpool.Pool, op func(i int)) {
	cpu := cpuPerOp(b, pool)
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		op(i)
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	cpu()
}

// cpuPerOp starts measuring the CPU time of this process (the client: the
// store, pgx and Go's runtime, every thread) and of the server's client
// backends (those open now: the pool's), and returns a func that reports
// both per operation, as client-cpu-ns/op and server-cpu-ns/op (Linux
// only; the server's at a resolution of 10 ms over the whole run). CPU
// time, unlike ns/op, does not count time spent waiting for a CPU or for
// the disk, so it compares runs on a busy machine.
func cpuPerOp(b *testing.B, pool *pgxpool.Pool) func() {
	rows, err := pool.Query(bg(), `SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'`)
	must(b, err)
	var pids []int
	for rows.Next() {
		var pid int
		must(b, rows.Scan(&pid))
		pids = append(pids, pid)
	}
	rows.Close()
	server := func() time.Duration {
		var t time.Duration
		for _, pid := range pids {
			c := procCPU(pid)
			if c < 0 {
				return -1
			}
			t += c
		}
		return t
	}
	c0, s0 := selfCPU(), server()
	return func() {
		c1, s1 := selfCPU(), server()
		if c0 >= 0 && c1 >= 0 {
			b.ReportMetric(float64((c1-c0).Nanoseconds())/float64(b.N), "client-cpu-ns/op")
		}
		if s0 >= 0 && s1 >= 0 {
			b.ReportMetric(float64((s1-s0).Nanoseconds())/float64(b.N), "server-cpu-ns/op")
		}
	}
}

// BenchmarkFloorSelect1 is one round trip through the same pool.
func BenchmarkFloorSelect1(b *testing.B) {
	pool := needServer(b).pool(b)
	timed(b, pool, func(int) {
		var one int
		if err := pool.QueryRow(bg(), `SELECT 1`).Scan(&one); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkFloorInsert is a bare autocommit INSERT of a fresh key: one
// commit, flushed to disk.
func BenchmarkFloorInsert(b *testing.B) {
	pool := needServer(b).pool(b)
	table := newTable(b, pool, "bench_floor_", "key bytea PRIMARY KEY")
	prefix := uniquePrefix()
	timed(b, pool, func(i int) {
		if _, err := pool.Exec(bg(), `INSERT INTO `+table+` (key) VALUES ($1)`, []byte(prefix+strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkClaim is one first claim: one statement, one commit.
func BenchmarkClaim(b *testing.B) {
	s := newTestStore(b)
	until := time.Now().Add(time.Hour)
	timed(b, s.pool, func(i int) {
		if first, err := s.Claim(bg(), strconv.Itoa(i), until); !first || err != nil {
			b.Fatal(first, err)
		}
	})
}

// BenchmarkClaimReplayed is a claim of an ID already claimed: refused
// without a write.
func BenchmarkClaimReplayed(b *testing.B) {
	s := newTestStore(b)
	until := time.Now().Add(time.Hour)
	mustClaim(b, s, "taken", until)
	timed(b, s.pool, func(int) {
		if first, err := s.Claim(bg(), "taken", until); first || err != nil {
			b.Fatal(first, err)
		}
	})
}

// BenchmarkLeaseAcquireConfirm is a webhook delivery's two store steps:
// AcquireLease of a fresh ID, then ConfirmLease (two statements, two
// commits).
func BenchmarkLeaseAcquireConfirm(b *testing.B) {
	s := newTestStore(b)
	until := time.Now().Add(time.Hour)
	timed(b, s.pool, func(i int) {
		id := strconv.Itoa(i)
		l := mustLease(b, s, id, time.Minute)
		must(b, s.ConfirmLease(bg(), id, l.Token, until))
	})
}

// BenchmarkSweep is deleting expired rows, per row, in the default batches;
// rows-left counts the expired rows still in the table afterwards.
func BenchmarkSweep(b *testing.B) {
	s := newTestStore(b)
	mustExec(b, s.pool, `INSERT INTO `+s.table+` (key, state, token, until)
		SELECT convert_to($1 || g::text, 'UTF8'), 'c', '', now() - interval '1 second' FROM generate_series(1, $2) g`,
		s.prefix, b.N)
	b.ResetTimer()
	for { // a backlog over 100 batches takes more than one call
		n, err := s.Sweep(bg())
		must(b, err)
		if n == 0 {
			break
		}
	}
	b.StopTimer()
	var left int
	must(b, s.pool.QueryRow(bg(), `SELECT count(*) FROM `+s.table+` WHERE until < now() AND state <> 'm'`).Scan(&left))
	b.ReportMetric(float64(left), "rows-left")
}

// paired runs ops in turn, one of each per iteration and in an order that
// rotates, so that each sees the same load on a shared machine, and
// reports each op's median latency (names[i]+"-p50-ns") and each op's
// median over the first op's, its floor (names[i]+"/floor"). ns/op is
// the time of all ops together.
func paired(b *testing.B, names []string, ops ...func(i int)) {
	lat := make([][]time.Duration, len(ops))
	i := 0
	for b.Loop() {
		i++
		for k := range ops {
			j := (k + i) % len(ops)
			start := time.Now()
			ops[j](i)
			lat[j] = append(lat[j], time.Since(start))
		}
	}
	p50 := make([]float64, len(ops))
	for j := range ops {
		slices.Sort(lat[j])
		p50[j] = float64(lat[j][len(lat[j])/2].Nanoseconds())
		b.ReportMetric(p50[j], names[j]+"-p50-ns")
		if j > 0 {
			b.ReportMetric(p50[j]/p50[0], names[j]+"/floor")
		}
	}
}

// BenchmarkClaimPaired measures the targets of issue 34 on a shared
// machine: a first claim beside its floor, a bare INSERT … ON CONFLICT DO
// NOTHING of the same row shape and key length into the same table
// (same pool, connection settings and key size as Claim), and a replayed
// claim beside a bare SELECT of the row by key, in alternation. "statement" is
// Claim's first statement sent straight to the pool (no deadline, no
// goroutine of its own): the difference to "claim" is what Claim spends
// in Go around it. "takeover" is Claim's second statement sent the same
// way, which was its only statement before issue 34: the difference to
// "statement" is what the split saves. "read-first" is the design not
// taken: a plain SELECT of the marker and the ID's row (claimOps),
// and for a first claim Claim's statement after it, two round trips: it
// measures what a replay would save and a first claim would pay.
func BenchmarkClaimPaired(b *testing.B) {
	// keys of equal length: "f", "c", "s", "t" or "r" and ten digits
	id := func(p string, i int) string { return p + strconv.Itoa(1_000_000_000+i) }
	first := func(b *testing.B, s *Store) {
		until := time.Now().Add(time.Hour)
		floor := `INSERT INTO ` + s.table + ` (key, state, token, until) VALUES ($1, 'c', '', $2) ON CONFLICT (key) DO NOTHING`
		claimOps(b, s, true, until, id, func(i int) {
			if tag, err := s.pool.Exec(bg(), floor, s.key(id("f", i)), pgTime(until)); err != nil || tag.RowsAffected() != 1 {
				b.Fatal(tag, err)
			}
		})
	}
	b.Run("first", func(b *testing.B) { first(b, newTestStore(b)) })
	// The same without waiting for the WAL flush (synchronous_commit off
	// for the floor and the claim alike, AllowAsyncCommit): on a machine
	// whose disk is shared, the flush's noise hides the difference, which
	// this shows in microseconds.
	b.Run("first-async-commit", func(b *testing.B) {
		pool := needServer(b).pool(b, "synchronous_commit", "off")
		first(b, storeOn(b, pool, asyncCommit))
	})
	b.Run("replayed", func(b *testing.B) {
		s := newTestStore(b)
		until := time.Now().Add(time.Hour)
		mustClaim(b, s, "taken", until)
		floor := `SELECT until FROM ` + s.table + ` WHERE key = $1`
		claimOps(b, s, false, until, func(string, int) string { return "taken" }, func(int) {
			var got time.Time
			if err := s.pool.QueryRow(bg(), floor, s.key("taken")).Scan(&got); err != nil {
				b.Fatal(got, err)
			}
		})
	})
}

// claimOps runs BenchmarkClaimPaired's ops on s beside floor: each claims
// id(p, i) (p the op's letter, i its run) until until, a first claim when
// first is set, else a replay. read-first sends Claim's statement after
// its read only for a first claim.
func claimOps(b *testing.B, s *Store, first bool, until time.Time, id func(p string, i int) string, floor func(i int)) {
	u := pgTime(until)
	read := `SELECT EXISTS (SELECT 1 FROM ` + s.table + ` WHERE key = ` + markerSQL + ` AND state = 'm' AND until <= now()),
  EXISTS (SELECT 1 FROM ` + s.table + ` WHERE key = $1::bytea AND until > now()), $2::timestamptz > now()`
	paired(b, []string{"floor", "claim", "statement", "takeover", "read-first"},
		floor,
		func(i int) {
			if got, err := s.Claim(bg(), id("c", i), until); got != first || err != nil {
				b.Fatal(got, err)
			}
		},
		func(i int) {
			key, legacy := s.keys(id("s", i))
			var got, marker, live, future bool
			if err := s.pool.QueryRow(bg(), s.claimSQL, key, u, legacy).Scan(&got, &marker, &live, &future); err != nil || got != first || !first && !live {
				b.Fatal(got, live, err)
			}
		},
		func(i int) {
			key, legacy := s.keys(id("t", i))
			var got, marker, future, again bool
			if err := s.pool.QueryRow(bg(), s.takeoverSQL, key, u, legacy).Scan(&marker, &future, &got, &again); err != nil || got != first || !first && again {
				b.Fatal(got, again, err)
			}
		},
		func(i int) {
			key, legacy := s.keys(id("r", i))
			var got, marker, live, future bool
			if err := s.pool.QueryRow(bg(), read, key, u).Scan(&marker, &live, &future); err != nil || live == first {
				b.Fatal(live, err)
			}
			if !first {
				return
			}
			if err := s.pool.QueryRow(bg(), s.claimSQL, key, u, legacy).Scan(&got, &marker, &live, &future); err != nil || !got {
				b.Fatal(got, err)
			}
		})
}

// BenchmarkRecordAcquireConfirm is an idempotent request's two store
// steps, as BenchmarkLeaseAcquireConfirm (its floor, with
// BenchmarkFloorInsert) but carrying a record: AcquireRecord of a fresh
// ID with a 32-byte fingerprint, then ConfirmRecord with a result of the
// sub-benchmark's size (two statements, two commits; a result over about
// 2 KiB is compressed or moved out of line by PostgreSQL's TOAST).
func BenchmarkRecordAcquireConfirm(b *testing.B) {
	benchRecord(b, func(b *testing.B, s *Store, fp, result []byte) func(int) {
		until := time.Now().Add(time.Hour)
		return func(i int) {
			id := strconv.Itoa(i)
			r := mustRecord(b, s, id, time.Minute, fp)
			must(b, s.ConfirmRecord(bg(), id, r.Token, until, fp, result))
		}
	})
}

// BenchmarkRecordReplayed is a retry of a completed request: AcquireRecord
// of a recorded ID, which reads the fingerprint and the result (of the
// sub-benchmark's size) without a write.
func BenchmarkRecordReplayed(b *testing.B) {
	benchRecord(b, func(b *testing.B, s *Store, fp, result []byte) func(int) {
		r := mustRecord(b, s, "done", time.Minute, fp)
		must(b, s.ConfirmRecord(bg(), "done", r.Token, time.Now().Add(time.Hour), fp, result))
		return func(int) {
			if r, err := s.AcquireRecord(bg(), "done", time.Minute, fp); err != nil || len(r.Result) != len(result) {
				b.Fatal(r.State, len(r.Result), err)
			}
		}
	})
}

// benchRecord times the op that op makes, on a fresh store with a 32-byte
// fingerprint, for each result size: one sub-benchmark each.
func benchRecord(b *testing.B, op func(b *testing.B, s *Store, fp, result []byte) func(int)) {
	for _, size := range []int{1 << 10, 64 << 10, 256 << 10} {
		b.Run("result="+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			s := newTestStore(b)
			timed(b, s.pool, op(b, s, make([]byte, 32), benchResult(size)))
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
