package jcs

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"sync"
)

// Numbers: accepted only when their RFC 8785 form has the same value, and
// written in that form (ECMAScript's Number.prototype.toString).

// number parses a JSON number and appends its RFC 8785 form, ECMAScript's
// Number.prototype.toString of the nearest double. A number whose exact
// decimal value differs from the value of that form is errArgsInexact: the
// canonical form must not merge two numbers of different meaning.
//
// The literal's value is normalized to significant digits d1…dn (no
// leading or trailing zeros) and a decimal point position: 0.d1…dn ×
// 10^point. With n ≤ 15 and a value from 10^-307 to below 10^308 (point
// from -306 to 308, all normal doubles, 2.2250738585072014e-308 to
// 1.7976931348623157e308) the double holds the value to its last digit and
// these are its shortest round-trip digits, so no float arithmetic is
// needed: as 10^15 < 2^52, a decimal of 15 significant digits or fewer
// comes back from its nearest normal double when rounded to as many digits
// (Matula), so no two of them share a double, and no other decimal of as
// few digits rounds to it. With 16 or 17 digits, or outside that range
// (subnormals, up to the largest double), shortestExact shows nearly all
// that are shortest to be so by integer arithmetic (shortest.go); what it
// leaves is compared with the shortest round-trip digits of the double
// strconv parses. A literal already in ECMAScript's form is copied; any
// other is written from its digits where they lie in the input.
func (p *jcsParser) number(out []byte) ([]byte, error) {
	in, i := p.in, p.pos
	start := i
	neg := in[i] == '-'
	if neg {
		i++
	}
	intStart := i
	if i < len(in) && in[i] == '0' {
		i++
	} else {
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
		}
		if i == intStart {
			return nil, errArgsSyntax
		}
	}
	return p.numberFrom(out, start, intStart, i)
}

