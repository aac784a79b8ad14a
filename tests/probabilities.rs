//! `Sampler::probabilities`, `Chain::probabilities` and `logprobs_into` against the
//! reference.
//!
//! Each case compares the token-indexed output with the reference's final distribution
//! (`reference::survivors` then `reference::normalize` for a `Sampler`,
//! `reference::chain_survivors` for a `Chain`): every survivor's probability, and 0 for
//! every other token.
//!
//! Tolerance: `1e-6` relative (plus `1e-37` absolute, for probabilities that round to
//! subnormal `f32`s). The output is `f32`, whose rounding alone is `6e-8` relative; the
//! engine's `f64` weights and the reference's agree to about `1e-12` (the same formula,
//! sums in another order, and the histogram's `f64` exp within `4e-15`). The sum of an
//! output is 1 within `1e-5` (the `f32` rounding of up to 40,000 entries). The parameters
//! are random but continuous, so no cut lands within the sums' rounding of a boundary.

use logits::half::bf16;
use logits::reference::{self, Step};
use logits::{
    Chain, Error, LogprobKind, MinP, Sampler, SamplingParams, Stage, Temperature, TokenId,
    TokenMask, TopK, TopP, TypicalP,
};

mod mix;
use mix::Mix;

const REL: f64 = 1e-6;
const ABS: f64 = 1e-37;

/// The reference's distribution as a token-indexed vector.
fn dense(n: usize, dist: &[(TokenId, f64)]) -> Vec<f64> {
    let mut v = vec![0.0; n];
    for &(id, p) in dist {
        v[id as usize] = p;
    }
    v
}

fn assert_close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len());
    for (id, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs();
        assert!(
            err <= REL * w + ABS,
            "{what}: token {id}: got {g:e}, want {w:e}"
        );
    }
    let sum: f64 = got.iter().map(|&p| f64::from(p)).sum();
    assert!((sum - 1.0).abs() < 1e-5, "{what}: sum {sum}");
}

/// Processed logprobs against the logarithms of the reference's probabilities.
fn assert_log_close(got: &[f32], want: &[f64], what: &str) {
    for (id, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w == 0.0 {
            assert_eq!(g, f32::NEG_INFINITY, "{what}: token {id}");
        } else {
            let l = w.ln();
            assert!(
                (f64::from(g) - l).abs() <= 1e-6 * l.abs().max(1.0),
                "{what}: token {id}: got {g}, want {l}"
            );
        }
    }
}

fn peaked_row(r: &mut Mix, n: usize) -> Vec<f32> {
    let mut row: Vec<f32> = (0..n).map(|_| (2.0 * r.normal()) as f32).collect();
    for _ in 0..1 + r.below(10) {
        let i = r.below(n);
        row[i] = (8.0 + 6.0 * r.unit()) as f32;
    }
    row
}

fn flat_row(r: &mut Mix, n: usize) -> Vec<f32> {
    (0..n).map(|_| (0.5 * r.normal()) as f32).collect()
}

/// Random sampling parameters: no cut, top-k, top-p, min-p, their combinations, greedy;
/// sometimes a bias and penalties.
fn params(r: &mut Mix, n: usize) -> SamplingParams {
    let mut b = SamplingParams::builder().seed(r.next());
    b = match r.below(8) {
        0 => b,
        1 => b.top_k(1 + r.below(50)),
        2 => b.top_p((0.5 + 0.45 * r.unit()) as f32),
        3 => b.min_p((0.01 + 0.2 * r.unit()) as f32),
        4 => b.top_k(1 + r.below(300)).top_p(0.9).min_p(0.05),
        5 => b.top_p(0.95).min_p((0.001 + 0.05 * r.unit()) as f32),
        6 => b.temperature(0.0),
        _ => b.top_k(2000),
    };
    if r.below(2) == 0 {
        b = b.temperature((0.3 + 1.2 * r.unit()) as f32);
    }
    if r.below(3) == 0 {
        for _ in 0..3 {
            let bias = if r.below(4) == 0 {
                f32::NEG_INFINITY
            } else {
                (4.0 * r.normal()) as f32
            };
            b = b.logit_bias(r.below(n) as TokenId, bias);
        }
    }
    if r.below(3) == 0 {
        b = b
            .repetition_penalty((1.0 + r.unit()) as f32)
            .frequency_penalty(0.5)
            .presence_penalty(0.3);
    }
    b.build().unwrap()
}

