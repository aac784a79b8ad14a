//! [`Scratch`]: the buffers one sampler reuses on every step.

use std::collections::TryReserveError;

use crate::TokenId;

/// Reusable buffers, sized once for a vocabulary and reused by every step, so sampling
/// allocates nothing once warm. Owned by a [`Sampler`](crate::Sampler).
#[derive(Clone, Debug, Default)]
pub(crate) struct Scratch {
    /// Per-token occurrence counts for the penalties; all zero between steps.
    pub(crate) counts: Vec<u32>,
    /// The sparse adjustments as patches over the caller's row.
    pub(crate) overlay: crate::adjust::Overlay,
    /// The adjusted logits of the allowed tokens of a sparse mask, in id order, and
    /// their ids: the compact row the sampler reads instead of a masked copy.
    pub(crate) compact: Vec<f32>,
    pub(crate) compact_ids: Vec<TokenId>,
    /// An adjusted `f32` row for the rare paths that need one
    /// (grown on first use).
    pub(crate) spare: Vec<f32>,
    /// Candidates, sorted by logit descending then id ascending.
    pub(crate) cand: Vec<(f32, TokenId)>,
    /// The candidates' weights `exp((l - max) / T)`, same order.
    pub(crate) weight: Vec<f64>,
    /// A second candidate list (one histogram bucket, for the draw) and its weights.
    pub(crate) cand2: Vec<(f32, TokenId)>,
    pub(crate) weight2: Vec<f64>,
    /// Min-p's survivors on a flat row, every finite token of a flat row drawn whole,
    /// or the tokens of the window that a draw from the row in place searches, in id
    /// order (not draw order): their adjusted logits and their ids (see
    /// [`flat`](crate::flat)), with room for a whole row and one vector more.
    pub(crate) flat: Vec<f32>,
    pub(crate) flat_ids: Vec<TokenId>,
    /// The fast weights of `flat`, same order.
    pub(crate) flat_w: Vec<f32>,
    /// The entries of `flat` within the draw's window: their logits, their indices
    /// into `flat` and (once the window is compacted) their fast weights. Before that,
    /// `win_w` holds the fast weights of `seeds` for a whole row's first search points
    /// (or the window a draw from the row in place reads).
    pub(crate) win: Vec<f32>,
    pub(crate) win_at: Vec<TokenId>,
    pub(crate) win_w: Vec<f32>,
    /// The entries of a compacted window (`win`) within a narrower one: their logits
    /// and their places in `win`. A compacted window holds at most half of `flat`, so
    /// these have room for half a row and two vectors more.
    pub(crate) win2: Vec<f32>,
    pub(crate) win2_at: Vec<TokenId>,
    /// Histogram: count and mass per bucket.
    pub(crate) hist_count: Vec<u32>,
    pub(crate) hist_mass: Vec<f64>,
    /// The same buckets' masses at the draw's temperature (the first `SLOTS` entries,
    /// the rest the pass's scratch), when the last histogram pass filled them too
    /// (`hist_second` is that temperature; see `Engine::reframe`).
    pub(crate) hist_mass2: Vec<f64>,
    pub(crate) hist_second: Option<f32>,
    /// Packed candidate keys ([`pack`](crate::order::pack)): the buffered top-k
    /// selection's, and those through which a candidate set is sorted
    /// ([`order::sort`](crate::order::sort)). Dead between those uses.
    pub(crate) keys: Vec<u64>,
    /// The entries that selection samples (one per block) for its starting threshold.
    pub(crate) seeds: Vec<f32>,
    /// The largest entry of each whole block of the row, which an entropy pass records
    /// for the collection after it (see [`for_each_block_bits`](crate::simd::for_each_block_bits)).
    pub(crate) block_max: Vec<f32>,
    /// `Some(bans)` when `block_max` holds the maxima of the row the engine is drawing
    /// from, of which `bans` may be tokens banned since, so that the draw from its best
    /// tokens selects them from the maxima
    /// ([`select_by_maxima`](crate::select::select_by_maxima)). Set for the draws of
    /// [`Engine::run_dyn_temp`](super::Engine::run_dyn_temp) and
    /// [`Engine::run_xtc`](super::Engine::run_xtc) alone.
    pub(crate) maxima_ready: Option<usize>,
    /// The keys that selection found beyond the best `k` (see
    /// [`select_buffered`](crate::select::select_buffered)).
    pub(crate) rest: Vec<u64>,
    /// How to take a second uniform, above the draw's, that a draw also tests (from the
    /// whole row's best tokens, [`draw_from_best`](super::draw_from_best); a flat row's
    /// search; a prefix); `reached` tells whether it picked the same token. Set for one
    /// draw by
    /// [`Engine::draw_at_both`](super::Engine::draw_at_both).
    pub(crate) reach: Option<super::Reach>,
    pub(crate) reached: bool,
}

