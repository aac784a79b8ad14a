//! Requests as data: the JSON that users already send to OpenAI, vLLM and llama.cpp's
//! server, read into this crate's types (feature `serde`).
//!
//! Each provider has its module with a `parse` function (and `parse_value` for a parsed
//! [`serde_json::Value`]):
//!
//! - [`openai`]: the sampling fields of `/v1/chat/completions` and `/v1/completions`;
//! - [`vllm`]: those, plus vLLM's extra sampling and guided-decoding fields;
//! - [`llama_cpp`]: llama.cpp server's `/completion` fields.
//!
//! They give a [`Request`]: [`SamplingParams`] (logprobs included), [`StopConditions`],
//! `n`, which logprob to report, bad words, allowed ids, a grammar as data
//! ([`GrammarSpec`]) and, for llama.cpp, the samplers [`SamplingParams`] does not hold
//! ([`ExtraSampler`]), ready to be built into [`Chain`](crate::Chain) stages.
//!
//! # Errors and unknown fields
//!
//! A field with a bad value (a wrong type, out of its range, an id that is not a
//! number) gives [`RequestError::Field`] naming that field as the request spells it
//! (`"top_p"`, `"repeat_penalty"`, `"logit_bias"`), with a reason. `null` is the same
//! as a missing field. **Unknown fields are ignored**, as the servers ignore them (a
//! request also carries `model`, `messages`, `stream`, ...): a misspelt field is
//! therefore silently ignored too. Nothing a request holds makes a parser panic.
//!
//! A JSON schema may nest at most [`MAX_SCHEMA_DEPTH`] arrays and objects, so that a
//! parsed [`Request`], written with serde_json, reads back: a deeper one is a
//! [`RequestError::Field`] naming the field that held it.
//!
//! # Which logprob
//!
//! OpenAI's `logprob` field, and its `top_logprobs`, are filled from the **raw model
//! distribution** by default ([`LogprobKind::Raw`]: [`Sample::raw_logprob`], the
//! log-softmax of the unprocessed row), which is what vLLM reports by default
//! (`raw_logprobs`) and what llama.cpp's `n_probs` reports unless `post_sampling_probs`
//! is set. The alternatives are the most likely tokens under that distribution
//! ([`Sample::alternatives`]). A llama.cpp request with `"post_sampling_probs": true`
//! asks for [`LogprobKind::Processed`]: the final distribution the token was drawn from
//! ([`Sample::logprob`]). [`Request::logprob_kind`] records the choice, and
//! [`TokenLogprob::from_sample`] builds OpenAI's record with either.
//!
//! # Example
//! ```
//! use logits::request::{openai, TokenLogprob};
//! use logits::{LogprobKind, Sampler};
//!
//! let request = openai::parse(r#"{
//!     "model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}],
//!     "temperature": 0.6, "top_p": 0.95, "seed": 42, "max_tokens": 64,
//!     "stop": ["\nUser:"], "logprobs": true, "top_logprobs": 2,
//!     "logit_bias": {"3": -100}
//! }"#)?;
//! assert_eq!(request.params.temperature(), 0.6);
//! assert_eq!(request.params.logprobs(), Some(2));
//! assert_eq!(request.stop.max_tokens(), Some(64));
//!
//! let mut sampler = Sampler::new(request.params.clone(), 4).unwrap();
//! let sample = sampler.sample(&[1.0f32, 3.0, 2.0, 0.5]).unwrap();
//! let record = TokenLogprob::from_sample(&sample, request.logprob_kind, |id| format!("t{id}"))
//!     .expect("logprobs were requested");
//! assert_eq!(record.top_logprobs.len(), 2);
//! let json = serde_json::to_value(&record).unwrap();
//! assert!(json["token"].is_string() && json["bytes"].is_array());
//! # Ok::<(), logits::request::RequestError>(())
//! ```

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::Error;
use crate::params::{SamplingParams, SamplingParamsBuilder};
use crate::stop::{StopConditions, StopConditionsBuilder, StopError};
use crate::{LogprobKind, Sample, TokenId, MAX_LOGPROBS};

