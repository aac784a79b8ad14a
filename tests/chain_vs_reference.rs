//! Random chains against `logits::reference`'s chain specification.
//!
//! Each case is a row (1 to 300 entries, or 2,000 to 5,000 in the large-row test; peaked,
//! flat, tied, with `-inf` entries, f32/f16/bf16), an optional mask, a history, a random
//! sequence of stages in random order with random parameters, and a uniform. The
//! parameters are partly chosen against the reference's own candidates before the stage
//! (a top-p equal to a cumulative probability, a top-k equal to the candidates' count or
//! the row length, a min-p or epsilon equal to a candidate's probability), so that cuts
//! land on their boundaries. The chain must give, against the reference: the same kept
//! set in the same order, the same probabilities, the same token for the uniform, and
//! the same errors.
//!
//! Tolerance: probabilities agree to 1e-9 relative. The reference and the chain compute
//! each weight `exp((l - l_max) / T)` by the same `f64` formula; they may sum the weights
//! in different orders, which moves a total by at most about `n * 2^-52` relative (about
//! 1e-12 at 5,000 candidates), so 1e-9 leaves a wide margin and still catches any other
//! formula. For the same reason, a decision taken within 1e-9 (relative) of its boundary
//! by the reference (a cumulative weight against top-p's or typical-p's target, a
//! probability against epsilon's or eta's cut, a scaled logit against `ln(min_p)`, a
//! logit against top-n-sigma's floor) could go either way under another summation order:
//! such a case is not compared. `exact_boundaries_agree` checks the boundaries whose sums
//! are exact in any order. The draw itself is exact, so the token for the uniform is
//! compared even next to a cumulative boundary (tests/exact_draw.rs places uniforms on
//! them).

use logits::half::{bf16, f16};
use logits::reference::{self, ChainState, Step};
use logits::{
    Chain, EpsilonCutoff, Error, EtaCutoff, History, LogitBias, MinP, Penalties, Stage,
    Temperature, TokenId, TokenMask, TopK, TopNSigma, TopP, TypicalP,
};
use proptest::prelude::*;

mod mix;
use mix::{shaped_row as make_row, Mix};

/// Relative distance from a boundary below which a decision is not compared.
const MARGIN: f64 = 1e-9;
/// Relative tolerance of the probabilities.
const PROB_TOL: f64 = 1e-9;

/// A stage before its parameters are resolved against the candidates it will see.
#[derive(Clone, Debug)]
struct Spec {
    kind: u8,
    mode: u8,
    x: f64,
    keep: usize,
    ids: Vec<(prop::sample::Index, f32)>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0u8..10,
        0u8..8,
        0.0f64..1.0,
        prop_oneof![5 => Just(1usize), 3 => 2usize..6, 1 => 6usize..40],
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                prop_oneof![6 => -5.0f32..5.0, 1 => Just(f32::NEG_INFINITY)],
            ),
            1..5,
        ),
    )
        .prop_map(|(kind, mode, x, keep, ids)| Spec {
            kind,
            mode,
            x,
            keep,
            ids,
        })
}

/// The cumulative weights of `state`'s candidates in draw order, and their total.
fn cumulative(state: &ChainState) -> (Vec<f64>, f64) {
    let mut cum = Vec::new();
    let mut c = 0.0;
    for x in state.scaled() {
        c += x.weight();
        cum.push(c);
    }
    (cum, c)
}

/// Typical-p's distances `|-ln p - H|` with each candidate's weight and logit, sorted
/// by distance, ties to the lower id; and the total weight.
fn distances(state: &ChainState) -> (Vec<(f64, f64, f32)>, f64) {
    let c = state.scaled();
    let total: f64 = c.iter().map(|x| x.weight()).sum();
    let ln_total = total.ln();
    let h: f64 = -c
        .iter()
        .filter(|x| x.weight() > 0.0)
        .map(|x| x.weight() / total * (x.scaled - ln_total))
        .sum::<f64>();
    let mut d: Vec<(f64, f64, f32, TokenId)> = c
        .iter()
        .map(|x| {
            (
                (-(x.scaled - ln_total) - h).abs(),
                x.weight(),
                x.logit,
                x.id,
            )
        })
        .collect();
    d.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.3.cmp(&b.3)));
    (d.into_iter().map(|(d, w, l, _)| (d, w, l)).collect(), total)
}

