//! [`Candidates`]: the working set a [`Chain`](crate::Chain) passes from stage to stage.

use crate::error::Error;
use crate::TokenId;

/// A temperature the candidates can be weighted at: finite and `> 0`.
fn check_temperature(t: f64) -> Result<(), Error> {
    if t.is_finite() && t > 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidParameter {
            name: "temperature",
            value: t,
            expected: "a finite temperature > 0 for the candidates (a product of them too)",
        })
    }
}

/// The tokens still in play, with their adjusted logits and the temperature applied so
/// far.
///
/// A stage sees either every vocabulary token in id order ([`is_dense`](Self::is_dense):
/// a stage before the chain's first cut) or the compact set that cut left, in draw order
/// ([`is_sorted`](Self::is_sorted)), at the cut's temperature. Adjustment stages change
/// [`logits_mut`](Self::logits_mut); [`Candidates::scale_temperature`] records a
/// temperature (always finite and `> 0`: the setters refuse any other); cut stages
/// call [`sort`](Self::sort) and [`truncate`](Self::truncate) or
/// [`retain`](Self::retain). Probabilities are always derived, never stored: the
/// weight of candidate `i` is `exp((l_i - l_max) / T)` computed in `f64`, with `l_max`
/// the largest current logit and `T` the accumulated temperature, and its probability is
/// its weight over the total weight of the current candidates. This is the same formula
/// as the [`Sampler`](crate::Sampler) and the [`reference`](crate::reference) use, so a
/// chain in the default order samples exactly the same tokens.
#[derive(Clone, Debug)]
pub struct Candidates {
    ids: Vec<TokenId>,
    logits: Vec<f32>,
    temperature: f64,
    sorted: bool,
    dense: bool,
    pairs: Vec<(f32, TokenId)>,
}

impl Default for Candidates {
    /// As [`Candidates::new`].
    fn default() -> Self {
        Candidates::new()
    }
}

impl Candidates {
    /// An empty set at temperature 1 (buffers are reused by
    /// [`Candidates::reset_from`]).
    pub fn new() -> Self {
        Candidates {
            ids: Vec::new(),
            logits: Vec::new(),
            temperature: 1.0,
            sorted: false,
            dense: false,
            pairs: Vec::new(),
        }
    }

    /// Refills the set with every token of `row`, in id order, at temperature 1.
    pub fn reset_from(&mut self, row: impl IntoIterator<Item = f32>) {
        self.logits.clear();
        self.logits.extend(row);
        self.ids.clear();
        self.ids.extend(0..self.logits.len() as TokenId);
        // Sorting goes through `pairs`; size it for the whole set once, so that no later
        // step allocates, whatever the stages leave.
        self.pairs.clear();
        self.pairs.reserve(self.logits.len());
        self.temperature = 1.0;
        self.sorted = false;
        self.dense = true;
    }

    /// Makes the set every one of `n` tokens in id order at temperature 1, with logits
    /// to be written through [`logits_mut`](Self::logits_mut) (their values are
    /// unspecified until then). Costs nothing when the set already was the whole row.
    pub(crate) fn reset_dense(&mut self, n: usize) {
        if !(self.dense && self.ids.len() == n) {
            self.ids.clear();
            self.ids.extend(0..n as TokenId);
        }
        self.logits.resize(n, 0.0);
        self.temperature = 1.0;
        self.sorted = false;
        self.dense = true;
    }

    /// Makes room for `n` candidates, so that refilling the set with at most that many
    /// allocates nothing.
    pub(crate) fn reserve(&mut self, n: usize) -> Result<(), std::collections::TryReserveError> {
        use crate::scratch::reserve_total;
        reserve_total(&mut self.ids, n)?;
        reserve_total(&mut self.logits, n)?;
        reserve_total(&mut self.pairs, n)
    }

    /// Refills the set with `(id, logit)` pairs already in draw order (finite logits,
    /// descending, ties to the lower id), at temperature `t`: what the first cut of a
    /// chain leaves for the stages after it.
    pub(crate) fn reset_sorted(&mut self, pairs: impl IntoIterator<Item = (TokenId, f32)>, t: f64) {
        self.ids.clear();
        self.logits.clear();
        for (id, l) in pairs {
            self.ids.push(id);
            self.logits.push(l);
        }
        self.temperature = t;
        self.sorted = true;
        self.dense = false;
    }

    /// Number of candidates.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no candidate is left.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The candidates' token ids.
    pub fn ids(&self) -> &[TokenId] {
        &self.ids
    }

    /// The candidates' adjusted logits (before temperature).
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Mutable logits, for adjustment stages. Setting `-inf` bans a candidate.
    pub fn logits_mut(&mut self) -> &mut [f32] {
        self.sorted = false;
        &mut self.logits
    }

