package observe

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestRefusalReasonSetIsUniqueAndNamed(t *testing.T) {
	all := RefusalReasons()
	if len(all) != 104 {
		t.Fatalf("RefusalReasons has %d values, want 104 (adding one is an API review)", len(all))
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

// TestSetValuesAreStable pins the value and String of every label that
// metric labels and dashboards depend on: a rename fails here.
func TestSetValuesAreStable(t *testing.T) {
	for _, tc := range []struct{ value, label, want string }{
		{string(KindCursor), KindCursor.String(), "cursor"},
		{string(KindRequestState), KindRequestState.String(), "request_state"},
		{string(KindOneTime), KindOneTime.String(), "one_time"},
		{string(KindExchange), KindExchange.String(), "exchange"},
		{string(KindWebhook), KindWebhook.String(), "webhook"},
		{string(KindIdempotency), KindIdempotency.String(), "idempotency"},
		{string(OutcomeIssued), OutcomeIssued.String(), "issued"},
		{string(OutcomeVerified), OutcomeVerified.String(), "verified"},
		{string(OutcomeRefused), OutcomeRefused.String(), "refused"},
		{string(OutcomeDuplicate), OutcomeDuplicate.String(), "duplicate"},
		{string(OutcomeStoreFailure), OutcomeStoreFailure.String(), "store_failure"},
		{string(OutcomeInProgress), OutcomeInProgress.String(), "in_progress"},
		{string(OutcomeProcessed), OutcomeProcessed.String(), "processed"},
		{string(OutcomeReleased), OutcomeReleased.String(), "released"},
		{string(OutcomeRotateKey), OutcomeRotateKey.String(), "rotate_key"},
		{string(KeyPrimary), KeyPrimary.String(), "primary"},
		{string(KeyAt(2)), KeyAt(2).String(), "previous 2"},
		{string(ReasonEmpty), ReasonEmpty.String(), "empty"},
		{string(ReasonMACMismatch), ReasonMACMismatch.String(), "mac mismatch"},
		{string(ReasonArgsMarshal), ReasonArgsMarshal.String(), "value cannot be marshalled as JSON"},
		{string(ReasonWebhookBodyTooLarge), ReasonWebhookBodyTooLarge.String(), "body over cap"},
		{string(ReasonWebhookSignatureMismatch), ReasonWebhookSignatureMismatch.String(), "signature mismatch"},
		{string(ReasonWebhookLeaseLost), ReasonWebhookLeaseLost.String(), "lease lost: another attempt took the delivery after the lease expired"},
		{string(ReasonIdempotencyKeyMissing), ReasonIdempotencyKeyMissing.String(), "idempotency key header missing"},
		{string(ReasonIdempotencyMismatch), ReasonIdempotencyMismatch.String(), "key reused with a different request"},
		{string(ReasonIdempotencyLeaseLost), ReasonIdempotencyLeaseLost.String(), "lease lost: another attempt took the key after the lease expired"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if tc.value != tc.want || tc.label != tc.want {
				t.Errorf("value %q, String %q, want both %q", tc.value, tc.label, tc.want)
			}
		})
	}
	if k := TokenKinds(); len(k) != 6 || k[0] != KindCursor || k[len(k)-1] != KindIdempotency {
		t.Errorf("TokenKinds = %v", k)
	}
	if o := Outcomes(); len(o) != 9 || o[0] != OutcomeIssued || o[len(o)-1] != OutcomeRotateKey {
		t.Errorf("Outcomes = %v", o)
	}
}

// TestLabelsOutsideTheSetPrintEmpty pins that a value converted from any
// other string prints as "" through String, so a metric label stays
// bounded whatever a caller builds.
func TestLabelsOutsideTheSetPrintEmpty(t *testing.T) {
	for _, tc := range []struct{ name, got string }{
		{"kind zero", TokenKind("").String()},
		{"kind other", TokenKind("Cursor").String()},
		{"outcome zero", Outcome("").String()},
		{"outcome other", Outcome("token abc.def").String()},
		{"key other", KeyPosition("secondary").String()},
		{"key previous 0", KeyPosition("previous 0").String()},
		{"key previous 255", KeyPosition("previous 255").String()},
		{"key previous +1", KeyPosition("previous +1").String()},
		{"key previous 01", KeyPosition("previous 01").String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != "" {
				t.Errorf("String = %q, want empty", tc.got)
			}
		})
	}
}

// TestLabelsPrintTheirWordsHoweverConverted pins that no label of an
// Event prints wrong: each type's kind is string (so string(x) is its
// label, never the control character a uint8 converts to), and every fmt
// verb a log line uses prints the words. KeyNone is the one value whose
// string is not its label: it is "" (String says "none").
func TestLabelsPrintTheirWordsHoweverConverted(t *testing.T) {
	for _, v := range []any{KindCursor, OutcomeRefused, KeyPrimary, ReasonBadBase64} {
		if k := reflect.TypeOf(v).Kind(); k != reflect.String {
			t.Errorf("%T is of kind %v: string(x) would not be its label", v, k)
		}
	}
	for _, tc := range []struct {
		name    string
		v       fmt.Stringer
		convert string
	}{
		{"kind", KindRequestState, string(KindRequestState)},
		{"outcome", OutcomeStoreFailure, string(OutcomeStoreFailure)},
		{"key primary", KeyPrimary, string(KeyPrimary)},
		{"key previous", KeyAt(3), string(KeyAt(3))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.v.String()
			for _, p := range []struct{ how, got string }{
				{"string(x)", tc.convert},
				{"%s", strings.TrimPrefix(fmt.Sprintf("label %s", tc.v), "label ")},
				{"%v", strings.TrimPrefix(fmt.Sprintf("label %v", tc.v), "label ")},
				{"Sprint", fmt.Sprint(tc.v)},
			} {
				if want == "" || p.got != want {
					t.Errorf("%s = %q, want %q", p.how, p.got, want)
				}
			}
		})
	}
	if string(KeyNone) != "" || KeyNone.String() != "none" || fmt.Sprint(KeyNone) != "none" {
		t.Errorf("KeyNone: string %q, String %q, Sprint %q", string(KeyNone), KeyNone.String(), fmt.Sprint(KeyNone))
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

// TestKeyPositionPreviousIsZeroOutsideKeyAt pins that Previous answers 0,
// and never panics, for a value KeyAt does not return, however far from the
// set: a negative N (which would index below the table), a zero N, an N
// past 254 or past the int range, and text that is no number.
func TestKeyPositionPreviousIsZeroOutsideKeyAt(t *testing.T) {
	for _, p := range []KeyPosition{
		"previous -1", "previous -2", "previous -255", "-2", "previous -9223372036854775808",
		"previous -99999999999999999999", "previous 0", "previous 255",
		"previous 99999999999999999999", "previous x", "previous ", "primary", KeyNone,
	} {
		t.Run(string(p), func(t *testing.T) {
			if n := p.Previous(); n != 0 {
				t.Errorf("Previous = %d, want 0", n)
			}
		})
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
