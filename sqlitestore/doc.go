// Package sqlitestore is a [replay.Store] on one SQLite database, for
// servers on one machine that must accept each single-use ID (one-time
// token, request state, webhook delivery, idempotency key) exactly once
// across restarts of the process and of the machine, with no server to run.
// It implements [replay.Releaser], [replay.Leaser], [replay.Recorder],
// [replay.Reader], [replay.Bounded], [replay.Transactor] and
// [replay.WorkAcquirer].
//
// An API whose idempotency keys survive its restarts (ExampleNew):
//
//	ctx := context.Background()
//	db, err := sql.Open("sqlite", "file:/var/lib/api/replay.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
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
// The package imports no driver: the program imports one (modernc.org/sqlite,
// github.com/ncruces/go-sqlite3 or github.com/mattn/go-sqlite3) and sets
// journal_mode=WAL, synchronous=FULL and a busy_timeout in the DSN. [New]
// refuses, in one [ErrConfig], every setting that loses acknowledged
// claims. The drivertest module's examples show a restart, [Rearm] after
// a loss, and the transactional mode ([TxFrom]).
//
// Calls that arrive together share one commit and one fsync. A database
// that forgot acknowledged claims (emptied, replaced by an older copy, its
// WAL deleted) refuses with [ErrForgotten] until an operator runs [Rearm];
// after an I/O error the store refuses while it rewrites the database.
// [Store.AcquireWork] puts the lease, the handler's writes and the record
// in one commit. docs/sqlitestore.md says what survives what.
package sqlitestore
