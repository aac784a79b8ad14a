//! The fast pipeline against the plain reference (`logits::reference`), and the
//! properties every sampler must have.

use logits::reference::{self, Candidate};
use logits::{
    Chain, History, LogitBias, MinP, Penalties, Sampler, SamplingParams, Temperature, TokenId,
    TokenMask, TopK, TopP,
};
use proptest::prelude::*;

/// A logit: mostly ordinary values, some from a small set (ties), some `-inf`, some large.
fn logit() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => -20.0f32..20.0,
        2 => prop::sample::select(vec![-1.0f32, 0.0, 0.5, 3.0]),
        1 => Just(f32::NEG_INFINITY),
        1 => -1e4f32..1e4,
    ]
}

fn row(max_len: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(logit(), 1..max_len)
        .prop_filter("one finite logit", |r| r.iter().any(|l| l.is_finite()))
}

fn params(vocab: usize) -> impl Strategy<Value = SamplingParams> {
    (
        prop_oneof![1 => Just(0.0f32), 6 => 0.05f32..3.0],
        prop::option::of(1usize..40),
        prop_oneof![1 => Just(1.0f32), 3 => 0.01f32..1.0],
        prop_oneof![1 => Just(0.0f32), 1 => 0.0f32..1.0],
        1usize..4,
        prop_oneof![2 => Just(1.0f32), 1 => 0.5f32..2.0],
        prop_oneof![2 => Just(0.0f32), 1 => -1.0f32..1.0],
        prop_oneof![2 => Just(0.0f32), 1 => -1.0f32..1.0],
        prop::collection::vec((0..vocab as TokenId, -5.0f32..5.0), 0..4),
        any::<u64>(),
    )
        .prop_map(|(t, k, p, mp, keep, rep, freq, pres, bias, seed)| {
            let mut b = SamplingParams::builder()
                .temperature(t)
                .top_p(p)
                .min_p(mp)
                .min_tokens_to_keep(keep)
                .repetition_penalty(rep)
                .frequency_penalty(freq)
                .presence_penalty(pres)
                .seed(seed);
            if let Some(k) = k {
                b = b.top_k(k);
            }
            for (id, v) in bias {
                b = b.logit_bias(id, v);
            }
            b.build().unwrap()
        })
}

/// A row, valid parameters, a history and an optional mask over the same vocabulary.
fn case() -> impl Strategy<Value = (Vec<f32>, SamplingParams, Vec<TokenId>, Option<Vec<bool>>)> {
    row(200).prop_flat_map(|r| {
        let n = r.len();
        (
            Just(r),
            params(n),
            prop::collection::vec(0..n as TokenId, 0..30),
            prop::option::of(prop::collection::vec(prop::bool::weighted(0.8), n)),
        )
    })
}

fn to_mask(bits: &[bool]) -> TokenMask {
    let mut m = TokenMask::new_empty(bits.len());
    for (i, &b) in bits.iter().enumerate() {
        if b {
            m.allow(i as TokenId).unwrap();
        }
    }
    m
}

/// The smallest relative distance between `target` and a running sum of `w`: a cut or a
/// draw closer than this to a boundary may legitimately differ by rounding.
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

