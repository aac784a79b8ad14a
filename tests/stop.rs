//! Stop conditions driven the way an inference loop drives them.

use logits::stop::{FinishReason, Step, StopChecker, StopConditions, StopError};

/// Pushes `(token, piece)` pairs until a finish; returns the emitted text, the
/// finish reason and the number of pushes.
fn run(
    conditions: &StopConditions,
    tokens: &[(u32, &[u8])],
) -> (String, Option<FinishReason>, usize) {
    let mut checker = StopChecker::new(conditions);
    let mut text = String::new();
    let mut pushes = 0;
    for &(token, piece) in tokens {
        pushes += 1;
        let Step { text: t, finish } = checker.push(token, piece);
        text.push_str(t);
        if finish.is_some() {
            return (text, finish, pushes);
        }
    }
    text.push_str(checker.flush());
    (text, None, pushes)
}

fn qwen3() -> StopConditions {
    StopConditions::builder()
        .stop_tokens([151645, 151643])
        .build()
        .unwrap()
}

#[test]
fn stop_token_ends_generation_and_its_text_is_not_emitted() {
    let (text, finish, pushes) = run(
        &qwen3(),
        &[(1, b"Basil"), (151645, b"<|im_end|>"), (2, b"never seen")],
    );
    assert_eq!(text, "Basil");
    assert_eq!(finish, Some(FinishReason::StopToken(151645)));
    assert_eq!(pushes, 2);
}

#[test]
fn either_qwen3_end_token_stops() {
    let (_, finish, _) = run(&qwen3(), &[(1, b"a"), (151643, b"")]);
    assert_eq!(finish, Some(FinishReason::StopToken(151643)));
}

#[test]
fn stop_string_split_over_three_tokens() {
    let c = StopConditions::builder()
        .stop_strings(["</answer>"])
        .build()
        .unwrap();
    let mut checker = StopChecker::new(&c);
    assert_eq!(checker.push(1, b"Basil</").text, "Basil");
    let step = checker.push(2, b"ans");
    assert_eq!((step.text, step.finish), ("", None));
    let step = checker.push(3, b"wer> trailing");
    assert_eq!(step.text, "");
    assert_eq!(step.finish, Some(FinishReason::StopString(0)));
    assert_eq!(checker.generated(), 3);
}

#[test]
fn partial_match_that_is_not_a_stop_is_released() {
    let c = StopConditions::builder()
        .stop_strings(["</answer>"])
        .build()
        .unwrap();
    let mut checker = StopChecker::new(&c);
    assert_eq!(checker.push(1, b"a </an").text, "a ");
    // "</ans" is still a possible start, held back.
    assert_eq!(checker.push(2, b"s").text, "");
    // "</ansi" cannot be: all of it comes out.
    assert_eq!(checker.push(3, b"i").text, "</ansi");
    assert_eq!(checker.finish_reason(), None);
}

#[test]
fn held_back_prefix_is_released_when_generation_ends_by_length() {
    let c = StopConditions::builder()
        .stop_strings(["STOP"])
        .max_tokens(2)
        .build()
        .unwrap();
    let (text, finish, _) = run(&c, &[(1, b"go "), (2, b"ST")]);
    assert_eq!(text, "go ST");
    assert_eq!(finish, Some(FinishReason::Length));
}

#[test]
fn held_back_prefix_is_released_on_stop_token() {
    let c = StopConditions::builder()
        .stop_tokens([9])
        .stop_strings(["STOP"])
        .build()
        .unwrap();
    let (text, finish, _) = run(&c, &[(1, b"go ST"), (9, b"")]);
    assert_eq!(text, "go ST");
    assert_eq!(finish, Some(FinishReason::StopToken(9)));
}

#[test]
fn stop_string_inside_one_token_cuts_the_text_before_it() {
    let c = StopConditions::builder()
        .stop_strings(["\n\n"])
        .build()
        .unwrap();
    let (text, finish, _) = run(&c, &[(1, b"one\n\ntwo")]);
    assert_eq!(text, "one");
    assert_eq!(finish, Some(FinishReason::StopString(0)));
}

