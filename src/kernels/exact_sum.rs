//! Exact sums of non-negative `f64` values, and the exact inverse-CDF decision.
//!
//! [`ExactSum`] is a fixed-point superaccumulator: an unsigned integer in units of
//! `2^-1074` (the smallest subnormal), wide enough for any finite `f64` and for more than
//! `2^32` terms of the largest. Every finite non-negative `f64` is an integer multiple of
//! `2^-1074`, so each [`add`](ExactSum::add) is exact and a sum does not depend on the
//! order of its terms. An add touches two limbs, plus a carry that is rarely propagated.
//!
//! [`exact_index`] is the draw's exact decision: the first weight whose exact running
//! sum `C` exceeds `u * T`, with `T` the exact total. With `u = M * 2^E` (`M` an integer),
//! `u * T = M * T * 2^E`, and for an integer `C`, `C > u * T` exactly when
//! `C > floor(M * T * 2^E)`; that floor is computed once, and the walk compares integers.

/// Bits of the accumulator: `2^-1074` up to `2^1024` (2,098 bits) and 64 bits of carry
/// headroom, rounded up to whole limbs.
const LIMBS: usize = 34;

/// An exact sum of finite non-negative `f64` values (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExactSum {
    /// Little-endian limbs of the integer sum, in units of `2^-1074`.
    limbs: [u64; LIMBS],
}

impl Default for ExactSum {
    fn default() -> Self {
        Self::new()
    }
}

impl ExactSum {
    /// Zero.
    pub(crate) const fn new() -> Self {
        ExactSum { limbs: [0; LIMBS] }
    }

    /// Adds `x` exactly. `x` must be finite and non-negative (`-0.0` adds nothing); any
    /// other value is ignored, as the weights it sums never are.
    #[inline]
    pub(crate) fn add(&mut self, x: f64) {
        if !(x.is_finite() && x > 0.0) {
            return;
        }
        let (m, shift) = integer_of(x);
        let (limb, off) = (shift / 64, shift % 64);
        let wide = u128::from(m) << off;
        let (lo, hi) = (wide as u64, (wide >> 64) as u64);
        let (s, c0) = self.limbs[limb].overflowing_add(lo);
        self.limbs[limb] = s;
        let (s, c1) = self.limbs[limb + 1].overflowing_add(hi);
        let (s, c2) = s.overflowing_add(u64::from(c0));
        self.limbs[limb + 1] = s;
        if c1 || c2 {
            self.carry_from(limb + 2);
        }
    }

    /// Propagates a carry of one into limb `i` and up.
    #[cold]
    fn carry_from(&mut self, mut i: usize) {
        while i < LIMBS {
            let (s, c) = self.limbs[i].overflowing_add(1);
            self.limbs[i] = s;
            if !c {
                return;
            }
            i += 1;
        }
    }

    /// The exact sum of `xs` (see [`add`](Self::add)).
    pub(crate) fn of(xs: impl IntoIterator<Item = f64>) -> Self {
        let mut s = ExactSum::new();
        xs.into_iter().for_each(|x| s.add(x));
        s
    }

    /// Adds every value of `xs` exactly, as [`add`](Self::add) one by one (the same
    /// result), faster for many terms: the significands are summed per binary exponent
    /// in a `u128` (a 53-bit significand leaves room for `2^75` terms), and the 2,048
    /// bins are folded in at the end. The bins live on the stack (32 KiB).
    pub(crate) fn add_many(&mut self, xs: impl IntoIterator<Item = f64>) {
        let mut bins = [0u128; 2048];
        for x in xs {
            if x.is_finite() && x > 0.0 {
                let bits = x.to_bits();
                let exp = (bits >> 52) as usize;
                let frac = bits & ((1 << 52) - 1);
                let m = if exp == 0 { frac } else { frac | (1 << 52) };
                bins[exp] += u128::from(m);
            }
        }
        for (exp, &b) in bins.iter().enumerate() {
            if b != 0 {
                // The bin's unit is that of `integer_of`: 2^(shift - 1074).
                self.add_wide(b, exp.saturating_sub(1));
            }
        }
    }

