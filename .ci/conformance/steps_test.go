package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/ctoken/ctoken/replay"
)

// A step definition: a step text matching re runs run with the
// submatches. The texts are the feature file's; the meaning of each is
// the reference step's (idempot-js tests/spec/steps/*.js at the commit
// testdata/README.md names).
type stepDef struct {
	re  *regexp.Regexp
	run func(w *world, m []string) error
}

// str is a Cucumber {string} parameter: "..." or '...'.
const str = `(?:"([^"]*)"|'([^']*)')`

// arg returns the value of the {string} parameter whose two alternatives
// are m[i] and m[i+1].
func arg(m []string, i int) string {
	if m[i] != "" {
		return m[i]
	}
	return m[i+1]
}

func def(pattern string, run func(w *world, m []string) error) stepDef {
	return stepDef{re: regexp.MustCompile("^" + pattern + "$"), run: run}
}

// steps are every step definition of the runner. A step text that none
// of them matches, or that two match, fails its scenario.
var steps = []stepDef{
	// Given
	def(`an? (POST|PATCH) endpoint at `+str+` that creates an order`, func(w *world, m []string) error {
		if p := arg(m, 2); p != route {
			return fmt.Errorf("endpoint %q: the runner serves %q only", p, route)
		}
		return w.start()
	}),
	def(`the SQLite store is clean`, func(w *world, _ []string) error {
		// Each scenario starts with a fresh replay.MemoryStore, the store
		// the runner uses in the place of the reference world's SQLite.
		if n := len(w.spy.ids()); n != 0 {
			return fmt.Errorf("the store holds %d records", n)
		}
		return nil
	}),
	def(`the idempotency store is unavailable`, func(w *world, _ []string) error {
		w.store = downStore{}
		return w.start()
	}),
	def(`an Idempotency-Key `+str, func(w *world, m []string) error {
		k := arg(m, 1)
		w.key = &k
		return nil
	}),
	def(`an empty Idempotency-Key header`, func(w *world, _ []string) error {
		k := ""
		w.key = &k
		return nil
	}),
	def(`an Idempotency-Key of (\d+) characters`, func(w *world, m []string) error {
		n, err := strconv.Atoi(m[1])
		if err != nil || n > 1<<16 {
			return fmt.Errorf("key length %q", m[1])
		}
		k := strings.Repeat("a", n)
		w.key = &k
		return nil
	}),
	def(`the key `+str+` is currently being processed`, func(w *world, m []string) error {
		// The reference world leases the key for the body the concurrent
		// scenarios send, {"foo":"bar"}; here a real request with that
		// body holds it.
		return w.hold(arg(m, 1), []byte(`{"foo":"bar"}`))
	}),
	def(`I previously sent a POST request to `+str+` with body `+str, func(w *world, m []string) error {
		_, err := w.do(http.MethodPost, arg(m, 1), []byte(arg(m, 3)), w.key, nil)
		return err
	}),

	// When
	def(`I send a POST request to `+str+` without an Idempotency-Key header`, func(w *world, m []string) error {
		resp, err := w.do(http.MethodPost, arg(m, 1), []byte(`{"foo":"bar"}`), nil, nil)
		if err == nil {
			w.last = resp
		}
		return err
	}),
	def(`I send a (POST|PUT|PATCH) request to `+str+` with body `+str, func(w *world, m []string) error {
		return w.send(m[1], arg(m, 2), []byte(arg(m, 4)))
	}),
	def(`I send a POST request to `+str+` with empty body`, func(w *world, m []string) error {
		return w.send(http.MethodPost, arg(m, 1), []byte(`{}`)) // the reference world sends {}
	}),
	def(`I send a (GET|DELETE) request to `+str, func(w *world, m []string) error {
		return w.send(m[1], arg(m, 2), nil)
	}),

	// Then: the response
	def(`the response status should be (\d+)`, func(w *world, m []string) error {
		if err := w.needResponse(); err != nil {
			return err
		}
		if got := strconv.Itoa(w.last.status); got != m[1] {
			return fmt.Errorf("status %s, want %s (body %.200q)", got, m[1], w.last.body)
		}
		return nil
	}),
	def(`the response content-type should be `+str, func(w *world, m []string) error {
		if err := w.needResponse(); err != nil {
			return err
		}
		if ct := w.last.header.Get("Content-Type"); !strings.Contains(ct, arg(m, 1)) {
			return fmt.Errorf("Content-Type %q does not include %q", ct, arg(m, 1))
		}
		return nil
	}),
	def(`the response should have header `+str+` with value `+str, func(w *world, m []string) error {
		if err := w.needResponse(); err != nil {
			return err
		}
		name, want := arg(m, 1), arg(m, 3)
		if got, ok := w.last.header[http.CanonicalHeaderKey(name)]; !ok || len(got) != 1 || got[0] != want {
			return fmt.Errorf("header %s is %q, want %q", name, got, want)
		}
		return nil
	}),
	def(`the response body should contain `+str, func(w *world, m []string) error {
		if err := w.needResponse(); err != nil {
			return err
		}
		if !bytes.Contains(w.last.body, []byte(arg(m, 1))) {
			return fmt.Errorf("body %.300q does not contain %q", w.last.body, arg(m, 1))
		}
		return nil
	}),
	def(`the response body instance field should match pattern `+str, func(w *world, m []string) error {
		v, err := w.member("instance")
		if err != nil {
			return err
		}
		if s, ok := v.(string); !ok || !strings.Contains(s, arg(m, 1)) {
			return fmt.Errorf("instance %v does not include %q", v, arg(m, 1))
		}
		return nil
	}),
	def(`the response retryable field should be (true|false)`, func(w *world, m []string) error {
		v, err := w.member("retryable")
		if err != nil {
			return err
		}
		if b, ok := v.(bool); !ok || strconv.FormatBool(b) != m[1] {
			return fmt.Errorf("retryable is %v, want %s", v, m[1])
		}
		return nil
	}),
	def(`the response idempotency_key field should be `+str, func(w *world, m []string) error {
		v, err := w.member("idempotency_key")
		if err != nil {
			return err
		}
		if s, ok := v.(string); !ok || s != arg(m, 1) {
			return fmt.Errorf("idempotency_key is %v, want %q", v, arg(m, 1))
		}
		return nil
	}),

	// Then: the store and the effect
	def(`an idempotency record should exist with key `+str, func(w *world, m []string) error {
		_, ok, err := w.record(arg(m, 1))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no idempotency record for key %q", arg(m, 1))
		}
		return nil
	}),
	def(`(\d+) idempotency records should exist with key `+str, func(w *world, m []string) error {
		// ctoken keeps one entry per store ID (caller, route, key), so the
		// count is 0 or 1; the store must hold nothing else either.
		_, ok, err := w.record(arg(m, 2))
		if err != nil {
			return err
		}
		got := 0
		if ok {
			got = 1
		}
		if strconv.Itoa(got) != m[1] {
			return fmt.Errorf("%d records for key %q, want %s", got, arg(m, 2), m[1])
		}
		if ids := len(w.spy.ids()); ids != got {
			return fmt.Errorf("the store recorded %d entries, %d of them for key %q", ids, got, arg(m, 2))
		}
		return nil
	}),
	def(`the idempotency record status should be `+str, func(w *world, m []string) error {
		ids := w.spy.ids()
		if len(ids) == 0 {
			return errors.New("no idempotency record was made")
		}
		rec, err := w.spy.AcquireRecord(w.ctx, ids[len(ids)-1], 1, []byte{1})
		if err != nil {
			return err
		}
		// The reference store's "complete" is a record with a response:
		// replay.LeaseDone with a result.
		got := "processing"
		if rec.State == replay.LeaseDone && len(rec.Result) > 0 {
			got = "complete"
		}
		if got != arg(m, 1) {
			return fmt.Errorf("record status %q (%v), want %q", got, rec.State, arg(m, 1))
		}
		return nil
	}),
	def(`the idempotency record response status should be (\d+)`, func(w *world, m []string) error {
		r, err := w.latest()
		if err != nil {
			return err
		}
		if strconv.Itoa(r.status) != m[1] {
			return fmt.Errorf("recorded status %d, want %s", r.status, m[1])
		}
		return nil
	}),
	def(`the idempotency record response body should contain `+str, func(w *world, m []string) error {
		r, err := w.latest()
		if err != nil {
			return err
		}
		if !bytes.Contains(r.body, []byte(arg(m, 1))) {
			return fmt.Errorf("recorded body %.300q does not contain %q", r.body, arg(m, 1))
		}
		return nil
	}),
	def(`(\d+) orders should exist in the database`, func(w *world, m []string) error {
		if got := strconv.Itoa(w.orderCount()); got != m[1] {
			return fmt.Errorf("%s orders, want %s", got, m[1])
		}
		return nil
	}),
}

