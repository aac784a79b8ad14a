//! Epsilon, eta, top-n-sigma, mirostat v2, XTC and typical-p as the first stage of a chain
//! run on the row in place: a vectorised statistic bounds their floor (XTC: the row's mass
//! against which the tokens near the maximum are compared with its threshold; typical-p:
//! the centre from which it measures its distances), and the stage's own `f64` code
//! decides only when a token lies within that bound. These tests run each chain twice, once as built
//! and once with the stage wrapped in a user stage (which the engine can only run
//! through `apply`, on the dense copy of the row), and require the same kept tokens in
//! the same order, the same probabilities, the same tokens for a set of uniforms and the
//! same errors.
//!
//! The probabilities agree to [`PROB_TOL`] rather than bit for bit: when the wrapped
//! stage keeps every token, the dense path hands the untouched row to the histogram
//! kernels, whose `f64` weights may differ from `Candidates`' in the last bits.

use logits::half::{bf16, f16};
use logits::{
    Chain, DynamicTemperature, EpsilonCutoff, EtaCutoff, Logit, LogitBias, MirostatV2, Penalties,
    Stage, Temperature, TokenId, TokenMask, TopK, TopNSigma, TypicalP, Xtc,
};
use proptest::prelude::*;

mod mix;
use mix::{opaque::Opaque, shaped_row, Mix};

/// Relative tolerance of the probabilities (see the module documentation).
const PROB_TOL: f64 = 1e-12;

#[derive(Clone, Copy, Debug)]
enum Rule {
    Epsilon(f32, usize),
    Eta(f32, usize),
    Sigma(f32),
    Mirostat(f32),
    /// Probability, threshold, strict, `min_keep`, special tokens 0 and 1.
    Xtc(f32, f32, bool, usize, bool),
    /// Mass, `min_keep`.
    Typical(f32, usize),
    /// Dynamic temperature 0.8 with a range and an exponent.
    DynTemp(f32, f32),
}

fn stage(rule: Rule) -> Box<dyn Stage> {
    match rule {
        Rule::Epsilon(e, k) => Box::new(EpsilonCutoff::new(e).unwrap().min_keep(k)),
        Rule::Eta(e, k) => Box::new(EtaCutoff::new(e).unwrap().min_keep(k)),
        Rule::Sigma(n) => Box::new(TopNSigma::new(n).unwrap()),
        Rule::Mirostat(tau) => Box::new(MirostatV2::new(tau, 0.1).unwrap()),
        Rule::Xtc(p, thr, strict, k, special) => {
            let x = Xtc::new(p, thr)
                .unwrap()
                .strict_threshold(strict)
                .min_keep(k);
            Box::new(if special { x.special_tokens([0, 1]) } else { x })
        }
        Rule::Typical(m, k) => Box::new(TypicalP::new(m).unwrap().min_keep(k)),
        Rule::DynTemp(d, e) => Box::new(DynamicTemperature::new(0.8, d, e).unwrap()),
    }
}

#[derive(Clone, Debug)]
struct Case {
    row: Vec<f32>,
    rule: Rule,
    /// 0: temperature 0.8 after the stage; 1: top-k 5, then temperature 0.7; 2: nothing;
    /// 3 and 4: llama.cpp's order after the stage, top-k 40 or 20,000 (more than a flat
    /// row's floor keeps), then temperature 0.8.
    tail: u8,
    bias: bool,
    penalties: bool,
    history: Vec<TokenId>,
    mask: Option<Vec<bool>>,
    dtype: u8,
}

