//! Selection: the `k` largest logits of a row in one pass (top-k, greedy, and top-p's
//! candidates), ties at the k-th value broken by lower id, in the candidates' order
//! ([`order`], defined in [`crate::order`] and re-exported here).

pub(crate) use crate::order::order;
use crate::order::{pack, unpack};
use crate::scan::GROUP;
use crate::TokenId;

/// Below this `k`, selection keeps a sorted buffer with a running threshold; above it,
/// it uses `select_nth_unstable` on all candidates.
pub(crate) const SMALL_K: usize = 256;

/// Writes the `k` best finite entries of `logits` into `out`, sorted by [`order`].
///
/// One pass over the row: an entry is inserted only if it beats the current k-th best
/// (strictly, since later ids lose ties), so the common case is one comparison per entry.
pub(crate) fn select(logits: &[f32], k: usize, out: &mut Vec<(f32, TokenId)>) {
    out.clear();
    if k == 0 {
        return;
    }
    if k > SMALL_K {
        out.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, &l)| l > f32::NEG_INFINITY)
                .map(|(i, &l)| (l, i as TokenId)),
        );
        if out.len() > k {
            out.select_nth_unstable_by(k - 1, order);
            out.truncate(k);
        }
        out.sort_unstable_by(order);
        return;
    }
    let mut threshold = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > threshold {
            // Insert after every entry >= l (earlier ids win ties).
            let pos = out.partition_point(|&(x, _)| x >= l);
            if out.len() == k {
                out.pop();
            }
            out.insert(pos, (l, i as TokenId));
            if out.len() == k {
                threshold = out[k - 1].0;
            }
        }
    }
}

/// Writes the `k` best finite entries of a row of any element type into `out`, sorted by
/// [`order`], checking the row on the way; `k <= SMALL_K` is expected (larger `k` works,
/// more slowly).
///
/// One pass with a running threshold: each block's lane maxima are compared with the
/// current k-th best, and only a block holding an entry above it is looked at entry by
/// entry (on a typical row, a few dozen times in all). The row is checked with the
/// lane-sum test of [`max_checked`](crate::simd::max_checked).
///
/// # Errors
/// [`Error::NanLogit`](crate::Error::NanLogit) /
/// [`Error::InfiniteLogit`](crate::Error::InfiniteLogit) for the first NaN or `+inf`.
pub(crate) fn select_row<T: crate::element::Logit>(
    row: &[T],
    k: usize,
    skip: &crate::adjust::Overlay,
    out: &mut Vec<(f32, TokenId)>,
) -> Result<(), crate::Error> {
    use crate::adjust::{load, BLOCK, LANES};
    out.clear();
    let mut threshold = f32::NEG_INFINITY;
    let mut sum = [0.0f32; LANES];
    if k == 0 {
        return crate::simd::max_checked(row, None).map(|_| ());
    }
    let whole = row.len() / BLOCK * BLOCK;
    let rem_start = whole;
    let mut from = 0;
    // A mask's marks leave the scan's maxima; a few bias or penalty patches are cheaper
    // tested only for the entries that beat the threshold.
    let marks = skip.marked().filter(|_| skip.has_bulk_bans());
    while let Some(b) = scan_from(row, from, whole, marks, threshold, &mut sum) {
        let start = from + b * BLOCK;
        for (c, chunk) in row[start..start + BLOCK].chunks_exact(LANES).enumerate() {
            let v = load(chunk);
            if v.iter().any(|&x| x > threshold) {
                insert_all(chunk, start + c * LANES, k, skip, &mut threshold, out);
            }
        }
        from = start + BLOCK;
    }
    let rem = &row[rem_start..];
    for x in rem {
        sum[0] += x.to_f32();
    }
    insert_all(rem, rem_start, k, skip, &mut threshold, out);
    if sum.iter().any(|s| crate::adjust::not_finite_above(*s)) {
        crate::adjust::first_non_finite_of(row)?;
    }
    Ok(())
}

/// Appends to `out` the first entry of every `every`-th block of `row`
/// ([`BLOCK`](crate::adjust::BLOCK) entries) that is finite and unmarked: a sample of the
/// row, one entry in `64 every`.
pub(crate) fn sample_blocks<T: crate::element::Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    every: usize,
    out: &mut Vec<f32>,
) {
    let marked = |i: usize| marks.is_some_and(|m| crate::adjust::is_marked(m, i));
    // (An indexed loop: the same chain of iterator adapters compiles to a call per
    // entry.)
    for i in (0..row.len()).step_by(every * crate::adjust::BLOCK) {
        let l = row[i].to_f32();
        if l > f32::NEG_INFINITY && !l.is_nan() && !marked(i) {
            out.push(l);
        }
    }
}

