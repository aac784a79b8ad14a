//! The whole loop on a random Qwen3 with the full 151,936-logit vocabulary and
//! the real tokenizer: chat template, encode, forward, sample, stream, stop.

mod common;

use common::{write_random_model, Kind, HERB, VOCAB};
use logits::stop::{FinishReason, StopConditions};
use logits::SamplingParams;
use logits_qwen3::generate::{generate, Event, Generation, Part, TokenFilter};
use logits_qwen3::grammar::{GrammarSpec, Grammars};
use logits_qwen3::load::{Loaded, ModelFiles};
use logits_qwen3::template::{Message, Role};

struct Fixture {
    _dir: tempfile::TempDir,
    loaded: Loaded,
    prompt: Vec<u32>,
}

fn fixture(kind: Kind) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    write_random_model(dir.path(), kind);
    let loaded = Loaded::load(ModelFiles::in_dir(dir.path(), None).unwrap()).unwrap();
    let text = loaded
        .template
        .render(&[Message::new(Role::User, HERB)], true, false)
        .unwrap();
    let prompt = loaded.tokenizer.encode(&text).unwrap();
    assert_eq!(prompt.len(), 26);
    Fixture {
        _dir: dir,
        loaded,
        prompt,
    }
}

fn stop(max_tokens: usize) -> StopConditions {
    StopConditions::builder()
        .stop_tokens([151645, 151643])
        .max_tokens(max_tokens)
        .build()
        .unwrap()
}

/// Runs one generation and returns it with the concatenated streamed text.
fn run(
    f: &mut Fixture,
    params: SamplingParams,
    stop: &StopConditions,
    filter: Option<&mut dyn TokenFilter>,
) -> (Generation, String) {
    let mut streamed = String::new();
    let g = generate(
        &mut f.loaded.model,
        &f.loaded.tokenizer,
        &f.prompt,
        params,
        stop,
        filter,
        &mut |e| {
            if let Event::Text { text, .. } = e {
                streamed.push_str(text);
            }
        },
    )
    .unwrap();
    (g, streamed)
}

#[test]
fn loads_with_generation_config_defaults() {
    let f = fixture(Kind::Random);
    let p = &f.loaded.defaults.params;
    assert_eq!(p.temperature(), 0.6);
    assert_eq!(p.top_k(), Some(20));
    assert_eq!(p.top_p(), 0.95);
    assert_eq!(f.loaded.defaults.eos_token_ids, vec![151645, 151643]);
    assert_eq!(f.loaded.model.logits_len(), VOCAB);
    assert_eq!(f.loaded.tokenizer.vocab_size(), 151_669);
}

#[test]
fn seeded_runs_repeat_exactly_and_other_seeds_differ() {
    let mut f = fixture(Kind::Random);
    let params = |seed| f_params(seed);
    let stop = stop(24);
    let (a, sa) = run(&mut f, params(7), &stop, None);
    let (b, sb) = run(&mut f, params(7), &stop, None);
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(sa, sb);
    assert_eq!(a.answer, b.answer);
    assert_eq!(a.tokens.len(), 24);
    assert_eq!(a.finish, FinishReason::Length);
    let (c, _) = run(&mut f, params(8), &stop, None);
    assert_ne!(a.tokens, c.tokens);
    // No padding id (151,669..151,936) is ever drawn.
    assert!(a.tokens.iter().chain(&c.tokens).all(|&t| t < 151_669));
}

fn f_params(seed: u64) -> SamplingParams {
    SamplingParams::builder()
        .temperature(0.6)
        .top_k(20)
        .top_p(0.95)
        .seed(seed)
        .build()
        .unwrap()
}

#[test]
fn greedy_runs_repeat_and_follow_the_argmax() {
    let mut f = fixture(Kind::Random);
    let stop = stop(12);
    let (a, _) = run(&mut f, SamplingParams::greedy(), &stop, None);
    let (b, _) = run(&mut f, SamplingParams::greedy(), &stop, None);
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.tokens.len(), 12);
    // Recompute the argmax over the tokenizer's ids step by step.
    let vocab = f.loaded.tokenizer.vocab_size();
    let model = &mut f.loaded.model;
    model.reset();
    let mut row = model.forward(&f.prompt).unwrap();
    for &token in &a.tokens {
        let best = (0..vocab).fold(0, |b, i| if row[i] > row[b] { i } else { b });
        assert_eq!(token as usize, best);
        row = model.forward(&[token]).unwrap();
    }
}

