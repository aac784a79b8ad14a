//! The two ways `Sampler::sample_masked` reads a mask give the results of the dense
//! path (the masked `f32` copy of the row).
//!
//! - a sparse mask (at most 4,096 allowed tokens, 1,024 with greedy or a top-k of at
//!   most 256) becomes a compact row of the allowed tokens: the same tokens,
//!   distributions, logprobs and errors, bit for bit;
//! - any other mask marks the disallowed tokens, which every pass over the caller's row
//!   skips: bit for bit the same again, but for the bias and penalty patches, which the
//!   histogram's bucket sums take in after the row (so their probabilities are within
//!   rounding of the copy's; the kept set, the token and the errors are the same).
//!
//! The dense path is forced by a processor that changes nothing (a user processor always
//! takes the dense path). Rows of up to 24,000 tokens reach both regimes and their
//! boundary.

use logits::half::{bf16, f16};
use logits::{
    Error, History, LogitsProcessor, Sample, Sampler, SamplingParams, TokenId, TokenMask,
};
use proptest::prelude::*;

mod mix;
use mix::Mix;

/// The sparse regime's bound on allowed tokens.
const SPARSE_MAX: usize = 4096;
/// The same with greedy or a top-k of at most 256, where the marks are the alternative.
const SPARSE_MAX_SELECT: usize = 1024;

fn selects_only(p: &SamplingParams) -> bool {
    p.is_greedy()
        || p.top_k()
            .is_some_and(|k| k.max(p.min_tokens_to_keep()) <= 256)
}

fn sparse_max(p: &SamplingParams) -> usize {
    if selects_only(p) {
        SPARSE_MAX_SELECT
    } else {
        SPARSE_MAX
    }
}

/// A processor that changes nothing: it only routes the sampler through the dense path.
#[derive(Clone, Debug)]
struct Dense;

impl LogitsProcessor for Dense {
    fn process(&mut self, _: &mut [f32], _: &History<'_>) -> Result<(), Error> {
        Ok(())
    }
}

/// Rows: peaked, flat, heavy ties, a third `-inf`, and optionally one NaN or `+inf`.
fn make_row(shape: u8, n: usize, bad: u8, seed: u64) -> Vec<f32> {
    let mut r = Mix(seed);
    let mut row: Vec<f32> = (0..n)
        .map(|_| match shape {
            0 => (4.0 * r.unit() - 2.0) as f32,
            1 => (0.5 * r.unit()) as f32,
            2 => (r.next() % 7) as f32 * 0.5,
            _ => {
                if r.next().is_multiple_of(3) {
                    f32::NEG_INFINITY
                } else {
                    (6.0 * r.unit() - 3.0) as f32
                }
            }
        })
        .collect();
    if shape == 0 {
        for _ in 0..1 + r.below(30) {
            let i = r.below(n);
            row[i] = (8.0 + 6.0 * r.unit()) as f32;
        }
    }
    match bad {
        1 => {
            let i = r.below(n);
            row[i] = f32::NAN;
        }
        2 => {
            let i = r.below(n);
            row[i] = f32::INFINITY;
        }
        _ => {}
    }
    row
}

/// A mask over `n` tokens allowing exactly `count` of them: spread at random, or in a
/// few runs of neighbouring ids (as real grammar masks are).
fn make_mask(n: usize, count: usize, runs: bool, seed: u64) -> TokenMask {
    let mut r = Mix(seed);
    let count = count.min(n);
    let mut m = TokenMask::new_empty(n);
    if runs {
        let mut left = count;
        let mut start = r.below(n);
        while left > 0 {
            let len = (1 + r.below(left.min(600))).min(left);
            for i in 0..len {
                let id = (start + i) % n;
                if m.is_allowed(id as TokenId) {
                    continue;
                }
                m.allow(id as TokenId).unwrap();
                left -= 1;
            }
            start = r.below(n);
            if m.count_allowed() == n {
                break;
            }
        }
        // Runs may overlap: top up or trim to the exact count.
        let mut id = 0;
        while m.count_allowed() < count {
            m.allow(id).unwrap();
            id += 1;
        }
    } else {
        let mut ids: Vec<TokenId> = (0..n as TokenId).collect();
        for i in 0..count {
            let j = i + r.below(n - i);
            ids.swap(i, j);
        }
        for &id in &ids[..count] {
            m.allow(id).unwrap();
        }
    }
    m
}

