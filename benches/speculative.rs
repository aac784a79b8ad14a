//! Cost of verifying a draft of k tokens at Qwen3's 151,936 logits with Qwen3's chain
//! (temperature 0.6, top-k 20, top-p 0.95), against k + 1 plain `Sampler::sample` calls
//! on the same rows, in the same run.
//!
//! `cargo bench -p logits --bench speculative -j 1 -- --warm-up-time 1 --measurement-time 3`
//!
//! The draft's rows are the target's, so every draft token is accepted and every
//! position is verified, then the bonus token drawn: the most work a verification does.
//! `verify/sparse_q` takes the draft's distributions as `(token, probability)` pairs,
//! as a draft sampler's `distribution` writes them; `verify/draft_logits` gives the
//! draft's rows, which the verifier runs through the chain itself (two chain runs per
//! position).
//!
//! `paired` then times the two side by side, alternating a verification and the k + 1
//! samples 301 times (which one goes first alternates too), and prints the median and
//! quartiles of the per-round ratio: on a machine shared with other work, load that
//! drifts between criterion's separate measurements moves both halves of a round alike.
//! It prints the two halves' medians too, and repeats at 1,024 logits (3,001 rounds),
//! where a pass over a row is short: there the difference of the medians, per
//! position, is what a verification does beyond a draw. Last, `draft_logits` is paired
//! with the k + 1 samples at 151,936 logits.
//!
//! Neither `sparse_q` nor `paired` times the draft model's own pass over its rows: the
//! draft's distributions are computed once, outside the timed loop, as a draft sampler
//! computes them when it draws its tokens. Only `draft_logits` runs them, in the verifier.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use logits::{DraftDistribution, Sampler, SamplingParams, Speculation, TokenId, Verifier};

mod common;
use common::Mix;

const V: usize = 151_936;

fn qwen3() -> Sampler {
    qwen3_at(V)
}

fn qwen3_at(vocab: usize) -> Sampler {
    let params = SamplingParams::builder()
        .temperature(0.6)
        .top_k(20)
        .top_p(0.95)
        .seed(1)
        .build()
        .unwrap();
    let mut s = Sampler::new(params, vocab).unwrap();
    s.push_prompt(&[1, 2, 3]).unwrap();
    s.reserve(1 << 16).unwrap();
    s
}

/// The k + 1 target rows and a draft of k tokens over them: the target's own rows, its
/// tokens drawn by a draft sampler, with the distributions it drew from as pairs.
struct Draft {
    rows: Vec<f32>,
    pairs: Vec<(TokenId, f64)>,
    ends: Vec<usize>,
    tokens: Vec<TokenId>,
}

fn draft(k: usize) -> Draft {
    draft_at(k, V)
}

fn draft_at(k: usize, v: usize) -> Draft {
    let rows: Vec<f32> = (0..=k)
        .flat_map(|i| common::peaked_from(Mix(0x5EC + i as u64), v))
        .collect();
    let mut draft = qwen3_at(v);
    let (mut pairs, mut ends, mut tokens) = (Vec::new(), Vec::new(), Vec::new());
    let mut dist = Vec::new();
    for i in 0..k {
        let row = &rows[i * v..(i + 1) * v];
        draft.distribution(row, None, &mut dist).unwrap();
        pairs.extend_from_slice(&dist);
        ends.push(pairs.len());
        tokens.push(draft.sample(row).unwrap().token);
    }
    Draft {
        rows,
        pairs,
        ends,
        tokens,
    }
}