fn entropy(state: &ChainState) -> f64 {
    let c = state.scaled();
    let total: f64 = c.iter().map(|x| x.weight()).sum();
    -c.iter()
        .filter(|x| x.weight() > 0.0)
        .map(|x| x.weight() / total * (x.scaled - total.ln()))
        .sum::<f64>()
}

/// The concrete step of `s`, its parameters chosen from the candidates of `state` (the
/// reference's, before the step) for the boundary modes.
fn resolve(s: &Spec, state: &ChainState, vocab: usize) -> Step {
    let len = state.candidates.len();
    let pick = |x: f64| ((x * len as f64) as usize).min(len.saturating_sub(1));
    let probs = state.distribution();
    match s.kind {
        0 => Step::Bias(
            s.ids
                .iter()
                .map(|(i, b)| (i.index(vocab) as TokenId, *b))
                .collect(),
        ),
        1 => Step::Penalties {
            repetition: if s.mode < 3 {
                1.0
            } else {
                0.5 + 1.5 * s.x as f32
            },
            frequency: if s.mode.is_multiple_of(2) {
                0.0
            } else {
                s.ids[0].1.clamp(-1.0, 1.0) * 0.5
            },
            presence: if s.mode.is_multiple_of(3) {
                0.0
            } else {
                1.0 - 2.0 * s.x as f32
            },
            window: if s.mode < 5 {
                None
            } else {
                Some(1 + s.keep * 3)
            },
            penalize_prompt: s.mode != 4,
        },
        2 => Step::Temperature(match s.mode {
            0 => 1.0,
            1 => 0.5,
            _ => (0.2 + 1.8 * s.x) as f32,
        }),
        3 => Step::TopK {
            k: match s.mode {
                0 | 1 => len.max(1),
                2 => vocab,
                3 => (len + 1).max(1),
                4 => len.saturating_sub(1).max(1),
                5 => 1,
                _ => 1 + (s.x * 60.0) as usize,
            },
            min_keep: s.keep,
        },
        4 => {
            let (cum, total) = cumulative(state);
            let p = if s.mode < 4 && !cum.is_empty() {
                let at = (cum[pick(s.x)] / total) as f32;
                match s.mode {
                    0 | 1 => at,
                    2 => at.next_up(),
                    _ => at.next_down(),
                }
            } else if s.mode == 4 {
                1.0
            } else {
                (0.05 + 0.95 * s.x) as f32
            };
            Step::TopP {
                p: p.clamp(f32::MIN_POSITIVE, 1.0),
                min_keep: s.keep,
            }
        }
        5 => {
            let p = match s.mode {
                0 | 1 if len > 0 => (probs[pick(s.x)].1 / probs[0].1) as f32,
                2 => 1.0,
                3 => 0.0,
                _ => (0.5 * s.x) as f32,
            };
            Step::MinP {
                p: p.clamp(0.0, 1.0),
                min_keep: s.keep,
            }
        }
        6 => {
            let (d, total) = distances(state);
            let p = if s.mode < 3 && !d.is_empty() {
                let upto: f64 = d[..=pick(s.x)].iter().map(|x| x.1).sum();
                (upto / total) as f32
            } else if s.mode == 3 {
                1.0
            } else {
                (0.1 + 0.9 * s.x) as f32
            };
            Step::Typical {
                p: p.clamp(f32::MIN_POSITIVE, 1.0),
                min_keep: s.keep,
            }
        }
        7 | 8 => {
            let exact = if s.mode < 3 && len > 0 {
                Some(probs[pick(s.x)].1 as f32)
            } else {
                None
            };
            let epsilon = exact
                .filter(|&e| e > 0.0 && e < 1.0)
                .unwrap_or((1e-5f64 * (3e4f64).powf(s.x)) as f32);
            if s.kind == 7 {
                Step::Epsilon {
                    epsilon,
                    min_keep: s.keep,
                }
            } else {
                Step::Eta {
                    epsilon,
                    min_keep: s.keep,
                }
            }
        }
        _ => Step::TopNSigma {
            n: (0.05 + 3.0 * s.x) as f32,
        },
    }
}