/// How many tokens a mask allows: every density, and the regimes' boundaries.
fn allowed_count(n: usize) -> impl Strategy<Value = usize> {
    let mut picks = vec![
        0,
        1,
        2,
        n,
        n - 1,
        SPARSE_MAX,
        SPARSE_MAX + 1,
        SPARSE_MAX_SELECT,
        SPARSE_MAX_SELECT + 1,
        n.saturating_sub(2048),
        n.saturating_sub(16_384),
        n / 2,
    ];
    picks.retain(|&c| c <= n);
    prop_oneof![
        2 => prop::sample::select(picks),
        1 => 0..=n,
        1 => 0..=64usize.min(n),
        1 => n.saturating_sub(64)..=n,
    ]
}

#[derive(Debug, Clone)]
struct Case {
    row: Vec<f32>,
    mask: TokenMask,
    params: SamplingParams,
    prompt: Vec<TokenId>,
    generated: Vec<TokenId>,
    u: f64,
}

fn params() -> impl Strategy<Value = (SamplingParams, bool)> {
    (
        (
            prop_oneof![1 => Just(0.0f32), 6 => 0.2f32..2.0],
            prop_oneof![3 => Just(None), 2 => (1usize..40).prop_map(Some), 1 => (200usize..700).prop_map(Some), 1 => (3000usize..20000).prop_map(Some)],
            prop_oneof![2 => Just(1.0f32), 3 => 0.05f32..1.0],
            prop_oneof![3 => Just(0.0f32), 1 => 0.0001f32..0.5],
            prop_oneof![3 => Just(1usize), 1 => 2usize..80],
        ),
        (
            prop_oneof![2 => Just(1.0f32), 1 => 0.5f32..2.0],
            prop_oneof![2 => Just(0.0f32), 1 => -1.0f32..1.0],
            prop_oneof![2 => Just(0.0f32), 1 => -1.0f32..1.0],
            prop::collection::vec((any::<prop::sample::Index>(), prop_oneof![-5.0f32..5.0, Just(f32::NEG_INFINITY), Just(30.0f32)]), 0..5),
            prop_oneof![3 => Just(None), 1 => (0usize..6).prop_map(Some)],
            any::<u64>(),
        ),
    )
        .prop_map(|((t, k, top_p, min_p, keep), (rep, freq, presence, bias, lp, seed))| {
            let mut b = SamplingParams::builder()
                .temperature(t)
                .top_p(top_p)
                .min_p(min_p)
                .min_tokens_to_keep(keep)
                .repetition_penalty(rep)
                .frequency_penalty(freq)
                .presence_penalty(presence)
                .penalty_window(48)
                .seed(seed);
            if let Some(k) = k {
                b = b.top_k(k);
            }
            if let Some(n) = lp {
                b = b.logprobs(n);
            }
            // Bias ids are resolved against the vocabulary later.
            let biased = !bias.is_empty();
            (b.build().unwrap(), biased)
        })
}

fn case(sizes: std::ops::Range<usize>) -> impl Strategy<Value = Case> {
    sizes
        .prop_flat_map(|n| (Just(n), allowed_count(n)))
        .prop_flat_map(|(n, count)| {
            (
                Just(n),
                Just(count),
                (
                    0u8..4,
                    prop_oneof![8 => Just(0u8), 1 => 1u8..3],
                    any::<u64>(),
                ),
                (any::<bool>(), any::<u64>()),
                params(),
                prop::collection::vec(
                    (
                        any::<prop::sample::Index>(),
                        prop_oneof![-5.0f32..5.0, Just(f32::NEG_INFINITY), Just(30.0f32)],
                    ),
                    0..5,
                ),
                prop::collection::vec(any::<prop::sample::Index>(), 0..40),
                prop::collection::vec(any::<prop::sample::Index>(), 0..12),
                0.0f64..1.0,
            )
        })
        .prop_map(
            |(
                n,
                count,
                (shape, bad, row_seed),
                (runs, mask_seed),
                (params, biased),
                bias,
                prompt,
                generated,
                u,
            )| {
                let row = make_row(shape, n, bad, row_seed);
                let mask = make_mask(n, count, runs, mask_seed);
                let mut b = params.to_builder();
                if biased {
                    for (i, v) in bias {
                        b = b.logit_bias(i.index(n) as TokenId, v);
                    }
                }
                Case {
                    row,
                    mask,
                    params: b.build().unwrap(),
                    prompt: prompt.iter().map(|i| i.index(n) as TokenId).collect(),
                    generated: generated.iter().map(|i| i.index(n) as TokenId).collect(),
                    u,
                }
            },
        )
}

