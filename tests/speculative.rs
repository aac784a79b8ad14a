//! Speculative verification: exact in distribution, greedy equal to greedy decoding,
//! reproducible, per row in a batch, and every bad input a typed error that moves nothing.

use std::collections::HashMap;
use std::sync::Arc;

use logits::grammar::{Choice, GrammarError, GrammarMask, TokenKind, Vocab};
use logits::speculative::{acceptance_uniform, DRAFT_SUM_TOLERANCE};
use logits::{
    BatchSampler, Chain, DraftDistribution, Error, History, Sampler, SamplingParams, Speculation,
    Temperature, TokenId, TopK, Verifier,
};
use proptest::prelude::*;

mod mix;
use mix::Mix;

const V: usize = 5;

/// A deterministic "model": the row that scores the token after `ctx`.
fn model_row(ctx: &[TokenId], salt: u64, scale: f64) -> Vec<f32> {
    let mut h = salt;
    for &t in ctx {
        h = Mix(h ^ u64::from(t).wrapping_mul(0x9E37_79B9)).next();
    }
    let mut r = Mix(h);
    (0..V).map(|_| (scale * r.normal()) as f32).collect()
}

/// The final distribution of `params`' chain on `row` after the generated tokens `ctx`.
fn final_dist(params: &SamplingParams, ctx: &[TokenId], row: &[f32]) -> Vec<(TokenId, f64)> {
    let mut s = Sampler::new(params.clone(), V).unwrap();
    for &t in ctx {
        s.accept(t).unwrap();
    }
    let mut d = Vec::new();
    s.distribution(row, None, &mut d).unwrap();
    d
}

/// The same distribution from the plain reference implementation.
fn reference_dist(params: &SamplingParams, ctx: &[TokenId], row: &[f32]) -> Vec<(TokenId, f64)> {
    use logits::reference;
    let adjusted = reference::adjust(row, V, params, &History::new(ctx, 0), None).unwrap();
    reference::normalize(&reference::survivors(&adjusted, params).unwrap())
}

/// Draws from `(token, probability)` pairs with `u`.
fn draw(d: &[(TokenId, f64)], u: f64) -> TokenId {
    let total: f64 = d.iter().map(|&(_, w)| w).sum();
    let mut acc = 0.0;
    for &(t, w) in d {
        acc += w;
        if acc > u * total {
            return t;
        }
    }
    d.last().unwrap().0
}

/// A draft model: its sampler parameters and its rows' salt and scale.
#[derive(Clone)]
struct DraftModel {
    params: SamplingParams,
    salt: u64,
    scale: f64,
}

const TARGET_SALT: u64 = 0x7A26;

fn target_params(seed: u64) -> SamplingParams {
    // The repetition penalty makes each position's `p` depend on the accepted tokens.
    SamplingParams::builder()
        .temperature(0.8)
        .top_k(4)
        .repetition_penalty(1.5)
        .seed(seed)
        .build()
        .unwrap()
}

/// Generates `len` tokens by speculative decoding with draft length `k` and returns
/// them, with the numbers of draft tokens proposed and accepted.
fn speculate(seed: u64, k: usize, draft: &DraftModel, len: usize) -> (Vec<TokenId>, usize, usize) {
    let mut target = Sampler::new(target_params(seed), V).unwrap();
    let mut verifier = Verifier::new();
    let mut rng = Mix(seed ^ 0xD4AF7);
    let mut ctx: Vec<TokenId> = Vec::new();
    let (mut proposed, mut accepted) = (0, 0);
    let (mut pairs, mut ends, mut tokens, mut rows) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    while ctx.len() < len {
        pairs.clear();
        ends.clear();
        tokens.clear();
        rows.clear();
        let mut dctx = ctx.clone();
        for _ in 0..k {
            let q = final_dist(
                &draft.params,
                &dctx,
                &model_row(&dctx, draft.salt, draft.scale),
            );
            let x = draw(&q, rng.unit());
            pairs.extend_from_slice(&q);
            ends.push(pairs.len());
            tokens.push(x);
            dctx.push(x);
        }
        for i in 0..=k {
            rows.extend(model_row(&dctx[..ctx.len() + i], TARGET_SALT, 1.0));
        }
        let spec = Speculation {
            draft: &tokens,
            q: DraftDistribution::Sparse {
                pairs: &pairs,
                ends: &ends,
            },
            target: &rows,
            row_len: V,
        };
        let out = verifier.verify(&mut target, &spec).unwrap();
        proposed += k;
        accepted += out.accepted;
        assert_eq!(&verifier.tokens()[..out.accepted], &tokens[..out.accepted]);
        assert_eq!(verifier.tokens().len(), out.accepted + 1);
        ctx.extend_from_slice(verifier.tokens());
        assert_eq!(target.history().generated(), &ctx[..]);
    }
    (ctx, proposed, accepted)
}

