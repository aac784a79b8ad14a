//! When to stop generating: stop tokens, stop strings, and token limits.
//!
//! This module is tokenizer-agnostic. The caller describes the conditions once
//! with [`StopConditions`], then for every generation drives a [`StopChecker`]:
//! after each sampled token it calls [`StopChecker::push`] with the token id and
//! the bytes that token decodes to. The checker answers with a [`Step`]: the text
//! that may be shown to the user now, and a [`FinishReason`] once generation
//! must end.
//!
//! * **Stop tokens** (for Qwen3: `<|im_end|>` 151645 and `<|endoftext|>` 151643)
//!   end generation as soon as one is pushed; the token's own text is never
//!   emitted.
//! * **Stop strings** are matched across token boundaries. Text that could be
//!   the start of a stop string is held back until it either completes the stop
//!   string (then it is dropped, together with everything after it) or turns out
//!   not to be one (then it is released).
//! * **Incomplete UTF-8** at the end of the pushed bytes is held back too, so a
//!   character split over two byte-level tokens comes out whole. Bytes that can
//!   never form valid UTF-8 are emitted as U+FFFD.
//! * **`max_tokens`** ends generation with [`FinishReason::Length`].
//! * **`min_tokens`**: while fewer tokens have been generated, the checker lists
//!   the stop tokens in [`StopChecker::banned_tokens`] so the caller can mask
//!   them out before sampling, and stop strings do not match. A stop string
//!   matches when it *ends* in token `min_tokens` or later, even if it began
//!   before: the text of the first tokens counts toward it, as in vLLM (which
//!   skips the check below `min_tokens` and then searches the whole output).
//!   So text that could start a stop string is held back below `min_tokens` too,
//!   and an occurrence that ends within the first `min_tokens - 1` tokens is
//!   released as text.
//!
//! Once warm (its buffers have grown to the longest piece seen), the checker
//! does not allocate per token. [`StopChecker`] borrows its conditions;
//! [`OwnedStopChecker`] owns them (an `Arc`), for a per-request struct that
//! cannot hold a borrow; both decide the same.
//!
//! ```
//! use logits::stop::{FinishReason, StopChecker, StopConditions};
//!
//! let conditions = StopConditions::builder()
//!     .stop_tokens([151645, 151643])
//!     .stop_strings(["\nUser:"])
//!     .max_tokens(64)
//!     .build()?;
//! let mut checker = StopChecker::new(&conditions);
//! let mut shown = String::new();
//! for (token, piece) in [(10, "Basil"), (11, ".\nUs"), (12, "er: more")] {
//!     let step = checker.push(token, piece.as_bytes());
//!     shown.push_str(step.text);
//!     if let Some(reason) = step.finish {
//!         assert_eq!(reason, FinishReason::StopString(0));
//!         break;
//!     }
//! }
//! assert_eq!(shown, "Basil.");
//! # Ok::<(), logits::stop::StopError>(())
//! ```

use std::fmt;
use std::sync::Arc;

use crate::TokenId;

/// Why generation ended.
///
/// ```
/// use logits::stop::FinishReason;
///
/// assert_eq!(FinishReason::StopToken(151645).to_string(), "stop token 151645");
/// assert_eq!(FinishReason::Length.openai_name(), "length");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum FinishReason {
    /// One of the stop tokens was generated (for a chat model usually the
    /// end-of-turn token). Carries the token id.
    StopToken(TokenId),
    /// A stop string appeared in the generated text. Carries its index in the
    /// list given to [`StopConditionsBuilder::stop_strings`].
    StopString(usize),
    /// `max_tokens` tokens were generated.
    Length,
}

impl FinishReason {
    /// The name OpenAI-compatible APIs use for this reason: `"stop"` for a stop
    /// token or stop string, `"length"` for the token limit.
    ///
    /// ```
    /// use logits::stop::FinishReason;
    ///
    /// assert_eq!(FinishReason::StopString(0).openai_name(), "stop");
    /// ```
    pub fn openai_name(&self) -> &'static str {
        match self {
            FinishReason::StopToken(_) | FinishReason::StopString(_) => "stop",
            FinishReason::Length => "length",
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinishReason::StopToken(id) => write!(f, "stop token {id}"),
            FinishReason::StopString(i) => write!(f, "stop string {i}"),
            FinishReason::Length => f.write_str("length"),
        }
    }
}

