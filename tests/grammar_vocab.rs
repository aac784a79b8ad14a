//! The `tokenizer.json` loader on the real Qwen3 tokenizer, and its typed errors on
//! tokenizers that are not byte-level BPE.

mod grammar_common;

use grammar_common::*;
use logits::grammar::{GrammarError, TokenKind, Vocab};
use logits::TokenId;

#[test]
fn qwen3_vocabulary_has_the_documented_layout() {
    let v = qwen3();
    assert_eq!(v.len(), N_LOGITS);
    let count = |k: TokenKind| {
        (0..N_LOGITS as TokenId)
            .filter(|&t| v.kind(t) == Some(k))
            .count()
    };
    assert_eq!(count(TokenKind::Text), 151_643);
    assert_eq!(count(TokenKind::Special), 26);
    assert_eq!(count(TokenKind::Padding), 267);
    assert_eq!(v.text_token_count(), 151_643);
    assert!((0..151_643).all(|t| v.kind(t) == Some(TokenKind::Text)));
    assert!((151_643..151_669).all(|t| v.kind(t) == Some(TokenKind::Special)));
    assert!((FIRST_PADDING..N_LOGITS as TokenId).all(|t| v.kind(t) == Some(TokenKind::Padding)));
    assert_eq!(v.kind(N_LOGITS as TokenId), None);
    assert_eq!(v.eos(), [151_643, 151_645]);
    assert_eq!(v.bytes(151_645), b"<|im_end|>");
    assert_eq!(v.bytes(151_643), b"<|endoftext|>");
    assert_eq!(v.bytes(FIRST_PADDING), b"");
    // Byte-level alphabet mapped back to bytes.
    assert_eq!(v.bytes(220), b" ");
    assert_eq!(v.bytes(198), b"\n");
    assert_eq!(v.bytes(187), [0xFF]);
    assert_eq!(v.bytes(0), b"!");
    for b in 0..=255u8 {
        assert_eq!(v.text_tokens_with_bytes(&[b]).len(), 1, "byte {b}");
    }
}

