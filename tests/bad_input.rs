//! The bad-input table: every row is fed through the public API and must give exactly the
//! documented `Error` variant (or, for the hostile-but-legal rows, the documented result).
//! No input may panic, and no error may change a sampler's history.

use std::time::{Duration, Instant};

use logits::half::{bf16, f16};
use logits::{
    BatchSampler, Chain, Error, LogitBias, MinP, Penalties, Sampler, SamplingParams, Temperature,
    TokenId, TokenMask, TopK, TopP,
};

const QWEN3_ROW: usize = 151_936;

fn sampler(vocab: usize) -> Sampler {
    Sampler::new(SamplingParams::builder().seed(1).build().unwrap(), vocab).unwrap()
}

fn with(params: SamplingParams, vocab: usize) -> Sampler {
    Sampler::new(params, vocab).unwrap()
}

/// The name of the parameter an `InvalidParameter` error names; panics on anything else.
fn invalid_name(r: Result<SamplingParams, Error>) -> &'static str {
    match r {
        Err(Error::InvalidParameter { name, .. }) => name,
        other => panic!("expected InvalidParameter, got {other:?}"),
    }
}

// --- logits rows ---------------------------------------------------------------------

#[test]
fn nan_logit_reports_its_index_in_every_element_type() {
    let mut row = vec![0.5f32; 40];
    row[17] = f32::NAN;
    assert_eq!(sampler(40).sample(&row), Err(Error::NanLogit { index: 17 }));
    // A NaN with another payload and sign is still NaN.
    row[17] = f32::from_bits(0xFFC0_0001);
    assert_eq!(sampler(40).sample(&row), Err(Error::NanLogit { index: 17 }));
    let mut h = vec![f16::from_f32(0.5); 40];
    h[3] = f16::NAN;
    assert_eq!(sampler(40).sample(&h), Err(Error::NanLogit { index: 3 }));
    let mut b = vec![bf16::from_f32(0.5); 40];
    b[39] = bf16::from_bits(0x7FC1);
    assert_eq!(sampler(40).sample(&b), Err(Error::NanLogit { index: 39 }));
}

#[test]
fn positive_infinity_reports_its_index_in_every_element_type() {
    let mut row = vec![0.5f32; 40];
    row[9] = f32::INFINITY;
    assert_eq!(
        sampler(40).sample(&row),
        Err(Error::InfiniteLogit { index: 9 })
    );
    let mut h = vec![f16::from_f32(0.5); 40];
    h[0] = f16::INFINITY;
    assert_eq!(
        sampler(40).sample(&h),
        Err(Error::InfiniteLogit { index: 0 })
    );
    let mut b = vec![bf16::from_f32(0.5); 40];
    b[38] = bf16::INFINITY;
    assert_eq!(
        sampler(40).sample(&b),
        Err(Error::InfiniteLogit { index: 38 })
    );
}

#[test]
fn the_first_bad_logit_is_reported() {
    let mut row = vec![0.0f32; 64];
    row[41] = f32::NAN;
    row[12] = f32::INFINITY;
    row[50] = f32::NAN;
    assert_eq!(
        sampler(64).sample(&row),
        Err(Error::InfiniteLogit { index: 12 })
    );
    row[12] = 0.0;
    assert_eq!(sampler(64).sample(&row), Err(Error::NanLogit { index: 41 }));
}

#[test]
fn bad_logits_are_refused_by_greedy_and_by_chains_too() {
    let mut row = vec![0.0f32; 8];
    row[5] = f32::NAN;
    let mut greedy = with(SamplingParams::greedy(), 8);
    assert_eq!(greedy.sample(&row), Err(Error::NanLogit { index: 5 }));
    let mut chain = Chain::builder(8).draw().build().unwrap();
    assert_eq!(chain.sample(&row), Err(Error::NanLogit { index: 5 }));
    row[5] = f32::INFINITY;
    assert_eq!(chain.sample(&row), Err(Error::InfiniteLogit { index: 5 }));
}

#[test]
fn negative_infinity_is_a_legal_ban() {
    let mut row = vec![f32::NEG_INFINITY; 32];
    row[4] = -3.0;
    row[30] = -3.5;
    for seed in 0..200 {
        let p = SamplingParams::builder().seed(seed).build().unwrap();
        let t = with(p, 32).sample(&row).unwrap().token;
        assert!(t == 4 || t == 30, "banned token {t} drawn");
    }
    // Huge finite logits do not revive a banned token.
    row[4] = f32::MAX;
    assert_eq!(
        with(SamplingParams::greedy(), 32)
            .sample(&row)
            .unwrap()
            .token,
        4
    );
}

