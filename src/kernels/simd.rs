//! Runtime dispatch of the passes that compute an `exp` per token to AVX2 or AVX-512 on
//! x86-64.
//!
//! The default x86-64 target only guarantees SSE2, 4 `f32` lanes. The histogram pass
//! ([`histogram::build`], and [`histogram::collect`] after it) and the row-mass pass
//! ([`mass::fast`]) spend their time in the vectorised `exp`, which runs much faster
//! when the same code is compiled for wider vectors. Measured on 151,936 logits (the
//! vectorised `f32` exp and its sum, as in [`mass::fast`]): 174 us with SSE2, 93 us with
//! AVX2, 57 us with AVX-512. The running-threshold scan of greedy and top-k
//! ([`scan::scan_portable`]: a maximum and a sum per entry, and
//! [`scan::scan_marked_portable`], the same leaving a mask's marked entries out) is
//! compute-bound at SSE2's width: greedy took 12.4 us against 8.9 us with AVX-512, where
//! reading the row takes 8.1 us. The precise row mass ([`mass::precise`], in `f64`, for
//! a top-p decision within the fast bound) takes 600 us with SSE2 and 170 us with
//! AVX-512. So this module compiles those passes again with AVX2 and with AVX-512
//! enabled and picks the widest the CPU has, once per call.
//!
//! Every version is the same Rust code: element-wise IEEE operations on independent
//! lanes, no fused multiply-add (Rust never contracts `a * b + c` on its own) and the
//! same sequential order of every sum and of the scatter, so they give bit-identical
//! counts and masses, hence identical tokens. The test below checks it.
//!
//! The one exception is the row's mass ([`row_mass`]), whose wide copies fuse the
//! multiply-adds of the `exp` ([`mass::fast_in`]; about 8% of a peaked row's top-p on
//! AVX-512), so the wide copies need the `fma` feature too. Its `Z` may differ from the
//! portable one in the last bits, within the same error bound, and no token depends on
//! those bits: top-p takes a decision from the fast `Z` only when no value within its
//! bound would change it, and otherwise decides again with the precise `Z` (computed
//! the same way everywhere). The test below checks that every copy's `Z` lies within
//! its bound. (The collecting mass and the entropy do the same.)
//!
//! The whole-row weights of [`weights_into`] fuse their multiply-adds on every level
//! that can: the wide copies, and the portable code where `f32::mul_add` is one
//! instruction ([`exp::PORTABLE_FUSED`](crate::exp::PORTABLE_FUSED)): with the fused
//! products the argument needs no two-sum
//! ([`exp::exp_shifted_fused`](crate::exp::exp_shifted_fused)), and the pass runs about
//! 30% faster than unfused (BENCHMARKS.md). Every CPU with FMA writes the same weights,
//! which the test below checks against the portable code compiled fused; an x86-64 CPU
//! without FMA writes them unfused, within the same bound. The histogram's fast masses
//! ([`build`]) fuse theirs the same way, and are checked the same way.
//!
//! One pass is written by hand for each width instead: [`block_masks`], which turns a
//! comparison of 16 entries into 16 bits. Compiled from the portable code, the bits are
//! assembled lane by lane; the comparison's mask instructions give them at once. Top-p's
//! candidate collection ([`select_buffered`](crate::select::select_buffered)) took
//! 107 us on a peaked row it had seen thousands of times and 175 us on rows it had not
//! (the branch predictor learns a row's pattern of entries above the threshold); with the
//! bits, 89 us either way. The copies compute the same bits and sums as the portable
//! code, which the test below checks.
//!
//! Among the kernels, this module sits above the bodies it compiles ([`histogram`],
//! [`mass`], [`stats`], [`scan`]), which never call it, and below its callers (the
//! engine, and [`select`](crate::select) for the scans and the bits): the dispatch adds
//! no circle between the files.
//!
//! This is the crate's only `unsafe` code: calling a `#[target_feature]` function from
//! code compiled without that feature, and the unaligned vector loads and stores of
//! `f32` arrays in [`block_masks`]' copies.

#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
use crate::adjust::{lane_marks_if, load, BLOCK};
use crate::adjust::{Overlay, LANES};
use crate::element::Logit;
use crate::flat;
use crate::histogram::{self, Frame};
use crate::mass;
use crate::scan;
use crate::stats;
use crate::TokenId;

/// The widest instruction set the CPU offers, among those the passes are compiled for
/// (each wide copy with FMA as well: a CPU without it runs the portable code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// Detects the [`Level`] (`is_x86_feature_detected!` caches the CPUID query).
#[inline]
fn level() -> Level {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::is_x86_feature_detected!("fma") {
            return Level::Portable;
        }
        if std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
        {
            return Level::Avx512;
        }
        if std::is_x86_feature_detected!("avx2") {
            return Level::Avx2;
        }
    }
    Level::Portable
}

/// The instruction set the crate's vectorised passes run with on this CPU, as
/// [`simd_level`] reports it.
///
/// Every level gives the same tokens; only the speed differs. Benchmark figures should
/// state the level they were measured at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SimdLevel {
    /// The code compiled for the target as it is (on x86-64 by default SSE2, 4 `f32`
    /// lanes): another architecture, or an x86-64 CPU without FMA.
    Portable,
    /// The copies compiled for AVX2 with FMA (8 `f32` lanes).
    Avx2,
    /// The copies compiled for AVX-512 F, BW and VL with FMA (16 `f32` lanes). The
    /// pass that collects a flat row's survivors also uses VBMI2 and POPCNT where the
    /// CPU has them (the same entries either way).
    Avx512,
}

impl std::fmt::Display for SimdLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SimdLevel::Portable => "portable",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        })
    }
}

/// The widest instruction set the CPU offers among those the crate's passes are compiled
/// for: the one every sampling call dispatches to, detected at run time.
///
/// ```
/// let level = logits::simd_level();
/// println!("sampling passes run with {level}");
/// assert!(["portable", "avx2", "avx512"].contains(&level.to_string().as_str()));
/// ```
pub fn simd_level() -> SimdLevel {
    match level() {
        Level::Portable => SimdLevel::Portable,
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => SimdLevel::Avx2,
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => SimdLevel::Avx512,
    }
}

