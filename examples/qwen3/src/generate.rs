//! The generation loop: prompt through the model, then sample, stream and stop
//! token by token. Sampling and stopping are the `logits` crate's.

use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use logits::stop::{FinishReason, StopChecker, StopConditions};
use logits::{
    DraftDistribution, Sample, Sampler, SamplingParams, Speculation, TokenId, TokenMask, Verifier,
};

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
    /// Speculative decoding's counts, when a draft model was used.
    pub draft: Option<DraftStats>,
}

/// How a draft model fared in speculative decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DraftStats {
    /// Verifications (target forward passes over draft tokens).
    pub steps: usize,
    /// Draft tokens proposed.
    pub proposed: usize,
    /// Draft tokens the target accepted.
    pub accepted: usize,
}

impl DraftStats {
    /// Accepted over proposed, in `[0, 1]` (0 before any proposal).
    pub fn rate(&self) -> f64 {
        self.accepted as f64 / self.proposed.max(1) as f64
    }

    /// Accepted draft tokens per verification.
    pub fn mean_accepted(&self) -> f64 {
        self.accepted as f64 / self.steps.max(1) as f64
    }
}

/// The draft side of speculative decoding.
pub struct Draft<'d> {
    /// The draft model (same vocabulary as the target).
    pub model: &'d mut Model,
    /// Tokens proposed per verification, at least 1.
    pub k: usize,
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
        draft: None,
    })
}

/// The stop tokens banned at generated index `n` (below `min_tokens`).
fn banned_at(stop: &StopConditions, n: usize) -> &[TokenId] {
    if n < stop.min_tokens() {
        stop.stop_tokens()
    } else {
        &[]
    }
}

fn ban(row: &mut [f32], ids: &[TokenId]) {
    for &id in ids {
        if let Some(logit) = row.get_mut(id as usize) {
            *logit = f32::NEG_INFINITY;
        }
    }
}

