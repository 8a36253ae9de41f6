package webhook

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctoken/ctoken/internal/clocktest"
)

// FuzzParseStripeHeader checks that the Stripe-Signature parser never
// panics and returns only what the header carries: its one t= item and
// v1= items of 64 hex digits of either case (as stripe-go reads them).
func FuzzParseStripeHeader(f *testing.F) {
	for _, s := range []string{
		"t=1614265330,v1=af4ead0627a34a8cca29808e8de9ada8e41a92e6237c63cef6eacf51d36cca34",
		"t=1,v1=" + strings.Repeat("0", 64) + ",v0=ab,v1=" + strings.Repeat("f", 64),
		"t=1,t=2,v1=", "v1=,t=", "", ",", "t=01", "=,=,=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var tags [maxStripeV1][32]byte
		ts, n, err := parseStripeHeader(s, &tags)
		if err != nil {
			if Reason(err) == "" || n != 0 || ts != "" {
				t.Fatalf("failure %v returned %q, %d", err, ts, n)
			}
			return
		}
		items := strings.Split(s, ",")
		if n < 1 || n > strings.Count(s, "v1=") || !slices.Contains(items, "t="+ts) {
			t.Fatalf("accepted %q as t=%q with %d tags", s, ts, n)
		}
		if _, ok := parseUnixSeconds(ts); !ok {
			t.Fatalf("accepted timestamp %q", ts)
		}
		lower := strings.Split(strings.ToLower(s), ",")
		for _, tag := range tags[:n] {
			if !slices.Contains(lower, "v1="+hex.EncodeToString(tag[:])) {
				t.Fatalf("decoded %x, which %q does not carry", tag, s)
			}
		}
	})
}

// FuzzParseEd25519Signatures checks that the v1a parser never panics,
// decodes at most MaxSignatures entries, and only ones the header carries
// in canonical base64.
func FuzzParseEd25519Signatures(f *testing.F) {
	sig := "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="
	for _, s := range []string{sig, stdSig + " " + sig, "v1a,", "v1a," + strings.Repeat("A", 88), strings.Repeat(sig+" ", 20), ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var sigs [MaxSignatures][ed25519.SignatureSize]byte
		n, ok := parseEd25519Signatures(s, &sigs)
		if ok != (n > 0) || n > MaxSignatures || n > strings.Count(s, "v1a,") {
			t.Fatalf("ok=%v with %d signatures", ok, n)
		}
		fields := strings.Fields(s)
		for _, b := range sigs[:n] {
			if !slices.Contains(fields, "v1a,"+base64.StdEncoding.EncodeToString(b[:])) {
				t.Fatalf("decoded %x, which the header does not carry", b)
			}
		}
	})
}

// FuzzBodyStringMember checks the body ID reader against encoding/json: it
// accepts only one valid JSON object, the member it returns is the one
// encoding/json decodes, and it agrees in every case with
// refBodyStringMember, a reference built on encoding/json's Decoder.
func FuzzBodyStringMember(f *testing.F) {
	for _, s := range []string{`{"id":"evt_1"}`, `{"id":"a","id":"b"}`, `{"ID":"x"}`, `{"a":{"id":1},"id":"\u0065"}`, `[]`, `{} {}`, ` {"id" : "x"} `, `{"\u0069d":"y"}`, `{`, `{"a":"s" ,"b":[1] ,"c":{} ,"id":"x"` + "\t}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		val, found, ok := bodyStringMember([]byte(body), "id")
		if rv, rf, rok := refBodyStringMember([]byte(body), "id"); rv != val || rf != found || rok != ok {
			t.Fatalf("%q: (%q, %v, %v), reference (%q, %v, %v)", body, val, found, ok, rv, rf, rok)
		}
		if !ok {
			if found || val != "" {
				t.Fatalf("failure returned %q, %v", val, found)
			}
			return
		}
		var m map[string]json.RawMessage
		if !json.Valid([]byte(body)) || json.Unmarshal([]byte(body), &m) != nil || m == nil {
			t.Fatalf("accepted %q, which is not one JSON object", body)
		}
		raw, has := m["id"]
		if has != found {
			t.Fatalf("%q: found=%v, encoding/json has id: %v", body, found, has)
		}
		if found {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil || s != val {
				t.Fatalf("%q: id %q, encoding/json decodes %s", body, val, raw)
			}
		}
	})
}

