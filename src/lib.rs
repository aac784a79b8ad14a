//! Turn a model's scores into the next token.
//!
//! A language model ends each forward pass with one score (logit) per vocabulary entry:
//! 151,936 of them for Qwen3. `logits` is everything after that: the adjustments, the
//! temperature, the softmax, the tail cuts and the draw, as a model-free library with
//! validated parameters, typed errors, no allocation per step and reproducible draws.
//!
//! # Quick start
//! ```
//! use logits::{Sampler, SamplingParams};
//!
//! // Qwen3's generation_config.json: temperature 0.6, top-k 20, top-p 0.95.
//! let params = SamplingParams::builder()
//!     .temperature(0.6)
//!     .top_k(20)
//!     .top_p(0.95)
//!     .seed(42)
//!     .build()?;
//! let mut sampler = Sampler::new(params, 6)?;
//!
//! // One row of logits from the model (f32, f16 or bf16).
//! let row = [22.38f32, 20.88, 20.62, 19.88, 19.50, 19.40];
//! let next = sampler.sample(&row)?;
//! assert!(next.token < 6);
//! # Ok::<(), logits::Error>(())
//! ```
//!
//! # The pipeline
//!
//! ```text
//! row (&[f32] | &[f16] | &[bf16])
//!  -> 1. adjustments   logit bias -> repetition/frequency/presence penalties
//!                      -> grammar mask -> user processors
//!  -> 2. temperature   divide by T (T = 0: greedy argmax, no draw)
//!  -> 3. softmax
//!  -> 4. tail cut      top-k -> top-p -> min-p, each renormalising the survivors
//!  -> 5. draw          inverse CDF over the survivors, one uniform per draw
//! ```
//!
//! | stage | parameter | off when | semantics |
//! |---|---|---|---|
//! | logit bias | `logit_bias` | empty | `l += b`; `-inf` bans |
//! | repetition | `repetition_penalty` | 1.0 | seen token: `l > 0 ? l / r : l * r` (HF) |
//! | frequency, presence | `frequency_penalty`, `presence_penalty` | 0.0 | `l -= c * f + (c > 0) * p` (OpenAI) |
//! | grammar mask | [`TokenMask`] | no mask | disallowed tokens become `-inf` |
//! | temperature | `temperature` | 1.0 | `l / T`; `T = 0` is greedy, ties to the lowest id |
//! | top-k | `top_k` | unset | exactly k tokens, ties at the k-th value to the lower id |
//! | top-p | `top_p` | 1.0 | smallest prefix reaching p; the crossing token is kept |
//! | min-p | `min_p` | 0.0 | keep `p_i >= min_p * p_max`; equality kept |
//! | draw | `seed` | — | inverse CDF, uniform keyed by `(seed, step)` |
//!
//! The candidates' order, everywhere, is the draw order: adjusted logit descending (after
//! bias and penalties, before temperature; `-0.0` equals `0.0`), ties to the lower token
//! id. It never depends on weights, so tokens whose weights underflow to 0 keep it. Each tail cut keeps at least `min_tokens_to_keep` tokens.
//!
//! A different order (llama.cpp applies temperature after the cuts) is an explicit
//! [`Chain`]. Both run on one engine, and a [`Sampler`] is the chain of the documented
//! order: a chain is planned when it is built, so that its first cut runs on the same
//! kernels over the row in place, and every later stage on the compact set that cut
//! leaves (see [`Chain`]). [`LogitsProcessor`] is the full-row form of a [`Stage`]; a
//! chain takes either at any position.
//!
//! # Semantics of edge cases
//!
//! - `-inf` logits are legal and mean "banned": such a token is never drawn.
//! - NaN or `+inf` logits are refused with [`Error::NanLogit`] / [`Error::InfiniteLogit`].
//! - A row where every token is banned gives [`Error::NoCandidates`], never a token.
//! - Rows longer than the vocabulary are allowed; the extra (padding) entries are never
//!   read and never returned.
//! - Greedy takes the first maximal logit; it uses no random number.
//!
//! # Reproducibility
//!
//! Draw `n` of a sequence uses one uniform computed from ChaCha20 keyed by the seed, at
//! block `n` ([`DrawRng`]); the `u64 -> [0, 1)` conversion is this crate's own. The
//! same seed, parameters, history and logits give the same token on every platform,
//! build profile, thread count and batch composition. A change of any sampled token for
//! fixed inputs is a breaking change, and golden tests pin them.
//!
//! # The executable specification
//!
//! [`reference`](mod@reference) implements the whole pipeline plainly (sort everything,
//! `f64` throughout). The fast [`Sampler`] is property-tested against it.
//!
//! # Performance
//!
//! A [`Sampler`] owns its scratch buffers: once warm it allocates nothing per token. It
//! never sorts the vocabulary: top-k and greedy are one pass with a running threshold,
//! min-p works in logit space, top-p without top-k selects its candidates in one pass and
//! the row's total mass in a second, and a flat row's top-p and the plain draw find their
//! boundary with a histogram and sort only the tokens at it. Logit bias and penalties
//! patch the few tokens they touch instead of copying the row, a grammar mask is read
//! rather than written into a copy, and `f16`/`bf16` rows are converted inside the
//! passes. At Qwen3's 151,936 logits, greedy costs about 1.1 times one read of the row
//! and Qwen3's default chain about 1.9 times. Figures: `BENCHMARKS.md`.
//!
//! # More
//!
//! - [`Chain`]: any order of [`Stage`]s ending in one draw, with every sampler the major
//!   engines ship ([`TypicalP`], [`Xtc`], [`Dry`], [`Mirostat`], [`TopNSigma`], ...) and
//!   Hugging Face's processors under their names ([`SequenceBias`], [`SuppressTokens`],
//!   [`ForcedEos`], [`ExponentialDecayLengthPenalty`], [`TopH`], [`Watermark`], ...);
//!   [`ClassifierFreeGuidance`] combines a conditional and an unconditional row.
//! - [`BatchSampler`]: many sequences at once, each with its own state (feature `rayon`
//!   for all cores); rows are [`Sampler`]s or [`Chain`]s ([`SequenceSampler`]).
//! - [`grammar`]: the grammar mask (regex, JSON schema, Lark with feature `llguidance`).
//! - [`speculative`]: exact verification of a draft model's tokens (speculative
//!   decoding) through any sampler or chain, seeded and reproducible.
//! - [`stop`]: stop tokens, stop strings across token boundaries, length limits.
//! - `testing` (feature `testing`): proptest strategies and checks against the reference.
//! - `GenerationConfig` (feature `serde`): Hugging Face's `generation_config.json`.
//! - `request` (feature `serde`): the OpenAI, vLLM and llama.cpp requests users send,
//!   read into [`SamplingParams`], stop conditions and the rest, with an error naming
//!   each bad field; `Serialize`/`Deserialize` for the data types.
//!
//! # Safety
//!
//! The only `unsafe` code is in the module that runs the exp passes, the
//! running-threshold scan and the marking of top-p's candidates with AVX-512 or AVX2 when
//! the CPU has them: calls to `#[target_feature]` copies of the portable code (two of them
//! written with the comparison's mask instructions), after run-time detection. A test
//! checks that every copy gives the same results as the portable code: bit for bit, and
//! for the row's total mass, whose wide copies fuse multiply-adds, within the error bound
//! that decides whether the fast mass may take a decision, so that no token depends on
//! the CPU.

