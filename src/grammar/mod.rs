//! Grammar-constrained sampling: set every token that cannot legally come next to `-inf`,
//! so the output matches a regex, a JSON schema or a grammar because nothing else was
//! reachable.
//!
//! # Pieces
//! - [`Vocab`]: the bytes and [`TokenKind`] of every logit slot and the end-of-sequence
//!   ids, built once per model, from token byte strings ([`Vocab::new`]) or from a
//!   byte-level BPE `tokenizer.json` ([`Vocab::from_tokenizer_json`]).
//! - [`Constraint`]: the trait a grammar engine implements: fill the allowed-token bitset
//!   for the current state, commit one token, report its [`Status`], roll back.
//! - [`GrammarMask`]: the pipeline stage around any constraint. It applies the mask to a
//!   logits row ([`TokenMask::apply`](crate::TokenMask::apply)) and enforces the rules below.
//! - Built-in constraints with no dependency: [`TokenSet`] (a fixed set of ids) and
//!   [`Choice`] (one of N literal strings, walked over the token bytes).
//! - With the cargo feature `llguidance`: `LlgEngine`, which compiles regexes, JSON
//!   schemas and Lark-style context-free grammars with the llguidance engine (llguidance
//!   1.9.1, `default-features = false` plus `lark`: 21 more crates and about 50 s of CPU
//!   for a release build on two cores). Its JSON schemas allow at most one space between
//!   tokens by default, so that a model fond of whitespace still finishes; `JsonOptions`
//!   and `Whitespace` choose compact, bounded or llguidance's flexible whitespace.
//!
//! # Rules every constraint obeys
//! [`GrammarMask`] enforces these whatever engine sits behind it:
//! - **Padding** slots (ids past the tokenizer, e.g. Qwen3's 151,669..=151,935) are never
//!   allowed.
//! - **Special tokens** are never allowed unless the constraint names them
//!   ([`Constraint::named_special_tokens`]).
//! - **End-of-sequence** ids (every one of them, e.g. Qwen3's 151,645 `<|im_end|>` and
//!   151,643 `<|endoftext|>`) are allowed exactly when the text so far is complete. A
//!   complete text that cannot go on is [`Status::OnlyEos`]: only end-of-sequence is
//!   allowed, and the caller may stop without another forward pass.
//! - An **empty mask** is an error ([`GrammarError::NoTokenAllowed`]), never a row of
//!   `-inf`.
//! - Committing a **disallowed token** returns [`GrammarError::TokenRejected`] and
//!   leaves the state unchanged.
//! - **Rollback** of N tokens is available for constraints that support it (all the
//!   built-in ones and llguidance).
//!
//! # Added tokens that are not marked special
//! Qwen3's tokenizer has 26 added tokens. 14 are marked `special`; 12 are not:
//! `<think>`, `</think>`, `<tool_call>`, `</tool_call>`, `<tool_response>`,
//! `</tool_response>`, `<|fim_prefix|>`, `<|fim_middle|>`, `<|fim_suffix|>`,
//! `<|fim_pad|>`, `<|repo_name|>` and `<|file_sep|>`. Engines disagree on them.
//! Here **every added token is [`TokenKind::Special`]**: these are control tokens that
//! switch the model into reasoning, tool-calling or fill-in-the-middle mode, so a grammar
//! over text must never emit one by accident. A grammar that wants one names it (in Lark,
//! `<think>` or `<[151667]>`), and a JSON string that contains the text `<think>` is
//! still allowed, spelled with ordinary text tokens.
//!
//! # Example: one of three words over a toy vocabulary
//! ```
//! use std::sync::Arc;
//! use logits::grammar::{Choice, GrammarMask, Status, TokenKind, Vocab};
//!
//! // Single-byte text tokens 0..=127, then an end-of-sequence token.
//! let mut tokens: Vec<Vec<u8>> = (0u8..128).map(|b| vec![b]).collect();
//! let mut kinds = vec![TokenKind::Text; 128];
//! tokens.push(b"<eos>".to_vec());
//! kinds.push(TokenKind::Special);
//! let vocab = Arc::new(Vocab::new(tokens, kinds, vec![128])?);
//!
//! let choice = Choice::new(vocab.clone(), &["red", "green", "blue"])?;
//! let mut stage = GrammarMask::new(Box::new(choice), vocab);
//! let mut logits = vec![0.0_f32; 129];
//! stage.apply(&mut logits)?;
//! let allowed: Vec<usize> = (0..129).filter(|&i| logits[i].is_finite()).collect();
//! assert_eq!(allowed, [b'b' as usize, b'g' as usize, b'r' as usize]);
//! for b in b"red" {
//!     stage.commit(*b as u32)?;
//! }
//! assert_eq!(stage.status()?, Status::OnlyEos);
//! # Ok::<(), logits::grammar::GrammarError>(())
//! ```

mod choice;
mod constraint;
mod error;
mod json;
#[cfg(feature = "llguidance")]
mod llguidance;
mod token_set;
mod tokenizer_json;
mod vocab;

pub use choice::Choice;
pub use constraint::{Constraint, GrammarMask, Status};
pub use error::{GrammarError, GrammarKind};
#[cfg(feature = "llguidance")]
#[cfg_attr(docsrs, doc(cfg(feature = "llguidance")))]
pub use llguidance::{JsonOptions, LlgConstraint, LlgEngine, Whitespace};
pub use token_set::TokenSet;
pub use vocab::{TokenKind, Vocab};
