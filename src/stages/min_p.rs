//! Min-p: keep tokens whose probability is at least `min_p` times the top token's.

/// Length of the min-p prefix of the sorted candidates' scaled logits
/// `s = (l - max) / T`: the candidates with `s - s_top >= ln(min_p)`, `min_p` read as
/// the decimal it was written as ([`as_decimal`](crate::as_decimal)), so `cut` is
/// `ln(as_decimal(min_p))`; equality is kept. Computed in logit space, so no probability
/// is needed.
pub(crate) fn prefix_len(scaled: impl Iterator<Item = f64>, cut: f64) -> usize {
    let mut top = None;
    scaled
        .take_while(|&s| {
            let t = *top.get_or_insert(s);
            s - t >= cut
        })
        .count()
}

/// The min-p stage of a [`Chain`](crate::Chain): keeps candidates with probability at
/// least `p` times the top one's (equality kept), at least `min_keep` of them. `p = 0`
/// keeps everything. `p` is read as the decimal it was written as
/// ([`as_decimal`](crate::as_decimal)).
///
/// # Example
/// ```
/// use logits::MinP;
/// assert!(MinP::new(0.05).is_ok());
/// assert!(MinP::new(-0.1).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MinP {
    p: f32,
    /// `ln(as_decimal(p))`, the threshold compared.
    ln_p: f64,
    min_keep: usize,
}

impl MinP {
    /// # Errors
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) unless `0 <= p <= 1`.
    pub fn new(p: f32) -> Result<Self, crate::Error> {
        if !(0.0..=1.0).contains(&p) {
            return Err(crate::Error::InvalidParameter {
                name: "min_p",
                value: p.into(),
                expected: "a value in [0, 1]",
            });
        }
        Ok(MinP {
            p,
            ln_p: crate::as_decimal(p).ln(),
            min_keep: 1,
        })
    }

    /// Keep at least `n` candidates.
    pub fn min_keep(self, n: usize) -> Self {
        MinP {
            min_keep: n.max(1),
            ..self
        }
    }

    /// `p`.
    pub fn p(&self) -> f32 {
        self.p
    }
}

impl crate::chain::Stage for MinP {
    fn name(&self) -> &'static str {
        "min_p"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::MinP {
            p: self.p,
            keep: self.min_keep,
        }
    }

    fn apply(
        &mut self,
        c: &mut crate::Candidates,
        _: &crate::StageContext<'_>,
    ) -> Result<(), crate::Error> {
        if self.p <= 0.0 {
            return Ok(());
        }
        c.sort();
        let (max, t) = (f64::from(c.max_logit()), c.temperature());
        let n = prefix_len(
            c.logits().iter().map(|&l| (f64::from(l) - max) / t),
            self.ln_p,
        );
        c.truncate(n.max(self.min_keep));
        Ok(())
    }
}
