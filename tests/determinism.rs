//! Golden token sequences: fixed seeds, fixed deterministic logits (Qwen3's 151,936-slot
//! row and a small 64-token vocabulary), several parameter sets. The expected tokens are
//! literals: they must come out identical in debug and release builds, with and without
//! `-C target-cpu=native`, through `Sampler` one sequence at a time and through
//! `BatchSampler` in any batch order and size, and through the f32 and bf16 paths (the
//! logits are exactly representable in bf16, so the inputs are equal). Chains in
//! llama.cpp's order (temperature after the cuts) have goldens of their own, which
//! `reference::chain_sample` gives too.
//!
//! A failure here means that the same seed, parameters and logits now give other tokens:
//! a value-breaking change. It must not be "fixed" by pasting the new tokens; the change
//! that caused it has to be explained (and released as breaking) first.

use logits::half::bf16;
use logits::{reference, DrawRng, History};
use logits::{
    BatchSampler, Chain, MinP, Penalties, Sampler, SamplingParams, Temperature, TokenId, TopK, TopP,
};

const BIG: usize = 151_936;
/// Qwen3's tokenizer size: the slots past it pad the row and must never come out.
const BIG_VOCAB: usize = 151_669;
const SMALL: usize = 64;
const STEPS: usize = 24;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The "model": a row of logits that depends on the step and the previous token, with a
/// few strong tokens over a noisy tail, like a language model's. Every value is `k / 16`
/// with `|k| < 256`, so it is exact in bf16.
fn row(len: usize, stream: u64, step: usize, prev: TokenId) -> Vec<f32> {
    let key = splitmix(stream ^ ((step as u64) << 40) ^ (u64::from(prev) << 8));
    (0..len as u64)
        .map(|i| {
            let h = splitmix(key ^ i);
            let mut k = (h % 160) as i32 - 140; // tail: -8.75 .. 1.19
            if h >> 60 == 0 {
                k += 100; // about 1 token in 16 is plausible
            }
            if (h >> 32).is_multiple_of(4096) {
                k += 150; // a handful are strong
            }
            k.clamp(-255, 255) as f32 / 16.0
        })
        .collect()
}

fn to_bf16(r: &[f32]) -> Vec<bf16> {
    let b: Vec<bf16> = r.iter().map(|&x| bf16::from_f32(x)).collect();
    assert!(
        b.iter().zip(r).all(|(b, &x)| b.to_f32() == x),
        "row not exact in bf16"
    );
    b
}

/// A named parameter set; `prompt` feeds the penalties.
struct Case {
    name: &'static str,
    params: SamplingParams,
    prompt: &'static [TokenId],
}

fn cases() -> Vec<Case> {
    let b = SamplingParams::builder;
    vec![
        Case {
            name: "qwen3 T0.6 k20 p0.95",
            params: b()
                .temperature(0.6)
                .top_k(20)
                .top_p(0.95)
                .seed(42)
                .build()
                .unwrap(),
            prompt: &[],
        },
        Case {
            name: "top_p 0.9 alone",
            params: b().top_p(0.9).seed(7).build().unwrap(),
            prompt: &[],
        },
        Case {
            name: "min_p 0.05 T0.8",
            params: b().temperature(0.8).min_p(0.05).seed(8).build().unwrap(),
            prompt: &[],
        },
        Case {
            name: "penalties rep1.1 freq0.3 pres0.4",
            params: b()
                .repetition_penalty(1.1)
                .frequency_penalty(0.3)
                .presence_penalty(0.4)
                .seed(9)
                .build()
                .unwrap(),
            prompt: &[1, 2, 3, 5, 8, 13, 21, 34, 55],
        },
        Case {
            name: "plain temperature 0.7",
            params: b().temperature(0.7).seed(10).build().unwrap(),
            prompt: &[],
        },
        Case {
            name: "default T1",
            params: b().seed(u64::MAX).build().unwrap(),
            prompt: &[],
        },
        Case {
            name: "greedy",
            params: SamplingParams::greedy(),
            prompt: &[],
        },
    ]
}

