package ctoken

import (
	"context"
	"strings"
	"time"

	"github.com/ctoken/ctoken/internal/reason"
	"github.com/ctoken/ctoken/internal/stateclaim"
	"github.com/ctoken/ctoken/observe"
)

// Rejections, allocated once.
var (
	errStateEmpty            = reject(ErrStateInvalid, "empty")
	errStateOversize         = reject(ErrStateInvalid, "over MaxBytes")
	errStateMode             = reject(ErrStateInvalid, "unknown prefix or other mode")
	errStateBase64           = reject(ErrStateInvalid, "not base64url")
	errStateFraming          = reject(ErrStateInvalid, "malformed framing")
	errStateMAC              = reject(ErrStateInvalid, "mac mismatch")
	errStateOpen             = reject(ErrStateInvalid, "decryption failed (tampered, other key, or other subject/tool)")
	errStateMalformed        = reject(ErrStateInvalid, "malformed payload")
	errStateBinding          = reject(ErrStateInvalid, "bound to another subject or tool")
	errStateSubjectAmbiguous = reject(ErrStateInvalid, "subject contains NUL (ambiguous under BindSubjectAndTool)")
	errStateExpired          = reject(ErrStateExpired, "past exp")
)

// Decode opens wire, checks that it is bound to subject (and tool) and not
// expired, and returns the state. It tries every key of the ring. It is
// fail-closed: on any error the state is "". Errors match [ErrStateExpired]
// for an authentic state past its expiry and [ErrStateInvalid] for anything
// else (and, in single-use mode, [ErrStateReplayed] or a replay store
// failure; see DecodeContext); a codec not made by [NewRequestStateCodec]
// refuses every state with [ErrNoKey]. [Reason] is non-empty for every
// error. It is DecodeContext with context.Background().
func (c *RequestStateCodec) Decode(wire, subject, tool string) (string, error) {
	return c.DecodeContext(context.Background(), wire, subject, tool)
}

// DecodeContext is Decode with a context for the replay store. In
// single-use mode ([RequestStateSecurity.Replay] set), after every other check
// has passed, the state is claimed in the store until its expiry (plus a 60 s
// clock-skew margin): the first decode of a state succeeds and every later or
// concurrent one fails with [ErrStateReplayed]. A state refused for its binding or expiry is not
// consumed. A store failure (for example [replay.ErrFull], or ctx's error)
// is returned wrapped (errors.Is finds it; [Reason] says "replay store
// failed") and the state is refused. Without Replay, ctx is unused.
func (c *RequestStateCodec) DecodeContext(ctx context.Context, wire, subject, tool string) (string, error) {
	return c.DecodeCheckedContext(ctx, wire, subject, tool, nil)
}

// DecodeCheckedContext is [RequestStateCodec.DecodeContext] with one more
// binding check that the codec cannot make itself, such as the arguments of
// a retried call against a fingerprint sealed inside the state. check is
// called with the state once every check of the codec has passed
// (authenticity, subject, tool, audience, expiry) and, in single-use mode,
// before the state is claimed: a state check refuses is not consumed, so
// the honest retry still opens it once. check returns the state to hand back
// (for example the application's part of it) or an error; its error is
// returned wrapped so that it matches both [ErrStateInvalid] and check's
// error (errors.Is), with the [Reason] "wrong arguments", and no state. A
// nil check is DecodeContext.
func (c *RequestStateCodec) DecodeCheckedContext(ctx context.Context, wire, subject, tool string, check func(state string) (string, error)) (string, error) {
	s, key, store, err := c.decode(ctx, wire, subject, tool, check, nil)
	if err != errStateNoCodec && c.obs != nil {
		observeErr(c.obs, observe.KindRequestState, key, err, store)
	}
	return s, err
}

// decode is DecodeContext, also returning the index of the key that opened
// the state (-1 if none did) and, when an observer is set, how long the
// replay store took. With a non-nil deferred, a single-use codec does not
// claim the state: it fills in deferred's ID, Until and Keys (the ring it
// opened the state with) instead.
func (c *RequestStateCodec) decode(ctx context.Context, wire, subject, tool string, check func(string) (string, error), deferred *stateclaim.Opened) (_ string, key int, store time.Duration, _ error) {
	key = -1
	ks := c.ring()
	if ks == nil {
		return "", key, 0, errStateNoCodec
	}
	if len(wire) == 0 {
		return "", key, 0, errStateEmpty
	}
	if len(wire) > c.maxBytes {
		return "", key, 0, errStateOversize
	}
	if c.ambiguousSubject(subject) {
		return "", key, 0, errStateSubjectAmbiguous
	}
	// Scratch regions: decoded bytes, then the material of a bind tag,
	// then the bind tag itself, then a plaintext, then the unescaped state.
	// Each is at most the wire's length (or the material's).
	matCap := c.materialCap(subject, tool)
	sc := c.getScratch(3*len(wire) + matCap + bindTagLen)
	// Not deferred: decode has too many returns for an open-coded defer,
	// and decodeScratch copies the state out of sc before it returns (a
	// panic only costs the pool this scratch).
	s, key, store, err := c.decodeScratch(ctx, ks, sc, wire, subject, tool, check, deferred)
	c.putScratch(sc)
	return s, key, store, err
}

