//! Min-p's survivors on a flat row: the exact threshold on the logit, and the pass that
//! collects every unmarked entry above it, in id order.
//!
//! Min-p alone needs no total mass to decide its set: a token survives exactly when
//! `(l - max) / T >= ln(min_p)` in `f64`, a predicate monotone in `l`. [`threshold`]
//! turns it into the smallest `f32` logit that passes, so the set is one comparison per
//! entry, [`compress_portable`] (run through [`simd::compress`](crate::simd::compress),
//! which on AVX-512 compresses whole vectors of entries without a branch). The draw then
//! works on those few entries instead of the row. A draw from the whole of a flat row
//! takes the same path with no threshold: every finite entry survives.
//!
//! The draw over them ([`weigh`], [`mass_above`], [`MassSlope`]) searches the logit for
//! the window that holds its target, and sorts that window alone.

use crate::adjust::{is_marked, lane_marks_if, load, BLOCK, LANES};
use crate::element::Logit;
use crate::histogram::{fast_weight, Frame};
use crate::TokenId;

/// The smallest finite `f32` logit `l` with `(l - max) / t >= ln_min` in `f64` (the
/// predicate of `above_ln`), or `max.next_up()` when not even `max` passes. `max` is
/// finite and `t` positive; the predicate is monotone in `l` (each `f64` operation
/// rounds monotonically), so a token survives exactly when its logit is at least this.
pub(crate) fn threshold(max: f32, t: f32, ln_min: f64) -> f32 {
    let keeps = |l: f32| (f64::from(l) - f64::from(max)) / f64::from(t) >= ln_min;
    if !keeps(max) {
        return max.next_up();
    }
    if keeps(f32::MIN) {
        return f32::MIN;
    }
    // Binary search over the `f32` values between `f32::MIN` (fails) and `max` (passes),
    // in the order of their ordered integer keys.
    let (mut lo, mut hi) = (ordered(f32::MIN), ordered(max));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if keeps(from_ordered(mid)) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    from_ordered(hi)
}

/// A key of `x` (not NaN) whose integer order is the order of the values, `-0.0` just
/// below `0.0`.
fn ordered(x: f32) -> u32 {
    let b = x.to_bits();
    if b >> 31 == 1 {
        !b
    } else {
        b | 1 << 31
    }
}

/// The inverse of [`ordered`].
fn from_ordered(k: u32) -> f32 {
    f32::from_bits(if k >> 31 == 1 { k & !(1 << 31) } else { !k })
}

/// Appends to `vals` and `ids` every entry of `row` above `above` and at most `upto`
/// that `marks` (token `i` at bit `i % 32` of `marks[i / 32]`, or none) does not mark,
/// in id order.
///
/// Always inlined, so that [`simd::compress`](crate::simd::compress) can compile it for
/// AVX2.
#[inline(always)]
pub(crate) fn compress_portable<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    (above, upto): (f32, f32),
    vals: &mut Vec<f32>,
    ids: &mut Vec<TokenId>,
) {
    match marks {
        None => compress_with::<T, false>(row, &[], (above, upto), vals, ids),
        Some(m) => compress_with::<T, true>(row, m, (above, upto), vals, ids),
    }
}

/// [`compress_portable`] with the test of the marks compiled in or out: the bits of a
/// chunk of [`LANES`] entries without a branch, then one visit per set bit.
#[inline(always)]
fn compress_with<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    (above, upto): (f32, f32),
    vals: &mut Vec<f32>,
    ids: &mut Vec<TokenId>,
) {
    let whole = row.len() / LANES * LANES;
    for (c, chunk) in row[..whole].chunks_exact(LANES).enumerate() {
        let v = load(chunk);
        let mut w = [0u32; LANES];
        for j in 0..LANES {
            w[j] = u32::from((v[j] > above) & (v[j] <= upto)) << j;
        }
        let base = c * LANES;
        let mut bits = w.iter().fold(0, |a, &x| a | x) & !lane_marks_if::<MARKS>(marks, base);
        bits &= 0xffff;
        while bits != 0 {
            let j = bits.trailing_zeros() as usize;
            vals.push(v[j]);
            ids.push((base + j) as TokenId);
            bits &= bits - 1;
        }
    }
    compress_tail::<T, MARKS>(row, marks, whole, (above, upto), vals, ids);
}

/// The entries of [`compress_portable`] from `from` (the end of the whole chunks) on.
#[inline(always)]
pub(crate) fn compress_tail<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    from: usize,
    (above, upto): (f32, f32),
    vals: &mut Vec<f32>,
    ids: &mut Vec<TokenId>,
) {
    for (j, x) in row[from..].iter().enumerate() {
        let (l, i) = (x.to_f32(), from + j);
        if l > above && l <= upto && !(MARKS && is_marked(marks, i)) {
            vals.push(l);
            ids.push(i as TokenId);
        }
    }
}

