//! The residual draw at a rejection is exact: for the sequence's draw uniform `d`, the
//! verifier emits the first of `p`'s candidates whose exact running sum of the residual
//! weights `max(0, p(t) - q(t))` exceeds `d` times their exact total. The draft's
//! distribution is tuned, by bisection on one of its probabilities, until a boundary of
//! the residual's CDF lies at `d`; the verifier is then run on and next to it and
//! compared with an exact reference in integers. Relabelling the vocabulary and
//! reordering the draft's pairs moves nothing but the labels.

use logits::{DraftDistribution, DrawRng, Sampler, SamplingParams, Speculation, TokenId, Verifier};

mod mix;
use mix::Mix;

const V: usize = 6;
/// The draft token: the lowest logit, which top-k 4 cuts, so `p(X) = 0` and the draft
/// token is always rejected.
const X: TokenId = 5;

fn params(seed: u64) -> SamplingParams {
    SamplingParams::builder()
        .temperature(1.0)
        .top_k(4)
        .seed(seed)
        .build()
        .unwrap()
}

/// `w` in units of `2^-60`: every weight here is such a multiple below 1 (each `p(t)`
/// and `q(t)` is at least `2^-8`, where every `f64` is one, and so is their rounded
/// difference), so the exact sums are integer sums.
fn units(w: f64) -> u128 {
    let s = w * 2f64.powi(60);
    assert!(
        s.fract() == 0.0 && (0.0..2f64.powi(64)).contains(&s),
        "{w:e}"
    );
    s as u128
}

/// The exact decision: the first positive weight whose exact running sum `C` has
/// `C > d * T`, with `d = M * 2^-53`: `C * 2^53 > M * T` in integers.
fn exact_pick(r: &[f64], d: f64) -> usize {
    let m = d * 2f64.powi(53);
    assert!(m.fract() == 0.0);
    let m = m as u128;
    let total: u128 = r.iter().map(|&w| units(w)).sum();
    assert!(total > 0);
    let mut c = 0u128;
    for (i, &w) in r.iter().enumerate() {
        c += units(w);
        if w > 0.0 && (c << 53) > m * total {
            return i;
        }
    }
    unreachable!("d < 1")
}

/// The same decision with the sums rounded in `f64`, in `p`'s order.
fn f64_pick(r: &[f64], d: f64) -> usize {
    let total: f64 = r.iter().sum();
    let mut acc = 0.0;
    for (i, &w) in r.iter().enumerate() {
        acc += w;
        if w > 0.0 && acc > d * total {
            return i;
        }
    }
    r.iter().rposition(|&w| w > 0.0).unwrap()
}

/// One case: the target row, its final distribution `p` and the draw uniform of step 0.
struct Case {
    seed: u64,
    row: Vec<f32>,
    p: Vec<(TokenId, f64)>,
    d: f64,
}

impl Case {
    fn new(seed: u64) -> Case {
        let mut rng = Mix(seed ^ 0xE7AC7);
        let mut row: Vec<f32> = (0..V).map(|_| (3.0 * rng.unit()) as f32).collect();
        row[X as usize] = -1.0;
        let mut s = Sampler::new(params(seed), V).unwrap();
        let mut p = Vec::new();
        s.distribution(&row, None, &mut p).unwrap();
        assert_eq!(p.len(), 4);
        assert!(p.iter().all(|&(t, w)| t != X && w >= 2f64.powi(-8)));
        let d = DrawRng::new(seed).uniform(0);
        Case { seed, row, p, d }
    }

    /// The draft's pairs for a probability `q0` on `p`'s first candidate, the rest on `X`.
    fn pairs(&self, q0: f64) -> [(TokenId, f64); 2] {
        [(X, 1.0 - q0), (self.p[0].0, q0)]
    }

    /// The residual weights, as the verifier defines them: `q` divided by its sum.
    fn residual(&self, q0: f64) -> Vec<f64> {
        let pairs = self.pairs(q0);
        let inv = 1.0 / (pairs[0].1 + pairs[1].1);
        self.p
            .iter()
            .map(|&(t, w)| {
                let q = pairs.iter().find(|c| c.0 == t).map_or(0.0, |c| c.1 * inv);
                (w - q).max(0.0)
            })
            .collect()
    }

    /// The token the verifier emits after rejecting `X`, with the vocabulary relabelled
    /// by `label` and the draft's pairs in the given order.
    fn verify(
        &self,
        verifier: &mut Verifier,
        q0: f64,
        label: &[TokenId],
        reverse: bool,
    ) -> TokenId {
        let mut row = vec![0f32; V];
        for (i, &l) in self.row.iter().enumerate() {
            row[label[i] as usize] = l;
        }
        let mut pairs = self.pairs(q0).map(|(t, w)| (label[t as usize], w));
        if reverse {
            pairs.reverse();
        }
        let target: Vec<f32> = row.iter().chain(&row).copied().collect();
        let mut s = Sampler::new(params(self.seed), V).unwrap();
        let out = verifier
            .verify(
                &mut s,
                &Speculation {
                    draft: &[label[X as usize]],
                    q: DraftDistribution::Sparse {
                        pairs: &pairs,
                        ends: &[2],
                    },
                    target: &target,
                    row_len: V,
                },
            )
            .unwrap();
        assert_eq!(out.accepted, 0);
        verifier.tokens()[0]
    }
}

