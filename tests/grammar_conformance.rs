//! Conformance of the llguidance constraints over the real Qwen3 vocabulary (151,936 logit
//! slots): a regex, two JSON schemas and a Lark grammar.
//!
//! For each case: every token of the canonical (Hugging Face) tokenization of a valid sample
//! is allowed at its step; EOS is allowed exactly when the text so far is complete; closed
//! grammars reach `OnlyEos`; no padding or unnamed special id is ever allowed; a disallowed
//! commit is rejected with the state unchanged; and 200 seeded samples drawn through the
//! sampler with random logits all parse and validate.
#![cfg(feature = "llguidance")]

mod grammar_common;

use std::sync::{Arc, OnceLock};

use grammar_common::*;
use logits::grammar::{
    Constraint, GrammarError, GrammarKind, GrammarMask, LlgConstraint, LlgEngine, Status, Vocab,
};
use logits::{Sampler, SamplingParams, TokenId, TokenMask};

const REGEX: &str = "[0-9]{3}-[0-9]{4}";

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "color": {"enum": ["red", "green", "blue"]},
    "scores": {"type": "array", "items": {"type": "number"}}
  },
  "required": ["name", "age", "color", "scores"],
  "additionalProperties": false
}"#;

const SCHEMA_MAXLEN: &str = r#"{
  "type": "object",
  "properties": {
    "title": {"type": "string", "maxLength": 40},
    "tags": {
      "type": "array",
      "items": {"type": "string", "maxLength": 10},
      "minItems": 1,
      "maxItems": 3
    },
    "ok": {"type": "boolean"}
  },
  "required": ["title", "tags", "ok"],
  "additionalProperties": false
}"#;

const LARK: &str = r#"
start: expr
expr: term (("+" | "-") term)*
term: factor (("*" | "/") factor)*
factor: NUMBER | "(" expr ")"
NUMBER: /[0-9]+/
"#;

/// The id of the single-character token `c` (printable ASCII).
fn ascii(c: u8) -> TokenId {
    let id = qwen3().tokenize_greedy(&[c]).unwrap()[0];
    assert_eq!(qwen3().bytes(id), [c]);
    id
}

fn engine() -> &'static LlgEngine {
    static ENGINE: OnceLock<LlgEngine> = OnceLock::new();
    ENGINE.get_or_init(|| LlgEngine::new(qwen3()).expect("engine builds"))
}

fn stage(c: LlgConstraint) -> GrammarMask {
    GrammarMask::new(Box::new(c), qwen3())
}

