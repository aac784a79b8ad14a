//! Times the sampling pipeline on the criterion benches' rows (or on your own), next to
//! the read floor and a sort-based reference, on your own hardware.
//!
//! ```text
//! cargo run --release -p logits --example bench -- --shape peaked --top-p 0.95
//! cargo run --release -p logits --example bench -- --vocab 151936 --shape peaked \
//!     --temperature 0.6 --top-k 20 --top-p 0.95 --min-p 0.05 --dtype bf16 --iters 500
//! cargo run --release -p logits --example bench -- --shape flat --top-p 0.95 --csv > flat.csv
//! cargo run --release -p logits --example bench -- --rows logits.npy --top-p 0.95
//! ```
//!
//! `--help` prints every option with its default. Before the figures the bench prints the
//! machine: the CPU model (`/proc/cpuinfo` on Linux, `unknown` elsewhere), the SIMD level
//! the crate dispatches to ([`logits::simd_level`]), the `rustc --version` found at run
//! time in the crate's directory (under `cargo run` that is the toolchain cargo runs; a
//! copied binary may report another, or `unknown`), the crate's version and the commit
//! (`git rev-parse --short HEAD`, `-dirty` when tracked files differ, `unknown` outside a
//! checkout). The CSV repeats them in every line.
//!
//! # Options
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `--vocab N` | 151936 | row length of the generated rows and of raw `--rows` files |
//! | `--shape peaked\|flat` | peaked | the criterion benches' rows: N(0, 2) with 36 tokens at 8 to 15, or N(0, 1) |
//! | `--num-rows N` | 4 | generated rows; row 0 is the criterion benches' row |
//! | `--rows FILE` | — | time these rows instead (repeatable; `.npy`, or raw, see below) |
//! | `--rows-format f32\|bf16` | f32 | the element type of raw (not `.npy`) `--rows` files |
//! | `--save-rows DIR` | — | also write the rows as `DIR/row-K.npy` (`<f4`), to time them elsewhere |
//! | `--temperature T` | 1.0 | `0` is greedy |
//! | `--top-k K`, `--top-p P`, `--min-p P` | off | the tail cuts |
//! | `--repetition-penalty R`, `--frequency-penalty F`, `--presence-penalty P` | off | the penalties, over the history |
//! | `--history N` | 64 | generated ids in the history (fixed seed) |
//! | `--order default\|llama` | default | the stage order of the timed [`Chain`]: the documented one, or llama.cpp's (temperature after the cuts) |
//! | `--chain SPEC` | — | time this chain instead: stages in order, comma-separated (see below) |
//! | `--impls LIST` | sampler,chain,reference | which implementations run beside the read floor, comma-separated |
//! | `--dtype f32\|bf16\|f16` | f32 | the element type of the timed rows |
//! | `--iters N` | 200 | timed iterations per row |
//! | `--warmup N` | 20 | untimed iterations per row before them |
//! | `--csv` | off | CSV on stdout instead of a table |
//!
//! # Any chain
//!
//! `--chain` takes the stages of the timed [`Chain`] in order, each `name=arguments`
//! with `:` between arguments, and ends in a draw unless the last stage is `greedy`:
//!
//! ```text
//! temperature=T  top_k=K  top_p=P  min_p=P  typical_p=P  top_n_sigma=N  epsilon=E
//! eta=E  xtc=PROBABILITY:THRESHOLD  penalties=REPETITION:FREQUENCY:PRESENCE
//! dry=MULTIPLIER:BASE:ALLOWED_LENGTH  dynatemp=T:DELTA:EXPONENT  mirostat_v2=TAU:ETA
//! greedy
//! ```
//!
//! For example `--chain top_k=40,typical_p=0.9,temperature=0.8` or
//! `--chain penalties=1.1:0:0,top_n_sigma=1,temperature=1.2`. The chain runs exactly
//! these stages (the bench prints them, from [`Chain::stage_names`]). The `sampler` and
//! `reference` implementations still use the `--temperature`/`--top-*`/`--min-p` options.
//! Without `--chain`, the chain holds only the stages the options turn on.
//!
//! # Your own rows
//!
//! `--rows FILE` (repeatable) loads rows instead of generating them; every row must have
//! the same length. A file ending in `.npy` is read as NumPy's format (version 1, 2 or 3,
//! C order): `<f4` is `f32`, `<f2` is `f16`, and `<u2` or `<i2` are the bits of `bf16`
//! (NumPy has no `bf16`: from PyTorch, `t.view(torch.int16).numpy()`). A 1-D array is
//! one row, a 2-D array one row per line (more dimensions: the last is the row). Any
//! other file is raw little-endian elements, `--rows-format f32` or `bf16`, `--vocab`
//! per row. The rows are held as `f32` (every `f16`/`bf16` value is exact in it) and
//! converted to `--dtype` for timing.
//!
//! # Your own implementation
//!
//! Every timed thing is an [`Implementation`]: a name, a `sample` call (timed) and a
//! `restore` call (untimed, after each sample, to bring the state back). To time your
//! sampler on the same rows with the same method, implement it and add it to
//! [`user_implementations`]; `SortReference` below is a worked example (a sort-based
//! sampler with its buffers allocated once, in `new`).
//!
//! # Method
//!
//! - **Rows.** `--num-rows` rows generated from fixed seeds (`tests/mix/rows.rs`, the
//!   generator of the criterion benches): row 0 is the criterion benches' row of that
//!   size and shape, row `k` comes from seed `7919 k + 1`. Each row's top-p nucleus and
//!   min-p set (at `--top-p`/`--min-p` and `--temperature`, or at 0.95 and 0.05 when the
//!   cut is off; before any other cut) are printed beside its timings, since the rows can
//!   take different paths.
//! - **Interleaved.** Each iteration times every implementation once on the same row,
//!   in an order that rotates from one iteration to the next, so that drift of the
//!   machine reaches all of them alike.
//! - **Fresh copy per call.** Before every call the row is copied from its pristine
//!   source into the buffer the call reads (untimed): the row is in cache as far as its
//!   size allows, as right after the model wrote it, and no call profits from an earlier
//!   call's work on the same buffer.
//! - **Warm-up.** `--warmup` untimed iterations per row, the same for every
//!   implementation: page faults, buffer growth and branch predictors settle first.
//! - **What is timed.** One call, between two `Instant::now()` reads:
//!   - `read floor`: the sum of the row, each element converted to `f32` (`bf16` by a
//!     shift, `f16` through `half`), in 16 lanes that vectorise; the same function as the
//!     criterion benches' `floor_sum`. No sampler can read and convert its row faster.
//!   - `sampler`: [`Sampler::sample`]; the drawn token is rolled back after the call
//!     (untimed), so the history, and the penalties' work, is the same at every call.
//!   - `chain`: [`Chain::sample`]; its history is restored after the call (untimed).
//!   - `reference (sort)`: `SortReference`, the pipeline of [`logits::reference`] (sort
//!     the whole vocabulary, weights in `f64`) into buffers allocated once.
//! - **No allocation while timed.** A counting allocator counts the allocations in every
//!   timed region; the `allocs` column reports them (0 expected).
//! - **Statistics.** Per row and implementation, not pooled across rows: the median,
//!   10th and 90th percentiles of the per-call times in microseconds, and the median
//!   over the read floor's median on the same row.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use logits::half::{bf16, f16};
use logits::{
    Chain, Dry, DynamicTemperature, EpsilonCutoff, Error, EtaCutoff, History, Logit, MinP,
    MirostatV2, Penalties, Sampler, SamplingParams, Temperature, TokenId, TopK, TopNSigma, TopP,
    TypicalP, Xtc,
};

