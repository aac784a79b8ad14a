//! Grammar-mask benchmarks over the real Qwen3 vocabulary (151,936 logit slots).
//!
//! `cargo bench --features llguidance --bench grammar`
//!
//! Prints one-time costs and, for each case, the per-step mask time over the canonical walk
//! (p50 / p99 / max, cold first pass and warm passes on clones), then runs criterion for
//! compile time, mask application, and sampling under a mask:
//!
//! - `sample/<chain>`: `Sampler::sample` on a peaked row of 151,936 `f32`, no mask: the
//!   baseline; `qwen3` is Qwen3's chain (temperature 0.6, top-k 20, top-p 0.95), `top-p`
//!   top-p 0.95 alone, `min-p` min-p 0.05 alone, `draw` the plain draw;
//! - `sample_masked/<mask>`: the same with the mask, as the sampler chooses to read it;
//! - `sample_masked_dense/<mask>`: the same, forced through the masked copy of the row
//!   (a processor that changes nothing takes the dense path), for comparison;
//! - `mask_stage/<mask>`: the mask stage alone (`Sampler::mask_stage`): the gather of
//!   the allowed tokens or the marks of the disallowed ones;
//! - `mask_stage_dense/<mask>`: the dense path's mask stage on the same mask (the copy,
//!   mask and re-check of the row).

use std::hint::black_box;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion};
use logits::grammar::{Choice, Constraint, GrammarMask, Vocab};
use logits::{Error, History, LogitsProcessor, Sampler, SamplingParams, TokenId, TokenMask};

const N_LOGITS: usize = 151_936;
const EOS: [TokenId; 2] = [151_645, 151_643];
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/qwen3");

#[cfg(feature = "llguidance")]
const REGEX: &str = "[0-9]{3}-[0-9]{4}";
#[cfg(feature = "llguidance")]
const SCHEMA: &str = r#"{"type": "object", "properties": {"name": {"type": "string"},
 "age": {"type": "integer"}, "color": {"enum": ["red", "green", "blue"]},
 "scores": {"type": "array", "items": {"type": "number"}}},
 "required": ["name", "age", "color", "scores"], "additionalProperties": false}"#;
#[cfg(feature = "llguidance")]
const SCHEMA_MAXLEN: &str = r#"{"type": "object", "properties": {
 "title": {"type": "string", "maxLength": 40},
 "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "minItems": 1, "maxItems": 3},
 "ok": {"type": "boolean"}}, "required": ["title", "tags", "ok"], "additionalProperties": false}"#;
#[cfg(feature = "llguidance")]
const LARK: &str = "start: expr\nexpr: term ((\"+\" | \"-\") term)*\nterm: factor ((\"*\" | \"/\") factor)*\nfactor: NUMBER | \"(\" expr \")\"\nNUMBER: /[0-9]+/\n";

fn load_vocab() -> Arc<Vocab> {
    let gz = std::fs::read(format!("{DATA}/tokenizer.json.gz")).expect("fixture");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .expect("gzip");
    let t = Instant::now();
    let v = Vocab::from_tokenizer_json(&text, N_LOGITS, &EOS).expect("vocab");
    println!("one-time: Vocab::from_tokenizer_json {:?}", t.elapsed());
    Arc::new(v)
}

