//! The [`Constraint`] trait that grammar engines implement, and [`GrammarMask`], the
//! pipeline stage that enforces the core rules around any engine.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::element::Logit;
use crate::error::Error;
use crate::grammar::error::GrammarError;
use crate::grammar::vocab::{TokenKind, Vocab};
use crate::mask::TokenMask;
use crate::sample::Sample;
#[cfg(doc)]
use crate::sampler::Sampler;
use crate::sequence_sampler::SequenceSampler;
use crate::TokenId;

/// Where a constrained sequence stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// The text so far is not a complete match: end-of-sequence is not allowed.
    Open,
    /// The text so far is a complete match but may go on: end-of-sequence and some other
    /// tokens are allowed (for example after `1+2` in an arithmetic grammar).
    OpenAccepting,
    /// The text is complete and nothing may follow: only end-of-sequence is allowed. The
    /// caller may append end-of-sequence and stop without another forward pass.
    OnlyEos,
    /// End-of-sequence was committed. The constraint takes no more tokens.
    Finished,
}

impl Status {
    /// True when end-of-sequence is allowed next.
    pub fn eos_allowed(self) -> bool {
        matches!(self, Status::OpenAccepting | Status::OnlyEos)
    }
}

/// A grammar engine's per-sequence state.
///
/// An implementation only tracks text: [`GrammarMask`] wraps it and owns end-of-sequence,
/// padding and special-token handling, so every engine obeys the same rules.
///
/// - [`fill_mask`](Constraint::fill_mask) sets the bits of the tokens that may come next;
///   bits it sets for padding, end-of-sequence or special tokens the constraint does not
///   [name](Constraint::named_special_tokens) are cleared by the stage.
/// - [`commit`](Constraint::commit) is only called with a token the last mask allowed and
///   that is not end-of-sequence. If it fails, the state must be unchanged.
///
/// A panic in any method propagates to the caller of [`GrammarMask`]. The stage's own
/// state stays consistent: its cached mask is dropped before the constraint is asked to
/// move, its count of committed tokens moves only once the constraint's `commit`
/// returned, and [`GrammarMask::sample`] takes the drawn token back out of the sampler.
/// Whether the constraint's own state survives its panic is up to the constraint.
pub trait Constraint: Send {
    /// Sets the bit of every token that may come next. `mask` arrives all zeros and covers
    /// the whole vocabulary. Returns [`Status::Open`], [`Status::OpenAccepting`] or
    /// [`Status::OnlyEos`] for the text committed so far.
    ///
    /// # Errors
    /// An engine failure ([`GrammarError::Engine`]).
    fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<Status, GrammarError>;

    /// Advances past `token`, a text or named special token that is not end-of-sequence.
    ///
    /// # Errors
    /// [`GrammarError::TokenRejected`] (state unchanged) when the grammar does not allow
    /// it; [`GrammarError::Engine`] on an engine failure.
    fn commit(&mut self, token: TokenId) -> Result<(), GrammarError>;

    /// The status for the text committed so far, without computing a mask.
    ///
    /// # Errors
    /// [`GrammarError::Engine`] on an engine failure.
    fn status(&mut self) -> Result<Status, GrammarError>;

    /// Undoes the last `n` commits.
    ///
    /// # Errors
    /// [`GrammarError::NotSupported`] by default; [`GrammarError::RollbackTooFar`] when
    /// fewer than `n` tokens were committed.
    fn rollback(&mut self, n: usize) -> Result<(), GrammarError> {
        let _ = n;
        Err(GrammarError::NotSupported("rollback"))
    }

    /// The special tokens this constraint names and may therefore allow. Every other
    /// special token is removed from its masks.
    fn named_special_tokens(&self) -> Vec<TokenId> {
        Vec::new()
    }
}

impl<C: Constraint + ?Sized> Constraint for Box<C> {
    fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<Status, GrammarError> {
        (**self).fill_mask(mask)
    }
    fn commit(&mut self, token: TokenId) -> Result<(), GrammarError> {
        (**self).commit(token)
    }
    fn status(&mut self) -> Result<Status, GrammarError> {
        (**self).status()
    }
    fn rollback(&mut self, n: usize) -> Result<(), GrammarError> {
        (**self).rollback(n)
    }
    fn named_special_tokens(&self) -> Vec<TokenId> {
        (**self).named_special_tokens()
    }
}

