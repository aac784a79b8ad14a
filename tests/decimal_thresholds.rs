//! Probability thresholds mean the decimal that was written (`logits::as_decimal`): a
//! threshold of 0.8 compares at 0.8, not at the `f32` 0.800000011920929, in the `Sampler`,
//! every `Chain` position and the reference.
//!
//! Each case builds a row whose compared quantity lies strictly between the written
//! decimal and the widened `f32`, so that the two readings keep different sets, and
//! checks every path keeps the set the decimal reading does.

use logits::reference::{self, Candidate};
use logits::{
    as_decimal, Chain, EpsilonCutoff, EtaCutoff, MinP, Sampler, SamplingParams, Stage, TokenId,
    TopP, TypicalP,
};

mod mix;
use mix::opaque::Opaque;

/// The tokens the final distribution keeps, sorted by id.
fn kept_ids(dist: &[(TokenId, f64)]) -> Vec<TokenId> {
    let mut ids: Vec<TokenId> = dist.iter().map(|&(id, _)| id).collect();
    ids.sort_unstable();
    ids
}

/// The kept set as the draws see it: the tokens drawn at uniforms spread over `[0, 1)`,
/// including the last one below 1 (which lands on the last kept token).
fn drawn_ids(mut draw: impl FnMut(f64) -> TokenId) -> Vec<TokenId> {
    let mut ids: Vec<TokenId> = (0..64)
        .map(|i| f64::from(i) / 64.0)
        .chain([1.0 - f64::EPSILON])
        .map(&mut draw)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// A two-token row `[m, x]` (padded to `len` with logits that weigh nothing) whose
/// logit gap `x - m` is `delta` to well within the windows below: `x` is the `f32`
/// nearest `delta`, and a tiny `m` makes up the rest, exactly in `f64`.
fn row_with_gap(delta: f64, len: usize) -> Vec<f32> {
    let x = delta as f32;
    let m = (f64::from(x) - delta) as f32;
    let mut row = vec![-1.0e4f32; len];
    row[0] = m;
    row[1] = x;
    row
}

/// The gap in `(lo, hi)` at which `q(gap)` is half way between `a` and `b` (`q` monotone).
fn gap_between(q: impl Fn(f64) -> f64, a: f64, b: f64, (mut lo, mut hi): (f64, f64)) -> f64 {
    let mid = 0.5 * (a + b);
    let up = q(hi) > q(lo);
    for _ in 0..200 {
        let g = 0.5 * (lo + hi);
        if (q(g) < mid) == up {
            lo = g;
        } else {
            hi = g;
        }
    }
    0.5 * (lo + hi)
}

/// The probabilities of tokens 0 and 1 of a two-token row with gap `g` (`x - m`).
fn p0(g: f64) -> f64 {
    1.0 / (1.0 + g.exp())
}
fn p1(g: f64) -> f64 {
    g.exp() / (1.0 + g.exp())
}

/// Checks that the `Sampler` with `params`, and the chains given, keep `expected` on
/// `row`, through the distribution and through the draws.
fn check_paths(
    row: &[f32],
    params: Option<SamplingParams>,
    chains: Vec<Chain>,
    expected: &[TokenId],
    what: &str,
) {
    if let Some(params) = params {
        let mut s = Sampler::new(params, row.len()).unwrap();
        let mut dist = Vec::new();
        s.distribution(row, None, &mut dist).unwrap();
        assert_eq!(kept_ids(&dist), expected, "{what}: Sampler::distribution");
        let got = drawn_ids(|u| s.sample_with_uniform(row, None, u).unwrap().token);
        assert_eq!(got, expected, "{what}: Sampler draws");
    }
    for (i, mut chain) in chains.into_iter().enumerate() {
        let mut dist = Vec::new();
        chain.distribution(row, None, &mut dist).unwrap();
        assert_eq!(kept_ids(&dist), expected, "{what}: chain {i} distribution");
        let got = drawn_ids(|u| chain.sample_with_uniform(row, None, u).unwrap().token);
        assert_eq!(got, expected, "{what}: chain {i} draws");
    }
}

fn reference_ids(c: &[Candidate]) -> Vec<TokenId> {
    let mut ids: Vec<TokenId> = c.iter().map(|x| x.id).collect();
    ids.sort_unstable();
    ids
}

#[test]
fn top_p_keeps_the_prefix_that_holds_exactly_the_written_mass() {
    // Transformers' case: [0.3, 0.1, 0.1, 0.5] at top-p 0.8 keeps {3, 0}, which hold
    // 0.8000000042 of the mass from these f32 logits: below the widened f32, above 0.8.
    let probs = [0.3f64, 0.1, 0.1, 0.5];
    for len in [4, 151_936] {
        let mut row = vec![-1.0e4f32; len];
        for (i, p) in probs.iter().enumerate() {
            row[i] = p.ln() as f32;
        }
        let c = reference::candidates(&row, 1.0).unwrap();
        let head: f64 = c[..2].iter().map(Candidate::weight).sum::<f64>()
            / c.iter().map(Candidate::weight).sum::<f64>();
        assert!(as_decimal(0.8) < head && head < f64::from(0.8f32), "{head}");
        assert_eq!(reference_ids(&reference::top_p(&c, 0.8, 1)), [0, 3]);
        let params = SamplingParams::builder().top_p(0.8).build().unwrap();
        let chains = both_positions(TopP::new(0.8).unwrap(), len);
        check_paths(
            &row,
            Some(params),
            chains,
            &[0, 3],
            &format!("top-p, {len}"),
        );
    }
}

#[test]
fn top_p_reads_a_threshold_the_f32_rounds_down_as_its_decimal() {
    // f32(0.9) = 0.89999997615814: a top token with 0.899999988 of the mass reaches the
    // f32 but not 0.9, so the second token stays.
    let g = gap_between(p0, f64::from(0.9f32), 0.9, (-3.0, -1.0));
    for len in [2, 151_936] {
        let row = row_with_gap(g, len);
        let c = reference::candidates(&row, 1.0).unwrap();
        let q = c[0].weight() / c.iter().map(Candidate::weight).sum::<f64>();
        assert!(f64::from(0.9f32) < q && q < 0.9, "{q}");
        assert_eq!(reference_ids(&reference::top_p(&c, 0.9, 1)), [0, 1]);
        let params = SamplingParams::builder().top_p(0.9).build().unwrap();
        let chains = both_positions(TopP::new(0.9).unwrap(), len);
        check_paths(
            &row,
            Some(params),
            chains,
            &[0, 1],
            &format!("top-p 0.9, {len}"),
        );
    }
}

#[test]
fn min_p_compares_the_ratio_with_the_written_decimal() {
    // Token 1's probability is 0.1000000007 of the top one's: at least 0.1, below the
    // f32 0.100000001490116.
    let g = 0.5 * ((0.1f64).ln() + f64::from(0.1f32).ln());
    for len in [2, 151_936] {
        let row = row_with_gap(g, len);
        let gap = f64::from(row[1]) - f64::from(row[0]);
        assert!(
            as_decimal(0.1).ln() < gap && gap < f64::from(0.1f32).ln(),
            "{gap}"
        );
        let c = reference::candidates(&row, 1.0).unwrap();
        assert_eq!(reference_ids(&reference::min_p(&c, 0.1, 1)), [0, 1]);
        let params = SamplingParams::builder().min_p(0.1).build().unwrap();
        let chains = both_positions(MinP::new(0.1).unwrap(), len);
        check_paths(
            &row,
            Some(params),
            chains,
            &[0, 1],
            &format!("min-p, {len}"),
        );
    }
}

/// Two chains of `stage` alone: as planned (lowered onto the kernels where the engine
/// knows the stage) and hidden from the planner (the stage's own `apply`).
fn both_positions<S: Stage + Clone + 'static>(stage: S, len: usize) -> Vec<Chain> {
    vec![
        Chain::builder(len)
            .stage(stage.clone())
            .draw()
            .build()
            .unwrap(),
        Chain::builder(len)
            .stage(Opaque(Box::new(stage)))
            .draw()
            .build()
            .unwrap(),
    ]
}

