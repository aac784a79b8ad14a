//! Requests as data: serde round trips of the crate's types, and the OpenAI, vLLM and
//! llama.cpp request parsers through the public API.
#![cfg(feature = "serde")]

use logits::request::{
    llama_cpp, openai, vllm, ExtraSampler, GrammarSpec, Request, RequestError, TokenLogprob,
};
use logits::stop::{FinishReason, StopConditions};
use logits::{Alternative, Error, LogprobKind, Sample, Sampler, SamplingParams};
use proptest::prelude::*;
use serde_json::{json, Value};

fn round_trip<T>(x: &T) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let text = serde_json::to_string(x).expect("serialises");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("reads back {text}: {e}"))
}

// ----- serde of the crate's types -----------------------------------------------

#[test]
fn sampling_params_round_trip() {
    let all = SamplingParams::builder()
        .temperature(0.6)
        .top_k(20)
        .top_p(0.95)
        .min_p(0.05)
        .repetition_penalty(1.1)
        .frequency_penalty(-0.5)
        .presence_penalty(0.25)
        .penalty_window(64)
        .penalize_prompt(false)
        .logit_bias(7, f32::NEG_INFINITY)
        .logit_bias(3, 2.5)
        .min_tokens_to_keep(2)
        .seed(u64::MAX)
        .logprobs(20)
        .build()
        .unwrap();
    for p in [SamplingParams::default(), SamplingParams::greedy(), all] {
        assert_eq!(round_trip(&p), p);
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(SamplingParams::from_json(&text), Ok(p));
    }
}

#[test]
fn sampling_params_json_shape() {
    let p = SamplingParams::builder()
        .top_k(20)
        .logit_bias(7, f32::NEG_INFINITY)
        .build()
        .unwrap();
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["top_k"], 20);
    assert_eq!(v["logit_bias"], json!([[7, "-inf"]]));
    assert_eq!(v["penalty_window"], Value::Null);
    // Missing fields take the builder's defaults.
    assert_eq!(
        SamplingParams::from_json("{}"),
        Ok(SamplingParams::default())
    );
}

