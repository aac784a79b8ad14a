//! The Hugging Face processors (`sequence_bias`, `bad_words_ids` with EOS,
//! `suppress_tokens`, `begin_suppress_tokens`, `forced_bos_token_id`,
//! `forced_eos_token_id`, `exponential_decay_length_penalty`, `top_h`, the normalised
//! and encoder repetition penalties, `encoder_no_repeat_ngram_size`, `guidance_scale`,
//! the watermark) and XTC's strict threshold, each checked against a plain reference written here from transformers'
//! definitions, through all three paths: a stage on the whole row, a stage after a cut
//! (a sorted, compact candidate set) and a `LogitsProcessor`.

use std::collections::BTreeSet;

use logits::{
    BadWords, Candidates, Chain, ClassifierFreeGuidance, EncoderNoRepeatNGram,
    EncoderRepetitionPenalty, Error, ExponentialDecayLengthPenalty, ForcedBos, ForcedEos, History,
    LogitsProcessor, NormalizedRepetitionPenalty, Sampler, SamplingParams, SequenceBias, Stage,
    StageContext, SuppressTokens, SuppressTokensAtBegin, TokenId, TopH, TopK, Watermark,
    WatermarkDetector, Xtc,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// Helpers.

fn cands(row: &[f32]) -> Candidates {
    let mut c = Candidates::new();
    c.reset_from(row.iter().copied());
    c
}

fn ctx<'a>(tokens: &'a [TokenId], prompt_len: usize) -> StageContext<'a> {
    let h = History::new(tokens, prompt_len);
    StageContext {
        history: h,
        seed: 0,
        step: h.step(),
    }
}

/// Equal as logits: the same value (`-0.0 == 0.0`), or both `-inf`.
fn same(a: f32, b: f32) -> bool {
    a == b
}

/// Runs `stage` on `row` after `tokens` (the first `prompt_len` the prompt) through the
/// three paths and checks each against `expected`, the row the reference leaves.
fn check<S: Stage + LogitsProcessor + Clone>(
    stage: &S,
    row: &[f32],
    tokens: &[TokenId],
    prompt_len: usize,
    expected: &[f32],
) -> Result<(), TestCaseError> {
    // A stage on the whole row: every logit.
    let mut c = cands(row);
    stage
        .clone()
        .apply(&mut c, &ctx(tokens, prompt_len))
        .unwrap();
    prop_assert_eq!(c.len(), row.len());
    for (i, (&got, &want)) in c.logits().iter().zip(expected).enumerate() {
        prop_assert!(
            same(got, want),
            "dense: token {} got {} want {}",
            i,
            got,
            want
        );
    }
    // A processor: the same row.
    let mut p = row.to_vec();
    stage
        .clone()
        .process(&mut p, &History::new(tokens, prompt_len))
        .unwrap();
    for (i, (&got, &want)) in p.iter().zip(expected).enumerate() {
        prop_assert!(
            same(got, want),
            "processor: token {} got {} want {}",
            i,
            got,
            want
        );
    }
    // A stage after a cut: the finite tokens of `row`, sorted; each keeps the value the
    // reference gives it, or is gone when that value is `-inf`.
    let mut c = cands(row);
    c.sort();
    let live: BTreeSet<TokenId> = c.ids().iter().copied().collect();
    stage
        .clone()
        .apply(&mut c, &ctx(tokens, prompt_len))
        .unwrap();
    let got: Vec<(TokenId, f32)> = c
        .ids()
        .iter()
        .copied()
        .zip(c.logits().iter().copied())
        .collect();
    for &(id, l) in &got {
        prop_assert!(live.contains(&id), "sparse: token {} appeared", id);
        prop_assert!(
            same(l, expected[id as usize]),
            "sparse: token {} got {} want {}",
            id,
            l,
            expected[id as usize]
        );
    }
    for &id in &live {
        if expected[id as usize] > f32::NEG_INFINITY {
            prop_assert!(
                got.iter().any(|&(g, _)| g == id),
                "sparse: token {} lost",
                id
            );
        }
    }
    Ok(())
}

/// Rows with ties and banned entries.
fn row(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<f32>> {
    let cell = prop_oneof![
        6 => -20.0f32..20.0,
        3 => (-4i32..4).prop_map(|x| x as f32),
        1 => Just(f32::NEG_INFINITY),
    ];
    prop::collection::vec(cell, len)
}

/// A history over a small vocabulary, with a prompt length within it.
fn history(
    vocab: u32,
    len: std::ops::Range<usize>,
) -> impl Strategy<Value = (Vec<TokenId>, usize)> {
    prop::collection::vec(0..vocab, len).prop_flat_map(|h| {
        let n = h.len();
        (Just(h), 0..=n)
    })
}

fn bias() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => -8.0f32..8.0,
        2 => (-3i32..3).prop_map(|x| x as f32 * 0.5),
        1 => Just(f32::NEG_INFINITY),
    ]
}

fn is_invalid<T: std::fmt::Debug>(r: Result<T, Error>, param: &str) -> bool {
    matches!(r, Err(Error::InvalidParameter { name, .. }) if name == param)
}

// ---------------------------------------------------------------------------------------
// References, from transformers' definitions.

