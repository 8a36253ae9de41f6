module github.com/ctoken/ctoken/bench

go 1.25.0

require (
	aidanwoods.dev/go-paseto v1.6.0
	github.com/ctoken/ctoken v0.1.0
	github.com/ctoken/ctoken/redisstore v0.1.0
	github.com/fernet/fernet-go v0.0.0-20240119011108-303da6aec611
	github.com/gofiber/fiber/v3 v3.1.0
	github.com/gofiber/storage/redis/v3 v3.4.3
	github.com/golang-jwt/jwt/v5 v5.3.1
	github.com/gorilla/securecookie v1.1.2
	github.com/gowebpki/jcs v1.0.2
	github.com/redis/go-redis/v9 v9.22.0
	github.com/tink-crypto/tink-go/v2 v2.9.0
	github.com/valyala/fasthttp v1.69.0
)

require (
	aidanwoods.dev/go-result v0.3.1 // indirect
	github.com/andybalholm/brotli v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/fxamacker/cbor/v2 v2.9.6 // indirect
	github.com/gofiber/schema v1.7.0 // indirect
	github.com/gofiber/utils/v2 v2.0.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.18.4 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/tinylib/msgp v1.6.3 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/crypto v0.53.0 // indirect
	golang.org/x/net v0.55.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
	golang.org/x/text v0.38.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
