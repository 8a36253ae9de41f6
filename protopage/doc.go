// Package protopage issues and checks AIP-158 page tokens for protobuf List
// methods with ctoken's signed cursors, for any transport (gRPC, Connect,
// HTTP with protojson): a page token is bound to the RPC's full method
// name, the authenticated caller, and a fingerprint of every field of the
// request except page_size, page_token and AIP-158's optional skip, so a
// client that changes the filter, the order or the parent between pages is
// refused with InvalidArgument, as AIP-158 asks, and a changed page_size or
// skip (which AIP-158 defines relative to the page token) is honored.
// Most users need one [Pager], from [New], and the interceptor of their
// transport (grpcpage, connectpage); ExamplePager_Start shows a List method.
//
// It is the nested module github.com/ctoken/ctoken/protopage and depends
// on google.golang.org/protobuf and ctoken only. The transports live in
// their own modules: github.com/ctoken/ctoken/protopage/grpcpage (a grpc-go
// unary interceptor) and github.com/ctoken/ctoken/protopage/connectpage (a
// Connect interceptor).
//
// # Serving a page
//
// The handler calls the helper; the interceptor (or [WithCall]) supplies
// the method and the caller, and maps the errors to status codes:
//
//	page, err := pager.Start(ctx, req) // verifies req.page_token, if any
//	if err != nil {
//		return nil, err
//	}
//	var after librarypb.BookKey
//	if err := page.StateMessage(&after); err != nil { // zero on the first page
//		return nil, err
//	}
//	books, more := query(req, &after, req.GetPageSize())
//	resp := &librarypb.ListBooksResponse{Books: books}
//	if more {
//		last := books[len(books)-1]
//		resp.NextPageToken, err = page.NextMessage(&librarypb.BookKey{Title: last.Title, Id: last.Id})
//	}
//	return resp, err
//
// The keyset state (the sort key of the last item served) rides in the
// token's opaque state, at most ctoken.MaxOpaqueStateBytes; the server
// keeps nothing between pages. A token is signed, not encrypted: whoever
// holds it can read the method, the caller ID and the state, so bind it to
// a caller ID that is not confidential and keep in the state only what
// the caller was shown. An interceptor alone cannot page: it does
// not know the handler's sort key.
//
// # Errors
//
// [ErrTokenInvalid] (forged so that it does not decode, truncated, not a
// token), [ErrTokenExpired] (older than the issuer's TTL, or from another
// server session: "start over") and [ErrRequestChanged] (other fields, or
// another caller's or another method's token, or a forged one whose body
// still decodes: the MAC binds all three and the token carries none, so
// which it is cannot be known) are InvalidArgument; [ErrNoCaller] is
// Unauthenticated; [ErrKeyTooLarge] (the page's last sort key is over
// [Pager.StateBudget]: the client asks again with another page_size) is
// FailedPrecondition; [ErrServer] is Internal. Their text is fixed and is
// what the client is told; the reason goes to the [Config.Logger] only.
//
// # The request fingerprint
//
// A page token is bound to the SHA-256 of an encoding of the request
// defined here, computed field by field with protoreflect on the parsed
// message, rather than of its protobuf bytes or its protojson text:
// protobuf's deterministic Marshal is stable only within one binary (it is
// not canonical across languages or library versions, and the order of
// unknown fields is the sender's), and protojson drops unknown fields and
// renders numbers and enums by library choice. Working on the parsed
// message makes the fingerprint independent of how the request arrived: a
// token issued for a binary-protobuf request verifies for the same request
// sent as JSON, with its fields in any order and any white space.
//
// The encoding, version 1 (uvarint is protobuf's varint; integers of fixed
// width are big-endian):
//
//	input    = "ctoken/protopage request fingerprint v1" 0x00
//	           uvarint(len(full name)) full name of the request message
//	           M(request)
//	M(m)     = F(f) for each populated field f of m, in ascending field number
//	           0x00
//	           uvarint(len(u)) u   — u: m's unknown fields, see below
//	F(f)     = uvarint(number) card kind … where card is 1 singular, 2 list, 3 map,
//	           and kind is the protoreflect.Kind byte:
//	  singular: card kind E(value)
//	  list:     card kind uvarint(n) E(e1) … E(en)            (in list order)
//	  map:      card keykind valuekind uvarint(n) E(k1) E(v1) … (keys ascending)
//	E(v)     = bool: 1 byte 0 or 1
//	           int32, sint32, sfixed32, int64, sint64, sfixed64, enum: 8 bytes, two's complement
//	           uint32, fixed32, uint64, fixed64: 8 bytes
//	           float: 4 bytes of IEEE 754 bits; double: 8 bytes
//	           string, bytes: uvarint(len) bytes
//	           message, group: M(v)
//
// Field numbers, not names, are encoded, so renaming a field (a
// wire-compatible change) keeps outstanding tokens valid, and so does
// reordering the declarations of the .proto file. Map keys are ordered by
// value (false before true, integers numerically, strings bytewise).
// At the top level only, the page token and page size fields are left out,
// and so is AIP-158's skip field when the request has one (a singular
// integer named Config.SkipField, default "skip").
//
// Populated means protoreflect's Has: a field with explicit presence
// (proto3 optional, a message field, a oneof member, proto2) that is set
// to its default value is bound as set, and differs from the field
// absent; a field with implicit presence (a plain proto3 scalar) holding
// its default value is indistinguishable from absent on the wire, so it is
// bound as absent. An empty list or map is absent. Floating-point values
// are bound by their bits: 0 and -0 differ, and so do NaNs with different
// payloads (a client resending the same request sends the same bits). One
// exception: protoreflect hands a float over widened to a double, which
// quiets a signaling NaN, so a float (not a double) that is a signaling
// NaN is bound as the quiet NaN of the same payload.
//
// Unknown fields — fields the server's schema does not know, sent by a
// newer client in binary protobuf — are bound, not refused and not
// ignored. (protojson refuses them by default, and Connect's JSON codec
// drops them: a field the server never sees is not bound.) Refusing would
// break protobuf's forward compatibility for every List call of a newer
// client, and ignoring would let a client change a field mid-listing that
// a newer instance of the same fleet does know. They are bound as
// received, record by record (tag and value bytes), stably sorted by field
// number: fields of different numbers may come in any order, and the
// order within one number (a repeated field's elements) counts. A client
// that re-encodes an unknown field differently between pages is refused
// with [ErrRequestChanged], which fails safe. During a schema change that
// adds a request field, a token issued by an instance that does not know
// the field is refused by one that does if the request sets it (the field
// is unknown to one and known to the other): the client starts over. A
// google.protobuf.Any is an ordinary message here: its value bytes are
// bound as they are, so the same inner message encoded otherwise (sent as
// JSON on one page and binary on the next) can be refused, which fails
// safe.
//
// Messages are nested at most [MaxDepth] deep. The encoding is hashed as
// it is written, so computing a fingerprint takes little memory of its
// own whatever the request's size: a 16 KiB buffer, and for unknown fields
// out of field-number order 4 bytes per run of one number (at most twice
// their size). A Pager is safe for concurrent use, and so is a Page once
// returned (its methods only read it).
package protopage
