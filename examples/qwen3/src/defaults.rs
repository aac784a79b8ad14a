//! Sampling defaults and end-of-sequence ids from `generation_config.json`,
//! and the command-line overrides on top of them.

use std::path::Path;

use anyhow::{bail, Context, Result};
use logits::{GenerationConfig, SamplingParams, SamplingParamsBuilder, TokenId};

use crate::cli::Args;

/// What a model directory says about how to sample it.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationDefaults {
    /// The sampling parameters the model's authors recommend.
    pub params: SamplingParams,
    /// Token ids that end a reply (Qwen3: 151645 and 151643).
    pub eos_token_ids: Vec<TokenId>,
}

impl GenerationDefaults {
    /// Reads `generation_config.json`; errors name the file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read generation config {}", path.display()))?;
        Self::from_json(&text)
            .with_context(|| format!("invalid generation config {}", path.display()))
    }

    /// Parses the text of a `generation_config.json` with the library's
    /// reader (Hugging Face's meaning: without `do_sample: true` decoding is
    /// greedy; an unset `top_k` is 50; `top_k: 0` turns it off).
    pub fn from_json(text: &str) -> Result<Self> {
        let config = GenerationConfig::from_json(text)?;
        let params = config.to_params().context("invalid sampling parameter")?;
        Ok(GenerationDefaults {
            params,
            eos_token_ids: config.eos_token_id,
        })
    }

    /// Qwen3's recommendations for thinking mode, for model directories
    /// without a generation config (temperature 0.6, top-k 20, top-p 0.95).
    pub fn qwen3_fallback(eos_token_ids: Vec<TokenId>) -> Self {
        let params = SamplingParams::builder()
            .temperature(0.6)
            .top_k(20)
            .top_p(0.95)
            .build()
            .expect("valid constants");
        GenerationDefaults {
            params,
            eos_token_ids,
        }
    }
}

/// Applies the sampling flags of `args` on top of `base`.
pub fn with_overrides(base: &SamplingParams, args: &Args) -> Result<SamplingParams> {
    let mut b: SamplingParamsBuilder = base.to_builder();
    if let Some(t) = args.temperature {
        b = b.temperature(t);
    }
    if let Some(k) = args.top_k {
        b = if k == 0 { b.no_top_k() } else { b.top_k(k) };
    }
    if let Some(p) = args.top_p {
        b = b.top_p(p);
    }
    if let Some(p) = args.min_p {
        b = b.min_p(p);
    }
    if let Some(r) = args.repetition_penalty {
        b = b.repetition_penalty(r);
    }
    if let Some(p) = args.presence_penalty {
        b = b.presence_penalty(p);
    }
    if let Some(p) = args.frequency_penalty {
        b = b.frequency_penalty(p);
    }
    if let Some(s) = args.seed {
        b = b.seed(s);
    }
    if let Some(n) = args.logprobs {
        if n > logits::MAX_LOGPROBS {
            bail!(
                "--logprobs {n}: at most {} alternatives can be shown",
                logits::MAX_LOGPROBS
            );
        }
        b = b.logprobs(n);
    }
    b.build().context("invalid sampling option")
}
