// Package jsontext holds the JSON lexing ctoken's packages share.
package jsontext

// SkipSpace returns the index of the first byte of b at or after i that is
// not JSON white space (space, tab, newline, carriage return), or len(b).
func SkipSpace(b []byte, i int) int {
	// One compare settles the common case, a byte above ' '.
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
