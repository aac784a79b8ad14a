//! Once warm, sampling allocates nothing: counted with a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::{Mutex, MutexGuard};

use logits::{
    half::bf16, AllowedTokens, BadWords, Chain, Dry, DynamicTemperature, EncoderNoRepeatNGram,
    EncoderRepetitionPenalty, EpsilonCutoff, EtaCutoff, ExponentialDecayLengthPenalty, ForcedBos,
    ForcedEos, LogitBias, LogprobKind, MinNewTokens, MinP, Mirostat, MirostatV2, NoRepeatNGram,
    NormalizedRepetitionPenalty, Penalties, Sampler, SamplingParams, SamplingParamsBuilder,
    SequenceBias, Stage, SuppressTokens, SuppressTokensAtBegin, Temperature, TokenMask, TopH, TopK,
    TopNSigma, TopP, TypicalP, Watermark, Xtc,
};

struct Counting;

thread_local! {
    /// Only the test's own thread is counted: the test harness's threads may allocate
    /// at any time (progress messages, timers).
    static COUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// This thread's counted allocations. Per thread, so that the harness's allocations
    /// after another test returns (on that test's thread, still counting) never reach
    /// this one's figure.
    static ALLOCATIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn count() {
    if COUNTED.try_with(|c| c.get()).unwrap_or(false) {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    }
}

/// The allocations counted on this thread so far.
fn allocations() -> usize {
    ALLOCATIONS.with(|n| n.get())
}

// The counting allocator forwards to the system allocator and only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by `System.alloc` with this layout (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged; `ptr` came from this allocator with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Each test function holds this lock, so that they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const V: usize = 151_936;

/// `V` deterministic uniforms in `[0, 1)` (xorshift64, 24 bits each).
fn units() -> impl Iterator<Item = f32> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..V).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 24) as f32
    })
}

/// A deterministic peaked row: a few dozen plausible tokens above a background.
fn row() -> Vec<f32> {
    units()
        .enumerate()
        .map(|(i, u)| {
            let noise = u * 4.0 - 2.0;
            if i % 5003 == 0 {
                12.0 + noise
            } else {
                noise
            }
        })
        .collect()
}

/// Runs `steps` draws after two warm-up draws and returns the allocations they made.
fn allocations_while_sampling(params: SamplingParams, mask: Option<&TokenMask>) -> usize {
    let r = row();
    let r16: Vec<bf16> = r.iter().map(|&x| bf16::from_f32(x)).collect();
    let mut s = Sampler::new(params, V).unwrap();
    s.push_prompt(&[1, 2, 3, 4, 5]).unwrap();
    s.reserve(1000).unwrap();
    for _ in 0..2 {
        match mask {
            Some(m) => s.sample_masked(&r, m).unwrap(),
            None => s.sample(&r).unwrap(),
        };
        s.sample(&r16).unwrap();
    }
    let before = allocations();
    for _ in 0..20 {
        let out = match mask {
            Some(m) => s.sample_masked(&r, m).unwrap(),
            None => s.sample(&r).unwrap(),
        };
        assert!((out.token as usize) < V);
        s.sample(&r16).unwrap();
    }
    allocations() - before
}

