//! The kernels: passes over a row of logits, shared by every plan of the engine.
//!
//! - [`adjust`]: loading a row (`f16`/`bf16` converted in registers), its checks, and the
//!   overlay of patches and marks that stands for bias, penalties and a mask;
//! - [`select`]: the `k` best entries in one pass (top-k, greedy, top-p's candidates);
//! - [`scan`]: the per-block bodies of selection's passes (the running-threshold scan,
//!   the bits of the entries above a threshold);
//! - [`flat`]: min-p's exact threshold on the logit and the pass that collects the
//!   entries above it (a flat row's many survivors);
//! - [`histogram`]: the buckets of the distance below the maximum (flat top-p, min-p, the
//!   plain draw);
//! - [`mass`] and [`exp`]: the vectorised row mass and the exps with their error bounds;
//! - [`stats`]: the whole-row mass and entropy, and the moments of the logits, each
//!   with its error bound (epsilon, eta, top-n-sigma);
//! - [`order`]: the candidates' order (the draw order);
//! - [`nucleus`]: the top-p prefix, where a cumulative weight reaches its target;
//! - [`penalize`]: the arithmetic of the logit bias and the penalties, on a dense row
//!   and on the overlay's patches;
//! - [`floor_band`]: the bounds on the floors of epsilon, eta and top-n-sigma that
//!   those statistics give;
//! - [`greedy`]: the argmax;
//! - [`exact_sum`]: exact sums of `f64` weights, for the draw's exact decision;
//! - [`simd`]: run-time dispatch of the passes to AVX2/AVX-512, the crate's only `unsafe`.
//!
//! The kernels use only the base modules (element, mask, params, error, decimal) and each
//! other, never the engine, a stage or the sequence state. A stage may call them
//! directly; most samplers need them only through the engine.

pub(crate) mod adjust;
pub(crate) mod exact_sum;
pub(crate) mod exp;
pub(crate) mod flat;
pub(crate) mod floor_band;
pub(crate) mod greedy;
pub(crate) mod histogram;
pub(crate) mod mass;
pub(crate) mod nucleus;
pub(crate) mod order;
pub(crate) mod penalize;
pub(crate) mod scan;
pub(crate) mod select;
pub(crate) mod simd;
pub(crate) mod stats;