/// Defines `$name`, which runs the always-inlined `$inner` compiled for the widest
/// [`Level`] the CPU has, and the two compiled copies it picks from. With a second path
/// `$wide`, the compiled copies run `$wide` instead (a variant for wider instruction
/// sets) and the portable code `$inner`.
macro_rules! dispatch {
    ($(#[$doc:meta])* $name:ident, $avx2:ident, $avx512:ident, $inner:path,
     fn<$T:ident>($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        dispatch!($(#[$doc])* $name, $avx2, $avx512, $inner, $inner,
                  fn<$T>($($arg: $ty),*) -> $ret);
    };
    ($(#[$doc:meta])* $name:ident, $avx2:ident, $avx512:ident, $inner:path, $wide:path,
     fn<$T:ident>($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        $(#[$doc])*
        // (The histogram pass takes its two frames' outputs as separate arguments.)
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $name<$T: Logit>($($arg: $ty),*) -> $ret {
            match level() {
                // SAFETY: `level` found the CPU supports every instruction set the
                // function is compiled with (AVX-512 F, BW and VL, and FMA).
                #[cfg(target_arch = "x86_64")]
                Level::Avx512 => unsafe { $avx512($($arg),*) },
                // SAFETY: as above, for AVX2 and FMA.
                #[cfg(target_arch = "x86_64")]
                Level::Avx2 => unsafe { $avx2($($arg),*) },
                Level::Portable => $inner($($arg),*),
            }
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        #[allow(clippy::too_many_arguments)]
        fn $avx2<$T: Logit>($($arg: $ty),*) -> $ret {
            $wide($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
        #[allow(clippy::too_many_arguments)]
        fn $avx512<$T: Logit>($($arg: $ty),*) -> $ret {
            $wide($($arg),*)
        }
    };
}

dispatch!(
    /// [`histogram::build`], on the widest vectors the CPU has.
    build, build_avx2, build_avx512,
    histogram::build::<T, { crate::exp::PORTABLE_FUSED }>, histogram::build::<T, true>,
    fn<T>(row: &[T], overlay: &Overlay, f: Frame, limit: usize, precise: bool,
          count: &mut [u32], mass: &mut [f64], second: Option<(Frame, &mut [f64])>) -> ()
);

/// What reading one block on its own costs in [`for_each_block_bits`] (a call of
/// [`block_masks`] per block), in blocks of a group's pass: about 11 ns against 3.6 ns
/// per block on an AMD EPYC (Zen 4) at 151,936 entries. A group with fewer blocks above
/// the threshold than its length over this reads them alone.
const ALONE_COST: usize = 3;

/// Calls `visit(base, bits)` for each whole [`BLOCK`](crate::adjust::BLOCK) of `row` in
/// order, `base` the block's first index and `bits` those of [`block_masks`]: its
/// entries above `threshold` that `marks` does not mark. Returns where the whole blocks
/// end, or `None` once `visit` returns false (the blocks after it unvisited).
///
/// With `maxima`, the largest entry of each whole block (as [`online_entropy_blocks`]
/// records them), a group of blocks where few lie above `threshold` (see
/// [`ALONE_COST`]) reads and visits only those: the others have no bit set.
pub(crate) fn for_each_block_bits<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    threshold: f32,
    maxima: Option<&[f32]>,
    mut visit: impl FnMut(usize, u64) -> bool,
) -> Option<usize> {
    let block = crate::adjust::BLOCK;
    let mut sum = [0.0f32; LANES];
    let mut masks = [0u64; scan::GROUP];
    let whole = row.len() / block * block;
    for from in (0..whole).step_by(scan::GROUP * block) {
        let to = whole.min(from + scan::GROUP * block);
        if let Some(maxima) = maxima {
            // A group with few blocks above the threshold: those alone, each read on its
            // own; with none, nothing.
            let group = &maxima[from / block..to / block];
            let hits = group.iter().filter(|&&m| m > threshold).count();
            if hits * ALONE_COST <= group.len() {
                for (b, _) in group.iter().enumerate().filter(|m| *m.1 > threshold) {
                    let at = from + b * block;
                    let part = &row[at..at + block];
                    let block_marks = marks.map(|m| &m[at / 32..]);
                    block_masks(part, block_marks, threshold, &mut sum, &mut masks);
                    if !visit(at, masks[0]) {
                        return None;
                    }
                }
                continue;
            }
        }
        let group_marks = marks.map(|m| &m[from / 32..]);
        block_masks(&row[from..to], group_marks, threshold, &mut sum, &mut masks);
        for (b, &bits) in masks[..(to - from) / block].iter().enumerate() {
            if !visit(from + b * block, bits) {
                return None;
            }
        }
    }
    Some(whole)
}

/// [`histogram::collect`]: the same tokens in the same order, and the same result.
///
/// From the top (`lo == 0`) an entry is near the buckets exactly when it is at least
/// the lower end of [`Frame::interval`], so the entries to key are those of
/// [`block_masks`]' bits above the value just below it: one comparison per chunk of 16
/// without a branch, then only the set bits visited (a floor stage's collection, where
/// the per-chunk test of both ends took about a quarter of top-n-sigma's step).
/// Otherwise (a window below the top, where most entries above it would be visited),
/// [`histogram::collect`] on the widest vectors the CPU has. Either gives up at the same
/// block, past `cap` tokens.
#[allow(clippy::too_many_arguments)]
pub(crate) fn collect<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    lo: usize,
    hi: usize,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
    keys: &mut Vec<u64>,
) -> bool {
    collect_in(row, overlay, f, (lo, hi), cap, out, keys, None)
}

/// [`collect`], reading from the top (`lo == 0`) only the blocks whose largest entry
/// (`maxima`, as [`for_each_block_bits`] takes them) can hold a token to collect.
#[allow(clippy::too_many_arguments)]
pub(crate) fn collect_in<T: Logit>(
    row: &[T],
    overlay: &Overlay,
    f: Frame,
    (lo, hi): (usize, usize),
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
    keys: &mut Vec<u64>,
    maxima: Option<&[f32]>,
) -> bool {
    if lo != 0 {
        return collect_window(row, overlay, f, lo, hi, cap, out, keys);
    }
    out.clear();
    let (a, _) = f.interval(lo, hi);
    let (threshold, hi32) = (a.next_down(), hi as u32);
    let marks = overlay.marked();
    let whole = for_each_block_bits(row, marks, threshold, maxima, |base, mut bits| {
        while bits != 0 {
            let i = base + bits.trailing_zeros() as usize;
            let l = row[i].to_f32();
            if histogram::key(l, f) <= hi32 {
                out.push((l, i as TokenId));
            }
            bits &= bits - 1;
        }
        out.len() <= cap
    });
    let Some(whole) = whole else {
        return false;
    };
    for (i, x) in row.iter().enumerate().skip(whole) {
        let l = x.to_f32();
        let unmarked = !marks.is_some_and(|m| crate::adjust::is_marked(m, i));
        if histogram::key(l, f) <= hi32 && unmarked {
            out.push((l, i as TokenId));
        }
    }
    histogram::finish_collect(overlay, f, (lo, hi), out, keys);
    true
}

dispatch!(
    /// [`histogram::collect`], on the widest vectors the CPU has.
    collect_window, collect_window_avx2, collect_window_avx512, histogram::collect,
    fn<T>(row: &[T], overlay: &Overlay, f: Frame, lo: usize, hi: usize, cap: usize,
          out: &mut Vec<(f32, TokenId)>, keys: &mut Vec<u64>) -> bool
);

dispatch!(
    /// [`histogram::fill`], on the widest vectors the CPU has.
    fill, fill_avx2, fill_avx512, histogram::fill,
    fn<T>(row: &[T], overlay: &Overlay, frames: (Frame, Frame), lo: usize,
          fill: histogram::Fill, none: f32, out: &mut [f32]) -> ()
);

dispatch!(
    /// [`scan::scan_portable`], the running-threshold scan of greedy and top-k, on the
    /// widest vectors the CPU has.
    scan, scan_avx2, scan_avx512, scan::scan_portable,
    fn<T>(part: &[T], threshold: f32, sum: &mut [f32; crate::adjust::LANES]) -> Option<usize>
);

dispatch!(
    /// [`scan::scan_marked_portable`], the scan under marks, on the widest vectors the
    /// CPU has.
    scan_marked, scan_marked_avx2, scan_marked_avx512, scan::scan_marked_portable,
    fn<T>(part: &[T], marks: &[u32], threshold: f32, sum: &mut [f32; crate::adjust::LANES])
        -> Option<usize>
);

/// [`scan::block_masks_portable`], the bits of the entries above a threshold, on the
/// widest vectors the CPU has. The wide copies are written with the comparison's mask
/// instructions (`vcmpps` into a mask register, `vmovmskps`): compiled from the portable
/// code, the bits are assembled lane by lane. Every copy computes the same bits and the
/// same lane sums (the test below checks it).
pub(crate) fn block_masks<T: Logit>(
    part: &[T],
    marks: Option<&[u32]>,
    threshold: f32,
    sum: &mut [f32; LANES],
    masks: &mut [u64; scan::GROUP],
) {
    match (level(), marks) {
        // SAFETY: `level` found the CPU supports AVX-512 F, BW and VL, and FMA.
        #[cfg(target_arch = "x86_64")]
        (Level::Avx512, None) => unsafe {
            block_masks_avx512::<T, false>(part, &[], threshold, sum, masks)
        },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        (Level::Avx512, Some(m)) => unsafe {
            block_masks_avx512::<T, true>(part, m, threshold, sum, masks)
        },
        // SAFETY: `level` found the CPU supports AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2, None) => unsafe {
            block_masks_avx2::<T, false>(part, &[], threshold, sum, masks)
        },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2, Some(m)) => unsafe {
            block_masks_avx2::<T, true>(part, m, threshold, sum, masks)
        },
        _ => scan::block_masks_portable(part, marks, threshold, sum, masks),
    }
}

/// [`block_masks`] with AVX-512: one comparison per chunk of 16 gives its 16 bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
fn block_masks_avx512<T: Logit, const MARKS: bool>(
    part: &[T],
    marks: &[u32],
    threshold: f32,
    sum: &mut [f32; LANES],
    masks: &mut [u64; scan::GROUP],
) {
    use std::arch::x86_64::*;
    const _: () = assert!(LANES == 16);
    let t = _mm512_set1_ps(threshold);
    // SAFETY: `sum` holds 16 `f32`, the width of one unaligned load and store.
    let mut acc = unsafe { _mm512_loadu_ps(sum.as_ptr()) };
    for (b, block) in part.chunks_exact(BLOCK).take(scan::GROUP).enumerate() {
        let mut bits = 0u64;
        for (c, chunk) in block.chunks_exact(LANES).enumerate() {
            let v = load(chunk);
            // SAFETY: `v` holds 16 `f32`.
            let x = unsafe { _mm512_loadu_ps(v.as_ptr()) };
            acc = _mm512_add_ps(acc, x);
            // Ordered: a NaN compares false, as with `>`.
            let above = u32::from(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, t));
            let unmarked = !lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES) & 0xffff;
            bits |= u64::from(above & unmarked) << (c * LANES);
        }
        masks[b] = bits;
    }
    // SAFETY: as above.
    unsafe { _mm512_storeu_ps(sum.as_mut_ptr(), acc) };
}

/// [`block_masks`] with AVX2: two comparisons per chunk of 16, 8 bits each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn block_masks_avx2<T: Logit, const MARKS: bool>(
    part: &[T],
    marks: &[u32],
    threshold: f32,
    sum: &mut [f32; LANES],
    masks: &mut [u64; scan::GROUP],
) {
    use std::arch::x86_64::*;
    const _: () = assert!(LANES == 16);
    let t = _mm256_set1_ps(threshold);
    // SAFETY: `sum` holds 16 `f32`: two unaligned loads and stores of 8.
    let (mut lo, mut hi) = unsafe {
        (
            _mm256_loadu_ps(sum.as_ptr()),
            _mm256_loadu_ps(sum.as_ptr().add(8)),
        )
    };
    for (b, block) in part.chunks_exact(BLOCK).take(scan::GROUP).enumerate() {
        let mut bits = 0u64;
        for (c, chunk) in block.chunks_exact(LANES).enumerate() {
            let v = load(chunk);
            // SAFETY: `v` holds 16 `f32`.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(v.as_ptr()),
                    _mm256_loadu_ps(v.as_ptr().add(8)),
                )
            };
            lo = _mm256_add_ps(lo, x);
            hi = _mm256_add_ps(hi, y);
            // Ordered: a NaN compares false, as with `>`.
            let above_lo = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(x, t)) as u32;
            let above_hi = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(y, t)) as u32;
            let above = above_lo | above_hi << 8;
            let unmarked = !lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES) & 0xffff;
            bits |= u64::from(above & unmarked) << (c * LANES);
        }
        masks[b] = bits;
    }
    // SAFETY: as above.
    unsafe {
        _mm256_storeu_ps(sum.as_mut_ptr(), lo);
        _mm256_storeu_ps(sum.as_mut_ptr().add(8), hi);
    }
}