// The counter is global, so the cases run one after another, and under `serial`.
#[test]
fn warm_sampler_does_not_allocate() {
    let _serial = serial();
    COUNTED.with(|c| c.set(true));
    let qwen3 = SamplingParams::builder()
        .temperature(0.6)
        .top_k(20)
        .top_p(0.95)
        .build()
        .unwrap();
    let cases = [
        ("qwen3", qwen3.clone()),
        ("greedy", SamplingParams::greedy()),
        ("plain", SamplingParams::default()),
        (
            "top_p",
            SamplingParams::builder().top_p(0.95).build().unwrap(),
        ),
        (
            "min_p",
            SamplingParams::builder().min_p(0.05).build().unwrap(),
        ),
        (
            "large_k",
            SamplingParams::builder().top_k(1000).build().unwrap(),
        ),
        (
            "penalties_bias_logprobs",
            qwen3
                .to_builder()
                .repetition_penalty(1.1)
                .frequency_penalty(0.5)
                .presence_penalty(0.5)
                .penalty_window(64)
                .logit_bias(7, -3.0)
                .logprobs(20)
                .build()
                .unwrap(),
        ),
    ];
    for (name, params) in cases {
        assert_eq!(allocations_while_sampling(params, None), 0, "{name}");
    }
    let mut mask = TokenMask::new_full(V);
    for id in (0..V as u32).step_by(3) {
        mask.disallow(id).unwrap();
    }
    assert_eq!(
        allocations_while_sampling(qwen3.clone(), Some(&mask)),
        0,
        "masked"
    );
    // The compact row of a sparse mask, and the patches of a nearly-open one, at the
    // bounds of their regimes, with the bias, the penalties and logprobs.
    let mut sparse = TokenMask::new_empty(V);
    for id in (0..V as u32).step_by(V / 4096 + 1).take(4096) {
        sparse.allow(id).unwrap();
    }
    let mut open = TokenMask::new_full(V);
    for id in (0..V as u32).step_by(V / 16_384).take(16_384) {
        open.disallow(id).unwrap();
    }
    // Without a top-k, nearly open means at most 2,048 disallowed.
    let mut open_hist = TokenMask::new_full(V);
    for id in (0..V as u32).step_by(V / 2048).take(2048) {
        open_hist.disallow(id).unwrap();
    }
    let adjusted = qwen3
        .to_builder()
        .repetition_penalty(1.1)
        .presence_penalty(0.5)
        .penalty_window(64)
        .logit_bias(7, -3.0)
        .logprobs(5)
        .build()
        .unwrap();
    for (name, m) in [
        ("sparse", &sparse),
        ("open", &open),
        ("open_hist", &open_hist),
    ] {
        for params in [
            qwen3.clone(),
            SamplingParams::greedy(),
            SamplingParams::builder().top_p(0.9).build().unwrap(),
            SamplingParams::builder().min_p(0.05).build().unwrap(),
            adjusted.clone(),
        ] {
            assert_eq!(allocations_while_sampling(params, Some(m)), 0, "{name}");
        }
    }

    // Every chain stage, warm, each alone after a shared adjusting prefix.
    let stages: Vec<Box<dyn Stage>> = vec![
        Box::new(LogitBias::new([(3, -1.0), (9, f32::NEG_INFINITY)]).unwrap()),
        Box::new(Penalties::new(1.1, 0.1, 0.1).unwrap().window(64)),
        Box::new(Dry::new(0.8, 1.75, 2).unwrap().window(256)),
        Box::new(NoRepeatNGram::new(3).unwrap()),
        Box::new(BadWords::new([[5u32, 6], [7, 8]]).unwrap()),
        Box::new(MinNewTokens::new(2, [11]).unwrap()),
        Box::new(TopNSigma::new(2.0).unwrap()),
        Box::new(TopK::new(200).unwrap()),
        Box::new(AllowedTokens::new(0..V as u32 / 2).unwrap()),
        Box::new(DynamicTemperature::new(0.8, 0.3, 1.0).unwrap()),
        Box::new(TypicalP::new(0.95).unwrap()),
        Box::new(EpsilonCutoff::new(1e-4).unwrap()),
        Box::new(EtaCutoff::new(1e-4).unwrap()),
        Box::new(Xtc::new(0.5, 0.1).unwrap()),
        Box::new(TopP::new(0.95).unwrap()),
        Box::new(MinP::new(0.01).unwrap()),
        Box::new(Temperature::new(0.8).unwrap()),
        Box::new(Mirostat::new(V, 5.0, 0.1, 100).unwrap()),
        Box::new(MirostatV2::new(5.0, 0.1).unwrap()),
        Box::new(SequenceBias::new([(vec![5u32, 6], -1.0), (vec![9], 0.5)]).unwrap()),
        Box::new(BadWords::new([[5u32], [7]]).unwrap().eos_token_id([7])),
        Box::new(SuppressTokens::new([1, 8, 200]).unwrap()),
        Box::new(SuppressTokensAtBegin::new([1, 8]).unwrap().begin_index(7)),
        Box::new(ForcedBos::new(3).unwrap()),
        Box::new(ForcedEos::max_new_tokens(6, [11]).unwrap()),
        Box::new(ExponentialDecayLengthPenalty::new(1, 1.2, [11]).unwrap()),
        Box::new(TopH::new(0.6).unwrap()),
        Box::new(NormalizedRepetitionPenalty::new(1.3).unwrap()),
        Box::new(
            EncoderRepetitionPenalty::new(1.3, [4, 5, 6])
                .unwrap()
                .normalize(true),
        ),
        Box::new(EncoderNoRepeatNGram::new(2, [5, 6, 5, 7]).unwrap()),
        Box::new(Watermark::new(V).unwrap()),
        Box::new(Xtc::new(0.5, 0.1).unwrap().strict_threshold(true)),
    ];
    let chains: Vec<(&str, Chain)> = stages
        .into_iter()
        .map(|stage| {
            let name = stage.name();
            let chain = Chain::builder(V)
                .boxed_stage(stage)
                .logprobs(5)
                .draw()
                .build()
                .unwrap();
            (name, chain)
        })
        .collect();
    let r = row();
    for (name, mut chain) in chains {
        chain.push_prompt(&[1, 2, 3, 4, 5]).unwrap();
        chain.reserve(100).unwrap();
        for _ in 0..3 {
            chain.sample(&r).unwrap();
        }
        let before = allocations();
        for _ in 0..10 {
            chain.sample(&r).unwrap();
        }
        assert_eq!(allocations() - before, 0, "{name}");
    }
}

