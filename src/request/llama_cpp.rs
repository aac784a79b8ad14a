//! llama.cpp server's `/completion` requests.
//!
//! A field the request leaves out takes llama.cpp's documented default ([`defaults`]:
//! temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, `repeat_last_n` 64), unless
//! [`parse_with_defaults`] is given others (the server's command line).
//!
//! | field | valid | maps to |
//! |---|---|---|
//! | `temperature` | number; `<= 0` is greedy | [`SamplingParams::temperature`] |
//! | `top_k` | integer; `<= 0` turns it off | `top_k` |
//! | `top_p` | `(0, 1]`; `>= 1` turns it off | `top_p` |
//! | `min_p` | `[0, 1]`; `<= 0` turns it off | `min_p` |
//! | `repeat_penalty` | `> 0` | `repetition_penalty` |
//! | `repeat_last_n` | integer; `-1` the whole context, `0` counts nothing | `penalty_window` |
//! | `presence_penalty`, `frequency_penalty` | number | the penalties |
//! | `min_keep` | integer `>= 0` (0 is 1) | `min_tokens_to_keep` |
//! | `seed` | integer; `-1` (llama.cpp's random seed) leaves it unset | `seed`, [`Request::seeded`] |
//! | `n_predict` | integer `>= 1`, or `-1` for no limit | `max_tokens` |
//! | `n_probs` | `0..=20` | `logprobs` (0 is off) |
//! | `post_sampling_probs` | bool | [`Request::logprob_kind`] ([`LogprobKind::Processed`] when true) |
//! | `logit_bias` | `[[id, bias], ...]` with `false` for a ban, or `{"id": bias}`; a string instead of an id is text | `logit_bias` (`false` is `-inf`), [`Request::text_logit_bias`] |
//! | `stop` | a list of non-empty strings | stop strings |
//! | `ignore_eos` | bool | [`Request::ignore_eos`] |
//! | `grammar` | GBNF string | [`GrammarSpec::Gbnf`] |
//! | `json_schema` | object | [`GrammarSpec::JsonSchema`] |
//! | `typical_p` | `(0, 1]`; 1 is off | [`ExtraSampler::TypicalP`] |
//! | `top_n_sigma` | number; `<= 0` is off | [`ExtraSampler::TopNSigma`] |
//! | `xtc_probability`, `xtc_threshold` | off when the probability is `<= 0` or the threshold `> 0.5` | [`ExtraSampler::Xtc`] |
//! | `dynatemp_range`, `dynatemp_exponent` | off when the range is `<= 0` or greedy | [`ExtraSampler::DynamicTemperature`] |
//! | `mirostat`, `mirostat_tau`, `mirostat_eta` | `0`, `1` or `2` | [`ExtraSampler::Mirostat`], [`ExtraSampler::MirostatV2`] |
//! | `dry_multiplier`, `dry_base`, `dry_allowed_length`, `dry_penalty_last_n`, `dry_sequence_breakers` | off when the multiplier is `<= 0` | [`ExtraSampler::Dry`] |
//!
//! `samplers` (a custom order), `penalize_nl`, `tfs_z`, `n_keep`, `cache_prompt`,
//! `id_slot` and every other field are ignored: llama.cpp's default order is the one
//! [`ExtraSampler`] documents.
//!
//! ```
//! use logits::request::llama_cpp;
//!
//! let r = llama_cpp::parse(r#"{"prompt": "Building a website can be done in 10 simple steps:",
//!     "n_predict": 128, "logit_bias": [[15043, false], [15044, 1.0]], "repeat_last_n": -1}"#)?;
//! assert_eq!(r.stop.max_tokens(), Some(128));
//! assert_eq!(r.params.logit_bias(), &[(15043, f32::NEG_INFINITY), (15044, 1.0)]);
//! assert_eq!((r.params.temperature(), r.params.top_k()), (0.8, Some(40)));
//! assert_eq!(r.params.penalty_window(), None);
//! # Ok::<(), logits::request::RequestError>(())
//! ```

use serde_json::Value;

