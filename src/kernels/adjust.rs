//! Stage 1 plumbing: convert the row to `f32` while checking it, then re-check after the
//! adjustments.

use crate::element::Logit;
use crate::error::Error;

/// Copies `row` into `out` as `f32`, returning the maximum.
///
/// # Errors
/// [`Error::NanLogit`] or [`Error::InfiniteLogit`] for the first NaN or `+inf`.
pub(crate) fn convert_checked<T: Logit>(row: &[T], out: &mut [f32]) -> Result<f32, Error> {
    debug_assert_eq!(row.len(), out.len());
    const W: usize = 8;
    let mut lanes = [f32::NEG_INFINITY; W];
    let mut bad = [false; W];
    let mut src = row.chunks_exact(W);
    let mut dst = out.chunks_exact_mut(W);
    for (s, d) in (&mut src).zip(&mut dst) {
        for j in 0..W {
            let v = s[j].to_f32();
            d[j] = v;
            bad[j] |= not_finite_above(v);
            lanes[j] = if v > lanes[j] { v } else { lanes[j] };
        }
    }
    let mut max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut any_bad = bad.iter().any(|&b| b);
    for (s, d) in src.remainder().iter().zip(dst.into_remainder()) {
        let v = s.to_f32();
        *d = v;
        any_bad |= not_finite_above(v);
        max = max.max(v);
    }
    if any_bad {
        first_non_finite(out)?;
    }
    Ok(max)
}

/// Maximum of a row that may have been changed anywhere, checking it again.
///
/// # Errors
/// As [`convert_checked`].
pub(crate) fn recheck(row: &[f32]) -> Result<f32, Error> {
    const W: usize = 8;
    let mut lanes = [f32::NEG_INFINITY; W];
    let mut bad = [false; W];
    let chunks = row.chunks_exact(W);
    let rem = chunks.remainder();
    for s in chunks {
        for j in 0..W {
            let v = s[j];
            bad[j] |= not_finite_above(v);
            lanes[j] = if v > lanes[j] { v } else { lanes[j] };
        }
    }
    let mut max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut any_bad = bad.iter().any(|&b| b);
    for &v in rem {
        any_bad |= not_finite_above(v);
        max = max.max(v);
    }
    if any_bad {
        first_non_finite(row)?;
    }
    Ok(max)
}

/// Reports the first NaN or `+inf` of `row` (there is one when called).
fn first_non_finite(row: &[f32]) -> Result<(), Error> {
    for (index, &v) in row.iter().enumerate() {
        if v.is_nan() {
            return Err(Error::NanLogit { index });
        }
        if v == f32::INFINITY {
            return Err(Error::InfiniteLogit { index });
        }
    }
    Ok(())
}

/// Lanes of the row kernels: the row is read in chunks of this many entries, each chunk
/// reduced with independent per-lane operations so the compiler emits SIMD.
pub(crate) const LANES: usize = 16;

/// True for NaN and `+inf`: the values a row may not hold (`-inf` is legal).
#[inline(always)]
pub(crate) fn not_finite_above(v: f32) -> bool {
    v.is_nan() | (v == f32::INFINITY)
}

/// Converts a chunk of the row to `f32` (the `f16`/`bf16` conversion happens here, in
/// registers, inside every pass: the row is never copied).
#[inline(always)]
pub(crate) fn load<T: Logit>(chunk: &[T]) -> [f32; LANES] {
    let chunk: &[T; LANES] = chunk.try_into().expect("a whole chunk");
    std::array::from_fn(|j| fast_f32(&chunk[j]))
}

/// `x` as `f32`. For `bf16` this is the bare shift of its bits, which vectorises
/// (`half`'s conversion also quiets NaNs, a branch per entry); a NaN stays a NaN either
/// way, which is all the checks need. The type test is resolved at compile time.
#[inline(always)]
pub(crate) fn fast_f32<T: Logit>(x: &T) -> f32 {
    match (x as &dyn std::any::Any).downcast_ref::<half::bf16>() {
        Some(b) => f32::from_bits(u32::from(b.to_bits()) << 16),
        None => x.to_f32(),
    }
}

/// The largest of the lanes, by a tree of compare-and-select (which vectorises, unlike a
/// fold with `f32::max`, whose NaN handling costs a branch per step). With a NaN lane the
/// result is unspecified (one of the lanes, or NaN): the callers either hold no NaN or
/// reject the row once their pass finds one.
#[inline(always)]
pub(crate) fn lanes_max(m: &[f32; LANES]) -> f32 {
    let mut h = *m;
    let mut width = LANES / 2;
    while width > 0 {
        for j in 0..width {
            h[j] = if h[j] > h[j + width] {
                h[j]
            } else {
                h[j + width]
            };
        }
        width /= 2;
    }
    h[0]
}

/// Entries per block: the kernels reduce a block's lanes to one decision, so the
/// horizontal work is paid once per `BLOCK` entries.
pub(crate) const BLOCK: usize = 4 * LANES;

