//! Per-call cost of each sampler stage at Qwen3's 151,936 logits.
//!
//! `cargo bench --bench samplers -- --measurement-time 2 --warm-up-time 1`
//!
//! The row is peaked: 40 tokens 8 to 15 above an N(0, 2) background, from a fixed
//! generator, so every run sees the same logits. Each stage is timed as
//! "refill the candidates from the row, then apply the stage"; `refill` alone is the
//! baseline to subtract. The `process/` cases time the `LogitsProcessor` form on a copy
//! of the row (`copy` is their baseline). The `hf/` group times the Hugging Face
//! processors the same way, each at a step where it acts, and `hf/cfg_combine` the
//! two-row guidance into a buffer.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use logits::{
    AllowedTokens, BadWords, Candidates, ClassifierFreeGuidance, Dry, DynamicTemperature,
    EncoderNoRepeatNGram, EncoderRepetitionPenalty, EpsilonCutoff, EtaCutoff,
    ExponentialDecayLengthPenalty, ForcedEos, History, LogitsProcessor, MinNewTokens, Mirostat,
    MirostatV2, NoRepeatNGram, NormalizedRepetitionPenalty, SequenceBias, Stage, StageContext,
    SuppressTokens, SuppressTokensAtBegin, TokenId, TopH, TopNSigma, TypicalP, Watermark, Xtc,
};

const V: usize = 151_936;

/// xorshift64*: a fixed, dependency-free generator.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (a, b) = (self.unit(), self.unit());
        (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()
    }
}

fn peaked_row() -> Vec<f32> {
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let mut row: Vec<f32> = (0..V).map(|_| (2.0 * g.normal()) as f32).collect();
    for i in 0..40 {
        let id = (i * 3797 + 11) % V;
        row[id] += (8.0 + 7.0 * g.unit()) as f32;
    }
    row
}

/// 1,024 tokens of "text": random ids with a repeated phrase, so DRY and the n-gram ban
/// find matches.
fn history() -> Vec<TokenId> {
    let mut g = Gen(42);
    let phrase: Vec<TokenId> = (0..12).map(|_| (g.next() % 5000) as TokenId).collect();
    let mut h = Vec::with_capacity(1024);
    while h.len() < 1024 {
        if g.next().is_multiple_of(8) {
            h.extend_from_slice(&phrase);
        } else {
            h.push((g.next() % 5000) as TokenId);
        }
    }
    h.truncate(1024);
    h
}

fn stages(hist: &[TokenId]) -> Vec<Box<dyn Stage>> {
    let bad: Vec<Vec<TokenId>> = (0..100u32).map(|i| vec![i * 7, i * 7 + 1]).collect();
    let breakers = [vec![198u32], vec![25], vec![1], vec![9]];
    vec![
        Box::new(TypicalP::new(0.95).unwrap()),
        Box::new(EpsilonCutoff::new(3e-4).unwrap()),
        Box::new(EtaCutoff::new(3e-4).unwrap()),
        Box::new(TopNSigma::new(1.0).unwrap()),
        Box::new(
            Xtc::new(1.0, 0.1)
                .unwrap()
                .special_tokens([151_645, 151_643]),
        ),
        Box::new(
            Dry::new(0.8, 1.75, 2)
                .unwrap()
                .sequence_breakers(breakers)
                .unwrap(),
        ),
        Box::new(Mirostat::new(V, 5.0, 0.1, 100).unwrap()),
        Box::new(MirostatV2::new(5.0, 0.1).unwrap()),
        Box::new(DynamicTemperature::new(0.8, 0.5, 1.0).unwrap()),
        Box::new(NoRepeatNGram::new(3).unwrap()),
        Box::new(BadWords::new(bad).unwrap()),
        Box::new(AllowedTokens::new((0..1000).map(|i| i * 97)).unwrap()),
        Box::new(MinNewTokens::new(hist.len() + 1, [151_645, 151_643]).unwrap()),
    ]
}