/// The chain's stage for `step`.
fn stage(step: &Step) -> Box<dyn Stage> {
    match *step {
        Step::Bias(ref b) => Box::new(LogitBias::new(b.iter().copied()).unwrap()),
        Step::Penalties {
            repetition,
            frequency,
            presence,
            window,
            penalize_prompt,
        } => {
            let mut p = Penalties::new(repetition, frequency, presence)
                .unwrap()
                .penalize_prompt(penalize_prompt);
            if let Some(n) = window {
                p = p.window(n);
            }
            Box::new(p)
        }
        Step::Temperature(t) => Box::new(Temperature::new(t).unwrap()),
        Step::TopK { k, min_keep } => Box::new(TopK::new(k).unwrap().min_keep(min_keep)),
        Step::TopP { p, min_keep } => Box::new(TopP::new(p).unwrap().min_keep(min_keep)),
        Step::MinP { p, min_keep } => Box::new(MinP::new(p).unwrap().min_keep(min_keep)),
        Step::Typical { p, min_keep } => Box::new(TypicalP::new(p).unwrap().min_keep(min_keep)),
        Step::Epsilon { epsilon, min_keep } => {
            Box::new(EpsilonCutoff::new(epsilon).unwrap().min_keep(min_keep))
        }
        Step::Eta { epsilon, min_keep } => {
            Box::new(EtaCutoff::new(epsilon).unwrap().min_keep(min_keep))
        }
        Step::TopNSigma { n } => Box::new(TopNSigma::new(n).unwrap()),
        _ => unreachable!("a step without a stage"),
    }
}

/// The smallest distance of a cumulative sum from `target`, relative to `total`.
fn cum_margin(cum: &[f64], target: f64, total: f64) -> f64 {
    cum.iter()
        .map(|&c| (c - target).abs() / total.max(f64::MIN_POSITIVE))
        .fold(f64::INFINITY, f64::min)
}

/// True when the reference takes the cut of `step` on `state` within [`MARGIN`] of its
/// boundary, so that another summation order could take it the other way.
fn near_boundary(state: &ChainState, step: &Step) -> bool {
    let c = state.scaled();
    if c.is_empty() {
        return false;
    }
    let total: f64 = c.iter().map(|x| x.weight()).sum();
    let near_cut = |cut: f64| {
        c.iter()
            .any(|x| (x.weight() / total - cut).abs() <= MARGIN * cut)
    };
    match *step {
        Step::TopP { p, .. } if p < 1.0 => {
            let (cum, total) = cumulative(state);
            cum_margin(&cum, logits::as_decimal(p) * total, total) < MARGIN
        }
        Step::MinP { p, .. } if p > 0.0 => {
            // A token tied with the top one has `s - s_max = 0` exactly, whatever the
            // arithmetic, so min-p 1 keeps it for certain.
            let cut = logits::as_decimal(p).ln();
            c.iter()
                .any(|x| x.logit != c[0].logit && (x.scaled - cut).abs() < MARGIN)
        }
        Step::Typical { p, min_keep } if p < 1.0 && c.len() > 1 => {
            let (d, total) = distances(state);
            let mut cum = Vec::new();
            let mut s = 0.0;
            for x in &d {
                s += x.1;
                cum.push(s);
            }
            if cum_margin(&cum, logits::as_decimal(p) * total, total) < MARGIN {
                return true;
            }
            // Two different logits at nearly the same distance on either side of the
            // cut: another entropy's rounding could order them the other way.
            let target = logits::as_decimal(p) * total;
            let cross = cum.iter().position(|&x| x >= target).unwrap_or(d.len() - 1);
            let kept = d.iter().filter(|x| x.0 <= d[cross].0).count();
            let n = kept.max(min_keep).min(d.len());
            let close = |i: usize, j: usize| {
                d[i].2 != d[j].2 && (d[i].0 - d[j].0).abs() <= MARGIN * d[i].0.max(1.0)
            };
            (n < d.len() && close(n - 1, n)) || (cross + 1 < d.len() && close(cross, cross + 1))
        }
        Step::Epsilon { epsilon, .. } => near_cut(logits::as_decimal(epsilon)),
        Step::Eta { epsilon, .. } => {
            let eps = logits::as_decimal(epsilon);
            near_cut(eps.min(eps.sqrt() * (-entropy(state)).exp()))
        }
        Step::TopNSigma { n } if c.len() >= 2 => {
            let l: Vec<f64> = c.iter().map(|x| f64::from(x.logit)).collect();
            let mean = l.iter().sum::<f64>() / l.len() as f64;
            let sigma = (l.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / l.len() as f64).sqrt();
            let floor = l[0] - f64::from(n) * sigma;
            // The top logit is always kept; only those below it can be near the floor.
            l.iter()
                .filter(|&&x| x < l[0])
                .any(|&x| (x - floor).abs() <= MARGIN * (l[0].abs() + f64::from(n) * sigma))
        }
        _ => false,
    }
}