/// An invalid set of stop conditions.
///
/// ```
/// use logits::stop::{StopConditions, StopError};
///
/// let err = StopConditions::builder().stop_strings([""]).build().unwrap_err();
/// assert_eq!(err, StopError::EmptyStopString { index: 0 });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StopError {
    /// A stop string is empty; it would match before any text.
    #[error("stop string {index} is empty")]
    EmptyStopString {
        /// Index of the empty string in the list given to the builder.
        index: usize,
    },
    /// `max_tokens` is zero, so not even one token could be generated.
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    /// `min_tokens` is larger than `max_tokens`.
    #[error("min_tokens ({min}) exceeds max_tokens ({max})")]
    MinExceedsMax {
        /// The requested minimum.
        min: usize,
        /// The requested maximum.
        max: usize,
    },
}

/// The conditions that end a generation, validated and shareable between
/// generations. Build with [`StopConditions::builder`]; drive with
/// [`StopChecker`].
///
/// ```
/// use logits::stop::StopConditions;
///
/// let c = StopConditions::builder().stop_tokens([7, 3, 7]).max_tokens(10).build()?;
/// assert_eq!(c.stop_tokens(), &[3, 7]);
/// assert_eq!(c.max_tokens(), Some(10));
/// # Ok::<(), logits::stop::StopError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "StopConditionsBuilder"))]
pub struct StopConditions {
    stop_tokens: Vec<TokenId>,
    stop_strings: Vec<String>,
    max_tokens: Option<usize>,
    min_tokens: usize,
}

impl StopConditions {
    /// Starts a builder with no conditions: no stop tokens, no stop strings,
    /// no token limit, no minimum.
    ///
    /// ```
    /// use logits::stop::StopConditions;
    ///
    /// let c = StopConditions::builder().build()?;
    /// assert!(c.stop_tokens().is_empty() && c.max_tokens().is_none());
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn builder() -> StopConditionsBuilder {
        StopConditionsBuilder::default()
    }

    /// The stop token ids, sorted and without duplicates.
    ///
    /// ```
    /// use logits::stop::StopConditions;
    ///
    /// let c = StopConditions::builder().stop_tokens([151645, 151643]).build()?;
    /// assert_eq!(c.stop_tokens(), &[151643, 151645]);
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn stop_tokens(&self) -> &[TokenId] {
        &self.stop_tokens
    }

    /// The stop strings, in the order given (a [`FinishReason::StopString`]
    /// index refers to this list).
    ///
    /// ```
    /// use logits::stop::StopConditions;
    ///
    /// let c = StopConditions::builder().stop_strings(["END", "\n\n"]).build()?;
    /// assert_eq!(c.stop_strings(), &["END".to_string(), "\n\n".to_string()]);
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn stop_strings(&self) -> &[String] {
        &self.stop_strings
    }

    /// The maximum number of generated tokens, if limited.
    ///
    /// ```
    /// use logits::stop::StopConditions;
    ///
    /// assert_eq!(StopConditions::builder().max_tokens(5).build()?.max_tokens(), Some(5));
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn max_tokens(&self) -> Option<usize> {
        self.max_tokens
    }

    /// The number of tokens that must be generated before a stop token may be
    /// drawn or a stop string may match. A stop string matches when it ends in
    /// token `min_tokens` or later, even if it began in an earlier token.
    ///
    /// ```
    /// use logits::stop::StopConditions;
    ///
    /// assert_eq!(StopConditions::builder().min_tokens(2).build()?.min_tokens(), 2);
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn min_tokens(&self) -> usize {
        self.min_tokens
    }

    /// Whether `token` is one of the stop tokens.
    ///
    /// ```
    /// use logits::stop::StopConditions;
    ///
    /// let c = StopConditions::builder().stop_tokens([151645]).build()?;
    /// assert!(c.is_stop_token(151645) && !c.is_stop_token(1));
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn is_stop_token(&self, token: TokenId) -> bool {
        self.stop_tokens.binary_search(&token).is_ok()
    }
}