/// The `k` best finite entries of a row of any element type under `overlay` (the
/// marked tokens left out, the patches in), sorted by [`order`], for a `k` too large for
/// the sorted buffer of [`select_row`] (hundreds to thousands), checking the row and the
/// patches on the way. `keys` is scratch.
///
/// One pass with a running threshold, as in [`select_row`], but the entries that beat it
/// are appended unsorted, as [`pack`]ed keys; whenever `BUFFERED * k` are held,
/// `select_nth_unstable` keeps the best `k` and raises the threshold to the k-th of them.
/// Each entry is thus moved a constant number of times, against `O(k)` for an insertion
/// into a sorted buffer. The patches join at the end.
///
/// `seed_values` receives the entries the starting threshold is taken from (one per block,
/// unmarked and finite, as [`sample_blocks`]; empty for a short row), a sample of the row.
///
/// `rest` receives the entries beyond the best `k` that the pass found anyway (unsorted,
/// as keys; see [`append_rest`]), when they are exactly the next best ones: every entry
/// above the starting threshold, which the pass took whenever it never had to cut back.
/// Otherwise it is left empty.
///
/// # Errors
/// As [`select_row`], then the patches' own NaN/`+inf`.
pub(crate) fn select_buffered<T: crate::element::Logit>(
    row: &[T],
    k: usize,
    overlay: &crate::adjust::Overlay,
    keys: &mut Vec<u64>,
    seed_values: &mut Vec<f32>,
    out: &mut Vec<(f32, TokenId)>,
    rest: &mut Vec<u64>,
) -> Result<(), crate::Error> {
    use crate::adjust::BLOCK;
    out.clear();
    keys.clear();
    seed_values.clear();
    rest.clear();
    if k == 0 {
        crate::simd::max_checked(row, None)?;
        return overlay.check();
    }
    let marks = overlay.marked();
    // A starting threshold from one unmarked entry per block: the `2k / BLOCK`-th largest
    // of them has about `2k` entries above it, so the pass collects few entries beyond the
    // `k` it needs. Should fewer than `k` lie above it, the pass runs again from `-inf`.
    let wanted = 2 * k / BLOCK;
    let mut start_at = f32::NEG_INFINITY;
    if wanted > 0 && row.len() / BLOCK > 4 * wanted {
        sample_blocks(row, marks, 1, seed_values);
        keys.extend(
            seed_values
                .iter()
                .enumerate()
                .map(|(i, &l)| pack(l, i as TokenId)),
        );
        if keys.len() > wanted {
            keys.select_nth_unstable_by(wanted - 1, |a, b| b.cmp(a));
            start_at = unpack(keys[wanted - 1]).0;
        }
        keys.clear();
    }
    let collect = |threshold: f32, keys: &mut Vec<u64>| match marks {
        None => collect_above::<T, false>(row, &[], k, threshold, keys),
        Some(m) => collect_above::<T, true>(row, m, k, threshold, keys),
    };
    let found = collect(start_at, keys)?;
    // (The pass holds every entry it found unless it had to cut back.)
    let mut complete = keys.len() == found;
    overlay.check()?;
    let patched = |threshold: f32| {
        overlay
            .patch
            .iter()
            .filter(move |&&(_, l)| l > threshold)
            .map(|&(id, l)| pack(l, id))
    };
    if found + patched(start_at).count() < k && start_at > f32::NEG_INFINITY {
        keys.clear();
        collect(f32::NEG_INFINITY, keys)?;
        complete = false;
    }
    keys.extend(patched(f32::NEG_INFINITY));
    if keys.len() > k {
        keys.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
        if complete {
            // Every entry above the starting threshold is here: those beyond the best
            // `k` are the next best. (Patches below it are not.)
            let above = pack(start_at, 0);
            rest.extend(keys[k..].iter().filter(|&&key| key > above));
        }
        keys.truncate(k);
    }
    extend_in_order(keys, out);
    Ok(())
}