/// Which element type the chain reads the row in.
#[derive(Clone, Copy, Debug)]
enum Elem {
    F32,
    F16,
    Bf16,
}

#[derive(Clone, Debug)]
struct Case {
    row: Vec<f32>,
    elem: Elem,
    mask: Option<TokenMask>,
    prompt: Vec<TokenId>,
    accepted: Vec<TokenId>,
    specs: Vec<Spec>,
    greedy: bool,
    u: f64,
    seed: u64,
}

fn case(len: std::ops::Range<usize>) -> impl Strategy<Value = Case> {
    (
        (0u8..7, len, any::<u64>()),
        prop_oneof![Just(Elem::F32), Just(Elem::F16), Just(Elem::Bf16)],
        prop_oneof![3 => Just(None), 1 => (any::<u64>(), 0u8..4).prop_map(Some)],
        (
            prop::collection::vec(any::<prop::sample::Index>(), 0..40),
            prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ),
        prop::collection::vec(spec(), 0..8),
        (prop::bool::weighted(0.15), 0.0f64..1.0, any::<u64>()),
    )
        .prop_map(
            |((shape, n, seed), elem, mask, (prompt, accepted), specs, (greedy, u, s))| {
                let row = make_row(shape, n, seed);
                let mask = mask.map(|(ms, density)| {
                    let mut r = Mix(ms);
                    let mut m = TokenMask::new_empty(n);
                    for id in 0..n as TokenId {
                        // Mostly allowed, half allowed, a few allowed, none.
                        let allow = match density {
                            0 => !r.next().is_multiple_of(4),
                            1 => r.next().is_multiple_of(2),
                            2 => r.next().is_multiple_of(50),
                            _ => false,
                        };
                        if allow {
                            m.allow(id).unwrap();
                        }
                    }
                    m
                });
                let ids = |v: Vec<prop::sample::Index>| {
                    v.iter().map(|i| i.index(n) as TokenId).collect::<Vec<_>>()
                };
                Case {
                    row,
                    elem,
                    mask,
                    prompt: ids(prompt),
                    accepted: ids(accepted),
                    specs,
                    greedy,
                    u,
                    seed: s,
                }
            },
        )
}

/// The chain of `steps` over `n` tokens, its history filled with the case's prompt and
/// accepted tokens.
fn build(c: &Case, steps: &[Step], n: usize) -> Chain {
    let mut b = Chain::builder(n).seed(c.seed);
    for s in steps {
        b = b.boxed_stage(stage(s));
    }
    let mut chain = if c.greedy { b.greedy() } else { b.draw() }
        .build()
        .unwrap();
    chain.push_prompt(&c.prompt).unwrap();
    for &t in &c.accepted {
        chain.accept(t).unwrap();
    }
    chain
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= PROB_TOL * a.abs().max(b.abs())
}

