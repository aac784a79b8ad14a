//! Inputs that look almost right and used to be accepted silently: a tokenizer that gives
//! one id to two tokens, a grammar whose language is empty, a `generation_config.json`
//! number that changes meaning when rounded to `f32`, a stop string that straddles the
//! `min_tokens` boundary, a user grammar constraint that panics. Each is either refused
//! with a typed error or handled as documented.

use logits::grammar::{GrammarError, TokenKind, Vocab};

/// A byte-level BPE `tokenizer.json` with the given `model.vocab` members and added tokens.
fn tokenizer(vocab: &str, added: &str) -> String {
    format!(
        r#"{{"added_tokens": [{added}], "pre_tokenizer": {{"type": "ByteLevel"}},
            "model": {{"type": "BPE", "vocab": {{{vocab}}}, "merges": []}}}}"#
    )
}

const EOS: &str = r#"{"id": 3, "content": "<eos>", "special": true}"#;

#[test]
fn a_tokenizer_that_gives_one_id_to_two_text_tokens_is_refused() {
    let ok = Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1, "ab": 2"#, EOS), 4, &[3])
        .expect("distinct ids load");
    assert_eq!(ok.bytes(1), b"b");
    let e = Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1, "ab": 1"#, EOS), 4, &[3])
        .unwrap_err();
    assert_eq!(
        e,
        GrammarError::DuplicateTokenId {
            id: 1,
            first: "b".into(),
            second: "ab".into()
        }
    );
    assert!(e.to_string().contains("token id 1"), "{e}");
    // The same key written twice with the same id is one token.
    let v = Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1, "b": 1"#, EOS), 4, &[3])
        .expect("a repeated entry names the same token");
    assert_eq!(
        (v.bytes(1), v.kind(2)),
        (&b"b"[..], Some(TokenKind::Padding))
    );
}

#[test]
fn an_added_token_that_overwrites_a_text_token_is_refused() {
    let added = format!(r#"{EOS}, {{"id": 1, "content": "<tool>", "special": false}}"#);
    let e =
        Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1"#, &added), 4, &[3]).unwrap_err();
    assert_eq!(
        e,
        GrammarError::DuplicateTokenId {
            id: 1,
            first: "b".into(),
            second: "<tool>".into()
        }
    );
    // Two added tokens with one id.
    let added = format!(r#"{EOS}, {{"id": 3, "content": "<end>", "special": true}}"#);
    let e =
        Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1"#, &added), 4, &[3]).unwrap_err();
    assert!(
        matches!(e, GrammarError::DuplicateTokenId { id: 3, .. }),
        "{e:?}"
    );
}

#[test]
fn an_added_token_that_repeats_a_text_token_with_its_content_is_that_token() {
    // GPT-2 lists `<|endoftext|>` both in `model.vocab` and in `added_tokens`, with one
    // id: the added entry makes it special.
    let added = r#"{"id": 2, "content": "<|endoftext|>", "special": true}"#;
    let json = tokenizer(r#""a": 0, "b": 1, "<|endoftext|>": 2"#, added);
    let v = Vocab::from_tokenizer_json(&json, 4, &[2]).expect("same content, same token");
    assert_eq!(v.kind(2), Some(TokenKind::Special));
    assert_eq!(v.bytes(2), b"<|endoftext|>");
    assert_eq!(v.special_id("<|endoftext|>"), Some(2));
    // The same when the content matches the token's decoded bytes rather than its
    // spelling in the byte-level alphabet (`Ġ` is the space).
    let added = r#"{"id": 2, "content": " x", "special": true}"#;
    let v = Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1, "Ġx": 2"#, added), 4, &[2])
        .expect("same bytes, same token");
    assert_eq!(
        (v.kind(2), v.bytes(2)),
        (Some(TokenKind::Special), &b" x"[..])
    );
    // Spelled as in `model.vocab`.
    let added = r#"{"id": 2, "content": "Ġx", "special": true}"#;
    let v = Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1, "Ġx": 2"#, added), 4, &[2])
        .expect("same spelling, same token");
    assert_eq!(v.kind(2), Some(TokenKind::Special));
}
