//! Min-p on flat rows: thousands of survivors (beyond the 4,096 the one-pass selection
//! sorts), which the Sampler and a chain's first cut group take by the exact threshold
//! on the logit and draw from without sorting them; and min-p 0, a draw from every
//! finite token of a flat row, which takes the same path; and a floor that keeps most of
//! the row, drawn from the row in place above it. Against `logits::reference`: the
//! kept set and its probabilities, and the token for uniforms on and next to the
//! cumulative boundaries, over `f32`/`f16`/`bf16` rows, with a mask (read as marks, or
//! as a compact row), a logit bias, a presence penalty, `min_tokens_to_keep` and a
//! temperature other than 1, in the Sampler's order and as a chain `min-p -> T` (`T`
//! alone for min-p 0).

use logits::half::{bf16, f16};
use logits::reference::{self, Candidate, Step};
use logits::{Chain, History, Logit, MinP, Sampler, SamplingParams, Temperature, TokenMask};
use proptest::prelude::*;

mod mix;

use mix::boundaries::{boundary_uniforms, TOP};
use mix::Mix;

/// One case: a flat row and the parameters around min-p.
#[derive(Clone, Debug)]
struct Case {
    seed: u64,
    n: usize,
    /// Spread of the row: N(0, scale).
    scale: f64,
    /// 0 for none: the draw takes the whole row.
    min_p: f32,
    t: f32,
    min_keep: usize,
    /// 0: no mask; 1: a mask allowing most tokens (marks); 2: a mask allowing about
    /// 3,000 (a compact row).
    mask: u8,
    bias: bool,
    penalty: bool,
    /// 0: `f32`; 1: `f16`; 2: `bf16`.
    elem: u8,
}

fn cases() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        prop::sample::select(vec![6_007usize, 12_000, 20_011]),
        prop::sample::select(vec![0.25f64, 0.5, 1.0]),
        prop::sample::select(vec![0.0f32, 0.01, 0.05, 0.2]),
        prop::sample::select(vec![0.7f32, 1.0, 1.3]),
        prop::sample::select(vec![1usize, 2, 5_000]),
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        0u8..3,
    )
        .prop_map(
            |(seed, n, scale, min_p, t, min_keep, mask, bias, penalty, elem)| Case {
                seed,
                n,
                scale,
                min_p,
                t,
                min_keep,
                mask,
                bias,
                penalty,
                elem,
            },
        )
}

impl Case {
    /// The row, with ties (repeated values) and a few `-inf`.
    fn row(&self) -> Vec<f32> {
        let mut r = Mix(self.seed);
        let mut row: Vec<f32> = (0..self.n)
            .map(|_| (self.scale * r.normal()) as f32)
            .collect();
        for _ in 0..self.n / 50 {
            let (i, j) = (r.next() as usize % self.n, r.next() as usize % self.n);
            row[i] = row[j];
        }
        for _ in 0..5 {
            row[r.next() as usize % self.n] = f32::NEG_INFINITY;
        }
        row
    }

    fn mask(&self) -> Option<TokenMask> {
        let mut r = Mix(self.seed ^ 0x5eed);
        let keep = match self.mask {
            0 => return None,
            1 => 7,
            _ => (3_000 * 8 / self.n as u64).max(1),
        };
        let mut m = TokenMask::new_empty(self.n);
        for id in 0..self.n as u32 {
            if r.next() % 8 < keep {
                m.allow(id).unwrap();
            }
        }
        Some(m)
    }

    fn params(&self) -> SamplingParams {
        let mut b = SamplingParams::builder()
            .temperature(self.t)
            .min_p(self.min_p)
            .min_tokens_to_keep(self.min_keep);
        if self.bias {
            // Tokens raised to near the top and lowered out of the set.
            for id in [3u32, 17, 400, 4_001] {
                b = b.logit_bias(id, 1.5);
            }
            b = b.logit_bias(5, -30.0);
        }
        if self.penalty {
            b = b.presence_penalty(0.7);
        }
        b.build().unwrap()
    }

    fn prompt(&self) -> Vec<u32> {
        if self.penalty {
            (0..64).map(|i| (i * 89 % self.n) as u32).collect()
        } else {
            Vec::new()
        }
    }
}