use super::openai::Parts;
use super::{
    logprobs_count, narrow, object, parse_json, show, token_id, token_id_str, ExtraSampler, Fields,
    GrammarSpec, Request, RequestError,
};
use crate::error::Error;
use crate::params::{SamplingParams, SamplingParamsBuilder};
use crate::stop::StopConditions;
use crate::{Dry, DynamicTemperature, LogprobKind, MirostatV2, TopNSigma, TypicalP, Xtc};

/// llama.cpp server's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, a
/// penalty window of 64 tokens, no penalty, seed 0.
///
/// ```
/// let d = logits::request::llama_cpp::defaults();
/// assert_eq!((d.temperature(), d.top_k(), d.top_p(), d.min_p()), (0.8, Some(40), 0.95, 0.05));
/// ```
pub fn defaults() -> SamplingParams {
    SamplingParams {
        temperature: 0.8,
        top_k: Some(40),
        top_p: 0.95,
        min_p: 0.05,
        penalty_window: Some(64),
        ..SamplingParams::default()
    }
}

/// Parses the JSON text of a llama.cpp `/completion` request, with [`defaults`].
///
/// # Errors
/// [`RequestError::Json`] or [`RequestError::NotAnObject`] for text that is not a JSON
/// object; [`RequestError::Field`] naming the first bad field.
pub fn parse(text: &str) -> Result<Request, RequestError> {
    parse_value(&parse_json(text)?)
}

/// [`parse`] for an already parsed value.
///
/// # Errors
/// As [`parse`].
pub fn parse_value(value: &Value) -> Result<Request, RequestError> {
    parse_with_defaults(value, &defaults())
}