/// Runs the case with the row read as `T` (`exact` holds the same values in `f32`).
fn check_as<T: logits::Logit>(c: &Case, row: &[T], exact: &[f32]) -> Result<(), TestCaseError> {
    let n = exact.len();
    let tokens: Vec<TokenId> = c.prompt.iter().chain(&c.accepted).copied().collect();
    let history = History::new(&tokens, c.prompt.len());
    let mask = c.mask.as_ref();

    // Resolve the steps against the reference's candidates, and note whether any cut is
    // taken next to its boundary.
    let mut steps = Vec::new();
    let mut conditioned = true;
    let mut state = reference::chain_start(exact, n, &history, mask).ok();
    for s in &c.specs {
        let probe = state.clone().unwrap_or(ChainState {
            candidates: Vec::new(),
            temperature: 1.0,
        });
        let step = resolve(s, &probe, n);
        if let Some(st) = state.as_mut() {
            conditioned &= !near_boundary(st, &step);
            if reference::chain_step(st, &step, n, &history).is_err() {
                state = None;
            }
        }
        steps.push(step);
    }

    let want = reference::chain_survivors(exact, n, &history, mask, &steps);
    let mut chain = build(c, &steps, n);
    let mut got = vec![(u32::MAX, -1.0)];
    let res = chain.distribution(row, mask, &mut got);
    prop_assert_eq!(
        chain.history().tokens(),
        &tokens[..],
        "distribution moved the history"
    );
    let drawn = chain.sample_with_uniform(row, mask, c.u);
    let want = match want {
        Err(e) => {
            prop_assert_eq!(res, Err(e.clone()), "steps {:?}", steps);
            prop_assert_eq!(drawn.map(|x| x.token), Err(e));
            prop_assert_eq!(chain.history().tokens(), &tokens[..]);
            return Ok(());
        }
        Ok(w) => w,
    };
    prop_assert!(res.is_ok(), "{:?} for steps {:?}", res, steps);
    let drawn = drawn.unwrap();
    prop_assert_eq!(chain.history().tokens().last(), Some(&drawn.token));
    if c.greedy {
        let token = reference::chain_greedy(exact, n, &history, mask, &steps).unwrap();
        if conditioned {
            prop_assert_eq!(&got, &vec![(token, 1.0)], "steps {:?}", steps);
            prop_assert_eq!(drawn.token, token);
            prop_assert_eq!(drawn.logprob, 0.0);
        }
        return Ok(());
    }
    if !conditioned {
        return Ok(());
    }
    let ids: Vec<TokenId> = got.iter().map(|x| x.0).collect();
    let want_ids: Vec<TokenId> = want.iter().map(|x| x.0).collect();
    prop_assert_eq!(ids, want_ids, "steps {:?}", steps);
    for (a, b) in got.iter().zip(&want) {
        prop_assert!(close(a.1, b.1), "token {}: {} vs {}", a.0, a.1, b.1);
    }
    // The draw is exact (independent of summation order): the token is compared at
    // every uniform, next to a cumulative boundary too.
    let (token, logprob) = reference::chain_sample(exact, n, &history, mask, &steps, c.u).unwrap();
    prop_assert_eq!(drawn.token, token, "u {} steps {:?}", c.u, steps);
    prop_assert!(
        (f64::from(drawn.logprob) - logprob).abs() <= 1e-6 * logprob.abs().max(1.0),
        "logprob {} vs {}",
        drawn.logprob,
        logprob
    );
    Ok(())
}

