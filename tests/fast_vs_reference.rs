//! The fast paths on vocabulary-sized rows against the sort-based reference.
//!
//! The fast sampler reads rows in blocks, keeps sparse adjustments as patches, selects
//! top-k in one pass and finds top-p/min-p boundaries through a histogram filled with an
//! `f32` exp, falling back to `f64` weights when a decision is within the fast weights'
//! error bound. These tests use rows large enough to cross many blocks and buckets and
//! check, against `logits::reference`: the same kept set (same order), probabilities to
//! 1e-6, the same token for the same uniform, and the same errors.
//!
//! Tolerance: the reference sums weights in sorted order; the fast path sums them in
//! another order. The two can only disagree when the reference itself decides within
//! floating rounding of a boundary, so each comparison is made when the reference's
//! margin (top-p cumulative mass against `p * total`, scaled logit against `ln min_p`,
//! the draw's cumulative mass against `u * total`) exceeds 1e-9 relative; cases below
//! that are skipped, and `near_boundaries_take_the_precise_path` checks margins of
//! 1e-8 explicitly.

use logits::half::{bf16, f16};
use logits::reference::{self, Candidate};
use logits::{BatchSampler, Error, History, Sampler, SamplingParams, TokenId, TokenMask};
use proptest::prelude::*;

mod mix;
use mix::Mix;

/// Row shapes: a peaked row, a flat one, heavy ties, many `-inf`, almost all `-inf`,
/// a huge dynamic range.
fn make_row(shape: u8, n: usize, seed: u64) -> Vec<f32> {
    let mut r = Mix(seed);
    let mut row: Vec<f32> = match shape {
        0 => (0..n).map(|_| (2.0 * r.normal()) as f32).collect(),
        1 => (0..n).map(|_| r.normal() as f32).collect(),
        2 => (0..n).map(|_| (r.next() % 9) as f32 * 0.5).collect(),
        3 => (0..n)
            .map(|_| {
                if r.next().is_multiple_of(3) {
                    f32::NEG_INFINITY
                } else {
                    (3.0 * r.normal()) as f32
                }
            })
            .collect(),
        4 => vec![f32::NEG_INFINITY; n],
        _ => (0..n).map(|_| (300.0 * r.normal()) as f32).collect(),
    };
    if shape == 0 || shape == 4 {
        for _ in 0..(1 + r.next() % 40) {
            let i = (r.next() % n as u64) as usize;
            row[i] = (8.0 + 7.0 * r.unit()) as f32;
        }
    }
    if shape == 2 {
        // A tie at the very top, across blocks.
        row[n - 1] = 4.0;
        row[n / 3] = 4.0;
    }
    row
}

fn margin(w: &[f64], target: f64) -> f64 {
    let total: f64 = w.iter().sum();
    let mut cum = 0.0;
    let mut m = f64::INFINITY;
    for &x in w {
        cum += x;
        m = m.min((cum - target).abs() / total.max(f64::MIN_POSITIVE));
    }
    m
}

/// True when the reference's decisions are more than 1e-9 (relative) from a boundary.
fn well_conditioned(adjusted: &[f32], p: &SamplingParams, survivors: &[Candidate], u: f64) -> bool {
    if p.is_greedy() {
        return true;
    }
    let Ok(mut c) = reference::candidates(adjusted, p.temperature()) else {
        return true;
    };
    if let Some(k) = p.top_k() {
        c = reference::top_k(&c, k, p.min_tokens_to_keep());
    }
    if p.top_p() < 1.0 {
        let w: Vec<f64> = c.iter().map(Candidate::weight).collect();
        let total: f64 = w.iter().sum();
        if margin(&w, logits::as_decimal(p.top_p()) * total) < 1e-9 {
            return false;
        }
    }
    let cut = logits::as_decimal(p.min_p()).ln();
    if p.min_p() > 0.0 && c.iter().any(|x| (x.scaled - cut).abs() < 1e-9) {
        return false;
    }
    let w: Vec<f64> = survivors.iter().map(Candidate::weight).collect();
    let total: f64 = w.iter().sum();
    margin(&w, u * total) > 1e-9
}

