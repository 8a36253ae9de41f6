//go:build !ncruces && !mattn

package drivertest

import _ "modernc.org/sqlite"

var driver = Driver{Name: "modernc", SQLName: "sqlite", DSN: pragmaDSN}
