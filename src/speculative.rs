//! Speculative decoding: exact verification of a draft model's tokens through any chain.
//!
//! A small draft model proposes `k` tokens `x_0 .. x_{k-1}`; the target model scores the
//! context and the `k` draft tokens in one forward pass, which gives `k + 1` rows of
//! logits. A [`Verifier`] decides, from those rows, which prefix of the draft the target
//! accepts and which token comes next, so that the emitted tokens follow the target's
//! distribution exactly, as if each had been sampled from the target alone (Leviathan et
//! al. 2023, Chen et al. 2023).
//!
//! # The rule
//!
//! At draft position `i`, `p_i` is the final distribution of the sampler's chain on
//! target row `i`, and `q_i` the draft's final distribution that `x_i` was drawn from.
//! Both are taken with the history of the sequence followed by the accepted draft tokens
//! `x_0 .. x_{i-1}` (so the penalties count them), under the grammar mask after those
//! tokens, and through every stage, temperature and cut of the chain.
//!
//! 1. `x_i` is accepted with probability `min(1, p_i(x_i) / q_i(x_i))`: when
//!    `a_i * q_i(x_i) < p_i(x_i)` for the acceptance uniform `a_i` (a draft token that
//!    `q_i` gives no mass is accepted exactly when `p_i` gives it mass).
//! 2. At the first rejection, the next token is drawn from the residual
//!    `max(0, p_i - q_i)`, renormalised, by inverse CDF over `p_i`'s candidates in draw
//!    order with the draw uniform `d_i`. The residual is never positive outside `p_i`'s
//!    candidates, so only those are visited: a chain that cuts to 20 tokens compares 20
//!    probabilities, whatever the vocabulary. (When the residual has no mass, which
//!    only rounding can cause since then `p_i = q_i`, the token is drawn from `p_i`.)
//!    The draw is exact, as every draw of the crate is (see below).
//! 3. When all `k` are accepted, the bonus token is drawn from `p_k`, target row `k`,
//!    exactly as [`Sampler::sample`](crate::Sampler::sample) would draw it there.
//!
//! A chain that ends in the argmax (temperature 0, or a [`Chain`](crate::Chain) ending
//! in `greedy()`) accepts `x_i` while it is the argmax of `p_i`, and emits the argmax at
//! the first disagreement (or after all `k`). It reads no uniform and no `q`, and the
//! emitted tokens are, bit for bit, those of greedy decoding with the target alone.
//!
//! # The exact residual draw
//!
//! The residual weight of `p_i`'s candidate `t` is the `f64` value
//! `r(t) = max(0, p_i(t) - q_i(t))`, one subtraction of two `f64`s: `p_i(t)` as
//! [`Sampler::distribution`](crate::Sampler::distribution) writes it, and `q_i(t)` the
//! draft's probability divided by its row's sum (`w * (1 / sum)`, the sum taken in
//! `f64` in the row's order: the pairs' order for a sparse row, id order for a dense
//! one, draw order for draft logits). Given those weights, the drawn token is the first
//! candidate, in `p_i`'s draw order, whose *exact* running sum of the weights exceeds
//! `d_i` times their *exact* total: the token that arithmetic without rounding on the
//! `f64` weights gives, whatever order any sum is taken in. It is decided as a plain
//! draw is: an `f64` walk decides when a rigorous bound on its rounding shows that the
//! exact sums decide the same, and an exact accumulator decides otherwise (only for a
//! uniform within about `n * 2^-52` of a boundary, `n` the number of candidates). A
//! residual without mass draws from `p_i`'s weights in the same exact way.
//!
//! # Random numbers
//!
//! For the sequence's seed and a draft token whose index in the generated sequence is
//! `s = step + i` (`step` the number of generated tokens before the verification, `i`
//! its draft position):
//!
//! - the acceptance uniform `a_i` is [`acceptance_uniform`]`(seed, s)`: the
//!   [`DrawRng`] of the seed on ChaCha stream [`ACCEPTANCE_STREAM`], at block `s`. It is
//!   never a draw's uniform (draws use stream 0) nor a stage's
//!   ([`StageContext::uniform`](crate::StageContext::uniform) uses stream `salt + 1`
//!   for `salt < u64::MAX - 1`);
//! - the residual draw at a rejection at `i` uses the sequence's draw uniform of step
//!   `s`, `DrawRng::new(seed).uniform(s)`, the one a plain draw of that token would use;
//! - the bonus draw is the ordinary draw of step `step + k`.
//!
//! A token's uniforms depend only on the seed and on where the token stands in the
//! sequence: never on the batch, on other rows, on threads, or on how earlier tokens were
//! split into drafts. Each is used at most once along a sequence, since a verification
//! that emits tokens up to index `s` is followed by one that starts at `s + 1`.
//!
//! # State
//!
//! On success the emitted tokens (the accepted prefix and the next token) are appended to
//! the history, committed to the grammar, and then given to every stage's
//! [`observe`](crate::Stage::observe), in order. Within one verification, stages keep the
//! state they had before it: a stage whose decisions depend only on the history (every
//! built-in stage but [`Mirostat`](crate::Mirostat) and
//! [`MirostatV2`](crate::MirostatV2), whose `mu` moves with each observed token) gives
//! the same `p_i` as it would in plain decoding.
//!
//! Every error leaves the sampler and the grammar as they were: the tokens pushed and
//! committed so far are rolled back (a grammar [`Constraint`](crate::grammar::Constraint)
//! must support [`rollback`](crate::grammar::Constraint::rollback) for an error found
//! after its first commit to be undone; the built-in ones do).
//!
//! # Example
//! ```
//! use logits::speculative::{DraftDistribution, Speculation, Verifier};
//! use logits::{Sampler, SamplingParams};
//!
//! let params = SamplingParams::builder().temperature(0.6).top_k(3).seed(7).build()?;
//! let mut target = Sampler::new(params.clone(), 4)?;
//! let mut draft = Sampler::new(params, 4)?;
//!
//! // The draft model proposes k = 2 tokens, keeping the distributions it drew them from.
//! let draft_rows = [[3.0f32, 1.0, 0.5, 0.0], [0.0, 2.5, 2.0, 0.0]];
//! let (mut tokens, mut pairs, mut ends) = (Vec::new(), Vec::new(), Vec::new());
//! let mut dist = Vec::new();
//! for row in &draft_rows {
//!     draft.distribution(row, None, &mut dist)?;
//!     pairs.extend_from_slice(&dist);
//!     ends.push(pairs.len());
//!     tokens.push(draft.sample(row)?.token);
//! }
//!
//! // The target's k + 1 rows from one forward pass.
//! let target_rows = [3.1f32, 1.0, 0.4, 0.0, 0.0, 2.0, 2.4, 0.0, 1.0, 0.0, 0.0, 2.0];
//! let mut verifier = Verifier::new();
//! let out = verifier.verify(
//!     &mut target,
//!     &Speculation {
//!         draft: &tokens,
//!         q: DraftDistribution::Sparse { pairs: &pairs, ends: &ends },
//!         target: &target_rows,
//!         row_len: 4,
//!     },
//! )?;
//! // The accepted prefix of the draft, then one more token.
//! assert_eq!(&verifier.tokens()[..out.accepted], &tokens[..out.accepted]);
//! assert_eq!(verifier.tokens().len(), out.accepted + 1);
//! assert_eq!(target.history().generated(), verifier.tokens());
//! // The draft rolls back what the target refused.
//! draft.rollback(tokens.len() - out.accepted);
//! # Ok::<(), logits::Error>(())
//! ```

