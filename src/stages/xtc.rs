//! XTC, "exclude top choices" (oobabooga/text-generation-webui#6335), as in llama.cpp
//! and mlx-lm.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::TokenId;

/// The salt of XTC's coin in [`StageContext::uniform`].
const SALT: u64 = 0x5854_4300; // "XTC\0"

/// The XTC stage of a [`Chain`](crate::Chain): with probability `probability`, removes
/// every token above `threshold` except the least likely of them.
///
/// Each step draws a coin `u = ctx.uniform(salt)` in `[0, 1)` (keyed by the chain's
/// seed and the step, independent of the draw's uniform); XTC acts only when
/// `u < probability`. It then takes the candidates with probability `p_i >= threshold`
/// (and `p_i > 0`, after the temperature applied so far); if there are at least two, it
/// removes every one of them that is strictly more likely than the least likely of them,
/// unless its id is in the special-token list (mlx-lm's `xtc_special_tokens`, typically
/// EOS and newline, which XTC must not push out). Removed tokens are dropped; the chain's
/// draw renormalises.
///
/// Ties: every token tied with the least likely above-threshold token is kept (mlx-lm's
/// `p > min` rule); llama.cpp keeps one of them. The cut is skipped when fewer than
/// `min_keep` candidates would remain.
///
/// The threshold is inclusive (`p_i >= threshold`), as in llama.cpp; mlx-lm's is strict
/// (`p_i > threshold`), which [`strict_threshold`](Self::strict_threshold) selects. The
/// two differ only for a token whose probability equals the threshold exactly. The
/// threshold and the probability are read as the decimals they were written as
/// ([`as_decimal`](crate::as_decimal)).
///
/// - **Defaults**: llama.cpp `xtc_probability = 0` (off), `xtc_threshold = 0.1`.
/// - **Edge cases**: fewer than two candidates, `probability = 0`, or fewer than two
///   tokens above the threshold: unchanged. `threshold > 0.5` would make two such tokens
///   impossible, so it is refused.
/// - **Cost**: two passes, no sort; no allocation once warm.
///
/// # Example
/// ```
/// use logits::{Chain, Xtc};
///
/// // Always on; tokens 0 and 1 are both above 0.1, so the likelier (0) is removed.
/// let xtc = Xtc::new(1.0, 0.1)?.special_tokens([3]);
/// let mut chain = Chain::builder(4).stage(xtc).greedy().build()?;
/// assert_eq!(chain.sample(&[3.0f32, 2.5, -5.0, -5.0])?.token, 1);
/// assert!(Xtc::new(0.5, 0.6).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Xtc {
    probability: crate::decimal::Threshold,
    threshold: crate::decimal::Threshold,
    min_keep: usize,
    strict: bool,
    special: Vec<TokenId>,
    weights: Vec<f64>,
}

impl Xtc {
    /// XTC acting with `probability` on tokens at or above `threshold`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `0 <= probability <= 1` and
    /// `0 <= threshold <= 0.5`.
    pub fn new(probability: f32, threshold: f32) -> Result<Self, Error> {
        if !(0.0..=1.0).contains(&probability) {
            return Err(Error::InvalidParameter {
                name: "xtc_probability",
                value: probability.into(),
                expected: "a value in [0, 1]",
            });
        }
        if !(0.0..=0.5).contains(&threshold) {
            return Err(Error::InvalidParameter {
                name: "xtc_threshold",
                value: threshold.into(),
                expected: "a value in [0, 0.5]",
            });
        }
        Ok(Xtc {
            probability: crate::decimal::Threshold::new(probability),
            threshold: crate::decimal::Threshold::new(threshold),
            min_keep: 1,
            strict: false,
            special: Vec::new(),
            weights: Vec::new(),
        })
    }

    /// Token ids XTC never removes (EOS, newline, ...). Replaces any earlier list.
    pub fn special_tokens(mut self, ids: impl IntoIterator<Item = TokenId>) -> Self {
        self.special.clear();
        self.special.extend(ids);
        self.special.sort_unstable();
        self.special.dedup();
        self
    }

    /// Skip the cut when fewer than `n` candidates would remain (default 1).
    pub fn min_keep(self, n: usize) -> Self {
        Xtc {
            min_keep: n.max(1),
            ..self
        }
    }

    /// Take the tokens strictly above the threshold (`p_i > threshold`, mlx-lm's rule)
    /// instead of at or above it (`p_i >= threshold`, llama.cpp's and the default).
    pub fn strict_threshold(self, strict: bool) -> Self {
        Xtc { strict, ..self }
    }

    /// The probability that XTC acts at a step.
    pub fn probability(&self) -> f32 {
        self.probability.value
    }

    /// The threshold.
    pub fn threshold(&self) -> f32 {
        self.threshold.value
    }
}

impl Stage for Xtc {
    fn name(&self) -> &'static str {
        "xtc"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::Xtc(crate::chain::lower::XtcRule {
            probability: self.probability.decimal,
            threshold: self.threshold.decimal,
            strict: self.strict,
            keep: self.min_keep,
            special: self.special.clone(),
            salt: SALT,
        })
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if self.probability.value <= 0.0 || c.len() < 2 || c.max_logit() == f32::NEG_INFINITY {
            return Ok(());
        }
        if ctx.uniform(SALT) >= self.probability.decimal {
            return Ok(());
        }
        let total = c.weights(&mut self.weights);
        let thr = self.threshold.decimal;
        let strict = self.strict;
        let (mut above, mut least) = (0usize, f64::INFINITY);
        let mut live = 0usize;
        for &w in &self.weights {
            if w > 0.0 {
                live += 1;
                let p = w / total;
                if p > thr || (!strict && p == thr) {
                    above += 1;
                    least = least.min(w);
                }
            }
        }
        if above < 2 {
            return Ok(());
        }
        let special = &self.special;
        let removed = self
            .weights
            .iter()
            .zip(c.ids())
            .filter(|&(&w, id)| w > least && special.binary_search(id).is_err())
            .count();
        if removed == 0 || live - removed < self.min_keep {
            return Ok(());
        }
        let (weights, mut i) = (&self.weights, 0);
        c.retain(|id, _| {
            let w = weights[i];
            i += 1;
            !(w > least && special.binary_search(&id).is_err())
        });
        Ok(())
    }
}
