//! Regex, JSON-schema and Lark constraints through the [llguidance] engine (cargo feature
//! `llguidance`).
//!
//! [`LlgEngine`] is built once per vocabulary: it turns the [`Vocab`] into llguidance's
//! token trie (text tokens as their bytes, special tokens as `0xFF` + name, padding as
//! empty) and precomputes the vocabulary slices llguidance uses for dense masks. On
//! Qwen3 this takes about half a second and some 70 MiB. Compiling a grammar is then
//! sub-millisecond to a few milliseconds.
//!
//! The engine is fed from the vocabulary's bytes only; it does not load the Hugging Face
//! tokenizer. Where llguidance forces a run of bytes it tokenizes them by greedy longest
//! match, and its masks allow every token whose bytes fit the grammar, not only the
//! tokenizer's canonical split.
//!
//! Commits use llguidance's validating `try_consume_tokens`, so a rejected token leaves
//! the matcher unchanged instead of putting it in an error state.
//!
//! A grammar that allows nothing (`[a&&b]`, an unsatisfiable schema, text no token can
//! spell) is refused when it is compiled, with [`GrammarError::EmptyLanguage`]: compiling
//! computes the first mask, which the constraint then keeps for its first step (and
//! every clone's). A dead end that only shows after some tokens is
//! [`GrammarError::NoTokenAllowed`] at that step, and the constraint stays at the tokens
//! committed so far, so it can still roll back. Engine errors carry llguidance's short
//! message, without its internal state.
//!
//! The single-byte token `0xFF` (Qwen3 id 187) is never allowed: llguidance reserves that
//! byte as its special-token marker. No valid UTF-8 text contains it.
//!
//! [llguidance]: https://github.com/guidance-ai/llguidance

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use llguidance::api::{GrammarWithLexer, StopReason, TopLevelGrammar};
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};

use crate::grammar::constraint::{Constraint, Status};
use crate::grammar::error::{GrammarError, GrammarKind};
use crate::grammar::vocab::{TokenKind, Vocab};
use crate::mask::TokenMask;
use crate::TokenId;

/// The llguidance engine for one vocabulary. Build it once per model and share it; it
/// is `Send + Sync`.
///
/// # Example
/// ```
/// use std::sync::Arc;
/// use logits::grammar::{GrammarMask, LlgEngine, Status, TokenKind, Vocab};
///
/// let mut tokens: Vec<Vec<u8>> = (0u8..128).map(|b| vec![b]).collect();
/// let mut kinds = vec![TokenKind::Text; 128];
/// tokens.push(b"<eos>".to_vec());
/// kinds.push(TokenKind::Special);
/// let vocab = Arc::new(Vocab::new(tokens, kinds, vec![128])?);
///
/// let engine = LlgEngine::new(vocab.clone())?;
/// let mut stage = GrammarMask::new(Box::new(engine.regex("[0-9]{2}")?), vocab);
/// assert_eq!(stage.compute()?.0.count_allowed(), 10);
/// stage.commit(b'4' as u32)?;
/// stage.commit(b'2' as u32)?;
/// assert_eq!(stage.compute()?.1, Status::OnlyEos);
/// # Ok::<(), logits::grammar::GrammarError>(())
/// ```
#[derive(Clone)]
pub struct LlgEngine {
    vocab: Arc<Vocab>,
    factory: Arc<ParserFactory>,
}

impl std::fmt::Debug for LlgEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlgEngine")
            .field("vocab_len", &self.vocab.len())
            .finish_non_exhaustive()
    }
}

/// llguidance's message without the marker it appends when its state dump is off.
fn short(message: String) -> String {
    match message.strip_suffix("\n<non-verbose/>") {
        Some(s) => s.to_owned(),
        None => message,
    }
}

fn engine_err(e: impl std::fmt::Display) -> GrammarError {
    GrammarError::Engine(short(e.to_string()))
}

