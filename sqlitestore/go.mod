module github.com/ctoken/ctoken/sqlitestore

go 1.25.0

require github.com/ctoken/ctoken v0.1.0
