//! The numbers of the texts the crate grew from, as test vectors: the fruit table, the
//! top-p 0.8 worked example, min-p 0.1, and temperature 0.

use logits::{Sampler, SamplingParams, TokenId};

/// Qwen3-0.6B's scores for "Name one fruit. Answer with one word.": Apple, M, apple, App, P.
const FRUIT: [f32; 5] = [22.38, 20.88, 20.62, 19.88, 19.50];

fn dist(params: SamplingParams, row: &[f32]) -> Vec<(TokenId, f64)> {
    let mut s = Sampler::new(params, row.len()).unwrap();
    let mut out = Vec::new();
    s.distribution(row, None, &mut out).unwrap();
    out
}

fn prob(d: &[(TokenId, f64)], id: TokenId) -> f64 {
    d.iter().find(|&&(t, _)| t == id).map_or(0.0, |&(_, p)| p)
}

#[test]
fn gap_rule_at_three_temperatures() {
    // A gap of 1.5 makes Apple e^(1.5 / T) times as likely as M.
    for (t, ratio) in [
        (0.5f32, 3.0f64.exp()),
        (1.0, 1.5f64.exp()),
        (1.5, 1.0f64.exp()),
    ] {
        let p = SamplingParams::builder().temperature(t).build().unwrap();
        let d = dist(p, &FRUIT);
        let r = prob(&d, 0) / prob(&d, 1);
        assert!(
            (r / ratio - 1.0).abs() < 1e-5,
            "T = {t}: ratio {r}, expected {ratio}"
        );
    }
    // 1.5 points of gap: 4.48 times as likely.
    let d = dist(SamplingParams::default(), &FRUIT);
    assert!((prob(&d, 0) / prob(&d, 1) - 4.4817).abs() < 1e-3);
}

#[test]
fn lower_temperature_concentrates_the_top_token() {
    let mut last = 0.0;
    for t in [1.5f32, 1.0, 0.5] {
        let d = dist(
            SamplingParams::builder().temperature(t).build().unwrap(),
            &FRUIT,
        );
        assert_eq!(d[0].0, 0, "Apple stays on top at T = {t}");
        assert!(d[0].1 > last, "p(Apple) rises as T falls");
        last = d[0].1;
    }
}

/// The worked example's probabilities, with the remaining mass spread so that the row
/// sums to 1.
fn worked_example_row() -> Vec<f32> {
    let mut p = vec![0.574f64, 0.128, 0.100, 0.047, 0.032, 0.029];
    let rest = 1.0 - p.iter().sum::<f64>();
    p.extend(std::iter::repeat_n(rest / 10.0, 10));
    p.iter().map(|x| x.ln() as f32).collect()
}

#[test]
fn top_p_worked_example_keeps_three_and_renormalises() {
    let row = worked_example_row();
    let d = dist(SamplingParams::builder().top_p(0.8).build().unwrap(), &row);
    let ids: Vec<TokenId> = d.iter().map(|&(id, _)| id).collect();
    assert_eq!(ids, [0, 1, 2]);
    for (got, want) in d.iter().map(|&(_, p)| p).zip([0.716, 0.160, 0.125]) {
        assert!((got - want).abs() < 1e-3, "{got} vs {want}");
    }
    let sum: f64 = d.iter().map(|&(_, p)| p).sum();
    assert!((sum - 1.0).abs() < 1e-12);
}

#[test]
fn top_p_keeps_the_crossing_token() {
    // 0.574 + 0.128 = 0.702 < 0.75: the third token crosses 0.75 and is kept.
    let row = worked_example_row();
    let d = dist(SamplingParams::builder().top_p(0.75).build().unwrap(), &row);
    assert_eq!(d.len(), 3);
    // At exactly 0.702 (just below the two-token mass) two tokens suffice.
    let d = dist(SamplingParams::builder().top_p(0.70).build().unwrap(), &row);
    assert_eq!(d.len(), 2);
}

#[test]
fn min_p_point_one_keeps_the_same_three() {
    let row = worked_example_row();
    let d = dist(SamplingParams::builder().min_p(0.1).build().unwrap(), &row);
    let ids: Vec<TokenId> = d.iter().map(|&(id, _)| id).collect();
    assert_eq!(ids, [0, 1, 2]);
    for (got, want) in d.iter().map(|&(_, p)| p).zip([0.716, 0.160, 0.125]) {
        assert!((got - want).abs() < 1e-3);
    }
}

#[test]
fn temperature_zero_always_gives_the_argmax() {
    for seed in 0..50 {
        let p = SamplingParams::greedy()
            .to_builder()
            .seed(seed)
            .build()
            .unwrap();
        let mut s = Sampler::new(p, FRUIT.len()).unwrap();
        let out = s.sample(&FRUIT).unwrap();
        assert_eq!(out.token, 0);
        assert_eq!(out.logprob, 0.0);
    }
    // Ties go to the lowest id.
    let mut s = Sampler::new(SamplingParams::greedy(), 4).unwrap();
    assert_eq!(s.sample(&[1.0f32, 3.0, 3.0, 2.0]).unwrap().token, 1);
}

#[test]
fn raw_logprob_is_the_log_softmax_of_the_unprocessed_row() {
    let p = SamplingParams::builder()
        .logprobs(5)
        .seed(3)
        .build()
        .unwrap();
    let mut s = Sampler::new(p, FRUIT.len()).unwrap();
    let out = s.sample(&FRUIT).unwrap();
    let apple = out.alternatives()[0];
    assert_eq!(apple.token, 0);
    // Over the full vocabulary Apple's logprob is -0.555 (p = 0.574); over these five
    // tokens alone it is the log-softmax of the five scores.
    let z: f64 = FRUIT.iter().map(|&l| f64::from(l - 22.38).exp()).sum();
    assert!((f64::from(apple.raw_logprob) + z.ln()).abs() < 1e-5);
    assert_eq!(out.alternatives().len(), 5);
}

#[cfg(feature = "serde")]
#[test]
fn qwen3_generation_config_defaults() {
    {
        let text = include_str!("data/qwen3/generation_config.json");
        let p = SamplingParams::from_generation_config_json(text).unwrap();
        assert_eq!(p.temperature(), 0.6);
        assert_eq!(p.top_k(), Some(20));
        assert_eq!(p.top_p(), 0.95);
        assert!(!p.is_greedy());
    }
}