/// True for llguidance's "no token allowed" error: the mask it computed was empty, not
/// even end-of-sequence.
fn is_dead_end(e: &impl std::fmt::Display) -> bool {
    e.to_string().lines().next() == Some(StopReason::NoExtensionBias.to_string().as_str())
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

/// Sorts a compile error into "unsupported feature" or "invalid grammar".
fn compile_err(kind: GrammarKind, e: impl std::fmt::Display) -> GrammarError {
    let message = short(e.to_string());
    let lower = message.to_lowercase();
    if lower.starts_with("unsatisfiable") || lower.contains(": unsatisfiable") {
        return GrammarError::EmptyLanguage {
            kind,
            reason: message,
        };
    }
    let unsupported = [
        "not supported",
        "unsupported",
        "unimplemented",
        "unknown format",
    ]
    .iter()
    .any(|m| lower.contains(m));
    if unsupported {
        GrammarError::Unsupported { kind, message }
    } else {
        GrammarError::InvalidGrammar { kind, message }
    }
}

impl LlgEngine {
    /// Builds the engine for `vocab`.
    ///
    /// # Errors
    /// [`GrammarError::Engine`] when llguidance refuses the vocabulary (for example two
    /// tokens with the same bytes).
    pub fn new(vocab: Arc<Vocab>) -> Result<Self, GrammarError> {
        let n = vocab.len();
        let words: Vec<Vec<u8>> = (0..n as TokenId)
            .map(|id| match vocab.kind(id) {
                Some(TokenKind::Text) => vocab.bytes(id).to_vec(),
                Some(TokenKind::Special) => {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(vocab.bytes(id));
                    w
                }
                _ => Vec::new(),
            })
            .collect();
        let eos = vocab.eos().to_vec();
        let built = catch_unwind(AssertUnwindSafe(|| {
            let info = TokRxInfo::new(n as u32, eos[0]);
            let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
            let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
            ParserFactory::new_simple(&env)
        }))
        .map_err(|p| GrammarError::Engine(panic_message(p.as_ref())))?;
        let mut factory = built.map_err(engine_err)?;
        factory.quiet();
        // Errors name the problem; llguidance's state dump would only bury it.
        factory.limits_mut().verbose_errors = false;
        Ok(LlgEngine {
            vocab,
            factory: Arc::new(factory),
        })
    }

    /// The vocabulary the engine was built for.
    pub fn vocab(&self) -> &Arc<Vocab> {
        &self.vocab
    }

    /// Compiles a regular expression (Rust `regex` syntax without look-around; the whole
    /// output must match).
    ///
    /// # Errors
    /// [`GrammarError::InvalidGrammar`] or [`GrammarError::Unsupported`] naming the
    /// problem; [`GrammarError::EmptyLanguage`] when it allows no output over this
    /// vocabulary.
    pub fn regex(&self, regex: &str) -> Result<LlgConstraint, GrammarError> {
        self.compile(
            GrammarKind::Regex,
            Ok(TopLevelGrammar::from_regex(regex)),
            String::new(),
        )
    }

    /// Compiles a JSON schema (JSON text) with the default [`JsonOptions`]: at most one
    /// space between JSON tokens ([`Whitespace::SingleSpace`]), so the output ends even
    /// when the model prefers whitespace. Unsupported keywords are errors, not ignored.
    ///
    /// Options the schema sets itself in llguidance's `"x-guidance"` object win; see
    /// [`json_schema_with`](Self::json_schema_with).
    ///
    /// # Errors
    /// [`GrammarError::InvalidGrammar`] when the text is not JSON or not a valid schema,
    /// [`GrammarError::Unsupported`] for a keyword or format llguidance does not implement,
    /// [`GrammarError::EmptyLanguage`] for a schema no value satisfies (`false`,
    /// `{"enum": []}`, `minLength` above `maxLength`) or whose values no token can spell.
    pub fn json_schema(&self, schema: &str) -> Result<LlgConstraint, GrammarError> {
        self.json_schema_with(schema, JsonOptions::default())
    }

    /// Compiles a JSON schema (JSON text) with `options`.
    ///
    /// The options are written into the schema's top-level `"x-guidance"` object, the
    /// one llguidance reads its JSON options from. A schema that has one keeps it: a
    /// `whitespace_flexible` or `whitespace_pattern` it sets wins over
    /// [`JsonOptions::whitespace`], and its other fields (`lenient`, `coerce_one_of`,
    /// separators, ...) apply as llguidance documents them. The schema `true` is read as
    /// `{}`, so that the options apply to it too.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use logits::grammar::{GrammarMask, JsonOptions, LlgEngine, TokenKind, Vocab, Whitespace};
    ///
    /// let mut tokens: Vec<Vec<u8>> = (0u8..128).map(|b| vec![b]).collect();
    /// let mut kinds = vec![TokenKind::Text; 128];
    /// tokens.push(b"<eos>".to_vec());
    /// kinds.push(TokenKind::Special);
    /// let vocab = Arc::new(Vocab::new(tokens, kinds, vec![128])?);
    /// let engine = LlgEngine::new(vocab.clone())?;
    /// let schema = r#"{"type": "array", "items": {"type": "boolean"}}"#;
    ///
    /// // After `[`, compact JSON allows no whitespace ...
    /// let compact = JsonOptions::default().with_whitespace(Whitespace::Compact);
    /// let mut stage = GrammarMask::new(Box::new(engine.json_schema_with(schema, compact)?), vocab.clone());
    /// stage.commit(b'[' as u32)?;
    /// assert!(!stage.is_allowed(b' ' as u32)?);
    ///
    /// // ... the default one space, and no second one ...
    /// let mut stage = GrammarMask::new(Box::new(engine.json_schema(schema)?), vocab.clone());
    /// stage.commit(b'[' as u32)?;
    /// stage.commit(b' ' as u32)?;
    /// assert!(!stage.is_allowed(b' ' as u32)? && !stage.is_allowed(b'\n' as u32)?);
    ///
    /// // ... and the schema's own `x-guidance` wins over the options.
    /// let flexible = r#"{"type": "array", "x-guidance": {"whitespace_flexible": true}}"#;
    /// let mut stage = GrammarMask::new(Box::new(engine.json_schema_with(flexible, compact)?), vocab);
    /// for b in *b"[ \n\n  " {
    ///     stage.commit(b as u32)?;
    /// }
    /// # Ok::<(), logits::grammar::GrammarError>(())
    /// ```
    ///
    /// # Errors
    /// As [`json_schema`](Self::json_schema).
    pub fn json_schema_with(
        &self,
        schema: &str,
        options: JsonOptions,
    ) -> Result<LlgConstraint, GrammarError> {
        let text = if schema.trim() == "true" {
            "{}"
        } else {
            schema
        };
        let grammar = TopLevelGrammar::from_tagged_str("json_schema", text)
            .map(|mut g| {
                if let Some(first) = g.grammars.first_mut() {
                    options.write_into(first);
                }
                g
            })
            .map_err(|e| format!("the schema is not valid JSON: {e}"));
        self.compile(GrammarKind::JsonSchema, grammar, String::new())
    }

    /// Compiles a Lark-style context-free grammar (llguidance's dialect: regex terminals,
    /// `%json`, special tokens written `<|im_end|>` or `<[151645]>`).
    ///
    /// # Errors
    /// [`GrammarError::InvalidGrammar`] or [`GrammarError::Unsupported`] naming the
    /// problem; [`GrammarError::EmptyLanguage`] when it allows no output over this
    /// vocabulary.
    pub fn lark(&self, grammar: &str) -> Result<LlgConstraint, GrammarError> {
        self.compile(
            GrammarKind::Lark,
            Ok(TopLevelGrammar::from_lark(grammar.to_owned())),
            grammar.to_owned(),
        )
    }

    fn compile(
        &self,
        kind: GrammarKind,
        grammar: Result<TopLevelGrammar, String>,
        source: String,
    ) -> Result<LlgConstraint, GrammarError> {
        let grammar = grammar.map_err(|e| compile_err(kind, e))?;
        let factory = &self.factory;
        let parser = catch_unwind(AssertUnwindSafe(|| factory.create_parser(grammar)))
            .map_err(|p| compile_err(kind, panic_message(p.as_ref())))?
            .map_err(|e| compile_err(kind, e))?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(compile_err(kind, e));
        }
        let start = matcher.clone();
        // The first mask, computed now so that a grammar that allows nothing is refused
        // here rather than at the first step, which then reuses it.
        let initial = if matcher.is_stopped() {
            None
        } else {
            match matcher.compute_mask() {
                Ok(mask) => Some(Arc::new(mask)),
                Err(e) if is_dead_end(&e) => {
                    return Err(GrammarError::EmptyLanguage {
                        kind,
                        reason: "no text over this vocabulary matches it".into(),
                    })
                }
                Err(e) => return Err(engine_err(e)),
            }
        };
        // Special tokens the grammar names, by name or as `<[id]>`. llguidance itself
        // decides whether they are reachable; this list only keeps the stage from removing
        // them.
        let named = self
            .vocab
            .special_tokens()
            .iter()
            .copied()
            .filter(|&id| {
                !source.is_empty()
                    && (std::str::from_utf8(self.vocab.bytes(id))
                        .is_ok_and(|name| source.contains(name))
                        || source.contains(&format!("<[{id}]>")))
            })
            .collect();
        Ok(LlgConstraint {
            matcher,
            start,
            initial,
            tokens: Vec::new(),
            named,
        })
    }
}