/// [`flat::compress_portable`] into emptied `vals` and `ids` (the entries in
/// `(above, upto]`), on the widest vectors the CPU has. The AVX-512 copy compresses each
/// chunk of 16 entries into the front of a vector with the comparison's mask
/// (`vcompressps`, register form) and stores all 16 lanes, the next chunk's overwriting
/// the unused ones: no branch depends on the entries. Their ids come the same way, or,
/// where the CPU has AVX-512 VBMI2, from one byte compress per four chunks (`vpcompressb`
/// of the lane numbers 0-63, widened to ids): one compress of ids instead of four. Every
/// copy gives the same entries (the test in `flat` runs each).
pub(crate) fn compress<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    above: (f32, f32),
    vals: &mut Vec<f32>,
    ids: &mut Vec<TokenId>,
) {
    compress_up_to(row, marks, above, vals, ids, true);
}

/// [`compress`] on the widest copy the CPU runs, the VBMI2 one only with `vbmi2`.
fn compress_up_to<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    above: (f32, f32),
    vals: &mut Vec<f32>,
    ids: &mut Vec<TokenId>,
    vbmi2: bool,
) {
    vals.clear();
    ids.clear();
    #[cfg(target_arch = "x86_64")]
    {
        use std::is_x86_feature_detected as has;
        if level() == Level::Avx512 && has!("popcnt") {
            let vbmi2 = vbmi2 && has!("avx512vbmi2");
            match (vbmi2, marks) {
                // SAFETY: `level` found the CPU supports AVX-512 F, BW and VL, and FMA;
                // the tests above POPCNT and VBMI2.
                (true, None) => unsafe { compress_vbmi2::<T, false>(row, &[], above, vals, ids) },
                // SAFETY: as above.
                (true, Some(m)) => unsafe { compress_vbmi2::<T, true>(row, m, above, vals, ids) },
                // SAFETY: `level` found the CPU supports AVX-512 F, BW and VL, and FMA;
                // the test above POPCNT.
                (false, None) => unsafe { compress_avx512::<T, false>(row, &[], above, vals, ids) },
                // SAFETY: as above.
                (false, Some(m)) => unsafe { compress_avx512::<T, true>(row, m, above, vals, ids) },
            }
            return;
        }
        if matches!(level(), Level::Avx2 | Level::Avx512) {
            // SAFETY: `level` found the CPU supports AVX2 and FMA (which AVX-512 implies).
            unsafe { compress_avx2(row, marks, above, vals, ids) };
            return;
        }
    }
    flat::compress_portable(row, marks, above, vals, ids);
}

/// Every copy of [`compress`] this CPU can run, by name, each into its own vectors.
#[cfg(test)]
pub(crate) fn compress_copies<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    above: (f32, f32),
) -> Vec<(&'static str, Vec<f32>, Vec<TokenId>)> {
    let mut out = Vec::new();
    let mut run = |name, copy: &dyn Fn(&mut Vec<f32>, &mut Vec<TokenId>)| {
        // (Stale contents, which every copy must clear.)
        let (mut v, mut i) = (vec![7.0; 3], vec![7; 3]);
        copy(&mut v, &mut i);
        out.push((name, v, i));
    };
    run("portable", &|v, i| {
        v.clear();
        i.clear();
        flat::compress_portable(row, marks, above, v, i)
    });
    run("dispatched", &|v, i| compress(row, marks, above, v, i));
    #[cfg(target_arch = "x86_64")]
    {
        use std::is_x86_feature_detected as has;
        if has!("avx2") && has!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA, just checked.
            run("avx2", &|v, i| unsafe {
                v.clear();
                i.clear();
                compress_avx2(row, marks, above, v, i)
            });
        }
        if level() == Level::Avx512 && has!("popcnt") {
            run("avx512", &|v, i| {
                compress_up_to(row, marks, above, v, i, false)
            });
            if has!("avx512vbmi2") {
                run("avx512vbmi2", &|v, i| {
                    compress_up_to(row, marks, above, v, i, true)
                });
            }
        }
    }
    out
}

/// [`compress`] with AVX2: the portable code, compiled for it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn compress_avx2<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    above: (f32, f32),
    vals: &mut Vec<f32>,
    ids: &mut Vec<TokenId>,
) {
    flat::compress_portable(row, marks, above, vals, ids);
}

/// [`compress`] with AVX-512 (`vals` and `ids` empty on entry), and POPCNT for the
/// number of entries each chunk keeps.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,popcnt")]
fn compress_avx512<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    bounds: (f32, f32),
    vals: &mut Vec<f32>,
    ids: &mut Vec<TokenId>,
) {
    let whole = row.len() / LANES * LANES;
    // (Room for every entry and one spare vector: no allocation once the scratch holds
    // it.)
    vals.reserve(whole + LANES);
    ids.reserve(whole + LANES);
    // SAFETY: `vals` and `ids` are empty with room for `whole + 16` entries; the chunks
    // keep at most `whole` of them.
    let n = unsafe {
        compress_chunks::<T, MARKS>(
            row,
            marks,
            0..whole / LANES,
            bounds,
            (vals.as_mut_ptr(), ids.as_mut_ptr()),
            0,
        )
    };
    // SAFETY: the first `n` slots of both were written (`n` is within capacity).
    unsafe {
        vals.set_len(n);
        ids.set_len(n);
    }
    flat::compress_tail::<T, MARKS>(row, marks, whole, bounds, vals, ids);
}

/// The entries in `(above, upto]` of the chunks `chunks` of 16 (by number) of `row`,
/// unmarked, written from slot `n` of `pv` and `pi` in id order, each chunk's store
/// covering 16 slots; returns the new `n`.
///
/// # Safety
/// The CPU supports AVX-512 F, BW and VL, FMA and POPCNT; `pv` and `pi` are valid for
/// writes of `n + 16 * chunks.len()` slots; `marks` covers the chunks when `MARKS`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,popcnt")]
#[inline]
unsafe fn compress_chunks<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    chunks: std::ops::Range<usize>,
    (above, upto): (f32, f32),
    (pv, pi): (*mut f32, *mut TokenId),
    mut n: usize,
) -> usize {
    use std::arch::x86_64::*;
    const _: () = assert!(LANES == 16);
    let (t, u) = (_mm512_set1_ps(above), _mm512_set1_ps(upto));
    let first = chunks.start as i32 * LANES as i32;
    let mut idx = _mm512_add_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(first),
    );
    let step = _mm512_set1_epi32(LANES as i32);
    let span = &row[chunks.start * LANES..chunks.end * LANES];
    for (c, chunk) in (chunks.start..).zip(span.chunks_exact(LANES)) {
        let v = load(chunk);
        // SAFETY: `v` holds 16 `f32`.
        let x = unsafe { _mm512_loadu_ps(v.as_ptr()) };
        let keep = keep_mask::<MARKS>(x, t, u, marks, c);
        // SAFETY: `n` grows by at most 16 per chunk, so the 16 slots from `n` lie within
        // the `n + 16 * chunks.len()` the caller made room for.
        unsafe {
            _mm512_storeu_ps(pv.add(n), _mm512_maskz_compress_ps(keep, x));
            _mm512_storeu_si512(pi.add(n).cast(), _mm512_maskz_compress_epi32(keep, idx));
        }
        n += keep.count_ones() as usize;
        idx = _mm512_add_epi32(idx, step);
    }
    n
}

/// The lanes of chunk `c` (its values `x`) that [`compress`] keeps: in `(t, u]` and,
/// with `MARKS`, unmarked.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
#[inline]
fn keep_mask<const MARKS: bool>(
    x: std::arch::x86_64::__m512,
    t: std::arch::x86_64::__m512,
    u: std::arch::x86_64::__m512,
    marks: &[u32],
    c: usize,
) -> u16 {
    use std::arch::x86_64::*;
    // Ordered: a NaN compares false, as with `>`.
    _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, t)
        & _mm512_cmp_ps_mask::<_CMP_LE_OQ>(x, u)
        & !(lane_marks_if::<MARKS>(marks, c * LANES) as u16)
}

