//! Locally typical sampling (Meister et al., arXiv 2202.00666), with Hugging Face's
//! `TypicalLogitsWarper` semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::kernels::exact_sum::ExactSum;
use crate::TokenId;

/// Up to this many candidates, the keys are sorted directly (no histogram).
const DIRECT: usize = 64;

/// Distance buckets of 1/64 nat; distances of 64 nats and more share the last one.
const BUCKETS: usize = 64 * 64;

/// The bucket of distance `d >= 0` (monotone in `d`).
fn bucket(d: f64) -> usize {
    ((d * 64.0) as usize).min(BUCKETS - 1)
}

/// `(shifted, weight, id)`: a candidate's distance from the entropy, its weight and id.
type Key = (f64, f64, TokenId);

fn key_order(a: &Key, b: &Key) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.2.cmp(&b.2))
}

/// The first key of `keys` (sorted here, in `(shifted, id)` order) at which `acc` plus
/// the exact running sum of the weights reaches `target`; `None` when none does. The
/// `f64` running sums decide where they keep clear of the target by their bound
/// ([`fast_crossing`]); otherwise the exact sums.
fn exact_crossing(keys: &mut [Key], mut acc: ExactSum, target: &ExactSum) -> Option<Key> {
    keys.sort_unstable_by(key_order);
    if let Some(decided) = fast_crossing(keys, &acc, target) {
        return decided;
    }
    keys.iter().copied().find(|k| {
        acc.add(k.1);
        acc >= *target
    })
}

/// [`exact_crossing`]'s answer from `f64` sums, or `None` when they come within their
/// bound of the target.
///
/// The weights are finite and non-negative, so the `f64` running sums `r_i` (from `acc`
/// rounded once) never fall, and each lies within `(n + 1) 2^-53 R` of the exact one,
/// `R` the last of them (`n` roundings of sums at most `R`, and `acc`'s own); `target`
/// rounded to `t` is within `2^-53 t` of itself. With `err = (n + 4) 2^-52 max(R, t)`,
/// which covers both, a sum below `t - err` is exactly below the target and one at or
/// above `t + err` exactly at or above it: the first `r_i` at or above `t - err` decides
/// the crossing when it also reaches `t + err` (every earlier one lies below), and
/// none reaching `t - err` decides that no key does.
fn fast_crossing(keys: &[Key], acc: &ExactSum, target: &ExactSum) -> Option<Option<Key>> {
    let (t, start) = (target.to_f64(), acc.to_f64());
    let last = keys.iter().fold(start, |r, k| r + k.1);
    let err = (keys.len() as f64 + 4.0) * f64::EPSILON * last.max(t);
    let (lo, hi) = (t - err, t + err);
    if !(start < lo && last.is_finite()) {
        return None;
    }
    let mut r = start;
    for k in keys {
        r += k.1;
        if r >= lo {
            return (r >= hi).then_some(Some(*k));
        }
    }
    Some(None)
}

/// As [`exact_crossing`], in expected `O(n)`: quickselect on the keys, with the weight
/// of each lower part summed exactly; `keys` is permuted.
fn exact_threshold(keys: &mut [Key], mut acc: ExactSum, target: &ExactSum) -> Option<Key> {
    let (mut lo, mut hi) = (0usize, keys.len());
    loop {
        let s = &mut keys[lo..hi];
        if s.len() <= DIRECT {
            return exact_crossing(s, acc, target);
        }
        let mid = s.len() / 2;
        s.select_nth_unstable_by(mid, key_order);
        let mut left = acc.clone();
        s[..=mid].iter().for_each(|k| left.add(k.1));
        if left >= *target {
            hi = lo + mid + 1;
        } else {
            acc = left;
            lo += mid + 1;
        }
    }
}

/// Every finite candidate's key into `keys`, and the distance of the key at which the
/// exact running weight (in key order) reaches `target`; `None` when none does.
fn cut_all(
    keys: &mut Vec<Key>,
    c: &Candidates,
    weights: &[f64],
    shifted: &impl Fn(f32) -> f64,
    target: &ExactSum,
) -> Option<f64> {
    keys.clear();
    for ((&l, &w), &id) in c.logits().iter().zip(weights).zip(c.ids()) {
        if l > f32::NEG_INFINITY {
            keys.push((shifted(l), w, id));
        }
    }
    exact_threshold(keys, ExactSum::new(), target).map(|k| k.0)
}

