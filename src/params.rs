//! [`SamplingParams`]: the knobs, validated once.

use crate::error::Error;
use crate::TokenId;

/// The largest number of alternatives a [`Sample`](crate::Sample) can carry (OpenAI's
/// `top_logprobs` limit).
pub const MAX_LOGPROBS: usize = 20;

/// Sampling parameters, under the names users know from Hugging Face, vLLM and OpenAI.
///
/// Built with [`SamplingParams::builder`], which checks every value once: a
/// `SamplingParams` that exists is valid, so sampling never fails because of a parameter.
/// Checks that need the vocabulary size (bias token ids) happen in
/// [`Sampler::new`](crate::Sampler::new).
///
/// | parameter | default | valid values | off when |
/// |---|---|---|---|
/// | `temperature` | 1.0 | finite, `>= 0`; `0` = greedy | — |
/// | `top_k` | off | `>= 1` | not set |
/// | `top_p` | 1.0 | `(0, 1]` | `1.0` |
/// | `min_p` | 0.0 | `[0, 1]` | `0.0` |
/// | `repetition_penalty` | 1.0 | finite, `> 0` | `1.0` |
/// | `frequency_penalty` | 0.0 | finite | `0.0` |
/// | `presence_penalty` | 0.0 | finite | `0.0` |
/// | `penalty_window` | whole history | any; `0` counts nothing | not set |
/// | `penalize_prompt` | true | bool | — |
/// | `logit_bias` | none | finite or `-inf` | empty |
/// | `min_tokens_to_keep` | 1 | `>= 1` | — |
/// | `seed` | 0 | any `u64` | — |
/// | `logprobs` | off | `0..=20` alternatives | not set |
///
/// With the `serde` feature it serialises with every field, and deserialises through the
/// builder's checks (`SamplingParams::from_json` gives the typed error); requests in
/// OpenAI's, vLLM's and llama.cpp's shapes are read by `logits::request`.
///
/// # Example
/// ```
/// use logits::SamplingParams;
///
/// // Qwen3's generation_config.json defaults.
/// let params = SamplingParams::builder()
///     .temperature(0.6)
///     .top_k(20)
///     .top_p(0.95)
///     .seed(42)
///     .build()?;
/// assert_eq!(params.top_k(), Some(20));
///
/// let err = SamplingParams::builder().top_p(1.5).build().unwrap_err();
/// assert!(matches!(err, logits::Error::InvalidParameter { name: "top_p", .. }));
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    pub(crate) temperature: f32,
    pub(crate) top_k: Option<usize>,
    pub(crate) top_p: f32,
    pub(crate) min_p: f32,
    pub(crate) repetition_penalty: f32,
    pub(crate) frequency_penalty: f32,
    pub(crate) presence_penalty: f32,
    pub(crate) penalty_window: Option<usize>,
    pub(crate) penalize_prompt: bool,
    pub(crate) logit_bias: Vec<(TokenId, f32)>,
    pub(crate) min_tokens_to_keep: usize,
    pub(crate) seed: u64,
    pub(crate) logprobs: Option<usize>,
}

impl Default for SamplingParams {
    /// Temperature 1, nothing cut, no adjustment, seed 0: the model's own distribution.
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: None,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_window: None,
            penalize_prompt: true,
            logit_bias: Vec::new(),
            min_tokens_to_keep: 1,
            seed: 0,
            logprobs: None,
        }
    }
}

impl SamplingParams {
    /// A builder starting from [`SamplingParams::default`].
    pub fn builder() -> SamplingParamsBuilder {
        SamplingParamsBuilder {
            params: SamplingParams::default(),
        }
    }

    /// Greedy decoding: temperature 0, everything else default.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }

    /// A builder starting from these parameters, to change some of them.
    pub fn to_builder(&self) -> SamplingParamsBuilder {
        SamplingParamsBuilder {
            params: self.clone(),
        }
    }

