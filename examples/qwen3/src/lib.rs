//! A Qwen3 runner built on the `logits` crate: candle runs the network,
//! `tokenizers` tokenizes, minijinja renders the chat template; sampling,
//! stopping and grammar constraints come from `logits`.
//!
//! The binary is `qwen3`; this library exposes its parts so tests can drive
//! them one by one.

pub mod app;
pub mod cli;
pub mod config;
pub mod defaults;
pub mod generate;
pub mod grammar;
pub mod load;
pub mod model;
pub mod template;
pub mod tokenizer;
