module github.com/ctoken/ctoken/sqlitestore/cmd/ctoken-sqlite

go 1.26.0

require (
	github.com/ctoken/ctoken/sqlitestore v0.1.0
	modernc.org/sqlite v1.62.0
)

require (
	github.com/ctoken/ctoken v0.1.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/sys v0.49.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)