/// Beyond this many terms, sums go through [`ExactSum::add_many`]'s bins.
const BINNED: usize = 1024;

/// The exact sum of `n` terms.
fn exact_sum(xs: impl Iterator<Item = f64>, n: usize) -> ExactSum {
    let mut s = ExactSum::new();
    if n > BINNED {
        s.add_many(xs);
    } else {
        xs.for_each(|x| s.add(x));
    }
    s
}

/// The exact sum of `weights`, rounded once to `f64`: the same total whatever order the
/// candidates are in.
pub(crate) fn exact_total(weights: &[f64]) -> f64 {
    exact_sum(weights.iter().copied(), weights.len()).to_f64()
}

/// Entropy `H = -sum p ln p` of the candidates' distribution (nats, `f64`), from their
/// weights (as [`Candidates::weights`] writes them) and their [`exact_total`]. Zero
/// weights add nothing. Each term `(w / total) * (ln(total) - s)` (with `s <= 0` the
/// scaled logit and `total >= 1`, so no term is negative) is summed exactly and the sum
/// rounded once, so `H` does not depend on the candidates' order: [`reference`]
/// computes the same bits.
///
/// [`reference`]: crate::reference
pub(crate) fn entropy(c: &Candidates, weights: &[f64], total: f64) -> f64 {
    let (max, t, ln_total) = (f64::from(c.max_logit()), c.temperature(), total.ln());
    let terms = c.logits().iter().zip(weights).filter(|&(_, &w)| w > 0.0);
    let terms = terms.map(|(&l, &w)| (w / total) * (ln_total - (f64::from(l) - max) / t));
    exact_sum(terms, weights.len()).to_f64()
}

/// The typical-p stage of a [`Chain`](crate::Chain) (locally typical sampling; Hugging
/// Face `typical_p`, llama.cpp `typ_p`).
///
/// With `p_i` the candidates' probabilities (after the temperature applied so far),
/// `H = -sum p_i ln p_i` the entropy and `d_i = |-ln p_i - H|` each token's distance from
/// it, the candidates are ordered by `d_i` ascending (ties by lower id) and the shortest
/// prefix whose cumulative weight reaches `mass * total` decides a cut-off distance
/// `d*`; every candidate with `d_i <= d*` is kept (so tokens tied at `d*` are all kept),
/// and at least the `min_keep` first ones in that order. This is Hugging Face's
/// `TypicalLogitsWarper` (`last_ind = count(cumsum < mass)`, remove `d > d[last_ind]`),
/// computed in `f64`. `-inf` candidates are dropped.
///
/// Every sum is order-free: the total and the entropy are summed exactly and rounded
/// once, and the running weight is compared with `mass * total` exactly, so the kept set
/// does not depend on the order of the candidates, and equals that of
/// [`reference`](crate::reference) bit for bit.
///
/// - **Default**: off (`mass = 1`); Hugging Face and llama.cpp both treat `1.0` as off.
///   The paper suggests `0.2`–`0.95`.
/// - **Edge cases**: zero or one candidate: unchanged; every candidate `-inf`: unchanged
///   (the chain then reports [`Error::NoCandidates`]); a uniform distribution keeps
///   everything (all distances are 0). The mass is read as the decimal it was written as
///   ([`as_decimal`](crate::as_decimal)).
/// - **Cost**: `O(n)`: exact sums of the weights and the entropy terms; up to 64
///   candidates, a sort of their distances; beyond, one pass that
///   histograms the distances in buckets of 1/64 nat, a second that sums the weight
///   below the bucket where the mass is reached exactly and finds the cut-off among
///   that bucket's tokens only, by weighted quickselect; no full sort. No allocation once its buffers have
///   grown to the vocabulary. As the first stage of a chain (after the bias and
///   penalties), the engine decides the cut on the row in place instead: one vectorised
///   pass for the mass and the entropy, and exact weights only for the tokens it
///   collects near the cut; this `apply` runs only when a decision falls within the
///   bounds of the fast statistics and of a precise pass, the row is degenerate, or the
///   interval reaches past what the collections hold.
///
/// The kept tokens are not necessarily the most probable ones: a token far more likely
/// than "typical" can be cut.
///
/// # Example
/// ```
/// use logits::{Chain, TypicalP};
///
/// let mut chain = Chain::builder(4).stage(TypicalP::new(0.5)?).draw().seed(7).build()?;
/// let out = chain.sample(&[2.0f32, 1.9, 1.8, -6.0])?;
/// assert!(out.token < 3);
/// assert!(TypicalP::new(0.0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TypicalP {
    mass: crate::decimal::Threshold,
    min_keep: usize,
    weights: Vec<f64>,
    keys: Vec<Key>,
    bucket_w: Vec<f64>,
    bucket_n: Vec<usize>,
}

