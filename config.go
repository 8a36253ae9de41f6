package ctoken

import "errors"

// ErrConfig reports a configuration that a constructor refuses: a value
// outside what its field documents (for example a negative duration where
// the field does not say "negative means no limit"). Constructors never
// fall back to a default for an invalid value; the default is only ever
// the zero value's meaning.
var ErrConfig = errors.New("ctoken: invalid configuration")
