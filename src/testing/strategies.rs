//! Proptest strategies for logits rows, sampling parameters, histories and bias maps.
//!
//! Every strategy produces valid input: rows contain no NaN and no `+inf` and at least
//! one finite entry, and parameters pass [`SamplingParams::builder`]'s checks. Values
//! are bounded so that the built-in adjustments of [`sampling_params`] (bias up to
//! `±10`, repetition penalty in `[0.5, 2]`, frequency and presence penalties up to `±2`)
//! never overflow a logit to infinity.
//!
//! # Example
//! ```
//! use logits::testing::strategies::{row, Shape};
//! use proptest::prelude::*;
//!
//! proptest!(|(r in row(1..100, Shape::WithNegInf))| {
//!     prop_assert!(!r.is_empty() && r.len() < 100);
//!     prop_assert!(r.iter().all(|l| !l.is_nan() && *l != f32::INFINITY));
//!     prop_assert!(r.iter().any(|l| l.is_finite()));
//! });
//! ```

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec, SizeRange};
use proptest::prelude::*;

use crate::history::History;
use crate::params::SamplingParams;
use crate::rng::u64_to_unit;
use crate::testing::Expected;
use crate::TokenId;

/// The shape of a generated logits row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Shape {
    /// One token above all the others by 5 to 25, the rest uniform in `[-5, 5)`: a
    /// confident model, where top-p keeps very few tokens.
    Peaked,
    /// Every logit within `±0.01` of a common offset in `[-30, 30)`: a near-uniform
    /// distribution, where top-p keeps most of the row.
    Flat,
    /// Logits drawn from four values `{0, 0.75, 1.5, 2.25}`: many exact ties, which
    /// exercise the lower-id tie-break of every cut and of greedy.
    Ties,
    /// Logits in `[-10, 10)` with about a quarter of them `-inf` (banned), at least one
    /// finite.
    WithNegInf,
    /// A mix of huge magnitudes (`±[1e30, 1e38)`), subnormals, zeros and ordinary
    /// values: overflow, underflow and zero-weight candidates.
    Extreme,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Shape; 5] = [
        Shape::Peaked,
        Shape::Flat,
        Shape::Ties,
        Shape::WithNegInf,
        Shape::Extreme,
    ];
}

fn sizes(size: impl Into<SizeRange>) -> SizeRange {
    let size: SizeRange = size.into();
    let (lo, hi) = (size.start().max(1), size.end_incl().max(1));
    SizeRange::from(lo..=hi)
}

/// Rows of logits with a length in `size` (at least 1) and the given [`Shape`].
///
/// # Example
/// ```
/// use logits::testing::strategies::{row, Shape};
/// use proptest::prelude::*;
///
/// proptest!(|(r in row(8, Shape::Ties))| {
///     prop_assert_eq!(r.len(), 8);
///     prop_assert!(r.iter().all(|&l| [0.0, 0.75, 1.5, 2.25].contains(&l)));
/// });
/// ```
pub fn row(size: impl Into<SizeRange>, shape: Shape) -> BoxedStrategy<Vec<f32>> {
    let size = sizes(size);
    match shape {
        Shape::Peaked => (
            vec(-5.0f32..5.0, size),
            any::<prop::sample::Index>(),
            5.0f32..25.0,
        )
            .prop_map(|(mut v, i, boost)| {
                let i = i.index(v.len());
                let top = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                v[i] = top + boost;
                v
            })
            .boxed(),
        Shape::Flat => (-30.0f32..30.0, vec(-0.01f32..=0.01, size))
            .prop_map(|(offset, v)| v.into_iter().map(|x| offset + x).collect())
            .boxed(),
        Shape::Ties => vec((0u8..4).prop_map(|k| f32::from(k) * 0.75), size).boxed(),
        Shape::WithNegInf => (
            vec(
                prop_oneof![3 => -10.0f32..10.0, 1 => Just(f32::NEG_INFINITY)],
                size,
            ),
            any::<prop::sample::Index>(),
            -10.0f32..10.0,
        )
            .prop_map(|(mut v, i, x)| {
                if v.iter().all(|&l| l == f32::NEG_INFINITY) {
                    let i = i.index(v.len());
                    v[i] = x;
                }
                v
            })
            .boxed(),
        Shape::Extreme => vec(
            prop_oneof![
                2 => 1e30f32..1e38,
                2 => -1e38f32..-1e30,
                2 => prop::num::f32::SUBNORMAL,
                1 => Just(0.0f32),
                1 => Just(-0.0f32),
                2 => -10.0f32..10.0,
            ],
            size,
        )
        .boxed(),
    }
}