use crate::draw;
use crate::element::Logit;
use crate::engine::Engine;
use crate::error::Error;
use crate::grammar::{GrammarError, GrammarMask, Status};
use crate::mask::TokenMask;
use crate::rng::DrawRng;
use crate::sample::Sample;
use crate::sequence_sampler::SequenceSampler;
use crate::TokenId;

/// How far from 1 the sum of a given draft distribution ([`DraftDistribution::Dense`]
/// or [`DraftDistribution::Sparse`]) may be: `|sum - 1| <= 1e-4`, the sum taken in
/// `f64`. Within it, the distribution is used divided by its sum.
pub const DRAFT_SUM_TOLERANCE: f64 = 1e-4;

/// The ChaCha stream of the acceptance uniforms (see the [module](self) docs).
pub const ACCEPTANCE_STREAM: u64 = u64::MAX;

/// A bound on any `q_i(x)` the verification computes: a probability `w` of a row
/// whose `f64` sum `S` includes it, times `fl(1 / S)`, is at most `1 + 2^-52`.
const Q_MAX: f64 = 1.0 + 4.0 * f64::EPSILON;

/// Above this many comparisons (`|p| * |q|`), a sparse `q` is scattered into a
/// vocabulary-sized buffer for the residual instead of searched.
const SCATTER_MIN: usize = 1 << 14;

/// The acceptance uniform of the draft token at index `s` of the generated sequence
/// under `seed`: block `s` of stream [`ACCEPTANCE_STREAM`], in `[0, 1)`.
pub fn acceptance_uniform(seed: u64, s: u64) -> f64 {
    DrawRng::with_stream(seed, ACCEPTANCE_STREAM).uniform(s)
}