/// The target's exact probability of every sequence of `len` tokens, from the reference.
fn exact_sequences(len: usize) -> HashMap<Vec<TokenId>, f64> {
    let params = target_params(0);
    let mut out = HashMap::new();
    let mut stack = vec![(Vec::new(), 1.0)];
    while let Some((ctx, pr)) = stack.pop() {
        if ctx.len() == len {
            out.insert(ctx, pr);
            continue;
        }
        for (t, w) in reference_dist(&params, &ctx, &model_row(&ctx, TARGET_SALT, 1.0)) {
            if w > 0.0 {
                let mut next = ctx.clone();
                next.push(t);
                stack.push((next, pr * w));
            }
        }
    }
    out
}

/// The chi-squared critical value of `df` degrees of freedom at a p-value of `1e-6`
/// (Wilson-Hilferty, z = 4.7534), a threshold a correct sampler crosses once in a
/// million runs.
fn chi2_critical_1e6(df: usize) -> f64 {
    let d = df as f64;
    let z = 4.7534;
    let a = 2.0 / (9.0 * d);
    d * (1.0 - a + z * a.sqrt()).powi(3)
}

/// Chi-squared of the observed sequences against the exact distribution; cells below
/// an expected count of 5 are pooled into one. Returns (statistic, degrees of freedom).
fn chi2(
    observed: &HashMap<Vec<TokenId>, usize>,
    exact: &HashMap<Vec<TokenId>, f64>,
    n: usize,
) -> (f64, usize) {
    let mut stat = 0.0;
    let mut cells = 0;
    let (mut pool_e, mut pool_o) = (0.0, 0.0);
    for (seq, &p) in exact {
        let e = p * n as f64;
        let o = *observed.get(seq).unwrap_or(&0) as f64;
        if e < 5.0 {
            pool_e += e;
            pool_o += o;
        } else {
            stat += (o - e).powi(2) / e;
            cells += 1;
        }
    }
    for seq in observed.keys() {
        assert!(
            exact.contains_key(seq),
            "emitted {seq:?}, which the target cannot produce"
        );
    }
    if pool_e > 0.0 {
        stat += (pool_o - pool_e).powi(2) / pool_e.max(1e-300);
        cells += 1;
    }
    (stat, cells - 1)
}

fn check_exact(draft: &DraftModel, k: usize, name: &str) -> f64 {
    const N: usize = 30_000;
    const LEN: usize = 3;
    let exact = exact_sequences(LEN);
    let mut observed: HashMap<Vec<TokenId>, usize> = HashMap::new();
    let (mut proposed, mut accepted) = (0, 0);
    for seed in 0..N as u64 {
        let (seq, p, a) = speculate(seed, k, draft, LEN);
        *observed.entry(seq[..LEN].to_vec()).or_default() += 1;
        proposed += p;
        accepted += a;
    }
    let (stat, df) = chi2(&observed, &exact, N);
    let crit = chi2_critical_1e6(df);
    assert!(
        stat < crit,
        "{name}: chi-squared {stat:.1} with {df} degrees of freedom exceeds {crit:.1} (p = 1e-6)"
    );
    accepted as f64 / proposed as f64
}

