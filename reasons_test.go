package ctoken

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// TestReasonOfMapsEveryRejection pins every rejection value of the package
// to its RefusalReason (and its String to the error's reason), and that a
// configuration error or another package's error has none. The lookup's
// own cases (unhashable errors, wrapping) are internal/reason's.
func TestReasonOfMapsEveryRejection(t *testing.T) {
	table := []struct {
		err  error
		want observe.RefusalReason
	}{
		{errCursorEmpty, observe.ReasonEmpty},
		{errCursorOversize, observe.ReasonCursorOversize},
		{errCursorBase64, observe.ReasonNotBase64URL},
		{errCursorTruncated, observe.ReasonTruncated},
		{errCursorMalformed, observe.ReasonCursorMalformed},
		{errCursorMAC, observe.ReasonMACMismatch},
		{errCursorFuture, observe.ReasonIssuedInFuture},
		{errCursorSession, observe.ReasonOtherSession},
		{errCursorUnknownKey, observe.ReasonUnknownKey},
		{errCursorUnknownKeyRestart, observe.ReasonUnknownKey},
		{errCursorAge, observe.ReasonOlderThanTTL},
		{errCursorStateType, observe.ReasonCursorStateType},
		{errCursorStateLarge, observe.ReasonOpaqueStateTooBig},
		{errCursorLarge, observe.ReasonCursorTooLarge},
		{errCursorScope, observe.ReasonCursorWrongScope},
		{errCursorSealed, observe.ReasonCursorSealedOpen},
		{errStateEmpty, observe.ReasonEmpty},
		{errStateOversize, observe.ReasonStateOversize},
		{errStateMode, observe.ReasonUnknownPrefix},
		{errStateBase64, observe.ReasonNotBase64URL},
		{errStateFraming, observe.ReasonFraming},
		{errStateMAC, observe.ReasonMACMismatch},
		{errStateOpen, observe.ReasonDecryption},
		{errStateMalformed, observe.ReasonMalformed},
		{errStateBinding, observe.ReasonWrongBinding},
		{errStateSubjectAmbiguous, observe.ReasonSubjectAmbiguous},
		{errStateExpired, observe.ReasonPastExp},
		{errStateJSON, observe.ReasonStateType},
		{errStateNotUTF8, observe.ReasonStateNotUTF8},
		{errStateSubjectNUL, observe.ReasonSubjectNUL},
		{errStateTooLarge, observe.ReasonStateTooLarge},
		{errStateReplayed, observe.ReasonAlreadyUsed},
		{errOneTimeOversize, observe.ReasonOneTimeOversize},
		{errOneTimeFormat, observe.ReasonUnknownFormat},
		{errOneTimeBase64, observe.ReasonBadBase64},
		{errOneTimeTruncated, observe.ReasonTruncated},
		{errOneTimeMAC, observe.ReasonMACMismatch},
		{errOneTimeUnknownKey, observe.ReasonUnknownKey},
		{errOneTimeMalformed, observe.ReasonMalformed},
		{errOneTimeFuture, observe.ReasonIssuedInFuture},
		{errOneTimeExpired, observe.ReasonExpired},
		{errOneTimeClaims, observe.ReasonClaimsMismatch},
		{errOneTimeRedeemed, observe.ReasonAlreadyRedeemed},
		{errOneTimePurpose, observe.ReasonOtherPurpose},
		{errOneTimeTooLarge, observe.ReasonClaimsTooLarge},
		{errArgsSyntax, observe.ReasonArgsNotJSON},
		{errArgsUTF8, observe.ReasonArgsUTF8},
		{errArgsSurrogate, observe.ReasonArgsSurrogate},
		{errArgsDuplicate, observe.ReasonArgsDuplicate},
		{errArgsDepth, observe.ReasonArgsDepth},
		{errArgsRange, observe.ReasonArgsRange},
		{errArgsInexact, observe.ReasonArgsInexact},
		{errArgsReplaced, observe.ReasonArgsInvalidUTF8Go},
		{errArgsMarshal, observe.ReasonArgsMarshal},
		// Wrapped errors, built per call: the general path.
		{reason.Wrap(errStateStore, "replay store failed", errors.New("down")), observe.ReasonStoreFailed},
	}
	if len(table)-1 != rejectionReasons.Len() {
		t.Errorf("table has %d rejections, rejectionReasons %d: keep them in step", len(table)-1, rejectionReasons.Len())
	}
	for _, tc := range table {
		t.Run(tc.want.String(), func(t *testing.T) {
			got := Reason(tc.err)
			if got != tc.want {
				t.Errorf("Reason(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if got.String() != reasonText(tc.err) {
				t.Errorf("Reason(%v).String() = %q, Reason = %q", tc.err, got, reasonText(tc.err))
			}
		})
	}
	_, cfgErr := NewCursorIssuer(CursorConfig{})
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"nil", nil}, {"config", cfgErr}, {"state config", errStateConfTTL}, {"no key", errCursorNoKey},
		{"bare sentinel", ErrCursorInvalid}, {"another package", strconv.ErrSyntax},
	} {
		t.Run("none for "+tc.name, func(t *testing.T) {
			if r := Reason(tc.err); r != observe.ReasonNone {
				t.Errorf("Reason(%v) = %v, want observe.ReasonNone", tc.err, r)
			}
		})
	}
}