#[test]
fn empty_row_or_zero_vocabulary_is_empty_vocabulary() {
    let empty: [f32; 0] = [];
    assert_eq!(sampler(4).sample(&empty), Err(Error::EmptyVocabulary));
    assert_eq!(sampler(4).sample::<bf16>(&[]), Err(Error::EmptyVocabulary));
    assert_eq!(
        Sampler::new(SamplingParams::default(), 0).unwrap_err(),
        Error::EmptyVocabulary
    );
    assert_eq!(
        Chain::builder(0).draw().build().unwrap_err(),
        Error::EmptyVocabulary
    );
    let mut chain = Chain::builder(3).draw().build().unwrap();
    assert_eq!(chain.sample(&empty), Err(Error::EmptyVocabulary));
}

#[test]
fn a_row_shorter_than_the_vocabulary_is_refused() {
    let row = vec![0.0f32; 151_668];
    assert_eq!(
        sampler(151_669).sample(&row),
        Err(Error::VocabLargerThanRow {
            vocab_size: 151_669,
            row_len: 151_668
        })
    );
    let mut chain = Chain::builder(5).draw().build().unwrap();
    assert_eq!(
        chain.sample(&[0.0f32; 4]),
        Err(Error::VocabLargerThanRow {
            vocab_size: 5,
            row_len: 4
        })
    );
}

#[test]
fn a_row_longer_than_the_vocabulary_never_reads_or_returns_padding() {
    // Qwen3: 151,669 tokens in a row of 151,936. The padding holds garbage, including
    // values that would be errors (NaN, +inf) and the row's largest value.
    let vocab = 151_669;
    let mut row = vec![-5.0f32; QWEN3_ROW];
    row[1_000] = 3.0;
    row[2_000] = 2.5;
    row[vocab] = f32::NAN;
    row[vocab + 1] = f32::INFINITY;
    row[QWEN3_ROW - 1] = 1e30;
    for p in [
        SamplingParams::greedy(),
        SamplingParams::builder().seed(3).build().unwrap(),
        SamplingParams::builder().top_k(5).seed(4).build().unwrap(),
        SamplingParams::builder()
            .top_p(0.9)
            .seed(5)
            .build()
            .unwrap(),
        SamplingParams::builder()
            .min_p(0.1)
            .seed(6)
            .logprobs(20)
            .build()
            .unwrap(),
    ] {
        let mut s = with(p, vocab);
        for _ in 0..20 {
            let out = s.sample(&row).unwrap();
            assert!((out.token as usize) < vocab);
            for a in out.alternatives() {
                assert!((a.token as usize) < vocab, "padding {} listed", a.token);
            }
        }
    }
    let mut chain = Chain::builder(vocab)
        .stage(TopK::new(3).unwrap())
        .draw()
        .build()
        .unwrap();
    assert!((chain.sample(&row).unwrap().token as usize) < vocab);
}

#[test]
fn every_token_banned_is_no_candidates() {
    let all = vec![f32::NEG_INFINITY; 10];
    assert_eq!(sampler(10).sample(&all), Err(Error::NoCandidates));
    assert_eq!(
        with(SamplingParams::greedy(), 10).sample(&all),
        Err(Error::NoCandidates)
    );
    let mut chain = Chain::builder(10).draw().build().unwrap();
    assert_eq!(chain.sample(&all), Err(Error::NoCandidates));

    // Banned by the mask.
    let row = vec![1.0f32; 10];
    let mask = TokenMask::new_empty(10);
    assert_eq!(
        sampler(10).sample_masked(&row, &mask),
        Err(Error::NoCandidates)
    );
    assert_eq!(chain.sample_masked(&row, &mask), Err(Error::NoCandidates));
    // The mask allows only tokens that are -inf already.
    let mut row2 = row.clone();
    row2[3] = f32::NEG_INFINITY;
    let mut only3 = TokenMask::new_empty(10);
    only3.allow(3).unwrap();
    assert_eq!(
        sampler(10).sample_masked(&row2, &only3),
        Err(Error::NoCandidates)
    );
    // Banned by the logit bias.
    let mut b = SamplingParams::builder();
    for id in 0..10 {
        b = b.logit_bias(id, f32::NEG_INFINITY);
    }
    assert_eq!(
        with(b.build().unwrap(), 10).sample(&row),
        Err(Error::NoCandidates)
    );
}

#[test]
fn errors_leave_the_history_unchanged() {
    let mut s = sampler(4);
    s.push_prompt(&[1, 2]).unwrap();
    s.sample(&[0.0f32, 1.0, 2.0, 3.0]).unwrap();
    let before = s.history().tokens().to_vec();
    assert!(s.sample(&[f32::NAN, 0.0, 0.0, 0.0]).is_err());
    assert!(s.sample(&[f32::NEG_INFINITY; 4]).is_err());
    assert!(s.sample(&[0.0f32; 3]).is_err());
    assert!(s
        .sample_masked(&[0.0f32; 4], &TokenMask::new_full(5))
        .is_err());
    assert!(s.accept(4).is_err());
    assert_eq!(s.history().tokens(), &before[..]);
}

// --- parameters ----------------------------------------------------------------------

