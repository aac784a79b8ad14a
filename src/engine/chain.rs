//! [`Chain`]: an explicit, user-ordered sequence of stages ending in one draw.

use crate::candidates::Candidates;
use crate::engine::{End, Engine, Plan};
use crate::error::Error;
use crate::history::History;
use crate::params::{SamplingParams, MAX_LOGPROBS};
use crate::processor::{LogitsProcessor, ProcessorStage};
use crate::rng::DrawRng;
use crate::sequence_sampler::BanMask;
use crate::TokenId;

/// What a [`Stage`] may read besides the candidates.
#[derive(Clone, Copy, Debug)]
pub struct StageContext<'a> {
    /// The sequence's tokens so far.
    pub history: History<'a>,
    /// The chain's seed.
    pub seed: u64,
    /// The index of the draw about to be made (number of generated tokens).
    pub step: u64,
}

impl StageContext<'_> {
    /// A uniform in `[0, 1)` for a stage that needs randomness of its own (XTC's coin, for
    /// example), keyed by `(seed, step, salt)`. It never coincides with the draw's uniform
    /// (the draw uses stream 0; stage uniforms use stream `salt + 1`), so adding such a
    /// stage does not change which uniform the draw sees.
    pub fn uniform(&self, salt: u64) -> f64 {
        DrawRng::with_stream(self.seed, salt.wrapping_add(1)).uniform(self.step)
    }
}

/// One step of a [`Chain`]: an adjustment, a temperature, a cut, or anything else that
/// works on the [`Candidates`].
///
/// Stages take `&mut self` so that stateful samplers (mirostat's running `mu`) can live
/// here; [`Stage::observe`] tells them which token was drawn.
///
/// A stage is `Clone` (through [`StageClone`], which every `Stage + Clone` type gets), so
/// that a [`Chain`] can be cloned and [forked](Chain::fork) for `n` samples of one
/// prompt: each copy then owns its state (mirostat's `mu`) and scratch.
pub trait Stage: StageClone + Send + std::fmt::Debug {
    /// A short name for messages and `Debug` output.
    fn name(&self) -> &'static str;

    /// Works on the candidates.
    ///
    /// # Errors
    /// Any [`Error`]; the chain returns it unchanged and draws nothing.
    fn apply(&mut self, candidates: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error>;

    /// Called after every draw with the drawn token and its final logprob.
    fn observe(&mut self, _token: TokenId, _logprob: f32) {}

    /// Called by [`Chain::reset`].
    fn reset(&mut self) {}

    /// Checks the stage against the chain's vocabulary, once, when the chain is built
    /// ([`ChainBuilder::build`]), wherever the stage stands: a stage that names token ids
    /// refuses one `>= vocab_size` here rather than ignore it after a cut, where the
    /// candidates no longer show the vocabulary's size. The default accepts any.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id outside the vocabulary, or any other
    /// [`Error`]; the build returns it unchanged.
    fn check_vocab(&self, _vocab_size: usize) -> Result<(), Error> {
        Ok(())
    }

    /// Makes room for a history of `history_len` tokens in all, so that
    /// [`apply`](Self::apply) allocates nothing until the history is that long. Called by
    /// [`Chain::reserve`] and [`Sampler::reserve`](crate::Sampler::reserve); a stage
    /// whose buffers grow with the history (DRY without a window) sizes them here. The
    /// default does nothing.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the room cannot be allocated (reported to the caller
    /// as naming `additional`), or any other [`Error`], which the caller gets unchanged.
    fn reserve(&mut self, _history_len: usize) -> Result<(), Error> {
        Ok(())
    }

    /// What the engine knows of a built-in stage, so that it can run the stage on its
    /// shared kernels. Not part of the API: a user's stage is always run through
    /// [`apply`](Self::apply).
    #[doc(hidden)]
    fn lowering(&self) -> lower::Lowering {
        lower::Lowering::Opaque
    }
}

/// Clones a boxed [`Stage`]: the supertrait that makes `Box<dyn Stage>` (and so
/// [`Chain`]) `Clone`. Implemented for every `Stage + Clone` type; derive `Clone` on a
/// stage rather than implement this.
pub trait StageClone {
    /// A boxed copy of the stage, with its own state and scratch.
    fn clone_box(&self) -> Box<dyn Stage>;
}

impl<T: Stage + Clone + 'static> StageClone for T {
    fn clone_box(&self) -> Box<dyn Stage> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn Stage> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// The engine's view of the built-in stages.
pub(crate) mod lower {
    use crate::params::SamplingParams;
    use crate::TokenId;

