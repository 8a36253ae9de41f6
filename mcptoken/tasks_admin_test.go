package mcptoken

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/replay"
	"github.com/ctoken/ctoken/replay/replaytest"
)

// TestRerunHandler: through a real HTTP server, a stuck key (a keyed task
// whose instance stopped, its effect unknown) is let run again by an
// authenticated operator's POST, and by nothing else; every other answer
// changes nothing, and neither answers nor logs carry the key or the
// caller.
func TestRerunHandler(t *testing.T) {
	const stuckKey, caller = "k-stuck-9f2c41", "alice" // settled reads as alice
	keys, err := ctoken.NewKeyring(ctoken.RandomKey())
	must(t, err)
	mem := replay.NewMemoryStore(0)
	dying := &replaytest.CutOff{MemoryStore: mem}
	store := &replaytest.CutOff{MemoryStore: mem} // cut for the 503
	var logs syncBuffer
	cfg := TasksConfig{Keys: keys, Hold: time.Second, PollInterval: 10 * time.Millisecond}
	cfg.Store = dying
	a, err := NewTasks(cfg)
	must(t, err)
	cfg.Store, cfg.Logger = store, slog.New(slog.NewTextHandler(&logs, nil))
	b, err := NewTasks(cfg)
	must(t, err)

	ok := json.RawMessage(`{"content":[{"type":"text","text":"sent"}]}`)
	var runs atomic.Int32
	started := make(chan struct{})
	mail := TaskTool{Name: "mail", Run: func(ctx context.Context, _ *TaskCall) (json.RawMessage, error) {
		if runs.Add(1) == 1 {
			close(started)
			<-ctx.Done() // given up by its stopped instance
			return nil, ctx.Err()
		}
		return ok, nil
	}}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hang := TaskTool{Name: "hang", Run: func(ctx context.Context, _ *TaskCall) (json.RawMessage, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ok, nil
	}}
	for _, ts := range []*Tasks{a, b} {
		must(t, ts.Add(mail))
		must(t, ts.Add(hang))
	}
	first, err := a.Create(context.Background(), mail, keyedCall(caller, stuckKey))
	must(t, err)
	<-started
	dying.Cut.Store(true)
	if st := settled(t, b, first.ID, nil); st.Status != taskFailed || st.effect != effectUnknown || !strings.Contains(st.ErrorMessage, "operator to allow a rerun") {
		t.Fatalf("the stopped run, whose message names no next step: %+v", st)
	}
	stuck := func(t *testing.T) {
		t.Helper()
		st, err := b.Create(context.Background(), mail, keyedCall(caller, stuckKey))
		must(t, err)
		if st.Status != taskFailed || runs.Load() != 1 {
			t.Fatalf("a call under the stuck key: %+v after %d runs; want the failure, not a run", st, runs.Load())
		}
	}
	stuck(t)

	h, err := b.RerunHandler(func(r *http.Request) (string, error) {
		switch r.Header.Get("Authorization") {
		case "Bearer op-token":
			return "ops-1", nil
		case "Bearer intern-token":
			return "", errors.New("not an operator")
		}
		return "", nil
	})
	must(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	var bodies []string
	post := func(t *testing.T, method, ctype, body string, header map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL, strings.NewReader(body))
		must(t, err)
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Authorization", "Bearer op-token")
		for k, v := range header {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		must(t, err)
		bodies = append(bodies, string(got))
		return resp.StatusCode, string(got)
	}
	form := func(caller, tool, key string) string {
		return url.Values{"caller": {caller}, "tool": {tool}, "key": {key}}.Encode()
	}
	const formType = "application/x-www-form-urlencoded"
	stuckForm := form(caller, "mail", stuckKey)

	t.Run("a nil authorize is refused at construction", func(t *testing.T) {
		if h, err := b.RerunHandler(nil); h != nil || !errors.Is(err, ctoken.ErrConfig) || !strings.Contains(err.Error(), "authorize") {
			t.Fatalf("RerunHandler(nil) = %v, %v; want nil and ErrConfig naming authorize", h, err)
		}
	})

	t.Run("refusals change nothing", func(t *testing.T) {
		long := strings.Repeat("k", maxRerunFieldBytes+1)
		for _, tc := range []struct {
			name, method, ctype, body string
			header                    map[string]string
			want                      int
		}{
			{"a request without credentials is answered 401", "POST", formType, stuckForm, map[string]string{"Authorization": ""}, http.StatusUnauthorized},
			{"a request with unknown credentials is answered 401", "POST", formType, stuckForm, map[string]string{"Authorization": "Bearer guess"}, http.StatusUnauthorized},
			{"an operator the authorizer refuses is answered 403", "POST", formType, stuckForm, map[string]string{"Authorization": "Bearer intern-token"}, http.StatusForbidden},
			{"a browser's cross-site form is answered 403", "POST", formType, stuckForm, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
			{"a request from another Origin is answered 403", "POST", formType, stuckForm, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
			{"a GET is answered 405", "GET", formType, "", nil, http.StatusMethodNotAllowed},
			{"a text/plain body is answered 415", "POST", "text/plain", stuckForm, nil, http.StatusUnsupportedMediaType},
			{"a body over 64 KiB is answered 413", "POST", formType, stuckForm + "&pad=" + strings.Repeat("x", maxRerunBodyBytes), nil, http.StatusRequestEntityTooLarge},
			{"a form with another field is answered 400", "POST", formType, stuckForm + "&run=1", nil, http.StatusBadRequest},
			{"a form naming the key twice is answered 400", "POST", formType, stuckForm + "&key=other", nil, http.StatusBadRequest},
			{"a form without the key is answered 400", "POST", formType, "caller=" + caller + "&tool=mail", nil, http.StatusBadRequest},
			{"a form with an empty key is answered 400", "POST", formType, form(caller, "mail", ""), nil, http.StatusBadRequest},
			{"a key over 4096 bytes is answered 400", "POST", formType, form(caller, "mail", long), nil, http.StatusBadRequest},
			{"a malformed form is answered 400", "POST", formType, "caller=%zz", nil, http.StatusBadRequest},
			{"JSON naming a field twice is answered 400", "POST", "application/json", `{"caller":"` + caller + `","tool":"mail","key":"` + stuckKey + `","key":"other"}`, nil, http.StatusBadRequest},
			{"JSON naming a field in another case is answered 400", "POST", "application/json", `{"Caller":"` + caller + `","tool":"mail","key":"` + stuckKey + `"}`, nil, http.StatusBadRequest},
			{"JSON with a value after the object is answered 400", "POST", "application/json", `{"caller":"` + caller + `","tool":"mail","key":"` + stuckKey + `"} {}`, nil, http.StatusBadRequest},
			{"JSON with a number for a string is answered 400", "POST", "application/json", `{"caller":"` + caller + `","tool":"mail","key":7}`, nil, http.StatusBadRequest},
			{"JSON that is not an object is answered 400", "POST", "application/json", `["` + caller + `"]`, nil, http.StatusBadRequest},
			{"a key without a task is answered 404", "POST", formType, form(caller, "mail", "k-never"), nil, http.StatusNotFound},
			{"another caller's key is answered 404", "POST", formType, form("bob", "mail", stuckKey), nil, http.StatusNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if code, body := post(t, tc.method, tc.ctype, tc.body, tc.header); code != tc.want {
					t.Fatalf("answered %d %q; want %d", code, body, tc.want)
				}
			})
		}
		stuck(t)
	})

	t.Run("a store that does not answer is answered 503 and changes nothing", func(t *testing.T) {
		store.Cut.Store(true)
		code, body := post(t, "POST", formType, stuckForm, nil)
		store.Cut.Store(false)
		if code != http.StatusServiceUnavailable || strings.Contains(body, replaytest.ErrCut.Error()) {
			t.Fatalf("answered %d %q; want 503 without the store's error", code, body)
		}
		if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, replaytest.ErrCut.Error()) {
			t.Fatalf("the store's failure is not logged at Error: %s", l)
		}
		stuck(t)
	})

	t.Run("a record that does not open is answered 500 and changes nothing", func(t *testing.T) {
		other, err := ctoken.NewKeyring(ctoken.RandomKey()) // not the ring that sealed the record
		must(t, err)
		c, err := NewTasks(TasksConfig{Keys: other, Store: mem, Logger: cfg.Logger})
		must(t, err)
		h, err := c.RerunHandler(func(*http.Request) (string, error) { return "ops-2", nil })
		must(t, err)
		srv := httptest.NewServer(h)
		defer srv.Close()
		resp, err := http.Post(srv.URL, formType, strings.NewReader(stuckForm))
		must(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		must(t, err)
		if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(logs.String(), "does not open") {
			t.Fatalf("answered %d %q; want 500, logged", resp.StatusCode, body)
		}
		bodies = append(bodies, string(body))
		stuck(t)
	})

	t.Run("a stuck key is answered 204 and its next call runs the task again", func(t *testing.T) {
		if code, body := post(t, "POST", formType, stuckForm, nil); code != http.StatusNoContent {
			t.Fatalf("answered %d %q; want 204", code, body)
		}
		st, err := b.Create(context.Background(), mail, keyedCall(caller, stuckKey))
		must(t, err)
		if st := settled(t, b, st.ID, nil); st.Status != taskCompleted || runs.Load() != 2 {
			t.Fatalf("the call after the rerun was allowed: %+v after %d runs; want completed after 2", st, runs.Load())
		}
	})

	t.Run("a key whose latest run completed is answered 409", func(t *testing.T) {
		body, _ := json.Marshal(map[string]string{"caller": caller, "tool": "mail", "key": stuckKey})
		if code, got := post(t, "POST", "application/json", string(body), nil); code != http.StatusConflict || !strings.Contains(got, "did not fail") {
			t.Fatalf("answered %d %q; want 409 with the reason", code, got)
		}
	})

	t.Run("a key whose run still runs is answered 409", func(t *testing.T) {
		st, err := b.Create(context.Background(), hang, keyedCall(caller, "k-running"))
		must(t, err)
		if st.Status != taskWorking {
			t.Fatalf("the hanging task: %+v", st)
		}
		if code, got := post(t, "POST", formType, form(caller, "hang", "k-running"), nil); code != http.StatusConflict || !strings.Contains(got, "still runs") {
			t.Fatalf("answered %d %q; want 409 with the reason", code, got)
		}
	})

	t.Run("every request is logged at Info without the caller or the key", func(t *testing.T) {
		l := logs.String()
		if n := strings.Count(l, "level=INFO msg=\"mcptoken: Tasks.RerunHandler\""); n != len(bodies) {
			t.Fatalf("%d requests logged at Info; want %d:\n%s", n, len(bodies), l)
		}
		if !strings.Contains(l, "operator=ops-1 tool=mail status=204") {
			t.Fatalf("the allowed rerun is not logged with its operator and tool:\n%s", l)
		}
		for _, s := range append(bodies, l) {
			if strings.Contains(s, stuckKey) || strings.Contains(s, caller) {
				t.Fatalf("an answer or the log carries the key or the caller: %q", s)
			}
		}
	})
}
