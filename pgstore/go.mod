module github.com/ctoken/ctoken/pgstore

go 1.25.0

require (
	github.com/ctoken/ctoken v0.1.0
	github.com/jackc/pgx/v5 v5.12.0
)

require (
	github.com/fxamacker/cbor/v2 v2.9.6 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
