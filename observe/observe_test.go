package observe

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestRefusalReasonSetIsUniqueAndNamed(t *testing.T) {
	all := RefusalReasons()
	if len(all) != 103 {
		t.Fatalf("RefusalReasons has %d values, want 103 (adding one is an API review)", len(all))
	}
	seen := map[RefusalReason]bool{}
	for _, r := range all {
		s := r.String()
		if s == "" || s != string(r) || seen[r] {
			t.Errorf("reason %q has empty, other or duplicate String %q", string(r), s)
		}
		seen[r] = true
		if got, ok := ParseReason(s); !ok || got != r {
			t.Errorf("ParseReason(%q) = %v, %v; want %v", s, got, ok, r)
		}
	}
	all[0] = ReasonNone
	if RefusalReasons()[0] != ReasonEmpty {
		t.Error("RefusalReasons returned the package's own array: a caller changed the set")
	}
	for _, tc := range []struct {
		name string
		r    RefusalReason
	}{{"none", ReasonNone}, {"not in the set", RefusalReason("token abc.def")}, {"other case", RefusalReason("Signature Mismatch")}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.r.String() != "" {
				t.Errorf("String = %q: a value outside the set must print as empty (a bounded label)", tc.r.String())
			}
		})
	}
	for _, text := range []string{"", "no such reason", "Signature Mismatch"} {
		if r, ok := ParseReason(text); ok || r != ReasonNone {
			t.Errorf("ParseReason(%q) = %v, %v; want ReasonNone, false", text, r, ok)
		}
	}
}

// TestRefusalReasonPrintsItsWordsHoweverConverted pins that a reason
// cannot print wrong: its kind is string (so string(r) is its text, never
// the one character a uint8 converts to), and every fmt verb a log line
// uses prints the words.
func TestRefusalReasonPrintsItsWordsHoweverConverted(t *testing.T) {
	if k := reflect.TypeOf(ReasonBadBase64).Kind(); k != reflect.String {
		t.Fatalf("RefusalReason is of kind %v: string(r) would not be its text", k)
	}
	for _, r := range []RefusalReason{ReasonBadBase64, ReasonMACMismatch, ReasonWebhookSignatureMismatch, ReasonIdempotencyMismatch} {
		t.Run(r.String(), func(t *testing.T) {
			want := r.String()
			for _, tc := range []struct{ how, got string }{
				{"string(r)", string(r)},
				{"%s", strings.TrimPrefix(fmt.Sprintf("reason %s", r), "reason ")},
				{"%v", strings.TrimPrefix(fmt.Sprintf("reason %v", r), "reason ")},
				{"Sprint", fmt.Sprint(r)},
				{"%q", strings.Trim(fmt.Sprintf("%q", r), `"`)},
			} {
				if tc.got != want {
					t.Errorf("%s = %q, want %q", tc.how, tc.got, want)
				}
			}
		})
	}
}