#[test]
fn earliest_stop_string_wins_and_reports_its_index() {
    let c = StopConditions::builder()
        .stop_strings(["world", "lo w"])
        .build()
        .unwrap();
    let (text, finish, _) = run(&c, &[(1, b"hel"), (2, b"lo world")]);
    assert_eq!(text, "hel");
    assert_eq!(finish, Some(FinishReason::StopString(1)));
}

#[test]
fn overlapping_prefixes_are_held_back_correctly() {
    // "aab" after "aa a": the suffix "a" and "aa" are prefixes; the match
    // starts at the second "a" of "aaab".
    let c = StopConditions::builder()
        .stop_strings(["aab"])
        .build()
        .unwrap();
    let mut checker = StopChecker::new(&c);
    assert_eq!(checker.push(1, b"xaa").text, "x");
    assert_eq!(checker.push(2, b"a").text, "a");
    let step = checker.push(3, b"b!");
    assert_eq!(step.text, "");
    assert_eq!(step.finish, Some(FinishReason::StopString(0)));
}

#[test]
fn max_tokens_gives_length() {
    let c = StopConditions::builder().max_tokens(3).build().unwrap();
    let (text, finish, pushes) = run(&c, &[(1, b"a"), (2, b"b"), (3, b"c"), (4, b"d")]);
    assert_eq!(text, "abc");
    assert_eq!(finish, Some(FinishReason::Length));
    assert_eq!(pushes, 3);
}

#[test]
fn stop_string_completed_on_the_last_allowed_token_wins_over_length() {
    let c = StopConditions::builder()
        .stop_strings(["END"])
        .max_tokens(2)
        .build()
        .unwrap();
    let (text, finish, _) = run(&c, &[(1, b"xE"), (2, b"ND")]);
    assert_eq!(text, "x");
    assert_eq!(finish, Some(FinishReason::StopString(0)));
}

#[test]
fn min_tokens_bans_stop_tokens_until_reached() {
    let c = StopConditions::builder()
        .stop_tokens([151645, 151643])
        .min_tokens(2)
        .build()
        .unwrap();
    let mut checker = StopChecker::new(&c);
    assert_eq!(checker.banned_tokens(), &[151643, 151645]);
    checker.push(1, b"a");
    assert_eq!(checker.banned_tokens(), &[151643, 151645]);
    checker.push(2, b"b");
    assert!(checker.banned_tokens().is_empty());
    assert_eq!(
        checker.push(151645, b"").finish,
        Some(FinishReason::StopToken(151645))
    );
}

#[test]
fn stop_strings_do_not_match_below_min_tokens() {
    let c = StopConditions::builder()
        .stop_strings(["!"])
        .min_tokens(2)
        .build()
        .unwrap();
    let mut checker = StopChecker::new(&c);
    let step = checker.push(1, b"hi!");
    assert_eq!((step.text, step.finish), ("hi!", None));
    let step = checker.push(2, b" ok! more");
    assert_eq!(
        (step.text, step.finish),
        (" ok", Some(FinishReason::StopString(0)))
    );
}

#[test]
fn utf8_split_across_tokens_is_held_back_until_whole() {
    // "€" is E2 82 AC, "🌿" is F0 9F 8C BF.
    let c = StopConditions::builder().build().unwrap();
    let mut checker = StopChecker::new(&c);
    assert_eq!(checker.push(1, &[b'5', 0xE2]).text, "5");
    assert_eq!(checker.push(2, &[0x82]).text, "");
    assert_eq!(checker.push(3, &[0xAC, b' ', 0xF0, 0x9F]).text, "€ ");
    assert_eq!(checker.push(4, &[0x8C, 0xBF]).text, "🌿");
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    let c = StopConditions::builder().build().unwrap();
    let mut checker = StopChecker::new(&c);
    assert_eq!(checker.push(1, &[b'a', 0xFF, b'b']).text, "a\u{FFFD}b");
    // A lead byte that is never completed comes out as U+FFFD at the end.
    assert_eq!(checker.push(2, &[0xE2]).text, "");
    assert_eq!(checker.flush(), "\u{FFFD}");
}

