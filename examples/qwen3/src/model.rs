//! Loading Qwen3 weights into candle's implementation and running it one step
//! at a time over its KV cache. Computation is in f32 on the CPU.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{quantized_qwen3, qwen3};
use logits::TokenId;

use crate::config::Qwen3Config;

#[derive(Clone)]
enum Inner {
    Full(qwen3::ModelForCausalLM),
    Quantized(quantized_qwen3::ModelWeights),
    /// The decoder and the output head apart, so that one forward pass gives the
    /// logits of every position it runs (for speculative verification).
    Rows {
        base: qwen3::Model,
        /// The decoder with an empty cache, for `reset`.
        fresh: qwen3::Model,
        lm_head: candle_nn::Linear,
    },
}

/// A Qwen3 model with its KV cache.
///
/// Cloning is cheap (the weights and the cached keys and values are shared, and a
/// forward pass appends to new tensors): a clone is a snapshot of the KV cache to
/// return to, since candle's cache cannot be truncated.
#[derive(Clone)]
pub struct Model {
    inner: Inner,
    device: Device,
    /// Positions already in the KV cache.
    position: usize,
    /// Length of one logits row.
    logits_len: usize,
    /// Longest sequence the rotary table covers.
    context_len: usize,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("position", &self.position)
            .field("logits_len", &self.logits_len)
            .finish()
    }
}

