//! Loading a [`Vocab`] from a Hugging Face `tokenizer.json` (byte-level BPE).
//!
//! Byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2/3, ...) store each token as a string
//! over a 256-character alphabet that stands for the bytes 0-255: printable Latin-1
//! characters stand for themselves and the others are shifted to U+0100 and up. The loader
//! maps every token string back to its bytes.
//!
//! Added tokens (`added_tokens` in the file) all become [`TokenKind::Special`], whether
//! the file marks them `special` or not. On Qwen3 this covers the 12 added tokens that are
//! not marked special (`<think>`, `</think>`, `<tool_call>`, `</tool_call>`,
//! `<tool_response>`, `</tool_response>`, `<|fim_prefix|>`, `<|fim_middle|>`,
//! `<|fim_suffix|>`, `<|fim_pad|>`, `<|repo_name|>`, `<|file_sep|>`): they are control
//! tokens that switch the model's mode, so a grammar over text must not produce them by
//! accident. A grammar that wants one names it explicitly, and a JSON string containing the
//! text `<think>` is still spelled with ordinary text tokens.

use crate::grammar::error::GrammarError;
use crate::grammar::json::Json;
use crate::grammar::vocab::{TokenKind, Vocab};
use crate::TokenId;

/// Map from a byte-level alphabet character (as a code point below 324) to its byte.
fn byte_decoder() -> [Option<u8>; 324] {
    let mut table = [None; 324];
    let mut shifted = 0u32;
    for b in 0u32..=255 {
        let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
        let c = if printable {
            b
        } else {
            shifted += 1;
            255 + shifted
        };
        table[c as usize] = Some(b as u8);
    }
    table
}

fn has_byte_level(v: Option<&Json>) -> bool {
    match v {
        Some(Json::Object(members)) => {
            members
                .iter()
                .any(|(k, v)| k == "type" && v.as_str() == Some("ByteLevel"))
                || members.iter().any(|(_, v)| has_byte_level(Some(v)))
        }
        Some(Json::Array(items)) => items.iter().any(|v| has_byte_level(Some(v))),
        _ => false,
    }
}

/// One token of the file: its string as written, its bytes and its kind.
#[derive(Clone)]
struct Slot<'a> {
    text: &'a str,
    bytes: Vec<u8>,
    kind: TokenKind,
}

impl Slot<'_> {
    /// Whether two entries for one id name the same token: the same string as written
    /// (a `model.vocab` key repeated, or an added token spelled as in `model.vocab`), or
    /// the same bytes (an added token whose content is the text token's decoded bytes,
    /// as GPT-2's `<|endoftext|>`).
    fn same_token(&self, other: &Slot<'_>) -> bool {
        self.text == other.text || self.bytes == other.bytes
    }
}

/// Puts `slot` at `id`. Ids are checked against the row before any slot is allocated,
/// so a hostile id near `u32::MAX` is an error, not a huge allocation.
fn put<'a>(
    slots: &mut Vec<Option<Slot<'a>>>,
    n_logits: usize,
    id: TokenId,
    slot: Slot<'a>,
) -> Result<(), GrammarError> {
    let i = id as usize;
    if i >= n_logits {
        return Err(GrammarError::InvalidVocab(format!(
            "token id {id} does not fit the logits row of {n_logits} slots"
        )));
    }
    if slots.len() <= i {
        slots.resize(i + 1, None);
    }
    if let Some(old) = &slots[i] {
        if !old.same_token(&slot) {
            return Err(GrammarError::DuplicateTokenId {
                id,
                first: old.text.to_owned(),
                second: slot.text.to_owned(),
            });
        }
    }
    slots[i] = Some(slot);
    Ok(())
}

fn to_id(v: &Json, what: &str) -> Result<TokenId, GrammarError> {
    v.as_u64()
        .and_then(|n| TokenId::try_from(n).ok())
        .ok_or_else(|| GrammarError::TokenizerJson(format!("{what} is not a valid token id")))
}