/// `SequenceBiasLogitsProcessor`: the list becomes a dict (first place, last value); a
/// bias row starts at 0, takes the one-token biases, then `+=` each multi-token bias
/// whose prefix ends the history, in dict order; the row is added once.
fn ref_sequence_bias(row: &[f32], hist: &[TokenId], entries: &[(Vec<TokenId>, f32)]) -> Vec<f32> {
    let mut dict: Vec<(Vec<TokenId>, f32)> = Vec::new();
    for (s, b) in entries {
        match dict.iter_mut().find(|(k, _)| k == s) {
            Some(e) => e.1 = *b,
            None => dict.push((s.clone(), *b)),
        }
    }
    let mut bias = vec![0.0f32; row.len()];
    for (s, b) in &dict {
        if s.len() == 1 {
            bias[s[0] as usize] = *b;
        }
    }
    for (s, b) in &dict {
        let prefix = &s[..s.len() - 1];
        if s.len() > 1 && hist.len() >= prefix.len() && hist[hist.len() - prefix.len()..] == *prefix
        {
            bias[*s.last().unwrap() as usize] += *b;
        }
    }
    row.iter().zip(&bias).map(|(l, b)| l + b).collect()
}

/// `ExponentialDecayLengthPenalty` after `generated` new tokens.
fn ref_decay(
    row: &[f32],
    generated: usize,
    start: usize,
    factor: f64,
    eos: &[TokenId],
) -> Vec<f32> {
    let mut out = row.to_vec();
    if generated > start {
        let m = (factor.powf((generated - start) as f64) - 1.0) as f32;
        for &e in eos {
            let l = row[e as usize];
            let x = l + l.abs() * m;
            out[e as usize] = if l == 0.0 || l == f32::NEG_INFINITY {
                l
            } else if x == f32::INFINITY {
                f32::MAX
            } else {
                x
            };
        }
    }
    out
}

/// Every listed token `-inf`.
fn ref_ban(row: &[f32], ids: &[TokenId]) -> Vec<f32> {
    let mut out = row.to_vec();
    for &i in ids {
        out[i as usize] = f32::NEG_INFINITY;
    }
    out
}

/// Every token `-inf` but the listed ones, which are 0.
fn ref_force(row: &[f32], ids: &[TokenId]) -> Vec<f32> {
    let mut out = vec![f32::NEG_INFINITY; row.len()];
    for &i in ids {
        out[i as usize] = 0.0;
    }
    out
}