#[cfg(feature = "llguidance")]
fn sample_ids(name: &str) -> Vec<TokenId> {
    let text = std::fs::read_to_string(format!("{DATA}/grammar_samples.json")).expect("samples");
    let all: serde_json::Value = serde_json::from_str(&text).expect("json");
    all[name]["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("id") as TokenId)
        .collect()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Times `compute()` at every step of the walk: one cold pass on a fresh constraint, then
/// `passes` warm passes on clones. Prints p50 / p99 / max.
fn walk_stats<C: Constraint + Clone + 'static>(
    name: &str,
    vocab: &Arc<Vocab>,
    make: impl Fn() -> C,
    ids: &[TokenId],
    passes: usize,
) -> TokenMask {
    let mut dense = TokenMask::new_empty(N_LOGITS);
    let one_pass = |c: C, times: &mut Vec<Duration>, dense: &mut TokenMask| {
        let mut stage = GrammarMask::new(Box::new(c), vocab.clone());
        for &id in ids.iter().chain(std::iter::once(&EOS[0])) {
            let t = Instant::now();
            let (mask, _) = stage.compute().expect("mask");
            times.push(t.elapsed());
            if mask.count_allowed() > dense.count_allowed() {
                *dense = mask.clone();
            }
            stage.commit(id).expect("commit");
        }
    };
    let mut cold = Vec::new();
    one_pass(make(), &mut cold, &mut dense);
    let base = make();
    // Warm the clone-shared lexer cache once.
    one_pass(base.clone(), &mut Vec::new(), &mut dense);
    let mut warm = Vec::new();
    for _ in 0..passes {
        one_pass(base.clone(), &mut warm, &mut dense);
    }
    cold.sort();
    warm.sort();
    println!(
        "{name:12} steps {:3} | cold p50 {:>9.1?} max {:>9.1?} | warm p50 {:>9.1?} p99 {:>9.1?} max {:>9.1?}",
        ids.len() + 1,
        pct(&cold, 0.5),
        cold[cold.len() - 1],
        pct(&warm, 0.5),
        pct(&warm, 0.99),
        warm[warm.len() - 1],
    );
    dense
}

fn bench_apply(c: &mut Criterion, name: &str, mask: &TokenMask) {
    let row: Vec<f32> = (0..N_LOGITS)
        .map(|i| (i % 977) as f32 * 0.01 - 4.0)
        .collect();
    println!(
        "apply/{name}: {} of {N_LOGITS} allowed",
        mask.count_allowed()
    );
    c.bench_function(&format!("apply/{name}"), |b| {
        b.iter_batched_ref(
            || row.clone(),
            |r| mask.apply(black_box(r)).expect("apply"),
            BatchSize::LargeInput,
        )
    });
}

/// A processor that changes nothing: a user processor always takes the dense path, so
/// it shows what a mask costs when the row is copied.
#[derive(Clone, Debug)]
struct Dense;

impl LogitsProcessor for Dense {
    fn process(&mut self, _: &mut [f32], _: &History<'_>) -> Result<(), Error> {
        Ok(())
    }
}

/// Qwen3's recommended chain.
fn qwen3() -> SamplingParams {
    SamplingParams::builder()
        .temperature(0.6)
        .top_k(20)
        .top_p(0.95)
        .build()
        .expect("params")
}

/// A peaked row: uniform noise in [-2, 2], with a token raised by 12 every 5,003 ids.
fn peaked_row() -> Vec<f32> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..N_LOGITS)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let noise = (x >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0;
            if i % 5003 == 0 {
                12.0 + noise
            } else {
                noise
            }
        })
        .collect()
}

fn sampler(params: SamplingParams, dense: bool) -> Sampler {
    let mut s = Sampler::new(params, N_LOGITS).expect("sampler");
    if dense {
        s.add_processor(Box::new(Dense));
    }
    s
}

/// Top-p 0.95 alone, min-p 0.05 alone, the plain draw.
fn top_p() -> SamplingParams {
    SamplingParams::builder()
        .top_p(0.95)
        .build()
        .expect("params")
}

fn min_p() -> SamplingParams {
    SamplingParams::builder()
        .min_p(0.05)
        .build()
        .expect("params")
}

/// `Sampler::sample` without a mask, the baseline of `bench_sample_masked`.
fn bench_sample(c: &mut Criterion, name: &str, params: SamplingParams) {
    let row = peaked_row();
    let mut s = sampler(params, false);
    c.bench_function(&format!("sample/{name}"), |b| {
        b.iter(|| {
            let out = s.sample(black_box(&row)).expect("sample");
            s.rollback(1);
            out
        })
    });
}

/// `Sampler::sample_masked` with `params` (as the sampler reads the mask, and through the
/// masked copy), and the mask stage alone on both paths.
fn bench_sample_masked(c: &mut Criterion, name: &str, mask: &TokenMask, params: SamplingParams) {
    let row = peaked_row();
    println!(
        "sample_masked/{name}: {} of {N_LOGITS} allowed",
        mask.count_allowed()
    );
    for dense in [false, true] {
        let mut s = sampler(params.clone(), dense);
        let suffix = if dense { "_dense" } else { "" };
        c.bench_function(&format!("sample_masked{suffix}/{name}"), |b| {
            b.iter(|| {
                let out = s.sample_masked(black_box(&row), mask).expect("sample");
                s.rollback(1);
                out
            })
        });
        c.bench_function(&format!("mask_stage{suffix}/{name}"), |b| {
            b.iter(|| s.mask_stage(black_box(&row), mask).expect("mask stage"))
        });
    }
}

