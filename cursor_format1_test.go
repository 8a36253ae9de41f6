//go:build ctoken_format1_reference

// Tests of the format-1 cursor layout, kept out of the build as the
// reference for their rewrite against the key-id layout (issue 44).
package ctoken

// Issue 21 gap 11: an explicit empty state field (key 8 = h”) behind a
// valid MAC is a second spelling of "no state" and is refused.
func TestCursorRefusesExplicitEmptyStateField(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	i := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: vecSession, Now: fixedClock(now)})
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	good := signCursorBody(vecKey, vecCursorBody("t", "c", nil, 1, now.Unix(), vecSession, nil))
	if _, err := i.Verify(good, scope); err != nil {
		t.Fatalf("template body refused: %v", err)
	}
	_, err := i.Verify(signCursorBody(vecKey, vecCursorBodyWithEmpty(8, now.Unix())), scope)
	if !errors.Is(err, ErrCursorInvalid) || Reason(err) != "malformed or non-canonical payload" {
		t.Fatalf("empty state field = %v (reason %q), want a malformed-payload refusal", err, Reason(err))
	}
}

// Issue 21 gap 5: MaxCursorBytes is inclusive at issue and at verify, and
// the length check runs before base64.
func TestCursorAtExactlyMaxBytesIsAcceptedAndOneMoreRefused(t *testing.T) {
	// No scope makes Issue reach the cap any more (format version 2), so
	// the cursor of exactly MaxCursorBytes is a version 1 cursor, signed
	// by hand, with a tool ID of the length that fills it.
	i := vecIssuer(t, vecNow, vecSession, vecKey)
	scope := CursorScope{CallerID: "c"}
	var atCap string
	for n := 0; n < MaxCursorBytes; n++ {
		tok := signCursorBody(vecKey, vecCursorBody(strings.Repeat("t", n), "c", nil, 0, vecNow.Unix(), vecSession, nil))
		if len(tok) == MaxCursorBytes {
			atCap, scope.ToolID = tok, strings.Repeat("t", n)
			break
		}
	}
	if len(atCap) != MaxCursorBytes {
		t.Fatalf("no cursor of exactly %d bytes", MaxCursorBytes)
	}
	if _, err := i.Verify(atCap, scope); err != nil {
		t.Fatalf("cursor of exactly MaxCursorBytes refused: %v", err)
	}
	for _, over := range []string{atCap + "A", atCap + "AA"} {
		if _, err := i.Verify(over, scope); !errors.Is(err, ErrCursorInvalid) || Reason(err) != "over MaxCursorBytes" {
			t.Fatalf("%d-byte cursor = %v (reason %q), want over MaxCursorBytes", len(over), err, Reason(err))
		}
	}
}

// Every error Issue, Verify and the typed helpers return carries a Reason.
func TestCursorEveryErrorHasAReason(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	i := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: vecSession, Now: fixedClock(now), TTL: time.Minute})
	old := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: vecSession, Now: fixedClock(now.Add(-time.Hour))})
	good := mustIssue(t, i, CursorPayload{CursorScope: testScope, State: []byte{0x01}})
	var errs []error
	add := func(_ any, err error) { errs = append(errs, err) }
	addS := func(_ string, err error) { errs = append(errs, err) }
	addS(i.Issue(CursorPayload{State: make([]byte, MaxOpaqueStateBytes+1)}))
	addS(IssueState(i, testScope, 0, func() {}))
	for _, tok := range []string{"", "!!!", "AAAA", strings.Repeat("A", MaxCursorBytes+1), good[:len(good)-3] + "AAA",
		mustIssue(t, old, CursorPayload{CursorScope: testScope}),
		signCursorBody(vecKey, vecCursorBodyVersion(2, now.Unix())),
		signCursorBody(vecKey, vecCursorBody("t", "c", seqBytes(1, 31), 1, now.Unix(), vecSession, nil)),
		signCursorBody(vecKey, vecCursorBody("t", "c", nil, 1, now.Unix()+120, vecSession, nil)),
		signCursorBody(vecKey, vecCursorBody("t", "c", nil, 1, now.Unix(), []byte("other"), nil)),
	} {
		add(i.Verify(tok, testScope))
	}
	add(i.Verify(good, CursorScope{ToolID: "other", CallerID: testScope.CallerID}))
	add(i.Verify(good, CursorScope{ToolID: testScope.ToolID, CallerID: "other"}))
	add(i.Verify(good, CursorScope{ToolID: testScope.ToolID, CallerID: testScope.CallerID, Args: Fingerprint{1}}))
	_, _, err := VerifyState[string](i, good, testScope)
	errs = append(errs, err)
	for n, err := range errs {
		if err == nil || Reason(err) == "" {
			t.Errorf("error %d = %v has no reason", n, err)
		}
	}
}