/// The draft's distributions `q_0 .. q_{k-1}`, one per draft token.
#[derive(Clone, Copy, Debug)]
pub enum DraftDistribution<'a, T> {
    /// The draft model's `k` rows of logits (`k * row_len`, row-major, the target's row
    /// length): `q_i` is the final distribution of the verifying sampler's own chain on
    /// row `i`, with the same history and mask as `p_i`. Costs one chain run per
    /// position whose acceptance needs `q_i`: where `a_i * (1 + 2^-50) < p_i(x_i)`, `x_i`
    /// is accepted whatever `q_i(x_i) <= 1` is, and row `i` is neither run nor checked
    /// (as the rows after a rejection are not). A chain ending in the argmax reads none
    /// of them.
    Logits(&'a [T]),
    /// `k` dense rows of probabilities (`k * vocab_size`, row-major): `q_i(x)` at
    /// `[i * vocab_size + x]`. Every entry must be finite and `>= 0`, each row sum
    /// within [`DRAFT_SUM_TOLERANCE`] of 1; checking costs one pass per row.
    Dense(&'a [f32]),
    /// Sparse rows, as [`Sampler::distribution`](crate::Sampler::distribution) writes
    /// them: `q_i` is `pairs[ends[i - 1]..ends[i]]` (from 0 for `i = 0`), `(token,
    /// probability)` with distinct tokens; a token not listed has probability 0.
    /// `ends` holds `k` nondecreasing bounds, the last `pairs.len()`; every
    /// probability is finite and `>= 0`, each row's sum within
    /// [`DRAFT_SUM_TOLERANCE`] of 1.
    Sparse {
        /// Every position's pairs, one after the other.
        pairs: &'a [(TokenId, f64)],
        /// One past each position's last pair.
        ends: &'a [usize],
    },
}

/// One sequence's verification input: the draft tokens, their distributions and the
/// target's rows.
#[derive(Clone, Copy, Debug)]
pub struct Speculation<'a, T> {
    /// The `k >= 1` draft tokens.
    pub draft: &'a [TokenId],
    /// The draft's distributions, one per draft token.
    pub q: DraftDistribution<'a, T>,
    /// The target's `k + 1` rows of logits, `(k + 1) * row_len`, row-major: row `i`
    /// scores the token after `x_0 .. x_{i-1}`.
    pub target: &'a [T],
    /// The length of one row (at least the vocabulary size; padding is never read).
    pub row_len: usize,
}

/// What a verification decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verified {
    /// How many draft tokens were accepted, `0..=k`.
    pub accepted: usize,
    /// The token after the accepted prefix: drawn from the residual at the first
    /// rejection, or the bonus token from target row `k`; `None` only when a grammar
    /// finished on an accepted end-of-sequence token. Its `logprob` is under `p` (the
    /// target's final distribution at its position); the raw logprob and alternatives
    /// are filled, as the sampler's parameters ask, for the bonus draw only.
    pub next: Option<Sample>,
}

impl Verified {
    /// How many tokens were emitted: the accepted prefix and the next token.
    pub fn emitted(&self) -> usize {
        self.accepted + usize::from(self.next.is_some())
    }
}

/// Verifies draft tokens against a target sampler (see the [module](self) docs).
///
/// Holds the buffers a verification reuses and the last verification's emitted tokens
/// and their logprobs: once warm, a verification allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct Verifier {
    p: Vec<(TokenId, f64)>,
    q: Vec<(TokenId, f64)>,
    scattered: Vec<f64>,
    sums: Vec<f64>,
    weights: Vec<f64>,
    tokens: Vec<TokenId>,
    logprobs: Vec<f32>,
}

/// `q_i` as the verification reads it.
#[derive(Clone, Copy)]
enum QView<'b> {
    Pairs(&'b [(TokenId, f64)], f64),
    Dense(&'b [f32], f64),
}

impl QView<'_> {
    fn at(self, id: TokenId) -> f64 {
        match self {
            QView::Pairs(pairs, inv) => pairs
                .iter()
                .find(|&&(t, _)| t == id)
                .map_or(0.0, |&(_, w)| w * inv),
            QView::Dense(row, inv) => f64::from(row[id as usize]) * inv,
        }
    }
}

impl Verifier {
    /// An empty verifier; its buffers grow with the first verifications.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last successful verification's emitted tokens: the accepted draft prefix,
    /// then the next token. Empty after an error.
    pub fn tokens(&self) -> &[TokenId] {
        &self.tokens
    }

    /// The natural logprob of each of [`tokens`](Self::tokens) under the target's final
    /// distribution at its position (0 for a chain ending in the argmax).
    pub fn logprobs(&self) -> &[f32] {
        &self.logprobs
    }

