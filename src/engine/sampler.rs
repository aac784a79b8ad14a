//! [`Sampler`]: one sequence's sampling state, in the documented order.

use crate::element::Logit;
use crate::engine::{End, Engine, Plan};
use crate::error::Error;
use crate::history::History;
use crate::logprobs::LogprobKind;
use crate::mask::TokenMask;
use crate::params::SamplingParams;
use crate::processor::{LogitsProcessor, ProcessorStage};
use crate::rng::DrawRng;
use crate::sample::Sample;
use crate::sequence_sampler::BanMask;
use crate::TokenId;

/// Samples the tokens of one sequence.
///
/// A `Sampler` owns validated [`SamplingParams`], the vocabulary size, the sequence's
/// token history (for the penalties, and to number the draws) and the scratch buffers
/// every step reuses. Build one per sequence; reuse it for every token.
///
/// Each call to [`sample`](Self::sample) runs the pipeline in its documented order
/// (adjustments, temperature, softmax, top-k, top-p, min-p, draw), appends the drawn token
/// to the history and returns a [`Sample`]. Draw number `n` of a sequence uses the uniform
/// keyed by `(seed, n)` where `n` counts the generated tokens in the history, so the
/// result depends on nothing but the seed, the parameters, the history and the logits.
///
/// # Example
/// ```
/// use logits::{Sampler, SamplingParams};
///
/// let params = SamplingParams::builder().temperature(0.6).top_k(20).top_p(0.95).seed(7).build()?;
/// let mut sampler = Sampler::new(params, 5)?;
/// sampler.push_prompt(&[1, 2])?;
/// let out = sampler.sample(&[22.38f32, 20.88, 20.62, 19.88, 19.50])?;
/// assert!(out.token < 5);
/// assert_eq!(sampler.history().generated(), &[out.token]);
/// # Ok::<(), logits::Error>(())
/// ```
///
/// # Serving
/// A `Sampler` is `Clone`: a clone owns its history, its processors' state and its
/// buffers (nothing is shared). [`fork`](Self::fork) clones with a derived seed, for `n`
/// samples of one prompt; [`set_params`](Self::set_params) starts a new request on a
/// warm sampler; [`sample_banned`](Self::sample_banned) bans a few tokens for one step
/// without building a [`TokenMask`].
#[derive(Clone, Debug)]
pub struct Sampler {
    pub(crate) engine: Engine,
    bans: BanMask,
}

impl Sampler {
    /// A sampler for a vocabulary of `vocab_size` tokens.
    ///
    /// Rows may be longer than the vocabulary (models pad their logits: Qwen3 has 151,669
    /// tokens and 151,936 logits); entries past `vocab_size` are never read, so a padding
    /// id is never returned.
    ///
    /// # Errors
    /// [`Error::EmptyVocabulary`] when `vocab_size == 0`; [`Error::InvalidParameter`]
    /// naming `vocab_size` beyond [`MAX_VOCAB_SIZE`](crate::MAX_VOCAB_SIZE);
    /// [`Error::OutOfMemory`] when the buffers for `vocab_size` tokens cannot be
    /// allocated; [`Error::TokenOutOfRange`] for a logit-bias id `>= vocab_size`.
    pub fn new(params: SamplingParams, vocab_size: usize) -> Result<Self, Error> {
        let end = if params.is_greedy() {
            End::Greedy
        } else {
            End::Draw
        };
        let plan = Plan {
            params,
            stages: Vec::new(),
            lead: 0,
            pre: 0,
            group: 0,
            end,
            draw_temperature: None,
        };
        Ok(Sampler {
            engine: Engine::new(plan, vocab_size)?,
            bans: BanMask::default(),
        })
    }

    /// Sample `i` of `n` samples of one prompt: a clone (history, processors, buffers)
    /// whose draws use the seed [`DrawRng::fork_seed`]`(seed, i)`. Fork 0 keeps the
    /// seed, so sample 0 draws exactly what this sampler would, whatever `n`; forks
    /// `1..n` draw independently of it and of each other, and each is reproducible from
    /// `(seed, i)` alone. Fork after the prompt is pushed to share it; the forks' later
    /// histories are their own.
    ///
    /// # Example
    /// ```
    /// use logits::{Sampler, SamplingParams};
    ///
    /// let mut base = Sampler::new(SamplingParams::builder().seed(3).build()?, 4)?;
    /// base.push_prompt(&[1, 2])?;
    /// let row = [0.5f32, 0.4, 0.3, 0.2];
    /// // Four samples (best-of, parallel sampling): sample 0 is the un-forked draw.
    /// let mut forks: Vec<Sampler> = (0..4).map(|i| base.fork(i)).collect();
    /// let first = forks[0].sample(&row)?.token;
    /// assert_eq!(first, base.sample(&row)?.token);
    /// assert_eq!(forks[1].params().seed(), logits::DrawRng::fork_seed(3, 1));
    /// assert_eq!(forks[1].history().prompt(), &[1, 2]);
    /// # Ok::<(), logits::Error>(())
    /// ```
    #[must_use]
    pub fn fork(&self, i: u64) -> Self {
        let mut s = self.clone();
        s.engine
            .set_seed(DrawRng::fork_seed(self.params().seed(), i));
        s
    }

