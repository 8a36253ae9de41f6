package mcptoken

// The operator's way to AllowRerun: an authenticated HTTP endpoint, so that
// a stuck key needs no Go code of the application's.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"

	"github.com/ctoken/ctoken"
)

// Limits of a [Tasks.RerunHandler] request, checked before it is decoded.
const (
	maxRerunBodyBytes  = 64 << 10               // the body, form or JSON
	maxRerunFieldBytes = MaxIdempotencyKeyBytes // caller, tool and key each
)

// rerunFields are the names a rerun request carries, each exactly once.
var rerunFields = [...]string{"caller", "tool", "key"}

// RerunHandler returns the operator's HTTP endpoint for [Tasks.AllowRerun]:
// a POST whose body names the caller, tool and idempotency key of a stuck
// task, as a form (application/x-www-form-urlencoded) or a JSON object
// ({"caller": …, "tool": …, "key": …}), each field a non-empty string of at
// most 4096 bytes, named once, and nothing else. authorize authenticates
// the operator: it returns the operator's name (logged), "" for a request
// without valid credentials (answered 401 with WWW-Authenticate: Bearer),
// or an error for an operator who may not allow reruns (403). A nil
// authorize is refused with an error matching ctoken.ErrConfig: the
// endpoint is never open. The answers:
//
//	204  the next call under the key runs its task again
//	409  the key's latest run did not fail, still runs, or was its last
//	404  no task under this caller, tool and key
//	503  the store did not answer (Retry-After: 5): nothing changed
//	500  a record of the key does not open (see the Logger)
//	401, 403  authorize refused; 403 also for a browser's cross-origin request
//	400, 405, 413, 415  a malformed body, not a POST, a body over 64 KiB,
//	          another Content-Type
//
// A refusal changes nothing. Every request is logged at Info on
// [TasksConfig.Logger] with the operator, the tool and the answer, never
// the caller or the key; a store failure is logged at Error, and its
// error is never in the answer. Mount it apart from the MCP endpoint, on
// an address only operators reach.
func (t *Tasks) RerunHandler(authorize func(r *http.Request) (operator string, err error)) (http.Handler, error) {
	if authorize == nil {
		return nil, fmt.Errorf("%w: Tasks.RerunHandler: authorize is nil: pass the function that authenticates the operator (an open endpoint would let anyone run a stuck task again)", ctoken.ErrConfig)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		operator, tool, status := t.rerun(w, r, authorize)
		t.logger().LogAttrs(r.Context(), slog.LevelInfo, "mcptoken: Tasks.RerunHandler",
			slog.String("operator", operator), slog.String("tool", tool), slog.Int("status", status), slog.String("remote", r.RemoteAddr))
	}), nil
}