/// The emitted sequences follow the target's distribution over whole 3-token sequences
/// (each position's conditional, with the penalty over the accepted tokens), whatever
/// the draft: the target itself, a different model, and a greedy draft that puts zero
/// mass on every token but one.
#[test]
fn emitted_tokens_follow_the_target_distribution() {
    let same = DraftModel {
        params: target_params(0),
        salt: TARGET_SALT,
        scale: 1.0,
    };
    let rate = check_exact(&same, 2, "agreeing draft");
    assert_eq!(rate, 1.0, "a draft equal to the target is always accepted");

    let other = DraftModel {
        params: SamplingParams::builder()
            .temperature(1.3)
            .seed(1)
            .build()
            .unwrap(),
        salt: 0xD2AF,
        scale: 1.5,
    };
    let rate = check_exact(&other, 3, "disagreeing draft");
    assert!(rate > 0.05 && rate < 0.95, "acceptance rate {rate}");

    let greedy = DraftModel {
        params: SamplingParams::greedy(),
        salt: 0xD2AF,
        scale: 1.5,
    };
    check_exact(&greedy, 2, "greedy draft with zero mass off its argmax");
}

/// One position: the acceptance rate is `sum_x min(p(x), q(x))`, within 4 standard
/// errors, and the emitted token follows `p` (chi-squared, p-value 1e-6).
#[test]
fn acceptance_rate_is_the_overlap_of_p_and_q() {
    const N: usize = 200_000;
    let row = [2.0f32, 1.5, 1.0, 0.0, -1.0];
    let q = [0.1f32, 0.2, 0.3, 0.4, 0.0];
    let params = |seed| {
        SamplingParams::builder()
            .temperature(0.9)
            .seed(seed)
            .build()
            .unwrap()
    };
    let p = final_dist(&params(0), &[], &row);
    let mut pv = [0.0f64; V];
    for &(t, w) in &p {
        pv[t as usize] = w;
    }
    let overlap: f64 = (0..V).map(|i| pv[i].min(f64::from(q[i]))).sum();
    let qd: Vec<(TokenId, f64)> = (0..V).map(|i| (i as TokenId, f64::from(q[i]))).collect();
    let target: Vec<f32> = row.iter().chain(&row).copied().collect();
    let mut verifier = Verifier::new();
    let mut rng = Mix(99);
    let mut accepted = 0usize;
    let mut counts = [0usize; V];
    for seed in 0..N as u64 {
        let mut s = Sampler::new(params(seed), V).unwrap();
        let x = draw(&qd, rng.unit());
        let spec = Speculation {
            draft: &[x],
            q: DraftDistribution::Dense(&q),
            target: &target,
            row_len: V,
        };
        let out = verifier.verify(&mut s, &spec).unwrap();
        accepted += out.accepted;
        counts[verifier.tokens()[0] as usize] += 1;
    }
    let rate = accepted as f64 / N as f64;
    let se = (overlap * (1.0 - overlap) / N as f64).sqrt();
    assert!(
        (rate - overlap).abs() < 4.0 * se,
        "acceptance rate {rate} against sum min(p, q) = {overlap} (se {se})"
    );
    let stat: f64 = (0..V)
        .map(|i| {
            let e = pv[i] * N as f64;
            (counts[i] as f64 - e).powi(2) / e
        })
        .sum();
    assert!(stat < chi2_critical_1e6(V - 1), "chi-squared {stat}");
}

/// Greedy decoding with the target alone, `len` tokens.
fn plain_greedy(params: &SamplingParams, len: usize) -> Vec<TokenId> {
    let mut s = Sampler::new(params.clone(), V).unwrap();
    let mut ctx = Vec::new();
    while ctx.len() < len {
        let t = s.sample(&model_row(&ctx, TARGET_SALT, 1.0)).unwrap().token;
        ctx.push(t);
    }
    ctx
}

