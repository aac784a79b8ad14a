//! The draw is exact: for every uniform, the Sampler, every Chain and the reference return
//! the token that exact arithmetic over the `f64` weights gives (the first survivor whose
//! exact running sum exceeds `u` times the exact total). The uniforms here are placed on
//! and next to every cumulative boundary of the reference's survivors, where any
//! rounding of a running sum or of the total would move the token.

use logits::half::{bf16, f16};
use logits::reference::{self, Step};
use logits::{
    Chain, History, Logit, MinP, Sampler, SamplingParams, Stage, Temperature, TokenId, TokenMask,
    TopK, TopP,
};
use proptest::prelude::*;

mod mix;

use mix::boundaries::{boundary_uniforms, TOP};

#[test]
fn issue_example_agrees_with_reference() {
    let row = [2.0f32, 1.0, 1.0, 0.0];
    let params = SamplingParams::builder().temperature(0.05).build().unwrap();
    let mut s = Sampler::new(params.clone(), 4).unwrap();
    let fast = s.sample_with_uniform(&row[..], None, TOP).unwrap().token;
    let history = History::new(&[], 0);
    let (slow, _) = reference::sample(&row, 4, &params, &history, None, TOP).unwrap();
    assert_eq!(fast, slow);
    // The exact decision: u * T is 2^-53 T below T, more than the last weight e^-40.
    assert_eq!(slow, 2);
}

/// The cut parameters of one case.
#[derive(Clone, Debug)]
struct Cuts {
    t: f32,
    top_k: Option<usize>,
    top_p: Option<f32>,
    min_p: Option<f32>,
    min_keep: usize,
}

fn cuts() -> impl Strategy<Value = Cuts> {
    (
        prop::sample::select(vec![0.05f32, 0.3, 0.7, 1.0, 1.5, 4.0]),
        prop::option::of(1usize..40),
        prop::option::of(prop::sample::select(vec![0.3f32, 0.5, 0.9, 0.95, 0.999])),
        prop::option::of(prop::sample::select(vec![0.001f32, 0.01, 0.05, 0.2])),
        1usize..4,
    )
        .prop_map(|(t, top_k, top_p, min_p, min_keep)| Cuts {
            t,
            top_k,
            top_p,
            min_p,
            min_keep,
        })
}

impl Cuts {
    fn params(&self) -> SamplingParams {
        let mut b = SamplingParams::builder()
            .temperature(self.t)
            .min_tokens_to_keep(self.min_keep);
        if let Some(k) = self.top_k {
            b = b.top_k(k);
        }
        if let Some(p) = self.top_p {
            b = b.top_p(p);
        }
        if let Some(p) = self.min_p {
            b = b.min_p(p);
        }
        b.build().unwrap()
    }

    /// The same cuts as chain steps: in the order the chain plans as one group
    /// (temperature first), or reversed, cuts first and temperature last, which runs the
    /// later cuts on the candidate set (the chain's generic path).
    fn steps(&self, planned: bool) -> Vec<Step> {
        let keep = self.min_keep;
        let mut cuts = Vec::new();
        if let Some(k) = self.top_k {
            cuts.push(Step::TopK { k, min_keep: keep });
        }
        if let Some(p) = self.top_p {
            cuts.push(Step::TopP { p, min_keep: keep });
        }
        if let Some(p) = self.min_p {
            cuts.push(Step::MinP { p, min_keep: keep });
        }
        if planned {
            let mut s = vec![Step::Temperature(self.t)];
            s.extend(cuts);
            s
        } else {
            cuts.reverse();
            cuts.push(Step::Temperature(self.t));
            cuts
        }
    }
}

fn stage(step: &Step) -> Box<dyn Stage> {
    match *step {
        Step::Temperature(t) => Box::new(Temperature::new(t).unwrap()),
        Step::TopK { k, min_keep } => Box::new(TopK::new(k).unwrap().min_keep(min_keep)),
        Step::TopP { p, min_keep } => Box::new(TopP::new(p).unwrap().min_keep(min_keep)),
        Step::MinP { p, min_keep } => Box::new(MinP::new(p).unwrap().min_keep(min_keep)),
        _ => unreachable!("only the cuts of `Cuts::steps`"),
    }
}

fn chain(steps: &[Step], n: usize) -> Chain {
    let mut b = Chain::builder(n);
    for s in steps {
        b = b.boxed_stage(stage(s));
    }
    b.draw().build().unwrap()
}

