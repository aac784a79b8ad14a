//! [`Error`]: every way sampling can refuse its input.

use crate::TokenId;

/// Why a parameter, a row of logits or a history was refused.
///
/// Parameters are checked once, when [`SamplingParams`](crate::SamplingParams) or a
/// [`Sampler`](crate::Sampler) is built; logits and history are checked on every call. No
/// input makes the crate panic, and no bad input yields a token: each case of the README's
/// bad-input table maps to exactly one variant here.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A parameter is outside its documented range.
    #[error("invalid parameter {name} = {value}: expected {expected}")]
    InvalidParameter {
        /// The parameter's name, as in [`SamplingParams`](crate::SamplingParams).
        name: &'static str,
        /// The value given (integers are widened to `f64`).
        value: f64,
        /// The accepted range, in words.
        expected: &'static str,
    },
    /// The logits row is empty, or the vocabulary size is zero.
    #[error("empty logits row or vocabulary")]
    EmptyVocabulary,
    /// The declared vocabulary is larger than the logits row.
    #[error("vocabulary of {vocab_size} tokens does not fit a logits row of {row_len}")]
    VocabLargerThanRow {
        /// The declared vocabulary size.
        vocab_size: usize,
        /// The row's length.
        row_len: usize,
    },
    /// A buffer does not have the length the sampler was built for.
    #[error("length mismatch: expected {expected}, got {actual}")]
    LengthMismatch {
        /// The expected length.
        expected: usize,
        /// The length given.
        actual: usize,
    },
    /// A logit is NaN.
    #[error("logit {index} is NaN")]
    NanLogit {
        /// Token id of the first NaN logit.
        index: usize,
    },
    /// A logit is `+inf`. (`-inf` is legal: it marks a banned token.)
    #[error("logit {index} is +inf")]
    InfiniteLogit {
        /// Token id of the first `+inf` logit.
        index: usize,
    },
    /// A token id in a history, a bias map or a mask is not below the vocabulary size.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    TokenOutOfRange {
        /// The offending id.
        id: TokenId,
        /// The vocabulary size it was checked against.
        vocab_size: usize,
    },
    /// Every token is banned: after the adjustments every logit is `-inf`, so there is
    /// nothing to draw from.
    #[error("no candidate token: every logit is -inf after the adjustments")]
    NoCandidates,
    /// The buffers for a size within its documented limit could not be allocated (the
    /// allocator refused, or they exceed the address space). Nothing was changed: the
    /// sampler, chain or stage that was being built or grown is as before.
    #[error("cannot allocate room for {value} (the {name} given)")]
    OutOfMemory {
        /// The size argument the buffers were for (`vocab_size`, `additional`, ...).
        name: &'static str,
        /// The size given.
        value: usize,
    },
    /// A draft distribution given to speculative verification
    /// ([`speculative`](crate::speculative)) is not a probability distribution: an entry
    /// is NaN, infinite or negative, its sum is further than
    /// [`DRAFT_SUM_TOLERANCE`](crate::speculative::DRAFT_SUM_TOLERANCE) from 1, or a
    /// sparse distribution's bounds do not split its pairs.
    #[error("draft distribution {position}: {reason} (got {value})")]
    InvalidDraftDistribution {
        /// The draft position (0 for the first draft token).
        position: usize,
        /// The offending entry, sum or bound.
        value: f64,
        /// What was expected, in words.
        reason: &'static str,
    },
    /// Speculative verification was given more draft tokens than its target rows can
    /// check: `k` draft tokens need `k + 1` target rows (one per draft token, and one for
    /// the token after them).
    #[error("{draft_tokens} draft tokens need {} target rows, got {target_rows}", draft_tokens + 1)]
    DraftTooLong {
        /// The number of draft tokens given.
        draft_tokens: usize,
        /// The number of target rows given.
        target_rows: usize,
    },
    /// A configuration file (such as `generation_config.json`) could not be read.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A custom [`Chain`](crate::Chain) is not well formed.
    #[error("invalid chain: {0}")]
    InvalidChain(&'static str),
    /// A grammar constraint refused a vocabulary, a grammar or a step (see
    /// [`GrammarError`](crate::grammar::GrammarError)). Converts from `GrammarError`, so
    /// `?` works across sampling and grammar calls.
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
}
