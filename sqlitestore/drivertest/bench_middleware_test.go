package drivertest

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/idempotency"
	"github.com/ctoken/ctoken/sqlitestore"
)

// benchCharge is the handler of BenchmarkMiddlewareTransactionalVsFloor:
// it inserts the body through TxFrom (db nil) or in its own transaction
// on db (benchOwnTx), and answers 201; any failure answers 500.
func benchCharge(db *sql.DB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		id := r.Header.Get(refHeader)
		if db == nil {
			tx, err := sqlitestore.TxFrom(ctx)
			if err == nil {
				_, err = tx.ExecContext(ctx, benchAppInsert, id, body)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		} else if err := benchOwnTx(ctx, db, id, body); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"`+id+`","status":"succeeded"}`)
	})
}

// benchOwnTx is the handler's own transaction: BEGIN IMMEDIATE; the
// INSERT; COMMIT, on a connection of db's pool.
func benchOwnTx(ctx context.Context, db *sql.DB, id string, body []byte) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, benchAppInsert, id, body); err != nil {
		conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		return err
	}
	_, err = conn.ExecContext(ctx, `COMMIT`)
	return err
}

// BenchmarkMiddlewareTransactionalVsFloor: a first request (a new
// Idempotency-Key) through the idempotency middleware in its
// Transactional mode on the store (AcquireWork: the lease, the
// handler's INSERT through TxFrom and the sealed response in one
// commit), then the same request to the same handler without the
// middleware, writing in its own transaction, each on a file of its own
// in one directory, in turn (benchPaired). Both sides are routes of one
// http.ServeMux, served by
//
//	path=server   an httptest.Server on loopback, to a keep-alive client: what a client waits for, net/http's work on both ends on both sides
//	path=handler  the mux's ServeHTTP into a recorder, the requests made outside both measures, each with a context that can end, as net/http gives every request: the middleware's cost undiluted
//	path=bare     the same with context.Background: the floor's statements then run without the driver's watch of their context, which a server's requests never do
//	path=own      bare, the floor the handler's request run as the middleware runs it on the store, by hand (benchOwnWork): the middleware's own cost
func BenchmarkMiddlewareTransactionalVsFloor(b *testing.B) {
	for _, d := range Drivers() {
		for _, path := range []string{"server", "handler", "bare", "own"} {
			b.Run(d.Name+"/path="+path, func(b *testing.B) {
				db := benchDB(b, d)
				s := mustStore(b, db, sqlitestore.Options{})
				floor := benchDB(b, d)
				var floorHandler http.Handler = benchCharge(floor)
				if path == "own" {
					floorHandler = benchOwnWork(b, mustStore(b, floor, sqlitestore.Options{}), benchCharge(nil))
				}
				keys, err := ctoken.NewKeyring(ctoken.RandomKey())
				must(b, err)
				mw, err := idempotency.New(idempotency.Config{
					Store:         s,
					Keys:          keys,
					Caller:        func(*http.Request) (string, error) { return "acct_1", nil },
					Transactional: true,
				})
				must(b, err)
				mux := http.NewServeMux()
				mux.Handle("POST /mw/charges", mw.Wrap(benchCharge(nil)))
				mux.Handle("POST /floor/charges", floorHandler)
				ids := benchIDs(b.N)
				request := func(ctx context.Context, side string, i int) *http.Request {
					r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/"+side+"/charges", bytes.NewReader(benchBody))
					r.Header.Set("Content-Type", "application/json")
					r.Header.Set(refHeader, ids[i])
					if side == "mw" {
						r.Header.Set("Idempotency-Key", ids[i])
					}
					return r
				}
				if path == "server" {
					benchServed(b, mux, request)
				} else {
					benchHandled(b, mux, request, path == "handler")
				}
				benchAppRows(b, db, b.N)
				benchAppRows(b, floor, b.N)
			})
		}
	}
}

// benchOwnWork runs next as the middleware runs a first request on s,
// without the middleware's own work (the key's parsing, the
// fingerprint, the seal, its contexts), writing the same row:
// AcquireWork of the request's store ID (idempotency.StoreID of the
// caller, the middleware's route and the key) with a fingerprint's
// worth of bytes, next under a context with the
// Work and the middleware's deadline (three quarters of its default
// lease), Commit with a record of the sealed record's length (the
// encoded response and benchSealOverhead), then next's response.
func benchOwnWork(b *testing.B, s *sqlitestore.Store, next http.Handler) http.Handler {
	fp := make([]byte, idempotency.FingerprintSize)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := idempotency.StoreID("acct_1", "POST /mw/charges", r.Header.Get(refHeader))
		_, work, err := s.AcquireWork(r.Context(), id, idempotency.DefaultLease, fp)
		must(b, err)
		ctx, cancel := context.WithDeadline(context.WithoutCancel(r.Context()), start.Add(idempotency.DefaultLease/4*3))
		defer cancel()
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r.WithContext(work.Context(ctx)))
		enc, err := idempotency.EncodeResponse(idempotency.Response{Status: rec.Code, Header: [][2]string{{"Content-Type", rec.Header().Get("Content-Type")}}, Body: rec.Body.Bytes()})
		must(b, err)
		must(b, work.Commit(r.Context(), time.Now().Add(idempotency.DefaultWindow), fp, append(enc, make([]byte, benchSealOverhead)...)))
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// benchSealOverhead is what sealing adds to an encoded response: the
// version byte, the key id, the nonce and the tag (idempotency's
// "Stored records").
const benchSealOverhead = 1 + 4 + 24 + 16

// benchServed pairs the two routes through an httptest.Server on
// loopback, one keep-alive connection reused by every request (opened
// before both measures by a request for no route).
func benchServed(b *testing.B, h http.Handler, request func(ctx context.Context, side string, i int) *http.Request) {
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	client := srv.Client()
	do := func(r *http.Request) *http.Response {
		r.RequestURI = ""
		r.URL.Scheme, r.URL.Host = "http", srv.Listener.Addr().String()
		resp, err := client.Do(r)
		must(b, err)
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		must(b, err)
		return resp
	}
	do(httptest.NewRequest(http.MethodGet, "/", nil))
	send := func(side string, i int) {
		resp := do(request(context.Background(), side, i))
		benchFirst(b, side, resp.StatusCode, resp.Header)
	}
	benchPaired(b, nil, func(i int) { send("mw", i) }, func(i int) { send("floor", i) })
}

// benchHandled pairs the two routes through the handler's ServeHTTP into
// a recorder, both requests and recorders made before each pair, outside
// both measures; with cancellable, each request's context can end.
func benchHandled(b *testing.B, h http.Handler, request func(ctx context.Context, side string, i int) *http.Request, cancellable bool) {
	var reqs [2]*http.Request
	var recs [2]*httptest.ResponseRecorder
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	defer func() { cancel() }()
	benchPaired(b,
		func(i int) {
			if cancellable {
				cancel()
				ctx, cancel = context.WithCancel(context.Background())
			}
			reqs[0], reqs[1] = request(ctx, "mw", i), request(ctx, "floor", i)
			recs[0], recs[1] = httptest.NewRecorder(), httptest.NewRecorder()
		},
		func(int) {
			h.ServeHTTP(recs[0], reqs[0])
			benchFirst(b, "mw", recs[0].Code, recs[0].Header())
		},
		func(int) {
			h.ServeHTTP(recs[1], reqs[1])
			benchFirst(b, "floor", recs[1].Code, recs[1].Header())
		})
}

// benchFirst fails b unless a response is a first 201, not a replay.
func benchFirst(b *testing.B, side string, code int, h http.Header) {
	if code != http.StatusCreated || h.Get(idempotency.ReplayedHeader) != "" {
		b.Fatalf("%s: %d, replayed %q; want a first 201", side, code, h.Get(idempotency.ReplayedHeader))
	}
}
