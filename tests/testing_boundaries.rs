//! The boundary strategies of `logits::testing`: they catch a `>` where `>=` belongs in
//! each of the three cuts on their own (no conformance vectors), they really sit on the
//! boundaries, the crate's `Sampler` passes them in every element type, and failing
//! inputs shrink to small rows on every shape.

#![cfg(feature = "testing")]

use logits::reference::{self, Candidate};
use logits::testing::properties::check_cut_case;
use logits::testing::strategies::{any_row, boundary, case, cut_case, row};
use logits::testing::{Boundary, CutCase, Element, Shape};
use logits::{Error, SamplingParams, TokenId};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};

/// A runner with a fixed seed: the same cases on every run and every machine.
fn runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]))
}

/// Which cut of the copy below has its comparison flipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mutant {
    Faithful,
    TopP,
    MinP,
    TopK,
}

/// Top-k written with a threshold, as selection-based samplers do: the tokens above the
/// k-th logit, then the ones tied with it in draw order until k. The mutant keeps
/// `>=` the k-th logit in the first pass, so every tie survives.
fn top_k(c: &[Candidate], k: usize, keep: usize, mutant: bool) -> Vec<Candidate> {
    let k = k.max(keep).min(c.len());
    let kth = c[k - 1].logit + 0.0;
    let above = |x: &Candidate| {
        if mutant {
            x.logit + 0.0 >= kth
        } else {
            x.logit + 0.0 > kth
        }
    };
    let mut out: Vec<Candidate> = c.iter().copied().filter(above).collect();
    for x in c {
        if out.len() >= k {
            break;
        }
        if x.logit + 0.0 == kth {
            out.push(*x);
        }
    }
    out
}

/// `reference::top_p`, with `cum > target` in the mutant.
fn top_p(c: &[Candidate], p: f32, keep: usize, mutant: bool) -> Vec<Candidate> {
    if p >= 1.0 {
        return c.to_vec();
    }
    let total: f64 = c.iter().map(Candidate::weight).sum();
    let target = logits::as_decimal(p) * total;
    let mut cum = 0.0;
    let mut n = c.len();
    for (i, x) in c.iter().enumerate() {
        cum += x.weight();
        let reached = if mutant { cum > target } else { cum >= target };
        if reached {
            n = i + 1;
            break;
        }
    }
    c[..n.max(keep).min(c.len())].to_vec()
}

/// `reference::min_p`, with `>` in the mutant.
fn min_p(c: &[Candidate], p: f32, keep: usize, mutant: bool) -> Vec<Candidate> {
    if p <= 0.0 || c.is_empty() {
        return c.to_vec();
    }
    let top = c[0].scaled;
    let cut = logits::as_decimal(p).ln();
    let n = c
        .iter()
        .take_while(|x| {
            if mutant {
                x.scaled - top > cut
            } else {
                x.scaled - top >= cut
            }
        })
        .count();
    c[..n.max(keep).min(c.len())].to_vec()
}

/// The cut pipeline written again from the reference's pieces, with one mutation.
fn distribution(case: &CutCase, mutant: Mutant) -> Result<Vec<(TokenId, f64)>, Error> {
    let p = &case.params;
    if p.is_greedy() {
        return Ok(vec![(reference::argmax(case.vocab())?, 1.0)]);
    }
    let keep = p.min_tokens_to_keep();
    let mut c = reference::candidates(case.vocab(), p.temperature())?;
    if let Some(k) = p.top_k() {
        c = top_k(&c, k, keep, mutant == Mutant::TopK);
    }
    c = top_p(&c, p.top_p(), keep, mutant == Mutant::TopP);
    c = min_p(&c, p.min_p(), keep, mutant == Mutant::MinP);
    Ok(reference::normalize(&c))
}

/// Runs the copy with `mutant` against the reference on `cases` cut-only cases.
fn hunt(mutant: Mutant, cases: u32) -> Result<(), Box<TestError<CutCase>>> {
    runner(cases)
        .run(&cut_case(1..48), |c| {
            let expected = c.expected()?;
            expected.check_distribution(&distribution(&c, mutant)?, 1e-12)?;
            Ok(())
        })
        .map_err(Box::new)
}