pub mod llama_cpp;
pub mod openai;
pub mod vllm;

/// A bad request: the text is not a JSON object, or one field's value is refused.
///
/// ```
/// use logits::request::{vllm, RequestError};
///
/// let err = vllm::parse(r#"{"top_p": 2}"#).unwrap_err();
/// assert!(matches!(err, RequestError::Field { field: "top_p", .. }));
/// assert_eq!(err.field(), Some("top_p"));
/// assert!(matches!(vllm::parse("[1, 2]"), Err(RequestError::NotAnObject)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The text is not JSON.
    #[error("request is not valid JSON: {0}")]
    Json(String),
    /// The JSON is not an object.
    #[error("request is not a JSON object")]
    NotAnObject,
    /// A field's value is refused.
    #[error("field `{field}`: {reason}")]
    Field {
        /// The field, as the request spells it (`"top_p"`, `"repeat_penalty"`, ...).
        field: &'static str,
        /// What is wrong with it, with the value given.
        reason: String,
    },
}

impl RequestError {
    /// The field refused, if the error is about one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            RequestError::Field { field, .. } => Some(field),
            _ => None,
        }
    }

    pub(crate) fn field_err(field: &'static str, reason: impl Into<String>) -> Self {
        RequestError::Field {
            field,
            reason: reason.into(),
        }
    }
}

/// A grammar the output must follow, as data: compile it with
/// [`grammar`](crate::grammar) (with the `llguidance` feature: `LlgEngine::json_schema`,
/// `regex` or `lark`; [`Choice`](crate::grammar::Choice) for a list of strings).
///
/// Written as `{"json_schema": {...}}`, `{"regex": "..."}`, ...
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrammarSpec {
    /// A JSON schema (vLLM `guided_json`, llama.cpp `json_schema`, OpenAI
    /// `response_format` `json_schema`; `json_object` is the schema `{"type": "object"}`).
    JsonSchema(Value),
    /// A regular expression the whole output matches (vLLM `guided_regex`).
    Regex(String),
    /// One of these strings exactly (vLLM `guided_choice`).
    Choice(Vec<String>),
    /// A context-free grammar in the syntax of vLLM's guided-decoding backend
    /// (`guided_grammar`: EBNF, usually GBNF for xgrammar or Lark for outlines and
    /// llguidance).
    Grammar(String),
    /// A GBNF grammar (llama.cpp `grammar`).
    Gbnf(String),
}

/// A llama.cpp sampler that [`SamplingParams`] does not hold, with its parameters
/// checked by the stage's own constructor. Build the stage and put it in a
/// [`Chain`](crate::Chain) (llama.cpp's order: `penalties, dry, top_n_sigma, top_k,
/// typical_p, top_p, min_p, xtc, temperature`; mirostat replaces the cuts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtraSampler {
    /// [`TypicalP::new(p)`](crate::TypicalP::new): `typical_p` below 1.
    TypicalP {
        /// `typical_p`.
        p: f32,
    },
    /// [`TopNSigma::new(n)`](crate::TopNSigma::new): `top_n_sigma` above 0.
    TopNSigma {
        /// `top_n_sigma`.
        n: f32,
    },
    /// [`Xtc::new(probability, threshold)`](crate::Xtc::new): `xtc_probability` above 0
    /// and `xtc_threshold` at most 0.5.
    Xtc {
        /// `xtc_probability`.
        probability: f32,
        /// `xtc_threshold`.
        threshold: f32,
    },
    /// [`DynamicTemperature::new(temperature, range, exponent)`](crate::DynamicTemperature::new):
    /// `dynatemp_range` above 0 (the temperature is the params').
    DynamicTemperature {
        /// `dynatemp_range`.
        range: f32,
        /// `dynatemp_exponent`.
        exponent: f32,
    },
    /// [`Mirostat::new(n_vocab, tau, eta, 100)`](crate::Mirostat::new): `mirostat: 1`.
    Mirostat {
        /// `mirostat_tau`.
        tau: f32,
        /// `mirostat_eta`.
        eta: f32,
    },
    /// [`MirostatV2::new(tau, eta)`](crate::MirostatV2::new): `mirostat: 2`.
    MirostatV2 {
        /// `mirostat_tau`.
        tau: f32,
        /// `mirostat_eta`.
        eta: f32,
    },
    /// [`Dry::new(multiplier, base, allowed_length)`](crate::Dry::new): `dry_multiplier`
    /// above 0. The sequence breakers are strings: tokenize them for
    /// [`Dry::sequence_breakers`](crate::Dry::sequence_breakers).
    Dry {
        /// `dry_multiplier`.
        multiplier: f32,
        /// `dry_base`.
        base: f32,
        /// `dry_allowed_length`.
        allowed_length: usize,
        /// `dry_penalty_last_n`; `None` is the whole context (`-1`).
        penalty_last_n: Option<usize>,
        /// `dry_sequence_breakers`.
        sequence_breakers: Vec<String>,
    },
}