/// A mask: none, about half allowed, or a handful (the compact row).
fn mask(r: &mut Mix, n: usize) -> Option<TokenMask> {
    match r.below(3) {
        0 => None,
        1 => {
            let mut m = TokenMask::new_full(n);
            for id in 0..n {
                if r.below(2) == 0 {
                    m.disallow(id as TokenId).unwrap();
                }
            }
            Some(m)
        }
        _ => {
            let mut m = TokenMask::new_empty(n);
            for _ in 0..1 + r.below(20) {
                m.allow(r.below(n) as TokenId).unwrap();
            }
            Some(m)
        }
    }
}

/// One Sampler case on `row` (`f32`, and the same row as `bf16`).
fn sampler_case(r: &mut Mix, row: &[f32], what: &str) {
    let n = row.len();
    let p = params(r, n);
    let m = mask(r, n);
    let prompt: Vec<TokenId> = (0..8).map(|_| r.below(n) as TokenId).collect();
    let row16: Vec<bf16> = row.iter().map(|&x| bf16::from_f32(x)).collect();
    let back: Vec<f32> = row16.iter().map(|x| x.to_f32()).collect();
    for (bf, reference_row) in [(false, row), (true, &back[..])] {
        let what = format!("{what}, bf16 {bf}, {p:?}, mask {}", m.is_some());
        let mut s = Sampler::new(p.clone(), n).unwrap();
        s.push_prompt(&prompt).unwrap();
        let adjusted = reference::adjust(reference_row, n, &p, &s.history(), m.as_ref());
        let want = adjusted.and_then(|a| reference::survivors(&a, &p));
        let mut out = vec![f32::NAN; n];
        let got = if bf {
            s.probabilities(&row16, m.as_ref(), &mut out)
        } else {
            s.probabilities(row, m.as_ref(), &mut out)
        };
        let want = match want {
            Ok(c) => dense(n, &reference::normalize(&c)),
            Err(e) => {
                assert_eq!(got, Err(e), "{what}");
                continue;
            }
        };
        got.unwrap();
        assert_close(&out, &want, &what);
        // The same as `distribution`, entry by entry.
        let mut dist = Vec::new();
        if bf {
            s.distribution(&row16, m.as_ref(), &mut dist).unwrap();
        } else {
            s.distribution(row, m.as_ref(), &mut dist).unwrap();
        }
        let from_dist = dense(n, &dist);
        for (id, (&g, &d)) in out.iter().zip(&from_dist).enumerate() {
            assert!(
                (f64::from(g) - d).abs() <= REL * d + ABS,
                "{what}: distribution at {id}: {g:e} vs {d:e}"
            );
        }
        let mut lp = vec![f32::NAN; n];
        if bf {
            s.logprobs_into(&row16, m.as_ref(), LogprobKind::Processed, &mut lp)
        } else {
            s.logprobs_into(row, m.as_ref(), LogprobKind::Processed, &mut lp)
        }
        .unwrap();
        assert_log_close(&lp, &want, &what);
        assert_eq!(s.history().tokens(), &prompt[..], "{what}: history");
        assert!(s.history().generated().is_empty());
    }
}

#[test]
fn sampler_matches_the_reference_on_small_rows() {
    let mut r = Mix(11);
    for case in 0..300 {
        let n = 50 + r.below(400);
        let row = if case % 2 == 0 {
            peaked_row(&mut r, n)
        } else {
            flat_row(&mut r, n)
        };
        sampler_case(&mut r, &row, &format!("case {case}, n {n}"));
    }
}