/// Reports the first NaN or `+inf` of a row of any element type.
pub(crate) fn first_non_finite_of<T: Logit>(row: &[T]) -> Result<(), Error> {
    for (index, x) in row.iter().enumerate() {
        let v = x.to_f32();
        if v.is_nan() {
            return Err(Error::NanLogit { index });
        }
        if v == f32::INFINITY {
            return Err(Error::InfiniteLogit { index });
        }
    }
    Ok(())
}

/// True when token `i`'s bit is set in `marks` (see [`Overlay::marked`]).
#[inline(always)]
pub(crate) fn is_marked(marks: &[u32], i: usize) -> bool {
    marks[i / 32] & (1 << (i % 32)) != 0
}

/// The bits of `marks` for the [`LANES`] tokens from `i` (a multiple of [`LANES`]) on,
/// token `i + j` at bit `j` (higher bits are other tokens'); no bits unless `MARKS`, so
/// that the passes compile the test of the marks in or out.
#[inline(always)]
pub(crate) fn lane_marks_if<const MARKS: bool>(marks: &[u32], i: usize) -> u32 {
    const _: () = assert!(LANES == 16);
    if MARKS {
        marks[i / 32] >> (i & 16)
    } else {
        0
    }
}

/// No patch at this token (see [`Overlay`]).
pub(crate) const UNPATCHED: u32 = u32::MAX;

/// The sparse adjustments (logit bias, penalties) and a grammar mask's bans as an
/// overlay on the untouched row: the few changed tokens with their adjusted values, and
/// one mark per changed or banned token, instead of an adjusted copy of the whole row.
///
/// `marks` has one bit per token, set when the token has a patch or is banned; the passes
/// test it for every token they would otherwise read from the row, and at 19 KB for Qwen3
/// it stays in L1. `slot[id]` is the index of token `id` in `patch`, or [`UNPATCHED`]. A
/// ban takes no slot (a marked token without a slot is banned, its value is `-inf`), so
/// banning a hundred thousand tokens is one pass over the mask's words and never touches
/// the 600 KB slot array.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overlay {
    /// `(id, adjusted logit)`: the bias and penalty patches in order of first adjustment
    /// (a banned one holds `-inf`).
    pub(crate) patch: Vec<(crate::TokenId, f32)>,
    /// Per-token index into `patch`.
    slot: Vec<u32>,
    /// One bit per token: set when the token has a patch or is banned.
    marks: Vec<u32>,
    /// Set by [`ban_marks`](Self::ban_marks): marks without a patch, which
    /// [`clear`](Self::clear) must wipe whole.
    bulk: bool,
}

impl Overlay {
    #[cfg(test)]
    pub(crate) fn new(vocab_size: usize) -> Self {
        Overlay {
            patch: Vec::new(),
            slot: vec![UNPATCHED; vocab_size],
            marks: vec![0; vocab_size.div_ceil(32)],
            bulk: false,
        }
    }

    /// As [`new`](Self::new), or the allocator's refusal: both arrays are reserved
    /// before either is filled.
    pub(crate) fn try_new(vocab_size: usize) -> Result<Self, std::collections::TryReserveError> {
        let (mut slot, mut marks) = (Vec::new(), Vec::new());
        slot.try_reserve_exact(vocab_size)?;
        marks.try_reserve_exact(vocab_size.div_ceil(32))?;
        slot.resize(vocab_size, UNPATCHED);
        marks.resize(vocab_size.div_ceil(32), 0);
        Ok(Overlay {
            patch: Vec::new(),
            slot,
            marks,
            bulk: false,
        })
    }

    /// Forgets every patch.
    pub(crate) fn clear(&mut self) {
        for &(id, _) in &self.patch {
            self.slot[id as usize] = UNPATCHED;
        }
        if self.bulk || self.patch.len() > self.marks.len() / 8 {
            // Bans, or many patches: one memset of the bitset costs less than a store
            // per patch.
            self.marks.fill(0);
        } else {
            // Every marked bit of a word belongs to a patched token: zero the whole word.
            for &(id, _) in &self.patch {
                self.marks[id as usize / 32] = 0;
            }
        }
        self.patch.clear();
        self.bulk = false;
    }

    /// The bitset of the marked tokens (every patched token, and with
    /// [`ban_marks`](Self::ban_marks) every banned one), or `None` when no token is
    /// marked. The adjusted row is the caller's row at the unmarked tokens and the
    /// patches' values at the patched ones; a marked token without a patch is banned.
    /// The passes that read the row skip the marked tokens as they go, then take the
    /// patches.
    #[inline]
    pub(crate) fn marked(&self) -> Option<&[u32]> {
        (self.bulk || !self.patch.is_empty()).then_some(&self.marks[..])
    }

    /// True when [`ban_marks`](Self::ban_marks) banned tokens without a patch: the row's
    /// maximum may then belong to a banned token.
    #[inline]
    pub(crate) fn has_bulk_bans(&self) -> bool {
        self.bulk
    }