#[test]
fn temperature_must_be_finite_and_non_negative() {
    for t in [-0.1f32, -1e-30, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        assert_eq!(
            invalid_name(SamplingParams::builder().temperature(t).build()),
            "temperature",
            "{t}"
        );
        assert!(matches!(
            Temperature::new(t),
            Err(Error::InvalidParameter {
                name: "temperature",
                ..
            })
        ));
    }
    // 0 is greedy for SamplingParams; a chain ends with greedy() instead.
    assert!(SamplingParams::builder()
        .temperature(0.0)
        .build()
        .unwrap()
        .is_greedy());
    assert!(SamplingParams::builder()
        .temperature(-0.0)
        .build()
        .unwrap()
        .is_greedy());
    assert!(matches!(
        Temperature::new(0.0),
        Err(Error::InvalidParameter {
            name: "temperature",
            ..
        })
    ));
    assert!(SamplingParams::builder()
        .temperature(f32::MIN_POSITIVE / 8.0)
        .build()
        .is_ok());
}

#[test]
fn top_p_must_be_in_zero_one() {
    for p in [0.0f32, -0.0, -0.5, 1.0001, 2.0, f32::NAN, f32::INFINITY] {
        assert_eq!(
            invalid_name(SamplingParams::builder().top_p(p).build()),
            "top_p",
            "{p}"
        );
        assert!(matches!(
            TopP::new(p),
            Err(Error::InvalidParameter { name: "top_p", .. })
        ));
    }
    for p in [1.0f32, 1e-30, 0.5] {
        assert!(SamplingParams::builder().top_p(p).build().is_ok());
        assert!(TopP::new(p).is_ok());
    }
}

#[test]
fn min_p_must_be_in_zero_one_inclusive() {
    for p in [-0.01f32, 1.01, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        assert_eq!(
            invalid_name(SamplingParams::builder().min_p(p).build()),
            "min_p",
            "{p}"
        );
        assert!(matches!(
            MinP::new(p),
            Err(Error::InvalidParameter { name: "min_p", .. })
        ));
    }
    for p in [0.0f32, 1.0, 0.05] {
        assert!(SamplingParams::builder().min_p(p).build().is_ok());
        assert!(MinP::new(p).is_ok());
    }
}

#[test]
fn top_k_zero_is_refused() {
    assert_eq!(
        invalid_name(SamplingParams::builder().top_k(0).build()),
        "top_k"
    );
    assert!(matches!(
        TopK::new(0),
        Err(Error::InvalidParameter { name: "top_k", .. })
    ));
    assert!(SamplingParams::builder().top_k(usize::MAX).build().is_ok());
}

#[test]
fn repetition_penalty_must_be_positive_and_finite() {
    for r in [0.0f32, -0.0, -1.0, f32::NAN, f32::INFINITY] {
        assert_eq!(
            invalid_name(SamplingParams::builder().repetition_penalty(r).build()),
            "repetition_penalty",
            "{r}"
        );
        assert!(matches!(
            Penalties::new(r, 0.0, 0.0),
            Err(Error::InvalidParameter {
                name: "repetition_penalty",
                ..
            })
        ));
    }
    assert!(SamplingParams::builder()
        .repetition_penalty(1e-30)
        .build()
        .is_ok());
}

#[test]
fn frequency_and_presence_penalties_must_be_finite() {
    for x in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        assert_eq!(
            invalid_name(SamplingParams::builder().frequency_penalty(x).build()),
            "frequency_penalty"
        );
        assert_eq!(
            invalid_name(SamplingParams::builder().presence_penalty(x).build()),
            "presence_penalty"
        );
        assert!(matches!(
            Penalties::new(1.0, x, 0.0),
            Err(Error::InvalidParameter {
                name: "frequency_penalty",
                ..
            })
        ));
        assert!(matches!(
            Penalties::new(1.0, 0.0, x),
            Err(Error::InvalidParameter {
                name: "presence_penalty",
                ..
            })
        ));
    }
    assert!(SamplingParams::builder()
        .frequency_penalty(-2.0)
        .presence_penalty(-2.0)
        .build()
        .is_ok());
}

#[test]
fn logit_bias_must_be_finite_or_minus_infinity() {
    for b in [f32::NAN, f32::INFINITY] {
        assert_eq!(
            invalid_name(SamplingParams::builder().logit_bias(3, b).build()),
            "logit_bias"
        );
        assert!(matches!(
            LogitBias::new([(3, b)]),
            Err(Error::InvalidParameter {
                name: "logit_bias",
                ..
            })
        ));
    }
    assert!(SamplingParams::builder()
        .logit_bias(3, f32::NEG_INFINITY)
        .build()
        .is_ok());
    // A later bias for the same id replaces the bad one.
    assert!(SamplingParams::builder()
        .logit_bias(3, f32::NAN)
        .logit_bias(3, 1.0)
        .build()
        .is_ok());
}

