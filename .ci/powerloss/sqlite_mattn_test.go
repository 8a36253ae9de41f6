//go:build mattn

package powerloss_test

import (
	"net/url"

	_ "github.com/mattn/go-sqlite3"
)

var sqliteDriver = sqliteDriverInfo{name: "mattn", sqlName: "sqlite3", dsn: mattnDSN}

// mattnDSN is mattn/go-sqlite3's form: file:path?_name=value&...
// (sqlitestore/drivertest/driver_mattn.go).
func mattnDSN(path string, pragmas []sqlitePragma) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_"+p.name, p.value)
	}
	return "file:" + path + "?" + q.Encode()
}