// numberFrom is number once the literal's integer part, in[intStart:intEnd]
// after a sign from start, has been read: canonical, which scans the
// digits of an integer to copy it, passes what it read on.
func (p *jcsParser) numberFrom(out []byte, start, intStart, intEnd int) ([]byte, error) {
	in, i := p.in, intEnd
	neg := intStart > start
	fracStart, fracEnd := i, i
	if i < len(in) && in[i] == '.' {
		i++
		fracStart = i
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
		}
		if i == fracStart {
			return nil, errArgsSyntax
		}
		fracEnd = i
	}
	exp := 0
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		expNeg := false
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			expNeg = in[i] == '-'
			i++
		}
		expStart := i
		// Saturate where no literal can bring the value back into double
		// range: the first significant digit lies within the input, so
		// the decimal point's position below is within ±len(in) before
		// the exponent is added, and a saturated exponent leaves it more
		// than 300 places out, where ParseFloat decides from the text.
		limit := len(in) + 400
		limit10 := limit / 10
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			if exp >= limit10 {
				exp = limit // the true exponent is at least limit-9
			} else {
				exp = exp*10 + int(in[i]-'0')
			}
			i++
		}
		if i == expStart {
			return nil, errArgsSyntax
		}
		if expNeg {
			exp = -exp
		}
	}
	p.pos = i
	lit := in[start:i]
	if fracEnd == fracStart && i == intEnd && len(lit) <= 15 {
		// An integer of up to 15 digits: exactly a double, and ECMAScript
		// prints it as written (leading zeros are not JSON).
		if string(lit) == "-0" {
			return append(out, '0'), nil
		}
		return append(out, lit...), nil
	}
	if i == fracEnd && fracEnd > fracStart && len(lit) <= 16 && in[fracEnd-1] != '0' &&
		(in[intStart] != '0' || fewLeadingZeros(in[fracStart:fracEnd])) {
		// A decimal I.F of at most 15 significant digits, no exponent and
		// no trailing zero, with I not 0 or F under six leading zeros:
		// ECMAScript prints it as written (see appendES6Digits).
		return append(out, lit...), nil
	}

	// Significant digits d1…dn, from the first nonzero digit to the last,
	// at most 17 (a double's shortest form has no more): a before the
	// literal's point and b after it, either possibly empty. And the
	// decimal point's position: the value is 0.d1…dn × 10^point before
	// exp. JSON allows no leading zero: the integer part is 0 or starts
	// with a nonzero digit.
	var a, b []byte
	point := 0
	if in[intStart] != '0' {
		a, b, point = in[intStart:intEnd], in[fracStart:fracEnd], intEnd-intStart
	} else {
		f := fracStart
		for f < fracEnd && in[f] == '0' {
			f++
		}
		if f == fracEnd {
			return append(out, '0'), nil // 0, -0, 0.000e99: all zero
		}
		b, point = in[f:fracEnd], fracStart-f
	}
	for len(b) > 0 && b[len(b)-1] == '0' {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		for a[len(a)-1] == '0' {
			a = a[:len(a)-1] // stops at a's first digit, not 0
		}
	}
	n := len(a) + len(b)
	if n > 17 {
		return nil, errArgsInexact // more significant digits than any double's shortest form
	}
	point += exp
	if point <= -324 {
		// Below 10^-324, under half the least subnormal: the value
		// rounds to zero.
		return nil, errArgsInexact
	}
	if (n > 15 || point < -306 || point > 308) && !shortestExact(digitsValue(a, b), point-n) {
		// Not shown shortest by integer arithmetic (shortest.go):
		// strconv decides.
		var dig [17]byte
		copy(dig[copy(dig[:], a):], b)
		if err := p.strconvShortest(dig[:n], point, lit); err != nil {
			return nil, err
		}
	}
	if i == fracEnd && (fracEnd == fracStart && point <= 21 || fracEnd > fracStart && in[fracEnd-1] != '0' && point > -6) {
		// No exponent, no trailing zero in a fraction, at most 21
		// digits before the point and under six zeros after it: the
		// literal is already in ECMAScript's form (appendES6Digits).
		return append(out, lit...), nil
	}
	if i > fracEnd && (point > 21 || point <= -6) && intEnd == intStart+1 && len(a) == 1 &&
		(fracEnd == fracStart || in[fracEnd-1] != '0') &&
		in[fracEnd] == 'e' && (in[fracEnd+1] == '+' || in[fracEnd+1] == '-') && in[fracEnd+2] != '0' {
		// d.ddde±x as ECMAScript writes it: one nonzero digit before
		// the point, none of the fraction's zeros trailing, a lower-case
		// e, a sign and no leading zero in the exponent, which is then
		// point−1, out of the plain range (appendES6Digits).
		return append(out, lit...), nil
	}
	if exp == 0 && in[intStart] != '0' && point <= 21 {
		// The point where the literal has it (1.0, 2.50, 12.5e0): the
		// form is the integer part as written, then the fraction up to
		// its last nonzero digit, if any, which are one run of the
		// literal with its sign (appendES6Digits: a is untrimmed when
		// b is not empty, and its trimmed zeros come back otherwise).
		if len(b) == 0 {
			return append(out, in[start:intEnd]...), nil
		}
		return append(out, in[start:fracStart+len(b)]...), nil
	}
	if neg {
		out = append(out, '-')
	}
	return appendES6Digits(out, a, b, point), nil
}

// strconvShortest returns nil if the digits dig × 10^(point−len(dig)) are
// the shortest round-trip form of the double nearest to the literal lit,
// by strconv.ParseFloat (tinyDouble below 2^-1021) and strconv's shortest
// formatting.
func (p *jcsParser) strconvShortest(dig []byte, point int, lit []byte) error {
	n := len(dig)
	f, ok := p.tinyDouble(dig, point)
	if !ok {
		var err error
		f, err = strconv.ParseFloat(string(lit), 64)
		if err != nil || math.IsInf(f, 0) {
			return errArgsRange
		}
	}
	if f == 0 {
		return errArgsInexact // underflow
	}
	var buf [32]byte
	short := strconv.AppendFloat(buf[:0], math.Abs(f), 'e', -1, 64) // d.ddde±x
	// The exponent: a sign and two or three digits.
	e := len(short) - 4
	if short[e] != 'e' {
		e--
	}
	x := 0
	for _, c := range short[e+2:] {
		x = x*10 + int(c-'0')
	}
	if short[e+1] == '-' {
		x = -x
	}
	if x+1 != point || short[0] != dig[0] || (e > 1 && string(short[2:e]) != string(dig[1:n])) || (e == 1 && n != 1) {
		return errArgsInexact
	}
	return nil
}