/// Builder for [`StopConditions`]; see [`StopConditions::builder`].
///
/// ```
/// use logits::stop::StopConditions;
///
/// let c = StopConditions::builder()
///     .stop_tokens([151645, 151643])
///     .stop_strings(["</answer>"])
///     .max_tokens(256)
///     .min_tokens(1)
///     .build()?;
/// assert_eq!(c.min_tokens(), 1);
/// # Ok::<(), logits::stop::StopError>(())
/// ```
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct StopConditionsBuilder {
    stop_tokens: Vec<TokenId>,
    stop_strings: Vec<String>,
    max_tokens: Option<usize>,
    min_tokens: usize,
}

impl StopConditionsBuilder {
    /// Adds token ids that end generation when drawn (added to any given
    /// before).
    ///
    /// ```
    /// use logits::stop::StopConditions;
    ///
    /// let c = StopConditions::builder().stop_tokens([1]).stop_tokens([2]).build()?;
    /// assert_eq!(c.stop_tokens(), &[1, 2]);
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn stop_tokens(mut self, tokens: impl IntoIterator<Item = TokenId>) -> Self {
        self.stop_tokens.extend(tokens);
        self
    }

    /// Adds strings that end generation when they appear in the generated
    /// text (added to any given before). They must not be empty.
    ///
    /// ```
    /// use logits::stop::StopConditions;
    ///
    /// let c = StopConditions::builder().stop_strings(["a"]).stop_strings([String::from("b")]).build()?;
    /// assert_eq!(c.stop_strings().len(), 2);
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn stop_strings<S: Into<String>>(mut self, strings: impl IntoIterator<Item = S>) -> Self {
        self.stop_strings
            .extend(strings.into_iter().map(Into::into));
        self
    }

    /// Ends generation with [`FinishReason::Length`] after `n` tokens
    /// (`n >= 1`).
    ///
    /// ```
    /// use logits::stop::StopConditions;
    ///
    /// assert!(StopConditions::builder().max_tokens(0).build().is_err());
    /// ```
    pub fn max_tokens(mut self, n: usize) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Requires `n` generated tokens before a stop token may be drawn or a
    /// stop string may match (`n <= max_tokens`). A stop string that ends in
    /// token `n` or later matches even if it began in an earlier token; one that
    /// ends earlier is ordinary text.
    ///
    /// ```
    /// use logits::stop::StopConditions;
    ///
    /// assert!(StopConditions::builder().max_tokens(2).min_tokens(3).build().is_err());
    /// ```
    pub fn min_tokens(mut self, n: usize) -> Self {
        self.min_tokens = n;
        self
    }

    /// Validates and builds the conditions.
    ///
    /// # Errors
    /// [`StopError::EmptyStopString`], [`StopError::ZeroMaxTokens`] or
    /// [`StopError::MinExceedsMax`].
    ///
    /// ```
    /// use logits::stop::{StopConditions, StopError};
    ///
    /// let err = StopConditions::builder().max_tokens(1).min_tokens(2).build().unwrap_err();
    /// assert_eq!(err, StopError::MinExceedsMax { min: 2, max: 1 });
    /// ```
    pub fn build(self) -> Result<StopConditions, StopError> {
        if let Some(index) = self.stop_strings.iter().position(String::is_empty) {
            return Err(StopError::EmptyStopString { index });
        }
        if let Some(max) = self.max_tokens {
            if max == 0 {
                return Err(StopError::ZeroMaxTokens);
            }
            if self.min_tokens > max {
                return Err(StopError::MinExceedsMax {
                    min: self.min_tokens,
                    max,
                });
            }
        }
        let mut stop_tokens = self.stop_tokens;
        stop_tokens.sort_unstable();
        stop_tokens.dedup();
        Ok(StopConditions {
            stop_tokens,
            stop_strings: self.stop_strings,
            max_tokens: self.max_tokens,
            min_tokens: self.min_tokens,
        })
    }
}

/// [`StopConditionsBuilder::build`]. With the `serde` feature, `StopConditions`
/// deserialises through it: the fields of [`StopConditions`] (`stop_tokens`,
/// `stop_strings`, `max_tokens`, `min_tokens`), each optional, an unknown one refused,
/// and the result checked as the builder checks it.
///
/// ```
/// use logits::stop::{StopConditions, StopError};
///
/// let b = StopConditions::builder().max_tokens(1).min_tokens(2);
/// assert_eq!(StopConditions::try_from(b), Err(StopError::MinExceedsMax { min: 2, max: 1 }));
/// ```
impl TryFrom<StopConditionsBuilder> for StopConditions {
    type Error = StopError;

