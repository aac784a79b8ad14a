//! Reading Hugging Face's `generation_config.json` (feature `serde`).

use crate::error::Error;
use crate::params::SamplingParams;
use crate::TokenId;

/// The sampling fields of a Hugging Face `generation_config.json`.
///
/// Missing fields take Hugging Face's defaults: `do_sample` false (greedy),
/// `temperature` 1.0, `top_k` 50, `top_p` 1.0, no `min_p`, `repetition_penalty` 1.0.
/// `top_k: 0` means no top-k, as in Hugging Face. Unknown fields are ignored (the file
/// carries many that are not about sampling).
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct GenerationConfig {
    /// `false` means greedy decoding, whatever the other fields say.
    #[serde(default)]
    pub do_sample: bool,
    /// Temperature.
    pub temperature: Option<f32>,
    /// Top-k; `0` disables it.
    pub top_k: Option<usize>,
    /// Top-p.
    pub top_p: Option<f32>,
    /// Min-p.
    pub min_p: Option<f32>,
    /// Repetition penalty.
    pub repetition_penalty: Option<f32>,
    /// End-of-sequence token id(s): a number or a list in the file.
    #[serde(default, deserialize_with = "one_or_many")]
    pub eos_token_id: Vec<TokenId>,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<TokenId>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(TokenId),
        Many(Vec<TokenId>),
        None,
    }
    Ok(
        match <Option<OneOrMany> as serde::Deserialize>::deserialize(d)? {
            Some(OneOrMany::One(x)) => vec![x],
            Some(OneOrMany::Many(v)) => v,
            Some(OneOrMany::None) | None => Vec::new(),
        },
    )
}

impl GenerationConfig {
    /// Parses the JSON text of a `generation_config.json`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the text is not JSON of that shape.
    pub fn from_json(text: &str) -> Result<Self, Error> {
        serde_json::from_str(text).map_err(|e| Error::InvalidConfig(e.to_string()))
    }

    /// The sampling parameters this file asks for, with `seed` 0 (set it with
    /// [`SamplingParams::to_builder`]).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for a value outside its range.
    pub fn to_params(&self) -> Result<SamplingParams, Error> {
        let mut b = SamplingParams::builder();
        if !self.do_sample {
            b = b.temperature(0.0);
        } else {
            b = b
                .temperature(self.temperature.unwrap_or(1.0))
                .top_p(self.top_p.unwrap_or(1.0));
            match self.top_k.unwrap_or(50) {
                0 => {}
                k => b = b.top_k(k),
            }
            if let Some(p) = self.min_p {
                b = b.min_p(p);
            }
        }
        if let Some(r) = self.repetition_penalty {
            b = b.repetition_penalty(r);
        }
        b.build()
    }
}

impl SamplingParams {
    /// Sampling parameters from the text of a Hugging Face `generation_config.json`
    /// (see [`GenerationConfig`] for the defaults).
    ///
    /// # Example
    /// ```
    /// use logits::SamplingParams;
    ///
    /// let qwen3 = r#"{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
    ///                 "eos_token_id": [151645, 151643]}"#;
    /// let p = SamplingParams::from_generation_config_json(qwen3)?;
    /// assert_eq!((p.temperature(), p.top_k(), p.top_p()), (0.6, Some(20), 0.95));
    /// assert!(SamplingParams::from_generation_config_json(r#"{"do_sample": false}"#)?.is_greedy());
    /// # Ok::<(), logits::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for text that is not such a file;
    /// [`Error::InvalidParameter`] for a value outside its range.
    pub fn from_generation_config_json(text: &str) -> Result<Self, Error> {
        GenerationConfig::from_json(text)?.to_params()
    }
}
