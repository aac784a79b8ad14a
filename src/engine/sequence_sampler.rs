//! [`SequenceSampler`]: what [`Sampler`] and [`Chain`] share, for the callers that take
//! either; and `sequence_methods!`, which writes the inherent methods both have (the
//! history, the sampling calls, the distribution and logprobs) once, with one doc each.

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

/// The methods [`Sampler`] and [`Chain`] share, defined once: `sequence_methods!(Type)`
/// adds them to `Type`, a struct with the fields `engine: Engine` and `bans: BanMask`,
/// as inherent methods (callers need no trait in scope). Each forwards to the engine.
macro_rules! sequence_methods {
    ($ty:ident) => {
        impl $ty {
            /// The vocabulary size.
            pub fn vocab_size(&self) -> usize {
                self.engine.vocab_size()
            }

            /// Appends prompt tokens. Only allowed before the first generated token.
            ///
            /// # Errors
            /// [`Error::TokenOutOfRange`](crate::Error::TokenOutOfRange) for an id
            /// `>= vocab_size`; [`Error::InvalidParameter`](crate::Error::InvalidParameter)
            /// when tokens were already generated.
            pub fn push_prompt(&mut self, tokens: &[$crate::TokenId]) -> Result<(), $crate::Error> {
                let n = self.engine.vocab_size();
                self.engine.seq.push_prompt(tokens, n)
            }

            /// Records a generated token that was not drawn here (a token forced by a
            /// grammar, or accepted from a draft model). It counts for the penalties and
            /// advances the draw counter like a drawn token.
            ///
            /// # Errors
            /// [`Error::TokenOutOfRange`](crate::Error::TokenOutOfRange) for an id
            /// `>= vocab_size`.
            pub fn accept(&mut self, token: $crate::TokenId) -> Result<(), $crate::Error> {
                let n = self.engine.vocab_size();
                self.engine.seq.accept(token, n)
            }

            /// Removes the last `n` generated tokens (at most all of them); the next draw
            /// uses the same uniform as when those tokens were first drawn. Stateful stages
            /// (mirostat's `mu`) keep their state.
            pub fn rollback(&mut self, n: usize) {
                self.engine.seq.rollback(n);
            }

            /// Reserves room for `additional` more history tokens, so that the next
            /// `additional` steps allocate nothing: in the history, the penalties' patches
            /// and every stage's and processor's buffers
            /// ([`Stage::reserve`](crate::Stage::reserve)).
            ///
            /// # Errors
            /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) naming
            /// `additional` when the history would hold more than `isize::MAX / 4` tokens
            /// in all (the most a `Vec` of token ids can);
            /// [`Error::OutOfMemory`](crate::Error::OutOfMemory) when the room cannot be
            /// allocated; whatever a stage's [`Stage::reserve`](crate::Stage::reserve)
            /// returns. The history is unchanged either way.
            pub fn reserve(&mut self, additional: usize) -> Result<(), $crate::Error> {
                self.engine.reserve(additional)
            }

            /// The sequence's tokens so far.
            pub fn history(&self) -> $crate::History<'_> {
                self.engine.seq.view()
            }

            /// Samples the next token from one row of logits and appends it to the
            /// history.
            ///
            /// # Errors
            /// [`Error::EmptyVocabulary`](crate::Error::EmptyVocabulary) for an empty row;
            /// [`Error::VocabLargerThanRow`](crate::Error::VocabLargerThanRow) when the
            /// row is shorter than the vocabulary;
            /// [`Error::NanLogit`](crate::Error::NanLogit) /
            /// [`Error::InfiniteLogit`](crate::Error::InfiniteLogit) for a NaN or `+inf`
            /// among the first `vocab_size` entries (or produced by an adjustment);
            /// [`Error::NoCandidates`](crate::Error::NoCandidates) when every token is
            /// banned; whatever a stage or processor returns. On error the history is
            /// unchanged.
            pub fn sample<T: $crate::Logit>(
                &mut self,
                logits: &[T],
            ) -> Result<$crate::Sample, $crate::Error> {
                self.engine.sample(logits, None, None)
            }

            /// Like [`sample`](Self::sample), with a grammar mask: every token `mask`
            /// disallows becomes `-inf` in the adjustment stage, after the logit bias and
            /// the penalties (in a [`Chain`](crate::Chain), before its first stage). The
            /// result is that of [`TokenMask::apply`](crate::TokenMask::apply) on an
            /// `f32` copy of the row followed by the unmasked pipeline, except that the
            /// raw logprobs are those of the row given.
            ///
            /// The mask is never written into a copy of the row when it can be read
            /// instead. One pass over its words counts the allowed tokens, then:
            /// - **sparse** (at most 1,024 allowed with greedy or a top-k of at most 256,
            ///   4,096 otherwise; e.g. digits, a keyword, a closing bracket): the allowed
            ///   tokens' adjusted logits are gathered, in id order, into a compact row
            ///   inside the sampler, the pipeline runs on that row and the token (and the
            ///   [`distribution`](Self::distribution)'s ids) are mapped back. The result
            ///   is the same as through the masked copy, bit for bit: the compact row
            ///   leaves out only `-inf` entries, which no stage counts
            ///   (`min_tokens_to_keep` never keeps a banned token), and keeps the order
            ///   that breaks ties;
            /// - **any other mask**: the disallowed tokens are marked in a bitset next to
            ///   the bias and penalty patches (one vectorised pass over the mask's words),
            ///   and the row is read in place. Every pass skips the marked tokens: the
            ///   one-pass top-k and greedy selection test a mark only for the few entries
            ///   that beat their running threshold, top-p's candidate selection only in
            ///   the blocks that hold such an entry; the total mass and the histogram test
            ///   them in their vector loops. The same result as through the masked copy,
            ///   bit for bit without bias or penalties; with them, the same cuts and
            ///   token, and probabilities that may differ in the last bits, since the
            ///   histogram's bucket sums take the patched tokens in after the row.
            ///
            /// A user [`LogitsProcessor`](crate::LogitsProcessor), or a stage ahead of a
            /// chain's first cut that needs the whole row, needs the row indexed by
            /// token, so with one the row is copied to `f32` and the mask written into
            /// the copy. In every regime the whole row is checked for NaN and `+inf`,
            /// disallowed tokens included, and nothing allocates once warm.
            ///
            /// # Errors
            /// As [`sample`](Self::sample), and
            /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) when the mask
            /// covers fewer than `vocab_size` slots or more than the row has. A mask as
            /// wide as a padded row (a grammar's, over Qwen3's 151,936 logits) serves a
            /// sampler built for the real vocabulary (151,669 tokens): only the
            /// vocabulary's slots are read. A mask that allows nothing, or allows only
            /// tokens the other adjustments ban, gives
            /// [`Error::NoCandidates`](crate::Error::NoCandidates). A NaN or `+inf`
            /// anywhere in the row is an error even where the mask disallows the token.
            pub fn sample_masked<T: $crate::Logit>(
                &mut self,
                logits: &[T],
                mask: &$crate::TokenMask,
            ) -> Result<$crate::Sample, $crate::Error> {
                self.engine.sample(logits, Some(mask), None)
            }

            /// Like [`sample_masked`](Self::sample_masked) (the mask is optional), with
            /// the tokens `banned` disallowed for this step only: the same result, bit for
            /// bit, as [`sample_masked`](Self::sample_masked) with a
            /// [`TokenMask`](crate::TokenMask) that also disallows them, without the
            /// caller building one. For the per-step bans of a request, such as
            /// [`StopChecker::banned_tokens`](crate::stop::StopChecker::banned_tokens)
            /// (the end-of-sequence tokens before `min_tokens`). One mask of its own is
            /// kept for this, sized on first use: a warm step copies the caller's mask
            /// (or fills its own) and clears a bit per banned id, and allocates nothing.
            /// With nothing banned it is [`sample_masked`](Self::sample_masked) or
            /// [`sample`](Self::sample).
            ///
            /// # Example
            /// ```
            /// use logits::stop::{StopChecker, StopConditions};
            /// use logits::{Sampler, SamplingParams};
            ///
            /// let stop = StopConditions::builder().stop_tokens([0]).min_tokens(2).build()?;
            /// let mut checker = StopChecker::new(&stop);
            /// let mut sampler = Sampler::new(SamplingParams::greedy(), 3)?;
            /// let row = [9.0f32, 1.0, 2.0]; // The end-of-sequence token leads.
            /// let out = sampler.sample_banned(&row, None, checker.banned_tokens())?;
            /// assert_eq!(out.token, 2); // Banned before min_tokens.
            /// # Ok::<(), Box<dyn std::error::Error>>(())
            /// ```
            ///
            /// # Errors
            /// [`Error::TokenOutOfRange`](crate::Error::TokenOutOfRange) for a banned id
            /// `>= vocab_size`, checked first; then as
            /// [`sample_masked`](Self::sample_masked)
            /// ([`Error::NoCandidates`](crate::Error::NoCandidates) when the bans leave
            /// nothing). On error the history is unchanged.
            pub fn sample_banned<T: $crate::Logit>(
                &mut self,
                logits: &[T],
                mask: Option<&$crate::TokenMask>,
                banned: &[$crate::TokenId],
            ) -> Result<$crate::Sample, $crate::Error> {
                let n = self.engine.vocab_size();
                let mask = self.bans.combine(n, mask, banned)?;
                self.engine.sample(logits, mask, None)
            }

            /// Like [`sample_masked`](Self::sample_masked) (the mask is optional), but
            /// draws with the given uniform `u` in `[0, 1)` instead of the sequence's own
            /// `(seed, step)` uniform. For callers that bring their own random numbers,
            /// and for testing a draw against the [`reference`](crate::reference). The
            /// token is appended to the history.
            ///
            /// # Errors
            /// As [`sample_masked`](Self::sample_masked), and
            /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) when `u` is not
            /// in `[0, 1)`.
            pub fn sample_with_uniform<T: $crate::Logit>(
                &mut self,
                logits: &[T],
                mask: Option<&$crate::TokenMask>,
                u: f64,
            ) -> Result<$crate::Sample, $crate::Error> {
                self.engine.sample(logits, mask, Some(u))
            }

            /// The final distribution the next draw would use, without drawing: every
            /// surviving token with its probability, in draw order (adjusted logit
            /// descending, ties to the lower id). Greedy gives the argmax with
            /// probability 1. The history is unchanged; stateful stages see the step as if
            /// it were sampled, but observe no token.
            ///
            /// This is an inspection tool: when no tail cut is set it sorts the whole
            /// vocabulary.
            ///
            /// # Example
            /// ```
            /// use logits::{Chain, Sampler, SamplingParams, Temperature, TopP};
            ///
            /// // The top-p 0.8 worked example.
            /// let probs = [0.574f32, 0.128, 0.100, 0.047, 0.032, 0.029, 0.090];
            /// let row: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
            /// let mut s = Sampler::new(SamplingParams::builder().top_p(0.8).build()?, 7)?;
            /// let mut dist = Vec::new();
            /// s.distribution(&row, None, &mut dist)?;
            /// let ids: Vec<u32> = dist.iter().map(|&(id, _)| id).collect();
            /// assert_eq!(ids, [0, 1, 2]);
            /// assert!((dist[0].1 - 0.716).abs() < 1e-3);
            ///
            /// // The same cut in a chain, with a temperature after it.
            /// let mut chain = Chain::builder(7)
            ///     .stage(TopP::new(0.8)?)
            ///     .stage(Temperature::new(0.5)?)
            ///     .draw()
            ///     .build()?;
            /// chain.distribution(&row, None, &mut dist)?;
            /// let ids: Vec<u32> = dist.iter().map(|&(id, _)| id).collect();
            /// assert_eq!(ids, [0, 1, 2]);
            /// # Ok::<(), logits::Error>(())
            /// ```
            ///
            /// # Errors
            /// As [`sample_masked`](Self::sample_masked).
            pub fn distribution<T: $crate::Logit>(
                &mut self,
                logits: &[T],
                mask: Option<&$crate::TokenMask>,
                out: &mut Vec<($crate::TokenId, f64)>,
            ) -> Result<(), $crate::Error> {
                self.engine.distribution(logits, mask, out)
            }

            /// The final distribution the next draw would use, indexed by token, without
            /// drawing: `out[id]` is token `id`'s probability, 0 for every token the
            /// adjustments, the mask or the cuts removed. Greedy gives 1 at the argmax.
            /// The history is unchanged.
            ///
            /// The same probabilities as [`distribution`](Self::distribution), rounded to
            /// `f32`, but written in place and never sorted. With nothing cut (no top-k,
            /// top-p, min-p or stage), one vectorised pass writes and sums every weight
            /// and a second divides by the sum: each probability within `1e-6` (relative)
            /// of the exact one, or `2e-38` (absolute) below `e^-87`, the same values on
            /// every CPU with fused multiply-add. When a flat row's top-p bounds the
            /// survivors, one pass over the row writes each token's probability from its
            /// `f64` weight `exp((l - max) / T)` (relative error below `4e-15`, then the
            /// rounding to `f32`), and only the few tokens at the cut's boundary are
            /// sorted. `out.len()` must be the vocabulary size; nothing allocates once
            /// warm.
            ///
            /// # Example
            /// ```
            /// use logits::{Chain, LogprobKind, Sampler, SamplingParams, Temperature, TopK};
            ///
            /// // The top-p 0.8 worked example: tokens 0, 1 and 2 survive.
            /// let probs = [0.574f32, 0.128, 0.100, 0.047, 0.032, 0.029, 0.090];
            /// let row: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
            /// let mut s = Sampler::new(SamplingParams::builder().top_p(0.8).build()?, 7)?;
            /// let mut p = vec![0.0f32; 7];
            /// s.probabilities(&row, None, &mut p)?;
            /// assert!((p[0] - 0.716).abs() < 1e-3);
            /// assert_eq!(&p[3..], &[0.0; 4]);
            /// assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
            ///
            /// let mut lp = vec![0.0f32; 7];
            /// s.logprobs_into(&row, None, LogprobKind::Processed, &mut lp)?;
            /// assert!((lp[0] - p[0].ln()).abs() < 1e-6);
            /// assert_eq!(lp[3], f32::NEG_INFINITY);
            /// s.logprobs_into(&row, None, LogprobKind::Raw, &mut lp)?;
            /// assert!((lp[3] - 0.047f32.ln()).abs() < 1e-3);
            /// assert!(s.history().generated().is_empty());
            ///
            /// // llama.cpp's order in a chain: top-k 2, then temperature 0.5.
            /// let row = [2.0f32, 1.0, 0.0, -1.0];
            /// let mut chain = Chain::builder(4)
            ///     .stage(TopK::new(2)?)
            ///     .stage(Temperature::new(0.5)?)
            ///     .draw()
            ///     .build()?;
            /// let mut p = vec![0.0f32; 4];
            /// chain.probabilities(&row, None, &mut p)?;
            /// // Weights exp(0) and exp(-1 / 0.5).
            /// let p0 = 1.0 / (1.0 + (-2.0f64).exp());
            /// assert!((f64::from(p[0]) - p0).abs() < 1e-6);
            /// assert!((f64::from(p[1]) - (1.0 - p0)).abs() < 1e-6);
            /// assert_eq!(&p[2..], &[0.0, 0.0]);
            ///
            /// let mut lp = vec![0.0f32; 4];
            /// chain.logprobs_into(&row, None, LogprobKind::Processed, &mut lp)?;
            /// assert!((f64::from(lp[0]) - p0.ln()).abs() < 1e-6);
            /// assert_eq!(lp[3], f32::NEG_INFINITY);
            /// # Ok::<(), logits::Error>(())
            /// ```
            ///
            /// # Errors
            /// As [`sample_masked`](Self::sample_masked), and
            /// [`Error::LengthMismatch`](crate::Error::LengthMismatch) when `out.len()`
            /// is not the vocabulary size. On error `out` holds no meaningful values.
            pub fn probabilities<T: $crate::Logit>(
                &mut self,
                logits: &[T],
                mask: Option<&$crate::TokenMask>,
                out: &mut [f32],
            ) -> Result<(), $crate::Error> {
                self.engine.probabilities(logits, mask, out, false)
            }

            /// Every token's logprob, indexed by token, without drawing: with
            /// [`LogprobKind::Raw`](crate::LogprobKind::Raw) the log-softmax of `logits`
            /// as given (no adjustment, mask or cut; `mask` is only checked), with
            /// [`LogprobKind::Processed`](crate::LogprobKind::Processed) the natural
            /// logarithm of the final probability of
            /// [`probabilities`](Self::probabilities), `-inf` for every removed token
            /// (greedy: 0 at the argmax). The history is unchanged.
            ///
            /// Processed logprobs are computed as logarithms, not as the logarithm of an
            /// `f32` probability: a survivor far below the maximum keeps a finite logprob
            /// where its probability would round to 0. With nothing cut, and for raw
            /// logprobs, each is `(l - max) / T - ln Z` in `f64`, rounded once, with `Z`
            /// from the vectorised weights of [`probabilities`](Self::probabilities)
            /// (`ln Z` within `4.7e-7`, absolute).
            ///
            /// # Errors
            /// As [`probabilities`](Self::probabilities); for
            /// [`LogprobKind::Raw`](crate::LogprobKind::Raw), only the input checks (the
            /// row's length, NaN and `+inf`, the mask's and `out`'s lengths) and
            /// [`Error::NoCandidates`](crate::Error::NoCandidates) for a row of `-inf`
            /// alone.
            pub fn logprobs_into<T: $crate::Logit>(
                &mut self,
                logits: &[T],
                mask: Option<&$crate::TokenMask>,
                kind: $crate::LogprobKind,
                out: &mut [f32],
            ) -> Result<(), $crate::Error> {
                match kind {
                    $crate::LogprobKind::Raw => self.engine.raw_logprobs(logits, mask, out),
                    $crate::LogprobKind::Processed => {
                        self.engine.probabilities(logits, mask, out, true)
                    }
                }
            }

            /// The mask stage alone, for benchmarks: builds the view of `logits` under
            /// `mask` as [`sample_masked`](Self::sample_masked) would (the compact row,
            /// the marks or, with a processor or a whole-row stage, the masked copy), then
            /// discards it. Returns how many entries that view holds: the allowed tokens,
            /// the marked ones, or the row's length. The row's NaN/`+inf` check is not
            /// part of it, except on the dense path, where the copy makes it.
            ///
            /// Not part of the stable API.
            ///
            /// # Errors
            /// As [`sample_masked`](Self::sample_masked), for the input checks.
            #[doc(hidden)]
            pub fn mask_stage<T: $crate::Logit>(
                &mut self,
                logits: &[T],
                mask: &$crate::TokenMask,
            ) -> Result<usize, $crate::Error> {
                self.engine.mask_stage(logits, mask)
            }
        }
    };
}
pub(crate) use sequence_methods;
