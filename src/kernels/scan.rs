//! The per-block bodies of selection's passes: the running-threshold scan of greedy and
//! top-k, and the bits of the entries above a threshold that top-p's candidate
//! collection visits. Portable and always inlined, so that [`simd`](crate::simd)
//! compiles them again for wider vectors; [`select`](crate::select) calls them through
//! that dispatch, and nothing here calls it back.

/// How many blocks selection's pass above a threshold (`select::collect_above`) marks
/// before it visits their bits: the bits fit in 2 KiB of stack.
pub(crate) const GROUP: usize = 256;

/// For each whole block of `part`, the bits of its entries above `threshold` that `marks`
/// (token `i` of `part` at bit `i % 32` of `marks[i / 32]`, or none) does not mark, entry
/// `j` of the block at bit `j`, into `masks`; every entry read joins the lane sums `sum`.
/// No branch depends on the entries. Run through
/// [`simd::block_masks`](crate::simd::block_masks), which compiles it for wider vectors.
#[inline(always)]
pub(crate) fn block_masks_portable<T: crate::element::Logit>(
    part: &[T],
    marks: Option<&[u32]>,
    threshold: f32,
    sum: &mut [f32; crate::adjust::LANES],
    masks: &mut [u64; GROUP],
) {
    match marks {
        None => block_masks_with::<T, false>(part, &[], threshold, sum, masks),
        Some(m) => block_masks_with::<T, true>(part, m, threshold, sum, masks),
    }
}

/// [`block_masks_portable`], with the test of the marks compiled in or out.
#[inline(always)]
fn block_masks_with<T: crate::element::Logit, const MARKS: bool>(
    part: &[T],
    marks: &[u32],
    threshold: f32,
    sum: &mut [f32; crate::adjust::LANES],
    masks: &mut [u64; GROUP],
) {
    use crate::adjust::{lane_marks_if, load, BLOCK, LANES};
    let mut acc = *sum;
    for (b, block) in part.chunks_exact(BLOCK).take(GROUP).enumerate() {
        let mut bits = 0u64;
        for (c, chunk) in block.chunks_exact(LANES).enumerate() {
            let v = load(chunk);
            let mut w = [0u32; LANES];
            for j in 0..LANES {
                acc[j] += v[j];
                w[j] = u32::from(v[j] > threshold) << j;
            }
            let above = w.iter().fold(0, |a, &x| a | x);
            let unmarked = !lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES) & 0xffff;
            bits |= u64::from(above & unmarked) << (c * LANES);
        }
        masks[b] = bits;
    }
    *sum = acc;
}

/// The index of the first block of `part` (whole blocks) holding an entry above
/// `threshold`, adding every entry read into the lane sums `sum`. The hot loop of
/// [`select_row`](crate::select::select_row): it keeps nothing but lane maxima and sums in registers. Run through
/// [`simd::scan`](crate::simd::scan), which compiles it for wider vectors.
#[inline(always)]
pub(crate) fn scan_portable<T: crate::element::Logit>(
    part: &[T],
    threshold: f32,
    sum: &mut [f32; crate::adjust::LANES],
) -> Option<usize> {
    scan_with::<T, false>(part, &[], threshold, sum)
}

/// [`scan_portable`] with the entries whose bit is set in `marks` (token `i` of `part`
/// at bit `i % 32` of `marks[i / 32]`) left out of the maxima, so that a block whose
/// only entries above the threshold are marked costs no more than any other. The sums
/// still take every entry. Run through [`simd::scan_marked`](crate::simd::scan_marked).
#[inline(always)]
pub(crate) fn scan_marked_portable<T: crate::element::Logit>(
    part: &[T],
    marks: &[u32],
    threshold: f32,
    sum: &mut [f32; crate::adjust::LANES],
) -> Option<usize> {
    scan_with::<T, true>(part, marks, threshold, sum)
}

/// The loop of both scans, with the test of the marks compiled in or out.
#[inline(always)]
fn scan_with<T: crate::element::Logit, const MARKS: bool>(
    part: &[T],
    marks: &[u32],
    threshold: f32,
    sum: &mut [f32; crate::adjust::LANES],
) -> Option<usize> {
    use crate::adjust::{lane_marks_if, load, BLOCK, LANES};
    use crate::mask::BITS;
    let mut acc = *sum;
    let mut found = None;
    for (b, block) in part.chunks_exact(BLOCK).enumerate() {
        let mut m = [f32::NEG_INFINITY; LANES];
        for (c, chunk) in block.chunks_exact(LANES).enumerate() {
            let v = load(chunk);
            let bits = lane_marks_if::<MARKS>(marks, b * BLOCK + c * LANES);
            for j in 0..LANES {
                acc[j] += v[j];
                let take = v[j] > m[j] && bits & BITS[j] == 0;
                m[j] = if take { v[j] } else { m[j] };
            }
        }
        if m.iter().any(|&x| x > threshold) {
            found = Some(b);
            break;
        }
    }
    *sum = acc;
    found
}
