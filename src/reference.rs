//! The executable specification: a plain, sort-based implementation of the whole pipeline.
//!
//! Every function here does the obvious thing: it sorts the whole vocabulary, works in
//! `f64` (the draw sums its weights exactly), allocates freely and is slow. The fast
//! [`Sampler`](crate::Sampler) is tested against it: same surviving set, same
//! probabilities (to 1e-6), the same token for every uniform. Where the two could ever disagree, this module is right.
//!
//! The stages, in order:
//! 1. [`adjust`]: logit bias, then penalties, then the mask, on the `f32` row.
//! 2. [`candidates`]: temperature. Every finite logit `l` becomes a candidate with scaled
//!    logit `s = (l - max) / T` (in `f64`), sorted by `l` descending, ties by lower id.
//! 3. [`top_k`], [`top_p`], [`min_p`]: each keeps a prefix of the sorted candidates.
//! 4. [`draw`]: inverse CDF over the survivors in that order with one uniform, decided
//!    exactly (exact sums of the `f64` weights, so independent of summation order).
//!
//! Greedy (`T = 0`) is [`argmax`].
//!
//! A [`Chain`](crate::Chain) runs its stages in any order; [`chain_survivors`],
//! [`chain_sample`] and [`chain_greedy`] are its specification, with one [`Step`] per
//! stage. The mask comes before the first step, each step works on the candidates the
//! previous ones left ([`ChainState`]: the finite ones in draw order and the temperature
//! accumulated so far), and the draw is the same [`draw`].
//!
//! # Example
//! ```
//! use logits::reference;
//!
//! // The top-p 0.8 worked example: probabilities 0.574, 0.128, 0.100, ...
//! let probs = [0.574f64, 0.128, 0.100, 0.047, 0.032, 0.029, 0.09];
//! let row: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
//! let c = reference::candidates(&row, 1.0).unwrap();
//! let kept = reference::top_p(&c, 0.8, 1);
//! assert_eq!(kept.len(), 3);
//! let dist = reference::normalize(&kept);
//! assert!((dist[0].1 - 0.716).abs() < 1e-3);
//! ```

use crate::error::Error;
use crate::history::History;
use crate::mask::TokenMask;
use crate::params::SamplingParams;
use crate::TokenId;

/// A candidate token: its id, its adjusted `f32` logit and its scaled logit
/// `s = (l - max) / T` in `f64`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Token id.
    pub id: TokenId,
    /// Adjusted logit (before temperature).
    pub logit: f32,
    /// `(logit - max) / T`, computed in `f64`.
    pub scaled: f64,
}

impl Candidate {
    /// Unnormalised weight `exp(scaled)`.
    pub fn weight(&self) -> f64 {
        self.scaled.exp()
    }
}

/// Checks the row: not empty, no NaN, no `+inf` among the first `vocab_size` entries,
/// `vocab_size <= row.len()`. Entries past `vocab_size` are never read.
///
/// # Errors
/// [`Error::EmptyVocabulary`], [`Error::VocabLargerThanRow`], [`Error::NanLogit`],
/// [`Error::InfiniteLogit`] (the first offending index).
pub fn check_row(row: &[f32], vocab_size: usize) -> Result<(), Error> {
    if vocab_size == 0 || row.is_empty() {
        return Err(Error::EmptyVocabulary);
    }
    if vocab_size > row.len() {
        return Err(Error::VocabLargerThanRow {
            vocab_size,
            row_len: row.len(),
        });
    }
    for (index, &l) in row[..vocab_size].iter().enumerate() {
        if l.is_nan() {
            return Err(Error::NanLogit { index });
        }
        if l == f32::INFINITY {
            return Err(Error::InfiniteLogit { index });
        }
    }
    Ok(())
}