/// The 16 bytes of `q`, each widened to 32 bits and added to `base`'s lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
#[inline]
fn widen(
    q: std::arch::x86_64::__m128i,
    base: std::arch::x86_64::__m512i,
) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    _mm512_add_epi32(_mm512_cvtepu8_epi32(q), base)
}

/// [`compress`] with AVX-512 and VBMI2 (`vals` and `ids` empty on entry): per block of
/// four chunks, each chunk's values as in [`compress_avx512`], and the block's ids from
/// one `vpcompressb` of the lane numbers 0-63 under the four masks, widened to 32 bits
/// and offset by the block's first id. The first 16 ids are always stored; the other 48
/// only when the block keeps more than 16 entries: rare on the rows min-p collects from,
/// the rule on a row drawn whole, and a predictable branch on both.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi2,fma,popcnt")]
fn compress_vbmi2<T: Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    bounds: (f32, f32),
    vals: &mut Vec<f32>,
    ids: &mut Vec<TokenId>,
) {
    use std::arch::x86_64::*;
    const _: () = assert!(BLOCK == 4 * LANES);
    let whole = row.len() / LANES * LANES;
    let blocks = row.len() / BLOCK;
    // (Room for every entry and one spare vector: a block's stores end at most 64
    // slots after its first, which is at most its first id.)
    vals.reserve(whole + LANES);
    ids.reserve(whole + LANES);
    let (pv, pi) = (vals.as_mut_ptr(), ids.as_mut_ptr());
    let (t, u) = (_mm512_set1_ps(bounds.0), _mm512_set1_ps(bounds.1));
    let lanes = _mm512_set_epi8(
        63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41,
        40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
        17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
    );
    let mut n = 0usize;
    for (b, block) in row[..blocks * BLOCK].chunks_exact(BLOCK).enumerate() {
        let first = n;
        let mut all = 0u64;
        for (q, chunk) in block.chunks_exact(LANES).enumerate() {
            let c = 4 * b + q;
            let v = load(chunk);
            // SAFETY: `v` holds 16 `f32`.
            let x = unsafe { _mm512_loadu_ps(v.as_ptr()) };
            let keep = keep_mask::<MARKS>(x, t, u, marks, c);
            // SAFETY: `n <= c * 16`, so the 16 slots from `n` lie within the capacity
            // of `whole + 16` reserved above.
            unsafe { _mm512_storeu_ps(pv.add(n), _mm512_maskz_compress_ps(keep, x)) };
            n += keep.count_ones() as usize;
            all |= u64::from(keep) << (q * LANES);
        }
        let kept = _mm512_maskz_compress_epi8(all, lanes);
        let base = _mm512_set1_epi32((b * BLOCK) as i32);
        let q0 = widen(_mm512_castsi512_si128(kept), base);
        // SAFETY: `first <= b * 64`, so the 64 slots from `first` lie within the first
        // `(b + 1) * 64 <= whole` slots of the capacity.
        unsafe { _mm512_storeu_si512(pi.add(first).cast(), q0) };
        if n - first > LANES {
            let q1 = widen(_mm512_extracti32x4_epi32::<1>(kept), base);
            let q2 = widen(_mm512_extracti32x4_epi32::<2>(kept), base);
            let q3 = widen(_mm512_extracti32x4_epi32::<3>(kept), base);
            // SAFETY: as above.
            unsafe {
                _mm512_storeu_si512(pi.add(first + 16).cast(), q1);
                _mm512_storeu_si512(pi.add(first + 32).cast(), q2);
                _mm512_storeu_si512(pi.add(first + 48).cast(), q3);
            }
        }
    }
    // SAFETY: `n <= blocks * 64`, and the chunks after the blocks write at most 16
    // slots each from it: within `whole + 16`.
    let n = unsafe {
        compress_chunks::<T, MARKS>(row, marks, blocks * 4..whole / LANES, bounds, (pv, pi), n)
    };
    // SAFETY: the first `n` slots of both were written (`n` is within capacity).
    unsafe {
        vals.set_len(n);
        ids.set_len(n);
    }
    flat::compress_tail::<T, MARKS>(row, marks, whole, bounds, vals, ids);
}

dispatch!(
    /// [`flat::max_sum`], on the widest vectors the CPU has.
    max_sum, max_sum_avx2, max_sum_avx512, flat::max_sum,
    fn<T>(part: &[T], sum: &mut [f32; LANES]) -> f32
);

dispatch!(
    /// [`flat::weigh`], on the widest vectors the CPU has.
    weigh, weigh_avx2, weigh_avx512, flat::weigh,
    fn<T>(vals: &[T], f: Frame, out: &mut [f32]) -> flat::Weighed
);

dispatch!(
    /// [`flat::mass_above`], on the widest vectors the CPU has.
    mass_above, mass_above_avx2, mass_above_avx512, flat::mass_above,
    fn<T>(vals: &[T], w: &[f32], xs: [f32; 2]) -> [(f64, usize); 2]
);

dispatch!(
    /// [`mass::fast`], on the widest vectors the CPU has.
    row_mass, row_mass_avx2, row_mass_avx512, mass::fast, mass::fast_in::<T, true>,
    fn<T>(row: &[T], marks: Option<&[u32]>, max: f32, t: f32, ceiling: f32) -> (f64, f64)
);

dispatch!(
    /// [`mass::fast_split_in`], on the widest vectors the CPU has (fused multiply-adds in
    /// the wide copies, as [`row_mass`]).
    row_mass_split, row_mass_split_avx2, row_mass_split_avx512,
    mass::fast_split_in::<T, false>, mass::fast_split_in::<T, true>,
    fn<T>(row: &[T], marks: Option<&[u32]>, max: f32, t: f32, window: (f32, f32), floor: f32)
        -> mass::Split
);

dispatch!(
    /// [`mass::precise`], on the widest vectors the CPU has.
    row_mass_precise, row_mass_precise_avx2, row_mass_precise_avx512, mass::precise,
    fn<T>(row: &[T], marks: Option<&[u32]>, max: f32, t: f32, ceiling: f32) -> f64
);

dispatch!(
    /// [`mass::precise_split`], on the widest vectors the CPU has.
    row_mass_precise_split, row_mass_precise_split_avx2, row_mass_precise_split_avx512,
    mass::precise_split,
    fn<T>(row: &[T], marks: Option<&[u32]>, max: f32, t: f32, ceiling: f32) -> (f64, f64)
);

dispatch!(
    /// [`mass::weights_into`], on the widest vectors the CPU has (fused multiply-adds in
    /// the wide copies, as on every CPU that has them: see [`mass::weights_into_in`]).
    weights_into, weights_into_avx2, weights_into_avx512, mass::weights_into,
    mass::weights_into_in::<T, true, true>,
    fn<T>(row: &[T], marks: Option<&[u32]>, at: f32, t: f32, out: &mut [f32],
          check: &mut [f32; LANES]) -> (f64, f32)
);

dispatch!(
    /// [`mass::span_max_of`], on the widest vectors the CPU has.
    span_max, span_max_avx2, span_max_avx512, mass::span_max_of,
    fn<T>(span: &[T], marks: Option<&[u32]>, check: &mut [f32; LANES]) -> f32
);

/// The maximum of the entries of `row` that `marks` leaves unmarked (`-inf` if none),
/// checking every entry, marked or not, for NaN and `+inf` in the same pass
/// ([`span_max`] over the whole row).
///
/// The check costs one addition per entry: a lane sum becomes NaN or `+inf` as soon as
/// the lane sees a NaN or a `+inf` (`-inf` alone only makes it `-inf`, and `-inf` plus
/// `+inf` is NaN), and it stays so. A finite sum that overflows to `+inf` is a false
/// alarm that the exact scan then clears.
///
/// # Errors
/// [`Error::NanLogit`](crate::Error::NanLogit) or
/// [`Error::InfiniteLogit`](crate::Error::InfiniteLogit) for the first NaN or `+inf`.
pub(crate) fn max_checked<T: Logit>(row: &[T], marks: Option<&[u32]>) -> Result<f32, crate::Error> {
    let mut check = [0.0f32; LANES];
    let max = span_max(row, marks, &mut check);
    if check.iter().any(|&c| crate::adjust::not_finite_above(c)) {
        crate::adjust::first_non_finite_of(row)?;
    }
    Ok(max)
}

dispatch!(
    /// [`mass::mass_collect`], on the widest vectors the CPU has (fused multiply-adds in
    /// the wide copies, as [`row_mass`]).
    mass_collect, mass_collect_avx2, mass_collect_avx512, mass::mass_collect,
    mass::mass_collect_in::<T, true>,
    fn<T>(row: &[T], marks: Option<&[u32]>, max: f32, above: f32, cap: usize, first: usize,
          out: &mut Vec<(f32, TokenId)>) -> (f64, f64)
);

dispatch!(
    /// [`mass::logprobs_into`], on the widest vectors the CPU has.
    logprobs_into, logprobs_into_avx2, logprobs_into_avx512, mass::logprobs_into,
    fn<T>(row: &[T], marks: Option<&[u32]>, max: f32, t: f32, ln_z: f64, out: &mut [f32]) -> ()
);

