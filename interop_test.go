package ctoken

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"
)

// interopFile is testdata/interop/mcpd-request-state.json: request states
// made by the reference D implementation itself (see the README there).
type interopFile struct {
	About   string   `json:"about"`
	Now     int64    `json:"now"`
	Exp     int64    `json:"exp"`
	Keys    []string `json:"keys"`
	Vectors []struct {
		Key     int    `json:"key"`
		Mode    string `json:"mode"`
		Binding string `json:"binding"`
		Subject string `json:"subject"`
		Tool    string `json:"tool"`
		State   string `json:"state"`
		Wire    string `json:"wire"`
	} `json:"vectors"`
}

// TestInteropDecodesEveryReferenceState decodes every request state the
// reference D implementation made, as the file's "about" says: the state
// for its own subject and tool at now (and at exp), under a ring holding
// its key alone or behind the other key; ErrStateInvalid for another
// subject (bindings subject and subjectAndTool) or another tool
// (subjectAndTool), while the bindings that do not check them still
// accept; ErrStateExpired after exp.
func TestInteropDecodesEveryReferenceState(t *testing.T) {
	raw, err := os.ReadFile("testdata/interop/mcpd-request-state.json")
	if err != nil {
		t.Fatal(err)
	}
	var f interopFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) != 424 || len(f.Keys) != 2 || f.Exp <= f.Now {
		t.Fatalf("unexpected file: %d vectors, %d keys, now %d, exp %d", len(f.Vectors), len(f.Keys), f.Now, f.Exp)
	}
	keys := make([][]byte, len(f.Keys))
	for i, k := range f.Keys {
		if keys[i], err = hex.DecodeString(k); err != nil {
			t.Fatal(err)
		}
	}
	bindings := map[string]RequestStateBinding{"subject": BindSubject, "subjectAndTool": BindSubjectAndTool, "none": BindNone}
	modes := map[string]RequestStateMode{"signed": Signed, "encrypted": Encrypted}
	seen := map[[2]string]int{}
	for i, v := range f.Vectors {
		binding, ok := bindings[v.Binding]
		mode, ok2 := modes[v.Mode]
		if !ok || !ok2 || v.Key < 0 || v.Key >= len(keys) {
			t.Fatalf("vector %d: mode %q, binding %q, key %d", i, v.Mode, v.Binding, v.Key)
		}
		seen[[2]string{v.Mode, v.Binding}]++
		codec := func(now int64, ring ...[]byte) *RequestStateCodec {
			return newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, ring[0], ring[1:]...), Mode: mode, Binding: binding, Now: fixedClock(time.Unix(now, 0))})
		}
		own := keys[v.Key]
		other := keys[1-v.Key]
		expect := func(what string, c *RequestStateCodec, subject, tool string, want error) {
			t.Helper()
			s, err := c.Decode(v.Wire, subject, tool)
			switch {
			case want == nil && (err != nil || s != v.State):
				t.Errorf("vector %d (%s, %s, key %d, subject %q, tool %q) %s: %q, %v; want %q",
					i, v.Mode, v.Binding, v.Key, v.Subject, v.Tool, what, s, err, v.State)
			case want != nil && (!errors.Is(err, want) || s != ""):
				t.Errorf("vector %d (%s, %s, key %d, subject %q, tool %q) %s: %q, %v; want %v",
					i, v.Mode, v.Binding, v.Key, v.Subject, v.Tool, what, s, err, want)
			}
		}
		atNow := codec(f.Now, own)
		expect("own subject and tool", atNow, v.Subject, v.Tool, nil)
		expect("behind the other key", codec(f.Now, other, own), v.Subject, v.Tool, nil)
		expect("at exp", codec(f.Exp, own), v.Subject, v.Tool, nil)
		expect("after exp", codec(f.Exp+1, own), v.Subject, v.Tool, ErrStateExpired)
		expect("other key only", codec(f.Now, other), v.Subject, v.Tool, ErrStateInvalid)

		otherSubject := "mallory"
		if v.Subject == otherSubject {
			otherSubject = "alice"
		}
		otherTool := MCPTarget("tools/call", "delete")
		var subjectErr, toolErr error
		switch binding {
		case BindSubject:
			subjectErr = ErrStateInvalid
		case BindSubjectAndTool:
			subjectErr, toolErr = ErrStateInvalid, ErrStateInvalid
		}
		expect("another subject", atNow, otherSubject, v.Tool, subjectErr)
		if v.Subject != "" {
			expect("the empty subject", atNow, "", v.Tool, subjectErr)
		}
		expect("another tool", atNow, v.Subject, otherTool, toolErr)
		expect("no tool", atNow, v.Subject, "", toolErr)
		flipped := Signed
		if mode == Signed {
			flipped = Encrypted
		}
		otherMode := newTestCodec(t, RequestStateSecurity{Keys: mustKeyring(t, own), Mode: flipped, Binding: binding, Now: fixedClock(time.Unix(f.Now, 0))})
		expect("by the other mode", otherMode, v.Subject, v.Tool, ErrStateInvalid)
	}
	// Both modes and every binding are covered.
	for _, m := range []string{"signed", "encrypted"} {
		for b := range bindings {
			if seen[[2]string{m, b}] == 0 {
				t.Errorf("no %s vector with binding %s", m, b)
			}
		}
	}
}
