//! [`Vocab`]: the byte string, kind and end-of-sequence role of every logit slot.

use crate::grammar::error::GrammarError;
use crate::TokenId;

/// How a logit slot takes part in constrained decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// A token that stands for its bytes. A grammar allows it when its bytes continue the
    /// text legally.
    Text,
    /// A control token (`<|im_end|>`, `<think>`, `<tool_call>`, ...). It is never allowed
    /// unless the grammar names it; end-of-sequence ids are allowed only when the text so
    /// far is complete.
    Special,
    /// A slot past the tokenizer's vocabulary that only pads the logits row. Never allowed.
    Padding,
}

/// The vocabulary of one model, as the grammar stage sees it: for every logit slot, its
/// bytes and its [`TokenKind`], plus the set of end-of-sequence ids.
///
/// Built once per model and shared (wrap it in an [`Arc`](std::sync::Arc)). Its
/// [`len`](Vocab::len) is the width of the logits row, which may exceed the tokenizer's
/// size (Qwen3: 151,669 tokens, 151,936 logits); the extra slots are [`TokenKind::Padding`].
///
/// A special token's bytes are its name (`<|im_end|>`); they are never matched against
/// grammar text.
///
/// # Example
/// ```
/// use logits::grammar::{TokenKind, Vocab};
///
/// let vocab = Vocab::new(
///     vec![b"a".to_vec(), b"b".to_vec(), b"ab".to_vec(), b"<eos>".to_vec(), Vec::new()],
///     vec![TokenKind::Text, TokenKind::Text, TokenKind::Text, TokenKind::Special, TokenKind::Padding],
///     vec![3],
/// )?;
/// assert_eq!(vocab.len(), 5);
/// assert_eq!(vocab.bytes(2), b"ab");
/// assert_eq!(vocab.kind(4), Some(TokenKind::Padding));
/// assert!(vocab.is_eos(3));
/// assert_eq!(vocab.tokenize_greedy(b"abab"), Some(vec![2, 2]));
/// # Ok::<(), logits::grammar::GrammarError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Vocab {
    data: Vec<u8>,
    offsets: Vec<usize>,
    kinds: Vec<TokenKind>,
    eos: Vec<TokenId>,
    specials: Vec<TokenId>,
    /// Special and padding ids, ascending.
    non_text: Vec<TokenId>,
    /// Text token ids sorted by their bytes, for exact and prefix look-ups.
    sorted_text: Vec<TokenId>,
    max_text_len: usize,
}

impl Vocab {
    /// Builds a vocabulary from one byte string and one kind per logit slot.
    ///
    /// Padding slots' bytes are ignored. Every end-of-sequence id must be a
    /// [`TokenKind::Special`] slot.
    ///
    /// # Errors
    /// [`GrammarError::InvalidVocab`] when the vocabulary is empty or larger than `u32`
    /// ids allow, when `tokens` and `kinds` differ in length, when a text or special token
    /// has no bytes, or when `eos` is empty or names a slot that is not special.
    pub fn new(
        tokens: Vec<Vec<u8>>,
        kinds: Vec<TokenKind>,
        eos: Vec<TokenId>,
    ) -> Result<Self, GrammarError> {
        let n = tokens.len();
        if n == 0 {
            return Err(GrammarError::InvalidVocab("the vocabulary is empty".into()));
        }
        if u32::try_from(n).is_err() {
            return Err(GrammarError::InvalidVocab(format!(
                "{n} token slots do not fit u32 token ids"
            )));
        }
        if kinds.len() != n {
            return Err(GrammarError::InvalidVocab(format!(
                "{n} token byte strings but {} kinds",
                kinds.len()
            )));
        }
        let mut data = Vec::with_capacity(tokens.iter().map(Vec::len).sum());
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        let mut specials = Vec::new();
        let mut non_text = Vec::new();
        let mut max_text_len = 0;
        for (id, (bytes, kind)) in tokens.iter().zip(&kinds).enumerate() {
            if *kind != TokenKind::Text {
                non_text.push(id as TokenId);
            }
            match kind {
                TokenKind::Padding => {}
                TokenKind::Text | TokenKind::Special => {
                    if bytes.is_empty() {
                        return Err(GrammarError::InvalidVocab(format!(
                            "token {id} is {kind:?} but has no bytes"
                        )));
                    }
                    data.extend_from_slice(bytes);
                    if *kind == TokenKind::Special {
                        specials.push(id as TokenId);
                    } else {
                        max_text_len = max_text_len.max(bytes.len());
                    }
                }
            }
            offsets.push(data.len());
        }
        let mut eos_ids = eos;
        eos_ids.sort_unstable();
        eos_ids.dedup();
        if eos_ids.is_empty() {
            return Err(GrammarError::InvalidVocab(
                "no end-of-sequence id given".into(),
            ));
        }
        for &e in &eos_ids {
            match kinds.get(e as usize) {
                Some(TokenKind::Special) => {}
                Some(k) => {
                    return Err(GrammarError::InvalidVocab(format!(
                        "end-of-sequence id {e} is a {k:?} token, not a special one"
                    )))
                }
                None => {
                    return Err(GrammarError::InvalidVocab(format!(
                        "end-of-sequence id {e} is outside the vocabulary of {n} slots"
                    )))
                }
            }
        }
        let mut vocab = Vocab {
            data,
            offsets,
            kinds,
            eos: eos_ids,
            specials,
            non_text,
            sorted_text: Vec::new(),
            max_text_len,
        };
        let mut sorted: Vec<TokenId> = (0..n as TokenId)
            .filter(|&id| vocab.kinds[id as usize] == TokenKind::Text)
            .collect();
        sorted.sort_unstable_by(|&a, &b| vocab.bytes(a).cmp(vocab.bytes(b)).then(a.cmp(&b)));
        vocab.sorted_text = sorted;
        Ok(vocab)
    }

