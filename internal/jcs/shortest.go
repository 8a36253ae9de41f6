package jcs

import "math/bits"

// A number of 16 or 17 significant digits is accepted only if its digits
// are the shortest round-trip form of its nearest double (the form RFC 8785
// writes): strconv.ParseFloat and a shortest strconv.AppendFloat decide
// that, about 100 ns a number on the project's VM, several times the
// SHA-256 of the number's bytes. shortestExact decides the common case
// with exact 128-bit integer arithmetic instead, and leaves every case it
// cannot settle with certainty to that strconv path.

// maxPow5 is the largest power of five in pow5 (5^27 < 2^63).
const maxPow5 = 27

// pow5[i] is 5^i. Read-only.
var pow5 = func() (t [maxPow5 + 1]uint64) {
	t[0] = 1
	for i := 1; i < len(t); i++ {
		t[i] = t[i-1] * 5
	}
	return t
}()

// shortestExact reports that d × 10^q (d of 16 or 17 digits, no trailing
// zero) is the shortest round-trip form of its nearest double f, the one
// strconv's shortest formatting writes. False means only that it was not
// shown here: the caller then decides by strconv. With f's rounding
// interval (Lb, Ub), the reals halfway to its neighbours, it is true
// exactly when
//
//   - no decimal with fewer significant digits rounds to f. Those are
//     multiples of 10^(q+1); as d × 10^q lies in the interval, one does
//     only if one of the two nearest d × 10^q, 10⌊d/10⌋ × 10^q and
//     (10⌊d/10⌋+10) × 10^q, does. Both must lie strictly outside it;
//   - and d is strictly the nearest to f of all decimals of its length
//     (|f/10^q − d| < 1/2), so the one the shortest form picks among
//     those of its length that round to f.
//
// Everything is compared exactly, in units of 10^q, as 128-bit integers
// times powers of two. A decimal on a boundary of the interval (where
// rounding half to even decides), f halfway between two decimals, f a
// power of two (whose interval is lopsided) and 10^q beyond 10^±27 give
// false. The bounds keep every value here (10^15 × 10^-27 to 10^17 ×
// 10^27) a normal double.
func shortestExact(d uint64, q int) bool {
	if q < -maxPow5 || q > maxPow5 {
		return false
	}
	mant, exp := nearestDouble(d, q)
	if mant == 1<<52 {
		return false
	}
	below := d / 10 * 10 // the nearest multiples of 10 around d
	above := below + 10
	if q < 0 {
		// In units of 10^q: f = P × 2^(exp-q) with P = mant × 5^-q,
		// and Lb, Ub = (2P ∓ 5^-q) × 2^(exp-q-1).
		p5 := pow5[-q]
		ph, pl := bits.Mul64(mant, p5)
		th, tl := ph<<1|pl>>63, pl<<1
		lbl, borrow := bits.Sub64(tl, p5, 0)
		lbh := th - borrow
		ubl, carry := bits.Add64(tl, p5, 0)
		ubh := th + carry
		return cmpScaled(lbh, lbl, exp-q-1, 0, below, 0) > 0 && cmpScaled(ubh, ubl, exp-q-1, 0, above, 0) < 0 &&
			cmpScaled(ph, pl, exp-q+1, 0, 2*d-1, 0) > 0 && cmpScaled(ph, pl, exp-q+1, 0, 2*d+1, 0) < 0
	}
	// In units of 10^q: f = mant × 2^(exp-q) / 5^q and Lb, Ub =
	// (2mant ∓ 1) × 2^(exp-q-1) / 5^q; each side is multiplied by 5^q.
	p5 := pow5[q]
	bh, bl := bits.Mul64(below, p5)
	ah, al := bits.Mul64(above, p5)
	lh, ll := bits.Mul64(2*d-1, p5)
	hh, hl := bits.Mul64(2*d+1, p5)
	return cmpScaled(0, 2*mant-1, exp-q-1, bh, bl, 0) > 0 && cmpScaled(0, 2*mant+1, exp-q-1, ah, al, 0) < 0 &&
		cmpScaled(0, mant, exp-q+1, lh, ll, 0) > 0 && cmpScaled(0, mant, exp-q+1, hh, hl, 0) < 0
}

// nearestDouble returns the double nearest to d × 10^q (d > 0, below 2^58,
// |q| ≤ maxPow5), rounding half to even as strconv.ParseFloat does, as
// mant × 2^exp with 2^52 ≤ mant < 2^53. The caller keeps the value in the
// normal range.
func nearestDouble(d uint64, q int) (mant uint64, exp int) {
	var hi, lo uint64
	sticky := false
	if q >= 0 {
		// d × 5^q × 2^q, exactly.
		hi, lo = bits.Mul64(d, pow5[q])
		exp = q
	} else {
		// d / (5^-q × 2^-q): the quotient of d × 2^k by 5^-q, with k
		// such that it has 63 or 64 bits, and a sticky bit for a
		// nonzero remainder. d × 2^k < 2^(len(p)+63), so its high word
		// is below 2^(len(p)-1) ≤ p, as bits.Div64 requires.
		p := pow5[-q]
		k := bits.Len64(p) + 63 - bits.Len64(d)
		var nh, nl uint64
		if k >= 64 {
			nh = d << (k - 64)
		} else {
			nh, nl = d>>(64-k), d<<k
		}
		var r uint64
		lo, r = bits.Div64(nh, nl, p)
		sticky = r != 0
		exp = q - k
	}
	// Normalize hi:lo to its top bit at bit 127, then round its top 53
	// bits to nearest, half to even.
	z := bits.LeadingZeros64(hi)
	if hi == 0 {
		z = 64 + bits.LeadingZeros64(lo)
	}
	if z >= 64 {
		hi, lo = lo<<(z-64), 0
	} else if z > 0 {
		hi, lo = hi<<z|lo>>(64-z), lo<<z
	}
	exp -= z
	mant = hi >> 11
	exp += 75 // mant × 2^75 stands for the 128 bits
	rest := hi & 0x7ff
	if rest > 0x400 || (rest == 0x400 && (sticky || lo != 0 || mant&1 == 1)) {
		mant++
		if mant == 1<<53 {
			mant >>= 1
			exp++
		}
	}
	return mant, exp
}

// cmpScaled compares x × 2^a with y × 2^b, for 128-bit x = xh:xl and
// y = yh:yl, returning -1, 0 or +1.
func cmpScaled(xh, xl uint64, a int, yh, yl uint64, b int) int {
	if a > b {
		return -cmpScaled(yh, yl, b, xh, xl, a)
	}
	// a ≤ b: shift y left by b−a; past 128 bits y is the larger.
	if s := b - a; s > 0 && (yh|yl) != 0 {
		n := 128 - bits.LeadingZeros64(yh)
		if yh == 0 {
			n = 64 - bits.LeadingZeros64(yl)
		}
		if n+s > 128 {
			return -1
		}
		if s >= 64 {
			yh, yl = yl<<(s-64), 0
		} else {
			yh, yl = yh<<s|yl>>(64-s), yl<<s
		}
	}
	switch {
	case xh != yh:
		if xh < yh {
			return -1
		}
		return 1
	case xl != yl:
		if xl < yl {
			return -1
		}
		return 1
	}
	return 0
}