    /// Verifies `spec` against `sampler` (a [`Sampler`](crate::Sampler) or a
    /// [`Chain`](crate::Chain)) and appends the emitted tokens to its history.
    ///
    /// # Errors
    /// Nothing moves on error: the sampler's history and stages are as before.
    /// - [`Error::InvalidParameter`] naming `draft_tokens` for `k = 0`;
    /// - [`Error::EmptyVocabulary`] for `row_len = 0`, [`Error::VocabLargerThanRow`]
    ///   for a row shorter than the vocabulary;
    /// - [`Error::DraftTooLong`] when the target holds whole rows, but fewer than
    ///   `k + 1`; [`Error::LengthMismatch`] when it holds more, or not a whole number of
    ///   rows, or when the draft's logits or dense probabilities are not `k` rows (or a
    ///   sparse `ends` not `k` bounds);
    /// - [`Error::TokenOutOfRange`] for a draft token (or a sparse `q` token)
    ///   `>= vocab_size`;
    /// - [`Error::InvalidDraftDistribution`] for a dense or sparse `q` with a NaN,
    ///   infinite or negative entry, a row whose sum is not within
    ///   [`DRAFT_SUM_TOLERANCE`] of 1, or sparse bounds that do not split the pairs;
    /// - the errors of [`Sampler::sample`](crate::Sampler::sample) for a target row (or
    ///   a draft row of logits) the verification reads (see
    ///   [`DraftDistribution::Logits`] for the draft rows it reads).
    pub fn verify<S: SequenceSampler, T: Logit>(
        &mut self,
        sampler: &mut S,
        spec: &Speculation<'_, T>,
    ) -> Result<Verified, Error> {
        sampler.verify_with(self, spec, None)
    }

    /// Like [`verify`](Self::verify), under a grammar: `p_i` and `q_i` are taken under
    /// the mask after the accepted tokens, each emitted token is committed to `grammar`,
    /// and a rejected draft token is never committed. An accepted end-of-sequence
    /// token ends the verification with no next token.
    ///
    /// # Errors
    /// As [`verify`](Self::verify), and [`Error::Grammar`] with
    /// [`GrammarError::TokenRejected`] when the grammar disallows a draft token at the
    /// position it is verified at (positions after the first rejection are not
    /// visited), or with any error of [`GrammarMask::compute`] and
    /// [`GrammarMask::commit`]. Nothing moves on error: the tokens committed so far are
    /// rolled back (for a constraint that supports rollback).
    pub fn verify_constrained<S: SequenceSampler, T: Logit>(
        &mut self,
        sampler: &mut S,
        spec: &Speculation<'_, T>,
        grammar: &mut GrammarMask,
    ) -> Result<Verified, Error> {
        sampler.verify_with(self, spec, Some(grammar))
    }

    pub(crate) fn verify_in<T: Logit>(
        &mut self,
        e: &mut Engine,
        spec: &Speculation<'_, T>,
        mut grammar: Option<&mut GrammarMask>,
    ) -> Result<Verified, Error> {
        self.tokens.clear();
        self.logprobs.clear();
        self.check(e, spec)?;
        let (mut pushed, mut committed) = (0, 0);
        match self.run(e, spec, grammar.as_deref_mut(), &mut pushed, &mut committed) {
            Ok(out) => {
                for (&t, &lp) in self.tokens.iter().zip(&self.logprobs) {
                    e.observe(t, lp);
                }
                Ok(out)
            }
            Err(err) => {
                e.seq.rollback(pushed);
                if let Some(g) = grammar {
                    // A constraint that cannot roll back keeps its commits (documented).
                    let _ = g.rollback(committed);
                }
                self.tokens.clear();
                self.logprobs.clear();
                Err(err)
            }
        }
    }