    fn try_from(b: StopConditionsBuilder) -> Result<Self, StopError> {
        b.build()
    }
}

/// What one [`StopChecker::push`] decided.
///
/// ```
/// use logits::stop::{StopChecker, StopConditions};
///
/// let c = StopConditions::builder().build()?;
/// let mut checker = StopChecker::new(&c);
/// let step = checker.push(5, b"hi");
/// assert_eq!((step.text, step.finish), ("hi", None));
/// # Ok::<(), logits::stop::StopError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step<'a> {
    /// Text that may be shown now: valid UTF-8, never part of a stop string.
    /// May be empty while text is held back.
    pub text: &'a str,
    /// `Some` once generation must end; the text above is then the last.
    pub finish: Option<FinishReason>,
}

/// The per-generation state that applies [`StopConditions`] to a stream of
/// tokens and their decoded bytes, borrowing the conditions.
///
/// Create one per generation (or [`reset`](StopChecker::reset) it to reuse its
/// buffers). See the [module documentation](self) for an example. A struct that
/// must own its checker (one per request, in a serving engine) uses
/// [`OwnedStopChecker`], which behaves the same.
#[derive(Debug, Clone)]
pub struct StopChecker<'c> {
    conditions: &'c StopConditions,
    state: CheckerState,
}

impl<'c> StopChecker<'c> {
    /// A checker for one generation under `conditions`.
    ///
    /// ```
    /// use logits::stop::{StopChecker, StopConditions};
    ///
    /// let c = StopConditions::builder().max_tokens(1).build()?;
    /// let mut checker = StopChecker::new(&c);
    /// assert!(checker.push(0, b"x").finish.is_some());
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn new(conditions: &'c StopConditions) -> Self {
        StopChecker {
            conditions,
            state: CheckerState::new(conditions),
        }
    }

    /// An owned checker with a copy of the conditions and this checker's state: it
    /// goes on exactly where this one stands.
    ///
    /// ```
    /// use logits::stop::{OwnedStopChecker, StopChecker, StopConditions};
    ///
    /// let c = StopConditions::builder().stop_strings(["STOP"]).build()?;
    /// let mut checker = StopChecker::new(&c);
    /// assert_eq!(checker.push(1, b"ok ST").text, "ok ");
    /// let mut owned: OwnedStopChecker = checker.to_owned_checker();
    /// assert!(owned.push(2, b"OP").finish.is_some());
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn to_owned_checker(&self) -> OwnedStopChecker {
        OwnedStopChecker {
            conditions: Arc::new(self.conditions.clone()),
            state: self.state.clone(),
        }
    }

    /// Forgets the current generation, keeping the buffers.
    ///
    /// ```
    /// use logits::stop::{StopChecker, StopConditions};
    ///
    /// let c = StopConditions::builder().max_tokens(1).build()?;
    /// let mut checker = StopChecker::new(&c);
    /// checker.push(0, b"x");
    /// checker.reset();
    /// assert_eq!((checker.generated(), checker.finish_reason()), (0, None));
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn reset(&mut self) {
        self.state.reset();
    }

