//! Checks of a sampler under test against the reference: kept set, probabilities, draw.
//!
//! [`Expected`] runs [`reference`](mod@crate::reference) once for one step and then answers
//! three questions about any other implementation's output for the same step:
//!
//! - [`check_kept_set`](Expected::check_kept_set): does it keep exactly the tokens the
//!   reference keeps?
//! - [`check_distribution`](Expected::check_distribution): does it give every token the
//!   reference's final probability, within a tolerance?
//! - [`check_draw`](Expected::check_draw): does it draw the reference's token for a
//!   given uniform `u` (inverse CDF over the survivors in draw order: logit
//!   descending, ties to the lower token id)?
//!
//! Each check returns `Result<(), Mismatch>`. [`Mismatch`] is a `std::error::Error`, so
//! `?` turns it into a failing `TestCaseError` inside `proptest!`, and into a panic
//! message with `unwrap` elsewhere.
//!
//! # Example
//! ```
//! use logits::testing::Expected;
//! use logits::SamplingParams;
//!
//! // The top-p 0.8 worked example: 0.574, 0.128, 0.100, ... keeps three tokens.
//! let probs = [0.574f64, 0.128, 0.100, 0.047, 0.032, 0.029, 0.09];
//! let row: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
//! let params = SamplingParams::builder().top_p(0.8).build()?;
//! let expected = Expected::new(&row, &params)?;
//!
//! assert!(expected.check_kept_set([0, 1, 2]).is_ok());
//! // Forgetting the crossing token is caught:
//! assert!(expected.check_kept_set([0, 1]).is_err());
//! let mine = [(0, 0.574 / 0.802), (1, 0.128 / 0.802), (2, 0.100 / 0.802)];
//! assert!(expected.check_distribution(&mine, 1e-6).is_ok());
//! // u = 0.8 falls in the second token's interval [0.716, 0.875).
//! assert!(expected.check_draw(0.8, 1, 0.0).is_ok());
//! assert!(expected.check_draw(0.8, 0, 0.0).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::error::Error;
use crate::history::History;
use crate::mask::TokenMask;
use crate::params::SamplingParams;
use crate::reference::{self, Candidate};
use crate::sampler::Sampler;
use crate::testing::{Case, CutCase, Element};
use crate::TokenId;

/// How an implementation under test differs from the reference.
///
/// The message names the step's expected and actual values. It converts into
/// `proptest::test_runner::TestCaseError` (through proptest's blanket
/// `From<E: std::error::Error>`), so checks compose with `?` in `proptest!` bodies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    message: String,
}

impl Mismatch {
    pub(crate) fn new(message: String) -> Self {
        Mismatch { message }
    }

    /// The description of the difference.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Mismatch {}

/// The reference outcome of one sampling step, to compare another implementation with.
///
/// Computed by [`reference::adjust`] then [`reference::survivors`]: the surviving
/// candidates in draw order and their final probabilities. With temperature 0 the single
/// survivor is the argmax with probability 1.
///
/// **Draw order: adjusted logit descending, ties to the lower token id.** The logit is
/// the one after bias and penalties, before temperature; `-0.0` and `0.0` are equal. The
/// order never depends on weights or probabilities, so tokens whose weights underflow to
/// 0 (or round to equal values) keep their logit order.
///
/// A survivor whose weight underflows to 0 has probability exactly 0. It is still a
/// survivor ([`survivors`](Self::survivors), [`check_kept_set`](Self::check_kept_set)),
/// but [`check_distribution`](Self::check_distribution) lets a distribution leave it out,
/// and [`check_draw`](Self::check_draw) never accepts it.
///
/// # Example
/// ```
/// use logits::testing::Expected;
/// use logits::{History, SamplingParams};
///
/// // The fruit table at T = 1 with top-k 2: Apple and M survive, in the ratio e^1.5.
/// let row = [22.38f32, 20.88, 20.62, 19.88, 19.50];
/// let params = SamplingParams::builder().top_k(2).build()?;
/// let e = Expected::with_history(&row, 5, &params, &History::new(&[], 0), None)?;
/// assert_eq!(e.kept_ids(), vec![0, 1]);
/// assert!((e.probability(0) / e.probability(1) - 1.5f64.exp()).abs() < 1e-4);
/// assert_eq!(e.token_for(0.0), 0);
/// assert_eq!(e.token_for(0.99), 1);
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    survivors: Vec<Candidate>,
    distribution: Vec<(TokenId, f64)>,
}