#[derive(Clone, Debug)]
struct Case {
    row: Vec<f32>,
    params: SamplingParams,
    prompt: Vec<TokenId>,
    mask: Option<TokenMask>,
    u: f64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (0u8..6, 1usize..5000, any::<u64>()),
        (
            prop_oneof![1 => Just(0.0f32), 8 => 0.2f32..2.0],
            prop_oneof![3 => Just(None), 2 => (1usize..40).prop_map(Some), 1 => (200usize..700).prop_map(Some)],
            prop_oneof![2 => Just(1.0f32), 3 => 0.05f32..1.0, 1 => 0.99f32..1.0],
            prop_oneof![3 => Just(0.0f32), 1 => 0.0001f32..0.5],
            1usize..4,
        ),
        (
            prop_oneof![3 => Just(1.0f32), 1 => 0.5f32..2.0],
            prop_oneof![3 => Just(0.0f32), 1 => -1.0f32..1.0],
            prop::collection::vec((any::<prop::sample::Index>(), prop_oneof![-5.0f32..5.0, Just(f32::NEG_INFINITY)]), 0..4),
            prop::collection::vec(any::<prop::sample::Index>(), 0..70),
            prop_oneof![4 => Just(None), 1 => any::<u64>().prop_map(Some)],
        ),
        0.0f64..1.0,
    )
        .prop_map(|((shape, n, seed), (t, k, top_p, min_p, keep), (rep, presence, bias, hist, mask_seed), u)| {
            let row = make_row(shape, n, seed);
            let mut b = SamplingParams::builder()
                .temperature(t)
                .top_p(top_p)
                .min_p(min_p)
                .min_tokens_to_keep(keep)
                .repetition_penalty(rep)
                .presence_penalty(presence)
                .penalty_window(64);
            if let Some(k) = k {
                b = b.top_k(k);
            }
            for (i, v) in bias {
                b = b.logit_bias(i.index(n) as TokenId, v);
            }
            let params = b.build().unwrap();
            let prompt: Vec<TokenId> = hist.iter().map(|i| i.index(n) as TokenId).collect();
            let mask = mask_seed.map(|s| {
                let mut r = Mix(s);
                let mut m = TokenMask::new_empty(n);
                for id in 0..n as TokenId {
                    if !r.next().is_multiple_of(4) {
                        m.allow(id).unwrap();
                    }
                }
                m
            });
            Case { row, params, prompt, mask, u }
        })
}