#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod decimal;
mod element;
mod engine;
mod error;
#[cfg(feature = "serde")]
mod generation_config;
pub mod grammar;
mod kernels;
mod mask;
mod params;
pub mod reference;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod request;
mod sequence;
#[cfg(feature = "serde")]
mod serde_impls;
pub mod speculative;
mod stages;
#[cfg(test)]
mod test_rows;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

// The modules' short paths inside the crate (`crate::chain`, `crate::simd`, ...): the
// folders above say which floor a module belongs to.
use engine::{candidates, chain, sampler, scratch, sequence_sampler};
use kernels::{adjust, exp, greedy, histogram, mass, select, simd, stats};
use sequence::{batch, draw, history, logprobs, rng, sample};
use stages::{
    allowed_tokens, bad_words, bias, classifier_free_guidance, dry, dynamic_temperature,
    encoder_no_repeat_ngram, encoder_repetition_penalty, epsilon_cutoff, eta_cutoff,
    exponential_decay_length_penalty, forced_bos, forced_eos, min_new_tokens, min_p, mirostat,
    no_repeat_ngram, normalized_repetition_penalty, penalty, processor, sequence_bias,
    suppress_tokens, suppress_tokens_at_begin, temperature, token_list, top_h, top_k, top_n_sigma,
    top_p, typical_p, watermark, xtc,
};