    /// The checks that need no chain run, before anything moves.
    fn check<T: Logit>(&mut self, e: &Engine, spec: &Speculation<'_, T>) -> Result<(), Error> {
        let k = spec.draft.len();
        let vocab = e.vocab_size();
        if k == 0 {
            return Err(Error::InvalidParameter {
                name: "draft_tokens",
                value: 0.0,
                expected: "at least one draft token",
            });
        }
        let rl = spec.row_len;
        if rl == 0 {
            return Err(Error::EmptyVocabulary);
        }
        if rl < vocab {
            return Err(Error::VocabLargerThanRow {
                vocab_size: vocab,
                row_len: rl,
            });
        }
        let rows = spec.target.len() / rl;
        let whole = spec.target.len().is_multiple_of(rl);
        if whole && rows < k + 1 {
            return Err(Error::DraftTooLong {
                draft_tokens: k,
                target_rows: rows,
            });
        }
        if !whole || rows != k + 1 {
            return Err(Error::LengthMismatch {
                expected: (k + 1).saturating_mul(rl),
                actual: spec.target.len(),
            });
        }
        if let Some(&id) = spec.draft.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::TokenOutOfRange {
                id,
                vocab_size: vocab,
            });
        }
        self.sums.clear();
        match spec.q {
            DraftDistribution::Logits(rows) => {
                if rows.len() != k.saturating_mul(rl) {
                    return Err(Error::LengthMismatch {
                        expected: k.saturating_mul(rl),
                        actual: rows.len(),
                    });
                }
            }
            DraftDistribution::Dense(q) => {
                if q.len() != k.saturating_mul(vocab) {
                    return Err(Error::LengthMismatch {
                        expected: k.saturating_mul(vocab),
                        actual: q.len(),
                    });
                }
                for (i, row) in q.chunks_exact(vocab).enumerate() {
                    let sum = checked_sum(i, row.iter().map(|&w| f64::from(w)))?;
                    self.sums.push(sum);
                }
            }
            DraftDistribution::Sparse { pairs, ends } => {
                if ends.len() != k {
                    return Err(Error::LengthMismatch {
                        expected: k,
                        actual: ends.len(),
                    });
                }
                let mut start = 0;
                for (i, &end) in ends.iter().enumerate() {
                    let last = i + 1 == k;
                    if end < start || end > pairs.len() || (last && end != pairs.len()) {
                        return Err(Error::InvalidDraftDistribution {
                            position: i,
                            value: end as f64,
                            reason: "bounds that are nondecreasing and end at pairs.len()",
                        });
                    }
                    let row = &pairs[start..end];
                    if let Some(&(id, _)) = row.iter().find(|&&(t, _)| t as usize >= vocab) {
                        return Err(Error::TokenOutOfRange {
                            id,
                            vocab_size: vocab,
                        });
                    }
                    let sum = checked_sum(i, row.iter().map(|&(_, w)| w))?;
                    self.sums.push(sum);
                    start = end;
                }
            }
        }
        Ok(())
    }

    /// `q_i`, computed into `self.q` for draft logits.
    fn load_q<'b, T: Logit>(
        q: &'b mut Vec<(TokenId, f64)>,
        sums: &[f64],
        e: &mut Engine,
        spec: &Speculation<'b, T>,
        i: usize,
        mask: Option<&TokenMask>,
    ) -> Result<QView<'b>, Error> {
        let vocab = e.vocab_size();
        Ok(match spec.q {
            DraftDistribution::Logits(rows) => {
                let rl = spec.row_len;
                e.distribution(&rows[i * rl..(i + 1) * rl], mask, q)?;
                let sum: f64 = q.iter().map(|&(_, w)| w).sum();
                QView::Pairs(q, 1.0 / sum)
            }
            DraftDistribution::Dense(d) => {
                QView::Dense(&d[i * vocab..(i + 1) * vocab], 1.0 / sums[i])
            }
            DraftDistribution::Sparse { pairs, ends } => {
                let start = if i == 0 { 0 } else { ends[i - 1] };
                QView::Pairs(&pairs[start..ends[i]], 1.0 / sums[i])
            }
        })
    }

    fn run<T: Logit>(
        &mut self,
        e: &mut Engine,
        spec: &Speculation<'_, T>,
        mut grammar: Option<&mut GrammarMask>,
        pushed: &mut usize,
        committed: &mut usize,
    ) -> Result<Verified, Error> {
        let k = spec.draft.len();
        let rl = spec.row_len;
        let greedy = e.is_greedy();
        let seed = e.params().seed();
        let step0 = e.seq.step();
        let vocab = e.vocab_size();
        // The acceptance uniforms of steps step0, step0 + 1, ... are read in order, one
        // per position visited, from consecutive ChaCha blocks.
        let mut accept_rng = DrawRng::with_stream(seed, ACCEPTANCE_STREAM);
        if !greedy {
            accept_rng.seek(step0);
        }
        for (i, &x) in spec.draft.iter().enumerate() {
            let s = step0 + i as u64;
            let row = &spec.target[i * rl..(i + 1) * rl];
            let mask = match grammar.as_deref_mut() {
                Some(g) => Some(g.compute()?.0),
                None => None,
            };
            if mask.is_some_and(|m| !m.is_allowed(x)) {
                return Err(GrammarError::TokenRejected { token: x }.into());
            }
            e.distribution(row, mask, &mut self.p)?;
            if self.p.is_empty() {
                return Err(Error::NoCandidates);
            }
            let (accept, next, logprob) = if greedy {
                let top = self.p.first().ok_or(Error::NoCandidates)?.0;
                (top == x, top, 0.0)
            } else {
                let px = prob_of(&self.p, x);
                let a = accept_rng.next_uniform();
                // `q_i(x) <= Q_MAX`, so `a * Q_MAX < p(x)` accepts whatever `q_i(x)` is
                // (rounding is monotone): draft logits need no chain run then.
                let known = matches!(spec.q, DraftDistribution::Logits(_)) && a * Q_MAX < px;
                let q = if known {
                    None
                } else {
                    Some(Self::load_q(&mut self.q, &self.sums, e, spec, i, mask)?)
                };
                let accepted = q.is_none_or(|q| a * q.at(x) < px);
                if let (Some(q), false) = (q, accepted) {
                    let d = e.draw_uniform(s);
                    let (y, py) =
                        residual(&self.p, q, &mut self.scattered, &mut self.weights, vocab, d);
                    (false, y, py.ln() as f32)
                } else {
                    (true, x, px.ln() as f32)
                }
            };
            e.seq.push_drawn(next);
            *pushed += 1;
            self.tokens.push(next);
            self.logprobs.push(logprob);
            let status = commit(grammar.as_deref_mut(), next, committed)?;
            let sample = Sample::new(next, logprob);
            if !accept {
                return Ok(Verified {
                    accepted: i,
                    next: Some(sample),
                });
            }
            if status == Some(Status::Finished) {
                return Ok(Verified {
                    accepted: i + 1,
                    next: None,
                });
            }
        }
        let row = &spec.target[k * rl..];
        let mask = match grammar.as_deref_mut() {
            Some(g) => Some(g.compute()?.0),
            None => None,
        };
        let out = e.draw_only(row, mask)?;
        e.seq.push_drawn(out.token);
        *pushed += 1;
        self.tokens.push(out.token);
        self.logprobs.push(out.logprob);
        commit(grammar, out.token, committed)?;
        Ok(Verified {
            accepted: k,
            next: Some(out),
        })
    }
}