/// One request's sampling, stopping and output settings, as data.
///
/// Built by [`openai::parse`], [`vllm::parse`] or [`llama_cpp::parse`]; serialisable, so
/// it can be logged and replayed (deserialising checks the params and stop conditions
/// as their builders do, and refuses `n = 0`).
///
/// Token ids need the vocabulary to be checked: [`Sampler::new`](crate::Sampler::new)
/// checks the bias ids, the stages check theirs ([`AllowedTokens`](crate::AllowedTokens)
/// at sampling time). Strings (bad words, llama.cpp's text bias, DRY's breakers) need
/// the tokenizer, which this crate does not have: they are kept as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The sampling parameters, `logprobs` included.
    pub params: SamplingParams,
    /// Stop strings, stop token ids, `max_tokens` and `min_tokens`.
    pub stop: StopConditions,
    /// How many samples of the prompt to generate (OpenAI and vLLM `n`; 1 otherwise).
    pub n: NonZeroUsize,
    /// Whether the request set a seed. Without one, `params` keep the defaults' seed;
    /// an engine that wants fresh randomness per request sets its own.
    pub seeded: bool,
    /// Which logprob fills OpenAI's `logprob` field (see the [module docs](self)).
    pub logprob_kind: LogprobKind,
    /// Generate past the end-of-sequence token (vLLM and llama.cpp `ignore_eos`): the
    /// caller leaves the model's EOS ids out of the stop tokens and masks nothing.
    pub ignore_eos: bool,
    /// vLLM `bad_words`, as text: tokenize each (with and without a leading space, as
    /// vLLM does) for [`BadWords`](crate::BadWords).
    pub bad_words: Vec<String>,
    /// vLLM `allowed_token_ids`, for [`AllowedTokens`](crate::AllowedTokens).
    pub allowed_token_ids: Option<Vec<TokenId>>,
    /// The grammar the output must follow.
    pub grammar: Option<GrammarSpec>,
    /// llama.cpp's logit bias given as text (`[["Hello", -0.5]]`): tokenize the text and
    /// bias each of its tokens. `-inf` is llama.cpp's `false` (a ban).
    #[serde(with = "text_bias")]
    pub text_logit_bias: Vec<(String, f32)>,
    /// llama.cpp samplers outside [`SamplingParams`], in the order above.
    pub extra_samplers: Vec<ExtraSampler>,
}

mod text_bias {
    use crate::serde_impls::ExtF32;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[(String, f32)], s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<(&str, ExtF32)> = v.iter().map(|(t, b)| (t.as_str(), ExtF32(*b))).collect();
        v.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, f32)>, D::Error> {
        let v = Vec::<(String, ExtF32)>::deserialize(d)?;
        Ok(v.into_iter().map(|(t, b)| (t, b.0)).collect())
    }
}