/// The expected tokens for (case, big row).
fn golden(case: usize, big: bool) -> &'static [TokenId] {
    const BIG_GOLDEN: [&[TokenId]; 7] = [
        // qwen3 T0.6 k20 p0.95
        &[
            144396, 69535, 109380, 5954, 142237, 43465, 105609, 48704, 15541, 105987, 25242, 23768,
            88788, 96560, 89413, 59611, 54921, 42820, 137607, 310, 35347, 4992, 33430, 70344,
        ],
        // top_p 0.9 alone
        &[
            133939, 5226, 21615, 6667, 51358, 85647, 31492, 3031, 138279, 75865, 3658, 91737,
            102947, 107022, 104176, 31995, 108027, 87366, 63423, 141618, 104415, 22371, 48406,
            28889,
        ],
        // min_p 0.05 T0.8
        &[
            133939, 5902, 103816, 7989, 64406, 16394, 69463, 46155, 73902, 121116, 4375, 39454,
            14787, 65510, 25724, 127541, 76557, 60971, 145638, 13540, 121275, 43137, 20012, 85109,
        ],
        // penalties rep1.1 freq0.3 pres0.4
        &[
            45571, 28598, 130014, 110365, 114658, 33203, 30166, 138914, 116847, 100292, 123306,
            90694, 14728, 67727, 83259, 133275, 32051, 144963, 132650, 109648, 48455, 126662,
            137869, 36027,
        ],
        // plain temperature 0.7
        &[
            133939, 5902, 91510, 59681, 70552, 53226, 63685, 30453, 136116, 47932, 135466, 142657,
            141265, 116195, 147057, 134886, 87112, 69689, 79226, 84951, 41362, 95299, 139106,
            102506,
        ],
        // default T1
        &[
            127732, 86538, 34165, 136264, 86975, 489, 55841, 923, 131452, 89748, 147924, 44342,
            146890, 60822, 102259, 109436, 48640, 61877, 96237, 45452, 5294, 109035, 48397, 13210,
        ],
        // greedy
        &[
            133939, 5902, 103816, 7989, 64406, 75746, 93384, 64888, 102974, 102118, 128797, 81367,
            41689, 102644, 31393, 13621, 46999, 38672, 110138, 55637, 124221, 113087, 22259, 48509,
        ],
    ];
    const SMALL_GOLDEN: [&[TokenId]; 7] = [
        // qwen3 T0.6 k20 p0.95
        &[
            23, 0, 0, 0, 5, 41, 50, 5, 60, 39, 51, 21, 57, 20, 40, 21, 19, 41, 9, 29, 57, 41, 5, 42,
        ],
        // top_p 0.9 alone
        &[
            6, 39, 59, 60, 5, 41, 36, 26, 38, 33, 58, 1, 0, 10, 14, 19, 48, 24, 21, 61, 30, 10, 51,
            58,
        ],
        // min_p 0.05 T0.8
        &[
            6, 39, 59, 60, 16, 60, 18, 3, 29, 16, 19, 48, 10, 43, 7, 16, 14, 18, 23, 32, 58, 63,
            47, 25,
        ],
        // penalties rep1.1 freq0.3 pres0.4
        &[
            9, 51, 7, 63, 63, 29, 55, 7, 45, 61, 21, 39, 54, 40, 39, 9, 15, 15, 41, 58, 36, 20, 35,
            18,
        ],
        // plain temperature 0.7
        &[
            6, 39, 59, 60, 48, 12, 21, 12, 45, 3, 9, 45, 21, 18, 62, 34, 35, 32, 49, 8, 54, 40, 55,
            50,
        ],
        // default T1
        &[
            58, 35, 59, 60, 46, 36, 61, 44, 55, 59, 18, 32, 19, 47, 13, 6, 4, 5, 35, 6, 1, 20, 35,
            10,
        ],
        // greedy
        &[
            6, 39, 59, 60, 16, 60, 48, 3, 29, 34, 57, 18, 15, 24, 4, 52, 43, 24, 21, 21, 55, 25, 4,
            40,
        ],
    ];
    if big {
        BIG_GOLDEN[case]
    } else {
        SMALL_GOLDEN[case]
    }
}