fn case(len: std::ops::Range<usize>) -> impl Strategy<Value = Case> {
    (
        (len, 0u8..7, any::<u64>()),
        (0u8..7, 0usize..5, 0u8..9),
        (0u8..5, any::<bool>(), any::<bool>(), 0u8..3, 0u8..3),
    )
        .prop_map(
            |((n, shape, seed), (kind, keep, p), (tail, bias, pen, mask, dtype))| {
                let row = shaped_row(shape, n, seed);
                let eps = [1e-4f32, 3e-4, 1e-3, 0.01, 0.05, 0.2, 0.5, 0.9, 0.999][p as usize];
                let rule = match kind {
                    0 => Rule::Epsilon(eps, keep + 1),
                    1 => Rule::Eta(eps, keep + 1),
                    2 => Rule::Mirostat(
                        [0.1f32, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 20.0][p as usize],
                    ),
                    3 => Rule::Xtc(
                        if seed % 3 == 0 { 0.5 } else { 1.0 },
                        [0.0f32, 0.01, 0.05, 0.1, 0.2, 0.25, 0.3, 1.0 / 3.0, 0.5][p as usize],
                        seed % 5 == 0,
                        [1, 1, 2, 3, 60][keep],
                        seed % 7 < 2,
                    ),
                    4 => {
                        Rule::Sigma([0.1f32, 0.5, 1.0, 1.5, 2.0, 3.0, 0.01, 4.0, 1e-3][p as usize])
                    }
                    5 => Rule::Typical(
                        [0.05f32, 0.2, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1.0][p as usize],
                        [1, 1, 2, 3, 60][keep],
                    ),
                    _ => Rule::DynTemp(
                        [0.1f32, 0.3, 0.5, 0.8, 1.0, 0.0, 0.5, 2.0, 0.05][p as usize],
                        [0.0f32, 0.5, 1.0, 2.0, 4.0][keep],
                    ),
                };
                let mut r = Mix(seed ^ 0x5151);
                let history = (0..8).map(|_| (r.next() % n as u64) as TokenId).collect();
                let mask = match mask {
                    0 => None,
                    1 => Some((0..n).map(|_| !r.next().is_multiple_of(4)).collect()),
                    _ => Some((0..n).map(|_| r.next().is_multiple_of(16)).collect()),
                };
                Case {
                    row,
                    rule,
                    tail,
                    bias,
                    penalties: pen,
                    history,
                    mask,
                    dtype,
                }
            },
        )
}

/// A case of `row` with `rule` and `tail` alone: no bias, penalties, history or mask,
/// `f32`.
fn plain(row: Vec<f32>, rule: Rule, tail: u8) -> Case {
    Case {
        row,
        rule,
        tail,
        bias: false,
        penalties: false,
        history: Vec::new(),
        mask: None,
        dtype: 0,
    }
}

fn build(c: &Case, wrap: bool) -> Chain {
    let n = c.row.len();
    let mut b = Chain::builder(n);
    if c.bias {
        let entries = [
            (0, 3.0f32),
            ((n / 2) as TokenId, -2.0),
            ((n - 1) as TokenId, 1.5),
        ];
        b = b.stage(LogitBias::new(entries).unwrap());
    }
    if c.penalties {
        b = b.stage(Penalties::new(1.3, 0.2, 0.1).unwrap());
    }
    let s = stage(c.rule);
    b = if wrap {
        b.stage(Opaque(s))
    } else {
        b.boxed_stage(s)
    };
    b = match c.tail {
        0 => b.stage(Temperature::new(0.8).unwrap()),
        1 => b
            .stage(TopK::new(5).unwrap())
            .stage(Temperature::new(0.7).unwrap()),
        3 | 4 => b
            .stage(TopK::new(if c.tail == 3 { 40 } else { 20_000 }).unwrap())
            .stage(Temperature::new(0.8).unwrap()),
        _ => b,
    };
    let mut chain = b.draw().seed(11).logprobs(3).build().unwrap();
    for &t in &c.history {
        chain.accept(t).unwrap();
    }
    chain
}

fn mask_of(c: &Case) -> Option<TokenMask> {
    c.mask.as_ref().map(|allowed| {
        let mut m = TokenMask::new_empty(allowed.len());
        for (i, &a) in allowed.iter().enumerate() {
            if a {
                m.allow(i as TokenId).unwrap();
            }
        }
        m
    })
}