fn sampler(c: &Case, dense: bool) -> Sampler {
    let mut s = Sampler::new(c.params.clone(), c.row.len()).unwrap();
    if dense {
        s.add_processor(Box::new(Dense));
    }
    s.push_prompt(&c.prompt).unwrap();
    for &t in &c.generated {
        s.accept(t).unwrap();
    }
    s
}

/// True when the mask takes the marks with bias or penalty patches and a cut that sums
/// (no top-k of the one-pass selection), whose bucket sums may differ from the dense
/// path's in the last bits.
fn patched_sums(c: &Case) -> bool {
    let p = &c.params;
    let penalised = (p.repetition_penalty() != 1.0
        || p.frequency_penalty() != 0.0
        || p.presence_penalty() != 0.0)
        && !(c.prompt.is_empty() && c.generated.is_empty());
    let patched = !p.logit_bias().is_empty() || penalised;
    // (Greedy and the one-pass top-k only compare: that path must match exactly.)
    patched && !selects_only(p) && c.mask.count_allowed() > sparse_max(p)
}

/// The same token, raw logprobs and alternatives. The processed logprobs are
/// `ln(w / total)` in `f64`, rounded to `f32`, and the paths find the total in different
/// ways: the compact row's draw from the whole row weighs the tail below its best tokens
/// with the vectorised weights (within their bound), where the dense copy sums every
/// weight in `f64`. So they agree within an ulp or two (`exact`: no patched bucket
/// sums), or within `1e-5` of their magnitude (bucket sums of patched logits).
fn same_sample(
    a: &Result<Sample, Error>,
    b: &Result<Sample, Error>,
    exact: bool,
) -> Result<(), TestCaseError> {
    let close = if exact { ulps } else { close };
    match (a, b) {
        (Ok(a), Ok(b)) => {
            prop_assert_eq!(a.token, b.token);
            prop_assert_eq!(a.raw_logprob, b.raw_logprob);
            prop_assert!(
                close(a.logprob, b.logprob),
                "{} vs {}",
                a.logprob,
                b.logprob
            );
            prop_assert_eq!(a.alternatives().len(), b.alternatives().len());
            for (x, y) in a.alternatives().iter().zip(b.alternatives()) {
                prop_assert_eq!(x.token, y.token);
                prop_assert_eq!(x.raw_logprob, y.raw_logprob);
                prop_assert!(
                    close(x.logprob, y.logprob),
                    "{} vs {}",
                    x.logprob,
                    y.logprob
                );
            }
        }
        _ => prop_assert_eq!(a, b),
    }
    Ok(())
}

fn close(a: f32, b: f32) -> bool {
    a == b || (a - b).abs() <= 1e-5 * a.abs().max(1.0)
}

/// Equal, or within an `f32` ulp or two.
fn ulps(a: f32, b: f32) -> bool {
    a == b || (a - b).abs() <= 4.0 * f32::EPSILON * a.abs().max(1.0)
}

/// Distribution, a draw with a given uniform, then two draws with the sequence's own
/// uniforms, on the mask path and on the dense path.
fn check<T: logits::Logit>(c: &Case, row: &[T]) -> Result<(), TestCaseError> {
    let exact = !patched_sums(c);
    let (mut fast, mut dense) = (sampler(c, false), sampler(c, true));
    let (mut d1, mut d2) = (Vec::new(), Vec::new());
    let r1 = fast.distribution(row, Some(&c.mask), &mut d1);
    let r2 = dense.distribution(row, Some(&c.mask), &mut d2);
    prop_assert_eq!(&r1, &r2);
    if exact {
        prop_assert_eq!(&d1, &d2);
    } else {
        let ids = |d: &[(TokenId, f64)]| d.iter().map(|x| x.0).collect::<Vec<_>>();
        prop_assert_eq!(ids(&d1), ids(&d2));
        for (a, b) in d1.iter().zip(&d2) {
            prop_assert!((a.1 - b.1).abs() <= 1e-12, "{} vs {}", a.1, b.1);
        }
    }
    if r1.is_ok() {
        // A token the mask removed never survives.
        prop_assert!(d1.iter().all(|&(id, _)| c.mask.is_allowed(id)));
    }
    let a = fast.sample_with_uniform(row, Some(&c.mask), c.u);
    let b = dense.sample_with_uniform(row, Some(&c.mask), c.u);
    same_sample(&a, &b, exact)?;
    if let Ok(s) = &a {
        prop_assert!(c.mask.is_allowed(s.token));
        for alt in s.alternatives() {
            if !c.mask.is_allowed(alt.token) {
                prop_assert_eq!(alt.logprob, f32::NEG_INFINITY);
            }
        }
    }
    for _ in 0..2 {
        let a = fast.sample_masked(row, &c.mask);
        let b = dense.sample_masked(row, &c.mask);
        same_sample(&a, &b, exact)?;
    }
    prop_assert_eq!(fast.history().tokens(), dense.history().tokens());
    Ok(())
}