#[test]
fn sampler_matches_the_reference_on_large_rows() {
    let mut r = Mix(12);
    let n = 40_000;
    let rows = [
        ("peaked", peaked_row(&mut r, n)),
        ("flat", flat_row(&mut r, n)),
    ];
    for (shape, row) in &rows {
        for case in 0..8 {
            sampler_case(&mut r, row, &format!("{shape} case {case}"));
        }
        // No cut at all: the histogram's unsorted pass, with and without a mask.
        for m in [None, mask(&mut r, n).filter(|m| m.words().len() > 1)] {
            let p = SamplingParams::builder().build().unwrap();
            let mut s = Sampler::new(p.clone(), n).unwrap();
            let mut out = vec![0.0f32; n];
            s.probabilities(row, m.as_ref(), &mut out).unwrap();
            let a = reference::adjust(row, n, &p, &s.history(), m.as_ref()).unwrap();
            let want = dense(
                n,
                &reference::normalize(&reference::survivors(&a, &p).unwrap()),
            );
            assert_close(&out, &want, &format!("{shape}, no cut"));
        }
    }
}

fn chain_of(n: usize, stages: Vec<Box<dyn Stage>>) -> Chain {
    stages
        .into_iter()
        .fold(Chain::builder(n), |b, s| b.boxed_stage(s))
        .draw()
        .build()
        .unwrap()
}

#[test]
fn chains_match_the_reference() {
    let llama = || -> (Vec<Box<dyn Stage>>, Vec<Step>) {
        (
            vec![
                Box::new(TopK::new(40).unwrap()),
                Box::new(TopP::new(0.95).unwrap()),
                Box::new(MinP::new(0.05).unwrap()),
                Box::new(Temperature::new(0.8).unwrap()),
            ],
            vec![
                Step::TopK { k: 40, min_keep: 1 },
                Step::TopP {
                    p: 0.95,
                    min_keep: 1,
                },
                Step::MinP {
                    p: 0.05,
                    min_keep: 1,
                },
                Step::Temperature(0.8),
            ],
        )
    };
    let typical = || -> (Vec<Box<dyn Stage>>, Vec<Step>) {
        (
            vec![
                Box::new(TopK::new(200).unwrap()),
                Box::new(TypicalP::new(0.9).unwrap()),
                Box::new(Temperature::new(0.7).unwrap()),
            ],
            vec![
                Step::TopK {
                    k: 200,
                    min_keep: 1,
                },
                Step::Typical {
                    p: 0.9,
                    min_keep: 1,
                },
                Step::Temperature(0.7),
            ],
        )
    };
    let late_t = || -> (Vec<Box<dyn Stage>>, Vec<Step>) {
        (
            vec![
                Box::new(TopP::new(0.9).unwrap()),
                Box::new(Temperature::new(0.8).unwrap()),
            ],
            vec![
                Step::TopP {
                    p: 0.9,
                    min_keep: 1,
                },
                Step::Temperature(0.8),
            ],
        )
    };
    let t_only = || -> (Vec<Box<dyn Stage>>, Vec<Step>) {
        (
            vec![Box::new(Temperature::new(0.7).unwrap())],
            vec![Step::Temperature(0.7)],
        )
    };
    let mut r = Mix(13);
    let rows = [
        peaked_row(&mut r, 300),
        flat_row(&mut r, 300),
        peaked_row(&mut r, 40_000),
        flat_row(&mut r, 40_000),
    ];
    type Make = fn() -> (Vec<Box<dyn Stage>>, Vec<Step>);
    let chains: [(&str, Make); 4] = [
        ("llama", llama),
        ("typical", typical),
        ("top_p_then_t", late_t),
        ("t_only", t_only),
    ];
    for row in &rows {
        let n = row.len();
        for (name, make) in chains {
            for m in [None, mask(&mut r, n)] {
                let what = format!("{name}, n {n}, mask {}", m.is_some());
                let (stages, steps) = make();
                let mut c = chain_of(n, stages);
                let h = c.history();
                let want = reference::chain_survivors(row, n, &h, m.as_ref(), &steps);
                let mut out = vec![f32::NAN; n];
                let got = c.probabilities(row, m.as_ref(), &mut out);
                let want = match want {
                    Ok(d) => dense(n, &d),
                    Err(e) => {
                        assert_eq!(got, Err(e), "{what}");
                        continue;
                    }
                };
                got.unwrap();
                assert_close(&out, &want, &what);
                let mut dist = Vec::new();
                c.distribution(row, m.as_ref(), &mut dist).unwrap();
                assert_close(&out, &dense(n, &dist), &format!("{what}, distribution"));
                let mut lp = vec![f32::NAN; n];
                c.logprobs_into(row, m.as_ref(), LogprobKind::Processed, &mut lp)
                    .unwrap();
                assert_log_close(&lp, &want, &what);
                assert!(c.history().tokens().is_empty());
            }
        }
    }
}