#[path = "../tests/mix/mod.rs"]
mod mix;
use mix::machine::Machine;
use mix::rows::{floor, min_p_size, nth_row, nucleus, Load};
use mix::Mix;

#[path = "../tests/mix/counting.rs"]
mod counting;
use counting::Counting;

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    counting::allocations()
}

/// Something the bench times: one call per iteration on a fresh copy of the row.
///
/// `sample` is timed and should not allocate (the bench counts allocations); `restore`
/// runs after every `sample`, untimed, to bring the state back (a sampler's history, a
/// stage's state), so that every call does the same work.
pub trait Implementation<T> {
    /// The name in the table and the CSV.
    fn name(&self) -> &str;
    /// Samples one token from `row` (panics on an error: the bench stops).
    fn sample(&mut self, row: &[T]) -> TokenId;
    /// Brings the state back after a call; nothing by default.
    fn restore(&mut self) {}
}

/// Your own implementations, timed after the crate's (none by default). For example
/// `vec![Box::new(SortReference::new(vocab, params, history))]` times another copy of
/// the reference.
pub fn user_implementations<T: Element>(
    _vocab: usize,
    _params: &SamplingParams,
    _history: &[TokenId],
) -> Vec<Box<dyn Implementation<T>>> {
    Vec::new()
}

/// The element types the bench times.
pub trait Element: Logit + Load + 'static {}
impl<T: Logit + Load + 'static> Element for T {}

/// The read floor ([`floor`]).
struct Floor;

impl<T: Element> Implementation<T> for Floor {
    fn name(&self) -> &str {
        "read floor"
    }
    fn sample(&mut self, row: &[T]) -> TokenId {
        black_box(floor(row));
        0
    }
}

/// [`Sampler::sample`], with the drawn token rolled back after each call.
struct FastSampler(Sampler);

impl<T: Element> Implementation<T> for FastSampler {
    fn name(&self) -> &str {
        "sampler"
    }
    fn sample(&mut self, row: &[T]) -> TokenId {
        self.0.sample(row).expect("sampler").token
    }
    fn restore(&mut self) {
        self.0.rollback(1);
    }
}

/// [`Chain::sample`], brought back to its history after each call.
struct ChainImpl {
    name: String,
    chain: Chain,
    history: Vec<TokenId>,
}

impl<T: Element> Implementation<T> for ChainImpl {
    fn name(&self) -> &str {
        &self.name
    }
    fn sample(&mut self, row: &[T]) -> TokenId {
        self.chain.sample(row).expect("chain").token
    }
    fn restore(&mut self) {
        self.chain.reset();
        for &t in &self.history {
            self.chain.accept(t).expect("chain history");
        }
    }
}

/// A sort-based sampler: the pipeline of [`logits::reference`] (penalties; every finite
/// logit sorted by logit, ties by lower id; top-k, top-p, min-p over `f64` weights; an
/// inverse-CDF draw with the fixed uniform `u`), with its buffers allocated once.
pub struct SortReference {
    params: SamplingParams,
    /// Each penalised id with its count in the history.
    counts: Vec<(TokenId, u32)>,
    u: f64,
    logits: Vec<f32>,
    order: Vec<TokenId>,
    weights: Vec<f64>,
}

impl SortReference {
    /// A sampler for rows of `vocab` logits, with `history` as the generated ids and the
    /// draw's uniform fixed at 0.5.
    pub fn new(vocab: usize, params: SamplingParams, history: &[TokenId]) -> SortReference {
        let h = History::new(history, 0);
        let mut ids = h
            .penalized(params.penalty_window(), params.penalize_prompt())
            .to_vec();
        ids.sort_unstable();
        let mut counts: Vec<(TokenId, u32)> = Vec::new();
        for id in ids {
            match counts.last_mut() {
                Some((last, c)) if *last == id => *c += 1,
                _ => counts.push((id, 1)),
            }
        }
        SortReference {
            params,
            counts,
            u: 0.5,
            logits: vec![0.0; vocab],
            order: Vec::with_capacity(vocab),
            weights: Vec::with_capacity(vocab),
        }
    }