impl Expected {
    /// The outcome for `row` (the whole row is the vocabulary) with `params`, no history
    /// and no mask.
    ///
    /// # Errors
    /// Whatever the reference refuses: [`Error::NoCandidates`] when every token is
    /// banned, [`Error::TokenOutOfRange`] for a bias id outside the row, and the row
    /// errors of [`reference::check_row`].
    pub fn new(row: &[f32], params: &SamplingParams) -> Result<Self, Error> {
        Self::with_history(row, row.len(), params, &History::new(&[], 0), None)
    }

    /// The outcome for the first `vocab_size` entries of `row` with `params`, the
    /// penalties counting `history`, and an optional grammar mask.
    ///
    /// # Errors
    /// Those of [`reference::adjust`] and [`reference::survivors`].
    pub fn with_history(
        row: &[f32],
        vocab_size: usize,
        params: &SamplingParams,
        history: &History<'_>,
        mask: Option<&TokenMask>,
    ) -> Result<Self, Error> {
        let adjusted = reference::adjust(row, vocab_size, params, history, mask)?;
        let survivors = reference::survivors(&adjusted, params)?;
        let distribution = reference::normalize(&survivors);
        Ok(Expected {
            survivors,
            distribution,
        })
    }

    /// The surviving candidates, in draw order.
    pub fn survivors(&self) -> &[Candidate] {
        &self.survivors
    }

    /// The final distribution: each survivor with its probability, in draw order.
    pub fn distribution(&self) -> &[(TokenId, f64)] {
        &self.distribution
    }

    /// The surviving token ids, ascending.
    pub fn kept_ids(&self) -> Vec<TokenId> {
        let mut ids: Vec<TokenId> = self.survivors.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids
    }

    /// The final probability of `id` (`0` when it was cut or is banned).
    pub fn probability(&self, id: TokenId) -> f64 {
        self.distribution
            .iter()
            .find(|&&(t, _)| t == id)
            .map_or(0.0, |&(_, p)| p)
    }

    /// The token the reference draws for the uniform `u` in `[0, 1)`
    /// ([`reference::draw`]).
    pub fn token_for(&self, u: f64) -> TokenId {
        reference::draw(&self.survivors, u)
    }

    /// Checks that `ids` is exactly the reference's kept set, in any order. Survivors of
    /// probability 0 (weights that underflow) count: use
    /// [`check_distribution`](Self::check_distribution) to ignore them.
    ///
    /// # Errors
    /// A [`Mismatch`] naming the tokens only one side keeps, or a duplicated id.
    pub fn check_kept_set(&self, ids: impl IntoIterator<Item = TokenId>) -> Result<(), Mismatch> {
        let mut actual = BTreeSet::new();
        for id in ids {
            if !actual.insert(id) {
                return Err(Mismatch::new(format!("token {id} is listed twice")));
            }
        }
        let expected: BTreeSet<TokenId> = self.survivors.iter().map(|c| c.id).collect();
        if actual == expected {
            return Ok(());
        }
        let missing: Vec<_> = expected.difference(&actual).collect();
        let extra: Vec<_> = actual.difference(&expected).collect();
        Err(Mismatch::new(format!(
            "kept sets differ: the reference also keeps {missing:?}, the implementation \
             also keeps {extra:?} (reference distribution: {:?})",
            self.distribution
        )))
    }

