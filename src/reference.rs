//! The executable specification: a plain, sort-based implementation of the whole pipeline.
//!
//! Every function here does the obvious thing: it sorts the whole vocabulary, works in
//! `f64`, allocates freely and is slow. The fast [`Sampler`](crate::Sampler) is tested
//! against it: same surviving set, same probabilities (to 1e-6), same token for the same
//! uniform. Where the two could ever disagree, this module is right.
//!
//! The stages, in order:
//! 1. [`adjust`]: logit bias, then penalties, then the mask, on the `f32` row.
//! 2. [`candidates`]: temperature. Every finite logit `l` becomes a candidate with scaled
//!    logit `s = (l - max) / T` (in `f64`), sorted by `l` descending, ties by lower id.
//! 3. [`top_k`], [`top_p`], [`min_p`]: each keeps a prefix of the sorted candidates.
//! 4. [`draw`]: inverse CDF over the survivors in that order with one uniform.
//!
//! Greedy (`T = 0`) is [`argmax`].
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
            if r != 1.0 {
                *x = if *x > 0.0 { *x / r } else { *x * r };
            }
            *x -= c as f32 * params.frequency_penalty() + params.presence_penalty();
        }
    }
    if let Some(mask) = mask {
        if mask.len() != vocab_size {
            return Err(Error::LengthMismatch {
                expected: vocab_size,
                actual: mask.len(),
            });
        }
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

/// Top-p: the shortest prefix whose weight reaches `p` times the total weight (sums in
/// `f64`, in candidate order), and at least `min_keep` candidates. `p = 1` keeps all.
pub fn top_p(c: &[Candidate], p: f32, min_keep: usize) -> Vec<Candidate> {
    if p >= 1.0 {
        return c.to_vec();
    }
    let total: f64 = c.iter().map(Candidate::weight).sum();
    let target = f64::from(p) * total;
    let mut cum = 0.0;
    let mut n = c.len();
    for (i, x) in c.iter().enumerate() {
        cum += x.weight();
        if cum >= target {
            n = i + 1;
            break;
        }
    }
    c[..n.max(min_keep).min(c.len())].to_vec()
}

/// Min-p: the candidates with `scaled - scaled_max >= ln(p)` (so `p_i >= p * p_max`,
/// equality kept), and at least `min_keep`. `p = 0` keeps all.
pub fn min_p(c: &[Candidate], p: f32, min_keep: usize) -> Vec<Candidate> {
    if p <= 0.0 || c.is_empty() {
        return c.to_vec();
    }
    let top = c[0].scaled;
    let cut = f64::from(p).ln();
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
pub fn draw(c: &[Candidate], u: f64) -> TokenId {
    let total: f64 = c.iter().map(Candidate::weight).sum();
    let target = u * total;
    let mut cum = 0.0;
    let mut last = c[0].id;
    for x in c {
        let w = x.weight();
        if w > 0.0 {
            last = x.id;
        }
        cum += w;
        if cum > target {
            return x.id;
        }
    }
    last
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
