//! Inputs that look almost right and used to be accepted silently: a tokenizer that gives
//! one id to two tokens, a grammar whose language is empty, a `generation_config.json`
//! number that changes meaning when rounded to `f32`, a stop string that straddles the
//! `min_tokens` boundary, a user grammar constraint that panics. Each is either refused
//! with a typed error or handled as documented.

use logits::grammar::{GrammarError, TokenKind, Vocab};

/// A byte-level BPE `tokenizer.json` with the given `model.vocab` members and added tokens.
fn tokenizer(vocab: &str, added: &str) -> String {
    format!(
        r#"{{"added_tokens": [{added}], "pre_tokenizer": {{"type": "ByteLevel"}},
            "model": {{"type": "BPE", "vocab": {{{vocab}}}, "merges": []}}}}"#
    )
}

const EOS: &str = r#"{"id": 3, "content": "<eos>", "special": true}"#;

#[test]
fn a_tokenizer_that_gives_one_id_to_two_text_tokens_is_refused() {
    let ok = Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1, "ab": 2"#, EOS), 4, &[3])
        .expect("distinct ids load");
    assert_eq!(ok.bytes(1), b"b");
    let e = Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1, "ab": 1"#, EOS), 4, &[3])
        .unwrap_err();
    assert_eq!(
        e,
        GrammarError::DuplicateTokenId {
            id: 1,
            first: "b".into(),
            second: "ab".into()
        }
    );
    assert!(e.to_string().contains("token id 1"), "{e}");
    // The same key written twice with the same id is one token.
    let v = Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1, "b": 1"#, EOS), 4, &[3])
        .expect("a repeated entry names the same token");
    assert_eq!(
        (v.bytes(1), v.kind(2)),
        (&b"b"[..], Some(TokenKind::Padding))
    );
}