/// Greedy speculative decoding with a given draft function, `len` tokens at least.
fn speculative_greedy(
    params: &SamplingParams,
    k: usize,
    len: usize,
    mut draft: impl FnMut(&[TokenId]) -> TokenId,
) -> (Vec<TokenId>, usize) {
    let mut s = Sampler::new(params.clone(), V).unwrap();
    let mut verifier = Verifier::new();
    let mut ctx: Vec<TokenId> = Vec::new();
    let mut accepted = 0;
    while ctx.len() < len {
        let mut dctx = ctx.clone();
        let mut tokens = Vec::new();
        for _ in 0..k {
            let x = draft(&dctx);
            tokens.push(x);
            dctx.push(x);
        }
        let rows: Vec<f32> = (0..=k)
            .flat_map(|i| model_row(&dctx[..ctx.len() + i], TARGET_SALT, 1.0))
            .collect();
        // At temperature 0 `q` is not read; a one-hot draft is the natural one.
        let mut q = vec![0.0f32; k * V];
        for (i, &x) in tokens.iter().enumerate() {
            q[i * V + x as usize] = 1.0;
        }
        let spec = Speculation {
            draft: &tokens,
            q: DraftDistribution::Dense(&q),
            target: &rows,
            row_len: V,
        };
        let out = verifier.verify(&mut s, &spec).unwrap();
        accepted += out.accepted;
        ctx.extend_from_slice(verifier.tokens());
    }
    (ctx, accepted)
}

fn greedy_params() -> SamplingParams {
    SamplingParams::builder()
        .temperature(0.0)
        .repetition_penalty(1.4)
        .build()
        .unwrap()
}

/// At temperature 0 the emitted tokens are, bit for bit, those of greedy decoding: with
/// the target as its own draft (everything accepted), and with a random draft.
#[test]
fn greedy_verification_is_greedy_decoding() {
    let params = greedy_params();
    let plain = plain_greedy(&params, 60);
    for k in [1, 2, 4, 7] {
        let mut own = Sampler::new(params.clone(), V).unwrap();
        let (same, accepted) = speculative_greedy(&params, k, 60, |ctx| {
            own.reset();
            for &t in ctx {
                own.accept(t).unwrap();
            }
            let mut d = Vec::new();
            own.distribution(&model_row(ctx, TARGET_SALT, 1.0), None, &mut d)
                .unwrap();
            d[0].0
        });
        assert_eq!(&same[..60], &plain[..], "k = {k}, own draft");
        assert_eq!(
            accepted,
            same.len() / (k + 1) * k,
            "k = {k}: every draft token accepted"
        );
        let mut r = Mix(k as u64);
        let (random, _) = speculative_greedy(&params, k, 60, |_| r.below(V) as TokenId);
        assert_eq!(&random[..60], &plain[..], "k = {k}, random draft");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Greedy verification through a chain against the plain reference greedy pick: the
    /// argmax of each row after the accepted tokens, whatever the draft.
    #[test]
    fn greedy_chain_matches_the_reference(
        rows in proptest::collection::vec(proptest::collection::vec(-4.0f32..4.0, V), 4),
        draft in proptest::collection::vec(0u32..V as u32, 3),
    ) {
        let mut chain = Chain::builder(V).stage(TopK::new(3).unwrap()).greedy().build().unwrap();
        let flat: Vec<f32> = rows.concat();
        let q = vec![0.2f32; 3 * V];
        let mut v = Verifier::new();
        let spec = Speculation { draft: &draft, q: DraftDistribution::Dense(&q), target: &flat, row_len: V };
        let out = v.verify(&mut chain, &spec).unwrap();
        let mut expected = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let t = logits::reference::argmax(row).unwrap();
            expected.push(t);
            if i == 3 || t != draft[i] {
                break;
            }
        }
        prop_assert_eq!(v.tokens(), &expected[..]);
        prop_assert_eq!(out.accepted, expected.len() - 1);
    }
}