dispatch!(
    /// [`mass::weights_into_in`] without the writes, on the widest vectors the CPU has
    /// (fused as [`weights_into`]).
    weights_sum, weights_sum_avx2, weights_sum_avx512,
    mass::weights_into_in::<T, { crate::exp::PORTABLE_FUSED }, false>,
    mass::weights_into_in::<T, true, false>,
    fn<T>(row: &[T], marks: Option<&[u32]>, at: f32, t: f32, out: &mut [f32],
          check: &mut [f32; LANES]) -> (f64, f32)
);

/// [`mass::online_weights_into`] with each span on the widest vectors the CPU has (the
/// weights fused on every level that can fuse: see [`weights_into`]). Without `WRITE`,
/// the same pass with nothing stored ([`weights_sum`]): the same maximum, sum, bound and
/// `used`, bit for bit, with `out` written only where a span has no unmarked finite
/// entry (zeroed); for the logprobs, which need only `Z`.
pub(crate) fn online_weights_into<T: Logit, const WRITE: bool>(
    row: &[T],
    marks: Option<&[u32]>,
    t: f32,
    out: &mut [f32],
    used: &mut [f32; mass::SPANS],
) -> mass::Online {
    let k = mass::SpanKernels {
        max: span_max::<T>,
        work: if WRITE {
            weights_into::<T>
        } else {
            weights_sum::<T>
        },
    };
    mass::online_weights_into(row, marks, t, out, used, k)
}

/// [`mass::online_collect`] with each span on the widest vectors the CPU has.
pub(crate) fn online_collect<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    offset: f64,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
) -> (mass::Online, bool) {
    let k = mass::SpanKernels {
        max: span_max::<T>,
        work: mass_collect::<T>,
    };
    mass::online_collect(row, marks, offset, cap, out, k)
}

/// [`online_collect`], each span's maximum read by [`span_max_blocks`], which writes the
/// largest entry of each whole block of `row` (marked or not) into `maxima` (at least
/// `row.len() / BLOCK` entries): the same result.
pub(crate) fn online_collect_blocks<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    offset: f64,
    cap: usize,
    out: &mut Vec<(f32, TokenId)>,
    maxima: &mut [f32],
) -> (mass::Online, bool) {
    // (The spans come in order, each a whole number of blocks but the last.)
    let mut at = 0;
    let max = |span: &[T], mk: Option<&[u32]>, check: &mut [f32; LANES]| {
        let top = span_max_blocks(span, mk, check, &mut maxima[at..]);
        at += span.len() / crate::adjust::BLOCK;
        top
    };
    let k = mass::SpanKernels {
        max,
        work: mass_collect::<T>,
    };
    mass::online_collect(row, marks, offset, cap, out, k)
}

/// [`stats::online_entropy`] with each span on the widest vectors the CPU has (the
/// engine takes the blocks' maxima with it, [`online_entropy_blocks`]; the tests compare
/// the two).
#[cfg(test)]
pub(crate) fn online_entropy<T: Logit>(row: &[T], marks: Option<&[u32]>) -> stats::OnlineEntropy {
    stats::online_entropy(row, marks, span_max::<T>, row_entropy::<T>)
}

/// [`stats::online_entropy_blocks`] with each span on the widest vectors the CPU has,
/// writing each whole block's largest entry into `maxima`.
pub(crate) fn online_entropy_blocks<T: Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    maxima: &mut [f32],
) -> stats::OnlineEntropy {
    let k: stats::SpanMaxBlocks<T> = span_max_blocks::<T>;
    stats::online_entropy_blocks(
        row,
        marks,
        span_max::<T>,
        row_entropy::<T>,
        Some((k, maxima)),
    )
}

/// [`mass::span_max_blocks_of`], on the widest vectors the CPU has. The AVX-512 copy is
/// written with its reduction instructions (compiled from the portable code, each
/// block's reduction across lanes was split into 4-lane pieces that took three times a
/// plain maximum's read); every copy computes the same maximum, check sums and block
/// maxima (the tests check it).
pub(crate) fn span_max_blocks<T: Logit>(
    span: &[T],
    marks: Option<&[u32]>,
    check: &mut [f32; LANES],
    maxima: &mut [f32],
) -> f32 {
    match (level(), marks) {
        // SAFETY: `level` found the CPU supports AVX-512 F, BW and VL, and FMA.
        #[cfg(target_arch = "x86_64")]
        (Level::Avx512, None) => unsafe {
            span_max_blocks_avx512::<T, false>(span, &[], check, maxima)
        },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        (Level::Avx512, Some(m)) => unsafe {
            span_max_blocks_avx512::<T, true>(span, m, check, maxima)
        },
        // SAFETY: `level` found the CPU supports AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2, _) => unsafe { span_max_blocks_avx2(span, marks, check, maxima) },
        _ => mass::span_max_blocks_of(span, marks, check, maxima),
    }
}

/// [`mass::span_max_blocks_of`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn span_max_blocks_avx2<T: Logit>(
    span: &[T],
    marks: Option<&[u32]>,
    check: &mut [f32; LANES],
    maxima: &mut [f32],
) -> f32 {
    mass::span_max_blocks_of(span, marks, check, maxima)
}

/// [`mass::span_max_blocks`] with AVX-512: per chunk of 16, its entries with NaN (and
/// for the unmarked maximum, the marked ones) set to `-inf`; per block, its four chunks
/// added in a tree and then to the check sums (as the portable code adds them), two
/// trees of maxima over its four chunks (the maximum of its entries, and of its
/// unmarked ones, which joins the span's), and one reduction across the lanes. `max(a, b)` is `a` only when `a > b`: in each lane, the tree and the join
/// keep the first of equal values, as the portable code's running `>` does.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
fn span_max_blocks_avx512<T: Logit, const MARKS: bool>(
    span: &[T],
    marks: &[u32],
    check: &mut [f32; LANES],
    maxima: &mut [f32],
) -> f32 {
    use std::arch::x86_64::*;
    const _: () = assert!(LANES == 16 && BLOCK == 4 * LANES);
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut top = ninf;
    // SAFETY: `check` holds 16 `f32`, the width of one unaligned load and store.
    let mut acc = unsafe { _mm512_loadu_ps(check.as_ptr()) };
    let blocks = span.chunks_exact(BLOCK);
    let rem = blocks.remainder();
    for ((b, block), block_max) in blocks.enumerate().zip(maxima.iter_mut()) {
        let mut all = [ninf; 4];
        let mut unmarked = [ninf; 4];
        let mut xs = [ninf; 4];
        for (c, chunk) in block.chunks_exact(LANES).enumerate() {
            let v = load(chunk);
            // SAFETY: `v` holds 16 `f32`.
            let x = unsafe { _mm512_loadu_ps(v.as_ptr()) };
            xs[c] = x;
            let number = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(x, x);
            all[c] = _mm512_mask_mov_ps(ninf, number, x);
            let free = !lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES) as u16;
            unmarked[c] = if MARKS {
                _mm512_mask_mov_ps(ninf, number & free, x)
            } else {
                all[c]
            };
        }
        let sums = _mm512_add_ps(_mm512_add_ps(xs[0], xs[1]), _mm512_add_ps(xs[2], xs[3]));
        acc = _mm512_add_ps(acc, sums);
        let tree =
            |m: [__m512; 4]| _mm512_max_ps(_mm512_max_ps(m[3], m[2]), _mm512_max_ps(m[1], m[0]));
        top = _mm512_max_ps(tree(unmarked), top);
        *block_max = _mm512_reduce_max_ps(tree(all));
    }
    // SAFETY: as above, for `check`; `lanes` holds 16 `f32`.
    let mut lanes = [0.0f32; LANES];
    unsafe {
        _mm512_storeu_ps(check.as_mut_ptr(), acc);
        _mm512_storeu_ps(lanes.as_mut_ptr(), top);
    }
    mass::finish_span_max::<T, MARKS>(rem, span.len() - rem.len(), marks, check, lanes)
}

dispatch!(
    /// [`stats::entropy`], on the widest vectors the CPU has (fused multiply-adds in the
    /// wide copies, within the same bound).
    row_entropy, row_entropy_avx2, row_entropy_avx512, stats::entropy, stats::entropy_in::<T, true>,
    fn<T>(row: &[T], marks: Option<&[u32]>, max: f32) -> stats::Entropy
);

