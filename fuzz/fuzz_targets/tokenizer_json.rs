//! `Vocab::from_tokenizer_json` over arbitrary text and over byte-level BPE files with
//! arbitrary tokens and ids: it returns a vocabulary as wide as the logits row whose
//! tokens are the file's (decoded), or one of the documented errors, and never allocates
//! beyond the row it was asked for.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use logits::grammar::{GrammarError, TokenKind, Vocab};
use logits::TokenId;

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn id(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(match u.int_in_range(0..=9)? {
        0 => format!("{}", u.arbitrary::<u64>()?),
        1 => "-1".to_string(),
        2 => "1.5".to_string(),
        3 => "4294967295".to_string(),
        _ => format!("{}", u.int_in_range(0..=40)?),
    })
}

fn structured(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    // Characters of the byte-level alphabet, and a few outside it.
    const CHARS: &[char] = &['a', 'b', 'Ġ', 'Ċ', '!', 'é', 'ā', 'Ń', 'ł', '€', '\u{100}'];
    let mut vocab = Vec::new();
    for _ in 0..u.int_in_range(0..=12)? {
        let s: String = (0..u.int_in_range(0..=3)?)
            .map(|_| Ok(CHARS[u.int_in_range(0..=CHARS.len() - 1)?]))
            .collect::<arbitrary::Result<_>>()?;
        vocab.push(format!("{}: {}", json_string(&s), id(u)?));
    }
    let mut added = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let content = if u.ratio(1, 5)? {
            String::new()
        } else {
            "<|x|>".to_string()
        };
        added.push(format!(
            "{{\"id\": {}, \"content\": {}, \"special\": {}}}",
            id(u)?,
            json_string(&content),
            u.arbitrary::<bool>()?
        ));
    }
    let model_type = ["\"BPE\"", "\"WordPiece\"", "null"][u.int_in_range(0..=2)?];
    let byte_level = if u.ratio(4, 5)? {
        "{\"type\": \"ByteLevel\"}"
    } else {
        "null"
    };
    Ok(format!(
        "{{\"added_tokens\": [{}], \"pre_tokenizer\": {byte_level}, \
         \"model\": {{\"type\": {model_type}, \"vocab\": {{{}}}, \"merges\": []}}}}",
        added.join(", "),
        vocab.join(", ")
    ))
}

fn run(data: &[u8]) -> arbitrary::Result<()> {
    let mut u = Unstructured::new(data);
    let n_logits: usize = u.int_in_range(0..=64)?;
    let eos: Vec<TokenId> = (0..u.int_in_range(0..=2)?)
        .map(|_| u.int_in_range(0..=64))
        .collect::<arbitrary::Result<_>>()?;
    let text = if u.arbitrary()? {
        structured(&mut u)?
    } else {
        String::from_utf8_lossy(u.take_rest()).into_owned()
    };
    match Vocab::from_tokenizer_json(&text, n_logits, &eos) {
        Ok(v) => {
            assert_eq!(v.len(), n_logits);
            assert!(!eos.is_empty());
            for &e in &eos {
                assert!(v.is_eos(e));
                assert_eq!(v.kind(e), Some(TokenKind::Special));
            }
            for id in 0..n_logits as TokenId {
                let kind = v.kind(id).expect("every slot has a kind");
                if kind != TokenKind::Padding {
                    assert!(!v.bytes(id).is_empty());
                }
                if kind == TokenKind::Text {
                    assert!(v.bytes(id).len() <= v.max_text_token_len());
                }
            }
            assert_eq!(v.kind(n_logits as TokenId), None);
        }
        Err(e) => assert!(
            matches!(
                e,
                GrammarError::TokenizerJson(_)
                    | GrammarError::NotByteLevelBpe(_)
                    | GrammarError::InvalidVocab(_)
                    | GrammarError::DuplicateTokenId { .. }
            ),
            "undocumented {e:?}"
        ),
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
