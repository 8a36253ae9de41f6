// Package drivertest runs the sqlitestore module's tests on every SQLite
// driver the module supports: modernc.org/sqlite and
// github.com/ncruces/go-sqlite3 (pure Go) and github.com/mattn/go-sqlite3
// (cgo). It is a test-only module: sqlitestore itself imports no driver.
// Its tests run [Drivers]; Example_modernc shows a store on the modernc
// driver across a restart, and Example_rearm the operator's path after a
// loss.
//
// ncruces and mattn both register the database/sql name "sqlite3", so one
// test binary holds one driver, chosen by a build tag: none for modernc,
// -tags ncruces, -tags mattn (CGO_ENABLED=1). .ci/sqlite.sh runs all three.
package drivertest

import (
	"database/sql"
	"strings"
	"testing"
)

// Pragma is one connection setting, as PRAGMA name = value.
type Pragma struct{ Name, Value string }

// Safe is what sqlitestore requires on every connection.
var Safe = []Pragma{{"busy_timeout", "5000"}, {"journal_mode", "WAL"}, {"synchronous", "FULL"}}

// Driver is one database/sql SQLite driver.
type Driver struct {
	// Name is the driver's short name, for subtests: modernc, ncruces, mattn.
	Name string
	// SQLName is the name the driver registers with database/sql.
	SQLName string
	// DSN returns the data source name that opens path with pragmas on
	// every connection the pool opens.
	DSN func(path string, pragmas []Pragma) string
}

// Drivers returns the driver this test binary was built with (see the
// package documentation), as a list so tests read the same whichever it
// is.
func Drivers() []Driver { return []Driver{driver} }

// Open opens path with the safe settings and closes the pool when the
// test ends.
func (d Driver) Open(t testing.TB, path string) *sql.DB {
	return d.OpenWith(t, path, Safe)
}

// OpenWith opens path with the given pragmas (Safe, or weaker ones to
// test refusals) and closes the pool when the test ends.
func (d Driver) OpenWith(t testing.TB, path string, pragmas []Pragma) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.SQLName, d.DSN(path, pragmas))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// With returns Safe with name set to value (added when absent).
func With(name, value string) []Pragma {
	out := make([]Pragma, 0, len(Safe)+1)
	found := false
	for _, p := range Safe {
		if strings.EqualFold(p.Name, name) {
			p.Value, found = value, true
		}
		out = append(out, p)
	}
	if !found {
		out = append(out, Pragma{name, value})
	}
	return out
}