dispatch!(
    /// [`stats::moments`], on the widest vectors the CPU has.
    row_moments, row_moments_avx2, row_moments_avx512, stats::moments,
    fn<T>(row: &[T], marks: Option<&[u32]>, r: f32) -> stats::Moments
);

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::histogram::SLOTS;

    /// The one-pass loops run on each level's copies of their span kernels: the
    /// weights, maximum, mass and bound bit for bit those of the portable code with
    /// its multiply-adds fused (as on every CPU with FMA; the unfused portable weights
    /// are checked against their bound in `mass`), and with the collecting mass and
    /// the entropy (which fuse them) the same maximum and entries, each mass within its
    /// own bound of the precise one.
    #[test]
    fn one_pass_kernels_agree_on_every_level() {
        let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        let avx512 = level() == Level::Avx512;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let rising: Vec<f32> = (0..151_936).map(|i| -80.0 + 1e-3 * i as f32).collect();
        let rows = [
            (
                crate::test_rows::uniform_row(&mut x, 151_936, 2.0, 97, 5),
                1.0f32,
            ),
            (
                crate::test_rows::uniform_row(&mut x, 4_097, 0.3, 97, 5),
                0.6,
            ),
            (rising.clone(), 1.0),
            (rising, 0.7),
        ];
        type Max = fn(&[f32], Option<&[u32]>, &mut [f32; LANES]) -> f32;
        type Weights =
            fn(&[f32], Option<&[u32]>, f32, f32, &mut [f32], &mut [f32; LANES]) -> (f64, f32);
        type Collect = fn(
            &[f32],
            Option<&[u32]>,
            f32,
            f32,
            usize,
            usize,
            &mut Vec<(f32, TokenId)>,
        ) -> (f64, f64);
        type Sums = fn(&[f32], Option<&[u32]>, f32) -> stats::Entropy;
        let portable: (Max, Weights, Weights, Collect, Sums) = (
            mass::span_max_of,
            mass::weights_into_in::<f32, true, true>,
            mass::weights_into_in::<f32, true, false>,
            mass::mass_collect,
            stats::entropy,
        );
        let mut levels = vec![portable];
        // SAFETY (every closure below): each copy is pushed only when the CPU supports it.
        if avx2 {
            levels.push((
                |s, m, c| unsafe { span_max_avx2(s, m, c) },
                |s, m, x, t, o, c| unsafe { weights_into_avx2(s, m, x, t, o, c) },
                |s, m, x, t, o, c| unsafe { weights_sum_avx2(s, m, x, t, o, c) },
                |s, m, x, a, c, f, o| unsafe { mass_collect_avx2(s, m, x, a, c, f, o) },
                |s, m, x| unsafe { row_entropy_avx2(s, m, x) },
            ));
        }
        if avx512 {
            levels.push((
                |s, m, c| unsafe { span_max_avx512(s, m, c) },
                |s, m, x, t, o, c| unsafe { weights_into_avx512(s, m, x, t, o, c) },
                |s, m, x, t, o, c| unsafe { weights_sum_avx512(s, m, x, t, o, c) },
                |s, m, x, a, c, f, o| unsafe { mass_collect_avx512(s, m, x, a, c, f, o) },
                |s, m, x| unsafe { row_entropy_avx512(s, m, x) },
            ));
        }
        for (row, t) in &rows {
            let (row, t, n) = (&row[..], *t, row.len());
            let marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| (w as u32).wrapping_mul(0x0101_0101))
                .collect();
            for marks in [None, Some(&marks[..])] {
                let mut first = None;
                for &(max, work, sum, collect, sums) in &levels {
                    let (mut o, mut u) = (vec![0.0f32; n], [0.0f32; mass::SPANS]);
                    let k = mass::SpanKernels { max, work };
                    let a = mass::online_weights_into(row, marks, t, &mut o, &mut u, k);
                    // The pass without the writes: the same maximum, sum, bound and
                    // references, and nothing written over a finite span.
                    let (mut o2, mut u2) = (vec![7.0f32; n], [0.0f32; mass::SPANS]);
                    let k = mass::SpanKernels { max, work: sum };
                    let m = mass::online_weights_into(row, marks, t, &mut o2, &mut u2, k);
                    let same = (m.max, m.z.to_bits(), m.err.to_bits(), m.bad, u2);
                    assert_eq!(same, (a.max, a.z.to_bits(), a.err.to_bits(), a.bad, u));
                    assert!(o2.iter().all(|&w| w == 7.0));
                    let mut c = Vec::new();
                    let k = mass::SpanKernels { max, work: collect };
                    let (b, all) = mass::online_collect(row, marks, -8.1, 4096, &mut c, k);
                    let exact = mass::precise(row, marks, a.max, 1.0, f32::INFINITY);
                    assert!((b.z - exact).abs() <= b.err);
                    let e = stats::online_entropy(row, marks, max, sums);
                    let bits = |o: &[f32]| o.iter().map(|w| w.to_bits()).collect::<Vec<_>>();
                    let here = (bits(&o), bits(&u), a.max, a.z.to_bits(), a.err.to_bits());
                    let f = first.get_or_insert((here.clone(), b, c.clone(), all, e));
                    assert_eq!(f.0, here);
                    assert_eq!((b.max, &c, all), (f.1.max, &f.2, f.3));
                    assert_eq!((e.max, e.above_neg_inf), (f.4.max, f.4.above_neg_inf));
                    let (ez, es) = (e.e.z_err + f.4.e.z_err, e.e.s_err + f.4.e.s_err);
                    assert!((e.e.z - f.4.e.z).abs() <= ez && (e.e.s - f.4.e.s).abs() <= es);
                }
            }
        }
    }

    /// Every copy of the span maximum with its blocks' maxima gives the portable code's
    /// maximum and check sums bit for bit, and its block maxima (as values), on rows with
    /// a partial last block, `-inf` and NaN entries, with and without marks.
    #[test]
    fn the_block_maxima_agree_on_every_level() {
        type Blocks = fn(&[f32], Option<&[u32]>, &mut [f32; LANES], &mut [f32]) -> f32;
        let mut levels: Vec<Blocks> = vec![mass::span_max_blocks_of::<f32>];
        // SAFETY (every closure below): each copy is pushed only when the CPU supports it.
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            levels.push(|s, m, c, b| unsafe { span_max_blocks_avx2(s, m, c, b) });
        }
        if level() == Level::Avx512 {
            levels.push(|s, m, c, b| match m {
                Some(m) => unsafe { span_max_blocks_avx512::<f32, true>(s, m, c, b) },
                None => unsafe { span_max_blocks_avx512::<f32, false>(s, &[], c, b) },
            });
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in [4_096 + 5 * LANES + 3, 64, 100] {
            let mut row = crate::test_rows::uniform_row(&mut x, n, 3.0, 97, 5);
            row[n / 3] = f32::NEG_INFINITY;
            row[n / 2] = f32::NAN;
            let marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| (w as u32).wrapping_mul(0x9e37_79b9) & 0x0f0f_0f0f)
                .collect();
            for marks in [None, Some(&marks[..])] {
                let mut c0 = [0.0f32; LANES];
                let mut b0 = vec![0.0f32; n / BLOCK];
                let m0 = mass::span_max_blocks_of(&row, marks, &mut c0, &mut b0);
                let bits = |c: &[f32; LANES]| c.map(f32::to_bits);
                for (i, k) in levels.iter().enumerate() {
                    let (mut check, mut maxima) = ([0.0f32; LANES], vec![0.0f32; n / BLOCK]);
                    let m = k(&row, marks, &mut check, &mut maxima);
                    assert_eq!(
                        (m.to_bits(), bits(&check)),
                        (m0.to_bits(), bits(&c0)),
                        "level {i}"
                    );
                    assert_eq!(maxima, b0, "level {i}");
                }
            }
        }
    }

    /// The collecting mass pass with its blocks' maxima gives the plain pass's result bit
    /// for bit, the same collection, and the largest entry of each whole block (marked
    /// or not) at the block's place, on rows of one span and of many, with and without
    /// marks.
    #[test]
    fn the_collection_records_each_blocks_maximum_in_its_place() {
        let mut x = 0x51ed_2701_9e37_79b9u64;
        for n in [100usize, 4_099, 151_936] {
            let mut row = crate::test_rows::uniform_row(&mut x, n, 6.0, 101, 5);
            row[n / 3] = f32::NEG_INFINITY;
            for i in (0..n).step_by(997) {
                row[i] = 9.0 + (i % 7) as f32;
            }
            let marks: Vec<u32> = (0..n.div_ceil(32))
                .map(|w| (w as u32).wrapping_mul(0x9e37_79b9) & 0x0f0f_0f0f)
                .collect();
            let want: Vec<f32> = row
                .chunks_exact(BLOCK)
                .map(|b| b.iter().copied().fold(f32::NEG_INFINITY, f32::max))
                .collect();
            for marks in [None, Some(&marks[..])] {
                let (mut plain, mut with) = (Vec::new(), Vec::new());
                let (a, all_a) = online_collect(&row, marks, -3.0, 4096, &mut plain);
                let mut maxima = vec![f32::NAN; n / BLOCK];
                let (b, all_b) =
                    online_collect_blocks(&row, marks, -3.0, 4096, &mut with, &mut maxima);
                let bits = |o: &mass::Online| (o.max.to_bits(), o.z.to_bits(), o.err.to_bits());
                assert_eq!((bits(&a), a.bad, all_a), (bits(&b), b.bad, all_b), "{n}");
                assert_eq!(plain, with, "{n}");
                assert_eq!(maxima, want, "{n}");
            }
        }
    }

    /// Every copy of the logprob pass writes the plain `f64` formula, rounded once, bit
    /// for bit, and `-inf` for the marked and `-inf` entries, on `f32`, `f16` and `bf16`.
    #[test]
    fn logprobs_are_the_plain_formula_on_every_level() {
        type Lp<T> = fn(&[T], Option<&[u32]>, f32, f32, f64, &mut [f32]);
        fn check<T: Logit>(row: &[T], copies: &[Lp<T>]) {
            let n = row.len();
            let mut marks = vec![0u32; n.div_ceil(32)];
            for (w, m) in marks.iter_mut().enumerate() {
                *m = (w as u32).wrapping_mul(0x9e37_79b9) & 0x1111_1111;
            }
            let v: Vec<f32> = row.iter().map(|x| x.to_f32()).collect();
            let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for (t, ln_z) in [(1.0f32, 2.5f64), (0.7, 11.25), (1.9, 0.0)] {
                for marks in [None, Some(&marks[..])] {
                    let want: Vec<u32> = (0..n)
                        .map(|i| {
                            let inv_t = 1.0 / f64::from(t);
                            let c = f64::from(max) * inv_t + ln_z;
                            let x = (f64::from(v[i]) * inv_t - c) as f32;
                            let marked = marks.is_some_and(|m| crate::adjust::is_marked(m, i));
                            if marked { f32::NEG_INFINITY } else { x }.to_bits()
                        })
                        .collect();
                    for copy in copies {
                        let mut out = vec![f32::NAN; n];
                        copy(row, marks, max, t, ln_z, &mut out);
                        let got: Vec<u32> = out.iter().map(|x| x.to_bits()).collect();
                        assert_eq!(got, want);
                    }
                }
            }
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in [1usize, 15, 16, 17, 100, 4_099] {
            let mut row = crate::test_rows::uniform_row(&mut x, n, 9.0, 97, 5);
            row[n / 2] = f32::NEG_INFINITY;
            let halves: Vec<half::f16> = row.iter().map(|&l| half::f16::from_f32(l)).collect();
            let brains: Vec<half::bf16> = row.iter().map(|&l| half::bf16::from_f32(l)).collect();
            check::<f32>(&row, &copies::<f32>());
            check::<half::f16>(&halves, &copies::<half::f16>());
            check::<half::bf16>(&brains, &copies::<half::bf16>());
        }
        fn copies<T: Logit>() -> Vec<Lp<T>> {
            let mut c: Vec<Lp<T>> = vec![mass::logprobs_into::<T>, logprobs_into::<T>];
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                // SAFETY: the CPU has AVX2 and FMA.
                c.push(|r, m, x, t, l, o| unsafe { logprobs_into_avx2(r, m, x, t, l, o) });
            }
            if level() == Level::Avx512 {
                // SAFETY: the CPU has what the AVX-512 copies need.
                c.push(|r, m, x, t, l, o| unsafe { logprobs_into_avx512(r, m, x, t, l, o) });
            }
            c
        }
    }

    /// The collection from the top through the block bits gives what the portable
    /// collection gives: the same tokens in the same order, and the same give-up, with
    /// and without marks and patches, for each dtype.
    #[test]
    fn collection_from_the_top_is_the_portable_collection() {
        use half::f16;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (n, scale) in [
            (151_936usize, 2.0f32),
            (4_097, 0.3),
            (1_000, 8.0),
            (33, 40.0),
        ] {
            let mut row = crate::test_rows::uniform_row(&mut x, n, scale, 97, 5);
            // Ties, a run at the top and `-inf`s.
            for i in (0..n).step_by(7) {
                row[i] = row[i / 2];
            }
            row[n / 3] = f32::NEG_INFINITY;
            row[n - 1] = f32::NEG_INFINITY;
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut allowed = vec![0u32; n.div_ceil(32)];
            allowed.iter_mut().for_each(|w| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                *w = ((x >> 32) as u32) | ((x >> 9) as u32);
            });
            let bias = [(0, 3.0), (5, -2.0), (n / 2, 0.5), (n - 2, 9.0)];
            let params = bias
                .into_iter()
                .fold(crate::SamplingParams::builder(), |b, (id, v)| {
                    b.logit_bias(id as TokenId, v)
                })
                .build()
                .unwrap();
            let mut patched = Overlay::new(n);
            patched.build(&row, &params, &[], &mut vec![0u32; n]);
            let mut both = Overlay::new(n);
            both.build(&row, &params, &[], &mut vec![0u32; n]);
            both.ban_marks(&allowed);
            let mut marked = Overlay::new(n);
            marked.ban_marks(&allowed);
            let halves: Vec<f16> = row.iter().map(|&l| f16::from_f32(l)).collect();
            let mut k = Vec::new();
            for ov in [Overlay::new(n), marked, patched, both] {
                let top = ov.patch.iter().fold(max, |m, p| m.max(p.1));
                for t in [1.0f32, 0.6] {
                    let f = Frame::new(top, t);
                    for hi in [0, 3, 64, 700, histogram::LAST] {
                        for cap in [0, 40, 4096, usize::MAX] {
                            let (mut a, mut b) = (vec![(9.0, 9)], Vec::new());
                            let ra = collect(&row, &ov, f, 0, hi, cap, &mut a, &mut k);
                            let rb = histogram::collect(&row, &ov, f, 0, hi, cap, &mut b, &mut k);
                            assert_eq!(ra, rb, "n {n}, hi {hi}, cap {cap}");
                            if ra {
                                assert_eq!(a, b, "n {n}, hi {hi}, cap {cap}");
                            }
                            let ra = collect(&halves, &ov, f, 0, hi, cap, &mut a, &mut k);
                            let rb =
                                histogram::collect(&halves, &ov, f, 0, hi, cap, &mut b, &mut k);
                            assert_eq!(ra, rb, "f16: n {n}, hi {hi}, cap {cap}");
                            if ra {
                                assert_eq!(a, b, "f16: n {n}, hi {hi}, cap {cap}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Every compiled copy of the passes that this CPU can run gives bit-identical
    /// results to the portable one.
    #[test]
    fn dispatched_and_portable_paths_are_bit_identical() {
        let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        let avx512 = level() == Level::Avx512;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for (n, scale, t) in [
            (151_936usize, 2.0f32, 1.0f32),
            (4_097, 0.3, 0.6),
            (33, 40.0, 1.7),
        ] {
            let row = crate::test_rows::uniform_row(&mut x, n, scale, 97, 5);
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let f = Frame::new(max, t);
            // Without marks, and with about one token in three marked.
            let mut marked = Overlay::new(n);
            let allowed: Vec<u32> = (0..n.div_ceil(32))
                .map(|_| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    ((x >> 32) as u32) | ((x >> 7) as u32)
                })
                .collect();
            marked.ban_marks(&allowed);
            let overlays = [Overlay::new(n), marked];
            let bits = |m: &[f64]| m.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            for ov in &overlays {
                for ceiling in [f32::INFINITY, max - 1.0] {
                    let (z, e) = mass::fast(&row, ov.marked(), max, t, ceiling);
                    let mut copies: Vec<(f64, f64)> = Vec::new();
                    // SAFETY: each copy runs only when the CPU was found to support it.
                    unsafe {
                        if avx2 {
                            copies.push(row_mass_avx2(&row, ov.marked(), max, t, ceiling));
                        }
                        if avx512 {
                            copies.push(row_mass_avx512(&row, ov.marked(), max, t, ceiling));
                        }
                    }
                    let exact = mass::precise(&row, ov.marked(), max, t, ceiling);
                    // The one-pass pair: both sums as `precise` gives them, on every
                    // level.
                    let (inf, marks) = (f32::INFINITY, ov.marked());
                    let pair = (
                        mass::precise(&row, marks, max, t, inf),
                        mass::precise(&row, marks, max, t, ceiling),
                    );
                    let pair = (pair.0.to_bits(), pair.1.to_bits());
                    let split = |(a, b): (f64, f64)| (a.to_bits(), b.to_bits());
                    assert_eq!(
                        split(mass::precise_split(&row, marks, max, t, ceiling)),
                        pair
                    );
                    // SAFETY: each copy runs only when the CPU was found to support it.
                    unsafe {
                        if avx2 {
                            let p2 = row_mass_precise_split_avx2(&row, marks, max, t, ceiling);
                            assert_eq!(split(p2), pair);
                        }
                        if avx512 {
                            let p2 = row_mass_precise_split_avx512(&row, marks, max, t, ceiling);
                            assert_eq!(split(p2), pair);
                        }
                    }
                    // The row's mass at or above a floor split around a window
                    // `(lo, ceiling]`: with no floor the total as `fast` gives it (the
                    // same level's copy), each part within its bound of the precise mass
                    // (entries below the floor weighing nothing in any).
                    let lo = ceiling - 1.5;
                    let whole = mass::precise(&row, marks, max, t, inf);
                    for floor in [f32::NEG_INFINITY, lo - 1.0, lo + 0.5] {
                        let below = |x: f32| mass::precise(&row, marks, max, t, x);
                        let under = below(floor.next_down());
                        let (above, inside) = (whole - exact, exact - below(lo).max(under));
                        let whole = whole - under;
                        let z_inf = mass::fast(&row, marks, max, t, inf).0;
                        let window = (lo, ceiling);
                        let mut splits = vec![(
                            mass::fast_split_in::<_, false>(&row, marks, max, t, window, floor),
                            z_inf,
                        )];
                        // SAFETY: each copy runs only when the CPU was found to support it.
                        unsafe {
                            if avx2 {
                                let z2 = row_mass_avx2(&row, marks, max, t, inf).0;
                                let m = row_mass_split_avx2(&row, marks, max, t, window, floor);
                                splits.push((m, z2));
                            }
                            if avx512 {
                                let z2 = row_mass_avx512(&row, marks, max, t, inf).0;
                                let m = row_mass_split_avx512(&row, marks, max, t, window, floor);
                                splits.push((m, z2));
                            }
                        }
                        for (k, (m, z_inf)) in splits.into_iter().enumerate() {
                            // (The portable copy's weights are `fast`'s; the fused copies'
                            // those of the whole-row weights.)
                            if k == 0 && floor == f32::NEG_INFINITY {
                                assert_eq!(m.total.to_bits(), z_inf.to_bits());
                            }
                            let err = m.err();
                            assert!((m.total - whole).abs() <= err, "{m:?} {whole}");
                            assert!((m.above - above).abs() <= err, "{m:?} {above}");
                            assert!((m.window - inside).abs() <= err, "{m:?} {inside}");
                            // The target against each end of the window.
                            for u in [0.0, 0.3, 0.5, 0.9] {
                                for (got, exact) in
                                    [(m.above, above), (m.above + m.window, above + inside)]
                                {
                                    let miss = ((u * m.total - got) - (u * whole - exact)).abs();
                                    assert!(miss <= m.err_against(u, got), "{m:?} {u} {miss}");
                                }
                            }
                            assert!(m.window > 0.0 || inside == 0.0);
                        }
                    }
                    // SAFETY: each copy runs only when the CPU was found to support it.
                    unsafe {
                        let marks = ov.marked();
                        if avx2 {
                            let z2 = row_mass_precise_avx2(&row, marks, max, t, ceiling);
                            assert_eq!(z2.to_bits(), exact.to_bits());
                        }
                        if avx512 {
                            let z2 = row_mass_precise_avx512(&row, marks, max, t, ceiling);
                            assert_eq!(z2.to_bits(), exact.to_bits());
                        }
                    }
                    // The wide copies of the fast mass fuse multiply-adds: each `Z`
                    // within its own bound of the precise one, and the bounds alike.
                    assert!((z - exact).abs() <= e);
                    for (z2, e2) in copies {
                        assert!((z2 - exact).abs() <= e2, "{z2} {exact} {e2}");
                        assert!((e2 - e).abs() <= 1e-3 * e, "bounds {e} and {e2}");
                    }
                }
            }
            let whole = n / crate::adjust::BLOCK * crate::adjust::BLOCK;
            let marks = overlays[1].marked().unwrap();
            for threshold in [f32::NEG_INFINITY, max - 1.0, max, f32::INFINITY] {
                let lanes = |s: &[f32; crate::adjust::LANES]| s.map(f32::to_bits);
                let mut s1 = [0.0f32; crate::adjust::LANES];
                let r1 = scan::scan_marked_portable(&row[..whole], marks, threshold, &mut s1);
                // SAFETY: each copy runs only when the CPU was found to support it.
                unsafe {
                    if avx2 {
                        let mut s2 = [0.0f32; crate::adjust::LANES];
                        let r2 = scan_marked_avx2(&row[..whole], marks, threshold, &mut s2);
                        assert_eq!(r2, r1);
                        assert_eq!(lanes(&s1), lanes(&s2));
                    }
                    if avx512 {
                        let mut s2 = [0.0f32; crate::adjust::LANES];
                        let r2 = scan_marked_avx512(&row[..whole], marks, threshold, &mut s2);
                        assert_eq!(r2, r1);
                        assert_eq!(lanes(&s1), lanes(&s2));
                    }
                }
            }
            // The bits of the entries above a threshold: each against its entry, and
            // every copy the same bits and sums.
            let part = &row[..whole.min(scan::GROUP * BLOCK)];
            for threshold in [f32::NEG_INFINITY, max - 1.0, max, f32::INFINITY] {
                for marks in [None, Some(marks)] {
                    let lanes = |s: &[f32; LANES]| s.map(f32::to_bits);
                    let (mut s1, mut m1) = ([0.5f32; LANES], [7u64; scan::GROUP]);
                    scan::block_masks_portable(part, marks, threshold, &mut s1, &mut m1);
                    for (i, &l) in part.iter().enumerate() {
                        let marked = marks.is_some_and(|m| crate::adjust::is_marked(m, i));
                        let bit = m1[i / BLOCK] >> (i % BLOCK) & 1;
                        assert_eq!(bit == 1, l > threshold && !marked, "entry {i}");
                    }
                    let m = marks.unwrap_or(&[]);
                    let blocks = part.len() / BLOCK;
                    for level in [Level::Avx2, Level::Avx512] {
                        let (mut s2, mut m2) = ([0.5f32; LANES], [7u64; scan::GROUP]);
                        let (s2r, m2r) = (&mut s2, &mut m2);
                        // SAFETY: each copy runs only when the CPU supports it.
                        unsafe {
                            match (level, marks.is_some()) {
                                (Level::Avx2, false) if avx2 => {
                                    block_masks_avx2::<_, false>(part, m, threshold, s2r, m2r)
                                }
                                (Level::Avx2, true) if avx2 => {
                                    block_masks_avx2::<_, true>(part, m, threshold, s2r, m2r)
                                }
                                (Level::Avx512, false) if avx512 => {
                                    block_masks_avx512::<_, false>(part, m, threshold, s2r, m2r)
                                }
                                (Level::Avx512, true) if avx512 => {
                                    block_masks_avx512::<_, true>(part, m, threshold, s2r, m2r)
                                }
                                _ => continue,
                            }
                        }
                        assert_eq!(m1[..blocks], m2[..blocks], "{level:?}");
                        assert_eq!(lanes(&s1), lanes(&s2), "{level:?}");
                    }
                }
            }
            for threshold in [f32::NEG_INFINITY, max - 1.0, max, f32::INFINITY] {
                let lanes = |s: &[f32; crate::adjust::LANES]| s.map(f32::to_bits);
                let mut s1 = [0.0f32; crate::adjust::LANES];
                let r1 = scan::scan_portable(&row[..whole], threshold, &mut s1);
                // SAFETY: each copy runs only when the CPU was found to support it.
                unsafe {
                    if avx2 {
                        let mut s2 = [0.0f32; crate::adjust::LANES];
                        assert_eq!(scan_avx2(&row[..whole], threshold, &mut s2), r1);
                        assert_eq!(lanes(&s1), lanes(&s2));
                    }
                    if avx512 {
                        let mut s2 = [0.0f32; crate::adjust::LANES];
                        assert_eq!(scan_avx512(&row[..whole], threshold, &mut s2), r1);
                        assert_eq!(lanes(&s1), lanes(&s2));
                    }
                }
            }
            // (The second frame: the draw's temperature of a chain cut at `f`'s.)
            let g = Frame::new(f.max, 0.7);
            for (ov, precise) in overlays.iter().flat_map(|o| [(o, false), (o, true)]) {
                for limit in [histogram::LAST, 40] {
                    let (mut c1, mut m1) = (vec![0u32; SLOTS], vec![0f64; SLOTS]);
                    let mut d1 = vec![0f64; 2 * SLOTS];
                    // (The wide copies fuse the fast weights' multiply-adds.)
                    let build = histogram::build::<f32, true>;
                    build(&row, ov, f, limit, precise, &mut c1, &mut m1, None);
                    let mut e1 = vec![0u32; SLOTS];
                    let mut n1 = vec![0f64; SLOTS];
                    let second = Some((g, &mut d1[..]));
                    build(&row, ov, f, limit, precise, &mut e1, &mut n1, second);
                    // The second masses leave the first pass's counts and masses as they were.
                    assert_eq!(c1, e1);
                    assert_eq!(bits(&m1), bits(&n1));
                    let (mut o1, k, max) = (Vec::new(), &mut Vec::new(), usize::MAX);
                    histogram::collect(&row, ov, f, 3, limit, max, &mut o1, k);
                    let wide = [(Level::Avx2, avx2), (Level::Avx512, avx512)];
                    for (level, _) in wide.into_iter().filter(|&(_, on)| on) {
                        let (mut c2, mut m2) = (vec![0u32; SLOTS], vec![0f64; SLOTS]);
                        let mut d2 = vec![0f64; 2 * SLOTS];
                        let mut o2 = Vec::new();
                        let second = Some((g, &mut d2[..]));
                        // SAFETY: the CPU supports the copy called (checked above).
                        unsafe {
                            if level == Level::Avx512 {
                                build_avx512(&row, ov, f, limit, precise, &mut c2, &mut m2, second);
                                collect_window_avx512(&row, ov, f, 3, limit, max, &mut o2, k);
                            } else {
                                build_avx2(&row, ov, f, limit, precise, &mut c2, &mut m2, second);
                                collect_window_avx2(&row, ov, f, 3, limit, max, &mut o2, k);
                            }
                        }
                        assert_eq!(c1, c2);
                        assert_eq!(bits(&m1), bits(&m2), "n {n}, precise {precise}");
                        assert_eq!(
                            bits(&d1[..SLOTS]),
                            bits(&d2[..SLOTS]),
                            "n {n}, precise {precise}"
                        );
                        assert_eq!(o1, o2);
                    }
                }
            }
        }
    }
}