    /// Temperature; `0` means greedy.
    pub fn temperature(&self) -> f32 {
        self.temperature
    }
    /// True when the temperature is 0: the argmax is taken and no random number is used.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
    /// Top-k, if set.
    pub fn top_k(&self) -> Option<usize> {
        self.top_k
    }
    /// Top-p (`1.0` keeps everything).
    pub fn top_p(&self) -> f32 {
        self.top_p
    }
    /// Min-p (`0.0` keeps everything).
    pub fn min_p(&self) -> f32 {
        self.min_p
    }
    /// Repetition penalty (Hugging Face semantics; `1.0` is off).
    pub fn repetition_penalty(&self) -> f32 {
        self.repetition_penalty
    }
    /// Frequency penalty (OpenAI semantics; `0.0` is off).
    pub fn frequency_penalty(&self) -> f32 {
        self.frequency_penalty
    }
    /// Presence penalty (OpenAI semantics; `0.0` is off).
    pub fn presence_penalty(&self) -> f32 {
        self.presence_penalty
    }
    /// How many of the most recent history tokens the penalties count (`None`: all).
    pub fn penalty_window(&self) -> Option<usize> {
        self.penalty_window
    }
    /// Whether prompt tokens count for the penalties.
    pub fn penalize_prompt(&self) -> bool {
        self.penalize_prompt
    }
    /// The logit bias, sorted by token id, one entry per id.
    pub fn logit_bias(&self) -> &[(TokenId, f32)] {
        &self.logit_bias
    }
    /// The least number of tokens each tail cut keeps.
    pub fn min_tokens_to_keep(&self) -> usize {
        self.min_tokens_to_keep
    }
    /// The seed of the draws.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// Number of alternatives to report with logprobs, if logprobs are requested.
    pub fn logprobs(&self) -> Option<usize> {
        self.logprobs
    }
    /// True when any penalty is active.
    pub(crate) fn has_penalties(&self) -> bool {
        self.repetition_penalty != 1.0
            || self.frequency_penalty != 0.0
            || self.presence_penalty != 0.0
    }
}

/// Builds a validated [`SamplingParams`]. Setters record values; [`build`](Self::build)
/// checks them all and reports the first invalid one.
#[derive(Clone, Debug)]
#[must_use]
pub struct SamplingParamsBuilder {
    params: SamplingParams,
}