// FuzzStripeVerify checks that Verify under Stripe never panics, accepts a
// delivery only with the genuine v1 signature of its t and body, and
// returns the body's event id as the delivery ID.
func FuzzStripeVerify(f *testing.F) {
	const ts = 1614265330
	body := `{"id":"evt_1","object":"event"}`
	f.Add("t=1614265330,v1="+hexMAC(stripeSecret, "1614265330."+body), body)
	f.Add("t=1614265330,v1=00", body)
	f.Add("", "")
	v := newVerifier(f, Config{Scheme: Stripe(), Secrets: []string{stripeSecret}, Now: clocktest.At(time.Unix(ts, 0)).Now})
	f.Fuzz(func(t *testing.T, sig, body string) {
		h := http.Header{}
		h.Set(HeaderStripeSignature, sig)
		d, err := v.Verify(h, []byte(body))
		if err != nil {
			if Reason(err) == "" || d != (Delivery{}) {
				t.Fatalf("refusal %v returned %+v", err, d)
			}
			return
		}
		tsText := strconv.FormatInt(d.Timestamp.Unix(), 10)
		// Hex of either case (as stripe-go reads it); the v1= key is exact.
		genuine := "v1=" + hexMAC(stripeSecret, tsText+"."+body)
		if !slices.ContainsFunc(strings.Split(sig, ","), func(item string) bool {
			return strings.HasPrefix(item, "v1=") && strings.EqualFold(item, genuine)
		}) {
			t.Fatalf("accepted %q without the genuine signature", sig)
		}
		var m map[string]any
		if json.Unmarshal([]byte(body), &m) != nil || m["id"] != d.ID {
			t.Fatalf("delivery ID %q is not the body's id", d.ID)
		}
	})
}

// FuzzSlackVerify checks that Verify under Slack never panics, accepts a
// request only with the genuine signature of its timestamp and body, and
// identifies it by its event_id or else by its signature.
func FuzzSlackVerify(f *testing.F) {
	const ts = "1531420618"
	ev := `{"type":"event_callback","event_id":"Ev1"}`
	f.Add(ts, "v0="+hexMAC(slackSecret, "v0:"+ts+":"+ev), ev)
	f.Add(ts, "v0="+hexMAC(slackSecret, "v0:"+ts+":a=b"), "a=b")
	f.Add("", "", "")
	v := newVerifier(f, Config{Scheme: Slack(), Secrets: []string{slackSecret}, Now: clocktest.At(time.Unix(1531420618, 0)).Now})
	f.Fuzz(func(t *testing.T, ts, sig, body string) {
		h := http.Header{}
		h.Set(HeaderSlackTimestamp, ts)
		h.Set(HeaderSlackSignature, sig)
		d, err := v.Verify(h, []byte(body))
		if err != nil {
			if Reason(err) == "" || d != (Delivery{}) {
				t.Fatalf("refusal %v returned %+v", err, d)
			}
			return
		}
		// Hex of either case (as slack-go reads it); the v0= prefix is exact.
		hexSig, ok := strings.CutPrefix(sig, "v0=")
		if !ok || strings.ToLower(hexSig) != hexMAC(slackSecret, "v0:"+ts+":"+body) {
			t.Fatalf("accepted ts=%q sig=%q without the genuine signature", ts, sig)
		}
		var m map[string]any
		if d.ID != strings.ToLower(sig) && (json.Unmarshal([]byte(body), &m) != nil || m["event_id"] != d.ID) {
			t.Fatalf("delivery ID %q is neither the signature nor the body's event_id", d.ID)
		}
	})
}

