package jcs

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// TestTinyNumbersMatchParseFloat pins the exact division that replaces
// strconv.ParseFloat for values below 2^-1021 (where ParseFloat takes tens
// of µs): for doubles across that range, each written with 1 to 17
// significant digits and nudged a unit in the last digit either way,
// CanonicalJSON accepts exactly the spellings whose value is the shortest
// form of ParseFloat's double, and writes that form.
func TestTinyNumbersMatchParseFloat(t *testing.T) {
	exhaustive(t)
	bitsOf := []uint64{1, 2, 3, 10, 1 << 20, 1<<52 - 1, 1 << 52, 1<<52 + 1, 1<<53 - 1, 1 << 53}
	x := uint64(0x9e3779b97f4a7c15)
	for range 300 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		bitsOf = append(bitsOf, x%(1<<53+1), x%(1<<12))
	}
	for _, bits := range bitsOf {
		f := math.Float64frombits(bits)
		for prec := range 17 {
			s := strconv.FormatFloat(f, 'e', prec, 64)
			mant, exp, _ := strings.Cut(s, "e")
			digits := strings.Replace(mant, ".", "", 1)
			d, _ := strconv.ParseUint(digits, 10, 64)
			for _, nd := range []uint64{d - 1, d, d + 1} {
				if nd == 0 {
					continue
				}
				ds := strconv.FormatUint(nd, 10)
				text := "0." + ds + "e" + strconv.Itoa(mustAtoi(t, exp)+1)
				// 0.ds × 10^(exp+1): s itself when nd is d.
				t.Run(text, func(t *testing.T) {
					got, err := Canonical([]byte(text))
					g, perr := strconv.ParseFloat(text, 64)
					short := strconv.FormatFloat(g, 'e', -1, 64)
					sm, _, _ := strings.Cut(short, "e")
					wantOK := perr == nil && g != 0 && strings.TrimRight(strings.Replace(sm, ".", "", 1), "0") == strings.TrimRight(ds, "0") &&
						sameScale(short, text)
					if (err == nil) != wantOK {
						t.Fatalf("accepted %v, want %v (ParseFloat %s)", err == nil, wantOK, short)
					}
					if err == nil {
						if back, _ := strconv.ParseFloat(string(got), 64); back != g {
							t.Fatalf("canonical %s is not ParseFloat's %s", got, short)
						}
					}
				})
			}
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sameScale reports whether the shortest form short (d.ddde±x) and text
// (0.ddd e y) put their first digit at the same decimal place.
func sameScale(short, text string) bool {
	_, se, _ := strings.Cut(short, "e")
	_, te, _ := strings.Cut(text, "e")
	a, _ := strconv.Atoi(se)
	b, _ := strconv.Atoi(te)
	return a+1 == b
}

// TestDigitsValueMatchesParseUint pins digitsValue, which reads digits
// eight at a time where it can, against strconv.ParseUint, for every
// length from 1 to 17 and every cut into the two runs it reads.
func TestDigitsValueMatchesParseUint(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	cases := []string{"1", "9", "1000000000000000", "9999999999999999", "10000000000000000", "99999999999999999", "1234567890123456", "12345678901234567"}
	for range 10000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		cases = append(cases, strconv.FormatUint(x%9e15+1e15, 10), strconv.FormatUint(x%9e16+1e16, 10), strconv.FormatUint(x%1e15, 10))
	}
	for _, s := range cases {
		want, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		for cut := range len(s) + 1 {
			if got := digitsValue([]byte(s[:cut]), []byte(s[cut:])); got != want {
				t.Fatalf("digitsValue(%q, %q) = %d", s[:cut], s[cut:], got)
			}
		}
	}
}

// TestTinyRecip recomputes tinyQuotient's table with math/big.
func TestTinyRecip(t *testing.T) {
	for i, r := range tinyRecip {
		m := tinyPow10Min + i
		p5 := new(big.Int).Exp(big.NewInt(5), big.NewInt(int64(m)), nil)
		want := new(big.Int).Lsh(big.NewInt(1), uint(1074-m+r.shift))
		want.Quo(want, p5)
		got := new(big.Int).Lsh(new(big.Int).SetUint64(r.hi), 64)
		got.Or(got, new(big.Int).SetUint64(r.lo))
		if got.Cmp(want) != 0 || got.BitLen() != 128 {
			t.Fatalf("tinyRecip[%d] (m = %d) = %x, want %x with 128 bits", i, m, got, want)
		}
	}
}

// TestTinyQuotientMatchesBig pins tinyQuotient against the exact division
// by math/big it spares, for every m it covers and digits of every length:
// it answers whenever k is under 2^64, and answers the same k.
func TestTinyQuotientMatchesBig(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	answered := 0
	for range 100000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		d := x >> (7 + x%57)
		if d == 0 {
			continue
		}
		m := tinyPow10Min + int(x>>32%uint64(len(tinyRecip)))
		num := new(big.Int).Lsh(new(big.Int).SetUint64(d), 1074)
		den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(m)), nil)
		k, r := new(big.Int).QuoRem(num, den, new(big.Int))
		if r.Lsh(r, 1).Cmp(den) > 0 {
			k.Add(k, big.NewInt(1))
		}
		got, ok := tinyQuotient(d, m)
		if !ok {
			if k.BitLen() <= 63 { // k < 2^63: the 2k tinyQuotient shifts out fits in 64 bits
				t.Fatalf("tinyQuotient(%d, %d) refused; k = %v", d, m, k)
			}
			continue
		}
		answered++
		if !k.IsUint64() || k.Uint64() != got {
			t.Fatalf("tinyQuotient(%d, %d) = %d, want %v", d, m, got, k)
		}
	}
	if answered < 50000 {
		t.Fatalf("tinyQuotient answered %d of 100000", answered)
	}
}

