package replay

import "testing"

// TestEventKindString pins the kinds' labels: the stores' log lines carry
// them, and dashboards count them.
func TestEventKindString(t *testing.T) {
	want := map[EventKind]string{
		0:                   "",
		EventRiskAccepted:   "risk_accepted",
		EventRefusing:       "refusing",
		EventServing:        "serving",
		EventSwept:          "swept",
		EventFenceRaised:    "fence_raised",
		EventFenced:         "fenced",
		EventClockSkew:      "clock_skew",
		EventNotDurable:     "not_durable",
		EventLeaseReleased:  "lease_released",
		EventLeaseAbandoned: "lease_abandoned",
		EventClaimResent:    "claim_resent",
		numEventKinds:       "",
		255:                 "",
	}
	if len(want) != int(numEventKinds)+2 {
		t.Fatalf("the test names %d kinds; the set has %d", len(want)-3, numEventKinds-1)
	}
	for k, w := range want {
		if got := k.String(); got != w {
			t.Errorf("EventKind(%d).String() = %q; want %q", k, got, w)
		}
	}
}
