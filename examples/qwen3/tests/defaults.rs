//! Sampling defaults from generation_config.json and the flags over them.

mod common;

use clap::Parser;
use logits_qwen3::cli::Args;
use logits_qwen3::defaults::{with_overrides, GenerationDefaults};

fn args(flags: &[&str]) -> Args {
    Args::parse_from(std::iter::once("qwen3").chain(flags.iter().copied()))
}

#[test]
fn qwen3_generation_config() {
    let d =
        GenerationDefaults::from_file(&common::qwen3_dir().join("generation_config.json")).unwrap();
    assert_eq!(d.params.temperature(), 0.6);
    assert_eq!(d.params.top_k(), Some(20));
    assert_eq!(d.params.top_p(), 0.95);
    assert_eq!(d.eos_token_ids, vec![151645, 151643]);
}

#[test]
fn without_do_sample_decoding_is_greedy() {
    let d = GenerationDefaults::from_json(r#"{"temperature": 0.7, "eos_token_id": 5}"#).unwrap();
    assert!(d.params.is_greedy());
    assert_eq!(d.eos_token_ids, vec![5]);
}

#[test]
fn flags_override_the_defaults() {
    let d = GenerationDefaults::qwen3_fallback(vec![]);
    let p = with_overrides(
        &d.params,
        &args(&[
            "--temperature",
            "1.0",
            "--top-k",
            "0",
            "--top-p",
            "0.5",
            "--min-p",
            "0.1",
            "--repetition-penalty",
            "1.2",
            "--presence-penalty",
            "0.3",
            "--frequency-penalty",
            "0.4",
            "--seed",
            "9",
            "--logprobs",
            "3",
        ]),
    )
    .unwrap();
    assert_eq!(p.temperature(), 1.0);
    assert_eq!(p.top_k(), None);
    assert_eq!(p.top_p(), 0.5);
    assert_eq!(p.min_p(), 0.1);
    assert_eq!(p.repetition_penalty(), 1.2);
    assert_eq!(p.presence_penalty(), 0.3);
    assert_eq!(p.frequency_penalty(), 0.4);
    assert_eq!(p.seed(), 9);
    assert_eq!(p.logprobs(), Some(3));
    // No flags: the defaults unchanged.
    assert_eq!(with_overrides(&d.params, &args(&[])).unwrap(), d.params);
}

#[test]
fn out_of_range_flags_are_errors() {
    let base = GenerationDefaults::qwen3_fallback(vec![]).params;
    let err = format!(
        "{:#}",
        with_overrides(&base, &args(&["--top-p", "0"])).unwrap_err()
    );
    assert!(err.contains("top_p"), "{err}");
    let err = format!(
        "{:#}",
        with_overrides(&base, &args(&["--temperature", "-1"])).unwrap_err()
    );
    assert!(err.contains("temperature"), "{err}");
    assert!(with_overrides(&base, &args(&["--logprobs", "21"])).is_err());
}
