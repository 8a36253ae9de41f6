//go:build !mattn

package powerloss_test

import (
	"net/url"

	_ "modernc.org/sqlite"
)

var sqliteDriver = sqliteDriverInfo{name: "modernc", sqlName: "sqlite", dsn: pragmaDSN}

// pragmaDSN is modernc.org/sqlite's form: file:path?_pragma=name(value)&...
// (sqlitestore/drivertest/dsn_pragma.go).
func pragmaDSN(path string, pragmas []sqlitePragma) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p.name+"("+p.value+")")
	}
	return "file:" + path + "?" + q.Encode()
}