    /// Adds `v * 2^shift` (in units of `2^-1074`) exactly.
    fn add_wide(&mut self, v: u128, shift: usize) {
        let (limb, off) = (shift / 64, shift % 64);
        // `v << off` over three limbs.
        let lo = (v << off) as u64;
        let mid = ((v << off) >> 64) as u64;
        let hi = if off == 0 {
            0
        } else {
            (v >> (128 - off)) as u64
        };
        let mut carry = false;
        for (i, part) in [lo, mid, hi].into_iter().enumerate() {
            let Some(l) = self.limbs.get_mut(limb + i) else {
                return;
            };
            let (s, c1) = l.overflowing_add(part);
            let (s, c2) = s.overflowing_add(u64::from(carry));
            *l = s;
            carry = c1 || c2;
        }
        if carry {
            self.carry_from(limb + 3);
        }
    }

    /// Whether the sum is zero.
    pub(crate) fn is_zero(&self) -> bool {
        self.limbs.iter().all(|&l| l == 0)
    }

    /// `floor(self * u)` for `u` in `[0, 1)`, as an integer in the same units: the
    /// threshold that a running sum must exceed to pass `u` times this total.
    pub(crate) fn scaled_floor(&self, u: f64) -> ExactSum {
        if u.is_nan() || u <= 0.0 {
            return ExactSum::new();
        }
        if u >= 1.0 {
            // Outside the draw's range: a threshold no running sum exceeds.
            return self.clone();
        }
        self.scaled(u).0
    }

    /// `ceil(self * p)` for `p` in `[0, 1]`, as an integer in the same units: the least
    /// running sum that reaches `p` times this total (`C >= p * T` exactly when
    /// `C >= ceil(p * T)`, `C` being an integer). `p <= 0` or NaN gives zero, `p >= 1`
    /// the total itself.
    pub(crate) fn scaled_ceil(&self, p: f64) -> ExactSum {
        if p.is_nan() || p <= 0.0 {
            return ExactSum::new();
        }
        if p >= 1.0 {
            return self.clone();
        }
        let (mut out, exact) = self.scaled(p);
        if !exact {
            out.carry_from(0);
        }
        out
    }

    /// `floor(self * u)` for `u` in `(0, 1)`, and whether no fraction was dropped.
    fn scaled(&self, u: f64) -> (ExactSum, bool) {
        let mut out = ExactSum::new();
        // u = m * 2^(shift - 1074), so self * u = self * m / 2^(1074 - shift).
        let (m, shift) = integer_of(u);
        let down = 1074 - shift;
        let mut prod = [0u64; LIMBS + 1];
        let mut carry = 0u128;
        for (p, &l) in prod.iter_mut().zip(&self.limbs) {
            let t = u128::from(l) * u128::from(m) + carry;
            *p = t as u64;
            carry = t >> 64;
        }
        prod[LIMBS] = carry as u64;
        let (skip, off) = (down / 64, down % 64);
        for (i, o) in out.limbs.iter_mut().enumerate() {
            let j = i + skip;
            let lo = prod.get(j).copied().unwrap_or(0);
            let hi = prod.get(j + 1).copied().unwrap_or(0);
            *o = if off == 0 {
                lo
            } else {
                (lo >> off) | (hi << (64 - off))
            };
        }
        let dropped = prod[..skip].iter().any(|&l| l != 0)
            || (off != 0 && prod[skip] & ((1u64 << off) - 1) != 0);
        (out, !dropped)
    }

    /// The 64 bits of the sum from bit `lo` up (zeros past the top).
    fn bits_from(&self, lo: usize) -> u64 {
        let (i, off) = (lo / 64, lo % 64);
        let a = self.limbs[i] >> off;
        let b = match self.limbs.get(i + 1) {
            Some(&next) if off > 0 => next << (64 - off),
            _ => 0,
        };
        a | b
    }

