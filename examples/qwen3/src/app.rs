//! What the `qwen3` command does: load, then chat, sample K answers, or show
//! the next-token table.

use std::io::{BufRead, Write};

use anyhow::{bail, Context, Result};
use logits::stop::{FinishReason, StopConditions};
use logits::{Sampler, SamplingParams, TokenId};

use crate::cli::Args;
use crate::config::group_thousands;
use crate::defaults::with_overrides;
use crate::generate::{generate, generate_speculative, Draft, Event, Generation, TokenFilter};
use crate::grammar::{GrammarSpec, Grammars};
use crate::load::{load_draft, Loaded, ModelFiles};
use crate::model::Model;
use crate::template::{Message, Role};

/// Runs the command: output to `out`, interactive input (when there is no
/// `--prompt`) from `input`.
pub fn run(args: &Args, out: &mut dyn Write, input: &mut dyn BufRead) -> Result<()> {
    // Cheap checks first, so bad flags fail before a model loads.
    let spec = grammar_spec(args)?;
    if args.top_next == Some(0) || args.top_next.is_some_and(|n| n > logits::MAX_LOGPROBS) {
        bail!("--top-next takes 1 to {} tokens", logits::MAX_LOGPROBS);
    }
    if args.samples == Some(0) {
        bail!("--samples must be at least 1");
    }
    if args.draft_k == Some(0) {
        bail!("--draft-k must be at least 1");
    }
    let files = ModelFiles::from_args(args)?;
    let mut loaded = Loaded::load_with(files, args.draft_model_dir.is_some())?;
    let mut draft = match &args.draft_model_dir {
        Some(dir) => Some(load_draft(dir, &loaded)?),
        None => None,
    };
    let params = with_overrides(&loaded.defaults.params, args)?;
    let stop = StopConditions::builder()
        .stop_tokens(loaded.defaults.eos_token_ids.iter().copied())
        .stop_strings(args.stop.iter().cloned())
        .max_tokens(args.max_tokens)
        .min_tokens(args.min_tokens)
        .build()
        .context("invalid stop option")?;
    let grammars = match &spec {
        Some(_) => Some(Grammars::new(
            &loaded.tokenizer,
            &loaded.defaults.eos_token_ids,
        )?),
        None => None,
    };
    let grammar = |g: &Option<Grammars>| -> Result<Option<Box<dyn TokenFilter>>> {
        match (g, &spec) {
            (Some(g), Some(s)) => Ok(Some(Box::new(g.filter(s)?))),
            _ => Ok(None),
        }
    };
    // Compile the grammar once now so a bad one fails before any output.
    grammar(&grammars)?;

    print_header(&loaded, &params, out)?;
    if let Some(dir) = &args.draft_model_dir {
        writeln!(
            out,
            "speculative decoding: draft model from {}, {} tokens per verification",
            dir.display(),
            draft_k(args)
        )?;
    }

    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(Message::new(Role::System, system.clone()));
    }
    if let Some(n) = args.top_next {
        let prompt = user_prompt(args, &loaded, &mut messages)?;
        return top_next(&mut loaded, &prompt, n, &args.temperatures, out);
    }
    if let Some(k) = args.samples {
        let prompt = user_prompt(args, &loaded, &mut messages)?;
        for i in 0..k {
            let seeded = params
                .to_builder()
                .seed(params.seed().wrapping_add(i as u64))
                .build()?;
            let mut filter = grammar(&grammars)?;
            let g = run_generate(
                &mut loaded,
                draft.as_mut(),
                args,
                &prompt,
                seeded,
                &stop,
                as_filter(&mut filter),
                &mut |_| {},
            )?;
            writeln!(out, "{:>3}: {}", i + 1, one_line(&g.answer))?;
        }
        return Ok(());
    }
    if args.prompt.is_some() {
        let prompt = user_prompt(args, &loaded, &mut messages)?;
        let mut filter = grammar(&grammars)?;
        chat_turn(
            &mut loaded,
            draft.as_mut(),
            &prompt,
            &params,
            &stop,
            as_filter(&mut filter),
            args,
            out,
        )?;
        return Ok(());
    }
    // Interactive chat: one line per user turn, an empty line or end of input quits.
    let mut turn = 0u64;
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 || line.trim().is_empty() {
            writeln!(out)?;
            return Ok(());
        }
        messages.push(Message::new(
            Role::User,
            line.trim_end_matches(['\r', '\n']),
        ));
        let text = loaded.template.render(&messages, true, !args.no_think)?;
        let prompt = loaded.tokenizer.encode(&text)?;
        // Each turn draws from its own seed so a repeated question is not forced
        // to repeat its answer.
        let turn_params = params
            .to_builder()
            .seed(params.seed().wrapping_add(turn))
            .build()?;
        let mut filter = grammar(&grammars)?;
        let g = chat_turn(
            &mut loaded,
            draft.as_mut(),
            &prompt,
            &turn_params,
            &stop,
            as_filter(&mut filter),
            args,
            out,
        )?;
        messages.push(Message::new(Role::Assistant, g.answer));
        turn += 1;
    }
}

