//! Speculative decoding with a draft model, on random Qwen3s with the full
//! 151,936-logit vocabulary and the real tokenizer: at temperature 0 the answer is
//! the target's greedy answer whatever the draft, and a draft that is the target
//! itself has every token accepted.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{write_random_model, Kind, HERB};
use logits::stop::StopConditions;
use logits::SamplingParams;
use logits_qwen3::generate::{generate, generate_speculative, Draft, Generation};
use logits_qwen3::load::{load_draft, Loaded, ModelFiles};
use logits_qwen3::template::{Message, Role};

const MAX_TOKENS: usize = 12;

fn model_dir(kind: Kind) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_random_model(dir.path(), kind);
    dir
}

fn prompt(loaded: &Loaded) -> Vec<u32> {
    let text = loaded
        .template
        .render(&[Message::new(Role::User, HERB)], true, false)
        .unwrap();
    loaded.tokenizer.encode(&text).unwrap()
}

/// Only the length limit stops: every run is `MAX_TOKENS` long, so the
/// comparisons cover many verifications.
fn stop() -> StopConditions {
    StopConditions::builder()
        .max_tokens(MAX_TOKENS)
        .build()
        .unwrap()
}

fn greedy() -> SamplingParams {
    SamplingParams::builder().temperature(0.0).build().unwrap()
}

/// The target's own answer, without a draft.
fn plain(target: &Path, params: SamplingParams) -> Generation {
    let mut loaded = Loaded::load(ModelFiles::in_dir(target, None).unwrap()).unwrap();
    let p = prompt(&loaded);
    generate(
        &mut loaded.model,
        &loaded.tokenizer,
        &p,
        params,
        &stop(),
        None,
        &mut |_| {},
    )
    .unwrap()
}

fn speculative(target: &Path, draft: &Path, k: usize, params: SamplingParams) -> Generation {
    let mut loaded = Loaded::load_with(ModelFiles::in_dir(target, None).unwrap(), true).unwrap();
    let mut draft = load_draft(draft, &loaded).unwrap();
    let p = prompt(&loaded);
    let mut text = String::new();
    let g = generate_speculative(
        &mut loaded.model,
        Draft {
            model: &mut draft,
            k,
        },
        &loaded.tokenizer,
        &p,
        params,
        &stop(),
        &mut |e| {
            if let logits_qwen3::generate::Event::Text { text: t, .. } = e {
                text.push_str(t);
            }
        },
    )
    .unwrap();
    assert_eq!(text, g.answer);
    g
}

#[test]
fn the_target_as_its_own_draft_accepts_everything_at_temperature_0() {
    let target = model_dir(Kind::Random);
    let want = plain(target.path(), greedy());
    assert_eq!(want.tokens.len(), MAX_TOKENS);
    for k in [1, 3, 4] {
        let g = speculative(target.path(), target.path(), k, greedy());
        assert_eq!(g.tokens, want.tokens, "k = {k}");
        assert_eq!(g.answer, want.answer, "k = {k}");
        let d = g.draft.unwrap();
        assert!(d.proposed > 0 && d.steps > 0, "k = {k}: {d:?}");
        assert_eq!(d.accepted, d.proposed, "k = {k}: {d:?}");
        // Each verification emits its accepted tokens and one more.
        assert_eq!(d.accepted + d.steps, MAX_TOKENS, "k = {k}: {d:?}");
    }
}

#[test]
fn another_draft_still_gives_the_targets_greedy_tokens() {
    let target = model_dir(Kind::Random);
    let draft = model_dir(Kind::OtherRandom);
    let want = plain(target.path(), greedy());
    // The two models disagree: the draft's own greedy answer is another one.
    let other = plain(draft.path(), greedy());
    assert_ne!(other.tokens, want.tokens);
    for k in [1, 4] {
        let g = speculative(target.path(), draft.path(), k, greedy());
        assert_eq!(g.tokens, want.tokens, "k = {k}");
        let d = g.draft.unwrap();
        assert!(d.accepted < d.proposed, "k = {k}: {d:?}");
    }
}

#[test]
fn sampled_speculative_runs_are_seeded() {
    let target = model_dir(Kind::Random);
    let draft = model_dir(Kind::OtherRandom);
    let params = |seed| {
        SamplingParams::builder()
            .temperature(0.6)
            .top_k(20)
            .top_p(0.95)
            .seed(seed)
            .build()
            .unwrap()
    };
    let a = speculative(target.path(), draft.path(), 4, params(5));
    let b = speculative(target.path(), draft.path(), 4, params(5));
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.tokens.len(), MAX_TOKENS);
    assert_eq!(a.draft, b.draft);
}

fn qwen3(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qwen3"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn assert_fails(o: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err:?}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn cli_reports_acceptance_in_the_finish_line() {
    let target = model_dir(Kind::Random);
    let d = target.path().to_str().unwrap();
    let o = qwen3(&[
        "--model-dir",
        d,
        "--draft-model-dir",
        d,
        "--draft-k",
        "3",
        "--prompt",
        HERB,
        "--no-think",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("3 tokens per verification"), "{out}");
    let finish = out.lines().find(|l| l.starts_with("[finish:")).unwrap();
    assert!(finish.contains("generated 8 tokens"), "{finish}");
    // The target drafts for itself: every proposal is accepted.
    assert!(
        finish.contains(
            "| draft: proposed 6, accepted 6 (rate 100.0%), mean accepted per step 3.00]"
        ),
        "{finish}"
    );
}

#[test]
fn cli_rejects_a_bad_draft_k_and_a_mismatched_draft() {
    let target = model_dir(Kind::Random);
    let d = target.path().to_str().unwrap();
    let base = ["--model-dir", d, "--prompt", "x"];
    let o = qwen3(&[&base[..], &["--draft-model-dir", d, "--draft-k", "0"]].concat());
    assert_fails(&o, &["--draft-k must be at least 1"]);
    let o = qwen3(&[&base[..], &["--draft-k", "2"]].concat());
    assert_fails(&o, &["--draft-model-dir"]);
    let o = qwen3(&[&base[..], &["--draft-model-dir", d, "--logprobs", "2"]].concat());
    assert_fails(&o, &["--logprobs"]);
    let missing = target.path().join("nowhere");
    let o = qwen3(&[&base[..], &["--draft-model-dir", missing.to_str().unwrap()]].concat());
    assert_fails(&o, &["draft model directory", "does not exist"]);
    // A draft with another vocabulary: the tiny reference Qwen3 (2,048 logits).
    let tiny = common::tiny_dir();
    let o = qwen3(&[&base[..], &["--draft-model-dir", tiny.to_str().unwrap()]].concat());
    assert_fails(&o, &["draft model", "2048 logits", "151936", "tokenizer"]);
}