fn dims(big: bool) -> (usize, usize, u64) {
    if big {
        (BIG_VOCAB, BIG, 0xB16)
    } else {
        (SMALL, SMALL, 0x5A11)
    }
}

fn assert_golden(case: usize, big: bool, path: &str, got: &[TokenId]) {
    let want = golden(case, big);
    let name = cases()[case].name;
    assert_eq!(
        got,
        want,
        "\n{path}: the golden tokens of {name:?} ({} row) changed.\n\
         This is a value-breaking change: the same seed, parameters and logits now sample \
         other tokens. Explain the change that caused it before touching the goldens.\n\
         got: {got:?}\n",
        if big { "151,936" } else { "64" },
    );
}

/// One sequence through `Sampler`, f32 or bf16 rows.
fn run_single(case: &Case, big: bool, use_bf16: bool) -> Vec<TokenId> {
    let (vocab, len, stream) = dims(big);
    let mut s = Sampler::new(case.params.clone(), vocab).unwrap();
    s.push_prompt(case.prompt).unwrap();
    let mut prev = case.prompt.last().copied().unwrap_or(0);
    let mut out = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        let r = row(len, stream, step, prev);
        let t = if use_bf16 {
            s.sample(&to_bf16(&r)).unwrap().token
        } else {
            s.sample(&r).unwrap().token
        };
        assert!((t as usize) < vocab, "padding token {t}");
        out.push(t);
        prev = t;
    }
    out
}

#[test]
fn goldens_single_sequence_f32() {
    for (i, case) in cases().iter().enumerate() {
        for big in [false, true] {
            assert_golden(i, big, "Sampler f32", &run_single(case, big, false));
        }
    }
}

#[test]
fn goldens_single_sequence_bf16() {
    for (i, case) in cases().iter().enumerate() {
        for big in [false, true] {
            assert_golden(i, big, "Sampler bf16", &run_single(case, big, true));
        }
    }
}

/// The sequences of `order` (indices into `cases()`) sampled together as one batch.
fn run_batch(order: &[usize], big: bool, use_bf16: bool) -> Vec<Vec<TokenId>> {
    let (vocab, len, stream) = dims(big);
    let all = cases();
    let samplers = order
        .iter()
        .map(|&i| {
            let mut s = Sampler::new(all[i].params.clone(), vocab).unwrap();
            s.push_prompt(all[i].prompt).unwrap();
            s
        })
        .collect();
    let mut batch = BatchSampler::new(samplers);
    let mut prev: Vec<TokenId> = order
        .iter()
        .map(|&i| all[i].prompt.last().copied().unwrap_or(0))
        .collect();
    let mut out = vec![Vec::new(); order.len()];
    for step in 0..STEPS {
        let block: Vec<f32> = prev
            .iter()
            .flat_map(|&p| row(len, stream, step, p))
            .collect();
        let results = if use_bf16 {
            batch.sample(&to_bf16(&block), len).unwrap().to_vec()
        } else {
            batch.sample(&block, len).unwrap().to_vec()
        };
        for (j, r) in results.into_iter().enumerate() {
            let t = r.unwrap().token;
            out[j].push(t);
            prev[j] = t;
        }
    }
    out
}

#[test]
fn goldens_batched_in_any_order_and_size() {
    let n = cases().len();
    let forward: Vec<usize> = (0..n).collect();
    let reversed: Vec<usize> = (0..n).rev().collect();
    let orders: Vec<(Vec<usize>, bool)> = vec![
        (forward.clone(), false),
        (reversed.clone(), true),
        (vec![3, 0, 6, 1], false),
        (vec![5, 5, 2], false),
        (vec![4], false),
        (vec![6, 2, 4, 0, 1, 3, 5, 1], false),
    ];
    for big in [false, true] {
        for (order, use_bf16) in &orders {
            // The 151,936-slot row is sampled in two batch shapes only, to keep the test
            // quick in debug builds.
            if big && order.len() != n {
                continue;
            }
            let seqs = run_batch(order, big, *use_bf16);
            for (&i, seq) in order.iter().zip(&seqs) {
                let path = format!("BatchSampler order {order:?} bf16 {use_bf16}");
                assert_golden(i, big, &path, seq);
            }
        }
    }
}