/// Tokens the draft proposes per verification: `--draft-k`, 4 by default.
fn draft_k(args: &Args) -> usize {
    args.draft_k.unwrap_or(4)
}

/// One generation: speculative with a draft model, plain otherwise.
#[allow(clippy::too_many_arguments)]
fn run_generate(
    loaded: &mut Loaded,
    draft: Option<&mut Model>,
    args: &Args,
    prompt: &[TokenId],
    params: SamplingParams,
    stop: &StopConditions,
    filter: Option<&mut dyn TokenFilter>,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Generation> {
    match draft {
        Some(model) => {
            if filter.is_some() {
                bail!("--draft-model-dir does not run with a grammar constraint");
            }
            generate_speculative(
                &mut loaded.model,
                Draft {
                    model,
                    k: draft_k(args),
                },
                &loaded.tokenizer,
                prompt,
                params,
                stop,
                on_event,
            )
        }
        None => generate(
            &mut loaded.model,
            &loaded.tokenizer,
            prompt,
            params,
            stop,
            filter,
            on_event,
        ),
    }
}

fn as_filter(filter: &mut Option<Box<dyn TokenFilter>>) -> Option<&mut dyn TokenFilter> {
    match filter {
        Some(f) => Some(f.as_mut()),
        None => None,
    }
}

fn grammar_spec(args: &Args) -> Result<Option<GrammarSpec>> {
    Ok(match (&args.json_schema, &args.regex, &args.grammar) {
        (Some(path), _, _) => Some(GrammarSpec::json_schema_file(path)?),
        (_, Some(re), _) => Some(GrammarSpec::Regex(re.clone())),
        (_, _, Some(path)) => Some(GrammarSpec::grammar_file(path)?),
        _ => None,
    })
}

/// Renders the conversation plus `--prompt` and encodes it.
fn user_prompt(args: &Args, loaded: &Loaded, messages: &mut Vec<Message>) -> Result<Vec<TokenId>> {
    let Some(prompt) = &args.prompt else {
        bail!("this mode needs --prompt");
    };
    messages.push(Message::new(Role::User, prompt.clone()));
    let text = loaded.template.render(messages, true, !args.no_think)?;
    loaded.tokenizer.encode(&text)
}

fn print_header(loaded: &Loaded, params: &SamplingParams, out: &mut dyn Write) -> Result<()> {
    match &loaded.config {
        Some(c) => writeln!(
            out,
            "Qwen3 with {} parameters ({} layers, hidden {}), from {}",
            group_thousands(c.parameter_count()),
            c.num_hidden_layers,
            c.hidden_size,
            loaded.files.config.display()
        )?,
        None => writeln!(out, "Qwen3 from a GGUF file")?,
    }
    writeln!(
        out,
        "vocabulary {} tokens, {} logits per step; sampling: {}",
        group_thousands(loaded.tokenizer.vocab_size() as u64),
        group_thousands(loaded.model.logits_len() as u64),
        describe(params)
    )?;
    Ok(())
}

/// A one-line description of the sampling parameters.
pub fn describe(p: &SamplingParams) -> String {
    if p.is_greedy() {
        return "greedy".into();
    }
    let mut s = format!("temperature {}", p.temperature());
    if let Some(k) = p.top_k() {
        s += &format!(", top-k {k}");
    }
    if p.top_p() < 1.0 {
        s += &format!(", top-p {}", p.top_p());
    }
    if p.min_p() > 0.0 {
        s += &format!(", min-p {}", p.min_p());
    }
    if p.repetition_penalty() != 1.0 {
        s += &format!(", repetition penalty {}", p.repetition_penalty());
    }
    if p.presence_penalty() != 0.0 {
        s += &format!(", presence penalty {}", p.presence_penalty());
    }
    if p.frequency_penalty() != 0.0 {
        s += &format!(", frequency penalty {}", p.frequency_penalty());
    }
    s + &format!(", seed {}", p.seed())
}

/// Streams one reply, then the finish reason and speeds.
#[allow(clippy::too_many_arguments)]
fn chat_turn(
    loaded: &mut Loaded,
    draft: Option<&mut Model>,
    prompt: &[TokenId],
    params: &SamplingParams,
    stop: &StopConditions,
    filter: Option<&mut dyn TokenFilter>,
    args: &Args,
    out: &mut dyn Write,
) -> Result<Generation> {
    let mut io_error = None;
    let mut samples = Vec::new();
    // Newlines right after <think> or </think> are layout, not content.
    let mut part_start = false;
    let g = {
        let mut on_event = |e: Event<'_>| {
            let r = match e {
                Event::Text { text, .. } => {
                    let text = if part_start {
                        text.trim_start_matches('\n')
                    } else {
                        text
                    };
                    part_start &= text.is_empty();
                    write!(out, "{text}").and_then(|_| out.flush())
                }
                Event::ThinkingStart => {
                    part_start = true;
                    writeln!(out, "[thinking]")
                }
                Event::ThinkingEnd => {
                    part_start = true;
                    writeln!(out, "\n[answer]")
                }
                Event::Token { sample } => {
                    if args.logprobs.is_some() {
                        samples.push(*sample);
                    }
                    Ok(())
                }
            };
            if let Err(err) = r {
                io_error.get_or_insert(err);
            }
        };
        run_generate(
            loaded,
            draft,
            args,
            prompt,
            params.clone(),
            stop,
            filter,
            &mut on_event,
        )?
    };
    if let Some(err) = io_error {
        return Err(err).context("cannot write the reply");
    }
    writeln!(out)?;
    if args.logprobs.is_some() {
        writeln!(out, "logprobs (token, logprob, raw logprob, alternatives):")?;
        for s in &samples {
            let alts: Vec<String> = s
                .alternatives()
                .iter()
                .map(|a| {
                    format!(
                        "{:?} {:.3}",
                        loaded.tokenizer.token_text(a.token),
                        a.raw_logprob
                    )
                })
                .collect();
            writeln!(
                out,
                "  {:>6} {:<16} {:>8.3} {:>8} | {}",
                s.token,
                format!("{:?}", loaded.tokenizer.token_text(s.token)),
                s.logprob,
                s.raw_logprob.map_or("-".into(), |r| format!("{r:.3}")),
                alts.join(", ")
            )?;
        }
    }
    let draft_text = g.draft.map_or(String::new(), |d| {
        format!(
            " | draft: proposed {}, accepted {} (rate {:.1}%), mean accepted per step {:.2}",
            d.proposed,
            d.accepted,
            100.0 * d.rate(),
            d.mean_accepted()
        )
    });
    writeln!(
        out,
        "[finish: {} | prompt {} tokens, {:.1} tokens/s | generated {} tokens, {:.1} tokens/s{}]",
        finish_text(&g.finish, loaded, stop),
        g.prompt_tokens,
        g.prompt_tokens_per_sec(),
        g.tokens.len(),
        g.tokens_per_sec(),
        draft_text
    )?;
    Ok(g)
}

