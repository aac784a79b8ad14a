//! JSON-schema output ends even when the model wants whitespace forever.
//!
//! The "model" is seeded random logits over the real Qwen3 vocabulary (151,936 slots),
//! with a bias of +30 on every whitespace-only token: whenever the grammar allows
//! whitespace, it is drawn. Under every bounded [`Whitespace`] choice, generation over
//! schemas whose strings, numbers and arrays are bounded reaches end-of-sequence within
//! [`BOUND`] tokens, and the text parses and validates against the schema. Under
//! [`Whitespace::Flexible`] (llguidance's own default) the same setup is still emitting
//! whitespace at [`BOUND`] tokens.
#![cfg(feature = "llguidance")]

mod grammar_common;

use std::sync::{Arc, OnceLock};

use grammar_common::*;
use logits::grammar::{GrammarMask, JsonOptions, LlgEngine, Status, TokenKind, Vocab, Whitespace};
use logits::{Sampler, SamplingParams, TokenId};

/// The most tokens a bounded generation may take, end-of-sequence included.
const BOUND: usize = 200;

/// Schemas whose every value is bounded: strings by `maxLength`, integers by range, arrays
/// by `maxItems`.
const SCHEMAS: [&str; 3] = [
    r#"{
      "type": "object",
      "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "color": {"enum": ["red", "green", "blue"]},
        "ok": {"type": "boolean"}
      },
      "required": ["name", "age", "color", "ok"],
      "additionalProperties": false
    }"#,
    r#"{
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "id": {"type": "integer", "minimum": 0, "maximum": 99},
          "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}
        },
        "required": ["id", "tags"],
        "additionalProperties": false
      },
      "minItems": 1,
      "maxItems": 3
    }"#,
    r#"{
      "type": "object",
      "properties": {
        "point": {
          "type": "object",
          "properties": {
            "x": {"type": "integer", "minimum": -9, "maximum": 9},
            "y": {"type": "integer", "minimum": -9, "maximum": 9}
          },
          "required": ["x", "y"],
          "additionalProperties": false
        },
        "label": {"type": ["string", "null"], "maxLength": 8}
      },
      "required": ["point", "label"],
      "additionalProperties": false
    }"#,
];

const SEEDS: [u64; 4] = [1, 7, 42, 1234];

fn engine() -> &'static LlgEngine {
    static ENGINE: OnceLock<LlgEngine> = OnceLock::new();
    ENGINE.get_or_init(|| LlgEngine::new(qwen3()).expect("engine"))
}

/// The text tokens made of JSON whitespace only (spaces, tabs, newlines, returns).
fn whitespace_tokens(vocab: &Vocab) -> Vec<TokenId> {
    (0..FIRST_PADDING)
        .filter(|&id| {
            let b = vocab.bytes(id);
            vocab.kind(id) == Some(TokenKind::Text)
                && !b.is_empty()
                && b.iter().all(|c| b" \t\n\r".contains(c))
        })
        .collect()
}

/// The whitespace-loving random model: fills `row` with uniform logits in [-5, 5) from
/// `state`, plus 30 on every whitespace-only token.
fn forward(state: &mut u64, row: &mut [f32], whitespace: &[TokenId]) {
    for x in row.iter_mut() {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *x = (*state >> 40) as f32 / (1u64 << 24) as f32 * 10.0 - 5.0;
    }
    for &id in whitespace {
        row[id as usize] += 30.0;
    }
}

/// Generates from `schema` with `options` for at most `BOUND` tokens. Returns the text and
/// whether end-of-sequence was drawn.
fn generate(schema: &str, options: JsonOptions, seed: u64) -> (Vec<u8>, bool, usize) {
    let vocab = qwen3();
    let whitespace = whitespace_tokens(&vocab);
    let constraint = engine()
        .json_schema_with(schema, options)
        .expect("compiles");
    let mut stage = GrammarMask::new(Box::new(constraint), Arc::clone(&vocab));
    let params = SamplingParams::builder().seed(seed).build().unwrap();
    // The real vocabulary; the rows (and the grammar's masks) are padded to 151,936.
    let mut sampler = Sampler::new(params, FIRST_PADDING as usize).unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0x2545_F491_4F6C_DD1D);
    let mut row = vec![0f32; N_LOGITS];
    let mut text = Vec::new();
    for step in 1..=BOUND {
        forward(&mut state, &mut row, &whitespace);
        let (out, status) = stage.sample(&mut sampler, &row).expect("a step");
        if status == Status::Finished {
            assert!(vocab.is_eos(out.token));
            return (text, true, step);
        }
        text.extend_from_slice(vocab.bytes(out.token));
    }
    (text, false, BOUND)
}

/// The runs of whitespace outside JSON strings, in order.
fn gaps(text: &[u8]) -> Vec<Vec<u8>> {
    let (mut out, mut run) = (Vec::new(), Vec::new());
    let (mut in_string, mut escaped) = (false, false);
    for &c in text {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if b" \t\n\r".contains(&c) {
            run.push(c);
            continue;
        }
        if !run.is_empty() {
            out.push(std::mem::take(&mut run));
        }
        in_string = c == b'"';
    }
    if !run.is_empty() {
        out.push(run);
    }
    out
}

fn validate(schema: &str, text: &[u8]) -> serde_json::Value {
    let schema: serde_json::Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let value: serde_json::Value = serde_json::from_slice(text)
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(text)));
    assert!(
        validator.is_valid(&value),
        "{:?} does not validate",
        String::from_utf8_lossy(text)
    );
    value
}

