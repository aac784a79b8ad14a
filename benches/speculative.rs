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

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use logits::{DraftDistribution, Sampler, SamplingParams, Speculation, TokenId, Verifier};

mod common;
use common::Mix;

const V: usize = 151_936;

fn qwen3() -> Sampler {
    let params = SamplingParams::builder()
        .temperature(0.6)
        .top_k(20)
        .top_p(0.95)
        .seed(1)
        .build()
        .unwrap();
    let mut s = Sampler::new(params, V).unwrap();
    s.push_prompt(&[1, 2, 3]).unwrap();
    s.reserve(1 << 16).unwrap();
    s
}

fn bench(c: &mut Criterion) {
    for k in [4usize, 8] {
        let rows: Vec<f32> = (0..=k)
            .flat_map(|i| common::peaked_from(Mix(0x5EC + i as u64), V))
            .collect();
        // The draft: the target's own rows, its tokens drawn by a draft sampler.
        let mut draft = qwen3();
        let (mut pairs, mut ends, mut tokens) = (Vec::new(), Vec::new(), Vec::<TokenId>::new());
        let mut dist = Vec::new();
        for i in 0..k {
            let row = &rows[i * V..(i + 1) * V];
            draft.distribution(row, None, &mut dist).unwrap();
            pairs.extend_from_slice(&dist);
            ends.push(pairs.len());
            tokens.push(draft.sample(row).unwrap().token);
        }
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

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