/// Rows of any [`Shape`], chosen evenly.
pub fn any_row(size: impl Into<SizeRange>) -> BoxedStrategy<Vec<f32>> {
    let size = sizes(size);
    prop::sample::select(Shape::ALL.to_vec())
        .prop_flat_map(move |shape| row(size.clone(), shape))
        .boxed()
}

/// Uniforms in `[0, 1)` of the kind the [`Sampler`](crate::Sampler) draws: a random
/// `u64` through [`u64_to_unit`], and `0.0` itself now and then.
pub fn uniform() -> BoxedStrategy<f64> {
    prop_oneof![1 => Just(0.0), 15 => any::<u64>().prop_map(u64_to_unit)].boxed()
}

/// Temperatures: `0` (greedy), `1`, and values in `[0.05, 2)`.
pub fn temperature() -> BoxedStrategy<f32> {
    prop_oneof![1 => Just(0.0f32), 1 => Just(1.0f32), 6 => 0.05f32..2.0].boxed()
}

/// Valid parameters for the temperature and the tail cuts only: temperature (including
/// 0), top-k (unset or up to `vocab_size + 2`), top-p (often 1, else in `[0.01, 1]`),
/// min-p (often 0, else in `[0, 1]`), `min_tokens_to_keep` (mostly 1, up to 4) and a
/// seed. No adjustment is set.
///
/// # Example
/// ```
/// use logits::testing::strategies::cut_params;
/// use proptest::prelude::*;
///
/// proptest!(|(p in cut_params(50))| {
///     prop_assert!(p.top_p() > 0.0 && p.top_p() <= 1.0);
///     prop_assert!(p.logit_bias().is_empty());
///     prop_assert_eq!(p.repetition_penalty(), 1.0);
/// });
/// ```
pub fn cut_params(vocab_size: usize) -> BoxedStrategy<SamplingParams> {
    let k_max = vocab_size.max(1) + 2;
    (
        temperature(),
        prop::option::of(1..=k_max),
        prop_oneof![1 => Just(1.0f32), 3 => 0.01f32..=1.0],
        prop_oneof![1 => Just(0.0f32), 1 => 0.0f32..=1.0],
        prop_oneof![4 => Just(1usize), 1 => 1usize..=4],
        any::<u64>(),
    )
        .prop_map(|(t, k, top_p, min_p, keep, seed)| {
            let mut b = SamplingParams::builder()
                .temperature(t)
                .top_p(top_p)
                .min_p(min_p)
                .min_tokens_to_keep(keep)
                .seed(seed);
            if let Some(k) = k {
                b = b.top_k(k);
            }
            b.build()
                .expect("the strategy only generates valid parameters")
        })
        .boxed()
}

/// Bias maps for a vocabulary of `vocab_size` tokens: up to `max_entries` distinct
/// token ids, sorted, each with a bias in `[-10, 10)` or, now and then, `-inf` (a ban).
///
/// # Example
/// ```
/// use logits::testing::strategies::bias_map;
/// use proptest::prelude::*;
///
/// proptest!(|(bias in bias_map(10, 4))| {
///     prop_assert!(bias.len() <= 4);
///     prop_assert!(bias.windows(2).all(|w| w[0].0 < w[1].0));
///     prop_assert!(bias.iter().all(|&(id, _)| id < 10));
/// });
/// ```
pub fn bias_map(vocab_size: usize, max_entries: usize) -> BoxedStrategy<Vec<(TokenId, f32)>> {
    let ids = 0..vocab_size.max(1) as TokenId;
    let value = prop_oneof![8 => -10.0f32..10.0, 1 => Just(f32::NEG_INFINITY)];
    btree_map(ids, value, 0..=max_entries)
        .prop_map(|m: BTreeMap<TokenId, f32>| m.into_iter().collect())
        .boxed()
}