/// Stage 1: the adjustments, on a copy of the first `vocab_size` entries.
///
/// In order: `l += bias` for each biased token; then for each token seen `c > 0` times in
/// the penalty window, the repetition penalty `r` (`l > 0 ? l / r : l * r`) and then
/// `l -= c * frequency + presence` (with `c * frequency + presence` computed in `f32`);
/// then every token the mask disallows becomes `-inf`.
///
/// # Errors
/// Those of [`check_row`]; [`Error::TokenOutOfRange`] for a history or bias id
/// `>= vocab_size`; [`Error::LengthMismatch`] for a mask of another length;
/// [`Error::NanLogit`]/[`Error::InfiniteLogit`] if an adjustment overflows.
pub fn adjust(
    row: &[f32],
    vocab_size: usize,
    params: &SamplingParams,
    history: &History<'_>,
    mask: Option<&TokenMask>,
) -> Result<Vec<f32>, Error> {
    check_row(row, vocab_size)?;
    let mut l = row[..vocab_size].to_vec();
    for &id in history.tokens() {
        if id as usize >= vocab_size {
            return Err(Error::TokenOutOfRange { id, vocab_size });
        }
    }
    for &(id, b) in params.logit_bias() {
        if id as usize >= vocab_size {
            return Err(Error::TokenOutOfRange { id, vocab_size });
        }
        l[id as usize] += b;
    }
    if params.has_penalties() {
        let mut counts = std::collections::BTreeMap::<TokenId, u32>::new();
        for &id in history.penalized(params.penalty_window(), params.penalize_prompt()) {
            *counts.entry(id).or_insert(0) += 1;
        }
        let r = params.repetition_penalty();
        for (&id, &c) in &counts {
            let x = &mut l[id as usize];
            // `-inf` is absorbing, whatever the penalty.
            if *x == f32::NEG_INFINITY {
                continue;
            }
            if r != 1.0 {
                *x = if *x > 0.0 { *x / r } else { *x * r };
            }
            *x -= c as f32 * params.frequency_penalty() + params.presence_penalty();
        }
    }
    if let Some(mask) = mask {
        crate::mask::check_len(mask, vocab_size, row.len())?;
        for (id, x) in l.iter_mut().enumerate() {
            if !mask.is_allowed(id as TokenId) {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    check_row(&l, vocab_size)?;
    Ok(l)
}

/// Greedy: the index of the largest logit, the lowest index among equal ones.
///
/// # Errors
/// [`Error::NoCandidates`] when every logit is `-inf`.
pub fn argmax(l: &[f32]) -> Result<TokenId, Error> {
    let mut best: Option<usize> = None;
    for (i, &x) in l.iter().enumerate() {
        if x > f32::NEG_INFINITY && best.is_none_or(|b| x > l[b]) {
            best = Some(i);
        }
    }
    best.map(|b| b as TokenId).ok_or(Error::NoCandidates)
}

/// Stage 2: temperature `t > 0`. Every finite logit becomes a [`Candidate`]; the result is
/// sorted by logit descending, ties by lower id.
///
/// # Errors
/// [`Error::NoCandidates`] when every logit is `-inf`.
pub fn candidates(l: &[f32], t: f32) -> Result<Vec<Candidate>, Error> {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return Err(Error::NoCandidates);
    }
    let mut c: Vec<Candidate> = l
        .iter()
        .enumerate()
        .filter(|(_, &x)| x > f32::NEG_INFINITY)
        .map(|(i, &x)| Candidate {
            id: i as TokenId,
            logit: x,
            scaled: (f64::from(x) - f64::from(max)) / f64::from(t),
        })
        .collect();
    // `-0.0` and `0.0` are equal logits: a tie, broken by the lower id.
    c.sort_by(|a, b| {
        (b.logit + 0.0)
            .total_cmp(&(a.logit + 0.0))
            .then(a.id.cmp(&b.id))
    });
    Ok(c)
}

/// Top-k: the first `max(k, min_keep)` candidates.
pub fn top_k(c: &[Candidate], k: usize, min_keep: usize) -> Vec<Candidate> {
    c[..k.max(min_keep).min(c.len())].to_vec()
}

/// Top-p: the shortest prefix whose weight reaches `p` times the total weight, and at
/// least `min_keep` candidates. `p = 1` keeps all.
///
/// The decision is exact: the weights are the `f64` values [`Candidate::weight`], `p` is
/// the decimal the `f32` was written as ([`as_decimal`](crate::as_decimal)), and the
/// prefix is the shortest whose exact (real-number) running sum `C`, in candidate order,
/// has `C >= p * T`, with `T` the exact total. No sum is rounded, so the cut does not
/// depend on the order of any summation; the fast samplers cut there for every row.
pub fn top_p(c: &[Candidate], p: f32, min_keep: usize) -> Vec<Candidate> {
    if p >= 1.0 {
        return c.to_vec();
    }
    let n = crate::kernels::exact_sum::exact_prefix(
        c.iter().map(Candidate::weight),
        crate::as_decimal(p),
    )
    .unwrap_or(c.len());
    c[..n.max(min_keep).min(c.len())].to_vec()
}

/// Min-p: the candidates with `scaled - scaled_max >= ln(p)` (so `p_i >= p * p_max`,
/// equality kept), and at least `min_keep`. `p = 0` keeps all.
pub fn min_p(c: &[Candidate], p: f32, min_keep: usize) -> Vec<Candidate> {
    if p <= 0.0 || c.is_empty() {
        return c.to_vec();
    }
    let top = c[0].scaled;
    let cut = crate::as_decimal(p).ln();
    let n = c.iter().take_while(|x| x.scaled - top >= cut).count();
    c[..n.max(min_keep).min(c.len())].to_vec()
}

/// The final distribution: each survivor with its probability `weight / total`.
pub fn normalize(c: &[Candidate]) -> Vec<(TokenId, f64)> {
    let total: f64 = c.iter().map(Candidate::weight).sum();
    c.iter().map(|x| (x.id, x.weight() / total)).collect()
}

/// Inverse CDF: the first survivor whose cumulative weight exceeds `u * total`, with `u`
/// in `[0, 1)`. A zero-weight survivor is never returned.
///
/// The decision is exact: the weights are the `f64` values [`Candidate::weight`], the
/// total `T` is their exact (real-number) sum, and the token is the first survivor in
/// draw order whose exact running sum `C` has `C > u * T`. No sum is rounded, so the
/// result does not depend on the order of any summation; the fast samplers return this
/// token for every `u` in `[0, 1)`.
pub fn draw(c: &[Candidate], u: f64) -> TokenId {
    let i = crate::kernels::exact_sum::exact_index(c.iter().map(Candidate::weight), u)
        .unwrap_or_else(|| c.iter().rposition(|x| x.weight() > 0.0).unwrap_or(0));
    c[i].id
}

/// The surviving candidates after temperature and the three tail cuts, in draw order.
/// Greedy returns the argmax alone, with `scaled = 0`.
///
/// # Errors
/// [`Error::NoCandidates`] when every adjusted logit is `-inf`.
pub fn survivors(adjusted: &[f32], params: &SamplingParams) -> Result<Vec<Candidate>, Error> {
    if params.is_greedy() {
        let id = argmax(adjusted)?;
        return Ok(vec![Candidate {
            id,
            logit: adjusted[id as usize],
            scaled: 0.0,
        }]);
    }
    let keep = params.min_tokens_to_keep();
    let mut c = candidates(adjusted, params.temperature())?;
    if let Some(k) = params.top_k() {
        c = top_k(&c, k, keep);
    }
    c = top_p(&c, params.top_p(), keep);
    c = min_p(&c, params.min_p(), keep);
    Ok(c)
}

/// The whole pipeline for one step: adjust, cut, draw with uniform `u`. Returns the token
/// and its final logprob.
///
/// # Errors
/// Those of [`adjust`] and [`survivors`].
pub fn sample(
    row: &[f32],
    vocab_size: usize,
    params: &SamplingParams,
    history: &History<'_>,
    mask: Option<&TokenMask>,
    u: f64,
) -> Result<(TokenId, f64), Error> {
    let adjusted = adjust(row, vocab_size, params, history, mask)?;
    let s = survivors(&adjusted, params)?;
    let token = draw(&s, u);
    let total: f64 = s.iter().map(Candidate::weight).sum();
    let w = s
        .iter()
        .find(|x| x.id == token)
        .map_or(0.0, Candidate::weight);
    Ok((token, (w / total).ln()))
}

/// Log-softmax of the raw row at `token`: `row[token] - logsumexp(row[..vocab_size])`.
pub fn raw_logprob(row: &[f32], vocab_size: usize, token: TokenId) -> f64 {
    let r = &row[..vocab_size];
    let m = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let z: f64 = r.iter().map(|&x| (f64::from(x) - f64::from(m)).exp()).sum();
    f64::from(r[token as usize]) - f64::from(m) - z.ln()
}

/// One stage of a [`Chain`](crate::Chain), for the chain functions below
/// ([`chain_survivors`], [`chain_sample`], [`chain_greedy`]).
///
/// Each variant has the documented semantics of the stage it names. Adjustments
/// (`Bias`, `Penalties`) change the logits of the candidates still present; `Temperature`
/// multiplies the accumulated temperature `T`; every other step is a cut, which works on
/// the candidates' probabilities `p_i = exp((l_i - l_max) / T) / total` (`f64`, with
/// `l_max` the largest current logit and `total` the sum over the current candidates)
/// and keeps a subset of them. A `min_keep` of 0 is taken as 1, as the stages'
/// `min_keep` does. Parameters are taken as given: the stages' constructors refuse
/// the values outside their ranges.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Step {
    /// [`LogitBias`](crate::LogitBias): `l += bias` for each listed token present; `-inf`
    /// bans it. A later entry for the same id replaces an earlier one; an id
    /// `>= vocab_size` is [`Error::TokenOutOfRange`].
    Bias(Vec<(TokenId, f32)>),
    /// [`Penalties`](crate::Penalties): for each distinct token seen `c > 0` times in
    /// the penalty window and still present, the repetition penalty (`l > 0 ? l / r :
    /// l * r`, skipped for `r = 1`), then `l -= c * frequency + presence` (computed in
    /// `f32`).
    Penalties {
        /// Repetition penalty `r > 0` (1 is off).
        repetition: f32,
        /// Frequency penalty (0 is off).
        frequency: f32,
        /// Presence penalty (0 is off).
        presence: f32,
        /// Count only the last `n` tokens of the history (all when `None`).
        window: Option<usize>,
        /// Whether the prompt's tokens count.
        penalize_prompt: bool,
    },
    /// [`Temperature`](crate::Temperature) `t > 0`: `T *= t` (in `f64`).
    Temperature(f32),
    /// [`TopK`](crate::TopK): the first `max(k, min_keep)` candidates in draw order.
    TopK {
        /// The number of candidates kept.
        k: usize,
        /// At least this many are kept.
        min_keep: usize,
    },
    /// [`TopP`](crate::TopP): the shortest prefix in draw order whose cumulative weight
    /// (summed in `f64` in that order) reaches `p * total`, the crossing token kept, and
    /// at least `min_keep`; all of them when `p >= 1` or when rounding leaves the target
    /// unreached.
    TopP {
        /// The probability mass kept.
        p: f32,
        /// At least this many are kept.
        min_keep: usize,
    },
    /// [`MinP`](crate::MinP): the candidates with `s_i - s_max >= ln(p)` for the scaled
    /// logits `s = (l - l_max) / T` (so `p_i >= p * p_max`, equality kept), at least
    /// `min_keep`; all of them when `p <= 0`.
    MinP {
        /// The fraction of the top probability a candidate needs.
        p: f32,
        /// At least this many are kept.
        min_keep: usize,
    },
    /// [`TypicalP`](crate::TypicalP) (Hugging Face's `TypicalLogitsWarper`): with
    /// `ln p_i = s_i - ln(total)`, the entropy `H = -sum p_i ln p_i` (over `p_i > 0`) and
    /// the distances `d_i = |-ln p_i - H|`, the candidates are ordered by `d_i`
    /// ascending, ties to the lower id; the first of them at which the cumulative weight
    /// (in that order, summed exactly) reaches `p * total` sets `d*`, and every candidate
    /// with `d_i <= d*` is kept (all of them when the target is never reached), or the
    /// `min_keep` first ones in that order when that is more. Nothing changes when
    /// `p >= 1` or at most one candidate is left. The total and the entropy's terms
    /// `(w_i / total) * (ln(total) - s_i)` are summed exactly and rounded once to `f64`,
    /// so `H` and the distances do not depend on the candidates' order.
    Typical {
        /// The probability mass kept.
        p: f32,
        /// At least this many are kept.
        min_keep: usize,
    },
    /// [`EpsilonCutoff`](crate::EpsilonCutoff) (Hugging Face's `EpsilonLogitsWarper`):
    /// keeps `p_i >= epsilon`; when fewer than `min_keep` do, also every candidate whose
    /// logit is at least the `min_keep`-th largest (ties kept).
    Epsilon {
        /// The least probability kept.
        epsilon: f32,
        /// At least this many are kept.
        min_keep: usize,
    },
    /// [`EtaCutoff`](crate::EtaCutoff) (Hugging Face's `EtaLogitsWarper`): `Epsilon` with
    /// the cut `eta = min(epsilon, sqrt(epsilon) * exp(-H))`, `H` the entropy of the
    /// current distribution (as in `Typical`).
    Eta {
        /// The stage's `epsilon`, from which `eta` is derived.
        epsilon: f32,
        /// At least this many are kept.
        min_keep: usize,
    },
    /// [`TopNSigma`](crate::TopNSigma) (llama.cpp): with `mean` and `sigma` the mean and
    /// population standard deviation of the current logits (not scaled; `f64`), keeps
    /// `l >= l_max - n * sigma`; nothing changes with fewer than two candidates.
    TopNSigma {
        /// The number of standard deviations kept below the top logit.
        n: f32,
    },
}

/// The candidates between two [`Step`]s of a chain.
///
/// A `-inf` logit stays `-inf` under every adjustment and has no weight, so the state
/// holds only the tokens whose logit is finite.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainState {
    /// Every candidate with its adjusted `f32` logit, in draw order: logit descending,
    /// ties (`-0.0` equal to `0.0`) to the lower id.
    pub candidates: Vec<(TokenId, f32)>,
    /// The temperature applied so far: the product (in `f64`, in step order) of every
    /// temperature step's `f64::from(t)`, starting at 1.
    pub temperature: f64,
}

