//! OpenAI's `/v1/chat/completions` and `/v1/completions` requests.
//!
//! | field | valid | maps to |
//! |---|---|---|
//! | `temperature` | `[0, 2]` | [`SamplingParams::temperature`] (0 is greedy) |
//! | `top_p` | `(0, 1]` (0 is refused: this crate needs a positive mass) | `top_p` |
//! | `n` | integer `>= 1` | [`Request::n`] |
//! | `seed` | any 64-bit integer (a negative one as its two's complement) | `seed`, [`Request::seeded`] |
//! | `logit_bias` | object of token ids as strings to numbers in `[-100, 100]` | `logit_bias` (the value as given; -100 is a strong bias, not `-inf`) |
//! | `logprobs` | `true`/`false` (chat) or a count `0..=20` (completions) | `logprobs` |
//! | `top_logprobs` | `0..=20`, with `logprobs: true` | the number of alternatives |
//! | `stop` | a string or up to 4 non-empty strings | [`StopConditions::stop_strings`](crate::StopConditions::stop_strings) |
//! | `max_completion_tokens`, `max_tokens` | integer `>= 1`; the first wins when both are given | `max_tokens` |
//! | `presence_penalty`, `frequency_penalty` | `[-2, 2]` | the penalties (OpenAI's semantics are the crate's) |
//! | `response_format` | `{"type": "text" \| "json_object" \| "json_schema", "json_schema": {"schema": ..}}` | [`Request::grammar`] |
//!
//! Every other field is ignored (see the [module docs](super)).
//!
//! ```
//! use logits::request::{openai, RequestError};
//!
//! let r = openai::parse(r#"{"model": "gpt-4o", "n": 3, "stop": "END", "seed": -1}"#)?;
//! assert_eq!((r.n.get(), r.params.seed()), (3, u64::MAX));
//! assert_eq!(r.stop.stop_strings(), &["END".to_string()]);
//!
//! let err = openai::parse(r#"{"presence_penalty": 3}"#).unwrap_err();
//! assert_eq!(err.field(), Some("presence_penalty"));
//! # Ok::<(), RequestError>(())
//! ```

use std::num::NonZeroUsize;

use serde_json::{json, Value};

use super::{
    build_params, build_stop, object, openai_logit_bias, openai_logprobs, parse_json, show, Fields,
    GrammarSpec, Request, RequestError,
};
use crate::params::{SamplingParams, SamplingParamsBuilder};
use crate::stop::{StopConditions, StopConditionsBuilder};

/// Parses the JSON text of an OpenAI request, with the defaults of
/// [`SamplingParams::default`].
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
    parse_with_defaults(value, &SamplingParams::default())
}

/// [`parse_value`] with the parameters a field the request leaves out takes (say, the
/// model's `generation_config.json`, as vLLM does).
///
/// # Errors
/// As [`parse`].
pub fn parse_with_defaults(
    value: &Value,
    defaults: &SamplingParams,
) -> Result<Request, RequestError> {
    let f = object(value)?;
    read(&f, defaults, Dialect::OpenAi)?.finish(|name| name)
}

/// The fields read, before the params and stop conditions are built.
pub(crate) struct Parts {
    pub(crate) params: SamplingParamsBuilder,
    pub(crate) stop: StopConditionsBuilder,
    pub(crate) max_field: &'static str,
    pub(crate) request: Request,
}

impl Parts {
    /// Builds the params (`field_of` names the request's field of a parameter) and the
    /// stop conditions into the request.
    pub(crate) fn finish(
        self,
        field_of: impl Fn(&'static str) -> &'static str,
    ) -> Result<Request, RequestError> {
        let mut request = self.request;
        request.params = build_params(self.params, field_of)?;
        request.stop = build_stop(self.stop, "stop", self.max_field, "min_tokens")?;
        Ok(request)
    }
}

/// Which server's limits the OpenAI fields follow.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    OpenAi,
    Vllm,
}

