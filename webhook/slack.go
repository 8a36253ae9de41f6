package webhook

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctoken/ctoken/internal/jsontext"
	"github.com/ctoken/ctoken/internal/mac"
	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/observe"
)

// Header names of [Slack].
const (
	// HeaderSlackSignature is the signature header of [Slack].
	HeaderSlackSignature = "X-Slack-Signature"
	// HeaderSlackTimestamp is the timestamp header (unix seconds) of
	// [Slack].
	HeaderSlackTimestamp = "X-Slack-Request-Timestamp"
)

// slack is Slack's request signing scheme.
type slack struct {
	name string
}

var schemeSlack = &slack{name: "slack"}

// Slack returns Slack's request signing scheme
// (https://api.slack.com/authentication/verifying-requests-from-slack):
// [HeaderSlackTimestamp] holds unix seconds and [HeaderSlackSignature]
// "v0=" and the hex HMAC-SHA256 of "v0:" + timestamp + ":" + body under
// the app's signing secret, used as raw bytes (hex of either case, as
// slack-go decodes it; Slack writes lower case). A delivery whose
// timestamp lies more than [Config.Tolerance] (default 5 minutes, Slack's)
// before or after the clock, compared in whole seconds, is refused, as
// slack-go v0.35.0's NewSecretsVerifier does (|now - timestamp| > 5 min);
// @slack/bolt's verifySlackRequest refuses only the past side.
//
// Slack sends no ID header. The delivery ID of an Events API callback is
// its "event_id", read from the authentic JSON body, which Slack keeps
// across retries, so retries are de-duplicated by it. Any other signed
// request (a slash command, an interaction, the url_verification
// handshake) has no event ID, is not retried by Slack, and is identified by
// its signature, "v0=<hex>" in lower case, which covers its timestamp: an
// exact replay is a duplicate, and so is one with the hex re-cased. A body that starts (after JSON white space) with '{' must be
// one well-formed JSON object whose event_id, if present, is a string of 1
// to [MaxIDBytes] printable ASCII characters, else [ErrMalformed].
//
// A signer signs with the first secret and only Events API callbacks:
// Sign's id must be the body's event_id. A verifier accepts any secret.
// The header names are fixed: [Config.SignatureHeader] and
// [Config.IDHeader] are refused.
func Slack() Scheme { return schemeSlack }

const slackPrefix = "v0="

var (
	errSlackBody   = reason.New(ErrMalformed, "JSON body malformed or its event_id not a string of 1 to 256 printable ASCII characters")
	errSlackSignID = reason.New(ErrMalformed, "id is not the event_id of the body")
)

func (s *slack) String() string { return s.name }

func (s *slack) parseSecret(secret string) ([]byte, error) {
	if secret == "" {
		return nil, errSecretEmpty
	}
	return []byte(secret), nil
}

func (s *slack) loadKeys(ks *keySet, secrets []string, _ bool) error {
	return loadHMACKeys(ks, secrets, s.parseSecret)
}

func (s *slack) configure(cfg *Config, p *params) error {
	if cfg.SignatureHeader != "" || cfg.IDHeader != "" {
		return errHeadersUnused
	}
	p.sigHeader, p.tsHeader = HeaderSlackSignature, HeaderSlackTimestamp
	return configureTolerance(cfg, p)
}

func (s *slack) forbidsDot() bool { return false }

func (s *slack) verify(p *params, h http.Header, body []byte, _ string) (verified, error) {
	tsText, ok := single(h, p.tsHeader)
	if !ok {
		return verified{}, errTSHeader
	}
	ts, ok := parseUnixSeconds(tsText)
	if !ok {
		return verified{}, errTSMalformed
	}
	sig, ok := single(h, p.sigHeader)
	if !ok {
		return verified{}, errSigHeader
	}
	var got [1][mac.Size]byte
	if len(sig) != len(slackPrefix)+2*mac.Size || !strings.HasPrefix(sig, slackPrefix) ||
		!parseHexTag(sig[len(slackPrefix):], &got[0]) {
		return verified{}, errSigMalformed
	}
	key := verifyOne(p.set.Load().keys, got[:], func(st *mac.State) {
		st.WriteString("v0:")
		st.WriteString(tsText)
		st.WriteByte(':')
		st.Write(body)
	})
	if key == observe.KeyNone {
		return verified{}, errSigMismatch
	}
	t, err := checkWindow(p, ts)
	if err != nil {
		return verified{key: key}, err
	}
	id, found, ok := slackEventID(body)
	if !ok {
		return verified{key: key}, errSlackBody
	}
	if !found {
		// "v0=<64 hex>": printable ASCII, 67 bytes, in one case so that a
		// re-cased copy is the same delivery (ToLower does not allocate
		// for a signature already in lower case).
		id = strings.ToLower(sig)
	}
	return verified{key: key, ts: t, id: id}, nil
}

// slackEventID reads the event_id of an authentic body: found is false for
// a body that is not JSON or carries no event_id; ok is false for a body
// that starts as a JSON object but is not one, or whose event_id is not a
// valid delivery ID.
func slackEventID(body []byte) (id string, found, ok bool) {
	i := jsontext.SkipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return "", false, true
	}
	id, found, ok = bodyStringMember(body, "event_id")
	if !ok || (found && checkID(id, false) != nil) {
		return "", false, false
	}
	return id, found, true
}

func (s *slack) sign(p *params, h http.Header, id string, body []byte, now time.Time) error {
	if got, found, ok := slackEventID(body); !ok || !found || got != id {
		return errSlackSignID
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	k := p.set.Load().keys[0]
	st := k.Begin()
	st.WriteString("v0:")
	st.WriteString(ts)
	st.WriteByte(':')
	st.Write(body)
	sig := slackPrefix + hex.EncodeToString(st.Tag()[:])
	k.End(st)
	h[p.tsHeader] = []string{ts}
	h[p.sigHeader] = []string{sig}
	return nil
}

// signsID reports that the delivery ID, read from the verified body, is
// signed: it identifies the delivery across the sender's retries, which are
// signed afresh with a new timestamp.
func (s *slack) signsID() bool { return true }