#[test]
fn other_parameters_out_of_range() {
    assert_eq!(
        invalid_name(SamplingParams::builder().min_tokens_to_keep(0).build()),
        "min_tokens_to_keep"
    );
    assert_eq!(
        invalid_name(SamplingParams::builder().logprobs(21).build()),
        "logprobs"
    );
    assert!(matches!(
        Chain::builder(4).draw().logprobs(21).build(),
        Err(Error::InvalidParameter {
            name: "logprobs",
            ..
        })
    ));
    // Token ids are u32: a larger vocabulary is refused before anything is allocated.
    assert!(matches!(
        Sampler::new(SamplingParams::default(), u32::MAX as usize + 1),
        Err(Error::InvalidParameter {
            name: "vocab_size",
            ..
        })
    ));
}

// --- token ids, masks, chains -------------------------------------------------------

#[test]
fn token_ids_past_the_vocabulary_are_out_of_range() {
    let mut s = sampler(100);
    assert_eq!(
        s.push_prompt(&[1, 2, 100, 3]),
        Err(Error::TokenOutOfRange {
            id: 100,
            vocab_size: 100
        })
    );
    assert!(
        s.history().tokens().is_empty(),
        "a refused prompt is not partly pushed"
    );
    assert_eq!(
        s.accept(u32::MAX),
        Err(Error::TokenOutOfRange {
            id: u32::MAX,
            vocab_size: 100
        })
    );
    assert_eq!(s.accept(99), Ok(()));
    let p = SamplingParams::builder()
        .logit_bias(5, 1.0)
        .logit_bias(100, -1.0)
        .build()
        .unwrap();
    assert_eq!(
        Sampler::new(p, 100).unwrap_err(),
        Error::TokenOutOfRange {
            id: 100,
            vocab_size: 100
        }
    );

    let mut chain = Chain::builder(10).draw().build().unwrap();
    assert_eq!(
        chain.push_prompt(&[10]),
        Err(Error::TokenOutOfRange {
            id: 10,
            vocab_size: 10
        })
    );
    assert_eq!(
        chain.accept(11),
        Err(Error::TokenOutOfRange {
            id: 11,
            vocab_size: 10
        })
    );
    // A bias stage over a token the vocabulary does not have, at any position: refused
    // when the chain is built.
    for leading in [true, false] {
        let mut b = Chain::builder(10);
        if !leading {
            b = b.stage(TopK::new(3).unwrap());
        }
        let biased = b.stage(LogitBias::new([(12, 1.0)]).unwrap()).draw().build();
        assert_eq!(
            biased.unwrap_err(),
            Error::TokenOutOfRange {
                id: 12,
                vocab_size: 10
            }
        );
    }
    let mut mask = TokenMask::new_empty(10);
    assert_eq!(
        mask.allow(10),
        Err(Error::TokenOutOfRange {
            id: 10,
            vocab_size: 10
        })
    );
}

#[test]
fn prompt_after_generation_is_refused() {
    let mut s = sampler(3);
    s.sample(&[0.0f32, 0.0, 0.0]).unwrap();
    assert!(matches!(
        s.push_prompt(&[0]),
        Err(Error::InvalidParameter { name: "prompt", .. })
    ));
}

#[test]
fn a_mask_of_the_wrong_length_is_a_length_mismatch() {
    let row = vec![0.0f32; 50];
    for len in [0, 49, 51, 64] {
        let mask = TokenMask::new_full(len);
        assert_eq!(
            sampler(50).sample_masked(&row, &mask),
            Err(Error::LengthMismatch {
                expected: 50,
                actual: len
            })
        );
        let mut chain = Chain::builder(50).draw().build().unwrap();
        assert_eq!(
            chain.sample_masked(&row, &mask),
            Err(Error::LengthMismatch {
                expected: 50,
                actual: len
            })
        );
    }
    // A padded row takes a mask over the vocabulary, not over the row.
    let padded = vec![0.0f32; 64];
    assert!(sampler(50)
        .sample_masked(&padded, &TokenMask::new_full(50))
        .is_ok());
    let mut m = TokenMask::new_full(50);
    assert_eq!(
        m.apply(&mut vec![0.0f32; 64]),
        Err(Error::LengthMismatch {
            expected: 50,
            actual: 64
        })
    );
    m.fill(false);
    assert_eq!(m.count_allowed(), 0);
}

