//go:build ncruces

package drivertest

import _ "github.com/ncruces/go-sqlite3/driver"

var driver = Driver{Name: "ncruces", SQLName: "sqlite3", DSN: pragmaDSN}