/// The grammar stage of the sampling pipeline: computes the allowed-token mask of a
/// [`Constraint`] for each step, applies it to the logits, and checks every committed
/// token.
///
/// Whatever engine sits behind it, the stage enforces these rules:
/// - padding slots are never allowed;
/// - special tokens are never allowed unless the constraint names them;
/// - end-of-sequence ids are allowed exactly when the text so far is complete
///   ([`Status::OpenAccepting`] or [`Status::OnlyEos`]), and in [`Status::OnlyEos`]
///   nothing else is;
/// - an empty mask is an error ([`GrammarError::NoTokenAllowed`]), never a row of `-inf`;
/// - committing a token the mask does not allow returns [`GrammarError::TokenRejected`]
///   and leaves the state unchanged.
///
/// # Example
/// ```
/// use std::sync::Arc;
/// use logits::grammar::{Choice, GrammarMask, Status, TokenKind, Vocab};
///
/// let vocab = Arc::new(Vocab::new(
///     vec![b"y".to_vec(), b"es".to_vec(), b"no".to_vec(), b"<eos>".to_vec()],
///     vec![TokenKind::Text, TokenKind::Text, TokenKind::Text, TokenKind::Special],
///     vec![3],
/// )?);
/// let choice = Choice::new(vocab.clone(), &["yes", "no"])?;
/// let mut stage = GrammarMask::new(Box::new(choice), vocab);
///
/// let mut logits = vec![0.5_f32; 4];
/// assert_eq!(stage.apply(&mut logits)?, Status::Open);
/// assert_eq!(logits, [0.5, f32::NEG_INFINITY, 0.5, f32::NEG_INFINITY]);
///
/// assert!(stage.commit(1).is_err()); // "es" cannot start either word
/// stage.commit(2)?; // "no"
/// assert_eq!(stage.status()?, Status::OnlyEos);
/// assert_eq!(stage.commit(3)?, Status::Finished);
/// # Ok::<(), logits::grammar::GrammarError>(())
/// ```
pub struct GrammarMask {
    constraint: Box<dyn Constraint>,
    vocab: Arc<Vocab>,
    mask: TokenMask,
    /// Words that hold padding, unnamed special or end-of-sequence bits, with those bits set.
    forbidden: Vec<(usize, u32)>,
    /// Words that hold end-of-sequence bits, with those bits set.
    eos_words: Vec<(usize, u32)>,
    /// The status the current mask was computed for, if it is current.
    fresh: Option<Status>,
    finished: bool,
    committed: usize,
}

impl std::fmt::Debug for GrammarMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarMask")
            .field("vocab_len", &self.vocab.len())
            .field("fresh", &self.fresh)
            .field("finished", &self.finished)
            .field("committed", &self.committed)
            .finish_non_exhaustive()
    }
}

fn word_bits(ids: impl Iterator<Item = TokenId>) -> Vec<(usize, u32)> {
    let mut words: Vec<(usize, u32)> = Vec::new();
    for id in ids {
        let (w, b) = (id as usize / 32, 1u32 << (id % 32));
        match words.last_mut() {
            Some((lw, bits)) if *lw == w => *bits |= b,
            _ => words.push((w, b)),
        }
    }
    words
}

impl GrammarMask {
    /// Wraps `constraint` for sequences over `vocab`.
    pub fn new(constraint: Box<dyn Constraint>, vocab: Arc<Vocab>) -> Self {
        let mut named = constraint.named_special_tokens();
        named.sort_unstable();
        // End-of-sequence ids are special, so every forbidden id is a non-text slot.
        let forbidden = word_bits(vocab.non_text_tokens().iter().copied().filter(|&id| {
            vocab.is_eos(id)
                || vocab.kind(id) != Some(TokenKind::Special)
                || named.binary_search(&id).is_err()
        }));
        let eos_words = word_bits(vocab.eos().iter().copied());
        GrammarMask {
            constraint,
            mask: TokenMask::new_empty(vocab.len()),
            vocab,
            forbidden,
            eos_words,
            fresh: None,
            finished: false,
            committed: 0,
        }
    }

    /// The vocabulary this stage masks.
    pub fn vocab(&self) -> &Arc<Vocab> {
        &self.vocab
    }

    /// Number of tokens committed (end-of-sequence included) and not rolled back.
    pub fn committed(&self) -> usize {
        self.committed
    }