    /// The conditions this checker applies.
    ///
    /// ```
    /// use logits::stop::{StopChecker, StopConditions};
    ///
    /// let c = StopConditions::builder().max_tokens(3).build()?;
    /// assert_eq!(StopChecker::new(&c).conditions().max_tokens(), Some(3));
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn conditions(&self) -> &'c StopConditions {
        self.conditions
    }

    /// How many tokens have been pushed (stop tokens included).
    ///
    /// ```
    /// use logits::stop::{StopChecker, StopConditions};
    ///
    /// let c = StopConditions::builder().build()?;
    /// let mut checker = StopChecker::new(&c);
    /// checker.push(1, b"a");
    /// assert_eq!(checker.generated(), 1);
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn generated(&self) -> usize {
        self.state.generated
    }

    /// Why generation ended, or `None` while it goes on.
    ///
    /// ```
    /// use logits::stop::{FinishReason, StopChecker, StopConditions};
    ///
    /// let c = StopConditions::builder().stop_tokens([9]).build()?;
    /// let mut checker = StopChecker::new(&c);
    /// checker.push(9, b"");
    /// assert_eq!(checker.finish_reason(), Some(FinishReason::StopToken(9)));
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.state.finished
    }

    /// The token ids to forbid for the next draw: the stop tokens while fewer
    /// than `min_tokens` tokens have been generated, otherwise none. Mask them
    /// out (or set their logits to minus infinity) before sampling.
    ///
    /// ```
    /// use logits::stop::{StopChecker, StopConditions};
    ///
    /// let c = StopConditions::builder().stop_tokens([151645]).min_tokens(1).build()?;
    /// let mut checker = StopChecker::new(&c);
    /// assert_eq!(checker.banned_tokens(), &[151645]);
    /// checker.push(42, b"Basil");
    /// assert!(checker.banned_tokens().is_empty());
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn banned_tokens(&self) -> &'c [TokenId] {
        self.state.banned_tokens(self.conditions)
    }

    /// Records one generated token and the bytes it decodes to, and returns the
    /// text that may be shown now and whether generation must end.
    ///
    /// A stop token ends generation at once and its `piece` is ignored; text
    /// held back until then is released. Pushing after generation has ended
    /// changes nothing and returns the same finish reason with empty text.
    ///
    /// A stop token drawn below `min_tokens` (the caller did not apply
    /// [`banned_tokens`](Self::banned_tokens)) still ends generation.
    ///
    /// ```
    /// use logits::stop::{FinishReason, StopChecker, StopConditions};
    ///
    /// let c = StopConditions::builder().stop_tokens([151645]).build()?;
    /// let mut checker = StopChecker::new(&c);
    /// assert_eq!(checker.push(1, b"Basil").text, "Basil");
    /// let step = checker.push(151645, b"<|im_end|>");
    /// assert_eq!((step.text, step.finish), ("", Some(FinishReason::StopToken(151645))));
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn push(&mut self, token: TokenId, piece: &[u8]) -> Step<'_> {
        self.state.push(self.conditions, token, piece)
    }

    /// Releases the text held back and returns it. Call it when generation
    /// ends for a reason outside these conditions (the caller stopped, a
    /// grammar completed), or at a boundary where pending text must come out
    /// first (such as the switch from reasoning to answer). Checking goes on
    /// afterwards, but a stop string can no longer span the flushed boundary.
    /// An incomplete UTF-8 sequence at the end comes out as U+FFFD.
    ///
    /// ```
    /// use logits::stop::{StopChecker, StopConditions};
    ///
    /// let c = StopConditions::builder().stop_strings(["STOP"]).build()?;
    /// let mut checker = StopChecker::new(&c);
    /// assert_eq!(checker.push(1, b"ok ST").text, "ok ");
    /// assert_eq!(checker.flush(), "ST");
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn flush(&mut self) -> &str {
        self.state.flush()
    }
}

/// A [`StopChecker`] that owns its conditions (behind an [`Arc`], so the `n`
/// samples of one request can share them), for a per-request struct that cannot
/// hold a borrow.
///
/// It decides exactly what a [`StopChecker`] over the same conditions decides,
/// push for push.
///
/// ```
/// use logits::stop::{FinishReason, OwnedStopChecker, StopConditions};
///
/// struct Request {
///     checker: OwnedStopChecker, // no lifetime to carry
/// }
///
/// let conditions = StopConditions::builder().stop_tokens([151645]).max_tokens(8).build()?;
/// let mut request = Request { checker: OwnedStopChecker::new(conditions) };
/// assert_eq!(request.checker.push(1, b"Basil").text, "Basil");
/// let step = request.checker.push(151645, b"");
/// assert_eq!(step.finish, Some(FinishReason::StopToken(151645)));
/// # Ok::<(), logits::stop::StopError>(())
/// ```
#[derive(Debug, Clone)]
pub struct OwnedStopChecker {
    conditions: Arc<StopConditions>,
    state: CheckerState,
}

impl OwnedStopChecker {
    /// A checker for one generation under `conditions` (a [`StopConditions`] or an
    /// `Arc` of one, shared with other checkers).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use logits::stop::{OwnedStopChecker, StopConditions};
    ///
    /// let shared = Arc::new(StopConditions::builder().max_tokens(2).build()?);
    /// let checkers: Vec<_> = (0..4).map(|_| OwnedStopChecker::new(shared.clone())).collect();
    /// assert_eq!(checkers[3].conditions().max_tokens(), Some(2));
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn new(conditions: impl Into<Arc<StopConditions>>) -> Self {
        let conditions = conditions.into();
        let state = CheckerState::new(&conditions);
        OwnedStopChecker { conditions, state }
    }

