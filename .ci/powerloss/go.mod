module powerloss

go 1.26.0

require (
	github.com/ctoken/ctoken v0.1.0
	github.com/ctoken/ctoken/pgstore v0.1.0
	github.com/ctoken/ctoken/redisstore v0.1.0
	github.com/ctoken/ctoken/sqlitestore v0.1.0
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/mattn/go-sqlite3 v1.14.53
	github.com/redis/go-redis/v9 v9.22.0
	golang.org/x/sys v0.28.0
	modernc.org/sqlite v1.62.0
)