    /// Number of logit slots (the logits row width).
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Always false: a vocabulary has at least one slot.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The bytes of token `id`: its text for text tokens, its name for special tokens, and
    /// empty for padding slots and ids out of range.
    pub fn bytes(&self, id: TokenId) -> &[u8] {
        let i = id as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.data[a..b],
            _ => &[],
        }
    }

    /// The kind of token `id`, or `None` past the vocabulary.
    pub fn kind(&self, id: TokenId) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// The end-of-sequence ids, sorted.
    pub fn eos(&self) -> &[TokenId] {
        &self.eos
    }

    /// True when `id` ends a sequence.
    pub fn is_eos(&self, id: TokenId) -> bool {
        self.eos.binary_search(&id).is_ok()
    }

    /// The ids of every special token, ascending.
    pub fn special_tokens(&self) -> &[TokenId] {
        &self.specials
    }

    /// The ids of every special and padding slot, ascending.
    pub(crate) fn non_text_tokens(&self) -> &[TokenId] {
        &self.non_text
    }

    /// The id of the special token named `name` (for example `"<|im_end|>"`).
    pub fn special_id(&self, name: &str) -> Option<TokenId> {
        self.specials
            .iter()
            .copied()
            .find(|&id| self.bytes(id) == name.as_bytes())
    }

    /// Number of text tokens.
    pub fn text_token_count(&self) -> usize {
        self.sorted_text.len()
    }

    /// Length in bytes of the longest text token.
    pub fn max_text_token_len(&self) -> usize {
        self.max_text_len
    }

    /// The text tokens whose bytes are exactly `bytes` (usually zero or one).
    pub fn text_tokens_with_bytes(&self, bytes: &[u8]) -> &[TokenId] {
        let lo = self
            .sorted_text
            .partition_point(|&id| self.bytes(id) < bytes);
        let hi = lo + self.sorted_text[lo..].partition_point(|&id| self.bytes(id) == bytes);
        &self.sorted_text[lo..hi]
    }

    /// Splits `bytes` into text tokens by greedy longest match, or `None` when some
    /// position starts no text token.
    ///
    /// This is not the model's BPE tokenization, but every sequence it returns spells
    /// `bytes` exactly.
    pub fn tokenize_greedy(&self, bytes: &[u8]) -> Option<Vec<TokenId>> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let longest = self.max_text_len.min(bytes.len() - pos);
            let (len, id) = (1..=longest).rev().find_map(|k| {
                self.text_tokens_with_bytes(&bytes[pos..pos + k])
                    .first()
                    .map(|&id| (k, id))
            })?;
            out.push(id);
            pos += len;
        }
        Some(out)
    }
}