/// The maximum of `part` (whole chunks of [`LANES`]; `-inf` when empty), every entry
/// added to the lane sums `sum` on the way (for the row's check): lane by lane, no
/// branch, four chunks at a time into four sets of sums and maxima (one running sum
/// would wait for each addition before the next), added lane by lane at the end. A lane
/// of `sum` ends NaN or `+inf` when an entry is (an addition never takes either back),
/// or, rarely, when finite sums overflow; the caller then looks for the entry itself.
///
/// Always inlined, so that [`simd::max_sum`](crate::simd::max_sum) can compile it for
/// wider vectors.
#[inline(always)]
pub(crate) fn max_sum<T: Logit>(part: &[T], sum: &mut [f32; LANES]) -> f32 {
    // Four chunks per step, each into its own sums and maxima: one running sum would
    // wait for each addition before the next.
    const WAYS: usize = 4;
    let mut m = [[f32::NEG_INFINITY; LANES]; WAYS];
    let mut acc = [[0.0f32; LANES]; WAYS];
    acc[0] = *sum;
    let mut blocks = part.chunks_exact(WAYS * LANES);
    for b in &mut blocks {
        for (w, c) in b.chunks_exact(LANES).enumerate() {
            let v = load(c);
            for j in 0..LANES {
                acc[w][j] += v[j];
                m[w][j] = if v[j] > m[w][j] { v[j] } else { m[w][j] };
            }
        }
    }
    for c in blocks.remainder().chunks_exact(LANES) {
        let v = load(c);
        for j in 0..LANES {
            acc[0][j] += v[j];
            m[0][j] = if v[j] > m[0][j] { v[j] } else { m[0][j] };
        }
    }
    for j in 0..LANES {
        sum[j] = (acc[0][j] + acc[1][j]) + (acc[2][j] + acc[3][j]);
        for w in 1..WAYS {
            m[0][j] = if m[w][j] > m[0][j] { m[w][j] } else { m[0][j] };
        }
    }
    crate::adjust::lanes_max(&m[0])
}

/// What [`weigh`] found: the sum of the weights, the least of the values (`+inf` when
/// there are none), and a bound on the sum of each weight times its scaled logit's
/// magnitude, `w |s|` with `s = fl(fl(l - max) * fl(1 / T))` (the `f32` sum, raised by
/// its own rounding's bound), which bounds the error the arguments' roundings put in
/// the total (see [`Weighed::error_bound`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Weighed {
    pub(crate) total: f64,
    pub(crate) least: f32,
    pub(crate) dev: f64,
}

impl Weighed {
    /// A bound on `|total - Z|`, `Z` the exact sum of `exp((l - max) / T)` over the `n`
    /// values weighed in frame `f`, a-posteriori: each weight is within
    /// [`F32_REL_ERROR`](crate::exp::F32_REL_ERROR) (the `f32` exponential), the
    /// first-order correction's remainders (as in [`error_bound`](crate::histogram::error_bound)) and
    /// `steps * 2^-24 |x|` (the argument's roundings) of its exact value, or, clamped
    /// below `e^-87`, within [`F32_ABS_ERROR`](crate::exp::F32_ABS_ERROR) of it; `dev`
    /// bounds the sum of `w |x|` to within 1% (the weights' and the arguments' own
    /// errors); the sums round as [`weigh`] says.
    pub(crate) fn error_bound(&self, n: usize, f: Frame) -> f64 {
        use crate::exp::{F32_ABS_ERROR, F32_REL_ERROR};
        let rel = F32_REL_ERROR + 6e-8 * 6e-8 * 87.0 * 87.0 + 1.2e-7 * 6e-8 + 1e-12;
        self.total * (rel + WEIGH_SUM_ERROR + 2.0 * n as f64 * f64::EPSILON)
            + 1.01 * f.steps() * 5.97e-8 * self.dev
            + n as f64 * F32_ABS_ERROR
    }
}

