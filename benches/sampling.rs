//! Sampling speed over realistic vocabularies, with the baselines the targets are
//! measured against (a read of the row, a plain `f32::exp` softmax, the sort-based
//! reference), all in one run so that machine noise cancels in the ratios.
//!
//! Run: `cargo bench --bench sampling`; then `python3 benches/summary.py` prints the
//! medians and the ratios (see BENCHMARKS.md).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use logits::half::bf16;
use logits::{reference, History, Sampler, SamplingParams, TokenMask};
use std::time::Duration;

mod common;
use common::{flat, floor, peaked, peaked_from, row_sets, softmax_std, Machine, Mix};

const SIZES: [usize; 3] = [32_000, 151_936, 256_000];

fn params(b: logits::SamplingParamsBuilder) -> SamplingParams {
    b.seed(1).build().unwrap()
}

fn qwen3() -> logits::SamplingParamsBuilder {
    SamplingParams::builder()
        .temperature(0.6)
        .top_k(20)
        .top_p(0.95)
}

fn bench_sampler<T: logits::Logit>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    n: usize,
    p: SamplingParams,
    prompt: &[u32],
    row: &[T],
) {
    let mut s = Sampler::new(p, n).unwrap();
    s.push_prompt(prompt).unwrap();
    g.bench_with_input(BenchmarkId::new(name, n), row, |b, row| {
        b.iter(|| {
            let out = s.sample(black_box(row)).unwrap();
            s.rollback(1);
            out.token
        })
    });
}

fn sampling(c: &mut Criterion) {
    eprintln!("{}", Machine::detect().line());
    for (shape, make) in [("peaked", peaked as fn(usize) -> Vec<f32>), ("flat", flat)] {
        let mut g = c.benchmark_group(shape);
        g.warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(600))
            .sample_size(15);
        for n in SIZES {
            let row = make(n);
            let (nucleus, nucleus_06, min_p) = row_sets(&row, 0.6);
            eprintln!(
                "{shape} row, {n} logits: top-p 0.95 nucleus {nucleus} tokens ({nucleus_06} \
                 at T 0.6), min-p 0.05 keeps {min_p}"
            );
            let row16: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
            let mut r = Mix(7);
            let prompt: Vec<u32> = (0..64).map(|_| (r.next() % n as u64) as u32).collect();
            g.bench_with_input(BenchmarkId::new("floor_sum", n), &row, |b, row| {
                b.iter(|| floor(black_box(row)))
            });
            let mut out = vec![0.0f32; n];
            g.bench_with_input(BenchmarkId::new("softmax_std_exp", n), &row, |b, row| {
                b.iter(|| softmax_std(black_box(row), &mut out))
            });
            bench_sampler(&mut g, "greedy", n, SamplingParams::greedy(), &[], &row);
            bench_sampler(
                &mut g,
                "softmax",
                n,
                params(SamplingParams::builder()),
                &[],
                &row,
            );
            let top_k = params(SamplingParams::builder().top_k(20));
            bench_sampler(&mut g, "top_k_20", n, top_k, &[], &row);
            let top_p = params(SamplingParams::builder().top_p(0.95));
            bench_sampler(&mut g, "top_p_0.95", n, top_p.clone(), &[], &row);
            let min_p = params(SamplingParams::builder().min_p(0.05));
            bench_sampler(&mut g, "min_p_0.05", n, min_p.clone(), &[], &row);
            bench_sampler(&mut g, "min_p_0.05_bf16", n, min_p, &[], &row16);
            bench_sampler(&mut g, "qwen3_chain", n, params(qwen3()), &[], &row);
            let rep = params(qwen3().repetition_penalty(1.1).penalty_window(64));
            bench_sampler(&mut g, "rep_penalty_qwen3_chain", n, rep, &prompt, &row);
            bench_sampler(&mut g, "qwen3_chain_bf16", n, params(qwen3()), &[], &row16);
            let mut mask = TokenMask::new_empty(n);
            for id in 0..n as u32 {
                if r.next().is_multiple_of(2) {
                    mask.allow(id).unwrap();
                }
            }
            let mut masked = row.clone();
            g.bench_with_input(BenchmarkId::new("mask_apply", n), &mask, |b, mask| {
                b.iter(|| {
                    masked.copy_from_slice(&row);
                    mask.apply(black_box(&mut masked)).unwrap();
                })
            });
            if n == 151_936 {
                let hist = History::new(&[], 0);
                g.bench_with_input(
                    BenchmarkId::new("reference_top_p_0.95", n),
                    &row,
                    |b, row| {
                        b.iter(|| {
                            reference::sample(black_box(row), n, &top_p, &hist, None, 0.5)
                                .unwrap()
                                .0
                        })
                    },
                );
            }
        }
        g.finish();
    }
}

/// Many peaked rows, one after the other: the mean cost of a call over rows whose top-p
/// boundaries fall where they may, including the rare row whose decision the fast total
/// mass cannot take (see BENCHMARKS.md). The rows do not fit in the caches together, so
/// the read floor is measured over the same rows.
fn many_rows(c: &mut Criterion) {
    const ROWS: u64 = 256;
    let n = 151_936;
    let rows: Vec<Vec<f32>> = (0..ROWS)
        .map(|k| peaked_from(Mix(7_919 * k + 1), n))
        .collect();
    let mut g = c.benchmark_group("peaked_rows");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    let mut i = 0;
    g.bench_function(BenchmarkId::new("floor_sum", n), |b| {
        b.iter(|| {
            i = (i + 1) % rows.len();
            floor(black_box(&rows[i]))
        })
    });
    for (name, p) in [
        ("top_p_0.95", params(SamplingParams::builder().top_p(0.95))),
        ("qwen3_chain", params(qwen3())),
    ] {
        let mut s = Sampler::new(p, n).unwrap();
        g.bench_function(BenchmarkId::new(name, n), |b| {
            b.iter(|| {
                i = (i + 1) % rows.len();
                let out = s.sample(black_box(&rows[i])).unwrap();
                s.rollback(1);
                out.token
            })
        });
    }
    g.finish();
}

criterion_group!(benches, sampling, many_rows);
criterion_main!(benches);