impl ChainState {
    /// The candidates with their scaled logits `(l - l_max) / T` at the accumulated
    /// temperature, in draw order.
    pub fn scaled(&self) -> Vec<Candidate> {
        let Some(&(_, max)) = self.candidates.first() else {
            return Vec::new();
        };
        self.candidates
            .iter()
            .map(|&(id, logit)| Candidate {
                id,
                logit,
                scaled: (f64::from(logit) - f64::from(max)) / self.temperature,
            })
            .collect()
    }

    /// Every candidate with its probability, in draw order.
    pub fn distribution(&self) -> Vec<(TokenId, f64)> {
        normalize(&self.scaled())
    }

    /// Keeps the candidates of `kept` (a subset of [`scaled`](Self::scaled)), in
    /// draw order.
    fn keep_ids(&mut self, kept: &[Candidate]) {
        let ids: std::collections::BTreeSet<TokenId> = kept.iter().map(|c| c.id).collect();
        self.candidates.retain(|(id, _)| ids.contains(id));
    }

    /// Drops `-inf`, refuses NaN and `+inf`, and restores draw order after an
    /// adjustment.
    fn settle(&mut self) -> Result<(), Error> {
        let mut bad: Vec<(TokenId, f32)> = self
            .candidates
            .iter()
            .copied()
            .filter(|&(_, l)| l.is_nan() || l == f32::INFINITY)
            .collect();
        bad.sort_by_key(|&(id, _)| id);
        if let Some(&(id, l)) = bad.first() {
            let index = id as usize;
            return Err(if l.is_nan() {
                Error::NanLogit { index }
            } else {
                Error::InfiniteLogit { index }
            });
        }
        self.candidates.retain(|&(_, l)| l > f32::NEG_INFINITY);
        self.candidates
            .sort_by(|a, b| (b.1 + 0.0).total_cmp(&(a.1 + 0.0)).then(a.0.cmp(&b.0)));
        Ok(())
    }
}

