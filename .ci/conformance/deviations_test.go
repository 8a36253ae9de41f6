package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/ctoken/ctoken/idempotency"
)

// A deviation is a documented difference between the feature file and
// ctoken. In a scenario listed in [deviations], each step that one of its
// replacements matches runs twice: the feature file's own definition,
// which must fail (else the deviation is stale and the scenario fails),
// then the replacement, which asserts what ctoken documents instead. The
// scenario's other steps run as written.
type deviation struct {
	why     string
	instead []replacement
}

// A replacement asserts ctoken's documented behaviour in the place of the
// steps re matches.
type replacement struct {
	re    *regexp.Regexp
	says  string
	check func(w *world, m []string) error
}

func instead(pattern, says string, check func(w *world, m []string) error) replacement {
	return replacement{re: regexp.MustCompile("^" + pattern + "$"), says: says, check: check}
}

// find returns the replacement of a step text, if any.
func (d *deviation) find(text string) (*replacement, []string) {
	for i := range d.instead {
		if m := d.instead[i].re.FindStringSubmatch(text); m != nil {
			return &d.instead[i], m
		}
	}
	return nil, nil
}

// The deviations ctoken makes, one reason each. docs/idempotency.md
// ("Against the IETF-draft conformance file") lists them too.
var (
	// noDraftLink: the feature file wants each problem body to name a
	// section of the draft.
	noDraftLink = deviation{
		why: "ctoken's problem bodies are RFC 9457 documents of type about:blank with a fixed detail that says what to send; " +
			"they link no section of the draft (an expired Internet-Draft, whose sections move between revisions), " +
			"and the draft's own SHOULD is a link to the API's documentation, which only the integrating API has",
		instead: []replacement{
			instead(`the response body should contain "section-2\.\d+"`, "an RFC 9457 body: type about:blank, title, status, detail", problemBody),
		},
	}
	// noInstance: the feature file wants an "instance" member, a
	// urn:uuid per response.
	noInstance = deviation{
		why: "RFC 9457 makes \"instance\" optional; ctoken's refusal bodies are built once per error and fixed " +
			"(idempotency/errors.go), so two equal refusals are byte for byte equal and a body carries nothing a log could correlate",
		instead: []replacement{
			instead(`the response body should contain "instance"`, "an RFC 9457 body without instance", problemBody),
			instead(`the response body instance field should match pattern `+str, "an RFC 9457 body without instance", problemBody),
		},
	}
	// noRetryable: the feature file wants a "retryable" extension
	// member.
	noRetryable = deviation{
		why: "\"retryable\" is an idempot-dev extension, in neither RFC 9457 nor the draft; ctoken says \"retry\" with the status " +
			"and Retry-After (409 and 503 carry it; 400 and 422 do not), as docs/idempotency.md's Statuses table says",
		instead: []replacement{
			instead(`the response body should contain "retryable"`, "an RFC 9457 body without retryable", problemBody),
			instead(`the response retryable field should be (true|false)`, "Retry-After present exactly when retryable", retryAfterSays),
		},
	}
	// keyNotEchoed: the feature file wants the key echoed in the body.
	keyNotEchoed = deviation{
		why: "ctoken never puts a key in a response, an error or a log (SPEC.md; the store holds only a hash of it): " +
			"a key echoed into a problem body ends up in proxies' and clients' logs",
		instead: []replacement{
			instead(`the response body should contain "idempotency_key"`, "an RFC 9457 body that does not hold the key", keyAbsent),
			instead(`the response idempotency_key field should be `+str, "an RFC 9457 body that does not hold the key", keyAbsent),
		},
	}
	// replayedHeaderName: the feature file names the replay marker
	// x-idempotent-replayed.
	replayedHeaderName = deviation{
		why: "the draft names no replay header; ctoken sends Stripe's, Idempotent-Replayed: true (idempotency.ReplayedHeader), " +
			"which Stripe's clients read",
		instead: []replacement{
			instead(`the response should have header "x-idempotent-replayed" with value "true"`, "Idempotent-Replayed: true", replayedHeader),
		},
	}
	// newKeyNewOperation: the feature file refuses a new key with the
	// body of a request already made with another key (409).
	newKeyNewOperation = deviation{
		why: "the key names the operation: two payments of the same amount to the same payee under two keys are two payments, " +
			"as in Stripe's API and the draft (section 2.2 asks that a key be unique, not that a body be); " +
			"so the second key runs the handler, the resource is created twice, and nothing is refused",
		instead: []replacement{
			instead(`the response status should be 409`, "the handler's answer to the new key", handlerAnswered),
			instead(`the response content-type should be "application/problem\+json"`, "the handler's answer to the new key", handlerAnswered),
			instead(`the response body should contain `+str, "the handler's answer to the new key", handlerAnswered),
			instead(`the response body instance field should match pattern `+str, "the handler's answer to the new key", handlerAnswered),
			instead(`the response retryable field should be (true|false)`, "the handler's answer to the new key", handlerAnswered),
			instead(`1 orders should exist in the database`, "2 orders: one per key", func(w *world, _ []string) error {
				if n := w.orderCount(); n != 2 {
					return fmt.Errorf("%d orders, want 2 (one per key)", n)
				}
				return nil
			}),
		},
	}
)