// digitsValue returns the integer the decimal digits a then b spell (17
// at most), eight at a time where eight are left (parse8).
func digitsValue(a, b []byte) uint64 {
	return addDigits(addDigits(0, a), b)
}

// addDigits returns v followed by the decimal digits s.
func addDigits(v uint64, s []byte) uint64 {
	for len(s) >= 8 {
		v = v*1e8 + parse8(binary.LittleEndian.Uint64(s))
		s = s[8:]
	}
	for _, c := range s {
		v = v*10 + uint64(c-'0')
	}
	return v
}

// parse8 returns the value of the eight ASCII digits packed in x, the first
// in its lowest byte: pairs, then quadruples, then the eight are combined
// with one multiplication each (SWAR).
func parse8(x uint64) uint64 {
	x -= 0x3030303030303030
	x = x*10 + x>>8 // each even byte: two digits
	x = ((x&0x000000ff000000ff)*(100+1000000<<32) + (x>>16&0x000000ff000000ff)*(1+10000<<32)) >> 32
	return x
}

// tinyDouble returns the magnitude of the double nearest to the positive
// value 0.d1…dn × 10^point, for -324 < point ≤ -307 and a value below
// 2^-1021, where the doubles are the multiples of 2^-1074 (the subnormals
// and the least normal binade); otherwise it reports false. It divides
// exactly and rounds to nearest, as strconv.ParseFloat does, which for
// these values falls back to big decimal arithmetic taking 17–55 µs a
// number (measured 2026-11-23): an argument array of such numbers cost
// thousands of times its SHA-256. This takes a few µs.
func (p *jcsParser) tinyDouble(dig []byte, point int) (float64, bool) {
	if point > -307 || point <= -324 {
		return 0, false
	}
	var d uint64
	for _, c := range dig {
		d = d*10 + uint64(c-'0') // at most 17 digits: no overflow
	}
	// The value is d / 10^m, the double k × 2^-1074: k = d × 2^1074 / 10^m.
	m := len(dig) - point
	if k, ok := tinyQuotient(d, m); ok {
		if k > 1<<53 {
			return 0, false
		}
		return math.Float64frombits(k), true
	}
	// The parser's big integers keep their memory across calls.
	if p.tiny == nil {
		p.tiny = new([2]big.Int)
	}
	num, r := &p.tiny[0], &p.tiny[1]
	num.Lsh(num.SetUint64(d), 1074)
	den := tinyPow10()[m-tinyPow10Min]
	k, r := num.QuoRem(num, den, r)
	// Round to nearest. No tie to break: a value halfway between two
	// such doubles, (2k+1) × 2^-1075, has over 700 significant digits.
	if r.Lsh(r, 1).Cmp(den) > 0 {
		k.Add(k, bigOne)
	}
	if !k.IsUint64() || k.Uint64() > 1<<53 {
		return 0, false
	}
	// For k ≤ 2^53 the bits of k are the double k × 2^-1074: a
	// subnormal below 2^52, the exponent field 1 or 2 from there.
	return math.Float64frombits(k.Uint64()), true
}

// tinyQuotient returns k = d × 2^1074 / 10^m rounded to nearest, for the
// m tinyDouble divides by, from d × R / 2^s with R = ⌊2^(1074-m+s) / 5^m⌋
// (tinyRecip: 128 bits, and 2^1074 / 10^m = 2^(1074-m) / 5^m): 192-bit
// integer arithmetic, no math/big. R is short of the true ratio by less
// than 1, so d × R is short of the true d × 2^(1074-m+s) / 5^m by less
// than d: where adding d could carry into the bit that rounds (the true
// value may lie on the other side of a half), it reports false and
// tinyDouble divides exactly. It also reports false when k is 2^64 or
// more (the caller refuses k over 2^53 anyway).
func tinyQuotient(d uint64, m int) (uint64, bool) {
	if m < tinyPow10Min || m >= tinyPow10Min+len(tinyRecip) {
		return 0, false
	}
	r := &tinyRecip[m-tinyPow10Min]
	h0, w0 := bits.Mul64(d, r.lo)
	w2, l1 := bits.Mul64(d, r.hi)
	w1, c := bits.Add64(l1, h0, 0)
	w2 += c
	t, ok := shr192(w2, w1, w0, r.shift-1) // 2k or 2k+1
	if !ok {
		return 0, false
	}
	if t&1 == 1 {
		return t>>1 + 1, true // at least a half: round up
	}
	// Below a half, unless the shortfall of R could cross it. For no m of
	// the table and no d with k < 2^64 can it
	// (TestTinyQuotientTruncationIsExact, by lattice reduction), so this
	// check never fires; it stays as defence in depth, since a wrong bit
	// here would change what the canonical form accepts.
	v0, c := bits.Add64(w0, d, 0)
	v1, c := bits.Add64(w1, 0, c)
	v2 := w2 + c
	if t2, ok := shr192(v2, v1, v0, r.shift-1); !ok || t2 != t {
		return 0, false
	}
	return t >> 1, true
}

