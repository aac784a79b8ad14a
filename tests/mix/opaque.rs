//! A stage the planner does not know, for comparing a lowered stage with its own `apply`.

use logits::{Candidates, Error, Stage, StageContext, TokenId};

/// Hides a stage from the planner: the chain can only run it through `apply`, on the
/// dense copy of the row (or on the candidates a cut left). Everything else the stage
/// does (observing tokens, resetting, checking ids, reserving room) is passed through,
/// so that only the way the engine runs it differs.
#[derive(Clone, Debug)]
pub struct Opaque(pub Box<dyn Stage>);

impl Opaque {
    /// `stage`, hidden.
    pub fn new(stage: impl Stage + 'static) -> Self {
        Opaque(Box::new(stage))
    }
}

impl Stage for Opaque {
    fn name(&self) -> &'static str {
        "opaque"
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        self.0.apply(c, ctx)
    }

    fn observe(&mut self, token: TokenId, logprob: f32) {
        self.0.observe(token, logprob);
    }

    fn reset(&mut self) {
        self.0.reset();
    }

    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.0.check_vocab(vocab_size)
    }

    fn reserve(&mut self, history_len: usize) -> Result<(), Error> {
        self.0.reserve(history_len)
    }
}
