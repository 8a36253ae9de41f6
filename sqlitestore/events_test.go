package sqlitestore

import "testing"

func TestEventKindString(t *testing.T) {
	for k, want := range map[EventKind]string{
		0:                 "",
		EventRiskAccepted: "risk_accepted",
		EventRefusing:     "refusing",
		EventServing:      "serving",
		numEventKinds:     "",
		255:               "",
	} {
		if got := k.String(); got != want {
			t.Errorf("EventKind(%d).String() = %q; want %q", k, got, want)
		}
	}
}
