//! Serde support for the crate's data types (feature `serde`).
//!
//! Non-finite `f32`s are written as the strings `"-inf"`, `"inf"` and `"NaN"`, as in the
//! conformance vectors: JSON has no such numbers, and `serde_json` would write `null`
//! (which it cannot read back as a number). A `-inf` logit bias (a ban) or a `-inf`
//! logprob (a token the pipeline removed) round-trips. Deserialising a type checks it
//! as its builder does.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::params::{SamplingParams, SamplingParamsBuilder};
use crate::sample::{Alternative, Sample};
use crate::{TokenId, MAX_LOGPROBS};

/// An `f32` that may be `-inf`, `inf` or NaN, written as a number or one of those strings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ExtF32(pub(crate) f32);

impl Serialize for ExtF32 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.0;
        if x.is_finite() {
            s.serialize_f32(x)
        } else if x.is_nan() {
            s.serialize_str("NaN")
        } else if x > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }
}

impl<'de> Deserialize<'de> for ExtF32 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum NumOrStr<'a> {
            Num(f64),
            #[serde(borrow)]
            Str(std::borrow::Cow<'a, str>),
        }
        match NumOrStr::deserialize(d)? {
            // As an f32; a finite f64 beyond f32's range becomes infinite and is refused
            // by the type's own checks where that matters.
            NumOrStr::Num(x) => Ok(ExtF32(x as f32)),
            NumOrStr::Str(s) => match &*s {
                "-inf" | "-Infinity" => Ok(ExtF32(f32::NEG_INFINITY)),
                "inf" | "Infinity" | "+inf" => Ok(ExtF32(f32::INFINITY)),
                "NaN" | "nan" => Ok(ExtF32(f32::NAN)),
                other => Err(serde::de::Error::custom(format_args!(
                    "expected a number, \"-inf\", \"inf\" or \"NaN\", got {other:?}"
                ))),
            },
        }
    }
}

/// `#[serde(with = "ext_f32")]` for an `f32` field.
pub(crate) mod ext_f32 {
    use super::ExtF32;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(x: &f32, s: S) -> Result<S::Ok, S::Error> {
        ExtF32(*x).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
        Ok(ExtF32::deserialize(d)?.0)
    }
}

/// The wire form of [`SamplingParams`]: every field optional, defaulting as the builder.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamsWire {
    #[serde(default = "one")]
    temperature: ExtF32,
    #[serde(default)]
    top_k: Option<usize>,
    #[serde(default = "one")]
    top_p: ExtF32,
    #[serde(default = "zero")]
    min_p: ExtF32,
    #[serde(default = "one")]
    repetition_penalty: ExtF32,
    #[serde(default = "zero")]
    frequency_penalty: ExtF32,
    #[serde(default = "zero")]
    presence_penalty: ExtF32,
    #[serde(default)]
    penalty_window: Option<usize>,
    #[serde(default = "yes")]
    penalize_prompt: bool,
    #[serde(default)]
    logit_bias: Vec<(TokenId, ExtF32)>,
    #[serde(default = "one_usize")]
    min_tokens_to_keep: usize,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    logprobs: Option<usize>,
}

fn one() -> ExtF32 {
    ExtF32(1.0)
}
fn zero() -> ExtF32 {
    ExtF32(0.0)
}
fn yes() -> bool {
    true
}
fn one_usize() -> usize {
    1
}

impl TryFrom<SamplingParamsBuilder> for SamplingParams {
    type Error = crate::Error;

    /// [`SamplingParamsBuilder::build`].
    fn try_from(b: SamplingParamsBuilder) -> Result<Self, Self::Error> {
        b.build()
    }
}

/// Written with every field, non-finite numbers as strings (`"-inf"` for a banned
/// token's bias); `logit_bias` as a list of `[id, bias]` pairs sorted by id.
impl Serialize for SamplingParams {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ParamsWire {
            temperature: ExtF32(self.temperature),
            top_k: self.top_k,
            top_p: ExtF32(self.top_p),
            min_p: ExtF32(self.min_p),
            repetition_penalty: ExtF32(self.repetition_penalty),
            frequency_penalty: ExtF32(self.frequency_penalty),
            presence_penalty: ExtF32(self.presence_penalty),
            penalty_window: self.penalty_window,
            penalize_prompt: self.penalize_prompt,
            logit_bias: self
                .logit_bias
                .iter()
                .map(|&(id, b)| (id, ExtF32(b)))
                .collect(),
            min_tokens_to_keep: self.min_tokens_to_keep,
            seed: self.seed,
            logprobs: self.logprobs,
        }
        .serialize(s)
    }
}