fn bench(c: &mut Criterion) {
    for k in [4usize, 8] {
        let Draft {
            rows,
            pairs,
            ends,
            tokens,
        } = draft(k);
        let sparse = Speculation {
            draft: &tokens,
            q: DraftDistribution::Sparse {
                pairs: &pairs,
                ends: &ends,
            },
            target: &rows,
            row_len: V,
        };
        let logits = Speculation {
            q: DraftDistribution::Logits(&rows[..k * V]),
            ..sparse
        };

        let mut g = c.benchmark_group(format!("speculative/k{k}"));
        g.sample_size(20);
        let mut target = qwen3();
        let mut verifier = Verifier::new();
        for (name, spec) in [
            ("verify/sparse_q", &sparse),
            ("verify/draft_logits", &logits),
        ] {
            // Every draft token is accepted: each call does all k + 1 positions.
            let out = verifier.verify(&mut target, spec).unwrap();
            assert_eq!(out.accepted, k, "{name}");
            target.rollback(k + 1);
            g.bench_function(name, |b| {
                b.iter(|| {
                    let out = verifier.verify(&mut target, black_box(spec)).unwrap();
                    target.rollback(out.emitted());
                    out.accepted
                })
            });
        }
        g.bench_function(format!("sample_x{}", k + 1), |b| {
            b.iter(|| {
                let mut last = 0;
                for row in rows.chunks_exact(V) {
                    last = target.sample(black_box(row)).unwrap().token;
                }
                target.rollback(k + 1);
                last
            })
        });
        g.finish();
    }
}

/// The per-round ratio of a sparse-q verification to k + 1 samples, alternated, at
/// 151,936 logits; then the same at 1,024 logits, where the pass over a row is short and
/// the difference of the two medians is what a verification does beyond k + 1 draws.
fn paired(_: &mut Criterion) {
    for (v, rounds) in [(V, 301), (1024, 3001)] {
        for k in [4usize, 8] {
            paired_at(k, v, rounds, false);
        }
    }
    for k in [4usize, 8] {
        paired_at(k, V, 301, true);
    }
}

/// With `logits`, the verification takes the draft's rows (`draft_logits`) instead of
/// its sparse distributions.
fn paired_at(k: usize, v: usize, rounds: usize, logits: bool) {
    let Draft {
        rows,
        pairs,
        ends,
        tokens,
    } = draft_at(k, v);
    let spec = Speculation {
        draft: &tokens,
        q: DraftDistribution::Sparse {
            pairs: &pairs,
            ends: &ends,
        },
        target: &rows,
        row_len: v,
    };
    let spec = if logits {
        Speculation {
            q: DraftDistribution::Logits(&rows[..k * v]),
            ..spec
        }
    } else {
        spec
    };
    let mut target = qwen3_at(v);
    let mut verifier = Verifier::new();
    let mut verify = || {
        let t = Instant::now();
        let out = verifier.verify(&mut target, black_box(&spec)).unwrap();
        assert_eq!(out.accepted, k);
        target.rollback(out.emitted());
        t.elapsed().as_secs_f64()
    };
    let mut sampler = qwen3_at(v);
    let mut samples = || {
        let t = Instant::now();
        for row in rows.chunks_exact(v) {
            black_box(sampler.sample(black_box(row)).unwrap().token);
        }
        sampler.rollback(k + 1);
        t.elapsed().as_secs_f64()
    };
    for _ in 0..10 {
        verify();
        samples();
    }
    let (mut ratios, mut vs, mut ss) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let (v, s) = if r % 2 == 0 {
            let v = verify();
            (v, samples())
        } else {
            let s = samples();
            (verify(), s)
        };
        ratios.push(v / s);
        vs.push(v);
        ss.push(s);
    }
    let q = |xs: &mut Vec<f64>, f: f64| {
        xs.sort_by(f64::total_cmp);
        xs[((rounds - 1) as f64 * f) as usize]
    };
    let name = if v == V {
        format!("speculative/k{k}/paired")
    } else {
        format!("speculative/k{k}/paired_{v}")
    };
    let case = if logits { "draft_logits" } else { "sparse_q" };
    println!(
        "{name}: verify/{case} / sample_x{}: median {:.3} (quartiles {:.3} to {:.3}, {rounds} rounds); medians {:.2} us and {:.2} us",
        k + 1,
        q(&mut ratios, 0.5),
        q(&mut ratios, 0.25),
        q(&mut ratios, 0.75),
        q(&mut vs, 0.5) * 1e6,
        q(&mut ss, 0.5) * 1e6,
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench, paired
}
criterion_main!(benches);