// decodeScratch is decode after its length checks, working in sc, whose
// buffer has room for every region decode lists.
func (c *RequestStateCodec) decodeScratch(ctx context.Context, ks *stateKeys, sc *stateScratch, wire, subject, tool string, check func(string) (string, error), deferred *stateclaim.Opened) (_ string, key int, store time.Duration, _ error) {
	key = -1
	matLen := c.materialCap(subject, tool)
	buf := sc.buf
	rawRegion := region(buf, 0, len(wire))
	matRegion := region(buf, len(wire), matLen)
	tagRegion := region(buf, len(wire)+matLen, bindTagLen)
	rest := len(wire) + matLen + bindTagLen

	var payload, bound []byte
	// id is the state's authenticator, its replay-store key in single-use
	// mode: the MAC of a signed state, the nonce and tag of an encrypted one.
	var idBuf [max(macSize, gcmNonceSize+gcmTagSize)]byte
	var id []byte
	switch {
	case c.mode == Signed && strings.HasPrefix(wire, signedPrefix):
		body, macText, ok := strings.Cut(wire[len(signedPrefix):], ".")
		if !ok || len(macText) != b64.EncodedLen(macSize) {
			return "", key, 0, errStateFraming
		}
		// []byte(body) neither escapes nor is written to: no copy.
		// The strict decoder refuses every second spelling of a state.
		n, err := b64.Decode(rawRegion[:cap(rawRegion)], []byte(body))
		if err != nil {
			return "", key, 0, errStateBase64
		}
		var mac [macSize]byte
		if m, err := b64.Decode(mac[:], []byte(macText)); err != nil || m != macSize {
			return "", key, 0, errStateBase64
		}
		payload = rawRegion[:n]
		if c.replay != nil {
			id = append(idBuf[:0], mac[:]...)
		}
		if key = ks.payload.verify(payload, mac[:]); key < 0 {
			return "", key, 0, errStateMAC
		}
		bound = c.cachedBindTag(tagRegion, sc, matRegion, ks.bind[key], subject, tool)
	case c.mode == Encrypted && strings.HasPrefix(wire, encryptedPrefix):
		text := wire[len(encryptedPrefix):]
		n, err := b64.Decode(rawRegion[:cap(rawRegion)], []byte(text))
		if err != nil {
			return "", key, 0, errStateBase64
		}
		if n < gcmNonceSize+gcmTagSize {
			return "", key, 0, errStateFraming
		}
		sealed := rawRegion[:n] // nonce12 || ct || tag
		plain := region(buf, rest, n)
		rest += n
		for i, aead := range ks.aead {
			// The bind tag is the additional data: a state opens only for
			// the subject (and tool) it was sealed for.
			tag := c.cachedBindTag(tagRegion, sc, matRegion, ks.bind[i], subject, tool)
			if pt, err := aead.Open(plain, nil, sealed, tag); err == nil {
				payload, key, bound = pt, i, tag
				if c.replay != nil {
					id = append(append(idBuf[:0], sealed[:gcmNonceSize]...), sealed[n-gcmTagSize:]...)
				}
				break
			}
		}
		if key < 0 {
			return "", key, 0, errStateOpen
		}
	default:
		return "", key, 0, errStateMode
	}
	s, exp, b, ok := parseStatePayload(payload, region(buf, rest, len(payload)))
	if !ok {
		return "", key, 0, errStateMalformed
	}
	if !equalSecret(bound, b) {
		return "", key, 0, errStateBinding
	}
	if exp < c.now().Unix() {
		return "", key, 0, errStateExpired
	}
	out := string(s)
	if check != nil {
		var err error
		if out, err = check(out); err != nil {
			// "wrong arguments": the observer's word for it.
			return "", key, 0, reason.Wrap(ErrStateInvalid, "wrong arguments", err)
		}
	}
	if c.replay != nil && deferred != nil {
		deferred.ID, deferred.Until, deferred.Keys = c.claimID(id), claimUntil(exp), ks.kr
	} else if c.replay != nil {
		var err error
		if store, err = c.claimOnce(ctx, id, exp); err != nil {
			return "", key, store, err
		}
	}
	return out, key, store, nil
}
