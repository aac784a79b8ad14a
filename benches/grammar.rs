//! Grammar-mask benchmarks over the real Qwen3 vocabulary (151,936 logit slots).
//!
//! `cargo bench --features llguidance --bench grammar`
//!
//! Prints one-time costs and, for each case, the per-step mask time over the canonical walk
//! (p50 / p99 / max, cold first pass and warm passes on clones), then runs criterion for
//! compile time and mask application.

use std::hint::black_box;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion};
use logits::grammar::{Choice, Constraint, GrammarMask, Vocab};
use logits::{TokenId, TokenMask};

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
    if let Some((_, m)) = densest.iter().find(|(n, _)| *n == "json") {
        bench_apply(c, "json-in-string", m);
    }
}