fn regex_complete(text: &[u8]) -> bool {
    text.len() == 8
        && text.iter().enumerate().all(|(i, &b)| {
            if i == 3 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
}

fn json_complete(schema: &str) -> impl Fn(&[u8]) -> bool {
    let schema: serde_json::Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    move |text: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(text).is_ok_and(|v| validator.is_valid(&v))
    }
}

/// Recursive-descent recogniser of the Lark arithmetic grammar.
fn lark_complete(text: &[u8]) -> bool {
    fn expr(s: &[u8], i: &mut usize) -> bool {
        term(s, i) && {
            while matches!(s.get(*i), Some(b'+' | b'-')) {
                *i += 1;
                if !term(s, i) {
                    return false;
                }
            }
            true
        }
    }
    fn term(s: &[u8], i: &mut usize) -> bool {
        factor(s, i) && {
            while matches!(s.get(*i), Some(b'*' | b'/')) {
                *i += 1;
                if !factor(s, i) {
                    return false;
                }
            }
            true
        }
    }
    fn factor(s: &[u8], i: &mut usize) -> bool {
        if s.get(*i) == Some(&b'(') {
            *i += 1;
            if !expr(s, i) || s.get(*i) != Some(&b')') {
                return false;
            }
            *i += 1;
            return true;
        }
        let start = *i;
        while s.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > start
    }
    let mut i = 0;
    expr(text, &mut i) && i == text.len()
}

/// Walks the canonical tokenization, checks the final status, and checks rejection at the
/// start and in the middle of the walk, through the stage and on the raw engine.
fn conformance(
    compile: impl Fn() -> LlgConstraint,
    sample_name: &str,
    complete: impl Fn(&[u8]) -> bool,
    final_status: Status,
    bad: TokenId,
) {
    let vocab = qwen3();
    let (text, ids) = sample(sample_name);
    assert_eq!(text_of(&vocab, &ids), text.as_bytes());
    assert!(complete(text.as_bytes()), "sample itself must be complete");

    let mut s = stage(compile());
    let status = walk(&mut s, &vocab, &ids, &[], &complete);
    assert_eq!(status, final_status);
    assert_eq!(s.commit(EOS[0]).unwrap(), Status::Finished);
    assert_eq!(s.commit(EOS[1]), Err(GrammarError::AlreadyFinished));

    // Rejection through the stage, at the start and half-way.
    let mut s = stage(compile());
    check_rejection_keeps_state(&mut s, bad);
    check_rejection_keeps_state(&mut s, EOS[0]);
    check_rejection_keeps_state(&mut s, FIRST_PADDING);
    let half = ids.len() / 2;
    for &id in &ids[..half] {
        s.commit(id).unwrap();
    }
    check_rejection_keeps_state(&mut s, FIRST_PADDING + 7);
    check_rejection_keeps_state(&mut s, 151_667); // <think>
    for &id in &ids[half..] {
        s.commit(id).unwrap();
    }
    assert!(s.status().unwrap().eos_allowed());

    // Rejection on the raw engine leaves its mask unchanged.
    let mut raw = compile();
    for &id in &ids[..half] {
        raw.commit(id).unwrap();
    }
    let mut before = TokenMask::new_empty(N_LOGITS);
    let st = raw.fill_mask(&mut before).unwrap();
    let rejected = (0..N_LOGITS as TokenId)
        .find(|&t| !before.is_allowed(t) && t < FIRST_PADDING && !vocab.is_eos(t))
        .unwrap();
    assert_eq!(
        raw.commit(rejected),
        Err(GrammarError::TokenRejected { token: rejected })
    );
    let mut after = TokenMask::new_empty(N_LOGITS);
    assert_eq!(raw.fill_mask(&mut after).unwrap(), st);
    assert_eq!(after, before);
    raw.commit(ids[half]).unwrap();

    // Rollback to the start gives the first mask again.
    let mut s = stage(compile());
    let first = s.compute().unwrap().0.clone();
    for &id in &ids {
        s.commit(id).unwrap();
    }
    s.rollback(ids.len()).unwrap();
    assert_eq!(s.compute().unwrap().0, &first);
}

/// Draws 200 seeded samples with random logits through the sampler and the grammar mask;
/// every one must finish with EOS and be complete. Returns the texts.
///
/// Logits are uniform in [-4, 4], plus a per-seed tilt in [4, 8] on the text tokens that
/// contain a closing character (`"`, `]`, `}` or `)`). The tilt only makes walks end: with
/// flat random logits a JSON string closes about once in several thousand steps (a handful
/// of closing tokens among ~147,000 allowed ones), so unbounded strings and arrays would
/// not finish. It does not steer validity: the tilted tokens are boosted everywhere, also
/// where the grammar forbids them, and only the mask keeps the output valid.
fn sampled(compile: impl Fn() -> LlgConstraint, complete: impl Fn(&[u8]) -> bool) -> Vec<String> {
    let vocab = qwen3();
    let base = compile();
    let mut logits = vec![0f32; N_LOGITS];
    let closing: Vec<bool> = (0..N_LOGITS as TokenId)
        .map(|t| {
            vocab.kind(t) == Some(logits::grammar::TokenKind::Text)
                && vocab.bytes(t).iter().any(|b| b"\"]})".contains(b))
        })
        .collect();
    let mut texts = Vec::new();
    for seed in 0..200u64 {
        let tilt = 4.0 + (seed % 5) as f32;
        let params = SamplingParams::builder()
            .temperature(1.0)
            .seed(seed)
            .build()
            .unwrap();
        let mut sampler = Sampler::new(params, N_LOGITS).unwrap();
        let mut s = GrammarMask::new(Box::new(base.clone()), vocab.clone());
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut ids = Vec::new();
        loop {
            assert!(ids.len() < 2_000, "seed {seed}: no EOS after 2000 tokens");
            for (l, &c) in logits.iter_mut().zip(&closing) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                *l = (rng >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0;
                if c {
                    *l += tilt;
                }
            }
            let (mask, status) = s.compute().unwrap();
            check_mask(&vocab, mask, status, &[]);
            let token = sampler.sample_masked(&logits, mask).unwrap().token;
            if s.commit(token).unwrap() == Status::Finished {
                break;
            }
            ids.push(token);
        }
        let text = text_of(&vocab, &ids);
        assert!(
            complete(&text),
            "seed {seed}: incomplete output {:?}",
            String::from_utf8_lossy(&text)
        );
        texts.push(String::from_utf8(text).expect("UTF-8"));
    }
    let mean = texts.iter().map(String::len).sum::<usize>() / texts.len();
    eprintln!("200 samples, mean {mean} bytes, e.g. {:?}", texts[0]);
    texts
}

#[test]
fn regex_conformance() {
    let e = engine();
    conformance(
        || e.regex(REGEX).unwrap(),
        "regex",
        regex_complete,
        Status::OnlyEos,
        ascii(b'a'),
    );
}

#[test]
fn json_schema_conformance() {
    let e = engine();
    conformance(
        || e.json_schema(SCHEMA).unwrap(),
        "json",
        json_complete(SCHEMA),
        Status::OnlyEos,
        ascii(b'['),
    );
}

#[test]
fn lark_conformance() {
    let e = engine();
    conformance(
        || e.lark(LARK).unwrap(),
        "lark",
        lark_complete,
        Status::OpenAccepting,
        ascii(b'a'),
    );
}

#[test]
fn json_maxlen_conformance() {
    let e = engine();
    conformance(
        || e.json_schema(SCHEMA_MAXLEN).unwrap(),
        "json_maxlen",
        json_complete(SCHEMA_MAXLEN),
        Status::OnlyEos,
        ascii(b'x'),
    );
}

/// `<think>` is an added token that the tokenizer does not mark special. It is never allowed
/// by a grammar that does not name it, even where the Hugging Face tokenizer would emit it
/// (inside a JSON string); the same text spelled with text tokens is allowed.
#[test]
fn unmarked_added_tokens_are_never_allowed_unless_named() {
    let vocab = qwen3();
    let think = vocab.special_id("<think>").unwrap();
    assert_eq!(think, 151_667);
    let (text, canonical) = sample("json_think");
    let at = canonical.iter().position(|&t| t == think).unwrap();
    let mut ids = canonical[..at].to_vec();
    ids.extend(vocab.tokenize_greedy(b"<think>").unwrap());
    ids.extend(&canonical[at + 1..]);
    assert_eq!(text_of(&vocab, &ids), text.as_bytes());
    let mut s = stage(engine().json_schema(SCHEMA).unwrap());
    for &id in &canonical[..at] {
        s.commit(id).unwrap();
    }
    assert!(!s.is_allowed(think).unwrap());
    let mut s = stage(engine().json_schema(SCHEMA).unwrap());
    walk(&mut s, &vocab, &ids, &[], json_complete(SCHEMA));

    // A Lark grammar that names the token allows it, and nothing else special.
    let g = "start: <think> \"\\n\" /[a-z]+/ </think>";
    let c = engine().lark(g).unwrap();
    let end = vocab.special_id("</think>").unwrap();
    let mut named = c.named_special_tokens();
    named.sort_unstable();
    assert_eq!(named, [think, end]);
    let mut s = stage(c);
    let mask = s.compute().unwrap().0.clone();
    check_mask(&vocab, &mask, Status::Open, &named);
    assert!(mask.is_allowed(think));
    assert_eq!(mask.count_allowed(), 1);
    s.commit(think).unwrap();
    for id in vocab.tokenize_greedy(b"\nabc").unwrap() {
        s.commit(id).unwrap();
    }
    assert!(s.is_allowed(end).unwrap());
    assert!(!s.is_allowed(think).unwrap());
    s.commit(end).unwrap();
    assert_eq!(s.compute().unwrap().1, Status::OnlyEos);
}

#[test]
fn regex_samples_all_match() {
    let e = engine();
    let texts = sampled(|| e.regex(REGEX).unwrap(), regex_complete);
    assert_eq!(texts.len(), 200);
}

#[test]
fn json_schema_samples_all_validate() {
    let e = engine();
    let texts = sampled(|| e.json_schema(SCHEMA).unwrap(), json_complete(SCHEMA));
    for t in texts {
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        assert!(v["name"].is_string() && v["scores"].is_array(), "{t}");
        // Integers past i64 parse as f64 in serde_json; the schema already checked them.
        let age = &v["age"];
        assert!(
            age.is_i64() || age.is_u64() || age.as_f64().is_some_and(|f| f.fract() == 0.0),
            "{t}"
        );
    }
}

#[test]
fn lark_samples_all_parse() {
    let e = engine();
    sampled(|| e.lark(LARK).unwrap(), lark_complete);
}

#[test]
fn json_maxlen_samples_all_validate() {
    let e = engine();
    let texts = sampled(
        || e.json_schema(SCHEMA_MAXLEN).unwrap(),
        json_complete(SCHEMA_MAXLEN),
    );
    for t in texts {
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        assert!(v["title"].as_str().unwrap().chars().count() <= 40);
        let tags = v["tags"].as_array().unwrap();
        assert!((1..=3).contains(&tags.len()));
    }
}

fn kind_of(r: Result<LlgConstraint, GrammarError>) -> (String, &'static str) {
    match r {
        Ok(_) => panic!("bad grammar compiled"),
        Err(GrammarError::InvalidGrammar { kind, message }) => {
            (format!("{kind}: {message}"), "invalid")
        }
        Err(GrammarError::Unsupported { kind, message }) => {
            (format!("{kind}: {message}"), "unsupported")
        }
        Err(other) => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn bad_grammars_are_typed_errors() {
    let e = engine();
    let (m, k) = kind_of(e.regex("[0-9"));
    assert_eq!(k, "invalid");
    assert!(m.starts_with("regex"), "{m}");

    let (m, k) = kind_of(e.regex("(?<=a)b"));
    assert!(m.starts_with("regex"), "{m} {k}");

    let (m, k) = kind_of(e.json_schema("{\"type\": \"object\""));
    assert_eq!(k, "invalid");
    assert!(m.contains("not valid JSON"), "{m}");

    let (m, k) = kind_of(e.json_schema(r#"{"type": "strnig"}"#));
    assert_eq!(k, "invalid");
    assert!(m.starts_with("JSON schema") && m.contains("strnig"), "{m}");

    let (m, k) = kind_of(e.json_schema(r#"{"type": "string", "not": {"const": "a"}}"#));
    assert_eq!(k, "unsupported");
    assert!(m.contains("not"), "{m}");

    let (m, k) = kind_of(e.json_schema(r#"{"type": "string", "format": "color-hex"}"#));
    assert_eq!(k, "unsupported");
    assert!(m.contains("color-hex"), "{m}");

    let (m, k) = kind_of(e.lark("start: expr\nexpr: \"a\" undefined_rule"));
    assert_eq!(k, "invalid");
    assert!(
        m.starts_with("Lark grammar") && m.contains("undefined_rule"),
        "{m}"
    );

    let (m, _) = kind_of(e.lark("start: ((("));
    assert!(m.starts_with("Lark grammar"), "{m}");
}

#[test]
fn wrong_length_logits_are_refused() {
    let mut s = stage(engine().regex(REGEX).unwrap());
    let mut short = vec![0f32; 10];
    assert_eq!(
        s.apply(&mut short),
        Err(GrammarError::LengthMismatch {
            expected: N_LOGITS,
            actual: 10
        })
    );
}

/// True when `s` can be extended to a match of `[0-9]{3}-[0-9]{4}`.
fn regex_viable(s: &[u8]) -> bool {
    s.len() <= 8
        && s.iter().enumerate().all(|(i, &b)| {
            if i == 3 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
}

/// True when `s` can be extended to a sentence of the Lark arithmetic grammar.
fn lark_viable(s: &[u8]) -> bool {
    #[derive(PartialEq)]
    enum Prev {
        Start,
        Digit,
        Open,
        Close,
        Op,
    }
    let (mut prev, mut depth) = (Prev::Start, 0usize);
    for &c in s {
        let after_operand = prev == Prev::Digit || prev == Prev::Close;
        match c {
            b'0'..=b'9' if prev != Prev::Close => prev = Prev::Digit,
            b'(' if !after_operand => {
                depth += 1;
                prev = Prev::Open;
            }
            b')' if after_operand && depth > 0 => {
                depth -= 1;
                prev = Prev::Close;
            }
            b'+' | b'-' | b'*' | b'/' if after_operand => prev = Prev::Op,
            _ => return false,
        }
    }
    true
}

/// At every step of the canonical walk, the text-token part of the mask is exactly the set
/// of tokens whose bytes keep the text a viable prefix: a byte-level reference check, not a
/// comparison with another engine.
fn masks_equal_reference(
    compile: impl Fn() -> LlgConstraint,
    sample_name: &str,
    viable: impl Fn(&[u8]) -> bool,
) {
    let vocab = qwen3();
    let (_, ids) = sample(sample_name);
    let mut s = stage(compile());
    let mut text = Vec::new();
    for &id in &ids {
        let (mask, _) = s.compute().unwrap();
        for t in 0..N_LOGITS as TokenId {
            if vocab.kind(t) != Some(logits::grammar::TokenKind::Text) {
                continue;
            }
            let mut next = text.clone();
            next.extend_from_slice(vocab.bytes(t));
            assert_eq!(
                mask.is_allowed(t),
                viable(&next),
                "token {t} {:?} after {:?}",
                String::from_utf8_lossy(vocab.bytes(t)),
                String::from_utf8_lossy(&text)
            );
        }
        s.commit(id).unwrap();
        text.extend_from_slice(vocab.bytes(id));
    }
}

#[test]
fn regex_masks_equal_byte_level_reference() {
    let e = engine();
    masks_equal_reference(|| e.regex(REGEX).unwrap(), "regex", regex_viable);
}

#[test]
fn lark_masks_equal_byte_level_reference() {
    let e = engine();
    masks_equal_reference(|| e.lark(LARK).unwrap(), "lark", lark_viable);
}

#[test]
fn engine_is_shareable_and_states_are_sendable() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<LlgEngine>();
    send_sync::<Vocab>();
    send::<LlgConstraint>();
    send::<GrammarMask>();
}

#[test]
fn engine_kind_names_in_errors() {
    assert_eq!(GrammarKind::JsonSchema.to_string(), "JSON schema");
    let _: &Vocab = &qwen3();
    let _ = Arc::strong_count(&qwen3());
}