    /// The token for `row`.
    pub fn token<T: Load>(&mut self, row: &[T]) -> TokenId {
        let p = &self.params;
        for (l, x) in self.logits.iter_mut().zip(row) {
            *l = x.load();
        }
        let (r, f, pr) = (
            p.repetition_penalty(),
            p.frequency_penalty(),
            p.presence_penalty(),
        );
        if r != 1.0 || f != 0.0 || pr != 0.0 {
            for &(id, c) in &self.counts {
                let x = &mut self.logits[id as usize];
                if r != 1.0 {
                    *x = if *x > 0.0 { *x / r } else { *x * r };
                }
                *x -= c as f32 * f + pr;
            }
        }
        let l = &self.logits;
        if p.is_greedy() {
            let mut best = 0;
            for (i, &x) in l.iter().enumerate() {
                if x > l[best] {
                    best = i;
                }
            }
            return best as TokenId;
        }
        self.order.clear();
        self.order
            .extend((0..l.len() as TokenId).filter(|&i| l[i as usize] > f32::NEG_INFINITY));
        self.order.sort_unstable_by(|&a, &b| {
            (l[b as usize] + 0.0)
                .total_cmp(&(l[a as usize] + 0.0))
                .then(a.cmp(&b))
        });
        let max = f64::from(l[self.order[0] as usize]);
        let t = f64::from(p.temperature());
        let keep = p.min_tokens_to_keep();
        let mut n = self.order.len();
        if let Some(k) = p.top_k() {
            n = n.min(k.max(keep));
        }
        self.weights.clear();
        self.weights.extend(
            self.order[..n]
                .iter()
                .map(|&i| ((f64::from(l[i as usize]) - max) / t).exp()),
        );
        if p.top_p() < 1.0 {
            let total: f64 = self.weights.iter().sum();
            let target = f64::from(p.top_p()) * total;
            let mut cum = 0.0;
            for (i, &w) in self.weights.iter().enumerate() {
                cum += w;
                if cum >= target {
                    n = (i + 1).max(keep).min(n);
                    break;
                }
            }
        }
        if p.min_p() > 0.0 {
            let top = (f64::from(l[self.order[0] as usize]) - max) / t;
            let cut = f64::from(p.min_p()).ln();
            let m = self.order[..n]
                .iter()
                .take_while(|&&i| (f64::from(l[i as usize]) - max) / t - top >= cut)
                .count();
            n = m.max(keep).min(n);
        }
        let w = &self.weights[..n];
        let target = self.u * w.iter().sum::<f64>();
        let mut cum = 0.0;
        let mut last = self.order[0];
        for (&id, &x) in self.order[..n].iter().zip(w) {
            if x > 0.0 {
                last = id;
            }
            cum += x;
            if cum > target {
                return id;
            }
        }
        last
    }
}

impl<T: Element> Implementation<T> for SortReference {
    fn name(&self) -> &str {
        "reference (sort)"
    }
    fn sample(&mut self, row: &[T]) -> TokenId {
        self.token(row)
    }
}

#[derive(Clone, Debug)]
struct Options {
    vocab: usize,
    shape: String,
    num_rows: usize,
    rows: Vec<String>,
    rows_format: String,
    save_rows: Option<String>,
    temperature: f32,
    top_k: Option<usize>,
    top_p: f32,
    min_p: f32,
    repetition: f32,
    frequency: f32,
    presence: f32,
    history: usize,
    order: String,
    chain: Option<String>,
    impls: Vec<String>,
    dtype: String,
    iters: usize,
    warmup: usize,
    csv: bool,
}

const HELP: &str = "\
bench: time the logits sampler on generated or loaded rows, beside the read floor and a
sort-based reference. Each iteration times every implementation once on the same row, in
a rotating order; statistics are per row.

usage: cargo run --release -p logits --example bench -- [OPTIONS]

rows:
  --vocab N                 row length of generated rows and raw --rows files [151936]
  --shape peaked|flat       peaked: N(0,2) + 36 tokens at 8-15; flat: N(0,1) [peaked]
  --num-rows N              generated rows; row 0 is the criterion benches' row [4]
  --rows FILE               load rows instead (repeatable): .npy (<f4 f32, <f2 f16,
                            <u2/<i2 bf16 bits; 1-D one row, 2-D one per line) or raw
                            little-endian elements [none]
  --rows-format f32|bf16    element type of raw --rows files [f32]
  --save-rows DIR           also write the rows as DIR/row-K.npy (<f4) [none]
  --dtype f32|bf16|f16      element type of the timed rows [f32]

sampling (the sampler, the default chain and the reference):
  --temperature T           0 is greedy [1.0]
  --top-k K                 [off]
  --top-p P                 [1.0, off]
  --min-p P                 [0.0, off]
  --repetition-penalty R    [1.0, off]
  --frequency-penalty F     [0.0, off]
  --presence-penalty P      [0.0, off]
  --history N               generated ids in the history, fixed seed [64]
  --order default|llama     the chain's order; llama puts temperature after the cuts
                            [default]
  --chain SPEC              time this chain instead of the default one [none]

run:
  --impls LIST              among sampler,chain,reference, comma-separated; the read
                            floor always runs [sampler,chain,reference]
  --iters N                 timed iterations per row [200]
  --warmup N                untimed iterations per row, for every implementation [20]
  --csv                     CSV on stdout instead of a table [off]
  -h, --help                this text

