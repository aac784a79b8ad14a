//! Top-k: exactly the `k` largest logits, ties at the k-th value broken by lower id. The
//! first cut of a chain runs it on the selection kernel ([`select`](crate::kernels::select)).

/// The top-k stage of a [`Chain`](crate::Chain): keeps the `max(k, min_keep)` most likely
/// candidates, ties at the boundary to the lower id.
///
/// # Example
/// ```
/// use logits::TopK;
/// assert_eq!(TopK::new(20)?.k(), 20);
/// assert!(TopK::new(0).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopK {
    k: usize,
    min_keep: usize,
}

impl TopK {
    /// # Errors
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) when `k == 0`.
    pub fn new(k: usize) -> Result<Self, crate::Error> {
        if k == 0 {
            return Err(crate::Error::InvalidParameter {
                name: "top_k",
                value: 0.0,
                expected: "an integer >= 1",
            });
        }
        Ok(TopK { k, min_keep: 1 })
    }

    /// Keep at least `n` candidates.
    pub fn min_keep(self, n: usize) -> Self {
        TopK {
            min_keep: n.max(1),
            ..self
        }
    }

    /// `k`.
    pub fn k(&self) -> usize {
        self.k
    }
}

impl crate::chain::Stage for TopK {
    fn name(&self) -> &'static str {
        "top_k"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::TopK {
            k: self.k,
            keep: self.min_keep,
        }
    }

    fn apply(
        &mut self,
        c: &mut crate::Candidates,
        _: &crate::StageContext<'_>,
    ) -> Result<(), crate::Error> {
        c.sort();
        c.truncate(self.k.max(self.min_keep));
        Ok(())
    }
}
