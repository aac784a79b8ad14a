//! [`Sampler`]: one sequence's sampling state, and the fast path of the pipeline.

use crate::element::Logit;
use crate::error::Error;
use crate::history::{History, Sequence};
use crate::mask::TokenMask;
use crate::params::SamplingParams;
use crate::processor::LogitsProcessor;
use crate::rng::DrawRng;
use crate::sample::Sample;
use crate::scratch::Scratch;
use crate::TokenId;
use crate::{adjust, bias, draw, greedy, histogram, logprobs, min_p, penalty, top_k, top_p};

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
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    vocab_size: usize,
    seq: Sequence,
    processors: Vec<Box<dyn LogitsProcessor>>,
    rng: DrawRng,
    scratch: Scratch,
}

/// Where the survivors of the tail cuts are, once they are known.
#[derive(Clone, Copy, Debug)]
enum Survivors {
    /// `scratch.cand[..n]` with weights `scratch.weight[..n]` summing to `total`.
    Prefix { n: usize, total: f64 },
    /// Every finite token, with total weight `total` (no cut was requested).
    All { total: f64 },
    /// Greedy: the argmax alone.
    Greedy,
}

impl Sampler {
    /// A sampler for a vocabulary of `vocab_size` tokens.
    ///
    /// Rows may be longer than the vocabulary (models pad their logits: Qwen3 has 151,669
    /// tokens and 151,936 logits); entries past `vocab_size` are never read, so a padding
    /// id is never returned.
    ///
    /// # Errors
    /// [`Error::EmptyVocabulary`] when `vocab_size == 0`; [`Error::TokenOutOfRange`] for a
    /// logit-bias id `>= vocab_size`.
    pub fn new(params: SamplingParams, vocab_size: usize) -> Result<Self, Error> {
        if vocab_size == 0 {
            return Err(Error::EmptyVocabulary);
        }
        if vocab_size > TokenId::MAX as usize {
            return Err(Error::InvalidParameter {
                name: "vocab_size",
                value: vocab_size as f64,
                expected: "at most u32::MAX tokens",
            });
        }
        if let Some(&(id, _)) = params
            .logit_bias()
            .iter()
            .find(|(id, _)| *id as usize >= vocab_size)
        {
            return Err(Error::TokenOutOfRange { id, vocab_size });
        }
        Ok(Sampler {
            rng: DrawRng::new(params.seed()),
            params,
            vocab_size,
            seq: Sequence::default(),
            processors: Vec::new(),
            scratch: Scratch::new(vocab_size),
        })
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Adds a user-defined processor, run after the built-in adjustments.
    pub fn add_processor(&mut self, processor: Box<dyn LogitsProcessor>) {
        self.processors.push(processor);
    }

    /// Appends prompt tokens. Only allowed before the first generated token.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`; [`Error::InvalidParameter`]
    /// when tokens were already generated.
    pub fn push_prompt(&mut self, tokens: &[TokenId]) -> Result<(), Error> {
        self.seq.push_prompt(tokens, self.vocab_size)
    }

    /// Records a generated token that was not drawn by this sampler (a token forced by a
    /// grammar, or accepted from a draft model). It counts for the penalties and advances
    /// the draw counter like a drawn token.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id `>= vocab_size`.
    pub fn accept(&mut self, token: TokenId) -> Result<(), Error> {
        self.seq.accept(token, self.vocab_size)
    }

    /// Removes the last `n` generated tokens (at most all of them); the next draw uses the
    /// same uniform as when those tokens were first drawn.
    pub fn rollback(&mut self, n: usize) {
        self.seq.rollback(n);
    }

    /// Forgets the history (prompt and generated tokens); parameters and buffers stay.
    pub fn reset(&mut self) {
        self.seq.reset();
    }

    /// Reserves room for `additional` more history tokens, so that no later step
    /// allocates.
    pub fn reserve(&mut self, additional: usize) {
        self.seq.reserve(additional);
    }

    /// The sequence's tokens so far.
    pub fn history(&self) -> History<'_> {
        self.seq.view()
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
        self.sample_impl(logits, None, None)
    }

    /// Like [`sample`](Self::sample), with a grammar mask: every token `mask` disallows
    /// becomes `-inf` in the adjustment stage.
    ///
    /// # Errors
    /// As [`sample`](Self::sample), and [`Error::LengthMismatch`] when the mask does not
    /// cover exactly `vocab_size` tokens. A mask that allows nothing, or allows only
    /// tokens the other adjustments ban, gives [`Error::NoCandidates`].
    pub fn sample_masked<T: Logit>(
        &mut self,
        logits: &[T],
        mask: &TokenMask,
    ) -> Result<Sample, Error> {
        self.sample_impl(logits, Some(mask), None)
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
        if !(0.0..1.0).contains(&u) {
            return Err(Error::InvalidParameter {
                name: "u",
                value: u,
                expected: "a value in [0, 1)",
            });
        }
        self.sample_impl(logits, mask, Some(u))
    }

