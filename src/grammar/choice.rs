//! [`Choice`]: a constraint whose output is exactly one of N literal strings.

use std::sync::Arc;

use crate::grammar::constraint::{Constraint, Status};
use crate::grammar::error::{GrammarError, GrammarKind};
use crate::grammar::vocab::Vocab;
use crate::mask::TokenMask;
use crate::TokenId;

/// The output must be exactly one of a list of literal strings.
///
/// The strings are walked over the vocabulary's text-token bytes: at each step every text
/// token whose bytes continue some still-possible option is allowed, whatever way the
/// model splits the text (not only the tokenizer's canonical split). A token is allowed
/// only if the rest of its option can still be spelled with text tokens, so the walk never
/// reaches a dead end. Special tokens are never allowed.
///
/// When one option is a prefix of another (`"no"`, `"none"`), end-of-sequence is allowed
/// after the shorter one while the longer one may still go on.
///
/// Each step costs a few binary searches per live option and byte, independent of the
/// vocabulary size.
#[derive(Debug, Clone)]
pub struct Choice {
    vocab: Arc<Vocab>,
    options: Vec<Vec<u8>>,
    /// `reach[i][p]`: the bytes of option `i` from `p` to its end can be spelled with text
    /// tokens.
    reach: Vec<Vec<bool>>,
    text: Vec<u8>,
    /// Text length before each commit, for rollback.
    history: Vec<usize>,
}

impl Choice {
    /// A constraint whose output is one of `options`.
    ///
    /// # Errors
    /// [`GrammarError::InvalidGrammar`] when `options` is empty or an option cannot be
    /// spelled with the vocabulary's text tokens.
    pub fn new<S: AsRef<str>>(vocab: Arc<Vocab>, options: &[S]) -> Result<Self, GrammarError> {
        if options.is_empty() {
            return Err(GrammarError::InvalidGrammar {
                kind: GrammarKind::BuiltIn,
                message: "a choice needs at least one option".into(),
            });
        }
        let options: Vec<Vec<u8>> = options
            .iter()
            .map(|o| o.as_ref().as_bytes().to_vec())
            .collect();
        let max = vocab.max_text_token_len();
        let mut reach = Vec::with_capacity(options.len());
        for (i, opt) in options.iter().enumerate() {
            let n = opt.len();
            let mut r = vec![false; n + 1];
            r[n] = true;
            for p in (0..n).rev() {
                r[p] = (1..=max.min(n - p))
                    .any(|k| r[p + k] && !vocab.text_tokens_with_bytes(&opt[p..p + k]).is_empty());
            }
            if !r[0] {
                return Err(GrammarError::InvalidGrammar {
                    kind: GrammarKind::BuiltIn,
                    message: format!(
                        "option {i} ({:?}) cannot be spelled with the vocabulary's text tokens",
                        String::from_utf8_lossy(opt)
                    ),
                });
            }
            reach.push(r);
        }
        Ok(Choice {
            vocab,
            options,
            reach,
            text: Vec::new(),
            history: Vec::new(),
        })
    }

    /// The text committed so far.
    pub fn text(&self) -> &[u8] {
        &self.text
    }

    fn live(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        self.options
            .iter()
            .enumerate()
            .filter(|(_, o)| o.starts_with(&self.text))
            .map(|(i, o)| (i, &o[self.text.len()..]))
    }

    fn current(&self) -> Status {
        let mut complete = false;
        let mut more = false;
        for (_, rest) in self.live() {
            if rest.is_empty() {
                complete = true;
            } else {
                more = true;
            }
        }
        match (complete, more) {
            (true, false) => Status::OnlyEos,
            (true, true) => Status::OpenAccepting,
            _ => Status::Open,
        }
    }
}

impl Constraint for Choice {
    fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<Status, GrammarError> {
        let max = self.vocab.max_text_token_len();
        let at = self.text.len();
        for (i, rest) in self.live() {
            for k in 1..=max.min(rest.len()) {
                if self.reach[i][at + k] {
                    for &id in self.vocab.text_tokens_with_bytes(&rest[..k]) {
                        mask.allow(id).map_err(|_| GrammarError::LengthMismatch {
                            expected: self.vocab.len(),
                            actual: mask.len(),
                        })?;
                    }
                }
            }
        }
        Ok(self.current())
    }

    fn commit(&mut self, token: TokenId) -> Result<(), GrammarError> {
        let is_text = self.vocab.kind(token) == Some(crate::grammar::TokenKind::Text);
        let bytes = self.vocab.bytes(token);
        let at = self.text.len();
        let ok = is_text
            && self
                .live()
                .any(|(i, rest)| rest.starts_with(bytes) && self.reach[i][at + bytes.len()]);
        if !ok {
            return Err(GrammarError::TokenRejected { token });
        }
        self.history.push(at);
        self.text.extend_from_slice(bytes);
        Ok(())
    }

    fn status(&mut self) -> Result<Status, GrammarError> {
        Ok(self.current())
    }

    fn rollback(&mut self, n: usize) -> Result<(), GrammarError> {
        if n > self.history.len() {
            return Err(GrammarError::RollbackTooFar {
                requested: n,
                available: self.history.len(),
            });
        }
        if n > 0 {
            let keep = self.history.len() - n;
            self.text.truncate(self.history[keep]);
            self.history.truncate(keep);
        }
        Ok(())
    }
}