#[test]
fn the_cut_offs_compare_with_the_written_decimal() {
    // Token 1 holds 0.1000000007 of the mass: at least epsilon 0.1, below its f32.
    // At this entropy eta's threshold is epsilon itself (sqrt(0.1) e^-H is 0.23).
    let g = gap_between(p1, 0.1, f64::from(0.1f32), (-3.0, -1.0));
    for len in [2, 151_936] {
        let row = row_with_gap(g, len);
        let c = reference::candidates(&row, 1.0).unwrap();
        let q = c[1].weight() / c.iter().map(Candidate::weight).sum::<f64>();
        assert!(0.1 < q && q < f64::from(0.1f32), "{q}");
        let eps = EpsilonCutoff::new(0.1).unwrap();
        check_paths(&row, None, both_positions(eps, len), &[0, 1], "epsilon");
        let eta = EtaCutoff::new(0.1).unwrap();
        check_paths(&row, None, both_positions(eta, len), &[0, 1], "eta");
    }
}

#[test]
fn typical_p_reads_its_mass_as_the_written_decimal() {
    // The token nearest the entropy is token 0, with 0.899999988 of the mass: it
    // reaches the f32 0.9 but not 0.9, so the typical set takes token 1 as well.
    let g = gap_between(p0, f64::from(0.9f32), 0.9, (-3.0, -1.0));
    for len in [2, 151_936] {
        let row = row_with_gap(g, len);
        let typical = TypicalP::new(0.9).unwrap();
        check_paths(&row, None, both_positions(typical, len), &[0, 1], "typical");
    }
}

#[test]
fn the_widened_reading_would_keep_another_set() {
    // The cases above are on the window between the two readings: one ulp of the
    // threshold away from the decimal, the kept set changes.
    let probs = [0.3f64, 0.1, 0.1, 0.5];
    let row: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
    let c = reference::candidates(&row, 1.0).unwrap();
    assert_eq!(reference_ids(&reference::top_p(&c, 0.8, 1)), [0, 3]);
    assert_eq!(
        reference_ids(&reference::top_p(&c, 0.8f32.next_up(), 1)),
        [0, 1, 3]
    );
}