// shr192 returns w2:w1:w0 >> sh for 64 < sh < 192, or false when that is
// 2^64 or more.
func shr192(w2, w1, w0 uint64, sh int) (uint64, bool) {
	if sh >= 128 {
		return w2 >> (sh - 128), true
	}
	return w2<<(128-sh) | w1>>(sh-64), w2>>(sh-64) == 0
}

// tinyRecip holds, for m from tinyPow10Min to tinyPow10Min+33,
// R = ⌊2^(1074-m+shift) / 5^m⌋ as hi:lo, with shift such that
// 2^127 ≤ R < 2^128 (TestTinyRecip recomputes them). Read-only.
var tinyRecip = [34]struct {
	hi, lo uint64
	shift  int
}{
	{0xe61acf033d1a45df, 0x6fb92487298e33bd, 77},  // m = 308
	{0xb8157268fdae9e4c, 0x5960ea05bad82964, 80},  // m = 309
	{0x93445b8731587ea3, 0x7ab3ee6afbe0211d, 83},  // m = 310
	{0xeba09271e88d976b, 0xf7864a44c633682e, 87},  // m = 311
	{0xbc807527ed3e12bc, 0xc605083704f5ecf2, 90},  // m = 312
	{0x96cd2a865764dbca, 0x380406926a5e5728, 93},  // m = 313
	{0xf148440a256e2c76, 0xc00670ea43ca250d, 97},  // m = 314
	{0xc1069cd4eabe89f8, 0x999ec0bb696e840a, 100}, // m = 315
	{0x9a6bb0aa55653b2d, 0x47b233c92125366e, 103}, // m = 316
	{0xf712b443bbd52b7b, 0xa5e9ec7501d523e4, 107}, // m = 317
	{0xc5a890362fddbc62, 0xeb2189f734aa831d, 110}, // m = 318
	{0x9e20735e8cb16382, 0x55b46e5f5d5535b0, 113}, // m = 319
	{0xfd00b897478238d0, 0x8920b098955522b4, 117}, // m = 320
	{0xca66fa129f9b60a6, 0xd41a26e077774ef6, 120}, // m = 321
	{0xa1ebfb4219491a1f, 0x1014ebe6c5f90bf8, 123}, // m = 322
	{0x818995ce7aa0e1b2, 0x7343efebd1940993, 126}, // m = 323
	{0xcf42894a5dce35ea, 0x52064cac828675b9, 130}, // m = 324
	{0xa5ced43b7e3e9188, 0x419ea3bd35385e2d, 133}, // m = 325
	{0x84a57695fe98746d, 0x014bb630f7604b57, 136}, // m = 326
	{0xd43bf0effdc0ba48, 0x0212bd1b2566def2, 140}, // m = 327
	{0xa9c98d8ccb009506, 0x680efdaf511f18c2, 143}, // m = 328
	{0x87d4713d6f33aa6b, 0x8672648c40e5ad68, 146}, // m = 329
	{0xd953e8624b85dd78, 0xd71d6dad34a2af0d, 150}, // m = 330
	{0xaddcb9e83c6b1793, 0xdf4abe242a1bbf3d, 153}, // m = 331
	{0x8b16fb203055ac76, 0x4c3bcb5021afcc31, 156}, // m = 332
	{0xde8b2b66b3bc4723, 0xad2c788035e61382, 160}, // m = 333
	{0xb208ef855c969f4f, 0xbdbd2d335e51a935, 163}, // m = 334
	{0x8e6d8c6ab0787f72, 0xfe30f0f5e50e20f7, 166}, // m = 335
	{0xe3e27a444d8d98b7, 0xfd1b1b2308169b25, 170}, // m = 336
	{0xb64ec836a47146f9, 0x9748e2826cdee284, 173}, // m = 337
	{0x91d8a02bb6c10594, 0x79071b9b8a4be869, 176}, // m = 338
	{0xe95a99df8ace6f53, 0xf4d82c2c107973dc, 180}, // m = 339
	{0xbaaee17fa23ebf76, 0x5d79bcf00d2df649, 183}, // m = 340
	{0x9558b4661b6565f8, 0x4ac7ca59a424c507, 186}, // m = 341
}

