//! `GrammarMask::sample`: one call computes the mask, draws under it and commits the
//! token; on any error both the grammar and the sampler are as before the call (or, when
//! the engine took the token, both keep it).

mod grammar_common;

use std::sync::Arc;

use grammar_common::*;
use logits::grammar::{
    Choice, Constraint, GrammarError, GrammarMask, Status, TokenKind, TokenSet, Vocab,
};
use logits::{Error, Sampler, SamplingParams, TokenId, TokenMask};
use proptest::prelude::*;

/// A small byte-level vocabulary: every lowercase letter, some two- and three-letter
/// tokens, a padding slot, a special token and two end-of-sequence ids.
fn tiny_vocab() -> Arc<Vocab> {
    let mut bytes: Vec<Vec<u8>> = (b'a'..=b'z').map(|b| vec![b]).collect();
    for t in ["ye", "es", "no", "yes", "may", "be", "ay", "mayb"] {
        bytes.push(t.as_bytes().to_vec());
    }
    let mut kinds = vec![TokenKind::Text; bytes.len()];
    bytes.push(b"<pad>".to_vec());
    kinds.push(TokenKind::Padding);
    bytes.push(b"<tool>".to_vec());
    kinds.push(TokenKind::Special);
    let eos = bytes.len() as TokenId;
    bytes.push(b"<eos>".to_vec());
    kinds.push(TokenKind::Special);
    bytes.push(b"<end>".to_vec());
    kinds.push(TokenKind::Special);
    Arc::new(Vocab::new(bytes, kinds, vec![eos, eos + 1]).unwrap())
}

const WORDS: [&str; 4] = ["yes", "no", "maybe", "mayday"];

fn params() -> impl Strategy<Value = SamplingParams> {
    (
        prop_oneof![1 => Just(0.0f32), 4 => 0.1f32..3.0],
        prop_oneof![2 => Just(None), 1 => (1usize..5).prop_map(Some)],
        prop_oneof![2 => Just(1.0f32), 1 => 0.1f32..1.0],
        prop_oneof![2 => Just(0.0f32), 1 => 0.0f32..0.9],
        any::<u64>(),
    )
        .prop_map(|(t, k, p, m, seed)| {
            let mut b = SamplingParams::builder()
                .temperature(t)
                .top_p(p)
                .min_p(m)
                .repetition_penalty(1.3)
                .seed(seed);
            if let Some(k) = k {
                b = b.top_k(k);
            }
            b.build().unwrap()
        })
}

proptest! {
    /// Whatever the logits, a `Choice` walked through `sample` ends on one of its words,
    /// then end-of-sequence with `Status::Finished`; the sampler's history is the walk.
    #[test]
    fn choice_walk_always_yields_a_choice(
        params in params(),
        rows in prop::collection::vec(prop::collection::vec(-8.0f32..8.0, 38), 12),
    ) {
        let vocab = tiny_vocab();
        let mut stage = GrammarMask::new(Box::new(Choice::new(vocab.clone(), &WORDS).unwrap()), vocab.clone());
        let mut sampler = Sampler::new(params, vocab.len()).unwrap();
        let mut text = Vec::new();
        let mut last = None;
        for (step, row) in rows.iter().cycle().enumerate() {
            prop_assert!(step < 32, "the walk did not end");
            let (out, status) = stage.sample(&mut sampler, row).unwrap();
            prop_assert_eq!(sampler.history().generated().len(), stage.committed());
            if vocab.is_eos(out.token) {
                prop_assert_eq!(status, Status::Finished);
                last = Some(status);
                break;
            }
            prop_assert_ne!(status, Status::Finished);
            text.extend_from_slice(vocab.bytes(out.token));
        }
        prop_assert_eq!(last, Some(Status::Finished));
        prop_assert!(WORDS.iter().any(|w| w.as_bytes() == text), "{:?}", String::from_utf8_lossy(&text));
        prop_assert_eq!(stage.status().unwrap(), Status::Finished);
        // Nothing more: the grammar refuses, the sampler keeps its history.
        let n = sampler.history().generated().len();
        prop_assert_eq!(
            stage.sample(&mut sampler, &rows[0]).map(|(s, _)| s.token),
            Err(Error::Grammar(GrammarError::AlreadyFinished))
        );
        prop_assert_eq!(sampler.history().generated().len(), n);
    }
}

