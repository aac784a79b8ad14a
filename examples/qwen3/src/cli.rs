//! Command-line arguments.

use std::path::PathBuf;

use clap::Parser;

/// Chat with a Qwen3 model; sampling, stopping and constraints by the `logits`
/// crate.
#[derive(Debug, Clone, Parser)]
#[command(name = "qwen3", version, about, allow_negative_numbers = true)]
pub struct Args {
    /// Hugging Face model directory: config.json, model.safetensors (or a
    /// sharded index), tokenizer.json, tokenizer_config.json,
    /// generation_config.json.
    #[arg(long, value_name = "DIR")]
    pub model_dir: Option<PathBuf>,

    /// Hugging Face hub id (such as Qwen/Qwen3-0.6B), downloaded when the
    /// network is reachable (needs the `hub` feature).
    #[arg(long, value_name = "ID", conflicts_with = "model_dir")]
    pub model: Option<String>,

    /// A GGUF file to run with candle's quantized Qwen3 instead of the
    /// safetensors weights; the tokenizer still comes from the model
    /// directory.
    #[arg(long, value_name = "FILE")]
    pub gguf: Option<PathBuf>,

    /// The user message. Without it, chat interactively on standard input.
    #[arg(long, short)]
    pub prompt: Option<String>,

    /// A system message.
    #[arg(long)]
    pub system: Option<String>,

    /// Render the chat template with thinking off (`enable_thinking=false`).
    #[arg(long)]
    pub no_think: bool,

    /// Sampling temperature (0 = greedy).
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Keep only the k most likely tokens (0 = no limit).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Nucleus sampling threshold.
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Drop tokens below min_p times the top probability.
    #[arg(long)]
    pub min_p: Option<f32>,
    /// Multiplicative repetition penalty (1 = off).
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    /// Additive presence penalty.
    #[arg(long)]
    pub presence_penalty: Option<f32>,
    /// Additive frequency penalty.
    #[arg(long)]
    pub frequency_penalty: Option<f32>,
    /// Random seed; the same seed gives the same answer.
    #[arg(long)]
    pub seed: Option<u64>,

    /// Generate at most this many tokens.
    #[arg(long, default_value_t = 4096)]
    pub max_tokens: usize,
    /// Generate at least this many tokens before an end token may be drawn.
    #[arg(long, default_value_t = 0)]
    pub min_tokens: usize,
    /// Stop when the text contains this string (repeatable).
    #[arg(long = "stop", value_name = "STRING")]
    pub stop: Vec<String>,

    /// Constrain the answer to JSON matching this JSON Schema file.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["regex", "grammar"])]
    pub json_schema: Option<PathBuf>,
    /// Constrain the answer to this regular expression.
    #[arg(long, value_name = "REGEX", conflicts_with = "grammar")]
    pub regex: Option<String>,
    /// Constrain the answer to this grammar file (Lark syntax, as
    /// llguidance reads it).
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<PathBuf>,

    /// Print each generated token with its logprob and N alternatives.
    #[arg(long, value_name = "N")]
    pub logprobs: Option<usize>,

    /// Instead of answering, print the N most likely next tokens after the
    /// prompt with their probability at each of --temperatures.
    #[arg(long, value_name = "N")]
    pub top_next: Option<usize>,
    /// Temperatures for --top-next.
    #[arg(long, value_delimiter = ',', default_value = "0.5,1.0,1.5")]
    pub temperatures: Vec<f32>,

    /// Speculative decoding: a smaller Qwen3 sharing the target's tokenizer
    /// (config.json and safetensors weights) drafts tokens that the target
    /// verifies, K at a time; the answer follows the target's distribution.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["gguf", "logprobs", "json_schema", "regex", "grammar", "top_next"])]
    pub draft_model_dir: Option<PathBuf>,
    /// Tokens the draft proposes per verification (at least 1; default 4).
    #[arg(long, value_name = "K", requires = "draft_model_dir")]
    pub draft_k: Option<usize>,

    /// Print K seeded answers (seeds seed, seed+1, ...), one per line.
    #[arg(long, value_name = "K")]
    pub samples: Option<usize>,
}
