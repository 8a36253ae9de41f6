package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/keyfile"
)

// syncBuffer is a log sink shared by the instances' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFleetListsEveryItemOnceThroughKeyRotation runs the demo and checks
// it: every open item listed once, in order, pages alternating between the
// two instances, the key file rotated mid-listing (cursors before pass 2
// signed by the old key only, after it by the new key only), and every
// refusal answered with its documented status and no reason.
func TestFleetListsEveryItemOnceThroughKeyRotation(t *testing.T) {
	var out strings.Builder
	var logs syncBuffer
	d, err := run(t.Context(), &out, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}

	var want []int64
	for _, it := range NewStore(90).items {
		if it.Status == "open" {
			want = append(want, it.ID)
		}
	}
	got := make([]int64, len(d.Listed))
	for i, it := range d.Listed {
		got[i] = it.ID
		if it.Status != "open" {
			t.Errorf("listed %+v, which is not open", it)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v\nwant     %v", got, want)
	}
	if len(d.Instances) < 7 {
		t.Fatalf("only %d pages: the rotation did not happen mid-listing", len(d.Instances))
	}
	for i, name := range d.Instances {
		if wantName := "httpapi-fleet-1/" + string(rune('0'+i%2)); name != wantName {
			t.Errorf("page %d served by %s, want %s", i, name, wantName)
		}
	}

	// Cursors of pages 0-5 were signed before pass 2, of pages 6 on after.
	session := []byte("httpapi-fleet-1")
	only := func(key []byte) *ctoken.CursorIssuer {
		kr, err := ctoken.NewKeyring(key)
		if err != nil {
			t.Fatal(err)
		}
		iss, err := ctoken.NewCursorIssuer(ctoken.CursorConfig{Keys: kr, Session: session})
		if err != nil {
			t.Fatal(err)
		}
		return iss
	}
	oldOnly, newOnly := only(d.OldKey), only(d.NewKey)
	args, err := ctoken.ArgsFingerprint(map[string][]string{"status": {"open"}})
	if err != nil {
		t.Fatal(err)
	}
	scope := ctoken.CursorScope{ToolID: listItems, CallerID: "user:42", Args: args}
	for i, c := range d.Cursors {
		signer, other := oldOnly, newOnly
		if i >= 6 {
			signer, other = newOnly, oldOnly
		}
		if after, err := ctoken.VerifyKeyset[int64](signer, c, scope); err != nil || after != d.Listed[7*i+6].ID {
			t.Errorf("cursor of page %d: %d, %v; want the last ID of the page", i, after, err)
		}
		if _, err := ctoken.VerifyKeyset[int64](other, c, scope); !errors.Is(err, ctoken.ErrCursorInvalid) {
			t.Errorf("cursor of page %d verified with the other key: %v", i, err)
		}
	}

	for name, want := range map[string]int{
		"another caller's cursor":   400,
		"changed filter":            400,
		"tampered cursor":           400,
		"truncated cursor":          400,
		"cursor of another session": 410,
		"expired cursor":            410,
	} {
		r := d.Refusals[name]
		if r == nil || r.Status != want {
			t.Errorf("%s: %+v, want status %d", name, r, want)
			continue
		}
		for _, reason := range []string{"caller", "arguments", "mac", "base64", "session", "TTL"} {
			if strings.Contains(r.Body, reason) {
				t.Errorf("%s: the response names the reason (%q): %s", name, reason, r.Body)
			}
		}
	}
	for _, reason := range []string{"forged or wrong scope (tool, caller or arguments)", "other server session", "older than TTL"} {
		if !strings.Contains(logs.String(), `reason="`+reason+`"`) {
			t.Errorf("the server log lacks the reason %q", reason)
		}
	}
	for _, line := range []string{"pass 1 (old primary, new previous) loaded by both instances", "listed 60 items on 9 pages"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q", line)
		}
	}
}