--chain SPEC: stages in order, comma-separated, each name=ARGS with ':' between
arguments; the chain ends in a draw unless the last stage is 'greedy':
  temperature=T  top_k=K  top_p=P  min_p=P  typical_p=P  top_n_sigma=N  epsilon=E
  eta=E  xtc=PROBABILITY:THRESHOLD  penalties=REPETITION:FREQUENCY:PRESENCE
  dry=MULTIPLIER:BASE:ALLOWED_LENGTH  dynatemp=T:DELTA:EXPONENT  mirostat_v2=TAU:ETA
  greedy
e.g. --chain top_k=40,typical_p=0.9,temperature=0.8
";

const USAGE: &str = "usage: bench [OPTIONS]; bench --help lists them";

enum Parsed {
    Run(Box<Options>),
    Help,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut o = Options {
        vocab: 151_936,
        shape: "peaked".into(),
        num_rows: 4,
        rows: Vec::new(),
        rows_format: "f32".into(),
        save_rows: None,
        temperature: 1.0,
        top_k: None,
        top_p: 1.0,
        min_p: 0.0,
        repetition: 1.0,
        frequency: 0.0,
        presence: 0.0,
        history: 64,
        order: "default".into(),
        chain: None,
        impls: vec!["sampler".into(), "chain".into(), "reference".into()],
        dtype: "f32".into(),
        iters: 200,
        warmup: 20,
        csv: false,
    };
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--csv" {
            o.csv = true;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Ok(Parsed::Help);
        }
        if !flag.starts_with("--") {
            return Err(format!("unexpected argument {flag}\n{USAGE}"));
        }
        let known = [
            "--vocab",
            "--shape",
            "--num-rows",
            "--rows",
            "--rows-format",
            "--save-rows",
            "--temperature",
            "--top-k",
            "--top-p",
            "--min-p",
            "--repetition-penalty",
            "--frequency-penalty",
            "--presence-penalty",
            "--history",
            "--order",
            "--chain",
            "--impls",
            "--dtype",
            "--iters",
            "--warmup",
        ];
        if !known.contains(&flag.as_str()) {
            return Err(format!("unknown option {flag}\n{USAGE}"));
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let num = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag} {v}: {e}"));
        let int = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--vocab" => o.vocab = int(&value)?,
            "--shape" => o.shape = value,
            "--num-rows" => o.num_rows = int(&value)?.max(1),
            "--rows" => o.rows.push(value),
            "--rows-format" => o.rows_format = value,
            "--save-rows" => o.save_rows = Some(value),
            "--temperature" => o.temperature = num(&value)? as f32,
            "--top-k" => o.top_k = Some(int(&value)?),
            "--top-p" => o.top_p = num(&value)? as f32,
            "--min-p" => o.min_p = num(&value)? as f32,
            "--repetition-penalty" => o.repetition = num(&value)? as f32,
            "--frequency-penalty" => o.frequency = num(&value)? as f32,
            "--presence-penalty" => o.presence = num(&value)? as f32,
            "--history" => o.history = int(&value)?,
            "--order" => o.order = value,
            "--chain" => o.chain = Some(value),
            "--impls" => {
                o.impls = value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            }
            "--dtype" => o.dtype = value,
            "--iters" => o.iters = int(&value)?.max(1),
            "--warmup" => o.warmup = int(&value)?,
            _ => unreachable!("checked above"),
        }
    }
    if !matches!(o.shape.as_str(), "peaked" | "flat") {
        return Err(format!("--shape {}: expected peaked or flat", o.shape));
    }
    if !matches!(o.order.as_str(), "default" | "llama") {
        return Err(format!("--order {}: expected default or llama", o.order));
    }
    if !matches!(o.dtype.as_str(), "f32" | "bf16" | "f16") {
        return Err(format!("--dtype {}: expected f32, bf16 or f16", o.dtype));
    }
    if !matches!(o.rows_format.as_str(), "f32" | "bf16") {
        return Err(format!(
            "--rows-format {}: expected f32 or bf16",
            o.rows_format
        ));
    }
    if let Some(bad) = o
        .impls
        .iter()
        .find(|i| !matches!(i.as_str(), "sampler" | "chain" | "reference"))
    {
        return Err(format!(
            "--impls: unknown implementation {bad:?} (sampler, chain, reference)"
        ));
    }
    if o.vocab == 0 {
        return Err("--vocab must be at least 1".into());
    }
    Ok(Parsed::Run(Box::new(o)))
}

fn params(o: &Options) -> Result<SamplingParams, Error> {
    let mut b = SamplingParams::builder()
        .temperature(o.temperature)
        .top_p(o.top_p)
        .min_p(o.min_p)
        .repetition_penalty(o.repetition)
        .frequency_penalty(o.frequency)
        .presence_penalty(o.presence)
        .seed(1);
    if let Some(k) = o.top_k {
        b = b.top_k(k);
    }
    b.build()
}

