package pgstore

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestCall pins how every step's call ends.
func TestCall(t *testing.T) {
	subtests(t, []subtest{
		{"direct only if the driver ends at deadline", callsRunDirectOnlyWhenTheDriverEndsThemAtTheirDeadline},
	})
}

// callsRunDirectOnlyWhenTheDriverEndsThemAtTheirDeadline: a Store
// calls the pool on the caller's goroutine only when the pool's context
// watcher is pgx's default (a deadline of now on the connection when the
// context ends); any other watcher, or a builder that panics, keeps a
// goroutine per call. (TestFaults/paused server fails closed within timeout shows both
// paths on a paused server.)
func callsRunDirectOnlyWhenTheDriverEndsThemAtTheirDeadline(t *testing.T) {
	p := needServer(t)
	cases := []struct {
		name   string
		build  func(*pgconn.PgConn) ctxwatch.Handler // nil: pgx's default
		direct bool
	}{
		{"pgx's default", nil, true},
		{"a deadline of now", func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
		}, true},
		{"a deadline after a delay", func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn(), DeadlineDelay: time.Second}
		}, false},
		{"a cancel request", func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: c}
		}, false},
		{"a builder that panics on a zero connection", func(c *pgconn.PgConn) ctxwatch.Handler {
			if c.Conn() == nil {
				panic("no connection")
			}
			return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool := p.poolWith(t, func(cfg *pgxpool.Config) {
				if c.build != nil {
					cfg.ConnConfig.BuildContextWatcherHandler = c.build
				}
			})
			s := storeOn(t, pool)
			if s.direct != c.direct {
				t.Fatalf("Store.direct = %v; want %v", s.direct, c.direct)
			}
			mustClaim(t, s, "a", time.Now().Add(time.Minute))
		})
	}
}
