//! The dependency-free constraints ([`TokenSet`], [`Choice`]) and the rules the
//! [`GrammarMask`] stage enforces, over the real Qwen3 vocabulary.

mod grammar_common;

use grammar_common::*;
use logits::grammar::{
    Choice, Constraint, GrammarError, GrammarKind, GrammarMask, Status, TokenKind, TokenSet,
};
use logits::{Sampler, SamplingParams, TokenId, TokenMask};

const CHOICES: [&str; 4] = ["positive", "negative", "neutral", "neutral-ish"];

#[test]
fn choice_allows_every_spelling_and_only_those() {
    let v = qwen3();
    let mut s = GrammarMask::new(
        Box::new(Choice::new(v.clone(), &CHOICES).unwrap()),
        v.clone(),
    );
    let (mask, status) = s.compute().unwrap();
    assert_eq!(status, Status::Open);
    check_mask(&v, mask, status, &[]);
    // Exactly the text tokens that are a prefix of some option.
    for t in 0..N_LOGITS as TokenId {
        let b = v.bytes(t);
        let expect = v.kind(t) == Some(TokenKind::Text)
            && CHOICES.iter().any(|c| c.as_bytes().starts_with(b));
        assert_eq!(mask.is_allowed(t), expect, "token {t} {b:?}");
    }
    // Canonical and greedy spellings both walk to the end.
    for word in CHOICES {
        let ids = v.tokenize_greedy(word.as_bytes()).unwrap();
        let mut s = GrammarMask::new(
            Box::new(Choice::new(v.clone(), &CHOICES).unwrap()),
            v.clone(),
        );
        let status = walk(&mut s, &v, &ids, &[], |t| {
            CHOICES.iter().any(|c| c.as_bytes() == t)
        });
        let expect = if word == "neutral" {
            Status::OpenAccepting
        } else {
            Status::OnlyEos
        };
        assert_eq!(status, expect, "{word}");
        // Byte by byte works too.
        let mut s = GrammarMask::new(
            Box::new(Choice::new(v.clone(), &CHOICES).unwrap()),
            v.clone(),
        );
        let bytes: Vec<TokenId> = word
            .bytes()
            .map(|b| v.text_tokens_with_bytes(&[b])[0])
            .collect();
        walk(&mut s, &v, &bytes, &[], |t| {
            CHOICES.iter().any(|c| c.as_bytes() == t)
        });
    }
}

#[test]
fn choice_rejects_and_rolls_back() {
    let v = qwen3();
    let mut s = GrammarMask::new(
        Box::new(Choice::new(v.clone(), &CHOICES).unwrap()),
        v.clone(),
    );
    let x = v.tokenize_greedy(b"x").unwrap()[0];
    check_rejection_keeps_state(&mut s, x);
    check_rejection_keeps_state(&mut s, EOS[0]);
    check_rejection_keeps_state(&mut s, 151_667);
    let first = s.compute().unwrap().0.clone();
    let ids = v.tokenize_greedy(b"neutral").unwrap();
    for &t in &ids {
        s.commit(t).unwrap();
    }
    assert_eq!(s.commit(EOS[1]).unwrap(), Status::Finished);
    assert_eq!(s.status().unwrap(), Status::Finished);
    assert_eq!(s.compute().unwrap_err(), GrammarError::AlreadyFinished);
    assert!(matches!(
        s.rollback(ids.len() + 2),
        Err(GrammarError::RollbackTooFar { .. })
    ));
    s.rollback(1).unwrap();
    assert_eq!(s.status().unwrap(), Status::OpenAccepting);
    s.rollback(ids.len()).unwrap();
    assert_eq!(s.compute().unwrap().0, &first);
    // The raw constraint leaves its text unchanged on rejection.
    let mut c = Choice::new(v.clone(), &CHOICES).unwrap();
    c.commit(v.tokenize_greedy(b"neg").unwrap()[0]).unwrap();
    let before = c.text().to_vec();
    assert_eq!(c.commit(x), Err(GrammarError::TokenRejected { token: x }));
    assert_eq!(c.text(), before);
}

#[test]
fn choice_bad_input() {
    let v = qwen3();
    let none: [&str; 0] = [];
    assert!(matches!(
        Choice::new(v.clone(), &none),
        Err(GrammarError::InvalidGrammar {
            kind: GrammarKind::BuiltIn,
            ..
        })
    ));
    // An empty option: only EOS at once.
    let mut s = GrammarMask::new(Box::new(Choice::new(v.clone(), &[""]).unwrap()), v.clone());
    assert_eq!(s.compute().unwrap().1, Status::OnlyEos);
    // A toy vocabulary that cannot spell the option.
    let toy = std::sync::Arc::new(
        logits::grammar::Vocab::new(
            vec![b"a".to_vec(), b"<e>".to_vec()],
            vec![TokenKind::Text, TokenKind::Special],
            vec![1],
        )
        .unwrap(),
    );
    let e = Choice::new(toy, &["ab"]).unwrap_err();
    assert!(e.to_string().contains("cannot be spelled"), "{e}");
}

