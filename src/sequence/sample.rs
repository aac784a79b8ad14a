//! [`Sample`]: the drawn token with its logprobs.

use crate::params::MAX_LOGPROBS;
use crate::TokenId;

/// One alternative token reported with a [`Sample`].
///
/// With the `serde` feature it is written as `{"token", "raw_logprob", "logprob"}`, a
/// `-inf` logprob as the string `"-inf"`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Alternative {
    /// The token id.
    pub token: TokenId,
    /// Its logprob under the model's raw distribution (log-softmax of the unprocessed row).
    #[cfg_attr(feature = "serde", serde(with = "crate::serde_impls::ext_f32"))]
    pub raw_logprob: f32,
    /// Its logprob under the final distribution the token was drawn from; `-inf` when the
    /// pipeline removed it.
    #[cfg_attr(feature = "serde", serde(with = "crate::serde_impls::ext_f32"))]
    pub logprob: f32,
}

const EMPTY: Alternative = Alternative {
    token: 0,
    raw_logprob: f32::NEG_INFINITY,
    logprob: f32::NEG_INFINITY,
};

/// The result of one sampling step.
///
/// Two logprobs describe the token:
/// - [`logprob`](Self::logprob): the natural log of its probability in the *final*
///   distribution, the one it was drawn from: after the adjustments, temperature, the
///   tail cuts and renormalisation. Greedy decoding gives `0.0`.
/// - [`raw_logprob`](Self::raw_logprob): its log-probability under the *model's raw*
///   distribution, `log_softmax(row)` of the unprocessed row (no bias, penalty, mask or
///   temperature). Computed only when [`SamplingParams::logprobs`](crate::SamplingParams::logprobs)
///   is set, since it costs one extra pass over the row.
///
/// With logprobs set to `n`, [`alternatives`](Self::alternatives) lists the `n` tokens
/// most likely under the raw distribution (ties to the lower id), each with both logprobs.
/// `Sample` is `Copy` and holds the alternatives inline: producing one allocates nothing.
///
/// With the `serde` feature it is written as `{"token", "logprob", "raw_logprob",
/// "alternatives": [...]}` (a `-inf` logprob as `"-inf"`); OpenAI's logprobs record is
/// `logits::request::TokenLogprob`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// The drawn token.
    pub token: TokenId,
    /// Log-probability of `token` in the final distribution.
    pub logprob: f32,
    /// Log-probability of `token` under the raw distribution, if logprobs were requested.
    pub raw_logprob: Option<f32>,
    alternatives: [Alternative; MAX_LOGPROBS],
    n_alternatives: u8,
}

impl Sample {
    pub(crate) fn new(token: TokenId, logprob: f32) -> Self {
        Sample {
            token,
            logprob,
            raw_logprob: None,
            alternatives: [EMPTY; MAX_LOGPROBS],
            n_alternatives: 0,
        }
    }

    pub(crate) fn push_alternative(&mut self, alt: Alternative) {
        let n = self.n_alternatives as usize;
        if n < MAX_LOGPROBS {
            self.alternatives[n] = alt;
            self.n_alternatives += 1;
        }
    }

    /// The most likely tokens under the raw distribution, most likely first.
    pub fn alternatives(&self) -> &[Alternative] {
        &self.alternatives[..self.n_alternatives as usize]
    }

    /// The probability of `token` in the final distribution (`exp(logprob)`).
    pub fn probability(&self) -> f32 {
        self.logprob.exp()
    }
}