// ---------------------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn sequence_bias_matches_reference(
        r in row(6..7),
        (hist, prompt) in history(6, 0..10),
        entries in prop::collection::vec((prop::collection::vec(0u32..6, 1..4), bias()), 0..8),
    ) {
        let expected = ref_sequence_bias(&r, &hist, &entries);
        let stage = SequenceBias::new(entries.iter().map(|(s, b)| (s.as_slice(), *b))).unwrap();
        check(&stage, &r, &hist, prompt, &expected)?;
    }

    #[test]
    fn sequence_bias_refuses_ids_outside_the_vocabulary(
        entries in prop::collection::vec((prop::collection::vec(0u32..8, 1..4), -1.0f32..1.0), 1..5),
    ) {
        let max = entries.iter().flat_map(|(s, _)| s.iter().copied()).max().unwrap();
        let stage = SequenceBias::new(entries.clone()).unwrap();
        let build = Chain::builder(6).stage(stage.clone()).greedy().build();
        let mut p = [0.0f32; 6];
        let processed = stage.clone().process(&mut p, &History::new(&[], 0));
        if max >= 6 {
            let e = Error::TokenOutOfRange { id: max, vocab_size: 6 };
            prop_assert_eq!(build.err(), Some(e.clone()));
            prop_assert_eq!(processed, Err(e));
        } else {
            prop_assert!(build.is_ok());
            prop_assert!(processed.is_ok());
        }
    }

    #[test]
    fn bad_words_with_eos_match_reference(
        (hist, prompt) in history(4, 0..12),
        words in prop::collection::vec(prop::collection::vec(0u32..4, 1..4), 0..5),
        eos in prop::collection::vec(0u32..4, 0..3),
    ) {
        // transformers: drop the bad words equal to [e] for an EOS id e, then ban the
        // last token of each sequence whose prefix ends the history.
        let kept: Vec<&Vec<TokenId>> = words.iter().filter(|w| !eos.iter().any(|&e| **w == [e])).collect();
        let banned: Vec<TokenId> = kept
            .iter()
            .filter(|w| {
                let prefix = &w[..w.len() - 1];
                hist.len() >= prefix.len() && hist[hist.len() - prefix.len()..] == *prefix
            })
            .map(|w| *w.last().unwrap())
            .collect();
        let r = [1.0f32, 2.0, 3.0, 4.0];
        let stage = BadWords::new(&words).unwrap().eos_token_id(eos.iter().copied());
        check(&stage, &r, &hist, prompt, &ref_ban(&r, &banned))?;
        prop_assert_eq!(stage.sequences().count(), kept.len());
        // Without EOS ids, every bad word stays.
        prop_assert_eq!(BadWords::new(&words).unwrap().sequences().count(), words.len());
    }

    #[test]
    fn suppress_tokens_match_reference(
        r in row(8..9),
        (hist, prompt) in history(8, 0..6),
        ids in prop::collection::vec(0u32..8, 0..5),
    ) {
        let stage = SuppressTokens::new(ids.clone()).unwrap();
        check(&stage, &r, &hist, prompt, &ref_ban(&r, &ids))?;
    }

    #[test]
    fn suppress_tokens_at_begin_match_reference(
        r in row(8..9),
        (hist, prompt) in history(8, 0..6),
        ids in prop::collection::vec(0u32..8, 0..5),
        begin in prop::option::of(0usize..7),
    ) {
        // transformers: at `input_ids.shape[-1] == begin_index`; `generate`'s index is the
        // input's length, the step with nothing generated yet.
        let active = match begin {
            Some(b) => hist.len() == b,
            None => hist.len() == prompt,
        };
        let expected = if active { ref_ban(&r, &ids) } else { r.clone() };
        let mut stage = SuppressTokensAtBegin::new(ids.clone()).unwrap();
        if let Some(b) = begin {
            stage = stage.begin_index(b);
        }
        check(&stage, &r, &hist, prompt, &expected)?;
    }

    #[test]
    fn forced_bos_matches_reference(
        r in row(8..9),
        (hist, prompt) in history(8, 0..6),
        bos in 0u32..8,
    ) {
        let expected = if hist.len() == prompt { ref_force(&r, &[bos]) } else { r.clone() };
        check(&ForcedBos::new(bos).unwrap(), &r, &hist, prompt, &expected)?;
    }

    #[test]
    fn forced_eos_matches_reference(
        r in row(8..9),
        (hist, prompt) in history(8, 0..8),
        max_length in 1usize..10,
        eos in prop::collection::vec(0u32..8, 1..3),
        new_tokens in any::<bool>(),
    ) {
        // transformers: at `input_ids.shape[-1] == max_length - 1`.
        let (stage, len) = if new_tokens {
            (ForcedEos::max_new_tokens(max_length, eos.clone()).unwrap(), hist.len() - prompt)
        } else {
            (ForcedEos::new(max_length, eos.clone()).unwrap(), hist.len())
        };
        let expected = if len == max_length - 1 { ref_force(&r, &eos) } else { r.clone() };
        check(&stage, &r, &hist, prompt, &expected)?;
    }

    #[test]
    fn exponential_decay_matches_reference(
        r in row(6..7),
        (hist, prompt) in history(6, 0..12),
        start in 0usize..8,
        factor in prop_oneof![0.05f64..4.0, Just(1.0f64), Just(1.1f64), Just(1e30f64)],
        eos in prop::collection::vec(0u32..6, 1..3),
    ) {
        let expected = ref_decay(&r, hist.len() - prompt, start, factor, &eos);
        let stage = ExponentialDecayLengthPenalty::new(start, factor, eos.clone()).unwrap();
        check(&stage, &r, &hist, prompt, &expected)?;
        for l in &expected {
            prop_assert!(!l.is_nan() && *l != f32::INFINITY);
        }
    }

    /// XTC with either threshold rule against a plain reference: the tokens above the
    /// threshold (`>=`, or `>` when strict); if two or more, remove every one strictly
    /// likelier than the least likely of them.
    #[test]
    fn xtc_threshold_rules_match_reference(
        r in row(2..24).prop_filter("two finite", |r| r.iter().filter(|l| l.is_finite()).count() >= 2),
        pick in any::<prop::sample::Index>(),
        exact in any::<bool>(),
        thr in 0.0f32..0.5,
        strict in any::<bool>(),
    ) {
        let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let w: Vec<f64> = r.iter().map(|&l| (l as f64 - max).exp()).collect();
        let total: f64 = w.iter().sum();
        // Sometimes the threshold is (the f32 nearest to) one token's probability.
        let thr = if exact { ((w[pick.index(r.len())] / total) as f32).min(0.5) } else { thr };
        // The threshold as the crate compares it: the decimal written (`as_decimal`).
        let t = logits::as_decimal(thr);
        let above: Vec<usize> = (0..r.len())
            .filter(|&i| w[i] > 0.0 && if strict { w[i] / total > t } else { w[i] / total >= t })
            .collect();
        let all: BTreeSet<TokenId> = (0..r.len() as TokenId).filter(|&i| r[i as usize].is_finite()).collect();
        let expected: BTreeSet<TokenId> = if above.len() < 2 {
            all.clone()
        } else {
            let least = above.iter().map(|&i| w[i]).fold(f64::INFINITY, f64::min);
            all.iter().copied().filter(|&i| w[i as usize] <= least).collect()
        };
        let mut xtc = Xtc::new(1.0, thr).unwrap().strict_threshold(strict);
        let mut c = cands(&r);
        xtc.apply(&mut c, &ctx(&[], 0)).unwrap();
        let got: BTreeSet<TokenId> = c
            .ids()
            .iter()
            .zip(c.logits())
            .filter(|(_, l)| l.is_finite())
            .map(|(&id, _)| id)
            .collect();
        prop_assert_eq!(got, expected);
    }
}

// ---------------------------------------------------------------------------------------
// Worked examples and transformers' own test cases.

/// transformers' `test_bias_dist_processor` in spirit: `[[45, 67], -0.6]`, `[[89], 1.2]`
/// over a history ending in 45, on uniform logits.
#[test]
fn sequence_bias_worked_example() {
    let stage = SequenceBias::new([(vec![45u32, 67], -0.6), (vec![89], 1.2)]).unwrap();
    let mut row = vec![0.0f32; 100];
    LogitsProcessor::process(&mut stage.clone(), &mut row, &History::new(&[3, 45], 2)).unwrap();
    assert_eq!(row[67], -0.6);
    assert_eq!(row[89], 1.2);
    assert_eq!(row.iter().filter(|&&l| l != 0.0).count(), 2);
    // Not after 44: only the single-token bias.
    let mut row = vec![0.0f32; 100];
    LogitsProcessor::process(&mut stage.clone(), &mut row, &History::new(&[3, 44], 2)).unwrap();
    assert_eq!(row[67], 0.0);
    assert_eq!(row[89], 1.2);
}