/// A mask allowing `allowed` tokens spread at random.
fn spread_mask(allowed: usize, seed: u64) -> TokenMask {
    let mut ids: Vec<TokenId> = (0..N_LOGITS as TokenId).collect();
    let mut x = seed;
    for i in 0..allowed {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = i + (x % (N_LOGITS - i) as u64) as usize;
        ids.swap(i, j);
    }
    let mut m = TokenMask::new_empty(N_LOGITS);
    for &id in &ids[..allowed] {
        m.allow(id).expect("in range");
    }
    m
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let vocab = load_vocab();

    // Built-in constraint: one of four words.
    let words = ["positive", "negative", "neutral", "neutral-ish"];
    let ids = vocab.tokenize_greedy(b"neutral-ish").expect("spellable");
    walk_stats(
        "choice",
        &vocab,
        || Choice::new(vocab.clone(), &words).expect("choice"),
        &ids,
        30,
    );
    c.bench_function("compile/choice", |b| {
        b.iter(|| Choice::new(vocab.clone(), black_box(&words)).expect("choice"))
    });

    let mut half = TokenMask::new_empty(N_LOGITS);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for w in half.words_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *w = x as u32;
    }
    half.clear_tail();
    bench_apply(&mut c, "random-half", &half);
    for (name, params) in [
        ("qwen3", qwen3()),
        ("top-p", top_p()),
        ("min-p", min_p()),
        ("draw", SamplingParams::default()),
    ] {
        bench_sample(&mut c, name, params.clone());
        bench_sample_masked(&mut c, &format!("random-half-{name}"), &half, params);
    }
    // At the bound between the compact row and the marks: 1,024 allowed with Qwen3's
    // chain (greedy and top-k), 4,096 otherwise.
    for (name, allowed, params) in [
        ("spread-1024-qwen3", 1024, qwen3()),
        ("spread-1025-qwen3", 1025, qwen3()),
        ("spread-4096-top-p", 4096, top_p()),
        ("spread-4097-top-p", 4097, top_p()),
    ] {
        bench_sample_masked(&mut c, name, &spread_mask(allowed, 0x2545_F491), params);
    }
    // A nearly-open mask (2,048 disallowed) with top-p alone, with the row's maximum
    // allowed, then disallowed (the maximum of the other tokens is then looked up).
    let row = peaked_row();
    let argmax = (0..N_LOGITS).fold(0, |m, i| if row[i] > row[m] { i } else { m }) as TokenId;
    for (name, banned) in [
        ("open-2048-top-p", false),
        ("open-2048-top-p-no-argmax", true),
    ] {
        let mut m = spread_mask(N_LOGITS - 2048, 0x2545_F491);
        if m.is_allowed(argmax) == banned {
            // Swap the argmax's bit with another token's, keeping 2,048 disallowed.
            let other = (0..N_LOGITS as TokenId)
                .find(|&i| i != argmax && m.is_allowed(i) != banned)
                .expect("another token");
            if banned {
                m.allow(other).expect("in range");
                m.disallow(argmax).expect("in range");
            } else {
                m.disallow(other).expect("in range");
                m.allow(argmax).expect("in range");
            }
        }
        bench_sample_masked(&mut c, name, &m, top_p());
    }

    #[cfg(feature = "llguidance")]
    llg(&mut c, &vocab);
    #[cfg(not(feature = "llguidance"))]
    println!("(llguidance cases need --features llguidance)");

    c.final_summary();
}

#[cfg(feature = "llguidance")]
fn llg(c: &mut Criterion, vocab: &Arc<Vocab>) {
    use logits::grammar::LlgEngine;

    let t = Instant::now();
    let engine = LlgEngine::new(vocab.clone()).expect("engine");
    println!("one-time: LlgEngine::new {:?}", t.elapsed());

    let cases: [(&str, &str, &str); 4] = [
        ("regex", "regex", REGEX),
        ("json", "json", SCHEMA),
        ("lark", "lark", LARK),
        ("json-maxlen", "json_maxlen", SCHEMA_MAXLEN),
    ];
    let compile = |kind: &str, src: &str| match kind {
        "regex" => engine.regex(src),
        "lark" => engine.lark(src),
        _ => engine.json_schema(src),
    };
    let mut densest = Vec::new();
    for (name, sample, src) in cases {
        let ids = sample_ids(sample);
        let dense = walk_stats(
            name,
            vocab,
            || compile(sample, src).expect("compiles"),
            &ids,
            30,
        );
        densest.push((name, dense));
    }
    for (name, sample, src) in cases {
        c.bench_function(&format!("compile/{name}"), |b| {
            b.iter(|| compile(sample, black_box(src)).expect("compiles"))
        });
    }
    // Masks as the walk produced them: the densest of the JSON walk (inside a string) and
    // the regex's digits-only mask.
    let regex_first = {
        let mut stage =
            GrammarMask::new(Box::new(engine.regex(REGEX).expect("regex")), vocab.clone());
        stage.compute().expect("mask").0.clone()
    };
    bench_apply(c, "regex-digits", &regex_first);
    bench_sample_masked(c, "regex-digits", &regex_first, qwen3());
    if let Some((_, m)) = densest.iter().find(|(n, _)| *n == "json") {
        bench_apply(c, "json-in-string", m);
        bench_sample_masked(c, "json-in-string", m, qwen3());
        bench_sample_masked(c, "json-in-string-top-p", m, top_p());
    }
}