/// Says why a reply ended, in words.
pub fn finish_text(finish: &FinishReason, loaded: &Loaded, stop: &StopConditions) -> String {
    match finish {
        FinishReason::StopToken(id) => format!(
            "end-of-turn token {} ({id})",
            loaded
                .tokenizer
                .inner()
                .id_to_token(*id)
                .unwrap_or_default()
        ),
        FinishReason::StopString(i) => format!(
            "stop string {:?}",
            stop.stop_strings().get(*i).map_or("", String::as_str)
        ),
        FinishReason::Length => format!(
            "length limit of {} tokens",
            stop.max_tokens().unwrap_or_default()
        ),
    }
}

fn one_line(text: &str) -> String {
    text.trim().replace('\n', "\\n")
}

/// The next-token table: one forward pass over the prompt, then the `n` most
/// likely tokens with their probability at each temperature.
fn top_next(
    loaded: &mut Loaded,
    prompt: &[TokenId],
    n: usize,
    temperatures: &[f32],
    out: &mut dyn Write,
) -> Result<()> {
    loaded.model.reset();
    let row = loaded.model.forward(prompt)?;
    writeln!(out, "scores in one pass: {}", row.len())?;
    let mut columns = Vec::with_capacity(temperatures.len());
    for &t in temperatures {
        let params = SamplingParams::builder()
            .temperature(t)
            .logprobs(n)
            .build()
            .with_context(|| format!("invalid temperature {t}"))?;
        let mut sampler = Sampler::new(params, loaded.tokenizer.vocab_size())?;
        let sample = sampler.sample(&row)?;
        columns.push(sample.alternatives().to_vec());
    }
    let Some(first) = columns.first() else {
        bail!("--temperatures is empty");
    };
    write!(out, "{:<6} {:<20}", "id", "token")?;
    for t in temperatures {
        write!(out, " {:>9}", format!("T={t}"))?;
    }
    writeln!(out)?;
    for alt in first {
        write!(
            out,
            "{:<6} {:<20}",
            alt.token,
            format!("{:?}", loaded.tokenizer.token_text(alt.token))
        )?;
        for column in &columns {
            let p = column
                .iter()
                .find(|a| a.token == alt.token)
                .map_or(0.0, |a| a.logprob.exp());
            write!(out, " {:>9.4}", p)?;
        }
        writeln!(out)?;
    }
    Ok(())
}