/// Logprobs from probabilities within [`PROB_TOL`]: equal, or within an `f32` ulp or two.
fn close32(a: f32, b: f32) -> bool {
    a == b || (a - b).abs() <= 4.0 * f32::EPSILON * a.abs().max(1.0)
}

/// Logprobs as `rule` reports them: within an ulp or two, or for dynamic temperature
/// first (whose logprobs are at the bracket's lower temperature, within a millionth of
/// the stage's) within `1e-5` of the logprob's magnitude.
fn close_for(rule: Rule, a: f32, b: f32) -> bool {
    match rule {
        Rule::DynTemp(..) => a == b || (a - b).abs() <= 1e-5 * a.abs().max(1.0),
        _ => close32(a, b),
    }
}

fn check_as<T: Logit>(c: &Case, row: &[T]) -> Result<(), TestCaseError> {
    let mask = mask_of(c);
    let (mut fast, mut slow) = (build(c, false), build(c, true));
    let (mut df, mut ds) = (Vec::new(), Vec::new());
    let rf = fast.distribution(row, mask.as_ref(), &mut df);
    let rs = slow.distribution(row, mask.as_ref(), &mut ds);
    prop_assert_eq!(&rf, &rs);
    if rf.is_err() {
        return Ok(());
    }
    let ids = |d: &[(TokenId, f64)]| d.iter().map(|&(i, _)| i).collect::<Vec<_>>();
    prop_assert_eq!(ids(&df), ids(&ds), "{:?}", c.rule);
    for (a, b) in df.iter().zip(&ds) {
        prop_assert!(
            (a.1 - b.1).abs() <= PROB_TOL * b.1,
            "{:?}: {} vs {}",
            c.rule,
            a.1,
            b.1
        );
    }
    // Five steps in a row: a stateful stage (mirostat's `mu`) moves its floor.
    let (mut f, mut s) = (build(c, false), build(c, true));
    for u in [0.3, 0.7, 0.1, 0.95, 0.5] {
        let a = f.sample_with_uniform(row, mask.as_ref(), u).unwrap();
        let b = s.sample_with_uniform(row, mask.as_ref(), u).unwrap();
        prop_assert_eq!(a.token, b.token);
    }
    for u in [0.0, 0.25, 0.5, 0.9, 0.999_999] {
        let (mut f, mut s) = (build(c, false), build(c, true));
        let a = f.sample_with_uniform(row, mask.as_ref(), u).unwrap();
        let b = s.sample_with_uniform(row, mask.as_ref(), u).unwrap();
        prop_assert_eq!(a.token, b.token);
        prop_assert!(
            close_for(c.rule, a.logprob, b.logprob),
            "{:?} vs {:?}",
            a,
            b
        );
        prop_assert_eq!(a.alternatives().len(), b.alternatives().len());
        for (x, y) in a.alternatives().iter().zip(b.alternatives()) {
            prop_assert_eq!(x.token, y.token);
            prop_assert!(
                close_for(c.rule, x.logprob, y.logprob),
                "{:?} vs {:?}",
                a,
                b
            );
        }
    }
    Ok(())
}