/// How much whitespace a JSON schema's output may put between its tokens (between `{`,
/// a key, `:`, a value, `,`, `}`, ...; whitespace inside strings is the string's).
///
/// llguidance's own default is [`Whitespace::Flexible`]: any run of whitespace, at every
/// gap. A model that likes whitespace (a small or untrained one, or a large one at a
/// high temperature) then emits spaces and newlines until its token limit, and the
/// output never completes. Every other choice bounds the whitespace, so a schema whose
/// strings, numbers and arrays are bounded always ends.
///
/// | choice | between tokens | as in |
/// |---|---|---|
/// | [`Compact`](Whitespace::Compact) | nothing: `{"a":1,"b":[2,3]}` | llguidance `"whitespace_flexible": false` |
/// | [`SingleSpace`](Whitespace::SingleSpace) (default) | at most one space: `{"a": 1, "b": [2, 3]}` | Outlines' default whitespace pattern `[ ]?` |
/// | [`Bounded(n)`](Whitespace::Bounded) | at most `n` of space, tab, LF, CR | XGrammar's `max_whitespace_cnt` |
/// | [`Flexible`](Whitespace::Flexible) | any run of space, tab, LF, CR | llguidance's default |
///
/// `SingleSpace` is the default because it is the whitespace of JSON as models usually
/// write it (`", "` and `": "`), which the canonical tokenization of such text needs.
/// Whatever the choice, a string without `maxLength` (or an array without `maxItems`)
/// can still run on: keep a length limit ([`StopConditions`](crate::StopConditions)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Whitespace {
    /// No whitespace at all between tokens.
    Compact,
    /// At most one space (U+0020) between tokens.
    #[default]
    SingleSpace,
    /// At most `n` whitespace characters (space, tab, line feed, carriage return) between
    /// tokens; `Bounded(0)` is [`Compact`](Whitespace::Compact).
    Bounded(u8),
    /// Any amount of whitespace between tokens (llguidance's own default). The output may
    /// never end: use it only with a length limit.
    Flexible,
}