#[test]
fn streamed_text_is_the_utf8_safe_decoding_of_the_tokens() {
    let mut f = fixture(Kind::Random);
    let stop = stop(64);
    for seed in 0..3 {
        let (g, streamed) = run(&mut f, f_params(seed), &stop, None);
        assert_eq!(streamed, format!("{}{}", g.thinking, g.answer));
        let think = [151667, 151668];
        let bytes: Vec<u8> = g
            .tokens
            .iter()
            .filter(|t| !think.contains(t))
            .flat_map(|&t| f.loaded.tokenizer.token_bytes(t).to_vec())
            .collect();
        assert_eq!(streamed, String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn stop_string_spanning_tokens_cuts_the_answer_before_it() {
    let mut f = fixture(Kind::Random);
    let (g, _) = run(&mut f, SamplingParams::greedy(), &stop(16), None);
    // A stop string from the middle of token 4 to the middle of token 6.
    let tok = &f.loaded.tokenizer;
    let lens: Vec<usize> = g.tokens.iter().map(|&t| tok.token_bytes(t).len()).collect();
    let full: Vec<u8> = g
        .tokens
        .iter()
        .flat_map(|&t| tok.token_bytes(t).to_vec())
        .collect();
    let start4: usize = lens[..4].iter().sum();
    let start6: usize = lens[..6].iter().sum();
    let (mut from, mut to) = (start4 + lens[4] / 2, start6 + lens[6].div_ceil(2));
    // Widen to character boundaries.
    while std::str::from_utf8(&full[from..to]).is_err() && from > 0 {
        from -= 1;
        if std::str::from_utf8(&full[from..to]).is_err() && to < full.len() {
            to += 1;
        }
    }
    let needle = String::from_utf8(full[from..to].to_vec()).unwrap();
    let first = full
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .unwrap();
    let expected = String::from_utf8_lossy(&full[..first]).into_owned();

    let stop = StopConditions::builder()
        .stop_tokens([151645, 151643])
        .stop_strings([needle.clone()])
        .max_tokens(16)
        .build()
        .unwrap();
    let (h, streamed) = run(&mut f, SamplingParams::greedy(), &stop, None);
    assert_eq!(h.finish, FinishReason::StopString(0), "stop {needle:?}");
    assert_eq!(h.answer, expected);
    assert_eq!(streamed, expected);
    assert!(!streamed.contains(&needle));
    assert!(h.tokens.len() <= 7);
}

#[test]
fn end_of_turn_token_stops_and_min_tokens_delays_it() {
    let mut f = fixture(Kind::EndsAtOnce);
    let (g, streamed) = run(&mut f, SamplingParams::greedy(), &stop(32), None);
    assert_eq!(g.finish, FinishReason::StopToken(151645));
    assert_eq!(g.tokens, vec![151645]);
    assert_eq!(streamed, "");

    let stop = StopConditions::builder()
        .stop_tokens([151645, 151643])
        .min_tokens(3)
        .max_tokens(32)
        .build()
        .unwrap();
    for params in [SamplingParams::greedy(), f_params(1)] {
        let (g, _) = run(&mut f, params, &stop, None);
        assert_eq!(g.finish, FinishReason::StopToken(151645));
        assert_eq!(g.tokens.len(), 4, "{:?}", g.tokens);
        assert!(g.tokens[..3].iter().all(|t| ![151645, 151643].contains(t)));
    }
}

#[test]
fn json_schema_constrained_answer_parses() {
    let mut f = fixture(Kind::Random);
    let schema = r#"{
        "type": "object",
        "properties": {"herb": {"type": "string", "minLength": 1, "maxLength": 12}},
        "required": ["herb"],
        "additionalProperties": false,
        "x-guidance": {"whitespace_flexible": false}
    }"#;
    let grammars = Grammars::new(&f.loaded.tokenizer, &[151645, 151643]).unwrap();
    let spec = GrammarSpec::JsonSchema(schema.into());
    let mut answers = Vec::new();
    for seed in 0..3 {
        let mut filter = grammars.filter(&spec).unwrap();
        let (g, streamed) = run(&mut f, f_params(seed), &stop(64), Some(&mut filter));
        assert!(
            matches!(g.finish, FinishReason::StopToken(_)),
            "{:?} {:?}",
            g.finish,
            g.answer
        );
        assert_eq!(streamed, g.answer);
        let value: serde_json::Value = serde_json::from_str(&g.answer)
            .unwrap_or_else(|e| panic!("{:?} does not parse: {e}", g.answer));
        let herb = value["herb"].as_str().expect("herb is a string");
        let chars = herb.chars().count();
        assert!((1..=12).contains(&chars), "{herb:?}");
        assert_eq!(value.as_object().unwrap().len(), 1);
        answers.push(g.answer);
    }
    // Same seed, same constrained answer.
    let mut filter = grammars.filter(&spec).unwrap();
    let (again, _) = run(&mut f, f_params(0), &stop(64), Some(&mut filter));
    assert_eq!(again.answer, answers[0]);
}

#[test]
fn regex_constrained_answer_matches() {
    let mut f = fixture(Kind::Random);
    let grammars = Grammars::new(&f.loaded.tokenizer, &[151645, 151643]).unwrap();
    let mut filter = grammars
        .filter(&GrammarSpec::Regex("(basil|thyme|oregano)".into()))
        .unwrap();
    let (g, _) = run(&mut f, f_params(5), &stop(16), Some(&mut filter));
    assert!(
        ["basil", "thyme", "oregano"].contains(&g.answer.as_str()),
        "{:?}",
        g.answer
    );
    assert!(matches!(g.finish, FinishReason::StopToken(_)));
}

#[test]
fn thinking_is_reported_apart_from_the_answer() {
    // Force "<think>", some text, "</think>", then the answer through a
    // filter that allows one token at a time.
    struct Script {
        ids: Vec<u32>,
        at: usize,
        mask: logits::TokenMask,
    }
    impl TokenFilter for Script {
        fn allowed(&mut self) -> anyhow::Result<&logits::TokenMask> {
            self.mask.fill(false);
            self.mask.allow(self.ids[self.at]).unwrap();
            Ok(&self.mask)
        }
        fn commit(&mut self, token: u32) -> anyhow::Result<()> {
            assert_eq!(token, self.ids[self.at]);
            self.at += 1;
            Ok(())
        }
    }
    let mut f = fixture(Kind::Random);
    let tok = &f.loaded.tokenizer;
    let mut ids = vec![151667];
    ids.extend(tok.encode("\nsoup needs basil\n").unwrap());
    ids.push(151668);
    ids.extend(tok.encode("\n\nBasil").unwrap());
    ids.push(151645);
    let mut script = Script {
        mask: logits::TokenMask::new_empty(tok.vocab_size()),
        ids,
        at: 0,
    };
    let mut parts = Vec::new();
    let g = generate(
        &mut f.loaded.model,
        &f.loaded.tokenizer,
        &f.prompt,
        f_params(0),
        &stop(64),
        Some(&mut script),
        &mut |e| match e {
            Event::Text { part, text } => parts.push((part, text.to_string())),
            Event::ThinkingStart => parts.push((Part::Thinking, "<start>".into())),
            Event::ThinkingEnd => parts.push((Part::Answer, "<end>".into())),
            Event::Token { .. } => {}
        },
    )
    .unwrap();
    assert_eq!(g.thinking, "\nsoup needs basil\n");
    assert_eq!(g.answer, "\n\nBasil");
    assert_eq!(g.finish, FinishReason::StopToken(151645));
    assert_eq!(parts.first().unwrap().1, "<start>");
    let end = parts.iter().position(|p| p.1 == "<end>").unwrap();
    assert!(parts[1..end].iter().all(|p| p.0 == Part::Thinking));
    assert!(parts[end + 1..].iter().all(|p| p.0 == Part::Answer));
}