/// The OpenAI fields, shared with vLLM (which drops the temperature's upper bound and
/// the limit of 4 stop strings).
pub(crate) fn read(
    f: &Fields<'_>,
    defaults: &SamplingParams,
    dialect: Dialect,
) -> Result<Parts, RequestError> {
    let mut b = defaults.to_builder();
    let t_max = if dialect == Dialect::OpenAi {
        2.0
    } else {
        f64::MAX
    };
    let t_expected = if dialect == Dialect::OpenAi {
        "a number in [0, 2]"
    } else {
        "a number >= 0"
    };
    if let Some(t) = f.f32_in("temperature", 0.0, t_max, false, t_expected)? {
        b = b.temperature(t);
    }
    if let Some(p) = f.f32_in("top_p", 0.0, 1.0, true, "a number in (0, 1]")? {
        b = b.top_p(p);
    }
    for name in ["presence_penalty", "frequency_penalty"] {
        if let Some(x) = f.f32_in(name, -2.0, 2.0, false, "a number in [-2, 2]")? {
            b = if name == "presence_penalty" {
                b.presence_penalty(x)
            } else {
                b.frequency_penalty(x)
            };
        }
    }
    let seeded = match f.int("seed")? {
        None => false,
        Some(s) => {
            let s = i64::try_from(s)
                .map(|s| s as u64)
                .or_else(|_| u64::try_from(s))
                .map_err(|_| {
                    RequestError::field_err("seed", format!("{s} is not a 64-bit integer"))
                })?;
            b = b.seed(s);
            true
        }
    };
    b = openai_logit_bias(f, b)?;
    if let Some(n) = openai_logprobs(f)? {
        b = b.logprobs(n);
    }
    let n = match f.usize_in("n", 1, i128::MAX)? {
        None => NonZeroUsize::MIN,
        Some(n) => NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN),
    };

    let mut stop = StopConditions::builder();
    if let Some(strings) = f.one_or_many_strings("stop")? {
        if dialect == Dialect::OpenAi && strings.len() > 4 {
            return Err(RequestError::field_err(
                "stop",
                format!("at most 4 stop strings, got {}", strings.len()),
            ));
        }
        stop = stop.stop_strings(strings);
    }
    let max_field = if f.has("max_completion_tokens") {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    if let Some(m) = f.usize_in(max_field, 1, i128::MAX)? {
        stop = stop.max_tokens(m);
    }
    if max_field == "max_completion_tokens" {
        // Still checked, though the other wins.
        f.usize_in("max_tokens", 1, i128::MAX)?;
    }
    let grammar = response_format(f)?;

    let mut request = Request::new(SamplingParams::default());
    request.n = n;
    request.seeded = seeded;
    request.grammar = grammar;
    Ok(Parts {
        params: b,
        stop,
        max_field,
        request,
    })
}

/// OpenAI's `response_format`.
fn response_format(f: &Fields<'_>) -> Result<Option<GrammarSpec>, RequestError> {
    const FIELD: &str = "response_format";
    let Some(v) = f.get(FIELD) else {
        return Ok(None);
    };
    let bad = |what: String| RequestError::field_err(FIELD, what);
    let kind = v.get("type").and_then(Value::as_str).ok_or_else(|| {
        bad(format!(
            "expected {{\"type\": \"text\" | \"json_object\" | \"json_schema\"}}, got {}",
            show(v)
        ))
    })?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(GrammarSpec::JsonSchema(json!({"type": "object"})))),
        "json_schema" => {
            let schema = v
                .get("json_schema")
                .and_then(|s| s.get("schema"))
                .filter(|s| s.is_object() || s.is_boolean())
                .ok_or_else(|| {
                    bad("`json_schema` needs a `json_schema.schema` object".to_string())
                })?;
            super::check_schema_depth(FIELD, schema)?;
            Ok(Some(GrammarSpec::JsonSchema(schema.clone())))
        }
        other => Err(bad(format!("unknown type {other:?}"))),
    }
}