#[test]
fn the_faithful_copy_passes_so_the_hunt_is_fair() {
    hunt(Mutant::Faithful, 2000).unwrap();
}

fn caught(mutant: Mutant, on: Boundary) {
    match hunt(mutant, 500).map_err(|e| *e) {
        Ok(()) => panic!("{mutant:?}: the mutation survived 500 cases"),
        Err(TestError::Fail(why, minimal)) => {
            assert!(why.message().contains("kept sets differ"), "{why}");
            // The counterexample shrinks to a handful of tokens.
            assert!(minimal.vocab_size <= 6, "{mutant:?}: shrank to {minimal:?}");
            // Only the mutated cut can tell the copy from the reference: the counterexample
            // uses that cut.
            let p = &minimal.params;
            match on {
                Boundary::TopP => assert!(p.top_p() < 1.0, "{minimal:?}"),
                Boundary::MinP => assert!(p.min_p() > 0.0, "{minimal:?}"),
                _ => assert!(p.top_k().is_some(), "{minimal:?}"),
            }
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_top_p_that_needs_more_than_p_is_caught_by_the_strategies_alone() {
    caught(Mutant::TopP, Boundary::TopP);
}

#[test]
fn a_min_p_that_drops_equality_is_caught_by_the_strategies_alone() {
    caught(Mutant::MinP, Boundary::MinP);
}

#[test]
fn a_top_k_that_keeps_every_tie_at_the_kth_value_is_caught_by_the_strategies_alone() {
    caught(Mutant::TopK, Boundary::TopK);
}

/// Draws `n` values from `strategy` with the fixed seed.
fn draw<S: Strategy>(strategy: &S, n: usize) -> Vec<S::Value> {
    let mut r = runner(1);
    (0..n)
        .map(|_| strategy.new_tree(&mut r).unwrap().current())
        .collect()
}

fn kept(row: &[f32], params: &SamplingParams) -> Vec<TokenId> {
    logits::testing::Expected::new(row, params)
        .unwrap()
        .kept_ids()
}

#[test]
fn top_p_cases_sit_on_the_prefix_sum() {
    let cases = draw(&boundary(Boundary::TopP, 1..40), 400);
    let mut on = 0;
    let mut exact = 0;
    for (row, p) in &cases {
        let here = kept(row, p);
        // One ulp of p either way changes the kept set: p is at the boundary.
        let moved = [p.top_p().next_up(), p.top_p().next_down()]
            .into_iter()
            .filter(|&q| q > 0.0 && q <= 1.0)
            .any(|q| kept(row, &p.to_builder().top_p(q).build().unwrap()) != here);
        on += usize::from(moved);
        // The target equals a prefix sum exactly, in the reference's arithmetic.
        let c = reference::candidates(row, p.temperature()).unwrap();
        let total: f64 = c.iter().map(Candidate::weight).sum();
        let target = logits::as_decimal(p.top_p()) * total;
        let mut cum = 0.0;
        exact += usize::from(
            c.iter().any(|x| {
                cum += x.weight();
                cum == target
            }) && p.top_p() < 1.0,
        );
    }
    assert!(on >= 300, "only {on} of 400 top-p cases on the boundary");
    assert!(
        exact >= 100,
        "only {exact} of 400 top-p cases exactly on a prefix sum"
    );
}

#[test]
fn min_p_cases_sit_on_a_ratio() {
    let cases = draw(&boundary(Boundary::MinP, 1..40), 400);
    let mut on = 0;
    let mut exact = 0;
    for (row, p) in &cases {
        // Exactly on a ratio: a token's scaled logit, less the top one, is ln(min_p)
        // in the reference's arithmetic (min-p 1 and a tied maximum, say).
        let c = reference::candidates(row, p.temperature()).unwrap();
        let cut = logits::as_decimal(p.min_p()).ln();
        let on_ratio = c[1..].iter().any(|x| x.scaled - c[0].scaled == cut);
        exact += usize::from(on_ratio);
        // Or as near as an f32 min-p gets: one ulp either way changes the kept set.
        let here = kept(row, p);
        let moved = [p.min_p().next_up(), p.min_p().next_down()]
            .into_iter()
            .filter(|&q| (0.0..=1.0).contains(&q))
            .any(|q| kept(row, &p.to_builder().min_p(q).build().unwrap()) != here);
        on += usize::from(on_ratio || moved);
    }
    assert!(on >= 300, "only {on} of 400 min-p cases on the boundary");
    assert!(
        exact >= 100,
        "only {exact} of 400 min-p cases exactly on a ratio"
    );
}

#[test]
fn top_k_cases_end_inside_a_tie() {
    let cases = draw(&boundary(Boundary::TopK, 2..40), 400);
    let inside = cases
        .iter()
        .filter(|(row, p)| {
            let c = reference::candidates(row, p.temperature()).unwrap();
            let k = p.top_k().unwrap();
            k < c.len() && c[k - 1].logit + 0.0 == c[k].logit + 0.0
        })
        .count();
    assert!(
        inside >= 250,
        "only {inside} of 400 top-k cases end inside a tie"
    );
}

#[test]
fn cut_cases_cover_padding_every_element_type_and_zero_weights() {
    let cases = draw(&cut_case(1..40), 600);
    for element in Element::ALL {
        let mine: Vec<&CutCase> = cases.iter().filter(|c| c.element == element).collect();
        assert!(mine.len() >= 100, "{element:?}: {}", mine.len());
        for c in &mine {
            assert!(c.row.iter().all(|&x| x.is_nan() || element.round(x) == x));
        }
    }
    assert!(cases.iter().filter(|c| c.row.len() > c.vocab_size).count() >= 200);
    let zero_survivor = cases
        .iter()
        .filter(|c| {
            let e = c.expected().unwrap();
            e.distribution().iter().any(|x| x.1 == 0.0)
        })
        .count();
    assert!(
        zero_survivor >= 30,
        "only {zero_survivor} with a zero-probability survivor"
    );
    for b in [Boundary::TopP, Boundary::MinP, Boundary::TopK] {
        assert!(
            cases.iter().filter(|c| c.boundary == b).count() >= 100,
            "{b:?}"
        );
    }
}

proptest! {
    #[test]
    fn the_sampler_passes_every_cut_case(c in cut_case(1..200)) {
        check_cut_case(&c, 1e-9)?;
    }
}

/// The smallest `len` a failing input shrinks to, for a property that fails whenever
/// `len(value) >= at_least`.
fn shrunk_len<S: Strategy>(strategy: S, len: impl Fn(&S::Value) -> usize, at_least: usize) -> usize
where
    S::Value: std::fmt::Debug,
{
    match runner(256).run(&strategy, |v| {
        prop_assert!(len(&v) < at_least);
        Ok(())
    }) {
        Err(TestError::Fail(_, v)) => len(&v),
        other => panic!("the property did not fail: {other:?}"),
    }
}

#[test]
fn long_rows_of_every_shape_shrink_to_the_smallest_failing_length() {
    for shape in Shape::ALL {
        let n = shrunk_len(row(2000..6000, shape), |r| r.len(), 2);
        assert_eq!(n, 2000, "{shape:?}: the lower bound of the size range");
        let n = shrunk_len(row(1..6000, shape), |r| r.len(), 2);
        assert_eq!(n, 2, "{shape:?}");
    }
    assert_eq!(shrunk_len(any_row(1..6000), |r| r.len(), 2), 2);
    assert_eq!(shrunk_len(case(1..6000), |c| c.row.len(), 2), 2);
    assert_eq!(shrunk_len(cut_case(1..6000), |c| c.vocab_size, 2), 2);
}

#[test]
fn a_property_about_the_values_of_a_flat_row_shrinks_to_a_few_tokens() {
    // Top-p 0.5 keeps at least two tokens of a flat row once it has three.
    let params = SamplingParams::builder().top_p(0.5).build().unwrap();
    let result = runner(256).run(&row(1..6000, Shape::Flat), |r| {
        prop_assert!(kept(&r, &params).len() < 2);
        Ok(())
    });
    match result {
        Err(TestError::Fail(_, r)) => assert!(r.len() <= 4, "shrank to {} tokens", r.len()),
        other => panic!("the property did not fail: {other:?}"),
    }
}
