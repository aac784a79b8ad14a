//! [`TokenMask`]: the allowed-token bitset that the grammar stage applies to a logits row.

use crate::error::Error;
use crate::TokenId;

/// Bit `j` of a mask word at index `j`: a per-lane constant, so that a loop over the 32
/// entries of a word compiles to branch-free vector and/compare/select instead of 32
/// data-dependent branches.
pub(crate) const BITS: [u32; 32] = {
    let mut bits = [0u32; 32];
    let mut j = 0;
    while j < 32 {
        bits[j] = 1 << j;
        j += 1;
    }
    bits
};

/// A set of allowed token ids, stored as a bitset of `u32` words.
///
/// Bit `id % 32` of word `id / 32` is set when token `id` may come next. This is the layout
/// that llguidance's `SimpleVob` and XGrammar's bitmask rows use, so an engine's mask can be
/// copied in word by word.
///
/// A mask is sized for one logits row (`len` slots). It is built once and refilled every step,
/// so the grammar stage allocates nothing per token.
///
/// # Example
/// ```
/// use logits::TokenMask;
///
/// let mut mask = TokenMask::new_empty(100);
/// mask.allow(7)?;
/// mask.allow(42)?;
/// let mut row = vec![1.0_f32; 100];
/// mask.apply(&mut row)?;
/// assert_eq!(row[7], 1.0);
/// assert_eq!(row[8], f32::NEG_INFINITY);
/// assert_eq!(mask.count_allowed(), 2);
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u32>,
    len: usize,
}

impl TokenMask {
    /// A mask over `len` token slots with no token allowed.
    ///
    /// # Panics
    /// When `len` exceeds [`MAX_VOCAB_SIZE`](crate::MAX_VOCAB_SIZE), or its words cannot
    /// be allocated. [`try_new_empty`](Self::try_new_empty) returns an error instead.
    pub fn new_empty(len: usize) -> Self {
        match Self::try_new_empty(len) {
            Ok(mask) => mask,
            Err(e) => panic!("TokenMask::new_empty({len}): {e}"),
        }
    }

    /// A mask over `len` token slots with every token allowed.
    ///
    /// # Panics
    /// As [`new_empty`](Self::new_empty); [`try_new_full`](Self::try_new_full) returns an
    /// error instead.
    pub fn new_full(len: usize) -> Self {
        let mut mask = Self::new_empty(len);
        mask.fill(true);
        mask
    }