/// Builds the `--chain` specification: exactly its stages, then a draw or `greedy`.
fn custom_chain(vocab: usize, spec: &str) -> Result<Chain, String> {
    let mut b = Chain::builder(vocab).seed(1);
    let mut greedy = false;
    for stage in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if greedy {
            return Err("--chain: greedy must be the last stage".into());
        }
        let (name, args) = stage.split_once('=').unwrap_or((stage, ""));
        let nums: Vec<f32> = args
            .split(':')
            .filter(|a| !a.is_empty())
            .map(|a| a.parse::<f32>().map_err(|e| format!("{stage}: {e}")))
            .collect::<Result<_, _>>()?;
        let arg = |i: usize| {
            nums.get(i)
                .copied()
                .ok_or_else(|| format!("{stage}: missing argument {}", i + 1))
        };
        let err = |e: Error| format!("{stage}: {e}");
        b = match name {
            "greedy" => {
                greedy = true;
                b
            }
            "temperature" => b.stage(Temperature::new(arg(0)?).map_err(err)?),
            "top_k" => b.stage(TopK::new(arg(0)? as usize).map_err(err)?),
            "top_p" => b.stage(TopP::new(arg(0)?).map_err(err)?),
            "min_p" => b.stage(MinP::new(arg(0)?).map_err(err)?),
            "typical_p" => b.stage(TypicalP::new(arg(0)?).map_err(err)?),
            "top_n_sigma" => b.stage(TopNSigma::new(arg(0)?).map_err(err)?),
            "epsilon" => b.stage(EpsilonCutoff::new(arg(0)?).map_err(err)?),
            "eta" => b.stage(EtaCutoff::new(arg(0)?).map_err(err)?),
            "xtc" => b.stage(Xtc::new(arg(0)?, arg(1)?).map_err(err)?),
            "penalties" => b.stage(Penalties::new(arg(0)?, arg(1)?, arg(2)?).map_err(err)?),
            "dry" => b.stage(Dry::new(arg(0)?, arg(1)?, arg(2)? as usize).map_err(err)?),
            "dynatemp" => b.stage(DynamicTemperature::new(arg(0)?, arg(1)?, arg(2)?).map_err(err)?),
            "mirostat_v2" => b.stage(MirostatV2::new(arg(0)?, arg(1)?).map_err(err)?),
            other => return Err(format!("--chain: unknown stage {other:?}")),
        };
    }
    b = if greedy { b.greedy() } else { b.draw() };
    b.build().map_err(|e| format!("--chain: {e}"))
}

/// The chain of the options: the stages they turn on, in `--order`.
fn chain(vocab: usize, order: &str, p: &SamplingParams) -> Result<Chain, Error> {
    let mut b = Chain::builder(vocab).seed(1);
    let (r, f, pr) = (
        p.repetition_penalty(),
        p.frequency_penalty(),
        p.presence_penalty(),
    );
    if r != 1.0 || f != 0.0 || pr != 0.0 {
        b = b.stage(Penalties::new(r, f, pr)?);
    }
    let llama = order == "llama";
    let temperature = !p.is_greedy() && p.temperature() != 1.0;
    if !llama && temperature {
        b = b.stage(Temperature::new(p.temperature())?);
    }
    if let Some(k) = p.top_k() {
        b = b.stage(TopK::new(k)?);
    }
    if p.top_p() < 1.0 {
        b = b.stage(TopP::new(p.top_p())?);
    }
    if p.min_p() > 0.0 {
        b = b.stage(MinP::new(p.min_p())?);
    }
    if llama && temperature {
        b = b.stage(Temperature::new(p.temperature())?);
    }
    b = if p.is_greedy() { b.greedy() } else { b.draw() };
    b.build()
}

fn history(o: &Options, vocab: usize) -> Vec<TokenId> {
    let mut rng = Mix(42);
    (0..o.history)
        .map(|_| rng.below(vocab) as TokenId)
        .collect()
}

/// A minimal reader and writer of NumPy's `.npy` format: C-order arrays of `<f4`, `<f2`
/// and `<u2`/`<i2` (the bits of `bf16`), versions 1 to 3.
mod npy {
    use logits::half::{bf16, f16};

    const MAGIC: &[u8] = b"\x93NUMPY";