    /// Checks a final distribution `(id, probability)` against the reference's, with
    /// [`compare_distribution`]'s rules: the same tokens, listed in draw order
    /// ([logit descending, ties to the lower token id](crate::testing#draw-order)), each
    /// probability within `tolerance` (absolute) of the reference's. A survivor whose
    /// reference probability is exactly 0 may be left out; if it is listed, it must be
    /// at its place in draw order like every other token.
    ///
    /// # Errors
    /// A [`Mismatch`] for a duplicated id, a probability that is not finite, a token only
    /// one side keeps, tokens out of draw order, or a probability difference above
    /// `tolerance`.
    pub fn check_distribution(
        &self,
        actual: &[(TokenId, f64)],
        tolerance: f64,
    ) -> Result<(), Mismatch> {
        compare_distribution(&self.distribution, actual, tolerance)
    }

    /// Checks the token drawn for the uniform `u`: it must be
    /// [`token_for(u)`](Self::token_for). With `tolerance > 0`, a token whose reference CDF interval
    /// `[lo, hi)` (survivors in draw order) lies within `tolerance` of `u` is accepted
    /// too, for implementations whose cumulative sums round differently at the
    /// boundaries. A token of probability 0 is never accepted.
    ///
    /// # Errors
    /// A [`Mismatch`] naming both tokens and their intervals, or for `u` outside
    /// `[0, 1)`.
    pub fn check_draw(&self, u: f64, token: TokenId, tolerance: f64) -> Result<(), Mismatch> {
        if !(0.0..1.0).contains(&u) {
            return Err(Mismatch::new(format!("uniform {u} is not in [0, 1)")));
        }
        let expected = self.token_for(u);
        if token == expected {
            return Ok(());
        }
        let interval = |id: TokenId| {
            let mut lo = 0.0;
            for &(t, p) in &self.distribution {
                if t == id {
                    return Some((lo, lo + p));
                }
                lo += p;
            }
            None
        };
        if let Some((lo, hi)) = interval(token) {
            if tolerance > 0.0 && hi > lo && lo - tolerance <= u && u < hi + tolerance {
                return Ok(());
            }
        }
        Err(Mismatch::new(format!(
            "u = {u}: drew token {token} (interval {:?}), the reference draws {expected} \
             (interval {:?})",
            interval(token),
            interval(expected)
        )))
    }
}

/// [`Expected::new`] then [`Expected::check_distribution`], for one-line properties.
///
/// # Errors
/// A [`Mismatch`] as [`Expected::check_distribution`], or when the reference refuses the
/// input.
///
/// # Example
/// ```
/// use logits::testing::properties::check_distribution;
/// use logits::SamplingParams;
///
/// let params = SamplingParams::greedy();
/// assert!(check_distribution(&[1.0, 3.0, 3.0], &params, &[(1, 1.0)], 0.0).is_ok());
/// // Greedy breaks ties to the lower id.
/// assert!(check_distribution(&[1.0, 3.0, 3.0], &params, &[(2, 1.0)], 0.0).is_err());
/// ```
pub fn check_distribution(
    row: &[f32],
    params: &SamplingParams,
    actual: &[(TokenId, f64)],
    tolerance: f64,
) -> Result<(), Mismatch> {
    expected(row, params)?.check_distribution(actual, tolerance)
}

/// [`Expected::new`] then [`Expected::check_draw`], for one-line properties.
///
/// # Errors
/// A [`Mismatch`] as [`Expected::check_draw`], or when the reference refuses the input.
///
/// # Example
/// ```
/// use logits::testing::properties::check_draw;
/// use logits::SamplingParams;
///
/// // Two equal logits: [0, 0.5) draws token 0, [0.5, 1) token 1.
/// let params = SamplingParams::default();
/// assert!(check_draw(&[2.0, 2.0], &params, 0.25, 0, 0.0).is_ok());
/// assert!(check_draw(&[2.0, 2.0], &params, 0.75, 1, 0.0).is_ok());
/// assert!(check_draw(&[2.0, 2.0], &params, 0.75, 0, 0.0).is_err());
/// ```
pub fn check_draw(
    row: &[f32],
    params: &SamplingParams,
    u: f64,
    token: TokenId,
    tolerance: f64,
) -> Result<(), Mismatch> {
    expected(row, params)?.check_draw(u, token, tolerance)
}

