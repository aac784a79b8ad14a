//! Turn a model's scores into the next token.
//!
//! A language model ends each forward pass with one score (logit) per vocabulary entry:
//! 151,936 of them for Qwen3. `logits` is everything after that: the adjustments, the
//! temperature, the softmax, the tail cuts and the draw, as a model-free library with
//! validated parameters, typed errors, no allocation per step and reproducible draws.
//!
//! # The engine loop
//!
//! What a serving engine runs per sequence: the prompt's ids as history, one forward
//! pass per token giving a `bf16` row that may be wider than the vocabulary (padding),
//! [`SamplingParams`] from the model's `generation_config.json` and the user's request
//! (feature `serde`), a grammar ([`grammar`]), the draw, the logprobs to report and the
//! stop conditions ([`stop`]). The model here is a stand-in; everything else is this
//! crate's API. The example runs as a test with and without the features it uses.
//!
//! ```
//! use std::sync::Arc;
//!
//! use logits::grammar::{Constraint, GrammarMask, TokenKind, Vocab};
//! use logits::half::bf16;
//! use logits::{FinishReason, OwnedStopChecker, Sampler, StopConditions, TokenId};
//!
//! // A toy model: 1,000 tokens in rows of 1,024 logits, the last 24 slots padding (Qwen3:
//! // 151,669 tokens in rows of 151,936). Ids 0..=255 are the single bytes, 999 is the
//! // end-of-sequence token.
//! const VOCAB: usize = 1_000;
//! const ROW: usize = 1_024;
//! const EOS: TokenId = 999;
//!
//! /// The forward pass: one bf16 row of logits for the tokens so far. Padding slots hold
//! /// NaN here; the sampler never reads them.
//! fn forward(tokens: &[TokenId], row: &mut [bf16]) {
//!     let mut x = tokens.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &t| {
//!         (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3)
//!     });
//!     for (i, logit) in row.iter_mut().enumerate() {
//!         x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
//!         *logit = if i < VOCAB {
//!             bf16::from_f32((x >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0)
//!         } else {
//!             bf16::NAN
//!         };
//!     }
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // The tokenizer's pieces, for the grammar and the stop strings.
//!     let mut pieces: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
//!     pieces.extend((256..EOS).map(|id| format!("tok{id}").into_bytes()));
//!     pieces.push(b"<eos>".to_vec());
//!     let mut kinds = vec![TokenKind::Text; VOCAB - 1];
//!     kinds.push(TokenKind::Special);
//!     pieces.resize(ROW, Vec::new());
//!     kinds.resize(ROW, TokenKind::Padding);
//!     let vocab = Arc::new(Vocab::new(pieces, kinds, vec![EOS])?);
//!
//!     // 1. Parameters: the model's generation_config.json gives the defaults, the
//!     //    request (OpenAI's fields) overrides them, as vLLM does. Without `serde`, the
//!     //    builder says the same.
//!     #[cfg(feature = "serde")]
//!     let (params, stop) = {
//!         use logits::{request::openai, GenerationConfig};
//!         let config = GenerationConfig::from_json(
//!             r#"{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
//!                 "eos_token_id": [999]}"#,
//!         )?;
//!         let request: serde_json::Value = serde_json::from_str(
//!             r#"{"model": "toy", "messages": [{"role": "user", "content": "Yes or no?"}],
//!                 "seed": 42, "max_tokens": 64, "stop": ["\n\n"],
//!                 "logprobs": true, "top_logprobs": 2}"#,
//!         )?;
//!         let request = openai::parse_with_defaults(&request, &config.to_params()?)?;
//!         let stop = StopConditions::builder()
//!             .stop_tokens(config.eos_token_id.iter().copied())
//!             .stop_strings(request.stop.stop_strings().iter().cloned())
//!             .max_tokens(request.stop.max_tokens().unwrap_or(256))
//!             .build()?;
//!         (request.params, stop)
//!     };
//!     #[cfg(not(feature = "serde"))]
//!     let (params, stop) = (
//!         logits::SamplingParams::builder()
//!             .temperature(0.6)
//!             .top_k(20)
//!             .top_p(0.95)
//!             .seed(42)
//!             .logprobs(2)
//!             .build()?,
//!         StopConditions::builder()
//!             .stop_tokens([EOS])
//!             .stop_strings(["\n\n"])
//!             .max_tokens(64)
//!             .build()?,
//!     );
//!     assert_eq!((params.temperature(), params.top_k(), params.seed()), (0.6, Some(20), 42));
//!
//!     // 2. A grammar the output must follow: a JSON schema through llguidance (feature
//!     //    `llguidance`), or one of two literal answers with the built-in `Choice`.
//!     #[cfg(feature = "llguidance")]
//!     let constraint: Box<dyn Constraint> = Box::new(
//!         logits::grammar::LlgEngine::new(vocab.clone())?.json_schema(
//!             r#"{"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}},
//!                 "required": ["answer"], "additionalProperties": false}"#,
//!         )?,
//!     );
//!     #[cfg(not(feature = "llguidance"))]
//!     let constraint: Box<dyn Constraint> = Box::new(logits::grammar::Choice::new(
//!         vocab.clone(),
//!         &[r#"{"answer": "yes"}"#, r#"{"answer": "no"}"#],
//!     )?);
//!     let mut grammar = GrammarMask::new(constraint, vocab.clone());
//!
//!     // 3. One sampler per sequence, for the real vocabulary (rows may be wider), with
//!     //    the prompt as history for the penalties; one stop checker per sequence.
//!     let prompt: Vec<TokenId> = "Yes or no?".bytes().map(TokenId::from).collect();
//!     let mut sampler = Sampler::new(params, VOCAB)?;
//!     sampler.push_prompt(&prompt)?;
//!     let mut checker = OwnedStopChecker::new(stop);
//!
//!     // 4. The loop: forward pass, masked draw, stop conditions, logprobs.
//!     let mut tokens = prompt.clone();
//!     let mut row = vec![bf16::ZERO; ROW];
//!     let mut text = String::new();
//!     let finish = loop {
//!         forward(&tokens, &mut row);
//!         let (sample, _status) = grammar.sample(&mut sampler, &row)?; // mask, draw, commit
//!         tokens.push(sample.token);
//!
//!         // The drawn token's logprob and its two most likely alternatives, under the
//!         // model's raw distribution (what OpenAI, vLLM and llama.cpp report).
//!         let raw = sample.raw_logprob.expect("logprobs were requested");
//!         assert!(raw <= 0.0 && sample.alternatives().len() == 2);
//!         #[cfg(feature = "serde")]
//!         {
//!             use logits::{request::TokenLogprob, LogprobKind};
//!             let record = TokenLogprob::from_sample(&sample, LogprobKind::Raw, |id| {
//!                 vocab.bytes(id).to_vec()
//!             })
//!             .expect("logprobs were requested");
//!             let json = serde_json::to_string(&record)?; // one entry of `logprobs.content`
//!             assert!(json.contains(r#""top_logprobs":[{"token":"#));
//!         }
//!
//!         let step = checker.push(sample.token, vocab.bytes(sample.token));
//!         text.push_str(step.text); // stream this; text that may start a stop string waits
//!         if let Some(reason) = step.finish {
//!             break reason;
//!         }
//!     };
//!
//!     assert_eq!(finish, FinishReason::StopToken(EOS));
//!     assert_eq!(finish.openai_name(), "stop");
//!     assert!(text.contains(r#""yes""#) || text.contains(r#""no""#), "{text}");
//!     Ok(())
//! }
//! ```
//!
//! In a batch, [`BatchSampler`] holds one sampler per sequence and samples the rows of
//! one forward pass together; everything else stays per sequence.
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
//! The draw is exact: the token is the first survivor in draw order whose exact running
//! sum of the `f64` weights exceeds `u` times their exact total. For every `u` in
//! `[0, 1)` the [`Sampler`], every [`Chain`] and [`reference`](mod@reference) return the
//! same token; the draw does not depend on summation order. The fast paths decide from
//! `f64` sums only where a rigorous bound on their rounding proves the exact decision,
//! and otherwise redo it with exact (fixed-point) sums.
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
//! # Where things go
//!
//! The source is in layers, each using only itself and the layers before it (a test,
//! `tests/layering.rs`, reads the source and fails on an import that reaches up):
//!
//! 1. the base: `element` (the row types), `mask`, `params`, `error`, `decimal`;
//! 2. `src/kernels`: passes over a row and the arithmetic on their results (loading and
//!    checks, selection, the histogram, the mass and exps, the statistics, the floor
//!    bands, the top-p prefix, the bias and penalty arithmetic, exact sums, SIMD
//!    dispatch);
//! 3. `src/sequence`: a sequence's state (history, the draw's random numbers, the exact
//!    draw, samples and logprobs); only the batch, which holds samplers, sits above the
//!    engine;
//! 4. `src/engine`: the [`Stage`] and [`LogitsProcessor`] interfaces, the
//!    [`Candidates`], the planner, and the [`Sampler`] and [`Chain`] that run on it;
//! 5. `src/stages`: one file per sampler.
//!
//! A new sampler is a new file in `src/stages/`: a [`Stage`] on the [`Candidates`] (and
//! a [`LogitsProcessor`] if it only adjusts the row), which may call any kernel (the
//! statistics for a whole-row quantity, the top-p prefix, the penalty arithmetic, ...).
//! The engine never names a stage: it plans the built-in ones from what their
//! `lowering` says, and arithmetic the planner shares with a stage goes in a kernel
//! file named for what it computes.
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
//! the CPU. The whole-row probabilities of `probabilities` fuse their multiply-adds on
//! every CPU that has FMA (the same values on all of them); an x86-64 CPU without FMA
//! computes them unfused, within the same bound, and may differ in the last bits.

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
use engine::{candidates, chain, processor, sampler, scratch, sequence_sampler};
use kernels::{
    adjust, exp, flat, floor_band, greedy, histogram, mass, nucleus, order, penalize, scan, select,
    simd, stats,
};
use sequence::{batch, draw, history, logprobs, rng, sample};
use stages::{
    allowed_tokens, bad_words, bias, classifier_free_guidance, dry, dynamic_temperature,
    encoder_no_repeat_ngram, encoder_repetition_penalty, epsilon_cutoff, eta_cutoff,
    exponential_decay_length_penalty, forced_bos, forced_eos, min_new_tokens, min_p, mirostat,
    no_repeat_ngram, normalized_repetition_penalty, penalty, sequence_bias, suppress_tokens,
    suppress_tokens_at_begin, temperature, token_list, top_h, top_k, top_n_sigma, top_p, typical_p,
    watermark, xtc,
};

pub use allowed_tokens::AllowedTokens;
pub use bad_words::BadWords;
pub use batch::{BatchSampler, GrammarRow, RowInput};
pub use bias::LogitBias;
pub use candidates::Candidates;
pub use chain::{Chain, ChainBuilder, Stage, StageClone, StageContext};
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
pub use processor::{LogitsProcessor, ProcessorClone};
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