    /// The rows of an array (the last dimension is the row), as `f32`.
    pub fn read(bytes: &[u8]) -> Result<Vec<Vec<f32>>, String> {
        if bytes.len() < 10 || &bytes[..6] != MAGIC {
            return Err("not a .npy file (no magic)".into());
        }
        let (header_len, start) = match bytes[6] {
            1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
            2 | 3 if bytes.len() >= 12 => (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            ),
            v => return Err(format!("unsupported .npy version {v}")),
        };
        let end = start + header_len;
        let header = bytes
            .get(start..end)
            .and_then(|h| std::str::from_utf8(h).ok())
            .ok_or("truncated or non-text .npy header")?;
        let field = |key: &str| -> Result<&str, String> {
            let at = header
                .find(&format!("'{key}'"))
                .ok_or_else(|| format!(".npy header has no {key:?}"))?;
            let rest = header[at + key.len() + 2..].trim_start();
            let rest = rest
                .strip_prefix(':')
                .ok_or_else(|| format!(".npy header: no ':' after {key:?}"))?;
            Ok(rest.trim_start())
        };
        let descr = field("descr")?;
        let descr = descr
            .strip_prefix('\'')
            .and_then(|d| d.split('\'').next())
            .ok_or(".npy header: descr is not a string")?;
        if field("fortran_order")?.starts_with("True") {
            return Err(".npy: Fortran order is not supported".into());
        }
        let shape = field("shape")?;
        let shape = shape
            .strip_prefix('(')
            .and_then(|s| s.split(')').next())
            .ok_or(".npy header: shape is not a tuple")?;
        let dims: Vec<usize> = shape
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(|d| {
                d.parse::<usize>()
                    .map_err(|e| format!(".npy shape {d}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        let row = *dims
            .last()
            .ok_or(".npy: a 0-dimensional array is not a row")?;
        if row == 0 {
            return Err(".npy: rows of length 0".into());
        }
        let count: usize = dims.iter().product();
        let data = &bytes[end..];
        let values: Vec<f32> = match descr {
            "<f4" => convert(data, count, 4, |b| {
                f32::from_le_bytes([b[0], b[1], b[2], b[3]])
            })?,
            "<f2" => convert(data, count, 2, |b| {
                f16::from_le_bytes([b[0], b[1]]).to_f32()
            })?,
            "<u2" | "<i2" => convert(data, count, 2, |b| {
                bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
            })?,
            other => {
                return Err(format!(
                    ".npy dtype {other:?}: expected '<f4', '<f2', or '<u2'/'<i2' (bf16 bits)"
                ))
            }
        };
        Ok(values.chunks(row).map(<[f32]>::to_vec).collect())
    }

    fn convert(
        data: &[u8],
        count: usize,
        size: usize,
        f: impl Fn(&[u8]) -> f32,
    ) -> Result<Vec<f32>, String> {
        if data.len() < count * size {
            return Err(format!(
                ".npy: {} bytes of data for {count} elements of {size} bytes",
                data.len()
            ));
        }
        Ok(data[..count * size].chunks_exact(size).map(f).collect())
    }

    /// A 1-D `<f4` array, version 1.
    pub fn write_f32(row: &[f32]) -> Vec<u8> {
        let mut header = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
            row.len()
        );
        // Magic, version, length, header and its newline: a multiple of 64 bytes.
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = Vec::with_capacity(10 + header.len() + 4 * row.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        for x in row {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out
    }
}

/// Raw little-endian rows of `vocab` elements.
fn read_raw(bytes: &[u8], format: &str, vocab: usize) -> Result<Vec<Vec<f32>>, String> {
    let size = if format == "bf16" { 2 } else { 4 };
    if bytes.is_empty() || !bytes.len().is_multiple_of(size * vocab) {
        return Err(format!(
            "{} bytes is not a whole number of rows of {vocab} {format} elements",
            bytes.len()
        ));
    }
    let values: Vec<f32> = if size == 2 {
        bytes
            .chunks_exact(2)
            .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect()
    } else {
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    Ok(values.chunks(vocab).map(<[f32]>::to_vec).collect())
}

/// The rows to time, as `f32`: loaded from `--rows`, or generated.
fn source_rows(o: &Options) -> Result<Vec<Vec<f32>>, String> {
    if o.rows.is_empty() {
        return Ok((0..o.num_rows as u64)
            .map(|k| nth_row(&o.shape, o.vocab, k))
            .collect());
    }
    let mut rows = Vec::new();
    for file in &o.rows {
        let bytes = std::fs::read(file).map_err(|e| format!("--rows {file}: {e}"))?;
        let loaded = if file.ends_with(".npy") {
            npy::read(&bytes)
        } else {
            read_raw(&bytes, &o.rows_format, o.vocab)
        }
        .map_err(|e| format!("--rows {file}: {e}"))?;
        rows.extend(loaded);
    }
    if let Some(r) = rows.iter().find(|r| r.len() != rows[0].len()) {
        return Err(format!(
            "--rows: rows of {} and {} logits; every row must have the same length",
            rows[0].len(),
            r.len()
        ));
    }
    Ok(rows)
}

struct Stats {
    name: String,
    row: usize,
    nucleus: usize,
    min_p_size: usize,
    calls: usize,
    allocs: u64,
    median: f64,
    p10: f64,
    p90: f64,
    x_floor: f64,
}

/// The median, p10 and p90 of `t`, in microseconds.
fn percentiles(t: &mut [Duration]) -> (f64, f64, f64) {
    t.sort_unstable();
    let at = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    (at(0.5), at(0.1), at(0.9))
}

/// The `p` of the nucleus and of the min-p set the bench reports.
fn set_ps(o: &Options) -> (f32, f32) {
    let top_p = if o.top_p < 1.0 { o.top_p } else { 0.95 };
    let min_p = if o.min_p > 0.0 { o.min_p } else { 0.05 };
    (top_p, min_p)
}

fn run<T: Element>(
    o: &Options,
    sources: &[Vec<f32>],
    convert: fn(f32) -> T,
    stage_names: &mut Vec<String>,
) -> Result<Vec<Stats>, String> {
    let vocab = sources[0].len();
    let rows: Vec<Vec<T>> = sources
        .iter()
        .map(|r| r.iter().map(|&x| convert(x)).collect())
        .collect();
    let p = params(o).map_err(|e| e.to_string())?;
    let tokens = history(o, vocab);

    let mut impls: Vec<Box<dyn Implementation<T>>> = vec![Box::new(Floor)];
    for name in &o.impls {
        match name.as_str() {
            "sampler" => {
                let mut s = Sampler::new(p.clone(), vocab).map_err(|e| e.to_string())?;
                for &t in &tokens {
                    s.accept(t).map_err(|e| e.to_string())?;
                }
                impls.push(Box::new(FastSampler(s)));
            }
            "chain" => {
                let mut c = match &o.chain {
                    Some(spec) => custom_chain(vocab, spec)?,
                    None => chain(vocab, &o.order, &p).map_err(|e| e.to_string())?,
                };
                *stage_names = c.stage_names().map(String::from).collect();
                for &t in &tokens {
                    c.accept(t).map_err(|e| e.to_string())?;
                }
                let name = match (&o.chain, o.order.as_str()) {
                    (Some(_), _) => "chain (--chain)",
                    (None, "llama") => "chain (llama order)",
                    _ => "chain",
                };
                impls.push(Box::new(ChainImpl {
                    name: name.into(),
                    chain: c,
                    history: tokens.clone(),
                }));
            }
            _ => impls.push(Box::new(SortReference::new(vocab, p.clone(), &tokens))),
        }
    }
    impls.extend(user_implementations::<T>(vocab, &p, &tokens));

    let t = if p.is_greedy() {
        1.0
    } else {
        f64::from(o.temperature)
    };
    let (top_p, min_p) = set_ps(o);
    let mut out = Vec::new();
    let mut buf = rows[0].clone();
    let mut times: Vec<Vec<Duration>> = (0..impls.len())
        .map(|_| Vec::with_capacity(o.iters))
        .collect();
    let mut allocs = vec![0u64; impls.len()];
    for (r, src) in rows.iter().enumerate() {
        let as_f32: Vec<f32> = src.iter().map(|x| x.load()).collect();
        let sets = (
            nucleus(&as_f32, t, f64::from(top_p)),
            min_p_size(&as_f32, t, f64::from(min_p)),
        );
        times.iter_mut().for_each(Vec::clear);
        allocs.fill(0);
        for i in 0..o.warmup + o.iters {
            for j in 0..impls.len() {
                let k = (i + j) % impls.len();
                buf.copy_from_slice(src);
                let a0 = allocations();
                let start = Instant::now();
                let token = impls[k].sample(black_box(&buf));
                let elapsed = start.elapsed();
                let a1 = allocations();
                black_box(token);
                impls[k].restore();
                if i >= o.warmup {
                    times[k].push(elapsed);
                    allocs[k] += a1 - a0;
                }
            }
        }
        let mut floor_median = 0.0;
        for (k, imp) in impls.iter().enumerate() {
            let (median, p10, p90) = percentiles(&mut times[k]);
            if k == 0 {
                floor_median = median;
            }
            out.push(Stats {
                name: imp.name().to_string(),
                row: r,
                nucleus: sets.0,
                min_p_size: sets.1,
                calls: times[k].len(),
                allocs: allocs[k],
                median,
                p10,
                p90,
                x_floor: median / floor_median,
            });
        }
    }
    Ok(out)
}

/// Reports an error of the run and exits with status 1.
fn fail<T>(msg: String) -> T {
    eprintln!("bench: {msg}");
    std::process::exit(1);
}

/// CSV quoting.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn main() {
    let o = match parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(o)) => *o,
        Ok(Parsed::Help) => {
            print!("{HELP}");
            return;
        }
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    let sources = source_rows(&o).unwrap_or_else(fail);
    if let Some(dir) = &o.save_rows {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| fail(format!("--save-rows {dir}: {e}")));
        for (k, r) in sources.iter().enumerate() {
            let path = Path::new(dir).join(format!("row-{k}.npy"));
            std::fs::write(&path, npy::write_f32(r))
                .unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
        }
    }
    let mut stages = Vec::new();
    let result = match o.dtype.as_str() {
        "f32" => run::<f32>(&o, &sources, |x| x, &mut stages),
        "bf16" => run::<bf16>(&o, &sources, bf16::from_f32, &mut stages),
        _ => run::<f16>(&o, &sources, f16::from_f32, &mut stages),
    };
    let stats = result.unwrap_or_else(fail);
    let machine = Machine::detect();
    let vocab = sources[0].len();
    let k = o.top_k.map_or("off".to_string(), |k| k.to_string());
    let shape = if o.rows.is_empty() {
        o.shape.clone()
    } else {
        "file".into()
    };
    let (top_p, min_p) = set_ps(&o);
    let penalties = format!("{}:{}:{}", o.repetition, o.frequency, o.presence);
    let stages = stages.join(",");
    if o.csv {
        println!(
            "{},vocab,shape,rows,dtype,temperature,top_k,top_p,min_p,penalties,history,order,\
             chain,chain_stages,iters,warmup,impl,row,nucleus_top_p,nucleus,min_p_at,min_p_size,\
             calls,allocs,median_us,p10_us,p90_us,x_floor",
            Machine::CSV_COLUMNS
        );
        let settings = [
            vocab.to_string(),
            shape,
            quote(&o.rows.join(";")),
            o.dtype.clone(),
            o.temperature.to_string(),
            k,
            o.top_p.to_string(),
            o.min_p.to_string(),
            penalties,
            o.history.to_string(),
            o.order.clone(),
            quote(o.chain.as_deref().unwrap_or("")),
            quote(&stages),
            o.iters.to_string(),
            o.warmup.to_string(),
        ]
        .join(",");
        for s in &stats {
            println!(
                "{},{settings},{},{},{top_p},{},{min_p},{},{},{},{:.3},{:.3},{:.3},{:.3}",
                machine.csv_values(),
                quote(&s.name),
                s.row,
                s.nucleus,
                s.min_p_size,
                s.calls,
                s.allocs,
                s.median,
                s.p10,
                s.p90,
                s.x_floor
            );
        }
        return;
    }
    println!("{}", machine.line());
    println!(
        "vocab {vocab} · {shape} · {} · T {} · top-k {k} · top-p {} · min-p {} · penalties {penalties} \
         over {} ids · order {} · warm-up {} and {} timed iterations per row · µs per call",
        o.dtype, o.temperature, o.top_p, o.min_p, o.history, o.order, o.warmup, o.iters
    );
    if !stages.is_empty() {
        println!("chain stages: {stages}");
    }
    for s in &stats {
        if s.name == "read floor" {
            println!(
                "\nrow {}: top-p {top_p} nucleus {} tokens, min-p {min_p} keeps {}",
                s.row, s.nucleus, s.min_p_size
            );
            println!(
                "{:<22}{:>8}{:>12}{:>12}{:>12}{:>10}{:>8}",
                "", "calls", "median", "p10", "p90", "x floor", "allocs"
            );
        }
        println!(
            "{:<22}{:>8}{:>12.2}{:>12.2}{:>12.2}{:>10.2}{:>8}",
            s.name, s.calls, s.median, s.p10, s.p90, s.x_floor, s.allocs
        );
    }
    if stats.iter().any(|s| s.allocs > 0) {
        eprintln!("bench: an implementation allocated in its timed region (allocs column)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn npy_round_trips_f32_rows() {
        let row = vec![1.5f32, -0.0, f32::NEG_INFINITY, 3.25e-8, 7.0];
        let bytes = npy::write_f32(&row);
        assert_eq!(&bytes[..6], b"\x93NUMPY");
        let header_end = 10 + usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
        assert_eq!(header_end % 64, 0);
        assert_eq!(bytes[header_end - 1], b'\n');
        let back = npy::read(&bytes).unwrap();
        assert_eq!(back.len(), 1);
        let bits = |r: &[f32]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back[0]), bits(&row));
    }

    /// A file as NumPy 1.x writes `np.array(..., dtype=np.uint16).reshape(2, 3)`, read as
    /// two rows of `bf16` bits; and `<f2`.
    #[test]
    fn npy_reads_bf16_bits_and_f16_in_two_dimensions() {
        let values = [1.0f32, -2.5, 0.15625, 8.0, -0.0, 3.0];
        for (descr, bits) in [
            (
                "<u2",
                values
                    .iter()
                    .map(|&x| bf16::from_f32(x).to_bits())
                    .collect::<Vec<_>>(),
            ),
            (
                "<f2",
                values.iter().map(|&x| f16::from_f32(x).to_bits()).collect(),
            ),
        ] {
            let mut header =
                format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (2, 3), }}");
            while (10 + header.len() + 1) % 64 != 0 {
                header.push(' ');
            }
            header.push('\n');
            let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
            bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
            bytes.extend_from_slice(header.as_bytes());
            for b in &bits {
                bytes.extend_from_slice(&b.to_le_bytes());
            }
            let rows = npy::read(&bytes).unwrap();
            assert_eq!(rows, vec![values[..3].to_vec(), values[3..].to_vec()]);
        }
    }