#[test]
fn goldens_through_a_chain_in_the_default_order() {
    // A chain in the documented order samples exactly what the Sampler samples.
    let all = cases();
    for big in [false, true] {
        let (vocab, len, stream) = dims(big);
        for (i, build) in [
            (
                0,
                Chain::builder(vocab)
                    .stage(Temperature::new(0.6).unwrap())
                    .stage(TopK::new(20).unwrap())
                    .stage(TopP::new(0.95).unwrap())
                    .seed(42),
            ),
            (
                1,
                Chain::builder(vocab).stage(TopP::new(0.9).unwrap()).seed(7),
            ),
            (
                2,
                Chain::builder(vocab)
                    .stage(Temperature::new(0.8).unwrap())
                    .stage(MinP::new(0.05).unwrap())
                    .seed(8),
            ),
            (
                3,
                Chain::builder(vocab)
                    .stage(Penalties::new(1.1, 0.3, 0.4).unwrap())
                    .seed(9),
            ),
            (6, Chain::builder(vocab).seed(0)),
        ] {
            let build = if i == 6 { build.greedy() } else { build.draw() };
            let mut chain = build.build().unwrap();
            chain.push_prompt(all[i].prompt).unwrap();
            let mut prev = all[i].prompt.last().copied().unwrap_or(0);
            let mut seq = Vec::new();
            for step in 0..STEPS {
                let t = chain.sample(&row(len, stream, step, prev)).unwrap().token;
                seq.push(t);
                prev = t;
            }
            assert_golden(i, big, "Chain in the default order", &seq);
        }
    }
}

#[test]
fn rollback_replays_the_same_tokens() {
    // Rolling back n tokens and sampling again gives the same tokens: draw n is keyed by
    // (seed, n) only.
    let case = &cases()[0];
    let (vocab, len, stream) = dims(false);
    let mut s = Sampler::new(case.params.clone(), vocab).unwrap();
    let mut prev = 0;
    let mut seq = Vec::new();
    for step in 0..STEPS {
        let t = s.sample(&row(len, stream, step, prev)).unwrap().token;
        seq.push(t);
        prev = t;
    }
    s.rollback(10);
    let mut prev = seq[STEPS - 11];
    for (step, &want) in seq.iter().enumerate().skip(STEPS - 10) {
        let t = s.sample(&row(len, stream, step, prev)).unwrap().token;
        assert_eq!(t, want, "step {step} after a rollback");
        prev = t;
    }
    assert_golden(0, false, "Sampler after rollback", s.history().generated());
}

/// One sequence through `logits::reference`, the executable specification, with the
/// uniform the sampler would use: the goldens are the specification's tokens, not only
/// the fast path's.
fn run_reference(case: &Case, big: bool) -> Vec<TokenId> {
    let (vocab, len, stream) = dims(big);
    let mut tokens: Vec<TokenId> = case.prompt.to_vec();
    let mut prev = case.prompt.last().copied().unwrap_or(0);
    let mut rng = DrawRng::new(case.params.seed());
    for step in 0..STEPS {
        let history = History::new(&tokens, case.prompt.len());
        let u = rng.uniform(step as u64);
        let r = row(len, stream, step, prev);
        let (t, _) = reference::sample(&r, vocab, &case.params, &history, None, u).unwrap();
        tokens.push(t);
        prev = t;
    }
    tokens.split_off(case.prompt.len())
}

#[test]
fn goldens_are_the_reference_tokens() {
    for (i, case) in cases().iter().enumerate() {
        for big in [false, true] {
            assert_golden(i, big, "reference", &run_reference(case, big));
        }
    }
}

/// Chains in llama.cpp's order, where temperature comes after the cuts: its default
/// sampler order, and Qwen3's parameters in that order. Their seeds are ones with which
/// the same stages with temperature first sample other tokens on both rows, so that the
/// goldens pin the order too.
const LLAMA_CHAINS: [&str; 2] = [
    "llama.cpp default k40 p0.95 min_p0.05 T0.8",
    "llama.cpp order k20 p0.95 T0.6",
];

