// Package sqlitestore is a [replay.Store] on one SQLite database, for a
// server that runs on one machine (one process, or a few sharing the
// file) and must accept each single-use ID — one-time token, single-use
// request state, webhook delivery, idempotency key — exactly once, across
// restarts of the process and of the machine. It keeps the contracts of
// the other stores ([replay.Releaser], [replay.Leaser], [replay.Recorder],
// [replay.Bounded], [replay.Transactor], [replay.WorkAcquirer]) with no
// server to run.
// Most users need one [Store], from [New] on an open *sql.DB of their
// chosen driver; ExampleNew shows the set-up behind an idempotency
// middleware. The drivertest module's examples run the set-up across a
// restart, the operator's path after a loss ([Rearm]) and the
// transactional mode (the idempotency and webhook middlewares writing
// through [TxFrom], a retry answered without a second row).
//
// It takes a *sql.DB and imports no driver: pick one (modernc.org/sqlite
// and github.com/ncruces/go-sqlite3 are pure Go, github.com/mattn/go-sqlite3
// needs cgo; the tests run on all three). Open a file with these settings
// on every connection, in the DSN:
//
//	journal_mode=WAL     (TRUNCATE and PERSIST work too, DELETE with synchronous=EXTRA; WAL lets readers run beside the writer)
//	synchronous=FULL     (a commit is on the disk before it is acknowledged)
//	busy_timeout=5000    (other processes' writes are waited for, not failed)
//
// For modernc.org/sqlite (driver "sqlite"):
//
//	db, err := sql.Open("sqlite", "file:replay.db?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)")
//	if err != nil { ... }
//	if err := sqlitestore.Migrate(ctx, db, ""); err != nil { ... }
//	store, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
//	if err != nil { ... }
//	defer store.Close()
//
// A PRAGMA run with db.Exec after sql.Open reaches one connection of the
// pool, not the others: set them in the DSN. [New] refuses settings that
// lose acknowledged claims or cannot work (ErrConfig, naming every one at
// once, each with its fix): an in-memory or temporary database,
// journal_mode OFF or MEMORY, synchronous OFF, synchronous NORMAL outside
// WAL, synchronous FULL with journal_mode DELETE (a power cut can bring
// the deleted journal back and roll the last commit back: EXTRA syncs the
// deletion), synchronous NORMAL in WAL without [Options.AllowNormalSync] (safe
// across a crash of the process, not a power cut), busy_timeout 0, a
// query_only connection, db.SetMaxOpenConns(1), and a file its
// connections do not lock (nolock=1, vfs=unix-none). The store's writer
// holds one connection of the pool for the store's life (its statements
// prepared once); the first write after a handler's work re-reads
// synchronous and journal_mode on it (a changed one refuses the write and
// is closed), and the checker re-reads the settings on a connection of
// the pool every second.
//
// A write or checkpoint that fails with an I/O error (SQLITE_IOERR: a
// failed fsync among them) is a loss until proven otherwise: the store
// keeps its writer's connection and acknowledges nothing until it has
// rewritten the database (VACUUM) and a checkpoint has put every page
// into the database file and emptied the WAL. So that a checkpoint's
// error reaches it, the store runs its writer's checkpoints itself: its
// connection runs with wal_autocheckpoint=0 while the store holds it. A
// write-back of the database file that failed in another connection's
// checkpoint is found at the next check, on Linux: the store holds the
// file open and fsyncs it, and Linux reports such a failure to every
// descriptor open when it happened; the store then rewrites the database
// as after its own error.
//
// # Writes
//
// Every claim and lease step reads its row and writes it in a transaction
// of the store's writer, so it is atomic per ID. Calls that arrive while
// a transaction commits wait for the next one, which carries all of them
// (group commit): a durable commit costs one fsync whatever it carries.
// A claim, a confirmation and a release are answered only after their
// commit; a batch of lease acquisitions alone commits in WAL mode without
// waiting for the disk (a lease forgotten by a power cut ends early, and
// the work it guarded was not recorded as done either). Several processes
// on one file share SQLite's write lock (busy_timeout); an error
// (SQLITE_BUSY past the timeout included) is ErrUnavailable, never "first".
//
// The clock is the machine's: every until is compared with time.Now() of
// the process that writes, so processes sharing the file must run on one
// machine (SQLite over a network file system is unsafe anyway).
//
// # Table
//
//	key    BLOB PRIMARY KEY   prefix length (2 bytes, big-endian) | prefix | id
//	state  TEXT               'm' marker, 'c' claimed, 'l' leased, 'w' in a Work, 'd' done
//	token  TEXT               lease token (16 random bytes, hex); the marker: the incarnation
//	until  INTEGER            Unix nanoseconds; int64's end for a time past 2262
//	fingerprint, result BLOB  the record of AcquireRecord and ConfirmRecord
//	seq    INTEGER            the marker: how many write transactions the store made
//
// [Schema] has the SQL, [Migrate] runs it.
//
// # Loss is loud
//
// The marker row carries the database's incarnation (random, made by
// Migrate) and a sequence, checked in every write transaction. The
// sequence advances in New's write and then in the first durable commit
// after each check (once a second at most, so the other commits write no
// page of the marker). The store records the incarnation and the highest
// sequence it saw in a file beside the database (its path plus
// "-ctoken"; plus "-ctoken.<table>" for a table other than DefaultTable),
// at each check and at Close. So:
//
//   - a table emptied or dropped, or its marker deleted, refuses every call
//     at the next write or check ([ErrForgotten]);
//   - the database file or its WAL deleted or replaced while the store
//     runs is found by the checker (the path's file is not the one New
//     opened, the WAL not the one the writer holds open);
//   - a crash of the machine while a store with synchronous=NORMAL ran
//     makes New refuse (the sidecar names the boot it ran in);
//   - a database file deleted while no store runs makes [Migrate] and [New]
//     refuse (the sidecar names an incarnation; the table is missing);
//   - a WAL file deleted, or another renamed over it, while no store
//     runs, when it held commits the database does not (after a crash of
//     the process), makes New refuse: each running Store keeps a hard link
//     to the WAL (the sidecar's name plus ".wal-" and an id; no space while
//     the WAL is in place; Close removes it once a checkpoint copied the
//     WAL into the database file), and New compares every row of the
//     table, not expired, on each of the table's pages in a link (not the
//     WAL in place) whose last committed image is not what SQLite reads
//     now, with the table's row of its key now;
//   - a database replaced by an older copy (a restored backup) makes New
//     refuse (its sequence is below the sidecar's), and a running store
//     refuse at its next write when the copy misses the store's latest
//     advance of the sequence.
//
// A refusal for a loss lasts until an operator runs [Rearm], which fences
// the table for as long as the lost claims could live, and the store is
// built again. What is not found: a copy restored that holds the sequence
// the sidecar last recorded (taken after the first durable commit
// following the check before the last one: at most two RecheckIntervals
// older than the moment the process stopped, or since the last advance
// before Close), any copy written over the file in place while a store
// runs (the checker reads the marker through the WAL), and the database
// and its sidecar
// deleted or restored together. Keep the two together, and restore them
// together only from the same moment.
//
// # Transactional mode
//
// [Store.AcquireWork] takes an idempotency key or a webhook delivery in
// the handler's own transaction ([replay.WorkAcquirer]); the idempotency
// middleware's Transactional mode and mcptoken's idempotent tools use it
// when the store offers it. The handler writes through [TxFrom], and the
// lease, the work's writes, the done row and its record are one write
// transaction, one fsync. Rollback, a refused Commit or a crash leaves
// nothing; the retry runs the work again. [Store.BeginWork]
// ([replay.Transactor]) opens the same transaction for a lease already
// committed by AcquireRecord or AcquireLease.
//
// A Work holds the store's writer until it ends (SQLite has one writer):
// the store's other writes wait for it, and other processes up to their
// busy_timeout, so keep handlers short. Calls of the same Store for an ID
// a Work holds do not wait: they answer busy (or, for Claim, not first)
// at once. A Work still open when its lease has passed is rolled back by
// the store, and its Commit reports [replay.ErrLeaseLost].
package sqlitestore