    /// Computes the mask for the next token (or returns the cached one if nothing was
    /// committed since) and the status it was computed for.
    ///
    /// # Errors
    /// [`GrammarError::AlreadyFinished`] after end-of-sequence,
    /// [`GrammarError::NoTokenAllowed`] when no token at all may come next, or an engine
    /// error.
    pub fn compute(&mut self) -> Result<(&TokenMask, Status), GrammarError> {
        if self.finished {
            return Err(GrammarError::AlreadyFinished);
        }
        let status = match self.fresh {
            Some(s) => s,
            None => {
                self.mask.fill(false);
                let status = self.constraint.fill_mask(&mut self.mask)?;
                self.mask.clear_tail();
                let words = self.mask.words_mut();
                let status = match status {
                    Status::Open | Status::OpenAccepting => {
                        for &(w, bits) in &self.forbidden {
                            words[w] &= !bits;
                        }
                        // A complete text with no other legal continuation is closed.
                        match (status, words.iter().any(|&w| w != 0)) {
                            (Status::Open, false) => return Err(GrammarError::NoTokenAllowed),
                            (Status::OpenAccepting, false) => Status::OnlyEos,
                            _ => status,
                        }
                    }
                    Status::OnlyEos => {
                        words.iter_mut().for_each(|w| *w = 0);
                        Status::OnlyEos
                    }
                    Status::Finished => {
                        return Err(GrammarError::Engine(
                            "the constraint reported Finished before end-of-sequence".into(),
                        ))
                    }
                };
                if status.eos_allowed() {
                    for &(w, bits) in &self.eos_words {
                        words[w] |= bits;
                    }
                }
                self.fresh = Some(status);
                status
            }
        };
        Ok((&self.mask, status))
    }

    /// Sets every logit the grammar does not allow to `-inf` and returns the status.
    ///
    /// # Errors
    /// [`GrammarError::LengthMismatch`] when `logits` is not as long as the vocabulary,
    /// plus the errors of [`compute`](GrammarMask::compute).
    pub fn apply(&mut self, logits: &mut [f32]) -> Result<Status, GrammarError> {
        if logits.len() != self.vocab.len() {
            return Err(GrammarError::LengthMismatch {
                expected: self.vocab.len(),
                actual: logits.len(),
            });
        }
        let (mask, status) = self.compute()?;
        mask.apply(logits)
            .map_err(|e| GrammarError::Engine(e.to_string()))?;
        Ok(status)
    }

    /// True when `token` may come next.
    ///
    /// # Errors
    /// As [`compute`](GrammarMask::compute).
    pub fn is_allowed(&mut self, token: TokenId) -> Result<bool, GrammarError> {
        Ok(self.compute()?.0.is_allowed(token))
    }

    /// Commits the sampled `token` and returns the new status ([`Status::Finished`] for an
    /// end-of-sequence id).
    ///
    /// The status is the engine's, computed without a mask. An engine may report
    /// [`Status::OpenAccepting`] where the next [`compute`](GrammarMask::compute) finds
    /// that nothing but end-of-sequence can follow and reports [`Status::OnlyEos`].
    ///
    /// # Errors
    /// [`GrammarError::TokenRejected`] when the mask does not allow `token` (the state is
    /// unchanged), [`GrammarError::AlreadyFinished`] after end-of-sequence, or an engine
    /// error.
    pub fn commit(&mut self, token: TokenId) -> Result<Status, GrammarError> {
        if !self.compute()?.0.is_allowed(token) {
            return Err(GrammarError::TokenRejected { token });
        }
        if self.vocab.is_eos(token) {
            self.finished = true;
            self.committed += 1;
            return Ok(Status::Finished);
        }
        // The cached mask is dropped before the constraint moves, so that whatever the
        // constraint does (fail, or panic half way) the next compute asks it afresh.
        self.fresh = None;
        self.constraint.commit(token)?;
        self.committed += 1;
        self.constraint.status()
    }