#[test]
fn multibyte_stop_string_split_inside_a_character() {
    let c = StopConditions::builder()
        .stop_strings(["。\n"])
        .build()
        .unwrap();
    let stop = "。\n".as_bytes(); // E3 80 82 0A
    let mut checker = StopChecker::new(&c);
    let mut first = "答".as_bytes().to_vec();
    first.push(stop[0]);
    assert_eq!(checker.push(1, &first).text, "答");
    assert_eq!(checker.push(2, &stop[1..3]).text, "");
    let step = checker.push(3, &stop[3..]);
    assert_eq!(
        (step.text, step.finish),
        ("", Some(FinishReason::StopString(0)))
    );
}

#[test]
fn a_multibyte_prefix_that_is_not_the_stop_is_released_whole() {
    let c = StopConditions::builder()
        .stop_strings(["。\n"])
        .build()
        .unwrap();
    let mut checker = StopChecker::new(&c);
    assert_eq!(checker.push(1, "好。".as_bytes()).text, "好");
    assert_eq!(checker.push(2, b"x").text, "。x");
}

#[test]
fn pushing_after_the_end_changes_nothing() {
    let c = StopConditions::builder().max_tokens(1).build().unwrap();
    let mut checker = StopChecker::new(&c);
    checker.push(1, b"a");
    let step = checker.push(2, b"b");
    assert_eq!((step.text, step.finish), ("", Some(FinishReason::Length)));
    assert_eq!(checker.generated(), 1);
}

#[test]
fn reset_starts_a_new_generation() {
    let c = StopConditions::builder()
        .stop_strings(["xy"])
        .build()
        .unwrap();
    let mut checker = StopChecker::new(&c);
    checker.push(1, b"ax");
    checker.push(2, b"y");
    assert_eq!(checker.finish_reason(), Some(FinishReason::StopString(0)));
    checker.reset();
    assert_eq!(checker.finish_reason(), None);
    // The held-back "x" of the last generation must not leak into this one.
    assert_eq!(checker.push(3, b"b").text, "b");
}

#[test]
fn invalid_conditions_are_rejected() {
    assert_eq!(
        StopConditions::builder().stop_strings(["a", ""]).build(),
        Err(StopError::EmptyStopString { index: 1 })
    );
    assert_eq!(
        StopConditions::builder().max_tokens(0).build(),
        Err(StopError::ZeroMaxTokens)
    );
    assert_eq!(
        StopConditions::builder()
            .max_tokens(2)
            .min_tokens(3)
            .build(),
        Err(StopError::MinExceedsMax { min: 3, max: 2 })
    );
    assert!(StopConditions::builder()
        .max_tokens(3)
        .min_tokens(3)
        .build()
        .is_ok());
}

#[test]
fn finish_reason_names() {
    assert_eq!(FinishReason::StopString(2).to_string(), "stop string 2");
    assert_eq!(FinishReason::Length.to_string(), "length");
    assert_eq!(FinishReason::StopToken(1).openai_name(), "stop");
}

#[test]
fn streamed_text_equals_the_text_before_the_stop_for_every_split() {
    // Split "The answer: basil.\nUser: more" at every pair of positions into
    // three pieces; the emitted text is always "The answer: basil." exactly.
    let full = "The answer: basil.\nUser: more".as_bytes();
    let c = StopConditions::builder()
        .stop_strings(["\nUser:"])
        .build()
        .unwrap();
    for i in 0..=full.len() {
        for j in i..=full.len() {
            let pieces: [(u32, &[u8]); 3] = [(1, &full[..i]), (2, &full[i..j]), (3, &full[j..])];
            let (text, finish, _) = run(&c, &pieces);
            assert_eq!(text, "The answer: basil.", "split at {i},{j}");
            assert_eq!(
                finish,
                Some(FinishReason::StopString(0)),
                "split at {i},{j}"
            );
        }
    }
}

mod owned {
    use super::*;
    use logits::stop::OwnedStopChecker;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// A per-request struct: it owns its checker, so it has no lifetime.
    struct Request {
        id: usize,
        checker: OwnedStopChecker,
    }