    /// What a stage is, for the planner; see [`Stage::lowering`](super::Stage::lowering).
    #[derive(Clone, Debug, PartialEq)]
    pub enum Lowering {
        /// Run through `apply`.
        Opaque,
        /// `l += b` per listed token.
        Bias(Vec<(TokenId, f32)>),
        /// The penalties of these parameters (repetition, frequency, presence, window,
        /// prompt).
        Penalties(SamplingParams),
        /// Multiplies the temperature.
        Temperature(f32),
        /// Top-k with its `min_keep`.
        TopK { k: usize, keep: usize },
        /// Top-p with its `min_keep`.
        TopP { p: f32, keep: usize },
        /// Min-p with its `min_keep`.
        MinP { p: f32, keep: usize },
        /// A cut to the tokens at or above a logit floor that a statistic of the whole
        /// row decides.
        Floor(Floor),
        /// [`Xtc`](crate::Xtc): removes, on its coin, the most probable tokens.
        Xtc(XtcRule),
        /// [`DynamicTemperature`](crate::DynamicTemperature) with a range above 0: a
        /// temperature the entropy of the whole row decides.
        DynamicTemperature { t: f32, delta: f32, exponent: f32 },
    }

    /// [`Xtc`](crate::Xtc)'s parameters, as the engine applies the stage to the row in
    /// place: the coin first, then the tokens near the maximum against the row's mass.
    #[derive(Clone, Debug, PartialEq)]
    pub struct XtcRule {
        /// The coin's probability, read as the decimal it was written as.
        pub probability: f64,
        /// The probability threshold, read as the decimal it was written as.
        pub threshold: f64,
        /// True when a token must be strictly above the threshold.
        pub strict: bool,
        /// The stage's `min_keep`.
        pub keep: usize,
        /// The tokens never removed, sorted.
        pub special: Vec<TokenId>,
        /// The salt of the coin's [`StageContext::uniform`](crate::StageContext::uniform).
        pub salt: u64,
    }

    /// The stages that keep every token at or above a floor computed from the whole
    /// row: as the first stage of a chain, the engine finds the floor with one
    /// vectorised pass and collects the tokens above it, without materialising the row.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub enum Floor {
        /// [`EpsilonCutoff`](crate::EpsilonCutoff).
        Epsilon { epsilon: f32, keep: usize },
        /// [`EtaCutoff`](crate::EtaCutoff).
        Eta { epsilon: f32, keep: usize },
        /// [`TopNSigma`](crate::TopNSigma).
        TopNSigma { n: f32 },
        /// [`MirostatV2`](crate::MirostatV2) at its current `2^-mu`: the tokens with
        /// `w >= total * cut`, or else the lowest-id best token alone.
        Mirostat { cut: f64 },
        /// [`TypicalP`](crate::TypicalP) below a mass of 1, read as the decimal it was
        /// written as: the tokens within a distance of the entropy, an interval of
        /// logits, whose floor and ceiling the whole row decides.
        Typical { mass: f64, keep: usize },
    }

    impl Floor {
        /// The stage's `min_keep`.
        pub fn keep(self) -> usize {
            match self {
                Floor::Epsilon { keep, .. }
                | Floor::Eta { keep, .. }
                | Floor::Typical { keep, .. } => keep,
                Floor::TopNSigma { .. } | Floor::Mirostat { .. } => 1,
            }
        }
    }
}