    /// Starts a new request on this sampler: `params` replace the parameters, the
    /// history is cleared (prompt and generated tokens), and the processors are kept
    /// and [`reset`](crate::Stage::reset). The result is that of
    /// [`Sampler::new`]`(params, vocab_size)` with the same processors added, token for
    /// token; the buffers stay, so nothing is allocated for the same vocabulary (only a
    /// longer logit-bias list or penalty window than before grows the patch list).
    ///
    /// # Example
    /// ```
    /// use logits::{Sampler, SamplingParams};
    ///
    /// let mut sampler = Sampler::new(SamplingParams::greedy(), 3)?;
    /// sampler.push_prompt(&[0])?;
    /// sampler.sample(&[0.0f32, 1.0, 0.0])?;
    /// // The next request, on the warm sampler.
    /// sampler.set_params(SamplingParams::builder().seed(11).top_k(2).build()?)?;
    /// assert!(sampler.history().tokens().is_empty());
    /// assert_eq!(sampler.params().seed(), 11);
    /// // A bias on a token outside the vocabulary is refused, and nothing changes.
    /// let bad = SamplingParams::builder().logit_bias(3, 1.0).build()?;
    /// assert!(sampler.set_params(bad).is_err());
    /// assert_eq!(sampler.params().seed(), 11);
    /// # Ok::<(), logits::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Sampler::new`] for the parameters: [`Error::TokenOutOfRange`] for a
    /// logit-bias id `>= vocab_size`, [`Error::OutOfMemory`] when the patch list cannot
    /// grow. On error the sampler is unchanged (parameters, history, state).
    pub fn set_params(&mut self, params: SamplingParams) -> Result<(), Error> {
        let end = if params.is_greedy() {
            End::Greedy
        } else {
            End::Draw
        };
        self.engine.set_params(params, end)
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        self.engine.params()
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.engine.vocab_size()
    }

    /// Adds a user-defined processor, run after the built-in adjustments.
    pub fn add_processor(&mut self, processor: Box<dyn LogitsProcessor>) {
        let stage = ProcessorStage::new(processor, self.engine.vocab_size());
        self.engine.push_whole_row_stage(Box::new(stage));
    }

    /// Appends prompt tokens. Only allowed before the first generated token.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`; [`Error::InvalidParameter`]
    /// when tokens were already generated.
    pub fn push_prompt(&mut self, tokens: &[TokenId]) -> Result<(), Error> {
        let n = self.engine.vocab_size();
        self.engine.seq.push_prompt(tokens, n)
    }

    /// Records a generated token that was not drawn by this sampler (a token forced by a
    /// grammar, or accepted from a draft model). It counts for the penalties and advances
    /// the draw counter like a drawn token.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`.
    pub fn accept(&mut self, token: TokenId) -> Result<(), Error> {
        let n = self.engine.vocab_size();
        self.engine.seq.accept(token, n)
    }

    /// Removes the last `n` generated tokens (at most all of them); the next draw uses the
    /// same uniform as when those tokens were first drawn.
    pub fn rollback(&mut self, n: usize) {
        self.engine.seq.rollback(n);
    }

    /// Forgets the history (prompt and generated tokens); parameters and buffers stay.
    pub fn reset(&mut self) {
        self.engine.reset();
    }

    /// Reserves room for `additional` more history tokens, so that the next
    /// `additional` steps allocate nothing: in the history, the penalties' patches and
    /// every processor's buffers ([`Stage::reserve`](crate::Stage::reserve)).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `additional` when the history would hold more
    /// than `isize::MAX / 4` tokens in all (the most a `Vec` of token ids can);
    /// [`Error::OutOfMemory`] when the room cannot be allocated. The history is
    /// unchanged either way.
    pub fn reserve(&mut self, additional: usize) -> Result<(), Error> {
        self.engine.reserve(additional)
    }

