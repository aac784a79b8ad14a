//! Inputs the fuzz targets (`fuzz/`) found that broke a promise of the crate. Each test
//! is the minimised input with the fixed behaviour asserted, so the bug cannot return.

use logits::grammar::{GrammarError, Vocab};
use logits::{Chain, Sampler, SamplingParams};

mod mix;
use mix::opaque::Opaque;

/// Fuzz target `pipeline`: `logprobs(0)` (a raw logprob but no alternatives, which the
/// builder accepts) made every draw panic on an index underflow in the top-n search.
#[test]
fn logprobs_with_zero_alternatives() {
    let params = SamplingParams::builder()
        .logprobs(0)
        .seed(3)
        .build()
        .unwrap();
    let row = [1.0f32, 2.0, 0.5];
    let mut s = Sampler::new(params.clone(), 3).unwrap();
    let out = s.sample(&row).unwrap();
    assert!(out.alternatives().is_empty());
    let raw = out.raw_logprob.expect("a raw logprob is still reported");
    let want = logits::reference::raw_logprob(&row, 3, out.token);
    assert!((f64::from(raw) - want).abs() < 1e-6, "{raw} vs {want}");

    let mut greedy =
        Sampler::new(params.to_builder().temperature(0.0).build().unwrap(), 3).unwrap();
    assert_eq!(greedy.sample(&row).unwrap().token, 1);

    let mut chain = Chain::builder(3).draw().logprobs(0).build().unwrap();
    let out = chain.sample(&row).unwrap();
    assert!(out.alternatives().is_empty() && out.raw_logprob.is_some());
}

/// Fuzz target `tail_cut`: with logits near `f32::MAX` the raw log-softmax was computed
/// as `l - (max + ln z)`, and `max + ln z` rounds back to `max` at that magnitude, so two
/// tokens tied at the maximum each got raw probability 1 (summing to 2).
#[test]
fn raw_logprobs_of_huge_logits_sum_to_one() {
    for top in [f32::MAX, 1e38, 1e20] {
        let row = [top, top, 0.0, -top];
        let params = SamplingParams::builder()
            .logprobs(4)
            .seed(1)
            .build()
            .unwrap();
        let out = Sampler::new(params, 4).unwrap().sample(&row).unwrap();
        let alts = out.alternatives();
        assert_eq!(alts.len(), 4);
        for a in &alts[..2] {
            assert!((a.raw_logprob - 0.5f32.ln()).abs() < 1e-6, "{top}: {a:?}");
            assert!((a.logprob - 0.5f32.ln()).abs() < 1e-6, "{top}: {a:?}");
        }
        let sum: f64 = alts.iter().map(|a| f64::from(a.raw_logprob).exp()).sum();
        assert!(
            (sum - 1.0).abs() < 1e-5,
            "{top}: raw probabilities sum to {sum}"
        );
        assert_eq!(out.raw_logprob, Some(0.5f32.ln()));

        let mut chain = Chain::builder(4).draw().logprobs(4).build().unwrap();
        let out = chain.sample(&row).unwrap();
        let sum: f64 = out
            .alternatives()
            .iter()
            .map(|a| f64::from(a.raw_logprob).exp())
            .sum();
        assert!(
            (sum - 1.0).abs() < 1e-5,
            "{top}: chain raw probabilities sum to {sum}"
        );
    }
}