impl Request {
    /// A request with these parameters and nothing else: no stop condition, `n = 1`,
    /// raw logprobs.
    pub fn new(params: SamplingParams) -> Self {
        Request {
            params,
            stop: StopConditions::default(),
            n: NonZeroUsize::MIN,
            seeded: false,
            logprob_kind: LogprobKind::Raw,
            ignore_eos: false,
            bad_words: Vec::new(),
            allowed_token_ids: None,
            grammar: None,
            text_logit_bias: Vec::new(),
            extra_samplers: Vec::new(),
        }
    }
}

/// One alternative in OpenAI's `top_logprobs` list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    /// The token's text (lossy UTF-8 of `bytes`).
    pub token: String,
    /// Its logprob; `-9999.0` for a token with no probability, as OpenAI writes it.
    pub logprob: f32,
    /// The token's bytes.
    pub bytes: Option<Vec<u8>>,
}

/// OpenAI's logprobs record of one generated token:
/// `{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}`,
/// one entry of `choices[i].logprobs.content`.
///
/// `-inf` (a token the pipeline removed, under [`LogprobKind::Processed`]) is written as
/// `-9999.0`, the value OpenAI uses for a vanishing probability, since JSON has no
/// infinity.
///
/// ```
/// use logits::request::TokenLogprob;
/// use logits::{LogprobKind, Sampler, SamplingParams};
///
/// let mut sampler = Sampler::new(SamplingParams::builder().logprobs(1).build()?, 3)?;
/// let sample = sampler.sample(&[0.0f32, 2.0, 1.0])?;
/// let r = TokenLogprob::from_sample(&sample, LogprobKind::Raw, |id| ["a", "b", "c"][id as usize])
///     .unwrap();
/// assert_eq!(r.logprob, sample.raw_logprob.unwrap());
/// assert_eq!(r.top_logprobs[0].token, "b");
/// let json = serde_json::to_string(&r).unwrap();
/// assert!(json.starts_with(r#"{"token":""#) && json.contains(r#""top_logprobs":[{"token":"b""#));
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token's text (lossy UTF-8 of `bytes`: a token that ends inside a character
    /// shows U+FFFD here and its exact bytes below).
    pub token: String,
    /// Its logprob, of the kind chosen.
    pub logprob: f32,
    /// The token's bytes.
    pub bytes: Option<Vec<u8>>,
    /// The alternatives, most likely (under the raw distribution) first.
    pub top_logprobs: Vec<TopLogprob>,
}

/// OpenAI's stand-in for `-inf`.
const OPENAI_NEG_INF: f32 = -9999.0;

fn openai_logprob(x: f32) -> f32 {
    if x.is_finite() {
        x.max(OPENAI_NEG_INF)
    } else {
        OPENAI_NEG_INF
    }
}

impl TokenLogprob {
    /// The record of `sample`, with `kind`'s logprobs and `token_bytes` giving each
    /// token's bytes (the tokenizer's piece for that id).
    ///
    /// Returns `None` for [`LogprobKind::Raw`] when the sample carries no raw logprob
    /// (logprobs were not requested in its [`SamplingParams`]).
    pub fn from_sample<B: AsRef<[u8]>>(
        sample: &Sample,
        kind: LogprobKind,
        mut token_bytes: impl FnMut(TokenId) -> B,
    ) -> Option<Self> {
        let logprob = match kind {
            LogprobKind::Raw => sample.raw_logprob?,
            LogprobKind::Processed => sample.logprob,
        };
        let mut entry = |id: TokenId| {
            let b = token_bytes(id);
            let b = b.as_ref();
            (String::from_utf8_lossy(b).into_owned(), b.to_vec())
        };
        let (token, bytes) = entry(sample.token);
        let top_logprobs = sample
            .alternatives()
            .iter()
            .map(|a| {
                let (token, bytes) = entry(a.token);
                let lp = match kind {
                    LogprobKind::Raw => a.raw_logprob,
                    LogprobKind::Processed => a.logprob,
                };
                TopLogprob {
                    token,
                    logprob: openai_logprob(lp),
                    bytes: Some(bytes),
                }
            })
            .collect();
        Some(TokenLogprob {
            token,
            logprob: openai_logprob(logprob),
            bytes: Some(bytes),
            top_logprobs,
        })
    }
}