impl Vocab {
    /// Loads the vocabulary of a byte-level BPE `tokenizer.json`.
    ///
    /// `n_logits` is the width of the model's logits row; slots past the tokenizer's
    /// largest id (and any id the file does not use) become [`TokenKind::Padding`]. `eos`
    /// lists the ids that end a sequence (for Qwen3: `[151645, 151643]`, `<|im_end|>` and
    /// `<|endoftext|>`, as in its `generation_config.json`).
    ///
    /// Every added token is [`TokenKind::Special`], including those the file does not mark
    /// special; see the [module documentation](crate::grammar) for why.
    ///
    /// Each id names one token. A file that gives an id to two different tokens is
    /// refused rather than resolved by whichever entry comes last, since the model was
    /// trained with one of them and the loader cannot tell which.
    ///
    /// # Errors
    /// - [`GrammarError::TokenizerJson`] when the text is not JSON or lacks `model.vocab`;
    /// - [`GrammarError::NotByteLevelBpe`] when the model is not BPE, has no `ByteLevel`
    ///   pre-tokenizer or decoder, or a token uses a character outside the byte alphabet;
    /// - [`GrammarError::InvalidVocab`] when `n_logits` is smaller than the tokenizer or
    ///   beyond [`MAX_VOCAB_SIZE`](crate::MAX_VOCAB_SIZE) (checked before anything is
    ///   allocated), when the slots for `n_logits` tokens cannot be allocated, or when an
    ///   `eos` id is not a special token;
    /// - [`GrammarError::DuplicateTokenId`] when one id is given to two different tokens:
    ///   twice in `model.vocab`, twice in `added_tokens`, or to an added token whose
    ///   content is not the text token's. An added token that repeats a text token's
    ///   id with the same content (spelled as in `model.vocab`, or as its decoded
    ///   bytes, like GPT-2's `<|endoftext|>`) is the same token: it is accepted and
    ///   becomes special.
    pub fn from_tokenizer_json(
        json: &str,
        n_logits: usize,
        eos: &[TokenId],
    ) -> Result<Vocab, GrammarError> {
        if n_logits > crate::MAX_VOCAB_SIZE {
            return Err(GrammarError::InvalidVocab(format!(
                "a logits row of {n_logits} slots is beyond MAX_VOCAB_SIZE ({})",
                crate::MAX_VOCAB_SIZE
            )));
        }
        let root = Json::parse(json).map_err(GrammarError::TokenizerJson)?;
        let model = root
            .get("model")
            .ok_or_else(|| GrammarError::TokenizerJson("no \"model\" object".into()))?;
        match model.get("type").and_then(Json::as_str) {
            Some("BPE") => {}
            Some(other) => {
                return Err(GrammarError::NotByteLevelBpe(format!(
                    "model type is {other:?}, expected \"BPE\""
                )))
            }
            None => {
                // Older files omit the type; BPE is recognised by its merges.
                if model.get("merges").is_none() {
                    return Err(GrammarError::NotByteLevelBpe(
                        "model has no \"type\" and no \"merges\"".into(),
                    ));
                }
            }
        }
        if !has_byte_level(root.get("pre_tokenizer")) && !has_byte_level(root.get("decoder")) {
            return Err(GrammarError::NotByteLevelBpe(
                "neither the pre-tokenizer nor the decoder is ByteLevel".into(),
            ));
        }
        let Some(Json::Object(entries)) = model.get("vocab") else {
            return Err(GrammarError::TokenizerJson(
                "\"model.vocab\" is missing or not an object".into(),
            ));
        };
        let decoder = byte_decoder();
        // Each slot keeps the token's string as the file spells it, to tell a repeated
        // id that names the same token from one that names another.
        let mut slots: Vec<Option<Slot<'_>>> = Vec::new();
        for (token, id) in entries {
            let id = to_id(id, &format!("the id of token {token:?}"))?;
            let mut bytes = Vec::with_capacity(token.len());
            for c in token.chars() {
                match decoder.get(c as usize).copied().flatten() {
                    Some(b) => bytes.push(b),
                    None => {
                        return Err(GrammarError::NotByteLevelBpe(format!(
                            "token {id} ({token:?}) has the character U+{:04X}, \
                             which is outside the byte-level alphabet",
                            c as u32
                        )))
                    }
                }
            }
            if bytes.is_empty() {
                return Err(GrammarError::TokenizerJson(format!(
                    "token {id} has an empty string"
                )));
            }
            put(
                &mut slots,
                n_logits,
                id,
                Slot {
                    text: token,
                    bytes,
                    kind: TokenKind::Text,
                },
            )?;
        }
        if let Some(added) = root.get("added_tokens") {
            let Json::Array(added) = added else {
                return Err(GrammarError::TokenizerJson(
                    "\"added_tokens\" is not an array".into(),
                ));
            };
            for tok in added {
                let id = to_id(
                    tok.get("id").unwrap_or(&Json::Null),
                    "the id of an added token",
                )?;
                let content = tok
                    .get("content")
                    .and_then(Json::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| {
                        GrammarError::TokenizerJson(format!("added token {id} has no \"content\""))
                    })?;
                put(
                    &mut slots,
                    n_logits,
                    id,
                    Slot {
                        text: content,
                        bytes: content.as_bytes().to_vec(),
                        kind: TokenKind::Special,
                    },
                )?;
            }
        }
        if slots.len() > n_logits {
            return Err(GrammarError::InvalidVocab(format!(
                "the tokenizer has {} token ids but the logits row has only {n_logits} slots",
                slots.len()
            )));
        }
        // Every slot of the row, and the two vectors they become, are reserved before
        // any is filled: a row too large for memory is an error, not an abort.
        let oom = |_| {
            GrammarError::InvalidVocab(format!(
                "cannot allocate the {n_logits} token slots of the logits row"
            ))
        };
        slots
            .try_reserve_exact(n_logits - slots.len())
            .map_err(oom)?;
        let mut tokens: Vec<Vec<u8>> = crate::scratch::with_capacity(n_logits).map_err(oom)?;
        let mut kinds: Vec<TokenKind> = crate::scratch::with_capacity(n_logits).map_err(oom)?;
        slots.resize(n_logits, None);
        for slot in slots {
            match slot {
                Some(Slot { bytes, kind, .. }) => {
                    tokens.push(bytes);
                    kinds.push(kind);
                }
                None => {
                    tokens.push(Vec::new());
                    kinds.push(TokenKind::Padding);
                }
            }
        }
        Vocab::new(tokens, kinds, eos.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::byte_decoder;

    #[test]
    fn byte_alphabet_is_a_bijection() {
        let t = byte_decoder();
        let mut seen = [false; 256];
        for b in t.iter().flatten() {
            assert!(!seen[*b as usize]);
            seen[*b as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(t['Ġ' as usize], Some(b' '));
        assert_eq!(t['Ċ' as usize], Some(b'\n'));
        assert_eq!(t['!' as usize], Some(b'!'));
    }
}