    /// Forgets the current generation, keeping the buffers (see
    /// [`StopChecker::reset`]).
    pub fn reset(&mut self) {
        self.state.reset();
    }

    /// The conditions this checker applies.
    pub fn conditions(&self) -> &StopConditions {
        &self.conditions
    }

    /// The shared handle to the conditions.
    pub fn shared_conditions(&self) -> &Arc<StopConditions> {
        &self.conditions
    }

    /// How many tokens have been pushed (stop tokens included).
    pub fn generated(&self) -> usize {
        self.state.generated
    }

    /// Why generation ended, or `None` while it goes on.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.state.finished
    }

    /// The token ids to forbid for the next draw (see
    /// [`StopChecker::banned_tokens`]).
    ///
    /// ```
    /// use logits::stop::{OwnedStopChecker, StopConditions};
    ///
    /// let c = StopConditions::builder().stop_tokens([151645]).min_tokens(1).build()?;
    /// let mut checker = OwnedStopChecker::new(c);
    /// assert_eq!(checker.banned_tokens(), &[151645]);
    /// checker.push(42, b"Basil");
    /// assert!(checker.banned_tokens().is_empty());
    /// # Ok::<(), logits::stop::StopError>(())
    /// ```
    pub fn banned_tokens(&self) -> &[TokenId] {
        self.state.banned_tokens(&self.conditions)
    }

    /// Records one generated token and the bytes it decodes to (see
    /// [`StopChecker::push`]).
    pub fn push(&mut self, token: TokenId, piece: &[u8]) -> Step<'_> {
        self.state.push(&self.conditions, token, piece)
    }

    /// Releases the text held back and returns it (see [`StopChecker::flush`]).
    pub fn flush(&mut self) -> &str {
        self.state.flush()
    }
}

impl From<StopChecker<'_>> for OwnedStopChecker {
    fn from(checker: StopChecker<'_>) -> Self {
        OwnedStopChecker {
            conditions: Arc::new(checker.conditions.clone()),
            state: checker.state,
        }
    }
}

/// What a checker remembers of one generation; the conditions are passed in.
#[derive(Debug, Clone)]
struct CheckerState {
    /// Bytes received but not yet emitted.
    pending: Vec<u8>,
    /// The text returned by the last call.
    out: String,
    generated: usize,
    /// How many of the first `pending` bytes were pushed before stop strings could
    /// match: a match must end past them.
    early: usize,
    finished: Option<FinishReason>,
}

impl CheckerState {
    fn new(conditions: &StopConditions) -> Self {
        let longest = conditions
            .stop_strings
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(0);
        CheckerState {
            pending: Vec::with_capacity(longest + 16),
            out: String::with_capacity(longest + 16),
            generated: 0,
            early: 0,
            finished: None,
        }
    }

    fn reset(&mut self) {
        self.pending.clear();
        self.out.clear();
        self.generated = 0;
        self.early = 0;
        self.finished = None;
    }

