module github.com/ctoken/ctoken/bench

go 1.25.0

require github.com/ctoken/ctoken v0.0.0

require (
	aidanwoods.dev/go-paseto v1.6.0 // indirect
	aidanwoods.dev/go-result v0.3.1 // indirect
	github.com/fernet/fernet-go v0.0.0-20240119011108-303da6aec611 // indirect
	github.com/golang-jwt/jwt/v5 v5.3.1 // indirect
	github.com/gorilla/securecookie v1.1.2 // indirect
	github.com/tink-crypto/tink-go/v2 v2.9.0 // indirect
	golang.org/x/crypto v0.53.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
)

replace github.com/ctoken/ctoken => ../