/// The start of a chain: the row checked, the mask applied, every token left as a
/// candidate at temperature 1.
///
/// # Errors
/// In this order: [`Error::EmptyVocabulary`] for an empty row or vocabulary,
/// [`Error::VocabLargerThanRow`], [`Error::LengthMismatch`] for a mask of another
/// length than `vocab_size`, [`Error::NanLogit`] / [`Error::InfiniteLogit`] for the
/// first bad entry among the first `vocab_size`, [`Error::TokenOutOfRange`] for a
/// history token `>= vocab_size`.
pub fn chain_start(
    row: &[f32],
    vocab_size: usize,
    history: &History<'_>,
    mask: Option<&TokenMask>,
) -> Result<ChainState, Error> {
    if vocab_size == 0 || row.is_empty() {
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
    check_row(row, vocab_size)?;
    if let Some(&id) = history
        .tokens()
        .iter()
        .find(|&&id| id as usize >= vocab_size)
    {
        return Err(Error::TokenOutOfRange { id, vocab_size });
    }
    let mut state = ChainState {
        candidates: row[..vocab_size]
            .iter()
            .enumerate()
            .filter(|&(id, _)| mask.is_none_or(|m| m.is_allowed(id as TokenId)))
            .map(|(id, &l)| (id as TokenId, l))
            .collect(),
        temperature: 1.0,
    };
    state.settle()?;
    Ok(state)
}

/// Entropy `-sum p ln p` (nats) of the scaled candidates, with `ln p = s - ln(total)`;
/// zero weights add nothing. The total and the terms `(w / total) * (ln(total) - s)`
/// (none negative) are each summed exactly and rounded once, so neither depends on the
/// candidates' order. Returns the entropy and the total.
fn chain_entropy(c: &[Candidate]) -> (f64, f64) {
    use crate::kernels::exact_sum::ExactSum;
    let total = ExactSum::of(c.iter().map(Candidate::weight)).to_f64();
    let ln_total = total.ln();
    let mut h = ExactSum::new();
    for x in c {
        let w = x.weight();
        if w > 0.0 {
            h.add((w / total) * (ln_total - x.scaled));
        }
    }
    (h.to_f64(), total)
}

/// The epsilon rule: `p_i >= cut`, or (when fewer than `min_keep` pass) a logit at least
/// the `min_keep`-th largest.
fn chain_cut_below(c: &[Candidate], cut: f64, min_keep: usize) -> Vec<Candidate> {
    let total: f64 = c.iter().map(Candidate::weight).sum();
    let passes = |x: &Candidate| x.weight() / total >= cut;
    let n = c.iter().filter(|x| passes(x)).count();
    let floor = if n < min_keep && !c.is_empty() {
        c[min_keep.min(c.len()) - 1].logit
    } else {
        f32::INFINITY
    };
    c.iter()
        .filter(|x| passes(x) || x.logit >= floor)
        .copied()
        .collect()
}

/// One step of a chain on `state`.
///
/// # Errors
/// [`Error::TokenOutOfRange`] for a bias id `>= vocab_size`; [`Error::NanLogit`] /
/// [`Error::InfiniteLogit`] (the lowest such token id) when an adjustment leaves a NaN
/// or `+inf` logit.
pub fn chain_step(
    state: &mut ChainState,
    step: &Step,
    vocab_size: usize,
    history: &History<'_>,
) -> Result<(), Error> {
    let c = state.scaled();
    match *step {
        Step::Bias(ref entries) => {
            let mut bias = std::collections::BTreeMap::new();
            for &(id, b) in entries {
                if id as usize >= vocab_size {
                    return Err(Error::TokenOutOfRange { id, vocab_size });
                }
                bias.insert(id, b);
            }
            for (id, l) in &mut state.candidates {
                if let Some(b) = bias.get(id) {
                    *l += b;
                }
            }
            state.settle()?;
        }
        Step::Penalties {
            repetition,
            frequency,
            presence,
            window,
            penalize_prompt,
        } => {
            let mut counts = std::collections::BTreeMap::<TokenId, u32>::new();
            for &id in history.penalized(window, penalize_prompt) {
                *counts.entry(id).or_insert(0) += 1;
            }
            for (id, l) in &mut state.candidates {
                if let Some(&n) = counts.get(id) {
                    // `-inf` is absorbing, whatever the penalty.
                    if *l == f32::NEG_INFINITY {
                        continue;
                    }
                    if repetition != 1.0 {
                        *l = if *l > 0.0 {
                            *l / repetition
                        } else {
                            *l * repetition
                        };
                    }
                    *l -= n as f32 * frequency + presence;
                }
            }
            state.settle()?;
        }
        Step::Temperature(t) => state.temperature *= f64::from(t),
        Step::TopK { k, min_keep } => state.keep_ids(&top_k(&c, k, min_keep.max(1))),
        Step::TopP { p, min_keep } => state.keep_ids(&top_p(&c, p, min_keep.max(1))),
        Step::MinP { p, min_keep } => state.keep_ids(&min_p(&c, p, min_keep.max(1))),
        Step::Typical { p, min_keep } => {
            if p >= 1.0 || c.len() <= 1 {
                return Ok(());
            }
            let (h, total) = chain_entropy(&c);
            let ln_total = total.ln();
            let mut by_distance: Vec<(f64, Candidate)> = c
                .iter()
                .map(|x| ((-(x.scaled - ln_total) - h).abs(), *x))
                .collect();
            by_distance.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.id.cmp(&b.1.id)));
            let target = crate::kernels::exact_sum::ExactSum::of([crate::as_decimal(p) * total]);
            let mut cum = crate::kernels::exact_sum::ExactSum::new();
            let mut cutoff = f64::INFINITY;
            for (d, x) in &by_distance {
                cum.add(x.weight());
                if cum >= target {
                    cutoff = *d;
                    break;
                }
            }
            let n = by_distance.iter().filter(|(d, _)| *d <= cutoff).count();
            let n = n.max(min_keep.max(1)).min(by_distance.len());
            let kept: Vec<Candidate> = by_distance[..n].iter().map(|(_, x)| *x).collect();
            state.keep_ids(&kept);
        }
        Step::Epsilon { epsilon, min_keep } => {
            state.keep_ids(&chain_cut_below(
                &c,
                crate::as_decimal(epsilon),
                min_keep.max(1),
            ));
        }
        Step::Eta { epsilon, min_keep } => {
            if c.is_empty() {
                return Ok(());
            }
            let (h, _) = chain_entropy(&c);
            let eps = crate::as_decimal(epsilon);
            let eta = eps.min(eps.sqrt() * (-h).exp());
            state.keep_ids(&chain_cut_below(&c, eta, min_keep.max(1)));
        }
        Step::TopNSigma { n } => {
            if c.len() < 2 {
                return Ok(());
            }
            let count = c.len() as f64;
            let mean = c.iter().map(|x| f64::from(x.logit)).sum::<f64>() / count;
            let var = c
                .iter()
                .map(|x| (f64::from(x.logit) - mean).powi(2))
                .sum::<f64>()
                / count;
            let floor = f64::from(c[0].logit) - f64::from(n) * var.sqrt();
            state.candidates.retain(|&(_, l)| f64::from(l) >= floor);
        }
    }
    Ok(())
}