/// The same inputs give the same tokens; the acceptance uniforms are their own stream.
#[test]
fn verification_is_reproducible() {
    let other = DraftModel {
        params: SamplingParams::builder().temperature(1.3).build().unwrap(),
        salt: 0xD2AF,
        scale: 1.5,
    };
    for seed in 0..50 {
        assert_eq!(
            speculate(seed, 3, &other, 12),
            speculate(seed, 3, &other, 12)
        );
    }
    let a = acceptance_uniform(7, 3);
    assert!((0.0..1.0).contains(&a));
    assert_ne!(a, logits::DrawRng::new(7).uniform(3));
    assert_eq!(a, acceptance_uniform(7, 3));
}

/// Each row of a batch, each with its own k, gives what verifying it alone gives, in
/// either order of the rows.
#[test]
fn batch_rows_verify_as_alone() {
    let ks = [1usize, 3, 2, 5];
    let mut specs_data = Vec::new();
    for (r, &k) in ks.iter().enumerate() {
        let mut m = Mix(r as u64 + 40);
        let draft: Vec<TokenId> = (0..k).map(|_| m.below(V) as TokenId).collect();
        let target: Vec<f32> = (0..(k + 1) * V).map(|_| m.normal() as f32).collect();
        let mut q = vec![0.0f32; k * V];
        for i in 0..k {
            let row: Vec<f64> = (0..V).map(|_| m.unit() + 0.05).collect();
            let s: f64 = row.iter().sum();
            for j in 0..V {
                q[i * V + j] = (row[j] / s) as f32;
            }
            q[i * V + V - 1] = 1.0 - q[i * V..i * V + V - 1].iter().sum::<f32>();
        }
        specs_data.push((draft, q, target));
    }
    let specs: Vec<Speculation<'_, f32>> = specs_data
        .iter()
        .map(|(d, q, t)| Speculation {
            draft: d,
            q: DraftDistribution::Dense(q),
            target: t,
            row_len: V,
        })
        .collect();
    let sampler = |r: usize| {
        let p = SamplingParams::builder()
            .temperature(0.7)
            .top_p(0.9)
            .seed(r as u64)
            .build()
            .unwrap();
        let mut s = Sampler::new(p, V).unwrap();
        s.push_prompt(&[1, 2]).unwrap();
        s
    };
    let alone: Vec<(usize, Vec<TokenId>)> = (0..ks.len())
        .map(|r| {
            let mut s = sampler(r);
            let mut v = Verifier::new();
            let out = v.verify(&mut s, &specs[r]).unwrap();
            (out.accepted, v.tokens().to_vec())
        })
        .collect();
    let mut batch = BatchSampler::new((0..ks.len()).map(sampler).collect());
    let out: Vec<usize> = batch
        .verify(&specs)
        .unwrap()
        .iter()
        .map(|r| r.as_ref().unwrap().accepted)
        .collect();
    for r in 0..ks.len() {
        assert_eq!(out[r], alone[r].0);
        assert_eq!(batch.verifiers()[r].tokens(), &alone[r].1[..]);
        assert_eq!(batch.samplers()[r].history().generated(), &alone[r].1[..]);
    }
    let order: Vec<usize> = (0..ks.len()).rev().collect();
    let reversed: Vec<Speculation<'_, f32>> = order.iter().map(|&r| specs[r]).collect();
    let mut batch = BatchSampler::new(order.iter().map(|&r| sampler(r)).collect());
    batch.verify(&reversed).unwrap();
    for (i, &r) in order.iter().enumerate() {
        assert_eq!(batch.verifiers()[i].tokens(), &alone[r].1[..]);
    }
    assert!(matches!(
        batch.verify(&reversed[..2]),
        Err(Error::LengthMismatch { .. })
    ));
}

/// The state a verification may move.
fn state(s: &Sampler) -> Vec<TokenId> {
    s.history().tokens().to_vec()
}

