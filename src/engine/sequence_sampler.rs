//! [`SequenceSampler`]: what [`Sampler`] and [`Chain`] share, for the callers that take
//! either.

use crate::chain::Chain;
use crate::element::Logit;
use crate::error::Error;
use crate::grammar::GrammarMask;
use crate::history::History;
use crate::mask::TokenMask;
use crate::sample::Sample;
use crate::sampler::Sampler;
use crate::speculative::{Speculation, Verified, Verifier};
use crate::TokenId;

/// The reusable mask behind `sample_banned`: the caller's mask (or one that allows every
/// token) with the step's banned ids disallowed. Sized on first use and whenever the
/// mask's width changes; otherwise a step only copies the mask's words (or fills them)
/// and clears one bit per banned id.
#[derive(Clone, Debug)]
pub(crate) struct BanMask {
    mask: TokenMask,
}

impl Default for BanMask {
    fn default() -> Self {
        BanMask {
            mask: TokenMask::new_empty(0),
        }
    }
}

impl BanMask {
    /// `mask` with `banned` disallowed, or `mask` itself when nothing is banned.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] for a banned id `>= vocab_size` (checked before
    /// anything else); [`Error::LengthMismatch`] for a mask narrower than the
    /// vocabulary; [`Error::OutOfMemory`] when the mask cannot be sized.
    pub(crate) fn combine<'a>(
        &'a mut self,
        vocab_size: usize,
        mask: Option<&'a TokenMask>,
        banned: &[TokenId],
    ) -> Result<Option<&'a TokenMask>, Error> {
        if let Some(&id) = banned.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(Error::TokenOutOfRange { id, vocab_size });
        }
        if banned.is_empty() {
            return Ok(mask);
        }
        let width = mask.map_or(vocab_size, TokenMask::len);
        if width < vocab_size {
            return Err(Error::LengthMismatch {
                expected: vocab_size,
                actual: width,
            });
        }
        if self.mask.len() != width {
            self.mask = TokenMask::try_new_full(width)?;
        }
        match mask {
            Some(m) => self.mask.words_mut().copy_from_slice(m.words()),
            None => self.mask.fill(true),
        }
        for &id in banned {
            self.mask.disallow(id)?;
        }
        Ok(Some(&self.mask))
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::Sampler {}
    impl Sealed for crate::Chain {}
}

/// One sequence's sampler, whatever its stages: a [`Sampler`] (the documented order) or
/// a [`Chain`] (any order). Both run on the same engine; this trait lets
/// [`BatchSampler`](crate::BatchSampler) and
/// [`GrammarMask::sample`](crate::grammar::GrammarMask::sample) take either.
///
/// Sealed: implemented by [`Sampler`] and [`Chain`] only.
///
/// # Example
/// ```
/// use logits::{Chain, SequenceSampler, TopK};
///
/// fn next<S: SequenceSampler>(s: &mut S, row: &[f32]) -> u32 {
///     s.sample_next(row, None).unwrap().token
/// }
/// let mut chain = Chain::builder(3).stage(TopK::new(1)?).draw().build()?;
/// assert_eq!(next(&mut chain, &[0.0, 2.0, 1.0]), 1);
/// # Ok::<(), logits::Error>(())
/// ```
pub trait SequenceSampler: sealed::Sealed + Send + std::fmt::Debug {
    /// Samples the next token, under `mask` if one is given, and appends it to the
    /// history: [`Sampler::sample_masked`] / [`Chain::sample_masked`], or `sample`
    /// without a mask.
    ///
    /// # Errors
    /// As [`Sampler::sample_masked`].
    fn sample_next<T: Logit>(
        &mut self,
        logits: &[T],
        mask: Option<&TokenMask>,
    ) -> Result<Sample, Error>;

    /// Like [`sample_next`](Self::sample_next), with the tokens `banned` disallowed for
    /// this step: [`Sampler::sample_banned`] / [`Chain::sample_banned`].
    ///
    /// # Errors
    /// As [`Sampler::sample_banned`].
    fn sample_next_banned<T: Logit>(
        &mut self,
        logits: &[T],
        mask: Option<&TokenMask>,
        banned: &[TokenId],
    ) -> Result<Sample, Error>;

    /// Removes the last `n` generated tokens (at most all of them).
    fn rollback(&mut self, n: usize);

    /// The sequence's tokens so far.
    fn history(&self) -> History<'_>;

    /// The vocabulary size.
    fn vocab_size(&self) -> usize;

    /// Speculative verification on this sampler's engine, for
    /// [`Verifier::verify`](crate::Verifier::verify). Not part of the stable API.
    #[doc(hidden)]
    fn verify_with<T: Logit>(
        &mut self,
        verifier: &mut Verifier,
        spec: &Speculation<'_, T>,
        grammar: Option<&mut GrammarMask>,
    ) -> Result<Verified, Error>;
}

/// Both implementations forward to the type's own methods of the same names.
macro_rules! forward {
    ($ty:ident) => {
        impl SequenceSampler for $ty {
            fn sample_next<T: Logit>(
                &mut self,
                logits: &[T],
                mask: Option<&TokenMask>,
            ) -> Result<Sample, Error> {
                match mask {
                    Some(mask) => self.sample_masked(logits, mask),
                    None => self.sample(logits),
                }
            }

            fn sample_next_banned<T: Logit>(
                &mut self,
                logits: &[T],
                mask: Option<&TokenMask>,
                banned: &[TokenId],
            ) -> Result<Sample, Error> {
                self.sample_banned(logits, mask, banned)
            }

            fn rollback(&mut self, n: usize) {
                $ty::rollback(self, n);
            }

            fn history(&self) -> History<'_> {
                $ty::history(self)
            }

            fn vocab_size(&self) -> usize {
                $ty::vocab_size(self)
            }

            fn verify_with<T: Logit>(
                &mut self,
                verifier: &mut Verifier,
                spec: &Speculation<'_, T>,
                grammar: Option<&mut GrammarMask>,
            ) -> Result<Verified, Error> {
                verifier.verify_in(&mut self.engine, spec, grammar)
            }
        }
    };
}

forward!(Sampler);
forward!(Chain);