// hostileCursorBodies are CBOR bodies the cursor decoder must refuse, each
// small enough to fit a cursor once signed.
func hostileCursorBodies() []struct {
	name string
	body []byte
} {
	now := vecNow.Unix()
	good := vecCursorBody("t", "c", nil, 1, now, vecSession, nil) // a6 01 01 02 61 74 03 61 63 05 01 06 1a .. 07 48 ..
	prefix := good[1:9]                                           // {1:1, 2:"t", 3:"c"} without the map head
	tail := good[9:]                                              // 05 01 06 ... 07 48 ...
	with := func(n uint64, parts ...[]byte) []byte {
		b := cborHead(nil, 5, n)
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	nested := func(depth int, open, close byte) []byte {
		b := bytes.Repeat([]byte{open}, depth)
		if close != 0 {
			b = append(b, bytes.Repeat([]byte{close}, depth)...)
		}
		return b
	}
	u64 := func(major byte) []byte { return []byte{major<<5 | 27, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff} }
	return []struct {
		name string
		body []byte
	}{
		{"empty map", []byte{0xa0}},
		{"map without session", vecCursorBodyNoSession(now)},
		{"not a map", []byte{0x80}},
		{"deep nesting in state (300 arrays)", with(7, prefix, tail, []byte{0x08}, nested(300, 0x81, 0), []byte{0x80})},
		{"deep nesting in tool (200 arrays)", with(6, good[1:3], []byte{0x02}, nested(200, 0x81, 0), []byte{0x01}, good[6:])},
		{"indefinite nesting (150 arrays)", with(7, prefix, tail, []byte{0x08}, nested(150, 0x9f, 0xff))},
		{"map declaring 2^63 pairs", append(u64(5), good[1:]...)},
		{"map declaring 2^32 pairs", append([]byte{0xba, 0xff, 0xff, 0xff, 0xff}, good[1:]...)},
		{"state declaring 2^63 bytes", with(7, prefix, tail, []byte{0x08}, u64(2))},
		{"tool declaring 2^63 bytes of text", with(6, good[1:3], []byte{0x02}, u64(3), good[6:])},
		{"session declaring 2^32 bytes", bytes.Replace(good, []byte{0x07, 0x48}, []byte{0x07, 0x5a, 0xff, 0xff, 0xff, 0xff}, 1)},
		{"state array declaring 2^63 elements", with(7, prefix, tail, []byte{0x08}, u64(4))},
		{"duplicate key", with(7, prefix, tail, []byte{0x05, 0x02})},
		{"duplicate key, same value", with(7, prefix, tail, []byte{0x01, 0x01})},
		{"indefinite-length map", append(append([]byte{0xbf}, good[1:]...), 0xff)},
		{"indefinite-length text", with(6, good[1:3], []byte{0x02, 0x7f, 0x61, 0x74, 0xff}, good[6:])},
		{"indefinite-length bytes", bytes.Replace(good, []byte{0x07, 0x48}, []byte{0x07, 0x5f, 0x48}, 1)},
		{"tag on issued-at", bytes.Replace(good, []byte{0x06, 0x1a}, []byte{0x06, 0xc1, 0x1a}, 1)},
		{"bignum page", bytes.Replace(good, []byte{0x05, 0x01}, []byte{0x05, 0xc2, 0x41, 0x01}, 1)},
		{"self-described CBOR tag", append([]byte{0xd9, 0xd9, 0xf7}, good...)},
		{"embedded CBOR tag on state", with(7, prefix, tail, []byte{0x08, 0xd8, 0x18, 0x41, 0xa0})},
		{"unknown field", with(7, prefix, tail, []byte{0x09, 0x00})},
		{"text key", with(7, prefix, tail, []byte{0x61, 0x78, 0x00})},
		{"negative page", bytes.Replace(good, []byte{0x05, 0x01}, []byte{0x05, 0x20}, 1)},
		{"page over uint32", bytes.Replace(good, []byte{0x05, 0x01}, []byte{0x05, 0x1b, 0, 0, 0, 1, 0, 0, 0, 0}, 1)},
		{"float page", bytes.Replace(good, []byte{0x05, 0x01}, []byte{0x05, 0xf9, 0x3c, 0x00}, 1)},
		{"null tool", with(6, good[1:3], []byte{0x02, 0xf6}, good[6:])},
		{"invalid UTF-8 tool", with(6, good[1:3], []byte{0x02, 0x61, 0xff}, good[6:])},
		{"version 0", bytes.Replace(good, []byte{0x01, 0x01}, []byte{0x01, 0x00}, 1)},
		{"non-minimal integer", bytes.Replace(good, []byte{0x05, 0x01}, []byte{0x05, 0x18, 0x01}, 1)},
		{"non-minimal map head", append([]byte{0xb8, 0x06}, good[1:]...)},
		{"keys out of order", with(6, good[3:6], good[1:3], good[6:])},
		{"trailing byte", append(append([]byte(nil), good...), 0x00)},
		{"two maps", append(append([]byte(nil), good...), good...)},
		{"truncated", good[:len(good)-1]},
		{"break outside indefinite item", append([]byte{0xff}, good...)},
		{"reserved additional info", append([]byte{0x1c}, good...)},
	}
}

func TestVerifyRefusesHostileCBOR(t *testing.T) {
	iss := vecIssuer(t, vecNow, vecSession, vecKey)
	for _, h := range hostileCursorBodies() {
		t.Run(h.name, func(t *testing.T) {
			for _, signer := range []struct {
				name string
				key  []byte
			}{{"mac-valid", vecKey}, {"unauthenticated", vecKey2}} {
				cursor := signCursorBody(signer.key, h.body)
				if len(cursor) > MaxCursorBytes {
					t.Fatalf("hostile cursor is %d bytes, over the cap", len(cursor))
				}
				p, err := iss.Verify(cursor, CursorScope{ToolID: "t", CallerID: "c"})
				if !errors.Is(err, ErrCursorInvalid) {
					t.Errorf("%s: error %v, want ErrCursorInvalid", signer.name, err)
				}
				if p.ToolID != "" || p.State != nil || p.Page != 0 {
					t.Errorf("%s: rejected cursor returned %+v", signer.name, p)
				}
				if n := bytesPerRun(5, func() { _, _ = iss.Verify(cursor, CursorScope{}) }); n > 16<<10 {
					t.Errorf("%s: %d bytes allocated refusing a %d-byte cursor", signer.name, n, len(cursor))
				}
			}
		})
	}
}

func TestVerifyNamesTheFieldOfAnAuthenticButUnusableCursor(t *testing.T) {
	iss := vecIssuer(t, vecNow, vecSession, vecKey)
	cases := []struct {
		name, reason string
		body         []byte
	}{
		{"args of 5 bytes", "args fingerprint not 32 bytes", vecCursorBody("t", "c", []byte{1, 2, 3, 4, 5}, 0, vecNow.Unix(), vecSession, nil)},
		{"args of 33 bytes", "args fingerprint not 32 bytes", vecCursorBody("t", "c", make([]byte, 33), 0, vecNow.Unix(), vecSession, nil)},
	}
	for _, c := range cases {
		_, err := iss.Verify(signCursorBody(vecKey, c.body), CursorScope{ToolID: "t", CallerID: "c"})
		wantErr(t, err, ErrCursorInvalid)
		if Reason(err) != c.reason {
			t.Errorf("%s: reason %q, want %q", c.name, Reason(err), c.reason)
		}
	}
}

// ---------------------------------------------------------------------------
// Cursors

func vecIssuer(t testing.TB, now time.Time, session []byte, keys ...[]byte) *CursorIssuer {
	t.Helper()
	if len(keys) == 0 {
		keys = [][]byte{vecKey}
	}
	i, err := NewCursorIssuer(CursorConfig{Keys: vecKeyring(t, keys...), Session: session, Now: fixedClock(now)})
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func (p cursorPayloadJSON) payload(t testing.TB) CursorPayload {
	var cp CursorPayload
	cp.ToolID, cp.CallerID, cp.Page = p.Tool, p.Caller, p.Page
	if p.Args != "" {
		copy(cp.Args[:], vecHex(t, p.Args))
	}
	if p.State != "" {
		cp.State = vecHex(t, p.State)
	}
	return cp
}

func vecArgs(t testing.TB, args string) string {
	fp, err := ArgsFingerprint([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(fp[:])
}

func genCursorVectors(t *testing.T) cursorFile {
	f := cursorFile{
		Comment: "token = base64url_nopad(cbor || HMAC-SHA256(mac_key, cbor)); mac_key = DeriveKey(key, \"" +
			cursorKeyLabel + "\"); see README.md",
		Key:        hex.EncodeToString(vecKey),
		MACKey:     hex.EncodeToString(subkey(vecKey, cursorKeyLabel)),
		Session:    hex.EncodeToString(vecSession),
		TTLSeconds: int64(DefaultCursorTTL / time.Second),
	}
	now := vecNow.Unix()
	maxState := hex.EncodeToString(seqBytes(0, MaxOpaqueStateBytes))
	issues := []cursorIssueVector{
		{Name: "minimal", cursorPayloadJSON: cursorPayloadJSON{}},
		{Name: "bound args", cursorPayloadJSON: cursorPayloadJSON{
			Tool: "search", Caller: "user:42", Args: vecArgs(t, `{"q":"go","limit":10}`), Page: 2}},
		{Name: "opaque state", cursorPayloadJSON: cursorPayloadJSON{
			Tool: "list_files", Caller: "alice@example.com", Page: 7, State: hex.EncodeToString([]byte("after=file-0042"))}},
		{Name: "unicode ids, max page, max state", cursorPayloadJSON: cursorPayloadJSON{
			Tool: "búsqueda", Caller: "用户-7", Page: math.MaxUint32, State: maxState}},
		{Name: "page 24 (two-byte head)", cursorPayloadJSON: cursorPayloadJSON{Tool: "t", Caller: "c", Page: 24}},
		{Name: "page 65536 (five-byte head)", cursorPayloadJSON: cursorPayloadJSON{Tool: "t", Caller: "c", Page: 65536}},
		{Name: "state over MaxOpaqueStateBytes", Error: "ErrOpaqueStateTooLarge", cursorPayloadJSON: cursorPayloadJSON{
			Tool: "t", Caller: "c", State: hex.EncodeToString(seqBytes(0, MaxOpaqueStateBytes+1))}},
		{Name: "token over MaxCursorBytes", Error: "ErrCursorTooLarge", cursorPayloadJSON: cursorPayloadJSON{
			Tool: strings.Repeat("t", 64), Caller: strings.Repeat("c", 64), Args: vecArgs(t, `[1]`), State: maxState}},
	}
	tokens := map[string]string{}
	var tokenList []string // issue order, for deterministic choices
	for _, v := range issues {
		v.IssuedAt = now
		vp := v.payload(t)
		var vargs []byte
		if !vp.Args.IsZero() {
			vargs = vp.Args[:]
		}
		tok := signCursorBody(vecKey, vecCursorBody(vp.ToolID, vp.CallerID, vargs, vp.Page, now, vecSession, vp.State))
		var err error
		switch v.Error {
		case "ErrOpaqueStateTooLarge":
			_, err = vecIssuer(t, vecNow, vecSession).Issue(vp)
		case "ErrCursorTooLarge":
			if len(tok) > MaxCursorBytes {
				err = errCursorLarge
			}
		}
		if v.Error != "" {
			want := map[string]error{"ErrOpaqueStateTooLarge": ErrOpaqueStateTooLarge, "ErrCursorTooLarge": ErrCursorTooLarge}[v.Error]
			if !errors.Is(err, want) {
				t.Fatalf("%s: Issue error %v, want %v", v.Name, err, want)
			}
			f.Issue = append(f.Issue, v)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		p := v.payload(t)
		var args []byte
		if !p.Args.IsZero() {
			args = p.Args[:]
		}
		body := vecCursorBody(p.ToolID, p.CallerID, args, p.Page, now, vecSession, p.State)
		if ref := signCursorBody(vecKey, body); tok != ref {
			t.Fatalf("%s: Issue = %s, hand-built CBOR and HMAC give %s", v.Name, tok, ref)
		}
		v.CBOR = hex.EncodeToString(body)
		v.MAC = hex.EncodeToString(vecHMAC(subkey(vecKey, cursorKeyLabel), body))
		v.Token = tok
		tokens[v.Name] = tok
		tokenList = append(tokenList, tok)
		f.Issue = append(f.Issue, v)
	}

	bound, unbound := tokens["bound args"], tokens["opaque state"]
	boundP := issues[1].cursorPayloadJSON
	boundP.IssuedAt = now
	unboundP := issues[2].cursorPayloadJSON
	unboundP.IssuedAt = now
	ttl := f.TTLSeconds
	otherArgs := vecArgs(t, `{"q":"go","limit":20}`)

	otherSession, err := vecIssuer(t, vecNow, []byte("vectors2")).Issue(boundP.payload(t))
	if err != nil {
		t.Fatal(err)
	}
	otherKeyOtherSession, err := vecIssuer(t, vecNow, []byte("vectors2"), vecKey2).Issue(boundP.payload(t))
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := vecIssuer(t, vecNow, vecSession, vecKey2).Issue(boundP.payload(t))
	if err != nil {
		t.Fatal(err)
	}

	// A second spelling through base64's unused trailing bits, and the
	// padded spelling.
	var trailing, padded string
	for _, tok := range tokenList {
		if len(tok)%4 != 0 {
			raw, _ := b64.DecodeString(tok)
			padded = base64.URLEncoding.EncodeToString(raw)
			const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
			last := strings.IndexByte(alphabet, tok[len(tok)-1])
			alt := tok[:len(tok)-1] + string(alphabet[last|1])
			a, _ := base64.RawURLEncoding.DecodeString(alt) // not Strict: same bytes
			b, _ := base64.RawURLEncoding.DecodeString(tok)
			if alt != tok && bytes.Equal(a, b) {
				trailing = alt
				break
			}
		}
	}
	if trailing == "" {
		t.Fatal("no token with unused trailing bits")
	}
	// The same bytes in the standard alphabet.
	var stdAlphabet string
	for _, tok := range tokenList {
		if strings.ContainsAny(tok, "-_") {
			stdAlphabet = strings.NewReplacer("-", "+", "_", "/").Replace(tok)
			break
		}
	}
	if stdAlphabet == "" {
		t.Fatal("no token with - or _")
	}
	tampered := []byte(bound)
	tampered[len(tampered)/2] ^= 'A' ^ 'B'
	if tampered[len(tampered)/2] == bound[len(bound)/2] {
		t.Fatal("tamper did not change the token")
	}

	hostile := func(name string, body []byte) cursorVerifyVector {
		return cursorVerifyVector{Name: name, Token: signCursorBody(vecKey, body), Now: now, Result: "invalid"}
	}
	goodBody := vecCursorBody("t", "c", nil, 1, now, vecSession, nil)
	f.Verify = []cursorVerifyVector{
		{Name: "authentic, at issue time", Token: bound, Now: now, WantTool: "search", WantCaller: "user:42", WantArgs: boundP.Args, Result: "ok", Payload: &boundP},
		{Name: "authentic, want args zero (not compared)", Token: bound, Now: now, WantTool: "search", WantCaller: "user:42", Result: "ok", Payload: &boundP},
		{Name: "authentic, age exactly TTL", Token: bound, Now: now + ttl, WantTool: "search", WantCaller: "user:42", WantArgs: boundP.Args, Result: "ok", Payload: &boundP},
		{Name: "age TTL + 1 s", Token: bound, Now: now + ttl + 1, WantTool: "search", WantCaller: "user:42", WantArgs: boundP.Args, Result: "expired"},
		{Name: "issued 60 s in the future (clock skew allowed)", Token: bound, Now: now - 60, WantTool: "search", WantCaller: "user:42", WantArgs: boundP.Args, Result: "ok", Payload: &boundP},
		{Name: "issued 61 s in the future", Token: bound, Now: now - 61, WantTool: "search", WantCaller: "user:42", WantArgs: boundP.Args, Result: "invalid"},
		{Name: "wrong tool", Token: bound, Now: now, WantTool: "Search", WantCaller: "user:42", WantArgs: boundP.Args, Result: "invalid"},
		{Name: "wrong caller", Token: bound, Now: now, WantTool: "search", WantCaller: "user:43", WantArgs: boundP.Args, Result: "invalid"},
		{Name: "wrong args", Token: bound, Now: now, WantTool: "search", WantCaller: "user:42", WantArgs: otherArgs, Result: "invalid"},
		{Name: "unbound cursor, want args non-zero", Token: unbound, Now: now, WantTool: "list_files", WantCaller: "alice@example.com", WantArgs: otherArgs, Result: "invalid"},
		{Name: "unbound cursor with state", Token: unbound, Now: now, WantTool: "list_files", WantCaller: "alice@example.com", Result: "ok", Payload: &unboundP},
		{Name: "other server session, same key", Token: otherSession, Now: now, WantTool: "search", WantCaller: "user:42", Result: "expired"},
		{Name: "other key, other session (classification hint)", Token: otherKeyOtherSession, Now: now, WantTool: "search", WantCaller: "user:42", Result: "expired"},
		{Name: "other key, same session", Token: otherKey, Now: now, WantTool: "search", WantCaller: "user:42", Result: "invalid"},
		{Name: "tampered", Token: string(tampered), Now: now, WantTool: "search", WantCaller: "user:42", Result: "invalid"},
		{Name: "truncated", Token: bound[:len(bound)-4], Now: now, WantTool: "search", WantCaller: "user:42", Result: "invalid"},
		{Name: "empty", Token: "", Now: now, Result: "invalid"},
		{Name: "over MaxCursorBytes", Token: strings.Repeat("A", MaxCursorBytes+1), Now: now, Result: "invalid"},
		{Name: "padded base64url", Token: padded, Now: now, Result: "invalid"},
		{Name: "unused trailing bits set", Token: trailing, Now: now, Result: "invalid"},
		{Name: "standard alphabet", Token: stdAlphabet, Now: now, Result: "invalid"},
		{Name: "line feed inside (encoding/base64 would skip it)", Token: bound[:5] + "\n" + bound[5:], Now: now, WantTool: "search", WantCaller: "user:42", Result: "invalid"},
		{Name: "carriage return at the end", Token: bound + "\r", Now: now, WantTool: "search", WantCaller: "user:42", Result: "invalid"},
		hostile("mac-valid: unknown field 9", append(append(cborHead(nil, 5, 7), goodBody[1:]...), 0x09, 0x00)),
		hostile("mac-valid: version 2", vecCursorBodyVersion(2, now)),
		hostile("mac-valid: args of 31 bytes", vecCursorBody("t", "c", seqBytes(1, 31), 1, now, vecSession, nil)),
		hostile("mac-valid: empty args present", vecCursorBodyWithEmpty(4, now)),
		hostile("mac-valid: empty state present", vecCursorBodyWithEmpty(8, now)),
		hostile("mac-valid: duplicate key", append(append(cborHead(nil, 5, 7), goodBody[1:]...), 0x05, 0x01)),
		hostile("mac-valid: non-minimal integer", bytes.Replace(goodBody, []byte{0x05, 0x01}, []byte{0x05, 0x18, 0x01}, 1)),
		hostile("mac-valid: keys out of order", swapFirstTwoPairs(goodBody)),
		hostile("mac-valid: indefinite-length map", append(append([]byte{0xbf}, goodBody[1:]...), 0xff)),
		hostile("mac-valid: tagged issued-at", bytes.Replace(goodBody, []byte{0x06, 0x1a}, []byte{0x06, 0xc1, 0x1a}, 1)),
		hostile("mac-valid: missing session", vecCursorBodyNoSession(now)),
		hostile("mac-valid: trailing byte", append(append([]byte(nil), goodBody...), 0x00)),
		hostile("mac-valid: text string where bytes expected", bytes.Replace(goodBody, []byte{0x07, 0x48}, []byte{0x07, 0x68}, 1)),
	}
	if !bytes.Contains(goodBody, []byte{0x06, 0x1a}) || !bytes.Contains(goodBody, []byte{0x07, 0x48}) {
		t.Fatal("hostile vector templates do not match the body")
	}
	// Cross-check: the library agrees with every verify vector.
	checkCursorVerify(t, f)
	return f
}

func vecCursorBodyVersion(version uint64, now int64) []byte {
	b := vecCursorBody("t", "c", nil, 1, now, vecSession, nil)
	return bytes.Replace(b, []byte{0x01, 0x01}, []byte{0x01, byte(version)}, 1)
}

// vecCursorBodyWithEmpty is a body with field key (4 or 8) present but empty.
func vecCursorBodyWithEmpty(key byte, now int64) []byte {
	b := vecCursorBody("t", "c", nil, 1, now, vecSession, nil)
	out := cborHead(nil, 5, 7)
	rest := b[1:]
	if key == 4 {
		i := bytes.Index(rest, []byte{0x05, 0x01}) // insert before key 5
		out = append(out, rest[:i]...)
		out = append(out, 0x04, 0x40)
		return append(out, rest[i:]...)
	}
	out = append(out, rest...)
	return append(out, 0x08, 0x40)
}

func vecCursorBodyNoSession(now int64) []byte {
	b := vecCursorBody("t", "c", nil, 1, now, vecSession, nil)
	i := bytes.Index(b, []byte{0x07, 0x48})
	out := cborHead(nil, 5, 5)
	return append(out, b[1:i]...)
}

// swapFirstTwoPairs swaps {1: 1} and {2: "t"} of a body from vecCursorBody("t", ...).
func swapFirstTwoPairs(b []byte) []byte {
	out := []byte{b[0]}
	out = append(out, b[3:6]...) // 02 61 74
	out = append(out, b[1:3]...) // 01 01
	return append(out, b[6:]...)
}

func checkCursorVerify(t *testing.T, f cursorFile) {
	t.Helper()
	for _, v := range f.Verify {
		var want CursorScope
		want.ToolID, want.CallerID = v.WantTool, v.WantCaller
		if v.WantArgs != "" {
			copy(want.Args[:], vecHex(t, v.WantArgs))
		}
		got, err := vecIssuer(t, time.Unix(v.Now, 0), vecHex(t, f.Session), vecHex(t, f.Key)).Verify(v.Token, want)
		if r := resultOf(err); r != v.Result {
			t.Errorf("verify %q: result %s (%v), want %s", v.Name, r, err, v.Result)
			continue
		}
		if v.Result != "ok" {
			continue
		}
		if v.Payload == nil {
			t.Errorf("verify %q: ok vector without payload", v.Name)
			continue
		}
		wp := v.Payload.payload(t)
		if got.ToolID != wp.ToolID || got.CallerID != wp.CallerID || got.Args != wp.Args ||
			got.Page != wp.Page || !bytes.Equal(got.State, wp.State) || got.IssuedAt.Unix() != v.Payload.IssuedAt {
			t.Errorf("verify %q: payload %+v, want %+v", v.Name, got, wp)
		}
	}
}

func checkCursorVectors(t *testing.T) {
	var f cursorFile
	readVectors(t, "cursor.json", &f)
	key := vecHex(t, f.Key)
	if got := hex.EncodeToString(subkey(key, cursorKeyLabel)); got != f.MACKey {
		t.Errorf("cursor MAC key %s, want %s", got, f.MACKey)
	}
	if len(f.Issue) == 0 || len(f.Verify) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range f.Issue {
		p := v.payload(t)
		// cursor.json pins format version 1, which Issue no longer writes
		// (it writes version 2): the token is built by hand and must still
		// verify (checkCursorVerify). The state cap is still Issue's.
		var args []byte
		if !p.Args.IsZero() {
			args = p.Args[:]
		}
		tok := signCursorBody(key, vecCursorBody(p.ToolID, p.CallerID, args, p.Page, v.IssuedAt, vecHex(t, f.Session), p.State))
		var err error
		switch v.Error {
		case "ErrOpaqueStateTooLarge":
			_, err = vecIssuer(t, time.Unix(v.IssuedAt, 0), vecHex(t, f.Session), key).Issue(p)
		case "ErrCursorTooLarge":
			if len(tok) > MaxCursorBytes {
				err = errCursorLarge
			}
		}
		if v.Error != "" {
			want := map[string]error{"ErrOpaqueStateTooLarge": ErrOpaqueStateTooLarge, "ErrCursorTooLarge": ErrCursorTooLarge}[v.Error]
			if want == nil || !errors.Is(err, want) {
				t.Errorf("issue %q: error %v, want %s", v.Name, err, v.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("issue %q: %v", v.Name, err)
			continue
		}
		if tok != v.Token {
			t.Errorf("issue %q: token\n %s\nwant\n %s", v.Name, tok, v.Token)
		}
		raw, err := b64.DecodeString(v.Token)
		if err != nil || len(raw) <= macSize {
			t.Errorf("issue %q: token does not decode: %v", v.Name, err)
			continue
		}
		body, mac := raw[:len(raw)-macSize], raw[len(raw)-macSize:]
		if hex.EncodeToString(body) != v.CBOR || hex.EncodeToString(mac) != v.MAC {
			t.Errorf("issue %q: token carries cbor %x mac %x, vector says %s %s", v.Name, body, mac, v.CBOR, v.MAC)
		}
		if got := hex.EncodeToString(vecHMAC(vecHex(t, f.MACKey), body)); got != v.MAC {
			t.Errorf("issue %q: HMAC of cbor = %s, want %s", v.Name, got, v.MAC)
		}
		if got := hex.EncodeToString(vecCursorBody(p.ToolID, p.CallerID, args, p.Page, v.IssuedAt, vecHex(t, f.Session), p.State)); got != v.CBOR {
			t.Errorf("issue %q: hand-built CBOR %s, want %s", v.Name, got, v.CBOR)
		}
	}
	checkCursorVerify(t, f)
}

// Known-answer vectors of cursor format version 2 (signed) and 3 (sealed):
// testdata/vectors/cursor_v2.json. Each token is built here from the
// standard library alone (CBOR by hand, HMAC-SHA256, AES-256-GCM with the
// vector's nonce) and must equal what Issue writes (signed) or open with
// Verify to the vector's payload (sealed, whose Issue draws a random
// nonce). testdata/vectors/cursor.json keeps pinning version 1.

type cursorV2File struct {
	Comment    string           `json:"comment"`
	Key        string           `json:"key_hex"`
	MACKey     string           `json:"mac_key_hex"`
	SealKey    string           `json:"seal_key_hex"`
	Session    string           `json:"session_hex"`
	SessionTag string           `json:"session_tag_hex"`
	TTLSeconds int64            `json:"ttl_seconds"`
	Vectors    []cursorV2Vector `json:"vectors"`
}

type cursorV2Vector struct {
	Name     string `json:"name"`
	Sealed   bool   `json:"sealed"`
	Tool     string `json:"tool_hex"`
	Caller   string `json:"caller_hex"`
	Args     string `json:"args_hex"`
	Page     uint32 `json:"page"`
	State    string `json:"state_hex"`
	IssuedAt int64  `json:"issued_at_unix"`
	Scope    string `json:"scope_hex"`
	CBOR     string `json:"cbor_hex,omitempty"`
	Header   string `json:"header_hex,omitempty"`
	Nonce    string `json:"nonce_hex,omitempty"`
	Inner    string `json:"inner_hex,omitempty"`
	Token    string `json:"token"`
}

// v2Scope is the scope bytes, written out: the label, the tool and the
// caller each after its uvarint length, then 0x00, or 0x01 and the
// arguments fingerprint.
func v2Scope(tool, caller, args []byte) []byte {
	b := []byte("ctoken.scope\x00")
	b = binary.AppendUvarint(b, uint64(len(tool)))
	b = append(b, tool...)
	b = binary.AppendUvarint(b, uint64(len(caller)))
	b = append(b, caller...)
	if len(args) == 0 {
		return append(b, 0x00)
	}
	return append(append(b, 0x01), args...)
}

// v2Token builds a vector's token from the standard library and cborHead.
func v2Token(t testing.TB, key, session []byte, v *cursorV2Vector) {
	tag := sha256.Sum256(append([]byte("ctoken.cursor session tag\x00"), session...))
	scope := v2Scope(vecHex(t, v.Tool), vecHex(t, v.Caller), vecHex(t, v.Args))
	v.Scope = hex.EncodeToString(scope)
	state := vecHex(t, v.State)
	issuedSession := func(b []byte) []byte {
		b = append(cborHead(append(b, 0x06), 0, uint64(v.IssuedAt)), 0x07)
		return append(cborHead(b, 2, 8), tag[:8]...)
	}
	if !v.Sealed {
		pairs := uint64(4)
		if len(state) > 0 {
			pairs++
		}
		b := cborHead(nil, 5, pairs)
		b = append(b, 0x01, 0x02, 0x05)
		b = issuedSession(cborHead(b, 0, uint64(v.Page)))
		if len(state) > 0 {
			b = append(cborHead(append(b, 0x08), 2, uint64(len(state))), state...)
		}
		v.CBOR = hex.EncodeToString(b)
		mac := vecHMAC(subkey(key, cursorKeyLabel), append(append([]byte(nil), b...), scope...))
		v.Token = b64.EncodeToString(append(b, mac...))
		return
	}
	header := issuedSession([]byte{0xa3, 0x01, 0x03})
	pairs := uint64(1)
	if len(state) > 0 {
		pairs++
	}
	inner := cborHead(append(cborHead(nil, 5, pairs), 0x05), 0, uint64(v.Page))
	if len(state) > 0 {
		inner = append(cborHead(append(inner, 0x08), 2, uint64(len(state))), state...)
	}
	// The hand-written reference GCM (envelope_test.go): it takes the
	// vector's fixed nonce under GODEBUG=fips140=only too, where
	// cipher.NewGCM refuses a caller-chosen one.
	nonce := vecHex(t, v.Nonce)
	sealed := newRefGCM(t, subkey(key, cursorSealLabel)).seal(nonce, inner, append(append([]byte(nil), header...), scope...))
	raw := append(append(append([]byte(nil), header...), nonce...), sealed...)
	v.Header, v.Inner = hex.EncodeToString(header), hex.EncodeToString(inner)
	v.Token = b64.EncodeToString(raw)
}

func genCursorV2Vectors(t *testing.T) cursorV2File {
	tag := sha256.Sum256(append([]byte("ctoken.cursor session tag\x00"), vecSession...))
	f := cursorV2File{
		Comment: "signed (version 2): token = base64url_nopad(cbor || HMAC-SHA256(mac_key, cbor || scope)), the scope is not in the token; " +
			"sealed (version 3): token = base64url_nopad(header || nonce || AES-256-GCM(seal_key, nonce, inner, aad = header || scope)); " +
			"scope = \"ctoken.scope\\x00\" uvarint(len(tool)) tool uvarint(len(caller)) caller (0x00 | 0x01 args[32]); session tag = SHA-256(\"ctoken.cursor session tag\\x00\" || session)[:8]; see doc.go",
		Key: hex.EncodeToString(vecKey), MACKey: hex.EncodeToString(subkey(vecKey, cursorKeyLabel)),
		SealKey: hex.EncodeToString(subkey(vecKey, cursorSealLabel)),
		Session: hex.EncodeToString(vecSession), SessionTag: hex.EncodeToString(tag[:8]),
		TTLSeconds: int64(DefaultCursorTTL / time.Second),
	}
	h := func(s string) string { return hex.EncodeToString([]byte(s)) }
	args := vecArgs(t, `{"q":"go"}`)
	long := bytes.Repeat([]byte("alice.secret@example.com|"), 41)[:1024]
	for _, sealed := range []bool{false, true} {
		for i, v := range []cursorV2Vector{
			{Name: "minimal"},
			{Name: "bound args", Tool: h("search"), Caller: h("user:42"), Args: args, Page: 2},
			{Name: "opaque state", Tool: h("list_files"), Caller: h("alice@example.com"), Page: 7, State: h("after=file-0042")},
			{Name: "1 KiB caller, not-UTF-8 tool, max page, max state", Tool: "ff" + h(string(bytes.Repeat([]byte("t"), 99))), Caller: hex.EncodeToString(long),
				Args: args, Page: 1<<32 - 1, State: hex.EncodeToString(seqBytes(0, MaxOpaqueStateBytes))},
		} {
			v.Sealed, v.IssuedAt = sealed, vecNow.Unix()
			if sealed {
				v.Name = "sealed, " + v.Name
				v.Nonce = hex.EncodeToString(seqBytes(byte(0x10*i), 12))
			} else {
				v.Name = "signed, " + v.Name
			}
			v2Token(t, vecKey, vecSession, &v)
			f.Vectors = append(f.Vectors, v)
		}
	}
	return f
}

func TestCursorV2Vectors(t *testing.T) {
	if *updateVectors {
		writeVectors(t, "cursor_v2.json", genCursorV2Vectors(t))
	}
	var f cursorV2File
	readVectors(t, "cursor_v2.json", &f)
	key, session := vecHex(t, f.Key), vecHex(t, f.Session)
	for label, want := range map[string]string{cursorKeyLabel: f.MACKey, cursorSealLabel: f.SealKey} {
		if got := hex.EncodeToString(subkey(key, label)); got != want {
			t.Errorf("subkey %q = %s, want %s", label, got, want)
		}
	}
	if len(f.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range f.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			rebuilt := v
			v2Token(t, key, session, &rebuilt)
			if rebuilt != v {
				t.Fatalf("hand-built vector differs:\n got  %+v\n want %+v", rebuilt, v)
			}
			var args Fingerprint
			copy(args[:], vecHex(t, v.Args))
			scope := CursorScope{ToolID: string(vecHex(t, v.Tool)), CallerID: string(vecHex(t, v.Caller)), Args: args}
			p := CursorPayload{CursorScope: scope, Page: v.Page, State: vecHex(t, v.State)}
			iss := newTestIssuer(t, CursorConfig{Keys: vecKeyring(t, key), Session: session, Now: fixedClock(time.Unix(v.IssuedAt, 0)), Seal: v.Sealed})
			if !v.Sealed {
				if tok, err := iss.Issue(p); err != nil || tok != v.Token {
					t.Fatalf("Issue = %s, %v; want %s", tok, err, v.Token)
				}
			}
			raw, _ := b64.DecodeString(v.Token)
			if len(v.Caller) > 0 && bytes.Contains(raw, vecHex(t, v.Caller)) {
				t.Fatal("the token carries the caller ID")
			}
			if bytes.Contains(raw, []byte("ctoken.scope")) {
				t.Fatal("the token carries its scope")
			}
			got, err := iss.Verify(v.Token, scope)
			if err != nil || got.Page != v.Page || !bytes.Equal(got.State, p.State) || got.IssuedAt.Unix() != v.IssuedAt || got.Args != args {
				t.Fatalf("Verify = %+v, %v", got, err)
			}
			// Another caller, tool, arguments or session, and the TTL.
			cases := map[string]struct {
				scope   CursorScope
				session []byte
				now     int64
				want    error
			}{
				"other caller":  {CursorScope{ToolID: scope.ToolID, CallerID: scope.CallerID + "x", Args: args}, session, v.IssuedAt, ErrCursorInvalid},
				"other tool":    {CursorScope{ToolID: scope.ToolID + "x", CallerID: scope.CallerID, Args: args}, session, v.IssuedAt, ErrCursorInvalid},
				"other args":    {CursorScope{ToolID: scope.ToolID, CallerID: scope.CallerID, Args: Fingerprint{1}}, session, v.IssuedAt, ErrCursorInvalid},
				"other session": {scope, []byte("vectors2"), v.IssuedAt, ErrCursorExpired},
				"TTL + 1 s":     {scope, session, v.IssuedAt + f.TTLSeconds + 1, ErrCursorExpired},
			}
			if !args.IsZero() {
				cases["arguments dropped"] = struct {
					scope   CursorScope
					session []byte
					now     int64
					want    error
				}{CursorScope{ToolID: scope.ToolID, CallerID: scope.CallerID}, session, v.IssuedAt, ErrCursorInvalid}
			}
			for name, c := range cases {
				other := newTestIssuer(t, CursorConfig{Keys: vecKeyring(t, key), Session: c.session, Now: fixedClock(time.Unix(c.now, 0))})
				if _, err := other.Verify(v.Token, c.scope); !errors.Is(err, c.want) {
					t.Errorf("%s: %v, want %v", name, err, c.want)
				}
			}
			if !v.Sealed {
				mac := hmac.New(sha256.New, vecHex(t, f.MACKey))
				mac.Write(vecHex(t, v.CBOR))
				mac.Write(vecHex(t, v.Scope))
				if !bytes.Equal(raw[len(raw)-macSize:], mac.Sum(nil)) || !bytes.Equal(raw[:len(raw)-macSize], vecHex(t, v.CBOR)) {
					t.Fatal("token is not cbor || HMAC-SHA256(mac_key, cbor || scope)")
				}
			}
		})
	}
}

// vecCursorBody is the cursor payload encoding of SPEC §2, built by hand:
// a map with integer keys 1..8 in ascending order, shortest heads, keys 4
// (args) and 8 (state) omitted when empty.
func vecCursorBody(tool, caller string, args []byte, page uint32, issuedAt int64, session, state []byte) []byte {
	n := uint64(6)
	if len(args) > 0 {
		n++
	}
	if len(state) > 0 {
		n++
	}
	b := cborHead(nil, 5, n)
	b = cborHead(b, 0, 1)
	b = cborHead(b, 0, cursorwire.Version1)
	b = cborHead(b, 0, 2)
	b = append(cborHead(b, 3, uint64(len(tool))), tool...)
	b = cborHead(b, 0, 3)
	b = append(cborHead(b, 3, uint64(len(caller))), caller...)
	if len(args) > 0 {
		b = cborHead(b, 0, 4)
		b = append(cborHead(b, 2, uint64(len(args))), args...)
	}
	b = cborHead(b, 0, 5)
	b = cborHead(b, 0, uint64(page))
	b = cborHead(b, 0, 6)
	b = cborInt(b, issuedAt)
	b = cborHead(b, 0, 7)
	b = append(cborHead(b, 2, uint64(len(session))), session...)
	if len(state) > 0 {
		b = cborHead(b, 0, 8)
		b = append(cborHead(b, 2, uint64(len(state))), state...)
	}
	return b
}

// signCursorBody returns the cursor token for an arbitrary body, signed with
// key's cursor subkey: how the tests put hostile CBOR behind a valid MAC.
func signCursorBody(key, body []byte) string {
	raw := append(append([]byte(nil), body...), vecHMAC(vecHKDF(key, cursorKeyLabel), body)...)
	return base64.RawURLEncoding.EncodeToString(raw)
}

// signCursorV2Body is the version 2 cursor of body for scope (v2Scope):
// body || HMAC-SHA256(cursor subkey, body || scope).
func signCursorV2Body(key, body, scope []byte) string {
	mac := vecHMAC(vecHKDF(key, cursorKeyLabel), append(append([]byte(nil), body...), scope...))
	return base64.RawURLEncoding.EncodeToString(append(append([]byte(nil), body...), mac...))
}

// FuzzCursorVerifySigned signs the fuzzed body with the cursor subkey, so the
// strict CBOR decoder and every check after the MAC see hostile input.
func FuzzCursorVerifySigned(f *testing.F) {
	iss := fuzzCursorIssuer(f)
	now := vecNow.Unix()
	f.Add(vecCursorBody("t", "c", nil, 1, now, vecSession, nil), "t", "c")
	f.Add(vecCursorBody("search", "user:42", seqBytes(1, 32), 2, now-10, vecSession, []byte("state")), "search", "user:42")
	f.Add([]byte{0xa0}, "", "")
	f.Add([]byte{0xbf, 0xff}, "", "")
	// Version 2 bodies (signed with the fuzzed scope): authentic, with a
	// short session tag, and with the removed binding field 9.
	for _, v := range []cursorV2Vector{
		{Tool: hex.EncodeToString([]byte("t")), Caller: hex.EncodeToString([]byte("c")), Page: 1, IssuedAt: now},
		{Tool: hex.EncodeToString([]byte("search")), Caller: hex.EncodeToString([]byte("user:42")), Page: 2, IssuedAt: now - 10, State: "00ff"},
	} {
		v2Token(f, vecKey, vecSession, &v)
		body := vecHex(f, v.CBOR)
		tool, caller := string(vecHex(f, v.Tool)), string(vecHex(f, v.Caller))
		f.Add(body, tool, caller)
		f.Add(cursorwire.AppendV2(nil, &cursorwire.BodyV2{Version: cursorwire.Version, Page: v.Page, Issued: v.IssuedAt, Session: []byte{1}}), tool, caller)
		withBind := append([]byte{body[0] + 1}, body[1:]...)
		f.Add(append(withBind, 0x09, 0x41, 0x00), tool, caller)
	}
	f.Fuzz(func(t *testing.T, body []byte, tool, caller string) {
		cursor := signCursorBody(vecKey, body)
		if len(body) >= 3 && body[1] == cursorwire.KeyVersion && body[2] == cursorwire.Version {
			cursor = signCursorV2Body(vecKey, body, v2Scope([]byte(tool), []byte(caller), nil))
		}
		if len(cursor) > MaxCursorBytes {
			return
		}
		checkFuzzCursor(t, iss, cursor, tool, caller)
	})
}

// FuzzCursorVerifySealed seals the fuzzed plaintext under the header with
// the sealed-cursor subkey (the standard library's AES-256-GCM, a fixed
// nonce) and the scope as additional data, so the decoder of the sealed
// map and every check after GCM open see hostile authenticated input; the
// raw fuzzed string is also verified as a token.
func FuzzCursorVerifySealed(f *testing.F) {
	iss := newTestIssuer(f, CursorConfig{Keys: vecKeyring(f, vecKey), Session: vecSession, Now: fixedClock(vecNow), Seal: true})
	now := vecNow.Unix()
	f.Add([]byte{0xa1, 0x05, 0x03}, now, "t", "c", "")
	f.Add([]byte{0xa2, 0x05, 0x00, 0x08, 0x41, 0x78}, now-10, "search", "user:42", "")
	f.Add([]byte{0xa2, 0x05, 0x00, 0x08, 0x40}, now, "t", "c", "")
	f.Add([]byte{0xa1, 0x09, 0x00}, now+3600, "", "", "")
	for _, s := range fuzzScopeSeeds {
		tok, err := iss.Issue(CursorPayload{CursorScope: CursorScope{ToolID: s[0], CallerID: s[1]}, Page: 3, State: []byte("x")})
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(nil), now, s[0], s[1], tok)
		f.Add([]byte(nil), now, s[0], s[1], tok[:len(tok)-1])
	}
	key := subkey(vecKey, cursorSealLabel)
	f.Fuzz(func(t *testing.T, inner []byte, issued int64, tool, caller, token string) {
		scope := CursorScope{ToolID: tool, CallerID: caller}
		if token == "" {
			header := []byte{0xa3, 0x01, 0x03, 0x06}
			if issued < 0 {
				header = cborHead(header, 1, uint64(-(issued + 1)))
			} else {
				header = cborHead(header, 0, uint64(issued))
			}
			tag := cursorSessionTag(vecSession)
			header = append(append(header, 0x07, 0x48), tag[:]...)
			token = sealCursorFuzz(t, key, header, inner, appendScope(append([]byte(nil), header...), &scope))
			if len(token) > MaxCursorBytes {
				return
			}
		}
		p, err := iss.Verify(token, scope)
		if err != nil {
			checkFuzzReasonError(t, err, ErrCursorInvalid, ErrCursorExpired)
			if !reflect.DeepEqual(p, CursorPayload{}) {
				t.Fatalf("rejected cursor returned a payload: %+v", p)
			}
			return
		}
		if p.ToolID != tool || p.CallerID != caller || len(p.State) > MaxOpaqueStateBytes {
			t.Fatalf("accepted %+v for %q/%q", p, tool, caller)
		}
		if age := vecNow.Sub(p.IssuedAt); age > DefaultCursorTTL || age < -maxFutureSkew {
			t.Fatalf("accepted a cursor issued at %v, now %v", p.IssuedAt, vecNow)
		}
	})
}

// Issue 21 gap 8: the other-session hint needs a non-empty session; a forged
// body with an empty one is a plain MAC failure.
func TestCursorForgedWithEmptySessionIsInvalidNotExpired(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	i := newTestIssuer(t, CursorConfig{Keys: mustKeyring(t, vecKey), Session: []byte("ours"), Now: fixedClock(now)})
	body := vecCursorBody(testScope.ToolID, testScope.CallerID, nil, 1, now.Unix(), []byte{}, nil)
	forged := signCursorBody(vecKey2, body) // not our key
	_, err := i.Verify(forged, testScope)
	if !errors.Is(err, ErrCursorInvalid) || Reason(err) != "mac mismatch" {
		t.Fatalf("forged empty-session cursor = %v (reason %q), want ErrCursorInvalid (mac mismatch)", err, Reason(err))
	}
	// The same body with a non-empty foreign session gets the hint.
	body = vecCursorBody(testScope.ToolID, testScope.CallerID, nil, 1, now.Unix(), []byte("theirs"), nil)
	if _, err := i.Verify(signCursorBody(vecKey2, body), testScope); !errors.Is(err, ErrCursorExpired) {
		t.Fatalf("forged foreign-session cursor = %v, want ErrCursorExpired", err)
	}
}