/// Every bad input is a typed error and moves nothing.
#[test]
fn bad_input_is_a_typed_error_and_moves_nothing() {
    let params = SamplingParams::builder()
        .temperature(0.8)
        .seed(3)
        .build()
        .unwrap();
    let mut s = Sampler::new(params, V).unwrap();
    s.push_prompt(&[0, 1]).unwrap();
    s.accept(2).unwrap();
    let before = state(&s);
    let rows = vec![0.5f32; 3 * V];
    let q = vec![0.2f32; 2 * V];
    let mut v = Verifier::new();
    let spec = |draft: &'static [TokenId]| Speculation {
        draft,
        q: DraftDistribution::Dense(&[]),
        target: &[],
        row_len: V,
    };
    let mut check = |spec: Speculation<'_, f32>, want: &dyn Fn(&Error) -> bool, name: &str| {
        let e = v.verify(&mut s, &spec).unwrap_err();
        assert!(want(&e), "{name}: {e:?}");
        assert_eq!(state(&s), before, "{name} moved the history");
        assert!(v.tokens().is_empty());
    };
    let good = Speculation {
        draft: &[1, 2],
        q: DraftDistribution::Dense(&q),
        target: &rows,
        row_len: V,
    };
    // k = 0.
    check(
        Speculation {
            draft: &[],
            ..spec(&[])
        },
        &|e| {
            matches!(
                e,
                Error::InvalidParameter {
                    name: "draft_tokens",
                    ..
                }
            )
        },
        "k = 0",
    );
    // Rows of the wrong length.
    check(
        Speculation {
            target: &rows[..3 * V - 1],
            ..good
        },
        &|e| matches!(e, Error::LengthMismatch { .. }),
        "short target",
    );
    check(
        Speculation {
            row_len: V - 1,
            target: &rows[..3 * (V - 1)],
            ..good
        },
        &|e| matches!(e, Error::VocabLargerThanRow { .. }),
        "short rows",
    );
    check(
        Speculation { row_len: 0, ..good },
        &|e| matches!(e, Error::EmptyVocabulary),
        "row_len 0",
    );
    let many = vec![0.5f32; 4 * V];
    check(
        Speculation {
            target: &many,
            ..good
        },
        &|e| matches!(e, Error::LengthMismatch { .. }),
        "extra target rows",
    );
    check(
        Speculation {
            q: DraftDistribution::Logits(&rows[..V]),
            ..good
        },
        &|e| matches!(e, Error::LengthMismatch { .. }),
        "short draft logits",
    );
    check(
        Speculation {
            q: DraftDistribution::Dense(&q[..V]),
            ..good
        },
        &|e| matches!(e, Error::LengthMismatch { .. }),
        "short q",
    );
    // More draft tokens than target rows.
    check(
        Speculation {
            target: &rows[..2 * V],
            ..good
        },
        &|e| {
            matches!(
                e,
                Error::DraftTooLong {
                    draft_tokens: 2,
                    target_rows: 2
                }
            )
        },
        "too many draft tokens",
    );
    // q with NaN, negative, not summing to 1.
    let mut bad = q.clone();
    bad[7] = f32::NAN;
    check(
        Speculation {
            q: DraftDistribution::Dense(&bad),
            ..good
        },
        &|e| matches!(e, Error::InvalidDraftDistribution { position: 1, .. }),
        "NaN in q",
    );
    let mut bad = q.clone();
    bad[0] = 0.2 + 2.0 * DRAFT_SUM_TOLERANCE as f32;
    check(
        Speculation {
            q: DraftDistribution::Dense(&bad),
            ..good
        },
        &|e| matches!(e, Error::InvalidDraftDistribution { position: 0, .. }),
        "q sums past the tolerance",
    );
    let mut bad = q.clone();
    bad[0] = -0.1;
    bad[1] = 0.5;
    check(
        Speculation {
            q: DraftDistribution::Dense(&bad),
            ..good
        },
        &|e| matches!(e, Error::InvalidDraftDistribution { position: 0, .. }),
        "negative q",
    );
    let pairs = [(0u32, 0.5f64), (1, 0.5), (2, f64::NAN)];
    check(
        Speculation {
            q: DraftDistribution::Sparse {
                pairs: &pairs,
                ends: &[2, 3],
            },
            ..good
        },
        &|e| matches!(e, Error::InvalidDraftDistribution { position: 1, .. }),
        "NaN in sparse q",
    );
    check(
        Speculation {
            q: DraftDistribution::Sparse {
                pairs: &pairs[..2],
                ends: &[2, 1],
            },
            ..good
        },
        &|e| matches!(e, Error::InvalidDraftDistribution { position: 1, .. }),
        "bounds out of order",
    );
    check(
        Speculation {
            q: DraftDistribution::Sparse {
                pairs: &pairs[..2],
                ends: &[2],
            },
            ..good
        },
        &|e| {
            matches!(
                e,
                Error::LengthMismatch {
                    expected: 2,
                    actual: 1
                }
            )
        },
        "bounds for k - 1 positions",
    );
    let far = [(0u32, 0.5f64), (9, 0.5), (0, 1.0)];
    check(
        Speculation {
            q: DraftDistribution::Sparse {
                pairs: &far,
                ends: &[2, 3],
            },
            ..good
        },
        &|e| matches!(e, Error::TokenOutOfRange { id: 9, .. }),
        "sparse q token outside the vocabulary",
    );
    // A draft token outside the vocabulary.
    check(
        Speculation {
            draft: &[1, V as TokenId],
            ..good
        },
        &|e| matches!(e, Error::TokenOutOfRange { .. }),
        "draft token outside the vocabulary",
    );
    // A NaN target row after an accepted token: the accepted token is taken back.
    let mut nan_rows = rows.clone();
    nan_rows[V + 3] = f32::NAN;
    let one_hot = [0.0f32, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0];
    let mut greedy = Sampler::new(SamplingParams::greedy(), V).unwrap();
    greedy.accept(4).unwrap();
    let argmax_first = [0.0f32, 3.0, 0.0, 0.0, 0.0];
    let nan_after: Vec<f32> = argmax_first.iter().chain(&nan_rows[V..]).copied().collect();
    let e = v
        .verify(
            &mut greedy,
            &Speculation {
                draft: &[1, 2],
                q: DraftDistribution::Dense(&one_hot),
                target: &nan_after,
                row_len: V,
            },
        )
        .unwrap_err();
    assert!(matches!(e, Error::NanLogit { .. }), "{e:?}");
    assert_eq!(greedy.history().generated(), &[4]);
}

