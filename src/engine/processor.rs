//! [`LogitsProcessor`]: user-defined adjustments of the whole row, the full-row form of a
//! [`Stage`].

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;

/// A user-defined adjustment of the logits row: the full-row form of a [`Stage`].
///
/// A [`Stage`] works on the [`Candidates`], which may be a compact set after a cut; a
/// `LogitsProcessor` always sees a row indexed by token id, which is the simpler thing to
/// write for an adjustment. Every processor is a stage: a [`Chain`](crate::Chain) takes
/// one at any position with [`ChainBuilder::processor`](crate::ChainBuilder::processor).
/// Both traits take `&mut self`, so either may keep state and scratch.
///
/// A processor is `Clone` (through [`ProcessorClone`], which every
/// `LogitsProcessor + Clone` type gets), so that the [`Sampler`](crate::Sampler) or
/// [`Chain`](crate::Chain) holding it can be cloned and forked.
///
/// In a [`Sampler`](crate::Sampler), processors run in the adjustment stage, after the
/// logit bias, the penalties and the grammar mask and before temperature, in the order
/// they were added to the [`Sampler`](crate::Sampler). They receive the row as `f32` (already converted from
/// `f16`/`bf16`, already biased and penalised) and the sequence's [`History`].
///
/// A processor may set entries to `-inf` to ban tokens. If it leaves a NaN or `+inf` in the
/// row, sampling fails with [`Error::NanLogit`] or [`Error::InfiniteLogit`]; it never
/// draws from a poisoned row.
///
/// # Example
/// ```
/// use logits::{Error, History, LogitsProcessor, Sampler, SamplingParams};
///
/// /// Bans every odd token id.
/// #[derive(Clone, Debug)]
/// struct EvenOnly;
///
/// impl LogitsProcessor for EvenOnly {
///     fn process(&mut self, logits: &mut [f32], _history: &History<'_>) -> Result<(), Error> {
///         logits.iter_mut().skip(1).step_by(2).for_each(|l| *l = f32::NEG_INFINITY);
///         Ok(())
///     }
/// }
///
/// let mut sampler = Sampler::new(SamplingParams::greedy(), 4)?;
/// sampler.add_processor(Box::new(EvenOnly));
/// let out = sampler.sample(&[0.0f32, 5.0, 1.0, 4.0])?;
/// assert_eq!(out.token, 2);
/// # Ok::<(), Error>(())
/// ```
pub trait LogitsProcessor: ProcessorClone + Send + std::fmt::Debug {
    /// Adjusts `logits` (one entry per vocabulary token) in place.
    ///
    /// # Errors
    /// Any [`Error`]; it is returned from the sampling call unchanged.
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error>;

    /// Makes room for a history of `history_len` tokens in all, so that
    /// [`process`](Self::process) allocates nothing until the history is that long; as
    /// [`Stage::reserve`], which the processor's stage forwards here. The default does
    /// nothing.
    ///
    /// # Errors
    /// As [`Stage::reserve`].
    fn reserve(&mut self, _history_len: usize) -> Result<(), Error> {
        Ok(())
    }
}

/// Clones a boxed [`LogitsProcessor`]: the supertrait that makes
/// `Box<dyn LogitsProcessor>` `Clone`. Implemented for every `LogitsProcessor + Clone`
/// type; derive `Clone` on a processor rather than implement this.
pub trait ProcessorClone {
    /// A boxed copy of the processor, with its own state and scratch.
    fn clone_box(&self) -> Box<dyn LogitsProcessor>;
}

impl<T: LogitsProcessor + Clone + 'static> ProcessorClone for T {
    fn clone_box(&self) -> Box<dyn LogitsProcessor> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn LogitsProcessor> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// A [`LogitsProcessor`] as a [`Stage`]: how a [`Sampler`](crate::Sampler) runs its
/// processors, and how [`ChainBuilder::processor`](crate::ChainBuilder::processor) adds
/// one to a chain.
///
/// On the whole row in id order (the stage runs before any cut) the processor adjusts
/// the candidates' logits in place. After a cut it sees a row of the vocabulary's size
/// with `-inf` at every token that is no longer a candidate, and the candidates take the
/// values it leaves.
#[derive(Clone, Debug)]
pub(crate) struct ProcessorStage {
    processor: Box<dyn LogitsProcessor>,
    vocab_size: usize,
    /// The row of a processor that runs after a cut (sized on first use).
    row: Vec<f32>,
}

impl ProcessorStage {
    pub(crate) fn new(processor: Box<dyn LogitsProcessor>, vocab_size: usize) -> Self {
        ProcessorStage {
            processor,
            vocab_size,
            row: Vec::new(),
        }
    }
}

impl Stage for ProcessorStage {
    fn name(&self) -> &'static str {
        "processor"
    }

    fn reserve(&mut self, history_len: usize) -> Result<(), Error> {
        self.processor.reserve(history_len)
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if c.is_dense() {
            return self.processor.process(c.logits_mut(), &ctx.history);
        }
        self.row.clear();
        self.row.resize(self.vocab_size, f32::NEG_INFINITY);
        for (&id, &l) in c.ids().iter().zip(c.logits()) {
            self.row[id as usize] = l;
        }
        self.processor.process(&mut self.row, &ctx.history)?;
        let (ids, logits) = c.ids_and_logits_mut();
        for (&id, l) in ids.iter().zip(logits) {
            *l = self.row[id as usize];
        }
        Ok(())
    }
}