/// Options for [`LlgEngine::json_schema_with`].
///
/// ```
/// use logits::grammar::{JsonOptions, Whitespace};
///
/// let options = JsonOptions::default().with_whitespace(Whitespace::Bounded(4));
/// assert_eq!(options.whitespace(), Whitespace::Bounded(4));
/// assert_eq!(JsonOptions::default().whitespace(), Whitespace::SingleSpace);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct JsonOptions {
    whitespace: Whitespace,
}

impl JsonOptions {
    /// These options with `whitespace` between JSON tokens.
    #[must_use]
    pub fn with_whitespace(mut self, whitespace: Whitespace) -> Self {
        self.whitespace = whitespace;
        self
    }

    /// The whitespace allowed between JSON tokens.
    pub fn whitespace(&self) -> Whitespace {
        self.whitespace
    }

    /// llguidance's `whitespace_flexible` and `whitespace_pattern` for these options.
    fn llguidance_whitespace(&self) -> (bool, Option<String>) {
        match self.whitespace {
            Whitespace::Compact | Whitespace::Bounded(0) => (false, None),
            Whitespace::SingleSpace => (false, Some(r"\x20".to_owned())),
            Whitespace::Bounded(n) => (false, Some(format!(r"[\x20\x0A\x0D\x09]{{1,{n}}}"))),
            Whitespace::Flexible => (true, None),
        }
    }