/// Fuzz target `tokenizer_json`: a token id near `u32::MAX` in `model.vocab` or
/// `added_tokens` made the loader allocate a slot for every id below it (128 GiB) before
/// comparing with the logits row, so a hostile file aborted the process. It must be an
/// `InvalidVocab` error, decided without allocating.
#[test]
fn tokenizer_json_with_a_huge_token_id() {
    let file = |vocab: &str, added: &str| {
        format!(
            r#"{{"added_tokens": [{added}], "pre_tokenizer": {{"type": "ByteLevel"}},
                "model": {{"type": "BPE", "vocab": {{{vocab}}}, "merges": []}}}}"#
        )
    };
    let ok = file(
        r#""a": 0, "b": 1"#,
        r#"{"id": 2, "content": "<eos>", "special": true}"#,
    );
    assert_eq!(Vocab::from_tokenizer_json(&ok, 8, &[2]).unwrap().len(), 8);
    for (vocab, added) in [
        (
            r#""a": 0, "b": 4294967295"#,
            r#"{"id": 2, "content": "<eos>"}"#,
        ),
        (
            r#""a": 0, "b": 1"#,
            r#"{"id": 4294967295, "content": "<eos>"}"#,
        ),
        (
            r#""a": 0, "b": 3000000000"#,
            r#"{"id": 2, "content": "<eos>"}"#,
        ),
        (r#""a": 0, "b": 8"#, r#"{"id": 2, "content": "<eos>"}"#),
    ] {
        let r = Vocab::from_tokenizer_json(&file(vocab, added), 8, &[2]);
        assert!(
            matches!(r, Err(GrammarError::InvalidVocab(_))),
            "{vocab} {added}: {r:?}"
        );
    }
}

/// Fuzz target `pipeline`: `-0.0` and `0.0` are the same logit, so they tie and the lower
/// id comes first. The reference (and the sort every cut shares) ordered `-0.0` after
/// `0.0`, so token 0 at `-0.0` moved to the end of the candidates and the reference drew
/// another token than the sampler for the same uniform.
#[test]
fn negative_zero_ties_with_zero() {
    use logits::reference;
    let mut row = vec![0.0f32; 19];
    row[0] = -0.0;
    let c = reference::candidates(&row, 1.0).unwrap();
    let ids: Vec<u32> = c.iter().map(|x| x.id).collect();
    assert_eq!(ids, (0..19).collect::<Vec<u32>>());
    for seed in 0..64 {
        for b in [
            SamplingParams::builder().top_k(38),
            SamplingParams::builder().top_k(300),
            SamplingParams::builder().top_p(0.5),
            SamplingParams::builder().min_p(0.5),
            SamplingParams::builder(),
        ] {
            let params = b.seed(seed).build().unwrap();
            let u = logits::DrawRng::new(seed).uniform(0);
            let history = logits::History::new(&[], 0);
            let (want, _) = reference::sample(&row, 19, &params, &history, None, u).unwrap();
            let got = Sampler::new(params.clone(), 19)
                .unwrap()
                .sample(&row)
                .unwrap();
            assert_eq!(got.token, want, "{params:?}");
        }
        let mut chain = Chain::builder(19)
            .stage(logits::TopK::new(5).unwrap())
            .draw()
            .seed(seed)
            .build()
            .unwrap();
        assert!(chain.sample(&row).unwrap().token < 5, "-0.0 lost its tie");
    }
}

/// Fuzz target `tail_cut`: a subnormal temperature (valid: finite and `>= 0`) made
/// `1 / T` overflow to `inf` in the histogram's `f32` keys, and `0 * inf` is NaN for the
/// maximum itself, so the draw went to the wrong token.
#[test]
fn subnormal_temperature_draws_like_the_reference() {
    use logits::reference;
    for t in [1.35414e-40f32, f32::from_bits(1), f32::MIN_POSITIVE / 2.0] {
        for (row, min_p) in [
            (vec![0.0f32, 0.0], 1.0),
            (vec![0.0f32, 0.0, -1e-3, 0.0], 0.0),
            (vec![1.0f32, 1.0, 1.0], 0.5),
        ] {
            for seed in 0..32 {
                let params = SamplingParams::builder()
                    .temperature(t)
                    .min_p(min_p)
                    .seed(seed)
                    .logprobs(4)
                    .build()
                    .unwrap();
                let n = row.len();
                let u = logits::DrawRng::new(seed).uniform(0);
                let history = logits::History::new(&[], 0);
                let (want, lp) = reference::sample(&row, n, &params, &history, None, u).unwrap();
                let out = Sampler::new(params, n).unwrap().sample(&row).unwrap();
                assert_eq!(out.token, want, "T {t}, row {row:?}, seed {seed}");
                assert!((f64::from(out.logprob) - lp).abs() < 1e-6);
                let sum: f64 = out
                    .alternatives()
                    .iter()
                    .map(|a| f64::from(a.logprob).exp())
                    .sum();
                assert!((sum - 1.0).abs() < 1e-5, "{sum}");
            }
        }
    }
}

