package drivertest

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// A driverCase is one case of a table run on every driver.
type driverCase struct {
	name string
	fn   func(t *testing.T, d Driver)
}

// subtest is one named case of a Test function's table.
type subtest struct {
	name string
	test func(*testing.T)
}

// subtests runs each case as a subtest of t, in order.
func subtests(t *testing.T, tests []subtest) {
	for _, tc := range tests {
		t.Run(tc.name, tc.test)
	}
}

// eachDriver runs fn on every driver of the test binary, each in a
// parallel subtest named after the driver.
func eachDriver(t *testing.T, fn func(t *testing.T, d Driver)) {
	for _, d := range Drivers() {
		t.Run(d.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

// runOnEveryDriver runs every case on every driver of the test binary, in
// parallel.
func runOnEveryDriver(t *testing.T, cases []driverCase) {
	eachDriver(t, func(t *testing.T, d Driver) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.fn(t, d)
			})
		}
	})
}

// countRows runs query, a SELECT count(*), on db and returns the count.
func countRows(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// must fails t on an error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mustExec runs query on db (a DB, Conn or Tx) with ctx, failing t on an
// error, which names the query.
func mustExec(t testing.TB, ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(ctx, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// heldConn takes a connection of db, closed when the test ends.
func heldConn(t testing.TB, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// within returns what ch receives, failing t with msg if nothing comes
// within d: a failsafe bound on an event the test waits for, not a timing.
func within[T any](t testing.TB, ch <-chan T, d time.Duration, msg string) (v T) {
	t.Helper()
	select {
	case v = <-ch:
	case <-time.After(d):
		t.Fatal(msg)
	}
	return v
}

// isClosed reports whether stop is closed.
func isClosed(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
