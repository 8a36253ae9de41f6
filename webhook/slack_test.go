package webhook

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"strings"

	"github.com/ctoken/ctoken/internal/clocktest"
)

// slackHeaders signs body under Slack at ts, independently of the
// package's signer (which signs only Events API callbacks).
func slackHeaders(ts int64, body string) http.Header {
	h := http.Header{}
	h.Set(HeaderSlackTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSlackSignature, "v0="+hex.EncodeToString(standardMAC([]byte(slackSecret), "v0:"+strconv.FormatInt(ts, 10)+":"+body)))
	return h
}

// TestSlack pins the Slack scheme.
func TestSlack(t *testing.T) {
	// A Slack body is read as a JSON object after any JSON white space (space,
	// tab, line feed, carriage return): its event_id is the delivery ID, and a
	// broken object is refused. A body that is empty, only white space, or
	// starts with anything else is not JSON and is identified by its signature.
	t.Run("event ID is read after leading JSON white space", func(t *testing.T) {
		const ts = 1531420618
		v := newVerifier(t, Config{Scheme: Slack(), Secrets: []string{slackSecret}, Now: clocktest.At(time.Unix(ts, 0)).Now})
		const event = `{"type":"event_callback","event_id":"Ev01"}`
		for _, tc := range []struct {
			name, body string
			bySig      bool  // the ID is the signature, not Ev01
			want       error // nil: accepted
		}{
			{"no white space", event, false, nil},
			{"space", " " + event, false, nil},
			{"tab", "\t" + event, false, nil},
			{"line feed", "\n" + event, false, nil},
			{"carriage return", "\r" + event, false, nil},
			{"all four", " \t\n\r" + event, false, nil},
			{"broken object after white space", "\r\n\t " + `{"event_id":"Ev01"`, false, ErrMalformed},
			{"empty body", "", true, nil},
			{"only white space", " \t\r\n", true, nil},
			{"form body", "token=x&command=%2Fhello", true, nil},
			{"vertical tab is not JSON white space", "\v" + event, true, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h := slackHeaders(ts, tc.body)
				d, err := v.Verify(h, []byte(tc.body))
				if !errors.Is(err, tc.want) {
					t.Fatalf("Verify = %v, want %v", err, tc.want)
				}
				if tc.want != nil {
					if Reason(err) != "JSON body malformed or its event_id not a string of 1 to 256 printable ASCII characters" {
						t.Fatalf("reason %q", Reason(err))
					}
					return
				}
				want := "Ev01"
				if tc.bySig {
					want = h.Get(HeaderSlackSignature)
				}
				if d.ID != want {
					t.Fatalf("ID %q, want %q", d.ID, want)
				}
			})
		}
	})

	t.Run("sign refuses bodies without the event ID", func(t *testing.T) {
		s := newSigner(t, Config{Scheme: Slack(), Secrets: []string{slackSecret}})
		for _, tc := range []struct{ name, id, body string }{
			{"another event_id", "Ev02", `{"event_id":"Ev01"}`},
			{"slash command (no event_id)", "Ev01", `token=x&command=%2Fhello`},
			{"JSON without event_id", "Ev01", `{"type":"url_verification"}`},
			{"broken JSON", "Ev01", `{"event_id":"Ev01"`},
		} {
			h := http.Header{}
			if err := s.Sign(h, tc.id, []byte(tc.body)); !errors.Is(err, ErrMalformed) || Reason(err) != "id is not the event_id of the body" {
				t.Fatalf("%s: Sign = %v", tc.name, err)
			}
			if len(h) != 0 {
				t.Fatalf("%s: Sign changed the header: %v", tc.name, h)
			}
		}
	})

	// Slack requests without an event_id are identified by their signature:
	// an exact replay is a duplicate, a new request is not.
	t.Run("request without event ID is identified by signature", func(t *testing.T) {
		clk := clocktest.At(time.Unix(1531420618, 0))
		v := newVerifier(t, Config{Scheme: Slack(), Secrets: []string{slackSecret}, Now: clk.Now})
		next := &recordingHandler{}
		mw := v.Middleware(next)
		body := "token=x&command=%2Fdeploy&text=prod"
		sign := func(ts int64) http.Header {
			h := http.Header{}
			h.Set(HeaderSlackTimestamp, strconv.FormatInt(ts, 10))
			h.Set(HeaderSlackSignature, "v0="+hex.EncodeToString(standardMAC([]byte(slackSecret), "v0:"+strconv.FormatInt(ts, 10)+":"+body)))
			return h
		}
		h := sign(1531420618)
		d, err := v.Verify(h, []byte(body))
		if err != nil || d.ID != h.Get(HeaderSlackSignature) {
			t.Fatalf("Verify = %+v, %v; want the signature as ID", d, err)
		}
		deliver(mw, h, body)
		deliver(mw, h, body)
		deliver(mw, sign(1531420619), body) // the same command issued again
		if n := next.calls.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2", n)
		}
	})

	// A Slack signature in upper-case hex (accepted, as slack-go accepts it) is
	// the same delivery as the lower-case one Slack sends: re-casing the hex of
	// a captured request without an event_id does not get it processed again.
	t.Run("re-cased signature is the same delivery", func(t *testing.T) {
		clk := clocktest.At(time.Unix(1531420618, 0))
		v := newVerifier(t, Config{Scheme: Slack(), Secrets: []string{slackSecret}, Now: clk.Now})
		next := &recordingHandler{}
		mw := v.Middleware(next)
		body := "token=x&command=%2Fdeploy&text=prod"
		lower := "v0=" + hex.EncodeToString(standardMAC([]byte(slackSecret), "v0:1531420618:"+body))
		for _, sig := range []string{lower, strings.ToUpper(lower[:3]) + strings.ToUpper(lower[3:]), "v0=" + strings.ToUpper(lower[3:])} {
			h := http.Header{}
			h.Set(HeaderSlackTimestamp, "1531420618")
			h.Set(HeaderSlackSignature, sig)
			d, err := v.Verify(h, []byte(body))
			if sig[:3] != "v0=" {
				if !errors.Is(err, ErrSignature) || Reason(err) != "signature header malformed" {
					t.Fatalf("%s: Verify = %+v, %v; want the prefix refused", sig, d, err)
				}
				continue
			}
			if err != nil || d.ID != lower {
				t.Fatalf("%s: Verify = %+v, %v; want the lower-case signature as ID", sig, d, err)
			}
			if rec := deliver(mw, h, body); rec.Code != http.StatusOK {
				t.Fatalf("%s: status %d", sig, rec.Code)
			}
		}
		if n := next.calls.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})
}