/// [`select_buffered`]'s best `k` entries of `row` under `overlay` (into `out`, in
/// [`order`]), from `maxima`, the largest entry of each whole block of `row` (marked or
/// not, as an entropy pass records them), instead of a pass over the row; false, with
/// `out` empty, when the maxima cannot give them. `row` and the patches must already be
/// checked for NaN and `+inf` (the entropy pass that recorded `maxima` did).
///
/// The `j`-th largest block maximum `tau` has at least `j` entries at or above it (one
/// in each of those blocks), `j = k + spare + ` the patches: the maxima count marked
/// entries, and a patched token's entry, or one of the caller's `spare` bans, may be
/// one of them. Every unmarked entry at or above `tau` is read: from the blocks whose
/// maximum reaches it ([`for_each_block_bits`](crate::simd::for_each_block_bits)), the
/// entries after the last whole block, and the patches. When at least `k` of them are
/// (not always under a mask's marks), they hold the best `k`, since every other entry
/// lies below `tau` and so below each of them; ties at `tau` are all read. False as well
/// when `tau` is `-inf` or `row` has no more than `j` whole blocks.
pub(crate) fn select_by_maxima<T: crate::element::Logit>(
    row: &[T],
    k: usize,
    overlay: &crate::adjust::Overlay,
    (maxima, spare): (&[f32], usize),
    keys: &mut Vec<u64>,
    out: &mut Vec<(f32, TokenId)>,
) -> bool {
    use crate::adjust::BLOCK;
    out.clear();
    keys.clear();
    let blocks = row.len() / BLOCK;
    let j = k.saturating_add(spare).saturating_add(overlay.patch.len());
    if k == 0 || blocks <= j || maxima.len() < blocks {
        return false;
    }
    let maxima = &maxima[..blocks];
    keys.extend(
        maxima
            .iter()
            .enumerate()
            .map(|(i, &l)| pack(l, i as TokenId)),
    );
    keys.select_nth_unstable_by(j - 1, |a, b| b.cmp(a));
    let tau = unpack(keys[j - 1]).0;
    keys.clear();
    if tau == f32::NEG_INFINITY {
        return false;
    }
    let marks = overlay.marked();
    // (Above the value just below `tau`: at or above it.)
    let below = tau.next_down();
    let whole = crate::simd::for_each_block_bits(row, marks, below, Some(maxima), |at, bits| {
        let mut m = bits;
        while m != 0 {
            let j = m.trailing_zeros() as usize;
            keys.push(pack(row[at + j].to_f32(), (at + j) as TokenId));
            m &= m - 1;
        }
        true
    })
    .unwrap_or(row.len());
    let unmarked = |i: usize| !marks.is_some_and(|m| crate::adjust::is_marked(m, i));
    for (j, x) in row[whole..].iter().enumerate() {
        let l = x.to_f32();
        if l >= tau && unmarked(whole + j) {
            keys.push(pack(l, (whole + j) as TokenId));
        }
    }
    keys.extend(
        overlay
            .patch
            .iter()
            .filter(|&&(_, l)| l >= tau)
            .map(|&(id, l)| pack(l, id)),
    );
    if keys.len() < k {
        keys.clear();
        return false;
    }
    keys.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
    keys.truncate(k);
    extend_in_order(keys, out);
    true
}

/// Sorts `keys` and appends them to `out` as candidates in [`order`]: descending keys
/// are that order.
fn extend_in_order(keys: &mut [u64], out: &mut Vec<(f32, TokenId)>) {
    keys.sort_unstable_by(|a, b| b.cmp(a));
    out.extend(keys.iter().map(|&key| unpack(key)));
}

/// The number of entries of `row` above `threshold` that `marks` (token `i` at bit
/// `i % 32` of `marks[i / 32]`, or none) does not mark: with `-inf`, the finite tokens of
/// a row under a mask's bans. The bits of [`simd::block_masks`](crate::simd::block_masks),
/// a group of blocks at a time, counted.
pub(crate) fn count_above<T: crate::element::Logit>(
    row: &[T],
    marks: Option<&[u32]>,
    threshold: f32,
) -> usize {
    let mut count = 0;
    let whole = crate::simd::for_each_block_bits(row, marks, threshold, None, |_, bits| {
        count += bits.count_ones() as usize;
        true
    })
    .unwrap_or(row.len());
    let unmarked = |i: usize| !marks.is_some_and(|m| crate::adjust::is_marked(m, i));
    let tail = (whole..row.len()).filter(|&i| row[i].to_f32() > threshold && unmarked(i));
    count + tail.count()
}