// startOne starts one instance on a fresh key file.
func startOne(t *testing.T) *Instance {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := WriteKeyFile(keyFile, ctoken.RandomKey()); err != nil {
		t.Fatal(err)
	}
	f, err := StartFleet(t.Context(), 1, keyFile, []byte("s"), NewStore(30), time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f[0]
}

// TestChangedPageSizeIsHonored follows a cursor with another limit: the
// page size is not bound to the cursor.
func TestChangedPageSizeIsHonored(t *testing.T) {
	in := startOne(t)
	q := url.Values{"status": {"open"}, "limit": {"3"}}
	p, err := Get(t.Context(), in.URL, "u", q)
	if err != nil || len(p.Items) != 3 || p.NextCursor == "" {
		t.Fatalf("first page: %+v, %v", p, err)
	}
	q.Set("limit", "5")
	q.Set("cursor", p.NextCursor)
	next, err := Get(t.Context(), in.URL, "u", q)
	if err != nil || len(next.Items) != 5 || next.Items[0].ID <= p.Items[2].ID {
		t.Fatalf("second page with limit 5: %+v, %v", next, err)
	}
}

func TestServerRefusesBadRequests(t *testing.T) {
	in := startOne(t)
	for _, tc := range []struct {
		name   string
		user   string
		q      url.Values
		status int
	}{
		{"no caller", "", url.Values{"status": {"open"}}, 401},
		{"limit not a number", "u", url.Values{"limit": {"ten"}}, 400},
		{"limit zero", "u", url.Values{"limit": {"0"}}, 400},
		{"limit over 100", "u", url.Values{"limit": {"101"}}, 400},
		{"cursor that is not one", "u", url.Values{"cursor": {"hello"}}, 400},
	} {
		_, err := Get(t.Context(), in.URL, tc.user, tc.q)
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != tc.status {
			t.Errorf("%s: %v, want status %d", tc.name, err, tc.status)
		}
	}
}

// TestStartFleetRefusesABadKeyFile checks that an instance does not start
// on a missing, malformed or world-writable key file.
func TestStartFleetRefusesABadKeyFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	writable := filepath.Join(dir, "writable")
	if err := WriteKeyFile(writable, ctoken.RandomKey()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(writable, 0o666); err != nil {
		t.Fatal(err)
	}
	cases := map[string]error{
		filepath.Join(dir, "missing"): os.ErrNotExist,
		bad:                           ctoken.ErrKeyInvalid,
		writable:                      keyfile.ErrWritable,
	}
	if runtime.GOOS == "windows" {
		delete(cases, writable) // permission bits are not checked there
	}
	for path, want := range cases {
		f, err := StartFleet(context.Background(), 2, path, []byte("s"), NewStore(1), time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
		if !errors.Is(err, want) || f != nil {
			t.Errorf("%s: %v, want %v", filepath.Base(path), err, want)
		}
	}
}

// TestRefuseAnswersASortKeyTooLongWith422AndWhatToDo: a next cursor that
// cannot carry the page's last sort key (here a 250-byte name, the key of a
// listing by name) is no 500 a client retries in vain, but 422 with a
// detail that says what happened and what the client can do.
func TestRefuseAnswersASortKeyTooLongWith422AndWhatToDo(t *testing.T) {
	in := startOne(t)
	type nameKey struct {
		Name string
		ID   int64
	}
	_, err := ctoken.IssueKeyset(in.Issuer, ctoken.CursorScope{ToolID: listItems, CallerID: "u"}, nameKey{Name: strings.Repeat("n", 250), ID: 7})
	if !errors.Is(err, ctoken.ErrOpaqueStateTooLarge) {
		t.Fatalf("IssueKeyset of a 250-byte name: %v, want ErrOpaqueStateTooLarge", err)
	}
	w := httptest.NewRecorder()
	in.refuse(w, err)
	var body struct {
		Status int
		Detail string
	}
	if w.Code != http.StatusUnprocessableEntity || json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Status != w.Code ||
		!strings.HasPrefix(body.Detail, "no cursor can be issued after this page") || !strings.Contains(body.Detail, "another limit") {
		t.Fatalf("refuse: %d %s, want 422 saying what happened, then what to do", w.Code, w.Body)
	}
}