    /// Writes the options into the schema's top-level `x-guidance` object, leaving the
    /// fields the schema sets itself. A schema that is not an object is left alone (it
    /// is refused when it is compiled, unless it is `false`).
    fn write_into(&self, grammar: &mut GrammarWithLexer) {
        let (flexible, pattern) = self.llguidance_whitespace();
        let Some(schema) = grammar.json_schema.as_mut() else {
            return;
        };
        let Some(object) = schema.as_object_mut() else {
            return;
        };
        if !object.contains_key("x-guidance") {
            JsonCompileOptions {
                whitespace_flexible: flexible,
                whitespace_pattern: pattern,
                ..JsonCompileOptions::default()
            }
            .apply_to(schema);
            return;
        }
        // Not an object: llguidance refuses it with its own message.
        let Some(own) = object.get_mut("x-guidance").and_then(|v| v.as_object_mut()) else {
            return;
        };
        if own.contains_key("whitespace_flexible") || own.contains_key("whitespace_pattern") {
            return;
        }
        own.insert("whitespace_flexible".to_owned(), flexible.into());
        if let Some(pattern) = pattern {
            own.insert("whitespace_pattern".to_owned(), pattern.into());
        }
    }
}

/// A compiled llguidance grammar: the per-sequence state. Cloning is cheap and shares
/// llguidance's lazily built lexer, so a compiled grammar can be cloned per request.
#[derive(Clone)]
pub struct LlgConstraint {
    matcher: Matcher,
    /// The matcher before any token, to rebuild `matcher` after a dead end (which
    /// leaves llguidance's matcher in a terminal error state).
    start: Matcher,
    /// The mask before any token, computed when the grammar was compiled.
    initial: Option<Arc<SimpleVob>>,
    /// The tokens committed and not rolled back.
    tokens: Vec<TokenId>,
    named: Vec<TokenId>,
}

impl std::fmt::Debug for LlgConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlgConstraint")
            .field("named", &self.named)
            .finish_non_exhaustive()
    }
}

impl LlgConstraint {
    fn check(&self) -> Result<(), GrammarError> {
        match self.matcher.get_error() {
            Some(e) => Err(GrammarError::Engine(short(e))),
            None => Ok(()),
        }
    }

    /// Rebuilds the matcher at the committed tokens after a dead end.
    fn restore(&mut self) -> Result<(), GrammarError> {
        let mut matcher = self.start.clone();
        match matcher.try_consume_tokens(&self.tokens) {
            Ok(n) if n == self.tokens.len() => {
                self.matcher = matcher;
                Ok(())
            }
            Ok(_) => Err(GrammarError::Engine(
                "the committed tokens could not be replayed".into(),
            )),
            Err(e) => Err(engine_err(e)),
        }
    }
}

impl Constraint for LlgConstraint {
    fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<Status, GrammarError> {
        self.check()?;
        if self.matcher.is_stopped() {
            return Ok(Status::OnlyEos);
        }
        let computed;
        let vob = match &self.initial {
            Some(first) if self.tokens.is_empty() => first.as_ref(),
            _ => match self.matcher.compute_mask() {
                Ok(v) => {
                    computed = v;
                    &computed
                }
                Err(e) if is_dead_end(&e) => {
                    self.restore()?;
                    return Err(GrammarError::NoTokenAllowed);
                }
                Err(e) => return Err(engine_err(e)),
            },
        };
        let src = vob.as_slice();
        let dst = mask.words_mut();
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
        self.status()
    }

    fn commit(&mut self, token: TokenId) -> Result<(), GrammarError> {
        self.check()?;
        match self.matcher.try_consume_tokens(&[token]) {
            Ok(1) => {
                self.tokens.push(token);
                Ok(())
            }
            Ok(_) => Err(GrammarError::TokenRejected { token }),
            Err(e) => Err(engine_err(e)),
        }
    }

    fn status(&mut self) -> Result<Status, GrammarError> {
        self.check()?;
        if self.matcher.is_stopped() {
            return Ok(Status::OnlyEos);
        }
        Ok(if self.matcher.is_accepting().map_err(engine_err)? {
            Status::OpenAccepting
        } else {
            Status::Open
        })
    }

    fn rollback(&mut self, n: usize) -> Result<(), GrammarError> {
        self.check()?;
        self.matcher.rollback(n).map_err(engine_err)?;
        self.tokens.truncate(self.tokens.len().saturating_sub(n));
        Ok(())
    }

    fn named_special_tokens(&self) -> Vec<TokenId> {
        self.named.clone()
    }
}
