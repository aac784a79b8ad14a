//! vLLM's OpenAI-compatible requests: the [`openai`] fields plus vLLM's
//! extra sampling and guided-decoding fields.
//!
//! The OpenAI fields are read as in [`openai`], except that vLLM allows
//! any `temperature >= 0` and any number of stop strings. The extras:
//!
//! | field | valid | maps to |
//! |---|---|---|
//! | `top_k` | integer; `-1` or `0` turn it off, `>= 1` | [`SamplingParams::top_k`] |
//! | `min_p` | `[0, 1]` | `min_p` |
//! | `repetition_penalty` | `> 0` | `repetition_penalty` |
//! | `min_tokens` | integer `>= 0`, at most `max_tokens` | [`StopConditions::min_tokens`](crate::StopConditions::min_tokens) |
//! | `stop_token_ids` | list of token ids | stop tokens |
//! | `ignore_eos` | bool | [`Request::ignore_eos`] |
//! | `bad_words` | list of strings | [`Request::bad_words`] |
//! | `allowed_token_ids` | non-empty list of token ids | [`Request::allowed_token_ids`] |
//! | `guided_json` | a schema (object, or a string holding one) | [`GrammarSpec::JsonSchema`] |
//! | `guided_regex` | string | [`GrammarSpec::Regex`] |
//! | `guided_choice` | non-empty list of strings | [`GrammarSpec::Choice`] |
//! | `guided_grammar` | string | [`GrammarSpec::Grammar`] |
//! | `structured_outputs` | `{"json" \| "regex" \| "choice" \| "grammar": ..}` (newer vLLM) | the same |
//!
//! At most one guided-decoding field may be given (`response_format` counts), as in
//! vLLM. vLLM clamps a `logit_bias` outside `[-100, 100]`; this crate refuses it, as
//! OpenAI does. `best_of`, `use_beam_search`, `length_penalty`, `prompt_logprobs`,
//! `skip_special_tokens` and every other field are ignored.
//!
//! ```
//! use logits::request::{vllm, GrammarSpec};
//!
//! let r = vllm::parse(r#"{"model": "Qwen/Qwen3-8B", "temperature": 0.7, "top_k": -1,
//!     "min_p": 0.05, "min_tokens": 2, "max_tokens": 32, "guided_regex": "[0-9]+"}"#)?;
//! assert_eq!((r.params.top_k(), r.params.min_p()), (None, 0.05));
//! assert_eq!(r.stop.min_tokens(), 2);
//! assert_eq!(r.grammar, Some(GrammarSpec::Regex("[0-9]+".into())));
//! # Ok::<(), logits::request::RequestError>(())
//! ```

use serde_json::Value;

use super::openai::{self, Dialect};
use super::{object, parse_json, show, Fields, GrammarSpec, Request, RequestError};
use crate::params::SamplingParams;

/// Parses the JSON text of a vLLM request, with the defaults of
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