#[test]
fn sequence_bias_sums_per_token_and_keeps_the_last_duplicate() {
    // Two sequences end in 2 and both match; [2] alone adds too; [1, 2] is listed twice,
    // the last bias counts.
    let stage = SequenceBias::new([
        (vec![1u32, 2], 5.0),
        (vec![0, 1, 2], 0.25),
        (vec![2], 1.0),
        (vec![1, 2], 0.5),
    ])
    .unwrap();
    let mut row = [0.0f32, 0.0, 10.0];
    LogitsProcessor::process(&mut stage.clone(), &mut row, &History::new(&[0, 1], 0)).unwrap();
    assert_eq!(row[2], 10.0 + (1.0 + 0.5 + 0.25));
}

#[test]
fn sequence_bias_parameter_errors() {
    assert!(is_invalid(
        SequenceBias::new([(vec![1u32], 1.0), (vec![], 1.0)]),
        "sequence_bias"
    ));
    assert!(is_invalid(
        SequenceBias::new([(vec![1u32], f32::NAN)]),
        "sequence_bias"
    ));
    assert!(is_invalid(
        SequenceBias::new([(vec![1u32], f32::INFINITY)]),
        "sequence_bias"
    ));
    assert!(SequenceBias::new([(vec![1u32], f32::NEG_INFINITY)]).is_ok());
    assert!(SequenceBias::new(Vec::<(Vec<u32>, f32)>::new()).is_ok());
}

/// A sampler with the processors in its adjustment stage, and a chain with them after a
/// cut, give the tokens the rules say.
#[test]
fn processors_in_a_sampler_and_after_a_cut() {
    let row = [1.0f32, 2.0, 3.0, 4.0, 5.0];
    let mut sampler = Sampler::new(SamplingParams::greedy(), 5).unwrap();
    sampler.add_processor(Box::new(SuppressTokens::new([4]).unwrap()));
    sampler.add_processor(Box::new(SuppressTokensAtBegin::new([3]).unwrap()));
    sampler.add_processor(Box::new(
        SequenceBias::new([(vec![1u32, 2], -10.0)]).unwrap(),
    ));
    sampler.push_prompt(&[0]).unwrap();
    assert_eq!(sampler.sample(&row).unwrap().token, 2); // 4 and 3 suppressed
    assert_eq!(sampler.sample(&row).unwrap().token, 3); // 3 allowed again
    let mut chain = Chain::builder(5)
        .stage(TopK::new(3).unwrap())
        .stage(ForcedEos::max_new_tokens(2, [2]).unwrap())
        .stage(SuppressTokens::new([4]).unwrap())
        .greedy()
        .build()
        .unwrap();
    assert_eq!(chain.sample(&row).unwrap().token, 3);
    assert_eq!(chain.sample(&row).unwrap().token, 2); // forced
                                                      // A forced token the cut removed leaves no candidate: a typed error, no token.
    let mut chain = Chain::builder(5)
        .stage(TopK::new(2).unwrap())
        .stage(ForcedBos::new(0).unwrap())
        .greedy()
        .build()
        .unwrap();
    assert_eq!(chain.sample(&row).unwrap_err(), Error::NoCandidates);
    assert!(chain.history().tokens().is_empty());
}

#[test]
fn forced_tokens_parameter_and_vocabulary_errors() {
    assert!(is_invalid(ForcedEos::new(0, [1]), "max_length"));
    assert!(is_invalid(
        ForcedEos::max_new_tokens(0, [1]),
        "max_new_tokens"
    ));
    assert!(is_invalid(ForcedEos::new(3, []), "forced_eos_token_id"));
    let oob = |s: Box<dyn Stage>| Chain::builder(4).boxed_stage(s).greedy().build().err();
    let e = Some(Error::TokenOutOfRange {
        id: 4,
        vocab_size: 4,
    });
    assert_eq!(oob(Box::new(ForcedBos::new(4).unwrap())), e);
    assert_eq!(oob(Box::new(ForcedEos::new(3, [1, 4]).unwrap())), e);
    assert_eq!(oob(Box::new(SuppressTokens::new([4, 0]).unwrap())), e);
    assert_eq!(oob(Box::new(SuppressTokensAtBegin::new([4]).unwrap())), e);
    assert_eq!(
        oob(Box::new(
            ExponentialDecayLengthPenalty::new(1, 1.5, [4]).unwrap()
        )),
        e
    );
    let mut p = [0.0f32; 4];
    let h = History::new(&[], 0);
    assert_eq!(
        ForcedBos::new(4).unwrap().process(&mut p, &h),
        Err(e.clone().unwrap())
    );
    assert_eq!(
        SuppressTokensAtBegin::new([4])
            .unwrap()
            .begin_index(9)
            .process(&mut p, &h),
        Err(e.clone().unwrap())
    );
}

#[test]
fn exponential_decay_parameter_errors() {
    for f in [0.0f64, -1.0, f64::NAN, f64::INFINITY] {
        assert!(
            is_invalid(
                ExponentialDecayLengthPenalty::new(1, f, [0]),
                "decay_factor"
            ),
            "{f}"
        );
    }
    assert!(is_invalid(
        ExponentialDecayLengthPenalty::new(1, 1.5, []),
        "eos_token_id"
    ));
}

