//! `--json-schema`, `--regex` and `--grammar`: the library's grammar mask
//! (llguidance engine) as a [`TokenFilter`] for the generation loop.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use logits::grammar::{GrammarMask, LlgEngine, Vocab};
use logits::{TokenId, TokenMask};

use crate::generate::TokenFilter;
use crate::tokenizer::Tokenizer;

/// What the output must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrammarSpec {
    /// A JSON Schema (its text).
    JsonSchema(String),
    /// A regular expression the whole answer matches.
    Regex(String),
    /// A Lark grammar (its text).
    Lark(String),
}

impl GrammarSpec {
    /// Reads a JSON Schema file; errors name the file.
    pub fn json_schema_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read JSON schema {}", path.display()))?;
        serde_json::from_str::<serde_json::Value>(&text)
            .with_context(|| format!("invalid JSON schema {}: not valid JSON", path.display()))?;
        Ok(GrammarSpec::JsonSchema(text))
    }

    /// What kind of constraint this is, and where it came from, for messages.
    pub fn describe(&self) -> &'static str {
        match self {
            GrammarSpec::JsonSchema(_) => "--json-schema",
            GrammarSpec::Regex(_) => "--regex",
            GrammarSpec::Lark(_) => "--grammar",
        }
    }

    /// Reads a Lark grammar file; errors name the file.
    pub fn grammar_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read grammar {}", path.display()))?;
        Ok(GrammarSpec::Lark(text))
    }
}

/// A grammar engine built once for a tokenizer, producing one constraint per
/// generation.
#[derive(Debug)]
pub struct Grammars {
    engine: LlgEngine,
    vocab: Arc<Vocab>,
}

impl Grammars {
    /// Builds the engine for `tokenizer`, with `eos` ending a constrained
    /// answer.
    pub fn new(tokenizer: &Tokenizer, eos: &[TokenId]) -> Result<Self> {
        let vocab = Vocab::from_tokenizer_json(tokenizer.json(), tokenizer.vocab_size(), eos)
            .map_err(|e| {
                anyhow!(
                    "cannot use tokenizer {} for constraints: {e}",
                    tokenizer.path().display()
                )
            })?;
        let vocab = Arc::new(vocab);
        let engine = LlgEngine::new(vocab.clone())
            .map_err(|e| anyhow!("cannot start the grammar engine: {e}"))?;
        Ok(Grammars { engine, vocab })
    }

    /// Compiles `spec` into a fresh per-generation filter.
    pub fn filter(&self, spec: &GrammarSpec) -> Result<GrammarFilter> {
        let constraint = match spec {
            GrammarSpec::JsonSchema(s) => self.engine.json_schema(s),
            GrammarSpec::Regex(r) => self.engine.regex(r),
            GrammarSpec::Lark(g) => self.engine.lark(g),
        }
        .map_err(|e| anyhow!("{} rejected: {e}", spec.describe()))?;
        Ok(GrammarFilter {
            stage: GrammarMask::new(Box::new(constraint), self.vocab.clone()),
        })
    }
}

/// One generation's grammar state.
#[derive(Debug)]
pub struct GrammarFilter {
    stage: GrammarMask,
}

impl TokenFilter for GrammarFilter {
    fn allowed(&mut self) -> Result<&TokenMask> {
        let (mask, _) = self.stage.compute().map_err(|e| anyhow!("grammar: {e}"))?;
        Ok(mask)
    }

    fn commit(&mut self, token: TokenId) -> Result<()> {
        self.stage
            .commit(token)
            .map_err(|e| anyhow!("grammar: {e}"))?;
        Ok(())
    }
}
