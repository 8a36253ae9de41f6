package jcs

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// strconvShortest reports whether d × 10^q is the shortest round-trip form
// of its nearest double, decided by strconv as the slow path of number
// decides it: the reference for shortestExact.
func strconvShortest(t testing.TB, d uint64, q int) bool {
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

// xorshift returns a deterministic pseudo-random sequence.
func xorshift(seed uint64) func() uint64 {
	return func() uint64 {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return seed
	}
}

// TestShortestExactMatchesStrconv pins shortestExact, which spares number
// strconv's parse and shortest formatting, against strconv: for doubles
// across the whole range (normal and subnormal, and powers of two, whose
// rounding interval is lopsided), each written with 1 to 17 significant
// digits and nudged by up to two units in the last digit either way,
// shortestExact never accepts a spelling strconv refuses, and it accepts
// strconv's own shortest forms of 16 and 17 digits almost always
// (otherwise it buys nothing).
func TestShortestExactMatchesStrconv(t *testing.T) {
	exhaustive(t)
	next := xorshift(0x9e3779b97f4a7c15)
	var shortest, accepted int
	count := true
	check := func(f float64, prec int) {
		s := strconv.FormatFloat(f, 'e', prec, 64)
		m, e, _ := strings.Cut(s, "e")
		d0, err := strconv.ParseUint(strings.Replace(m, ".", "", 1), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		exp := mustAtoi(t, e) - prec
		for delta := -2; delta <= 2; delta++ {
			d, q := uint64(int64(d0)+int64(delta)), exp
			if d == 0 {
				continue
			}
			for d%10 == 0 {
				d, q = d/10, q+1
			}
			want := strconvShortest(t, d, q)
			got := shortestExact(d, q)
			if got && !want {
				t.Fatalf("shortestExact(%d, %d) accepts what strconv refuses", d, q)
			}
			if count && want && d >= 1e15 && math.Abs(f) >= 0x1p-1022 {
				shortest++
				if got {
					accepted++
				}
			}
		}
	}
	for range 20000 {
		f := math.Float64frombits(next() >> 1) // any finite or not
		if math.IsInf(f, 0) || math.IsNaN(f) || f == 0 {
			continue
		}
		for prec := 14; prec <= 16; prec++ {
			check(f, prec)
		}
		check(f, int(next()%14))
	}
	if shortest == 0 || accepted < shortest*99/100 {
		t.Fatalf("shortestExact accepted %d of %d shortest forms of 16–17 digits", accepted, shortest)
	}
	t.Logf("accepted %d of %d shortest forms of 16–17 digits", accepted, shortest)
	// Powers of two, the least normal double and its neighbours, the
	// largest doubles, subnormals of few bits. (A power of two's
	// shortest form need not be the nearest decimal of its length when
	// that one lies in the narrower half of the interval, below it:
	// shortestExact leaves those to strconv, so they are not counted.)
	count = false
	for e := -1074; e <= 1023; e++ {
		f := math.Ldexp(1, e)
		for _, g := range []float64{f, math.Nextafter(f, 0), math.Nextafter(f, math.Inf(1))} {
			if g == 0 || math.IsInf(g, 0) {
				continue
			}
			for prec := 0; prec <= 16; prec++ {
				check(g, prec)
			}
		}
	}
	for _, f := range []float64{math.MaxFloat64, math.Nextafter(math.MaxFloat64, 0), math.SmallestNonzeroFloat64 * 3, 0x1p-1022 - 0x1p-1074} {
		for prec := 0; prec <= 16; prec++ {
			check(f, prec)
		}
	}
}

// TestNearestDoubleMatchesParseFloat pins nearestDouble, the conversion
// shortestExact uses, against strconv.ParseFloat, including values halfway
// between two doubles (where it rounds to even or reports false), and its
// delta against the exact difference computed by math/big.
func TestNearestDoubleMatchesParseFloat(t *testing.T) {
	exhaustive(t)
	next := xorshift(0x2545f4914f6cdd1d)
	answered, total := 0, 0
	check := func(d uint64, q int) {
		t.Helper()
		total++
		lit := strconv.FormatUint(d, 10) + "e" + strconv.Itoa(q)
		want, err := strconv.ParseFloat(lit, 64)
		m, x, delta, ok := nearestDouble(d, q)
		if !ok {
			return
		}
		answered++
		if err != nil || m == 0 || m >= 1<<53 || (m < 1<<52 && x != -1074) || math.Ldexp(float64(m), x) != want {
			t.Fatalf("nearestDouble(%d, %d) = %d × 2^%d, ParseFloat says %v (%v)", d, q, m, x, want, err)
		}
		// (f − d×10^q) / 2^x × 2^56 must lie in (delta−2, delta].
		v, _ := new(big.Rat).SetString(lit)
		diff := new(big.Rat).Sub(new(big.Rat).SetFloat64(want), v)
		if 56-x >= 0 {
			diff.Mul(diff, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(56-x))))
		} else {
			diff.Quo(diff, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(x-56))))
		}
		lo := new(big.Rat).SetInt64(delta - 2)
		hi := new(big.Rat).SetInt64(delta)
		if diff.Cmp(lo) <= 0 || diff.Cmp(hi) > 0 {
			t.Fatalf("nearestDouble(%d, %d): delta %d, exact %s", d, q, delta, diff.FloatString(3))
		}
	}
	for range 100000 {
		d := next() >> (next() % 64)
		if d == 0 {
			continue
		}
		q := int(next()%uint64(pow10Max-pow10Min+1)) + pow10Min
		check(d, q)
		// The same value near the double range: q so that the value
		// is about 10^-330 to 10^310.
		q = int(next()%640) - 330 - len(strconv.FormatUint(d, 10))
		if q >= pow10Min {
			check(d, q)
		}
	}
	// Around powers of two, where rounding up carries into the next
	// binade: shortest forms of the power and its neighbours, nudged.
	for e := -1074; e <= 1023; e++ {
		f := math.Ldexp(1, e)
		for _, g := range []float64{f, math.Nextafter(f, 0), math.Nextafter(f, math.Inf(1))} {
			if g == 0 || math.IsInf(g, 0) {
				continue
			}
			m, ex, _ := strings.Cut(strconv.FormatFloat(g, 'e', 16, 64), "e")
			d, _ := strconv.ParseUint(strings.Replace(m, ".", "", 1), 10, 64)
			for _, nd := range []uint64{d - 1, d, d + 1} {
				check(nd, mustAtoi(t, ex)-16)
			}
		}
	}
	// Exact halves: an odd integer of 54 bits is halfway between two
	// doubles; times powers of ten, it gives long exact products.
	for range 2000 {
		d := (next()>>10 | 1<<53) | 1
		for q := 0; q <= 20; q++ {
			check(d, q)
		}
		check(d<<4, 0)
	}
	if answered < total*9/10 {
		t.Fatalf("nearestDouble answered %d of %d", answered, total)
	}
}

