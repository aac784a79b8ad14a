//! The custom chain: the builder's checks and a non-default order.

use logits::{Chain, Error, MinP, Sampler, SamplingParams, Temperature, TopK, TopP};

#[test]
fn a_chain_needs_exactly_one_draw_at_the_end() {
    let no_end = Chain::builder(4).stage(TopK::new(2).unwrap()).build();
    assert!(matches!(no_end, Err(Error::InvalidChain(_))));
    let two = Chain::builder(4).draw().greedy().build();
    assert!(matches!(two, Err(Error::InvalidChain(_))));
    let after = Chain::builder(4)
        .draw()
        .stage(TopK::new(2).unwrap())
        .build();
    assert!(matches!(after, Err(Error::InvalidChain(_))));
    assert_eq!(
        Chain::builder(0).draw().build().unwrap_err(),
        Error::EmptyVocabulary
    );
    let ok = Chain::builder(4)
        .stage(TopK::new(2).unwrap())
        .draw()
        .build()
        .unwrap();
    assert_eq!(ok.stage_names().collect::<Vec<_>>(), ["top_k", "draw"]);
}

#[test]
fn temperature_last_differs_from_temperature_first() {
    // Top-p 0.6 at T = 1 keeps two tokens; after temperature 0.25 the top token alone
    // reaches 0.6. So the order decides the survivors.
    let row = [2.0f32, 1.5, 1.0, 0.0];
    let mut llama_order = Chain::builder(4)
        .stage(TopP::new(0.6).unwrap())
        .stage(Temperature::new(0.25).unwrap())
        .logprobs(4)
        .draw()
        .build()
        .unwrap();
    let out = llama_order.sample(&row).unwrap();
    let kept = out
        .alternatives()
        .iter()
        .filter(|a| a.logprob > f32::NEG_INFINITY)
        .count();
    assert_eq!(kept, 2);

    let p = SamplingParams::builder()
        .temperature(0.25)
        .top_p(0.6)
        .build()
        .unwrap();
    let mut dist = Vec::new();
    Sampler::new(p, 4)
        .unwrap()
        .distribution(&row, None, &mut dist)
        .unwrap();
    assert_eq!(dist.len(), 1);
}

#[test]
fn greedy_chain_takes_the_first_maximum() {
    let mut c = Chain::builder(5)
        .stage(MinP::new(0.5).unwrap())
        .greedy()
        .build()
        .unwrap();
    let out = c
        .sample(&[1.0f32, 4.0, 4.0, f32::NEG_INFINITY, 2.0])
        .unwrap();
    assert_eq!(out.token, 1);
    assert_eq!(out.logprob, 0.0);
    let all_banned = c.sample(&[f32::NEG_INFINITY; 5]);
    assert_eq!(all_banned.unwrap_err(), Error::NoCandidates);
}

/// xorshift64*: rows without a dependency.
fn rows(seed: u64, n: usize) -> (Vec<f32>, Vec<f32>) {
    let mut x = seed;
    let mut unit = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    };
    let flat: Vec<f32> = (0..n).map(|_| (2.0 * unit() - 1.0) as f32).collect();
    let mut peaked = flat.clone();
    for i in (0..n).step_by(997) {
        peaked[i] += (6.0 + 6.0 * unit()) as f32;
    }
    (flat, peaked)
}

/// Every way the engine can run a chain on a large row, against the reference chain:
/// each cut first, with and without a trailing temperature (drawn at it without
/// materialising the survivors, on the histogram for the flat row's large nucleus),
/// with a stage after the cut (run on the compact set), and with a whole-row stage ahead
/// of the cut (run on a copy). The survivors, their probabilities and the draws at a
/// range of uniforms must agree.
#[test]
fn every_plan_agrees_with_the_reference_on_large_rows() {
    use logits::reference::{self, Step};
    use logits::{History, LogitsProcessor, TypicalP};

    /// Changes nothing; only makes the chain copy the row.
    #[derive(Clone, Debug)]
    struct Untouched;
    impl LogitsProcessor for Untouched {
        fn process(&mut self, _: &mut [f32], _: &History<'_>) -> Result<(), Error> {
            Ok(())
        }
    }

    let n = 40_000;
    let (flat, peaked) = rows(7, n);
    let history = History::new(&[], 0);
    type Cut = fn() -> (Box<dyn logits::Stage>, Step);
    let cuts: [Cut; 3] = [
        || {
            let s = TopK::new(50).unwrap();
            (Box::new(s), Step::TopK { k: 50, min_keep: 1 })
        },
        || {
            let s = TopP::new(0.9).unwrap();
            (
                Box::new(s),
                Step::TopP {
                    p: 0.9,
                    min_keep: 1,
                },
            )
        },
        || {
            let s = MinP::new(0.3).unwrap();
            (
                Box::new(s),
                Step::MinP {
                    p: 0.3,
                    min_keep: 1,
                },
            )
        },
    ];
    for (shape, row) in [("flat", &flat), ("peaked", &peaked)] {
        for cut in cuts {
            for form in 0..4 {
                let (stage, step) = cut();
                let mut b = Chain::builder(n).seed(3);
                let mut steps = Vec::new();
                if form == 3 {
                    b = b.processor(Untouched);
                }
                b = b.boxed_stage(stage);
                steps.push(step);
                if form == 2 {
                    b = b.stage(TypicalP::new(0.9).unwrap());
                    steps.push(Step::Typical {
                        p: 0.9,
                        min_keep: 1,
                    });
                }
                if form >= 1 {
                    b = b.stage(Temperature::new(0.7).unwrap());
                    steps.push(Step::Temperature(0.7));
                }
                let mut chain = b.draw().build().unwrap();
                let what = format!("{shape}, {steps:?}, form {form}");
                let want = reference::chain_survivors(row, n, &history, None, &steps).unwrap();
                let mut got = Vec::new();
                chain.distribution(row.as_slice(), None, &mut got).unwrap();
                assert_eq!(got.len(), want.len(), "{what}");
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(g.0, w.0, "{what}");
                    assert!((g.1 - w.1).abs() <= 1e-9 * w.1, "{what}: {g:?} {w:?}");
                }
                for i in 0..64 {
                    let u = (f64::from(i) + 0.37) / 64.0;
                    let (token, lp) =
                        reference::chain_sample(row, n, &history, None, &steps, u).unwrap();
                    let out = chain.sample_with_uniform(row.as_slice(), None, u).unwrap();
                    assert_eq!(out.token, token, "{what}, u {u}");
                    assert!((f64::from(out.logprob) - lp).abs() < 1e-5, "{what}, u {u}");
                    chain.rollback(1);
                }
            }
        }
    }
}