// TestRootReExportsTheObserveSet checks that the root package's names are
// the observe package's values (the aliases and constants), and the key
// position helper the issuers use.
func TestRootReExportsTheObserveSet(t *testing.T) {
	if !slices.Equal(observe.RefusalReasons(), observe.RefusalReasons()) || !slices.Equal(observe.TokenKinds(), observe.TokenKinds()) ||
		!slices.Equal(observe.Outcomes(), observe.Outcomes()) {
		t.Error("RefusalReasons, TokenKinds or Outcomes differ from package observe's")
	}
	for _, tc := range []struct{ got, want string }{
		{observe.KindCursor.String(), "cursor"}, {observe.KindRequestState.String(), "request_state"},
		{observe.KindOneTime.String(), "one_time"}, {observe.KindExchange.String(), "exchange"}, {observe.KindWebhook.String(), "webhook"},
		{observe.KindIdempotency.String(), "idempotency"}, {observe.OutcomeReleased.String(), "released"},
		{observe.OutcomeIssued.String(), "issued"}, {observe.OutcomeVerified.String(), "verified"}, {observe.OutcomeRefused.String(), "refused"},
		{observe.OutcomeDuplicate.String(), "duplicate"}, {observe.OutcomeStoreFailure.String(), "store_failure"},
		{observe.OutcomeInProgress.String(), "in_progress"}, {observe.OutcomeProcessed.String(), "processed"},
		{observe.KeyNone.String(), "none"}, {observe.KeyPrimary.String(), "primary"}, {observe.KeyAt(1).String(), "previous 1"},
		{observe.KeyAt(3).String(), "previous 3"}, {observe.KeyAt(-1).String(), "none"}, {observe.KeyAt(1000).String(), "previous 254"},
		{observe.ReasonMACMismatch.String(), "mac mismatch"}, {observe.ReasonWebhookSignatureMismatch.String(), "signature mismatch"},
	} {
		if tc.got != tc.want {
			t.Errorf("String = %q, want %q", tc.got, tc.want)
		}
	}
}

// configSentinels are the sentinels whose reasons name a configuration
// fault (a field, a variable, a key's position) rather than a token: they
// are outside the RefusalReason set by design.
// The webhook package's are ErrConfig, ErrNoSecret and ErrSecretInvalid.
var configSentinels = map[string]bool{
	"ErrConfig": true, "ErrNoKey": true, "ErrKeyTooShort": true, "ErrKeyInvalid": true,
	"ErrNoSecret": true, "ErrSecretInvalid": true,
}

// TestNoReasonOutsideTheSet scans every call that makes a rejection in the
// source of this package, of the webhook and idempotency packages and of
// the canonicalizer behind ArgsFingerprint (internal/jcs) (reject, reason.New,
// reason.Wrap, configError, keyError) and checks that its reason is a
// constant of the RefusalReason set, unless the sentinel is a configuration
// one. A new rejection with a new text fails here until it joins the set;
// a reason of the set that neither package produces fails too.
func TestNoReasonOutsideTheSet(t *testing.T) {
	var files []string
	for _, pattern := range []string{"*.go", "exchange/*.go", "webhook/*.go", "idempotency/*.go", "internal/jcs/*.go"} {
		got, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, got...)
	}
	fset := token.NewFileSet()
	produced := map[string]bool{}
	calls := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var sentinel string
			var why ast.Expr
			switch fn := callName(call.Fun); fn {
			case "reject", "reason.New", "reason.Wrap":
				sentinel = strings.TrimPrefix(exprName(call.Args[0]), "ctoken.")
				why = call.Args[1]
			case "configError":
				sentinel, why = "ErrConfig", call.Args[0]
			case "keyError":
				sentinel, why = "ErrKeyInvalid", nil // position-naming key errors
			default:
				return true
			}
			calls++
			pos := fset.Position(call.Pos())
			if configSentinels[sentinel] {
				return true
			}
			if sentinel == "sentinel" {
				// Inside the helpers reject and keyError, whose callers
				// are checked here.
				return true
			}
			lit, ok := why.(*ast.BasicLit)
			if !ok {
				t.Errorf("%s: rejection with sentinel %s has a non-constant reason", pos, sentinel)
				return true
			}
			s, _ := strconv.Unquote(lit.Value)
			produced[s] = true
			if _, ok := observe.ParseReason(s); !ok {
				t.Errorf("%s: reason %q (sentinel %s) is not in the observe.RefusalReason set", pos, s, sentinel)
			}
			return true
		})
	}
	if calls < 120 {
		t.Fatalf("found only %d rejection calls: the scan is broken", calls)
	}
	// Every reason of the set is produced somewhere: as a rejection's
	// text, or (exchange outcomes) by name.
	var src strings.Builder
	for _, name := range files {
		if !strings.HasSuffix(name, "_test.go") && name != "reasons.go" {
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	byName := map[observe.RefusalReason]string{
		observe.ReasonExchangeRequest: "ReasonExchangeRequest", observe.ReasonAuthorizeRefused: "ReasonAuthorizeRefused",
		observe.ReasonIssueFailed: "ReasonIssueFailed",
	}
	// Reasons no package gives any more, kept because the set is stable.
	retired := map[observe.RefusalReason]bool{
		observe.ReasonIdempotencyClientGone: true, // the client leaving no longer ends the handler's context (issue 45)
	}
	for _, r := range observe.RefusalReasons() {
		if produced[r.String()] {
			if retired[r] {
				t.Errorf("reason %q is retired but still produced", r)
			}
			continue
		}
		if retired[r] {
			continue
		}
		if name, ok := byName[r]; !ok || !strings.Contains(src.String(), "observe(observe."+name) {
			t.Errorf("reason %q is produced nowhere", r)
		}
	}
}

func callName(e ast.Expr) string {
	switch f := e.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		if x, ok := f.X.(*ast.Ident); ok {
			return x.Name + "." + f.Sel.Name
		}
	}
	return ""
}

func exprName(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return callName(e)
}
