//! Mirostat v1 and v2 (Basu et al., arXiv 2007.14966), with llama.cpp's semantics:
//! a truncation whose size follows a running target surprise `mu`.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::select;
use crate::TokenId;

fn check_tau_eta(tau: f32, eta: f32) -> Result<(), Error> {
    if !(tau.is_finite() && tau >= 0.0) {
        return Err(Error::InvalidParameter {
            name: "mirostat_tau",
            value: tau.into(),
            expected: "a finite value >= 0",
        });
    }
    if !(eta.is_finite() && eta >= 0.0) {
        return Err(Error::InvalidParameter {
            name: "mirostat_eta",
            value: eta.into(),
            expected: "a finite value >= 0",
        });
    }
    Ok(())
}

/// `mu <- mu - eta * (surprise - tau)`, the surprise in bits of the drawn token.
fn update(mu: &mut f64, tau: f32, eta: f32, logprob: f32) {
    let surprise = -f64::from(logprob) / std::f64::consts::LN_2;
    *mu -= f64::from(eta) * (surprise - f64::from(tau));
}

/// Keeps exactly the candidate `kth` and those before it in draw order (logit
/// descending, ties by lower id).
fn keep_through(c: &mut Candidates, kth: (f32, TokenId)) {
    c.retain(|id, l| select::order(&(l, id), &kth).is_le());
}

/// Mirostat v1 (llama.cpp `mirostat = 1`): estimates the Zipf exponent of the
/// distribution and keeps the top `k` tokens that make the expected surprise `mu`.
///
/// On the candidates in draw order with scaled logits `s_i = (l_i - l_max) / T`:
///
/// ```text
/// s_hat = sum t_i b_i / sum t_i^2   over the first m - 1 pairs,
///         t_i = ln((i + 2) / (i + 1)),  b_i = ln(p_i / p_(i+1)) = s_i - s_(i+1)
/// eps   = s_hat - 1
/// k     = (eps * 2^mu / (1 - N^(-eps)))^(1 / s_hat)
/// ```
///
/// and keeps the `max(k, 1)` most likely candidates (`k` truncated toward zero, a NaN
/// `k` counts as 0, an infinite one keeps everything). The chain's draw then picks a
/// token, and [`Stage::observe`] updates `mu <- mu - eta * (-log2 p - tau)` with the
/// drawn token's final probability `p` (after this truncation). `mu` starts at
/// `2 * tau`; [`Chain::reset`](crate::Chain::reset) restores it. `N` is the vocabulary
/// size. All arithmetic in `f64`.
///
/// Put it last before the draw, after a [`Temperature`](crate::Temperature) if any
/// (llama.cpp runs `temp -> mirostat`).
///
/// - **Defaults** (llama.cpp): `tau = 5.0`, `eta = 0.1`, `m = 100`.
/// - **Edge cases**: one candidate or every candidate `-inf`: unchanged (no estimate);
///   all top-`m` logits equal gives `s_hat = 0` and a NaN or infinite `k`, handled as
///   above.
/// - **Cost**: a top-`m` selection plus a top-`k` selection; no full sort; no
///   allocation once warm (a `k` above 256 uses a vocabulary-sized buffer, reused).
///
/// # Example
/// ```
/// use logits::{Chain, Mirostat};
///
/// let stage = Mirostat::new(6, 5.0, 0.1, 100)?;
/// assert_eq!(stage.mu(), 10.0); // 2 * tau
/// let mut chain = Chain::builder(6).stage(stage).draw().seed(9).build()?;
/// let out = chain.sample(&[5.0f32, 4.0, 3.0, 2.0, 1.0, 0.0])?;
/// assert!(out.token < 6);
/// assert!(Mirostat::new(6, -1.0, 0.1, 100).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Mirostat {
    n_vocab: usize,
    tau: f32,
    eta: f32,
    m: usize,
    mu: f64,
    pairs: Vec<(f32, TokenId)>,
}

impl Mirostat {
    /// Mirostat v1 over a vocabulary of `n_vocab` tokens, target surprise `tau` (bits),
    /// learning rate `eta`, estimating from the top `m` tokens.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `tau` and `eta` are finite and `>= 0` and
    /// `m >= 2`, or naming `vocab_size` when `n_vocab` is beyond
    /// [`MAX_VOCAB_SIZE`](crate::MAX_VOCAB_SIZE); [`Error::EmptyVocabulary`] when
    /// `n_vocab == 0`; [`Error::OutOfMemory`] when the truncation's buffer for `n_vocab`
    /// tokens cannot be allocated.
    pub fn new(n_vocab: usize, tau: f32, eta: f32, m: usize) -> Result<Self, Error> {
        check_tau_eta(tau, eta)?;
        crate::check_vocab_size(n_vocab)?;
        if m < 2 {
            return Err(Error::InvalidParameter {
                name: "mirostat_m",
                value: m as f64,
                expected: "an integer >= 2",
            });
        }
        Ok(Mirostat {
            n_vocab,
            tau,
            eta,
            m,
            mu: 2.0 * f64::from(tau),
            // The truncation may select up to the whole vocabulary.
            pairs: crate::scratch::with_capacity(n_vocab).map_err(|_| Error::OutOfMemory {
                name: "vocab_size",
                value: n_vocab,
            })?,
        })
    }