/// Commits `token` to the grammar, if any, counting the commit if the grammar took it.
fn commit(
    grammar: Option<&mut GrammarMask>,
    token: TokenId,
    committed: &mut usize,
) -> Result<Option<Status>, Error> {
    let Some(g) = grammar else {
        return Ok(None);
    };
    let before = g.committed();
    let r = g.commit(token);
    if g.committed() != before {
        *committed += 1;
    }
    Ok(Some(r?))
}

/// The sum of one draft row, checked: every entry finite and `>= 0`, the sum within
/// [`DRAFT_SUM_TOLERANCE`] of 1.
fn checked_sum(position: usize, row: impl Iterator<Item = f64>) -> Result<f64, Error> {
    let mut sum = 0.0;
    for w in row {
        if !(w >= 0.0 && w.is_finite()) {
            return Err(Error::InvalidDraftDistribution {
                position,
                value: w,
                reason: "finite probabilities >= 0",
            });
        }
        sum += w;
    }
    if (sum - 1.0).abs() > DRAFT_SUM_TOLERANCE {
        return Err(Error::InvalidDraftDistribution {
            position,
            value: sum,
            reason: "a sum within DRAFT_SUM_TOLERANCE of 1",
        });
    }
    Ok(sum)
}

/// Token `id`'s probability in a distribution of `(token, probability)` pairs.
fn prob_of(p: &[(TokenId, f64)], id: TokenId) -> f64 {
    p.iter().find(|&&(t, _)| t == id).map_or(0.0, |&(_, w)| w)
}