#[test]
fn an_added_token_that_overwrites_a_text_token_is_refused() {
    let added = format!(r#"{EOS}, {{"id": 1, "content": "<tool>", "special": false}}"#);
    let e =
        Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1"#, &added), 4, &[3]).unwrap_err();
    assert_eq!(
        e,
        GrammarError::DuplicateTokenId {
            id: 1,
            first: "b".into(),
            second: "<tool>".into()
        }
    );
    // Two added tokens with one id.
    let added = format!(r#"{EOS}, {{"id": 3, "content": "<end>", "special": true}}"#);
    let e =
        Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1"#, &added), 4, &[3]).unwrap_err();
    assert!(
        matches!(e, GrammarError::DuplicateTokenId { id: 3, .. }),
        "{e:?}"
    );
}

#[test]
fn an_added_token_that_repeats_a_text_token_with_its_content_is_that_token() {
    // GPT-2 lists `<|endoftext|>` both in `model.vocab` and in `added_tokens`, with one
    // id: the added entry makes it special.
    let added = r#"{"id": 2, "content": "<|endoftext|>", "special": true}"#;
    let json = tokenizer(r#""a": 0, "b": 1, "<|endoftext|>": 2"#, added);
    let v = Vocab::from_tokenizer_json(&json, 4, &[2]).expect("same content, same token");
    assert_eq!(v.kind(2), Some(TokenKind::Special));
    assert_eq!(v.bytes(2), b"<|endoftext|>");
    assert_eq!(v.special_id("<|endoftext|>"), Some(2));
    // The same when the content matches the token's decoded bytes rather than its
    // spelling in the byte-level alphabet (`Ġ` is the space).
    let added = r#"{"id": 2, "content": " x", "special": true}"#;
    let v = Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1, "Ġx": 2"#, added), 4, &[2])
        .expect("same bytes, same token");
    assert_eq!(
        (v.kind(2), v.bytes(2)),
        (Some(TokenKind::Special), &b" x"[..])
    );
    // Spelled as in `model.vocab`.
    let added = r#"{"id": 2, "content": "Ġx", "special": true}"#;
    let v = Vocab::from_tokenizer_json(&tokenizer(r#""a": 0, "b": 1, "Ġx": 2"#, added), 4, &[2])
        .expect("same spelling, same token");
    assert_eq!(v.kind(2), Some(TokenKind::Special));
}

#[cfg(feature = "serde")]
mod generation_config {
    use logits::{Error, GenerationConfig, SamplingParams};

    fn params(fields: &str) -> Result<SamplingParams, Error> {
        SamplingParams::from_generation_config_json(&format!(r#"{{"do_sample": true, {fields}}}"#))
    }

    fn refused(fields: &str) -> (&'static str, f64) {
        match params(fields) {
            Err(Error::InvalidParameter { name, value, .. }) => (name, value),
            other => panic!("{fields}: {other:?}"),
        }
    }

    #[test]
    fn a_positive_temperature_that_rounds_to_zero_is_refused_not_greedy() {
        // The smallest positive f32 is 2^-149, about 1.4e-45; half of it and less round
        // to 0.
        let (name, value) = refused(r#""temperature": 1e-50"#);
        assert_eq!((name, value), ("temperature", 1e-50));
        assert_eq!(refused(r#""temperature": 7e-46"#).0, "temperature");
        // The smallest positive f32 itself is a (subnormal) temperature, not greedy.
        let p = params(r#""temperature": 1.5e-45"#).unwrap();
        assert!(!p.is_greedy());
        assert_eq!(p.temperature(), f32::from_bits(1));
        // 0 is greedy, as before.
        assert!(params(r#""temperature": 0"#).unwrap().is_greedy());
        assert!(params(r#""temperature": 0.0"#).unwrap().is_greedy());
    }

    #[test]
    fn a_value_that_rounds_to_infinity_in_f32_is_refused() {
        assert_eq!(refused(r#""temperature": 1e39"#), ("temperature", 1e39));
        assert_eq!(
            refused(r#""repetition_penalty": 1e39"#).0,
            "repetition_penalty"
        );
        assert_eq!(
            refused(r#""repetition_penalty": 1e-50"#).0,
            "repetition_penalty"
        );
    }

    #[test]
    fn top_p_or_min_p_above_one_is_refused_even_when_f32_rounds_it_to_one() {
        // 1.00000001 is 1.0 in f32 but above 1 as the file writes it.
        assert_eq!(1.000_000_01_f64 as f32, 1.0);
        assert_eq!(refused(r#""top_p": 1.00000001"#), ("top_p", 1.000_000_01));
        assert_eq!(refused(r#""min_p": 1.00000001"#), ("min_p", 1.000_000_01));
        assert_eq!(refused(r#""top_p": 1.5"#).0, "top_p");
        // A positive top_p or min_p that rounds to 0 would turn the cut into an error
        // or off.
        assert_eq!(refused(r#""top_p": 1e-50"#), ("top_p", 1e-50));
        assert_eq!(refused(r#""min_p": 1e-50"#), ("min_p", 1e-50));
        // 1 itself, and a value below 1 that rounds to 1, are in range.
        assert_eq!(params(r#""top_p": 1"#).unwrap().top_p(), 1.0);
        assert_eq!(params(r#""top_p": 0.99999999"#).unwrap().top_p(), 1.0);
        assert_eq!(params(r#""min_p": 1.0"#).unwrap().min_p(), 1.0);
        assert_eq!(params(r#""top_p": 0.95"#).unwrap().top_p(), 0.95);
    }

    #[test]
    fn sampling_fields_are_ignored_without_do_sample_and_kept_exact_by_the_parser() {
        let text = r#"{"do_sample": false, "temperature": 1e-50, "top_p": 1.00000001}"#;
        let config = GenerationConfig::from_json(text).unwrap();
        assert_eq!(config.temperature, Some(1e-50));
        assert_eq!(config.top_p, Some(1.000_000_01));
        assert!(config.to_params().unwrap().is_greedy());
    }
}

mod stop_strings_across_min_tokens {
    use logits::stop::{FinishReason, StopChecker, StopConditions};

    /// Pushes `pieces` (token ids 1, 2, ...) and returns the text shown, the finish
    /// reason and the number of tokens pushed until it.
    fn run(c: &StopConditions, pieces: &[&str]) -> (String, Option<FinishReason>, usize) {
        let mut checker = StopChecker::new(c);
        let mut shown = String::new();
        for (i, piece) in pieces.iter().enumerate() {
            let step = checker.push(i as u32 + 1, piece.as_bytes());
            shown.push_str(step.text);
            if let Some(reason) = step.finish {
                return (shown, Some(reason), i + 1);
            }
        }
        shown.push_str(checker.flush());
        (shown, None, pieces.len())
    }

    fn conditions(stops: &[&str], min: usize) -> StopConditions {
        StopConditions::builder()
            .stop_strings(stops.iter().copied())
            .min_tokens(min)
            .build()
            .unwrap()
    }

    #[test]
    fn a_stop_string_that_begins_before_min_tokens_and_ends_after_matches() {
        // "END" is split "E" | "ND": token 1 is below min_tokens 2, token 2 is not.
        let c = conditions(&["END"], 2);
        assert_eq!(
            run(&c, &["ok E", "ND more", "x"]),
            ("ok ".to_string(), Some(FinishReason::StopString(0)), 2)
        );
        // Split over three tokens, the boundary in the middle.
        let c = conditions(&["</answer>"], 3);
        assert_eq!(
            run(&c, &["42</", "ans", "wer> tail"]),
            ("42".to_string(), Some(FinishReason::StopString(0)), 3)
        );
    }

    #[test]
    fn a_stop_string_that_ends_before_min_tokens_is_text() {
        let c = conditions(&["END"], 3);
        // Whole in token 1, and split over tokens 1 and 2: both end below 3.
        assert_eq!(
            run(&c, &["a END b", "c", "d"]),
            ("a END bcd".to_string(), None, 3)
        );
        assert_eq!(
            run(&c, &["a E", "ND b", "c"]),
            ("a END bc".to_string(), None, 3)
        );
        // One that ends early beside one that ends in token 3: the later one matches.
        assert_eq!(
            run(&c, &["xE", "ND E", "ND y"]),
            ("xEND ".to_string(), Some(FinishReason::StopString(0)), 3)
        );
    }

    #[test]
    fn an_early_stop_string_inside_held_text_does_not_match_later() {
        // "B" ends in token 1, inside the held prefix "AB" of "ABC"; at token 2 only
        // "ABC" may match, and here it does not.
        let c = conditions(&["B", "ABC"], 2);
        assert_eq!(run(&c, &["xAB", "x"]), ("xABx".to_string(), None, 2));
        // It does when token 2 completes it.
        assert_eq!(
            run(&c, &["xAB", "C"]),
            ("x".to_string(), Some(FinishReason::StopString(1)), 2)
        );
        // And a "B" that ends in token 2 matches.
        assert_eq!(
            run(&c, &["xAB", "xB"]),
            ("xABx".to_string(), Some(FinishReason::StopString(0)), 2)
        );
    }

    #[test]
    fn every_split_of_a_stop_string_over_the_boundary_matches() {
        // The text "pre STOP post", split into two tokens at every position, with
        // min_tokens 2: the stop string ends in token 2 whenever the split is before its
        // last byte, and then it matches; otherwise it is text.
        let full = "pre STOP post";
        let end = full.find("STOP").unwrap() + 4;
        let c = conditions(&["STOP"], 2);
        for cut in 0..=full.len() {
            let (shown, finish, _) = run(&c, &[&full[..cut], &full[cut..]]);
            if cut < end {
                assert_eq!(
                    (shown.as_str(), finish),
                    ("pre ", Some(FinishReason::StopString(0))),
                    "cut {cut}"
                );
            } else {
                assert_eq!((shown.as_str(), finish), (full, None), "cut {cut}");
            }
        }
    }
}

/// A user `Constraint` that panics leaves the grammar stage and the sampler usable: the
/// panic propagates, neither history moves (or both do, when the commit went through),
/// and every later step gives what a stage and sampler that never panicked give.
mod constraint_panics {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::Arc;

    use logits::grammar::{
        Choice, Constraint, GrammarError, GrammarMask, Status, TokenKind, Vocab,
    };
    use logits::{
        Chain, Sampler, SamplingParams, SequenceSampler, Temperature, TokenId, TokenMask, TopK,
    };

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Method {
        FillMask,
        Commit,
        Status,
        Rollback,
    }

    /// `Choice`, with a panic on the first call of one method (before the inner call,
    /// except for `status`, which panics after the commit went through).
    struct Flaky {
        inner: Choice,
        panic_in: Option<Method>,
    }

    impl Flaky {
        fn trip(&mut self, m: Method) {
            if self.panic_in == Some(m) {
                self.panic_in = None;
                panic!("a user constraint failed in {m:?}");
            }
        }
    }

    impl Constraint for Flaky {
        fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<Status, GrammarError> {
            // Half a mask, then the panic.
            if self.panic_in == Some(Method::FillMask) {
                mask.allow(b'x' as TokenId).unwrap();
            }
            self.trip(Method::FillMask);
            self.inner.fill_mask(mask)
        }
        fn commit(&mut self, token: TokenId) -> Result<(), GrammarError> {
            self.trip(Method::Commit);
            self.inner.commit(token)
        }
        fn status(&mut self) -> Result<Status, GrammarError> {
            self.trip(Method::Status);
            self.inner.status()
        }
        fn rollback(&mut self, n: usize) -> Result<(), GrammarError> {
            self.trip(Method::Rollback);
            self.inner.rollback(n)
        }
    }

    fn vocab() -> Arc<Vocab> {
        let mut tokens: Vec<Vec<u8>> = (0u8..128).map(|b| vec![b]).collect();
        let mut kinds = vec![TokenKind::Text; 128];
        tokens.extend([b"re".to_vec(), b"ee".to_vec(), b"<eos>".to_vec()]);
        kinds.extend([TokenKind::Text, TokenKind::Text, TokenKind::Special]);
        Arc::new(Vocab::new(tokens, kinds, vec![130]).unwrap())
    }

    fn stage(vocab: &Arc<Vocab>, panic_in: Option<Method>) -> GrammarMask {
        let inner = Choice::new(vocab.clone(), &["red", "green", "greet"]).unwrap();
        GrammarMask::new(Box::new(Flaky { inner, panic_in }), vocab.clone())
    }

    /// A row that prefers different tokens at different ids, so the draw matters.
    fn row(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 % 101) as f32) / 25.0).collect()
    }

    /// Runs `hurt` and `fresh` (same sampler settings, `hurt`'s stage panics once) side
    /// by side to the end and checks they agree at every step.
    fn check<S: SequenceSampler>(method: Method, mut hurt: S, mut fresh: S) {
        let vocab = vocab();
        let logits = row(vocab.len());
        let (mut hurt_stage, mut fresh_stage) = (stage(&vocab, Some(method)), stage(&vocab, None));
        if method == Method::Rollback {
            for _ in 0..2 {
                let a = hurt_stage.sample(&mut hurt, &logits).unwrap();
                let b = fresh_stage.sample(&mut fresh, &logits).unwrap();
                assert_eq!(a, b);
            }
            let r = catch_unwind(AssertUnwindSafe(|| hurt_stage.rollback(1)));
            assert!(r.is_err(), "the panic propagates");
            assert_eq!(hurt_stage.committed(), 2);
            hurt_stage.rollback(1).unwrap();
            hurt.rollback(1);
            fresh_stage.rollback(1).unwrap();
            fresh.rollback(1);
        } else {
            let r = catch_unwind(AssertUnwindSafe(|| hurt_stage.sample(&mut hurt, &logits)));
            assert!(r.is_err(), "{method:?}: the panic propagates");
            if method == Method::Status {
                // The constraint took the token before its status panicked: both keep it.
                let (b, _) = fresh_stage.sample(&mut fresh, &logits).unwrap();
                assert_eq!(hurt.history().tokens(), &[b.token]);
                assert_eq!(hurt_stage.committed(), 1);
            } else {
                assert!(hurt.history().tokens().is_empty(), "{method:?}");
                assert_eq!(hurt_stage.committed(), 0, "{method:?}");
            }
        }
        assert_eq!(hurt.history().tokens(), fresh.history().tokens());
        assert_eq!(
            hurt_stage.compute().unwrap().0,
            fresh_stage.compute().unwrap().0
        );
        loop {
            let a = hurt_stage.sample(&mut hurt, &logits).unwrap();
            let b = fresh_stage.sample(&mut fresh, &logits).unwrap();
            assert_eq!(a, b, "{method:?}");
            if a.1 == Status::Finished {
                break;
            }
        }
        assert_eq!(hurt.history().tokens(), fresh.history().tokens());
        assert_eq!(hurt_stage.committed(), hurt.history().generated().len());
    }

    #[test]
    fn a_panicking_constraint_leaves_the_stage_and_the_sampler_usable() {
        let n = vocab().len();
        for method in [
            Method::FillMask,
            Method::Commit,
            Method::Status,
            Method::Rollback,
        ] {
            let sampler = || {
                let params = SamplingParams::builder()
                    .temperature(1.5)
                    .repetition_penalty(1.2)
                    .seed(11)
                    .build()
                    .unwrap();
                Sampler::new(params, n).unwrap()
            };
            check(method, sampler(), sampler());
            let chain = || {
                Chain::builder(n)
                    .seed(4)
                    .stage(TopK::new(40).unwrap())
                    .stage(Temperature::new(1.5).unwrap())
                    .draw()
                    .build()
                    .unwrap()
            };
            check(method, chain(), chain());
        }
    }
}

#[cfg(feature = "llguidance")]
mod empty_grammars {
    use std::sync::Arc;

    use logits::grammar::{
        GrammarError, GrammarKind, GrammarMask, LlgEngine, Status, TokenKind, Vocab,
    };
    use logits::{Sampler, SamplingParams};

    /// Single-byte text tokens 0..=127, then `<eos>`.
    fn vocab() -> Arc<Vocab> {
        let mut tokens: Vec<Vec<u8>> = (0u8..128).map(|b| vec![b]).collect();
        let mut kinds = vec![TokenKind::Text; 128];
        tokens.push(b"<eos>".to_vec());
        kinds.push(TokenKind::Special);
        Arc::new(Vocab::new(tokens, kinds, vec![128]).unwrap())
    }

    fn empty(r: Result<logits::grammar::LlgConstraint, GrammarError>) -> (GrammarKind, String) {
        match r {
            Err(GrammarError::EmptyLanguage { kind, reason }) => (kind, reason),
            Err(e) => panic!("another error: {e:?}"),
            Ok(_) => panic!("an empty grammar compiled"),
        }
    }

    /// The message is one short line that names the problem, not the engine's state.
    fn check_message(e: &GrammarError) {
        let m = e.to_string();
        assert!(m.contains("allows nothing"), "{m}");
        assert!(!m.contains('\n') && !m.contains("<state>"), "{m}");
        assert!(m.len() < 160, "{m}");
    }

    #[test]
    fn a_grammar_whose_language_is_empty_is_refused_when_compiled() {
        let engine = LlgEngine::new(vocab()).unwrap();
        for re in ["[a&&b]", "a[a&&b]", "[^\\s\\S]", "(a[a&&b])|[b&&c]"] {
            assert_eq!(empty(engine.regex(re)).0, GrammarKind::Regex, "{re}");
            check_message(&engine.regex(re).unwrap_err());
        }
        // Non-empty, but no token of this vocabulary spells `ÿ` (two bytes above 127).
        assert_eq!(empty(engine.regex("ÿ")).0, GrammarKind::Regex);
        for lark in ["start: /[a&&b]/", "start: a\na: a \"x\""] {
            assert_eq!(empty(engine.lark(lark)).0, GrammarKind::Lark, "{lark}");
            check_message(&engine.lark(lark).unwrap_err());
        }
        for schema in [
            "false",
            r#"{"enum": []}"#,
            r#"{"type": "string", "minLength": 5, "maxLength": 2}"#,
        ] {
            let (kind, reason) = empty(engine.json_schema(schema));
            assert_eq!(kind, GrammarKind::JsonSchema);
            assert!(reason.to_lowercase().contains("unsatisfiable"), "{reason}");
            check_message(&engine.json_schema(schema).unwrap_err());
        }
        // A grammar that allows something still compiles, and its first mask is right.
        let mut stage = GrammarMask::new(Box::new(engine.regex("[ab]c?").unwrap()), vocab());
        let (mask, status) = stage.compute().unwrap();
        assert_eq!((mask.count_allowed(), status), (2, Status::Open));
        assert!(mask.is_allowed(b'a' as u32) && mask.is_allowed(b'b' as u32));
    }

    #[test]
    fn a_dead_end_after_some_tokens_is_no_token_allowed_and_the_state_survives() {
        let vocab = vocab();
        let engine = LlgEngine::new(vocab.clone()).unwrap();
        // `a` is allowed, then nothing: the empty class is only reached after it.
        let c = engine.lark("start: \"a\" /[a&&b]/ | \"b\"").unwrap();
        let mut stage = GrammarMask::new(Box::new(c), vocab.clone());
        let (mask, _) = stage.compute().unwrap();
        assert!(mask.is_allowed(b'a' as u32) && mask.is_allowed(b'b' as u32));
        stage.commit(b'a' as u32).unwrap();
        for _ in 0..2 {
            let e = stage.compute().unwrap_err();
            assert_eq!(e, GrammarError::NoTokenAllowed);
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        // Through the sampler too: nothing moves.
        let mut sampler =
            Sampler::new(SamplingParams::builder().seed(1).build().unwrap(), 129).unwrap();
        let row = vec![0.0f32; 129];
        assert_eq!(
            stage.sample(&mut sampler, &row).unwrap_err(),
            logits::Error::Grammar(GrammarError::NoTokenAllowed)
        );
        assert!(sampler.history().tokens().is_empty());
        // The constraint is still at `a`: it rolls back and takes the other branch.
        assert_eq!(stage.committed(), 1);
        stage.rollback(1).unwrap();
        assert_eq!(stage.commit(b'b' as u32).unwrap(), Status::OnlyEos);
        assert_eq!(stage.commit(128).unwrap(), Status::Finished);
    }

    #[test]
    fn a_cloned_constraint_starts_from_the_first_mask_and_replays_after_a_rollback() {
        let vocab = vocab();
        let engine = LlgEngine::new(vocab.clone()).unwrap();
        let compiled = engine.regex("(ab|b)c").unwrap();
        let mut a = GrammarMask::new(Box::new(compiled.clone()), vocab.clone());
        let mut b = GrammarMask::new(Box::new(compiled), vocab.clone());
        let first = a.compute().unwrap().0.clone();
        assert_eq!(first.count_allowed(), 2);
        a.commit(b'a' as u32).unwrap();
        assert_eq!(a.compute().unwrap().0.count_allowed(), 1);
        a.rollback(1).unwrap();
        assert_eq!(a.compute().unwrap().0, &first);
        assert_eq!(b.compute().unwrap().0, &first);
        a.commit(b'b' as u32).unwrap();
        assert_eq!(a.commit(b'c' as u32).unwrap(), Status::OnlyEos);
    }
}