impl SamplingParamsBuilder {
    /// Temperature: every logit is divided by it. `0` means greedy (argmax, ties to the
    /// lowest id, no random draw). Valid: finite and `>= 0`.
    pub fn temperature(mut self, t: f32) -> Self {
        self.params.temperature = t;
        self
    }
    /// Keep exactly the `k` most likely tokens (ties at the k-th value go to the lower id).
    /// Valid: `>= 1`.
    pub fn top_k(mut self, k: usize) -> Self {
        self.params.top_k = Some(k);
        self
    }
    /// Turns top-k off.
    pub fn no_top_k(mut self) -> Self {
        self.params.top_k = None;
        self
    }
    /// Keep the smallest set of most likely tokens whose probability reaches `p`, read as
    /// the decimal it was written as ([`as_decimal`](crate::as_decimal): 0.8 means 0.8).
    /// Valid: `(0, 1]`.
    pub fn top_p(mut self, p: f32) -> Self {
        self.params.top_p = p;
        self
    }
    /// Keep tokens whose probability is at least `p` times the top one's, `p` read as the
    /// decimal it was written as ([`as_decimal`](crate::as_decimal)). Valid: `[0, 1]`.
    pub fn min_p(mut self, p: f32) -> Self {
        self.params.min_p = p;
        self
    }
    /// Repetition penalty: a positive logit of a seen token is divided by it, a negative
    /// one multiplied. Valid: finite, `> 0`.
    pub fn repetition_penalty(mut self, penalty: f32) -> Self {
        self.params.repetition_penalty = penalty;
        self
    }
    /// Frequency penalty: `count * penalty` is subtracted from a seen token's logit.
    /// Valid: finite.
    pub fn frequency_penalty(mut self, penalty: f32) -> Self {
        self.params.frequency_penalty = penalty;
        self
    }
    /// Presence penalty: `penalty` is subtracted once from a seen token's logit. Valid:
    /// finite.
    pub fn presence_penalty(mut self, penalty: f32) -> Self {
        self.params.presence_penalty = penalty;
        self
    }
    /// Count only the last `n` history tokens for the penalties.
    pub fn penalty_window(mut self, n: usize) -> Self {
        self.params.penalty_window = Some(n);
        self
    }
    /// Counts the whole history for the penalties again (the default).
    pub fn no_penalty_window(mut self) -> Self {
        self.params.penalty_window = None;
        self
    }
    /// Whether prompt tokens count for the penalties (default true).
    pub fn penalize_prompt(mut self, yes: bool) -> Self {
        self.params.penalize_prompt = yes;
        self
    }
    /// Adds `bias` to token `id`'s logit; `-inf` bans the token. A later bias for the same
    /// id replaces the earlier one. Valid: finite or `-inf`.
    pub fn logit_bias(mut self, id: TokenId, bias: f32) -> Self {
        match self
            .params
            .logit_bias
            .binary_search_by_key(&id, |&(t, _)| t)
        {
            Ok(i) => self.params.logit_bias[i].1 = bias,
            Err(i) => self.params.logit_bias.insert(i, (id, bias)),
        }
        self
    }
    /// Each tail cut (top-k, top-p, min-p) keeps at least this many tokens. Valid: `>= 1`.
    pub fn min_tokens_to_keep(mut self, n: usize) -> Self {
        self.params.min_tokens_to_keep = n;
        self
    }
    /// Seed of the draws. Draw `n` of a sequence depends only on the seed and `n`.
    pub fn seed(mut self, seed: u64) -> Self {
        self.params.seed = seed;
        self
    }
    /// Report logprobs: the drawn token's raw logprob and the `n` most likely alternatives.
    /// Valid: `0..=20`.
    pub fn logprobs(mut self, n: usize) -> Self {
        self.params.logprobs = Some(n);
        self
    }

    /// Checks every parameter.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the first parameter outside its range (see the
    /// table on [`SamplingParams`]).
    pub fn build(self) -> Result<SamplingParams, Error> {
        let p = self.params;
        let bad = |name: &'static str, value: f64, expected: &'static str| {
            Err(Error::InvalidParameter {
                name,
                value,
                expected,
            })
        };
        if !(p.temperature.is_finite() && p.temperature >= 0.0) {
            return bad("temperature", p.temperature.into(), "a finite value >= 0");
        }
        if p.top_k == Some(0) {
            return bad("top_k", 0.0, "an integer >= 1 (leave unset to disable)");
        }
        if !(p.top_p > 0.0 && p.top_p <= 1.0) {
            return bad("top_p", p.top_p.into(), "a value in (0, 1]");
        }
        if !(0.0..=1.0).contains(&p.min_p) {
            return bad("min_p", p.min_p.into(), "a value in [0, 1]");
        }
        if !(p.repetition_penalty.is_finite() && p.repetition_penalty > 0.0) {
            return bad(
                "repetition_penalty",
                p.repetition_penalty.into(),
                "a finite value > 0",
            );
        }
        if !p.frequency_penalty.is_finite() {
            return bad(
                "frequency_penalty",
                p.frequency_penalty.into(),
                "a finite value",
            );
        }
        if !p.presence_penalty.is_finite() {
            return bad(
                "presence_penalty",
                p.presence_penalty.into(),
                "a finite value",
            );
        }
        if let Some(&(_, b)) = p
            .logit_bias
            .iter()
            .find(|(_, b)| !(b.is_finite() || *b == f32::NEG_INFINITY))
        {
            return bad("logit_bias", b.into(), "a finite value or -inf");
        }
        if p.min_tokens_to_keep == 0 {
            return bad("min_tokens_to_keep", 0.0, "an integer >= 1");
        }
        if let Some(n) = p.logprobs {
            if n > MAX_LOGPROBS {
                return bad("logprobs", n as f64, "at most 20 alternatives");
            }
        }
        Ok(p)
    }
}
