module github.com/ctoken/ctoken/bench

go 1.25.0

require (
	aidanwoods.dev/go-paseto v1.6.0
	github.com/ctoken/ctoken v0.1.0
	github.com/fernet/fernet-go v0.0.0-20240119011108-303da6aec611
	github.com/golang-jwt/jwt/v5 v5.3.1
	github.com/gorilla/securecookie v1.1.2
	github.com/gowebpki/jcs v1.0.2
	github.com/tink-crypto/tink-go/v2 v2.9.0
)

require (
	aidanwoods.dev/go-result v0.3.1 // indirect
	github.com/fxamacker/cbor/v2 v2.9.6 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/crypto v0.53.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
