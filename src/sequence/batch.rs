//! [`BatchSampler`]: many sequences at once, each with its own parameters and state.

use crate::element::Logit;
use crate::error::Error;
use crate::grammar::{GrammarMask, Status};
use crate::mask::TokenMask;
use crate::sample::Sample;
use crate::sampler::Sampler;
use crate::sequence_sampler::SequenceSampler;
use crate::speculative::{Speculation, Verified, Verifier};
use crate::TokenId;

/// One row's inputs for [`BatchSampler::sample_rows`]: its mask and its bans for this
/// step. The default is neither.
#[derive(Clone, Copy, Debug, Default)]
pub struct RowInput<'a> {
    /// The row's mask (a grammar's, or any [`TokenMask`]), as
    /// [`Sampler::sample_masked`] takes it.
    pub mask: Option<&'a TokenMask>,
    /// Tokens banned for this step, as [`Sampler::sample_banned`] takes them (the row's
    /// [`StopChecker::banned_tokens`](crate::stop::StopChecker::banned_tokens), say).
    pub banned: &'a [TokenId],
}

/// A row's result from [`BatchSampler::sample_grammars`]: the sample and, for a row
/// with a grammar, the grammar's status after the token.
pub type GrammarRow = Result<(Sample, Option<Status>), Error>;

/// Samples one token for each of `B` sequences from a `[B, row_len]` block of logits.
///
/// Each row has its own [`Sampler`] (or, as a `BatchSampler<Chain>`, its own
/// [`Chain`](crate::Chain), in any order of stages): its own parameters, seed, history
/// and scratch. A
/// row's result depends only on its own sampler and its own row, never on the other rows,
/// the batch size or the order of the rows, since draw `n` of a sequence is keyed by
/// `(seed, n)`.
///
/// # Example
/// ```
/// use logits::{BatchSampler, Sampler, SamplingParams};
///
/// let rows = vec![
///     Sampler::new(SamplingParams::greedy(), 3)?,
///     Sampler::new(SamplingParams::builder().seed(9).build()?, 3)?,
/// ];
/// let mut batch = BatchSampler::new(rows);
/// let logits = [0.0f32, 2.0, 1.0, /* row 2 */ 5.0, 0.0, 0.0];
/// let out = batch.sample(&logits, 3)?;
/// assert_eq!(out[0].as_ref().unwrap().token, 1);
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct BatchSampler<S: SequenceSampler = Sampler> {
    samplers: Vec<S>,
    results: Vec<Result<Sample, Error>>,
    verifiers: Vec<Verifier>,
    verified: Vec<Result<Verified, Error>>,
    grammar_results: Vec<GrammarRow>,
}

impl<S: SequenceSampler> BatchSampler<S> {
    /// A batch of the given per-row samplers.
    pub fn new(samplers: Vec<S>) -> Self {
        let results = Vec::with_capacity(samplers.len());
        BatchSampler {
            samplers,
            results,
            verifiers: Vec::new(),
            verified: Vec::new(),
            grammar_results: Vec::new(),
        }
    }

    /// The per-row samplers.
    pub fn samplers(&self) -> &[S] {
        &self.samplers
    }

    /// The per-row samplers, to push prompts or change rows between steps.
    pub fn samplers_mut(&mut self) -> &mut Vec<S> {
        &mut self.samplers
    }