    /// True when token `id` is marked: it has a patch, or a mask banned it.
    #[inline]
    pub(crate) fn is_patched(&self, id: crate::TokenId) -> bool {
        is_marked(&self.marks, id as usize)
    }

    /// The adjusted value slot of token `id`, created from the row's value if absent.
    /// Only before the bans.
    fn entry<T: Logit>(&mut self, row: &[T], id: crate::TokenId) -> &mut f32 {
        let i = id as usize;
        if self.slot[i] == UNPATCHED {
            debug_assert!(!self.bulk, "a slot after the bans");
            self.slot[i] = self.patch.len() as u32;
            self.patch.push((id, row[i].to_f32()));
            self.marks[i / 32] |= 1 << (i % 32);
        }
        let s = self.slot[i] as usize;
        &mut self.patch[s].1
    }

    /// Bans token `id` by its mark, as [`ban_marks`](Self::ban_marks) bans a token a
    /// mask disallows: its patch, if it has one, becomes `-inf`.
    pub(crate) fn ban(&mut self, id: crate::TokenId) {
        let i = id as usize;
        if self.slot[i] == UNPATCHED {
            self.marks[i / 32] |= 1 << (i % 32);
            self.bulk = true;
        } else {
            self.patch[self.slot[i] as usize].1 = f32::NEG_INFINITY;
        }
    }

    /// Bans every token whose bit is clear in `allowed` (a mask's words) by its mark
    /// alone: a token the bias or a penalty patched gets `-inf` in its patch, the others
    /// get no patch. Every pass skips the marked tokens (see [`marked`](Self::marked)),
    /// so a mask of any density costs one vectorised pass over its words. Bits past the
    /// last token may end up marked; no token has those ids.
    pub(crate) fn ban_marks(&mut self, allowed: &[u32]) {
        for (id, l) in &mut self.patch {
            let i = *id as usize;
            if allowed[i / 32] & (1 << (i % 32)) == 0 {
                *l = f32::NEG_INFINITY;
            }
        }
        for (m, &a) in self.marks.iter_mut().zip(allowed) {
            *m |= !a;
        }
        self.bulk = true;
    }

    /// The adjusted logit of token `id`.
    #[inline]
    pub(crate) fn value<T: Logit>(&self, row: &[T], id: crate::TokenId) -> f32 {
        if !self.is_patched(id) {
            return row[id as usize].to_f32();
        }
        match self.slot[id as usize] {
            UNPATCHED => f32::NEG_INFINITY,
            s => self.patch[s as usize].1,
        }
    }

    /// Builds the patches of the logit bias, then of the penalties over `window`, with
    /// exactly the arithmetic of the dense path ([`apply_bias`](crate::penalize::apply_bias),
    /// [`apply_penalties`](crate::penalize::apply_penalties)).
    /// `counts` must be all zero and is left all zero.
    pub(crate) fn build<T: Logit>(
        &mut self,
        row: &[T],
        params: &crate::params::SamplingParams,
        window: &[crate::TokenId],
        counts: &mut [u32],
    ) {
        self.clear();
        for &(id, b) in params.logit_bias() {
            *self.entry(row, id) += b;
        }
        if window.is_empty() || !params.has_penalties() {
            return;
        }
        crate::penalize::for_each_count(window, counts, |id, c| {
            let x = self.entry(row, id);
            *x = crate::penalize::penalize(*x, c, params);
        });
    }

    /// The first (lowest id) patch that is NaN or `+inf`, as the error the dense check
    /// would report.
    ///
    /// # Errors
    /// [`Error::NanLogit`] / [`Error::InfiniteLogit`].
    pub(crate) fn check(&self) -> Result<(), Error> {
        let bad = self
            .patch
            .iter()
            .filter(|(_, v)| not_finite_above(*v))
            .min_by_key(|(id, _)| *id);
        match bad {
            Some(&(id, v)) if v.is_nan() => Err(Error::NanLogit { index: id as usize }),
            Some(&(id, _)) => Err(Error::InfiniteLogit { index: id as usize }),
            None => Ok(()),
        }
    }
}

/// Checks a row's and a mask's sizes against the vocabulary; returns the row cut to the
/// vocabulary (the entries past it are padding and never read).
///
/// # Errors
/// [`Error::EmptyVocabulary`] for an empty row, [`Error::VocabLargerThanRow`] for a row
/// shorter than the vocabulary, [`Error::LengthMismatch`] for a mask of another size.
pub(crate) fn check_input<'r, T>(
    vocab_size: usize,
    row: &'r [T],
    mask: Option<&crate::TokenMask>,
) -> Result<&'r [T], Error> {
    if row.is_empty() {
        return Err(Error::EmptyVocabulary);
    }
    if vocab_size > row.len() {
        return Err(Error::VocabLargerThanRow {
            vocab_size,
            row_len: row.len(),
        });
    }
    if let Some(mask) = mask {
        crate::mask::check_len(mask, vocab_size, row.len())?;
    }
    Ok(&row[..vocab_size])
}