#[test]
fn a_bad_logit_is_reported_whatever_the_mask() {
    // A sparse mask (read as a compact row), a nearly-open one (patches) and a dense one
    // (the masked copy), over a Qwen3-sized row.
    let n = QWEN3_ROW;
    let mut sparse = TokenMask::new_empty(n);
    let mut open = TokenMask::new_full(n);
    let mut dense = TokenMask::new_empty(n);
    for id in 0..n as TokenId {
        if id % 1000 == 10 {
            sparse.allow(id).unwrap();
        }
        if id % 1000 == 20 {
            open.disallow(id).unwrap();
        }
        if id % 2 == 0 {
            dense.allow(id).unwrap();
        }
    }
    for (name, mask) in [("sparse", &sparse), ("open", &open), ("dense", &dense)] {
        // One allowed and one disallowed position.
        let allowed = (0..n as TokenId).find(|&i| mask.is_allowed(i)).unwrap();
        let disallowed = (0..n as TokenId).find(|&i| !mask.is_allowed(i)).unwrap();
        for at in [allowed, disallowed] {
            for (bad, want) in [
                (f32::NAN, Error::NanLogit { index: at as usize }),
                (f32::INFINITY, Error::InfiniteLogit { index: at as usize }),
            ] {
                let mut row = vec![0.0f32; n];
                row[at as usize] = bad;
                let mut s = sampler(n);
                assert_eq!(
                    s.sample_masked(&row, mask),
                    Err(want.clone()),
                    "{name} {at}"
                );
                let h: Vec<f16> = row.iter().map(|&x| f16::from_f32(x)).collect();
                assert_eq!(s.sample_masked(&h, mask), Err(want.clone()), "{name} {at}");
                let b: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
                assert_eq!(s.sample_masked(&b, mask), Err(want), "{name} {at}");
                assert!(s.history().generated().is_empty());
            }
        }
        // A bias that overflows to +inf at a disallowed token is masked away, as the mask
        // comes after the bias; at an allowed token it is refused.
        for (at, ok) in [(disallowed, true), (allowed, false)] {
            let p = SamplingParams::builder()
                .logit_bias(at, f32::MAX)
                .build()
                .unwrap();
            let mut row = vec![0.0f32; n];
            row[at as usize] = f32::MAX;
            let got = with(p, n).sample_masked(&row, mask);
            if ok {
                assert!(mask.is_allowed(got.unwrap().token), "{name}");
            } else {
                assert_eq!(
                    got,
                    Err(Error::InfiniteLogit { index: at as usize }),
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn grammar_errors_become_error_grammar() {
    use logits::grammar::{GrammarError, GrammarMask, TokenKind, TokenSet, Vocab};
    use std::sync::Arc;
    let vocab = Arc::new(
        Vocab::new(
            vec![b"a".to_vec(), b"b".to_vec(), b"<eos>".to_vec()],
            vec![TokenKind::Text, TokenKind::Text, TokenKind::Special],
            vec![2],
        )
        .unwrap(),
    );
    // An invalid constraint, through `?`.
    let build = || -> Result<TokenSet, Error> { Ok(TokenSet::single(&vocab, [])?) };
    assert!(matches!(
        build(),
        Err(Error::Grammar(GrammarError::InvalidGrammar { .. }))
    ));
    // A step after end-of-sequence.
    let set = TokenSet::single(&vocab, [0]).unwrap();
    let mut stage = GrammarMask::new(Box::new(set), vocab.clone());
    let mut s = sampler(3);
    let row = [0.0f32; 3];
    assert_eq!(stage.sample(&mut s, &row).unwrap().0.token, 0);
    assert_eq!(stage.sample(&mut s, &row).unwrap().0.token, 2);
    assert_eq!(
        stage.sample(&mut s, &row).map(|(x, _)| x.token),
        Err(Error::Grammar(GrammarError::AlreadyFinished))
    );
    assert_eq!(s.history().generated(), &[0, 2]);
}

#[test]
fn a_batch_of_the_wrong_size_is_a_length_mismatch() {
    let mut batch = BatchSampler::new(vec![sampler(4), sampler(4)]);
    assert_eq!(
        batch.sample(&[0.0f32; 7], 4).unwrap_err(),
        Error::LengthMismatch {
            expected: 8,
            actual: 7
        }
    );
    assert_eq!(
        batch.sample::<f32>(&[], 0).unwrap_err(),
        Error::LengthMismatch {
            expected: 0,
            actual: 0
        }
    );
    // A short row is that row's error only.
    let out = batch.sample(&[0.0f32; 6], 3).unwrap();
    assert_eq!(
        out[0],
        Err(Error::VocabLargerThanRow {
            vocab_size: 4,
            row_len: 3
        })
    );
}

#[test]
fn a_chain_without_exactly_one_final_draw_is_invalid() {
    assert!(matches!(
        Chain::builder(4).build(),
        Err(Error::InvalidChain(_))
    ));
    assert!(matches!(
        Chain::builder(4).stage(TopK::new(2).unwrap()).build(),
        Err(Error::InvalidChain(_))
    ));
    assert!(matches!(
        Chain::builder(4).draw().greedy().build(),
        Err(Error::InvalidChain(_))
    ));
    assert!(matches!(
        Chain::builder(4)
            .draw()
            .stage(TopK::new(2).unwrap())
            .build(),
        Err(Error::InvalidChain(_))
    ));
    assert!(Chain::builder(4)
        .stage(TopK::new(2).unwrap())
        .greedy()
        .build()
        .is_ok());
}

#[test]
fn an_adjustment_that_overflows_to_infinity_is_refused() {
    // A finite logit plus a finite bias can overflow f32.
    let p = SamplingParams::builder()
        .logit_bias(2, f32::MAX)
        .build()
        .unwrap();
    let mut row = [0.0f32; 4];
    row[2] = f32::MAX;
    assert_eq!(
        with(p, 4).sample(&row),
        Err(Error::InfiniteLogit { index: 2 })
    );
    // So can a negative frequency penalty on a repeated token.
    let p = SamplingParams::builder()
        .frequency_penalty(-f32::MAX)
        .build()
        .unwrap();
    let mut s = with(p, 4);
    s.push_prompt(&[1, 1]).unwrap();
    assert_eq!(
        s.sample(&[0.0f32; 4]),
        Err(Error::InfiniteLogit { index: 1 })
    );
    // Overflow downwards is a ban, which is legal: a penalised -1e38 becomes -inf, and a
    // vocabulary with nothing else left has no candidate.
    let p = SamplingParams::builder()
        .repetition_penalty(5.0)
        .build()
        .unwrap();
    let mut s = with(p, 1);
    assert_eq!(s.sample(&[-1e38f32]).unwrap().token, 0);
    assert_eq!(s.sample(&[-1e38f32]), Err(Error::NoCandidates));
    // Overflow downwards is a ban, which is legal.
    let p = SamplingParams::builder()
        .logit_bias(0, -f32::MAX)
        .build()
        .unwrap();
    let mut row = [0.0f32; 2];
    row[0] = -f32::MAX;
    for seed in 0..20 {
        let p = p.to_builder().seed(seed).build().unwrap();
        assert_eq!(with(p, 2).sample(&row).unwrap().token, 1);
    }
}

// --- hostile but legal ---------------------------------------------------------------

#[test]
fn a_history_of_ten_million_tokens_is_linear() {
    const VOCAB: usize = 1_000;
    const N: usize = 10_000_000;
    let start = Instant::now();
    // Every token but 7 is seen about 10,000 times.
    let history: Vec<TokenId> = (0..N as u32)
        .map(|i| i % 999)
        .map(|i| if i >= 7 { i + 1 } else { i })
        .collect();
    let params = SamplingParams::builder()
        .frequency_penalty(0.01)
        .presence_penalty(0.5)
        .repetition_penalty(1.3)
        .seed(11)
        .build()
        .unwrap();
    let mut s = with(params.clone(), VOCAB);
    s.push_prompt(&history).unwrap();
    let row = vec![1.0f32; VOCAB];
    for _ in 0..3 {
        // The unseen token is the only one left unpenalised: ~100 nats ahead of the rest.
        let out = s.sample(&row).unwrap();
        assert_eq!(out.token, 7);
        s.rollback(1);
    }
    // Generated tokens count too: accept ten million more one by one.
    let mut g = with(
        params.to_builder().penalty_window(1_000).build().unwrap(),
        VOCAB,
    );
    g.reserve(N).unwrap();
    for i in 0..N as u32 {
        g.accept(i % VOCAB as u32).unwrap();
    }
    assert_eq!(g.history().generated().len(), N);
    let out = g.sample(&row).unwrap();
    assert!((out.token as usize) < VOCAB);
    // Linear work is well under a second per pass; quadratic work would never finish.
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "ten million history tokens took {:?}",
        start.elapsed()
    );
}

#[test]
fn a_logit_bias_on_every_qwen3_slot() {
    let start = Instant::now();
    // Built in descending id order, the worst order for an insertion-sorted map.
    let mut b = SamplingParams::builder().seed(2);
    for id in (0..QWEN3_ROW as u32).rev() {
        let bias = if id == 77_777 { 0.0 } else { f32::NEG_INFINITY };
        b = b.logit_bias(id, bias);
    }
    let params = b.build().unwrap();
    assert_eq!(params.logit_bias().len(), QWEN3_ROW);
    assert!(params.logit_bias().windows(2).all(|w| w[0].0 < w[1].0));
    let mut s = with(params.clone(), QWEN3_ROW);
    let row: Vec<f32> = (0..QWEN3_ROW).map(|i| (i % 97) as f32 / 10.0).collect();
    for _ in 0..5 {
        assert_eq!(s.sample(&row).unwrap().token, 77_777);
    }
    // One slot too small a vocabulary: the largest id is out of range.
    assert_eq!(
        Sampler::new(params, QWEN3_ROW - 1).unwrap_err(),
        Error::TokenOutOfRange {
            id: QWEN3_ROW as u32 - 1,
            vocab_size: QWEN3_ROW - 1
        }
    );
    // Finite biases on every slot shift the row; sampling still works.
    let mut b = SamplingParams::builder().top_p(0.9).seed(3);
    for id in 0..QWEN3_ROW as u32 {
        b = b.logit_bias(id, if id == 5 { 50.0 } else { -1.0 });
    }
    assert_eq!(
        with(b.build().unwrap(), QWEN3_ROW)
            .sample(&row)
            .unwrap()
            .token,
        5
    );
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "a full bias map took {:?}",
        start.elapsed()
    );
}

#[test]
fn top_k_larger_than_the_vocabulary_keeps_everything() {
    let row: Vec<f32> = (0..300).map(|i| ((i * 37) % 101) as f32 / 20.0).collect();
    for k in [300, 301, 5_000, usize::MAX] {
        for seed in 0..30 {
            let plain = SamplingParams::builder()
                .seed(seed)
                .logprobs(5)
                .build()
                .unwrap();
            let topk = plain.to_builder().top_k(k).build().unwrap();
            let a = with(plain, 300).sample(&row).unwrap();
            let b = with(topk, 300).sample(&row).unwrap();
            assert_eq!(a.token, b.token, "top_k {k} changed the draw");
            assert!((a.logprob - b.logprob).abs() < 1e-6);
        }
    }
    let mut chain = Chain::builder(3)
        .stage(TopK::new(usize::MAX).unwrap())
        .draw()
        .build()
        .unwrap();
    assert!(chain.sample(&[0.0f32, 1.0, 2.0]).unwrap().token < 3);
}

#[test]
fn subnormal_and_huge_finite_logits() {
    // Huge values of both signs: the largest wins everything, nothing overflows.
    let row = [1e38f32, -1e38, 1e38, -1e38, f32::MAX, -f32::MAX, 0.0];
    for seed in 0..50 {
        let p = SamplingParams::builder()
            .seed(seed)
            .logprobs(7)
            .build()
            .unwrap();
        let out = with(p, 7).sample(&row).unwrap();
        assert_eq!(out.token, 4);
        assert_eq!(out.logprob, 0.0);
        assert_eq!(out.raw_logprob, Some(0.0));
    }
    let without_max = [1e38f32, -1e38, 1e38, -1e38];
    for seed in 0..50 {
        let p = SamplingParams::builder()
            .temperature(2.0)
            .seed(seed)
            .build()
            .unwrap();
        let t = with(p, 4).sample(&without_max).unwrap().token;
        assert!(t == 0 || t == 2, "{t}");
    }
    // Subnormal logits: an almost flat distribution whose probabilities still sum to 1.
    let tiny = [
        f32::from_bits(1),
        0.0,
        -f32::from_bits(1),
        f32::MIN_POSITIVE / 2.0,
    ];
    for seed in 0..20 {
        let p = SamplingParams::builder()
            .seed(seed)
            .logprobs(4)
            .build()
            .unwrap();
        let out = with(p, 4).sample(&tiny).unwrap();
        let sum: f64 = out
            .alternatives()
            .iter()
            .map(|a| f64::from(a.logprob).exp())
            .sum();
        assert!((sum - 1.0).abs() < 1e-5, "{sum}");
        assert!((out.logprob - 0.25f32.ln()).abs() < 1e-6);
    }
    // Tiny temperatures with huge gaps: greedy-like, no NaN.
    let p = SamplingParams::builder()
        .temperature(1e-30)
        .seed(1)
        .build()
        .unwrap();
    assert_eq!(with(p, 7).sample(&row).unwrap().token, 4);
    let p = SamplingParams::builder()
        .temperature(f32::MIN_POSITIVE / 8.0)
        .top_p(0.5)
        .seed(1)
        .build()
        .unwrap();
    assert_eq!(with(p, 4).sample(&tiny).unwrap().token, 3);
}

#[test]
fn all_logits_equal() {
    let row = vec![0.25f32; 64];
    // Greedy ties go to the lowest id.
    assert_eq!(
        with(SamplingParams::greedy(), 64)
            .sample(&row)
            .unwrap()
            .token,
        0
    );
    let mut chain = Chain::builder(64).greedy().build().unwrap();
    assert_eq!(chain.sample(&row).unwrap().token, 0);
    for seed in 0..100 {
        // Top-k ties at the boundary go to the lower ids.
        let p = SamplingParams::builder()
            .top_k(3)
            .seed(seed)
            .build()
            .unwrap();
        let out = with(p, 64).sample(&row).unwrap();
        assert!(out.token < 3);
        assert!((out.logprob - (1.0f32 / 3.0).ln()).abs() < 1e-6);
        // Top-p keeps the smallest prefix reaching p: 16 of 64 tokens reach 0.25.
        let p = SamplingParams::builder()
            .top_p(0.25)
            .seed(seed)
            .build()
            .unwrap();
        let out = with(p, 64).sample(&row).unwrap();
        assert!(out.token < 16, "{}", out.token);
        // Min-p 1 keeps every token equal to the top one.
        let p = SamplingParams::builder()
            .min_p(1.0)
            .seed(seed)
            .build()
            .unwrap();
        let out = with(p, 64).sample(&row).unwrap();
        assert!((out.logprob - (1.0f32 / 64.0).ln()).abs() < 1e-6);
    }
    // The draw is spread over the whole vocabulary.
    let seen: std::collections::BTreeSet<u32> = (0..2_000)
        .map(|seed| {
            let p = SamplingParams::builder().seed(seed).build().unwrap();
            with(p, 64).sample(&row).unwrap().token
        })
        .collect();
    assert_eq!(seen.len(), 64);
}

#[test]
fn a_single_entry_vocabulary() {
    let params = [
        SamplingParams::greedy(),
        SamplingParams::builder()
            .seed(9)
            .logprobs(20)
            .build()
            .unwrap(),
        SamplingParams::builder()
            .top_k(1)
            .top_p(1e-9)
            .min_p(1.0)
            .seed(2)
            .build()
            .unwrap(),
        SamplingParams::builder()
            .repetition_penalty(1.5)
            .frequency_penalty(3.0)
            .seed(4)
            .build()
            .unwrap(),
    ];
    for p in params {
        for x in [0.0f32, -1e38, 1e38, f32::from_bits(1)] {
            let mut s = with(p.clone(), 1);
            for _ in 0..3 {
                let out = s.sample(&[x]).unwrap();
                assert_eq!((out.token, out.logprob), (0, 0.0));
            }
        }
        let mut s = with(p, 1);
        assert_eq!(s.sample(&[f32::NEG_INFINITY]), Err(Error::NoCandidates));
        // Padding after the single token is never read.
        assert_eq!(s.sample(&[0.0f32, f32::NAN, 9.0]).unwrap().token, 0);
    }
    let mut chain = Chain::builder(1)
        .stage(TopP::new(0.1).unwrap())
        .draw()
        .build()
        .unwrap();
    assert_eq!(chain.sample(&[bf16::from_f32(3.0)]).unwrap().token, 0);
}

/// Top-p alone reads a long row through its candidate selection, which rules chunks out
/// by their maximum: a NaN anywhere, next to high entries or not, in a whole block or in
/// the row's tail, is still reported with its index, in every element type.
#[test]
fn nan_is_reported_through_top_p_candidates() {
    let n = 151_936;
    let base: Vec<f32> = (0..n)
        .map(|i| ((i * 7_919) % 1_000) as f32 / 100.0)
        .collect();
    let top = (0..n).max_by(|&a, &b| base[a].total_cmp(&base[b])).unwrap();
    for at in [0, 77, top + 1, 64 * 1_000 + 5, n - 1] {
        let mut row = base.clone();
        row[at] = f32::NAN;
        let p = SamplingParams::builder().top_p(0.95).build().unwrap();
        let want = Err(Error::NanLogit { index: at });
        assert_eq!(with(p.clone(), n).sample(&row), want, "at {at}");
        let b: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
        assert_eq!(with(p, n).sample(&b), want, "bf16 at {at}");
    }
}

#[test]
fn a_mask_as_wide_as_the_padded_row_serves_the_real_vocabulary() {
    // Qwen3's shape in small: a vocabulary of 50 tokens in rows of 64 logits, a grammar's
    // mask over the whole row. Padding holds NaN, +inf and a huge logit: never read.
    let mut row = vec![0.0f32; 64];
    row[7] = 3.0;
    row[50] = f32::NAN;
    row[51] = f32::INFINITY;
    row[60] = 1e30;
    for len in [50, 51, 64] {
        let mut mask = TokenMask::new_full(len);
        mask.disallow(7).unwrap();
        for id in 50..len as u32 {
            if id % 2 == 0 {
                mask.disallow(id).unwrap();
            }
        }
        let mut s = sampler(50);
        let mut chain = Chain::builder(50).draw().build().unwrap();
        let mut dist = Vec::new();
        s.distribution(&row, Some(&mask), &mut dist).unwrap();
        assert_eq!(dist.len(), 49, "mask of {len}");
        assert!(dist.iter().all(|&(id, _)| id < 50 && id != 7));
        for u in [0.0, 0.5, 1.0 - f64::EPSILON] {
            let a = s.sample_with_uniform(&row, Some(&mask), u).unwrap().token;
            let b = chain
                .sample_with_uniform(&row, Some(&mask), u)
                .unwrap()
                .token;
            assert_eq!(a, b);
            assert!(a < 50 && a != 7);
        }
        // A sparse mask (few tokens allowed) takes the compact path: the same rule.
        let mut sparse = TokenMask::new_empty(len);
        sparse.allow(3).unwrap();
        if len > 60 {
            sparse.allow(60).unwrap(); // padding: ignored
        }
        assert_eq!(s.sample_masked(&row, &sparse).unwrap().token, 3);
        let c = logits::reference::adjust(
            &row,
            50,
            &SamplingParams::default(),
            &logits::History::new(&[], 0),
            Some(&sparse),
        )
        .unwrap();
        assert_eq!(c.iter().filter(|l| l.is_finite()).count(), 1);
    }
    // Longer than the row, or shorter than the vocabulary: refused.
    for len in [49, 65] {
        assert_eq!(
            sampler(50).sample_masked(&row, &TokenMask::new_full(len)),
            Err(Error::LengthMismatch {
                expected: 50,
                actual: len
            })
        );
    }
}
