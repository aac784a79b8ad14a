//! The grammar mask (`logits::grammar::GrammarMask`) over arbitrary vocabularies and
//! constraints, driven by arbitrary token sequences (commits of allowed and disallowed
//! tokens, rollbacks) and by the `Sampler` itself: padding and unnamed special tokens are
//! never allowed, end-of-sequence exactly when the status says so, a mask is never empty,
//! a rejected token changes nothing, a rollback restores the earlier mask, and a token
//! sampled through the mask is always accepted.
#![no_main]

use std::sync::Arc;

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use logits::grammar::{
    Choice, Constraint, GrammarError, GrammarMask, Status, TokenKind, TokenSet, Vocab,
};
use logits::{Sampler, SamplingParams, TokenId};

/// A constraint, the special ids it names, and a `Choice`'s options (as bytes).
type Picked = (Box<dyn Constraint>, Vec<TokenId>, Option<Vec<Vec<u8>>>);

fn token_bytes(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    let n = u.int_in_range(0..=3)?;
    (0..n)
        .map(|_| Ok(b"abc\xC3"[u.int_in_range(0..=3)?]))
        .collect()
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let n = u.int_in_range(0..=70)?;
    let mut tokens = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    for _ in 0..n {
        tokens.push(token_bytes(u)?);
        kinds.push(match u.int_in_range(0..=9)? {
            0 => TokenKind::Special,
            1 => TokenKind::Padding,
            _ => TokenKind::Text,
        });
    }
    // Often a proper end-of-sequence token at the end.
    if u.arbitrary()? {
        tokens.push(b"<eos>".to_vec());
        kinds.push(TokenKind::Special);
    }
    let eos: Vec<TokenId> = (0..u.int_in_range(0..=2)?)
        .map(|_| {
            Ok(if u.arbitrary()? {
                (tokens.len() as TokenId).wrapping_sub(1)
            } else {
                u.int_in_range(0..=80)?
            })
        })
        .collect::<arbitrary::Result<_>>()?;
    let vocab = match Vocab::new(tokens.clone(), kinds.clone(), eos.clone()) {
        Ok(v) => Arc::new(v),
        Err(e) => {
            assert!(matches!(e, GrammarError::InvalidVocab(_)), "{e:?}");
            return Ok(());
        }
    };
    assert_eq!(vocab.len(), tokens.len());
    for id in 0..vocab.len() as TokenId {
        assert_eq!(vocab.kind(id), Some(kinds[id as usize]));
        if kinds[id as usize] != TokenKind::Padding {
            assert_eq!(vocab.bytes(id), &tokens[id as usize][..]);
        }
    }
    assert!(!vocab.eos().is_empty());

    // The constraint, and the special ids it names.
    let (constraint, named, options): Picked = if u.arbitrary()? {
        let options: Vec<String> = (0..u.int_in_range(0..=3)?)
            .map(|_| Ok(String::from_utf8_lossy(&token_bytes(u)?).into_owned()))
            .collect::<arbitrary::Result<_>>()?;
        match Choice::new(vocab.clone(), &options) {
            Ok(c) => (
                Box::new(c),
                Vec::new(),
                Some(options.iter().map(|o| o.as_bytes().to_vec()).collect()),
            ),
            Err(e) => {
                assert!(matches!(e, GrammarError::InvalidGrammar { .. }), "{e:?}");
                return Ok(());
            }
        }
    } else {
        let ids: Vec<TokenId> = (0..u.int_in_range(0..=4)?)
            .map(|_| u.int_in_range(0..=80))
            .collect::<arbitrary::Result<_>>()?;
        let set = if u.arbitrary()? {
            TokenSet::single(&vocab, ids.iter().copied())
        } else {
            TokenSet::repeated(&vocab, ids.iter().copied())
        };
        match set {
            Ok(s) => {
                for &id in &ids {
                    assert!((id as usize) < vocab.len());
                    assert_ne!(vocab.kind(id), Some(TokenKind::Padding));
                    assert!(!vocab.is_eos(id));
                }
                (Box::new(s), ids, None)
            }
            Err(e) => {
                assert!(matches!(e, GrammarError::InvalidGrammar { .. }), "{e:?}");
                return Ok(());
            }
        }
    };
    let mut stage = GrammarMask::new(constraint, vocab.clone());
    let mut sampler = Sampler::new(
        SamplingParams::builder()
            .seed(u.arbitrary()?)
            .build()
            .unwrap(),
        vocab.len(),
    )
    .expect("a non-empty vocabulary");

    // Masks seen after each number of commits, for the rollback check; text committed.
    let mut masks: Vec<Option<(Vec<u32>, Status)>> = Vec::new();
    let mut text: Vec<Vec<u8>> = vec![Vec::new()];
    let mut finished = false;
    for _ in 0..u.int_in_range(0..=24)? {
        let computed = stage
            .compute()
            .map(|(m, s)| (m.words().to_vec(), m.count_allowed(), s));
        let (words, status) = match computed {
            Err(GrammarError::AlreadyFinished) => {
                assert!(finished);
                masks.truncate(stage.committed());
                masks.push(None);
                (None, Status::Finished)
            }
            Err(GrammarError::NoTokenAllowed) => return Ok(()),
            Err(e) => panic!("undocumented {e:?}"),
            Ok((words, count, status)) => {
                assert!(!finished);
                assert!(count > 0, "an empty mask");
                assert_ne!(status, Status::Finished);
                let allowed = |id: TokenId| words[id as usize / 32] & (1 << (id % 32)) != 0;
                for id in 0..vocab.len() as TokenId {
                    let a = allowed(id);
                    if vocab.is_eos(id) {
                        assert_eq!(a, status.eos_allowed(), "eos {id} under {status:?}");
                    } else {
                        match vocab.kind(id).unwrap() {
                            TokenKind::Padding => assert!(!a, "padding {id} allowed"),
                            TokenKind::Special => {
                                assert!(!a || named.contains(&id), "special {id}")
                            }
                            TokenKind::Text => {}
                        }
                        if status == Status::OnlyEos {
                            assert!(!a, "{id} allowed beside end-of-sequence only");
                        }
                    }
                }
                if let Some(opts) = &options {
                    let t = text.last().unwrap();
                    assert!(
                        opts.iter().any(|o| o.starts_with(t)),
                        "text {t:?} leaves {opts:?}"
                    );
                    if status.eos_allowed() {
                        assert!(opts.contains(t), "complete text {t:?} is not an option");
                    }
                }
                masks.truncate(stage.committed());
                masks.push(Some((words.clone(), status)));
                (Some(words), status)
            }
        };
        let committed = stage.committed();
        match u.int_in_range(0..=3)? {
            0 => {
                let n = u.int_in_range(0..=3)?;
                match stage.rollback(n) {
                    Ok(()) => {
                        assert!(n <= committed);
                        assert_eq!(stage.committed(), committed - n);
                        text.truncate(committed - n + 1);
                        finished = finished && n == 0;
                        let again = stage.compute().ok().map(|(m, s)| (m.words().to_vec(), s));
                        assert_eq!(
                            again,
                            masks[committed - n],
                            "rollback of {n} did not restore the mask"
                        );
                    }
                    Err(GrammarError::RollbackTooFar {
                        requested,
                        available,
                    }) => {
                        assert_eq!((requested, available), (n, committed));
                        assert!(n > committed);
                    }
                    Err(e) => panic!("undocumented {e:?}"),
                }
            }
            1 => {
                // Sample through the mask: the token must be accepted.
                let Some(words) = &words else { continue };
                let logits: Vec<f32> = (0..vocab.len())
                    .map(|_| Ok(f32::from(u.arbitrary::<i8>()?) / 16.0))
                    .collect::<arbitrary::Result<_>>()?;
                let mut mask = logits::TokenMask::new_empty(vocab.len());
                mask.words_mut().copy_from_slice(words);
                let out = sampler
                    .sample_masked(&logits, &mask)
                    .expect("a non-empty mask samples");
                assert!(mask.is_allowed(out.token));
                let mut row = logits.clone();
                stage.apply(&mut row).unwrap();
                assert!(row[out.token as usize].is_finite());
                let s = stage
                    .commit(out.token)
                    .expect("a sampled token is accepted");
                finished = vocab.is_eos(out.token);
                assert_eq!(s == Status::Finished, finished);
                let mut t = text.last().unwrap().clone();
                if !finished {
                    t.extend_from_slice(vocab.bytes(out.token));
                }
                text.push(t);
            }
            _ => {
                let id: TokenId = u.int_in_range(0..=80)?;
                let allowed = words.as_ref().is_some_and(|w| {
                    (id as usize) < vocab.len() && w[id as usize / 32] & (1 << (id % 32)) != 0
                });
                match stage.commit(id) {
                    Ok(s) => {
                        assert!(allowed, "committed {id}, which the mask disallows");
                        finished = vocab.is_eos(id);
                        assert_eq!(s == Status::Finished, finished);
                        let mut t = text.last().unwrap().clone();
                        if !finished {
                            t.extend_from_slice(vocab.bytes(id));
                        }
                        text.push(t);
                    }
                    Err(GrammarError::TokenRejected { token }) => {
                        assert_eq!(token, id);
                        assert!(!allowed);
                        assert_eq!(stage.committed(), committed, "a rejected token was counted");
                        let again = stage.compute().ok().map(|(m, _)| m.words().to_vec());
                        assert_eq!(again, words, "a rejected token changed the mask");
                    }
                    Err(GrammarError::AlreadyFinished) => assert!(finished),
                    Err(e) => panic!("undocumented {e:?}"),
                }
                let _ = status;
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
});