/// Runs `steps` draws of a chain after two warm-up draws and returns the allocations they
/// made, as [`allocations_while_sampling`] does for the `Sampler`.
fn allocations_while_chaining(mut chain: Chain, mask: Option<&TokenMask>) -> usize {
    let r = row();
    let r16: Vec<bf16> = r.iter().map(|&x| bf16::from_f32(x)).collect();
    chain.push_prompt(&[1, 2, 3, 4, 5]).unwrap();
    chain.reserve(1000).unwrap();
    for _ in 0..2 {
        match mask {
            Some(m) => chain.sample_masked(&r, m).unwrap(),
            None => chain.sample(&r).unwrap(),
        };
        chain.sample(&r16).unwrap();
    }
    let before = allocations();
    for _ in 0..20 {
        let out = match mask {
            Some(m) => chain.sample_masked(&r, m).unwrap(),
            None => chain.sample(&r).unwrap(),
        };
        assert!((out.token as usize) < V);
        chain.sample(&r16).unwrap();
    }
    allocations() - before
}

fn chain(stages: Vec<Box<dyn Stage>>) -> Chain {
    stages
        .into_iter()
        .fold(Chain::builder(V), |b, s| b.boxed_stage(s))
        .draw()
        .seed(3)
        .build()
        .unwrap()
}

fn top_k(k: usize) -> Box<dyn Stage> {
    Box::new(TopK::new(k).unwrap())
}

fn temperature(t: f32) -> Box<dyn Stage> {
    Box::new(Temperature::new(t).unwrap())
}

/// The full-row probability stages, each new.
fn full_row_stages() -> Vec<Box<dyn Stage>> {
    vec![
        Box::new(TypicalP::new(0.95).unwrap()),
        Box::new(EpsilonCutoff::new(3e-4).unwrap()),
        Box::new(EtaCutoff::new(3e-4).unwrap()),
        Box::new(Xtc::new(0.5, 0.1).unwrap()),
        Box::new(MirostatV2::new(5.0, 0.1).unwrap()),
        Box::new(DynamicTemperature::new(0.8, 0.5, 1.0).unwrap()),
        Box::new(TopNSigma::new(1.0).unwrap()),
    ]
}

/// The chains of common configurations, by name: llama.cpp's default order, Qwen3's
/// default in the `Sampler`'s order, top-p first, and every full-row stage first and
/// after top-k 40.
fn configured_chains() -> Vec<(String, Chain)> {
    let mut chains = vec![
        (
            "llama".to_string(),
            chain(vec![
                top_k(40),
                Box::new(TopP::new(0.95).unwrap()),
                Box::new(MinP::new(0.05).unwrap()),
                temperature(0.8),
            ]),
        ),
        (
            "qwen3".to_string(),
            chain(vec![
                temperature(0.6),
                top_k(20),
                Box::new(TopP::new(0.95).unwrap()),
            ]),
        ),
        (
            "top_p_first".to_string(),
            chain(vec![Box::new(TopP::new(0.95).unwrap()), temperature(0.8)]),
        ),
    ];
    for stage in full_row_stages() {
        let name = format!("{}_first", stage.name());
        chains.push((name, chain(vec![stage, temperature(0.8)])));
    }
    for stage in full_row_stages() {
        let name = format!("top_k_40_{}", stage.name());
        chains.push((name, chain(vec![top_k(40), stage, temperature(0.8)])));
    }
    chains
}