/// Checks the sampler on `row` (given as `T`) against the reference on `exact` (the
/// same values in `f32`).
fn check<T: logits::Logit>(c: &Case, row: &[T], exact: &[f32]) -> Result<(), TestCaseError> {
    let n = exact.len();
    let history = History::new(&c.prompt, c.prompt.len());
    let expected = reference::adjust(exact, n, &c.params, &history, c.mask.as_ref())
        .and_then(|a| reference::survivors(&a, &c.params).map(|s| (a, s)));
    let mut s = Sampler::new(c.params.clone(), n).unwrap();
    s.push_prompt(&c.prompt).unwrap();
    let mut got = Vec::new();
    let res = s.distribution(row, c.mask.as_ref(), &mut got);
    let drawn = s.sample_with_uniform(row, c.mask.as_ref(), c.u);
    match expected {
        Err(e) => {
            prop_assert_eq!(res, Err(e.clone()));
            prop_assert_eq!(drawn.map(|x| x.token), Err(e));
        }
        Ok((adjusted, survivors)) => {
            prop_assert!(res.is_ok(), "{:?}", res);
            if !well_conditioned(&adjusted, &c.params, &survivors, c.u) {
                return Ok(());
            }
            let want = reference::normalize(&survivors);
            let ids: Vec<TokenId> = got.iter().map(|x| x.0).collect();
            let want_ids: Vec<TokenId> = want.iter().map(|x| x.0).collect();
            prop_assert_eq!(ids, want_ids);
            for (a, b) in got.iter().zip(&want) {
                prop_assert!((a.1 - b.1).abs() < 1e-6, "{} vs {}", a.1, b.1);
            }
            let drawn = drawn.unwrap();
            let token = if c.params.is_greedy() {
                survivors[0].id
            } else {
                reference::draw(&survivors, c.u)
            };
            prop_assert_eq!(drawn.token, token);
            let p = want.iter().find(|x| x.0 == token).unwrap().1;
            prop_assert!((f64::from(drawn.probability()) - p).abs() < 1e-6);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    /// Same kept set, probabilities and token as the reference, on f32 rows.
    #[test]
    fn large_rows_match_reference(c in case()) {
        check(&c, &c.row, &c.row)?;
    }

    /// bf16 and f16 rows sample exactly as their values in f32.
    #[test]
    fn half_rows_match_reference(c in case()) {
        let b: Vec<bf16> = c.row.iter().map(|&x| bf16::from_f32(x)).collect();
        let exact: Vec<f32> = b.iter().map(|x| x.to_f32()).collect();
        check(&c, &b, &exact)?;
        let h: Vec<f16> = c.row.iter().map(|&x| f16::from_f32(x.clamp(-6e4, 6e4))).collect();
        let exact: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
        check(&c, &h, &exact)?;
    }

    /// The first NaN or +inf is reported, wherever it is (a block, the remainder), in
    /// every element type and on every path.
    #[test]
    fn first_bad_value_is_reported(n in 1usize..3000, seed in any::<u64>(), bad in prop::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 1..3), path in 0u8..4) {
        let mut row = make_row(0, n, seed);
        for (i, nan) in &bad {
            row[i.index(n)] = if *nan { f32::NAN } else { f32::INFINITY };
        }
        let first = row
            .iter()
            .position(|x| x.is_nan() || *x == f32::INFINITY)
            .unwrap();
        let want = if row[first].is_nan() { Error::NanLogit { index: first } } else { Error::InfiniteLogit { index: first } };
        let params = match path {
            0 => SamplingParams::greedy(),
            1 => SamplingParams::builder().top_k(20).build().unwrap(),
            2 => SamplingParams::builder().top_p(0.9).build().unwrap(),
            _ => SamplingParams::builder().min_p(0.1).build().unwrap(),
        };
        let mut s = Sampler::new(params, n).unwrap();
        prop_assert_eq!(s.sample(&row).map(|x| x.token), Err(want.clone()));
        let b: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
        prop_assert_eq!(s.sample(&b).map(|x| x.token), Err(want));
    }
}

/// Finite values whose lane sums overflow must not be mistaken for `+inf`.
#[test]
fn huge_finite_logits_are_not_errors() {
    let n = 4099;
    let row: Vec<f32> = (0..n)
        .map(|i| if i % 2 == 0 { 3.0e38 } else { -3.0e38 })
        .collect();
    for params in [
        SamplingParams::greedy(),
        SamplingParams::builder().top_k(5).build().unwrap(),
        SamplingParams::builder().top_p(0.5).build().unwrap(),
    ] {
        let mut s = Sampler::new(params, n).unwrap();
        let out = s.sample(&row).unwrap();
        assert_eq!(row[out.token as usize], 3.0e38);
    }
}

/// Greedy with ties across blocks and a banned maximum.
#[test]
fn greedy_ties_and_banned_maximum() {
    let n = 151_936;
    let mut row = make_row(0, n, 3);
    row[100_001] = 40.0;
    row[70_000] = 40.0;
    row[150_000] = 40.0;
    let mut s = Sampler::new(SamplingParams::greedy(), n).unwrap();
    assert_eq!(s.sample(&row).unwrap().token, 70_000);
    let p = SamplingParams::builder()
        .temperature(0.0)
        .logit_bias(70_000, f32::NEG_INFINITY)
        .build()
        .unwrap();
    let mut s = Sampler::new(p, n).unwrap();
    assert_eq!(s.sample(&row).unwrap().token, 100_001);
    let b: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
    assert_eq!(s.sample(&b).unwrap().token, 100_001);
}

/// Targets 1e-8 (relative) from a cumulative boundary, well inside the fast weights'
/// error bound: only the precise path can decide, and it must decide as the
/// reference does.
#[test]
fn near_boundaries_take_the_precise_path() {
    let n = 20_000;
    let row = make_row(1, n, 11);
    let all = reference::candidates(&row, 1.0).unwrap();
    let w: Vec<f64> = all.iter().map(Candidate::weight).collect();
    let total: f64 = w.iter().sum();
    let cum: Vec<f64> = w
        .iter()
        .scan(0.0, |c, &x| {
            *c += x;
            Some(*c)
        })
        .collect();
    let mut checked = 0;
    for k in [3usize, 200, 5_000, 12_000, 17_500] {
        // Top-p with the f32 p nearest to a boundary.
        let p = (cum[k] / total) as f32;
        let params = SamplingParams::builder().top_p(p).build().unwrap();
        let survivors = reference::survivors(&row, &params).unwrap();
        let ws: Vec<f64> = survivors.iter().map(Candidate::weight).collect();
        if margin(&w, logits::as_decimal(p) * total) > 1e-9 {
            let mut s = Sampler::new(params.clone(), n).unwrap();
            let mut got = Vec::new();
            s.distribution(&row, None, &mut got).unwrap();
            assert_eq!(got.len(), survivors.len(), "p = {p}");
            // The fast path decides the cut and draws.
            let u = 0.5;
            let token = s.sample_with_uniform(&row, None, u).unwrap().token;
            assert_eq!(token, reference::draw(&survivors, u), "p = {p}");
            checked += 1;
        }
        // The draw with a uniform 1e-8 from a cumulative boundary of the survivors.
        let sub: f64 = ws.iter().sum();
        let j = ws.len() / 2;
        let c: f64 = ws[..j].iter().sum();
        for eps in [1e-8, -1e-8] {
            let u = (c + eps * sub) / sub;
            let mut s = Sampler::new(params.clone(), n).unwrap();
            let token = s.sample_with_uniform(&row, None, u).unwrap().token;
            assert_eq!(token, reference::draw(&survivors, u), "p = {p}, u = {u}");
            // And with no cut.
            let u = (cum[k] + eps * total) / total;
            let mut s = Sampler::new(SamplingParams::default(), n).unwrap();
            let token = s.sample_with_uniform(&row, None, u).unwrap().token;
            let everything = reference::survivors(&row, &SamplingParams::default()).unwrap();
            assert_eq!(token, reference::draw(&everything, u), "u = {u}");
            checked += 1;
        }
    }
    assert!(
        checked >= 10,
        "only {checked} cases were far enough from rounding"
    );
    // Few tokens, so that single weights' f32 errors are not averaged away: uniforms
    // 3e-9 (relative) from every boundary.
    for seed in 0..40u64 {
        let row: Vec<f32> = make_row(1, 37, seed).iter().map(|x| 4.0 * x).collect();
        let everything = reference::survivors(&row, &SamplingParams::default()).unwrap();
        let w: Vec<f64> = everything.iter().map(Candidate::weight).collect();
        let total: f64 = w.iter().sum();
        let mut c = 0.0;
        for &x in &w[..w.len() - 1] {
            c += x;
            for eps in [3e-9, -3e-9] {
                let u = (c + eps * total) / total;
                if !(0.0..1.0).contains(&u) {
                    continue;
                }
                let mut s = Sampler::new(SamplingParams::default(), row.len()).unwrap();
                let token = s.sample_with_uniform(&row, None, u).unwrap().token;
                assert_eq!(
                    token,
                    reference::draw(&everything, u),
                    "seed {seed}, u = {u}"
                );
            }
        }
    }
}

/// A batch gives the same tokens as the rows sampled one by one (with the `rayon`
/// feature, in parallel).
#[test]
fn batch_equals_sequential() {
    let n = 30_011;
    let rows: Vec<f32> = (0..6).flat_map(|i| make_row(i % 4, n, i as u64)).collect();
    let params = |i: usize| {
        let b = match i % 3 {
            0 => SamplingParams::builder().top_p(0.9),
            1 => SamplingParams::builder()
                .temperature(0.6)
                .top_k(20)
                .top_p(0.95),
            _ => SamplingParams::builder()
                .min_p(0.05)
                .repetition_penalty(1.2),
        };
        b.seed(i as u64).build().unwrap()
    };
    let mut batch = BatchSampler::new(
        (0..6)
            .map(|i| Sampler::new(params(i), n).unwrap())
            .collect(),
    );
    let mut singles: Vec<Sampler> = (0..6)
        .map(|i| Sampler::new(params(i), n).unwrap())
        .collect();
    for _ in 0..5 {
        let out: Vec<Result<TokenId, Error>> = batch
            .sample(&rows, n)
            .unwrap()
            .iter()
            .map(|r| r.as_ref().map(|s| s.token).map_err(Clone::clone))
            .collect();
        let want: Vec<Result<TokenId, Error>> = singles
            .iter_mut()
            .zip(rows.chunks_exact(n))
            .map(|(s, row)| s.sample(row).map(|x| x.token))
            .collect();
        assert_eq!(out, want);
    }
}

/// [`check`] on an unmasked `f32` row with no prompt, for each uniform of `us`.
fn check_uniforms(row: &[f32], params: &SamplingParams, us: &[f64]) {
    for &u in us {
        let c = Case {
            row: row.to_vec(),
            params: params.clone(),
            prompt: Vec::new(),
            mask: None,
            u,
        };
        check(&c, &c.row, &c.row).unwrap();
    }
}

/// Top-p without top-k on rows whose nucleus is a few tokens, between the first 1,024
/// candidates and 4,096, and beyond (the three ways the sampler finds it), at several
/// temperatures and uniforms: the same kept set, probabilities and token as the
/// reference.
#[test]
fn top_p_nuclei_of_every_size_match_reference() {
    let n = 40_000;
    let mut sizes = Vec::new();
    for (seed, sigma) in [(1u64, 2.0f64), (2, 1.2), (3, 0.7), (4, 0.3)] {
        let mut r = Mix(seed);
        let mut row: Vec<f32> = (0..n).map(|_| (sigma * r.normal()) as f32).collect();
        for _ in 0..30 {
            let i = (r.next() % n as u64) as usize;
            row[i] = (6.0 + 6.0 * r.unit()) as f32;
        }
        for (top_p, t) in [
            (0.5f32, 1.0f32),
            (0.9, 1.0),
            (0.95, 1.0),
            (0.99, 0.7),
            (0.999, 1.3),
        ] {
            let params = SamplingParams::builder()
                .temperature(t)
                .top_p(top_p)
                .build()
                .unwrap();
            sizes.push(reference::survivors(&row, &params).unwrap().len());
            check_uniforms(&row, &params, &[0.0, 0.37, 0.93, 0.999_9]);
        }
    }
    // A `min_tokens_to_keep` of 2,500 starts the selection there; the nucleus needs a
    // second, capped at 4,096.
    let mut row = vec![f32::NEG_INFINITY; n];
    row[..2_600].fill(0.0);
    let params = SamplingParams::builder()
        .top_p(0.999)
        .min_tokens_to_keep(2_500)
        .build()
        .unwrap();
    check_uniforms(&row, &params, &[0.0, 0.5, 0.999]);
    assert!(sizes.iter().any(|&s| s <= 1024), "{sizes:?}");
    assert!(sizes.iter().any(|&s| s > 1024 && s <= 2048), "{sizes:?}");
    assert!(sizes.iter().any(|&s| s > 4096), "{sizes:?}");
}

/// Top-p beyond the candidates' reach (so through the histogram) on a flat row whose
/// maximum a bias lowers and another token a bias raises, with a repetition penalty on
/// a prompt: the histogram starts from the candidates' best, which must be the adjusted
/// row's maximum. The same kept set, probabilities and token as the reference.
#[test]
fn flat_top_p_with_patches_matches_reference() {
    let n = 40_000;
    let mut r = Mix(11);
    let row: Vec<f32> = (0..n).map(|_| r.normal() as f32).collect();
    let top = (0..n).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
    let params = SamplingParams::builder()
        .top_p(0.9)
        .logit_bias(top as TokenId, -3.0)
        .logit_bias(7, 2.5)
        .repetition_penalty(1.3)
        .build()
        .unwrap();
    let prompt: Vec<TokenId> = (0..64).map(|i| (i * 613 % n) as TokenId).collect();
    for u in [0.001, 0.2, 0.5, 0.77, 0.999] {
        let c = Case {
            row: row.clone(),
            params: params.clone(),
            prompt: prompt.clone(),
            mask: None,
            u,
        };
        check(&c, &c.row, &c.row).unwrap();
    }
}

/// Top-p alone on peaked rows, at values of `p` next to the cumulative sums of the best
/// 100 to 1,000 tokens. The total mass is the candidates' exact weights plus the rest of
/// the row below the last candidate, so the rows test each way a token can lie around
/// that split: 40 tokens tied with the last candidate, a bias that lifts a background
/// token among the candidates and one that drops a peak below them, ten biased to just
/// below the last candidate, a repetition penalty over a prompt, and (in the second round) a mask that bans every seventh
/// token. The same kept set, probabilities and token as the reference.
#[test]
fn peaked_top_p_near_its_boundaries_matches_reference() {
    let n = 40_000;
    let mut r = Mix(23);
    let mut row: Vec<f32> = (0..n).map(|_| (2.0 * r.normal()) as f32).collect();
    for _ in 0..36 {
        let i = (r.next() % n as u64) as usize;
        row[i] = (8.0 + 7.0 * r.unit()) as f32;
    }
    let mut sorted = row.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let floor = sorted[1_023];
    let mut tied = 0;
    while tied < 40 {
        let i = (r.next() % n as u64) as usize;
        if row[i] < floor {
            row[i] = floor;
            tied += 1;
        }
    }
    let peak = (0..n).find(|&i| row[i] >= 8.0).unwrap();
    let low = (0..n).find(|&i| row[i].abs() < 0.5).unwrap();
    let prompt: Vec<TokenId> = (0..64).map(|i| (i * 613 % n) as TokenId).collect();
    let mut mask = TokenMask::new_full(n);
    for id in (0..n).step_by(7).filter(|&i| i != peak && i != low) {
        mask.disallow(id as TokenId).unwrap();
    }
    let mut decided = 0;
    for mask in [None, Some(mask)] {
        let mut base = SamplingParams::builder()
            .logit_bias(low as TokenId, 9.0)
            .logit_bias(peak as TokenId, -20.0)
            .repetition_penalty(1.3);
        // Ten tokens biased to just below the last candidate: patches at the top of
        // the rest of the row.
        for id in (1..n).step_by(3_989).take(10) {
            base = base.logit_bias(id as TokenId, floor - 0.05 - row[id]);
        }
        let history = History::new(&prompt, prompt.len());
        let params = base.clone().build().unwrap();
        let adjusted = reference::adjust(&row, n, &params, &history, mask.as_ref()).unwrap();
        let w: Vec<f64> = reference::candidates(&adjusted, 1.0)
            .unwrap()
            .iter()
            .map(Candidate::weight)
            .collect();
        let total: f64 = w.iter().sum();
        for k in [100usize, 400, 700, 1_000] {
            let at: f64 = w[..k].iter().sum::<f64>() / total;
            let p = at as f32;
            for p in [p.next_down(), p, p.next_up(), p + 1e-6, p - 1e-6] {
                let c = Case {
                    row: row.clone(),
                    params: base.clone().top_p(p).build().unwrap(),
                    prompt: prompt.clone(),
                    mask: mask.clone(),
                    u: 0.37,
                };
                if margin(&w, logits::as_decimal(p) * total) > 1e-9 {
                    decided += 1;
                }
                check(&c, &c.row, &c.row).unwrap();
            }
        }
    }
    assert!(
        decided >= 30,
        "only {decided} cases were far enough from rounding"
    );
}