// TestTinyQuotientRefusesOutsideItsTable pins the bounds of tinyQuotient's
// table: it answers at both ends (m = tinyPow10Min and the last m) and
// refuses the m just outside them rather than read past the table.
func TestTinyQuotientRefusesOutsideItsTable(t *testing.T) {
	last := tinyPow10Min + len(tinyRecip) - 1
	for _, c := range []struct {
		d      uint64
		m      int
		answer bool
	}{
		{1, tinyPow10Min, true}, {4450147717014403, tinyPow10Min + 16, true},
		{99999999999999999, last, true}, {1, last, true},
		{1, tinyPow10Min - 1, false}, {1, last + 1, false}, {1, 0, false}, {1, 1000, false},
	} {
		got, ok := tinyQuotient(c.d, c.m)
		if ok != c.answer {
			t.Fatalf("tinyQuotient(%d, %d) answered %v, want %v", c.d, c.m, ok, c.answer)
		}
		if !ok {
			continue
		}
		k, r := new(big.Int).QuoRem(new(big.Int).Lsh(new(big.Int).SetUint64(c.d), 1074),
			new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(c.m)), nil), new(big.Int))
		if r.Lsh(r, 1).Cmp(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(c.m)), nil)) > 0 {
			k.Add(k, big.NewInt(1))
		}
		if !k.IsUint64() || k.Uint64() != got {
			t.Fatalf("tinyQuotient(%d, %d) = %d, want %v", c.d, c.m, got, k)
		}
	}
}