/// A user stage or processor that panics leaves the chain (or sampler) usable: the panic
/// propagates, the history does not move, and the next call gives what a fresh one gives.
#[test]
fn a_panicking_stage_leaves_the_engine_usable() {
    use logits::{Candidates, History, LogitBias, LogitsProcessor, Stage, StageContext};
    use logits::{Penalties, TokenMask};
    use std::panic::{catch_unwind, AssertUnwindSafe};

    /// Panics on its first call only.
    #[derive(Clone, Debug, Default)]
    struct Once(bool);
    impl Stage for Once {
        fn name(&self) -> &'static str {
            "once"
        }
        fn apply(&mut self, _: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
            if !std::mem::replace(&mut self.0, true) {
                panic!("a user stage failed");
            }
            Ok(())
        }
    }
    #[derive(Clone, Debug, Default)]
    struct OnceRow(bool);
    impl LogitsProcessor for OnceRow {
        fn process(&mut self, _: &mut [f32], _: &History<'_>) -> Result<(), Error> {
            if !std::mem::replace(&mut self.0, true) {
                panic!("a user processor failed");
            }
            Ok(())
        }
    }

    let n = 20_000;
    let (flat, peaked) = rows(11, n);
    let mut mask = TokenMask::new_full(n);
    for id in (0..n as u32).step_by(3) {
        mask.disallow(id).unwrap();
    }
    let chain = |position: usize, panicking: bool| {
        let mut b = Chain::builder(n)
            .seed(5)
            .stage(LogitBias::new([(2, 1.5), (7, -0.5)]).unwrap())
            .stage(Penalties::new(1.3, 0.1, 0.0).unwrap());
        let user = |b: logits::ChainBuilder| {
            if panicking {
                b.stage(Once::default())
            } else {
                b.stage(Once(true))
            }
        };
        if position == 0 {
            b = user(b);
        }
        b = b.stage(TopP::new(0.9).unwrap());
        if position == 1 {
            b = user(b);
        }
        b.stage(Temperature::new(0.8).unwrap())
            .logprobs(3)
            .draw()
            .build()
            .unwrap()
    };
    for position in [0, 1] {
        for masked in [false, true] {
            for row in [&flat, &peaked] {
                let (mut hurt, mut fresh) = (chain(position, true), chain(position, false));
                for c in [&mut hurt, &mut fresh] {
                    c.push_prompt(&[2, 7, 7]).unwrap();
                }
                let m = masked.then_some(&mask);
                let r = catch_unwind(AssertUnwindSafe(|| {
                    hurt.sample_with_uniform(row.as_slice(), m, 0.5)
                }));
                assert!(r.is_err(), "the panic propagates");
                assert_eq!(hurt.history().tokens(), &[2, 7, 7]);
                for u in [0.5, 0.01, 0.99] {
                    let a = hurt.sample_with_uniform(row.as_slice(), m, u).unwrap();
                    let b = fresh.sample_with_uniform(row.as_slice(), m, u).unwrap();
                    assert_eq!(a, b, "position {position}, masked {masked}, u {u}");
                }
            }
        }
    }
    // The same for a Sampler's processor.
    let params = SamplingParams::builder()
        .top_k(40)
        .temperature(0.7)
        .repetition_penalty(1.2)
        .logit_bias(3, 2.0)
        .seed(9)
        .build()
        .unwrap();
    let mut hurt = Sampler::new(params.clone(), n).unwrap();
    hurt.add_processor(Box::new(OnceRow::default()));
    let mut fresh = Sampler::new(params, n).unwrap();
    fresh.add_processor(Box::new(OnceRow(true)));
    let r = catch_unwind(AssertUnwindSafe(|| hurt.sample(peaked.as_slice())));
    assert!(r.is_err());
    assert!(hurt.history().tokens().is_empty());
    for _ in 0..3 {
        assert_eq!(
            hurt.sample(peaked.as_slice()).unwrap(),
            fresh.sample(peaked.as_slice()).unwrap()
        );
    }
}