/// The masks the configured chains run with: none, a third of the tokens disallowed, and
/// a sparse mask of 4,096 allowed tokens.
fn masks() -> Vec<(&'static str, Option<TokenMask>)> {
    let mut thirds = TokenMask::new_full(V);
    for id in (0..V as u32).step_by(3) {
        thirds.disallow(id).unwrap();
    }
    let mut sparse = TokenMask::new_empty(V);
    for id in (0..V as u32).step_by(V / 4096 + 1).take(4096) {
        sparse.allow(id).unwrap();
    }
    vec![
        ("unmasked", None),
        ("thirds", Some(thirds)),
        ("sparse", Some(sparse)),
    ]
}

#[test]
fn warm_configured_chains_do_not_allocate() {
    let _serial = serial();
    COUNTED.with(|c| c.set(true));
    let mut failures = Vec::new();
    for (mask_name, mask) in masks() {
        for (name, chain) in configured_chains() {
            let n = allocations_while_chaining(chain, mask.as_ref());
            if n != 0 {
                failures.push(format!("{name} {mask_name}: {n}"));
            }
        }
    }
    assert!(failures.is_empty(), "allocations: {failures:?}");
}

/// Token-indexed probabilities and logprobs, warm: no allocation per call, for a
/// Sampler without a cut (the histogram's unsorted pass), with top-p and greedy, and for
/// chains with a stage after the cut, masked and not.
#[test]
fn warm_probabilities_do_not_allocate() {
    let _serial = serial();
    COUNTED.with(|c| c.set(true));
    let r = row();
    let r16: Vec<bf16> = r.iter().map(|&x| bf16::from_f32(x)).collect();
    let mut out = vec![0.0f32; V];
    let mut failures = Vec::new();
    let sampler = |p: SamplingParamsBuilder| Sampler::new(p.build().unwrap(), V).unwrap();
    for (mask_name, mask) in masks() {
        let mask = mask.as_ref();
        let mut samplers = [
            ("no cut", sampler(SamplingParams::builder())),
            ("top-p", sampler(SamplingParams::builder().top_p(0.95))),
            (
                "greedy",
                sampler(SamplingParams::builder().temperature(0.0)),
            ),
        ];
        let mut chains = [
            ("llama", chain(vec![top_k(40), temperature(0.8)])),
            (
                "typical",
                chain(vec![
                    top_k(200),
                    Box::new(TypicalP::new(0.9).unwrap()),
                    temperature(0.7),
                ]),
            ),
        ];
        for round in 0..3 {
            let before = allocations();
            for (_, s) in &mut samplers {
                s.probabilities(&r, mask, &mut out).unwrap();
                s.probabilities(&r16, mask, &mut out).unwrap();
                for kind in [LogprobKind::Raw, LogprobKind::Processed] {
                    s.logprobs_into(&r, mask, kind, &mut out).unwrap();
                }
            }
            for (_, c) in &mut chains {
                c.probabilities(&r, mask, &mut out).unwrap();
                c.logprobs_into(&r16, mask, LogprobKind::Processed, &mut out)
                    .unwrap();
            }
            let n = allocations() - before;
            if round > 0 && n != 0 {
                failures.push(format!("{mask_name} round {round}: {n}"));
            }
        }
    }
    assert!(failures.is_empty(), "allocations: {failures:?}");
}