impl TypicalP {
    /// Locally typical sampling keeping `mass` of the probability.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `0 < mass <= 1`.
    pub fn new(mass: f32) -> Result<Self, Error> {
        if !(mass > 0.0 && mass <= 1.0) {
            return Err(Error::InvalidParameter {
                name: "typical_p",
                value: mass.into(),
                expected: "a value in (0, 1] (1 is off)",
            });
        }
        Ok(TypicalP {
            mass: crate::decimal::Threshold::new(mass),
            min_keep: 1,
            weights: Vec::new(),
            keys: Vec::new(),
            bucket_w: Vec::new(),
            bucket_n: Vec::new(),
        })
    }

    /// Keep at least `n` candidates (Hugging Face's `min_tokens_to_keep`; default 1).
    pub fn min_keep(self, n: usize) -> Self {
        TypicalP {
            min_keep: n.max(1),
            ..self
        }
    }

    /// The mass.
    pub fn mass(&self) -> f32 {
        self.mass.value
    }
}

impl Stage for TypicalP {
    fn name(&self) -> &'static str {
        "typical_p"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        use crate::chain::lower::{Floor, Lowering};
        if self.mass.value >= 1.0 {
            return Lowering::Opaque;
        }
        Lowering::Floor(Floor::Typical {
            mass: self.mass.decimal,
            keep: self.min_keep,
        })
    }

    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        let max = c.max_logit();
        if self.mass.value >= 1.0 || c.len() <= 1 || max == f32::NEG_INFINITY {
            return Ok(());
        }
        c.weights(&mut self.weights);
        let total_x = exact_sum(self.weights.iter().copied(), self.weights.len());
        let total = total_x.to_f64();
        let h = entropy(c, &self.weights, total);
        let (maxd, t, ln_total) = (f64::from(max), c.temperature(), total.ln());
        let shifted = |l: f32| (-((f64::from(l) - maxd) / t - ln_total) - h).abs();
        // The target is compared with exact running sums, so the cut does not depend on
        // the candidates' order. Never reached: every candidate is kept.
        let target = self.mass.decimal * total;
        let target_x = ExactSum::of([target]);
        if total_x < target_x {
            return Ok(());
        }
        let (d, n_before, live) = if c.len() <= DIRECT {
            // Few candidates: every key, sorted.
            let Some(d) = cut_all(&mut self.keys, c, &self.weights, &shifted, &target_x) else {
                return Ok(());
            };
            (d, 0, self.keys.len())
        } else {
            // Pass 1: weight (in `f64`, to guess the bucket) and count of the candidates
            // per distance bucket (buckets are monotone in d, so tied distances share one).
            self.bucket_w.clear();
            self.bucket_w.resize(BUCKETS, 0.0);
            self.bucket_n.clear();
            self.bucket_n.resize(BUCKETS, 0);
            let mut live = 0usize;
            for (&l, &w) in c.logits().iter().zip(&self.weights) {
                if l > f32::NEG_INFINITY {
                    let b = bucket(shifted(l));
                    self.bucket_w[b] += w;
                    self.bucket_n[b] += 1;
                    live += 1;
                }
            }
            // The bucket where the `f64` cumulative weight reaches the target (the last
            // one when rounding leaves it short): a guess that pass 2 checks exactly.
            let (mut before, mut cross) = (0.0f64, 0);
            for b in 0..BUCKETS {
                if self.bucket_n[b] == 0 {
                    continue;
                }
                cross = b;
                if before + self.bucket_w[b] >= target {
                    break;
                }
                before += self.bucket_w[b];
            }
            // Pass 2: the exact weight below that bucket, and its keys.
            self.keys.clear();
            let (mut below, mut n_before) = (ExactSum::new(), 0usize);
            for ((&l, &w), &id) in c.logits().iter().zip(&self.weights).zip(c.ids()) {
                if l > f32::NEG_INFINITY {
                    let d = shifted(l);
                    match bucket(d).cmp(&cross) {
                        std::cmp::Ordering::Less => {
                            below.add(w);
                            n_before += 1;
                        }
                        std::cmp::Ordering::Equal => self.keys.push((d, w, id)),
                        std::cmp::Ordering::Greater => {}
                    }
                }
            }
            let found = if below < target_x {
                exact_threshold(&mut self.keys, below, &target_x)
            } else {
                None
            };
            match found {
                Some((d, _, _)) => (d, n_before, live),
                None => {
                    // Rare: rounding put the crossing in another bucket; every key.
                    let Some(d) = cut_all(&mut self.keys, c, &self.weights, &shifted, &target_x)
                    else {
                        return Ok(());
                    };
                    (d, 0, live)
                }
            }
        };
        let n_kept = n_before + self.keys.iter().filter(|k| k.0 <= d).count();
        let mut limit = (d, 0.0, TokenId::MAX);
        if n_kept < self.min_keep && self.min_keep < live {
            // Rare: the min_keep-th smallest key over every candidate.
            self.keys.clear();
            for (&l, &id) in c.logits().iter().zip(c.ids()) {
                if l > f32::NEG_INFINITY {
                    self.keys.push((shifted(l), 0.0, id));
                }
            }
            let (_, kth, _) = self
                .keys
                .select_nth_unstable_by(self.min_keep - 1, key_order);
            limit = *kth;
        } else if n_kept < self.min_keep {
            limit = (f64::INFINITY, 0.0, TokenId::MAX);
        }
        c.retain(|id, l| {
            l > f32::NEG_INFINITY && key_order(&(shifted(l), 0.0, id), &limit).is_le()
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The crossing of the exact running sums alone, on keys already in order.
    fn plain_crossing(keys: &[Key], mut acc: ExactSum, target: &ExactSum) -> Option<Key> {
        keys.iter().copied().find(|k| {
            acc.add(k.1);
            acc >= *target
        })
    }

    proptest! {
        /// [`exact_crossing`] (the `f64` sums where they decide) finds the key the exact
        /// sums find, for targets placed on a running sum, a hair either side of one, and
        /// anywhere, with tied and subnormal weights and a starting sum; and
        /// [`fast_crossing`] decides a target halfway between two running sums.
        #[test]
        fn the_fast_crossing_is_the_exact_one(
            weights in prop::collection::vec(prop_oneof![
                4 => 0.0f64..1.0,
                1 => Just(0.25f64),
                1 => Just(0.0f64),
                1 => Just(f64::from_bits(3)),
                1 => 1e-300f64..1e-290,
            ], 1..80),
            start in prop_oneof![Just(0.0f64), 0.0f64..3.0],
            at in any::<prop::sample::Index>(),
            nudge in prop_oneof![Just(0i64), -3i64..4, Just(1i64 << 40)],
            free in 0.0f64..60.0,
        ) {
            let mut keys: Vec<Key> = weights
                .iter()
                .enumerate()
                .map(|(i, &w)| ((i % 7) as f64, w, i as TokenId))
                .collect();
            keys.sort_unstable_by(key_order);
            let acc = ExactSum::of([start]);
            let sums: Vec<f64> = keys
                .iter()
                .scan(acc.clone(), |s, k| {
                    s.add(k.1);
                    Some(s.to_f64())
                })
                .collect();
            let on = sums[at.index(sums.len())];
            let nudged = f64::from_bits(on.to_bits().saturating_add_signed(nudge));
            for x in [on, nudged, free] {
                let target = ExactSum::of([x]);
                let mut mine = keys.clone();
                let got = exact_crossing(&mut mine, acc.clone(), &target);
                prop_assert_eq!(got, plain_crossing(&keys, acc.clone(), &target), "{}", x);
            }
            // Halfway between two running sums that differ by more than the bound.
            let i = at.index(sums.len());
            let below = if i == 0 { start } else { sums[i - 1] };
            if sums[i] - below > 1e-9 * sums[sums.len() - 1].max(1.0) {
                let target = ExactSum::of([0.5 * (below + sums[i])]);
                let fast = fast_crossing(&keys, &acc, &target);
                prop_assert_eq!(fast, Some(Some(keys[i])));
            }
        }
    }
}
