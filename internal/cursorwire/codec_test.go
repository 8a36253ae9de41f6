package cursorwire

import "github.com/fxamacker/cbor/v2"

var (
	// encMode is the Core Deterministic Encoding the encoders reproduce
	// byte for byte.
	encMode = func() cbor.EncMode {
		m, err := cbor.CoreDetEncOptions().EncMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
	// decMode is the strict decoding the decoders are tested against: they
	// accepts exactly what this mode accepts that is also the canonical
	// encoding of its value.
	decMode = func() cbor.DecMode {
		m, err := cbor.DecOptions{
			DupMapKey:         cbor.DupMapKeyEnforcedAPF,
			IndefLength:       cbor.IndefLengthForbidden,
			TagsMd:            cbor.TagsForbidden,
			ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
			MaxNestedLevels:   4,
			MaxArrayElements:  16,
			MaxMapPairs:       16,
			UTF8:              cbor.UTF8RejectInvalid,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return m
	}()
)
