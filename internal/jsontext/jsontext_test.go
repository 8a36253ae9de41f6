package jsontext

import "testing"

func TestSkipSpaceStopsAtTheFirstByteThatIsNotJSONSpace(t *testing.T) {
	for _, tc := range []struct {
		in       string
		from, to int
	}{
		{"", 0, 0},
		{" \t\n\r", 0, 4},
		{" \t\n\rx", 0, 4},
		{"x ", 0, 0},
		{"a  b", 1, 3},
		{" \v", 0, 1},    // vertical tab is not JSON space
		{" \f", 0, 1},    // nor form feed
		{" \x00", 0, 1},  // nor NUL
		{"  \xa0", 0, 2}, // nor a byte of U+00A0
		{"  ", 2, 2},
	} {
		if got := SkipSpace([]byte(tc.in), tc.from); got != tc.to {
			t.Errorf("SkipSpace(%q, %d) = %d, want %d", tc.in, tc.from, got, tc.to)
		}
	}
}