/// Speculative verification, warm: no allocation per call, whether every draft token is
/// accepted (the bonus draw) or the first is rejected (the residual draw), for sparse,
/// dense and logits drafts, through the Qwen3 sampler, a greedy one and a chain.
#[test]
fn warm_verifier_does_not_allocate() {
    use logits::{DraftDistribution, Speculation, TokenId, Verifier};
    let _serial = serial();
    COUNTED.with(|c| c.set(true));
    const K: usize = 3;
    let r = row();
    let rows: Vec<f32> = r.repeat(K + 1);
    let qwen3 = SamplingParams::builder()
        .temperature(0.6)
        .top_k(20)
        .top_p(0.95)
        .repetition_penalty(1.1)
        .seed(3);
    let mut samplers = [
        Sampler::new(qwen3.build().unwrap(), V).unwrap(),
        Sampler::new(SamplingParams::greedy(), V).unwrap(),
    ];
    let mut llama = chain(vec![top_k(40), temperature(0.8)]);
    let mut dist = Vec::new();
    samplers[0].distribution(&r, None, &mut dist).unwrap();
    let pairs: Vec<(TokenId, f64)> = dist.repeat(K);
    let ends: Vec<usize> = (1..=K).map(|i| i * dist.len()).collect();
    let dense = vec![1.0f32 / V as f32; K * V];
    // A token of the row's background, which the cuts remove: rejected at once.
    let outside = [1 as TokenId; K];
    let inside = [dist[0].0; K];
    let specs = [
        Speculation {
            draft: &inside[..],
            q: DraftDistribution::Sparse {
                pairs: &pairs,
                ends: &ends,
            },
            target: &rows,
            row_len: V,
        },
        Speculation {
            draft: &outside[..],
            q: DraftDistribution::Dense(&dense),
            target: &rows,
            row_len: V,
        },
        Speculation {
            draft: &inside[..],
            q: DraftDistribution::Logits(&rows[..K * V]),
            target: &rows,
            row_len: V,
        },
    ];
    let mut verifier = Verifier::new();
    for s in &mut samplers {
        s.reserve(1000).unwrap();
    }
    llama.reserve(1000).unwrap();
    let mut failures = Vec::new();
    for round in 0..3 {
        let before = allocations();
        for spec in &specs {
            for s in &mut samplers {
                let out = verifier.verify(s, spec).unwrap();
                s.rollback(out.emitted());
            }
            let out = verifier.verify(&mut llama, spec).unwrap();
            llama.rollback(out.emitted());
        }
        let n = allocations() - before;
        if round > 0 && n != 0 {
            failures.push(format!("round {round}: {n}"));
        }
    }
    assert!(failures.is_empty(), "allocations: {failures:?}");
}

/// `reserve(n)` sizes every stage for the next `n` steps, not only the history: DRY
/// without a window grows its repeat search with the history, and mirostat follows it.
#[test]
fn reserve_sizes_every_stage() {
    let _serial = serial();
    COUNTED.with(|c| c.set(true));
    let r = row();
    // As a chain, and as a sampler's processor.
    let mut c = chain(vec![
        Box::new(Dry::new(0.8, 1.75, 2).unwrap()),
        Box::new(Mirostat::new(V, 5.0, 0.1, 100).unwrap()),
    ]);
    c.push_prompt(&[1, 2, 3, 4, 5]).unwrap();
    c.reserve(1000).unwrap();
    let mut s = Sampler::new(SamplingParams::default(), V).unwrap();
    s.add_processor(Box::new(Dry::new(0.8, 1.75, 2).unwrap()));
    s.push_prompt(&[1, 2, 3, 4, 5]).unwrap();
    s.reserve(1000).unwrap();
    for _ in 0..2 {
        c.sample(&r).unwrap();
        s.sample(&r).unwrap();
    }
    let before = allocations();
    for _ in 0..30 {
        c.sample(&r).unwrap();
    }
    let chained = allocations() - before;
    let before = allocations();
    for _ in 0..30 {
        s.sample(&r).unwrap();
    }
    let sampled = allocations() - before;
    assert_eq!((chained, sampled), (0, 0), "allocations (chain, sampler)");
}

#[test]
fn warm_bans_set_params_and_forks_do_not_allocate() {
    let _g = serial();
    let r = row();
    let params = |seed| {
        SamplingParams::builder()
            .temperature(0.7)
            .top_p(0.9)
            .repetition_penalty(1.1)
            .penalty_window(64)
            .seed(seed)
            .build()
            .unwrap()
    };
    let mut s = Sampler::new(params(1), V).unwrap();
    s.reserve(1000).unwrap();
    let banned = [0, 5003, 10006];
    let mask = TokenMask::new_full(V);
    for _ in 0..2 {
        s.sample_banned(&r, None, &banned).unwrap();
        s.sample_banned(&r, Some(&mask), &banned).unwrap();
    }
    COUNTED.with(|c| c.set(true));
    let before = allocations();
    for _ in 0..10 {
        let out = s.sample_banned(&r, None, &banned).unwrap();
        assert!(!banned.contains(&out.token));
        s.sample_banned(&r, Some(&mask), &banned).unwrap();
    }
    // A new request on the warm sampler, and its steps.
    s.set_params(params(2)).unwrap();
    s.push_prompt(&[1, 2, 3]).unwrap();
    for _ in 0..10 {
        s.sample_banned(&r, None, &banned).unwrap();
    }
    let warm = allocations() - before;
    COUNTED.with(|c| c.set(false));
    assert_eq!(warm, 0, "warm bans and set_params allocated");

    // A fork's buffers are its own and sized: once it has drawn twice, it allocates
    // nothing either.
    let mut f = s.fork(3);
    f.reserve(1000).unwrap();
    for _ in 0..2 {
        f.sample_banned(&r, None, &banned).unwrap();
        f.sample(&r).unwrap();
    }
    COUNTED.with(|c| c.set(true));
    let before = allocations();
    for _ in 0..10 {
        f.sample_banned(&r, None, &banned).unwrap();
        f.sample(&r).unwrap();
    }
    let forked = allocations() - before;
    COUNTED.with(|c| c.set(false));
    assert_eq!(forked, 0, "a warm fork allocated");
}