/// An owned token history: what [`History`] views.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TokenHistory {
    /// Every token: the prompt, then the generated tokens.
    pub tokens: Vec<TokenId>,
    /// How many of `tokens` are the prompt.
    pub prompt_len: usize,
}

impl TokenHistory {
    /// The [`History`] view the reference and processors take.
    pub fn view(&self) -> History<'_> {
        History::new(&self.tokens, self.prompt_len)
    }

    /// The prompt tokens.
    pub fn prompt(&self) -> &[TokenId] {
        &self.tokens[..self.prompt_len.min(self.tokens.len())]
    }

    /// The generated tokens.
    pub fn generated(&self) -> &[TokenId] {
        &self.tokens[self.prompt_len.min(self.tokens.len())..]
    }
}

/// Histories over a vocabulary of `vocab_size` tokens with a total length in `len`, split
/// at a random point into prompt and generated tokens. Ids are drawn from the first
/// eight ids half the time, so that repeats (and so frequency penalties) are common.
///
/// # Example
/// ```
/// use logits::testing::strategies::history;
/// use proptest::prelude::*;
///
/// proptest!(|(h in history(100, 0..20))| {
///     prop_assert!(h.tokens.len() < 20 && h.prompt_len <= h.tokens.len());
///     prop_assert!(h.tokens.iter().all(|&id| id < 100));
///     prop_assert_eq!(h.view().generated(), h.generated());
/// });
/// ```
pub fn history(vocab_size: usize, len: impl Into<SizeRange>) -> BoxedStrategy<TokenHistory> {
    let n = vocab_size.max(1) as TokenId;
    let id = prop_oneof![0..n.min(8), 0..n];
    (vec(id, len), any::<prop::sample::Index>())
        .prop_map(|(tokens, split)| {
            let prompt_len = split.index(tokens.len() + 1);
            TokenHistory { tokens, prompt_len }
        })
        .boxed()
}

/// Valid parameters of every kind for a vocabulary of `vocab_size` tokens: those of
/// [`cut_params`], plus a [`bias_map`] of up to 4 entries, a repetition penalty in
/// `[0.5, 2]`, frequency and presence penalties in `[-2, 2]` (each off half the time),
/// an optional penalty window of up to 16 tokens and `penalize_prompt` either way.
///
/// # Example
/// ```
/// use logits::testing::strategies::sampling_params;
/// use proptest::prelude::*;
///
/// proptest!(|(p in sampling_params(32))| {
///     prop_assert!(p.logit_bias().iter().all(|&(id, _)| id < 32));
///     prop_assert!(p.repetition_penalty() >= 0.5 && p.repetition_penalty() <= 2.0);
///     prop_assert!(logits::Sampler::new(p, 32).is_ok());
/// });
/// ```
pub fn sampling_params(vocab_size: usize) -> BoxedStrategy<SamplingParams> {
    let penalty = |lo: f32, hi: f32, off: f32| prop_oneof![Just(off), lo..=hi];
    (
        cut_params(vocab_size),
        bias_map(vocab_size, 4),
        penalty(0.5, 2.0, 1.0),
        penalty(-2.0, 2.0, 0.0),
        penalty(-2.0, 2.0, 0.0),
        prop::option::of(0usize..=16),
        any::<bool>(),
    )
        .prop_map(|(cut, bias, rep, freq, presence, window, prompt)| {
            let mut b = cut
                .to_builder()
                .repetition_penalty(rep)
                .frequency_penalty(freq)
                .presence_penalty(presence)
                .penalize_prompt(prompt);
            for (id, x) in bias {
                b = b.logit_bias(id, x);
            }
            if let Some(n) = window {
                b = b.penalty_window(n);
            }
            b.build()
                .expect("the strategy only generates valid parameters")
        })
        .boxed()
}