// ---------------------------------------------------------------------------------
// Reading fields.

/// The fields of a request object, read with typed errors naming each field.
pub(crate) struct Fields<'a> {
    obj: &'a Map<String, Value>,
}

pub(crate) fn object(value: &Value) -> Result<Fields<'_>, RequestError> {
    match value {
        Value::Object(obj) => Ok(Fields { obj }),
        _ => Err(RequestError::NotAnObject),
    }
}

pub(crate) fn parse_json(text: &str) -> Result<Value, RequestError> {
    serde_json::from_str(text).map_err(|e| RequestError::Json(e.to_string()))
}

/// The most arrays and objects a request's JSON schema may nest (`{}` nests one,
/// `{"a": [1]}` two).
///
/// serde_json reads at most 127 nested levels (its default recursion limit of 128 stops
/// at the 128th), and a serialised [`Request`] holds its schema two levels down
/// (`{"grammar": {"json_schema": ...}}`), so 125 is the deepest schema whose
/// [`Request`] round-trips. A request format
/// that puts the schema deeper (OpenAI's `response_format.json_schema.schema`) cannot
/// reach this limit; llama.cpp's top-level `json_schema` and vLLM's `guided_json`
/// written as a string can, and are checked against it.
pub const MAX_SCHEMA_DEPTH: usize = 125;

/// Refuses a schema nested deeper than [`MAX_SCHEMA_DEPTH`] (see there), naming `field`.
pub(crate) fn check_schema_depth(field: &'static str, schema: &Value) -> Result<(), RequestError> {
    // Depth first, with the depth of each value waiting; no recursion, so any value
    // (however it was built) is checked without growing the call stack.
    let mut stack = vec![(schema, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        let depth = match v {
            Value::Array(_) | Value::Object(_) => depth + 1,
            _ => continue,
        };
        if depth > MAX_SCHEMA_DEPTH {
            return Err(RequestError::field_err(
                field,
                format!("the schema nests more than {MAX_SCHEMA_DEPTH} arrays and objects"),
            ));
        }
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, depth))),
            Value::Object(o) => stack.extend(o.values().map(|c| (c, depth))),
            _ => {}
        }
    }
    Ok(())
}