    /// The running target surprise `mu` (bits).
    pub fn mu(&self) -> f64 {
        self.mu
    }
}

impl Stage for Mirostat {
    fn name(&self) -> &'static str {
        "mirostat"
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        select::select(c.logits(), self.m, &mut self.pairs);
        if self.pairs.len() < 2 {
            return Ok(());
        }
        let t = c.temperature();
        let (mut sum_tb, mut sum_tt) = (0.0f64, 0.0f64);
        for (i, w) in self.pairs.windows(2).enumerate() {
            let ti = ((i + 2) as f64 / (i + 1) as f64).ln();
            let bi = (f64::from(w[0].0) - f64::from(w[1].0)) / t;
            sum_tb += ti * bi;
            sum_tt += ti * ti;
        }
        let s_hat = sum_tb / sum_tt;
        let eps = s_hat - 1.0;
        let n = self.n_vocab as f64;
        let k = ((eps * 2f64.powf(self.mu)) / (1.0 - n.powf(-eps))).powf(1.0 / s_hat);
        let k = (k as usize).max(1);
        let finite = c
            .logits()
            .iter()
            .filter(|&&l| l > f32::NEG_INFINITY)
            .count();
        if k >= finite {
            return Ok(());
        }
        let kth = if k <= self.pairs.len() {
            self.pairs[k - 1]
        } else {
            select::select(c.logits(), k, &mut self.pairs);
            self.pairs[k - 1]
        };
        // `select` returns positions; positions and ids agree in order among ties.
        let kth = (kth.0, c.ids()[kth.1 as usize]);
        keep_through(c, kth);
        Ok(())
    }

    fn observe(&mut self, _token: TokenId, logprob: f32) {
        update(&mut self.mu, self.tau, self.eta, logprob);
    }

    fn reset(&mut self) {
        self.mu = 2.0 * f64::from(self.tau);
    }
}

/// Mirostat v2 (llama.cpp `mirostat = 2`): keeps the tokens whose surprise is at most
/// `mu`.
///
/// Keeps every candidate with `-log2 p_i <= mu`, computed as `w_i >= total * 2^-mu`
/// (weights after the temperature applied so far, `f64`); when none qualifies, keeps the most likely one (ties to the
/// lower id). The chain's draw picks a token among them, and [`Stage::observe`] updates
/// `mu <- mu - eta * (-log2 p - tau)` with the drawn token's final probability. `mu`
/// starts at `2 * tau`; [`Chain::reset`](crate::Chain::reset) restores it.
///
/// - **Defaults** (llama.cpp): `tau = 5.0`, `eta = 0.1`.
/// - **Edge cases**: zero candidates or every candidate `-inf`: unchanged.
/// - **Cost**: two passes, no sort, no allocation once warm. As the first stage of a
///   chain (after a bias and penalties), the row is never copied: one vectorised pass
///   bounds the total mass, and the tokens above `total * 2^-mu` are collected in draw
///   order; a token within that bound of the cut is decided by this stage's `f64` code.
///
/// # Example
/// ```
/// use logits::{Chain, MirostatV2};
///
/// let mut chain = Chain::builder(4).stage(MirostatV2::new(1.0, 0.1)?).draw().seed(1).build()?;
/// // mu = 2 bits: only tokens with p >= 1/4 survive.
/// assert_eq!(chain.sample(&[4.0f32, 0.0, 0.0, 0.0])?.token, 0);
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct MirostatV2 {
    tau: f32,
    eta: f32,
    mu: f64,
    weights: Vec<f64>,
}

impl MirostatV2 {
    /// Mirostat v2 with target surprise `tau` (bits) and learning rate `eta`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `tau` and `eta` are finite and `>= 0`.
    pub fn new(tau: f32, eta: f32) -> Result<Self, Error> {
        check_tau_eta(tau, eta)?;
        Ok(MirostatV2 {
            tau,
            eta,
            mu: 2.0 * f64::from(tau),
            weights: Vec::new(),
        })
    }

    /// The running target surprise `mu` (bits).
    pub fn mu(&self) -> f64 {
        self.mu
    }
}

impl Stage for MirostatV2 {
    fn name(&self) -> &'static str {
        "mirostat_v2"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::Floor(crate::chain::lower::Floor::Mirostat {
            cut: (-self.mu).exp2(),
        })
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        let max = c.max_logit();
        if max == f32::NEG_INFINITY {
            return Ok(());
        }
        let total = c.weights(&mut self.weights);
        // -log2(w / total) <= mu  <=>  w >= total * 2^-mu: no logarithm per token.
        let floor = total * (-self.mu).exp2();
        if !self.weights.iter().any(|&w| w >= floor) {
            let top = c
                .ids()
                .iter()
                .zip(c.logits())
                .filter(|&(_, &l)| l == max)
                .map(|(&id, _)| id)
                .min()
                .unwrap_or(0);
            c.retain(|id, _| id == top);
            return Ok(());
        }
        let (weights, mut i) = (&self.weights, 0);
        c.retain(|_, _| {
            let w = weights[i];
            i += 1;
            w >= floor
        });
        Ok(())
    }

    fn observe(&mut self, _token: TokenId, logprob: f32) {
        update(&mut self.mu, self.tau, self.eta, logprob);
    }

    fn reset(&mut self) {
        self.mu = 2.0 * f64::from(self.tau);
    }
}
