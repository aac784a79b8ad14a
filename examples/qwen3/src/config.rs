//! The model's `config.json`: checked to be a Qwen3, turned into candle's
//! configuration, and used to count parameters.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// The fields of a Hugging Face Qwen3 `config.json` that the runner uses.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Qwen3Config {
    /// Must be `"qwen3"`.
    pub model_type: String,
    /// Rows of the embedding and of the logits.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// Width of one head; Hugging Face's default is hidden / heads.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Whether q, k, v, o projections carry a bias.
    #[serde(default)]
    pub attention_bias: bool,
    /// Longest context the rotary table covers.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// Whether the output projection is the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// RoPE base frequency.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// RMSNorm epsilon.
    #[serde(default = "default_rms_eps")]
    pub rms_norm_eps: f64,
    /// Sliding-window attention (not supported by the runner).
    #[serde(default)]
    pub use_sliding_window: bool,
    /// Activation of the MLP; Qwen3 uses `silu`.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// The end-of-sequence id(s) named in config.json, if any.
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
}

fn default_max_positions() -> usize {
    40960
}
fn default_rope_theta() -> f64 {
    1_000_000.0
}
fn default_rms_eps() -> f64 {
    1e-6
}
fn default_act() -> String {
    "silu".into()
}

impl Qwen3Config {
    /// Reads and checks `config.json`.
    ///
    /// Errors name the file and say what is wrong: unreadable, not JSON, a
    /// missing field, or a model that is not a Qwen3.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read model config {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("invalid model config {}", path.display()))
    }

    /// Parses and checks the text of a `config.json`.
    pub fn from_json(text: &str) -> Result<Self> {
        let value: serde_json::Value = serde_json::from_str(text).context("not valid JSON")?;
        match value.get("model_type").and_then(|v| v.as_str()) {
            Some("qwen3") => {}
            Some(other) => bail!("model_type is {other:?}, but this runner only runs \"qwen3\""),
            None => bail!("no model_type field: not a Hugging Face model config"),
        }
        let config: Qwen3Config = serde_json::from_value(value).context("not a Qwen3 config")?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim()),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            bail!("{name} must be positive");
        }
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            bail!(
                "num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                self.num_attention_heads,
                self.num_key_value_heads
            );
        }
        if self.head_dim() % 2 != 0 {
            bail!(
                "head_dim ({}) must be even for rotary embeddings",
                self.head_dim()
            );
        }
        if self.use_sliding_window {
            bail!("use_sliding_window is true; sliding-window attention is not supported");
        }
        if self.hidden_act != "silu" {
            bail!("hidden_act is {:?}; Qwen3 uses \"silu\"", self.hidden_act);
        }
        Ok(())
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// The number of distinct parameters: a tied output projection is counted
    /// once (Qwen3-0.6B: 596,049,920).
    pub fn parameter_count(&self) -> u64 {
        let h = self.hidden_size as u64;
        let v = self.vocab_size as u64;
        let i = self.intermediate_size as u64;
        let d = self.head_dim() as u64;
        let q = self.num_attention_heads as u64 * d;
        let kv = self.num_key_value_heads as u64 * d;
        let bias = if self.attention_bias {
            q + 2 * kv + h
        } else {
            0
        };
        let attention = h * q + 2 * h * kv + q * h + bias + 2 * d;
        let mlp = 3 * h * i;
        let norms = 2 * h;
        let layer = attention + mlp + norms;
        let embed = v * h;
        let head = if self.tie_word_embeddings { 0 } else { v * h };
        embed + self.num_hidden_layers as u64 * layer + h + head
    }

    /// candle's configuration for this model.
    pub fn to_candle(&self) -> candle_transformers::models::qwen3::Config {
        candle_transformers::models::qwen3::Config {
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            head_dim: self.head_dim(),
            attention_bias: self.attention_bias,
            num_key_value_heads: self.num_key_value_heads,
            max_position_embeddings: self.max_position_embeddings,
            sliding_window: None,
            max_window_layers: self.num_hidden_layers,
            tie_word_embeddings: self.tie_word_embeddings,
            rope_theta: self.rope_theta,
            rms_norm_eps: self.rms_norm_eps,
            use_sliding_window: false,
            hidden_act: candle_nn::Activation::Silu,
        }
    }
}

/// Formats `n` with thousands separators: 596049920 -> "596,049,920".
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