/// A sampling pipeline in an order the user chooses.
///
/// A `Chain` runs any sequence of [`Stage`]s, for example llama.cpp's default, where
/// temperature comes after the cuts, and ends in exactly one draw (or greedy pick), which
/// the builder checks. It runs on the same engine as the [`Sampler`](crate::Sampler),
/// which is the chain of the documented order. The chain is planned once, when it is
/// built:
///
/// - a leading [`LogitBias`](crate::LogitBias), then [`Penalties`](crate::Penalties),
///   become patches over the caller's row, which is never copied;
/// - the first cut group, an optional [`Temperature`](crate::Temperature) followed by
///   any of [`TopK`](crate::TopK), [`TopP`](crate::TopP) and [`MinP`](crate::MinP) in
///   that order (one `min_keep` among them), runs on the shared kernels: the row is read
///   in place, `f16`/`bf16` converted inside the passes, a grammar mask read as marks
///   or as a compact row, exactly as in the `Sampler`;
/// - every stage after the first cut works on the compact candidate set it leaves (tens
///   to thousands of tokens), renormalised;
/// - a stage the engine does not know (a user's, or one that needs the whole row, such
///   as [`Dry`](crate::Dry)) ahead of the first cut gets the whole row as
///   [`Candidates`], materialised once. If such stages leave every token in id order at
///   temperature 1, the first cut group still runs on the kernels; otherwise every later
///   stage runs on the set they leave.
///
/// The result is the same whichever way a stage runs: the same survivors and the same
/// probabilities as applying each stage in turn (see [`reference`](crate::reference)),
/// and a chain in the default order draws exactly the tokens of the `Sampler`.
///
/// # Example
/// ```
/// use logits::{Chain, Temperature, TopK, TopP};
///
/// // llama.cpp's order: cut first, temperature last.
/// let mut chain = Chain::builder(5)
///     .stage(TopK::new(3)?)
///     .stage(TopP::new(0.95)?)
///     .stage(Temperature::new(0.8)?)
///     .draw()
///     .seed(1)
///     .build()?;
/// let out = chain.sample(&[3.0f32, 2.0, 1.0, 0.0, -1.0])?;
/// assert!(out.token < 3);
/// # Ok::<(), logits::Error>(())
/// ```
///
/// # Serving
/// A `Chain` is `Clone`: a clone owns its history, its stages' state (mirostat's `mu`)
/// and its buffers. [`fork`](Self::fork) clones with a derived seed, for `n` samples of
/// one prompt; [`reset`](Self::reset) and [`set_seed`](Self::set_seed) start a new
/// request on a warm chain; [`sample_banned`](Self::sample_banned) bans a few tokens for
/// one step without building a [`TokenMask`](crate::TokenMask).
#[derive(Clone, Debug)]
pub struct Chain {
    pub(crate) engine: Engine,
    bans: BanMask,
}

/// Builds a [`Chain`]; see [`Chain::builder`].
#[derive(Debug)]
#[must_use]
pub struct ChainBuilder {
    stages: Vec<Box<dyn Stage>>,
    ends: usize,
    end: Option<End>,
    stage_after_end: bool,
    vocab_size: usize,
    seed: u64,
    logprobs: Option<usize>,
}

crate::sequence_sampler::sequence_methods!(Chain);

impl Chain {
    /// A builder for a chain over a vocabulary of `vocab_size` tokens.
    pub fn builder(vocab_size: usize) -> ChainBuilder {
        ChainBuilder {
            stages: Vec::new(),
            ends: 0,
            end: None,
            stage_after_end: false,
            vocab_size,
            seed: 0,
            logprobs: None,
        }
    }

    /// The stages' names, in order, followed by `"draw"` or `"greedy"`.
    pub fn stage_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        let end = match self.engine.end() {
            End::Draw => "draw",
            End::Greedy => "greedy",
        };
        self.engine
            .stages()
            .iter()
            .map(|s| s.name())
            .chain(std::iter::once(end))
    }

    /// Forgets the history and resets every stateful stage ([`Stage::reset`]); the
    /// buffers stay. With [`set_seed`](Self::set_seed), how a warm chain starts a new
    /// request: the result is that of the same chain freshly built with that seed,
    /// token for token, as long as every stateful stage's `reset` restores its initial
    /// state (the built-in ones do).
    pub fn reset(&mut self) {
        self.engine.reset();
    }

    /// The seed of the draws (and of the stages' [`StageContext::uniform`]).
    pub fn seed(&self) -> u64 {
        self.engine.params().seed()
    }

    /// Draws with `seed` from the next step on, as a chain built with
    /// [`ChainBuilder::seed`]`(seed)` would at the same step; the history and the
    /// stages' state stay.
    ///
    /// # Example
    /// ```
    /// use logits::{Chain, MirostatV2};
    ///
    /// let row = [1.0f32, 0.9, 0.8, 0.7];
    /// let mut chain = Chain::builder(4).stage(MirostatV2::new(3.0, 0.1)?).draw().build()?;
    /// chain.sample(&row)?;
    /// // A new request on the warm chain ...
    /// chain.reset();
    /// chain.set_seed(5);
    /// // ... draws as a fresh chain with seed 5.
    /// let mut fresh =
    ///     Chain::builder(4).stage(MirostatV2::new(3.0, 0.1)?).draw().seed(5).build()?;
    /// for _ in 0..8 {
    ///     assert_eq!(chain.sample(&row)?.token, fresh.sample(&row)?.token);
    /// }
    /// # Ok::<(), logits::Error>(())
    /// ```
    pub fn set_seed(&mut self, seed: u64) {
        self.engine.set_seed(seed);
    }

    /// Sample `i` of `n` samples of one prompt: a clone (history, stages and their
    /// state, buffers) whose draws use the seed
    /// [`DrawRng::fork_seed`](crate::DrawRng::fork_seed)`(seed, i)`. Fork 0 keeps the
    /// seed, so sample 0 draws exactly what this chain would, whatever `n`; each fork's
    /// stages keep their own state from then on. As [`Sampler::fork`](crate::Sampler::fork).
    ///
    /// # Example
    /// ```
    /// use logits::{Chain, TopK};
    ///
    /// let base = Chain::builder(3).stage(TopK::new(2)?).draw().seed(9).build()?;
    /// let mut samples: Vec<Chain> = (0..3).map(|i| base.fork(i)).collect();
    /// assert_eq!(samples[0].seed(), 9);
    /// assert_eq!(samples[2].seed(), logits::DrawRng::fork_seed(9, 2));
    /// assert!(samples[1].sample(&[1.0f32, 0.5, 0.0])?.token < 2);
    /// # Ok::<(), logits::Error>(())
    /// ```
    #[must_use]
    pub fn fork(&self, i: u64) -> Self {
        let mut c = self.clone();
        c.set_seed(crate::rng::DrawRng::fork_seed(self.seed(), i));
        c
    }
}