#[test]
fn raw_logprobs_match_the_reference() {
    let mut r = Mix(14);
    for n in [7, 300, 40_000] {
        let mut row = peaked_row(&mut r, n);
        row[n / 2] = f32::NEG_INFINITY;
        let p = SamplingParams::builder().top_k(5).build().unwrap();
        let mut s = Sampler::new(p, n).unwrap();
        let mut c = chain_of(n, vec![Box::new(TopK::new(5).unwrap())]);
        let mut a = vec![f32::NAN; n];
        let mut b = vec![f32::NAN; n];
        s.logprobs_into(&row, None, LogprobKind::Raw, &mut a)
            .unwrap();
        c.logprobs_into(&row, None, LogprobKind::Raw, &mut b)
            .unwrap();
        assert_eq!(a, b);
        for (id, &g) in a.iter().enumerate() {
            let want = reference::raw_logprob(&row, n, id as TokenId);
            if want == f64::NEG_INFINITY {
                assert_eq!(g, f32::NEG_INFINITY);
            } else {
                assert!(
                    (f64::from(g) - want).abs() <= 1e-6 * want.abs().max(1.0),
                    "n {n}, token {id}: {g} vs {want}"
                );
            }
        }
        // Padding past the vocabulary is never read.
        let mut padded = row.clone();
        padded.push(100.0);
        s.logprobs_into(&padded, None, LogprobKind::Raw, &mut b)
            .unwrap();
        assert_eq!(a, b);
    }
}

#[test]
fn a_wrong_output_length_is_refused() {
    let row = [1.0f32, 2.0, 3.0];
    let mut s = Sampler::new(SamplingParams::builder().build().unwrap(), 3).unwrap();
    let mut c = chain_of(3, vec![]);
    for len in [0, 2, 4] {
        let mut out = vec![0.0f32; len];
        let e = Err(Error::LengthMismatch {
            expected: 3,
            actual: len,
        });
        assert_eq!(s.probabilities(&row, None, &mut out), e);
        assert_eq!(c.probabilities(&row, None, &mut out), e);
        for kind in [LogprobKind::Raw, LogprobKind::Processed] {
            assert_eq!(s.logprobs_into(&row, None, kind, &mut out), e);
            assert_eq!(c.logprobs_into(&row, None, kind, &mut out), e);
        }
    }
}

#[test]
fn greedy_gives_one_at_the_argmax_and_keeps_the_history() {
    let row = [1.0f32, 5.0, 3.0, 5.0];
    let p = SamplingParams::builder().temperature(0.0).build().unwrap();
    let mut s = Sampler::new(p, 4).unwrap();
    s.push_prompt(&[2]).unwrap();
    let mut out = vec![f32::NAN; 4];
    s.probabilities(&row, None, &mut out).unwrap();
    assert_eq!(out, [0.0, 1.0, 0.0, 0.0]);
    s.logprobs_into(&row, None, LogprobKind::Processed, &mut out)
        .unwrap();
    assert_eq!(
        out,
        [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY]
    );
    assert_eq!(s.history().tokens(), &[2]);
    let mut c = Chain::builder(4).greedy().build().unwrap();
    c.probabilities(&row, None, &mut out).unwrap();
    assert_eq!(out, [0.0, 1.0, 0.0, 0.0]);
}