fn check(c: &Case) -> Result<(), TestCaseError> {
    match c.dtype {
        0 => check_as(c, &c.row),
        1 => check_as(
            c,
            &c.row.iter().map(|&l| f16::from_f32(l)).collect::<Vec<_>>(),
        ),
        _ => check_as(
            c,
            &c.row.iter().map(|&l| bf16::from_f32(l)).collect::<Vec<_>>(),
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn floor_stages_first_match_their_own_apply(c in case(1..400)) {
        check(&c)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn floor_stages_first_match_their_own_apply_on_large_rows(c in case(20_000..40_000)) {
        check(&c)?;
    }
}

/// XTC and dynamic temperature first with a temperature alone after them, on rows long
/// enough (151,936 logits) that the draw selects the row's best tokens from the block
/// maxima the stage's pass recorded: peaked, heavy-tailed and tied rows, with and
/// without bias, penalties and a mask, in `f32` and `bf16`.
#[test]
fn xtc_and_dynamic_temperature_first_draw_from_the_block_maxima_as_their_own_apply() {
    let n = 151_936;
    let rules = [
        Rule::Xtc(1.0, 0.1, false, 1, false),
        Rule::Xtc(1.0, 0.05, true, 1, true),
        Rule::DynTemp(0.5, 1.0),
        Rule::DynTemp(0.3, 0.0),
    ];
    for (i, rule) in rules.into_iter().enumerate() {
        for (shape, seed) in [(0u8, 3u64), (5, 4), (2, 5)] {
            let row = shaped_row(shape, n, seed + 10 * i as u64);
            for (bias, penalties, mask, dtype) in [
                (false, false, 0u8, 0u8),
                (true, true, 0, 2),
                (false, false, 1, 0),
            ] {
                let mut r = Mix(seed ^ 0x77);
                let mut c = plain(row.clone(), rule, 0);
                (c.bias, c.penalties, c.dtype) = (bias, penalties, dtype);
                c.history = (0..8).map(|_| (r.next() % n as u64) as TokenId).collect();
                c.mask = (mask == 1).then(|| (0..n).map(|_| !r.next().is_multiple_of(4)).collect());
                check(&c).unwrap_or_else(|e| panic!("{rule:?}, shape {shape}: {e}"));
            }
        }
    }
}

/// Rows built so that a token sits exactly on the floor, where the fast statistic must
/// hand the decision to the stage's own arithmetic.
#[test]
fn tokens_on_the_floor_are_decided_exactly() {
    let ln = |p: f64| p.ln() as f32;
    let cases: Vec<(Vec<f32>, Rule)> = vec![
        // Probabilities 1/2, 1/4, 1/4: epsilon 0.25 keeps all three.
        (vec![ln(0.5), ln(0.25), ln(0.25)], Rule::Epsilon(0.25, 1)),
        (
            vec![ln(0.5), ln(0.25), ln(0.125), ln(0.125)],
            Rule::Epsilon(0.125, 1),
        ),
        // Four equal logits and one below: sigma 0 would keep only the top.
        (vec![2.0, 2.0, 2.0, 2.0, 1.0], Rule::Sigma(2.0)),
        // Mean 0.5, sigma 0.5: the floor max - 1 * sigma is exactly 0.5.
        (vec![1.0, 0.0, 1.0, 0.0, 0.5], Rule::Sigma(1.0)),
        (vec![3.0; 64], Rule::Sigma(1.0)),
        (vec![3.0; 64], Rule::Epsilon(1.0 / 64.0, 1)),
        (vec![3.0; 64], Rule::Eta(0.5, 2)),
        // mu = 2 tau = 4: the cut 2^-4 = 1/16 exactly, four tokens of 1/16 and one of 3/4.
        (
            vec![ln(0.75), ln(0.0625), ln(0.0625), ln(0.0625), ln(0.0625)],
            Rule::Mirostat(2.0),
        ),
        (vec![3.0; 64], Rule::Mirostat(3.0)),
        // Probabilities 1/2, 1/4, 1/4 against XTC's threshold 1/4, strict or not; 1/4
        // and 1/2 of 1/2, 1/4, 1/8, 1/8.
        (
            vec![ln(0.5), ln(0.25), ln(0.25)],
            Rule::Xtc(1.0, 0.25, false, 1, false),
        ),
        (
            vec![ln(0.5), ln(0.25), ln(0.25)],
            Rule::Xtc(1.0, 0.25, true, 1, false),
        ),
        (
            vec![ln(0.5), ln(0.25), ln(0.125), ln(0.125)],
            Rule::Xtc(1.0, 0.25, false, 1, false),
        ),
        (
            vec![ln(0.5), ln(0.25), ln(0.125), ln(0.125)],
            Rule::Xtc(1.0, 0.5, false, 1, false),
        ),
        (vec![3.0; 64], Rule::Xtc(1.0, 1.0 / 64.0, false, 1, false)),
        (vec![3.0; 4], Rule::Xtc(1.0, 0.25, false, 3, true)),
        // Typical-p on probabilities of powers of two, whose running weights reach the
        // target exactly at the cut; and on equal logits, every distance 0.
        (
            vec![ln(0.5), ln(0.25), ln(0.125), ln(0.125)],
            Rule::Typical(0.25, 1),
        ),
        (
            vec![ln(0.5), ln(0.25), ln(0.125), ln(0.125)],
            Rule::Typical(0.5, 1),
        ),
        (
            vec![ln(0.5), ln(0.25), ln(0.125), ln(0.125)],
            Rule::Typical(0.75, 1),
        ),
        (
            vec![ln(0.5), ln(0.25), ln(0.125), ln(0.125)],
            Rule::Typical(0.875, 2),
        ),
        (vec![3.0; 64], Rule::Typical(0.5, 1)),
        (vec![3.0; 64], Rule::Typical(0.5, 60)),
    ];
    for (row, rule) in cases {
        for tail in 0..5 {
            let c = plain(row.clone(), rule, tail);
            check(&c).unwrap_or_else(|e| panic!("{rule:?} on {row:?}: {e}"));
        }
    }
}

/// On flat rows the floor stages keep thousands of tokens; with llama.cpp's order after
/// them, the top-k takes the floor (and typical-p's bans) on the row in place. Top-k 40
/// cuts within the floor's survivors, top-k 20,000 past them on most of these rows.
#[test]
fn floor_stages_then_top_k_on_flat_rows() {
    let rules = [
        Rule::Epsilon(3e-4, 1),
        Rule::Eta(3e-4, 1),
        Rule::Mirostat(5.0),
        Rule::Sigma(1.0),
        Rule::Typical(0.95, 1),
        Rule::Typical(0.5, 1),
    ];
    for (shape, seed) in [(1u8, 3u64), (5, 4), (2, 5)] {
        let row = shaped_row(shape, 30_000, seed);
        for rule in rules {
            for tail in [3, 4] {
                check(&plain(row.clone(), rule, tail))
                    .unwrap_or_else(|e| panic!("{rule:?}, shape {shape}, tail {tail}: {e}"));
            }
        }
    }
}

/// Dynamic temperature first, with uniforms swept in steps of `1e-9` across the point
/// where the running mass in draw order passes a token at the stage's temperature: next
/// to it the draws at the two ends of the temperature's bracket disagree, and the
/// stage's own arithmetic decides.
#[test]
fn dynamic_temperature_draws_next_to_a_boundary_are_exact() {
    let row = shaped_row(1, 2_000, 9);
    let rule = Rule::DynTemp(0.5, 1.0);
    // The stage's temperature times the tail's 0.8, in plain `f64` (the chains' own
    // comparison decides the test).
    let m = f64::from(row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
    let w: Vec<f64> = row.iter().map(|&l| (f64::from(l) - m).exp()).collect();
    let z: f64 = w.iter().sum();
    let h: f64 = -w.iter().map(|&w| (w / z) * (w / z).ln()).sum::<f64>();
    let t = (0.3 + 1.0 * h / (row.len() as f64).ln()) * f64::from(0.8f32);
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    let wt: Vec<f64> = order
        .iter()
        .map(|&i| ((f64::from(row[i]) - m) / t).exp())
        .collect();
    let zt: f64 = wt.iter().sum();
    let boundary = wt[..6].iter().sum::<f64>() / zt;
    let (mut fast, mut slow) = (
        build(&plain(row.clone(), rule, 0), false),
        build(&plain(row.clone(), rule, 0), true),
    );
    let mut seen = Vec::new();
    for k in -60..60 {
        let u = boundary + f64::from(k) * 1e-9;
        let a = fast.sample_with_uniform(&row[..], None, u).unwrap();
        let b = slow.sample_with_uniform(&row[..], None, u).unwrap();
        assert_eq!(a.token, b.token, "u {u}");
        fast.reset();
        slow.reset();
        if !seen.contains(&a.token) {
            seen.push(a.token);
        }
    }
    assert_eq!(seen.len(), 2, "the sweep crosses one boundary: {seen:?}");
}

/// XTC's threshold crossed one `f32` step of a logit at a time, in a row of 3,000
/// tokens with the maximum at token 0. First token 1 moves across the value where its
/// probability, as the stage computes it in `f64`, reaches the threshold. Then, with token
/// 1 just above that value, token 2 moves deep in the tail, where one `f32` step changes
/// the stage's total by about `1e-12` of itself, far less than the error of an `f32`
/// mass: so its probability lies within that error of the threshold. On one side the
/// stage removes the maximum, on the other it keeps it.
#[test]
fn xtc_tokens_at_the_threshold_are_decided_exactly() {
    let n = 3_000;
    let mut r = Mix(0x7c7c);
    let mut row: Vec<f32> = (0..n)
        .map(|_| -6.0 + 3.0 * (r.next() % 1_000_000) as f32 / 1e6)
        .collect();
    row[0] = 6.0;
    row[2] = -20.0;
    // The stage's probability of token 1: `f64` weights against the maximum, summed in
    // id order.
    let p_of = |row: &[f32]| {
        let w = |x: f32| (f64::from(x) - 6.0).exp();
        w(row[1]) / row.iter().map(|&x| w(x)).sum::<f64>()
    };
    // The first `f32` in `[lo, hi]` at which `at(x)` holds (it holds at `hi`, not at `lo`).
    let first = |mut lo: f32, mut hi: f32, at: &dyn Fn(f32) -> bool| {
        assert!(at(hi) && !at(lo), "a crossing within [{lo}, {hi}]");
        while lo.next_up() < hi {
            let mid = 0.5 * (lo + hi);
            let mid = if mid <= lo { lo.next_up() } else { mid };
            if at(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    };
    let sweep = |row: &mut Vec<f32>, i: usize, at: f32, thr: f32| {
        let mut l = at;
        for _ in 0..24 {
            l = l.next_down();
        }
        for _ in 0..48 {
            row[i] = l;
            for strict in [false, true] {
                let c = plain(row.clone(), Rule::Xtc(1.0, thr, strict, 1, false), 2);
                check(&c)
                    .unwrap_or_else(|e| panic!("{thr}, token {i} at {l}, strict {strict}: {e}"));
            }
            l = l.next_up();
        }
    };
    for thr in [0.1f32, 0.25, 0.3] {
        let t = logits::as_decimal(thr);
        let coarse = first(-6.0, 6.0, &|x| {
            let mut r = row.clone();
            r[1] = x;
            p_of(&r) >= t
        });
        sweep(&mut row, 1, coarse, thr);
        row[1] = coarse;
        let fine = first(-30.0, -5.0, &|x| {
            let mut r = row.clone();
            r[2] = x;
            p_of(&r) < t
        });
        sweep(&mut row, 2, fine, thr);
        row[2] = -20.0;
    }
}

/// Typical-p's centre (as a logit) on `row` and the token at which the running weight,
/// in order of distance from it, reaches `mass` of the total: plain `f64`, to place
/// tokens near the cut (the chains' own comparison decides the test).
fn typical_geometry(row: &[f32], mass: f64) -> (f64, usize) {
    let m = f64::from(row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
    let w: Vec<f64> = row.iter().map(|&l| (f64::from(l) - m).exp()).collect();
    let z: f64 = w.iter().sum();
    let mean: f64 = row.iter().zip(&w).map(|(&l, &w)| w * f64::from(l)).sum();
    let c = mean / z;
    let d = |i: usize| (f64::from(row[i]) - c).abs();
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| d(a).total_cmp(&d(b)).then(a.cmp(&b)));
    let mut acc = 0.0;
    for &i in &order {
        acc += w[i];
        if acc >= mass * z {
            return (c, i);
        }
    }
    unreachable!("the running weight reaches the total")
}

/// A token is moved, in steps far finer than the bound on the fast centre, through the
/// point where its distance from typical-p's centre equals that of the token at the
/// cut, on the other side of the centre: the two swap places in the stage's order there,
/// and the fast path must leave every step it cannot order to the stage.
#[test]
fn typical_p_tokens_tied_at_the_cut_are_decided_exactly() {
    let n = 3_000;
    for (mass, seed) in [(0.5f32, 1u64), (0.9, 2), (0.95, 3)] {
        let mut r = Mix(0x7197 + seed);
        let mut row: Vec<f32> = (0..n)
            .map(|_| -6.0 + 4.0 * (r.next() % 1_000_000) as f32 / 1e6)
            .collect();
        row[0] = 2.0;
        row[1] = 1.0;
        let m = logits::as_decimal(mass);
        let (c, k) = typical_geometry(&row, m);
        let side = (f64::from(row[k]) - c).signum();
        // The token nearest the mirror image of the cut's token, moved onto it, and the
        // whole row shifted so that the image lies at 0, where `f32` steps are finest.
        let j = (2..n)
            .filter(|&i| i != k)
            .min_by(|&a, &b| {
                let image = c - side * (f64::from(row[k]) - c).abs();
                let e = |i: usize| (f64::from(row[i]) - image).abs();
                e(a).total_cmp(&e(b))
            })
            .unwrap();
        for _ in 0..8 {
            let (c, _) = typical_geometry(&row, m);
            let image = c - side * (f64::from(row[k]) - c).abs();
            for l in row.iter_mut() {
                *l = (f64::from(*l) - image) as f32;
            }
            row[j] = 0.0;
        }
        let cut = typical_geometry(&row, m).1;
        assert!(
            cut == k || cut == j,
            "the cut at token {k} or {j}, not {cut}"
        );
        for step in -40..=40 {
            row[j] = step as f32 * 2.5e-8;
            for tail in [0, 2] {
                let c = plain(row.clone(), Rule::Typical(mass, 1), tail);
                check(&c).unwrap_or_else(|e| panic!("{mass}, token {j} at {}: {e}", row[j]));
            }
        }
    }
}

/// NaN, `+inf`, a mask that allows nothing: the same error either way.
#[test]
fn errors_are_those_of_the_dense_path() {
    let rows = [
        vec![0.0f32, f32::NAN, 1.0],
        vec![0.0f32, 1.0, f32::INFINITY],
        vec![f32::NEG_INFINITY; 3],
    ];
    for row in rows {
        for rule in [
            Rule::Epsilon(0.1, 1),
            Rule::Eta(0.1, 1),
            Rule::Sigma(1.0),
            Rule::Mirostat(3.0),
            Rule::Xtc(1.0, 0.1, false, 1, false),
            Rule::Typical(0.9, 1),
        ] {
            let c = plain(row.clone(), rule, 0);
            let (mut f, mut s) = (build(&c, false), build(&c, true));
            let a = f.sample(&row);
            assert!(a.is_err(), "{rule:?} on {row:?}");
            assert_eq!(a, s.sample(&row));
        }
    }
    let mut nothing = TokenMask::new_empty(3);
    nothing.clear_tail();
    let row = [1.0f32, 2.0, 3.0];
    let c = plain(row.to_vec(), Rule::Eta(0.01, 1), 0);
    let (mut f, mut s) = (build(&c, false), build(&c, true));
    let a = f.sample_masked(&row, &nothing);
    assert!(a.is_err());
    assert_eq!(a, s.sample_masked(&row, &nothing));
}
