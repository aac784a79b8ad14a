//! The whole pipeline (`SamplingParams::builder`, `Sampler`) over arbitrary logits in
//! f32, f16 and bf16, arbitrary parameters, history and masks, checked step by step
//! against `logits::reference`.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use logits::{reference, DrawRng, Error, History, Sampler, TokenId, TokenMask};
use logits_fuzz::{
    assert_documented_sample_error, check_sample, reference_draw, sampling_params, Dtype, Row,
};

#[derive(Arbitrary, Debug)]
enum Op {
    Sample,
    SampleMasked,
    Accept(u16),
    Rollback(u8),
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let dtype: Dtype = u.arbitrary()?;
    let vocab: usize = u.int_in_range(0..=36)?;
    let params = match sampling_params(u)? {
        Ok(p) => p,
        Err(e) => {
            assert!(matches!(e, Error::InvalidParameter { .. }), "{e:?}");
            return Ok(());
        }
    };
    // A valid `SamplingParams` rebuilds to itself.
    assert_eq!(params.to_builder().build().as_ref(), Ok(&params));
    let (mut fast, mut f32_path) = match (
        Sampler::new(params.clone(), vocab),
        Sampler::new(params.clone(), vocab),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), Err(e2)) => {
            assert_eq!(e, e2);
            if vocab == 0 {
                assert_eq!(e, Error::EmptyVocabulary);
            } else {
                let bad = params
                    .logit_bias()
                    .iter()
                    .find(|(id, _)| *id as usize >= vocab)
                    .expect("a bias id outside the vocabulary");
                assert_eq!(
                    e,
                    Error::TokenOutOfRange {
                        id: bad.0,
                        vocab_size: vocab
                    }
                );
            }
            return Ok(());
        }
        _ => unreachable!("Sampler::new is deterministic"),
    };
    let prompt: Vec<TokenId> = (0..u.int_in_range(0..=6)?)
        .map(|_| u.int_in_range(0..=40))
        .collect::<arbitrary::Result<_>>()?;
    let pushed = fast.push_prompt(&prompt);
    assert_eq!(pushed, f32_path.push_prompt(&prompt));
    // A refused prompt is not pushed at all.
    let prompt_len = if pushed.is_ok() { prompt.len() } else { 0 };
    assert_eq!(fast.history().tokens().len(), prompt_len);
    match pushed {
        Ok(()) => assert!(prompt.iter().all(|&t| (t as usize) < vocab)),
        Err(e) => {
            let id = *prompt.iter().find(|&&t| t as usize >= vocab).unwrap();
            assert_eq!(
                e,
                Error::TokenOutOfRange {
                    id,
                    vocab_size: vocab
                }
            );
        }
    }
    let row_len = if u.ratio(1, 8)? {
        u.int_in_range(0..=vocab)?
    } else {
        vocab + u.int_in_range(0..=3)?
    };
    let steps = u.int_in_range(1..=12)?;
    for _ in 0..steps {
        let op: Op = u.arbitrary()?;
        let before: Vec<TokenId> = fast.history().tokens().to_vec();
        match op {
            Op::Accept(id) => {
                let id = TokenId::from(id % 48);
                let r = fast.accept(id);
                assert_eq!(r, f32_path.accept(id));
                if (id as usize) < vocab {
                    assert_eq!(r, Ok(()));
                    assert_eq!(fast.history().generated().last(), Some(&id));
                } else {
                    assert_eq!(
                        r,
                        Err(Error::TokenOutOfRange {
                            id,
                            vocab_size: vocab
                        })
                    );
                    assert_eq!(fast.history().tokens(), &before[..]);
                }
            }
            Op::Rollback(n) => {
                let n = usize::from(n % 4);
                fast.rollback(n);
                f32_path.rollback(n);
                let h = History::new(&before, prompt_len);
                let keep = before.len() - n.min(h.generated().len());
                assert_eq!(fast.history().tokens(), &before[..keep]);
            }
            Op::Sample | Op::SampleMasked => {
                let row = Row::arbitrary(u, dtype, row_len)?;
                let row32 = row.to_f32();
                let mask = if matches!(op, Op::SampleMasked) {
                    let len = if u.ratio(1, 8)? {
                        u.int_in_range(0..=40)?
                    } else {
                        vocab
                    };
                    let mut m = TokenMask::new_empty(len);
                    for id in 0..len {
                        if u.ratio(3, 4)? {
                            m.allow(id as TokenId).unwrap();
                        }
                    }
                    Some(m)
                } else {
                    None
                };
                let got = match (&row, &mask) {
                    (Row::F32(r), None) => fast.sample(r),
                    (Row::F16(r), None) => fast.sample(r),
                    (Row::Bf16(r), None) => fast.sample(r),
                    (Row::F32(r), Some(m)) => fast.sample_masked(r, m),
                    (Row::F16(r), Some(m)) => fast.sample_masked(r, m),
                    (Row::Bf16(r), Some(m)) => fast.sample_masked(r, m),
                };
                // The same values as f32 give the same result.
                let via_f32 = match &mask {
                    None => f32_path.sample(&row32),
                    Some(m) => f32_path.sample_masked(&row32, m),
                };
                assert_eq!(got, via_f32, "f32 and {dtype:?} paths differ");
                let history = History::new(&before, prompt_len);
                let step = history.step();
                let u_draw = DrawRng::new(params.seed()).uniform(step);
                // Sampler checks the mask length before the row's values: a mask covers
                // at least the vocabulary and at most the row.
                let mask_wrong = mask
                    .as_ref()
                    .is_some_and(|m| m.len() < vocab || m.len() > row32.len());
                let expected = if !row32.is_empty() && vocab <= row32.len() && mask_wrong {
                    Err(Error::LengthMismatch {
                        expected: vocab,
                        actual: mask.as_ref().unwrap().len(),
                    })
                } else {
                    reference::adjust(&row32, vocab, &params, &history, mask.as_ref())
                        .and_then(|adj| Ok((reference::survivors(&adj, &params)?, adj)))
                };
                match (got, expected) {
                    (Err(e), Err(want)) => {
                        assert_documented_sample_error(&e);
                        assert_eq!(e, want);
                        assert_eq!(
                            fast.history().tokens(),
                            &before[..],
                            "history changed on error"
                        );
                    }
                    (Ok(out), Ok((survivors, adjusted))) => {
                        assert!((out.token as usize) < vocab, "padding token {}", out.token);
                        assert!(
                            adjusted[out.token as usize] > f32::NEG_INFINITY,
                            "banned token"
                        );
                        if let Some(m) = &mask {
                            assert!(m.is_allowed(out.token), "masked token");
                        }
                        let (want, dist, near) = reference_draw(&survivors, u_draw);
                        assert!(
                            out.token == want || near,
                            "token {} but the reference draws {want} (u {u_draw}, {dist:?}); \
                             step {step}, row {row32:?}, {params:?}, history {before:?}",
                            out.token
                        );
                        let finite = row32[..vocab].iter().filter(|l| l.is_finite()).count();
                        check_sample(&out, &dist, params.is_greedy(), finite, params.logprobs());
                        assert_eq!(fast.history().generated().last(), Some(&out.token));
                        assert_eq!(fast.history().tokens().len(), before.len() + 1);
                    }
                    (got, want) => panic!("sampler {got:?} but reference {want:?}"),
                }
            }
        }
        assert_eq!(fast.history(), f32_path.history());
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
});