/// Writes into `out[i]` the fast weight ([`fast_weight`]) of `vals[i]` in frame `f`, and
/// returns their sum, the least of `vals` and the sum of `w |s|` ([`Weighed`]): each
/// lane sums the four weights (and the four `w |s|`) it takes from a block of [`BLOCK`]
/// entries in `f32`, then adds that to its `f64` sum; the lanes are added at the end.
/// The `f32` sums of at most four non-negative terms round by at most
/// [`WEIGH_SUM_ERROR`] of the total; the `f64` ones by `2 n` ulps. `out` is as long as
/// `vals`.
///
/// (Summing each weight in `f64` directly chains every lane's `f64` additions, with a
/// conversion each: about twice the time of the pass.)
///
/// Always inlined, so that [`simd::weigh`](crate::simd::weigh) can compile it for wider
/// vectors.
#[inline(always)]
pub(crate) fn weigh<T: Logit>(vals: &[T], f: Frame, out: &mut [f32]) -> Weighed {
    let mut acc = [0.0f64; LANES];
    // (In `f32`, per lane, across the whole row: a conversion to `f64` per block for
    // these too doubles the pass's horizontal work. Their rounding is bounded below.)
    let mut dacc = [0.0f32; LANES];
    let mut low = [f32::INFINITY; LANES];
    // `w |s|`, `s` the scaled logit as `fast_weight` computes it (at most 0).
    let dev = |v: f32, w: f32| w * -f.s32(v);
    let whole = vals.len() / BLOCK * BLOCK;
    let (body, tail) = out.split_at_mut(whole);
    for (b, ob) in vals[..whole]
        .chunks_exact(BLOCK)
        .zip(body.chunks_exact_mut(BLOCK))
    {
        let mut zb = [0.0f32; LANES];
        let mut db = [0.0f32; LANES];
        for (c, o) in b.chunks_exact(LANES).zip(ob.chunks_exact_mut(LANES)) {
            let v = load(c);
            for j in 0..LANES {
                let w = fast_weight(f, v[j]);
                o[j] = w;
                zb[j] += w;
                db[j] += dev(v[j], w);
                low[j] = if v[j] < low[j] { v[j] } else { low[j] };
            }
        }
        for j in 0..LANES {
            acc[j] += f64::from(zb[j]);
            dacc[j] += db[j];
        }
    }
    for (i, (x, o)) in vals[whole..].iter().zip(tail).enumerate() {
        let v = x.to_f32();
        let w = fast_weight(f, v);
        *o = w;
        acc[i % LANES] += f64::from(w);
        dacc[i % LANES] += dev(v, w);
        low[i % LANES] = if v < low[i % LANES] {
            v
        } else {
            low[i % LANES]
        };
    }
    let least = low
        .iter()
        .fold(f32::INFINITY, |a, &b| if b < a { b } else { a });
    // Each lane's `f32` sum adds at most `n / BLOCK + 4` terms (the blocks' sums of
    // four, and the tail's), each rounding within `2^-24` of the running sum: so the
    // exact sum of `w |s|` is below the computed one times `1 + (n / BLOCK + 8) 2^-23`
    // (the first order, doubled).
    let terms = (vals.len() / BLOCK + 8) as f64;
    let dev: f64 = dacc.iter().map(|&d| f64::from(d)).sum();
    Weighed {
        total: acc.iter().sum(),
        least,
        dev: dev * (1.0 + terms * f64::from(f32::EPSILON)),
    }
}

/// Bound on the relative error that [`weigh`]'s `f32` sums (four non-negative terms
/// each, three roundings of `2^-24`) add to its total: `3 * 2^-24`, rounded up.
pub(crate) const WEIGH_SUM_ERROR: f64 = 3.01 * 5.960_464_477_539_063e-8;

/// For each of the two points `xs[k]`: the sum in `f64` of the weights `w[i]` of the
/// entries `vals[i] > xs[k]`, and how many there are (the fast mass of the survivors
/// before a point of the draw order). One pass for both points.
///
/// Always inlined, so that [`simd::mass_above`](crate::simd::mass_above) can compile it
/// for wider vectors.
#[inline(always)]
pub(crate) fn mass_above<T: Logit>(vals: &[T], w: &[f32], xs: [f32; 2]) -> [(f64, usize); 2] {
    // (Two independent sets of lane sums: neither waits on the other's additions.)
    let (mut acc0, mut acc1) = ([0.0f64; LANES], [0.0f64; LANES]);
    let (mut cnt0, mut cnt1) = ([0u32; LANES], [0u32; LANES]);
    let (x0, x1) = (xs[0], xs[1]);
    let len = vals.len().min(w.len());
    let whole = len / LANES * LANES;
    for (c, ws) in vals[..whole].chunks_exact(LANES).zip(w.chunks_exact(LANES)) {
        let (v, ws) = (load(c), load(ws));
        for j in 0..LANES {
            let wj = f64::from(ws[j]);
            let (a, b) = (v[j] > x0, v[j] > x1);
            acc0[j] += if a { wj } else { 0.0 };
            acc1[j] += if b { wj } else { 0.0 };
            cnt0[j] += u32::from(a);
            cnt1[j] += u32::from(b);
        }
    }
    let mut out = [(0.0, 0); 2];
    for (k, (acc, cnt)) in [(acc0, cnt0), (acc1, cnt1)].iter().enumerate() {
        let mut sum: f64 = acc.iter().sum();
        let mut n: usize = cnt.iter().map(|&c| c as usize).sum();
        for (v, &wt) in vals[whole..len].iter().zip(&w[whole..len]) {
            if v.to_f32() > xs[k] {
                sum += f64::from(wt);
                n += 1;
            }
        }
        out[k] = (sum, n);
    }
    out
}