#[test]
fn deserialised_params_are_checked_with_the_typed_error() {
    let cases = [
        (r#"{"temperature": -1}"#, "temperature"),
        (r#"{"temperature": "inf"}"#, "temperature"),
        (r#"{"top_k": 0}"#, "top_k"),
        (r#"{"top_p": 0}"#, "top_p"),
        (r#"{"top_p": 1.5}"#, "top_p"),
        (r#"{"min_p": -0.1}"#, "min_p"),
        (r#"{"repetition_penalty": 0}"#, "repetition_penalty"),
        (r#"{"frequency_penalty": "NaN"}"#, "frequency_penalty"),
        (r#"{"presence_penalty": "-inf"}"#, "presence_penalty"),
        (r#"{"logit_bias": [[1, "inf"]]}"#, "logit_bias"),
        (r#"{"min_tokens_to_keep": 0}"#, "min_tokens_to_keep"),
        (r#"{"logprobs": 21}"#, "logprobs"),
    ];
    for (text, name) in cases {
        match SamplingParams::from_json(text) {
            Err(Error::InvalidParameter { name: n, .. }) => assert_eq!(n, name, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
        // Through serde the same check fails the deserialisation, with its message.
        let err = serde_json::from_str::<SamplingParams>(text).unwrap_err();
        assert!(err.to_string().contains(name), "{text}: {err}");
    }
    for text in [r#"{"temprature": 1}"#, r#"{"top_k": "x"}"#, "[]"] {
        assert!(
            matches!(
                SamplingParams::from_json(text),
                Err(Error::InvalidConfig(_))
            ),
            "{text}"
        );
    }
}

#[test]
fn sample_and_alternatives_round_trip() {
    let params = SamplingParams::builder()
        .top_k(2)
        .logprobs(4)
        .seed(3)
        .build()
        .unwrap();
    let mut sampler = Sampler::new(params, 5).unwrap();
    let sample = sampler.sample(&[0.0f32, 3.0, 2.0, 1.0, -1.0]).unwrap();
    assert_eq!(sample.alternatives().len(), 4);
    // Top-k 2 removed the third and fourth alternatives: their logprob is -inf.
    assert_eq!(sample.alternatives()[3].logprob, f32::NEG_INFINITY);
    let back: Sample = round_trip(&sample);
    assert_eq!(back, sample);
    assert_eq!(back.alternatives(), sample.alternatives());
    let v = serde_json::to_value(sample).unwrap();
    assert_eq!(v["alternatives"][3]["logprob"], "-inf");

    let alt = sample.alternatives()[0];
    assert_eq!(round_trip(&alt), alt);
    let greedy = Sampler::new(SamplingParams::greedy(), 2)
        .unwrap()
        .sample(&[1.0f32, 0.0])
        .unwrap();
    assert_eq!(round_trip(&greedy), greedy);
    assert_eq!(
        serde_json::to_value(greedy).unwrap()["raw_logprob"],
        Value::Null
    );
}

#[test]
fn a_sample_with_too_many_alternatives_is_refused() {
    let alt = json!({"token": 1, "raw_logprob": -1.0, "logprob": -1.0});
    let v = json!({"token": 1, "logprob": 0.0, "alternatives": vec![alt; 21]});
    assert!(serde_json::from_value::<Sample>(v).is_err());
    let bad = json!({"token": 1, "raw_logprob": "x", "logprob": -1.0});
    assert!(serde_json::from_value::<Alternative>(bad).is_err());
}

#[test]
fn finish_reasons_and_stop_conditions_round_trip() {
    for r in [
        FinishReason::StopToken(151645),
        FinishReason::StopString(2),
        FinishReason::Length,
    ] {
        assert_eq!(round_trip(&r), r);
    }
    assert_eq!(
        serde_json::to_value(FinishReason::StopToken(9)).unwrap(),
        json!({"stop_token": 9})
    );
    assert_eq!(
        serde_json::to_value(FinishReason::Length).unwrap(),
        json!("length")
    );

    let c = StopConditions::builder()
        .stop_tokens([151645, 151643])
        .stop_strings(["\nUser:", "</answer>"])
        .max_tokens(64)
        .min_tokens(2)
        .build()
        .unwrap();
    assert_eq!(round_trip(&c), c);
    assert_eq!(
        round_trip(&StopConditions::default()),
        StopConditions::default()
    );
    for bad in [
        json!({"max_tokens": 0}),
        json!({"max_tokens": 1, "min_tokens": 2}),
        json!({"stop_strings": [""]}),
        json!({"stop_strings": ["a"], "unknown": 1}),
    ] {
        assert!(
            serde_json::from_value::<StopConditions>(bad.clone()).is_err(),
            "{bad}"
        );
    }
    assert_eq!(round_trip(&LogprobKind::Processed), LogprobKind::Processed);
}

// ----- the providers' documented example requests ---------------------------------

#[test]
fn openai_chat_example() {
    let r = openai::parse(
        r#"{
          "model": "gpt-4o",
          "messages": [{"role": "system", "content": "You are a helpful assistant."},
                       {"role": "user", "content": "Hello!"}],
          "temperature": 0.2, "top_p": 0.9, "n": 2, "seed": 1234,
          "logprobs": true, "top_logprobs": 2,
          "logit_bias": {"50256": -100, "15043": 5.5},
          "stop": ["\n\n", "END"],
          "max_completion_tokens": 100, "max_tokens": 5,
          "presence_penalty": 0.5, "frequency_penalty": -0.25,
          "stream": true, "user": "u-1", "tools": []
        }"#,
    )
    .unwrap();
    let p = &r.params;
    assert_eq!((p.temperature(), p.top_p(), p.seed()), (0.2, 0.9, 1234));
    assert_eq!((p.presence_penalty(), p.frequency_penalty()), (0.5, -0.25));
    assert_eq!(p.logit_bias(), &[(15043, 5.5), (50256, -100.0)]);
    assert_eq!(p.logprobs(), Some(2));
    assert_eq!(p.top_k(), None);
    assert_eq!(r.n.get(), 2);
    assert!(r.seeded);
    assert_eq!(
        r.stop.stop_strings(),
        &["\n\n".to_string(), "END".to_string()]
    );
    assert_eq!(r.stop.max_tokens(), Some(100), "max_completion_tokens wins");
    assert_eq!(r.logprob_kind, LogprobKind::Raw);
    assert_eq!(r.grammar, None);
}

#[test]
fn openai_minimal_and_completions_requests() {
    let r = openai::parse(r#"{"model": "gpt-4o", "messages": []}"#).unwrap();
    assert_eq!(r, Request::new(SamplingParams::default()));
    assert!(!r.seeded);
    let r = openai::parse(
        r#"{"prompt": "Say this is a test", "max_tokens": 7, "logprobs": 3, "stop": "\n"}"#,
    )
    .unwrap();
    assert_eq!(r.params.logprobs(), Some(3));
    assert_eq!(r.stop.max_tokens(), Some(7));
    assert_eq!(r.stop.stop_strings(), &["\n".to_string()]);
    let r =
        openai::parse(r#"{"logprobs": false, "top_logprobs": 0, "temperature": null}"#).unwrap();
    assert_eq!(r.params.logprobs(), None);
    assert_eq!(r.params.temperature(), 1.0);
}

#[test]
fn openai_response_format() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let body = json!({"response_format": {"type": "json_schema",
        "json_schema": {"name": "x", "strict": true, "schema": schema}}});
    let r = openai::parse_value(&body).unwrap();
    assert_eq!(r.grammar, Some(GrammarSpec::JsonSchema(schema)));
    let r = openai::parse(r#"{"response_format": {"type": "json_object"}}"#).unwrap();
    assert_eq!(
        r.grammar,
        Some(GrammarSpec::JsonSchema(json!({"type": "object"})))
    );
    let r = openai::parse(r#"{"response_format": {"type": "text"}}"#).unwrap();
    assert_eq!(r.grammar, None);
}

#[test]
fn vllm_example_with_extras() {
    let r = vllm::parse(
        r#"{
          "model": "Qwen/Qwen3-8B",
          "messages": [{"role": "user", "content": "Classify: great!"}],
          "temperature": 3.5, "top_p": 0.8, "top_k": 20, "min_p": 0.05,
          "repetition_penalty": 1.05, "presence_penalty": 1.5,
          "max_tokens": 256, "min_tokens": 4, "stop": ["a", "b", "c", "d", "e"],
          "stop_token_ids": [151645, 151643], "ignore_eos": false,
          "bad_words": ["darn", "heck"], "allowed_token_ids": [1, 2, 3],
          "guided_choice": ["positive", "negative"],
          "seed": 7, "n": 4, "best_of": 4, "skip_special_tokens": true
        }"#,
    )
    .unwrap();
    let p = &r.params;
    assert_eq!(p.temperature(), 3.5, "vLLM has no upper bound");
    assert_eq!((p.top_k(), p.top_p(), p.min_p()), (Some(20), 0.8, 0.05));
    assert_eq!((p.repetition_penalty(), p.presence_penalty()), (1.05, 1.5));
    assert_eq!((p.seed(), r.n.get()), (7, 4));
    assert_eq!(r.stop.max_tokens(), Some(256));
    assert_eq!(r.stop.min_tokens(), 4);
    assert_eq!(r.stop.stop_strings().len(), 5);
    assert_eq!(r.stop.stop_tokens(), &[151643, 151645]);
    assert_eq!(r.bad_words, ["darn", "heck"]);
    assert_eq!(r.allowed_token_ids, Some(vec![1, 2, 3]));
    assert_eq!(
        r.grammar,
        Some(GrammarSpec::Choice(vec![
            "positive".into(),
            "negative".into()
        ]))
    );
}

#[test]
fn vllm_top_k_off_and_guided_fields() {
    for k in [-1, 0] {
        let r = vllm::parse_value(&json!({"top_k": k})).unwrap();
        assert_eq!(r.params.top_k(), None);
    }
    let schema = json!({"type": "array"});
    let r = vllm::parse_value(&json!({"guided_json": schema})).unwrap();
    assert_eq!(r.grammar, Some(GrammarSpec::JsonSchema(schema.clone())));
    let r = vllm::parse_value(&json!({"guided_json": schema.to_string()})).unwrap();
    assert_eq!(r.grammar, Some(GrammarSpec::JsonSchema(schema)));
    let r = vllm::parse(r#"{"guided_grammar": "root ::= \"yes\" | \"no\""}"#).unwrap();
    assert_eq!(
        r.grammar,
        Some(GrammarSpec::Grammar(r#"root ::= "yes" | "no""#.into()))
    );
    let r = vllm::parse(r#"{"structured_outputs": {"regex": "\\d+"}}"#).unwrap();
    assert_eq!(r.grammar, Some(GrammarSpec::Regex(r"\d+".into())));
    let r = vllm::parse(r#"{"ignore_eos": true, "logprobs": true, "top_logprobs": 20}"#).unwrap();
    assert!(r.ignore_eos);
    assert_eq!(r.params.logprobs(), Some(20));
}

#[test]
fn vllm_takes_missing_fields_from_generation_config() {
    let qwen3 = SamplingParams::from_generation_config_json(
        r#"{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95}"#,
    )
    .unwrap();
    let r = vllm::parse_with_defaults(&json!({"top_p": 0.5}), &qwen3).unwrap();
    assert_eq!(
        (r.params.temperature(), r.params.top_k(), r.params.top_p()),
        (0.6, Some(20), 0.5)
    );
    let r = vllm::parse_with_defaults(&json!({"top_k": -1}), &qwen3).unwrap();
    assert_eq!(r.params.top_k(), None);
}

#[test]
fn llama_cpp_readme_example() {
    let r = llama_cpp::parse(
        r#"{"prompt": "Building a website can be done in 10 simple steps:", "n_predict": 128}"#,
    )
    .unwrap();
    assert_eq!(r.params, llama_cpp::defaults());
    assert_eq!(r.stop.max_tokens(), Some(128));
    assert!(!r.seeded);
    assert!(r.extra_samplers.is_empty());
}

#[test]
fn llama_cpp_full_request() {
    let r = llama_cpp::parse(
        r#"{
          "prompt": "x", "temperature": 0.7, "top_k": 0, "top_p": 1.0, "min_p": 0,
          "repeat_penalty": 1.1, "repeat_last_n": 0, "presence_penalty": 0.1,
          "frequency_penalty": 0.2, "min_keep": 3, "seed": 42, "n_predict": -1,
          "n_probs": 5, "post_sampling_probs": true,
          "logit_bias": [[15043, 1.0], [2, false], ["Hello, World!", -0.5], ["7", 2]],
          "stop": ["</s>", "User:"], "ignore_eos": true,
          "typical_p": 0.9, "top_n_sigma": 1.5, "xtc_probability": 0.5, "xtc_threshold": 0.1,
          "dynatemp_range": 0.2, "dynatemp_exponent": 1.5,
          "mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2,
          "dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2,
          "dry_penalty_last_n": 128, "dry_sequence_breakers": ["\n"],
          "grammar": "root ::= [a-z]+", "cache_prompt": true, "samplers": ["top_k"]
        }"#,
    )
    .unwrap();
    let p = &r.params;
    assert_eq!(
        (p.temperature(), p.top_k(), p.top_p(), p.min_p()),
        (0.7, None, 1.0, 0.0)
    );
    assert_eq!((p.repetition_penalty(), p.penalty_window()), (1.1, Some(0)));
    assert_eq!((p.presence_penalty(), p.frequency_penalty()), (0.1, 0.2));
    assert_eq!(
        (p.min_tokens_to_keep(), p.seed(), p.logprobs()),
        (3, 42, Some(5))
    );
    assert_eq!(
        p.logit_bias(),
        &[(2, f32::NEG_INFINITY), (7, 2.0), (15043, 1.0)]
    );
    assert_eq!(r.text_logit_bias, [("Hello, World!".to_string(), -0.5)]);
    assert_eq!(r.stop.max_tokens(), None);
    assert_eq!(r.stop.stop_strings().len(), 2);
    assert!(r.ignore_eos && r.seeded);
    assert_eq!(r.logprob_kind, LogprobKind::Processed);
    assert_eq!(r.grammar, Some(GrammarSpec::Gbnf("root ::= [a-z]+".into())));
    assert_eq!(
        r.extra_samplers,
        [
            ExtraSampler::Dry {
                multiplier: 0.8,
                base: 1.75,
                allowed_length: 2,
                penalty_last_n: Some(128),
                sequence_breakers: vec!["\n".into()],
            },
            ExtraSampler::TopNSigma { n: 1.5 },
            ExtraSampler::TypicalP { p: 0.9 },
            ExtraSampler::Xtc {
                probability: 0.5,
                threshold: 0.1
            },
            ExtraSampler::DynamicTemperature {
                range: 0.2,
                exponent: 1.5
            },
            ExtraSampler::MirostatV2 { tau: 4.0, eta: 0.2 },
        ]
    );
    assert_eq!(round_trip(&r), r);
}

#[test]
fn llama_cpp_off_values() {
    let r = llama_cpp::parse(
        r#"{"temperature": -1, "top_k": -5, "top_p": 1.5, "min_p": -1, "seed": -1,
            "typical_p": 1.0, "xtc_probability": 0.5, "xtc_threshold": 0.6, "mirostat": 0,
            "repeat_last_n": -1, "n_probs": 0, "logit_bias": {"15043": false, "Hi": 1}}"#,
    )
    .unwrap();
    let p = &r.params;
    assert!(p.is_greedy());
    assert_eq!((p.top_k(), p.top_p(), p.min_p()), (None, 1.0, 0.0));
    assert_eq!(
        (p.penalty_window(), p.logprobs(), r.seeded),
        (None, None, false)
    );
    assert_eq!(p.logit_bias(), &[(15043, f32::NEG_INFINITY)]);
    assert_eq!(r.text_logit_bias, [("Hi".to_string(), 1.0)]);
    assert!(r.extra_samplers.is_empty());
    let r = llama_cpp::parse(r#"{"json_schema": {"type": "object"}, "mirostat": 1}"#).unwrap();
    assert_eq!(
        r.grammar,
        Some(GrammarSpec::JsonSchema(json!({"type": "object"})))
    );
    assert_eq!(
        r.extra_samplers,
        [ExtraSampler::Mirostat { tau: 5.0, eta: 0.1 }]
    );
}

// ----- every bad field names itself -------------------------------------------------

type Parser = fn(&str) -> Result<Request, RequestError>;

fn assert_field(parser: Parser, text: &str, field: &str) {
    match parser(text) {
        Err(RequestError::Field { field: f, reason }) => {
            assert_eq!(f, field, "{text}: {reason}");
            assert!(!reason.is_empty());
        }
        other => panic!("{text}: expected an error naming {field}, got {other:?}"),
    }
}

#[test]
fn every_bad_openai_field_is_named() {
    let cases = [
        (r#"{"temperature": -0.1}"#, "temperature"),
        (r#"{"temperature": 2.5}"#, "temperature"),
        (r#"{"temperature": "hot"}"#, "temperature"),
        (r#"{"top_p": 0}"#, "top_p"),
        (r#"{"top_p": 1.01}"#, "top_p"),
        (r#"{"n": 0}"#, "n"),
        (r#"{"n": 1.5}"#, "n"),
        (r#"{"seed": 1e30}"#, "seed"),
        (r#"{"seed": "1"}"#, "seed"),
        (r#"{"logit_bias": {"x": 1}}"#, "logit_bias"),
        (r#"{"logit_bias": {"-1": 1}}"#, "logit_bias"),
        (r#"{"logit_bias": {"4294967296": 1}}"#, "logit_bias"),
        (r#"{"logit_bias": {"1": 101}}"#, "logit_bias"),
        (r#"{"logit_bias": {"1": "a"}}"#, "logit_bias"),
        (r#"{"logit_bias": [[1, 2]]}"#, "logit_bias"),
        (r#"{"logprobs": "yes"}"#, "logprobs"),
        (r#"{"logprobs": 21}"#, "logprobs"),
        (r#"{"logprobs": true, "top_logprobs": 21}"#, "top_logprobs"),
        (r#"{"top_logprobs": 3}"#, "top_logprobs"),
        (r#"{"logprobs": false, "top_logprobs": 3}"#, "top_logprobs"),
        (r#"{"stop": ["a", "b", "c", "d", "e"]}"#, "stop"),
        (r#"{"stop": [""]}"#, "stop"),
        (r#"{"stop": [1]}"#, "stop"),
        (r#"{"max_tokens": 0}"#, "max_tokens"),
        (r#"{"max_tokens": -3}"#, "max_tokens"),
        (r#"{"max_completion_tokens": 0}"#, "max_completion_tokens"),
        (
            r#"{"max_completion_tokens": 5, "max_tokens": "x"}"#,
            "max_tokens",
        ),
        (r#"{"presence_penalty": 2.5}"#, "presence_penalty"),
        (r#"{"frequency_penalty": -3}"#, "frequency_penalty"),
        (r#"{"response_format": {"type": "xml"}}"#, "response_format"),
        (
            r#"{"response_format": {"type": "json_schema"}}"#,
            "response_format",
        ),
        (r#"{"response_format": "json"}"#, "response_format"),
    ];
    for (text, field) in cases {
        assert_field(openai::parse, text, field);
    }
}

#[test]
fn every_bad_vllm_field_is_named() {
    let cases = [
        (r#"{"temperature": -1}"#, "temperature"),
        (r#"{"top_k": -2}"#, "top_k"),
        (r#"{"top_k": 0.5}"#, "top_k"),
        (r#"{"min_p": 1.5}"#, "min_p"),
        (r#"{"repetition_penalty": 0}"#, "repetition_penalty"),
        (r#"{"min_tokens": -1}"#, "min_tokens"),
        (r#"{"min_tokens": 10, "max_tokens": 5}"#, "min_tokens"),
        (r#"{"stop_token_ids": [-1]}"#, "stop_token_ids"),
        (r#"{"stop_token_ids": 5}"#, "stop_token_ids"),
        (r#"{"ignore_eos": 1}"#, "ignore_eos"),
        (r#"{"bad_words": "darn"}"#, "bad_words"),
        (r#"{"bad_words": [1]}"#, "bad_words"),
        (r#"{"allowed_token_ids": []}"#, "allowed_token_ids"),
        (r#"{"allowed_token_ids": ["a"]}"#, "allowed_token_ids"),
        (r#"{"guided_json": "{not json"}"#, "guided_json"),
        (r#"{"guided_json": 5}"#, "guided_json"),
        (r#"{"guided_regex": 5}"#, "guided_regex"),
        (r#"{"guided_choice": []}"#, "guided_choice"),
        (r#"{"guided_grammar": []}"#, "guided_grammar"),
        (
            r#"{"guided_regex": "a", "guided_grammar": "b"}"#,
            "guided_grammar",
        ),
        (
            r#"{"response_format": {"type": "json_object"}, "guided_regex": "a"}"#,
            "guided_regex",
        ),
        (r#"{"structured_outputs": 1}"#, "structured_outputs"),
        (
            r#"{"structured_outputs": {"regex": 1}}"#,
            "structured_outputs",
        ),
        (r#"{"top_p": 0}"#, "top_p"),
        (r#"{"logit_bias": {"1": -101}}"#, "logit_bias"),
    ];
    for (text, field) in cases {
        assert_field(vllm::parse, text, field);
    }
}

#[test]
fn every_bad_llama_cpp_field_is_named() {
    let cases = [
        (r#"{"temperature": "x"}"#, "temperature"),
        (r#"{"temperature": 1e39}"#, "temperature"),
        (r#"{"top_k": 1.5}"#, "top_k"),
        (r#"{"top_p": 0}"#, "top_p"),
        (r#"{"min_p": 1.5}"#, "min_p"),
        (r#"{"repeat_penalty": 0}"#, "repeat_penalty"),
        (r#"{"repeat_last_n": -2}"#, "repeat_last_n"),
        (r#"{"presence_penalty": true}"#, "presence_penalty"),
        (r#"{"frequency_penalty": []}"#, "frequency_penalty"),
        (r#"{"min_keep": -1}"#, "min_keep"),
        (r#"{"seed": 0.5}"#, "seed"),
        (r#"{"n_predict": 0}"#, "n_predict"),
        (r#"{"n_predict": -2}"#, "n_predict"),
        (r#"{"n_probs": 21}"#, "n_probs"),
        (r#"{"n_probs": -1}"#, "n_probs"),
        (r#"{"post_sampling_probs": "yes"}"#, "post_sampling_probs"),
        (r#"{"logit_bias": [[1]]}"#, "logit_bias"),
        (r#"{"logit_bias": [[1, true]]}"#, "logit_bias"),
        (r#"{"logit_bias": [[-1, 1]]}"#, "logit_bias"),
        (r#"{"logit_bias": 5}"#, "logit_bias"),
        (r#"{"logit_bias": {"1": "x"}}"#, "logit_bias"),
        (r#"{"stop": [""]}"#, "stop"),
        (r#"{"stop": 5}"#, "stop"),
        (r#"{"ignore_eos": "no"}"#, "ignore_eos"),
        (r#"{"grammar": 5}"#, "grammar"),
        (r#"{"json_schema": "x"}"#, "json_schema"),
        (
            r#"{"grammar": "root ::= a", "json_schema": {}}"#,
            "json_schema",
        ),
        (r#"{"typical_p": 0}"#, "typical_p"),
        (r#"{"typical_p": 1.5}"#, "typical_p"),
        (r#"{"top_n_sigma": "x"}"#, "top_n_sigma"),
        (r#"{"xtc_probability": 2}"#, "xtc_probability"),
        (
            r#"{"xtc_probability": 0.5, "xtc_threshold": -1}"#,
            "xtc_threshold",
        ),
        (r#"{"dynatemp_range": "x"}"#, "dynatemp_range"),
        (r#"{"mirostat": 3}"#, "mirostat"),
        (r#"{"mirostat": 2, "mirostat_tau": -1}"#, "mirostat_tau"),
        (r#"{"mirostat": 2, "mirostat_eta": -1}"#, "mirostat_eta"),
        (r#"{"dry_multiplier": 1, "dry_base": 0.5}"#, "dry_base"),
        (
            r#"{"dry_multiplier": 1, "dry_allowed_length": -1}"#,
            "dry_allowed_length",
        ),
        (
            r#"{"dry_multiplier": 1, "dry_penalty_last_n": -2}"#,
            "dry_penalty_last_n",
        ),
        (
            r#"{"dry_multiplier": 1, "dry_sequence_breakers": "x"}"#,
            "dry_sequence_breakers",
        ),
    ];
    for (text, field) in cases {
        assert_field(llama_cpp::parse, text, field);
    }
}

#[test]
fn text_that_is_not_an_object_is_refused() {
    for parser in [openai::parse as Parser, vllm::parse, llama_cpp::parse] {
        assert!(matches!(parser("{"), Err(RequestError::Json(_))));
        assert!(matches!(parser("null"), Err(RequestError::NotAnObject)));
        assert!(matches!(parser("[{}]"), Err(RequestError::NotAnObject)));
        assert_eq!(parser("{}").map(|_| ()), Ok(()));
    }
}

#[test]
fn requests_round_trip() {
    let texts = [
        (
            openai::parse as Parser,
            r#"{"temperature": 0.5, "logit_bias": {"3": -100}, "stop": "x", "n": 2}"#,
        ),
        (
            vllm::parse,
            r#"{"top_k": 5, "guided_json": {"type": "object"}, "bad_words": ["a"], "allowed_token_ids": [1]}"#,
        ),
        (
            llama_cpp::parse,
            r#"{"logit_bias": [[1, false], ["a", 1]], "mirostat": 1, "n_predict": 3}"#,
        ),
    ];
    for (parser, text) in texts {
        let r = parser(text).unwrap();
        assert_eq!(round_trip(&r), r, "{text}");
    }
    let zero_n = serde_json::to_value(Request::new(SamplingParams::default()))
        .map(|mut v| {
            v["n"] = json!(0);
            v
        })
        .unwrap();
    assert!(serde_json::from_value::<Request>(zero_n).is_err());
}

// ----- the OpenAI logprobs record ----------------------------------------------------

#[test]
fn openai_logprobs_record() {
    let params = SamplingParams::builder()
        .top_k(1)
        .logprobs(3)
        .build()
        .unwrap();
    let mut sampler = Sampler::new(params, 4).unwrap();
    let sample = sampler.sample(&[2.0f32, 1.0, 0.0, -1.0]).unwrap();
    let text = |id: u32| -> Vec<u8> {
        match id {
            0 => b"Hi".to_vec(),
            1 => vec![0xE2, 0x82], // the start of a character
            _ => format!("t{id}").into_bytes(),
        }
    };
    let raw = TokenLogprob::from_sample(&sample, LogprobKind::Raw, text).unwrap();
    assert_eq!(raw.token, "Hi");
    assert_eq!(raw.logprob, sample.raw_logprob.unwrap());
    assert_eq!(raw.bytes.as_deref(), Some(&b"Hi"[..]));
    assert_eq!(raw.top_logprobs.len(), 3);
    assert_eq!(raw.top_logprobs[1].token, "\u{FFFD}");
    assert_eq!(
        raw.top_logprobs[1].bytes.as_deref(),
        Some(&[0xE2, 0x82][..])
    );
    assert!(raw
        .top_logprobs
        .iter()
        .all(|t| t.logprob < 0.0 && t.logprob > -9999.0));

    // Under the final distribution top-k 1 left one token: logprob 0, the others -9999.
    let processed = TokenLogprob::from_sample(&sample, LogprobKind::Processed, text).unwrap();
    assert_eq!(processed.logprob, 0.0);
    assert_eq!(processed.top_logprobs[1].logprob, -9999.0);

    let v = serde_json::to_value(&raw).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 4);
    for k in ["token", "logprob", "bytes", "top_logprobs"] {
        assert!(keys.contains(&k), "{k}");
    }
    assert_eq!(v["bytes"], json!([72, 105]));
    assert_eq!(
        v["top_logprobs"][0].as_object().unwrap().len(),
        3,
        "token, logprob, bytes"
    );
    assert_eq!(round_trip(&raw), raw);

    // Without logprobs requested there is no raw logprob to report.
    let mut plain = Sampler::new(SamplingParams::default(), 2).unwrap();
    let s = plain.sample(&[0.0f32, 0.0]).unwrap();
    assert!(TokenLogprob::from_sample(&s, LogprobKind::Raw, |_| "x").is_none());
    assert!(TokenLogprob::from_sample(&s, LogprobKind::Processed, |_| "x").is_some());
}

// ----- no JSON object panics a parser ---------------------------------------------------

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<u64>().prop_map(|u| json!(u)),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| json!(x)),
        prop::sample::select(vec![
            -2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0, 20.0, 21.0, 100.0, 1e39, 1e-50
        ])
        .prop_map(|x| json!(x)),
        "[a-z0-9 ]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

const KEYS: &[&str] = &[
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "n",
    "seed",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "stop",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "response_format",
    "type",
    "json_schema",
    "schema",
    "repetition_penalty",
    "min_tokens",
    "stop_token_ids",
    "ignore_eos",
    "bad_words",
    "allowed_token_ids",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "structured_outputs",
    "json",
    "regex",
    "choice",
    "grammar",
    "n_predict",
    "repeat_penalty",
    "repeat_last_n",
    "min_keep",
    "n_probs",
    "post_sampling_probs",
    "typical_p",
    "top_n_sigma",
    "xtc_probability",
    "xtc_threshold",
    "dynatemp_range",
    "dynatemp_exponent",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "model",
    "messages",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(KEYS).prop_map(String::from),
        "[0-9]{1,3}",
        "[a-z_]{1,8}",
    ]
}

fn request_object() -> impl Strategy<Value = Value> {
    prop::collection::vec((key(), json_value()), 0..12)
        .prop_map(|kv| Value::Object(kv.into_iter().collect()))
}

fn check_ok(r: &Request) {
    // What a parser returns is as valid as what the builders make.
    assert_eq!(r.params.to_builder().build().as_ref(), Ok(&r.params));
    assert!(r.n.get() >= 1);
    assert_eq!(round_trip(r), *r);
    let mut s = Sampler::new(r.params.to_builder().logit_bias(0, 0.0).build().unwrap(), 8);
    if r.params.logit_bias().iter().all(|&(id, _)| id < 8) {
        let s = s.as_mut().expect("ids in range");
        assert!(s
            .sample(&[0.5f32, 0.25, 0.0, -1.0, 1.0, 2.0, 0.0, 0.0])
            .is_ok());
    } else {
        assert!(matches!(s, Err(Error::TokenOutOfRange { .. })));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_objects_never_panic_the_parsers(v in request_object()) {
        for parse in [openai::parse_value, vllm::parse_value, llama_cpp::parse_value] {
            match parse(&v) {
                Ok(r) => check_ok(&r),
                Err(RequestError::Field { field, reason }) => {
                    prop_assert!(!reason.is_empty());
                    prop_assert!(KEYS.contains(&field) || field == "params", "{field}");
                }
                Err(e) => prop_assert!(false, "{e:?} for an object"),
            }
        }
    }

    #[test]
    fn arbitrary_values_and_text_never_panic_the_parsers(v in json_value(), junk in ".{0,40}") {
        for parse in [openai::parse_value, vllm::parse_value, llama_cpp::parse_value] {
            let _ = parse(&v);
        }
        for parse in [openai::parse as Parser, vllm::parse, llama_cpp::parse] {
            let _ = parse(&junk);
            let _ = parse(&v.to_string());
        }
    }
}

/// `{"a": {"a": ... {}}}`: `depth` nested objects.
fn nested_schema(depth: usize) -> String {
    let mut s = String::from("{}");
    for _ in 1..depth {
        s = format!("{{\"a\": {s}}}");
    }
    s
}

/// Fuzz target `request`: llama.cpp's top-level `json_schema` nested 126 objects deep
/// (the input itself 127) was accepted, and the request then did not read back, because
/// serde_json refuses a 128th nested level and a serialised `Request` holds the schema
/// two levels down. Schemas deeper than `MAX_SCHEMA_DEPTH` are now refused, and
/// every accepted one round-trips.
#[test]
fn the_deepest_accepted_schema_round_trips_and_one_deeper_is_refused() {
    use logits::request::MAX_SCHEMA_DEPTH;
    for depth in [MAX_SCHEMA_DEPTH - 1, MAX_SCHEMA_DEPTH, MAX_SCHEMA_DEPTH + 1] {
        let schema = nested_schema(depth);
        let quoted = serde_json::to_string(&schema).unwrap();
        let cases: [(&str, Result<Request, RequestError>); 3] = [
            (
                "json_schema",
                llama_cpp::parse(&format!(r#"{{"json_schema": {schema}}}"#)),
            ),
            (
                "guided_json",
                vllm::parse(&format!(r#"{{"guided_json": {quoted}}}"#)),
            ),
            (
                "structured_outputs",
                vllm::parse(&format!(
                    r#"{{"structured_outputs": {{"json": {quoted}}}}}"#
                )),
            ),
        ];
        for (field, parsed) in cases {
            if depth <= MAX_SCHEMA_DEPTH {
                let r = parsed.unwrap_or_else(|e| panic!("{field} at depth {depth}: {e}"));
                assert!(matches!(r.grammar, Some(GrammarSpec::JsonSchema(_))));
                assert_eq!(round_trip(&r), r, "{field} at depth {depth}");
            } else {
                let e = parsed.expect_err(field);
                assert_eq!(e.field(), Some(field), "{e}");
            }
        }
    }
    // One level more would not read back: the bound is tight.
    let mut too_deep: Value = serde_json::from_str(&nested_schema(MAX_SCHEMA_DEPTH)).unwrap();
    too_deep = json!({ "a": too_deep });
    let text = serde_json::to_string(&json!({ "grammar": { "json_schema": too_deep } })).unwrap();
    assert!(serde_json::from_str::<Value>(&text).is_err());
}