/// The pass of [`select_buffered`] from `threshold` on: every unmarked entry above the
/// running threshold joins `keys`, cut back to the best `k` whenever `BUFFERED * k` are
/// held. Returns how many entries beat the running threshold (at least `k` means `keys`
/// holds the best `k` unmarked entries), and checks the row.
///
/// The pass runs over groups of [`GROUP`] blocks. For each group, [`block_masks`](crate::simd::block_masks) marks
/// the entries above the threshold with one bit each, on the widest vectors the CPU has
/// and without a branch; the blocks with a bit set are listed, again without a branch;
/// then only their set bits are visited. A row the branch predictor has not seen before
/// (every row a model produces) thus costs about one mispredicted branch per block
/// holding candidates, instead of one per chunk and per entry taken.
fn collect_above<T: crate::element::Logit, const MARKS: bool>(
    row: &[T],
    marks: &[u32],
    k: usize,
    mut threshold: f32,
    keys: &mut Vec<u64>,
) -> Result<usize, crate::Error> {
    use crate::adjust::{BLOCK, LANES};
    let marked = |i: usize| MARKS && crate::adjust::is_marked(marks, i);
    let mut sum = [0.0f32; LANES];
    let mut found = 0;
    let whole = row.len() / BLOCK * BLOCK;
    let mut masks = [0u64; GROUP];
    let mut hits = [0u16; GROUP];
    let mut from = 0;
    while from < whole {
        let to = whole.min(from + GROUP * BLOCK);
        let blocks = (to - from) / BLOCK;
        let group_marks = MARKS.then(|| &marks[from / 32..]);
        crate::simd::block_masks(&row[from..to], group_marks, threshold, &mut sum, &mut masks);
        let mut h = 0;
        for (b, &m) in masks[..blocks].iter().enumerate() {
            hits[h] = b as u16;
            h += usize::from(m != 0);
        }
        for &b in &hits[..h] {
            let base = from + usize::from(b) * BLOCK;
            let mut m = masks[usize::from(b)];
            while m != 0 {
                let j = m.trailing_zeros() as usize;
                keys.push(pack(row[base + j].to_f32(), (base + j) as TokenId));
                m &= m - 1;
            }
            found += masks[usize::from(b)].count_ones() as usize;
        }
        if keys.len() >= BUFFERED * k {
            threshold = keep_best(keys, k);
        }
        from = to;
    }
    for (j, x) in row[whole..].iter().enumerate() {
        let l = x.to_f32();
        sum[0] += l;
        if l > threshold && !marked(whole + j) {
            keys.push(pack(l, (whole + j) as TokenId));
            found += 1;
        }
    }
    if sum.iter().any(|s| crate::adjust::not_finite_above(*s)) {
        crate::adjust::first_non_finite_of(row)?;
    }
    Ok(found)
}

/// Sorts the `rest` of a [`select_buffered`] and appends it to the candidates it chose,
/// which it continues: the candidates are then the best `out.len()` entries, in order.
pub(crate) fn append_rest(rest: &mut Vec<u64>, out: &mut Vec<(f32, TokenId)>) {
    extend_in_order(rest, out);
    rest.clear();
}

/// How many times `k` entries [`select_buffered`] holds before it cuts back to `k`.
const BUFFERED: usize = 4;

/// Cuts the unsorted `keys` (more than `k`) to their `k` largest and returns the logit
/// of the k-th: a later entry must beat it strictly, since it has a higher id and loses
/// a tie.
fn keep_best(keys: &mut Vec<u64>, k: usize) -> f32 {
    keys.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
    keys.truncate(k);
    unpack(keys[k - 1]).0
}

/// The first block of `row[from..whole]` (whole blocks; `from` a multiple of `BLOCK`)
/// holding an entry above `threshold` that `marks` does not mark, adding every entry read
/// into the lane sums `sum`: [`scan_portable`](crate::scan::scan_portable) or
/// [`scan_marked_portable`](crate::scan::scan_marked_portable), on the widest vectors the
/// CPU has.
#[inline]
fn scan_from<T: crate::element::Logit>(
    row: &[T],
    from: usize,
    whole: usize,
    marks: Option<&[u32]>,
    threshold: f32,
    sum: &mut [f32; crate::adjust::LANES],
) -> Option<usize> {
    match marks {
        None => crate::simd::scan(&row[from..whole], threshold, sum),
        Some(m) => crate::simd::scan_marked(&row[from..whole], &m[from / 32..], threshold, sum),
    }
}

