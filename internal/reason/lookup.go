package reason

import "fmt"

// Lookup answers which typed reason an error carries, for the packages
// that export a ReasonOf: a rejection value the package allocated once by
// one map lookup (no allocation), any other error by parsing the reason of
// the first [Error] in its tree. It holds no mutable state after
// [NewLookup]: safe for concurrent use.
//
// The zero Lookup answers the zero R for every error.
type Lookup[R comparable] struct {
	byValue map[*Error]R
	parse   func(string) (R, bool)
}

// NewLookup returns the [Lookup] of the given rejection values, parsing
// reasons with parse (which returns the zero R and false for a text
// outside its set). It panics if a rejection is not an [*Error] or its
// reason does not parse: a fault of the package that builds the table,
// found when that package is loaded, never an input's.
func NewLookup[R comparable](parse func(string) (R, bool), rejections ...error) Lookup[R] {
	m := make(map[*Error]R, len(rejections))
	for i, e := range rejections {
		re, ok := e.(*Error)
		if !ok {
			panic(fmt.Sprintf("reason: rejection %d (%T) is not a *reason.Error", i, e))
		}
		r, ok := parse(re.reason)
		if !ok {
			panic(fmt.Sprintf("reason: rejection %d has reason %q, outside the set", i, re.reason))
		}
		m[re] = r
	}
	return Lookup[R]{byValue: m, parse: parse}
}

// Of returns the reason err carries: the zero R for nil, for an error with
// no [Error] in its tree, and for a reason outside the set. It never
// panics: only an [*Error] is looked up in the map (a map lookup hashes its
// key, and an error of an unhashable type would panic).
func (l Lookup[R]) Of(err error) R {
	var zero R
	if err == nil || l.parse == nil {
		return zero
	}
	if re, ok := err.(*Error); ok {
		if r, ok := l.byValue[re]; ok {
			return r
		}
	}
	r, _ := l.parse(Of(err))
	return r
}

// Len returns how many rejection values l maps, so that a package's test
// can check its table names every one.
func (l Lookup[R]) Len() int { return len(l.byValue) }