/// The uniforms on and next to `limit` cumulative boundaries spread over `c`, `1e-8`
/// on either side of those boundaries (within the fast weights' bound of a boundary,
/// beyond the precise sums': the draw over a flat row decides those from its precise
/// pass), and 8 at random.
fn uniforms(c: &[Candidate], limit: usize, r: &mut Mix) -> Vec<f64> {
    let mut out = boundary_uniforms(c, limit, 1);
    let near: Vec<f64> = (out.iter().skip(4).step_by(3))
        .flat_map(|&u| [u - 1e-8, u + 1e-8])
        .filter(|u| (0.0..=TOP).contains(u))
        .collect();
    out.extend(near);
    out.extend((0..8).map(|_| r.unit().min(TOP)));
    out
}

/// The Sampler and the chain `min-p -> T` on `row` (its exact `f32` values `exact`)
/// against the reference.
fn check<T: Logit>(case: &Case, row: &[T], exact: &[f32]) -> Result<(), TestCaseError> {
    let n = row.len();
    let (params, prompt, mask) = (case.params(), case.prompt(), case.mask());
    let mask = mask.as_ref();
    let history = History::new(&prompt, prompt.len());
    let adjusted = reference::adjust(exact, n, &params, &history, mask).unwrap();
    let survivors = reference::survivors(&adjusted, &params).unwrap();
    if case.mask != 2 && case.scale == 0.25 && case.min_p <= 0.05 && case.n >= 12_000 {
        // The case this file is about: more survivors than the one-pass path sorts.
        prop_assert!(survivors.len() > 4_096, "{} survivors", survivors.len());
    }
    let mut r = Mix(case.seed ^ 0xd1ce);
    let at = uniforms(&survivors, 24, &mut r);

    let mut sampler = Sampler::new(params.clone(), n).unwrap();
    sampler.push_prompt(&prompt).unwrap();
    // The kept set, in draw order, and its probabilities.
    let mut dist = Vec::new();
    sampler.distribution(row, mask, &mut dist).unwrap();
    let total: f64 = survivors.iter().map(Candidate::weight).sum();
    prop_assert_eq!(dist.len(), survivors.len());
    for (&(id, p), c) in dist.iter().zip(&survivors) {
        prop_assert_eq!(id, c.id);
        let want = c.weight() / total;
        prop_assert!(
            (p - want).abs() <= 1e-12 + 1e-9 * want,
            "{} {} {}",
            id,
            p,
            want
        );
    }
    for &u in &at {
        let (want, lp) = reference::sample(exact, n, &params, &history, mask, u).unwrap();
        let got = sampler.sample_with_uniform(row, mask, u).unwrap();
        sampler.rollback(1);
        prop_assert_eq!(got.token, want, "sampler, u {:e} ({:?})", u, case);
        prop_assert!(
            (f64::from(got.logprob) - lp).abs() <= 1e-5 * lp.abs().max(1.0),
            "logprob {} vs {}",
            got.logprob,
            lp
        );
    }

    // The chain: min-p at temperature 1, then the temperature, folded into the draw
    // (the temperature alone for min-p 0). (Without the bias and penalties, which a
    // chain takes as stages of its own.)
    let mut steps = vec![Step::Temperature(case.t)];
    let mut ch = Chain::builder(n);
    if case.min_p > 0.0 {
        steps.insert(
            0,
            Step::MinP {
                p: case.min_p,
                min_keep: case.min_keep,
            },
        );
        ch = ch.stage(MinP::new(case.min_p).unwrap().min_keep(case.min_keep));
    }
    let none = History::new(&[], 0);
    let c = reference::chain_candidates(exact, n, &none, mask, &steps)
        .unwrap()
        .scaled();
    let mut ch = ch
        .stage(Temperature::new(case.t).unwrap())
        .draw()
        .build()
        .unwrap();
    for u in uniforms(&c, 24, &mut r) {
        let (want, _) = reference::chain_sample(exact, n, &none, mask, &steps, u).unwrap();
        let got = ch.sample_with_uniform(row, mask, u).unwrap().token;
        ch.reset();
        prop_assert_eq!(got, want, "chain, u {:e} ({:?})", u, case);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn flat_min_p_agrees_with_reference(case in cases()) {
        let row = case.row();
        match case.elem {
            0 => check(&case, &row, &row)?,
            1 => {
                let half: Vec<f16> = row.iter().map(|&x| f16::from_f32(x)).collect();
                let exact: Vec<f32> = half.iter().map(|x| x.to_f32()).collect();
                check(&case, &half, &exact)?;
            }
            _ => {
                let half: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
                let exact: Vec<f32> = half.iter().map(|x| x.to_f32()).collect();
                check(&case, &half, &exact)?;
            }
        }
    }
}

/// A flat row of 151,936 at T 0.8 with min-p `min_p`, every boundary uniform spread over
/// its survivors, Sampler and chain.
fn full_flat_row(min_p: f32) {
    let case = full_case(151_936, min_p, 0);
    let row = case.row();
    check(&case, &row, &row).unwrap();
}

/// A flat row of 151,936 from `seed` at T 0.8 with min-p `min_p`, of element type `elem`
/// (as [`Case::elem`]), nothing else around it.
fn full_case(seed: u64, min_p: f32, elem: u8) -> Case {
    Case {
        seed,
        n: 151_936,
        scale: 1.0,
        min_p,
        t: 0.8,
        min_keep: 1,
        mask: 0,
        bias: false,
        penalty: false,
        elem,
    }
}

/// Min-p 0.05: thousands of survivors.
#[test]
fn a_full_flat_row_agrees_with_reference() {
    full_flat_row(0.05);
}

/// Drawn whole (the bench's `chain_temp_0.8`): every finite token survives.
#[test]
fn a_full_flat_row_drawn_whole_agrees_with_reference() {
    full_flat_row(0.0);
}

/// Drawn whole from a `bf16` row (the bench's `chain_temp_0.8_bf16`): values tied by the
/// thousand.
#[test]
fn a_full_bf16_flat_row_drawn_whole_agrees_with_reference() {
    let case = full_case(151_936, 0.0, 2);
    let half: Vec<bf16> = case.row().iter().map(|&x| bf16::from_f32(x)).collect();
    let exact: Vec<f32> = half.iter().map(|x| x.to_f32()).collect();
    check(&case, &half, &exact).unwrap();
}

/// Min-p 0.001 on a flat row of 151,936 keeps nearly all of it (a floor the draw takes
/// from the row in place): every boundary uniform, Sampler and chain.
#[test]
fn a_floor_keeping_most_of_a_full_flat_row_agrees_with_reference() {
    full_flat_row(0.001);
}

/// The same floor with the row's best token biased below it: its logprob among the
/// alternatives is `-inf` (removed), and every other alternative's is the reference's,
/// over the survivors, for uniforms across the row.
#[test]
fn a_token_below_a_floor_drawn_in_place_is_reported_removed() {
    let row = full_case(7, 0.001, 0).row();
    let n = row.len();
    let best = (0..n).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap() as u32;
    let params = SamplingParams::builder()
        .temperature(0.8)
        .min_p(0.001)
        .logit_bias(best, -12.0)
        .logprobs(8)
        .build()
        .unwrap();
    let history = History::new(&[], 0);
    let adjusted = reference::adjust(&row, n, &params, &history, None).unwrap();
    let survivors = reference::survivors(&adjusted, &params).unwrap();
    assert!(survivors.len() > n / 2, "{} survivors", survivors.len());
    assert!(survivors.iter().all(|c| c.id != best));
    let total: f64 = survivors.iter().map(Candidate::weight).sum();
    let mut sampler = Sampler::new(params, n).unwrap();
    for k in 0..16 {
        let u = (f64::from(k) + 0.5) / 16.0;
        let got = sampler.sample_with_uniform(&row, None, u).unwrap();
        sampler.rollback(1);
        let alts = got.alternatives();
        assert_eq!(alts.len(), 8);
        let cut = alts.iter().find(|a| a.token == best).expect("the raw best");
        assert_eq!(cut.logprob, f32::NEG_INFINITY, "u {u}");
        for a in alts.iter().filter(|a| a.token != best) {
            let c = survivors.iter().find(|c| c.id == a.token).expect("kept");
            let want = (c.weight() / total).ln();
            let err = (f64::from(a.logprob) - want).abs();
            assert!(err <= 1e-5 * want.abs().max(1.0), "u {u}: {a:?} {want}");
        }
    }
}