/// The 12 added tokens that the file does not mark special are Special here.
#[test]
fn unmarked_added_tokens_are_special() {
    let v = qwen3();
    for name in [
        "<tool_call>",
        "</tool_call>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
        "<tool_response>",
        "</tool_response>",
        "<think>",
        "</think>",
    ] {
        let id = v
            .special_id(name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(v.kind(id), Some(TokenKind::Special), "{name}");
        assert!(!v.is_eos(id));
    }
    assert_eq!(v.special_id("<think>"), Some(151_667));
    assert_eq!(v.special_tokens().len(), 26);
    // The text "<think>" is still spellable with text tokens.
    let ids = v.tokenize_greedy(b"<think>").unwrap();
    assert!(ids.iter().all(|&t| v.kind(t) == Some(TokenKind::Text)));
}

#[test]
fn canonical_sample_ids_spell_their_text() {
    let v = qwen3();
    for name in ["regex", "json", "lark", "json_maxlen"] {
        let (text, ids) = sample(name);
        assert_eq!(text_of(&v, &ids), text.as_bytes(), "{name}");
        assert!(ids.iter().all(|&t| v.kind(t) == Some(TokenKind::Text)));
        let greedy = v.tokenize_greedy(text.as_bytes()).unwrap();
        assert_eq!(text_of(&v, &greedy), text.as_bytes());
    }
}

fn minimal(model: &str, pre: &str, decoder: &str, added: &str) -> String {
    format!(
        r#"{{"version":"1.0","added_tokens":[{added}],"pre_tokenizer":{pre},"decoder":{decoder},"model":{model}}}"#
    )
}

const BPE: &str = r#"{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"Ġ":3,"Ċ":4},"merges":["a b"]}"#;
const BYTE_LEVEL: &str = r#"{"type":"ByteLevel","add_prefix_space":false}"#;
const EOS_ADDED: &str = r#"{"id":5,"content":"<eos>","special":true}"#;

#[test]
fn small_byte_level_file_loads_with_padding() {
    let json = minimal(BPE, BYTE_LEVEL, "null", EOS_ADDED);
    let v = Vocab::from_tokenizer_json(&json, 8, &[5]).unwrap();
    assert_eq!(v.len(), 8);
    assert_eq!(v.bytes(3), b" ");
    assert_eq!(v.bytes(4), b"\n");
    assert_eq!(v.kind(5), Some(TokenKind::Special));
    assert_eq!(v.kind(6), Some(TokenKind::Padding));
    // The decoder alone also marks a tokenizer byte-level.
    let json = minimal(BPE, "null", BYTE_LEVEL, EOS_ADDED);
    assert!(Vocab::from_tokenizer_json(&json, 6, &[5]).is_ok());
    // A ByteLevel step nested in a Sequence counts too.
    let seq = format!(r#"{{"type":"Sequence","pretokenizers":[{{"type":"Split"}},{BYTE_LEVEL}]}}"#);
    let json = minimal(BPE, &seq, "null", EOS_ADDED);
    assert!(Vocab::from_tokenizer_json(&json, 6, &[5]).is_ok());
}

fn err_message(r: Result<Vocab, GrammarError>) -> GrammarError {
    r.expect_err("must be refused")
}

#[test]
fn non_byte_level_tokenizers_are_refused_with_the_reason() {
    // WordPiece (BERT).
    let wp = r#"{"type":"WordPiece","vocab":{"[UNK]":0,"a":1},"unk_token":"[UNK]"}"#;
    let e = err_message(Vocab::from_tokenizer_json(
        &minimal(wp, "null", "null", EOS_ADDED),
        8,
        &[5],
    ));
    assert!(
        matches!(&e, GrammarError::NotByteLevelBpe(m) if m.contains("WordPiece")),
        "{e}"
    );

    // SentencePiece-style BPE (Llama 2): byte fallback, no ByteLevel step.
    let sp_decoder =
        r#"{"type":"Sequence","decoders":[{"type":"Replace"},{"type":"ByteFallback"}]}"#;
    let sp = r#"{"type":"BPE","byte_fallback":true,"vocab":{"<0x0A>":0,"▁a":1},"merges":[]}"#;
    let e = err_message(Vocab::from_tokenizer_json(
        &minimal(sp, "null", sp_decoder, EOS_ADDED),
        8,
        &[5],
    ));
    assert!(
        matches!(&e, GrammarError::NotByteLevelBpe(m) if m.contains("ByteLevel")),
        "{e}"
    );

    // Claims ByteLevel but a token uses a character outside the byte alphabet.
    let odd = r#"{"type":"BPE","vocab":{"a":0,"▁b":1},"merges":[]}"#;
    let e = err_message(Vocab::from_tokenizer_json(
        &minimal(odd, BYTE_LEVEL, "null", EOS_ADDED),
        8,
        &[5],
    ));
    assert!(
        matches!(&e, GrammarError::NotByteLevelBpe(m) if m.contains("U+2581") && m.contains("token 1")),
        "{e}"
    );
    assert!(e.to_string().starts_with("tokenizer is not byte-level BPE"));
}

#[test]
fn malformed_files_and_bad_parameters_are_typed_errors() {
    for bad in [
        "",
        "{",
        "[]",
        "{\"model\": 3}",
        "{\"model\": {\"type\": \"BPE\"}}",
    ] {
        let e = Vocab::from_tokenizer_json(bad, 8, &[5]).expect_err(bad);
        assert!(
            matches!(
                e,
                GrammarError::TokenizerJson(_) | GrammarError::NotByteLevelBpe(_)
            ),
            "{bad}: {e}"
        );
    }
    let json = minimal(BPE, BYTE_LEVEL, "null", EOS_ADDED);
    // Logits row smaller than the tokenizer.
    let e = Vocab::from_tokenizer_json(&json, 4, &[5]).unwrap_err();
    assert!(
        matches!(e, GrammarError::InvalidVocab(ref m) if m.contains("row of 4 slots")),
        "{e}"
    );
    // EOS that is a text token, a padding slot, or out of range.
    for eos in [[0], [7], [99]] {
        let e = Vocab::from_tokenizer_json(&json, 8, &eos).unwrap_err();
        assert!(matches!(e, GrammarError::InvalidVocab(_)), "{e}");
    }
    let e = Vocab::from_tokenizer_json(&json, 8, &[]).unwrap_err();
    assert!(matches!(e, GrammarError::InvalidVocab(_)), "{e}");
    // Negative or fractional ids.
    let neg = r#"{"type":"BPE","vocab":{"a":-1},"merges":[]}"#;
    let e = Vocab::from_tokenizer_json(&minimal(neg, BYTE_LEVEL, "null", ""), 8, &[5]).unwrap_err();
    assert!(
        matches!(e, GrammarError::TokenizerJson(ref m) if m.contains("token id")),
        "{e}"
    );
}

#[test]
fn vocab_new_checks_its_parts() {
    let t = |s: &str| s.as_bytes().to_vec();
    assert!(Vocab::new(vec![], vec![], vec![0]).is_err());
    assert!(Vocab::new(vec![t("a")], vec![], vec![0]).is_err());
    assert!(Vocab::new(
        vec![t(""), t("<e>")],
        vec![TokenKind::Text, TokenKind::Special],
        vec![1]
    )
    .is_err());
    let v = Vocab::new(
        vec![t("a"), t("a"), t("<e>"), vec![]],
        vec![
            TokenKind::Text,
            TokenKind::Text,
            TokenKind::Special,
            TokenKind::Padding,
        ],
        vec![2, 2],
    )
    .unwrap();
    assert_eq!(v.text_tokens_with_bytes(b"a"), [0, 1]);
    assert_eq!(v.eos(), [2]);
    assert_eq!(v.tokenize_greedy(b"ab"), None);
    assert_eq!(v.bytes(99), b"");
}
