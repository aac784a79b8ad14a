//! [`BatchSampler`]: many sequences at once, each with its own parameters and state.

use crate::element::Logit;
use crate::error::Error;
use crate::sample::Sample;
use crate::sampler::Sampler;
use crate::sequence_sampler::SequenceSampler;
use crate::speculative::{Speculation, Verified, Verifier};

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
#[derive(Debug)]
pub struct BatchSampler<S: SequenceSampler = Sampler> {
    samplers: Vec<S>,
    results: Vec<Result<Sample, Error>>,
    verifiers: Vec<Verifier>,
    verified: Vec<Result<Verified, Error>>,
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
        let expected = self.samplers.len().saturating_mul(row_len);
        if logits.len() != expected || (row_len == 0 && !self.samplers.is_empty()) {
            return Err(Error::LengthMismatch {
                expected,
                actual: logits.len(),
            });
        }
        self.results.clear();
        if self.samplers.is_empty() {
            return Ok(&self.results);
        }
        self.results
            .resize(self.samplers.len(), Err(Error::EmptyVocabulary));
        sample_rows(&mut self.samplers, logits, row_len, &mut self.results);
        Ok(&self.results)
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

#[cfg(not(feature = "rayon"))]
fn sample_rows<S: SequenceSampler, T: Logit>(
    samplers: &mut [S],
    logits: &[T],
    row_len: usize,
    results: &mut [Result<Sample, Error>],
) {
    for ((s, row), r) in samplers
        .iter_mut()
        .zip(logits.chunks_exact(row_len))
        .zip(results)
    {
        *r = s.sample_next(row, None);
    }
}

#[cfg(feature = "rayon")]
fn sample_rows<S: SequenceSampler, T: Logit>(
    samplers: &mut [S],
    logits: &[T],
    row_len: usize,
    results: &mut [Result<Sample, Error>],
) {
    use rayon::prelude::*;
    samplers
        .par_iter_mut()
        .zip(logits.par_chunks_exact(row_len))
        .zip(results.par_iter_mut())
        .for_each(|((s, row), r)| *r = s.sample_next(row, None));
}
