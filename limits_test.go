package ctoken

// Resource limits: oversize input is refused before any decoding, without
// allocating; input within the caps costs a small, bounded amount of memory;
// and the strict CBOR decoder refuses hostile structure (deep nesting, huge
// declared lengths, duplicate keys, indefinite lengths, tags) behind a valid
// MAC as well as on the unauthenticated classification path.

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// bytesPerRun returns the heap bytes allocated per call of f: the average
// over runs calls, taking the smallest of three trials so that stray
// allocations by the runtime or the testing package do not count. Tests
// using it must not run in parallel with others.
func bytesPerRun(runs int, f func()) uint64 {
	f() // warm up pools and lazily initialized state
	best := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&after)
		best = min(best, (after.TotalAlloc-before.TotalAlloc)/uint64(runs))
	}
	return best
}

const hugeInput = 64 << 20 // 64 MiB

func TestDecodersRefuseHugeInputWithoutAllocating(t *testing.T) {
	huge := strings.Repeat("A", hugeInput)
	iss := vecIssuer(t, vecNow, vecSession, vecKey)
	signed := vecCodec(t, Signed, BindSubject, vecNow, vecKey)
	encrypted := vecCodec(t, Encrypted, BindSubject, vecNow, vecKey)
	hugeSigned := signedPrefix + huge + "." + strings.Repeat("A", 43)
	hugeEncrypted := encryptedPrefix + huge
	// The generic helpers may allocate their result variable up front (a
	// few bytes, whatever the input); the decoders themselves allocate
	// nothing at all.
	for _, tc := range []struct {
		name   string
		run    func() error
		want   error
		allocs int
	}{
		{"CursorIssuer.Verify", func() error { _, err := iss.Verify(huge, CursorScope{}); return err }, ErrCursorInvalid, 0},
		{"VerifyState", func() error { _, _, err := VerifyState[map[string]any](iss, huge, CursorScope{}); return err }, ErrCursorInvalid, 1},
		{"RequestStateCodec.Decode signed", func() error { _, err := signed.Decode(hugeSigned, "alice", ""); return err }, ErrStateInvalid, 0},
		{"RequestStateCodec.Decode encrypted", func() error { _, err := encrypted.Decode(hugeEncrypted, "alice", ""); return err }, ErrStateInvalid, 0},
		{"DecodeJSON", func() error { _, err := DecodeJSON[map[string]any](signed, hugeSigned, "alice", ""); return err }, ErrStateInvalid, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if allocs := testing.AllocsPerRun(10, func() { _ = tc.run() }); allocs > float64(tc.allocs) {
				t.Errorf("%v allocations refusing a 64 MiB input, want at most %d", allocs, tc.allocs)
			}
			if n := bytesPerRun(10, func() { _ = tc.run() }); n > 64*uint64(tc.allocs) {
				t.Errorf("%d bytes allocated refusing a 64 MiB input, want at most %d", n, 64*tc.allocs)
			}
		})
	}
}