/// The sampler's distribution equals the reference's: same tokens in the same order,
/// probabilities within `1e-6`.
fn assert_matches_reference(row: &[f32], params: &SamplingParams) {
    let want = logits::reference::normalize(
        &logits::reference::survivors(row, params).expect("a valid row"),
    );
    let mut got = Vec::new();
    Sampler::new(params.clone(), row.len())
        .unwrap()
        .distribution(row, None, &mut got)
        .unwrap();
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.0, w.0, "{got:?} vs {want:?}");
        assert!((g.1 - w.1).abs() < 1e-6, "{got:?} vs {want:?}");
    }
}

/// Fuzz target `tail_cut`, three inputs at extreme temperatures, where the histogram's
/// `f32` arithmetic loses its meaning:
/// - a subnormal temperature over subnormal logits: `1 / T` overflows `f32`, so the
///   bucket keys put tokens 5.8 nats apart in neighbouring buckets, and min-p with
///   `min_tokens_to_keep(2)` kept three tokens;
/// - a temperature of `4e37` over logits `1e38` apart: `l - max` overflows `f32` for
///   a token whose weight is `e^-8`, which the fast weights counted as `e^-87`;
/// - a tiny temperature with logits near `1e38`: the two-sum correction of a clamped
///   weight made it negative.
///
/// Now an extreme temperature sorts every finite token, and the correction applies only
/// to weights that are not clamped.
#[test]
fn extreme_temperatures_match_the_reference() {
    let tiny = 7.533e-42f32;
    let sub = 4.358e-41f32;
    let cases: [(Vec<f32>, SamplingParams); 4] = [
        (
            vec![0.0, 0.0, -12.25, f32::NEG_INFINITY, sub],
            SamplingParams::builder()
                .temperature(tiny)
                .min_p(0.325_490_2)
                .min_tokens_to_keep(2)
                .build()
                .unwrap(),
        ),
        (
            vec![
                -11.0, 13.625, 15.75, 8.457e37, 5.0, -2.578e38, -3.69e19, 5e-44,
            ],
            SamplingParams::builder()
                .temperature(4.253_714_7e37)
                .min_p(0.1)
                .min_tokens_to_keep(3)
                .build()
                .unwrap(),
        ),
        (
            vec![1e38, 1e38, -3.5, 2.9e-39, 1e38],
            SamplingParams::builder()
                .temperature(2.328_263_7e-38)
                .build()
                .unwrap(),
        ),
        (
            vec![1e38, 2.9e-39, 4.802e30, 1e38, 2.9e-39],
            SamplingParams::builder()
                .temperature(0.002_502_479_6)
                .min_tokens_to_keep(4)
                .build()
                .unwrap(),
        ),
    ];
    for (row, params) in &cases {
        assert_matches_reference(row, params);
        let top_p = params.to_builder().top_p(0.9).build().unwrap();
        assert_matches_reference(row, &top_p);
    }
}

/// Fuzz target `chain`: a repetition penalty below 1 turned a huge finite logit into
/// `+inf`; with a whole-row stage after the penalties (top-n-sigma here), the planned
/// chain handed that row to the stage, whose statistics became NaN and cut every token
/// (`NoCandidates`), where the same stages hidden from the planner, and the chain
/// without the whole-row stage, refuse the row with `InfiniteLogit`.
#[test]
fn a_penalty_that_overflows_is_refused_before_a_whole_row_stage() {
    use logits::{Error, Penalties, Stage, TopNSigma};
    let row = [0.5f32, 1.0e31, -2.0, 3.0];
    let stages = || -> Vec<Box<dyn Stage>> {
        vec![
            Box::new(Penalties::new(1e-12, 0.0, 0.0).unwrap()),
            Box::new(TopNSigma::new(1.0).unwrap()),
        ]
    };
    for n in 1..=2 {
        let mut b = Chain::builder(4);
        for s in stages().into_iter().take(n) {
            b = b.boxed_stage(s);
        }
        let mut chain = b.draw().build().unwrap();
        chain.push_prompt(&[1]).unwrap();
        let mut dist = Vec::new();
        assert_eq!(
            chain.distribution(&row, None, &mut dist),
            Err(Error::InfiniteLogit { index: 1 }),
            "{n} stages"
        );
        assert_eq!(
            chain.sample(&row).map(|s| s.token),
            Err(Error::InfiniteLogit { index: 1 })
        );
    }
    // Masked out, the overflowing token is no error.
    let mut chain = Chain::builder(4)
        .boxed_stage(stages().remove(0))
        .stage(TopNSigma::new(1.0).unwrap())
        .draw()
        .build()
        .unwrap();
    chain.push_prompt(&[1]).unwrap();
    let mut mask = logits::TokenMask::new_full(4);
    mask.disallow(1).unwrap();
    assert_ne!(chain.sample_masked(&row, &mask).unwrap().token, 1);
}

