//! [`History`]: the tokens a sequence has seen, as the penalties and processors read them.

use crate::TokenId;

/// A read-only view of a sequence's tokens: the prompt, then the generated tokens.
///
/// The [`Sampler`](crate::Sampler) keeps the tokens; processors receive this view.
///
/// # Example
/// ```
/// use logits::History;
///
/// let tokens = [5, 6, 7, 8];
/// let h = History::new(&tokens, 3);
/// assert_eq!(h.prompt(), &[5, 6, 7]);
/// assert_eq!(h.generated(), &[8]);
/// assert_eq!(h.step(), 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct History<'a> {
    tokens: &'a [TokenId],
    prompt_len: usize,
}

impl<'a> History<'a> {
    /// A view of `tokens` whose first `prompt_len` are the prompt (clamped to the length).
    pub fn new(tokens: &'a [TokenId], prompt_len: usize) -> Self {
        History {
            tokens,
            prompt_len: prompt_len.min(tokens.len()),
        }
    }

    /// Every token: prompt, then generated.
    pub fn tokens(&self) -> &'a [TokenId] {
        self.tokens
    }

    /// The prompt tokens.
    pub fn prompt(&self) -> &'a [TokenId] {
        &self.tokens[..self.prompt_len]
    }

    /// The generated tokens.
    pub fn generated(&self) -> &'a [TokenId] {
        &self.tokens[self.prompt_len..]
    }

    /// Number of generated tokens: the index of the draw about to be made.
    pub fn step(&self) -> u64 {
        (self.tokens.len() - self.prompt_len) as u64
    }

    /// The tokens the penalties count: the last `window` tokens (all when `None`) of the
    /// whole history, or of the generated part only when `include_prompt` is false.
    pub fn penalized(&self, window: Option<usize>, include_prompt: bool) -> &'a [TokenId] {
        let base = if include_prompt {
            self.tokens
        } else {
            self.generated()
        };
        match window {
            Some(n) if n < base.len() => &base[base.len() - n..],
            _ => base,
        }
    }
}

/// The token history a [`Sampler`](crate::Sampler) or [`Chain`](crate::Chain) owns.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sequence {
    tokens: Vec<TokenId>,
    prompt_len: usize,
}

impl Sequence {
    pub(crate) fn view(&self) -> History<'_> {
        History::new(&self.tokens, self.prompt_len)
    }

    pub(crate) fn step(&self) -> u64 {
        (self.tokens.len() - self.prompt_len) as u64
    }

    pub(crate) fn push_prompt(
        &mut self,
        tokens: &[TokenId],
        vocab_size: usize,
    ) -> Result<(), crate::Error> {
        if self.tokens.len() != self.prompt_len {
            return Err(crate::Error::InvalidParameter {
                name: "prompt",
                value: self.step() as f64,
                expected: "prompt tokens before any generated token",
            });
        }
        check_ids(tokens, vocab_size)?;
        self.tokens.extend_from_slice(tokens);
        self.prompt_len = self.tokens.len();
        Ok(())
    }

    pub(crate) fn accept(&mut self, token: TokenId, vocab_size: usize) -> Result<(), crate::Error> {
        check_ids(&[token], vocab_size)?;
        self.tokens.push(token);
        Ok(())
    }

    /// Appends a token the sampler itself drew (already inside the vocabulary).
    pub(crate) fn push_drawn(&mut self, token: TokenId) {
        self.tokens.push(token);
    }

    pub(crate) fn rollback(&mut self, n: usize) {
        let keep = self.tokens.len().saturating_sub(n).max(self.prompt_len);
        self.tokens.truncate(keep);
    }

    pub(crate) fn reset(&mut self) {
        self.tokens.clear();
        self.prompt_len = 0;
    }

    pub(crate) fn reserve(
        &mut self,
        additional: usize,
    ) -> Result<(), std::collections::TryReserveError> {
        self.tokens.try_reserve(additional)
    }
}

fn check_ids(tokens: &[TokenId], vocab_size: usize) -> Result<(), crate::Error> {
    match tokens.iter().find(|&&id| id as usize >= vocab_size) {
        Some(&id) => Err(crate::Error::TokenOutOfRange { id, vocab_size }),
        None => Ok(()),
    }
}