// rerun answers one request of RerunHandler, and returns who sent it, for
// which tool, and the status answered.
func (t *Tasks) rerun(w http.ResponseWriter, r *http.Request, authorize func(*http.Request) (string, error)) (operator, tool string, status int) {
	answer := func(code int, msg string) (string, string, int) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(code)
		if code != http.StatusNoContent {
			_, _ = io.WriteString(w, msg+"\n")
		}
		return operator, tool, code
	}
	if crossOrigin(r) {
		return answer(http.StatusForbidden, "cross-origin request refused")
	}
	operator, err := authorize(r)
	switch {
	case err != nil:
		return answer(http.StatusForbidden, "forbidden: this operator may not allow reruns")
	case operator == "":
		w.Header().Set("WWW-Authenticate", "Bearer")
		return answer(http.StatusUnauthorized, "unauthorized: no authenticated operator")
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		return answer(http.StatusMethodNotAllowed, "method not allowed: POST caller, tool and key")
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != "application/json" && mt != "application/x-www-form-urlencoded") {
		return answer(http.StatusUnsupportedMediaType, "the body must be application/x-www-form-urlencoded or application/json")
	}
	var body []byte
	if r.Body != nil {
		body, err = io.ReadAll(io.LimitReader(r.Body, maxRerunBodyBytes+1))
		if err != nil {
			return answer(http.StatusBadRequest, "request body unreadable")
		}
	}
	if len(body) > maxRerunBodyBytes {
		return answer(http.StatusRequestEntityTooLarge, "request body over 64 KiB")
	}
	var f map[string]string
	if mt == "application/json" {
		f, err = rerunJSON(body)
	} else {
		f, err = rerunForm(body)
	}
	if err != nil {
		return answer(http.StatusBadRequest, "bad request: "+err.Error())
	}
	tool = f["tool"]
	switch err := t.AllowRerun(r.Context(), f["caller"], tool, f["key"]); {
	case err == nil:
		return answer(http.StatusNoContent, "") // no body
	case errors.Is(err, errNoRerun):
		return answer(http.StatusConflict, "no rerun: the key's latest run did not fail, still runs, or was its last")
	case errors.Is(err, ErrTaskInvalid):
		return answer(http.StatusNotFound, "no task under this caller, tool and key")
	case errors.Is(err, errRecordForged):
		t.fail(slog.LevelError, "Tasks.RerunHandler: a record of the key does not open; nothing changed", tool, err)
		return answer(http.StatusInternalServerError, "a record of the key does not open: nothing changed; see the server's log")
	default:
		t.fail(slog.LevelError, "Tasks.RerunHandler: the store did not answer; nothing changed", tool, err)
		w.Header().Set("Retry-After", "5")
		return answer(http.StatusServiceUnavailable, "the store did not answer: nothing changed; try again")
	}
}

// crossOrigin reports a browser's request from another origin (Fetch
// metadata, else an Origin that is not the Host): a form POST needs no
// CORS preflight, so a page could send one with the operator's cookies.
func crossOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	return err != nil || u.Host != r.Host
}

// rerunForm decodes a form body: the three fields, each once, and no other.
func rerunForm(body []byte) (map[string]string, error) {
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, errors.New("the form does not parse")
	}
	f := make(map[string]string, len(rerunFields))
	for name, vs := range q {
		for _, v := range vs {
			if err := rerunField(f, name, v); err != nil {
				return nil, err
			}
		}
	}
	return f, rerunComplete(f)
}

// rerunJSON decodes a JSON body: one object of the three string fields,
// each named once in its exact case, and nothing else.
func rerunJSON(body []byte) (map[string]string, error) {
	bad := errors.New(`the body is not one JSON object {"caller", "tool", "key"} of strings`)
	d := json.NewDecoder(bytes.NewReader(body))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad
	}
	f := make(map[string]string, len(rerunFields))
	for d.More() {
		tok, err := d.Token()
		name, ok := tok.(string)
		if err != nil || !ok {
			return nil, bad
		}
		tok, err = d.Token()
		v, ok := tok.(string)
		if err != nil || !ok {
			return nil, bad
		}
		if err := rerunField(f, name, v); err != nil {
			return nil, err
		}
	}
	if tok, err := d.Token(); err != nil || tok != json.Delim('}') {
		return nil, bad
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, bad
	}
	return f, rerunComplete(f)
}

// rerunField sets field name of f to v, refusing an unknown or repeated
// name and a value that is empty or too long.
func rerunField(f map[string]string, name, v string) error {
	known := false
	for _, n := range rerunFields {
		known = known || n == name
	}
	switch _, twice := f[name]; {
	case !known:
		return errors.New("only caller, tool and key may be named")
	case twice:
		return fmt.Errorf("%q is named twice", name)
	case v == "" || len(v) > maxRerunFieldBytes:
		return fmt.Errorf("%q must be 1 to %d bytes", name, maxRerunFieldBytes)
	}
	f[name] = v
	return nil
}

// rerunComplete refuses a request that leaves out a field.
func rerunComplete(f map[string]string) error {
	for _, n := range rerunFields {
		if _, ok := f[n]; !ok {
			return fmt.Errorf("%q is missing", n)
		}
	}
	return nil
}