/// A short rendering of a value for an error message.
pub(crate) fn show(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 64 {
        let mut end = 61;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

impl<'a> Fields<'a> {
    /// The value, or `None` when missing or `null`.
    pub(crate) fn get(&self, name: &str) -> Option<&'a Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub(crate) fn number(&self, name: &'static str) -> Result<Option<f64>, RequestError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| {
                    RequestError::field_err(name, format!("expected a number, got {}", show(v)))
                }),
        }
    }

    /// A number in `[lo, hi]` (either bound open when `open_lo` / `open_hi`), checked as
    /// written and then narrowed to `f32`.
    pub(crate) fn f32_in(
        &self,
        name: &'static str,
        lo: f64,
        hi: f64,
        open_lo: bool,
        expected: &str,
    ) -> Result<Option<f32>, RequestError> {
        let Some(x) = self.number(name)? else {
            return Ok(None);
        };
        let low_ok = if open_lo { x > lo } else { x >= lo };
        if !(low_ok && x <= hi) {
            return Err(RequestError::field_err(
                name,
                format!("expected {expected}, got {x}"),
            ));
        }
        narrow(name, x).map(Some)
    }

    /// A finite number that `f32` holds.
    pub(crate) fn f32(&self, name: &'static str) -> Result<Option<f32>, RequestError> {
        match self.number(name)? {
            None => Ok(None),
            Some(x) => narrow(name, x).map(Some),
        }
    }

    /// An integer (a number with no fraction, such as `2` or `2.0`).
    pub(crate) fn int(&self, name: &'static str) -> Result<Option<i128>, RequestError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        if let Some(i) = v.as_i64() {
            return Ok(Some(i.into()));
        }
        if let Some(u) = v.as_u64() {
            return Ok(Some(u.into()));
        }
        match v.as_f64() {
            Some(x) if x.is_finite() && x.fract() == 0.0 && x.abs() < 1.8e19 => Ok(Some(x as i128)),
            _ => Err(RequestError::field_err(
                name,
                format!("expected an integer, got {}", show(v)),
            )),
        }
    }

    /// An integer in `lo..=hi`, as `usize`.
    pub(crate) fn usize_in(
        &self,
        name: &'static str,
        lo: i128,
        hi: i128,
    ) -> Result<Option<usize>, RequestError> {
        match self.int(name)? {
            None => Ok(None),
            Some(i) if i >= lo && i <= hi => usize::try_from(i)
                .map(Some)
                .map_err(|_| RequestError::field_err(name, format!("{i} is too large"))),
            Some(i) => Err(RequestError::field_err(
                name,
                if hi == i128::MAX {
                    format!("expected an integer >= {lo}, got {i}")
                } else {
                    format!("expected an integer in {lo}..={hi}, got {i}")
                },
            )),
        }
    }

    pub(crate) fn bool(&self, name: &'static str) -> Result<Option<bool>, RequestError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(RequestError::field_err(
                name,
                format!("expected true or false, got {}", show(v)),
            )),
        }
    }

    pub(crate) fn string(&self, name: &'static str) -> Result<Option<&'a str>, RequestError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(RequestError::field_err(
                name,
                format!("expected a string, got {}", show(v)),
            )),
        }
    }

    /// A list of strings.
    pub(crate) fn strings(&self, name: &'static str) -> Result<Option<Vec<String>>, RequestError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(RequestError::field_err(
                        name,
                        format!("expected a list of strings, found {}", show(v)),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(v) => Err(RequestError::field_err(
                name,
                format!("expected a list of strings, got {}", show(v)),
            )),
        }
    }

    /// A string or a list of strings.
    pub(crate) fn one_or_many_strings(
        &self,
        name: &'static str,
    ) -> Result<Option<Vec<String>>, RequestError> {
        match self.get(name) {
            Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
            _ => self.strings(name),
        }
    }

    /// A list of token ids.
    pub(crate) fn token_ids(
        &self,
        name: &'static str,
    ) -> Result<Option<Vec<TokenId>>, RequestError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    token_id(v).ok_or_else(|| {
                        RequestError::field_err(
                            name,
                            format!(
                                "expected token ids (integers in 0..=4294967295), found {}",
                                show(v)
                            ),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(v) => Err(RequestError::field_err(
                name,
                format!("expected a list of token ids, got {}", show(v)),
            )),
        }
    }
}

/// A token id written as a JSON integer.
pub(crate) fn token_id(v: &Value) -> Option<TokenId> {
    v.as_u64().and_then(|u| TokenId::try_from(u).ok())
}

/// A token id written as a decimal string (OpenAI's `logit_bias` keys).
pub(crate) fn token_id_str(s: &str) -> Option<TokenId> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `value` as an `f32`, refusing one that rounds to 0 from nonzero or overflows.
pub(crate) fn narrow(name: &'static str, value: f64) -> Result<f32, RequestError> {
    let x = value as f32;
    if value != 0.0 && x == 0.0 {
        return Err(RequestError::field_err(
            name,
            format!("{value} rounds to 0 as an f32"),
        ));
    }
    if value.is_finite() && x.is_infinite() {
        return Err(RequestError::field_err(
            name,
            format!("{value} is beyond f32's range"),
        ));
    }
    Ok(x)
}