// TestPow10Tab recomputes pow10Tab with math/big: T = ⌊10^q / 2^e⌋ with
// e = pow10Exp(q), of exactly 128 bits.
func TestPow10Tab(t *testing.T) {
	for i, r := range pow10Tab {
		q := pow10Min + i
		e := pow10Exp(q)
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(q, -q))), nil)
		want := new(big.Int)
		switch {
		case q >= 0 && e >= 0:
			want.Rsh(p, uint(e))
		case q >= 0:
			want.Lsh(p, uint(-e))
		default:
			want.Lsh(big.NewInt(1), uint(-e))
			want.Quo(want, p)
		}
		got := new(big.Int).Lsh(new(big.Int).SetUint64(r.hi), 64)
		got.Or(got, new(big.Int).SetUint64(r.lo))
		if got.Cmp(want) != 0 || got.BitLen() != 128 {
			t.Fatalf("pow10Tab[%d] (10^%d) = %x, want %x with 128 bits", i, q, got, want)
		}
	}
}

// TestShortestExactSettlesTheWholeRange pins what shortestExact covers
// beyond 16–17-digit normal numbers (what it settles, strconv no longer
// has to): the extremes of the double range, nearly every power of two
// (whose rounding interval is lopsided) and nearly every subnormal,
// written in their shortest form; and that outside its table of powers of
// ten it leaves the decision to strconv.
func TestShortestExactSettlesTheWholeRange(t *testing.T) {
	shortestForm := func(f float64) (uint64, int) {
		m, e, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
		digits := strings.Replace(m, ".", "", 1)
		d, err := strconv.ParseUint(digits, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return d, mustAtoi(t, e) - len(digits) + 1
	}
	for _, f := range []float64{math.MaxFloat64, 0x1p-1022, math.SmallestNonzeroFloat64, 3 * math.SmallestNonzeroFloat64, 0x1p-1022 - 0x1p-1074, 0.30000000000000004} {
		if d, q := shortestForm(f); !shortestExact(d, q) {
			t.Errorf("shortestExact(%d, %d) does not settle %v", d, q, f)
		}
	}
	count := func(name string, fs []float64, atLeast float64) {
		settled := 0
		for _, f := range fs {
			d, q := shortestForm(f)
			if shortestExact(d, q) {
				settled++
			}
		}
		if float64(settled) < atLeast*float64(len(fs)) {
			t.Errorf("shortestExact settles %d of %d %s", settled, len(fs), name)
		}
		t.Logf("shortestExact settles %d of %d %s", settled, len(fs), name)
	}
	var powers, subnormals []float64
	for e := -1074; e <= 1023; e++ {
		powers = append(powers, math.Ldexp(1, e))
	}
	next := xorshift(0x9e3779b97f4a7c15)
	for range 10000 {
		subnormals = append(subnormals, math.Float64frombits(next()%(1<<52-1)+1))
	}
	count("powers of two", powers, 0.9)
	count("subnormals", subnormals, 0.9)
	for _, q := range []int{pow10Min - 1, pow10Min - 100, pow10Max + 1, pow10Max + 100} {
		if shortestExact(1, q) || shortestExact(12345678901234567, q) {
			t.Errorf("shortestExact settles 10^%d, outside its table", q)
		}
	}
}
