//! The tokenizer: `tokenizer.json` (optionally gzip-compressed) through the
//! `tokenizers` crate, plus a table of the raw bytes behind every token so the
//! stream can be cut at byte level and kept UTF-8-safe by the stop checker.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use logits::TokenId;

/// A loaded tokenizer and the bytes of every token id.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Bytes each id decodes to; empty for special tokens and unused ids.
    bytes: Vec<Vec<u8>>,
    /// Ids the tokenizer can produce (ids at or above it are padding).
    vocab_size: usize,
    path: PathBuf,
    /// The text of tokenizer.json, for the grammar engine.
    json: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size)
            .finish()
    }
}

/// Where the tokenizer file of a model directory is: `tokenizer.json`, or
/// `tokenizer.json.gz` when only the compressed one exists.
pub fn tokenizer_path(dir: &Path) -> PathBuf {
    let plain = dir.join("tokenizer.json");
    let gz = dir.join("tokenizer.json.gz");
    if !plain.exists() && gz.exists() {
        gz
    } else {
        plain
    }
}

impl Tokenizer {
    /// Loads `path` (`.gz` is decompressed). Errors name the file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let raw = std::fs::read(path)
            .with_context(|| format!("cannot read tokenizer {}", path.display()))?;
        let json = if path.extension().is_some_and(|e| e == "gz") {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(raw.as_slice())
                .read_to_end(&mut out)
                .with_context(|| format!("cannot decompress tokenizer {}", path.display()))?;
            out
        } else {
            raw
        };
        let json = String::from_utf8(json)
            .map_err(|_| anyhow!("invalid tokenizer {}: not UTF-8 text", path.display()))?;
        let inner = tokenizers::Tokenizer::from_bytes(json.as_bytes())
            .map_err(|e| anyhow!("invalid tokenizer {}: {e}", path.display()))?;
        let vocab_size = inner
            .get_vocab(true)
            .values()
            .map(|&id| id as usize + 1)
            .max()
            .unwrap_or(0);
        if vocab_size == 0 {
            bail!(
                "invalid tokenizer {}: the vocabulary is empty",
                path.display()
            );
        }
        let bytes = token_bytes(&inner);
        Ok(Tokenizer {
            inner,
            bytes,
            vocab_size,
            path: path.to_path_buf(),
            json,
        })
    }

    /// The file this tokenizer came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of ids the tokenizer can produce, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Checks that every token id has a logit in rows of `logits_len`.
    pub fn check_fits(&self, logits_len: usize, config: &Path) -> Result<()> {
        if self.vocab_size > logits_len {
            bail!(
                "tokenizer {} has {} tokens but the model ({}) produces only {} logits: \
                 tokens {}..{} could never be sampled; the tokenizer does not belong to this model",
                self.path.display(),
                self.vocab_size,
                config.display(),
                logits_len,
                logits_len,
                self.vocab_size - 1
            );
        }
        Ok(())
    }

    /// Encodes text without adding special tokens (chat templates already
    /// contain them as text).
    pub fn encode(&self, text: &str) -> Result<Vec<TokenId>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow!("cannot tokenize the prompt: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text, special tokens skipped.
    pub fn decode(&self, ids: &[TokenId]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| anyhow!("cannot decode tokens: {e}"))
    }

    /// The raw bytes of one token (empty for special tokens and padding ids).
    pub fn token_bytes(&self, id: TokenId) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// The id of a token given by its exact text, such as `<|im_end|>`.
    pub fn token_id(&self, token: &str) -> Option<TokenId> {
        self.inner.token_to_id(token)
    }

    /// The token's text as the vocabulary spells it, for display.
    pub fn token_text(&self, id: TokenId) -> String {
        let bytes = self.token_bytes(id);
        if bytes.is_empty() {
            return self.inner.id_to_token(id).unwrap_or_default();
        }
        String::from_utf8_lossy(bytes).into_owned()
    }

    /// The text of the tokenizer file (decompressed).
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// GPT-2's byte-level alphabet inverted: the char that stands for each byte.
fn byte_level_decoder() -> HashMap<char, u8> {
    let mut map = HashMap::with_capacity(256);
    let mut extra = 0u32;
    for b in 0u32..256 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            extra += 1;
            255 + extra
        };
        map.insert(char::from_u32(c).expect("valid char"), b as u8);
    }
    map
}

/// The bytes of every id. Byte-level tokens are mapped back through the GPT-2
/// alphabet; added tokens are their content, except special ones which are
/// empty (they never belong in the shown text); anything else falls back to
/// decoding the single id.
fn token_bytes(tok: &tokenizers::Tokenizer) -> Vec<Vec<u8>> {
    let vocab = tok.get_vocab(true);
    let size = vocab.values().map(|&id| id as usize + 1).max().unwrap_or(0);
    let decoder = byte_level_decoder();
    let added = tok.get_added_tokens_decoder();
    let mut out = vec![Vec::new(); size];
    for (token, id) in vocab {
        let Some(slot) = out.get_mut(id as usize) else {
            continue;
        };
        if let Some(added) = added.get(&id) {
            if !added.special {
                *slot = added.content.clone().into_bytes();
            }
            continue;
        }
        let mapped: Option<Vec<u8>> = token.chars().map(|c| decoder.get(&c).copied()).collect();
        *slot = match mapped {
            Some(bytes) => bytes,
            None => tok.decode(&[id], false).unwrap_or_default().into_bytes(),
        };
    }
    out
}
