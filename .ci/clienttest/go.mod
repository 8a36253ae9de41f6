module clienttest

go 1.25.0

require (
	github.com/ctoken/ctoken v0.1.0
	github.com/dunglas/httpsfv v1.1.2
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/openai/openai-go/v3 v3.74.0
	github.com/stripe/stripe-go/v85 v85.0.0
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/fxamacker/cbor/v2 v2.9.6 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	github.com/x448/float16 v0.8.4 // indirect
)
