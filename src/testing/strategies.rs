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
    /// A few logits in `[-5, 5)`, the maximum among them, and about two thirds of the
    /// row in `[-4000, -1600)`: weights that underflow to exactly 0 at every
    /// temperature up to 2, so that survivors of probability 0 are common and their
    /// order (by logit, not by weight) matters.
    Underflow,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Shape; 6] = [
        Shape::Peaked,
        Shape::Flat,
        Shape::Ties,
        Shape::WithNegInf,
        Shape::Extreme,
        Shape::Underflow,
    ];
}

fn sizes(size: impl Into<SizeRange>) -> SizeRange {
    let size: SizeRange = size.into();
    let (lo, hi) = (size.start().max(1), size.end_incl().max(1));
    SizeRange::from(lo..=hi)
}

/// Vectors with a length in `size` that shrink in length first, by bisection: the length
/// is its own value, shrunk before the elements, and the elements are a fixed-length
/// vector cut to it. (Proptest's `vec` shrinks by deleting one element per step, which
/// runs out of shrink steps on long rows.)
fn sized<S>(elem: S, size: SizeRange) -> BoxedStrategy<Vec<S::Value>>
where
    S: Strategy + 'static,
{
    let (lo, hi) = (size.start(), size.end_incl());
    (lo..=hi, vec(elem, hi))
        .prop_map(|(n, mut v)| {
            v.truncate(n);
            v
        })
        .boxed()
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
            sized(-5.0f32..5.0, size),
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
        Shape::Flat => (sized(-0.01f32..=0.01, size), -30.0f32..30.0)
            .prop_map(|(v, offset)| v.into_iter().map(|x| offset + x).collect())
            .boxed(),
        Shape::Ties => sized((0u8..4).prop_map(|k| f32::from(k) * 0.75), size).boxed(),
        Shape::WithNegInf => (
            sized(
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
        Shape::Extreme => sized(
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
        Shape::Underflow => (
            sized(
                prop_oneof![1 => -5.0f32..5.0, 2 => -4000.0f32..-1600.0],
                size,
            ),
            any::<prop::sample::Index>(),
            -5.0f32..5.0,
        )
            .prop_map(|(mut v, i, x)| {
                let i = i.index(v.len());
                v[i] = x;
                v
            })
            .boxed(),
    }
}

/// Rows of any [`Shape`], chosen evenly. A failing row shrinks within its shape.
pub fn any_row(size: impl Into<SizeRange>) -> BoxedStrategy<Vec<f32>> {
    let size = sizes(size);
    proptest::strategy::Union::new(Shape::ALL.iter().map(|&shape| row(size.clone(), shape))).boxed()
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
    (cut_base(), prop::option::of(1..=k_max))
        .prop_map(|(p, k)| match k {
            Some(k) => p
                .to_builder()
                .top_k(k)
                .build()
                .expect("the strategy only generates valid parameters"),
            None => p,
        })
        .boxed()
}

/// [`cut_params`] without top-k, which depends on the vocabulary.
fn cut_base() -> BoxedStrategy<SamplingParams> {
    (
        temperature(),
        prop_oneof![1 => Just(1.0f32), 3 => 0.01f32..=1.0],
        prop_oneof![1 => Just(0.0f32), 1 => 0.0f32..=1.0],
        prop_oneof![4 => Just(1usize), 1 => 1usize..=4],
        any::<u64>(),
    )
        .prop_map(|(t, top_p, min_p, keep, seed)| {
            SamplingParams::builder()
                .temperature(t)
                .top_p(top_p)
                .min_p(min_p)
                .min_tokens_to_keep(keep)
                .seed(seed)
                .build()
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
    // Everything that depends on the vocabulary size (top-k, bias ids, history ids) is
    // drawn as an `Index` and placed once the row is known, so that the row shrinks
    // (in length first) with the rest of the case instead of being regenerated.
    type Ix = prop::sample::Index;
    let penalty = |lo: f32, hi: f32, off: f32| prop_oneof![Just(off), lo..=hi];
    let bias = vec(
        (
            any::<Ix>(),
            prop_oneof![8 => -10.0f32..10.0, 1 => Just(f32::NEG_INFINITY)],
        ),
        0..=4,
    );
    let history = (vec((any::<bool>(), any::<Ix>()), 0..24), any::<Ix>());
    (
        any_row(vocab),
        cut_base(),
        prop::option::of(any::<Ix>()),
        bias,
        (
            penalty(0.5, 2.0, 1.0),
            penalty(-2.0, 2.0, 0.0),
            penalty(-2.0, 2.0, 0.0),
            prop::option::of(0usize..=16),
            any::<bool>(),
        ),
        history,
        uniform(),
    )
        .prop_map(
            |(row, cut, k, bias, (rep, freq, presence, window, prompt), (ids, split), u)| {
                let n = row.len();
                let mut b = cut
                    .to_builder()
                    .repetition_penalty(rep)
                    .frequency_penalty(freq)
                    .presence_penalty(presence)
                    .penalize_prompt(prompt);
                if let Some(k) = k {
                    b = b.top_k(1 + k.index(n + 2));
                }
                let bias: BTreeMap<TokenId, f32> = bias
                    .into_iter()
                    .map(|(id, x)| (id.index(n) as TokenId, x))
                    .collect();
                for (id, x) in bias {
                    b = b.logit_bias(id, x);
                }
                if let Some(w) = window {
                    b = b.penalty_window(w);
                }
                let params = b
                    .build()
                    .expect("the strategy only generates valid parameters");
                let tokens: Vec<TokenId> = ids
                    .into_iter()
                    .map(|(small, id)| id.index(if small { n.min(8) } else { n }) as TokenId)
                    .collect();
                let prompt_len = split.index(tokens.len() + 1);
                Case {
                    row,
                    params,
                    history: TokenHistory { tokens, prompt_len },
                    u,
                }
            },
        )
        .boxed()
}

/// The element type a [`CutCase`]'s row is given in. Its `f32` row holds values exact in
/// that type, so the same values can be passed as `f16` or `bf16` with the same outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Element {
    /// `f32`.
    F32,
    /// [`half::f16`]: finite values within `±65504`, 11 significant bits.
    F16,
    /// [`half::bf16`]: the range of `f32`, 8 significant bits.
    Bf16,
}

impl Element {
    /// Every element type.
    pub const ALL: [Element; 3] = [Element::F32, Element::F16, Element::Bf16];

    /// `x` rounded to the nearest value of this type (finite values clamped into its
    /// range first), as `f32`. NaN and infinities stay what they are.
    pub fn round(self, x: f32) -> f32 {
        if !x.is_finite() {
            return x;
        }
        match self {
            Element::F32 => x,
            Element::F16 => half::f16::from_f32(x.clamp(-65504.0, 65504.0)).to_f32(),
            Element::Bf16 => half::bf16::from_f32(x.clamp(-3.38e38, 3.38e38)).to_f32(),
        }
    }
}

/// Which boundary of the cuts a [`CutCase`] was built to sit on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Boundary {
    /// Top-p's target `p * total` equals a prefix sum of the weights exactly (a tied
    /// group of weight-1 tokens, the rest underflowing to 0, `p` a dyadic fraction of
    /// the group), or is the `f32` `p` nearest to a prefix sum from either side on a row
    /// of any shape. A `>` where `>=` belongs keeps one token too many.
    TopP,
    /// Min-p's threshold equals a token's ratio exactly (`min_p = 1` with a tied
    /// maximum) or is the `f32` `min_p` nearest to a token's ratio `p_i / p_max` from
    /// either side. A `>` where `>=` belongs cuts a token it must keep.
    MinP,
    /// Top-k's `k` ends inside a group of tied logits: the k-th value is shared with
    /// the next token, and the lower ids must win.
    TopK,
    /// A row where most weights underflow to 0 ([`Shape::Underflow`]) with any cuts:
    /// zero-probability survivors and their logit order.
    Underflow,
    /// A row of any [`Shape`] with any cuts.
    Any,
}

/// One step of the temperature and the tail cuts only (no bias, penalties or history),
/// built to sit on a [`Boundary`]: the input of [`cut_case`].
#[derive(Clone, Debug, PartialEq)]
pub struct CutCase {
    /// The row: `vocab_size` logits, then padding (NaN, `±inf` or large values, never
    /// to be read). Every value is exact in `element`.
    pub row: Vec<f32>,
    /// The vocabulary size: the first `vocab_size` entries of `row`.
    pub vocab_size: usize,
    /// The element type the row is meant to be given in.
    pub element: Element,
    /// Temperature, top-k, top-p, min-p and `min_tokens_to_keep`; no adjustment.
    pub params: SamplingParams,
    /// The uniform for the draw.
    pub u: f64,
    /// The boundary the case was built on.
    pub boundary: Boundary,
}

impl CutCase {
    /// The vocabulary's logits: `row[..vocab_size]`.
    pub fn vocab(&self) -> &[f32] {
        &self.row[..self.vocab_size]
    }

    /// The row as [`half::f16`] (exact when `element` is [`Element::F16`]).
    pub fn row_f16(&self) -> Vec<half::f16> {
        self.row.iter().map(|&x| half::f16::from_f32(x)).collect()
    }

    /// The row as [`half::bf16`] (exact when `element` is [`Element::Bf16`]).
    pub fn row_bf16(&self) -> Vec<half::bf16> {
        self.row.iter().map(|&x| half::bf16::from_f32(x)).collect()
    }

    /// The reference outcome ([`Expected::with_history`] over the first `vocab_size`
    /// entries, no history, no mask).
    ///
    /// # Errors
    /// Those of [`Expected::with_history`]; [`cut_case`] never generates an input the
    /// reference refuses.
    pub fn expected(&self) -> Result<Expected, crate::Error> {
        Expected::with_history(
            &self.row,
            self.vocab_size,
            &self.params,
            &History::new(&[], 0),
            None,
        )
    }
}

/// Temperatures for the boundary cases: 1, or in `[0.05, 2)`; never greedy, which skips
/// the cuts.
fn boundary_temperature() -> BoxedStrategy<f32> {
    prop_oneof![Just(1.0f32), 0.05f32..2.0].boxed()
}

/// The reference's candidates for `row` at `t`, in draw order.
fn ordered(row: &[f32], t: f32) -> Vec<crate::reference::Candidate> {
    crate::reference::candidates(row, t).expect("a boundary row has a finite entry")
}

/// The largest `f32` `p` in `(0, 1]` with `accept(p)`, searched from `start` by steps of
/// one ulp (the accepted set is `(0, x]` for some `x` near `start`).
fn largest_f32(start: f32, accept: impl Fn(f32) -> bool) -> f32 {
    let mut p = start.clamp(f32::MIN_POSITIVE, 1.0);
    for _ in 0..64 {
        if accept(p) || p <= f32::MIN_POSITIVE {
            break;
        }
        p = p.next_down();
    }
    for _ in 0..64 {
        let up = p.next_up();
        if up > 1.0 || !accept(up) {
            break;
        }
        p = up;
    }
    p
}

type Ix = prop::sample::Index;

fn build_cut(t: f32, k: Option<usize>, top_p: f32, min_p: f32, seed: u64) -> SamplingParams {
    let mut b = SamplingParams::builder()
        .temperature(t)
        .top_p(top_p)
        .min_p(min_p)
        .seed(seed);
    if let Some(k) = k {
        b = b.top_k(k);
    }
    b.build()
        .expect("the strategy only generates valid parameters")
}

/// Top-p boundary rows and parameters; see [`Boundary::TopP`].
fn top_p_boundary(size: SizeRange, e: Element) -> BoxedStrategy<(Vec<f32>, SamplingParams)> {
    let exact = (
        sized((0u8..3, 1600.0f32..4000.0), size.clone()),
        -30.0f32..30.0,
        any::<Ix>(),
        any::<Ix>(),
        boundary_temperature(),
    )
        .prop_map(move |(cells, top, pick, i, t)| {
            // Class 0: tied at `top` (weight exactly 1); 1: `d` below (weight exactly 0);
            // 2: banned.
            let mut class: Vec<u8> = cells.iter().map(|c| c.0).collect();
            let mut ties: Vec<usize> = (0..class.len()).filter(|&j| class[j] == 0).collect();
            if ties.is_empty() {
                ties.push(pick.index(class.len()));
                class[ties[0]] = 0;
            }
            if ties.len() == 1 && class.len() > 1 {
                let other = (ties[0] + 1 + pick.index(class.len() - 1)) % class.len();
                class[other] = 0;
            } else if ties.len() % 2 == 1 {
                class[*ties.last().unwrap()] = 1;
            }
            let row: Vec<f32> = cells
                .iter()
                .zip(&class)
                .map(|(&(_, d), &c)| match c {
                    0 => top,
                    1 => top - d,
                    _ => f32::NEG_INFINITY,
                })
                .map(|x| e.round(x))
                .collect();
            let n = class.iter().filter(|&&c| c == 0).count();
            // n = q * 2^m: p = i / 2^m keeps exactly q * i of the n tied tokens, and
            // p * n = q * i is exact; for m <= 8, i / 2^m is its own shortest decimal,
            // so the threshold compared (`as_decimal(p)`) is p itself.
            let m = n.trailing_zeros().min(8);
            let top_p = if m == 0 {
                1.0
            } else {
                let i = 1 + i.index((1usize << m) - 1);
                i as f32 / (1u32 << m) as f32
            };
            (row, t, top_p)
        });
    let nearest = (
        any_row(size),
        any::<Ix>(),
        any::<bool>(),
        boundary_temperature(),
    )
        .prop_map(move |(row, j, above, t)| {
            let row: Vec<f32> = row.into_iter().map(|x| e.round(x)).collect();
            let c = ordered(&row, t);
            let total: f64 = c.iter().map(|x| x.weight()).sum();
            let j = j.index(c.len());
            let cum: f64 = c[..=j].iter().fold(0.0, |a, x| a + x.weight());
            let p = largest_f32((cum / total) as f32, |p| {
                crate::as_decimal(p) * total <= cum
            });
            let p = if above && p < 1.0 { p.next_up() } else { p };
            (row, t, p)
        });
    (prop_oneof![exact, nearest], any::<u64>())
        .prop_map(|((row, t, p), seed)| (row, build_cut(t, None, p, 0.0, seed)))
        .boxed()
}

/// Min-p boundary rows and parameters; see [`Boundary::MinP`].
fn min_p_boundary(size: SizeRange, e: Element) -> BoxedStrategy<(Vec<f32>, SamplingParams)> {
    let exact = (
        sized((any::<bool>(), -10.0f32..0.0), size.clone()),
        0.0f32..10.0,
        any::<Ix>(),
        boundary_temperature(),
    )
        .prop_map(move |(cells, top, pick, t)| {
            // Tied maxima (at least two when the row allows) and lower tokens: with
            // min_p = 1 every tied maximum is exactly on the threshold.
            let mut row: Vec<f32> = cells
                .iter()
                .map(|&(tie, below)| if tie { top } else { top - 0.5 + below })
                .collect();
            let i = pick.index(row.len());
            row[i] = top;
            let len = row.len();
            if len > 1 {
                row[(i + 1) % len] = top;
            }
            let row = row.into_iter().map(|x| e.round(x)).collect();
            (row, t, 1.0f32)
        });
    let nearest = (
        any_row(size),
        any::<Ix>(),
        any::<bool>(),
        boundary_temperature(),
    )
        .prop_map(move |(row, j, above, t)| {
            let row: Vec<f32> = row.into_iter().map(|x| e.round(x)).collect();
            let c = ordered(&row, t);
            // Only ratios an `f32` min-p can express (`ln(f32::MIN_POSITIVE)` is about
            // -87.3); the candidates are in draw order, so these are a prefix.
            let expressible = c
                .iter()
                .take_while(|x| x.scaled - c[0].scaled > -87.0)
                .count();
            let s = c[j.index(expressible)].scaled - c[0].scaled;
            let p = largest_f32(s.exp() as f32, |p| crate::as_decimal(p).ln() <= s);
            let p = if above && p < 1.0 { p.next_up() } else { p };
            (row, t, p)
        });
    (prop_oneof![exact, nearest], any::<u64>())
        .prop_map(|((row, t, p), seed)| (row, build_cut(t, None, 1.0, p, seed)))
        .boxed()
}

/// Top-k boundary rows and parameters; see [`Boundary::TopK`].
fn top_k_boundary(size: SizeRange, e: Element) -> BoxedStrategy<(Vec<f32>, SamplingParams)> {
    (
        prop_oneof![row(size.clone(), Shape::Ties), any_row(size)],
        any::<Ix>(),
        boundary_temperature(),
        any::<u64>(),
    )
        .prop_map(move |(row, pick, t, seed)| {
            let row: Vec<f32> = row.into_iter().map(|x| e.round(x)).collect();
            let c = ordered(&row, t);
            // Positions k where the k-th and the (k+1)-th candidates tie.
            let straddles: Vec<usize> = (1..c.len())
                .filter(|&k| c[k - 1].logit + 0.0 == c[k].logit + 0.0)
                .collect();
            let mut row = row;
            let k = if let Some(&k) = straddles.get(pick.index(straddles.len().max(1))) {
                k
            } else if c.len() >= 2 {
                // No tie at any boundary: make one, giving the (k+1)-th candidate the
                // k-th one's logit.
                let k = 1 + pick.index(c.len() - 1);
                row[c[k].id as usize] = c[k - 1].logit;
                k
            } else {
                1
            };
            let params = build_cut(t, Some(k), 1.0, 0.0, seed);
            (row, params)
        })
        .boxed()
}

/// Any cut parameters on rows from `rows`.
fn any_cuts(
    rows: BoxedStrategy<Vec<f32>>,
    e: Element,
) -> BoxedStrategy<(Vec<f32>, SamplingParams)> {
    (rows, cut_base(), prop::option::of(any::<Ix>()))
        .prop_map(move |(row, p, k)| {
            let row: Vec<f32> = row.into_iter().map(|x| e.round(x)).collect();
            let p = match k {
                Some(k) => p
                    .to_builder()
                    .top_k(1 + k.index(row.len() + 2))
                    .build()
                    .expect("the strategy only generates valid parameters"),
                None => p,
            };
            (row, p)
        })
        .boxed()
}

/// Rows and parameters on one [`Boundary`], with a vocabulary size in `vocab`.
///
/// The `f32` row is what [`reference`](crate::reference) sees; the parameters are
/// computed from it in the reference's arithmetic (weights `exp((l - max) / T)` in
/// `f64`, prefix sums in draw order), so "exactly on the boundary" is exact there.
///
/// # Example
/// ```
/// use logits::testing::strategies::{boundary, Boundary};
/// use proptest::prelude::*;
///
/// proptest!(|((row, p) in boundary(Boundary::MinP, 1..30))| {
///     prop_assert!(p.min_p() > 0.0 && p.min_p() <= 1.0);
///     prop_assert!(!row.is_empty() && row.len() < 30);
/// });
/// ```
pub fn boundary(
    boundary: Boundary,
    vocab: impl Into<SizeRange>,
) -> BoxedStrategy<(Vec<f32>, SamplingParams)> {
    boundary_in(boundary, sizes(vocab), Element::F32)
}

fn boundary_in(
    boundary: Boundary,
    size: SizeRange,
    e: Element,
) -> BoxedStrategy<(Vec<f32>, SamplingParams)> {
    match boundary {
        Boundary::TopP => top_p_boundary(size, e),
        Boundary::MinP => min_p_boundary(size, e),
        Boundary::TopK => top_k_boundary(size, e),
        Boundary::Underflow => any_cuts(row(size, Shape::Underflow), e),
        Boundary::Any => any_cuts(any_row(size), e),
    }
}

/// Cut-only [`CutCase`]s with a vocabulary size in `vocab`: rows and parameters on every
/// [`Boundary`] (top-p, min-p and top-k each a quarter of the cases, the rest rows
/// where weights underflow or of any shape), in every [`Element`] type (the row rounded
/// to it before the parameters are computed), with up to 3 entries of padding past the
/// vocabulary and a [`uniform`].
///
/// A `>` where `>=` belongs, at any of the three cuts, fails within a few hundred cases
/// (the crate's tests check this with mutated copies of the reference).
///
/// # Example
/// ```
/// use logits::testing::strategies::cut_case;
/// use proptest::prelude::*;
///
/// proptest!(|(c in cut_case(1..50))| {
///     let e = c.expected()?;
///     prop_assert!(c.vocab_size <= c.row.len());
///     prop_assert!(e.kept_ids().iter().all(|&id| (id as usize) < c.vocab_size));
/// });
/// ```
pub fn cut_case(vocab: impl Into<SizeRange>) -> BoxedStrategy<CutCase> {
    let size = sizes(vocab);
    let in_element = |element: Element| {
        let on = |b: Boundary| boundary_in(b, size.clone(), element).prop_map(move |x| (b, x));
        prop_oneof![
            2 => on(Boundary::TopP),
            2 => on(Boundary::MinP),
            2 => on(Boundary::TopK),
            1 => on(Boundary::Underflow),
            1 => on(Boundary::Any),
        ]
        .prop_map(move |x| (element, x))
    };
    (
        proptest::strategy::Union::new(Element::ALL.map(in_element)),
        vec(
            prop::sample::select(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1000.0]),
            0..=3,
        ),
        uniform(),
    )
        .prop_map(|((element, (boundary, (row, params))), padding, u)| {
            let vocab_size = row.len();
            let mut row = row;
            row.extend(padding);
            CutCase {
                row,
                vocab_size,
                element,
                params,
                u,
                boundary,
            }
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