fn grammar() -> (Arc<Vocab>, GrammarMask) {
    let words = ["ye", "s", "no", "yes", "<eos>"];
    let bytes: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
    let mut kinds = vec![TokenKind::Text; 4];
    kinds.push(TokenKind::Special);
    let vocab = Arc::new(Vocab::new(bytes, kinds, vec![4]).unwrap());
    let choice = Choice::new(vocab.clone(), &["yes", "no"]).unwrap();
    let g = GrammarMask::new(Box::new(choice), vocab.clone());
    (vocab, g)
}

/// Under a grammar: `p` is taken under the mask after the accepted tokens, the emitted
/// tokens are committed, and a disallowed draft token is a typed error that moves
/// neither the sampler nor the grammar.
#[test]
fn grammar_is_advanced_per_token_and_rolled_back_on_error() {
    // Greedy, so that the outcome is known: "ye" is the target's favourite, then "s".
    let rows = [
        [3.0f32, 0.0, 1.0, 2.0, 0.0],
        [0.0, 2.0, 0.0, 0.0, 1.0],
        [0.0, 0.0, 0.0, 0.0, 1.0],
    ]
    .concat();
    let q = vec![0.2f32; 2 * V];
    let mut s = Sampler::new(SamplingParams::greedy(), V).unwrap();
    let (_, mut g) = grammar();
    let mut v = Verifier::new();
    let spec = Speculation {
        draft: &[0, 1],
        q: DraftDistribution::Dense(&q),
        target: &rows,
        row_len: V,
    };
    let out = v.verify_constrained(&mut s, &spec, &mut g).unwrap();
    // "ye", "s", then end-of-sequence: the only token the grammar allows after "yes".
    assert_eq!(out.accepted, 2);
    assert_eq!(v.tokens(), &[0, 1, 4]);
    assert_eq!(g.committed(), 3);

    // A draft token the grammar disallows at its position: "ye" then "no".
    let mut s = Sampler::new(SamplingParams::greedy(), V).unwrap();
    let (_, mut g) = grammar();
    let spec = Speculation {
        draft: &[0, 2],
        ..spec
    };
    let e = v.verify_constrained(&mut s, &spec, &mut g).unwrap_err();
    assert!(
        matches!(e, Error::Grammar(GrammarError::TokenRejected { token: 2 })),
        "{e:?}"
    );
    assert!(s.history().generated().is_empty());
    assert_eq!(g.committed(), 0);
    assert!(g.is_allowed(0).unwrap() && g.is_allowed(2).unwrap());

    // A rejected draft token is not committed: the target prefers "no" to "yes".
    let no_rows = [[0.0f32, 0.0, 3.0, 2.0, 0.0], [0.0; 5], [0.0; 5]].concat();
    let mut s = Sampler::new(SamplingParams::greedy(), V).unwrap();
    let (_, mut g) = grammar();
    let spec = Speculation {
        draft: &[3, 4],
        target: &no_rows,
        ..spec
    };
    let out = v.verify_constrained(&mut s, &spec, &mut g).unwrap();
    assert_eq!(out.accepted, 0);
    assert_eq!(v.tokens(), &[2]);
    assert_eq!(g.committed(), 1);
}