// TestTinyQuotientTruncationIsExact shows what tinyQuotient's rounding
// rests on: for every m of its table (R, s) and every d for which
// ⌊d × R / 2^(s-1)⌋ < 2^64 (d ≤ D), no multiple of M = 2^(s-1) lies in
// (d × R, d × R + d], where the exact product lies, so the truncated
// product has the exact value's rounding bit. Such a d would make
// e = (−d × R) mod M at most d: (d, e) would be a point of the lattice
// spanned by (1, −R mod M) and (0, M) in the triangle 0 < e ≤ d ≤ D. The
// test reduces that basis (Lagrange–Gauss): every point i·b1 + j·b2 of a
// reduced basis has length at least max(|i|, |j|)·|b1|·√3/2, and a point
// of the triangle at most √2·D, so |i|, |j| ≤ K below covers them all. It
// visits them: none is in the triangle.
func TestTinyQuotientTruncationIsExact(t *testing.T) {
	dot := func(a, b [2]*big.Int) *big.Int {
		p := new(big.Int).Mul(a[0], b[0])
		return p.Add(p, new(big.Int).Mul(a[1], b[1]))
	}
	for i, r := range tinyRecip {
		R := new(big.Int).Lsh(new(big.Int).SetUint64(r.hi), 64)
		R.Or(R, new(big.Int).SetUint64(r.lo))
		M := new(big.Int).Lsh(big.NewInt(1), uint(r.shift-1))
		D := new(big.Int).Lsh(big.NewInt(1), uint(r.shift-1+64))
		D.Sub(D, big.NewInt(1)).Quo(D, R)
		if maxD := new(big.Int).SetUint64(math.MaxUint64); D.Cmp(maxD) > 0 {
			D = maxD
		}
		negR := new(big.Int).Neg(R)
		b1 := [2]*big.Int{big.NewInt(1), negR.Mod(negR, M)}
		b2 := [2]*big.Int{big.NewInt(0), new(big.Int).Set(M)}
		for {
			if dot(b1, b1).Cmp(dot(b2, b2)) > 0 {
				b1, b2 = b2, b1
			}
			// mu = round(b1·b2 / b1·b1), by floor((2·num + den) / (2·den)).
			den := dot(b1, b1)
			num := dot(b1, b2)
			mu := new(big.Int).Lsh(num, 1)
			mu.Add(mu, den).Div(mu, new(big.Int).Lsh(den, 1))
			if mu.Sign() == 0 {
				break
			}
			b2 = [2]*big.Int{new(big.Int).Sub(b2[0], new(big.Int).Mul(mu, b1[0])), new(big.Int).Sub(b2[1], new(big.Int).Mul(mu, b1[1]))}
		}
		// K ≥ √(8·D² / (3·|b1|²)).
		k2 := new(big.Int).Mul(D, D)
		k2.Mul(k2, big.NewInt(8)).Quo(k2, new(big.Int).Mul(big.NewInt(3), dot(b1, b1)))
		K := new(big.Int).Sqrt(k2).Int64() + 1
		if K > 200 {
			t.Fatalf("m = %d: %d lattice points on a side to visit", tinyPow10Min+i, 2*K+1)
		}
		for a := -K; a <= K; a++ {
			for b := -K; b <= K; b++ {
				d := new(big.Int).Add(new(big.Int).Mul(big.NewInt(a), b1[0]), new(big.Int).Mul(big.NewInt(b), b2[0]))
				e := new(big.Int).Add(new(big.Int).Mul(big.NewInt(a), b1[1]), new(big.Int).Mul(big.NewInt(b), b2[1]))
				if e.Sign() > 0 && e.Cmp(d) <= 0 && d.Cmp(D) <= 0 {
					t.Fatalf("m = %d: d = %v has d×R within d below a multiple of 2^%d", tinyPow10Min+i, d, r.shift-1)
				}
			}
		}
	}
}

