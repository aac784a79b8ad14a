//! Top-p (nucleus): the smallest prefix of the sorted candidates whose probability
//! reaches `p`; the token that crosses `p` is kept.

use crate::nucleus::prefix_len;

/// The top-p stage of a [`Chain`](crate::Chain): keeps the smallest prefix of the sorted
/// candidates whose probability reaches `p` (the crossing token is kept), at least
/// `min_keep` of them. `p = 1` keeps everything. `p` is read as the decimal it was
/// written as ([`as_decimal`](crate::as_decimal)).
///
/// # Example
/// ```
/// use logits::TopP;
/// assert!(TopP::new(0.95).is_ok());
/// assert!(TopP::new(0.0).is_err());
/// assert!(TopP::new(1.01).is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TopP {
    p: crate::decimal::Threshold,
    min_keep: usize,
    weights: Vec<f64>,
}

impl TopP {
    /// # Errors
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) unless `0 < p <= 1`.
    pub fn new(p: f32) -> Result<Self, crate::Error> {
        if !(p > 0.0 && p <= 1.0) {
            return Err(crate::Error::InvalidParameter {
                name: "top_p",
                value: p.into(),
                expected: "a value in (0, 1]",
            });
        }
        Ok(TopP {
            p: crate::decimal::Threshold::new(p),
            min_keep: 1,
            weights: Vec::new(),
        })
    }

    /// Keep at least `n` candidates.
    pub fn min_keep(self, n: usize) -> Self {
        TopP {
            min_keep: n.max(1),
            ..self
        }
    }

    /// `p`.
    pub fn p(&self) -> f32 {
        self.p.value
    }
}

impl crate::chain::Stage for TopP {
    fn name(&self) -> &'static str {
        "top_p"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::TopP {
            p: self.p.value,
            keep: self.min_keep,
        }
    }

    fn apply(
        &mut self,
        c: &mut crate::Candidates,
        _: &crate::StageContext<'_>,
    ) -> Result<(), crate::Error> {
        if self.p.value >= 1.0 {
            return Ok(());
        }
        c.sort();
        let total = c.weights(&mut self.weights);
        if let Some(n) = prefix_len(&self.weights, self.p.decimal, total) {
            c.truncate(n.max(self.min_keep));
        }
        Ok(())
    }
}
