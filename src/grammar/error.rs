//! [`GrammarError`]: every way building a vocabulary, compiling a constraint or stepping it
//! can fail.

use crate::TokenId;

/// The kind of grammar a compile error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GrammarKind {
    /// A regular expression.
    Regex,
    /// A JSON schema.
    JsonSchema,
    /// A Lark-style context-free grammar.
    Lark,
    /// A built-in constraint ([`TokenSet`](crate::grammar::TokenSet) or
    /// [`Choice`](crate::grammar::Choice)).
    BuiltIn,
}

impl std::fmt::Display for GrammarKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GrammarKind::Regex => "regex",
            GrammarKind::JsonSchema => "JSON schema",
            GrammarKind::Lark => "Lark grammar",
            GrammarKind::BuiltIn => "built-in constraint",
        })
    }
}

/// Why a vocabulary, a constraint or a step of constrained decoding was refused.
///
/// No input makes the grammar module panic: a malformed `tokenizer.json`, an invalid
/// grammar or a token the grammar does not allow each map to one variant here, and the
/// message names the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GrammarError {
    /// The tokenizer file is not valid JSON, or lacks a field the loader needs.
    #[error("malformed tokenizer.json: {0}")]
    TokenizerJson(String),
    /// The tokenizer is valid but is not a byte-level BPE tokenizer (for example a
    /// SentencePiece or WordPiece model), so its token strings cannot be mapped to bytes.
    #[error("tokenizer is not byte-level BPE: {0}")]
    NotByteLevelBpe(String),
    /// The parts given to build a [`Vocab`](crate::grammar::Vocab) are inconsistent.
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
    /// A `tokenizer.json` gives one token id to two different tokens: twice in
    /// `model.vocab`, twice in `added_tokens`, or to an added token whose content is not
    /// the text token it would replace. Which one the model was trained with cannot be
    /// told from the file, so the vocabulary is refused.
    #[error("token id {id} is given to two different tokens, {first:?} and {second:?}")]
    DuplicateTokenId {
        /// The id given twice.
        id: TokenId,
        /// The token that had it first, as the file spells it.
        first: String,
        /// The token that claimed it again, as the file spells it.
        second: String,
    },
    /// A regex, schema or grammar does not parse, or is not well formed.
    #[error("invalid {kind}: {message}")]
    InvalidGrammar {
        /// What kind of grammar was given.
        kind: GrammarKind,
        /// The engine's description of the problem.
        message: String,
    },
    /// The grammar is well formed but uses a feature the engine does not implement
    /// (for example the JSON-schema keyword `not`). Engines refuse these up front rather
    /// than ignoring them.
    #[error("unsupported feature in {kind}: {message}")]
    Unsupported {
        /// What kind of grammar was given.
        kind: GrammarKind,
        /// The engine's description of the feature.
        message: String,
    },
    /// The grammar is well formed but allows no output at all: no text over this
    /// vocabulary matches it (a regex such as `[a&&b]`, an unsatisfiable JSON schema, a
    /// Lark rule with no finite derivation, text that no token can spell). Reported when
    /// the grammar is compiled, so such a grammar never reaches sampling. A grammar that
    /// runs into a dead end only after some tokens gives
    /// [`NoTokenAllowed`](GrammarError::NoTokenAllowed) at that step instead.
    #[error("the {kind} allows nothing: {reason}")]
    EmptyLanguage {
        /// What kind of grammar was given.
        kind: GrammarKind,
        /// Why, in a few words.
        reason: String,
    },
    /// The token was not allowed at this step. The constraint's state is unchanged.
    #[error("token {token} is not allowed by the grammar at this step")]
    TokenRejected {
        /// The rejected token id.
        token: TokenId,
    },
    /// The grammar allows no token at all at this step, not even end-of-sequence. The
    /// sequence cannot go on; the mask is never handed out as a row of `-inf`.
    #[error("the grammar allows no token at this step")]
    NoTokenAllowed,
    /// End-of-sequence was already committed; the constraint takes no more tokens.
    #[error("the constraint is finished: end-of-sequence was already committed")]
    AlreadyFinished,
    /// `rollback(n)` asked for more tokens than were committed.
    #[error("cannot roll back {requested} tokens: only {available} were committed")]
    RollbackTooFar {
        /// Tokens asked for.
        requested: usize,
        /// Tokens committed so far.
        available: usize,
    },
    /// The constraint does not support an operation (for example rollback).
    #[error("operation not supported by this constraint: {0}")]
    NotSupported(&'static str),
    /// A mask or logits row does not cover the vocabulary.
    #[error("length mismatch: expected {expected} token slots, got {actual}")]
    LengthMismatch {
        /// The vocabulary's number of logit slots.
        expected: usize,
        /// The length given.
        actual: usize,
    },
    /// The engine failed while computing a mask or committing a token (for example a
    /// per-step limit was exceeded).
    #[error("grammar engine error: {0}")]
    Engine(String),
}
