//go:build mattn

package drivertest

import _ "github.com/mattn/go-sqlite3"

var driver = Driver{Name: "mattn", SQLName: "sqlite3", DSN: mattnDSN}