/// True when the reference's decisions on this input are far from every rounding
/// boundary (top-p mass, min-p threshold, the draw's target).
fn well_conditioned(adjusted: &[f32], p: &SamplingParams, u: f64) -> bool {
    if p.is_greedy() {
        return true;
    }
    let Ok(mut c) = reference::candidates(adjusted, p.temperature()) else {
        return true;
    };
    if let Some(k) = p.top_k() {
        c = reference::top_k(&c, k, p.min_tokens_to_keep());
    }
    let w: Vec<f64> = c.iter().map(Candidate::weight).collect();
    if p.top_p() < 1.0 {
        let total: f64 = w.iter().sum();
        if margin(&w, logits::as_decimal(p.top_p()) * total) < 1e-9 {
            return false;
        }
    }
    let cut = logits::as_decimal(p.min_p()).ln();
    if c.iter().any(|x| (x.scaled - cut).abs() < 1e-9) {
        return false;
    }
    let s = reference::survivors(adjusted, p).unwrap();
    let w: Vec<f64> = s.iter().map(Candidate::weight).collect();
    let total: f64 = w.iter().sum();
    margin(&w, u * total) > 1e-9
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Same surviving set, same probabilities (1e-6), same token for the same uniform.
    #[test]
    fn fast_path_matches_reference((r, p, hist, mask) in case(), u in 0.0f64..1.0) {
        let n = r.len();
        let mask = mask.as_deref().map(to_mask);
        let history = History::new(&hist, hist.len());
        let expected = reference::adjust(&r, n, &p, &history, mask.as_ref())
            .and_then(|a| reference::survivors(&a, &p).map(|s| (a, s)));
        let mut s = Sampler::new(p.clone(), n).unwrap();
        s.push_prompt(&hist).unwrap();
        let mut got = Vec::new();
        let res = s.distribution(&r, mask.as_ref(), &mut got);
        match expected {
            Err(e) => prop_assert_eq!(res, Err(e)),
            Ok((adjusted, survivors)) => {
                prop_assume!(well_conditioned(&adjusted, &p, u));
                prop_assert!(res.is_ok());
                let want = reference::normalize(&survivors);
                let ids: Vec<TokenId> = got.iter().map(|x| x.0).collect();
                let want_ids: Vec<TokenId> = want.iter().map(|x| x.0).collect();
                prop_assert_eq!(ids, want_ids);
                for (a, b) in got.iter().zip(&want) {
                    prop_assert!((a.1 - b.1).abs() < 1e-6, "{} vs {}", a.1, b.1);
                }
                let token = s.sample_with_uniform(&r, mask.as_ref(), u).unwrap().token;
                prop_assert_eq!(token, reference::draw(&survivors, u));
            }
        }
    }

    /// The default-order chain is the same pipeline: same tokens, same seed.
    #[test]
    fn default_order_chain_matches_sampler(r in row(120), t in 0.1f32..2.0, k in 1usize..30,
                                           top_p in 0.05f32..1.0, min_p in 0.0f32..0.5,
                                           seed in any::<u64>()) {
        let n = r.len();
        let p = SamplingParams::builder().temperature(t).top_k(k).top_p(top_p).min_p(min_p)
            .seed(seed).build().unwrap();
        let mut s = Sampler::new(p, n).unwrap();
        let mut c = Chain::builder(n)
            .stage(Penalties::new(1.0, 0.0, 0.0).unwrap())
            .stage(LogitBias::new([]).unwrap())
            .stage(Temperature::new(t).unwrap())
            .stage(TopK::new(k).unwrap())
            .stage(TopP::new(top_p).unwrap())
            .stage(MinP::new(min_p).unwrap())
            .draw()
            .seed(seed)
            .build()
            .unwrap();
        for _ in 0..4 {
            let a = s.sample(&r).unwrap();
            let b = c.sample(&r).unwrap();
            prop_assert_eq!(a.token, b.token);
            prop_assert!((a.logprob - b.logprob).abs() < 1e-5);
        }
    }

    /// Probabilities are a distribution, and top-p's set is the smallest that reaches p.
    #[test]
    fn top_p_is_minimal_and_normalised(r in row(300), top_p in 0.01f32..1.0) {
        let n = r.len();
        let p = SamplingParams::builder().top_p(top_p).build().unwrap();
        let mut all = Vec::new();
        Sampler::new(SamplingParams::default(), n).unwrap().distribution(&r, None, &mut all).unwrap();
        let mut cut = Vec::new();
        Sampler::new(p, n).unwrap().distribution(&r, None, &mut cut).unwrap();
        let sum: f64 = cut.iter().map(|x| x.1).sum();
        prop_assert!((sum - 1.0).abs() < 1e-9);
        let mass: f64 = all[..cut.len()].iter().map(|x| x.1).sum();
        let without_last: f64 = all[..cut.len() - 1].iter().map(|x| x.1).sum();
        prop_assert!(mass >= logits::as_decimal(top_p) - 1e-9, "kept mass {} < p", mass);
        prop_assert!(without_last < logits::as_decimal(top_p) + 1e-9, "a smaller set reaches p");
    }

    /// Lower temperature never raises the entropy.
    #[test]
    fn entropy_falls_with_temperature(r in row(200), t1 in 0.05f32..3.0, t2 in 0.05f32..3.0) {
        let (lo, hi) = if t1 < t2 { (t1, t2) } else { (t2, t1) };
        let entropy = |t: f32| {
            let mut d = Vec::new();
            let p = SamplingParams::builder().temperature(t).build().unwrap();
            Sampler::new(p, r.len()).unwrap().distribution(&r, None, &mut d).unwrap();
            -d.iter().filter(|x| x.1 > 0.0).map(|x| x.1 * x.1.ln()).sum::<f64>()
        };
        prop_assert!(entropy(lo) <= entropy(hi) + 1e-9);
    }

    /// A banned token is never drawn, whatever the uniform.
    #[test]
    fn banned_tokens_are_never_drawn(r in row(100), banned in prop::collection::vec(any::<prop::sample::Index>(), 1..10),
                                     us in prop::collection::vec(0.0f64..1.0, 20)) {
        let n = r.len();
        let mut b = SamplingParams::builder();
        let banned: Vec<TokenId> = banned.iter().map(|i| i.index(n) as TokenId).collect();
        for &id in &banned {
            b = b.logit_bias(id, f32::NEG_INFINITY);
        }
        let mut s = Sampler::new(b.build().unwrap(), n).unwrap();
        for u in us {
            match s.sample_with_uniform(&r, None, u) {
                Ok(out) => prop_assert!(!banned.contains(&out.token) && r[out.token as usize].is_finite()),
                Err(e) => prop_assert_eq!(e, logits::Error::NoCandidates),
            }
        }
    }

    /// Greedy is deterministic and is the reference argmax.
    #[test]
    fn greedy_is_the_argmax(r in row(300), seed in any::<u64>()) {
        let p = SamplingParams::greedy().to_builder().seed(seed).build().unwrap();
        let mut s = Sampler::new(p, r.len()).unwrap();
        let want = reference::argmax(&r).unwrap();
        for _ in 0..3 {
            prop_assert_eq!(s.sample(&r).unwrap().token, want);
        }
    }

    /// Each tail-cut stage alone, as a chain stage, against its reference function.
    #[test]
    fn cut_stages_match_reference(r in row(150), k in 1usize..40, top_p in 0.01f32..1.0,
                                  min_p in 0.0f32..1.0, keep in 1usize..4, seed in any::<u64>()) {
        let n = r.len();
        let base = reference::candidates(&r, 1.0).unwrap();
        let cases: Vec<(Box<dyn logits::Stage>, Vec<Candidate>)> = vec![
            (Box::new(TopK::new(k).unwrap().min_keep(keep)), reference::top_k(&base, k, keep)),
            (Box::new(TopP::new(top_p).unwrap().min_keep(keep)), reference::top_p(&base, top_p, keep)),
            (Box::new(MinP::new(min_p).unwrap().min_keep(keep)), reference::min_p(&base, min_p, keep)),
        ];
        // The chain's first draw uses the uniform of (seed, step 0).
        let u = logits::DrawRng::new(seed).uniform(0);
        for (stage, want) in cases {
            let w: Vec<f64> = want.iter().map(Candidate::weight).collect();
            let total: f64 = w.iter().sum();
            if margin(&w, u * total) < 1e-9 {
                continue;
            }
            let mut chain = Chain::builder(n).boxed_stage(stage).draw().seed(seed).build().unwrap();
            let out = chain.sample(&r).unwrap();
            prop_assert_eq!(out.token, reference::draw(&want, u));
            let w_tok = want.iter().find(|c| c.id == out.token).unwrap().weight();
            prop_assert!((f64::from(out.logprob) - (w_tok / total).ln()).abs() < 1e-5);
        }
    }
}