// needResponse fails when no response was recorded.
func (w *world) needResponse() error {
	if w.last == nil {
		return errors.New("no response recorded")
	}
	return nil
}

// member returns the top-level member name of the last response's JSON
// body (nil when absent).
func (w *world) member(name string) (any, error) {
	if err := w.needResponse(); err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(w.last.body, &doc); err != nil {
		return nil, fmt.Errorf("body is not a JSON object: %v", err)
	}
	return doc[name], nil
}

// errUnknownStep is the failure of a step no definition matches.
var errUnknownStep = errors.New("unknown step")

// errAmbiguousStep is the failure of a step two definitions match.
var errAmbiguousStep = errors.New("ambiguous step")

// match returns the one definition matching text and its submatches.
func match(defs []stepDef, text string) (stepDef, []string, error) {
	var found *stepDef
	var sub []string
	for i := range defs {
		if m := defs[i].re.FindStringSubmatch(text); m != nil {
			if found != nil {
				return stepDef{}, nil, fmt.Errorf("%w: %q matches %s and %s", errAmbiguousStep, text, found.re, defs[i].re)
			}
			found, sub = &defs[i], m
		}
	}
	if found == nil {
		return stepDef{}, nil, fmt.Errorf("%w: %q", errUnknownStep, text)
	}
	return *found, sub, nil
}
