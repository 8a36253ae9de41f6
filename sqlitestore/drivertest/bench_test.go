package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/sqlitestore"
)

// The benchmarks time the store against floors on files made alike (Safe
// settings, on a disk); the VsFloor ones run each call beside the floor's,
// as a disk's fsync latency drifts within seconds. BENCHMARKS.md lists
// them and their commands. A store has the default options (its checker
// runs, as in production) unless a benchmark says otherwise.

// benchFloorTable is a table of the store's table's shape (the same
// columns, key and index), without the store: the floor's INSERT writes
// key and until, the others take their defaults.
const benchFloorTable = `CREATE TABLE floor (
	key   BLOB PRIMARY KEY,
	state TEXT NOT NULL DEFAULT 'c',
	token TEXT NOT NULL DEFAULT '',
	until INTEGER NOT NULL,
	fingerprint BLOB,
	result      BLOB,
	seq   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID`

// benchFloorIndex is the store's index on until, on the floor table.
const benchFloorIndex = `CREATE INDEX floor_until ON floor (until)`

// benchAppTable is the handler's table in the transactional benchmarks.
const benchAppTable = `CREATE TABLE app (id TEXT PRIMARY KEY, body BLOB NOT NULL)`

// benchFloorInsert is the floor of a claim: one autocommit INSERT.
const benchFloorInsert = `INSERT INTO floor (key, until) VALUES (?, ?) ON CONFLICT DO NOTHING`

// benchAppInsert is the handler's write.
const benchAppInsert = `INSERT INTO app (id, body) VALUES (?, ?)`

var (
	benchFingerprint = []byte("0123456789abcdef0123456789abcdef")                                                            // 32 bytes, a hash's size
	benchResult      = []byte(`{"status":200,"header":{"Content-Type":["application/json"]},"body":"eyJpZCI6ImNoXzEifQ=="}`) // a small stored response
	benchBody        = []byte(`{"amount":1000,"currency":"eur","customer":"cus_1"}`)                                         // the handler's row
)

// benchDB opens a fresh database in a temporary directory of b's with the
// safe settings: the store's table (Migrate), the floor table and the
// handler's table, so the store and its floors write to files made alike.
func benchDB(b *testing.B, d Driver) *sql.DB {
	b.Helper()
	db, _ := openMigrated(b, d)
	for _, stmt := range []string{benchFloorTable, benchFloorIndex, benchAppTable} {
		mustExec(b, context.Background(), db, stmt)
	}
	return db
}

// benchIDs returns n distinct IDs, made before the timer starts so that
// neither the store nor its floor pays for them.
func benchIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "req_" + strconv.Itoa(i) + "_4f3a9c1e2b7d"
	}
	return ids
}

// benchKeys returns the row keys the store writes for ids (the default
// prefix's length, the prefix, the ID), so the floor's rows are the
// store's rows.
func benchKeys(ids []string) [][]byte {
	keys := make([][]byte, len(ids))
	p := sqlitestore.DefaultPrefix
	for i, id := range ids {
		keys[i] = append([]byte{byte(len(p) >> 8), byte(len(p))}, p+id...)
	}
	return keys
}

// benchFloorRow inserts one floor row and fails unless it was new.
func benchFloorRow(db *sql.DB, key []byte, until int64) error {
	res, err := db.ExecContext(context.Background(), benchFloorInsert, key, until)
	if err != nil {
		return fmt.Errorf("floor INSERT: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("floor INSERT of a fresh key affected %d rows, %v; want 1", n, err)
	}
	return nil
}

// benchClaim claims id and fails unless it was first.
func benchClaim(s *sqlitestore.Store, id string, until time.Time) error {
	first, err := s.Claim(context.Background(), id, until)
	if err != nil || !first {
		return fmt.Errorf("Claim of a fresh ID = %v, %v; want true, nil", first, err)
	}
	return nil
}

// benchDrivers runs fn on every driver of the test binary, each in a
// sub-benchmark named after the driver.
func benchDrivers(b *testing.B, fn func(b *testing.B, d Driver)) {
	for _, d := range Drivers() {
		b.Run(d.Name, func(b *testing.B) { fn(b, d) })
	}
}

// BenchmarkClaim: Store.Claim of fresh IDs, one at a time.
func BenchmarkClaim(b *testing.B) {
	benchDrivers(b, func(b *testing.B, d Driver) {
		s := mustStore(b, benchDB(b, d), sqlitestore.Options{})
		ids := benchIDs(b.N)
		until := time.Now().Add(time.Hour)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			must(b, benchClaim(s, ids[i], until))
		}
	})
}