// FuzzShopifyVerify checks that Verify under Shopify never panics and
// accepts a delivery only with the genuine base64 HMAC of its body, with
// each header under its X- name, its Events name (no X-) or both: names
// picks, two bits per header (0: X-, 1: Events, 2: both, the same value;
// 3: both, the Events one altered).
func FuzzShopifyVerify(f *testing.F) {
	body := `{"id":820982911946154508}`
	good := base64.StdEncoding.EncodeToString(standardMAC([]byte(shopifySecret), body))
	for names := range byte(16) {
		f.Add("d1", good, body, names)
	}
	f.Add("d1", "", "", byte(0))
	v := newVerifier(f, Config{Scheme: Shopify(), Secrets: []string{shopifySecret}})
	set := func(h http.Header, xName, eventsName, value string, how byte) {
		switch how & 3 {
		case 0:
			h.Set(xName, value)
		case 1:
			h.Set(eventsName, value)
		case 2:
			h.Set(xName, value)
			h.Set(eventsName, value)
		case 3:
			h.Set(xName, value)
			h.Set(eventsName, value+"x")
		}
	}
	f.Fuzz(func(t *testing.T, id, sig, body string, names byte) {
		h := http.Header{}
		set(h, HeaderShopifyWebhookID, HeaderShopifyEventsWebhookID, id, names)
		set(h, HeaderShopifyHmac, HeaderShopifyEventsHmac, sig, names>>2)
		d, err := v.Verify(h, []byte(body))
		if err != nil {
			if Reason(err) == "" {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		if names&3 == 3 || (names>>2)&3 == 3 {
			t.Fatalf("accepted a header whose two names disagree (names %04b)", names&15)
		}
		if sig != base64.StdEncoding.EncodeToString(standardMAC([]byte(shopifySecret), body)) || d.ID != id {
			t.Fatalf("accepted id=%q sig=%q for body %q", id, sig, body)
		}
	})
}

// FuzzEd25519Verify checks that Verify under Standard Webhooks v1a never
// panics and accepts a delivery only when one of its v1a entries is a
// valid Ed25519 signature of id.timestamp.body under the public key.
func FuzzEd25519Verify(f *testing.F) {
	clk := clocktest.At(time.Unix(stdTS, 0))
	s := newSigner(f, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPriv}, Now: clk.Now})
	h := http.Header{}
	if err := s.Sign(h, stdID, []byte(stdBody)); err != nil {
		f.Fatal(err)
	}
	f.Add(stdID, strconv.Itoa(stdTS), h.Get(HeaderStandardSignature), stdBody)
	f.Add(stdID, strconv.Itoa(stdTS), stdSig, stdBody)
	f.Add("", "", "", "")
	pub, err := parseEd25519Key(edPub, Ed25519PublicKeyPrefix)
	if err != nil {
		f.Fatal(err)
	}
	v := newVerifier(f, Config{Scheme: StandardWebhooksEd25519(), Secrets: []string{edPub}, Now: clk.Now})
	f.Fuzz(func(t *testing.T, id, ts, sig, body string) {
		h := http.Header{}
		h.Set(HeaderStandardID, id)
		h.Set(HeaderStandardTimestamp, ts)
		h.Set(HeaderStandardSignature, sig)
		d, err := v.Verify(h, []byte(body))
		if err != nil {
			if Reason(err) == "" || d != (Delivery{}) {
				t.Fatalf("refusal %v returned %+v", err, d)
			}
			return
		}
		genuine := false
		for _, e := range strings.Fields(sig) {
			raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(e, "v1a,"))
			if strings.HasPrefix(e, "v1a,") && err == nil && len(raw) == ed25519.SignatureSize &&
				ed25519.Verify(pub, []byte(id+"."+ts+"."+body), raw) {
				genuine = true
			}
		}
		if !genuine || d.ID != id {
			t.Fatalf("accepted id=%q ts=%q sig=%q without a genuine signature", id, ts, sig)
		}
	})
}

// hexMAC is the lower-case hex HMAC-SHA256 of msg, built with crypto/hmac.
func hexMAC(secret, msg string) string { return hex.EncodeToString(standardMAC([]byte(secret), msg)) }

// FuzzOnEd25519Curve checks the public key check against crypto/ed25519
// itself: every key crypto/ed25519 reports as not a valid public key
// (rather than as a signature that does not verify) is refused, and a key
// refused as off the curve is always one it reports; the other refusals
// (non-canonical, small order) also cover keys crypto/ed25519 takes.
func FuzzOnEd25519Curve(f *testing.F) {
	pub, _ := parseEd25519Key(edPub, Ed25519PublicKeyPrefix)
	f.Add(pub)
	f.Add(make([]byte, 32))
	f.Add([]byte(strings.Repeat("\xff", 32)))
	f.Fuzz(func(t *testing.T, key []byte) {
		if len(key) != ed25519.PublicKeySize {
			return
		}
		err := ed25519.VerifyWithOptions(ed25519.PublicKey(key), []byte("m"), make([]byte, ed25519.SignatureSize), &ed25519.Options{})
		badKey := err != nil && strings.Contains(err.Error(), "public key")
		got := checkEd25519PublicKey(key)
		// A key crypto/ed25519 cannot use is refused (as off the curve or, for
		// a y coordinate at or past p, as non-canonical, checked first); a key
		// refused as off the curve is one crypto/ed25519 cannot use.
		if (badKey && got == nil) || (got == errEdKeyPoint && !badKey) {
			t.Fatalf("key %x: checkEd25519PublicKey %v, crypto/ed25519 says %v", key, got, err)
		}
	})
}