fn llama_chain(which: usize, vocab: usize) -> Chain {
    let b = Chain::builder(vocab);
    let b = match which {
        0 => b
            .stage(TopK::new(40).unwrap())
            .stage(TopP::new(0.95).unwrap())
            .stage(MinP::new(0.05).unwrap())
            .stage(Temperature::new(0.8).unwrap())
            .seed(42),
        _ => b
            .stage(TopK::new(20).unwrap())
            .stage(TopP::new(0.95).unwrap())
            .stage(Temperature::new(0.6).unwrap())
            .seed(10),
    };
    b.draw().build().unwrap()
}

/// The same chains as `reference` steps, with their seeds.
fn llama_steps(which: usize) -> (Vec<reference::Step>, u64) {
    use reference::Step;
    match which {
        0 => (
            vec![
                Step::TopK { k: 40, min_keep: 1 },
                Step::TopP {
                    p: 0.95,
                    min_keep: 1,
                },
                Step::MinP {
                    p: 0.05,
                    min_keep: 1,
                },
                Step::Temperature(0.8),
            ],
            42,
        ),
        _ => (
            vec![
                Step::TopK { k: 20, min_keep: 1 },
                Step::TopP {
                    p: 0.95,
                    min_keep: 1,
                },
                Step::Temperature(0.6),
            ],
            10,
        ),
    }
}

/// The expected tokens for (llama.cpp-order chain, big row).
fn llama_golden(which: usize, big: bool) -> &'static [TokenId] {
    const BIG_GOLDEN: [&[TokenId]; 2] = [
        // llama.cpp default k40 p0.95 min_p0.05 T0.8
        &[
            144396, 69535, 109380, 5954, 3982, 53868, 102399, 89438, 131568, 91681, 8309, 54205,
            91156, 55844, 75407, 72795, 94378, 23509, 22239, 131943, 76230, 98241, 77162, 138099,
        ],
        // llama.cpp order k20 p0.95 T0.6
        &[
            133939, 5902, 103816, 7989, 69761, 31008, 106417, 150018, 32852, 37749, 65660, 106769,
            128168, 32534, 29419, 113668, 125579, 73068, 44605, 145166, 102213, 133489, 71321,
            82233,
        ],
    ];
    const SMALL_GOLDEN: [&[TokenId]; 2] = [
        // llama.cpp default k40 p0.95 min_p0.05 T0.8
        &[
            23, 0, 59, 60, 61, 7, 7, 52, 55, 59, 13, 22, 35, 16, 4, 52, 31, 38, 27, 5, 1, 20, 35,
            10,
        ],
        // llama.cpp order k20 p0.95 T0.6
        &[
            6, 39, 59, 60, 61, 24, 14, 55, 63, 17, 7, 33, 29, 8, 21, 17, 37, 62, 42, 14, 19, 61,
            62, 28,
        ],
    ];
    if big {
        BIG_GOLDEN[which]
    } else {
        SMALL_GOLDEN[which]
    }
}

fn assert_llama_golden(which: usize, big: bool, path: &str, got: &[TokenId]) {
    let want = llama_golden(which, big);
    let name = LLAMA_CHAINS[which];
    assert_eq!(
        got,
        want,
        "\n{path}: the golden tokens of {name:?} ({} row) changed.\n\
         This is a value-breaking change: the same seed, parameters and logits now sample \
         other tokens. Explain the change that caused it before touching the goldens.\n\
         got: {got:?}\n",
        if big { "151,936" } else { "64" },
    );
}

/// One sequence through a chain in llama.cpp's order, f32 or bf16 rows.
fn run_llama_chain(which: usize, big: bool, use_bf16: bool) -> Vec<TokenId> {
    let (vocab, len, stream) = dims(big);
    let mut chain = llama_chain(which, vocab);
    let mut prev = 0;
    let mut out = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        let r = row(len, stream, step, prev);
        let t = if use_bf16 {
            chain.sample(&to_bf16(&r)).unwrap().token
        } else {
            chain.sample(&r).unwrap().token
        };
        assert!((t as usize) < vocab, "padding token {t}");
        out.push(t);
        prev = t;
    }
    out
}