// TestNumberSpellingsOfOneDouble pins the paths of number that copy a
// literal already in ECMAScript's form (plain, or d.ddde±x) against the
// reference formatting (appendES6NumberRef): for doubles across the range,
// their ECMAScript form and other spellings of the same value (upper-case
// E, no sign, a leading zero in the exponent, a trailing zero in the
// fraction, the point moved) all come out as the ECMAScript form.
func TestNumberSpellingsOfOneDouble(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	checked, exponentForms := 0, 0
	for range 20000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		f := math.Float64frombits(x >> 1)
		if math.IsInf(f, 0) || math.IsNaN(f) || f == 0 {
			continue
		}
		if x%2 == 0 {
			f = math.Round(f*1e4) / 1e4 // few digits too
			if f == 0 || math.IsInf(f, 0) {
				continue
			}
		}
		want := string(appendES6NumberRef(nil, f))
		m, e, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
		xp := mustAtoi(t, e)
		digits := strings.Replace(m, ".", "", 1) // with its sign
		spellings := []string{want, m + "E" + strconv.Itoa(xp), m + "e" + strconv.Itoa(xp), m + "e+0" + strconv.Itoa(xp),
			digits + "e" + strconv.Itoa(xp-len(strings.TrimPrefix(digits, "-"))+1)}
		if strings.Contains(m, ".") {
			spellings = append(spellings, m+"0e"+strconv.Itoa(xp))
		} else {
			spellings = append(spellings, m+".0e"+strconv.Itoa(xp))
		}
		for _, lit := range spellings {
			g, err := strconv.ParseFloat(lit, 64)
			if err != nil || g != f {
				continue // a spelling of another value: not this test's subject
			}
			p := jcsParser{in: []byte(lit)}
			got, err := p.number(nil)
			if err != nil || string(got) != want {
				t.Fatalf("%q: got %q, %v; want %s", lit, got, err, want)
			}
			checked++
			if lit == want && strings.Contains(lit, "e") {
				exponentForms++
			}
		}
	}
	if checked < 50000 || exponentForms < 5000 {
		t.Fatalf("checked %d spellings, %d of them ECMAScript's exponent form", checked, exponentForms)
	}
}

// TestTinyDoubleMatchesParseFloat pins tinyDouble, which number reaches
// for values below 2^-1021 that shortestExact leaves (most of those it
// settles itself), directly against strconv.ParseFloat: for doubles across
// that range written with 1 to 17 significant digits and nudged a unit
// either way, where it answers it answers ParseFloat's double, and it
// answers nearly always; outside its range of point it reports false.
func TestTinyDoubleMatchesParseFloat(t *testing.T) {
	exhaustive(t)
	x := uint64(0x2545f4914f6cdd1d)
	var p jcsParser
	answered, total := 0, 0
	for range 3000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		f := math.Float64frombits(x % (1<<53 + 1))
		if f == 0 {
			continue
		}
		for prec := range 17 {
			m, e, _ := strings.Cut(strconv.FormatFloat(f, 'e', prec, 64), "e")
			d, _ := strconv.ParseUint(strings.Replace(m, ".", "", 1), 10, 64)
			for _, nd := range []uint64{d - 1, d, d + 1} {
				ds := strings.TrimRight(strconv.FormatUint(nd, 10), "0")
				if nd == 0 || len(ds) > 17 {
					continue
				}
				point := mustAtoi(t, e) + 1 + len(strconv.FormatUint(nd, 10)) - len(strconv.FormatUint(d, 10))
				text := "0." + ds + "e" + strconv.Itoa(point)
				want, err := strconv.ParseFloat(text, 64)
				if err != nil || point <= -324 || point > -307 {
					continue
				}
				total++
				got, ok := p.tinyDouble([]byte(ds), point)
				if !ok {
					continue
				}
				answered++
				if got != want {
					t.Fatalf("tinyDouble(%s, %d) = %v, ParseFloat(%s) = %v", ds, point, got, text, want)
				}
			}
		}
	}
	if total == 0 || answered < total*95/100 {
		t.Fatalf("tinyDouble answered %d of %d", answered, total)
	}
	// At the edges of its range: point −307 and −323, and 2^-1021 itself.
	for _, c := range []struct {
		ds    string
		point int
	}{{"1", -307}, {"4450147717014403", -307}, {"5", -323}, {"25", -323}} {
		got, ok := p.tinyDouble([]byte(c.ds), c.point)
		want, _ := strconv.ParseFloat("0."+c.ds+"e"+strconv.Itoa(c.point), 64)
		if !ok || got != want {
			t.Errorf("tinyDouble(%s, %d) = %v, %v; want %v", c.ds, c.point, got, ok, want)
		}
	}
	for _, point := range []int{-306, -300, -324, -330} {
		if _, ok := p.tinyDouble([]byte("1"), point); ok {
			t.Errorf("tinyDouble answers at point %d, outside its range", point)
		}
	}
}