/// Sampler, the planned chain, the chain in the generic order, and the reference, on
/// `row` (the reference on its `f32` values) at every boundary uniform.
fn check<T: Logit>(
    row: &[T],
    exact: &[f32],
    cuts: &Cuts,
    mask: Option<&TokenMask>,
    limit: usize,
) -> Result<(), TestCaseError> {
    let n = row.len();
    let history = History::new(&[], 0);
    let params = cuts.params();
    let adjusted = reference::adjust(exact, n, &params, &history, mask).unwrap();
    let survivors = reference::survivors(&adjusted, &params).unwrap();
    let mut sampler = Sampler::new(params.clone(), n).unwrap();
    for u in boundary_uniforms(&survivors, limit, 2) {
        let want = reference::draw(&survivors, u);
        let got = sampler.sample_with_uniform(row, mask, u).unwrap().token;
        prop_assert_eq!(got, want, "sampler, u {:e} ({:?})", u, cuts);
    }
    for planned in [true, false] {
        let steps = cuts.steps(planned);
        let state = reference::chain_candidates(exact, n, &history, mask, &steps).unwrap();
        let c = state.scaled();
        let mut ch = chain(&steps, n);
        for u in boundary_uniforms(&c, limit, 2) {
            let (want, _) = reference::chain_sample(exact, n, &history, mask, &steps, u).unwrap();
            prop_assert_eq!(want, reference::draw(&c, u));
            let got = ch.sample_with_uniform(row, mask, u).unwrap().token;
            prop_assert_eq!(got, want, "chain {:?}, u {:e}", steps, u);
        }
    }
    Ok(())
}

/// A row of logits from a few levels, so that ties and equal weights are common.
fn small_row() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(
        prop_oneof![
            (-32i32..16).prop_map(|k| k as f32 / 4.0),
            (-8.0f32..4.0),
            Just(f32::NEG_INFINITY),
        ],
        1..64,
    )
    .prop_filter("a finite logit", |r| r.iter().any(|x| x.is_finite()))
}

fn mask_for(n: usize, bans: &[usize], row: &[f32]) -> Option<TokenMask> {
    if bans.is_empty() {
        return None;
    }
    let mut m = TokenMask::new_full(n);
    for &b in bans {
        m.disallow((b % n) as TokenId).unwrap();
    }
    // Keep the largest finite logit allowed.
    let best = (0..n)
        .filter(|&i| row[i].is_finite())
        .max_by(|&a, &b| row[a].total_cmp(&row[b]))
        .unwrap();
    m.allow(best as TokenId).unwrap();
    Some(m)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn small_rows_agree_at_every_boundary(
        row in small_row(),
        cuts in cuts(),
        bans in prop::collection::vec(0usize..64, 0..4),
        kind in 0u8..3,
    ) {
        let n = row.len();
        let mask = mask_for(n, &bans, &row);
        match kind {
            0 => check(&row, &row, &cuts, mask.as_ref(), usize::MAX)?,
            1 => {
                let h: Vec<f16> = row.iter().map(|&x| f16::from_f32(x)).collect();
                let exact: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
                check(&h, &exact, &cuts, mask.as_ref(), usize::MAX)?;
            }
            _ => {
                let h: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
                let exact: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
                check(&h, &exact, &cuts, mask.as_ref(), usize::MAX)?;
            }
        }
    }
}

/// Large rows that keep thousands of tokens (the histogram paths): flat rows with no cut,
/// top-p 0.95 and min-p, at boundaries spread over the survivors.
#[test]
fn large_keep_rows_agree_at_boundaries() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 24) as f32
    };
    for (n, spread) in [(6_000usize, 2.0f32), (20_000, 0.5), (8_192, 8.0)] {
        let row: Vec<f32> = (0..n)
            .map(|_| (next() * spread * 4.0).round() / 4.0)
            .collect();
        for cuts in [
            Cuts {
                t: 1.0,
                top_k: None,
                top_p: None,
                min_p: None,
                min_keep: 1,
            },
            Cuts {
                t: 0.8,
                top_k: None,
                top_p: Some(0.95),
                min_p: None,
                min_keep: 1,
            },
            Cuts {
                t: 1.3,
                top_k: None,
                top_p: None,
                min_p: Some(0.05),
                min_keep: 5_000,
            },
        ] {
            check(&row, &row, &cuts, None, 40).unwrap();
        }
    }
}