    /// The sequence's tokens so far.
    pub fn history(&self) -> History<'_> {
        self.engine.seq.view()
    }

    /// Samples the next token from one row of logits and appends it to the history.
    ///
    /// # Errors
    /// [`Error::EmptyVocabulary`] for an empty row; [`Error::VocabLargerThanRow`] when the
    /// row is shorter than the vocabulary; [`Error::NanLogit`] / [`Error::InfiniteLogit`]
    /// for a NaN or `+inf` among the first `vocab_size` entries (or produced by an
    /// adjustment); [`Error::NoCandidates`] when every token is banned. On error the
    /// history is unchanged.
    pub fn sample<T: Logit>(&mut self, logits: &[T]) -> Result<Sample, Error> {
        self.engine.sample(logits, None, None)
    }

    /// Like [`sample`](Self::sample), with a grammar mask: every token `mask` disallows
    /// becomes `-inf` in the adjustment stage, after the logit bias and the penalties.
    /// The result is that of [`TokenMask::apply`] on an `f32` copy of the row followed by
    /// the unmasked pipeline, except that the raw logprobs are those of the row given.
    ///
    /// The mask is never written into a copy of the row when it can be read instead. One
    /// pass over its words counts the allowed tokens, then:
    /// - **sparse** (at most 1,024 allowed with greedy or a top-k of at most 256, 4,096
    ///   otherwise; e.g. digits, a keyword, a closing bracket): the allowed tokens'
    ///   adjusted logits are gathered, in id order, into a compact row inside the
    ///   sampler, the pipeline runs on that row and the token (and the
    ///   [`distribution`](Self::distribution)'s ids) are mapped back. The result is the
    ///   same as through the masked copy, bit for bit: the compact row leaves out only
    ///   `-inf` entries, which no stage counts (`min_tokens_to_keep` never keeps a banned
    ///   token), and keeps the order that breaks ties;
    /// - **any other mask**: the disallowed tokens are marked in a bitset next to the
    ///   bias and penalty patches (one vectorised pass over the mask's words), and the
    ///   row is read in place. Every pass skips the marked tokens: the one-pass top-k
    ///   and greedy selection test a mark only for the few entries that beat their
    ///   running threshold, top-p's candidate selection only in the blocks that hold
    ///   such an entry; the total mass and the
    ///   histogram test them in their vector loops. The same result as through the
    ///   masked copy, bit for bit without bias or penalties; with them, the same cuts
    ///   and token, and probabilities that may differ in the last bits, since the
    ///   histogram's bucket sums take the patched tokens in after the row.
    ///
    /// A user [`LogitsProcessor`] needs the whole row, so with one the row is copied to
    /// `f32` and the mask written into the copy. In every regime the whole row is checked for NaN and `+inf`, disallowed
    /// tokens included, and nothing allocates once warm.
    ///
    /// # Errors
    /// As [`sample`](Self::sample), and [`Error::LengthMismatch`] when the mask covers
    /// fewer than `vocab_size` slots or more than the row has. A mask as wide as a padded
    /// row (a grammar's, over Qwen3's 151,936 logits) serves a sampler built for the
    /// real vocabulary (151,669 tokens): only the vocabulary's slots are read. A mask that allows nothing, or allows only
    /// tokens the other adjustments ban, gives [`Error::NoCandidates`]. A NaN or `+inf`
    /// anywhere in the row is an error even where the mask disallows the token.
    pub fn sample_masked<T: Logit>(
        &mut self,
        logits: &[T],
        mask: &TokenMask,
    ) -> Result<Sample, Error> {
        self.engine.sample(logits, Some(mask), None)
    }

    /// Like [`sample_masked`](Self::sample_masked) (the mask is optional), with the
    /// tokens `banned` disallowed for this step only: the same result, bit for bit, as
    /// [`sample_masked`](Self::sample_masked) with a [`TokenMask`] that also disallows
    /// them, without the caller building one. For the per-step bans of a request, such
    /// as [`StopChecker::banned_tokens`](crate::stop::StopChecker::banned_tokens) (the
    /// end-of-sequence tokens before `min_tokens`). The sampler keeps one mask of its
    /// own for this, sized on first use: a warm step copies the caller's mask (or fills
    /// its own) and clears a bit per banned id, and allocates nothing. With nothing
    /// banned it is [`sample_masked`](Self::sample_masked) or [`sample`](Self::sample).
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
    /// [`Error::TokenOutOfRange`] for a banned id `>= vocab_size`, checked first; then
    /// as [`sample_masked`](Self::sample_masked) ([`Error::NoCandidates`] when the bans
    /// leave nothing). On error the history is unchanged.
    pub fn sample_banned<T: Logit>(
        &mut self,
        logits: &[T],
        mask: Option<&TokenMask>,
        banned: &[TokenId],
    ) -> Result<Sample, Error> {
        let n = self.engine.vocab_size();
        let mask = self.bans.combine(n, mask, banned)?;
        self.engine.sample(logits, mask, None)
    }

    /// Like [`sample_masked`](Self::sample_masked) (the mask is optional), but draws with
    /// the given uniform `u` in `[0, 1)` instead of the sequence's own `(seed, step)`
    /// uniform. For callers that bring their own random numbers, and for testing a draw
    /// against the [`reference`](crate::reference). The token is appended to the history.
    ///
    /// # Errors
    /// As [`sample_masked`](Self::sample_masked), and [`Error::InvalidParameter`] when `u`
    /// is not in `[0, 1)`.
    pub fn sample_with_uniform<T: Logit>(
        &mut self,
        logits: &[T],
        mask: Option<&TokenMask>,
        u: f64,
    ) -> Result<Sample, Error> {
        self.engine.sample(logits, mask, Some(u))
    }

    /// The final distribution the next draw would use, without drawing: every surviving
    /// token with its probability, in draw order (adjusted logit descending, ties to the
    /// lower id). Greedy gives the argmax with probability 1. The history is unchanged.
    ///
    /// This is an inspection tool: when no tail cut is set it sorts the whole vocabulary.
    ///
    /// # Example
    /// ```
    /// use logits::{Sampler, SamplingParams};
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
    /// # Ok::<(), logits::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`sample_masked`](Self::sample_masked).
    pub fn distribution<T: Logit>(
        &mut self,
        logits: &[T],
        mask: Option<&TokenMask>,
        out: &mut Vec<(TokenId, f64)>,
    ) -> Result<(), Error> {
        self.engine.distribution(logits, mask, out)
    }

    /// The final distribution the next draw would use, indexed by token, without
    /// drawing: `out[id]` is token `id`'s probability, 0 for every token the
    /// adjustments, the mask or the cuts removed. Greedy gives 1 at the argmax. The
    /// history is unchanged.
    ///
    /// The same probabilities as [`distribution`](Self::distribution), rounded to
    /// `f32`, but written in place and never sorted: when no cut bounds the survivors
    /// (no top-k, top-p or min-p, or a flat row's top-p), one pass over the row writes
    /// each token's probability from its `f64` weight `exp((l - max) / T)` (relative
    /// error below `4e-15`, then the rounding to `f32`), and only the few tokens at the
    /// cut's boundary are sorted. `out.len()` must be the vocabulary size; nothing
    /// allocates once warm.
    ///
    /// # Example
    /// ```
    /// use logits::{LogprobKind, Sampler, SamplingParams};
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
    /// # Ok::<(), logits::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`sample_masked`](Self::sample_masked), and [`Error::LengthMismatch`] when
    /// `out.len()` is not the vocabulary size. On error `out` holds no meaningful
    /// values.
    pub fn probabilities<T: Logit>(
        &mut self,
        logits: &[T],
        mask: Option<&TokenMask>,
        out: &mut [f32],
    ) -> Result<(), Error> {
        self.engine.probabilities(logits, mask, out, false)
    }

    /// Every token's logprob, indexed by token, without drawing: with
    /// [`LogprobKind::Raw`] the log-softmax of `logits` as given (no adjustment, mask or
    /// cut; `mask` is only checked), with [`LogprobKind::Processed`] the natural
    /// logarithm of the final probability of [`probabilities`](Self::probabilities),
    /// `-inf` for every removed token (greedy: 0 at the argmax). The history is
    /// unchanged.
    ///
    /// Processed logprobs are computed as logarithms, not as the logarithm of an `f32`
    /// probability: a survivor far below the maximum keeps a finite logprob where its
    /// probability would round to 0.
    ///
    /// # Errors
    /// As [`probabilities`](Self::probabilities); for [`LogprobKind::Raw`], only the
    /// input checks (the row's length, NaN and `+inf`, the mask's and `out`'s lengths)
    /// and [`Error::NoCandidates`] for a row of `-inf` alone.
    pub fn logprobs_into<T: Logit>(
        &mut self,
        logits: &[T],
        mask: Option<&TokenMask>,
        kind: LogprobKind,
        out: &mut [f32],
    ) -> Result<(), Error> {
        match kind {
            LogprobKind::Raw => self.engine.raw_logprobs(logits, mask, out),
            LogprobKind::Processed => self.engine.probabilities(logits, mask, out, true),
        }
    }

    /// The mask stage alone, for benchmarks: builds the sampler's view of `logits` under
    /// `mask` as [`sample_masked`](Self::sample_masked) would (the compact row, the
    /// marks or, with a processor, the masked copy), then discards it. Returns how many
    /// entries that view holds: the allowed tokens, the marked ones, or the row's length.
    /// The row's NaN/`+inf` check is not part of it, except on the dense path, where the
    /// copy makes it.
    ///
    /// Not part of the stable API.
    ///
    /// # Errors
    /// As [`sample_masked`](Self::sample_masked), for the input checks.
    #[doc(hidden)]
    pub fn mask_stage<T: Logit>(&mut self, logits: &[T], mask: &TokenMask) -> Result<usize, Error> {
        self.engine.mask_stage(logits, mask)
    }
}