    /// The ids, and the logits to adjust in place.
    pub(crate) fn ids_and_logits_mut(&mut self) -> (&[TokenId], &mut [f32]) {
        self.sorted = false;
        (&self.ids, &mut self.logits)
    }

    /// True while the set is every vocabulary token in id order (index == id), so a
    /// token's logit is `logits()[id]`.
    pub fn is_dense(&self) -> bool {
        self.dense
    }

    /// The logit of token `id`, if it is a candidate.
    pub fn logit_of(&self, id: TokenId) -> Option<f32> {
        if self.dense {
            return self.logits.get(id as usize).copied();
        }
        self.ids
            .iter()
            .position(|&x| x == id)
            .map(|i| self.logits[i])
    }

    /// Mutable logit of token `id`, if it is a candidate.
    pub fn logit_of_mut(&mut self, id: TokenId) -> Option<&mut f32> {
        self.sorted = false;
        let i = if self.dense {
            (id as usize) < self.logits.len()
        } else {
            false
        };
        if i {
            return self.logits.get_mut(id as usize);
        }
        let pos = self.ids.iter().position(|&x| x == id)?;
        self.logits.get_mut(pos)
    }

    /// The temperature applied so far (the product of every temperature stage): always
    /// finite and `> 0`.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// Multiplies the temperature by `t`.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `temperature` unless `t` and the product are
    /// finite and `> 0`: 0 (greedy is a chain's end, not a temperature), a negative
    /// temperature (which would flip the distribution), NaN and infinity are refused, and
    /// so is a product that underflows to 0 or overflows. The temperature is then
    /// unchanged, so the candidates' distribution stays valid whether or not the stage
    /// passes the error on; a stage should return it (`?`), and the chain's sampling
    /// call then fails with it.
    pub fn scale_temperature(&mut self, t: f64) -> Result<(), Error> {
        let product = self.temperature * t;
        check_temperature(t)?;
        check_temperature(product)?;
        self.temperature = product;
        Ok(())
    }

    /// Replaces the temperature.
    ///
    /// # Errors
    /// As [`scale_temperature`](Self::scale_temperature): [`Error::InvalidParameter`]
    /// naming `temperature` unless `t` is finite and `> 0`; the temperature is then
    /// unchanged.
    pub fn set_temperature(&mut self, t: f64) -> Result<(), Error> {
        check_temperature(t)?;
        self.temperature = t;
        Ok(())
    }

    /// True when the candidates are in draw order.
    pub fn is_sorted(&self) -> bool {
        self.sorted
    }

    /// Drops `-inf` candidates and sorts the rest by logit descending, ties by lower id:
    /// the draw order.
    pub fn sort(&mut self) {
        if self.sorted {
            return;
        }
        self.retain(|_, l| l > f32::NEG_INFINITY);
        let mut pairs = std::mem::take(&mut self.pairs);
        pairs.clear();
        pairs.extend(self.logits.iter().copied().zip(self.ids.iter().copied()));
        pairs.sort_unstable_by(crate::select::order);
        self.logits.clear();
        self.ids.clear();
        for &(l, id) in &pairs {
            self.logits.push(l);
            self.ids.push(id);
        }
        self.pairs = pairs;
        self.sorted = true;
        self.dense = false;
    }

    /// Keeps the first `n` candidates (call [`sort`](Self::sort) first for a tail cut).
    pub fn truncate(&mut self, n: usize) {
        if n < self.ids.len() {
            self.ids.truncate(n);
            self.logits.truncate(n);
            self.dense = false;
        }
    }

    /// Keeps the candidates for which `keep(id, logit)` is true, in their order.
    pub fn retain(&mut self, mut keep: impl FnMut(TokenId, f32) -> bool) {
        let mut w = 0;
        for r in 0..self.ids.len() {
            let (id, l) = (self.ids[r], self.logits[r]);
            if keep(id, l) {
                self.ids[w] = id;
                self.logits[w] = l;
                w += 1;
            }
        }
        if w < self.ids.len() {
            self.dense = false;
        }
        self.ids.truncate(w);
        self.logits.truncate(w);
    }

    /// The largest current logit (`-inf` when empty).
    pub fn max_logit(&self) -> f32 {
        if self.sorted {
            return self.logits.first().copied().unwrap_or(f32::NEG_INFINITY);
        }
        self.logits
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max)
    }

    /// Writes every candidate's weight `exp((l - l_max) / T)` into `out`, in candidate
    /// order, and returns their sum (in `f64`, in that order).
    pub fn weights(&self, out: &mut Vec<f64>) -> f64 {
        let max = f64::from(self.max_logit());
        let t = self.temperature;
        out.clear();
        out.extend(
            self.logits
                .iter()
                .map(|&l| ((f64::from(l) - max) / t).exp()),
        );
        out.iter().sum()
    }
}