/// The request's own name of a parameter of [`SamplingParams`].
fn field_of(name: &'static str) -> &'static str {
    match name {
        "repetition_penalty" => "repeat_penalty",
        "penalty_window" => "repeat_last_n",
        "min_tokens_to_keep" => "min_keep",
        "logprobs" => "n_probs",
        other => other,
    }
}

/// A stage constructor's error, as the request's field.
fn stage_err(e: Error) -> RequestError {
    match e {
        Error::InvalidParameter { name, .. } => {
            RequestError::field_err(field_of(name), e.to_string())
        }
        other => RequestError::field_err("samplers", other.to_string()),
    }
}

/// [`parse_value`] with other defaults for the fields the request leaves out.
///
/// # Errors
/// As [`parse`].
pub fn parse_with_defaults(
    value: &Value,
    defaults: &SamplingParams,
) -> Result<Request, RequestError> {
    let f = object(value)?;
    let mut b = defaults.to_builder();
    let mut request = Request::new(SamplingParams::default());

    if let Some(t) = f.f32("temperature")? {
        b = b.temperature(t.max(0.0));
    }
    match f.int("top_k")? {
        Some(k) if k <= 0 => b = b.no_top_k(),
        Some(k) => b = b.top_k(usize::try_from(k).unwrap_or(usize::MAX)),
        None => {}
    }
    if let Some(p) = f.number("top_p")? {
        if p <= 0.0 {
            return Err(RequestError::field_err(
                "top_p",
                format!("expected a number > 0 (>= 1 is off), got {p}"),
            ));
        }
        b = b.top_p(narrow("top_p", p.min(1.0))?);
    }
    if let Some(p) = f.number("min_p")? {
        if p > 1.0 {
            return Err(RequestError::field_err(
                "min_p",
                format!("expected a number <= 1 (<= 0 is off), got {p}"),
            ));
        }
        b = b.min_p(narrow("min_p", p.max(0.0))?);
    }
    if let Some(r) = f.f32_in("repeat_penalty", 0.0, f64::MAX, true, "a number > 0")? {
        b = b.repetition_penalty(r);
    }
    match f.int("repeat_last_n")? {
        None => {}
        Some(-1) => b = b.no_penalty_window(),
        Some(n) if n >= 0 => b = b.penalty_window(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => {
            return Err(RequestError::field_err(
                "repeat_last_n",
                format!("expected -1 (the whole context) or an integer >= 0, got {n}"),
            ))
        }
    }
    if let Some(x) = f.f32("presence_penalty")? {
        b = b.presence_penalty(x);
    }
    if let Some(x) = f.f32("frequency_penalty")? {
        b = b.frequency_penalty(x);
    }
    if let Some(k) = f.usize_in("min_keep", 0, i128::MAX)? {
        b = b.min_tokens_to_keep(k.max(1));
    }
    match f.int("seed")? {
        None | Some(-1) => {}
        Some(s) => {
            let s = i64::try_from(s)
                .map(|s| s as u64)
                .or_else(|_| u64::try_from(s))
                .map_err(|_| {
                    RequestError::field_err("seed", format!("{s} is not a 64-bit integer"))
                })?;
            b = b.seed(s);
            request.seeded = true;
        }
    }
    if let Some(n) = logprobs_count("n_probs", &f)? {
        if n > 0 {
            b = b.logprobs(n);
        }
    }
    if f.bool("post_sampling_probs")? == Some(true) {
        request.logprob_kind = LogprobKind::Processed;
    }
    b = logit_bias(&f, b, &mut request.text_logit_bias)?;

    let mut stop = StopConditions::builder();
    match f.int("n_predict")? {
        None | Some(-1) => {}
        Some(n) if n >= 1 => stop = stop.max_tokens(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => {
            return Err(RequestError::field_err(
                "n_predict",
                format!("expected -1 (no limit) or an integer >= 1, got {n}"),
            ))
        }
    }
    if let Some(s) = f.one_or_many_strings("stop")? {
        stop = stop.stop_strings(s);
    }
    request.ignore_eos = f.bool("ignore_eos")?.unwrap_or(false);
    if let Some(g) = f.string("grammar")? {
        request.grammar = Some(GrammarSpec::Gbnf(g.to_string()));
    }
    if let Some(s) = f.get("json_schema") {
        if !(s.is_object() || s.is_boolean()) {
            return Err(RequestError::field_err(
                "json_schema",
                format!("expected a JSON schema (an object), got {}", show(s)),
            ));
        }
        if request.grammar.is_some() {
            return Err(RequestError::field_err(
                "json_schema",
                "give `grammar` or `json_schema`, not both",
            ));
        }
        super::check_schema_depth("json_schema", s)?;
        request.grammar = Some(GrammarSpec::JsonSchema(s.clone()));
    }

    // The temperature the extras see: the request's, else the defaults'.
    let temperature = match f.f32("temperature")? {
        Some(t) => t.max(0.0),
        None => defaults.temperature(),
    };
    request.extra_samplers = extras(&f, temperature)?;

    Parts {
        params: b,
        stop,
        max_field: "n_predict",
        request,
    }
    .finish(field_of)
}

/// `logit_bias`: `[[id or text, bias or false], ...]` or `{"id or text": bias or false}`.
fn logit_bias(
    f: &Fields<'_>,
    mut b: SamplingParamsBuilder,
    text: &mut Vec<(String, f32)>,
) -> Result<SamplingParamsBuilder, RequestError> {
    const FIELD: &str = "logit_bias";
    let Some(v) = f.get(FIELD) else {
        return Ok(b);
    };
    let bias_of = |x: &Value| -> Result<f32, RequestError> {
        match x {
            Value::Bool(false) => Ok(f32::NEG_INFINITY),
            Value::Number(n) => match n.as_f64() {
                Some(x) => narrow(FIELD, x),
                None => Err(RequestError::field_err(FIELD, format!("bad bias {n}"))),
            },
            other => Err(RequestError::field_err(
                FIELD,
                format!("expected a number or false as a bias, got {}", show(other)),
            )),
        }
    };
    let mut add = |key: &Value, bias: f32, b: SamplingParamsBuilder| match key {
        Value::String(s) => match token_id_str(s) {
            Some(id) => Ok(b.logit_bias(id, bias)),
            None => {
                text.push((s.clone(), bias));
                Ok(b)
            }
        },
        k => match token_id(k) {
            Some(id) => Ok(b.logit_bias(id, bias)),
            None => Err(RequestError::field_err(
                FIELD,
                format!("expected a token id or a string, got {}", show(k)),
            )),
        },
    };
    match v {
        Value::Array(pairs) => {
            for pair in pairs {
                match pair.as_array().map(Vec::as_slice) {
                    Some([key, bias]) => b = add(key, bias_of(bias)?, b)?,
                    _ => {
                        return Err(RequestError::field_err(
                            FIELD,
                            format!("expected [token, bias] pairs, found {}", show(pair)),
                        ))
                    }
                }
            }
        }
        Value::Object(map) => {
            for (key, bias) in map {
                b = add(&Value::String(key.clone()), bias_of(bias)?, b)?;
            }
        }
        other => {
            return Err(RequestError::field_err(
                FIELD,
                format!(
                    "expected a list of [token, bias] pairs or an object, got {}",
                    show(other)
                ),
            ))
        }
    }
    Ok(b)
}

/// The samplers outside [`SamplingParams`], each checked by its stage's constructor.
fn extras(f: &Fields<'_>, temperature: f32) -> Result<Vec<ExtraSampler>, RequestError> {
    let mut out = Vec::new();
    let greedy = temperature == 0.0;
    if let Some(m) = f.f32("dry_multiplier")? {
        if m > 0.0 {
            let base = f.f32("dry_base")?.unwrap_or(1.75);
            let allowed_length = f.usize_in("dry_allowed_length", 0, i128::MAX)?.unwrap_or(2);
            let penalty_last_n = match f.int("dry_penalty_last_n")? {
                None | Some(-1) => None,
                Some(n) if n >= 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
                Some(n) => {
                    return Err(RequestError::field_err(
                        "dry_penalty_last_n",
                        format!("expected -1 (the whole context) or an integer >= 0, got {n}"),
                    ))
                }
            };
            let sequence_breakers = f
                .strings("dry_sequence_breakers")?
                .unwrap_or_else(|| ["\n", ":", "\"", "*"].map(String::from).to_vec());
            Dry::new(m, base, allowed_length).map_err(stage_err)?;
            out.push(ExtraSampler::Dry {
                multiplier: m,
                base,
                allowed_length,
                penalty_last_n,
                sequence_breakers,
            });
        }
    }
    if let Some(n) = f.f32("top_n_sigma")? {
        if n > 0.0 {
            TopNSigma::new(n).map_err(stage_err)?;
            out.push(ExtraSampler::TopNSigma { n });
        }
    }
    if let Some(p) = f.f32("typical_p")? {
        if p < 1.0 {
            TypicalP::new(p).map_err(stage_err)?;
            out.push(ExtraSampler::TypicalP { p });
        } else if p > 1.0 {
            return Err(RequestError::field_err(
                "typical_p",
                format!("expected a number in (0, 1] (1 is off), got {p}"),
            ));
        }
    }
    let probability = f.f32("xtc_probability")?.unwrap_or(0.0);
    let threshold = f.f32("xtc_threshold")?.unwrap_or(0.1);
    if probability > 0.0 && threshold <= 0.5 {
        Xtc::new(probability, threshold).map_err(stage_err)?;
        out.push(ExtraSampler::Xtc {
            probability,
            threshold,
        });
    }
    let range = f.f32("dynatemp_range")?.unwrap_or(0.0);
    let exponent = f.f32("dynatemp_exponent")?.unwrap_or(1.0);
    if range > 0.0 && !greedy {
        DynamicTemperature::new(temperature, range, exponent).map_err(stage_err)?;
        out.push(ExtraSampler::DynamicTemperature { range, exponent });
    }
    let tau = f.f32("mirostat_tau")?.unwrap_or(5.0);
    let eta = f.f32("mirostat_eta")?.unwrap_or(0.1);
    match f.int("mirostat")? {
        None | Some(0) => {}
        Some(v @ (1 | 2)) => {
            MirostatV2::new(tau, eta).map_err(stage_err)?;
            out.push(if v == 1 {
                ExtraSampler::Mirostat { tau, eta }
            } else {
                ExtraSampler::MirostatV2 { tau, eta }
            });
        }
        Some(v) => {
            return Err(RequestError::field_err(
                "mirostat",
                format!("expected 0 (off), 1 or 2, got {v}"),
            ))
        }
    }
    Ok(out)
}