/// Checks this crate's [`Sampler`] on one [`Case`] against the reference: the same
/// final distribution ([`Sampler::distribution`], probabilities within `tolerance`),
/// the same token for the uniform `case.u` ([`Sampler::sample_with_uniform`],
/// boundaries within `1e-9`), and the same error where the reference refuses the
/// input.
///
/// # Errors
/// A [`Mismatch`] describing the first difference.
///
/// # Example
/// ```
/// use logits::testing::{properties::check_sampler, strategies::case};
/// use proptest::prelude::*;
///
/// proptest!(|(c in case(1..100))| {
///     check_sampler(&c, 1e-9)?;
/// });
/// ```
pub fn check_sampler(case: &Case, tolerance: f64) -> Result<(), Mismatch> {
    let n = case.row.len();
    let history = case.history.view();
    let expected = Expected::with_history(&case.row, n, &case.params, &history, None);
    let sampler = || -> Result<Sampler, Error> {
        let mut s = Sampler::new(case.params.clone(), n)?;
        s.push_prompt(case.history.prompt())?;
        case.history
            .generated()
            .iter()
            .try_for_each(|&t| s.accept(t))?;
        Ok(s)
    };
    let mut dist = Vec::new();
    let got = sampler().and_then(|mut s| s.distribution(&case.row, None, &mut dist));
    let expected = match (expected, got) {
        (Ok(e), Ok(())) => e,
        (Err(want), Err(got)) if want == got => return Ok(()),
        (want, got) => {
            return Err(Mismatch::new(format!(
                "the reference gives {:?}, the sampler {got:?}",
                want.map(|e| e.distribution)
            )))
        }
    };
    expected.check_distribution(&dist, tolerance)?;
    let token = sampler()
        .and_then(|mut s| s.sample_with_uniform(&case.row, None, case.u))
        .map_err(|e| Mismatch::new(format!("the sampler refuses to draw: {e}")))?
        .token;
    expected.check_draw(case.u, token, 1e-9)
}