/// transformers' `test_exponential_decay_length_penalty`: EOS 0, `(5, 1.1)`, a two-token
/// input, uniform scores (`1 / 20`): unchanged before the start, raised after it, for
/// positive and for negative scores.
#[test]
fn exponential_decay_transformers_case() {
    let mut stage = ExponentialDecayLengthPenalty::new(5, 1.1, [0]).unwrap();
    let input: Vec<TokenId> = (0..20).map(|i| i % 20).collect();
    for sign in [1.0f32, -1.0] {
        let uniform = vec![sign / 20.0; 20];
        let mut before = uniform.clone();
        stage
            .process(&mut before, &History::new(&input[..2], 2))
            .unwrap();
        assert_eq!(before, uniform);
        let mut after = uniform.clone();
        stage.process(&mut after, &History::new(&input, 2)).unwrap();
        assert!(after[0] > uniform[0], "{sign}");
        assert_eq!(&after[1..], &uniform[1..]);
        // 18 generated, 13 past the start: l + |l| * (1.1^13 - 1), in f32.
        let m = (1.1f64.powf(13.0) - 1.0) as f32;
        assert_eq!(after[0], uniform[0] + uniform[0].abs() * m);
    }
}

#[test]
fn exponential_decay_saturates_and_keeps_banned_eos() {
    let mut stage = ExponentialDecayLengthPenalty::new(0, 1e30, [0, 1, 2]).unwrap();
    let hist: Vec<TokenId> = vec![3; 40];
    let mut row = [5.0f32, 0.0, f32::NEG_INFINITY, 1.0];
    stage.process(&mut row, &History::new(&hist, 0)).unwrap();
    assert_eq!(row, [f32::MAX, 0.0, f32::NEG_INFINITY, 1.0]);
    // A sampler takes the saturated row: EOS 0 wins, no +inf or NaN.
    let mut sampler = Sampler::new(SamplingParams::greedy(), 4).unwrap();
    sampler.add_processor(Box::new(stage));
    sampler.push_prompt(&[3]).unwrap();
    for _ in 0..3 {
        sampler.accept(3).unwrap(); // 1e30^3 overflows f32: saturated
    }
    assert_eq!(sampler.sample(&[5.0f32, 0.0, 1.0, 9.0]).unwrap().token, 0);
}

#[test]
fn xtc_strict_and_inclusive_agree_away_from_the_threshold() {
    // Probabilities well away from 0.1: both rules remove token 0.
    let row = [3.0f32, 2.5, -5.0, -5.0];
    for strict in [false, true] {
        let mut chain = Chain::builder(4)
            .stage(Xtc::new(1.0, 0.1).unwrap().strict_threshold(strict))
            .greedy()
            .build()
            .unwrap();
        assert_eq!(chain.sample(&row).unwrap().token, 1);
    }
    // Two equal tokens at exactly 0.5 with threshold 0.5: nothing to remove either way.
    for strict in [false, true] {
        let mut xtc = Xtc::new(1.0, 0.5).unwrap().strict_threshold(strict);
        let mut c = cands(&[0.0f32, 0.0]);
        xtc.apply(&mut c, &ctx(&[], 0)).unwrap();
        assert_eq!(c.len(), 2);
    }
}

// ---------------------------------------------------------------------------------------
// Top-h, the normalised and encoder penalties, the encoder n-gram ban.

/// `TopHLogitsWarper`: the best `top_n` in draw order, renormalised among them; keep
/// the first, then each next token while the running `-p ln p` stays `<= top_h * H`.
fn ref_top_h(row: &[f32], t: f64, top_h: f32, top_n: usize) -> BTreeSet<TokenId> {
    let mut order: Vec<TokenId> = (0..row.len() as TokenId)
        .filter(|&i| row[i as usize].is_finite())
        .collect();
    order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
    order.truncate(top_n);
    if order.len() < 2 {
        return order.into_iter().collect();
    }
    let max = row[order[0] as usize] as f64;
    let w: Vec<f64> = order
        .iter()
        .map(|&i| ((row[i as usize] as f64 - max) / t).exp())
        .collect();
    let total: f64 = w.iter().sum();
    let terms: Vec<f64> = w
        .iter()
        .map(|&x| x / total)
        .take_while(|&p| p > 0.0)
        .map(|p| -p * p.ln())
        .collect();
    let h: f64 = terms.iter().sum();
    let tau = h * top_h as f64;
    let mut keep = 1;
    let mut cum = 0.0;
    for (i, x) in terms.iter().enumerate() {
        cum += x;
        if i > 0 {
            if cum > tau {
                break;
            }
            keep = i + 1;
        }
    }
    order[..keep].iter().copied().collect()
}

fn ref_log_softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
    row.iter()
        .map(|&l| (l as f64 - max - sum.ln()) as f32)
        .collect()
}

