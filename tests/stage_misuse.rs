//! Whatever a user's stage does to the `Candidates` through their public API, the chain
//! either samples from a valid distribution or returns a typed error: never a NaN
//! logprob, a flipped distribution, a token outside the vocabulary or a panic.

use logits::{
    AllowedTokens, BadWords, Candidates, Chain, Error, LogitBias, LogprobKind, Stage, StageContext,
    TopK, TopP,
};

/// What a [`Misuse`] stage does to the candidates.
type F = fn(&mut Candidates) -> Result<(), Error>;

/// A stage that does `f` to the candidates.
#[derive(Clone, Debug)]
struct Misuse(F);

impl Stage for Misuse {
    fn name(&self) -> &'static str {
        "misuse"
    }
    fn apply(&mut self, c: &mut Candidates, _: &StageContext<'_>) -> Result<(), Error> {
        (self.0)(c)
    }
}

const ROW: [f32; 4] = [2.0, 1.0, 1.0, 0.0];

/// The stage first (on the whole row), and after a cut (on the compact set).
fn chains(f: F) -> Vec<(&'static str, Chain)> {
    vec![
        (
            "first",
            Chain::builder(4).stage(Misuse(f)).draw().build().unwrap(),
        ),
        (
            "after top-k",
            Chain::builder(4)
                .stage(TopK::new(3).unwrap())
                .stage(Misuse(f))
                .draw()
                .build()
                .unwrap(),
        ),
        (
            "before top-p",
            Chain::builder(4)
                .stage(Misuse(f))
                .stage(TopP::new(0.99).unwrap())
                .draw()
                .build()
                .unwrap(),
        ),
    ]
}

fn is_temperature_error(r: &Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(
        r,
        Err(Error::InvalidParameter {
            name: "temperature",
            ..
        })
    )
}

/// Every call the chain offers gives the error `check` accepts, and leaves the history
/// unchanged.
fn all_refuse(chain: &mut Chain, what: &str, check: impl Fn(&Result<(), Error>) -> bool) {
    let r = chain.sample(&ROW).map(|_| ());
    assert!(check(&r), "{what}: sample gave {r:?}");
    let r = chain.sample_with_uniform(&ROW, None, 0.999).map(|_| ());
    assert!(check(&r), "{what}: sample_with_uniform gave {r:?}");
    let mut dist = Vec::new();
    let r = chain.distribution(&ROW, None, &mut dist);
    assert!(check(&r), "{what}: distribution gave {r:?}");
    let mut out = [0.0f32; 4];
    let r = chain.probabilities(&ROW, None, &mut out);
    assert!(check(&r), "{what}: probabilities gave {r:?}");
    let r = chain.logprobs_into(&ROW, None, LogprobKind::Processed, &mut out);
    assert!(check(&r), "{what}: logprobs_into gave {r:?}");
    assert!(chain.history().generated().is_empty(), "{what}");
}

#[test]
fn a_bad_temperature_is_refused_by_the_setters() {
    let mut c = Candidates::new();
    c.reset_from([1.0, 0.0]);
    for t in [0.0, -0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert!(is_temperature_error(&c.set_temperature(t)), "set {t}");
        assert!(is_temperature_error(&c.scale_temperature(t)), "scale {t}");
        assert_eq!(c.temperature(), 1.0);
    }
    // A product that underflows to 0 or overflows is refused too.
    c.set_temperature(1e-300).unwrap();
    assert!(is_temperature_error(&c.scale_temperature(1e-300)));
    assert_eq!(c.temperature(), 1e-300);
    c.set_temperature(1e300).unwrap();
    assert!(is_temperature_error(&c.scale_temperature(1e300)));
    assert_eq!(c.temperature(), 1e300);
    c.scale_temperature(0.5).unwrap();
    assert_eq!(c.temperature(), 0.5e300);
    assert_eq!(Candidates::default().temperature(), 1.0);
}

#[test]
fn a_stage_that_sets_a_bad_temperature_fails_the_call() {
    let setters: [F; 8] = [
        |c| c.set_temperature(0.0),
        |c| c.set_temperature(-1.0),
        |c| c.set_temperature(f64::NAN),
        |c| c.set_temperature(f64::INFINITY),
        |c| c.scale_temperature(0.0),
        |c| c.scale_temperature(-1.0),
        |c| c.scale_temperature(f64::NAN),
        |c| {
            c.scale_temperature(1e-300)?;
            c.scale_temperature(1e-300)
        },
    ];
    for (i, f) in setters.into_iter().enumerate() {
        for (at, mut chain) in chains(f) {
            all_refuse(
                &mut chain,
                &format!("setter {i} {at}"),
                is_temperature_error,
            );
        }
    }
}