fn bench(c: &mut Criterion) {
    let row = peaked_row();
    let hist = history();
    let ctx = StageContext {
        history: History::new(&hist, 0),
        seed: 1,
        step: 0,
    };
    let mut cands = Candidates::new();
    c.bench_function("refill", |b| {
        b.iter(|| {
            cands.reset_from(row.iter().copied());
            black_box(cands.len())
        })
    });
    for mut s in stages(&hist) {
        let name = format!("stage/{}", s.name());
        c.bench_function(&name, |b| {
            b.iter(|| {
                cands.reset_from(row.iter().copied());
                s.apply(&mut cands, &ctx).unwrap();
                black_box(cands.len())
            })
        });
    }
    let mut buf = row.clone();
    let h = History::new(&hist, 0);
    c.bench_function("copy", |b| {
        b.iter(|| {
            buf.copy_from_slice(&row);
            black_box(buf[0])
        })
    });
    let procs: Vec<(&str, Box<dyn LogitsProcessor>)> = vec![
        (
            "process/top_n_sigma",
            Box::new(TopNSigma::new(1.0).unwrap()),
        ),
        ("process/dry", Box::new(Dry::new(0.8, 1.75, 2).unwrap())),
        (
            "process/allowed_tokens",
            Box::new(AllowedTokens::new((0..1000).map(|i| i * 97)).unwrap()),
        ),
    ];
    for (name, mut p) in procs {
        c.bench_function(name, |b| {
            b.iter(|| {
                buf.copy_from_slice(&row);
                p.process(&mut buf, &h).unwrap();
                black_box(buf[0])
            })
        });
    }
}

/// The Hugging Face processors, each set up to act at the benchmark's step (a history of
/// 1,024 tokens, all generated).
fn hf_stages(hist: &[TokenId]) -> Vec<Box<dyn Stage>> {
    let eos = [151_645u32, 151_643];
    // 100 two-token sequences and 20 single tokens, as a bias list might hold.
    let seqs = (0..100u32)
        .map(|i| (vec![i * 13, i * 13 + 1], -2.0f32))
        .chain((0..20u32).map(|i| (vec![i * 1001], 1.5)));
    // Whisper's suppress_tokens list is about 90 ids.
    let suppress: Vec<TokenId> = (0..90u32).map(|i| i * 1597 + 3).collect();
    let encoder: Vec<TokenId> = hist.iter().map(|&t| (t * 7) % 5000).collect();
    vec![
        Box::new(SequenceBias::new(seqs).unwrap()),
        Box::new(SuppressTokens::new(suppress.iter().copied()).unwrap()),
        Box::new(
            SuppressTokensAtBegin::new([220, 50_256])
                .unwrap()
                .begin_index(hist.len()),
        ),
        Box::new(ForcedEos::new(hist.len() + 1, eos).unwrap()),
        Box::new(ExponentialDecayLengthPenalty::new(10, 1.01, eos).unwrap()),
        Box::new(TopH::new(0.4).unwrap()),
        Box::new(NormalizedRepetitionPenalty::new(1.2).unwrap()),
        Box::new(
            EncoderRepetitionPenalty::new(1.2, encoder.iter().copied())
                .unwrap()
                .normalize(true),
        ),
        Box::new(EncoderNoRepeatNGram::new(3, encoder).unwrap()),
        Box::new(Watermark::new(V).unwrap()),
        Box::new(Xtc::new(1.0, 0.1).unwrap().strict_threshold(true)),
    ]
}

fn bench_hf(c: &mut Criterion) {
    let row = peaked_row();
    let hist = history();
    let ctx = StageContext {
        history: History::new(&hist, 0),
        seed: 1,
        step: hist.len() as u64,
    };
    let mut cands = Candidates::new();
    c.bench_function("hf/refill", |b| {
        b.iter(|| {
            cands.reset_from(row.iter().copied());
            black_box(cands.len())
        })
    });
    for mut s in hf_stages(&hist) {
        let name = format!("hf/stage/{}", s.name());
        c.bench_function(&name, |b| {
            b.iter(|| {
                cands.reset_from(row.iter().copied());
                s.apply(&mut cands, &ctx).unwrap();
                black_box(cands.len())
            })
        });
    }
    let mut g = Gen(7);
    let uncond: Vec<f32> = row.iter().map(|&l| l + g.normal() as f32).collect();
    let cfg = ClassifierFreeGuidance::new(1.5).unwrap();
    let mut out = vec![0.0f32; V];
    c.bench_function("hf/cfg_combine", |b| {
        b.iter(|| {
            cfg.combine(&row, &uncond, &mut out).unwrap();
            black_box(out[0])
        })
    });
}

criterion_group! {
    name = samplers;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench, bench_hf
}
criterion_main!(samplers);