/// A model of how a window of survivors `(lo, hi]` spreads its mass over the logit, for
/// choosing where to probe it: a mass density `e^(g s)` at `s = l - lo`, whose slope `g`
/// gives the survivors the mean weight they have. (Each weight is `e^(s / T)` times the
/// weight at `lo`, so that the survivors' own density is `e^((g - 1 / T) s)`.) On a flat
/// row most of the survivors, and of their mass, lie near the floor, where spreading
/// the mass evenly over the logit would put the points far too high.
///
/// The model only chooses where a search looks; what the search decides comes from
/// the masses it measures there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MassSlope {
    /// `g` times the window's width.
    gamma: f64,
}

impl MassSlope {
    /// The slope for a window `beta = (hi - lo) / T` wide whose survivors' mean weight is
    /// `e^ln_rho` times the weight at its lower end (`0 < ln_rho < beta` for survivors
    /// spread inside it; a value outside takes the end it is nearest). `None` when
    /// `beta` is not a positive finite number or `ln_rho` is NaN.
    ///
    /// The mean weight over the window is `E(gamma) / E(gamma - beta)` times the lowest
    /// one, with `E(x) = (e^x - 1) / x`, which rises with `gamma`: a safeguarded Newton
    /// search (bisection where a step would leave the bracket) solves it to `1e-4 beta`
    /// in `ln_rho`, within [`SLOPE_STEPS`] steps.
    pub(crate) fn fit(beta: f64, ln_rho: f64) -> Option<MassSlope> {
        if !(beta > 0.0 && beta.is_finite()) || ln_rho.is_nan() {
            return None;
        }
        let y = ln_rho.clamp(1e-9 * beta, beta * (1.0 - 1e-9));
        let h = |g: f64| ln_mean(g) - ln_mean(g - beta);
        let dh = |g: f64| d_ln_mean(g) - d_ln_mean(g - beta);
        let (mut a, mut b) = (-SLOPE_RANGE, SLOPE_RANGE + beta);
        let mut g = 0.0;
        for _ in 0..SLOPE_STEPS {
            let r = h(g) - y;
            if r.abs() <= 1e-4 * beta {
                break;
            }
            if r > 0.0 {
                b = g;
            } else {
                a = g;
            }
            let step = g - r / dh(g);
            g = if step > a && step < b {
                step
            } else {
                0.5 * (a + b)
            };
        }
        Some(MassSlope { gamma: g })
    }

    /// Where, as a fraction of the window's width from its lower end, the model puts the
    /// point above which lies the fraction `f` (in `[0, 1]`) of the window's mass: the
    /// `s` with `(e^gamma - e^(gamma s)) / (e^gamma - 1) = f`; `1 - f` for a flat density.
    pub(crate) fn place(self, f: f64) -> f64 {
        let g = self.gamma;
        let s = if g.abs() < 1e-9 {
            1.0 - f
        } else if g < 0.0 {
            ((1.0 - f) * g.exp_m1()).ln_1p() / g
        } else {
            1.0 + (f * (-g).exp_m1()).ln_1p() / g
        };
        if s.is_nan() {
            1.0 - f
        } else {
            s.clamp(0.0, 1.0)
        }
    }
}

/// The bracket of [`MassSlope::fit`]'s search is `gamma` in
/// `[-SLOPE_RANGE, SLOPE_RANGE + beta]`: beyond it the mass density falls by `e` within
/// `1 / 4096` of the window's width from one end, as good as all at the end for choosing
/// a point.
const SLOPE_RANGE: f64 = 4096.0;
/// The most steps of [`MassSlope::fit`]'s search (over `beta` in `0.1..20` and `ln_rho`
/// in each hundredth of it, Newton's from a flat density took two to five steps in nine
/// cases out of ten, and never more than nine).
const SLOPE_STEPS: usize = 12;

/// `ln E(x)`, `E(x) = (e^x - 1) / x` (`E(0) = 1`), without overflow.
fn ln_mean(x: f64) -> f64 {
    if x == 0.0 {
        0.0
    } else if x > 1.0 {
        x + (-(-x).exp_m1() / x).ln()
    } else {
        (x.exp_m1() / x).ln()
    }
}

/// The derivative of [`ln_mean`]: `1 / (1 - e^-x) - 1 / x` (`1 / 2` at 0).
fn d_ln_mean(x: f64) -> f64 {
    if x.abs() < 1e-6 {
        0.5 + x / 12.0
    } else {
        -1.0 / (-x).exp_m1() - 1.0 / x
    }
}

/// How many times [`sample_points`] halves its interval: to `2^-10` of the window's
/// logits (a hundredth of a logit on a flat row's window of about ten), finer than the
/// sample can place a point: its mass fractions are off by about `1 / sqrt(n)` for `n`
/// entries, a few percent for a row's one entry per block.
pub(crate) const SAMPLE_HALVINGS: usize = 10;