    /// The sum rounded to the nearest `f64` (ties to even; `inf` past the largest): an
    /// order-free `f64` sum (the total and the entropy of typical-p, eta and dynamic
    /// temperature).
    pub(crate) fn to_f64(&self) -> f64 {
        let Some(top) = self.limbs.iter().rposition(|&l| l != 0) else {
            return 0.0;
        };
        let p = top * 64 + 63 - self.limbs[top].leading_zeros() as usize;
        if p < 53 {
            // Below 2^53 units: exact, a subnormal or small normal.
            let v = self.limbs[0];
            return v as f64 * f64::from_bits(1);
        }
        // The 53 bits from `p` down, the bit below them and whether any lower bit is set.
        let mut m = self.bits_from(p - 52) & ((1 << 53) - 1);
        let round = self.bits_from(p - 53) & 1 == 1;
        let low = p - 53;
        let sticky = self.limbs[..low / 64].iter().any(|&l| l != 0)
            || self.limbs[low / 64] & ((1u64 << (low % 64)) - 1) != 0;
        let mut e = p - 52; // the value is m * 2^(e - 1074)
        if round && (sticky || m & 1 == 1) {
            m += 1;
            if m == 1 << 53 {
                m >>= 1;
                e += 1;
            }
        }
        // Normal: biased exponent e - 1074 + 1075 = e + 1.
        let biased = e as u64 + 1;
        if biased >= 2047 {
            return f64::INFINITY;
        }
        f64::from_bits((biased << 52) | (m & ((1 << 52) - 1)))
    }
}

impl PartialOrd for ExactSum {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ExactSum {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.limbs.iter().rev().cmp(other.limbs.iter().rev())
    }
}

/// A positive finite `x` as `m * 2^(shift - 1074)`: its integer significand and the
/// position of its lowest bit in units of `2^-1074`.
#[inline]
fn integer_of(x: f64) -> (u64, usize) {
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as usize;
    let frac = bits & ((1 << 52) - 1);
    if exp == 0 {
        (frac, 0)
    } else {
        (frac | (1 << 52), exp - 1)
    }
}

/// The exact inverse-CDF decision over `weights` (finite, non-negative), for `u` in
/// `[0, 1)`: the index of the first weight whose exact running sum exceeds `u` times the
/// exact total. A zero weight is never chosen. `None` when every weight is zero.
///
/// Two passes over the weights (`weights` is cloned for the second); the result does
/// not depend on the order the total is summed in.
pub(crate) fn exact_index<I>(weights: I, u: f64) -> Option<usize>
where
    I: Iterator<Item = f64> + Clone,
{
    let mut total = ExactSum::new();
    for w in weights.clone() {
        total.add(w);
    }
    if total.is_zero() {
        return None;
    }
    let y = total.scaled_floor(u);
    let mut cum = ExactSum::new();
    for (i, w) in weights.enumerate() {
        if w > 0.0 {
            cum.add(w);
            if cum > y {
                return Some(i);
            }
        }
    }
    // Unreachable for u < 1: y <= u * total < total.
    None
}

/// The exact top-p decision over `weights` (finite, non-negative, in draw order), for
/// `p` in `(0, 1]`: the length of the shortest prefix whose exact running sum `C` has
/// `C >= p * T`, with `T` the exact total of `weights`. `None` only when `weights` is
/// empty.
///
/// Two passes over the weights, as [`exact_index`]; no sum is rounded.
pub(crate) fn exact_prefix<I>(weights: I, p: f64) -> Option<usize>
where
    I: Iterator<Item = f64> + Clone,
{
    let mut total = ExactSum::new();
    for w in weights.clone() {
        total.add(w);
    }
    prefix_reaching(weights, &ExactSum::new(), &total.scaled_ceil(p))
}

