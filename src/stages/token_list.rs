//! A set of token ids that a stage bans or forces: what `suppress_tokens`,
//! `begin_suppress_tokens`, `forced_bos_token_id` and `forced_eos_token_id` share.

use crate::candidates::Candidates;
use crate::error::Error;
use crate::TokenId;

/// Token ids, sorted and without duplicates.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct TokenList {
    ids: Vec<TokenId>,
}

impl TokenList {
    /// The ids, sorted and deduplicated. `name` is the parameter an allocation failure
    /// names.
    pub(crate) fn new(
        name: &'static str,
        ids: impl IntoIterator<Item = TokenId>,
    ) -> Result<Self, Error> {
        let ids = ids.into_iter();
        let mut out = Vec::new();
        out.try_reserve(ids.size_hint().0)
            .map_err(|_| Error::OutOfMemory {
                name,
                value: ids.size_hint().0,
            })?;
        for id in ids {
            out.try_reserve(1).map_err(|_| Error::OutOfMemory {
                name,
                value: out.len() + 1,
            })?;
            out.push(id);
        }
        out.sort_unstable();
        out.dedup();
        Ok(TokenList { ids: out })
    }

    /// The ids, ascending.
    pub(crate) fn ids(&self) -> &[TokenId] {
        &self.ids
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub(crate) fn contains(&self, id: TokenId) -> bool {
        self.ids.binary_search(&id).is_ok()
    }

    /// [`Error::TokenOutOfRange`] for the largest id when it is `>= vocab_size`.
    pub(crate) fn check(&self, vocab_size: usize) -> Result<(), Error> {
        match self.ids.last() {
            Some(&id) if id as usize >= vocab_size => {
                Err(Error::TokenOutOfRange { id, vocab_size })
            }
            _ => Ok(()),
        }
    }

    /// Sets every listed token of a row to `-inf`.
    pub(crate) fn ban_row(&self, logits: &mut [f32]) -> Result<(), Error> {
        self.check(logits.len())?;
        for &id in &self.ids {
            logits[id as usize] = f32::NEG_INFINITY;
        }
        Ok(())
    }

    /// Removes every listed token from the candidates (`-inf` on the whole row).
    pub(crate) fn ban(&self, c: &mut Candidates) -> Result<(), Error> {
        if c.is_dense() {
            return self.ban_row(c.logits_mut());
        }
        c.retain(|id, _| !self.contains(id));
        Ok(())
    }

    /// Sets every listed token of a row to 0 and every other one to `-inf`.
    pub(crate) fn force_row(&self, logits: &mut [f32]) -> Result<(), Error> {
        self.check(logits.len())?;
        logits.fill(f32::NEG_INFINITY);
        for &id in &self.ids {
            logits[id as usize] = 0.0;
        }
        Ok(())
    }

    /// Keeps only the listed tokens among the candidates, each at logit 0.
    pub(crate) fn force(&self, c: &mut Candidates) -> Result<(), Error> {
        if c.is_dense() {
            return self.force_row(c.logits_mut());
        }
        c.retain(|id, _| self.contains(id));
        c.logits_mut().fill(0.0);
        Ok(())
    }
}