/// [`parse_value`] with the parameters a field the request leaves out takes: vLLM fills
/// them from the model's `generation_config.json`
/// ([`SamplingParams::from_generation_config_json`]).
///
/// ```
/// use logits::request::vllm;
/// use logits::SamplingParams;
///
/// let qwen3 = SamplingParams::from_generation_config_json(
///     r#"{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95}"#).unwrap();
/// let body = serde_json::json!({"temperature": 0.2});
/// let r = vllm::parse_with_defaults(&body, &qwen3)?;
/// assert_eq!((r.params.temperature(), r.params.top_k()), (0.2, Some(20)));
/// # Ok::<(), logits::request::RequestError>(())
/// ```
///
/// # Errors
/// As [`parse`].
pub fn parse_with_defaults(
    value: &Value,
    defaults: &SamplingParams,
) -> Result<Request, RequestError> {
    let f = object(value)?;
    let mut parts = openai::read(&f, defaults, Dialect::Vllm)?;
    let mut b = parts.params;
    match f.int("top_k")? {
        None => {}
        Some(-1 | 0) => b = b.no_top_k(),
        Some(k) if k >= 1 => b = b.top_k(usize::try_from(k).unwrap_or(usize::MAX)),
        Some(k) => {
            return Err(RequestError::field_err(
                "top_k",
                format!("expected -1 or 0 (off) or an integer >= 1, got {k}"),
            ))
        }
    }
    if let Some(p) = f.f32_in("min_p", 0.0, 1.0, false, "a number in [0, 1]")? {
        b = b.min_p(p);
    }
    if let Some(r) = f.f32_in("repetition_penalty", 0.0, f64::MAX, true, "a number > 0")? {
        b = b.repetition_penalty(r);
    }
    parts.params = b;

    if let Some(n) = f.usize_in("min_tokens", 0, i128::MAX)? {
        parts.stop = parts.stop.min_tokens(n);
    }
    if let Some(ids) = f.token_ids("stop_token_ids")? {
        parts.stop = parts.stop.stop_tokens(ids);
    }
    let r = &mut parts.request;
    r.ignore_eos = f.bool("ignore_eos")?.unwrap_or(false);
    r.bad_words = f.strings("bad_words")?.unwrap_or_default();
    if let Some(ids) = f.token_ids("allowed_token_ids")? {
        if ids.is_empty() {
            return Err(RequestError::field_err(
                "allowed_token_ids",
                "an empty list allows no token",
            ));
        }
        r.allowed_token_ids = Some(ids);
    }
    let mut guided: Vec<(&'static str, GrammarSpec)> = Vec::new();
    if let Some(g) = r.grammar.take() {
        guided.push(("response_format", g));
    }
    guided_fields(
        &f,
        [
            "guided_json",
            "guided_regex",
            "guided_choice",
            "guided_grammar",
        ],
        &mut guided,
    )?;
    if let Some(v) = f.get("structured_outputs") {
        let Value::Object(_) = v else {
            return Err(RequestError::field_err(
                "structured_outputs",
                format!("expected an object, got {}", show(v)),
            ));
        };
        let inner = super::object(v)?;
        let before = guided.len();
        guided_fields(&inner, ["json", "regex", "choice", "grammar"], &mut guided).map_err(
            |e| match e {
                RequestError::Field { field, reason } => {
                    RequestError::field_err("structured_outputs", format!("`{field}`: {reason}"))
                }
                other => other,
            },
        )?;
        for g in &mut guided[before..] {
            g.0 = "structured_outputs";
        }
    }
    if guided.len() > 1 {
        return Err(RequestError::field_err(
            guided[1].0,
            format!(
                "only one kind of guided decoding per request, and `{}` is given",
                guided[0].0
            ),
        ));
    }
    r.grammar = guided.pop().map(|(_, g)| g);
    parts.finish(|name| name)
}

/// Reads `[json, regex, choice, grammar]` under these names.
fn guided_fields(
    f: &Fields<'_>,
    names: [&'static str; 4],
    out: &mut Vec<(&'static str, GrammarSpec)>,
) -> Result<(), RequestError> {
    let [json, regex, choice, grammar] = names;
    if let Some(v) = f.get(json) {
        let schema = match v {
            Value::String(s) => serde_json::from_str::<Value>(s).map_err(|e| {
                RequestError::field_err(json, format!("the string is not JSON: {e}"))
            })?,
            other => other.clone(),
        };
        if !(schema.is_object() || schema.is_boolean()) {
            return Err(RequestError::field_err(
                json,
                format!("expected a JSON schema (an object), got {}", show(&schema)),
            ));
        }
        super::check_schema_depth(json, &schema)?;
        out.push((json, GrammarSpec::JsonSchema(schema)));
    }
    if let Some(s) = f.string(regex)? {
        out.push((regex, GrammarSpec::Regex(s.to_string())));
    }
    if let Some(c) = f.strings(choice)? {
        if c.is_empty() {
            return Err(RequestError::field_err(
                choice,
                "an empty list allows no output",
            ));
        }
        out.push((choice, GrammarSpec::Choice(c)));
    }
    if let Some(s) = f.string(grammar)? {
        out.push((grammar, GrammarSpec::Grammar(s.to_string())));
    }
    Ok(())
}