#[test]
fn a_stage_that_ignores_the_refusal_keeps_the_distribution() {
    let ignore: [F; 3] = [
        |c| {
            let _ = c.set_temperature(-1.0);
            Ok(())
        },
        |c| {
            let _ = c.set_temperature(0.0);
            Ok(())
        },
        |c| {
            let _ = c.scale_temperature(f64::NAN);
            Ok(())
        },
    ];
    for f in ignore {
        for (at, mut chain) in chains(f) {
            // Not flipped: the lowest uniform draws the highest logit.
            let out = chain.sample_with_uniform(&ROW, None, 0.0).unwrap();
            assert_eq!(out.token, 0, "{at}");
            assert!(
                out.logprob.is_finite() && out.logprob < 0.0,
                "{at}: {out:?}"
            );
            let mut dist = Vec::new();
            chain.distribution(&ROW, None, &mut dist).unwrap();
            let total: f64 = dist.iter().map(|&(_, p)| p).sum();
            assert!((total - 1.0).abs() < 1e-12, "{at}: {dist:?}");
            assert!(dist.windows(2).all(|w| w[0].1 >= w[1].1), "{at}: {dist:?}");
        }
    }
}

/// A NaN or `+inf` a stage leaves is reported even when a later stage would drop the
/// token: no stage works on a poisoned set.
#[test]
fn a_stage_that_leaves_nan_or_inf_fails_the_call_even_if_a_later_stage_drops_it() {
    let nan: F = |c| {
        if let Some(l) = c.logit_of_mut(1) {
            *l = f32::NAN;
        }
        Ok(())
    };
    let inf: F = |c| {
        if let Some(l) = c.logit_of_mut(1) {
            *l = f32::INFINITY;
        }
        Ok(())
    };
    for (f, want) in [
        (nan, Error::NanLogit { index: 1 }),
        (inf, Error::InfiniteLogit { index: 1 }),
    ] {
        let chains = [
            // Whole row; the allowed tokens then drop token 1.
            Chain::builder(4)
                .stage(Misuse(f))
                .stage(AllowedTokens::new([0, 2, 3]).unwrap())
                .draw()
                .build()
                .unwrap(),
            // After a cut; top-p then sorts and cuts.
            Chain::builder(4)
                .stage(TopK::new(3).unwrap())
                .stage(Misuse(f))
                .stage(TopP::new(0.5).unwrap())
                .draw()
                .build()
                .unwrap(),
            // After a cut; the allowed tokens then drop token 1.
            Chain::builder(4)
                .stage(TopK::new(3).unwrap())
                .stage(Misuse(f))
                .stage(AllowedTokens::new([0, 2, 3]).unwrap())
                .draw()
                .build()
                .unwrap(),
        ];
        for (i, mut chain) in chains.into_iter().enumerate() {
            all_refuse(&mut chain, &format!("{want:?} chain {i}"), |r| {
                r.as_ref().err() == Some(&want)
            });
        }
    }
}

/// A stage can refill the set with `reset_from`: more tokens than the vocabulary is
/// `TokenOutOfRange`, never a token past it (or a write past a caller's buffer).
#[test]
fn a_stage_that_refills_past_the_vocabulary_fails_the_call() {
    let refill: F = |c| {
        c.reset_from([0.0, 1.0, 2.0, 3.0, 9.0]);
        Ok(())
    };
    for (at, mut chain) in chains(refill) {
        all_refuse(&mut chain, at, |r| {
            r.as_ref().err()
                == Some(&Error::TokenOutOfRange {
                    id: 4,
                    vocab_size: 4,
                })
        });
    }
    // Refilling with fewer tokens is a smaller set: valid.
    let shrink: F = |c| {
        c.reset_from([0.0, 1.0]);
        Ok(())
    };
    for (at, mut chain) in chains(shrink) {
        let out = chain.sample_with_uniform(&ROW, None, 0.0).unwrap();
        assert_eq!(out.token, 1, "{at}");
        let mut p = [0.0f32; 4];
        chain.probabilities(&ROW, None, &mut p).unwrap();
        assert_eq!(&p[2..], &[0.0, 0.0], "{at}");
    }
}

/// `LogitBias` and `BadWords` check their ids against the vocabulary when the chain is
/// built, wherever they stand: after a cut the candidates no longer show the
/// vocabulary's size.
#[test]
fn id_stages_after_a_cut_are_checked_at_build() {
    let out_of_range = Err(Error::TokenOutOfRange {
        id: 9,
        vocab_size: 4,
    });
    let build = |stage: Box<dyn Stage>, first: bool| {
        let b = Chain::builder(4);
        let b = if first {
            b.boxed_stage(stage).stage(TopK::new(2).unwrap())
        } else {
            b.stage(TopK::new(2).unwrap()).boxed_stage(stage)
        };
        b.draw().build().map(|_| ())
    };
    for first in [true, false] {
        let bias = || Box::new(LogitBias::new([(1, 0.5), (9, 1.0)]).unwrap());
        assert_eq!(build(bias(), first), out_of_range, "bias, first {first}");
        let bad = || Box::new(BadWords::new([vec![1], vec![2, 9]]).unwrap());
        assert_eq!(
            build(bad(), first),
            out_of_range,
            "bad words, first {first}"
        );
        // In range: built.
        let ok = Box::new(BadWords::new([vec![9, 1]]).unwrap());
        assert_eq!(build(ok, first), Ok(()), "bad words, first {first}");
        let ok = Box::new(LogitBias::new([(3, 1.0)]).unwrap());
        assert_eq!(build(ok, first), Ok(()), "bias, first {first}");
    }
}