    /// One constrained step: computes the mask, samples from `logits` under it with
    /// [`Sampler::sample_masked`] (or a [`Chain`](crate::Chain)'s, through
    /// [`SequenceSampler`]) and commits the token. Returns the sample and the status
    /// after the token ([`Status::Finished`] when it is end-of-sequence).
    ///
    /// This is a method of the grammar stage rather than of the [`Sampler`]: the stage
    /// owns the step's order (mask, draw, commit) and the rule that a drawn token is
    /// committed, while the sampler stays a plain consumer of masks, usable with any
    /// mask source.
    ///
    /// Either both states advance or neither does:
    /// - an error of [`compute`](Self::compute) (after end-of-sequence, an empty mask, an
    ///   engine failure) or of the sampler (a bad row, every allowed token banned) changes
    ///   nothing;
    /// - if the commit fails (an engine failure), the drawn token is taken back out of the
    ///   sampler's history with [`Sampler::rollback`]`(1)`, so the sampler's next draw
    ///   uses the same uniform again, and the grammar is as before (a failed commit leaves
    ///   its state unchanged);
    /// - if the engine took the token but then failed to report the new status, both keep
    ///   the token (as after [`commit`](Self::commit) returning that error) and the error
    ///   is returned;
    /// - a panic in the constraint (or in the sampler's own stages and processors)
    ///   propagates, and leaves both as an error would: a panic in the constraint's
    ///   `commit` takes the drawn token back out of the sampler, one in its `status`
    ///   after the commit went through leaves both with the token.
    ///
    /// # Example
    /// ```
    /// use std::sync::Arc;
    /// use logits::grammar::{Choice, GrammarMask, Status, TokenKind, Vocab};
    /// use logits::{Sampler, SamplingParams};
    ///
    /// let vocab = Arc::new(Vocab::new(
    ///     vec![b"y".to_vec(), b"es".to_vec(), b"no".to_vec(), b"<eos>".to_vec()],
    ///     vec![TokenKind::Text, TokenKind::Text, TokenKind::Text, TokenKind::Special],
    ///     vec![3],
    /// )?);
    /// let mut stage = GrammarMask::new(Box::new(Choice::new(vocab.clone(), &["yes", "no"])?), vocab.clone());
    /// let mut sampler = Sampler::new(SamplingParams::builder().seed(7).build()?, 4)?;
    ///
    /// // The model's favourites ("es", end-of-sequence) cannot come first.
    /// let logits = [0.5f32, 2.0, 0.1, 3.0];
    /// let mut text = Vec::new();
    /// loop {
    ///     let (out, status) = stage.sample(&mut sampler, &logits)?;
    ///     if status == Status::Finished {
    ///         break;
    ///     }
    ///     text.extend_from_slice(vocab.bytes(out.token));
    /// }
    /// assert!(text == b"yes" || text == b"no");
    /// assert_eq!(sampler.history().generated().len(), stage.committed());
    /// # Ok::<(), logits::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Grammar`] for the errors of [`compute`](Self::compute) and
    /// [`commit`](Self::commit); the errors of [`Sampler::sample_masked`], including
    /// [`Error::LengthMismatch`] when the sampler's vocabulary is not this stage's.
    pub fn sample<S: SequenceSampler, T: Logit>(
        &mut self,
        sampler: &mut S,
        logits: &[T],
    ) -> Result<(Sample, Status), Error> {
        let (mask, _) = self.compute()?;
        let out = sampler.sample_next(logits, Some(mask))?;
        let before = self.committed;
        // A panic in the constraint's callbacks is caught only to take the drawn token
        // back out of the sampler, as for an error, and is then resumed.
        let committed = catch_unwind(AssertUnwindSafe(|| self.commit(out.token)));
        let took = self.committed != before;
        match committed {
            Ok(Ok(status)) => Ok((out, status)),
            Ok(Err(e)) => {
                if !took {
                    sampler.rollback(1);
                }
                Err(e.into())
            }
            Err(panic) => {
                if !took {
                    sampler.rollback(1);
                }
                resume_unwind(panic)
            }
        }
    }

    /// The status for the tokens committed so far.
    ///
    /// # Errors
    /// An engine error.
    pub fn status(&mut self) -> Result<Status, GrammarError> {
        if self.finished {
            return Ok(Status::Finished);
        }
        match self.fresh {
            Some(s) => Ok(s),
            None => self.constraint.status(),
        }
    }

    /// Undoes the last `n` commits (end-of-sequence included).
    ///
    /// # Errors
    /// [`GrammarError::RollbackTooFar`] when fewer than `n` tokens were committed, or
    /// [`GrammarError::NotSupported`] when the constraint cannot roll back.
    pub fn rollback(&mut self, n: usize) -> Result<(), GrammarError> {
        if n > self.committed {
            return Err(GrammarError::RollbackTooFar {
                requested: n,
                available: self.committed,
            });
        }
        let mut rest = n;
        if self.finished && rest > 0 {
            rest -= 1;
        }
        if rest > 0 {
            self.fresh = None;
            self.constraint.rollback(rest)?;
        }
        if self.finished && n > 0 {
            self.finished = false;
        }
        self.committed -= n;
        self.fresh = None;
        Ok(())
    }
}