// BenchmarkClaimFloor: the floor of BenchmarkClaim, the same rows written
// by a plain autocommit INSERT … ON CONFLICT DO NOTHING.
func BenchmarkClaimFloor(b *testing.B) {
	benchDrivers(b, func(b *testing.B, d Driver) {
		db := benchDB(b, d)
		keys := benchKeys(benchIDs(b.N))
		until := time.Now().Add(time.Hour).UnixNano()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			must(b, benchFloorRow(db, keys[i], until))
		}
	})
}

// benchConcurrency is the number of concurrent callers the concurrent
// benchmarks run.
var benchConcurrency = []int{1, 8, 64}

// benchParallel runs b.N calls of fn (given the call's index) from n
// goroutines and reports their throughput as unit (per second). The
// first error stops every goroutine and fails b.
func benchParallel(b *testing.B, n int, unit string, fn func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range n {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N || failed.Load() != nil {
					return
				}
				if err := fn(i); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
}

// BenchmarkClaimConcurrent: Store.Claim of fresh IDs from 1, 8 and 64
// goroutines; claims/s is the throughput (ns/op is the wall time per
// claim, not a claim's latency).
func BenchmarkClaimConcurrent(b *testing.B) {
	for _, d := range Drivers() {
		for _, n := range benchConcurrency {
			b.Run(fmt.Sprintf("%s/claimers=%d", d.Name, n), func(b *testing.B) {
				s := mustStore(b, benchDB(b, d), sqlitestore.Options{})
				ids := benchIDs(b.N)
				until := time.Now().Add(time.Hour)
				benchParallel(b, n, "claims/s", func(i int) error { return benchClaim(s, ids[i], until) })
			})
		}
	}
}

// BenchmarkClaimFloorConcurrent: the plain INSERT from 1, 8 and 64
// goroutines through database/sql (its default pool: a connection per
// goroutine, each waiting for SQLite's write lock in its busy handler).
func BenchmarkClaimFloorConcurrent(b *testing.B) {
	for _, d := range Drivers() {
		for _, n := range benchConcurrency {
			b.Run(fmt.Sprintf("%s/writers=%d", d.Name, n), func(b *testing.B) {
				db := benchDB(b, d)
				keys := benchKeys(benchIDs(b.N))
				until := time.Now().Add(time.Hour).UnixNano()
				benchParallel(b, n, "inserts/s", func(i int) error { return benchFloorRow(db, keys[i], until) })
			})
		}
	}
}

// BenchmarkTransactional: a first request in the transactional mode, in
// each of benchModes: the lease (with a fingerprint), the handler's
// INSERT through TxFrom, Commit with the fingerprint and a small result.
func BenchmarkTransactional(b *testing.B) {
	for _, d := range Drivers() {
		for _, m := range benchModes {
			b.Run(d.Name+"/"+m.name, func(b *testing.B) {
				db := benchDB(b, d)
				s := mustStore(b, db, sqlitestore.Options{})
				ids := benchIDs(b.N)
				until := time.Now().Add(time.Hour)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					m.request(b, s, ids[i], until)
				}
				b.StopTimer()
				benchAppRows(b, db, b.N)
			})
		}
	}
}

// benchModes are the two ways the middlewares run a transactional
// request: acquire=work, the lease taken in the work's transaction
// (AcquireWork: one write transaction), as they do on this store;
// acquire=lease, the lease committed first (AcquireRecord, then
// BeginWork: two), as on a Transactor without AcquireWork.
var benchModes = []struct {
	name    string
	request func(b *testing.B, s *sqlitestore.Store, id string, until time.Time)
}{
	{"acquire=work", benchWorkRequest},
	{"acquire=lease", benchRequest},
}