/// The same walk over the real Qwen3 vocabulary (151,936 logits), where the first masks
/// are a few dozen tokens: the sampler reads them as a compact row.
#[test]
fn choice_walk_over_qwen3() {
    let v = qwen3();
    let words = ["positive", "negative", "neutral", "neutral-ish"];
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for seed in 0..6 {
        let mut stage =
            GrammarMask::new(Box::new(Choice::new(v.clone(), &words).unwrap()), v.clone());
        let params = SamplingParams::builder()
            .temperature(0.6)
            .top_k(20)
            .top_p(0.95)
            .seed(seed)
            .build()
            .unwrap();
        let mut sampler = Sampler::new(params, N_LOGITS).unwrap();
        let mut text = Vec::new();
        let mut finished = false;
        for _ in 0..40 {
            let row: Vec<f32> = (0..N_LOGITS)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 40) as f32 / (1u64 << 24) as f32 * 10.0 - 5.0
                })
                .collect();
            let (out, status) = stage.sample(&mut sampler, &row).unwrap();
            if status == Status::Finished {
                assert!(v.is_eos(out.token));
                finished = true;
                break;
            }
            text.extend_from_slice(v.bytes(out.token));
        }
        assert!(finished, "seed {seed}");
        assert!(words.iter().any(|w| w.as_bytes() == text), "{text:?}");
    }
}

/// Errors of the mask or of the sampler change nothing.
#[test]
fn mask_and_sampler_errors_change_nothing() {
    let vocab = tiny_vocab();
    let n = vocab.len();
    let mut stage = GrammarMask::new(
        Box::new(TokenSet::single(&vocab, [2, 3]).unwrap()),
        vocab.clone(),
    );
    let mut sampler = Sampler::new(SamplingParams::default(), n).unwrap();
    // A NaN among the logits.
    let mut row = vec![0.0f32; n];
    row[5] = f32::NAN;
    assert_eq!(
        stage.sample(&mut sampler, &row).map(|(s, _)| s.token),
        Err(Error::NanLogit { index: 5 })
    );
    // Every allowed token banned by the row.
    let mut row = vec![0.0f32; n];
    row[2] = f32::NEG_INFINITY;
    row[3] = f32::NEG_INFINITY;
    assert_eq!(
        stage.sample(&mut sampler, &row).map(|(s, _)| s.token),
        Err(Error::NoCandidates)
    );
    // A sampler for another vocabulary.
    let mut other = Sampler::new(SamplingParams::default(), n + 1).unwrap();
    assert!(matches!(
        stage.sample(&mut other, &vec![0.0f32; n + 1]),
        Err(Error::LengthMismatch { .. })
    ));
    assert_eq!(stage.committed(), 0);
    assert!(sampler.history().generated().is_empty());
    assert!(other.history().generated().is_empty());
    // And the step then goes through.
    let (out, _) = stage.sample(&mut sampler, &vec![0.0f32; n]).unwrap();
    assert!(out.token == 2 || out.token == 3);
    assert_eq!(sampler.history().generated(), &[out.token]);
}

/// An engine that allows tokens 1 and 2 and fails as told: on commit (state unchanged),
/// or on the status after a commit it took.
struct Flaky {
    fail_commit: bool,
    taken: usize,
}

impl Constraint for Flaky {
    fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<Status, GrammarError> {
        mask.allow(1).unwrap();
        mask.allow(2).unwrap();
        Ok(Status::Open)
    }
    fn commit(&mut self, _: TokenId) -> Result<(), GrammarError> {
        if self.fail_commit {
            return Err(GrammarError::Engine("commit failed".into()));
        }
        self.taken += 1;
        Ok(())
    }
    fn status(&mut self) -> Result<Status, GrammarError> {
        if self.taken > 0 {
            return Err(GrammarError::Engine("status failed".into()));
        }
        Ok(Status::Open)
    }
}