// refBodyStringMember is bodyStringMember written with encoding/json's
// Decoder: slower and allocation-heavy, but obviously right.
func refBodyStringMember(body []byte, name string) (val string, found, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false, false
		}
		if key, _ := tok.(string); key == name {
			tok, err := dec.Token()
			s, isString := tok.(string)
			if err != nil || !isString || found {
				return "", false, false
			}
			val, found = s, true
			continue
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false, false
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return "", false, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false, false
	}
	return val, found, true
}

func FuzzParseStandardSignatures(f *testing.F) {
	for _, s := range []string{stdSig, "v1,bm9wZQ== " + stdSig, "v1a,x v1,y", "", " ", ",", "v1,", strings.Repeat("v1,a ", 20)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var sigs [maxV1Entries][32]byte
		n, ok := parseStandardSignatures(s, &sigs)
		if ok != (n > 0) || n > strings.Count(s, "v1,") {
			t.Fatalf("ok=%v with %d signatures", ok, n)
		}
		for _, b := range sigs[:n] {
			if !strings.Contains(s, "v1,"+base64.StdEncoding.EncodeToString(b[:])) {
				t.Fatalf("decoded %x, which the header does not carry", b)
			}
		}
	})
}

func FuzzParseSHA256Signature(f *testing.F) {
	for _, s := range []string{githubSig, "sha256=", "sha256=zz", strings.ToUpper(githubSig), ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var arr [32]byte
		if !parseSHA256Signature(s, &arr) {
			return
		}
		b := arr[:]
		if len(b) != 32 || !strings.HasPrefix(s, "sha256=") || !strings.EqualFold(hex.EncodeToString(b), s[len("sha256="):]) {
			t.Fatalf("accepted %q as %x", s, b)
		}
	})
}

// FuzzStandardWebhookVerify checks that Verify never panics and accepts a
// delivery only when it carries the genuine signature of its id, timestamp
// and body.
func FuzzStandardWebhookVerify(f *testing.F) {
	f.Add(stdID, strconv.Itoa(stdTS), stdSig, stdBody)
	f.Add(stdID, "1614265331", stdSig, stdBody)
	f.Add("", "", "", "")
	f.Add("a.b", "-1", "v1,", "{}")
	key, _ := schemeStandard.parseSecret(stdSecret)
	clk := clocktest.At(time.Unix(stdTS, 0))
	v := newVerifier(f, Config{Scheme: StandardWebhooks(), Secrets: []string{stdSecret}, Now: clk.Now})
	f.Fuzz(func(t *testing.T, id, ts, sig, body string) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		d, err := v.Verify(h, []byte(body))
		if err != nil {
			if Reason(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		want := "v1," + base64.StdEncoding.EncodeToString(standardMAC(key, id+"."+ts+"."+body))
		if !slices.Contains(strings.Fields(sig), want) {
			t.Fatalf("accepted id=%q ts=%q sig=%q without the genuine signature", id, ts, sig)
		}
		if d.ID != id {
			t.Fatalf("delivery id %q, want %q", d.ID, id)
		}
	})
}

// FuzzSHA256WebhookVerify is the same property for the HMAC-SHA256 scheme.
func FuzzSHA256WebhookVerify(f *testing.F) {
	f.Add("d1", githubSig, githubBody)
	f.Add("d1", githubSig, "Hello, World?")
	f.Add("", "", "")
	v := newVerifier(f, Config{Scheme: HMACSHA256(), Secrets: []string{githubSecret}})
	f.Fuzz(func(t *testing.T, id, sig, body string) {
		h := http.Header{}
		h.Set("X-Webhook-ID", id)
		h.Set("X-Webhook-Signature", sig)
		if _, err := v.Verify(h, []byte(body)); err != nil {
			if Reason(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		if !strings.EqualFold(sig, signSHA256([]byte(githubSecret), []byte(body))) {
			t.Fatalf("accepted sig=%q for body %q", sig, body)
		}
	})
}
