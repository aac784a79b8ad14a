//! Random chains: random stages in random orders with random parameters, over arbitrary
//! rows in f32, f16 and bf16, with masks and a growing history. Every chain is run twice:
//! as built, where the engine lowers the stages it knows onto its kernels, and with
//! every stage hidden from the planner, where each stage's own `apply` runs on the
//! candidates. The two must agree on every result: the error, or the token drawn for the
//! same uniform and the final distribution's kept set. Where every stage has a
//! `reference::Step`, the distribution is also checked against
//! `reference::chain_survivors`.
//!
//! Tokens are compared only where the draw is not within 1e-9 (relative) of a boundary of
//! the cumulative weights, and kept sets only where no cut is that close to its
//! threshold: there the two summation orders may decide differently, which
//! `tests/chain_vs_reference.rs` checks with rows built on the boundaries.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use logits::reference::{self, Step};
use logits::{
    Candidates, Chain, DynamicTemperature, EpsilonCutoff, Error, EtaCutoff, LogitBias, MinP,
    MirostatV2, Penalties, Stage, StageContext, Temperature, TokenId, TokenMask, TopK, TopNSigma,
    TopP, TypicalP, Xtc,
};
use logits_fuzz::{assert_documented_sample_error, param, Dtype, Row};

/// Hides a stage from the planner.
#[derive(Clone, Debug)]
struct Opaque(Box<dyn Stage>);

impl Stage for Opaque {
    fn name(&self) -> &'static str {
        "opaque"
    }
    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        self.0.apply(c, ctx)
    }
    fn observe(&mut self, token: TokenId, logprob: f32) {
        self.0.observe(token, logprob);
    }
    fn reset(&mut self) {
        self.0.reset();
    }
}

#[derive(Arbitrary, Clone, Copy, Debug)]
enum Kind {
    Bias,
    Penalties,
    Temperature,
    TopK,
    TopP,
    MinP,
    Typical,
    Epsilon,
    Eta,
    Sigma,
    Xtc,
    MirostatV2,
    DynamicTemperature,
}

/// A stage built twice (`None` when its parameters are refused), and its reference step.
type Built = (Option<[Box<dyn Stage>; 2]>, Option<Step>);

/// One stage, built twice (the constructors are pure, so both copies are equal).
fn stage(u: &mut Unstructured<'_>, kind: Kind, vocab: usize) -> arbitrary::Result<Built> {
    let keep = u.int_in_range(1..=4)?;
    macro_rules! two {
        ($e:expr) => {{
            match $e {
                Ok(s) => Some([Box::new(s.clone()) as Box<dyn Stage>, Box::new(s)]),
                Err(e) => {
                    assert!(matches!(e, Error::InvalidParameter { .. }), "{e:?}");
                    None
                }
            }
        }};
    }
    Ok(match kind {
        Kind::Bias => {
            let mut pairs = Vec::new();
            for _ in 0..u.int_in_range(1..=3)? {
                let id = u.int_in_range(0..=vocab.max(1) as u32 - 1)?;
                let b = if u.ratio(1, 4)? {
                    f32::NEG_INFINITY
                } else {
                    param(u, -10.0, 10.0)?
                };
                pairs.push((id, b));
            }
            (two!(LogitBias::new(pairs.clone())), Some(Step::Bias(pairs)))
        }
        Kind::Penalties => {
            let (repetition, frequency, presence) = (
                param(u, 0.5, 2.0)?,
                param(u, -1.0, 1.0)?,
                param(u, -1.0, 1.0)?,
            );
            let step = Step::Penalties {
                repetition,
                frequency,
                presence,
                window: None,
                penalize_prompt: true,
            };
            (
                two!(Penalties::new(repetition, frequency, presence)),
                Some(step),
            )
        }
        Kind::Temperature => {
            let t = param(u, 0.05, 3.0)?;
            (two!(Temperature::new(t)), Some(Step::Temperature(t)))
        }
        Kind::TopK => {
            let k = u.int_in_range(1..=40)?;
            let step = Step::TopK { k, min_keep: keep };
            (two!(TopK::new(k).map(|s| s.min_keep(keep))), Some(step))
        }
        Kind::TopP => {
            let p = param(u, 0.0, 1.0)?;
            let step = Step::TopP { p, min_keep: keep };
            (two!(TopP::new(p).map(|s| s.min_keep(keep))), Some(step))
        }
        Kind::MinP => {
            let p = param(u, 0.0, 1.0)?;
            let step = Step::MinP { p, min_keep: keep };
            (two!(MinP::new(p).map(|s| s.min_keep(keep))), Some(step))
        }
        Kind::Typical => {
            let p = param(u, 0.0, 1.0)?;
            let step = Step::Typical { p, min_keep: keep };
            (two!(TypicalP::new(p).map(|s| s.min_keep(keep))), Some(step))
        }
        Kind::Epsilon => {
            let epsilon = param(u, 0.0, 0.5)?;
            let step = Step::Epsilon {
                epsilon,
                min_keep: keep,
            };
            let stage = EpsilonCutoff::new(epsilon).map(|s| s.min_keep(keep));
            (two!(stage), Some(step))
        }
        Kind::Eta => {
            let epsilon = param(u, 0.0, 0.5)?;
            let step = Step::Eta {
                epsilon,
                min_keep: keep,
            };
            (
                two!(EtaCutoff::new(epsilon).map(|s| s.min_keep(keep))),
                Some(step),
            )
        }
        Kind::Sigma => {
            let n = param(u, 0.0, 3.0)?;
            (two!(TopNSigma::new(n)), Some(Step::TopNSigma { n }))
        }
        // No reference step (XTC, mirostat v2, dynamic temperature): checked against the
        // hidden chain only.
        Kind::Xtc => (
            two!(Xtc::new(param(u, 0.0, 1.0)?, param(u, 0.0, 0.6)?)),
            None,
        ),
        Kind::MirostatV2 => (
            two!(MirostatV2::new(param(u, 0.5, 8.0)?, param(u, 0.01, 1.0)?)),
            None,
        ),
        Kind::DynamicTemperature => (
            two!(DynamicTemperature::new(
                param(u, 0.0, 2.0)?,
                param(u, 0.0, 1.0)?,
                param(u, 0.0, 3.0)?
            )),
            None,
        ),
    })
}