    /// The final distribution the next draw would use, without drawing: every surviving
    /// token with its probability, in draw order (probability descending, ties to the
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
        let row = self.check_input(logits, mask)?;
        let raw_max = adjust::convert_checked(row, &mut self.scratch.logits)?;
        let max = self.adjust(raw_max, mask)?;
        let survivors = self.cut(max)?;
        out.clear();
        let s = &mut self.scratch;
        match survivors {
            Survivors::Greedy => {
                let id = greedy::argmax(&s.logits, max)?;
                out.push((id, 1.0));
            }
            Survivors::Prefix { n, total } => out.extend(
                s.cand[..n]
                    .iter()
                    .zip(&s.weight)
                    .map(|(&(_, id), &w)| (id, w / total)),
            ),
            Survivors::All { total } => {
                histogram::collect(&s.logits, &s.bucket, histogram::BUCKETS - 1, &mut s.cand);
                fill_weights(&s.cand, max, self.params.temperature(), &mut s.weight);
                out.extend(
                    s.cand
                        .iter()
                        .zip(&s.weight)
                        .map(|(&(_, id), &w)| (id, w / total)),
                );
            }
        }
        Ok(())
    }

    /// Checks the row's and the mask's sizes; returns the row cut to the vocabulary.
    fn check_input<'r, T: Logit>(
        &self,
        row: &'r [T],
        mask: Option<&TokenMask>,
    ) -> Result<&'r [T], Error> {
        let n = self.vocab_size;
        if row.is_empty() {
            return Err(Error::EmptyVocabulary);
        }
        if n > row.len() {
            return Err(Error::VocabLargerThanRow {
                vocab_size: n,
                row_len: row.len(),
            });
        }
        if let Some(mask) = mask {
            if mask.len() != n {
                return Err(Error::LengthMismatch {
                    expected: n,
                    actual: mask.len(),
                });
            }
        }
        Ok(&row[..n])
    }

    fn sample_impl<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        u: Option<f64>,
    ) -> Result<Sample, Error> {
        let row = self.check_input(row, mask)?;
        let raw_max = adjust::convert_checked(row, &mut self.scratch.logits)?;
        let max = self.adjust(raw_max, mask)?;
        let survivors = self.cut(max)?;
        let u = u.unwrap_or_else(|| self.rng.uniform(self.seq.step()));
        let mut out = self.draw(survivors, max, u);
        if let Some(n_alt) = self.params.logprobs() {
            logprobs::fill(row, raw_max, n_alt, &mut out, |id| {
                self.final_logprob(&survivors, max, id)
            });
        }
        self.seq.push_drawn(out.token);
        Ok(out)
    }

    /// Stage 1: the adjustments. Returns the adjusted row's maximum.
    fn adjust(&mut self, raw_max: f32, mask: Option<&TokenMask>) -> Result<f32, Error> {
        let logits = &mut self.scratch.logits;
        let mut changed = bias::apply(logits, self.params.logit_bias());
        changed |= !self.params.logit_bias().is_empty();
        if self.params.has_penalties() {
            let history = self.seq.view();
            let window =
                history.penalized(self.params.penalty_window(), self.params.penalize_prompt());
            if !window.is_empty() {
                penalty::apply(logits, window, &self.params, &mut self.scratch.counts);
                changed = true;
            }
        }
        if let Some(mask) = mask {
            mask.apply(logits)?;
            changed = true;
        }
        if !self.processors.is_empty() {
            let history = self.seq.view();
            for p in &self.processors {
                p.process(logits, &history)?;
            }
            changed = true;
        }
        if changed {
            adjust::recheck(logits)
        } else {
            Ok(raw_max)
        }
    }

    /// Stages 2 to 4: temperature, softmax and the tail cuts.
    fn cut(&mut self, max: f32) -> Result<Survivors, Error> {
        if max == f32::NEG_INFINITY {
            return Err(Error::NoCandidates);
        }
        let p = &self.params;
        if p.is_greedy() {
            return Ok(Survivors::Greedy);
        }
        let (t, keep) = (p.temperature(), p.min_tokens_to_keep());
        let s = &mut self.scratch;
        let (top_p, min_p) = (p.top_p(), p.min_p());
        let total = match p.top_k() {
            Some(k) => {
                top_k::select(&s.logits, k.max(keep), &mut s.cand);
                fill_weights(&s.cand, max, t, &mut s.weight);
                s.weight.iter().sum()
            }
            None if top_p < 1.0 || min_p > 0.0 => {
                let z = histogram::build(
                    &s.logits,
                    max,
                    t,
                    &mut s.bucket,
                    &mut s.hist_count,
                    &mut s.hist_mass,
                );
                let mut limit = histogram::BUCKETS - 1;
                if top_p < 1.0 {
                    if let Some((b, _)) =
                        histogram::mass_bucket(&s.hist_mass, &s.hist_count, f64::from(top_p) * z)
                    {
                        limit = limit.min(b + 1);
                    }
                }
                if min_p > 0.0 {
                    limit = limit.min(histogram::bucket_of(f64::from(min_p).ln()) + 1);
                }
                limit = limit.max(histogram::count_bucket(&s.hist_count, keep));
                histogram::collect(&s.logits, &s.bucket, limit, &mut s.cand);
                fill_weights(&s.cand, max, t, &mut s.weight);
                z
            }
            None => {
                let z = histogram::build(
                    &s.logits,
                    max,
                    t,
                    &mut s.bucket,
                    &mut s.hist_count,
                    &mut s.hist_mass,
                );
                return Ok(Survivors::All { total: z });
            }
        };
        let mut n = s.cand.len();
        if top_p < 1.0 {
            if let Some(len) = top_p::prefix_len(&s.weight, top_p, total) {
                n = len.max(keep).min(n);
            }
        }
        if min_p > 0.0 {
            let scaled = s.cand[..n].iter().map(|&(l, _)| scaled(l, max, t));
            n = min_p::prefix_len(scaled, min_p).max(keep).min(n);
        }
        let total = s.weight[..n].iter().sum();
        Ok(Survivors::Prefix { n, total })
    }

    /// Stage 5: the draw.
    fn draw(&mut self, survivors: Survivors, max: f32, u: f64) -> Sample {
        let s = &mut self.scratch;
        match survivors {
            Survivors::Greedy => {
                // `max` is finite here, so an argmax exists.
                let id = greedy::argmax(&s.logits, max).unwrap_or(0);
                Sample::new(id, 0.0)
            }
            Survivors::Prefix { n, total } => {
                let i = draw::inverse_cdf(&s.weight[..n], total, u);
                Sample::new(s.cand[i].1, (s.weight[i] / total).ln() as f32)
            }
            Survivors::All { total } => {
                let t = self.params.temperature();
                let (l, id) = draw_by_bucket(s, max, t, u * total);
                Sample::new(id, (scaled(l, max, t) - total.ln()) as f32)
            }
        }
    }

    /// The final-distribution logprob of token `id`.
    fn final_logprob(&self, survivors: &Survivors, max: f32, id: TokenId) -> f32 {
        let s = &self.scratch;
        match *survivors {
            Survivors::Greedy => {
                if greedy::argmax(&s.logits, max).ok() == Some(id) {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            }
            Survivors::Prefix { n, total } => s.cand[..n]
                .iter()
                .position(|&(_, c)| c == id)
                .map_or(f32::NEG_INFINITY, |i| (s.weight[i] / total).ln() as f32),
            Survivors::All { total } => {
                let l = s.logits[id as usize];
                if l == f32::NEG_INFINITY {
                    f32::NEG_INFINITY
                } else {
                    (scaled(l, max, self.params.temperature()) - total.ln()) as f32
                }
            }
        }
    }
}

