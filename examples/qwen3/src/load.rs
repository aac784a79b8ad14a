//! Finding a model's files (a directory, or a hub id) and loading them into
//! a [`Loaded`] model, tokenizer and chat template.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cli::Args;
use crate::config::Qwen3Config;
use crate::defaults::GenerationDefaults;
use crate::model::{safetensors_files, Model};
use crate::template::ChatTemplate;
use crate::tokenizer::{tokenizer_path, Tokenizer};

/// Where the weights come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Weights {
    /// One or more safetensors files.
    Safetensors(Vec<PathBuf>),
    /// A GGUF file for candle's quantized Qwen3.
    Gguf(PathBuf),
}

/// The files of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    /// The model directory.
    pub dir: PathBuf,
    /// `config.json`.
    pub config: PathBuf,
    /// `tokenizer.json` (or `tokenizer.json.gz`).
    pub tokenizer: PathBuf,
    /// `tokenizer_config.json`, holding the chat template.
    pub tokenizer_config: PathBuf,
    /// `generation_config.json`, if present.
    pub generation_config: Option<PathBuf>,
    /// The weights.
    pub weights: Weights,
}

impl ModelFiles {
    /// The files of model directory `dir`, or of `gguf` with the tokenizer
    /// from `dir`. Only existence is checked here.
    pub fn in_dir(dir: &Path, gguf: Option<&Path>) -> Result<Self> {
        if !dir.is_dir() {
            bail!("model directory {} does not exist", dir.display());
        }
        let generation_config = Some(dir.join("generation_config.json")).filter(|p| p.exists());
        let weights = match gguf {
            Some(file) => Weights::Gguf(file.to_path_buf()),
            None => Weights::Safetensors(safetensors_files(dir)?),
        };
        Ok(ModelFiles {
            dir: dir.to_path_buf(),
            config: dir.join("config.json"),
            tokenizer: tokenizer_path(dir),
            tokenizer_config: dir.join("tokenizer_config.json"),
            generation_config,
            weights,
        })
    }

    /// The files named by the command line: `--model-dir`, or `--model` from
    /// the hub.
    pub fn from_args(args: &Args) -> Result<Self> {
        match (&args.model_dir, &args.model) {
            (Some(dir), _) => Self::in_dir(dir, args.gguf.as_deref()),
            (None, Some(id)) => {
                let dir = download(id)?;
                Self::in_dir(&dir, args.gguf.as_deref())
            }
            (None, None) => bail!("give a model: --model-dir DIR or --model HUB_ID"),
        }
    }
}