/// Checks the chain's final distribution against `reference::chain_survivors`. Away from
/// a cut's threshold the kept sets are equal and the probabilities agree to 1e-6; near
/// one, the two summation orders may keep one token more or less, so a difference is
/// accepted only when one kept set is a prefix of the other in draw order.
fn check_reference(got: &[(TokenId, f64)], want: &[(TokenId, f64)]) {
    let n = got.len().min(want.len());
    let ids = |d: &[(TokenId, f64)]| d.iter().map(|x| x.0).collect::<Vec<_>>();
    assert_eq!(
        ids(&got[..n]),
        ids(&want[..n]),
        "kept sets: {got:?} / reference {want:?}"
    );
    if got.len() == want.len() {
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g.1 - w.1).abs() <= 1e-6,
                "probabilities: {got:?} / reference {want:?}"
            );
        }
    }
}

/// True when `u` lies within 1e-9 (relative) of a boundary of `dist`'s cumulative
/// probabilities, or any probability is that close to 0.
fn near_boundary(dist: &[(TokenId, f64)], u: f64) -> bool {
    let mut cum = 0.0;
    for &(_, p) in dist {
        cum += p;
        if (cum - u).abs() <= 1e-9 {
            return true;
        }
    }
    false
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let dtype: Dtype = u.arbitrary()?;
    let vocab: usize = u.int_in_range(1..=48)?;
    let mut built = Chain::builder(vocab);
    let mut hidden = Chain::builder(vocab);
    // The same chain as `reference` steps, while every stage has one.
    let mut steps = Some(Vec::new());
    for _ in 0..u.int_in_range(0..=5)? {
        let kind: Kind = u.arbitrary()?;
        let (pair, step) = stage(u, kind, vocab)?;
        if let Some([a, b]) = pair {
            built = built.boxed_stage(a);
            hidden = hidden.boxed_stage(Box::new(Opaque(b)));
            match (step, steps.as_mut()) {
                (Some(step), Some(v)) => v.push(step),
                _ => steps = None,
            }
        }
    }
    let seed: u64 = u.arbitrary()?;
    let (built, hidden) = (
        built.draw().seed(seed).build(),
        hidden.draw().seed(seed).build(),
    );
    let (mut a, mut b): (Chain, Chain) = match (built, hidden) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(x), Err(y)) => {
            assert_eq!(x, y);
            return Ok(());
        }
        (x, y) => panic!("one build failed: {:?} / {:?}", x.err(), y.err()),
    };
    let prompt: Vec<TokenId> = (0..u.int_in_range(0..=6)?)
        .map(|_| u.int_in_range(0..=vocab as u32 - 1))
        .collect::<Result<_, _>>()?;
    a.push_prompt(&prompt).unwrap();
    b.push_prompt(&prompt).unwrap();
    let (mut da, mut db) = (Vec::new(), Vec::new());
    for _ in 0..u.int_in_range(1..=4)? {
        let extra = u.int_in_range(0..=2)?;
        let row = Row::arbitrary(u, dtype, vocab + extra)?;
        let mask = if u.ratio(1, 3)? {
            let mut m = TokenMask::new_empty(vocab);
            for id in 0..vocab as u32 {
                if u.arbitrary()? {
                    m.allow(id).unwrap();
                }
            }
            Some(m)
        } else {
            None
        };
        let uniform = f64::from(u.arbitrary::<u32>()?) / 4_294_967_296.0;
        let (ra, rb) = match &row {
            Row::F32(r) => (
                a.distribution(r, mask.as_ref(), &mut da),
                b.distribution(r, mask.as_ref(), &mut db),
            ),
            Row::F16(r) => (
                a.distribution(r, mask.as_ref(), &mut da),
                b.distribution(r, mask.as_ref(), &mut db),
            ),
            Row::Bf16(r) => (
                a.distribution(r, mask.as_ref(), &mut da),
                b.distribution(r, mask.as_ref(), &mut db),
            ),
        };
        // Mirostat and XTC keep no reference step; the others keep no state between
        // steps, so the reference sees the same history as the chain.
        let want = steps.as_ref().map(|steps| {
            let history = a.history();
            reference::chain_survivors(&row.to_f32(), vocab, &history, mask.as_ref(), steps)
        });
        match &want {
            Some(Ok(want)) if ra.is_ok() => check_reference(&da, want),
            Some(want) => assert_eq!(
                ra.as_ref().err(),
                want.as_ref().err(),
                "error against the reference"
            ),
            None => {}
        }
        match (ra, rb) {
            (Ok(()), Ok(())) => {
                let total: f64 = da.iter().map(|x| x.1).sum();
                assert!((total - 1.0).abs() < 1e-9, "{total}");
                assert!(da.iter().all(|x| x.1.is_finite() && x.1 >= 0.0));
            }
            (Err(x), Err(y)) => {
                // A stage that sets a temperature the candidates cannot hold (dynamic
                // temperature's `(H / ln n)^exponent` overflows for a huge exponent
                // when rounding puts `H / ln n` above 1) fails the call with
                // `InvalidParameter`, as README's table of errors says.
                if !matches!(
                    x,
                    Error::InvalidParameter {
                        name: "temperature",
                        ..
                    }
                ) {
                    assert_documented_sample_error(&x);
                }
                assert_eq!(x, y);
                continue;
            }
            (x, y) => panic!("distribution: {x:?} / {y:?}"),
        }
        let (sa, sb) = match &row {
            Row::F32(r) => (
                a.sample_with_uniform(r, mask.as_ref(), uniform),
                b.sample_with_uniform(r, mask.as_ref(), uniform),
            ),
            Row::F16(r) => (
                a.sample_with_uniform(r, mask.as_ref(), uniform),
                b.sample_with_uniform(r, mask.as_ref(), uniform),
            ),
            Row::Bf16(r) => (
                a.sample_with_uniform(r, mask.as_ref(), uniform),
                b.sample_with_uniform(r, mask.as_ref(), uniform),
            ),
        };
        let (sa, sb) = (sa.expect("a distribution was found"), sb.expect("and here"));
        assert!((sa.token as usize) < vocab);
        assert!(
            da.iter().any(|&(id, p)| id == sa.token && p > 0.0),
            "{sa:?} not in {da:?}"
        );
        if !near_boundary(&da, uniform) && !near_boundary(&db, uniform) {
            assert_eq!(sa.token, sb.token, "{da:?} / {db:?} at {uniform}");
        }
        // At a boundary the two may draw different tokens; their states part there.
        if sa.token != sb.token {
            return Ok(());
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