/// Like [`generate`] (no token filter), with speculative decoding: `draft`
/// proposes up to `draft.k` tokens from its own rows through the same sampling
/// chain (its sampler has the same parameters), the target (a model loaded for
/// [`Model::forward_rows`]) scores them in one forward pass, and
/// [`logits::Verifier`] keeps the prefix the target accepts and the token after it,
/// so the tokens follow the target's distribution (at temperature 0, exactly its
/// greedy tokens).
///
/// candle's KV cache cannot be truncated: on a rejection the target returns to a
/// clone taken before its forward pass and runs the accepted tokens again with
/// the next verification; the draft returns to the clone taken after the last
/// accepted token.
pub fn generate_speculative(
    model: &mut Model,
    draft: Draft<'_>,
    tokenizer: &Tokenizer,
    prompt: &[TokenId],
    params: SamplingParams,
    stop: &StopConditions,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Generation> {
    if draft.k == 0 {
        return Err(anyhow!(
            "the draft must propose at least one token per step"
        ));
    }
    if !model.has_rows() {
        return Err(anyhow!(
            "the target model must be loaded for multi-row forward passes"
        ));
    }
    if draft.model.logits_len() != model.logits_len() {
        return Err(anyhow!(
            "the draft has {} logits per step but the target has {}",
            draft.model.logits_len(),
            model.logits_len()
        ));
    }
    if prompt.is_empty() {
        return Err(anyhow!("the prompt is empty"));
    }
    let context = model.context_len().min(draft.model.context_len());
    let room = context.saturating_sub(prompt.len());
    if room == 0 {
        return Err(anyhow!(
            "the prompt has {} tokens, which fills the model's context of {context}",
            prompt.len()
        ));
    }
    let stop = match stop.max_tokens() {
        Some(max) if max <= room => stop.clone(),
        _ => limit_max_tokens(stop, room)?,
    };
    let max_tokens = stop.max_tokens().unwrap_or(room);
    let think_start = tokenizer.token_id("<think>");
    let think_end = tokenizer.token_id("</think>");
    let vocab = tokenizer.vocab_size();
    let row_len = model.logits_len();

    let mut sampler = Sampler::new(params.clone(), vocab).context("sampler")?;
    sampler.push_prompt(prompt).context("sampler")?;
    // The draft draws with its own seed: its uniforms must not be the ones the
    // verifier uses for the residual draws.
    let draft_params = params
        .to_builder()
        .seed(params.seed() ^ 0x9E37_79B9_7F4A_7C15)
        .build()
        .context("draft sampler")?;
    let mut dsampler = Sampler::new(draft_params, vocab).context("draft sampler")?;
    dsampler.push_prompt(prompt).context("draft sampler")?;
    let mut checker = StopChecker::new(&stop);
    let mut verifier = Verifier::new();
    let mut stats = DraftStats::default();

    model.reset();
    draft.model.reset();
    let start = Instant::now();
    // Tokens each model has yet to run: the prompt, then the last emitted tokens.
    let mut t_pending: Vec<TokenId> = prompt.to_vec();
    let mut d_pending: Vec<TokenId> = prompt.to_vec();
    let mut prompt_secs = None;

    let start_gen = Instant::now();
    let mut part = Part::Answer;
    let mut tokens: Vec<TokenId> = Vec::new();
    let mut thinking = String::new();
    let mut answer = String::new();
    let (mut xs, mut pairs, mut ends, mut dist) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut snaps: Vec<Model> = Vec::new();
    let mut emitted: Vec<Sample> = Vec::new();
    let finish = 'outer: loop {
        let n = tokens.len();
        let k = draft.k.min(max_tokens.saturating_sub(n + 1));
        emitted.clear();
        if k == 0 {
            // One token left: a plain step.
            let mut row = model.forward(&t_pending)?;
            prompt_secs.get_or_insert(start.elapsed().as_secs_f64());
            ban(&mut row, banned_at(&stop, n));
            let sample = sampler.sample(&row).context("sampling")?;
            dsampler.accept(sample.token).context("draft sampler")?;
            t_pending.clear();
            t_pending.push(sample.token);
            d_pending.push(sample.token);
            emitted.push(sample);
        } else {
            // The draft proposes k tokens, keeping the distributions it drew them from.
            xs.clear();
            pairs.clear();
            ends.clear();
            snaps.clear();
            for j in 0..k {
                let mut row = if j == 0 {
                    draft.model.forward(&d_pending)?
                } else {
                    draft.model.forward(&xs[j - 1..j])?
                };
                snaps.push(draft.model.clone());
                ban(&mut row, banned_at(&stop, n + j));
                dsampler
                    .distribution(&row, None, &mut dist)
                    .context("draft sampling")?;
                pairs.extend_from_slice(&dist);
                ends.push(pairs.len());
                xs.push(dsampler.sample(&row).context("draft sampling")?.token);
            }
            // The target scores the pending tokens and the draft in one pass.
            let before = model.clone();
            let t_len = t_pending.len();
            t_pending.extend_from_slice(&xs);
            let mut rows = model.forward_rows(&t_pending, k + 1)?;
            prompt_secs.get_or_insert(start.elapsed().as_secs_f64());
            for (i, row) in rows.chunks_exact_mut(row_len).enumerate() {
                ban(row, banned_at(&stop, n + i));
            }
            let out = verifier
                .verify(
                    &mut sampler,
                    &Speculation {
                        draft: &xs,
                        q: DraftDistribution::Sparse {
                            pairs: &pairs,
                            ends: &ends,
                        },
                        target: rows.as_slice(),
                        row_len,
                    },
                )
                .context("speculative verification")?;
            let m = out.accepted;
            let next = out
                .next
                .ok_or_else(|| anyhow!("the verification emitted no next token"))?;
            stats.steps += 1;
            stats.proposed += k;
            stats.accepted += m;
            // Accepted tokens carry their logprob under the target; the next token
            // is the verifier's own sample.
            for (&t, &lp) in verifier.tokens()[..m].iter().zip(verifier.logprobs()) {
                let mut s = next;
                s.token = t;
                s.logprob = lp;
                s.raw_logprob = None;
                emitted.push(s);
            }
            emitted.push(next);
            dsampler.rollback(k - m);
            dsampler.accept(next.token).context("draft sampler")?;
            if m == k {
                t_pending.clear();
                d_pending.clear();
                d_pending.push(xs[k - 1]);
            } else {
                // Back to the states before the first rejected token.
                *model = before;
                t_pending.truncate(t_len + m);
                *draft.model = snaps.swap_remove(m);
                d_pending.clear();
            }
            t_pending.push(next.token);
            d_pending.push(next.token);
        }
        for sample in &emitted {
            let token = sample.token;
            tokens.push(token);
            on_event(Event::Token { sample });
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
                break 'outer reason;
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
        }
    };
    Ok(Generation {
        tokens,
        thinking,
        answer,
        finish,
        prompt_tokens: prompt.len(),
        prompt_secs: prompt_secs.unwrap_or_default(),
        generation_secs: start_gen.elapsed().as_secs_f64(),
        draft: Some(stats),
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
