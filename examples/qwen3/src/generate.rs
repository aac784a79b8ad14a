//! The generation loop: prompt through the model, then sample, stream and stop
//! token by token. Sampling and stopping are the `logits` crate's.

use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use logits::stop::{FinishReason, StopChecker, StopConditions};
use logits::{Sample, Sampler, SamplingParams, TokenId, TokenMask};

use crate::model::Model;
use crate::tokenizer::Tokenizer;

/// Which part of the reply a piece of text belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Between `<think>` and `</think>`.
    Thinking,
    /// The answer proper.
    Answer,
}

/// What the loop reports while it runs.
#[derive(Debug)]
pub enum Event<'e> {
    /// Text that may be shown now (UTF-8-complete, never part of a stop string).
    Text {
        /// Reasoning or answer.
        part: Part,
        /// The text.
        text: &'e str,
    },
    /// A token was sampled.
    Token {
        /// The token and its logprobs.
        sample: &'e Sample,
    },
    /// The reasoning part starts (`<think>` was generated).
    ThinkingStart,
    /// The reasoning part ends (`</think>` was generated).
    ThinkingEnd,
}

/// A constraint on the next token, such as a grammar.
pub trait TokenFilter {
    /// The tokens allowed next; the mask covers the sampler's vocabulary.
    fn allowed(&mut self) -> Result<&TokenMask>;
    /// Records the token that was sampled.
    fn commit(&mut self, token: TokenId) -> Result<()>;
}

/// The outcome of one generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Every generated token, the final stop token included.
    pub tokens: Vec<TokenId>,
    /// The reasoning text, if the model thought aloud.
    pub thinking: String,
    /// The answer text.
    pub answer: String,
    /// Why it ended.
    pub finish: FinishReason,
    /// Number of prompt tokens.
    pub prompt_tokens: usize,
    /// Seconds spent on the prompt.
    pub prompt_secs: f64,
    /// Seconds spent generating (forward passes and sampling).
    pub generation_secs: f64,
}

impl Generation {
    /// Prompt tokens per second.
    pub fn prompt_tokens_per_sec(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_secs.max(1e-9)
    }

    /// Generated tokens per second.
    pub fn tokens_per_sec(&self) -> f64 {
        self.tokens.len() as f64 / self.generation_secs.max(1e-9)
    }
}

/// Runs `prompt` through `model` (whose KV cache is reset first) and generates
/// until a stop condition fires, reporting each step to `on_event`.
///
/// `max_tokens` of the conditions is further limited by the model's context.
pub fn generate(
    model: &mut Model,
    tokenizer: &Tokenizer,
    prompt: &[TokenId],
    params: SamplingParams,
    stop: &StopConditions,
    mut filter: Option<&mut dyn TokenFilter>,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Generation> {
    if prompt.is_empty() {
        return Err(anyhow!("the prompt is empty"));
    }
    let room = model.context_len().saturating_sub(prompt.len());
    if room == 0 {
        return Err(anyhow!(
            "the prompt has {} tokens, which fills the model's context of {}",
            prompt.len(),
            model.context_len()
        ));
    }
    let stop = match stop.max_tokens() {
        Some(max) if max <= room => stop.clone(),
        _ => limit_max_tokens(stop, room)?,
    };
    let think_start = tokenizer.token_id("<think>");
    let think_end = tokenizer.token_id("</think>");

    let mut sampler = Sampler::new(params, tokenizer.vocab_size()).context("sampler")?;
    sampler.push_prompt(prompt).context("sampler")?;
    let mut checker = StopChecker::new(&stop);

    model.reset();
    let start = Instant::now();
    let mut row = model.forward(prompt)?;
    let prompt_secs = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let mut part = Part::Answer;
    let mut tokens = Vec::new();
    let mut thinking = String::new();
    let mut answer = String::new();
    let finish = loop {
        for &id in checker.banned_tokens() {
            if let Some(logit) = row.get_mut(id as usize) {
                *logit = f32::NEG_INFINITY;
            }
        }
        let sample = match filter.as_deref_mut() {
            Some(f) => {
                let mask = f.allowed()?;
                sampler.sample_masked(&row, mask)
            }
            None => sampler.sample(&row),
        }
        .context("sampling")?;
        let token = sample.token;
        if let Some(f) = filter.as_deref_mut() {
            f.commit(token)?;
        }
        tokens.push(token);
        on_event(Event::Token { sample: &sample });

        let is_think_tag = Some(token) == think_start || Some(token) == think_end;
        let step = checker.push(
            token,
            if is_think_tag {
                &[]
            } else {
                tokenizer.token_bytes(token)
            },
        );
        let finish = step.finish;
        emit(step.text, part, &mut thinking, &mut answer, on_event);
        if let Some(reason) = finish {
            break reason;
        }
        if is_think_tag {
            emit(checker.flush(), part, &mut thinking, &mut answer, on_event);
            if Some(token) == think_start {
                part = Part::Thinking;
                on_event(Event::ThinkingStart);
            } else {
                part = Part::Answer;
                on_event(Event::ThinkingEnd);
            }
        }
        row = model.forward(&[token])?;
    };
    Ok(Generation {
        tokens,
        thinking,
        answer,
        finish,
        prompt_tokens: prompt.len(),
        prompt_secs,
        generation_secs: start.elapsed().as_secs_f64(),
    })
}

fn emit(
    text: &str,
    part: Part,
    thinking: &mut String,
    answer: &mut String,
    on_event: &mut dyn FnMut(Event<'_>),
) {
    if text.is_empty() {
        return;
    }
    match part {
        Part::Thinking => thinking.push_str(text),
        Part::Answer => answer.push_str(text),
    }
    on_event(Event::Text { part, text });
}

fn limit_max_tokens(stop: &StopConditions, max: usize) -> Result<StopConditions> {
    StopConditions::builder()
        .stop_tokens(stop.stop_tokens().iter().copied())
        .stop_strings(stop.stop_strings().iter().cloned())
        .max_tokens(max)
        .min_tokens(stop.min_tokens().min(max))
        .build()
        .context("stop conditions")
}