/// The length of the shortest prefix of `weights` whose exact running sum, starting from
/// `start`, reaches `threshold` (a [`scaled_ceil`](ExactSum::scaled_ceil)); `None` when
/// the whole of `weights` falls short.
pub(crate) fn prefix_reaching<I>(
    weights: I,
    start: &ExactSum,
    threshold: &ExactSum,
) -> Option<usize>
where
    I: Iterator<Item = f64>,
{
    let mut cum = start.clone();
    for (i, w) in weights.enumerate() {
        cum.add(w);
        if cum >= *threshold {
            return Some(i + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A dyadic value `k * 2^-e` with `k < 2^20`, `e <= 40`, and its integer in units of
    /// `2^-40`.
    fn dyadic() -> impl Strategy<Value = (f64, u128)> {
        (0u64..1 << 20, 0u32..=40).prop_map(|(k, e)| {
            let x = k as f64 * 2f64.powi(-(e as i32));
            (x, u128::from(k) << (40 - e))
        })
    }

    /// The accumulator's value in units of `2^-40` (the sum must be a multiple).
    fn units40(s: &ExactSum) -> u128 {
        // Bit 1074 - 40 = 1034 is the unit.
        let base = 1034;
        let mut v = 0u128;
        for i in (0..96).rev() {
            let b = base + i;
            v = (v << 1) | u128::from((s.limbs[b / 64] >> (b % 64)) & 1);
        }
        for b in 0..base {
            assert_eq!((s.limbs[b / 64] >> (b % 64)) & 1, 0);
        }
        v
    }

    proptest! {
        #[test]
        fn sums_match_integer_sums(xs in prop::collection::vec(dyadic(), 0..200)) {
            let mut s = ExactSum::new();
            let mut want = 0u128;
            for &(x, k) in &xs {
                s.add(x);
                want += k;
            }
            prop_assert_eq!(units40(&s), want);
            // Correct rounding, checked against the exact integer for sums below 2^53 units
            // (exact) and against the f64 of the rounded integer otherwise.
            let f = s.to_f64();
            let expect = (want as f64) * 2f64.powi(-40);
            prop_assert_eq!(f, expect);
        }

        #[test]
        fn sums_do_not_depend_on_order(
            xs in prop::collection::vec(any::<u64>().prop_map(|b| f64::from_bits(b >> 1)), 1..100),
            seed in any::<u64>(),
        ) {
            let xs: Vec<f64> = xs.into_iter().filter(|x| x.is_finite()).collect();
            let mut a = ExactSum::new();
            xs.iter().for_each(|&x| a.add(x));
            let mut ys = xs.clone();
            // A Fisher-Yates shuffle with a small LCG.
            let mut r = seed | 1;
            for i in (1..ys.len()).rev() {
                r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ys.swap(i, (r >> 33) as usize % (i + 1));
            }
            let mut b = ExactSum::new();
            ys.iter().for_each(|&x| b.add(x));
            prop_assert_eq!(&a, &b);
            // A single value converts back to itself.
            if let Some(&x) = xs.first() {
                let mut one = ExactSum::new();
                one.add(x);
                prop_assert_eq!(one.to_f64(), x);
            }
        }

        #[test]
        fn add_many_equals_adding_one_by_one(
            xs in prop::collection::vec(
                prop_oneof![
                    any::<u64>().prop_map(|b| f64::from_bits(b >> 1)),
                    (0.0f64..1.0).prop_map(|x| (-745.0 * x).exp()),
                    Just(f64::MAX),
                    Just(f64::from_bits(1)),
                ],
                0..300,
            ),
            reps in 1usize..4,
        ) {
            // Repeats push the bins and the limbs through their carries.
            let all: Vec<f64> = xs.iter().copied().cycle().take(xs.len() * reps).collect();
            let mut many = ExactSum::new();
            many.add(0.5);
            many.add_many(all.iter().copied());
            let mut one = ExactSum::new();
            one.add(0.5);
            all.iter().for_each(|&x| one.add(x));
            prop_assert_eq!(many, one);
        }

        #[test]
        fn two_terms_round_as_ieee_addition(
            a in any::<u64>().prop_map(|b| f64::from_bits(b >> 1)),
            b in any::<u64>().prop_map(|b| f64::from_bits(b >> 1)),
        ) {
            // IEEE addition rounds the exact sum to nearest, ties to even, as `to_f64`.
            prop_assume!(a.is_finite() && b.is_finite());
            prop_assert_eq!(ExactSum::of([a, b]).to_f64(), a + b);
        }

        #[test]
        fn index_matches_rational_decision(
            ws in prop::collection::vec(dyadic(), 1..40),
            num in 0u64..1 << 30,
        ) {
            // u = num / 2^30 and weights in units of 2^-40: C > u * T  <=>  C * 2^30 > num * T.
            let u = num as f64 / 2f64.powi(30);
            let total: u128 = ws.iter().map(|w| w.1).sum();
            let got = exact_index(ws.iter().map(|w| w.0), u);
            if total == 0 {
                prop_assert_eq!(got, None);
            } else {
                let mut c = 0u128;
                let want = ws.iter().position(|w| {
                    c += w.1;
                    (c << 30) > u128::from(num) * total
                });
                prop_assert_eq!(got, want);
                let i = got.unwrap();
                prop_assert!(ws[i].1 > 0);
            }
        }
    }

    /// `v` units of `2^-40` (below `2^96`), added exactly in 32-bit pieces.
    fn from_units40(v: u128) -> ExactSum {
        let mut s = ExactSum::new();
        for k in 0..3i32 {
            let piece = ((v >> (32 * k)) & 0xffff_ffff) as f64;
            s.add(piece * 2f64.powi(32 * k - 40));
        }
        s
    }

    proptest! {
        #[test]
        fn prefix_matches_rational_decision(
            ws in prop::collection::vec(dyadic(), 1..40),
            num in 1u64..=1 << 30,
            hit in any::<prop::sample::Index>(),
            aim in any::<bool>(),
        ) {
            // Half the time, p * T lands exactly on a running sum: small integer weights,
            // and p = C_j / T when that is dyadic with at most 30 bits.
            let ws: Vec<(f64, u128)> = if aim {
                ws.iter().map(|w| ((w.1 % 4) as f64, (w.1 % 4) << 40)).collect()
            } else {
                ws
            };
            let total: u128 = ws.iter().map(|w| w.1).sum();
            let mut num = num;
            if aim && total > 0 {
                let j = hit.index(ws.len());
                let c: u128 = ws[..=j].iter().map(|w| w.1).sum();
                if (c << 30).is_multiple_of(total) && c > 0 {
                    num = ((c << 30) / total) as u64;
                }
            }
            // p = num / 2^30 and weights in units of 2^-40: C >= p * T  <=>  C * 2^30 >= num * T.
            let p = num as f64 / 2f64.powi(30);
            let got = exact_prefix(ws.iter().map(|w| w.0), p);
            let mut c = 0u128;
            let want = ws.iter().position(|w| {
                c += w.1;
                (c << 30) >= u128::from(num) * total
            });
            prop_assert_eq!(got, want.map(|i| i + 1));
            // The ceiling is exact: one unit less, and the first crossing moves on (or
            // stays, when a zero weight or a jump does not separate them).
            let mut t = ExactSum::new();
            ws.iter().for_each(|w| t.add(w.0));
            let thr = t.scaled_ceil(p);
            let want_thr = (u128::from(num) * total).div_ceil(1 << 30);
            // In units of 2^-40: the threshold must be a whole number of them or sit
            // strictly between (units below 2^-40 are then nonzero).
            prop_assert!(thr <= from_units40(want_thr));
            if want_thr > 0 {
                prop_assert!(thr > from_units40(want_thr - 1));
            }
        }
    }

    #[test]
    fn a_target_on_a_running_sum_is_reached_there() {
        // Weights 1, 1, 2 (T = 4): p = 1/2 puts p * T on the second running sum exactly.
        assert_eq!(exact_prefix([1.0, 1.0, 2.0].into_iter(), 0.5), Some(2));
        // Just above it, the third.
        assert_eq!(
            exact_prefix([1.0, 1.0, 2.0].into_iter(), 0.5 + f64::EPSILON),
            Some(3)
        );
        assert_eq!(exact_prefix([1.0, 1.0, 2.0].into_iter(), 1.0), Some(3));
        assert_eq!(exact_prefix([0.0, 0.0].into_iter(), 0.5), Some(1));
        assert_eq!(exact_prefix(std::iter::empty(), 0.5), None);
        // T = 2 + 2^-1074: p * T is half a unit above the first running sum, which
        // falls short (an `f64` sum would say it reaches it); the second reaches it.
        let tiny = f64::from_bits(1);
        let ws = [1.0, tiny, 1.0];
        assert_eq!(exact_prefix(ws.into_iter(), 0.5), Some(2));
    }

    #[test]
    fn extremes_add_exactly() {
        let tiny = f64::from_bits(1);
        let mut s = ExactSum::new();
        s.add(tiny);
        assert_eq!(s.limbs[0], 1);
        assert_eq!(s.to_f64(), tiny);
        s.add(1.0);
        // 1 + 2^-1074 rounds to 1 but is not 1.
        assert_eq!(s.to_f64(), 1.0);
        let mut one = ExactSum::new();
        one.add(1.0);
        assert!(s > one);
        // Subnormals and the largest value.
        let mut m = ExactSum::new();
        m.add(f64::MAX);
        assert_eq!(m.to_f64(), f64::MAX);
        m.add(f64::MAX);
        assert_eq!(m.to_f64(), f64::INFINITY);
        let sub = f64::from_bits(0x000f_ffff_ffff_ffff);
        let mut t = ExactSum::new();
        t.add(sub);
        t.add(tiny);
        assert_eq!(t.to_f64(), f64::MIN_POSITIVE);
        // Many terms: 2^20 times 2^-1074 + 1.
        let mut n = ExactSum::new();
        for _ in 0..1 << 20 {
            n.add(tiny);
            n.add(0.5);
        }
        assert_eq!(n.limbs[0], 1 << 20);
        assert_eq!(n.to_f64(), (1u64 << 19) as f64);
        // Halfway cases round to even: 1 + 2^-53 -> 1, 1 + 3 * 2^-53 -> 1 + 2^-51.
        let mut h = ExactSum::new();
        h.add(1.0);
        h.add(2f64.powi(-53));
        assert_eq!(h.to_f64(), 1.0);
        h.add(2f64.powi(-52));
        assert_eq!(h.to_f64(), 1.0 + 2f64.powi(-51));
    }

    #[test]
    fn a_weight_below_the_last_ulp_of_u_is_not_drawn_at_the_top_uniform() {
        // Weights 1, e^-20, e^-20, e^-40 and u = 1 - 2^-53: u * T is about 1.1e-16 below
        // T, while the last weight (about 4e-18) is less: the third running sum passes.
        let ws = [1.0, (-20f64).exp(), (-20f64).exp(), (-40f64).exp()];
        assert_eq!(
            exact_index(ws.iter().copied(), 1.0 - f64::EPSILON / 2.0),
            Some(2)
        );
        assert_eq!(exact_index(ws.iter().copied(), 0.0), Some(0));
        assert_eq!(exact_index([0.0, 0.0, 2.0].iter().copied(), 0.0), Some(2));
        assert_eq!(exact_index([0.0, 0.0].iter().copied(), 0.5), None);
    }
}
