//go:build mattn

package drivertest

import (
	"net/url"

	_ "github.com/mattn/go-sqlite3"
)

var driver = Driver{Name: "mattn", SQLName: "sqlite3", DSN: mattnDSN}

// mattnDSN is mattn/go-sqlite3's form: file:path?_name=value&..., for
// the pragmas it knows by name (_journal_mode, _synchronous,
// _busy_timeout, _query_only, _foreign_keys, …). It ignores a parameter
// it does not know, so a pragma without such a name is not set.
func mattnDSN(path string, pragmas []Pragma) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_"+p.Name, p.Value)
	}
	return "file:" + path + "?" + q.Encode()
}