#[cfg(feature = "hub")]
fn download(id: &str) -> Result<PathBuf> {
    use hf_hub::api::sync::ApiBuilder;
    let api = ApiBuilder::new()
        .with_progress(true)
        .build()
        .context("cannot start the hub client")?;
    let repo = api.model(id.to_string());
    let fetch = |name: &str| {
        repo.get(name)
            .with_context(|| format!("cannot download {name} of {id} from the hub"))
    };
    let config = fetch("config.json")?;
    fetch("tokenizer.json")?;
    fetch("tokenizer_config.json")?;
    // Optional files: a missing generation config falls back to defaults.
    let _ = repo.get("generation_config.json");
    if repo.get("model.safetensors").is_err() {
        let index = fetch("model.safetensors.index.json")?;
        let text = std::fs::read_to_string(&index)?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("invalid weight index {}", index.display()))?;
        let mut shards: Vec<String> = value["weight_map"]
            .as_object()
            .map(|m| {
                m.values()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        shards.sort();
        shards.dedup();
        for shard in shards {
            fetch(&shard)?;
        }
    }
    Ok(config.parent().map(Path::to_path_buf).unwrap_or_default())
}

#[cfg(not(feature = "hub"))]
fn download(id: &str) -> Result<PathBuf> {
    bail!(
        "--model {id}: this build cannot download from the hub (build with --features hub), \
         use --model-dir with a downloaded model directory"
    )
}

/// A model ready to chat.
#[derive(Debug)]
pub struct Loaded {
    /// Its files.
    pub files: ModelFiles,
    /// Its config (for GGUF, the directory's config.json if present).
    pub config: Option<Qwen3Config>,
    /// The network and its KV cache.
    pub model: Model,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template.
    pub template: ChatTemplate,
    /// Sampling defaults and end-of-turn ids.
    pub defaults: GenerationDefaults,
}

impl Loaded {
    /// Loads every file, checking that they fit together.
    pub fn load(files: ModelFiles) -> Result<Self> {
        Self::load_with(files, false)
    }

    /// Like [`load`](Self::load); with `rows`, the safetensors model is loaded for
    /// [`Model::forward_rows`] (as the target of speculative decoding).
    pub fn load_with(files: ModelFiles, rows: bool) -> Result<Self> {
        let config = match &files.weights {
            Weights::Safetensors(_) => Some(Qwen3Config::from_file(&files.config)?),
            Weights::Gguf(_) if files.config.exists() => {
                Some(Qwen3Config::from_file(&files.config)?)
            }
            Weights::Gguf(_) => None,
        };
        let tokenizer = Tokenizer::from_file(&files.tokenizer)?;
        let template = ChatTemplate::from_tokenizer_config(&files.tokenizer_config)?;
        let model = match (&files.weights, &config) {
            (Weights::Safetensors(paths), Some(config)) => {
                tokenizer.check_fits(config.vocab_size, &files.config)?;
                if rows {
                    Model::from_safetensors_rows(config, paths)?
                } else {
                    Model::from_safetensors(config, paths)?
                }
            }
            (Weights::Gguf(path), _) => {
                let model = Model::from_gguf(path)?;
                tokenizer.check_fits(model.logits_len(), path)?;
                model
            }
            (Weights::Safetensors(_), None) => unreachable!("config loaded above"),
        };
        let mut defaults = match &files.generation_config {
            Some(path) => GenerationDefaults::from_file(path)?,
            None => GenerationDefaults::qwen3_fallback(Vec::new()),
        };
        if defaults.eos_token_ids.is_empty() {
            defaults.eos_token_ids = ["<|im_end|>", "<|endoftext|>"]
                .iter()
                .filter_map(|t| tokenizer.token_id(t))
                .collect();
        }
        if let Some(&bad) = defaults
            .eos_token_ids
            .iter()
            .find(|&&id| id as usize >= tokenizer.vocab_size())
        {
            bail!(
                "end-of-sequence id {bad} in {} is not a token of {}",
                files
                    .generation_config
                    .as_deref()
                    .unwrap_or(Path::new("generation_config.json"))
                    .display(),
                tokenizer.path().display()
            );
        }
        Ok(Loaded {
            files,
            config,
            model,
            tokenizer,
            template,
            defaults,
        })
    }
}

/// Loads the draft model of speculative decoding from `dir` (config.json and
/// safetensors weights; a tokenizer there is optional) and checks that it can
/// draft for `target`: the same number of logits, and, when the directory has a
/// tokenizer, one of the same vocabulary size as the target's.
pub fn load_draft(dir: &Path, target: &Loaded) -> Result<Model> {
    if !dir.is_dir() {
        bail!("draft model directory {} does not exist", dir.display());
    }
    let config_path = dir.join("config.json");
    let config = Qwen3Config::from_file(&config_path)?;
    let want = target.model.logits_len();
    if config.vocab_size != want {
        bail!(
            "draft model {} has {} logits per step but the target has {}: \
             the draft must share the target's tokenizer and vocabulary",
            dir.display(),
            config.vocab_size,
            want
        );
    }
    let tokenizer = tokenizer_path(dir);
    if tokenizer.exists() {
        let t = Tokenizer::from_file(&tokenizer)?;
        if t.vocab_size() != target.tokenizer.vocab_size() {
            bail!(
                "draft tokenizer {} has {} tokens but the target's has {}: \
                 the draft must share the target's tokenizer",
                tokenizer.display(),
                t.vocab_size(),
                target.tokenizer.vocab_size()
            );
        }
    }
    Model::from_safetensors(&config, &safetensors_files(dir)?)
        .with_context(|| format!("draft model {}", dir.display()))
}