fn close(a: f32, b: f32) -> bool {
    a == b || (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1.0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn top_h_matches_reference(
        r in row(1..160).prop_filter("one finite", |r| r.iter().any(|l| l.is_finite())),
        t in prop_oneof![Just(1.0f64), 0.25f64..3.0],
        top_h in prop_oneof![0.01f32..1.0, Just(1.0f32)],
        top_n in prop_oneof![Just(100usize), 1usize..20],
    ) {
        let expected = ref_top_h(&r, t, top_h, top_n);
        let stage = TopH::new(top_h).unwrap().top_n(top_n);
        for sorted in [false, true] {
            let mut c = cands(&r);
            c.set_temperature(t).unwrap();
            if sorted {
                c.sort();
            }
            stage.clone().apply(&mut c, &ctx(&[], 0)).unwrap();
            let got: BTreeSet<TokenId> = c.ids().iter().copied().collect();
            prop_assert_eq!(&got, &expected, "sorted first: {}", sorted);
            prop_assert!(c.is_sorted());
        }
    }

    #[test]
    fn normalized_repetition_penalty_matches_reference(
        r in row(6..7).prop_filter("one finite", |r| r.iter().any(|l| l.is_finite())),
        (hist, prompt) in history(6, 0..10),
        penalty in prop_oneof![0.2f32..3.0, Just(1.0f32)],
        penalize_prompt in any::<bool>(),
    ) {
        let window = if penalize_prompt { &hist[..] } else { &hist[prompt..] };
        let lsm = ref_log_softmax(&r);
        let expected: Vec<f32> = lsm
            .iter()
            .enumerate()
            .map(|(i, &l)| if window.contains(&(i as TokenId)) { l * penalty } else { l })
            .collect();
        let stage = NormalizedRepetitionPenalty::new(penalty).unwrap().penalize_prompt(penalize_prompt);
        let mut p = r.clone();
        stage.clone().process(&mut p, &History::new(&hist, prompt)).unwrap();
        for i in 0..r.len() {
            prop_assert!(same(p[i], expected[i]), "token {}: {} vs {}", i, p[i], expected[i]);
        }
        let mut c = cands(&r);
        stage.clone().apply(&mut c, &ctx(&hist, prompt)).unwrap();
        prop_assert_eq!(c.logits(), &p[..]);
        // After a cut: normalised over the candidates (here all finite tokens, summed in
        // draw order: equal up to rounding).
        let mut c = cands(&r);
        c.sort();
        stage.clone().apply(&mut c, &ctx(&hist, prompt)).unwrap();
        for (&id, &l) in c.ids().iter().zip(c.logits()) {
            prop_assert!(close(l, expected[id as usize]), "token {}: {} vs {}", id, l, expected[id as usize]);
        }
    }

    #[test]
    fn encoder_repetition_penalty_matches_reference(
        r in row(6..7).prop_filter("one finite", |r| r.iter().any(|l| l.is_finite())),
        encoder in prop::collection::vec(0u32..6, 0..8),
        penalty in prop_oneof![0.2f64..3.0, Just(1.0f64), Just(1.2f64)],
        normalize in any::<bool>(),
    ) {
        // transformers: q = 1 / penalty; l < 0 ? l * q : l / q, or log-softmax then * q.
        let q = (1.0 / penalty) as f32;
        let base = if normalize { ref_log_softmax(&r) } else { r.clone() };
        let expected: Vec<f32> = base
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                if !encoder.contains(&(i as TokenId)) {
                    l
                } else if normalize || l < 0.0 {
                    l * q
                } else {
                    l / q
                }
            })
            .collect();
        let stage = EncoderRepetitionPenalty::new(penalty, encoder.clone()).unwrap().normalize(normalize);
        if normalize {
            let mut p = r.clone();
            stage.clone().process(&mut p, &History::new(&[], 0)).unwrap();
            for i in 0..r.len() {
                prop_assert!(same(p[i], expected[i]), "token {}: {} vs {}", i, p[i], expected[i]);
            }
        } else {
            check(&stage, &r, &[], 0, &expected)?;
        }
    }

    #[test]
    fn encoder_no_repeat_ngram_matches_reference(
        (hist, prompt) in history(5, 0..10),
        encoder in prop::collection::vec(0u32..5, 0..14),
        n in 1usize..4,
    ) {
        let grams: BTreeSet<Vec<TokenId>> = encoder.windows(n).map(|w| w.to_vec()).collect();
        let banned: Vec<TokenId> = if hist.len() + 1 >= n {
            let suffix = &hist[hist.len() + 1 - n..];
            (0..5u32)
                .filter(|&t| {
                    let mut g = suffix.to_vec();
                    g.push(t);
                    grams.contains(&g)
                })
                .collect()
        } else {
            Vec::new()
        };
        let r = [0.5f32, 1.0, -2.0, 3.0, 0.0];
        let stage = EncoderNoRepeatNGram::new(n, encoder.clone()).unwrap();
        check(&stage, &r, &hist, prompt, &ref_ban(&r, &banned))?;
    }

    #[test]
    fn classifier_free_guidance_matches_reference(
        cond in row(1..12),
        seed_u in row(12..13),
        scale in prop_oneof![-2.0f32..4.0, Just(1.0f32), Just(0.0f32)],
    ) {
        let uncond = &seed_u[..cond.len()];
        let cfg = ClassifierFreeGuidance::new(scale).unwrap();
        let mut out = vec![0.0f32; cond.len()];
        cfg.combine(&cond, uncond, &mut out).unwrap();
        let (c, u) = (ref_log_softmax(&cond), ref_log_softmax(uncond));
        for i in 0..cond.len() {
            let want = if c[i] == f32::NEG_INFINITY || u[i] == f32::NEG_INFINITY
                || cond.iter().all(|l| *l == f32::NEG_INFINITY)
                || uncond.iter().all(|l| *l == f32::NEG_INFINITY)
            {
                f32::NEG_INFINITY
            } else {
                (u[i] as f64 + scale as f64 * (c[i] as f64 - u[i] as f64)) as f32
            };
            prop_assert!(close(out[i], want), "token {}: {} vs {}", i, out[i], want);
        }
        if scale == 1.0 && uncond.iter().any(|l| l.is_finite()) {
            for i in 0..cond.len() {
                if u[i] > f32::NEG_INFINITY {
                    prop_assert!(close(out[i], c[i]) || (out[i] == f32::NEG_INFINITY && c[i].is_nan()));
                }
            }
        }
    }
}