/// An accepted end-of-sequence token ends the verification without a next token.
#[test]
fn accepted_end_of_sequence_ends_the_verification() {
    let rows = [
        [0.0f32, 0.0, 0.0, 3.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 1.0],
        [0.0; 5],
    ]
    .concat();
    let q = vec![0.2f32; 2 * V];
    let mut s = Sampler::new(SamplingParams::greedy(), V).unwrap();
    let (_, mut g) = grammar();
    let mut v = Verifier::new();
    let spec = Speculation {
        draft: &[3, 4],
        q: DraftDistribution::Dense(&q),
        target: &rows,
        row_len: V,
    };
    let out = v.verify_constrained(&mut s, &spec, &mut g).unwrap();
    assert_eq!(out.accepted, 2);
    assert_eq!(out.next, None);
    assert_eq!(out.emitted(), 2);
    assert_eq!(v.tokens(), &[3, 4]);
}

/// Draft logits go through the target's own chain: with the draft's rows equal to the
/// target's, every draft token drawn from the chain is accepted.
#[test]
fn draft_logits_through_the_same_chain() {
    let mut chain = Chain::builder(V)
        .stage(TopK::new(3).unwrap())
        .stage(Temperature::new(0.7).unwrap())
        .draw()
        .seed(5)
        .build()
        .unwrap();
    let mut m = Mix(8);
    let rows: Vec<f32> = (0..4 * V).map(|_| m.normal() as f32).collect();
    let mut v = Verifier::new();
    for trial in 0..200u64 {
        // Draft tokens drawn from the chain's own distribution of each row.
        let mut probe = Chain::builder(V)
            .stage(TopK::new(3).unwrap())
            .stage(Temperature::new(0.7).unwrap())
            .draw()
            .seed(1000 + trial)
            .build()
            .unwrap();
        let mut draft = Vec::new();
        for i in 0..3 {
            draft.push(probe.sample(&rows[i * V..(i + 1) * V]).unwrap().token);
        }
        let spec = Speculation {
            draft: &draft,
            q: DraftDistribution::Logits(&rows[..3 * V]),
            target: &rows,
            row_len: V,
        };
        let out = v.verify(&mut chain, &spec).unwrap();
        assert_eq!(out.accepted, 3, "trial {trial}");
        chain.rollback(4);
    }
}
