package ctoken

import strictb64 "github.com/ctoken/ctoken/internal/b64"

// b64 is the framing of every token: base64url without padding through the
// module's one strict decoder (internal/b64), which refuses padding, CR and
// LF, any other character outside the alphabet and non-zero unused trailing
// bits, so every token has exactly one spelling. bench_test.go uses this
// name too.
var b64 = strictb64.URL