/// Compares a distribution `actual` with an expected one, `expected` (both `(id,
/// probability)`, `expected` in draw order). This is the rule of
/// [`Expected::check_distribution`] and of the conformance vectors' checks
/// ([`vectors::Vector::check_distribution`](crate::testing::vectors::Vector::check_distribution)):
///
/// - every id is listed at most once, with a finite probability;
/// - every token of `actual` is in `expected`, and every token of `expected` with a
///   positive probability is in `actual`;
/// - a token of `expected` whose probability is exactly 0 (a survivor whose weight
///   underflowed) may be left out of `actual`; listed or not, it is held to the same
///   tolerance and order as every other token;
/// - `actual` lists its tokens in the order of `expected` (draw order: logit descending,
///   ties to the lower token id);
/// - each probability is within `tolerance` (absolute) of the expected one.
///
/// # Errors
/// A [`Mismatch`] describing the first rule broken.
///
/// # Example
/// ```
/// use logits::testing::properties::compare_distribution;
///
/// let expected = [(2, 0.75), (0, 0.25), (1, 0.0)];
/// assert!(compare_distribution(&expected, &[(2, 0.75), (0, 0.25)], 1e-12).is_ok());
/// assert!(compare_distribution(&expected, &[(2, 0.75), (0, 0.25), (1, 0.0)], 1e-12).is_ok());
/// // The right probabilities in another order are a mismatch.
/// assert!(compare_distribution(&expected, &[(0, 0.25), (2, 0.75)], 1e-12).is_err());
/// // So is a zero-probability survivor listed out of its place.
/// assert!(compare_distribution(&expected, &[(1, 0.0), (2, 0.75), (0, 0.25)], 1e-12).is_err());
/// ```
pub fn compare_distribution(
    expected: &[(TokenId, f64)],
    actual: &[(TokenId, f64)],
    tolerance: f64,
) -> Result<(), Mismatch> {
    let mut mine = BTreeMap::new();
    for &(id, p) in actual {
        if !p.is_finite() {
            return Err(Mismatch::new(format!("token {id} has probability {p}")));
        }
        if mine.insert(id, p).is_some() {
            return Err(Mismatch::new(format!("token {id} is listed twice")));
        }
    }
    let position: BTreeMap<TokenId, usize> = expected
        .iter()
        .enumerate()
        .map(|(i, &(id, _))| (id, i))
        .collect();
    let extra: Vec<_> = mine
        .keys()
        .filter(|id| !position.contains_key(id))
        .collect();
    let missing: Vec<_> = expected
        .iter()
        .filter(|&&(id, p)| p > 0.0 && !mine.contains_key(&id))
        .map(|(id, _)| id)
        .collect();
    if !extra.is_empty() || !missing.is_empty() {
        return Err(Mismatch::new(format!(
            "kept sets differ: the reference also keeps {missing:?}, the implementation \
             also keeps {extra:?} (reference distribution: {expected:?})"
        )));
    }
    if let Some(w) = actual
        .windows(2)
        .find(|w| position[&w[0].0] > position[&w[1].0])
    {
        return Err(Mismatch::new(format!(
            "token {} is listed before token {}, but draw order (logit descending, ties to \
             the lower token id) puts it after (reference distribution: {expected:?})",
            w[0].0, w[1].0
        )));
    }
    let worst = expected
        .iter()
        .map(|&(id, p)| (id, p, mine.get(&id).copied().unwrap_or(0.0)))
        .max_by(|a, b| (a.1 - a.2).abs().total_cmp(&(b.1 - b.2).abs()));
    match worst {
        Some((id, p, q)) if (p - q).abs() > tolerance => Err(Mismatch::new(format!(
            "token {id}: probability {q}, reference {p} (difference {:e} > {tolerance:e})",
            (p - q).abs()
        ))),
        _ => Ok(()),
    }
}

/// Checks this crate's [`Sampler`] on one [`CutCase`] against the reference, with the row
/// given in the case's [`Element`] type and its padding: the same final distribution
/// (probabilities within `tolerance`, in draw order) and the same token for `case.u`
/// (boundaries within `1e-9`).
///
/// # Errors
/// A [`Mismatch`] describing the first difference.
///
/// # Example
/// ```
/// use logits::testing::{properties::check_cut_case, strategies::cut_case};
/// use proptest::prelude::*;
///
/// proptest!(|(c in cut_case(1..100))| {
///     check_cut_case(&c, 1e-9)?;
/// });
/// ```
pub fn check_cut_case(case: &CutCase, tolerance: f64) -> Result<(), Mismatch> {
    fn run<T: crate::Logit>(case: &CutCase, row: &[T], tolerance: f64) -> Result<(), Mismatch> {
        let expected = case
            .expected()
            .map_err(|e| Mismatch::new(format!("the reference refuses the input: {e}")))?;
        let fail = |e: Error| Mismatch::new(format!("the sampler refuses the input: {e}"));
        let sampler = || Sampler::new(case.params.clone(), case.vocab_size).map_err(fail);
        let mut dist = Vec::new();
        sampler()?
            .distribution(row, None, &mut dist)
            .map_err(fail)?;
        expected.check_distribution(&dist, tolerance)?;
        let token = sampler()?
            .sample_with_uniform(row, None, case.u)
            .map_err(fail)?
            .token;
        expected.check_draw(case.u, token, 1e-9)
    }
    match case.element {
        Element::F16 => run(case, &case.row_f16(), tolerance),
        Element::Bf16 => run(case, &case.row_bf16(), tolerance),
        _ => run(case, &case.row, tolerance),
    }
}