// TestSetValuesAreStable pins the number and String of values that metric
// labels and dashboards depend on: a renumbering or a rename fails here.
func TestSetValuesAreStable(t *testing.T) {
	for _, tc := range []struct {
		n    int
		got  string
		want string
	}{
		{int(KindCursor), KindCursor.String(), "cursor"}, {int(KindRequestState), KindRequestState.String(), "request_state"},
		{int(KindOneTime), KindOneTime.String(), "one_time"}, {int(KindExchange), KindExchange.String(), "exchange"},
		{int(KindWebhook), KindWebhook.String(), "webhook"},
		{int(KindIdempotency), KindIdempotency.String(), "idempotency"},
		{int(OutcomeIssued), OutcomeIssued.String(), "issued"}, {int(OutcomeVerified), OutcomeVerified.String(), "verified"},
		{int(OutcomeRefused), OutcomeRefused.String(), "refused"}, {int(OutcomeDuplicate), OutcomeDuplicate.String(), "duplicate"},
		{int(OutcomeStoreFailure), OutcomeStoreFailure.String(), "store_failure"},
		{int(OutcomeInProgress), OutcomeInProgress.String(), "in_progress"},
		{int(OutcomeProcessed), OutcomeProcessed.String(), "processed"},
		{int(OutcomeReleased), OutcomeReleased.String(), "released"},
		{int(OutcomeRotateKey), OutcomeRotateKey.String(), "rotate_key"},
		{0, string(ReasonEmpty), "empty"},
		{0, string(ReasonMACMismatch), "mac mismatch"},
		{0, string(ReasonArgsMarshal), "value cannot be marshalled as JSON"},
		{0, string(ReasonWebhookBodyTooLarge), "body over cap"},
		{0, string(ReasonWebhookSignatureMismatch), "signature mismatch"},
		{0, string(ReasonWebhookLeaseLost), "lease lost: another attempt took the delivery after the lease expired"},
		{0, string(ReasonIdempotencyKeyMissing), "idempotency key header missing"},
		{0, string(ReasonIdempotencyMismatch), "key reused with a different request"},
		{0, string(ReasonIdempotencyLeaseLost), "lease lost: another attempt took the key after the lease expired"},
	} {
		if tc.got != tc.want {
			t.Errorf("value %d: String = %q, want %q", tc.n, tc.got, tc.want)
		}
	}
	for _, tc := range []struct{ got, want int }{
		{int(KindWebhook), 5}, {int(KindIdempotency), 6}, {int(OutcomeStoreFailure), 5}, {int(OutcomeInProgress), 6},
		{int(OutcomeProcessed), 7}, {int(OutcomeReleased), 8}, {int(OutcomeRotateKey), 9},
	} {
		if tc.got != tc.want {
			t.Errorf("value %d, want %d: a value was renumbered", tc.got, tc.want)
		}
	}
	if TokenKind(99).String() != "" || numKinds.String() != "" || Outcome(99).String() != "" || numOutcomes.String() != "" {
		t.Error("values outside the sets must print as empty")
	}
	if k := TokenKinds(); len(k) != int(numKinds)-1 || k[0] != KindCursor || k[len(k)-1] != KindIdempotency {
		t.Errorf("TokenKinds = %v", k)
	}
	if o := Outcomes(); len(o) != int(numOutcomes)-1 || o[0] != OutcomeIssued || o[len(o)-1] != OutcomeRotateKey {
		t.Errorf("Outcomes = %v", o)
	}
}

func TestKeyAtNamesEveryPosition(t *testing.T) {
	for _, tc := range []struct {
		i    int
		want string
		prev int
	}{
		{-5, "none", 0}, {-1, "none", 0}, {0, "primary", 0}, {1, "previous 1", 1}, {3, "previous 3", 3},
		{253, "previous 253", 253}, {254, "previous 254", 254}, {1000, "previous 254", 254},
	} {
		p := KeyAt(tc.i)
		if p.String() != tc.want || p.Previous() != tc.prev {
			t.Errorf("KeyAt(%d) = %q previous %d, want %q previous %d", tc.i, p, p.Previous(), tc.want, tc.prev)
		}
	}
	if KeyAt(-1) != KeyNone || KeyAt(0) != KeyPrimary {
		t.Error("KeyAt(-1) must be KeyNone and KeyAt(0) KeyPrimary")
	}
}

type recorder struct{ got []Event }

func (r *recorder) Observe(e Event) { r.got = append(r.got, e) }

func TestMultiFansOutInOrderAndDropsNil(t *testing.T) {
	if Multi() != nil || Multi(nil, nil) != nil {
		t.Fatal("no observer must be nil (zero cost)")
	}
	a := &recorder{}
	if Multi(nil, a) != Observer(a) {
		t.Error("a single observer is not returned as is")
	}
	var order []string
	first := ObserverFunc(func(Event) { order = append(order, "first") })
	second := ObserverFunc(func(Event) { order = append(order, "second") })
	e := Event{Kind: KindWebhook, Outcome: OutcomeVerified, Key: KeyPrimary}
	Multi(first, nil, a, second).Observe(e)
	if len(a.got) != 1 || a.got[0] != e {
		t.Errorf("events %+v, want one %+v", a.got, e)
	}
	if len(order) != 2 || order[0] != "first" || order[1] != "second" {
		t.Errorf("order %v", order)
	}
}