// BenchmarkTransactionalFloor: the floor of BenchmarkTransactional, the
// handler's own transaction on a connection of the pool: BEGIN
// IMMEDIATE; the same INSERT; COMMIT.
func BenchmarkTransactionalFloor(b *testing.B) {
	benchDrivers(b, func(b *testing.B, d Driver) {
		db := benchDB(b, d)
		ids := benchIDs(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			benchHandlerTx(b, db, ids[i])
		}
		b.StopTimer()
		benchAppRows(b, db, b.N)
	})
}

// benchAppRows fails b unless the handler's table holds want rows: every
// request's effect committed once.
func benchAppRows(b *testing.B, db *sql.DB, want int) {
	b.Helper()
	if n := countRows(b, db, `SELECT count(*) FROM app`); n != want {
		b.Fatalf("app rows = %d; want %d", n, want)
	}
}

// benchPaired runs b.N rounds of store then floor, times each, and
// reports their mean times (store-ns, floor-ns) and the ratio of the
// store's to the floor's (x-floor), and the same for the process's CPU
// time (store-cpu-ns, floor-cpu-ns, x-floor-cpu: user and system time of
// every thread, so the store's background goroutines count against it).
// ns/op is a round: both together. before(i), when set, runs ahead of
// each pair, outside both measures.
func benchPaired(b *testing.B, before, store, floor func(i int)) {
	var inStore, inFloor time.Duration
	var cpuStore, cpuFloor int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if before != nil {
			before(i)
		}
		c0, t0 := processCPU(), time.Now()
		store(i)
		c1, t1 := processCPU(), time.Now()
		floor(i)
		inStore += t1.Sub(t0)
		inFloor += time.Since(t1)
		c2 := processCPU()
		cpuStore += c1 - c0
		cpuFloor += c2 - c1
	}
	b.StopTimer()
	b.ReportMetric(float64(inStore.Nanoseconds())/float64(b.N), "store-ns")
	b.ReportMetric(float64(inFloor.Nanoseconds())/float64(b.N), "floor-ns")
	b.ReportMetric(float64(inStore)/float64(inFloor), "x-floor")
	if cpuFloor > 0 {
		b.ReportMetric(float64(cpuStore)/float64(b.N), "store-cpu-ns")
		b.ReportMetric(float64(cpuFloor)/float64(b.N), "floor-cpu-ns")
		b.ReportMetric(float64(cpuStore)/float64(cpuFloor), "x-floor-cpu")
	}
}

// BenchmarkClaimVsFloor: BenchmarkClaim and BenchmarkClaimFloor in turn,
// a claim then an INSERT, each on a file of its own in one directory.
func BenchmarkClaimVsFloor(b *testing.B) {
	benchDrivers(b, func(b *testing.B, d Driver) {
		s := mustStore(b, benchDB(b, d), sqlitestore.Options{})
		floor := benchDB(b, d)
		ids := benchIDs(b.N)
		keys := benchKeys(ids)
		until := time.Now().Add(time.Hour)
		benchPaired(b, nil,
			func(i int) { must(b, benchClaim(s, ids[i], until)) },
			func(i int) { must(b, benchFloorRow(floor, keys[i], until.UnixNano())) })
	})
}

// BenchmarkClaimAfterWorkVsFloor: BenchmarkClaimVsFloor on a store that
// also runs transactional requests: before each pair, outside both
// measures, a first request through AcquireWork on the store (and the
// handler's own transaction on the floor's file), so every claim is the
// first write after a Work, as on a server that serves both.
func BenchmarkClaimAfterWorkVsFloor(b *testing.B) {
	benchDrivers(b, func(b *testing.B, d Driver) {
		db := benchDB(b, d)
		s := mustStore(b, db, sqlitestore.Options{})
		floor := benchDB(b, d)
		ids := benchIDs(b.N)
		keys := benchKeys(ids)
		until := time.Now().Add(time.Hour)
		benchPaired(b,
			func(i int) {
				benchWorkRequest(b, s, "work-"+ids[i], until)
				benchHandlerTx(b, floor, "work-"+ids[i])
			},
			func(i int) { must(b, benchClaim(s, ids[i], until)) },
			func(i int) { must(b, benchFloorRow(floor, keys[i], until.UnixNano())) })
	})
}