/// The points of `(lo, hi)` above which the entries of the sample `vals` (weights `w`,
/// in total `z`) hold the fractions `fs` of its mass: [`SAMPLE_HALVINGS`] halvings of the
/// interval, both points in each pass of `above` ([`mass_above`], or its dispatched
/// copy). Each point is within `2^-SAMPLE_HALVINGS` of the interval's width of one whose
/// mass above is at least `f * z` below it and less above it. A guess of where a row's
/// mass crosses a fraction, for a search to probe.
pub(crate) fn sample_points(
    vals: &[f32],
    w: &[f32],
    (lo, hi): (f32, f32),
    (fs, z): ([f64; 2], f64),
    above: impl Fn(&[f32], &[f32], [f32; 2]) -> [(f64, usize); 2],
) -> [f32; 2] {
    let mid = |a: f32, b: f32| (0.5 * (f64::from(a) + f64::from(b))) as f32;
    // (The mass above `a[k]` is at least `fs[k] * z`, above `b[k]` less, once moved.)
    let (mut a, mut b) = ([lo; 2], [hi; 2]);
    for _ in 0..SAMPLE_HALVINGS {
        let m = [mid(a[0], b[0]), mid(a[1], b[1])];
        let got = above(vals, w, m);
        for k in 0..2 {
            if got[k].0 >= fs[k] * z {
                a[k] = m[k];
            } else {
                b[k] = m[k];
            }
        }
    }
    [mid(a[0], b[0]), mid(a[1], b[1])]
}