/// Fuzz target `chain`: a frequency penalty of `-1.6e38` on a token seen 3 times
/// overflows `count * penalty` to `-inf`. The planned chain applies the penalties before
/// the mask, so the masked token's `+inf` was masked away; a `Penalties` stage hidden
/// from the planner saw the masked token's `-inf` first, and `-inf - (-inf)` made it NaN
/// (`NanLogit`). `-inf` is now absorbing under every penalty, so both orders agree.
#[test]
fn a_penalty_overflow_on_a_masked_token_is_no_error_in_either_order() {
    use logits::{Error, Penalties, TokenMask};
    let row = [0.5f32, 1.0, -2.0, 3.0];
    let penalties = || Penalties::new(1.0, -1.6e38, 0.0).unwrap();
    let mut mask = TokenMask::new_full(4);
    mask.disallow(1).unwrap();
    let params = SamplingParams::builder()
        .frequency_penalty(-1.6e38)
        .seed(7)
        .build()
        .unwrap();
    // Each draw is accepted into the history, so every uniform gets fresh samplers.
    for u in [0.0, 0.3, 0.7, 0.999] {
        let mut planned = Chain::builder(4).stage(penalties()).draw().build().unwrap();
        let mut hidden = Chain::builder(4)
            .stage(Opaque::new(penalties()))
            .draw()
            .build()
            .unwrap();
        let mut sampler = Sampler::new(params.clone(), 4).unwrap();
        for s in [&mut planned, &mut hidden] {
            s.push_prompt(&[1, 1, 1]).unwrap();
        }
        sampler.push_prompt(&[1, 1, 1]).unwrap();
        let a = planned.sample_with_uniform(&row, Some(&mask), u).unwrap();
        let b = hidden.sample_with_uniform(&row, Some(&mask), u).unwrap();
        let c = sampler.sample_with_uniform(&row, Some(&mask), u).unwrap();
        assert_eq!(a.token, b.token, "u = {u}");
        assert_eq!(a.token, c.token, "u = {u}");
        assert_ne!(a.token, 1);
    }
    // Unmasked, the `+inf` is refused in every order.
    let mut hidden = Chain::builder(4)
        .stage(Opaque::new(penalties()))
        .draw()
        .build()
        .unwrap();
    hidden.push_prompt(&[1, 1, 1]).unwrap();
    assert_eq!(
        hidden.sample(&row).map(|s| s.token),
        Err(Error::InfiniteLogit { index: 1 })
    );
    let mut sampler = Sampler::new(params, 4).unwrap();
    sampler.push_prompt(&[1, 1, 1]).unwrap();
    assert_eq!(
        sampler.sample(&row).map(|s| s.token),
        Err(Error::InfiniteLogit { index: 1 })
    );
}