// deviations maps each scenario ctoken deliberately does not follow as
// written to its deviation. An entry naming no scenario of the feature
// file fails the test, and so does one whose scenario no longer needs it.
var deviations = map[string]*deviation{
	"Missing Idempotency-Key header on POST returns 400":        &noDraftLink,
	"Missing key error includes RFC 9457 instance field":        &noInstance,
	"Missing key error includes RFC 9457 retryable field":       &noRetryable,
	"Empty Idempotency-Key header returns 400":                  &noDraftLink,
	"Empty key error includes RFC 9457 instance field":          &noInstance,
	"Empty key error includes RFC 9457 retryable field":         &noRetryable,
	"Empty key error includes idempotency_key extension":        &keyNotEchoed,
	"Idempotency-Key exceeding 255 characters returns 400":      &noDraftLink,
	"Too long key error includes RFC 9457 instance field":       &noInstance,
	"Too long key error includes RFC 9457 retryable field":      &noRetryable,
	"Idempotency-Key with commas returns 400":                   &noDraftLink,
	"Invalid key with commas includes RFC 9457 instance field":  &noInstance,
	"Invalid key with commas includes RFC 9457 retryable field": &noRetryable,
	"Duplicate request sets replay header":                      &replayedHeaderName,
	"Different key with same body returns 409":                  &newKeyNewOperation,
	"Fingerprint conflict response contains error message":      &newKeyNewOperation,
	"Fingerprint conflict does not create duplicate resources":  &newKeyNewOperation,
	"Fingerprint conflict includes RFC 9457 instance field":     &newKeyNewOperation,
	"Fingerprint conflict includes RFC 9457 retryable field":    &newKeyNewOperation,
	"Fingerprint conflict error follows RFC 9457":               &newKeyNewOperation,
	"Same key with different body returns 422":                  &noDraftLink,
	"Key reuse conflict response contains error message":        &noDraftLink,
	"Key reuse conflict includes RFC 9457 instance field":       &noInstance,
	"Key reuse conflict includes RFC 9457 retryable field":      &noRetryable,
	"Key reuse conflict includes idempotency_key extension":     &keyNotEchoed,
	"Request during processing returns 409":                     &noDraftLink,
	"Concurrent request response contains error message":        &noDraftLink,
	"Concurrent request includes RFC 9457 instance field":       &noInstance,
	"Concurrent request includes RFC 9457 retryable field":      &noRetryable,
	"Store unavailable includes RFC 9457 instance field":        &noInstance,
	"Store unavailable includes RFC 9457 retryable field":       &noRetryable,
}

