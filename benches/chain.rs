//! `Chain` against the `Sampler` and against the baselines its targets are stated in, at
//! Qwen3's 151,936 logits, on the peaked and flat rows of `benches/sampling.rs` (the same
//! generators, read floor and softmax baselines, from `benches/common`), all in one run
//! so that machine noise cancels in the ratios.
//!
//! Run: `cargo bench --bench chain` (add `-- --measurement-time 1 --warm-up-time 0.5` for
//! a quick look). The groups are `chain_peaked` and `chain_flat`; each case is named
//! after what it runs, `sampler_*` for a `Sampler` and `chain_*` for a `Chain`, stages
//! in the order they run (every chain ends in a seeded draw).
//!
//! Baselines: `floor_sum` (one vectorised read of the row), `softmax_vec` (one
//! vectorised pass: the maximum, then the sum of `exp(l - max)`) and `softmax_std_exp`
//! (a softmax with std's `f32::exp`, as in `benches/sampling.rs`).
//!
//! Every sampled call is steady-state: the sampler or chain is warm, and its state is
//! brought back after each call (`Sampler::rollback(1)`; `Chain::reset`, which also
//! resets stateful stages such as mirostat's `mu`), so every iteration draws with the
//! same uniform from the same state.

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::Criterion;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkGroup, BenchmarkId};
use logits::half::bf16;
use logits::{
    Candidates, Chain, DrawRng, DynamicTemperature, EpsilonCutoff, Error, EtaCutoff, Logit,
    LogprobKind, MinP, MirostatV2, Sampler, SamplingParams, SamplingParamsBuilder, Stage,
    StageContext, Temperature, TokenId, TopK, TopNSigma, TopP, TypicalP, Xtc,
};

mod common;
use common::{flat, floor, peaked, row_sets, softmax_std, softmax_vec, Machine};

const N: usize = 151_936;
const SEED: u64 = 1;

type Group<'a> = BenchmarkGroup<'a, WallTime>;

fn params(b: SamplingParamsBuilder) -> SamplingParams {
    b.seed(SEED).build().unwrap()
}

/// Qwen3's `generation_config.json` defaults.
fn qwen3() -> SamplingParamsBuilder {
    SamplingParams::builder()
        .temperature(0.6)
        .top_k(20)
        .top_p(0.95)
}

fn chain(stages: Vec<Box<dyn Stage>>) -> Chain {
    seeded_chain(stages, SEED)
}

fn seeded_chain(stages: Vec<Box<dyn Stage>>, seed: u64) -> Chain {
    stages
        .into_iter()
        .fold(Chain::builder(N), |b, s| b.boxed_stage(s))
        .draw()
        .seed(seed)
        .build()
        .unwrap()
}

fn top_k(k: usize) -> Box<dyn Stage> {
    Box::new(TopK::new(k).unwrap())
}

fn top_p(p: f32) -> Box<dyn Stage> {
    Box::new(TopP::new(p).unwrap())
}

fn min_p(p: f32) -> Box<dyn Stage> {
    Box::new(MinP::new(p).unwrap())
}

fn temperature(t: f32) -> Box<dyn Stage> {
    Box::new(Temperature::new(t).unwrap())
}

/// The Qwen3 default in the `Sampler`'s order: temperature 0.6, top-k 20, top-p 0.95.
fn qwen3_chain() -> Chain {
    chain(vec![temperature(0.6), top_k(20), top_p(0.95)])
}

/// llama.cpp's default order: top-k 40, top-p 0.95, min-p 0.05, temperature 0.8.
fn llama_chain() -> Chain {
    chain(vec![top_k(40), top_p(0.95), min_p(0.05), temperature(0.8)])
}

/// The salt of XTC's coin (`src/xtc.rs`).
const XTC_SALT: u64 = 0x5854_4300;
const XTC_PROBABILITY: f32 = 0.5;

/// The seed of the XTC chains: the first from [`SEED`] at which XTC's coin acts at step
/// 0. Every timed call is step 0 (the history is reset after each), so the coin falls
/// the same way every time; at [`SEED`] itself XTC would never act and the case would
/// time only the coin.
fn xtc_seed() -> u64 {
    (SEED..)
        .find(|&s| DrawRng::with_stream(s, XTC_SALT + 1).uniform(0) < f64::from(XTC_PROBABILITY))
        .unwrap()
}

