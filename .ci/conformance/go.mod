module conformance

go 1.25.0

require (
	github.com/ctoken/ctoken v0.1.0
	github.com/cucumber/gherkin/go/v42 v42.0.1
	github.com/cucumber/messages/go/v34 v34.2.1
)

require (
	github.com/fxamacker/cbor/v2 v2.9.6 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
)
