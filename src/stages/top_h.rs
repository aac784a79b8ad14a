//! Top-h, the entropy-bounded cut of Hugging Face's `TopHLogitsWarper` (`top_h`;
//! Top-H decoding, arXiv:2509.02510).

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::TokenId;

/// transformers' cap on the tokens top-h considers.
const TOP_N: usize = 100;

/// Keeps the most likely tokens while their share of the entropy stays within
/// `top_h` times the entropy (Hugging Face `top_h`).
///
/// Take the `top_n` best candidates in draw order (logit descending, ties to the lower
/// id; transformers' `top_n` is 100), and their probabilities `p_i` renormalised among
/// them at the temperature applied so far. With `H = -sum p_i ln p_i` their entropy and
/// `tau = top_h * H`, keep the longest prefix whose running sum of `-p_i ln p_i` is
/// `<= tau`; the first token is always kept. Every other candidate is removed, so top-h
/// never keeps more than `top_n` tokens.
///
/// `H` is the running sum's own last value (the same terms, added in the same order), so
/// `top_h = 1` keeps all `top_n` tokens exactly; transformers computes `H` separately in
/// `f32`, which can differ in the last bits. Here everything is `f64`. A token whose
/// probability rounds to 0 ends the prefix (transformers' `0 * ln 0` is NaN there, which
/// fails the comparison for it and every later token).
///
/// - **Default**: `top_n = 100`; no default `top_h` (transformers leaves it unset).
/// - **Valid**: `0 < top_h <= 1`; `top_n >= 1`.
/// - **Edge cases**: a single candidate is kept; `-inf` candidates are dropped.
/// - **Cost**: on the whole row, one selection pass for the best `top_n`; after a cut, a
///   sort of the candidates; then `O(top_n)`. No allocation once warm.
///
/// # Example
/// ```
/// use logits::{Chain, TopH};
///
/// // One dominant token: its entropy term alone is above 0.4 H, so it is kept alone.
/// let mut chain = Chain::builder(4).stage(TopH::new(0.4)?).draw().build()?;
/// let mut dist = Vec::new();
/// chain.distribution(&[5.0f32, 1.0, 1.0, 0.0], None, &mut dist)?;
/// assert_eq!(dist.len(), 1);
/// // top_h = 1 keeps every token of a flat row.
/// let mut chain = Chain::builder(4).stage(TopH::new(1.0)?).draw().build()?;
/// chain.distribution(&[1.0f32, 1.0, 1.0, 1.0], None, &mut dist)?;
/// assert_eq!(dist.len(), 4);
/// assert!(TopH::new(0.0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TopH {
    top_h: f32,
    top_n: usize,
    pairs: Vec<(f32, TokenId)>,
    weights: Vec<f64>,
}

impl TopH {
    /// Top-h with the entropy fraction `top_h`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `0 < top_h <= 1`.
    pub fn new(top_h: f32) -> Result<Self, Error> {
        if !(top_h > 0.0 && top_h <= 1.0) {
            return Err(Error::InvalidParameter {
                name: "top_h",
                value: top_h.into(),
                expected: "a value in (0, 1]",
            });
        }
        Ok(TopH {
            top_h,
            top_n: TOP_N,
            pairs: Vec::new(),
            weights: Vec::new(),
        })
    }

    /// Consider only the best `n` candidates (default 100, transformers' `top_n`; 0 is
    /// taken as 1).
    pub fn top_n(self, n: usize) -> Self {
        TopH {
            top_n: n.max(1),
            ..self
        }
    }

    /// `top_h`.
    pub fn top_h(&self) -> f32 {
        self.top_h
    }
}

/// `-p ln p` of a weight `w > 0` out of `total`, or `None` when `p` rounds to 0.
fn term(w: f64, total: f64) -> Option<f64> {
    let p = w / total;
    (p > 0.0).then(|| -p * p.ln())
}

impl Stage for TopH {
    fn name(&self) -> &'static str {
        "top_h"
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        let n = self.top_n;
        if c.is_dense() && c.len() > n {
            crate::select::select(c.logits(), n, &mut self.pairs);
            let t = c.temperature();
            c.reset_sorted(self.pairs.iter().map(|&(l, id)| (id, l)), t);
        } else {
            c.sort();
            c.truncate(n);
        }
        if c.len() < 2 {
            return Ok(());
        }
        let total = c.weights(&mut self.weights);
        let mut h = 0.0;
        for &w in &self.weights {
            match term(w, total) {
                Some(x) => h += x,
                None => break,
            }
        }
        let tau = h * f64::from(self.top_h);
        let (mut cum, mut keep) = (0.0, 1);
        for (i, &w) in self.weights.iter().enumerate() {
            let Some(x) = term(w, total) else { break };
            cum += x;
            if i > 0 {
                if cum > tau {
                    break;
                }
                keep = i + 1;
            }
        }
        c.truncate(keep);
        Ok(())
    }
}
