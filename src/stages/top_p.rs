//! Top-p (nucleus): the smallest prefix of the sorted candidates whose probability
//! reaches `p`; the token that crosses `p` is kept.

/// Length of the top-p prefix of `weights` (sorted, descending), measured against
/// `total` (the weight of the whole distribution the candidates are a prefix of).
///
/// The cumulative weight is summed in `f64` in candidate order and compared with
/// `p * total`, `p` being the decimal the `f32` was written as
/// ([`as_decimal`](crate::as_decimal)); the first index where it is `>=` ends the prefix.
/// Returns `None` when the candidates given do not reach `p * total` (they are a prefix
/// too short to decide).
pub(crate) fn prefix_len(weights: &[f64], p: f64, total: f64) -> Option<usize> {
    let target = p * total;
    let mut cum = 0.0;
    for (i, &w) in weights.iter().enumerate() {
        cum += w;
        if cum >= target {
            return Some(i + 1);
        }
    }
    None
}

/// Where a cumulative weight crosses a top-p target (see [`crossing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Crossing {
    /// The prefix of this length is the first to reach the target.
    At(usize),
    /// The weights given do not reach the target.
    Short,
    /// A cumulative sum next to the crossing lies within the error margin of the target:
    /// the decision needs more precise weights.
    Undecided,
}

/// The first prefix of `weights` (sorted, descending) at which the cumulative weight,
/// starting from `start` (the weight of the candidates before them), reaches `target`.
/// With a `margin` (the error bound of fast weights), a crossing where the target lies
/// within `margin` of either neighbouring cumulative sum is [`Crossing::Undecided`].
pub(crate) fn crossing(weights: &[f64], start: f64, target: f64, margin: Option<f64>) -> Crossing {
    let mut c = start;
    for (i, &w) in weights.iter().enumerate() {
        let prev = c;
        c += w;
        if c >= target {
            return match margin {
                Some(m) if target - prev <= m || c - target <= m => Crossing::Undecided,
                _ => Crossing::At(i + 1),
            };
        }
    }
    Crossing::Short
}

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