// BenchmarkTransactionalVsFloor: BenchmarkTransactional and
// BenchmarkTransactionalFloor in turn, each on a file of its own in one
// directory.
func BenchmarkTransactionalVsFloor(b *testing.B) {
	for _, d := range Drivers() {
		for _, m := range benchModes {
			b.Run(d.Name+"/"+m.name, func(b *testing.B) {
				db := benchDB(b, d)
				s := mustStore(b, db, sqlitestore.Options{})
				floor := benchDB(b, d)
				ids := benchIDs(b.N)
				until := time.Now().Add(time.Hour)
				benchPaired(b, nil,
					func(i int) { m.request(b, s, ids[i], until) },
					func(i int) { benchHandlerTx(b, floor, ids[i]) })
				benchAppRows(b, db, b.N)
				benchAppRows(b, floor, b.N)
			})
		}
	}
}

// benchWorkRequest is a first request in the transactional mode, as the
// idempotency middleware runs it on this store: AcquireWork (with a
// fingerprint), the handler's INSERT through TxFrom, Commit with the
// fingerprint and a small result.
func benchWorkRequest(b *testing.B, s *sqlitestore.Store, id string, until time.Time) {
	ctx := context.Background()
	r, w, err := s.AcquireWork(ctx, id, time.Minute, benchFingerprint)
	if err != nil || r.State != replay.LeaseAcquired || w == nil {
		b.Fatalf("AcquireWork of a fresh ID = %+v, %v; want acquired", r, err)
	}
	benchHandler(b, w, id, until)
}

// benchRequest is a first request in the transactional mode, as the
// idempotency middleware runs it on a Transactor without AcquireWork:
// AcquireRecord (with a fingerprint),
// BeginWork, the handler's INSERT through TxFrom, Commit with the
// fingerprint and a small result.
func benchRequest(b *testing.B, s *sqlitestore.Store, id string, until time.Time) {
	ctx := context.Background()
	r, err := s.AcquireRecord(ctx, id, time.Minute, benchFingerprint)
	if err != nil || r.State != replay.LeaseAcquired {
		b.Fatalf("AcquireRecord of a fresh ID = %+v, %v; want acquired", r, err)
	}
	w, err := s.BeginWork(ctx, id, r.Token)
	if err != nil {
		b.Fatalf("BeginWork: %v", err)
	}
	benchHandler(b, w, id, until)
}

// benchHandler is the handler's INSERT through TxFrom in w, and w's
// Commit with the fingerprint and a small result.
func benchHandler(b *testing.B, w replay.Work, id string, until time.Time) {
	ctx := context.Background()
	tx, err := sqlitestore.TxFrom(w.Context(ctx))
	if err != nil {
		b.Fatalf("TxFrom: %v", err)
	}
	if _, err := tx.ExecContext(ctx, benchAppInsert, id, benchBody); err != nil {
		b.Fatalf("the handler's INSERT: %v", err)
	}
	if err := w.Commit(ctx, until, benchFingerprint, benchResult); err != nil {
		b.Fatalf("Commit: %v", err)
	}
}

// benchHandlerTx is the handler's own transaction on a connection of
// db's pool (benchOwnTx) with the handler's row.
func benchHandlerTx(b *testing.B, db *sql.DB, id string) {
	must(b, benchOwnTx(context.Background(), db, id, benchBody))
}