/// Fuzz target `tail_cut`: top-p 0.2 with `min_tokens_to_keep(3)` on a row of one token
/// at `9.195258e-16`, nineteen at `2.938736e-39` (weight `w`, just below 1) and three at
/// `-1e38` (weight 0). The running sum of four weights, `1 + 3w`, reaches `p` times the
/// total `1 + 19w` by less than the rounding of `f64` sums near 4, and the reference and
/// the chain summed in different orders: one kept five tokens, the other four. Top-p now
/// cuts where the exact sums cross, in the reference, the `TopP` stage and the sampler.
#[test]
fn top_p_cuts_where_the_exact_running_sum_reaches_the_target() {
    use logits::{reference, TopP};
    let (a, b, z) = (2.938736e-39f32, 9.195258e-16f32, -1e38f32);
    let row = [
        a, a, a, a, a, a, a, a, a, b, a, z, z, a, a, z, a, a, a, a, a, a, a,
    ];
    let (p, keep) = (0.2f32, 3);
    let c = reference::candidates(&row, 1.0).unwrap();

    // The exact decision, in integers: the weights are 1 and w = W * 2^-53 (zero for
    // the three), p = P * 2^-e; C_n >= p * T  <=>  C_n * 2^53 * 2^e >= P * T * 2^53.
    let w = c[1].weight();
    assert!(w < 1.0 && w > 0.5 && c[0].weight() == 1.0);
    let big_w = (w * 2f64.powi(53)) as u128;
    assert_eq!(big_w as f64 * 2f64.powi(-53), w);
    let pd = logits::as_decimal(p);
    let e = 55; // p in [1/8, 1/4): P < 2^53.
    let big_p = (pd * 2f64.powi(e)) as u128;
    assert_eq!(big_p as f64 * 2f64.powi(-e), pd);
    let unit = 1u128 << 53;
    let total = unit + 19 * big_w;
    let exact_n = (1..=20u128)
        .find(|&n| (unit + (n - 1) * big_w) << e >= big_p * total)
        .unwrap() as usize;
    let exact_n = exact_n.max(keep);
    // (The `f64` sum in candidate order reaches the target one token later.)
    let f64_n = {
        let t: f64 = c.iter().map(|x| x.weight()).sum();
        let mut cum = 0.0;
        1 + c
            .iter()
            .position(|x| {
                cum += x.weight();
                cum >= pd * t
            })
            .unwrap()
    };
    assert_ne!(f64_n, exact_n);

    let kept = reference::top_p(&c, p, keep);
    assert_eq!(kept.len(), exact_n);
    let ids: Vec<u32> = kept.iter().map(|x| x.id).collect();
    assert_eq!(&ids[..2], &[9, 0]);

    // Uniforms: the fuzz input's, and those on and next to each boundary of the kept
    // distribution (its running sums over its total), and the extremes.
    let kw: Vec<f64> = kept.iter().map(|x| x.weight()).collect();
    let kt: f64 = kw.iter().sum();
    let mut us = vec![0.9547466028694779, 0.0, 1.0 - f64::EPSILON / 2.0];
    let mut cum = 0.0;
    for &x in &kw[..kw.len() - 1] {
        cum += x;
        let q = cum / kt;
        us.extend([
            q,
            q.next_down(),
            q.next_up(),
            q.next_down().next_down(),
            q.next_up().next_up(),
        ]);
    }
    let params = SamplingParams::builder()
        .top_p(p)
        .min_tokens_to_keep(keep)
        .seed(2824747095978902676)
        .logprobs(20)
        .build()
        .unwrap();
    for u in us {
        let want = reference::draw(&kept, u);
        let mut chain = Chain::builder(row.len())
            .stage(TopP::new(p).unwrap().min_keep(keep))
            .draw()
            .logprobs(20)
            .build()
            .unwrap();
        let mut sampler = Sampler::new(params.clone(), row.len()).unwrap();
        let from_chain = chain.sample_with_uniform(&row, None, u).unwrap();
        let from_sampler = sampler.sample_with_uniform(&row, None, u).unwrap();
        assert_eq!(from_chain.token, want, "chain, u = {u}");
        assert_eq!(from_sampler.token, want, "sampler, u = {u}");
        // Both report the kept set as their alternatives (with probability > 0).
        for got in [&from_chain, &from_sampler] {
            let alts: Vec<u32> = got
                .alternatives()
                .iter()
                .filter(|x| x.logprob > f32::NEG_INFINITY)
                .map(|x| x.token)
                .collect();
            assert_eq!(alts.len(), exact_n, "u = {u}: {alts:?}");
        }
    }
    // The top uniform draws the last kept token.
    assert_eq!(
        reference::draw(&kept, 1.0 - f64::EPSILON / 2.0),
        ids[exact_n - 1]
    );
}
