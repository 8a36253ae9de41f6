package jcs

import (
	"math"
	"math/bits"
	"strconv"
	"strings"
	"testing"
)

// strconvShortest reports whether d × 10^q is the shortest round-trip form
// of its nearest double, decided by strconv as the slow path of number
// decides it: the reference for shortestExact.
func strconvShortest(t *testing.T, d uint64, q int) bool {
	t.Helper()
	f, err := strconv.ParseFloat(strconv.FormatUint(d, 10)+"e"+strconv.Itoa(q), 64)
	if err != nil || math.IsInf(f, 0) || f == 0 {
		return false
	}
	short := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±x
	m, e, _ := strings.Cut(short, "e")
	x, err := strconv.Atoi(e)
	if err != nil {
		t.Fatal(err)
	}
	digits := strings.Replace(m, ".", "", 1)
	ds := strconv.FormatUint(d, 10)
	return digits == ds && x == q+len(ds)-1
}

// TestShortestExactMatchesStrconv pins shortestExact, the exact integer
// check that spares number strconv's parse and shortest formatting, against
// strconv: for doubles across the range it covers and beyond (10^-30 to
// 10^45), each written with 15 to 17 significant digits and nudged by up
// to two units in the last digit either way, shortestExact never accepts a
// spelling strconv refuses, and it accepts strconv's own shortest forms of
// 16 and 17 digits almost always (otherwise it buys nothing).
func TestShortestExactMatchesStrconv(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	var shortest, accepted int
	for range 20000 {
		f := math.Float64frombits(1023<<52|next()>>12) * math.Pow(10, float64(int(next()%76)-30))
		for prec := 14; prec <= 16; prec++ {
			s := strconv.FormatFloat(f, 'e', prec, 64)
			m, e, _ := strings.Cut(s, "e")
			d0, err := strconv.ParseUint(strings.Replace(m, ".", "", 1), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			exp := mustAtoi(t, e) - prec
			for delta := -2; delta <= 2; delta++ {
				d, q := uint64(int64(d0)+int64(delta)), exp
				for d%10 == 0 {
					d, q = d/10, q+1
				}
				if d < 1e14 || d >= 1e17 {
					continue
				}
				want := strconvShortest(t, d, q)
				got := shortestExact(d, q)
				if got && !want {
					t.Fatalf("shortestExact(%d, %d) accepts what strconv refuses", d, q)
				}
				if want && d >= 1e15 && q >= -maxPow5 && q < maxPow5 {
					shortest++
					if got {
						accepted++
					}
				}
			}
		}
	}
	if shortest == 0 || accepted < shortest*9/10 {
		t.Fatalf("shortestExact accepted %d of %d shortest forms of 16–17 digits", accepted, shortest)
	}
	t.Logf("accepted %d of %d shortest forms of 16–17 digits", accepted, shortest)
}

// TestNearestDoubleMatchesParseFloat pins nearestDouble, the exact
// conversion shortestExact uses, against strconv.ParseFloat, including
// values halfway between two doubles (where it rounds to even).
func TestNearestDoubleMatchesParseFloat(t *testing.T) {
	x := uint64(0x2545f4914f6cdd1d)
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	check := func(d uint64, q int) {
		t.Helper()
		want, err := strconv.ParseFloat(strconv.FormatUint(d, 10)+"e"+strconv.Itoa(q), 64)
		if err != nil {
			t.Fatal(err)
		}
		m, e := nearestDouble(d, q)
		if m < 1<<52 || m >= 1<<53 || math.Ldexp(float64(m), e) != want {
			t.Fatalf("nearestDouble(%d, %d) = %d × 2^%d, ParseFloat says %v", d, q, m, e, want)
		}
	}
	for range 200000 {
		d := next()%(1<<58-1e14) + 1e14
		q := int(next()%(2*maxPow5+1)) - maxPow5
		check(d, q)
	}
	// Exact halves: an odd integer of 54 bits is halfway between two
	// doubles; times powers of ten, it gives long exact products.
	for range 20000 {
		d := (next()>>10 | 1<<53) | 1
		for q := 0; q <= maxPow5 && bits.Len64(d)+int(float64(q)*2.33)+1 < 120; q++ {
			check(d, q)
		}
		check(d<<4, 0)
	}
}