/// One complete sampling step to check: a row, parameters valid for it, a history and a
/// uniform for the draw. The vocabulary is the whole row.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The logits row; the vocabulary size is its length.
    pub row: Vec<f32>,
    /// The parameters (bias ids are inside the vocabulary).
    pub params: SamplingParams,
    /// The history the penalties count.
    pub history: TokenHistory,
    /// The uniform for the draw.
    pub u: f64,
}

impl Case {
    /// The reference outcome of this case ([`Expected::with_history`] over the whole row,
    /// no mask).
    ///
    /// # Errors
    /// Those of [`Expected::with_history`].
    pub fn expected(&self) -> Result<Expected, crate::Error> {
        Expected::with_history(
            &self.row,
            self.row.len(),
            &self.params,
            &self.history.view(),
            None,
        )
    }
}

/// Complete [`Case`]s with a vocabulary size in `vocab` (at least 1): a row of any
/// [`Shape`], [`sampling_params`] for it, a [`history`] of up to 24 tokens and a
/// [`uniform`].
///
/// # Example
/// ```
/// use logits::testing::strategies::case;
/// use proptest::prelude::*;
///
/// proptest!(|(c in case(1..40))| {
///     // Every generated case is valid input; only banning every token fails.
///     match c.expected() {
///         Ok(e) => prop_assert!(e.kept_ids().contains(&e.token_for(c.u))),
///         Err(err) => prop_assert_eq!(err, logits::Error::NoCandidates),
///     }
/// });
/// ```
pub fn case(vocab: impl Into<SizeRange>) -> BoxedStrategy<Case> {
    any_row(vocab)
        .prop_flat_map(|row| {
            let n = row.len();
            (Just(row), sampling_params(n), history(n, 0..24), uniform())
        })
        .prop_map(|(row, params, history, u)| Case {
            row,
            params,
            history,
            u,
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest! {
        #[test]
        fn flat_rows_are_within_a_narrow_band(r in row(1..200, Shape::Flat)) {
            let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let min = r.iter().copied().fold(f32::INFINITY, f32::min);
            prop_assert!(max - min <= 0.0201, "{} .. {}", min, max);
        }

        #[test]
        fn neg_inf_rows_keep_a_finite_entry(r in row(1..8, Shape::WithNegInf)) {
            prop_assert!(r.iter().any(|l| l.is_finite()));
            prop_assert!(r.iter().all(|&l| l.is_finite() || l == f32::NEG_INFINITY));
        }

        #[test]
        fn extreme_rows_stay_in_their_classes(r in row(1..64, Shape::Extreme)) {
            for &l in &r {
                let a = l.abs();
                prop_assert!(
                    (1e30..=1e38).contains(&a) || a < 10.0 || l.is_subnormal(),
                    "{}", l
                );
            }
        }

        #[test]
        fn sizes_are_respected_and_at_least_one(a in any_row(0..5), b in any_row(7)) {
            prop_assert!((1..5).contains(&a.len()));
            prop_assert_eq!(b.len(), 7);
        }

        #[test]
        fn uniforms_are_in_the_unit_interval(u in uniform()) {
            prop_assert!((0.0..1.0).contains(&u));
        }

        #[test]
        fn histories_split_into_prompt_and_generated(h in history(5, 0..30)) {
            prop_assert_eq!(h.prompt().len() + h.generated().len(), h.tokens.len());
            prop_assert_eq!(h.view().step(), h.generated().len() as u64);
            prop_assert!(h.tokens.iter().all(|&t| t < 5));
        }

        #[test]
        fn generated_params_keep_bias_inside_the_vocabulary(p in sampling_params(3)) {
            prop_assert!(p.logit_bias().iter().all(|&(id, _)| id < 3));
            prop_assert!(crate::Sampler::new(p, 3).is_ok());
        }
    }
}