    fn banned_tokens<'c>(&self, conditions: &'c StopConditions) -> &'c [TokenId] {
        if self.generated < conditions.min_tokens {
            &conditions.stop_tokens
        } else {
            &[]
        }
    }

    fn push(&mut self, conditions: &StopConditions, token: TokenId, piece: &[u8]) -> Step<'_> {
        self.out.clear();
        if let Some(reason) = self.finished {
            return Step {
                text: &self.out,
                finish: Some(reason),
            };
        }
        self.generated += 1;
        if conditions.is_stop_token(token) {
            self.release_all();
            return self.finish(FinishReason::StopToken(token));
        }
        self.pending.extend_from_slice(piece);
        let match_strings = self.generated >= conditions.min_tokens;
        if match_strings {
            if let Some((at, index)) = self.find_stop_string(conditions) {
                self.pending.truncate(at);
                self.release_all();
                return self.finish(FinishReason::StopString(index));
            }
        }
        if conditions.max_tokens == Some(self.generated) {
            self.release_all();
            return self.finish(FinishReason::Length);
        }
        // Below `min_tokens` too, a suffix that could start a stop string is held
        // back: the stop string may still end in a later token.
        let hold = self
            .stop_prefix_len(conditions)
            .max(incomplete_utf8_tail(&self.pending));
        let emit = self.pending.len() - hold;
        push_lossy(&mut self.out, &self.pending[..emit]);
        self.pending.drain(..emit);
        // What is left was searched already when strings match; below `min_tokens`
        // it may hold a whole stop string that must not match later.
        self.early = if match_strings { 0 } else { self.pending.len() };
        Step {
            text: &self.out,
            finish: None,
        }
    }

    fn flush(&mut self) -> &str {
        self.out.clear();
        self.release_all();
        self.early = 0;
        &self.out
    }

    fn finish(&mut self, reason: FinishReason) -> Step<'_> {
        self.finished = Some(reason);
        Step {
            text: &self.out,
            finish: Some(reason),
        }
    }

    /// Moves every pending byte to `out`.
    fn release_all(&mut self) {
        push_lossy(&mut self.out, &self.pending);
        self.pending.clear();
    }

    /// The earliest complete stop string in `pending` that ends past the `early`
    /// bytes: (start, index). Ties at the same start go to the string listed first.
    fn find_stop_string(&self, conditions: &StopConditions) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for (index, stop) in conditions.stop_strings.iter().enumerate() {
            let stop = stop.as_bytes();
            let limit = best.map_or(self.pending.len(), |(at, _)| at + stop.len());
            let hay = &self.pending[..limit.min(self.pending.len())];
            // The first start whose match would end past the early bytes.
            let from = (self.early + 1).saturating_sub(stop.len());
            if let Some(at) = hay.get(from..).and_then(|h| find(h, stop)) {
                let at = at + from;
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, index));
                }
            }
        }
        best
    }

    /// Length of the longest suffix of `pending` that is a proper prefix of
    /// some stop string.
    fn stop_prefix_len(&self, conditions: &StopConditions) -> usize {
        let mut hold = 0;
        for stop in &conditions.stop_strings {
            let stop = stop.as_bytes();
            let max = (stop.len() - 1).min(self.pending.len());
            for len in (hold + 1..=max).rev() {
                if self.pending[self.pending.len() - len..] == stop[..len] {
                    hold = len;
                    break;
                }
            }
        }
        hold
    }
}

/// First position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Number of bytes at the end of `bytes` that start a UTF-8 sequence which is
/// not yet complete (0 to 3).
fn incomplete_utf8_tail(bytes: &[u8]) -> usize {
    let n = bytes.len();
    for back in 1..=n.min(3) {
        let b = bytes[n - back];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // continuation byte: look further back for the lead
        }
        let need = match b {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0, // ASCII or a byte that never starts a sequence
        };
        return if need > back { back } else { 0 };
    }
    0
}

/// Appends `bytes` to `out` as UTF-8, replacing invalid sequences by U+FFFD,
/// without allocating beyond `out`'s growth.
fn push_lossy(out: &mut String, mut bytes: &[u8]) {
    loop {
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                out.push_str(s);
                return;
            }
            Err(e) => {
                let (valid, rest) = bytes.split_at(e.valid_up_to());
                // `valid` was just checked by `from_utf8`, so this cannot fail.
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                out.push(char::REPLACEMENT_CHARACTER);
                let skip = e.error_len().unwrap_or(rest.len());
                bytes = &rest[skip..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_tail_lengths() {
        assert_eq!(incomplete_utf8_tail(b"abc"), 0);
        assert_eq!(incomplete_utf8_tail(&[b'a', 0xE2]), 1);
        assert_eq!(incomplete_utf8_tail(&[0xE2, 0x82]), 2);
        assert_eq!(incomplete_utf8_tail(&[0xE2, 0x82, 0xAC]), 0);
        assert_eq!(incomplete_utf8_tail(&[0xF0, 0x9F, 0x8C]), 3);
        assert_eq!(incomplete_utf8_tail(&[0xF0, 0x9F, 0x8C, 0xBF]), 0);
        assert_eq!(incomplete_utf8_tail(&[0xFF]), 0);
    }

    #[test]
    fn lossy_replaces_invalid_bytes() {
        let mut s = String::new();
        push_lossy(&mut s, &[b'a', 0xFF, b'b', 0xE2, 0x82]);
        assert_eq!(s, "a\u{FFFD}b\u{FFFD}");
    }
}