/// Draws from `max(0, p - q)`, renormalised, with the uniform `u`: the first of `p`'s
/// candidates (in their draw order) whose exact running residual exceeds `u` times the
/// exact total (see [`draw`]). Returns the token and its probability under `p`. A
/// residual without mass draws from `p` itself, exactly too.
///
/// The residual weights `max(0, p(t) - q(t))` are `f64` values, written once into
/// `weights` in `p`'s order; the decision on them is exact, so it depends neither on the
/// order their total is summed in nor on the rounding of the running sums.
fn residual(
    p: &[(TokenId, f64)],
    q: QView<'_>,
    scattered: &mut Vec<f64>,
    weights: &mut Vec<f64>,
    vocab: usize,
    u: f64,
) -> (TokenId, f64) {
    let scatter = match q {
        QView::Pairs(pairs, inv) if p.len().saturating_mul(pairs.len()) > SCATTER_MIN => {
            if scattered.len() != vocab {
                scattered.clear();
                scattered.resize(vocab, 0.0);
            }
            for &(t, w) in pairs {
                scattered[t as usize] = w * inv;
            }
            Some(pairs)
        }
        _ => None,
    };
    weights.clear();
    weights.extend(p.iter().map(|&(t, w)| {
        let qt = match scatter {
            Some(_) => scattered[t as usize],
            None => q.at(t),
        };
        (w - qt).max(0.0)
    }));
    if let Some(pairs) = scatter {
        for &(t, _) in pairs {
            scattered[t as usize] = 0.0;
        }
    }
    let total: f64 = weights.iter().sum();
    if total <= 0.0 {
        // No residual mass: p = q up to rounding, so p itself is the residual's limit.
        weights.clear();
        weights.extend(p.iter().map(|&(_, w)| w));
    }
    let total = if total > 0.0 {
        total
    } else {
        weights.iter().sum()
    };
    p[draw::inverse_cdf(weights, total, u)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::exact_sum::ExactSum;
    use proptest::prelude::*;

    /// The largest uniform below 1.
    const TOP: f64 = 1.0 - f64::EPSILON / 2.0;

    /// The residual weights as the module docs define them: `max(0, p(t) - q(t))`.
    fn weights(p: &[(TokenId, f64)], q: QView<'_>) -> Vec<f64> {
        p.iter().map(|&(t, w)| (w - q.at(t)).max(0.0)).collect()
    }

    /// The exact decision, with the total summed exactly in `order` (a permutation of the
    /// indices): the first positive weight whose exact running sum, in `p`'s order,
    /// exceeds `u` times the exact total; `None` without mass.
    fn exact_pick(r: &[f64], order: &[usize], u: f64) -> Option<usize> {
        let mut total = ExactSum::new();
        order.iter().for_each(|&i| total.add(r[i]));
        if total.is_zero() {
            return None;
        }
        let y = total.scaled_floor(u);
        let mut cum = ExactSum::new();
        for (i, &w) in r.iter().enumerate() {
            if w > 0.0 {
                cum.add(w);
                if cum > y {
                    return Some(i);
                }
            }
        }
        r.iter().rposition(|&w| w > 0.0)
    }

    /// A plain `f64` walk: the total and the running sums in `p`'s order, rounded.
    fn f64_walk(r: &[f64], u: f64) -> usize {
        let total: f64 = r.iter().sum();
        let mut acc = 0.0;
        for (i, &w) in r.iter().enumerate() {
            acc += w;
            if w > 0.0 && acc > u * total {
                return i;
            }
        }
        r.iter().rposition(|&w| w > 0.0).unwrap_or(0)
    }

    /// Uniforms on and next to each exact boundary of the CDF of `r`: for each index
    /// `j`, the smallest `u` whose exact decision passes `j` (by bisection on the bits
    /// of `u`, along which the decision never decreases), and the 3 uniforms either side.
    fn boundary_uniforms(r: &[f64]) -> Vec<f64> {
        let all: Vec<usize> = (0..r.len()).collect();
        let pick = |bits: u64| exact_pick(r, &all, f64::from_bits(bits));
        let mut out = vec![0.0, TOP];
        for j in 0..r.len() {
            let (mut lo, mut hi) = (0u64, TOP.to_bits());
            if pick(hi) <= Some(j) || pick(lo) > Some(j) {
                continue;
            }
            // pick(lo) <= j < pick(hi)
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if pick(mid) > Some(j) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            for b in hi.saturating_sub(3)..=hi + 3 {
                let u = f64::from_bits(b);
                if (0.0..1.0).contains(&u) {
                    out.push(u);
                }
            }
        }
        out
    }

    /// A deterministic shuffle of `0..n`.
    fn shuffled(n: usize, seed: u64) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        let mut r = seed | 1;
        for i in (1..n).rev() {
            r = r
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            v.swap(i, (r >> 33) as usize % (i + 1));
        }
        v
    }

    fn draw_residual(p: &[(TokenId, f64)], q: QView<'_>, vocab: usize, u: f64) -> TokenId {
        let (mut scattered, mut w) = (Vec::new(), Vec::new());
        let (t, pt) = residual(p, q, &mut scattered, &mut w, vocab, u);
        assert!(
            scattered.iter().all(|&x| x == 0.0),
            "scatter buffer left dirty"
        );
        assert_eq!(p.iter().find(|c| c.0 == t).map(|c| c.1), Some(pt));
        t
    }

    /// Weights whose rounded `f64` sums cross the exact boundaries: a plain walk gets some
    /// of these uniforms wrong, the residual draw none.
    #[test]
    fn residual_draw_is_exact_next_to_every_boundary() {
        // p: 1, e^-20, e^-20, e^-40, 0.25 (unnormalised, as the walk does not care) and
        // two of p's tokens in q, one outside it: the residual is 0.5, e^-20, e^-20,
        // e^-40 and 0.
        let raw = [1.0, (-20f64).exp(), (-20f64).exp(), (-40f64).exp(), 0.25];
        let p: Vec<(TokenId, f64)> = raw
            .iter()
            .enumerate()
            .map(|(i, &w)| (10 + i as TokenId, w))
            .collect();
        let pairs = [(10, 0.5), (14, 0.25), (3, 0.25)];
        let q = QView::Pairs(&pairs, 1.0);
        let r = weights(&p, q);
        let all: Vec<usize> = (0..r.len()).collect();
        let mut plain_wrong = 0;
        for u in boundary_uniforms(&r) {
            let want = exact_pick(&r, &all, u).map(|i| p[i].0);
            assert_eq!(Some(draw_residual(&p, q, 20, u)), want, "u = {u:e}");
            if Some(p[f64_walk(&r, u)].0) != want {
                plain_wrong += 1;
            }
        }
        assert!(
            plain_wrong > 0,
            "the weights do not test the exact decision"
        );
        // At the top uniform the exact running sum passes at the third weight: u * T is
        // about 5.5e-17 below T, more than the e^-40 left after it.
        assert_eq!(draw_residual(&p, q, 20, TOP), 12);
    }

    /// No residual mass (`q = p`): the draw is from `p`, exactly as well.
    #[test]
    fn residual_without_mass_draws_exactly_from_p() {
        let p: Vec<(TokenId, f64)> = [1.0, (-20f64).exp(), (-20f64).exp(), (-40f64).exp()]
            .iter()
            .enumerate()
            .map(|(i, &w)| (i as TokenId, w))
            .collect();
        let q = QView::Pairs(&p, 1.0);
        assert!(weights(&p, q).iter().all(|&w| w == 0.0));
        let pw: Vec<f64> = p.iter().map(|c| c.1).collect();
        let all: Vec<usize> = (0..pw.len()).collect();
        for u in boundary_uniforms(&pw) {
            let want = exact_pick(&pw, &all, u).map(|i| p[i].0);
            assert_eq!(Some(draw_residual(&p, q, 4, u)), want, "u = {u:e}");
        }
        assert_eq!(draw_residual(&p, q, 4, TOP), 2);
    }

    /// The acceptance uniforms read in sequence are those of each step, whatever block
    /// of ChaCha's four a step starts at, on the acceptance and the draw streams.
    #[test]
    fn sequential_uniforms_are_each_steps_own() {
        for seed in [0u64, 7, u64::MAX] {
            for start in [0u64, 1, 2, 3, 4, 5, 1021, 1 << 40] {
                for stream in [0, ACCEPTANCE_STREAM] {
                    let mut r = DrawRng::with_stream(seed, stream);
                    r.seek(start);
                    for j in 0..23 {
                        let want = DrawRng::with_stream(seed, stream).uniform(start + j);
                        assert_eq!(r.next_uniform(), want, "{seed} {start} {stream} {j}");
                    }
                }
                let mut r = DrawRng::with_stream(seed, ACCEPTANCE_STREAM);
                r.seek(start);
                assert_eq!(r.next_uniform(), acceptance_uniform(seed, start));
            }
        }
    }

    fn weight() -> impl Strategy<Value = f64> {
        prop_oneof![
            (-60i32..1).prop_map(|e| f64::from(e).exp()),
            (0.0f64..1.0),
            Just(0.0),
            Just(f64::from_bits(3)),
        ]
    }

    proptest! {
        /// For `p` and `q` of any magnitudes, through both the searched and the
        /// scattered `q`, the token at every uniform next to a boundary is the exact one,
        /// with the exact total summed in any order, and it does not move when `q`'s
        /// pairs come in another order.
        #[test]
        fn residual_is_exact_in_any_order(
            pw in prop::collection::vec(weight(), 1..40),
            qw in prop::collection::vec((weight(), any::<bool>()), 1..40),
            wide in any::<bool>(),
            seed in any::<u64>(),
        ) {
            // p's tokens are 0.., in draw order by position; q lists some of them (the
            // flagged ones) and tokens beyond p. Wide: many pairs, so q is scattered.
            let p: Vec<(TokenId, f64)> =
                pw.iter().enumerate().map(|(i, &w)| (i as TokenId, w)).collect();
            let mut pairs: Vec<(TokenId, f64)> = qw
                .iter()
                .enumerate()
                .map(|(i, &(w, in_p))| {
                    let t = if in_p && i < p.len() { i } else { 1000 + i };
                    (t as TokenId, w)
                })
                .collect();
            if wide {
                pairs.extend((0..600).map(|i| (2000 + i, 1e-3)));
            }
            let vocab = 4000;
            let inv = 1.0 / pairs.iter().map(|c| c.1).sum::<f64>().max(1e-300);
            let q = QView::Pairs(&pairs, inv);
            let r = weights(&p, q);
            let order = shuffled(r.len(), seed);
            let mut moved: Vec<(TokenId, f64)> = pairs.clone();
            let perm = shuffled(moved.len(), seed ^ 0x5A5A);
            for (i, &j) in perm.iter().enumerate() {
                moved[i] = pairs[j];
            }
            let q2 = QView::Pairs(&moved, inv);
            let has_mass = r.iter().any(|&w| w > 0.0);
            for u in boundary_uniforms(if has_mass { &r } else { &pw }) {
                let want = if has_mass {
                    exact_pick(&r, &order, u)
                } else {
                    exact_pick(&pw, &order, u).or(Some(0))
                };
                let want = want.map(|i| p[i].0);
                prop_assert_eq!(Some(draw_residual(&p, q, vocab, u)), want, "u = {:e}", u);
                prop_assert_eq!(Some(draw_residual(&p, q2, vocab, u)), want, "u = {:e}", u);
            }
        }
    }
}