/// Generates under `options` for every schema and seed, checks each output ends, parses
/// and validates, and returns the whitespace gaps of every output and the most tokens
/// one took.
fn bounded_runs(options: JsonOptions) -> (Vec<Vec<u8>>, usize) {
    let mut all = Vec::new();
    let mut longest = 0;
    for schema in SCHEMAS {
        for seed in SEEDS {
            let (text, finished, steps) = generate(schema, options, seed);
            assert!(
                finished,
                "{options:?}, seed {seed}: no end within {BOUND} tokens: {:?}",
                String::from_utf8_lossy(&text)
            );
            validate(schema, &text);
            all.extend(gaps(&text));
            longest = longest.max(steps);
        }
    }
    eprintln!("{options:?}: longest generation {longest} tokens");
    (all, longest)
}

#[test]
fn the_model_really_prefers_whitespace() {
    let vocab = qwen3();
    let ws = whitespace_tokens(&vocab);
    // Spaces, newlines, tabs and their runs: dozens of ids, including " " and "\n".
    assert!(ws.len() > 20, "{}", ws.len());
    assert!(ws.contains(&vocab.tokenize_greedy(b" ").unwrap()[0]));
    assert!(ws.contains(&vocab.tokenize_greedy(b"\n").unwrap()[0]));
}

#[test]
fn the_default_single_space_ends() {
    let (gaps, _) = bounded_runs(JsonOptions::default());
    // The model took the whitespace it was offered: one space at a time, never more.
    assert!(!gaps.is_empty());
    assert!(gaps.iter().all(|g| g == b" "), "{gaps:?}");
}

#[test]
fn compact_ends_without_whitespace() {
    let (gaps, _) = bounded_runs(JsonOptions::default().with_whitespace(Whitespace::Compact));
    assert!(gaps.is_empty(), "{gaps:?}");
}

#[test]
fn bounded_ends_with_short_runs() {
    let (gaps, _) = bounded_runs(JsonOptions::default().with_whitespace(Whitespace::Bounded(3)));
    assert!(!gaps.is_empty());
    assert!(gaps.iter().all(|g| g.len() <= 3), "{gaps:?}");
    assert!(gaps.iter().any(|g| g.len() > 1), "{gaps:?}");
}

/// The knob matters: with llguidance's flexible whitespace the same model never gets
/// past the whitespace.
#[test]
fn flexible_whitespace_does_not_end() {
    let flexible = JsonOptions::default().with_whitespace(Whitespace::Flexible);
    for schema in SCHEMAS {
        for seed in SEEDS {
            let (text, finished, _) = generate(schema, flexible, seed);
            assert!(
                !finished,
                "seed {seed}: {:?}",
                String::from_utf8_lossy(&text)
            );
            let ws = text.iter().filter(|c| b" \t\n\r".contains(c)).count();
            assert!(ws * 2 > text.len(), "{:?}", String::from_utf8_lossy(&text));
        }
    }
}

/// A schema's own `x-guidance` whitespace setting wins over the options, both ways; one
/// that sets other fields only still gets the options' whitespace.
#[test]
fn the_schemas_own_x_guidance_wins() {
    let with = |schema: &str, x: &str| {
        let mut v: serde_json::Value = serde_json::from_str(schema).unwrap();
        v["x-guidance"] = serde_json::from_str(x).unwrap();
        v.to_string()
    };
    let schema = SCHEMAS[0];
    let flexible = with(schema, r#"{"whitespace_flexible": true}"#);
    let compact = with(schema, r#"{"whitespace_flexible": false}"#);
    let lenient = with(schema, r#"{"lenient": true}"#);
    for seed in SEEDS {
        let (text, finished, _) = generate(&flexible, JsonOptions::default(), seed);
        assert!(!finished, "{:?}", String::from_utf8_lossy(&text));

        let options = JsonOptions::default().with_whitespace(Whitespace::Flexible);
        let (text, finished, _) = generate(&compact, options, seed);
        assert!(finished, "{:?}", String::from_utf8_lossy(&text));
        validate(schema, &text);
        assert!(
            gaps(&text).is_empty(),
            "{:?}",
            String::from_utf8_lossy(&text)
        );

        let options = JsonOptions::default().with_whitespace(Whitespace::Compact);
        let (text, finished, _) = generate(&lenient, options, seed);
        assert!(finished, "{:?}", String::from_utf8_lossy(&text));
        validate(schema, &text);
        assert!(
            gaps(&text).is_empty(),
            "{:?}",
            String::from_utf8_lossy(&text)
        );
    }
}

/// `true` (any value) takes the options too: compact output still ends on some seeds
/// (any JSON value, so strings are unbounded here and a seed may run long).
#[test]
fn the_schema_true_takes_the_options() {
    let compact = JsonOptions::default().with_whitespace(Whitespace::Compact);
    let vocab = qwen3();
    let constraint = engine().json_schema_with(" true ", compact).unwrap();
    let mut stage = GrammarMask::new(Box::new(constraint), vocab.clone());
    let space = vocab.tokenize_greedy(b" ").unwrap()[0];
    // No leading whitespace, and none after `[` either.
    assert!(!stage.is_allowed(space).unwrap());
    stage
        .commit(vocab.tokenize_greedy(b"[").unwrap()[0])
        .unwrap();
    assert!(!stage.is_allowed(space).unwrap());

    let flexible = JsonOptions::default().with_whitespace(Whitespace::Flexible);
    let constraint = engine().json_schema_with("true", flexible).unwrap();
    let mut stage = GrammarMask::new(Box::new(constraint), vocab.clone());
    stage
        .commit(vocab.tokenize_greedy(b"[").unwrap()[0])
        .unwrap();
    assert!(stage.is_allowed(space).unwrap());
}