/// Inserts the entries of `part` (ids from `base`) that beat the running threshold and
/// have no patch in `skip` into the sorted `out` of at most `k`. Kept out of line so that the scan's loop stays small.
#[inline(never)]
fn insert_all<T: crate::element::Logit>(
    part: &[T],
    base: usize,
    k: usize,
    skip: &crate::adjust::Overlay,
    threshold: &mut f32,
    out: &mut Vec<(f32, TokenId)>,
) {
    for (j, x) in part.iter().enumerate() {
        let l = x.to_f32();
        if l > *threshold && !skip.is_patched((base + j) as TokenId) {
            // After every entry >= l: earlier ids win ties.
            let pos = out.partition_point(|&(y, _)| y >= l);
            if out.len() == k {
                out.pop();
            }
            out.insert(pos, (l, (base + j) as TokenId));
            if out.len() == k {
                *threshold = out[k - 1].0;
            }
        }
    }
}

/// With `crowded`, [`near_max`] gives up once it holds more than this many entries plus
/// one in [`NEAR_RATE`] of those it read. On a peaked row the running maximum soon
/// reaches a peak and few entries come near it (the bench's peaked row of 151,936
/// logits: 16 survivors); on a flat one a tenth of the row or more does.
pub(crate) const NEAR_BASE: usize = 128;
/// See [`NEAR_BASE`].
pub(crate) const NEAR_RATE: usize = 16;

/// The entries within `width <= 0` of the row's running maximum, in one pass that also
/// finds the maximum and checks the row: every finite entry `l >= max + width` ends up in
/// `out` (unsorted, with some below it that were collected before the maximum rose).
/// Returns the maximum (`-inf` when every entry is) and whether `out` is complete: not
/// once more than `cap` entries were collected, or, with `crowded`, once they are more
/// than [`NEAR_BASE`] plus one in [`NEAR_RATE`] of the entries read (a flat row, whose
/// survivors another pass collects at less cost than this one reads the rest). The rest
/// of the row is then read for its maximum alone.
///
/// # Errors
/// [`Error::NanLogit`](crate::Error::NanLogit) /
/// [`Error::InfiniteLogit`](crate::Error::InfiniteLogit) for the first NaN or `+inf`.
pub(crate) fn near_max<T: crate::element::Logit>(
    row: &[T],
    width: f32,
    cap: usize,
    crowded: bool,
    out: &mut Vec<(f32, TokenId)>,
) -> Result<(f32, bool), crate::Error> {
    use crate::adjust::{BLOCK, LANES};
    out.clear();
    let mut max = f32::NEG_INFINITY;
    let mut sum = [0.0f32; LANES];
    let whole = row.len() / BLOCK * BLOCK;
    let mut from = 0;
    let mut over = false;
    loop {
        let threshold = max + width;
        let Some(b) = crate::simd::scan(&row[from..whole], threshold, &mut sum) else {
            break;
        };
        let start = from + b * BLOCK;
        take_near(&row[start..start + BLOCK], start, width, &mut max, out);
        from = start + BLOCK;
        if out.len() > cap || (crowded && out.len() > NEAR_BASE + from / NEAR_RATE) {
            over = true;
            break;
        }
    }
    for x in &row[whole..] {
        sum[0] += x.to_f32();
    }
    take_near(&row[whole..], whole, width, &mut max, out);
    if over {
        // The rest of the row was not read: its maximum, and its check, lane by lane (a
        // single running sum would chain every addition).
        let rest = crate::simd::max_sum(&row[from..whole], &mut sum);
        if rest > max {
            max = rest;
        }
    }
    if sum.iter().any(|&s| crate::adjust::not_finite_above(s)) {
        crate::adjust::first_non_finite_of(row)?;
    }
    Ok((max, !over && out.len() <= cap))
}

/// Appends the entries of `part` (ids from `base`) within `width` of the running
/// maximum, raising the maximum on the way.
#[inline(never)]
fn take_near<T: crate::element::Logit>(
    part: &[T],
    base: usize,
    width: f32,
    max: &mut f32,
    out: &mut Vec<(f32, TokenId)>,
) {
    for (j, x) in part.iter().enumerate() {
        let l = x.to_f32();
        if l > *max {
            *max = l;
        }
        if l > f32::NEG_INFINITY && l >= *max + width {
            out.push((l, (base + j) as TokenId));
        }
    }
}