#[test]
fn a_failed_commit_takes_the_token_back_from_the_sampler() {
    let vocab = tiny_vocab();
    let n = vocab.len();
    let row = vec![0.0f32; n];
    let flaky = Flaky {
        fail_commit: true,
        taken: 0,
    };
    let mut stage = GrammarMask::new(Box::new(flaky), vocab.clone());
    let mut sampler = Sampler::new(SamplingParams::builder().seed(3).build().unwrap(), n).unwrap();
    sampler.push_prompt(&[4, 5]).unwrap();
    let first = Sampler::new(SamplingParams::builder().seed(3).build().unwrap(), n)
        .unwrap()
        .sample_masked(&row, stage.compute().unwrap().0)
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            stage.sample(&mut sampler, &row).map(|(s, _)| s.token),
            Err(Error::Grammar(GrammarError::Engine("commit failed".into())))
        );
        assert_eq!(stage.committed(), 0);
        assert_eq!(sampler.history().tokens(), &[4, 5]);
    }
    // The next draw uses the first draw's uniform: the same token.
    let again = sampler
        .sample_masked(&row, stage.compute().unwrap().0)
        .unwrap();
    assert_eq!(again.token, first.token);
}

#[test]
fn a_token_the_engine_took_stays_in_both() {
    let vocab = tiny_vocab();
    let n = vocab.len();
    let flaky = Flaky {
        fail_commit: false,
        taken: 0,
    };
    let mut stage = GrammarMask::new(Box::new(flaky), vocab.clone());
    let mut sampler = Sampler::new(SamplingParams::default(), n).unwrap();
    assert_eq!(
        stage
            .sample(&mut sampler, &vec![0.0f32; n])
            .map(|(s, _)| s.token),
        Err(Error::Grammar(GrammarError::Engine("status failed".into())))
    );
    assert_eq!(stage.committed(), 1);
    assert_eq!(sampler.history().generated().len(), 1);
}

/// `?` carries a `GrammarError` into `logits::Error`.
#[test]
fn grammar_errors_convert() {
    fn build() -> Result<GrammarMask, Error> {
        let vocab = tiny_vocab();
        let choice = Choice::new(vocab.clone(), &["yes", "zzz\u{1}"])?;
        Ok(GrammarMask::new(Box::new(choice), vocab))
    }
    let err = build().unwrap_err();
    assert!(matches!(err, Error::Grammar(_)), "{err:?}");
    let g = GrammarError::NoTokenAllowed;
    assert_eq!(Error::from(g.clone()).to_string(), g.to_string());
}

/// A grammar's vocabulary is as wide as the row, padding included; the sampler is built
/// for the tokens that exist. One sampler serves constrained and unconstrained requests,
/// and neither ever reads the padding (here NaN, `+inf` and a huge logit).
#[test]
fn one_sampler_for_the_real_vocabulary_serves_a_padded_grammar() {
    let mut bytes: Vec<Vec<u8>> = (b'a'..=b'z').map(|b| vec![b]).collect();
    let mut kinds = vec![TokenKind::Text; bytes.len()];
    let eos = bytes.len() as TokenId;
    bytes.push(b"<eos>".to_vec());
    kinds.push(TokenKind::Special);
    let real = bytes.len();
    for _ in 0..5 {
        bytes.push(Vec::new());
        kinds.push(TokenKind::Padding);
    }
    let vocab = Arc::new(Vocab::new(bytes, kinds, vec![eos]).unwrap());
    assert_eq!(vocab.len(), real + 5);
    let mut row = vec![0.0f32; real + 5];
    row[real] = f32::NAN;
    row[real + 1] = f32::INFINITY;
    row[real + 2] = 1e30;
    let mut sampler =
        Sampler::new(SamplingParams::builder().seed(5).build().unwrap(), real).unwrap();
    let mut stage = GrammarMask::new(
        Box::new(Choice::new(vocab.clone(), &WORDS).unwrap()),
        vocab.clone(),
    );
    let mut text = Vec::new();
    for _ in 0..10 {
        let (s, status) = stage.sample(&mut sampler, &row).unwrap();
        assert!((s.token as usize) < real);
        if status == Status::Finished {
            break;
        }
        text.extend_from_slice(vocab.bytes(s.token));
    }
    assert!(
        WORDS.iter().any(|w| w.as_bytes() == text.as_slice()),
        "{text:?}"
    );
    // The same sampler, unconstrained, never draws padding either.
    for _ in 0..50 {
        assert!((sampler.sample(&row).unwrap().token as usize) < real);
    }
}
