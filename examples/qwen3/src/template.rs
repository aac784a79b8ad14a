//! The chat template from `tokenizer_config.json`, rendered with minijinja and
//! Python-compatible string methods (Qwen3's template calls `startswith`,
//! `split`, `lstrip`, ...).

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use serde::Serialize;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the assistant.
    System,
    /// The person chatting.
    User,
    /// The model.
    Assistant,
}

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

impl Message {
    /// A message from `role`.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
        }
    }
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    bos_token: String,
    eos_token: String,
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Reads the `chat_template` of a `tokenizer_config.json`. Errors name the
    /// file: unreadable, not JSON, no template, or a template that does not
    /// compile.
    pub fn from_tokenizer_config(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read tokenizer config {}", path.display()))?;
        Self::from_tokenizer_config_json(&text)
            .with_context(|| format!("invalid tokenizer config {}", path.display()))
    }

    /// Parses the text of a `tokenizer_config.json`.
    pub fn from_tokenizer_config_json(text: &str) -> Result<Self> {
        let config: serde_json::Value = serde_json::from_str(text).context("not valid JSON")?;
        let template = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            // The list form: [{"name": "default", "template": "..."}, ...].
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template"))
                .and_then(|t| t.as_str())
                .ok_or_else(|| anyhow!("chat_template list has no usable template"))?
                .to_owned(),
            _ => return Err(anyhow!("no chat_template string")),
        };
        let token = |key: &str| -> String {
            match config.get(key) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Object(o)) => o
                    .get("content")
                    .and_then(|c| c.as_str())
                    .unwrap_or_default()
                    .to_owned(),
                _ => String::new(),
            }
        };
        Self::new(template, token("bos_token"), token("eos_token"))
    }

    /// Compiles a template given as Jinja source.
    pub fn new(source: String, bos_token: String, eos_token: String) -> Result<Self> {
        let mut env = minijinja::Environment::new();
        // As transformers configures Jinja for chat templates.
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .expect("default delimiters are valid"),
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template_owned(NAME, source)
            .map_err(|e| anyhow!("the chat template does not compile: {e}"))?;
        Ok(ChatTemplate {
            env,
            bos_token,
            eos_token,
        })
    }

    /// Renders `messages`, followed by the assistant's header when
    /// `add_generation_prompt`. With `enable_thinking` false, Qwen3's template
    /// appends an empty `<think>` block so the model answers directly.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Result<String> {
        let template = self.env.get_template(NAME).expect("added in new");
        template
            .render(minijinja::context! {
                messages => minijinja::Value::from(minijinja::value::Serde(messages)),
                add_generation_prompt => add_generation_prompt,
                enable_thinking => enable_thinking,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| anyhow!("cannot render the chat template: {e}"))
    }
}