    #[test]
    fn npy_refuses_what_it_cannot_read() {
        let mut bytes = npy::write_f32(&[1.0, 2.0]);
        assert!(
            npy::read(&bytes[..bytes.len() - 1]).is_err(),
            "truncated data"
        );
        let text = String::from_utf8_lossy(&bytes).replace("<f4", "<f8");
        assert!(npy::read(text.as_bytes()).is_err(), "f64");
        bytes[0] = b'x';
        assert!(npy::read(&bytes).is_err(), "no magic");
    }

    #[test]
    fn raw_rows_split_by_vocab() {
        let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(
            read_raw(&bytes, "f32", 2).unwrap(),
            vec![vec![1.0, 2.0], vec![3.0, 4.0]]
        );
        assert!(read_raw(&bytes, "f32", 3).is_err());
        let bf: Vec<u8> = [1.0f32, -2.0]
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes())
            .collect();
        assert_eq!(read_raw(&bf, "bf16", 2).unwrap(), vec![vec![1.0, -2.0]]);
    }

    #[test]
    fn chain_runs_exactly_the_stages_given() {
        let c = custom_chain(100, "top_k=40,typical_p=0.9,temperature=0.8").unwrap();
        let names: Vec<_> = c.stage_names().collect();
        assert_eq!(names, ["top_k", "typical_p", "temperature", "draw"]);
        let c = custom_chain(100, "penalties=1.1:0:0,greedy").unwrap();
        assert_eq!(c.stage_names().collect::<Vec<_>>(), ["penalties", "greedy"]);
        // The options' chain holds only the stages they turn on.
        let Parsed::Run(o) = parse(args("--top-p 0.95")).unwrap() else {
            panic!()
        };
        let c = chain(100, &o.order, &params(&o).unwrap()).unwrap();
        assert_eq!(c.stage_names().collect::<Vec<_>>(), ["top_p", "draw"]);
        let Parsed::Run(o) = parse(args(
            "--temperature 0.8 --top-k 40 --min-p 0.05 --order llama",
        ))
        .unwrap() else {
            panic!()
        };
        let c = chain(100, &o.order, &params(&o).unwrap()).unwrap();
        assert_eq!(
            c.stage_names().collect::<Vec<_>>(),
            ["top_k", "min_p", "temperature", "draw"]
        );
    }

    #[test]
    fn options_help_and_errors() {
        assert!(matches!(parse(args("--help")), Ok(Parsed::Help)));
        assert!(parse(args("--bogus 1")).is_err());
        assert!(parse(args("--impls sampler,other")).is_err());
        for option in [
            "--vocab",
            "--shape",
            "--num-rows",
            "--rows ",
            "--rows-format",
            "--save-rows",
            "--temperature",
            "--top-k",
            "--top-p",
            "--min-p",
            "--repetition-penalty",
            "--frequency-penalty",
            "--presence-penalty",
            "--history",
            "--order",
            "--chain",
            "--impls",
            "--dtype",
            "--iters",
            "--warmup",
            "--csv",
        ] {
            assert!(HELP.contains(option), "--help does not document {option}");
        }
    }

    /// The sort-based sampler draws what `logits::reference::sample` draws with the same
    /// uniform.
    #[test]
    fn sort_reference_matches_the_reference() {
        let history: Vec<TokenId> = vec![3, 7, 7, 100, 250];
        for (seed, opts) in [
            (1, "--top-p 0.95"),
            (2, "--temperature 0.6 --top-k 20 --top-p 0.95"),
            (3, "--min-p 0.05 --temperature 0.8"),
            (4, "--top-k 40 --top-p 0.9 --min-p 0.02 --repetition-penalty 1.3 --frequency-penalty 0.2 --presence-penalty 0.1"),
            (5, "--temperature 0"),
            (6, ""),
        ] {
            let Parsed::Run(o) = parse(args(opts)).unwrap() else {
                panic!()
            };
            let p = params(&o).unwrap();
            for shape in ["peaked", "flat"] {
                let row = nth_row(shape, 300, seed);
                let mut s = SortReference::new(300, p.clone(), &history);
                let want =
                    logits::reference::sample(&row, 300, &p, &History::new(&history, 0), None, 0.5)
                        .unwrap()
                        .0;
                assert_eq!(s.token(&row), want, "{opts} on {shape}");
            }
        }
    }
}