#[test]
fn top_h_keeps_at_most_top_n_and_the_best_token() {
    let row: Vec<f32> = (0..500).map(|i| -(i as f32) * 1e-3).collect();
    let mut c = cands(&row);
    TopH::new(1.0).unwrap().apply(&mut c, &ctx(&[], 0)).unwrap();
    assert_eq!(c.ids(), &(0..100).collect::<Vec<TokenId>>()[..]);
    let mut c = cands(&[9.0f32, f32::NEG_INFINITY, 0.0]);
    TopH::new(0.01)
        .unwrap()
        .apply(&mut c, &ctx(&[], 0))
        .unwrap();
    assert_eq!(c.ids(), &[0]);
    assert!(is_invalid(TopH::new(0.0), "top_h"));
    assert!(is_invalid(TopH::new(1.5), "top_h"));
    assert!(is_invalid(TopH::new(f32::NAN), "top_h"));
}

#[test]
fn penalty_parameter_errors() {
    for p in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
        assert!(is_invalid(
            NormalizedRepetitionPenalty::new(p),
            "repetition_penalty"
        ));
        assert!(is_invalid(
            EncoderRepetitionPenalty::new(p.into(), [1]),
            "encoder_repetition_penalty"
        ));
    }
    assert!(is_invalid(
        EncoderNoRepeatNGram::new(0, [1]),
        "encoder_no_repeat_ngram_size"
    ));
    let e = Some(Error::TokenOutOfRange {
        id: 7,
        vocab_size: 4,
    });
    let build = |s: Box<dyn Stage>| Chain::builder(4).boxed_stage(s).greedy().build().err();
    assert_eq!(
        build(Box::new(
            EncoderRepetitionPenalty::new(1.2, [7, 1]).unwrap()
        )),
        e
    );
    assert_eq!(
        build(Box::new(EncoderNoRepeatNGram::new(2, [7, 1]).unwrap())),
        e
    );
    let mut p = [0.0f32; 4];
    assert_eq!(
        NormalizedRepetitionPenalty::new(1.2)
            .unwrap()
            .process(&mut p, &History::new(&[7], 1)),
        Err(e.clone().unwrap())
    );
}

#[test]
fn classifier_free_guidance_errors_and_bans() {
    let cfg = ClassifierFreeGuidance::new(3.0).unwrap();
    let mut out = [0.0f32; 3];
    assert_eq!(
        cfg.combine(&[0.0f32; 3], &[0.0f32; 2], &mut out),
        Err(Error::LengthMismatch {
            expected: 3,
            actual: 2
        })
    );
    assert_eq!(
        cfg.combine(&[0.0f32; 3], &[0.0f32; 3], &mut [0.0f32; 4]),
        Err(Error::LengthMismatch {
            expected: 3,
            actual: 4
        })
    );
    assert_eq!(
        cfg.combine::<f32>(&[], &[], &mut []),
        Err(Error::EmptyVocabulary)
    );
    assert_eq!(
        cfg.combine(&[0.0f32, f32::NAN, 0.0], &[0.0f32; 3], &mut out),
        Err(Error::NanLogit { index: 1 })
    );
    assert_eq!(
        cfg.combine(&[0.0f32; 3], &[0.0f32, 0.0, f32::INFINITY], &mut out),
        Err(Error::InfiniteLogit { index: 2 })
    );
    assert!(is_invalid(
        ClassifierFreeGuidance::new(f32::NAN),
        "guidance_scale"
    ));
    // A token banned in either row stays banned; the others stay finite.
    cfg.combine(
        &[0.0f32, f32::NEG_INFINITY, 1.0],
        &[f32::NEG_INFINITY, 0.0, 1.0],
        &mut out,
    )
    .unwrap();
    assert_eq!(out[0], f32::NEG_INFINITY);
    assert_eq!(out[1], f32::NEG_INFINITY);
    assert!(out[2].is_finite());
    // bf16 rows convert exactly.
    let c16: Vec<logits::half::bf16> = [1.0f32, 2.0, 3.0]
        .iter()
        .map(|&x| logits::half::bf16::from_f32(x))
        .collect();
    let mut out16 = [0.0f32; 3];
    cfg.combine(&c16, &c16, &mut out16).unwrap();
    let mut out32 = [0.0f32; 3];
    cfg.combine(&[1.0f32, 2.0, 3.0], &[1.0f32, 2.0, 3.0], &mut out32)
        .unwrap();
    assert_eq!(out16, out32);
}

// ---------------------------------------------------------------------------------------
// The watermark.

