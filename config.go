package ctoken

import "errors"

// ErrConfig reports a configuration that a constructor refuses. The rule is
// the same for every config of this package: the zero value of a field means
// its documented default; a negative duration means "no limit" only where the
// field says so ([CursorConfig.TTL]); any other value that is not valid (a
// negative duration or size, an unknown mode or binding, a session over
// [MaxSessionBytes]) is [ErrConfig] from the constructor, never a silent
// fallback to the default. [Reason] names the field at fault.
var ErrConfig = errors.New("ctoken: invalid configuration")
