package mcptoken

import (
	"errors"
	"strings"
	"testing"
)

func TestInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"cannot answer says what the server saw", cannotAnswerSaysWhatTheServerSaw},
		{"refusal data lists only required", inputRefusalDataListsOnlyRequired},
		{"speaks input requests from the version on", speaksInputRequestsFromTheVersionOn},
	} {
		t.Run(tc.name, tc.test)
	}
}

// CannotAnswer lists only the required capabilities the client lacks, and
// its message says what the server saw.
func cannotAnswerSaysWhatTheServerSaw(t *testing.T) {
	for _, tc := range []struct {
		name     string
		version  string
		declared *Declared
		needs    []string
		required []string // nil: no refusal
		say      []string
		notSay   []string
	}{
		{"declared it", "2025-11-25", &Declared{Elicitation: true}, []string{CapElicitation}, nil, nil, nil},
		{"declared none", "2025-11-25", &Declared{Roots: true}, []string{CapElicitation},
			[]string{CapElicitation},
			[]string{"needs the elicitation capability", "(MCP 2025-11-25) declared no elicitation capability", "MCP 2026-07-28"},
			[]string{"stateless", "roots"}},
		{"no declaration seen", "2025-11-25", nil, []string{CapElicitation, CapElicitation},
			[]string{CapElicitation},
			[]string{"over stateless HTTP the server cannot see a declaration", "(MCP 2025-11-25)", "on a stateful connection"},
			[]string{"declared no"}},
		{"two missing, sorted once", "", &Declared{Elicitation: true}, []string{CapSampling, CapRoots, CapElicitation, CapSampling},
			[]string{CapRoots, CapSampling},
			[]string{"needs the roots and sampling capabilities", "of an unknown version", "declared no roots or sampling capability"},
			[]string{"elicitation"}},
		{"nothing needed", "2025-11-25", nil, nil, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CannotAnswer(tc.version, tc.declared, tc.needs...)
			if tc.required == nil {
				if r != nil {
					t.Fatalf("refused: %v", r)
				}
				return
			}
			if r == nil || strings.Join(r.Required, ",") != strings.Join(tc.required, ",") {
				t.Fatalf("refusal %+v, want required %v", r, tc.required)
			}
			msg := r.Error()
			if !errors.Is(r, ErrClientCannotAnswer) || !strings.HasPrefix(msg, ErrClientCannotAnswer.Error()+": ") {
				t.Errorf("not ErrClientCannotAnswer: %q", msg)
			}
			for _, s := range tc.say {
				if !strings.Contains(msg, s) {
					t.Errorf("message lacks %q: %q", s, msg)
				}
			}
			for _, s := range tc.notSay {
				if strings.Contains(msg, s) {
					t.Errorf("message says %q: %q", s, msg)
				}
			}
		})
	}
}

// The -32021 data lists exactly the required capabilities.
func inputRefusalDataListsOnlyRequired(t *testing.T) {
	for _, tc := range []struct {
		needs []string
		want  string
	}{
		{[]string{CapElicitation}, `{"requiredCapabilities":{"elicitation":{}}}`},
		{[]string{CapSampling, CapElicitation}, `{"requiredCapabilities":{"elicitation":{},"sampling":{}}}`},
	} {
		if got := string(CannotAnswer("2025-11-25", nil, tc.needs...).Data()); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.needs, got, tc.want)
		}
	}
}

func speaksInputRequestsFromTheVersionOn(t *testing.T) {
	for v, want := range map[string]bool{"": false, "2025-06-18": false, "2025-11-25": false, "2026-07-28": true, "2027-01-01": true} {
		if SpeaksInputRequests(v) != want {
			t.Errorf("%q: %v", v, !want)
		}
	}
}