impl ChainBuilder {
    /// Appends a stage.
    pub fn stage(mut self, stage: impl Stage + 'static) -> Self {
        self.push(Box::new(stage));
        self
    }

    /// Appends a boxed stage.
    pub fn boxed_stage(mut self, stage: Box<dyn Stage>) -> Self {
        self.push(stage);
        self
    }

    /// Appends a [`LogitsProcessor`] as a stage (see [`LogitsProcessor`] for what it sees
    /// after a cut).
    pub fn processor(mut self, processor: impl LogitsProcessor + 'static) -> Self {
        let stage = ProcessorStage::new(Box::new(processor), self.vocab_size);
        self.push(Box::new(stage));
        self
    }

    fn push(&mut self, stage: Box<dyn Stage>) {
        if self.end.is_some() {
            self.stage_after_end = true;
        }
        self.stages.push(stage);
    }

    /// Ends the chain with a seeded draw (inverse CDF, one uniform per draw).
    pub fn draw(mut self) -> Self {
        self.ends += 1;
        self.end = Some(End::Draw);
        self
    }

    /// Ends the chain with a greedy pick of the largest logit (ties to the lower id).
    pub fn greedy(mut self) -> Self {
        self.ends += 1;
        self.end = Some(End::Greedy);
        self
    }

    /// Seed of the draws.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Report logprobs with `n` alternatives (`n <= 20`).
    pub fn logprobs(mut self, n: usize) -> Self {
        self.logprobs = Some(n);
        self
    }

    /// Checks the chain (exactly one draw or greedy end, after every stage) and plans it.
    ///
    /// # Errors
    /// [`Error::EmptyVocabulary`] for a zero vocabulary; [`Error::InvalidParameter`]
    /// naming `vocab_size` for a vocabulary beyond
    /// [`MAX_VOCAB_SIZE`](crate::MAX_VOCAB_SIZE) (checked before anything else);
    /// [`Error::InvalidChain`] when the chain has no end, more than one, or a stage after
    /// it; [`Error::InvalidParameter`] for more than 20 logprob alternatives;
    /// [`Error::TokenOutOfRange`] for a [`LogitBias`](crate::LogitBias) or
    /// [`BadWords`](crate::BadWords) stage on an id `>= vocab_size`, wherever it stands
    /// (or whatever a stage's [`Stage::check_vocab`] returns); [`Error::OutOfMemory`]
    /// when the buffers for `vocab_size` tokens cannot be allocated.
    pub fn build(self) -> Result<Chain, Error> {
        crate::check_vocab_size(self.vocab_size)?;
        let end = match (self.ends, self.end) {
            (1, Some(end)) => end,
            (0, _) => return Err(Error::InvalidChain("the chain has no draw at the end")),
            _ => return Err(Error::InvalidChain("the chain has more than one draw")),
        };
        if self.stage_after_end {
            return Err(Error::InvalidChain("a stage comes after the draw"));
        }
        if let Some(n) = self.logprobs {
            if n > MAX_LOGPROBS {
                return Err(Error::InvalidParameter {
                    name: "logprobs",
                    value: n as f64,
                    expected: "at most 20 alternatives",
                });
            }
        }
        for stage in &self.stages {
            if let lower::Lowering::Bias(bias) = stage.lowering() {
                if let Some(&(id, _)) = bias.iter().find(|(id, _)| *id as usize >= self.vocab_size)
                {
                    return Err(Error::TokenOutOfRange {
                        id,
                        vocab_size: self.vocab_size,
                    });
                }
            }
        }
        for stage in &self.stages {
            stage.check_vocab(self.vocab_size)?;
        }
        let plan = plan(self.stages, end, self.seed, self.logprobs);
        Ok(Chain {
            engine: Engine::new(plan, self.vocab_size)?,
            bans: BanMask::default(),
        })
    }
}