#[test]
fn residual_draw_is_exact_on_and_next_to_its_boundaries() {
    let identity: Vec<TokenId> = (0..V as TokenId).collect();
    // A fixed relabelling of the vocabulary.
    let relabel: [TokenId; V] = [3, 0, 5, 1, 4, 2];
    let mut inverse = [0; V];
    for (i, &l) in relabel.iter().enumerate() {
        inverse[l as usize] = i as TokenId;
    }
    let mut verifier = Verifier::new();
    let (mut cases, mut probes, mut rounded_wrong) = (0, 0, 0);
    for seed in 0..400u64 {
        let c = Case::new(seed);
        // q0 from 2^-7 up to just below p's first probability: the residual's first
        // weight falls from about p0 to 0, and every boundary of its CDF moves down.
        let (lo, hi) = (2f64.powi(-7), c.p[0].1 * (1.0 - 1e-9));
        if lo >= hi {
            continue;
        }
        let pick = |q0: f64| exact_pick(&c.residual(q0), c.d);
        let (mut a, mut b) = (lo.to_bits(), hi.to_bits());
        if pick(lo) == pick(hi) {
            continue;
        }
        // Bisection on the bits of q0 to two neighbours with different exact decisions.
        while b - a > 1 {
            let mid = a + (b - a) / 2;
            if pick(f64::from_bits(mid)) == pick(f64::from_bits(a)) {
                a = mid;
            } else {
                b = mid;
            }
        }
        cases += 1;
        for bits in b - 24..=b + 24 {
            let q0 = f64::from_bits(bits);
            let r = c.residual(q0);
            let want = c.p[exact_pick(&r, c.d)].0;
            if c.p[f64_pick(&r, c.d)].0 != want {
                rounded_wrong += 1;
            }
            probes += 1;
            assert_eq!(
                c.verify(&mut verifier, q0, &identity, false),
                want,
                "seed {seed}, q0 {q0:e}, d {:e}",
                c.d
            );
            let moved = c.verify(&mut verifier, q0, &relabel, true);
            assert_eq!(inverse[moved as usize], want, "relabelled, seed {seed}");
        }
    }
    assert!(cases >= 100, "only {cases} cases had a boundary in reach");
    // The probes reach the rounding: a plain f64 walk decides some of them wrong.
    assert!(
        rounded_wrong > 0,
        "none of {probes} probes separates the exact draw from a rounded one"
    );
}

/// Draft logits decide as the sparse distributions the same chain writes for those rows,
/// token for token and logprob for logprob: a position whose acceptance the uniform
/// decides without `q` skips the draft row's chain run, and that never moves a token.
#[test]
fn draft_logits_decide_as_their_distributions() {
    const W: usize = 12;
    let params = |seed| {
        SamplingParams::builder()
            .temperature(0.9)
            .top_k(6)
            .seed(seed)
            .build()
            .unwrap()
    };
    let mut m = Mix(77);
    let mut verifier = Verifier::new();
    let (mut accepted, mut rejected) = (0, 0);
    for trial in 0..3000u64 {
        let k = 1 + (trial % 4) as usize;
        let target: Vec<f32> = (0..(k + 1) * W)
            .map(|_| (2.0 * m.normal()) as f32)
            .collect();
        // The draft: the target's rows moved by noise of a varying scale, so that some
        // tokens are accepted and some rejected.
        let scale = (trial % 7) as f64 / 3.0;
        let rows: Vec<f32> = target[..k * W]
            .iter()
            .map(|&l| (f64::from(l) + scale * m.normal()) as f32)
            .collect();
        let mut draft = Sampler::new(params(trial ^ 0xD7), W).unwrap();
        let (mut pairs, mut ends, mut tokens, mut dist) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for row in rows.chunks_exact(W) {
            draft.distribution(row, None, &mut dist).unwrap();
            pairs.extend_from_slice(&dist);
            ends.push(pairs.len());
            tokens.push(draft.sample(row).unwrap().token);
        }
        let sparse = Speculation {
            draft: &tokens,
            q: DraftDistribution::Sparse {
                pairs: &pairs,
                ends: &ends,
            },
            target: &target,
            row_len: W,
        };
        let logits = Speculation {
            q: DraftDistribution::Logits(&rows),
            ..sparse
        };
        let mut run = |spec: &Speculation<'_, f32>| {
            let mut s = Sampler::new(params(trial), W).unwrap();
            let out = verifier.verify(&mut s, spec).unwrap();
            (
                out,
                verifier.tokens().to_vec(),
                verifier.logprobs().to_vec(),
            )
        };
        let (a, b) = (run(&logits), run(&sparse));
        assert_eq!(a, b, "trial {trial}");
        accepted += a.0.accepted;
        rejected += usize::from(a.0.accepted < k);
    }
    assert!(
        accepted > 1000 && rejected > 300,
        "{accepted} accepted, {rejected} rejections"
    );
}