/// Inserts `extra` (`(l, id)`, ids ascending, none of them in `ids`) into `vals` and
/// `ids` (ids ascending), keeping ids ascending: each run of entries moves once, by as
/// many places as there are extra entries before it.
pub(crate) fn merge(vals: &mut Vec<f32>, ids: &mut Vec<TokenId>, extra: &[(f32, TokenId)]) {
    let old = ids.len();
    vals.resize(old + extra.len(), 0.0);
    ids.resize(old + extra.len(), 0);
    let mut end = old;
    for (j, &(l, id)) in extra.iter().enumerate().rev() {
        let p = ids[..end].partition_point(|&x| x < id);
        ids.copy_within(p..end, p + j + 1);
        vals.copy_within(p..end, p + j + 1);
        ids[p + j] = id;
        vals[p + j] = l;
        end = p;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The threshold is the exact boundary of the `f64` predicate: it passes and the
    /// `f32` below it does not, at temperatures with and without rounding.
    #[test]
    fn the_threshold_is_the_predicates_boundary() {
        for (max, t, ln) in [
            (3.25f32, 1.0f32, (0.05f64).ln()),
            (-7.5, 0.8, (0.05f64).ln()),
            (0.0, 0.3, (0.5f64).ln()),
            (1e-30, 1.7, (1e-3f64).ln()),
            (12.0, 1.0, 0.0),
            (5.0, 1e30, (0.05f64).ln()),
        ] {
            let keeps = |l: f32| (f64::from(l) - f64::from(max)) / f64::from(t) >= ln;
            let thr = threshold(max, t, ln);
            assert!(keeps(thr), "{max} {t} {ln}: {thr}");
            assert!(
                thr == f32::MIN || !keeps(thr.next_down()),
                "{max} {t} {ln}: {thr}"
            );
        }
        assert_eq!(threshold(1.0, 1.0, 0.5), 1.0f32.next_up());
    }

    /// The maximum is the plain one, and the sums flag a NaN or `+inf` anywhere (and
    /// nothing for `-inf`), on every copy and for parts of any number of chunks.
    #[test]
    fn max_sum_finds_the_maximum_and_flags_the_row() {
        let mut x = 0x6a09_e667_f3bc_c909u64;
        for chunks in [0, 1, 3, 4, 5, 8, 11] {
            let n = chunks * LANES;
            let row = crate::test_rows::uniform_row(&mut x, n, 40.0, 7, 2);
            let flagged = |row: &[f32]| {
                let (mut a, mut b) = ([0.0f32; LANES], [0.0f32; LANES]);
                let m = max_sum(row, &mut a);
                let m2 = crate::simd::max_sum(row, &mut b);
                assert_eq!(m.to_bits(), m2.to_bits());
                let flag = |s: &[f32; LANES]| s.iter().any(|&v| crate::adjust::not_finite_above(v));
                assert_eq!(flag(&a), flag(&b));
                (m, flag(&a))
            };
            let plain = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(flagged(&row), (plain, false), "{chunks} chunks");
            for at in (0..n).step_by(13) {
                for bad in [f32::NAN, f32::INFINITY] {
                    let mut r = row.clone();
                    r[at] = bad;
                    assert!(flagged(&r).1, "{bad} at {at} of {n}");
                }
                let mut r = row.clone();
                r[at] = f32::NEG_INFINITY;
                assert!(!flagged(&r).1);
            }
        }
    }

    /// Every unmarked entry above the threshold, in id order, marks or not, over a row
    /// with a ragged tail, from every copy of the pass this CPU runs, on `f32`, `f16` and
    /// `bf16`: densities from none through sparse (a few per block of 64) and about a
    /// quarter (where a block's count crosses 16) to every entry.
    #[test]
    fn compress_takes_every_unmarked_entry_above() {
        let mut x = 0x853c_49e6_748f_ea9bu64;
        let n = 10_007;
        let row = crate::test_rows::uniform_row(&mut x, n, 3.0, 89, 3);
        let marks: Vec<u32> = (0..n.div_ceil(32) as u32)
            .map(|w| w.wrapping_mul(0x9e37_79b9) ^ 0x0f0f_5555)
            .collect();
        let halves: Vec<half::f16> = row.iter().map(|&l| half::f16::from_f32(l)).collect();
        let brains: Vec<half::bf16> = row.iter().map(|&l| half::bf16::from_f32(l)).collect();
        for m in [None, Some(&marks[..])] {
            for (above, upto) in [
                (f32::NEG_INFINITY, f32::INFINITY),
                (-1.0, f32::INFINITY),
                (0.5, 1.25),
                (1.3, f32::INFINITY),
                (2.9, f32::INFINITY),
                (-0.5, -0.5),
                (f32::INFINITY, f32::INFINITY),
            ] {
                let bounds = (above, upto);
                let ids = check_copies(&row, m, bounds);
                assert!(!ids.is_empty() || above > 2.0 || upto == above, "{above}");
                check_copies(&halves, m, bounds);
                check_copies(&brains, m, bounds);
            }
        }
    }

    /// Checks every copy of the collecting pass against the plain filter on `row`;
    /// returns the ids.
    fn check_copies<T: Logit>(row: &[T], m: Option<&[u32]>, (above, upto): (f32, f32)) -> Vec<u32> {
        let plain: Vec<f32> = row.iter().map(|x| x.to_f32()).collect();
        let want: Vec<u32> = (0..row.len())
            .filter(|&i| plain[i] > above && plain[i] <= upto)
            .filter(|&i| !m.is_some_and(|m| is_marked(m, i)))
            .map(|i| i as u32)
            .collect();
        let copies = crate::simd::compress_copies(row, m, (above, upto));
        assert!(copies.len() >= 2);
        for (name, vals, ids) in copies {
            assert_eq!(ids, want, "{name} {above} {upto}");
            assert!(
                vals.iter()
                    .zip(&ids)
                    .all(|(&v, &i)| v.to_bits() == plain[i as usize].to_bits()),
                "{name}"
            );
        }
        want
    }

    /// The weights are the histogram's fast weights, and the masses above a point their
    /// sums, on every copy.
    #[test]
    fn weights_and_masses_match_the_histograms() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let vals = crate::test_rows::uniform_row(&mut x, 5_003, 3.0, 97, 5);
        let max = vals.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let f = Frame::new(max, 0.8);
        let mut w = vec![0.0f32; vals.len()];
        let a = crate::simd::weigh(&vals, f, &mut w);
        let (z, least) = (a.total, a.least);
        let mut w1 = vec![0.0f32; vals.len()];
        let b = weigh(&vals, f, &mut w1);
        let (z1, least1) = (b.total, b.least);
        assert_eq!(z1.to_bits(), z.to_bits());
        assert_eq!(a.dev.to_bits(), b.dev.to_bits());
        assert_eq!(w, w1);
        let min = vals.iter().copied().fold(f32::INFINITY, f32::min);
        assert_eq!(
            (least.to_bits(), least1.to_bits()),
            (min.to_bits(), min.to_bits())
        );
        // (The least may lie in the tail, beyond the whole blocks.)
        let mut tail_low = vals.clone();
        *tail_low.last_mut().unwrap() = min - 1.0;
        assert_eq!(crate::simd::weigh(&tail_low, f, &mut w1).least, min - 1.0);
        assert_eq!(
            crate::simd::weigh(&[] as &[f32], f, &mut []).least,
            f32::INFINITY
        );
        for (i, &l) in vals.iter().enumerate() {
            assert_eq!(w[i].to_bits(), fast_weight(f, l).to_bits());
        }
        let plain: f64 = w.iter().map(|&x| f64::from(x)).sum();
        assert!((plain - z).abs() <= (WEIGH_SUM_ERROR + 1e-12) * z);
        // (Whole blocks and a tail that is not.)
        assert_ne!(vals.len() % BLOCK, 0);
        let points = [f32::NEG_INFINITY, -2.0, 0.0, max - 0.5, max];
        for (&a, &b) in points.iter().zip(points.iter().rev()) {
            let got = crate::simd::mass_above(&vals, &w, [a, b]);
            assert_eq!(mass_above(&vals, &w, [a, b]), got);
            for (x, (m, c)) in [a, b].into_iter().zip(got) {
                let keep: Vec<usize> = (0..vals.len()).filter(|&i| vals[i] > x).collect();
                assert_eq!(c, keep.len());
                let want: f64 = keep.iter().map(|&i| f64::from(w[i])).sum();
                assert!((m - want).abs() <= 1e-12 * want.max(1e-300), "{x}");
            }
        }
    }

    /// The a-posteriori bound holds against the `f64` sum of the exact weights, at
    /// temperatures with one, two and no roundings in the argument, over rows with
    /// `-inf`, clamped weights and ties; and on a flat row it is well below the bound
    /// taken at the least value's bucket.
    #[test]
    fn the_weighed_bound_holds_and_is_tight() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rows = vec![
            crate::test_rows::uniform_row(&mut x, 151_936, 1.0, 97, 5),
            crate::test_rows::uniform_row(&mut x, 5_003, 40.0, 97, 5),
            crate::test_rows::uniform_row(&mut x, 77, 3.0, 7, 3),
        ];
        rows.push((0..20_000).map(|i| -60.0 + 3e-3 * i as f32).collect());
        for row in &rows {
            let finite: Vec<f32> = row.iter().copied().filter(|l| l.is_finite()).collect();
            let max = finite.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for t in [1.0f32, 0.5, 0.8, 1.7] {
                let f = Frame::new(max, t);
                let mut w = vec![0.0f32; finite.len()];
                let got = crate::simd::weigh(&finite, f, &mut w);
                let exact: f64 = finite
                    .iter()
                    .map(|&l| ((f64::from(l) - f64::from(max)) / f64::from(t)).exp())
                    .sum();
                let bound = got.error_bound(finite.len(), f);
                assert!(
                    (got.total - exact).abs() <= bound,
                    "T {t}: {} vs {exact}, bound {bound:e}",
                    got.total
                );
                assert!(bound <= 1e-5 * exact);
            }
        }
        // A bell-shaped row at T 0.8 (the sum of four uniforms, about N(0, 1.2)): the
        // bound at the least value's bucket is several times the a-posteriori one.
        let n = 151_936;
        let mut row = vec![0.0f32; n];
        for _ in 0..4 {
            let u = crate::test_rows::uniform_row(&mut x, n, 4.0, n + 1, n);
            row.iter_mut().zip(u).for_each(|(r, u)| *r += u);
        }
        let (post, prior) = bounds_at_0_8(&row);
        assert!(2.0 * post < prior, "{post:e} vs {prior:e}");
        // The benches' flat row (151,936 standard normals from their generator,
        // `tests/mix`) at T 0.8: 7.7e-7 of the total a posteriori, 1.4e-6 at the least
        // value's bucket. (The arguments' roundings count at the mass's distance from the
        // maximum, about 3.8; the exponential's and the sums' 3e-7 stay.)
        let mut state = 151_936u64 ^ 0xF1A7;
        let mut unit = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        let row: Vec<f32> = (0..151_936)
            .map(|_| {
                let r = (-2.0 * unit().max(1e-300).ln()).sqrt();
                (r * (std::f64::consts::TAU * unit()).cos()) as f32
            })
            .collect();
        let (post, prior) = bounds_at_0_8(&row);
        eprintln!(
            "flat row, T 0.8: a-posteriori bound {post:.3e} of the total, at the least \
             value's bucket {prior:.3e}"
        );
        assert!(1.5 * post < prior, "{post:e} vs {prior:e}");
    }

    /// [`Weighed::error_bound`] and [`histogram::error_bound`](crate::histogram::error_bound)
    /// at the least value's bucket, both relative to the total, for `row` at T 0.8.
    fn bounds_at_0_8(row: &[f32]) -> (f64, f64) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let f = Frame::new(max, 0.8);
        let mut w = vec![0.0f32; row.len()];
        let got = crate::simd::weigh(row, f, &mut w);
        let b = (crate::histogram::key(got.least, f) as usize).min(crate::histogram::LAST - 1);
        let prior = crate::histogram::error_bound(b, row.len() as u32, got.total, f);
        let post = got.error_bound(row.len(), f);
        (post / got.total, prior / got.total)
    }

    /// Each point the sample places has its fraction of the sample's mass above the
    /// point a step of the halvings below it, and less a step above it.
    #[test]
    fn sample_points_split_the_sample_as_asked() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let vals = crate::test_rows::uniform_row(&mut x, 2_377, 4.0, 2_378, 2_377);
        // (A sample of a row holds no `-inf`: the stride puts none in it.)
        let max = vals.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let least = vals.iter().copied().fold(f32::INFINITY, f32::min);
        let f = Frame::new(max, 0.8);
        let mut w = vec![0.0f32; vals.len()];
        let z = crate::simd::weigh(&vals, f, &mut w).total;
        let above = |x: f32| -> f64 {
            (vals.iter().zip(&w))
                .filter(|&(&l, _)| l > x)
                .map(|(_, &wt)| f64::from(wt))
                .sum()
        };
        let (lo, hi) = (least.next_down(), max);
        let step = (hi - lo) / (1u32 << SAMPLE_HALVINGS) as f32;
        for fs in [[0.9, 0.6], [0.2, 0.05], [0.5, 0.5], [0.01, 0.001]] {
            let got = sample_points(&vals, &w, (lo, hi), (fs, z), crate::simd::mass_above);
            let portable = sample_points(&vals, &w, (lo, hi), (fs, z), mass_above);
            assert_eq!(got, portable);
            for (p, f) in got.into_iter().zip(fs) {
                assert!(p > lo && p < hi, "{p}");
                assert!(above(p - step) >= f * z, "{f}: {p}");
                assert!(above(p + step) < f * z, "{f}: {p}");
            }
        }
    }

    /// The model's mass above a place `s` (a fraction of the window from its lower end),
    /// as a fraction of the window's, by a plain midpoint sum.
    fn model_mass_above(gamma: f64, s: f64) -> f64 {
        let steps = 200_000;
        let dens = |x: f64| (gamma * x).exp();
        let total: f64 = (0..steps)
            .map(|i| dens((i as f64 + 0.5) / steps as f64))
            .sum();
        let above: f64 = (0..steps)
            .map(|i| (i as f64 + 0.5) / steps as f64)
            .filter(|&x| x > s)
            .map(dens)
            .sum();
        above / total
    }

    /// The model's mean weight over the window, as `ln` of its ratio to the weight at the
    /// lower end, by a plain midpoint sum.
    fn model_ln_rho(gamma: f64, beta: f64) -> f64 {
        let steps = 200_000;
        let (mut mass, mut count) = (0.0, 0.0);
        for i in 0..steps {
            let x = (i as f64 + 0.5) / steps as f64;
            mass += (gamma * x).exp();
            count += ((gamma - beta) * x).exp();
        }
        (mass / count).ln()
    }

    /// The fit recovers the slope that gave the window its mean weight, and the place
    /// holds the fraction of the model's mass asked for above it.
    #[test]
    fn the_mass_slope_fits_and_places_as_the_model_says() {
        for beta in [0.01, 1.0, 3.0, 12.0, 60.0] {
            for gamma in [-40.0, -4.5, -0.3, 0.0, 0.2, 2.0, 9.0] {
                let m = MassSlope::fit(beta, model_ln_rho(gamma, beta)).unwrap();
                assert!(
                    (m.gamma - gamma).abs() <= 1e-2 * (1.0 + gamma.abs()),
                    "beta {beta} gamma {gamma}: {}",
                    m.gamma
                );
                let mut last = 1.0;
                for f in [0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0] {
                    let s = m.place(f);
                    assert!((0.0..=1.0).contains(&s) && s <= last, "{s}");
                    last = s;
                    let got = model_mass_above(m.gamma, s);
                    assert!(
                        (got - f).abs() <= 1e-4,
                        "beta {beta} gamma {gamma} f {f}: {got}"
                    );
                }
            }
        }
        // An even spread, and mean weights at or past the window's ends.
        let even = MassSlope { gamma: 0.0 };
        assert_eq!(even.place(0.25), 0.75);
        let low = MassSlope::fit(3.0, -1.0).unwrap();
        assert!(low.place(0.5) < 1e-3, "{}", low.place(0.5));
        let high = MassSlope::fit(3.0, 4.0).unwrap();
        assert!(high.place(0.5) > 1.0 - 1e-3, "{}", high.place(0.5));
        for beta in [0.0, -1.0, f64::INFINITY, f64::NAN] {
            assert!(MassSlope::fit(beta, 0.5).is_none());
        }
        assert!(MassSlope::fit(1.0, f64::NAN).is_none());
    }

    #[test]
    fn merge_keeps_ids_ascending() {
        let mut ids = vec![2u32, 5, 9, 10];
        let mut vals: Vec<f32> = ids.iter().map(|&i| i as f32).collect();
        merge(
            &mut vals,
            &mut ids,
            &[(0.0, 0), (6.0, 6), (7.0, 7), (11.0, 11)],
        );
        assert_eq!(ids, [0, 2, 5, 6, 7, 9, 10, 11]);
        assert!(vals.iter().zip(&ids).all(|(&v, &i)| v == i as f32));
    }
}
