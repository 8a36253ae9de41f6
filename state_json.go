package ctoken

import (
	"context"
	"encoding/json"

	"github.com/ctoken/ctoken/internal/reason"
)

// EncodeJSON encodes v with encoding/json and seals it with
// [RequestStateCodec.Encode]. A v that encoding/json cannot encode is
// [ErrUnencodable], wrapping encoding/json's error; a codec not made by
// [NewRequestStateCodec] is [ErrNoKey] whatever v is.
func EncodeJSON[T any](c *RequestStateCodec, v T, subject, tool string) (string, error) {
	if c.ring() == nil {
		return "", errStateNoCodec
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", reason.Wrap(ErrUnencodable, "encoding/json cannot encode the state", err)
	}
	return c.Encode(string(b), subject, tool)
}

var errStateJSON = reject(ErrStateInvalid, "state is not JSON of the requested type")

// DecodeJSON opens wire with [RequestStateCodec.Decode] and decodes the
// state into a T. It is fail-closed: on any error the result is T's zero
// value. It is [DecodeJSONContext] with context.Background().
func DecodeJSON[T any](c *RequestStateCodec, wire, subject, tool string) (T, error) {
	return DecodeJSONContext[T](context.Background(), c, wire, subject, tool)
}

// DecodeJSONContext is [DecodeJSON] with a context for the replay store of a
// single-use codec: it opens wire with [RequestStateCodec.DecodeContext].
// A state that opens but is not JSON of type T is [ErrStateInvalid]; in
// single-use mode it has then been consumed.
func DecodeJSONContext[T any](ctx context.Context, c *RequestStateCodec, wire, subject, tool string) (T, error) {
	var zero T
	s, err := c.DecodeContext(ctx, wire, subject, tool)
	if err != nil {
		return zero, err
	}
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return zero, errStateJSON
	}
	return v, nil
}
