package ctoken

import "errors"

// ErrConfig reports a configuration that a constructor refuses: a negative
// duration or size, an unknown mode or binding, or another value that is
// neither 0 (the default) nor valid. Constructors never fall back to a
// default silently; [Reason] names the field at fault.
var ErrConfig = errors.New("ctoken: invalid configuration")