    #[test]
    fn a_request_struct_owns_its_checker() {
        let mut requests: Vec<Request> = (0..3)
            .map(|id| Request {
                id,
                checker: OwnedStopChecker::new(qwen3()),
            })
            .collect();
        for r in &mut requests {
            assert_eq!(r.checker.push(1, b"Basil").text, "Basil");
        }
        let step = requests[1].checker.push(151645, b"<|im_end|>");
        assert_eq!(step.finish, Some(FinishReason::StopToken(151645)));
        assert_eq!(requests[1].id, 1);
        assert_eq!(requests[0].checker.finish_reason(), None);
        assert_eq!(requests[1].checker.generated(), 2);
    }

    #[test]
    fn checkers_share_one_arc_of_conditions() {
        let shared = Arc::new(qwen3());
        let a = OwnedStopChecker::new(shared.clone());
        let b = OwnedStopChecker::new(shared.clone());
        assert!(Arc::ptr_eq(a.shared_conditions(), b.shared_conditions()));
        assert_eq!(a.conditions(), &qwen3());
    }

    #[test]
    fn a_borrowed_checker_becomes_owned_mid_generation() {
        let c = StopConditions::builder()
            .stop_strings(["</answer>"])
            .min_tokens(1)
            .stop_tokens([9])
            .build()
            .unwrap();
        let mut checker = StopChecker::new(&c);
        assert_eq!(checker.banned_tokens(), &[9]);
        assert_eq!(checker.push(1, b"x</ans").text, "x");
        let mut owned = OwnedStopChecker::from(checker.clone());
        let mut copy = checker.to_owned_checker();
        drop(checker);
        for o in [&mut owned, &mut copy] {
            assert!(o.banned_tokens().is_empty());
            let step = o.push(2, b"wer>");
            assert_eq!(
                (step.text, step.finish),
                ("", Some(FinishReason::StopString(0)))
            );
        }
    }

    #[test]
    fn reset_and_flush_behave_as_borrowed() {
        let c = StopConditions::builder()
            .stop_strings(["STOP"])
            .max_tokens(3)
            .build()
            .unwrap();
        let mut owned = OwnedStopChecker::new(c);
        assert_eq!(owned.push(1, b"ok ST").text, "ok ");
        assert_eq!(owned.flush(), "ST");
        owned.push(2, b"a");
        assert_eq!(owned.push(3, b"b").finish, Some(FinishReason::Length));
        owned.reset();
        assert_eq!((owned.generated(), owned.finish_reason()), (0, None));
    }

    proptest! {
        /// Push for push, an owned checker decides what a borrowed one decides.
        #[test]
        fn owned_equals_borrowed(
            stops in prop::collection::vec("[ab]{1,3}", 0..3),
            stop_tokens in prop::collection::vec(0u32..6, 0..2),
            min_tokens in 0usize..4,
            max_tokens in prop::option::of(4usize..12),
            pushes in prop::collection::vec((0u32..8, prop::collection::vec(prop::sample::select(vec![b'a', b'b', b'c', 0xE2, 0x82, 0xAC]), 0..4), any::<bool>()), 0..16),
        ) {
            let mut b = StopConditions::builder()
                .stop_strings(stops)
                .stop_tokens(stop_tokens)
                .min_tokens(min_tokens);
            if let Some(m) = max_tokens {
                b = b.max_tokens(m);
            }
            let c = b.build().unwrap();
            let mut borrowed = StopChecker::new(&c);
            let mut owned = OwnedStopChecker::new(c.clone());
            for (token, piece, flush) in pushes {
                prop_assert_eq!(borrowed.banned_tokens(), owned.banned_tokens());
                if flush {
                    prop_assert_eq!(borrowed.flush().to_string(), owned.flush());
                    continue;
                }
                let x = borrowed.push(token, &piece);
                let (text, finish) = (x.text.to_string(), x.finish);
                let y = owned.push(token, &piece);
                prop_assert_eq!((text.as_str(), finish), (y.text, y.finish));
                prop_assert_eq!(borrowed.generated(), owned.generated());
            }
        }
    }
}