impl Scratch {
    /// Buffers for a vocabulary of `vocab_size`, with room for a compact row of
    /// `compact` tokens. Every buffer is reserved before any is filled, so a vocabulary
    /// too large for memory fails before it touches a page.
    ///
    /// # Errors
    /// When the allocator cannot provide a buffer.
    pub(crate) fn new(vocab_size: usize, compact: usize) -> Result<Self, TryReserveError> {
        let mut counts = with_capacity(vocab_size)?;
        let s = Scratch {
            compact: with_capacity(compact)?,
            compact_ids: with_capacity(compact)?,
            cand2: with_capacity(vocab_size)?,
            weight2: with_capacity(vocab_size)?,
            cand: with_capacity(vocab_size)?,
            weight: with_capacity(vocab_size)?,
            flat: with_capacity(vocab_size + crate::adjust::LANES)?,
            flat_ids: with_capacity(vocab_size + crate::adjust::LANES)?,
            flat_w: with_capacity(vocab_size + crate::adjust::LANES)?,
            win: with_capacity(vocab_size + crate::adjust::LANES)?,
            win_at: with_capacity(vocab_size + crate::adjust::LANES)?,
            win_w: with_capacity(vocab_size + crate::adjust::LANES)?,
            win2: with_capacity(vocab_size / 2 + 2 * crate::adjust::LANES)?,
            win2_at: with_capacity(vocab_size / 2 + 2 * crate::adjust::LANES)?,
            seeds: with_capacity(vocab_size / crate::adjust::BLOCK + 1)?,
            block_max: with_capacity(vocab_size / crate::adjust::BLOCK + 1)?,
            overlay: crate::adjust::Overlay::try_new(vocab_size)?,
            counts: Vec::new(),
            spare: Vec::new(),
            hist_count: vec![0; crate::histogram::SLOTS],
            hist_mass: vec![0.0; crate::histogram::SLOTS],
            hist_mass2: vec![0.0; 2 * crate::histogram::SLOTS],
            hist_second: None,
            // (The selection's keys, and a sorted set's, are distinct tokens, unmarked
            // entries or patches: at most the vocabulary, so no step grows them, whatever
            // its `k`.)
            keys: with_capacity(vocab_size)?,
            rest: with_capacity(vocab_size)?,
            reach: None,
            reached: false,
            maxima_ready: None,
        };
        counts.resize(vocab_size, 0);
        Ok(Scratch { counts, ..s })
    }
}

/// An empty vector with room for `n` elements, or the allocator's refusal.
pub(crate) fn with_capacity<T>(n: usize) -> Result<Vec<T>, TryReserveError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)?;
    Ok(v)
}

/// Grows `v` so that it holds `n` elements without reallocating, or the allocator's
/// refusal (`v` is then unchanged).
pub(crate) fn reserve_total<T>(v: &mut Vec<T>, n: usize) -> Result<(), TryReserveError> {
    v.try_reserve(n.saturating_sub(v.len()))
}
