//! The draw matches the final distribution: a chi-square test over 100,000 seeded draws.
//! The seed is fixed, so the test cannot flake: it either passes always or never.

use logits::{Sampler, SamplingParams, TokenId};

/// Chi-square critical value for 19 degrees of freedom at alpha = 0.001.
const CHI2_19_0_001: f64 = 43.82;

fn chi_square(params: SamplingParams, row: &[f32]) -> (f64, usize) {
    let mut dist = Vec::new();
    Sampler::new(params.clone(), row.len())
        .unwrap()
        .distribution(row, None, &mut dist)
        .unwrap();
    let mut counts = vec![0u64; row.len()];
    // One sequence, 100,000 draws: step n uses the uniform of (seed, n).
    let mut s = Sampler::new(params, row.len()).unwrap();
    s.reserve(100_000).unwrap();
    const N: u64 = 100_000;
    for _ in 0..N {
        counts[s.sample(row).unwrap().token as usize] += 1;
    }
    let kept: Vec<TokenId> = dist.iter().map(|&(id, _)| id).collect();
    for (id, &c) in counts.iter().enumerate() {
        if !kept.contains(&(id as TokenId)) {
            assert_eq!(c, 0, "token {id} was cut but drawn");
        }
    }
    let chi2 = dist
        .iter()
        .map(|&(id, p)| {
            let e = p * N as f64;
            let o = counts[id as usize] as f64;
            (o - e) * (o - e) / e
        })
        .sum();
    (chi2, dist.len())
}

fn row20() -> Vec<f32> {
    (0..20).map(|i| (i as f32 * 0.37).sin() * 2.0).collect()
}

#[test]
fn plain_temperature_draws_follow_the_softmax() {
    let p = SamplingParams::builder()
        .temperature(0.8)
        .seed(2024)
        .build()
        .unwrap();
    let (chi2, k) = chi_square(p, &row20());
    assert_eq!(k, 20);
    assert!(chi2 < CHI2_19_0_001, "chi2 = {chi2}");
}

#[test]
fn draws_after_the_cuts_follow_the_renormalised_distribution() {
    let mut r = row20();
    r.extend((0..100).map(|i| -3.0 - (i as f32) * 0.01));
    let p = SamplingParams::builder()
        .temperature(1.2)
        .top_k(30)
        .top_p(0.9)
        .seed(77)
        .build()
        .unwrap();
    let (chi2, k) = chi_square(p, &r);
    // Critical value for k - 1 degrees of freedom at alpha = 0.001, Wilson-Hilferty.
    let df = (k - 1) as f64;
    let z = 3.090_232;
    let crit = df * (1.0 - 2.0 / (9.0 * df) + z * (2.0 / (9.0 * df)).sqrt()).powi(3);
    assert!(k > 5 && k < 30, "kept {k}");
    assert!(chi2 < crit, "chi2 = {chi2}, critical {crit}");
}