func TestDecodersAllocateBoundedMemoryWithinTheCap(t *testing.T) {
	iss := vecIssuer(t, vecNow, vecSession, vecKey)
	p := CursorPayload{CursorScope: CursorScope{ToolID: "t", CallerID: "c", Args: Fingerprint{1}}, State: seqBytes(0, MaxOpaqueStateBytes)}
	cursor, err := iss.Issue(p)
	if err != nil {
		t.Fatal(err)
	}
	codecs := map[RequestStateMode]*RequestStateCodec{
		Signed:    vecCodec(t, Signed, BindSubject, vecNow, vecKey),
		Encrypted: vecCodec(t, Encrypted, BindSubject, vecNow, vecKey),
	}
	// The largest state that fits the default cap, in each mode.
	wires := map[RequestStateMode]string{}
	for mode, c := range codecs {
		lo, hi := 0, DefaultStateMaxBytes
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if _, err := c.Encode(strings.Repeat("x", mid), "alice", ""); err == nil {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		w, err := c.Encode(strings.Repeat("x", lo), "alice", "")
		if err != nil || len(w) < DefaultStateMaxBytes-8 {
			t.Fatalf("%v: largest state %d bytes, wire %d bytes: %v", mode, lo, len(w), err)
		}
		wires[mode] = w
	}

	// Bounds: a cursor is at most MaxCursorBytes, so its decode may cost a
	// small constant; a request state may cost a few copies of its capped
	// input (the base64 source and result, the parsed state string and its
	// growth) plus a constant. Measured at the time of writing: about 4.4x
	// the cap signed, 5.1x encrypted.
	const constant = 4 << 10
	for _, tc := range []struct {
		name  string
		run   func() error
		limit uint64
	}{
		{"CursorIssuer.Verify", func() error {
			_, err := iss.Verify(cursor, CursorScope{ToolID: "t", CallerID: "c", Args: Fingerprint{1}})
			return err
		}, constant},
		{"RequestStateCodec.Decode signed", func() error {
			_, err := codecs[Signed].Decode(wires[Signed], "alice", "")
			return err
		}, 6*DefaultStateMaxBytes + constant},
		{"RequestStateCodec.Decode encrypted", func() error {
			_, err := codecs[Encrypted].Decode(wires[Encrypted], "alice", "")
			return err
		}, 6*DefaultStateMaxBytes + constant},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(); err != nil {
				t.Fatal(err)
			}
			n := bytesPerRun(20, func() { _ = tc.run() })
			t.Logf("%d bytes per decode", n)
			if n > tc.limit {
				t.Errorf("%d bytes per decode, limit %d", n, tc.limit)
			}
		})
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

// TestVerifyStateRefusesHostileState puts hostile CBOR in the opaque state of
// an authentic cursor, where VerifyState's more permissive decoder reads it.
func TestVerifyStateRefusesHostileState(t *testing.T) {
	iss := vecIssuer(t, vecNow, vecSession, vecKey)
	scope := CursorScope{ToolID: "t", CallerID: "c"}
	u64 := func(major byte) []byte { return []byte{major<<5 | 27, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff} }
	for _, tc := range []struct {
		name  string
		state []byte
	}{
		{"nesting over 16 levels", bytes.Repeat([]byte{0x81}, 200)},
		{"indefinite nesting", append(bytes.Repeat([]byte{0x9f}, 100), bytes.Repeat([]byte{0xff}, 100)...)},
		{"array declaring 2^63 elements", u64(4)},
		{"map declaring 2^63 pairs", u64(5)},
		{"bytes declaring 2^63", u64(2)},
		{"duplicate map key", []byte{0xa2, 0x61, 0x6b, 0x01, 0x61, 0x6b, 0x02}},
		{"indefinite-length map", []byte{0xbf, 0x61, 0x6b, 0x01, 0xff}},
		{"invalid UTF-8 text", []byte{0x61, 0xff}},
		{"trailing bytes", []byte{0x01, 0x02}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cursor, err := iss.Issue(CursorPayload{CursorScope: scope, State: tc.state})
			if err != nil {
				t.Fatal(err)
			}
			v, p, err := VerifyState[any](iss, cursor, scope)
			if !errors.Is(err, ErrCursorInvalid) || v != nil || p.State != nil {
				t.Errorf("VerifyState = %v, %+v, %v; want ErrCursorInvalid and zero values", v, p, err)
			}
			if n := bytesPerRun(5, func() { _, _, _ = VerifyState[any](iss, cursor, scope) }); n > 16<<10 {
				t.Errorf("%d bytes allocated refusing a %d-byte cursor", n, len(cursor))
			}
		})
	}
}

// TestDecodeRefusesHostilePayloads seals hostile payloads with the codec's
// own keys, so the payload parser rather than the MAC refuses them.
func TestDecodeRefusesHostilePayloads(t *testing.T) {
	tag := vecBindTag(vecKey, BindSubject, "alice", "")
	exp := "1767323345"
	for _, tc := range []struct {
		name    string
		payload string
		want    error
	}{
		{"duplicate member", `{"s":"a","s":"b","exp":` + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"unknown member", `{"s":"a","exp":` + exp + `,"b":"` + tag + `","x":1}`, ErrStateInvalid},
		{"missing exp", `{"s":"a","b":"` + tag + `"}`, ErrStateInvalid},
		{"state not a string", `{"s":{"a":1},"exp":` + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"deeply nested state", `{"s":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `,"exp":` + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"exp overflows int64", `{"s":"a","exp":9223372036854775808,"b":"` + tag + `"}`, ErrStateInvalid},
		{"exp with fraction", `{"s":"a","exp":` + exp + `.5,"b":"` + tag + `"}`, ErrStateInvalid},
		{"exp with exponent", `{"s":"a","exp":1e10,"b":"` + tag + `"}`, ErrStateInvalid},
		{"exp with leading zero", `{"s":"a","exp":0` + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"exp as string", `{"s":"a","exp":"` + exp + `","b":"` + tag + `"}`, ErrStateInvalid},
		{"lone surrogate in state", `{"s":"\ud800","exp":` + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"invalid UTF-8 in state", "{\"s\":\"\xff\",\"exp\":" + exp + `,"b":"` + tag + `"}`, ErrStateInvalid},
		{"trailing garbage", `{"s":"a","exp":` + exp + `,"b":"` + tag + `"}x`, ErrStateInvalid},
		{"array", `["a",` + exp + `,"` + tag + `"]`, ErrStateInvalid},
		{"other bind tag", `{"s":"a","exp":` + exp + `,"b":"` + vecBindTag(vecKey, BindSubject, "mallory", "") + `"}`, ErrStateInvalid},
		{"most negative exp", `{"s":"a","exp":-9223372036854775808,"b":"` + tag + `"}`, ErrStateExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []RequestStateMode{Signed, Encrypted} {
				wire := vecSignedWire(vecKey, []byte(tc.payload))
				if mode == Encrypted {
					wire = vecEncryptedWire(t, vecKey, seqBytes(9, gcmNonceSize), []byte(tc.payload), tag)
				}
				s, err := vecCodec(t, mode, BindSubject, vecNow, vecKey).Decode(wire, "alice", "")
				if !errors.Is(err, tc.want) || s != "" {
					t.Errorf("%s: Decode = %q, %v; want %v", modeNames[mode], s, err, tc.want)
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
