//! The stages: one file per sampler, each a [`Stage`](crate::Stage) (and, for those that
//! only adjust the row, a [`LogitsProcessor`](crate::LogitsProcessor)), with its formula,
//! parameters validated in `new()` and its edge cases documented.
//!
//! The engine lowers the stages it knows onto the kernels when a chain is built
//! (`Stage::lowering`): `bias`, `penalty` (patches over the row), `temperature`, `top_k`,
//! `top_p` and `min_p` (the first cut group). Every other stage runs through its `apply`
//! on the candidate set. A new sampler goes here, in a file of its own.

pub(crate) mod allowed_tokens;
pub(crate) mod bad_words;
pub(crate) mod bias;
pub(crate) mod classifier_free_guidance;
pub(crate) mod dry;
pub(crate) mod dynamic_temperature;
pub(crate) mod encoder_no_repeat_ngram;
pub(crate) mod encoder_repetition_penalty;
pub(crate) mod epsilon_cutoff;
pub(crate) mod eta_cutoff;
pub(crate) mod exponential_decay_length_penalty;
pub(crate) mod forced_bos;
pub(crate) mod forced_eos;
pub(crate) mod min_new_tokens;
pub(crate) mod min_p;
pub(crate) mod mirostat;
pub(crate) mod no_repeat_ngram;
pub(crate) mod normalized_repetition_penalty;
pub(crate) mod penalty;
pub(crate) mod sequence_bias;
pub(crate) mod suppress_tokens;
pub(crate) mod suppress_tokens_at_begin;
pub(crate) mod temperature;
pub(crate) mod token_list;
pub(crate) mod top_h;
pub(crate) mod top_k;
pub(crate) mod top_n_sigma;
pub(crate) mod top_p;
pub(crate) mod typical_p;
pub(crate) mod watermark;
pub(crate) mod xtc;