// BenchmarkClaimWhileSweeping: serial claims on an idle store (b.N of
// them), then serial claims while one Sweep drains 100 000 expired rows,
// in the same run. It reports each side's median, 99th percentile and
// longest claim in µs, the sweep's length, the claims answered during it,
// and the database file's and the WAL's bytes after it.
func BenchmarkClaimWhileSweeping(b *testing.B) {
	const backlog = 100_000
	benchDrivers(b, func(b *testing.B, d Driver) {
		ctx := context.Background()
		db := benchDB(b, d)
		s := mustStore(b, db, sqlitestore.Options{SweepInterval: -1})
		until := time.Now().Add(time.Hour)
		claim := func(id string) time.Duration {
			start := time.Now()
			must(b, benchClaim(s, id, until))
			return time.Since(start)
		}
		idle := make([]time.Duration, 0, b.N)
		for i := range b.N {
			idle = append(idle, claim(fmt.Sprint("idle-", i)))
		}
		b.StopTimer()
		insertExpired(b, db, s, backlog)
		type result struct {
			n   int64
			err error
			len time.Duration
		}
		swept := make(chan result, 1)
		start := time.Now()
		go func() {
			n, err := s.Sweep(ctx)
			swept <- result{n, err, time.Since(start)}
		}()
		var during []time.Duration
		var r result
	claims:
		for i := 0; ; i++ {
			select {
			case r = <-swept:
				break claims
			default:
			}
			during = append(during, claim(fmt.Sprint("during-", i)))
		}
		if r.n != backlog || r.err != nil {
			b.Fatalf("Sweep = %d, %v; want the %d expired rows", r.n, r.err, backlog)
		}
		for _, side := range []struct {
			name string
			d    []time.Duration
		}{{"idle", idle}, {"sweeping", during}} {
			slices.Sort(side.d)
			if len(side.d) == 0 {
				continue
			}
			at := func(q float64) float64 { return float64(side.d[int(q*float64(len(side.d)-1))].Microseconds()) }
			b.ReportMetric(at(0.5), side.name+"-p50-µs")
			b.ReportMetric(at(0.99), side.name+"-p99-µs")
			b.ReportMetric(at(1), side.name+"-max-µs")
		}
		b.ReportMetric(float64(r.len.Milliseconds()), "sweep-ms")
		b.ReportMetric(float64(len(during)), "claims-while-sweeping")
		var path string
		must(b, db.QueryRow(`SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path))
		b.ReportMetric(float64(fileSize(b, path)), "file-bytes")
		b.ReportMetric(float64(fileSize(b, path+"-wal")), "wal-bytes")
	})
}

// BenchmarkSweepKeepsUp: claims at a steady rate (10, 100 or 1 000 a
// second; max: as fast as 256 goroutines claim), each until a second
// after it, with a sweep every second, for b.N seconds. Each second it logs the rows,
// the database file's and the WAL's bytes and the free pages (-v shows
// them); it reports the claims a second it reached, the most rows and
// the largest file in the run's last half, and the file's growth over
// that half.
func BenchmarkSweepKeepsUp(b *testing.B) {
	for _, d := range Drivers() {
		for _, rate := range []int{10, 100, 1000, 0} {
			name := fmt.Sprint(rate)
			if rate == 0 {
				name = "max"
			}
			b.Run(fmt.Sprintf("%s/rate=%s", d.Name, name), func(b *testing.B) {
				db, path := openMigrated(b, d)
				s := mustStore(b, db, sqlitestore.Options{SweepInterval: time.Second})
				size := func(p string) int64 {
					fi, err := os.Stat(p)
					if err != nil {
						return 0
					}
					return fi.Size()
				}
				var failed atomic.Int64
				var wg sync.WaitGroup
				slots := make(chan struct{}, 256)
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				start := time.Now()
				sent := 0
				var rowsMax, fileMax, fileMid, walMax int64
				for second := 1; second <= b.N; second++ {
					for end := start.Add(time.Duration(second) * time.Second); time.Now().Before(end); {
						<-tick.C
						due := int(time.Since(start).Seconds() * float64(rate))
						if rate == 0 {
							due = sent + cap(slots)
						}
						for ; sent < due && time.Now().Before(end); sent++ {
							slots <- struct{}{}
							wg.Add(1)
							go func(id string) {
								defer wg.Done()
								defer func() { <-slots }()
								if err := benchClaim(s, id, time.Now().Add(time.Second)); err != nil {
									failed.Add(1)
								}
							}(fmt.Sprint("c-", sent))
						}
					}
					var rows, free int64
					must(b, db.QueryRow(`SELECT count(*), (SELECT freelist_count FROM pragma_freelist_count) FROM ctoken_replay`).Scan(&rows, &free))
					file, wal := size(path), size(path+"-wal")
					b.Logf("t=%ds claims=%d rows=%d file=%d wal=%d free-pages=%d", second, sent, rows, file, wal, free)
					if second == b.N/2 {
						fileMid = file
					}
					if second > b.N/2 {
						rowsMax, fileMax, walMax = max(rowsMax, rows), max(fileMax, file), max(walMax, wal)
					}
				}
				wg.Wait()
				if n := failed.Load(); n != 0 {
					b.Fatalf("%d of %d claims failed", n, sent)
				}
				b.ReportMetric(float64(sent)/time.Since(start).Seconds(), "claims/s")
				b.ReportMetric(float64(rowsMax), "rows-max")
				b.ReportMetric(float64(fileMax), "file-bytes-max")
				b.ReportMetric(float64(walMax), "wal-bytes-max")
				b.ReportMetric(float64(fileMax-fileMid), "file-growth-bytes")
			})
		}
	}
}

// benchReadRow is the floor of a read: the row's columns by its key, on
// the same file and pool.
func benchReadRow(b *testing.B, db *sql.DB, key []byte) {
	var st, tok string
	var until int64
	var fp, res []byte
	must(b, db.QueryRowContext(context.Background(), `SELECT state, token, until, fingerprint, result FROM ctoken_replay WHERE key = ?`, key).Scan(&st, &tok, &until, &fp, &res))
}

// BenchmarkReadRecord: ReadRecord of one ID, a live lease (state=busy) or
// a done entry with a small record (state=done), then the floor's
// one-row SELECT of the same row on the same pool, in turn.
func BenchmarkReadRecord(b *testing.B) {
	for _, d := range Drivers() {
		for _, state := range []replay.LeaseState{replay.LeaseBusy, replay.LeaseDone} {
			b.Run(fmt.Sprintf("%s/state=%v", d.Name, state), func(b *testing.B) {
				ctx := context.Background()
				db := benchDB(b, d)
				s := mustStore(b, db, sqlitestore.Options{})
				ids := benchIDs(1)
				key := benchKeys(ids)[0]
				l, err := s.AcquireRecord(ctx, ids[0], time.Hour, benchFingerprint)
				must(b, err)
				if state == replay.LeaseDone {
					must(b, s.ConfirmRecord(ctx, ids[0], l.Token, time.Now().Add(time.Hour), benchFingerprint, benchResult))
				}
				benchPaired(b, nil,
					func(int) {
						r, err := s.ReadRecord(ctx, ids[0])
						if err != nil || r.State != state {
							b.Fatalf("ReadRecord = %v, %v; want %v", r.State, err, state)
						}
					},
					func(int) { benchReadRow(b, db, key) })
			})
		}
	}
}

// BenchmarkTaskPoll: mcptoken's Tasks.Get (a tasks/get poll) of a working
// task on the instance running it (state=working: ReadRecord of the
// task's entry, busy) or on another (state=working-elsewhere: that, then
// ReadRecord of its first input round's, free), or of a completed one
// (state=completed: the task's entry, done, its outcome opened), then the
// floor's one-row SELECT of the task's row on the same pool, in turn.
func BenchmarkTaskPoll(b *testing.B) {
	for _, d := range Drivers() {
		for _, p := range []string{"working", "working-elsewhere", "completed"} {
			b.Run(d.Name+"/state="+p, func(b *testing.B) {
				db := benchDB(b, d)
				polls := pollTasks(b, mustStore(b, db, sqlitestore.Options{}))
				poll := polls[slices.IndexFunc(polls, func(q taskPoll) bool { return q.name == p })]
				key := benchTaskRow(b, db, poll.status)
				benchPaired(b, nil,
					func(int) { must(b, poll.get()) },
					func(int) { benchReadRow(b, db, key) })
			})
		}
	}
}

// benchTaskRow returns the key of the row of pollTasks's task of the given
// status: the one row whose ID is a task entry's ("mcpt:" and a 16-byte
// nonce in 22 base64 characters; its marks and rounds are longer) in that
// state (a lease while working, done once completed).
func benchTaskRow(b *testing.B, db *sql.DB, status string) []byte {
	b.Helper()
	state := map[string]string{"working": "l", "completed": "d"}[status]
	n := 2 + len(sqlitestore.DefaultPrefix) + len("mcpt:") + 22
	const from = ` FROM ctoken_replay WHERE length(key) = ? AND state = ?`
	if got := countRows(b, db, `SELECT count(*)`+from, n, state); got != 1 {
		b.Fatalf("%d rows of a %s task's entry; want 1", got, status)
	}
	var key []byte
	must(b, db.QueryRowContext(context.Background(), `SELECT key`+from, n, state).Scan(&key))
	return key
}