/// The same sequence through `reference::chain_sample`, with the uniform the chain would
/// use.
fn run_llama_reference(which: usize, big: bool) -> Vec<TokenId> {
    let (vocab, len, stream) = dims(big);
    let (steps, seed) = llama_steps(which);
    let mut tokens: Vec<TokenId> = Vec::new();
    let mut prev = 0;
    let mut rng = DrawRng::new(seed);
    for step in 0..STEPS {
        let history = History::new(&tokens, 0);
        let u = rng.uniform(step as u64);
        let r = row(len, stream, step, prev);
        let (t, _) = reference::chain_sample(&r, vocab, &history, None, &steps, u).unwrap();
        tokens.push(t);
        prev = t;
    }
    tokens
}

#[test]
fn goldens_chains_in_llama_cpp_order_f32() {
    for which in 0..LLAMA_CHAINS.len() {
        for big in [false, true] {
            let got = run_llama_chain(which, big, false);
            assert_llama_golden(which, big, "Chain f32", &got);
        }
    }
}

#[test]
fn goldens_chains_in_llama_cpp_order_bf16() {
    for which in 0..LLAMA_CHAINS.len() {
        for big in [false, true] {
            let got = run_llama_chain(which, big, true);
            assert_llama_golden(which, big, "Chain bf16", &got);
        }
    }
}

#[test]
fn goldens_chains_in_llama_cpp_order_are_the_reference_tokens() {
    for which in 0..LLAMA_CHAINS.len() {
        for big in [false, true] {
            let got = run_llama_reference(which, big);
            assert_llama_golden(which, big, "reference chain", &got);
        }
    }
}

#[test]
fn llama_cpp_order_goldens_differ_from_temperature_first() {
    // The same stages and seed with temperature moved to the front sample other tokens:
    // the goldens above depend on the order.
    for (which, name) in LLAMA_CHAINS.iter().enumerate() {
        for big in [false, true] {
            let (vocab, len, stream) = dims(big);
            let (steps, seed) = llama_steps(which);
            let mut b = Chain::builder(vocab).seed(seed);
            let t = match steps.last() {
                Some(&reference::Step::Temperature(t)) => t,
                _ => unreachable!("the llama.cpp order ends with temperature"),
            };
            b = b.stage(Temperature::new(t).unwrap());
            b = b.stage(TopK::new(if which == 0 { 40 } else { 20 }).unwrap());
            b = b.stage(TopP::new(0.95).unwrap());
            if which == 0 {
                b = b.stage(MinP::new(0.05).unwrap());
            }
            let mut chain = b.draw().build().unwrap();
            let mut prev = 0;
            let mut seq = Vec::new();
            for step in 0..STEPS {
                let t = chain.sample(&row(len, stream, step, prev)).unwrap().token;
                seq.push(t);
                prev = t;
            }
            assert_ne!(seq, llama_golden(which, big), "{name}");
        }
    }
}

/// Prints the golden arrays of the llama.cpp-order chains (run with `--ignored
/// --nocapture` when adding one), and refuses to print any on which the chain and the
/// reference disagree.
#[test]
#[ignore]
fn print_llama_chain_goldens() {
    for big in [true, false] {
        println!("{}", if big { "BIG" } else { "SMALL" });
        for (which, name) in LLAMA_CHAINS.iter().enumerate() {
            let chain = run_llama_chain(which, big, false);
            let spec = run_llama_reference(which, big);
            assert_eq!(chain, spec, "{name}: the chain and the reference differ");
            println!("    // {name}\n    &{chain:?},");
        }
    }
}

/// Prints the golden arrays (run with `--ignored --nocapture` when adding a case), and
/// refuses to print any on which the fast path and the reference disagree.
#[test]
#[ignore]
fn print_goldens() {
    for big in [true, false] {
        println!("{}", if big { "BIG" } else { "SMALL" });
        for case in cases() {
            let fast = run_single(&case, big, false);
            let spec = run_reference(&case, big);
            assert_eq!(
                fast, spec,
                "{}: the fast path and the reference differ",
                case.name
            );
            println!("    // {}\n    &{:?},", case.name, fast);
        }
    }
}
