package webhook

import (
	"net/http"
	"testing"
)

// The event id is read exactly wherever JSON white space stands around the
// members and values of the body (after a string, number, object or array
// value too): Stripe's "id" and Slack's "event_id".
func TestBodyEventIDIsReadExactlyAroundJSONWhiteSpace(t *testing.T) {
	clk := newStepClock()
	for _, tc := range []struct {
		scheme Scheme
		secret string
		id     string
	}{
		{Stripe(), stripeSecret, "evt_1"},
		{Slack(), slackSecret, "Ev01"},
	} {
		name := "id"
		if tc.scheme == Slack() {
			name = "event_id"
		}
		cfg := Config{Scheme: tc.scheme, Secrets: []string{tc.secret}, Now: clk.Now}
		s, v := newSigner(t, cfg), newVerifier(t, cfg)
		member := `"` + name + `":"` + tc.id + `"`
		for _, body := range []string{
			`{` + member + ` }`,
			`{ "` + name + `" : "` + tc.id + `" , "object" : "event" }`,
			`{"object":"event",` + member + "\n}",
			`{"data":{"x":[1,2]} ,` + member + `}`,
			`{"list":[1, 2]` + "\t" + `,` + member + `}`,
			`{"n":12345 ,` + member + `}`,
			`{"t":true` + "\r\n" + `,` + member + `}`,
			`{"s":"a\"b}" ,` + member + `,"z":null}`,
			`{"data":{"` + name + `":"other"} ,` + member + `}`,
		} {
			h := http.Header{}
			if err := s.Sign(h, tc.id, []byte(body)); err != nil {
				t.Fatalf("%v: Sign(%q) = %v", tc.scheme, body, err)
			}
			d, err := v.Verify(h, []byte(body))
			if err != nil || d.ID != tc.id {
				t.Fatalf("%v: Verify(%q) = ID %q, %v; want %q", tc.scheme, body, d.ID, err, tc.id)
			}
		}
	}
}

// A JSON string of the body is decoded as encoding/json decodes it: an
// ASCII string without escapes as it stands, and every other through
// encoding/json, which replaces each byte of invalid UTF-8 (0x80 and up
// included) with U+FFFD.
func TestJSONStringValueDecodesAsEncodingJSON(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`""`, ""},
		{`"evt_1"`, "evt_1"},
		{"\"\x7f\"", "\x7f"},
		{"\"\x80\"", "\uFFFD"},
		{"\"a\x80\"", "a\uFFFD"},
		{"\"\xff\xfe\"", "\uFFFD\uFFFD"},
		{"\"caf\xc3\xa9\"", "café"},
		{`"a\u0062\"c"`, `ab"c`},
	} {
		got, ok := jsonStringValue([]byte(tc.raw))
		if !ok || got != tc.want {
			t.Errorf("jsonStringValue(%q) = %q, %v; want %q", tc.raw, got, ok, tc.want)
		}
	}
}
