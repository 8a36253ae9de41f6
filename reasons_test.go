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
// to its RefusalReason, and checks that the typed reason and Reason agree.
func TestReasonOfMapsEveryRejection(t *testing.T) {
	table := []struct {
		err  error
		want RefusalReason
	}{
		{errCursorEmpty, ReasonEmpty},
		{errCursorOversize, ReasonCursorOversize},
		{errCursorBase64, ReasonNotBase64URL},
		{errCursorTruncated, ReasonTruncated},
		{errCursorMalformed, ReasonCursorMalformed},
		{errCursorFuture, ReasonIssuedInFuture},
		{errCursorSession, ReasonOtherSession},
		{errCursorUnknownKey, ReasonUnknownKey},
		{errCursorUnknownKeyRestart, ReasonUnknownKey},
		{errCursorAge, ReasonOlderThanTTL},
		{errCursorStateType, ReasonCursorStateType},
		{errCursorStateLarge, ReasonOpaqueStateTooBig},
		{errCursorLarge, ReasonCursorTooLarge},
		{errCursorScope, ReasonCursorWrongScope},
		{errCursorSealed, ReasonCursorSealedOpen},
		{errStateEmpty, ReasonEmpty},
		{errStateOversize, ReasonStateOversize},
		{errStateMode, ReasonUnknownPrefix},
		{errStateBase64, ReasonNotBase64URL},
		{errStateFraming, ReasonFraming},
		{errStateMAC, ReasonMACMismatch},
		{errStateOpen, ReasonDecryption},
		{errStateMalformed, ReasonMalformed},
		{errStateBinding, ReasonWrongBinding},
		{errStateSubjectAmbiguous, ReasonSubjectAmbiguous},
		{errStateExpired, ReasonPastExp},
		{errStateJSON, ReasonStateType},
		{errStateNotUTF8, ReasonStateNotUTF8},
		{errStateSubjectNUL, ReasonSubjectNUL},
		{errStateTooLarge, ReasonStateTooLarge},
		{errStateReplayed, ReasonAlreadyUsed},
		{errOneTimeOversize, ReasonOneTimeOversize},
		{errOneTimeFormat, ReasonUnknownFormat},
		{errOneTimeBase64, ReasonBadBase64},
		{errOneTimeTruncated, ReasonTruncated},
		{errOneTimeMAC, ReasonMACMismatch},
		{errOneTimeUnknownKey, observe.ReasonUnknownKey},
		{errOneTimeMalformed, ReasonMalformed},
		{errOneTimeFuture, ReasonIssuedInFuture},
		{errOneTimeExpired, ReasonExpired},
		{errOneTimeClaims, ReasonClaimsMismatch},
		{errOneTimeRedeemed, ReasonAlreadyRedeemed},
		{errOneTimePurpose, ReasonOtherPurpose},
		{errOneTimeTooLarge, ReasonClaimsTooLarge},
		{errArgsSyntax, ReasonArgsNotJSON},
		{errArgsUTF8, ReasonArgsUTF8},
		{errArgsSurrogate, ReasonArgsSurrogate},
		{errArgsDuplicate, ReasonArgsDuplicate},
		{errArgsDepth, ReasonArgsDepth},
		{errArgsRange, ReasonArgsRange},
		{errArgsInexact, ReasonArgsInexact},
		{errArgsReplaced, ReasonArgsInvalidUTF8Go},
		{errArgsMarshal, ReasonArgsMarshal},
		// Wrapped errors, built per call: the general path.
		{reason.Wrap(errStateStore, "replay store failed", errors.New("down")), ReasonStoreFailed},
	}
	if len(table)-1 != len(rejectionReasons) {
		t.Errorf("table has %d rejections, rejectionReasons %d: keep them in step", len(table)-1, len(rejectionReasons))
	}
	for _, tc := range table {
		got := ReasonOf(tc.err)
		if got != tc.want {
			t.Errorf("ReasonOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
		if got.String() != Reason(tc.err) {
			t.Errorf("ReasonOf(%v).String() = %q, Reason = %q", tc.err, got, Reason(tc.err))
		}
	}
}

func TestReasonOfIsNoneForConfigurationAndForeignErrors(t *testing.T) {
	_, cfgErr := NewCursorIssuer(CursorConfig{})
	for _, err := range []error{nil, cfgErr, errStateConfTTL, errCursorNoKey, ErrCursorInvalid, strconv.ErrSyntax} {
		if r := ReasonOf(err); r != ReasonNone {
			t.Errorf("ReasonOf(%v) = %v, want ReasonNone", err, r)
		}
	}
}

// TestRootReExportsTheObserveSet checks that the root package's names are
// the observe package's values (the aliases and constants), and the key
// position helper the issuers use.
func TestRootReExportsTheObserveSet(t *testing.T) {
	if !slices.Equal(RefusalReasons(), observe.RefusalReasons()) || !slices.Equal(TokenKinds(), observe.TokenKinds()) ||
		!slices.Equal(Outcomes(), observe.Outcomes()) {
		t.Error("RefusalReasons, TokenKinds or Outcomes differ from package observe's")
	}
	for _, tc := range []struct{ got, want string }{
		{KindCursor.String(), "cursor"}, {KindRequestState.String(), "request_state"},
		{KindOneTime.String(), "one_time"}, {KindExchange.String(), "exchange"}, {KindWebhook.String(), "webhook"},
		{KindIdempotency.String(), "idempotency"}, {OutcomeReleased.String(), "released"},
		{OutcomeIssued.String(), "issued"}, {OutcomeVerified.String(), "verified"}, {OutcomeRefused.String(), "refused"},
		{OutcomeDuplicate.String(), "duplicate"}, {OutcomeStoreFailure.String(), "store_failure"},
		{OutcomeInProgress.String(), "in_progress"}, {OutcomeProcessed.String(), "processed"},
		{KeyNone.String(), "none"}, {KeyPrimary.String(), "primary"}, {keyPosition(1).String(), "previous 1"},
		{keyPosition(3).String(), "previous 3"}, {keyPosition(-1).String(), "none"}, {keyPosition(1000).String(), "previous 254"},
		{ReasonMACMismatch.String(), "mac mismatch"}, {ReasonWebhookSignatureMismatch.String(), "signature mismatch"},
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
	for _, pattern := range []string{"*.go", "webhook/*.go", "idempotency/*.go", "internal/jcs/*.go"} {
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
				sentinel = exprName(call.Args[0])
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
				t.Errorf("%s: reason %q (sentinel %s) is not in the RefusalReason set", pos, s, sentinel)
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
	byName := map[RefusalReason]string{
		ReasonExchangeRequest: "ReasonExchangeRequest", ReasonAuthorizeRefused: "ReasonAuthorizeRefused",
		ReasonIssueFailed: "ReasonIssueFailed",
	}
	for _, r := range RefusalReasons() {
		if produced[r.String()] {
			continue
		}
		if name, ok := byName[r]; !ok || !strings.Contains(src.String(), "observe("+name) {
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