fn check_all_types(c: &Case) -> Result<(), TestCaseError> {
    check(c, &c.row)?;
    let h: Vec<f16> = c.row.iter().map(|&x| f16::from_f32(x)).collect();
    check(c, &h)?;
    let b: Vec<bf16> = c.row.iter().map(|&x| bf16::from_f32(x)).collect();
    check(c, &b)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Vocabularies of 20,600 to 24,000 tokens: sparse, dense and nearly-open masks.
    #[test]
    fn large_vocabularies_match_the_dense_path(c in case(20_600..24_000)) {
        check_all_types(&c)?;
    }

    /// Small vocabularies (every mask is sparse), including lengths that are not a
    /// multiple of 32.
    #[test]
    fn small_vocabularies_match_the_dense_path(c in case(1..300)) {
        check_all_types(&c)?;
    }

    /// The documented semantics: the same as `TokenMask::apply` on an `f32` copy, then an
    /// unmasked draw (here without bias or penalties, so that the copy takes no patch).
    #[test]
    fn same_as_masking_a_copy(c in case(4_000..21_000)) {
        let p = &c.params;
        let mut b = SamplingParams::builder()
            .temperature(p.temperature())
            .top_p(p.top_p())
            .min_p(p.min_p())
            .min_tokens_to_keep(p.min_tokens_to_keep())
            .seed(p.seed());
        if let Some(k) = p.top_k() {
            b = b.top_k(k);
        }
        // (No logprobs: the raw logprobs are of the row given, here the copy.)
        let params = b.build().unwrap();
        let c = Case { params, ..c };
        let mut copy = c.row.clone();
        c.mask.apply(&mut copy).unwrap();
        let exact = !patched_sums(&c);
        prop_assert!(exact);
        let (mut masked, mut plain) = (sampler(&c, false), sampler(&c, false));
        let a = masked.sample_with_uniform(&c.row, Some(&c.mask), c.u);
        let b = plain.sample_with_uniform(&copy, None, c.u);
        // A NaN or `+inf` at a disallowed token is still an error on the masked path.
        match (&a, c.row.iter().position(|x| x.is_nan() || *x == f32::INFINITY)) {
            (Err(e), Some(i)) => {
                let reported = matches!(e, Error::NanLogit { index } | Error::InfiniteLogit { index } if *index == i);
                prop_assert!(reported, "{:?} for the bad logit at {}", e, i);
            }
            (Ok(_), Some(i)) => prop_assert!(false, "bad logit {} accepted", i),
            _ => same_sample(&a, &b, exact)?,
        }
    }
}

proptest! {
    /// The mask stage sizes the sampler's view of the row by the exact number of allowed
    /// tokens: the compact row holds them, or the marks the disallowed ones. Stray bits
    /// past the mask's length count for nothing.
    #[test]
    fn the_mask_stage_counts_exactly(
        (n, count) in (1usize..40_000).prop_flat_map(|n| (Just(n), allowed_count(n))),
        runs in any::<bool>(),
        stray in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut mask = make_mask(n, count, runs, seed);
        if stray && n % 32 != 0 {
            *mask.words_mut().last_mut().unwrap() |= u32::MAX << (n % 32);
        }
        let row = vec![0.5f32; n];
        for params in [SamplingParams::default(), SamplingParams::greedy()] {
            let want = if count <= sparse_max(&params) {
                count
            } else {
                n - count
            };
            let mut s = Sampler::new(params, n).unwrap();
            prop_assert_eq!(s.mask_stage(&row, &mask), Ok(want));
        }
    }
}