/// The documented greenlist, computed by an independent implementation of the
/// algorithm in the docs (SplitMix64, partial Fisher-Yates): pinned, so that no
/// refactoring or dependency can move it.
#[test]
fn watermark_greenlist_is_pinned() {
    let mut wm = Watermark::new(1000).unwrap();
    assert_eq!(wm.greenlist_size(), 250);
    assert_eq!(
        &wm.greenlist(&[5]).unwrap()[..10],
        &[795, 346, 485, 198, 529, 746, 521, 423, 557, 803]
    );
    let mut wm = Watermark::new(151_936).unwrap();
    assert_eq!(
        &wm.greenlist(&[7, 151_645]).unwrap()[..6],
        &[126592, 131255, 119842, 53193, 112122, 106315]
    );
    let mut wm = Watermark::new(50)
        .unwrap()
        .greenlist_ratio(0.5)
        .unwrap()
        .hashing_key(42)
        .context_width(3)
        .unwrap();
    assert_eq!(
        wm.greenlist(&[1, 2, 3]).unwrap(),
        &[
            8, 42, 39, 11, 25, 16, 1, 41, 37, 29, 38, 28, 32, 43, 36, 18, 20, 21, 13, 31, 34, 27,
            26, 47, 2
        ]
    );
    assert!(wm.greenlist(&[1, 2]).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The green tokens get exactly `+ bias`, through the three paths; a greenlist has
    /// `int(V * ratio)` distinct ids below `V`.
    #[test]
    fn watermark_adds_its_bias_to_the_greenlist(
        r in row(40..41),
        (hist, prompt) in history(40, 0..6),
        v in 1usize..=40,
        ratio in 0.05f32..0.95,
        key in any::<u64>(),
        width in 1usize..3,
        bias in -3.0f32..3.0,
    ) {
        let mut wm = Watermark::new(v).unwrap().greenlist_ratio(ratio).unwrap().hashing_key(key)
            .context_width(width).unwrap().bias(bias).unwrap();
        let expected = match wm.greenlist(&hist) {
            Some(green) => {
                let set: BTreeSet<TokenId> = green.iter().copied().collect();
                prop_assert_eq!(set.len(), green.len());
                prop_assert_eq!(green.len(), (v as f64 * ratio as f64) as usize);
                prop_assert!(green.iter().all(|&g| (g as usize) < v));
                r.iter().enumerate().map(|(i, &l)| if set.contains(&(i as TokenId)) { l + bias } else { l }).collect()
            }
            None => r.clone(),
        };
        check(&wm, &r, &hist, prompt, &expected)?;
    }
}

#[test]
fn watermark_detector_tells_marked_from_unmarked_text() {
    let v = 2000;
    let wm = Watermark::new(v).unwrap();
    let mut detector = WatermarkDetector::new(&wm).unwrap();
    // Marked: sampled with the watermark from a flat row.
    let mut chain = Chain::builder(v)
        .stage(wm.clone())
        .draw()
        .seed(11)
        .build()
        .unwrap();
    chain.push_prompt(&[17]).unwrap();
    let flat = vec![0.0f32; v];
    for _ in 0..200 {
        chain.sample(&flat).unwrap();
    }
    let marked = detector.detect(chain.history().tokens()).unwrap();
    assert_eq!(marked.tokens_scored, 200);
    assert!(marked.is_watermarked(4.0), "{marked:?}");
    // With bias 2 on a flat row a green token is drawn with probability
    // 0.25 e^2 / (0.25 e^2 + 0.75), about 0.71.
    assert!((marked.green_fraction - 0.71).abs() < 0.15, "{marked:?}");
    // Unmarked: the same draws without the watermark.
    let mut plain = Chain::builder(v).draw().seed(11).build().unwrap();
    plain.push_prompt(&[17]).unwrap();
    for _ in 0..200 {
        plain.sample(&flat).unwrap();
    }
    let unmarked = detector.detect(plain.history().tokens()).unwrap();
    assert!(!unmarked.is_watermarked(4.0), "{unmarked:?}");
    assert!(unmarked.z_score.abs() < 4.0);
    // Another key does not see the mark.
    let other = Watermark::new(v).unwrap().hashing_key(1);
    let seen = WatermarkDetector::new(&other)
        .unwrap()
        .detect(chain.history().tokens())
        .unwrap();
    assert!(!seen.is_watermarked(4.0), "{seen:?}");
    // Nothing to score, and tokens outside the vocabulary.
    assert_eq!(detector.detect(&[3]).unwrap().tokens_scored, 0);
    assert_eq!(
        detector.detect(&[3, 2000]),
        Err(Error::TokenOutOfRange {
            id: 2000,
            vocab_size: 2000
        })
    );
}

#[test]
fn watermark_parameter_errors() {
    assert!(matches!(Watermark::new(0), Err(Error::EmptyVocabulary)));
    for r in [0.0f32, 1.0, -0.5, f32::NAN] {
        assert!(is_invalid(
            Watermark::new(10).unwrap().greenlist_ratio(r),
            "greenlist_ratio"
        ));
    }
    assert!(is_invalid(
        Watermark::new(10).unwrap().context_width(0),
        "context_width"
    ));
    assert!(is_invalid(
        Watermark::new(10).unwrap().bias(f32::INFINITY),
        "bias"
    ));
    assert_eq!(
        Chain::builder(10)
            .stage(Watermark::new(11).unwrap())
            .greedy()
            .build()
            .err(),
        Some(Error::TokenOutOfRange {
            id: 10,
            vocab_size: 10
        })
    );
    // A vocabulary smaller than the chain's (padding past it) is fine.
    assert!(Chain::builder(12)
        .stage(Watermark::new(11).unwrap())
        .greedy()
        .build()
        .is_ok());
}