// TestNumberRespellsOtherExponentForms pins what number copies as already
// in ECMAScript's exponent form: only one nonzero digit before the point.
// Literals that look like that form but have more integer digits (zeros
// that the significant digits drop), or a fraction ending in zero, are
// written afresh.
func TestNumberRespellsOtherExponentForms(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"10e+30", "1e+31"},
		{"-10e+30", "-1e+31"},
		{"100e+25", "1e+27"},
		{"10e-30", "1e-29"},
		{"20e-10", "2e-9"},
		{"1.50e+30", "1.5e+30"},
		{"1e+30", "1e+30"},
		{"1.5e-7", "1.5e-7"},
		{"-1.5e-7", "-1.5e-7"},
	} {
		t.Run(c.in, func(t *testing.T) {
			p := jcsParser{in: []byte(c.in)}
			got, err := p.number(nil)
			if err != nil || string(got) != c.want {
				t.Fatalf("got %q, %v; want %s", got, err, c.want)
			}
			if f, _ := strconv.ParseFloat(c.in, 64); string(appendES6NumberRef(nil, f)) != c.want {
				t.Fatalf("the reference writes %s", appendES6NumberRef(nil, f))
			}
		})
	}
}

// TestNumberKeepsThePointAsWritten pins the path of number that copies
// the literal's run up to its fraction's last nonzero digit when the
// exponent is zero (or absent) and the integer part is not 0: trailing
// zeros, a zero exponent in any spelling, the sign, and the edges of the
// plain range (21 integer digits stay plain, 22 do not); and the same
// literals in a document, where canonical reads the integer part.
func TestNumberKeepsThePointAsWritten(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1.0", "1"},
		{"-1.0", "-1"},
		{"2.50", "2.5"},
		{"-2.50", "-2.5"},
		{"12.5e0", "12.5"},
		{"12.5E+0", "12.5"},
		{"-12.5e-00", "-12.5"},
		{"12300.00", "12300"},
		{"12300.00e0", "12300"},
		{"12300e0", "12300"},
		{"12368.1250e0", "12368.125"},
		{"1.0000000000000000e0", "1"},
		{"123456789012345.60", "123456789012345.6"},
		{"100000000000000000000.0", "100000000000000000000"},
		{"1000000000000000000000.0", "1e+21"},
		{"0.50", "0.5"},
		{"0.0e0", "0"},
	} {
		t.Run(c.in, func(t *testing.T) {
			p := jcsParser{in: []byte(c.in)}
			got, err := p.number(nil)
			if err != nil || string(got) != c.want || p.pos != len(c.in) {
				t.Fatalf("got %q, %v (pos %d); want %s", got, err, p.pos, c.want)
			}
			if f, _ := strconv.ParseFloat(c.in, 64); string(appendES6NumberRef(nil, f)) != c.want {
				t.Fatalf("the reference writes %s", appendES6NumberRef(nil, f))
			}
			// In a document, where canonical reads the integer part
			// and passes it to numberFrom.
			for _, doc := range []string{"[" + c.in + "]", c.in, `{"a":` + c.in + `}`} {
				want := strings.Replace(doc, c.in, c.want, 1)
				if got, err := Canonical([]byte(doc)); err != nil || string(got) != want {
					t.Fatalf("Canonical(%s) = %s, %v; want %s", doc, got, err, want)
				}
			}
		})
	}
}