/// The safetensors files of a model directory: `model.safetensors`, or the
/// shards listed in `model.safetensors.index.json`.
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.exists() {
        bail!(
            "no weights in {}: expected model.safetensors or model.safetensors.index.json",
            dir.display()
        );
    }
    let text = std::fs::read_to_string(&index)
        .with_context(|| format!("cannot read {}", index.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("invalid weight index {}: not valid JSON", index.display()))?;
    let map = value
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| anyhow!("invalid weight index {}: no weight_map", index.display()))?;
    let mut files: Vec<PathBuf> = Vec::new();
    for file in map.values() {
        let name = file.as_str().ok_or_else(|| {
            anyhow!(
                "invalid weight index {}: a weight_map value is not a file name",
                index.display()
            )
        })?;
        let path = dir.join(name);
        if !files.contains(&path) {
            if !path.exists() {
                bail!(
                    "weight shard {} (listed in {}) is missing",
                    path.display(),
                    index.display()
                );
            }
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

impl Model {
    /// Loads safetensors weights for `config`; weights of any float type are
    /// converted to f32. Errors name the files.
    pub fn from_safetensors(config: &Qwen3Config, files: &[PathBuf]) -> Result<Self> {
        let device = Device::Cpu;
        for file in files {
            check_safetensors(file)?;
        }
        // SAFETY: the files are memory-mapped read-only; the runner does not
        // modify them while the model is alive.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(files, DType::F32, &device) }
            .map_err(|e| anyhow!("cannot map weights {}: {}", show(files), candle_message(&e)))?;
        Self::from_var_builder(config, vb).with_context(|| format!("weights {}", show(files)))
    }

    /// Builds the model from any candle `VarBuilder` (used by tests to build
    /// random models in memory).
    pub fn from_var_builder(config: &Qwen3Config, vb: VarBuilder) -> Result<Self> {
        let device = vb.device().clone();
        let model = qwen3::ModelForCausalLM::new(&config.to_candle(), vb)
            .map_err(|e| anyhow!("do not match the Qwen3 config: {}", candle_message(&e)))?;
        Ok(Model {
            inner: Inner::Full(model),
            device,
            position: 0,
            logits_len: config.vocab_size,
            context_len: config.max_position_embeddings,
        })
    }

    /// Loads safetensors weights like [`from_safetensors`](Self::from_safetensors),
    /// for [`forward_rows`](Self::forward_rows): the output head is kept apart from
    /// the decoder (with tied embeddings, as a second copy of the embedding matrix).
    pub fn from_safetensors_rows(config: &Qwen3Config, files: &[PathBuf]) -> Result<Self> {
        let device = Device::Cpu;
        for file in files {
            check_safetensors(file)?;
        }
        // SAFETY: as in `from_safetensors`.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(files, DType::F32, &device) }
            .map_err(|e| anyhow!("cannot map weights {}: {}", show(files), candle_message(&e)))?;
        Self::from_var_builder_rows(config, vb).with_context(|| format!("weights {}", show(files)))
    }

    /// Builds a model for [`forward_rows`](Self::forward_rows) from any candle
    /// `VarBuilder`.
    pub fn from_var_builder_rows(config: &Qwen3Config, vb: VarBuilder) -> Result<Self> {
        let device = vb.device().clone();
        let err = |e: candle_core::Error| {
            anyhow!("do not match the Qwen3 config: {}", candle_message(&e))
        };
        let base = qwen3::Model::new(&config.to_candle(), vb.clone()).map_err(err)?;
        let (v, h) = (config.vocab_size, config.hidden_size);
        let lm_head = if config.tie_word_embeddings {
            let w = vb
                .pp("model.embed_tokens")
                .get((v, h), "weight")
                .map_err(err)?;
            candle_nn::Linear::new(w, None)
        } else {
            candle_nn::linear_no_bias(h, v, vb.pp("lm_head")).map_err(err)?
        };
        Ok(Model {
            inner: Inner::Rows {
                fresh: base.clone(),
                base,
                lm_head,
            },
            device,
            position: 0,
            logits_len: config.vocab_size,
            context_len: config.max_position_embeddings,
        })
    }

    /// Loads a GGUF file with candle's quantized Qwen3.
    pub fn from_gguf(path: &Path) -> Result<Self> {
        let device = Device::Cpu;
        let mut file = std::fs::File::open(path)
            .with_context(|| format!("cannot open GGUF file {}", path.display()))?;
        let content = candle_core::quantized::gguf_file::Content::read(&mut file).map_err(|e| {
            anyhow!(
                "invalid GGUF file {}: {}",
                path.display(),
                candle_message(&e)
            )
        })?;
        let arch = content
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        if arch != "qwen3" {
            bail!(
                "GGUF file {} holds a {arch:?} model, but this runner only runs \"qwen3\"",
                path.display()
            );
        }
        let logits_len = content
            .tensor_infos
            .get("token_embd.weight")
            .map(|t| t.shape.dims()[0])
            .ok_or_else(|| anyhow!("GGUF file {} has no token_embd.weight", path.display()))?;
        let context_len = content
            .metadata
            .get("qwen3.context_length")
            .and_then(|v| v.to_u32().ok())
            .ok_or_else(|| anyhow!("GGUF file {} has no qwen3.context_length", path.display()))?
            as usize;
        let model =
            quantized_qwen3::ModelWeights::from_gguf(content, &mut file, &device).map_err(|e| {
                anyhow!(
                    "cannot load GGUF file {}: {}",
                    path.display(),
                    candle_message(&e)
                )
            })?;
        Ok(Model {
            inner: Inner::Quantized(model),
            device,
            position: 0,
            logits_len,
            context_len,
        })
    }

    /// Length of the logits rows this model returns.
    pub fn logits_len(&self) -> usize {
        self.logits_len
    }

    /// Longest sequence (prompt and generated tokens) the model can run.
    pub fn context_len(&self) -> usize {
        self.context_len
    }

    /// Number of positions in the KV cache.
    pub fn position(&self) -> usize {
        self.position
    }

    /// Empties the KV cache.
    pub fn reset(&mut self) {
        match &mut self.inner {
            Inner::Full(m) => m.clear_kv_cache(),
            Inner::Quantized(m) => m.clear_kv_cache(),
            // (`qwen3::Model` cannot clear its cache: go back to the copy made
            // before its first forward pass.)
            Inner::Rows { base, fresh, .. } => *base = fresh.clone(),
        }
        self.position = 0;
    }

    /// Runs `tokens` (at least one) after what the KV cache holds and returns
    /// the logits row of the last one.
    pub fn forward(&mut self, tokens: &[TokenId]) -> Result<Vec<f32>> {
        self.forward_rows(tokens, 1)
    }

    /// True when [`forward_rows`](Self::forward_rows) can return more than one row.
    pub fn has_rows(&self) -> bool {
        matches!(self.inner, Inner::Rows { .. })
    }

    /// Runs `tokens` (at least one) after what the KV cache holds, in one forward
    /// pass, and returns the logits rows of the last `rows` of them, row-major.
    /// More than one row needs a model loaded by
    /// [`from_safetensors_rows`](Self::from_safetensors_rows).
    pub fn forward_rows(&mut self, tokens: &[TokenId], rows: usize) -> Result<Vec<f32>> {
        if rows == 0 || rows > tokens.len() {
            bail!("cannot return {rows} rows for {} tokens", tokens.len());
        }
        if rows > 1 && !self.has_rows() {
            bail!("this model returns the last row only");
        }
        if tokens.is_empty() {
            bail!("no tokens to run");
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.logits_len) {
            bail!(
                "token id {bad} is outside the model's vocabulary of {}",
                self.logits_len
            );
        }
        if self.position + tokens.len() > self.context_len {
            bail!(
                "the sequence would exceed the model's context of {} tokens",
                self.context_len
            );
        }
        let input = Tensor::new(tokens, &self.device)
            .and_then(|t| t.unsqueeze(0))
            .map_err(|e| anyhow!("cannot build the input: {}", candle_message(&e)))?;
        let out = match &mut self.inner {
            Inner::Full(m) => m.forward(&input, self.position),
            Inner::Quantized(m) => m.forward(&input, self.position),
            Inner::Rows { base, lm_head, .. } => {
                let l = tokens.len();
                base.forward(&input, self.position)
                    .and_then(|h| h.narrow(1, l - rows, rows))
                    .and_then(|h| h.apply(&*lm_head))
            }
        }
        .map_err(|e| anyhow!("forward pass failed: {}", candle_message(&e)))?;
        self.position += tokens.len();
        let row = out.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
        Ok(row)
    }
}

/// Reads a safetensors header so a truncated or foreign file gets a clear
/// error instead of a failure deep inside the loader.
fn check_safetensors(path: &Path) -> Result<()> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)
        .with_context(|| format!("cannot open weights {}", path.display()))?;
    let len = file.metadata()?.len();
    let mut head = [0u8; 8];
    if len < 8 || file.read_exact(&mut head).is_err() {
        bail!(
            "invalid weights {}: file too short for safetensors",
            path.display()
        );
    }
    let header_len = u64::from_le_bytes(head);
    if header_len == 0 || header_len > len - 8 || header_len > 100 << 20 {
        bail!("invalid weights {}: not a safetensors file", path.display());
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header)
        .with_context(|| format!("cannot read weights {}", path.display()))?;
    serde_json::from_slice::<serde_json::Value>(&header)
        .map_err(|_| anyhow!("invalid weights {}: not a safetensors file", path.display()))?;
    Ok(())
}

/// A candle error as one message, without the backtrace candle attaches
/// when `RUST_BACKTRACE` is set.
pub fn candle_message(e: &candle_core::Error) -> String {
    use candle_core::Error;
    match e {
        Error::WithBacktrace { inner, .. } => candle_message(inner),
        Error::WithPath { inner, path } => {
            format!("{}: {}", path.display(), candle_message(inner))
        }
        Error::Context { inner, context } => format!("{context}: {}", candle_message(inner)),
        other => other.to_string(),
    }
}

fn show(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
