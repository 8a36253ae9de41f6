//go:build !mattn

package drivertest

import "net/url"

// pragmaDSN is the form of modernc.org/sqlite and ncruces/go-sqlite3:
// file:path?_pragma=name(value)&...
func pragmaDSN(path string, pragmas []Pragma) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p.Name+"("+p.Value+")")
	}
	return "file:" + path + "?" + q.Encode()
}