pub use allowed_tokens::AllowedTokens;
pub use bad_words::BadWords;
pub use batch::BatchSampler;
pub use bias::LogitBias;
pub use candidates::Candidates;
pub use chain::{Chain, ChainBuilder, Stage, StageContext};
pub use classifier_free_guidance::ClassifierFreeGuidance;
pub use decimal::as_decimal;
pub use dry::Dry;
pub use dynamic_temperature::DynamicTemperature;
pub use element::Logit;
pub use encoder_no_repeat_ngram::EncoderNoRepeatNGram;
pub use encoder_repetition_penalty::EncoderRepetitionPenalty;
pub use epsilon_cutoff::EpsilonCutoff;
pub use error::Error;
pub use eta_cutoff::EtaCutoff;
pub use exponential_decay_length_penalty::ExponentialDecayLengthPenalty;
pub use forced_bos::ForcedBos;
pub use forced_eos::ForcedEos;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use generation_config::GenerationConfig;
pub use half;
pub use history::History;
pub use logprobs::LogprobKind;
pub use mask::TokenMask;
pub use min_new_tokens::MinNewTokens;
pub use min_p::MinP;
pub use mirostat::{Mirostat, MirostatV2};
pub use no_repeat_ngram::NoRepeatNGram;
pub use normalized_repetition_penalty::NormalizedRepetitionPenalty;
pub use params::{SamplingParams, SamplingParamsBuilder, MAX_LOGPROBS};
pub use penalty::Penalties;
pub use processor::LogitsProcessor;
pub use rng::{u64_to_unit, DrawRng};
pub use sample::{Alternative, Sample};
pub use sampler::Sampler;
pub use sequence_bias::SequenceBias;
pub use sequence_sampler::SequenceSampler;
pub use simd::{simd_level, SimdLevel};
pub use speculative::{DraftDistribution, Speculation, Verified, Verifier};
pub use suppress_tokens::SuppressTokens;
pub use suppress_tokens_at_begin::SuppressTokensAtBegin;
pub use temperature::Temperature;
pub use top_h::TopH;
pub use top_k::TopK;
pub use top_n_sigma::TopNSigma;
pub use top_p::TopP;
pub use typical_p::TypicalP;
pub use watermark::{Watermark, WatermarkDetection, WatermarkDetector};
pub use xtc::Xtc;

/// A token id: an index into the vocabulary and the logits row.
pub type TokenId = u32;

/// The largest vocabulary any size argument may name: `u32::MAX` tokens, the range of
/// [`TokenId`].
///
/// Every vocabulary size a caller passes ([`Sampler::new`], [`Chain::builder`],
/// [`Mirostat::new`], [`grammar::Vocab::from_tokenizer_json`]) is checked against it
/// before anything is allocated: a larger one is [`Error::InvalidParameter`] naming
/// `vocab_size` (a [`grammar::GrammarError::InvalidVocab`] for the vocabulary loader).
/// A size within the limit whose buffers the allocator cannot provide is
/// [`Error::OutOfMemory`], never an abort.
pub const MAX_VOCAB_SIZE: usize = TokenId::MAX as usize;

/// Checks a vocabulary size against [`MAX_VOCAB_SIZE`] (and refuses 0).
pub(crate) fn check_vocab_size(vocab_size: usize) -> Result<(), Error> {
    if vocab_size == 0 {
        return Err(Error::EmptyVocabulary);
    }
    if vocab_size > MAX_VOCAB_SIZE {
        return Err(Error::InvalidParameter {
            name: "vocab_size",
            value: vocab_size as f64,
            expected: "at most MAX_VOCAB_SIZE (u32::MAX) tokens",
        });
    }
    Ok(())
}
pub mod stop;
pub use stop::{FinishReason, OwnedStopChecker, StopChecker, StopConditions, StopError};