    /// Samples every row of `logits` (`B` rows of `row_len`, row-major). Row `i`'s result
    /// is at index `i`; a row's error does not affect the others.
    ///
    /// With the `rayon` feature the rows are sampled in parallel, with results identical
    /// to the sequential path.
    ///
    /// An empty batch samples nothing: with an empty block it returns no results,
    /// whatever `row_len` (0 included).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `logits.len() != B * row_len`, or when `row_len`
    /// is 0 for a batch that is not empty.
    pub fn sample<T: Logit>(
        &mut self,
        logits: &[T],
        row_len: usize,
    ) -> Result<&[Result<Sample, Error>], Error> {
        self.check_block(logits.len(), row_len, None)?;
        self.results.clear();
        if self.samplers.is_empty() {
            return Ok(&self.results);
        }
        self.results
            .resize(self.samplers.len(), Err(Error::EmptyVocabulary));
        let n = self.samplers.len();
        let (samplers, results) = (&mut self.samplers, &mut self.results);
        each_row(
            samplers,
            logits,
            row_len,
            no_inputs(n),
            results,
            |s, row, ()| s.sample_next(row, None),
        );
        Ok(&self.results)
    }

    /// Like [`sample`](Self::sample), with each row's own [`RowInput`]: row `i` is
    /// sampled as its sampler's [`sample_banned`](Sampler::sample_banned)`(row,
    /// inputs[i].mask, inputs[i].banned)` would sample it alone, whatever the other
    /// rows, their order and (with the `rayon` feature) the threads.
    ///
    /// # Example
    /// ```
    /// use logits::{BatchSampler, RowInput, Sampler, SamplingParams, TokenMask};
    ///
    /// let rows = (0..2).map(|_| Sampler::new(SamplingParams::greedy(), 3)).collect::<Result<_, _>>()?;
    /// let mut batch = BatchSampler::new(rows);
    /// let mut only_0 = TokenMask::new_empty(3);
    /// only_0.allow(0)?;
    /// let inputs = [
    ///     RowInput { mask: Some(&only_0), ..RowInput::default() },
    ///     RowInput { banned: &[1], ..RowInput::default() },
    /// ];
    /// let logits = [0.0f32, 2.0, 1.0, /* row 2 */ 0.0, 2.0, 1.0];
    /// let out = batch.sample_rows(&logits, 3, &inputs)?;
    /// assert_eq!(out[0].as_ref().unwrap().token, 0);
    /// assert_eq!(out[1].as_ref().unwrap().token, 2);
    /// # Ok::<(), logits::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`sample`](Self::sample), and [`Error::LengthMismatch`] when `inputs` does
    /// not hold one entry per row. A row's own error (a banned id out of its
    /// vocabulary, a mask of the wrong width) is that row's result.
    pub fn sample_rows<T: Logit>(
        &mut self,
        logits: &[T],
        row_len: usize,
        inputs: &[RowInput<'_>],
    ) -> Result<&[Result<Sample, Error>], Error> {
        self.check_block(logits.len(), row_len, Some(inputs.len()))?;
        self.results.clear();
        if self.samplers.is_empty() {
            return Ok(&self.results);
        }
        self.results
            .resize(self.samplers.len(), Err(Error::EmptyVocabulary));
        each_row(
            &mut self.samplers,
            logits,
            row_len,
            inputs,
            &mut self.results,
            |s, row, input| s.sample_next_banned(row, input.mask, input.banned),
        );
        Ok(&self.results)
    }

    /// Like [`sample`](Self::sample), each row under its own grammar: row `i` with
    /// `Some(grammar)` is sampled as [`GrammarMask::sample`] would sample it alone (the
    /// grammar's mask, then the token committed to the grammar), a row with `None`
    /// without a mask. Row `i`'s result holds the sample and its grammar's status
    /// (`None` for a row without one); the result is the same whatever the other rows,
    /// their order and (with the `rayon` feature) the threads, since each row's
    /// sampler and grammar are its own.
    ///
    /// # Errors
    /// As [`sample`](Self::sample), and [`Error::LengthMismatch`] when `grammars` does
    /// not hold one entry per row. A row's grammar or sampling error is that row's
    /// result, as [`GrammarMask::sample`] reports it (nothing moves in that row).
    pub fn sample_grammars<T: Logit>(
        &mut self,
        logits: &[T],
        row_len: usize,
        grammars: &mut [Option<&mut GrammarMask>],
    ) -> Result<&[GrammarRow], Error> {
        self.check_block(logits.len(), row_len, Some(grammars.len()))?;
        self.grammar_results.clear();
        if self.samplers.is_empty() {
            return Ok(&self.grammar_results);
        }
        self.grammar_results
            .resize(self.samplers.len(), Err(Error::EmptyVocabulary));
        each_row(
            &mut self.samplers,
            logits,
            row_len,
            grammars,
            &mut self.grammar_results,
            sample_one_grammar,
        );
        Ok(&self.grammar_results)
    }

    /// Checks a block of `len` logits of rows of `row_len` (and `inputs` per-row
    /// entries) against the batch.
    fn check_block(&self, len: usize, row_len: usize, inputs: Option<usize>) -> Result<(), Error> {
        let expected = self.samplers.len().saturating_mul(row_len);
        if len != expected || (row_len == 0 && !self.samplers.is_empty()) {
            return Err(Error::LengthMismatch {
                expected,
                actual: len,
            });
        }
        match inputs {
            Some(n) if n != self.samplers.len() => Err(Error::LengthMismatch {
                expected: self.samplers.len(),
                actual: n,
            }),
            _ => Ok(()),
        }
    }
}

impl<S: SequenceSampler> BatchSampler<S> {
    /// Verifies one speculation per row ([`Verifier::verify`]): row `i`'s draft, each
    /// with its own `k`, against row `i`'s sampler. Row `i`'s result is at index `i`,
    /// its emitted tokens and logprobs in [`verifiers`](Self::verifiers)`()[i]`; a
    /// row's error moves nothing in that row and does not affect the others. Each
    /// row's result is the one verifying it alone would give, whatever the batch and
    /// (with the `rayon` feature) the threads.
    ///
    /// # Example
    /// ```
    /// use logits::{BatchSampler, DraftDistribution, Sampler, SamplingParams, Speculation};
    ///
    /// let rows = vec![
    ///     Sampler::new(SamplingParams::greedy(), 3)?,
    ///     Sampler::new(SamplingParams::greedy(), 3)?,
    /// ];
    /// let mut batch = BatchSampler::new(rows);
    /// let q = [0.0f32, 1.0, 0.0, 0.0, 0.0, 1.0];
    /// let specs = [
    ///     // k = 1: the target agrees with token 1, then picks 0.
    ///     Speculation { draft: &[1], q: DraftDistribution::Dense(&q[..3]),
    ///                   target: &[0.0f32, 2.0, 1.0, 5.0, 0.0, 0.0], row_len: 3 },
    ///     // k = 2: the target disagrees at once.
    ///     Speculation { draft: &[1, 2], q: DraftDistribution::Dense(&q),
    ///                   target: &[3.0f32, 2.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0], row_len: 3 },
    /// ];
    /// let out = batch.verify(&specs)?;
    /// assert_eq!(out[0].as_ref().unwrap().accepted, 1);
    /// assert_eq!(out[1].as_ref().unwrap().accepted, 0);
    /// assert_eq!(batch.verifiers()[0].tokens(), &[1, 0]);
    /// assert_eq!(batch.verifiers()[1].tokens(), &[0]);
    /// # Ok::<(), logits::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `specs` does not hold one speculation per row.
    pub fn verify<T: Logit>(
        &mut self,
        specs: &[Speculation<'_, T>],
    ) -> Result<&[Result<Verified, Error>], Error> {
        if specs.len() != self.samplers.len() {
            return Err(Error::LengthMismatch {
                expected: self.samplers.len(),
                actual: specs.len(),
            });
        }
        if self.verifiers.len() < self.samplers.len() {
            self.verifiers
                .resize_with(self.samplers.len(), Verifier::new);
        }
        self.verified.clear();
        self.verified
            .resize(self.samplers.len(), Err(Error::EmptyVocabulary));
        verify_rows(
            &mut self.samplers,
            &mut self.verifiers,
            specs,
            &mut self.verified,
        );
        Ok(&self.verified)
    }

    /// Each row's [`Verifier`], holding the tokens and logprobs its last
    /// [`verify`](Self::verify) emitted (empty before the first).
    pub fn verifiers(&self) -> &[Verifier] {
        &self.verifiers[..self.verifiers.len().min(self.samplers.len())]
    }
}

#[cfg(not(feature = "rayon"))]
fn verify_rows<S: SequenceSampler, T: Logit>(
    samplers: &mut [S],
    verifiers: &mut [Verifier],
    specs: &[Speculation<'_, T>],
    results: &mut [Result<Verified, Error>],
) {
    for (((s, v), spec), r) in samplers.iter_mut().zip(verifiers).zip(specs).zip(results) {
        *r = v.verify(s, spec);
    }
}

#[cfg(feature = "rayon")]
fn verify_rows<S: SequenceSampler, T: Logit>(
    samplers: &mut [S],
    verifiers: &mut [Verifier],
    specs: &[Speculation<'_, T>],
    results: &mut [Result<Verified, Error>],
) {
    use rayon::prelude::*;
    samplers
        .par_iter_mut()
        .zip(verifiers.par_iter_mut())
        .zip(specs.par_iter())
        .zip(results.par_iter_mut())
        .for_each(|(((s, v), spec), r)| *r = v.verify(s, spec));
}

/// Row `i` of `logits` through sampler `i` with input `i`, into `results[i]`: one row
/// after another.
#[cfg(not(feature = "rayon"))]
fn each_row<S, T, I, R>(
    samplers: &mut [S],
    logits: &[T],
    row_len: usize,
    inputs: I,
    results: &mut [R],
    f: impl Fn(&mut S, &[T], I::Item) -> R,
) where
    S: SequenceSampler,
    T: Logit,
    I: IntoIterator,
{
    for (((s, row), input), r) in samplers
        .iter_mut()
        .zip(logits.chunks_exact(row_len))
        .zip(inputs)
        .zip(results)
    {
        *r = f(s, row, input);
    }
}

/// Row `i` of `logits` through sampler `i` with input `i`, into `results[i]`: on
/// rayon's threads, with the results of the sequential loop (each row's sampler and
/// input are its own).
#[cfg(feature = "rayon")]
fn each_row<S, T, I, R>(
    samplers: &mut [S],
    logits: &[T],
    row_len: usize,
    inputs: I,
    results: &mut [R],
    f: impl Fn(&mut S, &[T], I::Item) -> R + Sync + Send,
) where
    S: SequenceSampler,
    T: Logit,
    I: rayon::iter::IntoParallelIterator,
    I::Iter: rayon::iter::IndexedParallelIterator,
    R: Send,
{
    use rayon::prelude::*;
    samplers
        .par_iter_mut()
        .zip(logits.par_chunks_exact(row_len))
        .zip(inputs.into_par_iter())
        .zip(results.par_iter_mut())
        .for_each(|(((s, row), input), r)| *r = f(s, row, input));
}

/// One `()` per row, for [`each_row`] without inputs.
#[cfg(not(feature = "rayon"))]
fn no_inputs(n: usize) -> impl Iterator<Item = ()> {
    std::iter::repeat_n((), n)
}

/// One `()` per row, for [`each_row`] without inputs.
#[cfg(feature = "rayon")]
fn no_inputs(n: usize) -> rayon::iter::RepeatN<()> {
    rayon::iter::repeat_n((), n)
}

/// Row `i` under its grammar, if it has one.
fn sample_one_grammar<S: SequenceSampler, T: Logit>(
    s: &mut S,
    row: &[T],
    grammar: &mut Option<&mut GrammarMask>,
) -> GrammarRow {
    match grammar {
        Some(g) => g.sample(s, row).map(|(out, status)| (out, Some(status))),
        None => s.sample_next(row, None).map(|out| (out, None)),
    }
}