/// Builds the params, naming the request's field for any parameter still refused.
pub(crate) fn build_params(
    b: SamplingParamsBuilder,
    field_of: impl Fn(&'static str) -> &'static str,
) -> Result<SamplingParams, RequestError> {
    b.build().map_err(|e| match e {
        Error::InvalidParameter { name, .. } => {
            RequestError::field_err(field_of(name), e.to_string())
        }
        other => RequestError::field_err("params", other.to_string()),
    })
}

/// Builds the stop conditions; `max_field` and `min_field` name the request's fields.
pub(crate) fn build_stop(
    b: StopConditionsBuilder,
    stop_field: &'static str,
    max_field: &'static str,
    min_field: &'static str,
) -> Result<StopConditions, RequestError> {
    b.build().map_err(|e| {
        let field = match e {
            StopError::EmptyStopString { .. } => stop_field,
            StopError::ZeroMaxTokens => max_field,
            _ => min_field,
        };
        RequestError::field_err(field, e.to_string())
    })
}

/// A logprobs count checked against [`MAX_LOGPROBS`].
pub(crate) fn logprobs_count(
    name: &'static str,
    f: &Fields<'_>,
) -> Result<Option<usize>, RequestError> {
    f.usize_in(name, 0, MAX_LOGPROBS as i128)
}

/// OpenAI's `logit_bias`: an object of token ids written as strings to biases in
/// `[-100, 100]`.
pub(crate) fn openai_logit_bias(
    f: &Fields<'_>,
    mut b: SamplingParamsBuilder,
) -> Result<SamplingParamsBuilder, RequestError> {
    const FIELD: &str = "logit_bias";
    let Some(v) = f.get(FIELD) else {
        return Ok(b);
    };
    let Value::Object(map) = v else {
        return Err(RequestError::field_err(
            FIELD,
            format!("expected an object of token ids to biases, got {}", show(v)),
        ));
    };
    for (key, bias) in map {
        let id = token_id_str(key).ok_or_else(|| {
            RequestError::field_err(FIELD, format!("key {key:?} is not a token id"))
        })?;
        let x = bias
            .as_f64()
            .filter(|x| (-100.0..=100.0).contains(x))
            .ok_or_else(|| {
                RequestError::field_err(
                    FIELD,
                    format!(
                        "bias of token {id}: expected a number in [-100, 100], got {}",
                        show(bias)
                    ),
                )
            })?;
        b = b.logit_bias(id, narrow(FIELD, x)?);
    }
    Ok(b)
}

/// OpenAI's `logprobs` (true/false in chat, a count in legacy completions) with
/// `top_logprobs`: the number of alternatives, if logprobs are requested.
pub(crate) fn openai_logprobs(f: &Fields<'_>) -> Result<Option<usize>, RequestError> {
    let top = logprobs_count("top_logprobs", f)?;
    let on = match f.get("logprobs") {
        None => None,
        Some(Value::Bool(b)) => Some(if *b { top.unwrap_or(0) } else { usize::MAX }),
        Some(Value::Number(_)) => {
            if top.is_some() {
                return Err(RequestError::field_err(
                    "top_logprobs",
                    "goes with `logprobs: true`, not with a `logprobs` count",
                ));
            }
            logprobs_count("logprobs", f)?
        }
        Some(v) => {
            return Err(RequestError::field_err(
                "logprobs",
                format!("expected true, false or a count in 0..=20, got {}", show(v)),
            ))
        }
    };
    match on {
        Some(usize::MAX) | None if top.is_some_and(|t| t > 0) => Err(RequestError::field_err(
            "top_logprobs",
            "needs `logprobs: true`",
        )),
        Some(usize::MAX) | None => Ok(None),
        Some(n) => Ok(Some(n)),
    }
}