    /// A mask over `len` token slots with no token allowed, for a `len` that comes from
    /// outside the program.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] (named `len`) when `len` exceeds
    /// [`MAX_VOCAB_SIZE`](crate::MAX_VOCAB_SIZE); [`Error::OutOfMemory`] when its words
    /// cannot be allocated. It never aborts.
    ///
    /// # Example
    /// ```
    /// use logits::TokenMask;
    ///
    /// assert_eq!(TokenMask::try_new_empty(151_936)?.count_allowed(), 0);
    /// assert!(TokenMask::try_new_empty(usize::MAX).is_err());
    /// # Ok::<(), logits::Error>(())
    /// ```
    pub fn try_new_empty(len: usize) -> Result<Self, Error> {
        if len > crate::MAX_VOCAB_SIZE {
            return Err(Error::InvalidParameter {
                name: "len",
                value: len as f64,
                expected: "at most MAX_VOCAB_SIZE token slots",
            });
        }
        let n = len.div_ceil(32);
        let mut words = Vec::new();
        words.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
            name: "len",
            value: len,
        })?;
        words.resize(n, 0);
        Ok(TokenMask { words, len })
    }

    /// A mask over `len` token slots with every token allowed; as
    /// [`try_new_empty`](Self::try_new_empty).
    ///
    /// # Errors
    /// As [`try_new_empty`](Self::try_new_empty).
    pub fn try_new_full(len: usize) -> Result<Self, Error> {
        let mut mask = Self::try_new_empty(len)?;
        mask.fill(true);
        Ok(mask)
    }

    /// Number of token slots the mask covers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the mask covers no token slot.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bitset words, `len().div_ceil(32)` of them. Bits past `len()` are always zero.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// Mutable access to the bitset words, for engines that fill the mask directly.
    ///
    /// Bits past `len()` must stay zero; [`TokenMask::clear_tail`] restores that.
    pub fn words_mut(&mut self) -> &mut [u32] {
        &mut self.words
    }

    /// Zeroes the bits past `len()` in the last word.
    pub fn clear_tail(&mut self) {
        let rem = self.len % 32;
        if rem != 0 {
            if let Some(last) = self.words.last_mut() {
                *last &= (1u32 << rem) - 1;
            }
        }
    }

    /// Sets every slot to `allowed`.
    pub fn fill(&mut self, allowed: bool) {
        let v = if allowed { u32::MAX } else { 0 };
        self.words.iter_mut().for_each(|w| *w = v);
        self.clear_tail();
    }

    /// Allows token `id`.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] when `id >= len()`.
    pub fn allow(&mut self, id: TokenId) -> Result<(), Error> {
        self.set(id, true)
    }

    /// Disallows token `id`.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] when `id >= len()`.
    pub fn disallow(&mut self, id: TokenId) -> Result<(), Error> {
        self.set(id, false)
    }

    fn set(&mut self, id: TokenId, allowed: bool) -> Result<(), Error> {
        let i = id as usize;
        if i >= self.len {
            return Err(Error::TokenOutOfRange {
                id,
                vocab_size: self.len,
            });
        }
        let bit = 1u32 << (i % 32);
        if allowed {
            self.words[i / 32] |= bit;
        } else {
            self.words[i / 32] &= !bit;
        }
        Ok(())
    }

    /// True when token `id` is allowed; false for ids past `len()`.
    #[inline]
    pub fn is_allowed(&self, id: TokenId) -> bool {
        let i = id as usize;
        i < self.len && self.words[i / 32] & (1u32 << (i % 32)) != 0
    }

    /// Number of allowed tokens.
    pub fn count_allowed(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Sets every disallowed entry of `logits` to `-inf`.
    ///
    /// Whole words that are all ones are skipped and whole words that are all zeros are
    /// written without testing bits, so a mostly-open or mostly-closed mask costs little
    /// more than one pass over its words.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `logits.len() != len()`.
    pub fn apply(&self, logits: &mut [f32]) -> Result<(), Error> {
        if logits.len() != self.len {
            return Err(Error::LengthMismatch {
                expected: self.len,
                actual: logits.len(),
            });
        }
        self.apply_prefix(logits);
        Ok(())
    }

    /// [`apply`](Self::apply) to the first `logits.len()` slots (at most `len`): how a
    /// sampler applies a mask as wide as a padded row to the vocabulary's part of it.
    pub(crate) fn apply_prefix(&self, logits: &mut [f32]) {
        debug_assert!(logits.len() <= self.len);
        let last = logits.len() / 32;
        let mut chunks = logits.chunks_exact_mut(32);
        for (chunk, &word) in (&mut chunks).zip(&self.words) {
            match word {
                u32::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                // Mostly allowed: write only the few disallowed slots.
                _ if word.count_ones() >= 24 => {
                    let mut zeros = !word;
                    while zeros != 0 {
                        chunk[zeros.trailing_zeros() as usize] = f32::NEG_INFINITY;
                        zeros &= zeros - 1;
                    }
                }
                _ => {
                    for (l, &bit) in chunk.iter_mut().zip(&BITS) {
                        *l = if word & bit != 0 {
                            *l
                        } else {
                            f32::NEG_INFINITY
                        };
                    }
                }
            }
        }
        let tail = chunks.into_remainder();
        if let Some(&word) = self.words.get(last) {
            for (l, &bit) in tail.iter_mut().zip(&BITS) {
                if word & bit == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
    }
}

/// Checks a mask's length for a sampler over `vocab_size` tokens and a row of
/// `row_len` entries: it covers at least the vocabulary and at most the row, so a
/// grammar's mask over a padded row (Qwen3: 151,936 slots for 151,669 tokens) serves a
/// sampler built for the real vocabulary. Only the vocabulary's slots are read.
///
/// # Errors
/// [`Error::LengthMismatch`] (expecting `vocab_size`) otherwise.
pub(crate) fn check_len(mask: &TokenMask, vocab_size: usize, row_len: usize) -> Result<(), Error> {
    if mask.len() < vocab_size || mask.len() > row_len.max(vocab_size) {
        return Err(Error::LengthMismatch {
            expected: vocab_size,
            actual: mask.len(),
        });
    }
    Ok(())
}
