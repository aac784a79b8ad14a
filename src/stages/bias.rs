//! Logit bias: `l += bias` per listed token; `-inf` bans.

use crate::TokenId;

/// The logit-bias stage of a [`Chain`](crate::Chain): `l += bias` for each listed token;
/// `-inf` bans it. A later entry for the same id replaces an earlier one.
///
/// # Example
/// ```
/// use logits::LogitBias;
/// assert!(LogitBias::new([(3, -2.5), (7, f32::NEG_INFINITY)]).is_ok());
/// assert!(LogitBias::new([(3, f32::NAN)]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LogitBias {
    entries: Vec<(TokenId, f32)>,
}

impl LogitBias {
    /// # Errors
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) for a bias that is
    /// NaN or `+inf`.
    pub fn new(entries: impl IntoIterator<Item = (TokenId, f32)>) -> Result<Self, crate::Error> {
        let mut b = crate::SamplingParams::builder();
        for (id, v) in entries {
            b = b.logit_bias(id, v);
        }
        let params = b.build()?;
        Ok(LogitBias {
            entries: params.logit_bias().to_vec(),
        })
    }
}

impl crate::chain::Stage for LogitBias {
    fn name(&self) -> &'static str {
        "logit_bias"
    }

    fn lowering(&self) -> crate::chain::lower::Lowering {
        crate::chain::lower::Lowering::Bias(self.entries.clone())
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`](crate::Error::TokenOutOfRange) for an id
    /// `>= vocab_size`.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), crate::Error> {
        match self
            .entries
            .iter()
            .find(|(id, _)| *id as usize >= vocab_size)
        {
            Some(&(id, _)) => Err(crate::Error::TokenOutOfRange { id, vocab_size }),
            None => Ok(()),
        }
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`](crate::Error::TokenOutOfRange) for an id outside the
    /// vocabulary.
    fn apply(
        &mut self,
        c: &mut crate::Candidates,
        _: &crate::StageContext<'_>,
    ) -> Result<(), crate::Error> {
        let vocab_size = if c.is_dense() { c.len() } else { usize::MAX };
        for &(id, b) in &self.entries {
            if id as usize >= vocab_size {
                return Err(crate::Error::TokenOutOfRange { id, vocab_size });
            }
            if let Some(l) = c.logit_of_mut(id) {
                *l += b;
            }
        }
        Ok(())
    }
}