/// The full-row probability stages, by case name, with the seed of their chains. XTC
/// is threshold 0.1, probability 0.5 (`Xtc::new` takes the probability first).
fn zoo() -> Vec<(&'static str, Box<dyn Stage>, u64)> {
    let xtc = Xtc::new(XTC_PROBABILITY, 0.1).unwrap();
    vec![
        (
            "typical_p_0.95",
            Box::new(TypicalP::new(0.95).unwrap()),
            SEED,
        ),
        (
            "epsilon_3e-4",
            Box::new(EpsilonCutoff::new(3e-4).unwrap()),
            SEED,
        ),
        ("eta_3e-4", Box::new(EtaCutoff::new(3e-4).unwrap()), SEED),
        ("xtc_0.1_0.5", Box::new(xtc), xtc_seed()),
        (
            "mirostat_v2_5_0.1",
            Box::new(MirostatV2::new(5.0, 0.1).unwrap()),
            SEED,
        ),
        (
            "dyn_temp_0.8_0.5",
            Box::new(DynamicTemperature::new(0.8, 0.5, 1.0).unwrap()),
            SEED,
        ),
        (
            "top_n_sigma_1",
            Box::new(TopNSigma::new(1.0).unwrap()),
            SEED,
        ),
    ]
}

/// A user's own stage: the engine knows nothing of it and runs it through `apply`.
#[derive(Clone, Debug)]
struct User(Box<dyn Stage>);

impl Stage for User {
    fn name(&self) -> &'static str {
        "user"
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        self.0.apply(c, ctx)
    }
}

fn bench_sampler<T: Logit>(g: &mut Group<'_>, name: &str, p: SamplingParams, row: &[T]) {
    let mut s = Sampler::new(p, N).unwrap();
    s.sample(row).unwrap();
    s.rollback(1);
    g.bench_with_input(BenchmarkId::new(name, N), row, |b, row| {
        b.iter(|| {
            let out = s.sample(black_box(row)).unwrap();
            s.rollback(1);
            out.token
        })
    });
}

fn bench_chain<T: Logit>(g: &mut Group<'_>, name: &str, mut c: Chain, row: &[T]) {
    c.sample(row).unwrap();
    c.reset();
    g.bench_with_input(BenchmarkId::new(name, N), row, |b, row| {
        b.iter(|| {
            let out = c.sample(black_box(row)).unwrap();
            c.reset();
            out.token
        })
    });
}

/// Uniforms spread over `[0, 1)` (the fractional parts of `k` times the golden ratio):
/// a bench that cycles through them times the average draw, where one seed times one
/// uniform's.
fn spread_uniforms() -> Vec<f64> {
    (1..=64)
        .map(|k| (k as f64 * 0.618_033_988_749_895) % 1.0)
        .collect()
}

/// Times `draw(row, u)` with `u` cycling through [`spread_uniforms`]; `draw` brings the
/// sampler or chain back to its state after drawing, as [`bench_chain`] and
/// [`bench_sampler`] do.
fn bench_spread<T: Logit>(
    g: &mut Group<'_>,
    name: &str,
    row: &[T],
    mut draw: impl FnMut(&[T], f64) -> TokenId,
) {
    let us = spread_uniforms();
    let mut k = 0;
    g.bench_with_input(BenchmarkId::new(name, N), row, |b, row| {
        b.iter(|| {
            k = (k + 1) % us.len();
            draw(black_box(row), us[k])
        })
    });
}

/// `Chain::distribution` on a chain with no stage, the counterpart of
/// `sampler_distribution`.
fn chain_distribution(g: &mut Group<'_>, row: &[f32]) {
    let mut c = chain(vec![]);
    let mut out = Vec::with_capacity(N);
    c.distribution(row, None, &mut out).unwrap();
    g.bench_with_input(BenchmarkId::new("chain_distribution", N), row, |b, row| {
        b.iter(|| {
            c.distribution(black_box(row), None, &mut out).unwrap();
            out.len()
        })
    });
}