/// Stray bits past the mask's length (left by a caller of `words_mut`) are ignored, as
/// `TokenMask::apply` ignores them.
#[test]
fn stray_tail_bits_are_ignored() {
    let n = 70;
    let row: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
    let mut mask = TokenMask::new_empty(n);
    mask.allow(3).unwrap();
    *mask.words_mut().last_mut().unwrap() |= u32::MAX << (n % 32);
    let mut s = Sampler::new(SamplingParams::greedy(), n).unwrap();
    assert_eq!(s.sample_masked(&row, &mask).unwrap().token, 3);
    let mut dist = Vec::new();
    s.distribution(&row, Some(&mask), &mut dist).unwrap();
    assert_eq!(dist, [(3, 1.0)]);
}

/// An empty mask, and a mask whose allowed tokens are all banned, in each regime.
#[test]
fn nothing_allowed_is_no_candidates() {
    let n = 24_000;
    let row = vec![1.0f32; n];
    for allowed in [
        0,
        1,
        100,
        SPARSE_MAX,
        SPARSE_MAX + 1,
        n / 2,
        n - 2048,
        n - 1,
        n,
    ] {
        let mask = make_mask(n, allowed, false, 7);
        let mut banned = row.clone();
        for (id, l) in banned.iter_mut().enumerate() {
            if mask.is_allowed(id as TokenId) {
                *l = f32::NEG_INFINITY;
            }
        }
        for params in [
            SamplingParams::greedy(),
            SamplingParams::default(),
            SamplingParams::builder()
                .top_k(20)
                .top_p(0.9)
                .build()
                .unwrap(),
            SamplingParams::builder().min_p(0.1).build().unwrap(),
            SamplingParams::builder().top_p(0.9).build().unwrap(),
            SamplingParams::builder().top_k(300).build().unwrap(),
        ] {
            let mut s = Sampler::new(params, n).unwrap();
            assert_eq!(
                s.sample_masked(&banned, &mask).map(|x| x.token),
                Err(Error::NoCandidates),
                "{allowed}"
            );
            let mut dist = Vec::new();
            assert_eq!(
                s.distribution(&banned, Some(&mask), &mut dist),
                Err(Error::NoCandidates)
            );
            assert!(s.history().generated().is_empty());
        }
    }
}

/// A nearly-open mask that disallows the row's maximum (in a whole word of the row, or in
/// its last, partial word; a little or far above the rest), with cuts that read the whole row (top-p's candidates and
/// mass, min-p's and the plain draw's histogram): the other tokens' maximum is looked up
/// past the marks, as the dense path finds it.
#[test]
fn a_disallowed_maximum_under_marks() {
    let n = 21_003;
    let mut r = Mix(99);
    let base: Vec<f32> = (0..n).map(|_| (4.0 * r.unit() - 2.0) as f32).collect();
    // (A banned value far above the rest, 300, would leave every other weight below
    // `f32`'s range if it were taken for the maximum.)
    for (top, value) in [(5_000, 20.0), (n - 2, 20.0), (5_000, 300.0), (n - 2, 300.0)] {
        let mut row = base.clone();
        row[top] = value;
        row[top - 1] = 9.0;
        let mut mask = TokenMask::new_full(n);
        mask.disallow(top as TokenId).unwrap();
        for id in (7..n).step_by(500) {
            mask.disallow(id as TokenId).unwrap();
        }
        for params in [
            SamplingParams::builder()
                .top_p(0.9)
                .seed(3)
                .build()
                .unwrap(),
            SamplingParams::builder()
                .min_p(0.01)
                .seed(3)
                .build()
                .unwrap(),
            SamplingParams::builder()
                .temperature(0.7)
                .seed(3)
                .build()
                .unwrap(),
        ] {
            let c = Case {
                row: row.clone(),
                mask: mask.clone(),
                params,
                prompt: vec![],
                generated: vec![],
                u: 0.37,
            };
            assert!(!patched_sums(&c));
            check_all_types(&c).unwrap();
            let mut s = sampler(&c, false);
            let mut dist = Vec::new();
            s.distribution(&c.row, Some(&c.mask), &mut dist).unwrap();
            assert_eq!(dist[0].0, (top - 1) as TokenId);
        }
    }
}