/// `(l - max) / t` in `f64`: the scaled logit every stage and the reference agree on.
#[inline]
fn scaled(l: f32, max: f32, t: f32) -> f64 {
    (f64::from(l) - f64::from(max)) / f64::from(t)
}

fn fill_weights(cand: &[(f32, TokenId)], max: f32, t: f32, weight: &mut Vec<f64>) {
    weight.clear();
    weight.extend(cand.iter().map(|&(l, _)| scaled(l, max, t).exp()));
}

/// Inverse CDF over every finite token in candidate order without sorting them all: find
/// the histogram bucket where the running mass passes `target`, then sort and walk that
/// bucket alone. If rounding leaves the target unreached, the last positive-weight token
/// is taken.
fn draw_by_bucket(s: &mut Scratch, max: f32, t: f32, target: f64) -> (f32, TokenId) {
    let mut cum = 0.0;
    let mut last = None;
    for b in 0..histogram::BUCKETS {
        let m = s.hist_mass[b];
        if m > 0.0 {
            last = Some(b);
        }
        if m > 0.0 && cum + m > target {
            histogram::collect_one(&s.logits, &s.bucket, b, &mut s.cand);
            fill_weights(&s.cand, max, t, &mut s.weight);
            let mut c = cum;
            for (i, &w) in s.weight.iter().enumerate() {
                c += w;
                if w > 0.0 && c > target {
                    return s.cand[i];
                }
            }
        }
        cum += m;
    }
    // Rounding: take the last positive-weight token of the last bucket with mass.
    let b = last.unwrap_or(0);
    histogram::collect_one(&s.logits, &s.bucket, b, &mut s.cand);
    fill_weights(&s.cand, max, t, &mut s.weight);
    let i = s.weight.iter().rposition(|&w| w > 0.0).unwrap_or(0);
    s.cand.get(i).copied().unwrap_or((max, 0))
}