#[test]
fn token_set_single_and_repeated() {
    let v = qwen3();
    let ids = [ascii_id(b'A'), ascii_id(b'B'), ascii_id(b'C')];
    let mut s = GrammarMask::new(Box::new(TokenSet::single(&v, ids).unwrap()), v.clone());
    let (mask, status) = s.compute().unwrap();
    assert_eq!(status, Status::Open);
    assert_eq!(mask.count_allowed(), 3);
    check_rejection_keeps_state(&mut s, ascii_id(b'D'));
    check_rejection_keeps_state(&mut s, EOS[0]);
    assert_eq!(s.commit(ids[1]).unwrap(), Status::OnlyEos);
    let (mask, status) = s.compute().unwrap();
    check_mask(&v, mask, status, &[]);
    check_rejection_keeps_state(&mut s, ids[0]);
    s.rollback(1).unwrap();
    assert_eq!(s.compute().unwrap().0.count_allowed(), 3);

    // Repeated, with a named special token: it is allowed, others are not.
    let think = v.special_id("<think>").unwrap();
    let set = TokenSet::repeated(&v, [ids[0], think]).unwrap();
    assert_eq!(set.named_special_tokens(), [think]);
    let mut s = GrammarMask::new(Box::new(set), v.clone());
    for _ in 0..3 {
        let (mask, status) = s.compute().unwrap();
        assert_eq!(status, Status::OpenAccepting);
        check_mask(&v, mask, status, &[think]);
        assert_eq!(mask.count_allowed(), 2 + EOS.len());
        assert_eq!(s.commit(think).unwrap(), Status::OpenAccepting);
    }
    assert_eq!(s.commit(EOS[0]).unwrap(), Status::Finished);
    assert_eq!(s.commit(ids[0]), Err(GrammarError::AlreadyFinished));
}

#[test]
fn token_set_bad_input() {
    let v = qwen3();
    for bad in [
        vec![],
        vec![FIRST_PADDING],
        vec![EOS[0]],
        vec![N_LOGITS as TokenId],
    ] {
        let e = TokenSet::repeated(&v, bad.clone()).unwrap_err();
        assert!(
            matches!(
                e,
                GrammarError::InvalidGrammar {
                    kind: GrammarKind::BuiltIn,
                    ..
                }
            ),
            "{bad:?}: {e}"
        );
    }
}

/// A constraint that misbehaves: allows padding, unnamed specials and EOS while open, and
/// eventually nothing at all. The stage must clean its masks and report the empty one.
struct Rogue {
    steps: usize,
}

impl Constraint for Rogue {
    fn fill_mask(&mut self, mask: &mut TokenMask) -> Result<Status, GrammarError> {
        if self.steps < 2 {
            mask.fill(true);
            Ok(Status::Open)
        } else {
            for id in FIRST_PADDING..N_LOGITS as TokenId {
                mask.allow(id).unwrap();
            }
            mask.allow(151_667).unwrap();
            Ok(Status::Open)
        }
    }
    fn commit(&mut self, _token: TokenId) -> Result<(), GrammarError> {
        self.steps += 1;
        Ok(())
    }
    fn status(&mut self) -> Result<Status, GrammarError> {
        Ok(Status::Open)
    }
}

#[test]
fn stage_enforces_rules_on_a_misbehaving_engine() {
    let v = qwen3();
    let mut s = GrammarMask::new(Box::new(Rogue { steps: 0 }), v.clone());
    let (mask, status) = s.compute().unwrap();
    check_mask(&v, mask, status, &[]);
    assert_eq!(mask.count_allowed(), 151_643);
    assert_eq!(
        s.commit(EOS[0]),
        Err(GrammarError::TokenRejected { token: EOS[0] })
    );
    s.commit(0).unwrap();
    s.commit(1).unwrap();
    assert_eq!(s.compute().unwrap_err(), GrammarError::NoTokenAllowed);
    let mut row = vec![0f32; N_LOGITS];
    assert_eq!(s.apply(&mut row), Err(GrammarError::NoTokenAllowed));
    assert!(row.iter().all(|&l| l == 0.0), "row untouched on error");
    assert_eq!(s.rollback(1), Err(GrammarError::NotSupported("rollback")));
}

fn ascii_id(c: u8) -> TokenId {
    qwen3().text_tokens_with_bytes(&[c])[0]
}

/// 200 seeded draws through the sampler with random logits all end in one of the options.
#[test]
fn choice_samples_through_the_sampler() {
    let v = qwen3();
    let mut logits = vec![0f32; N_LOGITS];
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..200u64 {
        let params = SamplingParams::builder()
            .temperature(1.0)
            .seed(seed)
            .build()
            .unwrap();
        let mut sampler = Sampler::new(params, N_LOGITS).unwrap();
        let mut s = GrammarMask::new(
            Box::new(Choice::new(v.clone(), &CHOICES).unwrap()),
            v.clone(),
        );
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut text = Vec::new();
        loop {
            for l in logits.iter_mut() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                *l = (rng >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0;
            }
            s.apply(&mut logits).unwrap();
            let (mask, _) = s.compute().unwrap();
            let t = sampler.sample_masked(&logits, mask).unwrap().token;
            if s.commit(t).unwrap() == Status::Finished {
                break;
            }
            text.extend_from_slice(v.bytes(t));
        }
        let text = String::from_utf8(text).unwrap();
        assert!(CHOICES.contains(&text.as_str()), "seed {seed}: {text:?}");
        seen.insert(text);
    }
    assert_eq!(
        seen.len(),
        CHOICES.len(),
        "every option drawn at least once"
    );
}
