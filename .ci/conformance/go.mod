module conformance

go 1.25.0

require github.com/ctoken/ctoken v0.1.0

require (
	github.com/cucumber/gherkin/go/v42 v42.0.1 // indirect
	github.com/cucumber/messages/go/v34 v34.2.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
)
