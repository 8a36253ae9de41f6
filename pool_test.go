package ctoken

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// Tests of the pooled working memory and the bind-tag cache behind the
// allocation-free hot paths: results must never leak between calls,
// goroutines, subjects, tools or keys. Run under -race.

// TestVerifyStateIsNotAliasedToScratch checks that the State Verify
// returns is the caller's own copy: later calls reuse the pooled scratch
// and must not change it.
func TestVerifyStateIsNotAliasedToScratch(t *testing.T) {
	iss := testPoolIssuer(t)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	a, err := iss.Issue(CursorPayload{CursorScope: scope, State: []byte("first state")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := iss.Issue(CursorPayload{CursorScope: scope, State: []byte("other thing")})
	if err != nil {
		t.Fatal(err)
	}
	pa, err := iss.Verify(a, scope)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := iss.Verify(b, scope); err != nil {
			t.Fatal(err)
		}
	}
	if string(pa.State) != "first state" {
		t.Fatalf("State changed to %q by later Verify calls", pa.State)
	}
}

// TestVerifyWithoutStateReturnsNilState checks the no-state case costs no
// copy and reads as nil.
func TestVerifyWithoutStateReturnsNilState(t *testing.T) {
	iss := testPoolIssuer(t)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	c, err := iss.Issue(CursorPayload{CursorScope: scope})
	if err != nil {
		t.Fatal(err)
	}
	p, err := iss.Verify(c, scope)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != nil {
		t.Fatalf("State = %q, want nil", p.State)
	}
}

func testPoolIssuer(t *testing.T) *CursorIssuer {
	t.Helper()
	kr, err := NewKeyring(RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	iss, err := NewCursorIssuer(CursorConfig{Keys: kr})
	if err != nil {
		t.Fatal(err)
	}
	return iss
}

// TestConcurrentCursorsKeepTheirOwnPayloads issues and verifies distinct
// cursors from many goroutines at once.
func TestConcurrentCursorsKeepTheirOwnPayloads(t *testing.T) {
	iss := testPoolIssuer(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				scope := CursorScope{ToolID: fmt.Sprintf("tool%d", g), CallerID: fmt.Sprintf("caller%d", i)}
				state := bytes.Repeat([]byte{byte(g), byte(i)}, 1+i%100)
				c, err := iss.Issue(CursorPayload{CursorScope: scope, Page: uint32(i), State: state})
				if err != nil {
					errs <- err
					return
				}
				p, err := iss.Verify(c, scope)
				if err != nil {
					errs <- err
					return
				}
				if p.Page != uint32(i) || !bytes.Equal(p.State, state) || p.ToolID != scope.ToolID || p.CallerID != scope.CallerID {
					errs <- fmt.Errorf("goroutine %d call %d: got %+v", g, i, p)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestStateBindTagCacheNeverCrossesSubjectsOrTools encodes for many
// subjects and tools, more than the per-scratch cache holds, interleaved,
// from several goroutines, and checks that every state opens for its own
// subject and tool only, in both modes.
func TestStateBindTagCacheNeverCrossesSubjectsOrTools(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			kr, err := NewKeyring(RandomKey())
			if err != nil {
				t.Fatal(err)
			}
			c, err := NewRequestStateCodec(RequestStateSecurity{Keys: kr, Mode: mode, Binding: BindSubjectAndTool})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 100 {
						subject := fmt.Sprintf("subject-%d", (g+i)%7)
						tool := fmt.Sprintf("tool-%d", i%3)
						state := fmt.Sprintf(`{"g":%d,"i":%d}`, g, i)
						w, err := c.Encode(state, subject, tool)
						if err != nil {
							errs <- err
							return
						}
						if got, err := c.Decode(w, subject, tool); err != nil || got != state {
							errs <- fmt.Errorf("own subject/tool: %q, %v", got, err)
							return
						}
						if _, err := c.Decode(w, subject+"x", tool); !errors.Is(err, ErrStateInvalid) {
							errs <- fmt.Errorf("other subject: %v", err)
							return
						}
						if _, err := c.Decode(w, subject, tool+"x"); !errors.Is(err, ErrStateInvalid) {
							errs <- fmt.Errorf("other tool: %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestStateBindTagCacheIsPerKey checks that a state sealed under a
// previous key still opens after rotation, and that a tag cached for one
// key is never used for another.
func TestStateBindTagCacheIsPerKey(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			oldKey, newKey := RandomKey(), RandomKey()
			oldRing, _ := NewKeyring(oldKey)
			rotated, _ := NewKeyring(newKey, oldKey)
			oldCodec, err := NewRequestStateCodec(RequestStateSecurity{Keys: oldRing, Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			c, err := NewRequestStateCodec(RequestStateSecurity{Keys: rotated, Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 { // warm the cache with the new key's tag first
				w, err := c.Encode("new", "alice", "")
				if err != nil {
					t.Fatal(err)
				}
				if got, err := c.Decode(w, "alice", ""); err != nil || got != "new" {
					t.Fatalf("new key: %q, %v", got, err)
				}
				w, err = oldCodec.Encode("old", "alice", "")
				if err != nil {
					t.Fatal(err)
				}
				if got, err := c.Decode(w, "alice", ""); err != nil || got != "old" {
					t.Fatalf("previous key: %q, %v", got, err)
				}
				if _, err := c.Decode(w, "bob", ""); !errors.Is(err, ErrStateInvalid) {
					t.Fatalf("previous key, other subject: %v", err)
				}
			}
		})
	}
}

// TestEncodeRefusesHugeStateBeforeEncoding checks that a state too large
// for MaxBytes is refused up front.
func TestEncodeRefusesHugeStateBeforeEncoding(t *testing.T) {
	c, err := NewRequestStateCodec(RequestStateSecurity{Keys: mustKeyring(t, fixedKey(21)), MaxBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Encode(string(bytes.Repeat([]byte("a"), 1<<20)), "s", ""); !errors.Is(err, ErrStateTooLarge) {
		t.Fatalf("err = %v, want ErrStateTooLarge", err)
	}
	// Escapes make the payload grow beyond the estimate; still exact.
	quoted := string(bytes.Repeat([]byte{'"', 1}, 40))
	w, err := c.Encode(quoted, "s", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Decode(w, "s", ""); err != nil || got != quoted {
		t.Fatalf("Decode = %q, %v", got, err)
	}
}

// TestStateBindTagCacheSurvivesReusedSubjectMemory checks that the bind
// tag cache keys on a copy of the material: a subject string whose bytes
// are later reused for another subject (as zero-copy HTTP frameworks do)
// must not make the first subject's state open for the second.
func TestStateBindTagCacheSurvivesReusedSubjectMemory(t *testing.T) {
	for _, mode := range []RequestStateMode{Signed, Encrypted} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			c, err := NewRequestStateCodec(RequestStateSecurity{Keys: mustKeyring(t, fixedKey(21)), Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			buf := []byte("alice")
			subject := unsafe.String(&buf[0], len(buf))
			w, err := c.Encode("for alice", subject, "")
			if err != nil {
				t.Fatal(err)
			}
			if got, err := c.Decode(w, subject, ""); err != nil || got != "for alice" {
				t.Fatalf("alice: %q, %v", got, err)
			}
			copy(buf, "mallo") // the same memory now reads "mallo"
			if _, err := c.Decode(w, subject, ""); !errors.Is(err, ErrStateInvalid) {
				t.Fatalf("alice's state opened for %q: %v", subject, err)
			}
		})
	}
}

// TestStateBindingSubjectWithNULIsNotAnotherSubject checks that, under
// BindSubject, a subject is never confused with a prefix of itself cut at
// a NUL byte, whichever is cached first.
func TestStateBindingSubjectWithNULIsNotAnotherSubject(t *testing.T) {
	c, err := NewRequestStateCodec(RequestStateSecurity{Keys: mustKeyring(t, fixedKey(21)), Binding: BindSubject})
	if err != nil {
		t.Fatal(err)
	}
	long, short := "a\x00b", "a"
	for _, order := range [][2]string{{long, short}, {short, long}} {
		w, err := c.Encode("x", order[0], "b")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Decode(w, order[0], "b"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Decode(w, order[1], "b"); !errors.Is(err, ErrStateInvalid) {
			t.Fatalf("state for %q opened for %q: %v", order[0], order[1], err)
		}
	}
}

// TestZeroCursorIssuerVerifyRefusesWithoutPanic checks that a CursorIssuer
// not made by NewCursorIssuer has no key and refuses every call with
// ErrNoKey (not a misleading "truncated" or "other session"), rather than
// panicking on its missing scratch pool.
func TestZeroCursorIssuerVerifyRefusesWithoutPanic(t *testing.T) {
	c, err := testPoolIssuer(t).Issue(CursorPayload{CursorScope: CursorScope{ToolID: "t", CallerID: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	var zero CursorIssuer
	for _, tok := range []string{c, "AAAA", "", strings.Repeat("A", MaxCursorBytes+1)} {
		if p, err := zero.Verify(tok, CursorScope{ToolID: "t", CallerID: "c"}); !errors.Is(err, ErrNoKey) || Reason(err) == "" || p.State != nil {
			t.Fatalf("zero.Verify = %v, %v; want ErrNoKey with a reason", p, err)
		}
	}
	if tok, err := zero.Issue(CursorPayload{}); !errors.Is(err, ErrNoKey) || tok != "" || Reason(err) == "" {
		t.Fatalf("zero.Issue = %q, %v; want ErrNoKey with a reason", tok, err)
	}
}