// tinyPow10 returns 10^m for the m tinyDouble divides by, from
// tinyPow10Min (a digit and point -307) to tinyPow10Min+33 (17 digits and
// point -323), computed once: the powers took half of tinyDouble's time.
// Read-only.
var tinyPow10 = sync.OnceValue(func() []*big.Int {
	t := make([]*big.Int, 34)
	for i := range t {
		t[i] = new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(tinyPow10Min+i)), nil)
	}
	return t
})

const tinyPow10Min = 308

// bigOne is 1. Read-only.
var bigOne = big.NewInt(1)

// fewLeadingZeros reports whether the digits f start with fewer than six
// zeros.
func fewLeadingZeros(f []byte) bool {
	for i := range min(len(f), 6) {
		if f[i] != '0' {
			return true
		}
	}
	return len(f) < 6
}

// appendES6Digits appends the positive number 0.d1…dn × 10^point, its
// digits d the run a followed by the run b (the shortest round-trip digits
// of a double, no trailing zero; runs of the literal, so no copy is
// needed), as ECMAScript's Number.prototype.toString does (ECMA-262,
// Number::toString).
func appendES6Digits(out, a, b []byte, point int) []byte {
	const zeros = "0.00000000000000000000000" // "0.", then 21 zeros: the most either case below pads
	// At most 24 bytes: 17 digits, a point and "e-324"; "0.", five
	// zeros and 17 digits; 21 digits. Written into one window.
	n := len(out)
	if cap(out)-n < 24 {
		out = append(out, zeros[:24]...)[:n]
	}
	w := out[n : n+24]
	k := len(a) + len(b)
	j := 0
	switch {
	case k <= point && point <= 21:
		j = copy(w, a)
		j += copy(w[j:], b)
		j += copy(w[j:], zeros[2:2+point-k])
		return out[:n+j]
	case 0 < point && point <= 21:
		if point <= len(a) {
			j = copy(w, a[:point])
			w[j] = '.'
			j++
			j += copy(w[j:], a[point:])
		} else {
			j = copy(w, a)
			j += copy(w[j:], b[:point-len(a)])
			b = b[point-len(a):]
			w[j] = '.'
			j++
		}
		j += copy(w[j:], b)
		return out[:n+j]
	case -6 < point && point <= 0:
		// "0." and the zeros stored, and b copied only when it is not
		// empty, rather than three calls of copy (about 1 % off the
		// 1.4 KiB non-canonical document of BenchmarkArgsFingerprint,
		// whose 125.0e-3 is 0.125).
		w[0], w[1] = '0', '.'
		j = 2
		for ; j < 2-point; j++ {
			w[j] = '0'
		}
		j += copy(w[j:], a)
		if len(b) > 0 {
			j += copy(w[j:], b)
		}
		return out[:n+j]
	}
	if len(a) == 0 {
		a, b = b, nil
	}
	w[0] = a[0]
	j = 1
	if k > 1 {
		w[1] = '.'
		j = 2 + copy(w[2:], a[1:])
		j += copy(w[j:], b)
	}
	x, sign := point-1, byte('+')
	if x < 0 {
		x, sign = -x, '-'
	}
	// A double's decimal exponent is at most 324: three digits.
	w[j], w[j+1] = 'e', sign
	switch {
	case x >= 100:
		w[j+2], w[j+3], w[j+4] = byte('0'+x/100), byte('0'+x/10%10), byte('0'+x%10)
		j += 5
	case x >= 10:
		w[j+2], w[j+3] = byte('0'+x/10), byte('0'+x%10)
		j += 4
	default:
		w[j+2] = byte('0' + x)
		j += 3
	}
	return out[:n+j]
}
