// Package sqlitestore is a [replay.Store] on one SQLite database, for a
// server that runs on one machine (one process, or a few sharing the
// file) and must accept each single-use ID — one-time token, single-use
// request state, webhook delivery, idempotency key — exactly once, across
// restarts of the process and of the machine. It keeps the contracts of
// the other stores ([replay.Releaser], [replay.Leaser], [replay.Recorder],
// [replay.Bounded], [replay.Transactor], [replay.WorkAcquirer]) with no
// server to run.
//
// An API whose idempotency keys survive its restarts (ExampleNew):
//
//	ctx := context.Background()
//	db, err := sql.Open("sqlite", "file:/var/lib/api/replay.db?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)")
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer db.Close()
//	if err := sqlitestore.Migrate(ctx, db, ""); err != nil { // once, or at every start: it is idempotent
//		log.Fatal(err)
//	}
//	store, err := sqlitestore.New(ctx, db, sqlitestore.Options{})
//	if err != nil {
//		log.Fatal(err) // a misconfigured database is refused here, never at the first request
//	}
//	defer store.Close()
//
//	keys, err := ctoken.KeyringFromEnv("CTOKEN_KEYS") // keys that survive the restart too
//	if err != nil {
//		log.Fatal(err)
//	}
//	mw, err := idempotency.New(idempotency.Config{
//		Store: store,
//		Keys:  keys,
//		Caller: func(r *http.Request) (string, error) {
//			if u := r.Header.Get("X-User"); u != "" { // stands in for real authentication
//				return u, nil
//			}
//			return "", errors.New("not signed in")
//		},
//		Wait: 5 * time.Second,
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	http.Handle("POST /payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//		w.WriteHeader(http.StatusCreated)
//	})))
//
// The package imports no driver: the program imports one
// (modernc.org/sqlite registers "sqlite"; github.com/ncruces/go-sqlite3
// and github.com/mattn/go-sqlite3 work too, and the tests run on all
// three), and opens a file with journal_mode=WAL, synchronous=FULL and a
// busy_timeout on every connection, in the DSN. [New] refuses, in one
// [ErrConfig] naming each with its fix, every setting that loses
// acknowledged claims or cannot work. The drivertest module's examples run
// this set-up across a restart, the operator's path after a loss
// ([Rearm]) and the transactional mode ([TxFrom]).
//
// # Writes
//
// Every claim and lease step reads its row and writes it in a transaction
// of the store's writer, so it is atomic per ID. Calls that arrive while
// a transaction commits wait for the next one, which carries all of them
// (group commit): a durable commit costs one fsync whatever it carries. A
// claim, a confirmation and a release are answered only after their
// commit; a batch of lease acquisitions alone commits in WAL mode without
// waiting for the disk (a lease forgotten by a power cut ends early, and
// the work it guarded was not recorded as done either). Several processes
// on one file share SQLite's write lock (busy_timeout); an error is
// [ErrUnavailable], never "first". Deadlines are compared with time.Now()
// of the process that writes, so processes sharing the file must run on
// one machine.
//
// # Loss is loud
//
// The table's marker row holds the database's incarnation (random, made by
// [Migrate]) and a sequence that every durable commit advances, in the
// same transaction. A hidden file beside the database (".<name>-ctoken")
// records the incarnation and the highest sequence seen, at each check
// and at Close; while a store runs, a hidden hard link beside it keeps the
// WAL its writer holds. So a table emptied or dropped, a database file
// deleted or replaced by an older copy, and a WAL deleted with commits the
// database lacks (judged at [New] by the highest sequence the kept WAL
// holds) make the store refuse with [ErrForgotten] until an operator runs
// [Rearm]. An I/O error — the store's own, or a failed write-back of
// another connection's checkpoint, found by an fsync of the database file
// at each check — makes it refuse every call while it rewrites every page
// through SQLite on a goroutine of its own, then serve again.
// docs/sqlitestore.md says what survives what, and the limits.
//
// # Transactional mode
//
// [Store.AcquireWork] takes an idempotency key or a webhook delivery in
// the handler's own transaction ([replay.WorkAcquirer]); the idempotency
// middleware's Transactional mode and mcptoken's idempotent tools use it.
// The handler writes through [TxFrom], and the lease, the work's writes,
// the done row and its record are one write transaction, one fsync.
// Rollback, a refused Commit or a crash leaves nothing; the retry runs the
// work again. [Store.BeginWork] ([replay.Transactor]) opens the same
// transaction for a lease already committed. A Work holds the store's
// writer until it ends (SQLite has one writer), so keep handlers short. A
// Work still open when its lease has passed is rolled back by the store,
// and its Commit reports [replay.ErrLeaseLost].
package sqlitestore