/// The whole chain up to its end: [`chain_start`], then every step in order.
///
/// # Errors
/// Those of [`chain_start`] and [`chain_step`], then [`Error::NoCandidates`] when no
/// candidate is left.
pub fn chain_candidates(
    row: &[f32],
    vocab_size: usize,
    history: &History<'_>,
    mask: Option<&TokenMask>,
    steps: &[Step],
) -> Result<ChainState, Error> {
    let mut state = chain_start(row, vocab_size, history, mask)?;
    for step in steps {
        chain_step(&mut state, step, vocab_size, history)?;
    }
    if state.candidates.is_empty() {
        return Err(Error::NoCandidates);
    }
    Ok(state)
}

/// The final distribution of a chain ending in a draw: every surviving token with its
/// probability at the accumulated temperature, in draw order.
///
/// # Example
/// ```
/// use logits::reference::{self, Step};
/// use logits::History;
///
/// // llama.cpp's order: cut first, temperature last.
/// let row = [2.0f32, 1.0, 0.0, -1.0];
/// let steps = [Step::TopK { k: 2, min_keep: 1 }, Step::Temperature(0.5)];
/// let history = History::new(&[], 0);
/// let dist = reference::chain_survivors(&row, 4, &history, None, &steps)?;
/// // Weights exp(0) and exp(-1 / 0.5).
/// let p0 = 1.0 / (1.0 + (-2.0f64).exp());
/// assert_eq!(dist.len(), 2);
/// assert!((dist[0].1 - p0).abs() < 1e-12);
/// // A uniform past p0 draws the second token.
/// let (token, logprob) = reference::chain_sample(&row, 4, &history, None, &steps, 0.95)?;
/// assert_eq!(token, 1);
/// assert!((logprob - (1.0 - p0).ln()).abs() < 1e-12);
/// assert_eq!(reference::chain_greedy(&row, 4, &history, None, &steps)?, 0);
/// # Ok::<(), logits::Error>(())
/// ```
///
/// # Errors
/// As [`chain_candidates`].
pub fn chain_survivors(
    row: &[f32],
    vocab_size: usize,
    history: &History<'_>,
    mask: Option<&TokenMask>,
    steps: &[Step],
) -> Result<Vec<(TokenId, f64)>, Error> {
    chain_candidates(row, vocab_size, history, mask, steps).map(|s| s.distribution())
}

/// A chain ending in a draw: the token [`draw`] picks with uniform `u` in `[0, 1)` from
/// the survivors in draw order, and its final logprob.
///
/// # Errors
/// As [`chain_candidates`].
pub fn chain_sample(
    row: &[f32],
    vocab_size: usize,
    history: &History<'_>,
    mask: Option<&TokenMask>,
    steps: &[Step],
    u: f64,
) -> Result<(TokenId, f64), Error> {
    let c = chain_candidates(row, vocab_size, history, mask, steps)?.scaled();
    let token = draw(&c, u);
    let total: f64 = c.iter().map(Candidate::weight).sum();
    let w = c
        .iter()
        .find(|x| x.id == token)
        .map_or(0.0, Candidate::weight);
    Ok((token, (w / total).ln()))
}

/// A chain ending in a greedy pick: the first survivor in draw order (the largest
/// logit, ties to the lower id).
///
/// # Errors
/// As [`chain_candidates`].
pub fn chain_greedy(
    row: &[f32],
    vocab_size: usize,
    history: &History<'_>,
    mask: Option<&TokenMask>,
    steps: &[Step],
) -> Result<TokenId, Error> {
    chain_candidates(row, vocab_size, history, mask, steps).map(|s| s.candidates[0].0)
}