/// [`select_row`] under sparse patches: the `k` best of the adjusted row. The scan
/// leaves the patched tokens out (the test costs nothing on the hot path: it is made only
/// for an entry that beats the running threshold), then the patched values join and the
/// result is cut to `k`.
///
/// # Errors
/// As [`select_row`], then the patches' own NaN/`+inf`.
pub(crate) fn select_patched<T: crate::element::Logit>(
    row: &[T],
    k: usize,
    overlay: &crate::adjust::Overlay,
    out: &mut Vec<(f32, TokenId)>,
) -> Result<(), crate::Error> {
    select_row(row, k, overlay, out)?;
    overlay.check()?;
    if overlay.patch.is_empty() {
        return Ok(());
    }
    out.extend(
        overlay
            .patch
            .iter()
            .filter(|(_, l)| *l > f32::NEG_INFINITY)
            .map(|&(id, l)| (l, id)),
    );
    out.sort_unstable_by(order);
    out.truncate(k);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adjust::BLOCK;
    use proptest::prelude::*;

    proptest! {
        /// [`count_above`] is the plain count, with and without marks,
        /// for rows of any length (a partial last chunk) and `f32`, `f16` and `bf16`.
        #[test]
        fn count_above_is_the_plain_count(
            row in prop::collection::vec(prop_oneof![
                Just(f32::NEG_INFINITY),
                -5.0f32..5.0,
                Just(0.0f32),
            ], 0..300),
            marks in prop::collection::vec(any::<u32>(), 10),
            marked in any::<bool>(),
            threshold in prop_oneof![Just(f32::NEG_INFINITY), -2.0f32..2.0],
        ) {
            let marks = marked.then_some(&marks[..]);
            let plain = |row: &[f32]| {
                (0..row.len())
                    .filter(|&i| row[i] > threshold)
                    .filter(|&i| !marks.is_some_and(|m| crate::adjust::is_marked(m, i)))
                    .count()
            };
            let want = plain(&row);
            prop_assert_eq!(count_above(&row, marks, threshold), want);
            let halves: Vec<half::f16> = row.iter().map(|&l| half::f16::from_f32(l)).collect();
            let back: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
            prop_assert_eq!(count_above(&halves, marks, threshold), plain(&back));
            let brains: Vec<half::bf16> = row.iter().map(|&l| half::bf16::from_f32(l)).collect();
            let back: Vec<f32> = brains.iter().map(|h| h.to_f32()).collect();
            prop_assert_eq!(count_above(&brains, marks, threshold), plain(&back));
        }
    }

    proptest! {
        /// [`select_by_maxima`], where it selects, gives the best `k` of the adjusted row
        /// in order (a full sort's), under marks and patches, with ties and `-inf`; and it
        /// selects whenever nothing is marked and the `k + spare`-th block maximum is
        /// finite.
        #[test]
        fn selection_from_the_block_maxima_equals_a_full_sort(
            row in prop::collection::vec(prop_oneof![
                1 => Just(f32::NEG_INFINITY),
                8 => (-20i32..20).prop_map(|l| l as f32 / 4.0),
                2 => -30.0f32..30.0,
            ], 0..3_000),
            k in 1usize..48,
            allowed in prop::collection::vec(any::<u32>(), 94),
            masked in any::<bool>(),
            spare in 0usize..3,
            biases in prop::collection::vec((0usize..3_000, prop_oneof![
                (-40i32..40).prop_map(|b| b as f32 / 4.0),
                -40.0f32..40.0,
            ]), 0..6),
        ) {
            let n = row.len();
            let blocks = n / BLOCK;
            let maxima: Vec<f32> = row
                .chunks_exact(BLOCK)
                .map(|b| b.iter().copied().fold(f32::NEG_INFINITY, f32::max))
                .collect();
            let mut params = crate::params::SamplingParams::builder();
            for &(id, b) in biases.iter().filter(|b| b.0 < n) {
                params = params.logit_bias(id as TokenId, b);
            }
            let params = params.build().unwrap();
            let mut ov = crate::adjust::Overlay::new(n);
            ov.build(&row, &params, &[], &mut []);
            if masked {
                ov.ban_marks(&allowed[..n.div_ceil(32)]);
            }
            let mut want: Vec<(f32, TokenId)> = (0..n as TokenId)
                .map(|id| (ov.value(&row, id), id))
                .filter(|&(l, _)| l > f32::NEG_INFINITY)
                .collect();
            want.sort_by(order);
            want.truncate(k);
            let (mut keys, mut out) = (Vec::new(), Vec::new());
            let selected = select_by_maxima(&row, k, &ov, (&maxima, spare), &mut keys, &mut out);
            if selected {
                prop_assert_eq!(&out, &want);
            } else {
                prop_assert!(out.is_empty());
            }
            let mut by_value = maxima.clone();
            by_value.sort_by(|a, b| b.total_cmp(a));
            let j = k + spare;
            let finite = blocks > j && by_value[j - 1] > f32::NEG_INFINITY;
            if finite && !masked && ov.patch.is_empty() {
                prop_assert!(selected, "n {} k {}", n, k);
            }
        }
    }

    /// The ties at the `k`-th block maximum that [`select_by_maxima`] must read: an
    /// entry after the last whole block, when marks leave the blocks short, and a patch
    /// whose lower id puts it first among the ties.
    #[test]
    fn selection_from_the_block_maxima_reads_the_ties_after_the_blocks_and_in_the_patches() {
        let n = 4 * BLOCK + 10;
        let mut row = vec![0.0f32; n];
        let (top, a, b, tail) = (5, BLOCK + 7, 2 * BLOCK + 9, 4 * BLOCK + 4);
        row[top] = 5.0;
        (row[a], row[b], row[tail]) = (3.0, 3.0, 3.0);
        let maxima = [5.0, 3.0, 3.0, 0.0];
        let best_two = |ov: &crate::adjust::Overlay| {
            let (mut keys, mut out) = (Vec::new(), Vec::new());
            assert!(select_by_maxima(
                &row,
                2,
                ov,
                (&maxima, 0),
                &mut keys,
                &mut out
            ));
            out
        };
        // The `k`-th maximum is 3; with the blocks' 3s banned, the third 3 is the tail's.
        let mut allowed = vec![u32::MAX; n.div_ceil(32)];
        allowed[a / 32] &= !(1 << (a % 32));
        allowed[b / 32] &= !(1 << (b % 32));
        let mut ov = crate::adjust::Overlay::new(n);
        ov.ban_marks(&allowed);
        assert_eq!(
            best_two(&ov),
            [(5.0, top as TokenId), (3.0, tail as TokenId)]
        );
        // Token 1 raised to 3 by a bias: the first of the 3s (the third maximum, with
        // one taken for the patch).
        let params = crate::params::SamplingParams::builder()
            .logit_bias(1, 3.0)
            .build()
            .unwrap();
        let mut ov = crate::adjust::Overlay::new(n);
        ov.build(&row, &params, &[], &mut []);
        assert_eq!(best_two(&ov), [(5.0, top as TokenId), (3.0, 1)]);
    }

    /// Every entry of `row` with its id, in [`order`].
    fn sorted(row: &[f32]) -> Vec<(f32, TokenId)> {
        let mut all: Vec<(f32, TokenId)> = row
            .iter()
            .enumerate()
            .map(|(i, &l)| (l, i as TokenId))
            .collect();
        all.sort_by(order);
        all
    }

    #[test]
    fn buffered_selection_equals_a_full_sort() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        // How many entries beyond `k` each selection under marks kept.
        let mut rests = Vec::new();
        // (Rows of several groups of blocks, the last one partial, and a remainder; with
        // few levels, more than `BUFFERED * k` entries beat the starting threshold, so
        // the pass cuts back within a group.)
        for (n, k, levels) in [
            (10_000usize, 1024usize, 1 << 20),
            (5_000, 37, 50),
            (70, 1024, 9),
            (40_003, 1024, 1 << 20),
            (40_003, 300, 64),
        ] {
            let row: Vec<f32> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if i % 13 == 0 {
                        f32::NEG_INFINITY
                    } else {
                        (x % levels) as f32 - (levels / 2) as f32
                    }
                })
                .collect();
            let mut all: Vec<(f32, TokenId)> = row
                .iter()
                .enumerate()
                .filter(|(_, &l)| l > f32::NEG_INFINITY)
                .map(|(i, &l)| (l, i as TokenId))
                .collect();
            all.sort_by(order);
            let mut best = all.clone();
            best.truncate(k);
            let (mut keys, mut out, mut rest) = (Vec::new(), Vec::new(), Vec::new());
            let seeds = &mut Vec::new();
            let plain = crate::adjust::Overlay::new(n);
            select_buffered(&row, k, &plain, &mut keys, seeds, &mut out, &mut rest).unwrap();
            assert_eq!(out, best, "n {n} k {k}");
            // With the rest, the best ones that many more.
            let more = rest.len();
            append_rest(&mut rest, &mut out);
            assert_eq!(out[..], all[..k.min(all.len()) + more], "n {n} k {k} rest");
            // Under marks (about one token in four banned) and patches: a bias that lifts
            // one token to the top, sinks another, and bans a third.
            let mut allowed: Vec<u32> = (0..n.div_ceil(32))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x as u32) | (x >> 32) as u32
                })
                .collect();
            let (up, down, gone) = (n / 2, n / 3, n / 5);
            let mut params = crate::params::SamplingParams::builder()
                .logit_bias(up as TokenId, 1e6)
                .logit_bias(down as TokenId, -1e6)
                .logit_bias(gone as TokenId, 1.0);
            // Patches that keep their token's value, on tokens of every level: some lie
            // at the starting threshold, which the rest must leave out, as the pass does
            // the row's entries there.
            for id in (1..n).step_by(97).filter(|i| ![up, down, gone].contains(i)) {
                params = params.logit_bias(id as TokenId, 0.0);
            }
            let params = params.build().unwrap();
            let mut ov = crate::adjust::Overlay::new(n);
            allowed[up / 32] |= 1 << (up % 32);
            allowed[down / 32] |= 1 << (down % 32);
            allowed[gone / 32] &= !(1 << (gone % 32));
            let is_allowed = |i: usize| allowed[i / 32] & (1 << (i % 32)) != 0;
            ov.build(&row, &params, &[], &mut []);
            ov.ban_marks(&allowed);
            let adjusted = |i: usize, l: f32| match i {
                _ if i == up => l + 1e6,
                _ if i == down => l - 1e6,
                _ if !is_allowed(i) || i == gone => f32::NEG_INFINITY,
                _ => l,
            };
            let mut masked: Vec<(f32, TokenId)> = row
                .iter()
                .enumerate()
                .map(|(i, &l)| (adjusted(i, l), i as TokenId))
                .filter(|&(l, _)| l > f32::NEG_INFINITY)
                .collect();
            masked.sort_by(order);
            select_buffered(&row, k, &ov, &mut keys, seeds, &mut out, &mut rest).unwrap();
            assert_eq!(
                out[..],
                masked[..k.min(masked.len())],
                "n {n} k {k} under marks"
            );
            let more = rest.len();
            append_rest(&mut rest, &mut out);
            let all = k.min(masked.len()) + more;
            assert_eq!(out[..], masked[..all], "n {n} k {k} under marks, rest");
            rests.push(more);
        }
        assert!(rests.iter().any(|&r| r > 0), "no rest kept: {rests:?}");
        // The entries the starting threshold is taken from are the row's largest: fewer
        // than `k` lie above it, and the pass runs again.
        let row: Vec<f32> = (0..12_800)
            .map(|i| if i % 64 == 0 { 100.0 } else { (i % 7) as f32 })
            .collect();
        let (mut keys, mut out, mut rest) = (Vec::new(), Vec::new(), Vec::new());
        let seeds = &mut Vec::new();
        let plain = crate::adjust::Overlay::new(row.len());
        select_buffered(&row, 1024, &plain, &mut keys, seeds, &mut out, &mut rest).unwrap();
        assert_eq!(out[..], sorted(&row)[..1024]);
        // (A pass that runs again keeps no rest.)
        assert!(rest.is_empty());
        // The entries the starting threshold is taken from are the row's smallest: far
        // more than `BUFFERED * k` lie above it, the pass cuts back, and it keeps no rest
        // (the entries it dropped on the way are not all the next best).
        let row: Vec<f32> = (0..40_000)
            .map(|i| {
                if i % 64 == 0 {
                    -1.0
                } else {
                    (i % 1_000) as f32
                }
            })
            .collect();
        let plain = crate::adjust::Overlay::new(row.len());
        select_buffered(&row, 100, &plain, &mut keys, seeds, &mut out, &mut rest).unwrap();
        assert_eq!(out[..], sorted(&row)[..100]);
        assert!(rest.is_empty());
    }
}
