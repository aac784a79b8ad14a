//! Tools for property-testing sampler math: proptest strategies and reference checks.
//!
//! Enabled by the `testing` cargo feature, which adds a `proptest` dependency:
//!
//! ```toml
//! [dev-dependencies]
//! logits = { version = "0.1", features = ["testing"] }
//! proptest = "1"
//! ```
//!
//! # The semantics of record
//!
//! [`crate::reference`] (re-exported here as [`reference`](mod@reference)) is the
//! executable specification of the whole pipeline: it sorts the whole vocabulary, works
//! in `f64` and does the obvious thing at every stage. Where any sampler, this crate's fast
//! [`Sampler`](crate::Sampler) included, disagrees with it, the reference is right. The
//! checks in this module compare against it, and the crate's conformance vectors
//! (`tests/data/vectors/*.json` in the repository) pin it to independently computed
//! values.
//!
//! # What is here
//!
//! - [`strategies`]: logits rows of a given size and [`Shape`] (peaked, flat, with ties,
//!   with `-inf` entries, with huge and subnormal values), valid
//!   [`SamplingParams`](crate::SamplingParams), token histories, bias maps, uniforms,
//!   and whole [`Case`]s combining them; rows and parameters on the cuts' boundaries
//!   ([`Boundary`]: exactly on top-p's prefix sum and on min-p's ratio, `k` inside a
//!   tie, weights that underflow) and cut-only [`CutCase`]s on them with padding and
//!   `f16`/`bf16` rows. Every row strategy shrinks in length first.
//! - [`properties`]: [`Expected`], the reference outcome of one step, with checks that
//!   a sampler under test keeps the same set of tokens, gives them the same
//!   probabilities within a tolerance, and draws the same token for a given uniform.
//!   The checks return a [`Mismatch`], which converts into proptest's `TestCaseError`,
//!   so `?` works inside `proptest!`. [`check_sampler`](properties::check_sampler) runs
//!   the same checks on this crate's own [`Sampler`](crate::Sampler).
//! - [`vectors`]: the conformance vectors, embedded, with a runner for your closure.
//!
//! # Draw order
//!
//! **Draw order: adjusted logit descending, ties to the lower token id.** The logit is
//! the one after bias and penalties, before temperature; `-0.0` and `0.0` are equal. The
//! order never depends on weights or probabilities, so tokens whose weights underflow to
//! 0 (or round to equal values) keep their logit order.
//!
//! Top-k's boundary, top-p's prefix, min-p's prefix and the draw all walk this order, and
//! [`Expected::check_distribution`] checks that a distribution lists its tokens in it. A
//! survivor of probability exactly 0 (its weight underflowed) may be left out of a
//! distribution; if it is listed, it must be at its place.
//!
//! # Example: your own top-p against ours
//!
//! ```
//! use logits::testing::{strategies, Expected, Shape};
//! use logits::SamplingParams;
//! use proptest::prelude::*;
//!
//! /// A top-p written from scratch: softmax weights in f64, in draw order (logit
//! /// descending, ties to the lower token id), the shortest prefix reaching p,
//! /// renormalised.
//! fn my_top_p(row: &[f32], p: f32) -> Vec<(u32, f64)> {
//!     let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
//!     let mut ids: Vec<u32> = (0..row.len() as u32)
//!         .filter(|&i| row[i as usize] > f32::NEG_INFINITY)
//!         .collect();
//!     // `+ 0.0` makes `-0.0` equal to `0.0`.
//!     let logit = |i: u32| row[i as usize] + 0.0;
//!     ids.sort_by(|&a, &b| logit(b).total_cmp(&logit(a)).then(a.cmp(&b)));
//!     let mut w: Vec<(u32, f64)> = ids
//!         .into_iter()
//!         .map(|i| (i, (f64::from(row[i as usize]) - f64::from(max)).exp()))
//!         .collect();
//!     let total: f64 = w.iter().map(|x| x.1).sum();
//!     let mut cum = 0.0;
//!     let n = w.iter().position(|x| { cum += x.1; cum >= logits::as_decimal(p) * total });
//!     if p < 1.0 {
//!         w.truncate(n.map_or(w.len(), |i| i + 1));
//!     }
//!     let kept: f64 = w.iter().map(|x| x.1).sum();
//!     w.into_iter().map(|(id, x)| (id, x / kept)).collect()
//! }
//!
//! proptest!(|(row in strategies::any_row(1..300), p in 0.01f32..=1.0)| {
//!     let params = SamplingParams::builder().top_p(p).build()?;
//!     let expected = Expected::new(&row, &params)?;
//!     expected.check_distribution(&my_top_p(&row, p), 1e-9)?;
//! });
//! ```
//!
//! The same three lines check any sampler function: build the parameters, compute the
//! [`Expected`] outcome, and compare. [`Expected::check_draw`] compares the token your
//! sampler draws for a uniform `u` with the reference's inverse CDF.
//!
//! # proptest's float ranges under debug assertions
//!
//! proptest 1.12 samples a float range such as `0.05f32..2.0` (where `|lo| < |hi|`)
//! from intervals that can reach just below `lo`; it clamps such a value into the range,
//! but first checks it with a debug assertion of its own that is wrong for these ranges.
//! With debug assertions on, a test then fails spuriously about once in ten million
//! draws, in these strategies as in any `a..b` range of your own. This crate's tests turn
//! proptest's debug assertions off, which a test suite can do in its `Cargo.toml`:
//!
//! ```toml
//! [profile.dev.package.proptest]
//! debug-assertions = false
//! ```

pub mod properties;
pub mod strategies;
pub mod vectors;

pub use crate::reference;
pub use properties::{Expected, Mismatch};
pub use strategies::{Boundary, Case, CutCase, Element, Shape, TokenHistory};