// problemBody checks that the last response is ctoken's refusal: an RFC
// 9457 problem+json document whose members are exactly type
// (about:blank), title (the status text), status (the response's) and a
// non-empty detail.
func problemBody(w *world, _ []string) error {
	if err := w.needResponse(); err != nil {
		return err
	}
	if ct := w.last.header.Get("Content-Type"); ct != "application/problem+json" {
		return fmt.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var doc map[string]any
	if err := json.Unmarshal(w.last.body, &doc); err != nil {
		return fmt.Errorf("problem body is not a JSON object: %v", err)
	}
	want := map[string]any{
		"type":   "about:blank",
		"title":  http.StatusText(w.last.status),
		"status": float64(w.last.status),
		"detail": doc["detail"],
	}
	if d, ok := doc["detail"].(string); !ok || d == "" {
		return fmt.Errorf("problem detail %v, want a non-empty string", doc["detail"])
	}
	if len(doc) != len(want) {
		return fmt.Errorf("problem members %v, want exactly type, title, status, detail", keys(doc))
	}
	for k, v := range want {
		if doc[k] != v {
			return fmt.Errorf("problem %s is %v, want %v", k, doc[k], v)
		}
	}
	return nil
}

// retryAfterSays checks that Retry-After (whole seconds, at least 1) is
// present when the step wants retryable true, and absent when false.
func retryAfterSays(w *world, m []string) error {
	if err := problemBody(w, nil); err != nil {
		return err
	}
	ra, ok := w.last.header["Retry-After"]
	switch {
	case m[1] == "false" && ok:
		return fmt.Errorf("Retry-After %q on a refusal that must not be retried", ra)
	case m[1] == "false":
		return nil
	case !ok || len(ra) != 1:
		return fmt.Errorf("Retry-After %q, want one value on a refusal to retry", ra)
	}
	if n, err := strconv.Atoi(ra[0]); err != nil || n < 1 {
		return fmt.Errorf("Retry-After %q, want whole seconds, at least 1", ra[0])
	}
	return nil
}

// keyAbsent checks that the refusal does not hold the key.
func keyAbsent(w *world, _ []string) error {
	if err := problemBody(w, nil); err != nil {
		return err
	}
	if w.key != nil && *w.key != "" && bytes.Contains(w.last.body, []byte(*w.key)) {
		return fmt.Errorf("problem body holds the key")
	}
	return nil
}

// replayedHeader checks ctoken's replay marker.
func replayedHeader(w *world, _ []string) error {
	if err := w.needResponse(); err != nil {
		return err
	}
	if got := w.last.header.Values(idempotency.ReplayedHeader); len(got) != 1 || got[0] != "true" {
		return fmt.Errorf("%s is %q, want one \"true\"", idempotency.ReplayedHeader, got)
	}
	if got := w.last.header.Values("X-Idempotent-Replayed"); len(got) != 0 {
		return fmt.Errorf("X-Idempotent-Replayed is %q, want none", got)
	}
	return nil
}

// handlerAnswered checks that the last response is the handler's own
// first answer: 200, its JSON body, not a replay.
func handlerAnswered(w *world, _ []string) error {
	if err := w.needResponse(); err != nil {
		return err
	}
	switch {
	case w.last.status != http.StatusOK:
		return fmt.Errorf("status %d, want the handler's 200 (body %.200q)", w.last.status, w.last.body)
	case !strings.HasPrefix(w.last.header.Get("Content-Type"), "application/json"):
		return fmt.Errorf("Content-Type %q, want the handler's application/json", w.last.header.Get("Content-Type"))
	case !bytes.Contains(w.last.body, []byte(`"success":true`)):
		return fmt.Errorf("body %.200q, want the handler's", w.last.body)
	case w.last.header.Get(idempotency.ReplayedHeader) != "":
		return fmt.Errorf("a replay, want a first run of the new key")
	}
	return nil
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A change is a piece of issue 45 that a scenario waits on while it is
// not on this branch, with the symptom that shows the scenario failed for
// it and nothing else.
type change struct {
	name    string
	symptom func(w *world) bool
}

// bareKeys is issue 45's "accept the key as a bare token as well as a
// quoted sf-string": the feature file sends every key bare.
var bareKeys = change{
	name:    "bare keys (issue 45, \"Real clients in\")",
	symptom: func(w *world) bool { return w.bareKeyRefused.Load() },
}

// waiting maps the scenarios that fail until a change of issue 45 lands
// to that change. Such a scenario must fail, with the change's symptom;
// once it passes, the test fails until its entry is deleted.
var waiting = map[string]change{}
