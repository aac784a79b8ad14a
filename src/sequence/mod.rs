//! The sequence state: the history, the draw's random numbers, the draw itself, what a
//! step returns (the sample, its logprobs) and batches of sequences.

pub(crate) mod batch;
pub(crate) mod draw;
pub(crate) mod history;
pub(crate) mod logprobs;
pub(crate) mod rng;
pub(crate) mod sample;