/// The first cut group found at some position: what it lowers to.
#[derive(Clone, Copy, Debug)]
struct Group {
    /// One past its last stage.
    end: usize,
    temperature: f32,
    top_k: Option<usize>,
    top_p: f32,
    min_p: f32,
    keep: usize,
}

/// The first cut group starting at stage `g`: an optional temperature, then top-k, top-p
/// and min-p in that order, each optional, with one `min_keep`. `None` when it holds no
/// cut and does not reach the end of the chain (a temperature before a stage the engine
/// does not know runs as that stage's input, not as a group).
fn group_at(kinds: &[lower::Lowering], g: usize) -> Option<Group> {
    use lower::Lowering;
    let mut grp = Group {
        end: g,
        temperature: 1.0,
        top_k: None,
        top_p: 1.0,
        min_p: 0.0,
        keep: 1,
    };
    if g == kinds.len() {
        // The empty group at the end, which always exists.
        return Some(grp);
    }
    if let Some(&Lowering::Temperature(t)) = kinds.get(grp.end) {
        grp.temperature = t;
        grp.end += 1;
    }
    let cuts = grp.end;
    let mut keep = None;
    let mut same_keep = |k: usize| *keep.get_or_insert(k) == k;
    if let Some(&Lowering::TopK { k, keep }) = kinds.get(grp.end) {
        if same_keep(keep) {
            grp.top_k = Some(k);
            grp.end += 1;
        }
    }
    if let Some(&Lowering::TopP { p, keep }) = kinds.get(grp.end) {
        if same_keep(keep) {
            grp.top_p = p;
            grp.end += 1;
        }
    }
    if let Some(&Lowering::MinP { p, keep }) = kinds.get(grp.end) {
        if same_keep(keep) {
            grp.min_p = p;
            grp.end += 1;
        }
    }
    grp.keep = keep.unwrap_or(1);
    (grp.end > cuts || grp.end == kinds.len()).then_some(grp)
}

/// Plans a checked chain: which stages the engine lowers onto its kernels, and where the
/// rest run (see [`Plan`]).
fn plan(stages: Vec<Box<dyn Stage>>, end: End, seed: u64, logprobs: Option<usize>) -> Plan {
    use lower::Lowering;
    let kinds: Vec<Lowering> = stages.iter().map(|s| s.lowering()).collect();
    let mut params = SamplingParams {
        seed,
        logprobs,
        ..SamplingParams::default()
    };
    let mut lead = 0;
    if let Some(Lowering::Bias(bias)) = kinds.first() {
        params.logit_bias = bias.clone();
        lead += 1;
    }
    if let Some(Lowering::Penalties(p)) = kinds.get(lead) {
        params.repetition_penalty = p.repetition_penalty;
        params.frequency_penalty = p.frequency_penalty;
        params.presence_penalty = p.presence_penalty;
        params.penalty_window = p.penalty_window;
        params.penalize_prompt = p.penalize_prompt;
        lead += 1;
    }
    // (`group_at` finds the empty group at the end if nothing comes before it.)
    let mut pre = lead;
    let grp = loop {
        if let Some(grp) = group_at(&kinds, pre) {
            break grp;
        }
        pre += 1;
    };
    // After a group without a temperature, a last stage that is one (llama.cpp's order)
    // is the draw's temperature: the survivors are drawn at it without being
    // materialised. Greedy ignores it.
    let mut group = grp.end;
    let mut draw_temperature = None;
    if let [Lowering::Temperature(t)] = &kinds[group..] {
        if grp.end == pre || !matches!(kinds[pre], Lowering::Temperature(_)) {
            draw_temperature = (end == End::Draw).then_some(*t);
            group = kinds.len();
        }
    }
    // Greedy with nothing after the group: the argmax, which every cut keeps.
    let greedy = end == End::Greedy && group == kinds.len();
    params.temperature = if greedy { 0.0 } else { grp.temperature };
    params.top_k = grp.top_k;
    params.top_p = grp.top_p;
    params.min_p = grp.min_p;
    params.min_tokens_to_keep = grp.keep;
    Plan {
        params,
        stages,
        lead,
        pre,
        group,
        end,
        draw_temperature,
    }
}