fn describe(shape: &str, row: &[f32]) {
    let (nucleus, nucleus_06, min_p) = row_sets(row, 0.6);
    eprintln!(
        "{shape} row, {N} logits: top-p 0.95 nucleus {nucleus} tokens ({nucleus_06} at \
         T 0.6), min-p 0.05 keeps {min_p} (XTC chains: seed {}, where its coin acts)",
        xtc_seed()
    );
}

fn chains(c: &mut Criterion) {
    eprintln!("{}", Machine::detect().line());
    for (shape, make) in [("peaked", peaked as fn(usize) -> Vec<f32>), ("flat", flat)] {
        let row = make(N);
        let row16: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
        describe(shape, &row);
        let mut g = c.benchmark_group(format!("chain_{shape}"));

        g.bench_with_input(BenchmarkId::new("floor_sum", N), &row, |b, row| {
            b.iter(|| floor(black_box(row)))
        });
        g.bench_with_input(BenchmarkId::new("softmax_vec", N), &row, |b, row| {
            b.iter(|| softmax_vec(black_box(row)))
        });
        let mut out = vec![0.0f32; N];
        g.bench_with_input(BenchmarkId::new("softmax_std_exp", N), &row, |b, row| {
            b.iter(|| softmax_std(black_box(row), &mut out))
        });

        // Qwen3's default, in the Sampler's order, and the same cuts at T 1 with the
        // temperature last.
        bench_sampler(&mut g, "sampler_qwen3", params(qwen3()), &row);
        bench_chain(&mut g, "chain_qwen3", qwen3_chain(), &row);
        let cuts = params(SamplingParams::builder().top_k(20).top_p(0.95));
        bench_sampler(&mut g, "sampler_top_k_20_top_p_0.95", cuts, &row);
        let late_t = chain(vec![top_k(20), top_p(0.95), temperature(0.6)]);
        bench_chain(&mut g, "chain_top_k_20_top_p_0.95_temp_0.6", late_t, &row);

        // llama.cpp's default order, and the Sampler with the same cuts (at T 1).
        let cuts = SamplingParams::builder().top_k(40).top_p(0.95).min_p(0.05);
        bench_sampler(
            &mut g,
            "sampler_top_k_40_top_p_0.95_min_p_0.05",
            params(cuts),
            &row,
        );
        bench_chain(&mut g, "chain_llama", llama_chain(), &row);

        // One cut first.
        let p = params(SamplingParams::builder().top_p(0.95));
        bench_sampler(&mut g, "sampler_top_p_0.95", p, &row);
        let c = chain(vec![top_p(0.95), temperature(0.8)]);
        bench_chain(&mut g, "chain_top_p_0.95_temp_0.8", c, &row);
        let p = params(SamplingParams::builder().min_p(0.05));
        bench_sampler(&mut g, "sampler_min_p_0.05", p, &row);
        let c = chain(vec![min_p(0.05), temperature(0.8)]);
        bench_chain(&mut g, "chain_min_p_0.05_temp_0.8", c, &row);
        let p = params(SamplingParams::builder().top_k(40));
        bench_sampler(&mut g, "sampler_top_k_40", p, &row);
        bench_chain(&mut g, "chain_top_k_40", chain(vec![top_k(40)]), &row);

        // The full-row stages, first and after top-k 40 (`chain_temp_0.8`, the draw from
        // the whole row, is the baseline of the stages that keep most of it, XTC's;
        // `chain_top_k_40` that of the latter).
        bench_chain(
            &mut g,
            "chain_temp_0.8",
            chain(vec![temperature(0.8)]),
            &row,
        );
        let p = params(SamplingParams::builder().temperature(0.8));
        bench_sampler(&mut g, "sampler_temp_0.8", p, &row);
        // The same draws averaged over 64 uniforms spread over [0, 1), not the one the
        // seed gives: on a flat row the draw's cost depends on where the uniform falls.
        let mut c = chain(vec![temperature(0.8)]);
        bench_spread(&mut g, "chain_temp_0.8_spread", &row, |row, u| {
            let token = c.sample_with_uniform(row, None, u).unwrap().token;
            c.reset();
            token
        });
        let p = params(SamplingParams::builder().min_p(0.05));
        let mut s = Sampler::new(p, N).unwrap();
        bench_spread(&mut g, "sampler_min_p_0.05_spread", &row, |row, u| {
            let token = s.sample_with_uniform(row, None, u).unwrap().token;
            s.rollback(1);
            token
        });
        for (name, stage, seed) in zoo() {
            let c = seeded_chain(vec![stage, temperature(0.8)], seed);
            bench_chain(&mut g, &format!("chain_{name}_temp_0.8"), c, &row);
        }
        for (name, stage, seed) in zoo() {
            let c = seeded_chain(vec![top_k(40), stage, temperature(0.8)], seed);
            bench_chain(&mut g, &format!("chain_top_k_40_{name}_temp_0.8"), c, &row);
        }
        // Reordered chains: a zoo stage first, then a cut (typical-p, which lowers to a
        // floor, and dynamic temperature, which does not).
        for (name, stage, seed) in zoo() {
            if name.starts_with("typical_p") || name.starts_with("dyn_temp") {
                let c = seeded_chain(vec![stage, top_k(40), temperature(0.8)], seed);
                bench_chain(&mut g, &format!("chain_{name}_top_k_40_temp_0.8"), c, &row);
            }
        }
        // A user's stage that keeps the whole row (dynamic temperature, hidden from the
        // planner): the engine runs it on the dense copy and draws from what it leaves.
        let user = User(Box::new(DynamicTemperature::new(0.8, 0.5, 1.0).unwrap()));
        let c = chain(vec![Box::new(user), temperature(0.8)]);
        bench_chain(&mut g, "chain_user_dyn_temp_0.8_0.5_temp_0.8", c, &row);

        // The full distribution, nothing cut.
        let mut s = Sampler::new(params(SamplingParams::builder()), N).unwrap();
        let mut dist: Vec<(TokenId, f64)> = Vec::with_capacity(N);
        s.distribution(&row, None, &mut dist).unwrap();
        g.bench_with_input(
            BenchmarkId::new("sampler_distribution", N),
            &row,
            |b, row| {
                b.iter(|| {
                    s.distribution(black_box(row), None, &mut dist).unwrap();
                    dist.len()
                })
            },
        );
        chain_distribution(&mut g, &row);

        // The same, token-indexed and unsorted, at T 1 and at a temperature (the
        // arguments scaled).
        let mut probs = vec![0.0f32; N];
        for (name, t) in [
            ("sampler_probabilities", 1.0),
            ("sampler_probabilities_temp_0.8", 0.8),
        ] {
            let mut s = Sampler::new(params(SamplingParams::builder().temperature(t)), N).unwrap();
            s.probabilities(&row, None, &mut probs).unwrap();
            g.bench_with_input(BenchmarkId::new(name, N), &row, |b, row| {
                b.iter(|| {
                    s.probabilities(black_box(row), None, &mut probs).unwrap();
                    probs[0]
                })
            });
        }
        // Every logprob, processed (after the adjustments and cuts, none here) and raw.
        let mut s = Sampler::new(params(SamplingParams::builder()), N).unwrap();
        for (name, kind) in [
            ("sampler_logprobs_processed", LogprobKind::Processed),
            ("sampler_logprobs_raw", LogprobKind::Raw),
        ] {
            s.logprobs_into(&row, None, kind, &mut probs).unwrap();
            g.bench_with_input(BenchmarkId::new(name, N), &row, |b, row| {
                b.iter(|| {
                    s.logprobs_into(black_box(row), None, kind, &mut probs)
                        .unwrap();
                    probs[0]
                })
            });
        }
        // (A chain with no stage, as `chain_distribution`.)
        let mut c = chain(vec![]);
        c.probabilities(&row, None, &mut probs).unwrap();
        g.bench_with_input(
            BenchmarkId::new("chain_probabilities", N),
            &row,
            |b, row| {
                b.iter(|| {
                    c.probabilities(black_box(row), None, &mut probs).unwrap();
                    probs[0]
                })
            },
        );

        // bf16 rows.
        bench_sampler(&mut g, "sampler_qwen3_bf16", params(qwen3()), &row16);
        bench_chain(&mut g, "chain_qwen3_bf16", qwen3_chain(), &row16);
        bench_chain(&mut g, "chain_llama_bf16", llama_chain(), &row16);
        let t = chain(vec![temperature(0.8)]);
        bench_chain(&mut g, "chain_temp_0.8_bf16", t, &row16);
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(600))
        .sample_size(15);
    targets = chains
}
criterion_main!(benches);
