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
///
/// The numbers are kept as the file writes them, in `f64` (as Python, and so Hugging
/// Face, reads them); [`to_params`](GenerationConfig::to_params) checks them before they
/// are rounded to the `f32` of [`SamplingParams`], so rounding never turns a value that
/// is out of range, or one that is on, into a valid or an off one.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct GenerationConfig {
    /// `false` means greedy decoding, whatever the other fields say.
    #[serde(default)]
    pub do_sample: bool,
    /// Temperature.
    pub temperature: Option<f64>,
    /// Top-k; `0` disables it.
    pub top_k: Option<usize>,
    /// Top-p.
    pub top_p: Option<f64>,
    /// Min-p.
    pub min_p: Option<f64>,
    /// Repetition penalty.
    pub repetition_penalty: Option<f64>,
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
    /// `temperature`, `top_p` and `min_p` are read only when `do_sample` is true (Hugging
    /// Face ignores them otherwise); `repetition_penalty` always. Each value read is
    /// checked as the file writes it, against the range [`SamplingParams`] accepts, and
    /// then rounded to `f32`:
    /// - `top_p` or `min_p` above 1 is refused even when `f32` would round it to 1
    ///   (`1.00000001`), as Hugging Face and vLLM refuse it;
    /// - a positive value that `f32` rounds to 0 (a `temperature` of `1e-50`, which would
    ///   silently become greedy; a `min_p` that would turn off) or to infinity (`1e39`)
    ///   is refused;
    /// - a value in range that `f32` rounds to a neighbour in range (`0.99999999` to 1)
    ///   is kept as rounded.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the field, with the file's value, for a value
    /// outside its range or one that `f32` cannot hold.
    pub fn to_params(&self) -> Result<SamplingParams, Error> {
        let mut b = SamplingParams::builder();
        if !self.do_sample {
            b = b.temperature(0.0);
        } else {
            if let Some(t) = self.temperature {
                if !(t.is_finite() && t >= 0.0) {
                    return bad("temperature", t, "a finite value >= 0");
                }
            }
            if let Some(p) = self.top_p {
                if !(p > 0.0 && p <= 1.0) {
                    return bad("top_p", p, "a value in (0, 1]");
                }
            }
            if let Some(p) = self.min_p {
                if !(0.0..=1.0).contains(&p) {
                    return bad("min_p", p, "a value in [0, 1]");
                }
            }
            b = b
                .temperature(narrow("temperature", self.temperature.unwrap_or(1.0))?)
                .top_p(narrow("top_p", self.top_p.unwrap_or(1.0))?);
            match self.top_k.unwrap_or(50) {
                0 => {}
                k => b = b.top_k(k),
            }
            if let Some(p) = self.min_p {
                b = b.min_p(narrow("min_p", p)?);
            }
        }
        if let Some(r) = self.repetition_penalty {
            if !(r.is_finite() && r > 0.0) {
                return bad("repetition_penalty", r, "a finite value > 0");
            }
            b = b.repetition_penalty(narrow("repetition_penalty", r)?);
        }
        b.build()
    }
}

fn bad<T>(name: &'static str, value: f64, expected: &'static str) -> Result<T, Error> {
    Err(Error::InvalidParameter {
        name,
        value,
        expected,
    })
}

/// `value` as the `f32` the sampler uses, or an error naming `name` when the rounding
/// would turn a nonzero value into 0 or a finite one into infinity.
fn narrow(name: &'static str, value: f64) -> Result<f32, Error> {
    let x = value as f32;
    if value != 0.0 && x == 0.0 {
        return bad(
            name,
            value,
            "0, or a magnitude of at least the smallest positive f32 (about 1.4e-45)",
        );
    }
    if value.is_finite() && x.is_infinite() {
        return bad(
            name,
            value,
            "a magnitude of at most f32::MAX (about 3.4e38)",
        );
    }
    Ok(x)
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
