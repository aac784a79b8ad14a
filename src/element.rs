//! [`Logit`]: the element types a logits row may have (`f32`, `f16`, `bf16`).

use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type of a logits row: `f32`, [`half::f16`] or [`half::bf16`].
///
/// Every value converts to `f32` exactly (both half formats are subsets of `f32`), so a
/// row given in `bf16` samples the same token as the same values given in `f32`. The
/// conversion happens inside the sampler's first pass over the row; no converted copy of
/// the row is made for it. The trait is sealed.
pub trait Logit: Copy + Send + Sync + sealed::Sealed + 'static {
    /// The value as `f32` (exact).
    fn to_f32(self) -> f32;
}

impl Logit for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl Logit for f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

impl Logit for bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}
