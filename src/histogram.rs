//! The probability histogram that lets top-p, min-p and the plain draw avoid sorting the
//! vocabulary.
//!
//! One pass assigns every finite token to a bucket by its scaled logit
//! `s = (l - max) / T`: bucket `b` holds `-s` in `[b / 8, (b + 1) / 8)` nats (the last
//! bucket holds everything beyond), and accumulates each bucket's count and weight
//! `sum exp(s)` in `f64`. Bucket order is the candidates' order: every token of bucket
//! `b` has a logit at least as large as every token of bucket `b + 1`, since the bucket
//! index is a monotone function of the logit. Walking buckets from the top therefore
//! finds which buckets a prefix of the sorted candidates reaches, and only those tokens
//! are sorted.

use crate::top_k::order;
use crate::TokenId;

/// Number of buckets.
pub(crate) const BUCKETS: usize = 1024;
/// Buckets per nat.
const PER_NAT: f32 = 8.0;

/// Fills `bucket`, `count` and `mass` for the finite entries of `logits`; returns the
/// total weight.
pub(crate) fn build(
    logits: &[f32],
    max: f32,
    t: f32,
    bucket: &mut [u16],
    count: &mut [u32],
    mass: &mut [f64],
) -> f64 {
    count.iter_mut().for_each(|c| *c = 0);
    mass.iter_mut().for_each(|m| *m = 0.0);
    let (maxd, td, last) = (f64::from(max), f64::from(t), (BUCKETS - 1) as f32);
    for (i, &l) in logits.iter().enumerate() {
        if l == f32::NEG_INFINITY {
            bucket[i] = u16::MAX;
            continue;
        }
        let s = (f64::from(l) - maxd) / td;
        let b = ((-s as f32) * PER_NAT).min(last) as usize;
        bucket[i] = b as u16;
        count[b] += 1;
        mass[b] += s.exp();
    }
    mass.iter().sum()
}

/// Appends every token whose bucket is `<= limit` to `out` and sorts `out`.
pub(crate) fn collect(logits: &[f32], bucket: &[u16], limit: usize, out: &mut Vec<(f32, TokenId)>) {
    out.clear();
    for (i, (&l, &b)) in logits.iter().zip(bucket).enumerate() {
        if (b as usize) <= limit {
            out.push((l, i as TokenId));
        }
    }
    out.sort_unstable_by(order);
}

/// Appends the tokens of bucket `b` alone to `out`, sorted.
pub(crate) fn collect_one(logits: &[f32], bucket: &[u16], b: usize, out: &mut Vec<(f32, TokenId)>) {
    out.clear();
    for (i, (&l, &bb)) in logits.iter().zip(bucket).enumerate() {
        if bb as usize == b {
            out.push((l, i as TokenId));
        }
    }
    out.sort_unstable_by(order);
}

/// The first bucket at which the running mass reaches `target`, walking from the top
/// (`None` if it never does), and the number of tokens up to and including it.
pub(crate) fn mass_bucket(mass: &[f64], count: &[u32], target: f64) -> Option<(usize, usize)> {
    let (mut cum, mut n) = (0.0, 0usize);
    for (b, (&m, &c)) in mass.iter().zip(count).enumerate() {
        cum += m;
        n += c as usize;
        if cum >= target {
            return Some((b, n));
        }
    }
    None
}

/// The first bucket at which the running count reaches `n`.
pub(crate) fn count_bucket(count: &[u32], n: usize) -> usize {
    let mut total = 0usize;
    for (b, &c) in count.iter().enumerate() {
        total += c as usize;
        if total >= n {
            return b;
        }
    }
    count.len() - 1
}

/// The bucket holding scaled logit `s <= 0`.
pub(crate) fn bucket_of(s: f64) -> usize {
    ((-s as f32) * PER_NAT).min((BUCKETS - 1) as f32) as usize
}