fn expected(row: &[f32], params: &SamplingParams) -> Result<Expected, Mismatch> {
    Expected::new(row, params)
        .map_err(|e| Mismatch::new(format!("the reference refuses the input: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::strategies::{case, cut_params, row, Shape};
    use crate::DrawRng;
    use proptest::prelude::*;

    /// The top-p 0.8 worked example, with the remaining 0.09 of mass over ten tokens.
    fn worked_example() -> Vec<f32> {
        let mut p = vec![0.574f64, 0.128, 0.100, 0.047, 0.032, 0.029];
        p.extend([0.009; 10]);
        p.iter().map(|x| x.ln() as f32).collect()
    }

    #[test]
    fn catches_a_top_p_that_drops_the_crossing_token() {
        let row = worked_example();
        let params = SamplingParams::builder().top_p(0.8).build().unwrap();
        let e = Expected::new(&row, &params).unwrap();
        assert_eq!(e.kept_ids(), vec![0, 1, 2]);
        let right = [(0, 0.574 / 0.802), (1, 0.128 / 0.802), (2, 0.100 / 0.802)];
        e.check_distribution(&right, 1e-6).unwrap();
        let wrong = [(0, 0.574 / 0.702), (1, 0.128 / 0.702)];
        let err = e.check_distribution(&wrong, 1e-6).unwrap_err();
        assert!(err.message().contains("kept sets differ"), "{err}");
        assert!(e.check_kept_set([0, 1, 2, 3]).is_err());
        assert!(e.check_kept_set([0, 1, 1, 2]).is_err());
    }

    #[test]
    fn catches_wrong_probabilities() {
        let e = Expected::new(
            &worked_example(),
            &SamplingParams::builder().top_p(0.8).build().unwrap(),
        )
        .unwrap();
        let off = [(0, 0.716 + 1e-3), (1, 0.160), (2, 0.125 - 1e-3)];
        assert!(e.check_distribution(&off, 1e-4).is_err());
        assert!(e.check_distribution(&off, 1e-2).is_ok());
        let nan = [(0, f64::NAN), (1, 0.160), (2, 0.125)];
        assert!(e.check_distribution(&nan, 1.0).is_err());
    }

    #[test]
    fn distributions_are_checked_in_draw_order_with_zero_weights_optional() {
        // Weights 1, 0, 0 (the last two underflow): draw order follows the logits, so
        // token 2 (-1000) comes before token 1 (-2000) although both weigh 0.
        let e = Expected::new(&[0.0, -2000.0, -1000.0], &SamplingParams::default()).unwrap();
        assert_eq!(e.distribution(), [(0, 1.0), (2, 0.0), (1, 0.0)]);
        e.check_distribution(&[(0, 1.0)], 0.0).unwrap();
        e.check_distribution(&[(0, 1.0), (2, 0.0), (1, 0.0)], 0.0)
            .unwrap();
        e.check_distribution(&[(0, 1.0), (1, 0.0)], 0.0).unwrap();
        // Sorting by probability with ties to the lower id puts token 1 first.
        let err = e
            .check_distribution(&[(0, 1.0), (1, 0.0), (2, 0.0)], 0.0)
            .unwrap_err();
        assert!(err.message().contains("draw order"), "{err}");
        // A listed zero-weight survivor is held to the tolerance like any other.
        assert!(e.check_distribution(&[(0, 1.0), (2, 0.5)], 0.1).is_err());
        // Tokens of positive probability out of order are caught too.
        let e = Expected::new(&[1.0, 2.0], &SamplingParams::default()).unwrap();
        let (p1, p0) = (e.probability(1), e.probability(0));
        e.check_distribution(&[(1, p1), (0, p0)], 1e-12).unwrap();
        assert!(e.check_distribution(&[(0, p0), (1, p1)], 1e-12).is_err());
    }

    #[test]
    fn draw_tolerance_accepts_only_neighbours_of_u() {
        // Two equal weights: boundary at exactly 0.5.
        let e = Expected::new(&[1.0, 1.0, f32::NEG_INFINITY], &SamplingParams::default()).unwrap();
        assert_eq!(e.token_for(0.5 - 1e-12), 0);
        assert_eq!(e.token_for(0.5), 1);
        assert!(e.check_draw(0.5, 0, 0.0).is_err());
        assert!(e.check_draw(0.5, 0, 1e-9).is_ok());
        assert!(e.check_draw(0.4, 1, 1e-9).is_err());
        // A banned token is never accepted, whatever the tolerance.
        assert!(e.check_draw(0.99, 2, 1.0).is_err());
        assert!(e.check_draw(1.0, 1, 0.0).is_err());
    }

    /// The fast `Sampler`, read through its logprobs, agrees with the reference on every
    /// kind of generated case.
    fn sampler_matches(c: &Case) -> Result<(), TestCaseError> {
        let n = c.row.len();
        let params = c.params.to_builder().logprobs(20).build()?;
        let expected = match Expected::with_history(&c.row, n, &params, &c.history.view(), None) {
            Ok(e) => e,
            Err(Error::NoCandidates) => return Ok(()),
            Err(e) => return Err(TestCaseError::fail(format!("reference refused {e}"))),
        };
        let mut s = Sampler::new(params.clone(), n)?;
        s.push_prompt(c.history.prompt())?;
        for &t in c.history.generated() {
            s.accept(t)?;
        }
        let out = s.sample(&c.row)?;
        let mut dist: Vec<(TokenId, f64)> = out
            .alternatives()
            .iter()
            .filter(|a| a.logprob > f32::NEG_INFINITY)
            .map(|a| (a.token, f64::from(a.logprob).exp()))
            .collect();
        // The alternatives come in raw-probability order, not draw order: put them in
        // the reference's order (tokens it does not keep last, where they still fail).
        let place = |id: TokenId| {
            expected
                .distribution()
                .iter()
                .position(|x| x.0 == id)
                .unwrap_or(usize::MAX)
        };
        dist.sort_by_key(|x| place(x.0));
        expected.check_distribution(&dist, 1e-6)?;
        let step = c.history.generated().len() as u64;
        let u = DrawRng::new(params.seed()).uniform(step);
        expected.check_draw(u, out.token, 1e-9)?;
        Ok(())
    }

    proptest! {
        #[test]
        fn sampler_agrees_with_the_reference(c in case(1..=20)) {
            sampler_matches(&c)?;
        }

        #[test]
        fn check_sampler_passes_on_small_and_large_rows(
            small in case(1..=20),
            large in case(500..3000),
        ) {
            check_sampler(&small, 1e-9)?;
            check_sampler(&large, 1e-9)?;
        }

        #[test]
        fn every_shape_is_valid_input(r in crate::testing::strategies::any_row(1..50), p in cut_params(50)) {
            prop_assert!(r.iter().all(|l| !l.is_nan() && *l != f32::INFINITY));
            let e = Expected::new(&r, &p)?;
            let total: f64 = e.distribution().iter().map(|x| x.1).sum();
            prop_assert!((total - 1.0).abs() < 1e-9);
        }

        #[test]
        fn peaked_rows_have_one_clear_maximum(r in row(2..50, Shape::Peaked)) {
            let mut s = r.clone();
            s.sort_by(|a, b| b.total_cmp(a));
            prop_assert!(s[0] - s[1] >= 4.99, "{:?}", r);
        }
    }
}