fn check(c: &Case) -> Result<(), TestCaseError> {
    match c.elem {
        Elem::F32 => check_as(c, &c.row, &c.row),
        Elem::F16 => {
            let h: Vec<f16> = c.row.iter().map(|&x| f16::from_f32(x)).collect();
            let exact: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
            check_as(c, &h, &exact)
        }
        Elem::Bf16 => {
            let b: Vec<bf16> = c.row.iter().map(|&x| bf16::from_f32(x)).collect();
            let exact: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
            check_as(c, &b, &exact)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Short rows: every stage, random order and parameters, against the reference.
    #[test]
    fn random_chains_match_reference(c in case(1..300)) {
        check(&c)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Rows of 2,000 to 5,000 entries.
    #[test]
    fn random_chains_on_large_rows_match_reference(c in case(2000..5000)) {
        check(&c)?;
    }
}

/// A case with no randomness left: no mask, history or specs (the steps are given
/// separately).
fn fixed(row: &[f32], u: f64) -> Case {
    Case {
        row: row.to_vec(),
        elem: Elem::F32,
        mask: None,
        prompt: Vec::new(),
        accepted: Vec::new(),
        specs: Vec::new(),
        greedy: false,
        u,
        seed: 0,
    }
}

/// Chain against reference for fixed steps, comparing exactly: for boundaries whose sums
/// are exact in any order (weights 0 and 1, dyadic probabilities).
fn check_fixed(row: &[f32], steps: &[Step], u: f64) {
    let c = fixed(row, u);
    let n = row.len();
    let history = History::new(&[], 0);
    let want = reference::chain_survivors(row, n, &history, None, steps).unwrap();
    let mut chain = build(&c, steps, n);
    let mut got = Vec::new();
    chain.distribution(row, None, &mut got).unwrap();
    assert_eq!(got, want, "steps {steps:?}");
    let (token, _) = reference::chain_sample(row, n, &history, None, steps, u).unwrap();
    assert_eq!(
        chain.sample_with_uniform(row, None, u).unwrap().token,
        token
    );
}

/// Cuts exactly at their boundaries, where every summation order gives the same sums:
/// top-p reaching `p` exactly keeps the crossing token, min-p 1 keeps the top ties, a
/// top-k of the whole row keeps every finite token, epsilon equal to a probability keeps
/// it, typical-p keeps every token tied at the cut-off distance.
#[test]
fn exact_boundaries_agree() {
    let ninf = f32::NEG_INFINITY;
    // Four tied tokens (weight 1), one banned, two whose weight underflows to exactly 0.
    let flat = [0.0f32, 0.0, -0.0, 0.0, ninf, -1000.0, -1000.0];
    let one = |s: Step| vec![s];
    let cases: Vec<(Vec<Step>, usize)> = vec![
        (
            one(Step::TopP {
                p: 0.5,
                min_keep: 1,
            }),
            2,
        ),
        (
            one(Step::TopP {
                p: 0.25,
                min_keep: 1,
            }),
            1,
        ),
        (
            one(Step::TopP {
                p: 0.25,
                min_keep: 3,
            }),
            3,
        ),
        (
            one(Step::MinP {
                p: 1.0,
                min_keep: 1,
            }),
            4,
        ),
        (one(Step::TopK { k: 7, min_keep: 1 }), 6),
        (one(Step::TopK { k: 2, min_keep: 3 }), 3),
        (
            one(Step::Typical {
                p: 0.5,
                min_keep: 1,
            }),
            4,
        ),
        (
            one(Step::Epsilon {
                epsilon: 0.25,
                min_keep: 1,
            }),
            4,
        ),
        (
            vec![
                Step::TopK { k: 4, min_keep: 1 },
                Step::Epsilon {
                    epsilon: 0.25,
                    min_keep: 1,
                },
            ],
            4,
        ),
        (
            vec![
                Step::TopK { k: 4, min_keep: 1 },
                Step::Temperature(0.5),
                Step::TopP {
                    p: 0.75,
                    min_keep: 1,
                },
            ],
            3,
        ),
        (
            vec![
                Step::TopK { k: 4, min_keep: 1 },
                Step::Typical {
                    p: 0.3,
                    min_keep: 1,
                },
            ],
            4,
        ),
    ];
    for (steps, kept) in cases {
        let n = flat.len();
        let got =
            reference::chain_survivors(&flat, n, &History::new(&[], 0), None, &steps).unwrap();
        assert_eq!(got.len(), kept, "{steps:?}");
        for u in [0.0, 0.3, 0.5, 0.9] {
            check_fixed(&flat, &steps, u);
        }
    }
    // Every candidate exactly flat: top-n-sigma keeps them all.
    check_fixed(&[2.5; 9], &[Step::TopNSigma { n: 0.5 }], 0.4);
}

/// The chain and the reference refuse the same inputs with the same errors, and an
/// error leaves the history as it was.
#[test]
fn errors_agree() {
    let n = 40;
    let steps = vec![
        Step::Bias(vec![(3, 1.0)]),
        Step::TopK { k: 10, min_keep: 1 },
        Step::Temperature(0.7),
        Step::TopP {
            p: 0.9,
            min_keep: 1,
        },
    ];
    let mut nan = make_row(1, n, 5);
    nan[17] = f32::NAN;
    nan[30] = f32::INFINITY;
    let mut inf = make_row(1, n, 6);
    inf[21] = f32::INFINITY;
    let banned = vec![f32::NEG_INFINITY; n];
    let ok = make_row(0, n, 7);
    let none = TokenMask::new_empty(n);
    let short = TokenMask::new_full(n - 1);
    let mut every_bias = steps.clone();
    every_bias.insert(
        0,
        Step::Bias((0..n as TokenId).map(|i| (i, f32::NEG_INFINITY)).collect()),
    );
    type ErrorCase<'a> = (&'a [f32], Option<&'a TokenMask>, &'a [Step], Error);
    let cases: Vec<ErrorCase<'_>> = vec![
        (&nan, None, &steps, Error::NanLogit { index: 17 }),
        (&inf, None, &steps, Error::InfiniteLogit { index: 21 }),
        (&banned, None, &steps, Error::NoCandidates),
        (&ok, Some(&none), &steps, Error::NoCandidates),
        (&ok, None, &every_bias, Error::NoCandidates),
        (
            &ok,
            Some(&short),
            &steps,
            Error::LengthMismatch {
                expected: n,
                actual: n - 1,
            },
        ),
        (
            &nan,
            Some(&short),
            &steps,
            Error::LengthMismatch {
                expected: n,
                actual: n - 1,
            },
        ),
    ];
    let history = History::new(&[1, 2], 2);
    for (row, mask, steps, want) in cases {
        let reference = reference::chain_survivors(row, n, &history, mask, steps);
        assert_eq!(reference, Err(want.clone()), "reference, {want:?}");
        for greedy in [false, true] {
            let c = Case {
                greedy,
                prompt: vec![1, 2],
                ..fixed(row, 0.5)
            };
            let mut chain = build(&c, steps, n);
            let mut out = Vec::new();
            assert_eq!(chain.distribution(row, mask, &mut out), Err(want.clone()));
            assert_eq!(
                chain.sample_with_uniform(row, mask, 0.5).map(|s| s.token),
                Err(want.clone())
            );
            let b: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
            assert_eq!(
                chain.sample_with_uniform(&b, mask, 0.5).map(|s| s.token),
                Err(want.clone())
            );
            assert_eq!(chain.history().tokens(), &[1, 2]);
        }
    }
    // A uniform outside [0, 1) is refused before the row is read.
    let mut chain = build(&fixed(&ok, 0.5), &steps, n);
    for u in [1.0, -0.1, f64::NAN] {
        assert!(matches!(
            chain.sample_with_uniform(&ok, None, u),
            Err(Error::InvalidParameter { name: "u", .. })
        ));
    }
    assert!(chain.history().tokens().is_empty());
}

/// `LogitBias` documents [`Error::TokenOutOfRange`] for an id outside the vocabulary, and
/// the reference gives it wherever the stage is; the chain refuses it when it is built,
/// whatever the stage's position.
#[test]
fn bias_out_of_the_vocabulary_after_a_cut_is_refused() {
    let n = 8;
    let row = make_row(1, n, 3);
    let history = History::new(&[], 0);
    let want = Error::TokenOutOfRange {
        id: 100,
        vocab_size: n,
    };
    for steps in [
        vec![Step::Bias(vec![(100, 1.0)])],
        vec![
            Step::TopK { k: 4, min_keep: 1 },
            Step::Bias(vec![(100, 1.0)]),
        ],
    ] {
        let reference = reference::chain_survivors(&row, n, &history, None, &steps);
        assert_eq!(reference, Err(want.clone()), "reference, {steps:?}");
        let mut b = Chain::builder(n);
        for s in &steps {
            b = b.boxed_stage(stage(s));
        }
        assert_eq!(b.draw().build().unwrap_err(), want, "chain, {steps:?}");
    }
}

/// [`Error::InfiniteLogit`] names the token id of the logit an adjustment overflowed to
/// `+inf`, as the reference does, also after a cut has reordered the candidates.
#[test]
fn overflow_after_a_cut_reports_the_token_id() {
    let n = 4;
    let row = [1.0f32, 3.0e38, 2.0, 0.0];
    let history = History::new(&[], 0);
    let want = Error::InfiniteLogit { index: 1 };
    for steps in [
        vec![Step::Bias(vec![(1, 3.0e38)])],
        vec![
            Step::TopK { k: 2, min_keep: 1 },
            Step::Bias(vec![(1, 3.0e38)]),
        ],
    ] {
        let reference = reference::chain_survivors(&row, n, &history, None, &steps);
        assert_eq!(reference, Err(want.clone()), "reference, {steps:?}");
        let mut chain = build(&fixed(&row, 0.5), &steps, n);
        let mut out = Vec::new();
        assert_eq!(
            chain.distribution(&row, None, &mut out),
            Err(want.clone()),
            "chain, {steps:?}"
        );
    }
}