/// Read as the builder would be called, and checked by
/// [`build`](SamplingParamsBuilder::build): a missing field takes its default, an unknown
/// one is refused, and a value outside its range fails with the message of the
/// [`Error::InvalidParameter`](crate::Error::InvalidParameter) naming it (use
/// [`SamplingParams::from_json`] for the typed error).
impl<'de> Deserialize<'de> for SamplingParams {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        wire_to_builder(ParamsWire::deserialize(d)?)
            .build()
            .map_err(serde::de::Error::custom)
    }
}

fn wire_to_builder(w: ParamsWire) -> SamplingParamsBuilder {
    let mut b = SamplingParams::builder()
        .temperature(w.temperature.0)
        .top_p(w.top_p.0)
        .min_p(w.min_p.0)
        .repetition_penalty(w.repetition_penalty.0)
        .frequency_penalty(w.frequency_penalty.0)
        .presence_penalty(w.presence_penalty.0)
        .penalize_prompt(w.penalize_prompt)
        .min_tokens_to_keep(w.min_tokens_to_keep)
        .seed(w.seed);
    if let Some(k) = w.top_k {
        b = b.top_k(k);
    }
    if let Some(n) = w.penalty_window {
        b = b.penalty_window(n);
    }
    if let Some(n) = w.logprobs {
        b = b.logprobs(n);
    }
    for (id, bias) in w.logit_bias {
        b = b.logit_bias(id, bias.0);
    }
    b
}

impl SamplingParams {
    /// Reads parameters written by their `Serialize` impl (or by hand: every field is
    /// optional and defaults as in [`SamplingParams::builder`]), with the typed error.
    ///
    /// # Example
    /// ```
    /// use logits::{Error, SamplingParams};
    ///
    /// let p = SamplingParams::builder().temperature(0.6).top_k(20).logit_bias(7, f32::NEG_INFINITY).build()?;
    /// let text = serde_json::to_string(&p).unwrap();
    /// assert!(text.contains(r#""logit_bias":[[7,"-inf"]]"#));
    /// assert_eq!(SamplingParams::from_json(&text)?, p);
    ///
    /// let err = SamplingParams::from_json(r#"{"top_p": 1.5}"#).unwrap_err();
    /// assert!(matches!(err, Error::InvalidParameter { name: "top_p", .. }));
    /// # Ok::<(), logits::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for text that is not such an
    /// object (an unknown field, a wrong type); [`Error::InvalidParameter`](crate::Error::InvalidParameter)
    /// naming the first parameter outside its range.
    pub fn from_json(text: &str) -> Result<Self, crate::Error> {
        let bad = |e: serde_json::Error| crate::Error::InvalidConfig(e.to_string());
        let value: serde_json::Value = serde_json::from_str(text).map_err(bad)?;
        if !value.is_object() {
            return Err(crate::Error::InvalidConfig(
                "expected a JSON object of sampling parameters".to_string(),
            ));
        }
        wire_to_builder(ParamsWire::deserialize(value).map_err(bad)?).build()
    }
}

/// The wire form of [`Sample`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SampleWire {
    token: TokenId,
    logprob: ExtF32,
    #[serde(default)]
    raw_logprob: Option<ExtF32>,
    #[serde(default)]
    alternatives: Vec<Alternative>,
}

/// Written as `{"token", "logprob", "raw_logprob", "alternatives": [...]}`, non-finite
/// logprobs as strings (`"-inf"`).
impl Serialize for Sample {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        SampleWire {
            token: self.token,
            logprob: ExtF32(self.logprob),
            raw_logprob: self.raw_logprob.map(ExtF32),
            alternatives: self.alternatives().to_vec(),
        }
        .serialize(s)
    }
}

/// Refuses more than [`MAX_LOGPROBS`] alternatives, the most a `Sample` holds.
impl<'de> Deserialize<'de> for Sample {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = SampleWire::deserialize(d)?;
        if w.alternatives.len() > MAX_LOGPROBS {
            return Err(serde::de::Error::custom(format_args!(
                "{} alternatives: a sample holds at most {MAX_LOGPROBS}",
                w.alternatives.len()
            )));
        }
        let mut out = Sample::new(w.token, w.logprob.0);
        out.raw_logprob = w.raw_logprob.map(|x| x.0);
        for a in w.alternatives {
            out.push_alternative(a);
        }
        Ok(out)
    }
}
