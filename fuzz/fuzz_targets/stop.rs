//! The stop-string matcher (`logits::stop`) over arbitrary token pieces, checked against
//! a plain model: the text shown is exactly the pushed bytes (decoded) up to the earliest
//! stop string, generation ends at the first push that completes one, and the other
//! finish reasons fire exactly when documented.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use logits::stop::{FinishReason, StopChecker, StopConditions, StopError};

/// Bytes from a small alphabet (so stop strings actually occur), with some multi-byte
/// UTF-8 and some invalid bytes.
fn bytes(u: &mut Unstructured<'_>, max: usize) -> arbitrary::Result<Vec<u8>> {
    let n = u.int_in_range(0..=max)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let b = match u.int_in_range(0..=9)? {
            0..=5 => b"ab\nU:"[u.int_in_range(0..=4)?],
            6 => 0xC3,           // lead of a 2-byte character (é = C3 A9)
            7 => 0xA9,           // continuation byte
            8 => 0xE2,           // lead of a 3-byte character (€ = E2 82 AC)
            _ => u.arbitrary()?, // anything, invalid UTF-8 included
        };
        out.push(b);
    }
    Ok(out)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    (needle.len() <= hay.len())
        .then(|| hay.windows(needle.len()).position(|w| w == needle))
        .flatten()
}

/// The earliest stop string in `hay`: (start, index), ties to the string listed first.
fn earliest(hay: &[u8], stops: &[String]) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for (i, s) in stops.iter().enumerate() {
        if let Some(at) = find(hay, s.as_bytes()) {
            if best.is_none_or(|(b, _)| at < b) {
                best = Some((at, i));
            }
        }
    }
    best
}

fn without_replacement(s: &str) -> String {
    s.chars()
        .filter(|&c| c != char::REPLACEMENT_CHARACTER)
        .collect()
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let mut stops = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let b = bytes(u, 4)?;
        stops.push(String::from_utf8_lossy(&b).into_owned());
    }
    let stop_tokens: Vec<u32> = (0..u.int_in_range(0..=2)?)
        .map(|_| u.int_in_range(0..=7))
        .collect::<arbitrary::Result<_>>()?;
    let max_tokens: Option<usize> = if u.arbitrary()? {
        Some(u.int_in_range(0..=12)?)
    } else {
        None
    };
    let min_tokens: usize = if u.ratio(1, 4)? {
        u.int_in_range(0..=4)?
    } else {
        0
    };
    let mut builder = StopConditions::builder()
        .stop_tokens(stop_tokens.iter().copied())
        .stop_strings(stops.iter().cloned())
        .min_tokens(min_tokens);
    if let Some(m) = max_tokens {
        builder = builder.max_tokens(m);
    }
    let conditions = match builder.build() {
        Ok(c) => c,
        Err(e) => {
            match e {
                StopError::EmptyStopString { index } => assert!(stops[index].is_empty()),
                StopError::ZeroMaxTokens => assert_eq!(max_tokens, Some(0)),
                StopError::MinExceedsMax { min, max } => {
                    assert!(min > max && Some(max) == max_tokens && min == min_tokens)
                }
                other => panic!("undocumented {other:?}"),
            }
            return Ok(());
        }
    };
    assert!(stops.iter().all(|s| !s.is_empty()));
    // With min_tokens a stop string that ends before token min_tokens is text, so the
    // exact model below applies to min_tokens == 0; otherwise the reasons are checked.
    let exact_model = min_tokens == 0;

    let mut checker = StopChecker::new(&conditions);
    let mut shown = String::new();
    let mut expected = String::new(); // the model's text of the segments before the last flush
    let mut segment: Vec<u8> = Vec::new(); // bytes pushed since the last flush
    let mut generated = 0usize;
    let mut finished: Option<FinishReason> = None;
    for _ in 0..u.int_in_range(0..=16)? {
        let op = u.int_in_range(0..=9)?;
        if op == 0 {
            let text = checker.flush().to_string();
            if finished.is_none() {
                expected.push_str(&String::from_utf8_lossy(&segment));
                segment.clear();
            }
            shown.push_str(&text);
            continue;
        }
        let banned = checker.banned_tokens();
        if generated < min_tokens {
            assert_eq!(banned, conditions.stop_tokens());
        } else {
            assert!(banned.is_empty());
        }
        let token = u.int_in_range(0..=7)?;
        let piece = bytes(u, 5)?;
        let step = checker.push(token, &piece);
        let (text, finish) = (step.text.to_string(), step.finish);
        if let Some(reason) = finished {
            assert_eq!(
                (text.as_str(), finish),
                ("", Some(reason)),
                "push after the end"
            );
            continue;
        }
        generated += 1;
        shown.push_str(&text);
        assert_eq!(checker.generated(), generated);
        if stop_tokens.contains(&token) {
            assert_eq!(finish, Some(FinishReason::StopToken(token)));
            expected.push_str(&String::from_utf8_lossy(&segment));
            finished = finish;
            continue;
        }
        segment.extend_from_slice(&piece);
        if exact_model {
            if let Some((at, index)) = earliest(&segment, &stops) {
                assert_eq!(finish, Some(FinishReason::StopString(index)), "{segment:?}");
                segment.truncate(at);
                expected.push_str(&String::from_utf8_lossy(&segment));
                finished = finish;
                continue;
            }
        }
        match finish {
            None => assert_ne!(max_tokens, Some(generated)),
            Some(FinishReason::Length) => {
                assert_eq!(max_tokens, Some(generated));
                expected.push_str(&String::from_utf8_lossy(&segment));
            }
            Some(FinishReason::StopString(i)) => {
                assert!(!exact_model, "stop string {i} that the model does not see");
                // Text released before min_tokens may hold the string already; the match
                // itself lies in the bytes pushed since the last flush.
                assert!(find(&segment, stops[i].as_bytes()).is_some());
                assert!(generated >= min_tokens);
            }
            Some(FinishReason::StopToken(t)) => panic!("stop token {t} that is not one"),
        }
        finished = finish;
        assert_eq!(checker.finish_reason(), finished);
    }
    if finished.is_none() {
        let rest = checker.flush().to_string();
        shown.push_str(&rest);
        expected.push_str(&String::from_utf8_lossy(&segment));
    }
    if exact_model {
        // Valid characters come out in order, none invented or lost; invalid bytes may be
        // split differently across pieces, so only their replacements may differ in count.
        assert_eq!(without_replacement(&shown), without_replacement(&expected));
        if !expected.contains(char::REPLACEMENT_CHARACTER) {
            assert_eq!(shown, expected);
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
});