/// A flat row: uniform in `[-1, 1]`, so that min-p 0.05 keeps every token.
fn flat_row() -> Vec<f32> {
    units().map(|u| u * 2.0 - 1.0).collect()
}

/// Allocations during 20 draws after two warm-up draws.
fn counted(mut step: impl FnMut()) -> usize {
    let _g = serial();
    step();
    step();
    let before = allocations();
    COUNTED.with(|c| c.set(true));
    for _ in 0..20 {
        step();
    }
    COUNTED.with(|c| c.set(false));
    allocations() - before
}

/// Min-p on a flat row (thousands of survivors, drawn without sorting them), in the
/// Sampler and in a chain `min-p -> T`, with and without a mask.
#[test]
fn warm_flat_min_p_does_not_allocate() {
    let row = flat_row();
    let mut mask = TokenMask::new_empty(V);
    for id in (0..V as u32).filter(|id| id % 3 != 0) {
        mask.allow(id).unwrap();
    }
    for mask in [None, Some(&mask)] {
        let params = SamplingParams::builder()
            .min_p(0.05)
            .logit_bias(7, 0.5)
            .build()
            .unwrap();
        let mut s = Sampler::new(params, V).unwrap();
        let mut u = 0.0;
        let n = counted(|| {
            u = (u + 0.377) % 1.0;
            s.sample_with_uniform(&row, mask, u).unwrap();
            s.rollback(1);
        });
        assert_eq!(n, 0, "sampler, mask {}", mask.is_some());
        let mut c = Chain::builder(V)
            .stage(MinP::new(0.05).unwrap())
            .stage(Temperature::new(0.8).unwrap())
            .draw()
            .build()
            .unwrap();
        let n = counted(|| {
            u = (u + 0.377) % 1.0;
            c.sample_with_uniform(&row, mask, u).unwrap();
            c.reset();
        });
        assert_eq!(n, 0, "chain, mask {}", mask.is_some());
    }
}

/// Typical-p as the first stage, on the row in place: its survivors collected on a peaked
/// row, bans and a floor on a flat one; and dynamic temperature first, drawn at both
/// ends of its temperature's bracket; with and without a mask, and with a top-k after
/// the stage.
#[test]
fn warm_typical_p_and_dynamic_temperature_first_do_not_allocate() {
    let mut mask = TokenMask::new_empty(V);
    for id in (0..V as u32).filter(|id| id % 3 != 0) {
        mask.allow(id).unwrap();
    }
    for (shape, row) in [("peaked", row()), ("flat", flat_row())] {
        for mask in [None, Some(&mask)] {
            // Alone before the temperature, and in llama.cpp's order before top-k 40.
            let firsts: [fn() -> Box<dyn Stage>; 2] = [
                || Box::new(TypicalP::new(0.95).unwrap()),
                || Box::new(DynamicTemperature::new(0.8, 0.5, 1.0).unwrap()),
            ];
            for (first, top_k) in firsts.iter().flat_map(|f| [(f, None), (f, Some(40))]) {
                let mut b = Chain::builder(V).boxed_stage(first());
                if let Some(k) = top_k {
                    b = b.stage(TopK::new(k).unwrap());
                }
                let mut c = b
                    .stage(Temperature::new(0.8).unwrap())
                    .draw()
                    .build()
                    .unwrap();
                let mut u = 0.0;
                let n = counted(|| {
                    u = (u + 0.377) % 1.0;
                    c.sample_with_uniform(&row, mask, u).unwrap();
                    c.reset();
                });
                let name = first().name();
                assert_eq!(
                    n,
                    0,
                    "{name}, {shape}, mask {}, top-k {top_k:?}",
                    mask.is_some()
                );
            }
        }
    }
}
