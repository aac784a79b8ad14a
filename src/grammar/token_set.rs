//! [`TokenSet`]: a constraint that allows a fixed set of token ids.

use crate::grammar::constraint::{Constraint, Status};
use crate::grammar::error::{GrammarError, GrammarKind};
use crate::grammar::vocab::{TokenKind, Vocab};
use crate::mask::TokenMask;
use crate::TokenId;

/// Allows only the token ids of a fixed set, at every step or for exactly one step.
///
/// - [`TokenSet::repeated`]: any number of tokens from the set; end-of-sequence is
///   allowed at every step, including the first.
/// - [`TokenSet::single`]: exactly one token from the set, then only end-of-sequence
///   (for example a classification label that is a single token).
///
/// Special tokens in the set count as named, so they are allowed. End-of-sequence ids
/// cannot be listed: the status decides when they are allowed.
///
/// # Example
/// ```
/// use std::sync::Arc;
/// use logits::grammar::{GrammarMask, Status, TokenKind, TokenSet, Vocab};
///
/// let vocab = Arc::new(Vocab::new(
///     vec![b"A".to_vec(), b"B".to_vec(), b"C".to_vec(), b"<eos>".to_vec()],
///     vec![TokenKind::Text, TokenKind::Text, TokenKind::Text, TokenKind::Special],
///     vec![3],
/// )?);
/// let labels = TokenSet::single(&vocab, [0, 2])?;
/// let mut stage = GrammarMask::new(Box::new(labels), vocab);
/// assert_eq!(stage.compute()?.0.count_allowed(), 2);
/// assert_eq!(stage.commit(2)?, Status::OnlyEos);
/// # Ok::<(), logits::grammar::GrammarError>(())
/// ```
#[derive(Debug, Clone)]
pub struct TokenSet {
    ids: Vec<TokenId>,
    specials: Vec<TokenId>,
    single: bool,
    committed: usize,
}

impl TokenSet {
    /// Any number of tokens from `ids`; end-of-sequence is allowed at every step.
    ///
    /// # Errors
    /// [`GrammarError::InvalidGrammar`] when `ids` is empty or holds an id that is out of
    /// range, padding or end-of-sequence.
    pub fn repeated(
        vocab: &Vocab,
        ids: impl IntoIterator<Item = TokenId>,
    ) -> Result<Self, GrammarError> {
        Self::build(vocab, ids, false)
    }

    /// Exactly one token from `ids`, then only end-of-sequence.
    ///
    /// # Errors
    /// As [`TokenSet::repeated`].
    pub fn single(
        vocab: &Vocab,
        ids: impl IntoIterator<Item = TokenId>,
    ) -> Result<Self, GrammarError> {
        Self::build(vocab, ids, true)
    }

    fn build(
        vocab: &Vocab,
        ids: impl IntoIterator<Item = TokenId>,
        single: bool,
    ) -> Result<Self, GrammarError> {
        let bad = |message: String| GrammarError::InvalidGrammar {
            kind: GrammarKind::BuiltIn,
            message,
        };
        let mut ids: Vec<TokenId> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return Err(bad("the token set is empty".into()));
        }
        let mut specials = Vec::new();
        for &id in &ids {
            match vocab.kind(id) {
                None => {
                    return Err(bad(format!(
                        "token {id} is outside the vocabulary of {} slots",
                        vocab.len()
                    )))
                }
                Some(TokenKind::Padding) => {
                    return Err(bad(format!("token {id} is a padding slot")))
                }
                Some(_) if vocab.is_eos(id) => {
                    return Err(bad(format!(
                        "token {id} is end-of-sequence, which the status governs"
                    )))
                }
                Some(TokenKind::Special) => specials.push(id),
                Some(TokenKind::Text) => {}
            }
        }
        Ok(TokenSet {
            ids,
            specials,
            single,
            committed: 0,
        })
    }

    /// The allowed ids, ascending.
    pub fn ids(&self) -> &[TokenId] {
        &self.ids
    }

    fn current(&self) -> Status {
        match (self.single, self.committed) {
            (false, _) => Status::OpenAccepting,
            (true, 0) => Status::Open,
            (true, _) => Status::OnlyEos,
        }
    }
}

impl Constraint for TokenSet {
    fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<Status, GrammarError> {
        let status = self.current();
        if status != Status::OnlyEos {
            for &id in &self.ids {
                mask.allow(id).map_err(|_| GrammarError::LengthMismatch {
                    expected: id as usize + 1,
                    actual: mask.len(),
                })?;
            }
        }
        Ok(status)
    }

    fn commit(&mut self, token: TokenId) -> Result<(), GrammarError> {
        if self.current() == Status::OnlyEos || self.ids.binary_search(&token).is_err() {
            return Err(GrammarError::TokenRejected { token });
        }
        self.committed += 1;
        Ok(())
    }

    fn status(&mut self) -> Result<Status, GrammarError> {
        Ok(self.current())
    }

    fn rollback(&mut self, n: usize) -> Result<(), GrammarError> {
        if n > self.committed {
            return Err(GrammarError::RollbackTooFar {
                requested: n,
                available: self.committed,
            });
        }
        self.committed -= n;
        Ok(())
    }

    fn named_special_tokens(&self) -> Vec<TokenId> {
        self.specials.clone()
    }
}
