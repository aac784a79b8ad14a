//! Times the sampling pipeline on generated rows, next to the read floor and the
//! sort-based reference, on your own hardware.
//!
//! ```text
//! cargo run --release --example bench -- --vocab 151936 --shape peaked \
//!     --temperature 0.6 --top-k 20 --top-p 0.95 --min-p 0.05 --dtype bf16 --iters 500
//! cargo run --release --example bench -- --shape flat --top-p 0.95 --csv > flat.csv
//! ```
//!
//! # Options
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `--vocab N` | 151936 | row length (Qwen3's padded vocabulary) |
//! | `--shape peaked\|flat` | peaked | a confident model (a few tokens far above the rest) or a near-uniform row |
//! | `--temperature T` | 1.0 | `0` is greedy |
//! | `--top-k K`, `--top-p P`, `--min-p P` | off | the tail cuts |
//! | `--repetition-penalty R`, `--frequency-penalty F`, `--presence-penalty P` | off | the penalties, over a history of `--history N` (default 64) generated ids |
//! | `--order default\|llama` | default | the stage order of the timed [`Chain`]: the documented one, or llama.cpp's (temperature after the cuts) |
//! | `--chain SPEC` | — | time this chain instead: stages in order, comma-separated (see below) |
//! | `--dtype f32\|bf16\|f16` | f32 | the row's element type |
//! | `--iters N` | 200 | timed calls per implementation |
//! | `--warmup N` | 20 | untimed calls before them |
//! | `--ref-iters N` | min(iters, 30) | timed calls of the (slow) reference |
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
//! `--chain penalties=1.1:0:0,top_n_sigma=1,temperature=1.2`. The `sampler` and
//! `reference` rows still use the `--temperature`/`--top-*`/`--min-p` options.
//!
//! # Method
//!
//! - **Rows.** Four rows are generated from a fixed seed (so runs are comparable): for
//!   `peaked`, logits uniform in `[-4, 4)` with one token raised by 14 and a handful by 8
//!   to 11; for `flat`, logits uniform in `[-0.5, 0.5)`. Calls cycle through the four.
//! - **Fresh copy per call.** Before every call the row is copied from its pristine
//!   source into the buffer the call reads. The copy is not timed. The row is therefore
//!   in cache as far as its size allows, as it is right after the model wrote it, and no
//!   call can profit from work an earlier call did on the same buffer.
//! - **Warm-up.** `--warmup` untimed calls first: page faults, buffer growth and branch
//!   predictors settle before timing.
//! - **What is timed.** One call, with `Instant::now()` before and after it:
//!   - `read floor`: one pass that reads every element, converts it to `f32` (`bf16` by
//!     a shift, `f16` through `half`) and keeps the maximum, in 16 lanes that the
//!     compiler vectorises. No sampler can read and convert its row faster.
//!   - `sampler`: [`Sampler::sample`], the fast path: validation, adjustments, cuts and
//!     the draw. The drawn token is rolled back after the call (untimed), so the
//!     history, and with it the penalties' work, is the same at every call.
//!   - `chain`: [`Chain::sample`] with the same stages in `--order` (its history is
//!     restored after the call, untimed).
//!   - `reference`: [`logits::reference::sample`], sorting the whole vocabulary in `f64`;
//!     a half-precision row is converted to `f32` inside the timed region.
//! - **Statistics.** The median, 10th and 90th percentiles of the per-call times, in
//!   microseconds, and the median over the read floor's median.

use std::hint::black_box;
use std::time::{Duration, Instant};

use logits::half::{bf16, f16};
use logits::{
    reference, Chain, Dry, DynamicTemperature, EpsilonCutoff, Error, EtaCutoff, History, Logit,
    MinP, MirostatV2, Penalties, Sampler, SamplingParams, Temperature, TokenId, TopK, TopNSigma,
    TopP, TypicalP, Xtc,
};

#[derive(Clone, Debug)]
struct Options {
    vocab: usize,
    shape: String,
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
    dtype: String,
    iters: usize,
    warmup: usize,
    ref_iters: Option<usize>,
    csv: bool,
}

const USAGE: &str = "usage: bench [--vocab N] [--shape peaked|flat] [--temperature T] \
[--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R] [--frequency-penalty F] \
[--presence-penalty P] [--history N] [--order default|llama] [--chain SPEC] \
[--dtype f32|bf16|f16] \
[--iters N] [--warmup N] [--ref-iters N] [--csv]";

fn parse() -> Result<Options, String> {
    let mut o = Options {
        vocab: 151_936,
        shape: "peaked".into(),
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
        dtype: "f32".into(),
        iters: 200,
        warmup: 20,
        ref_iters: None,
        csv: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--csv" {
            o.csv = true;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.into());
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let num = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag} {v}: {e}"));
        let int = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--vocab" => o.vocab = int(&value)?,
            "--shape" => o.shape = value,
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
            "--dtype" => o.dtype = value,
            "--iters" => o.iters = int(&value)?.max(1),
            "--warmup" => o.warmup = int(&value)?,
            "--ref-iters" => o.ref_iters = Some(int(&value)?.max(1)),
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    if !matches!(o.shape.as_str(), "peaked" | "flat") {
        return Err(format!("--shape {}: expected peaked or flat", o.shape));
    }
    if !matches!(o.order.as_str(), "default" | "llama") {
        return Err(format!("--order {}: expected default or llama", o.order));
    }
    if o.vocab == 0 {
        return Err("--vocab must be at least 1".into());
    }
    Ok(o)
}

/// xorshift64*: a fixed, dependency-free generator for the rows.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 40) as f32 / (1u64 << 24) as f32
    }

    fn below(&mut self, n: usize) -> usize {
        ((self.unit() as f64) * n as f64) as usize % n
    }
}

fn generate(o: &Options, seed: u64) -> Vec<f32> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
    if o.shape == "flat" {
        return (0..o.vocab).map(|_| rng.unit() - 0.5).collect();
    }
    let mut row: Vec<f32> = (0..o.vocab).map(|_| rng.unit() * 8.0 - 4.0).collect();
    for _ in 0..8 {
        let i = rng.below(o.vocab);
        row[i] += 8.0 + 3.0 * rng.unit();
    }
    let top = rng.below(o.vocab);
    row[top] += 14.0;
    row
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

/// Builds the `--chain` specification.
fn custom_chain(vocab: usize, spec: &str) -> Result<Chain, String> {
    let mut b = Chain::builder(vocab).seed(1);
    let mut greedy = false;
    for stage in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
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

fn chain(o: &Options, p: &SamplingParams) -> Result<Chain, Error> {
    let mut b = Chain::builder(o.vocab).seed(1).stage(Penalties::new(
        p.repetition_penalty(),
        p.frequency_penalty(),
        p.presence_penalty(),
    )?);
    let llama = o.order == "llama";
    if !llama && !p.is_greedy() {
        b = b.stage(Temperature::new(p.temperature())?);
    }
    if let Some(k) = p.top_k() {
        b = b.stage(TopK::new(k)?);
    }
    b = b.stage(TopP::new(p.top_p())?).stage(MinP::new(p.min_p())?);
    if llama && !p.is_greedy() {
        b = b.stage(Temperature::new(p.temperature())?);
    }
    b = if p.is_greedy() { b.greedy() } else { b.draw() };
    b.build()
}

fn history(o: &Options) -> Vec<TokenId> {
    let mut rng = Rng(42);
    (0..o.history)
        .map(|_| rng.below(o.vocab) as TokenId)
        .collect()
}

/// Per-call times, each on a fresh copy of the next source row. `call` times itself
/// (with [`timed`]) so that it can restore its state after the clock stops.
fn time<T: Copy>(
    sources: &[Vec<T>],
    warmup: usize,
    iters: usize,
    mut call: impl FnMut(&[T]) -> Duration,
) -> Vec<Duration> {
    let mut buf = sources[0].clone();
    let mut times = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        buf.copy_from_slice(&sources[i % sources.len()]);
        let elapsed = call(black_box(&buf));
        if i >= warmup {
            times.push(elapsed);
        }
    }
    times
}

/// Runs `f` between two reads of the clock.
fn timed<R>(f: impl FnOnce() -> R) -> (R, Duration) {
    let start = Instant::now();
    let r = black_box(f());
    (r, start.elapsed())
}

/// The cheapest exact conversion to `f32` of each element type: `bf16` is the top half
/// of an `f32`, so a shift; `f16` goes through `half`.
trait Load: Logit {
    fn load(self) -> f32;
}

impl Load for f32 {
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
}

impl Load for bf16 {
    #[inline(always)]
    fn load(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
}

impl Load for f16 {
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
}

/// The read floor: one pass over the row, converting each element and keeping the max,
/// in 16 independent lanes so that the loop vectorises.
fn read_floor<T: Load>(row: &[T]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = row.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, x) in lanes.iter_mut().zip(c) {
            let x = x.load();
            *m = if x > *m { x } else { *m };
        }
    }
    let mut m = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for x in rest {
        m = m.max(x.load());
    }
    m
}

struct Stats {
    name: &'static str,
    iters: usize,
    median: f64,
    p10: f64,
    p90: f64,
}

fn stats(name: &'static str, mut t: Vec<Duration>) -> Stats {
    t.sort_unstable();
    let at = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    Stats {
        name,
        iters: t.len(),
        median: at(0.5),
        p10: at(0.1),
        p90: at(0.9),
    }
}

fn run<T: Load>(
    o: &Options,
    convert: fn(f32) -> T,
) -> Result<Vec<Stats>, Box<dyn std::error::Error>> {
    let f32_rows: Vec<Vec<f32>> = (0..4).map(|s| generate(o, s)).collect();
    let rows: Vec<Vec<T>> = f32_rows
        .iter()
        .map(|r| r.iter().map(|&x| convert(x)).collect())
        .collect();
    let p = params(o)?;
    let tokens = history(o);
    let mut out = Vec::new();

    out.push(stats(
        "read floor",
        time(&rows, o.warmup, o.iters, |r| timed(|| read_floor(r)).1),
    ));

    let mut sampler = Sampler::new(p.clone(), o.vocab)?;
    for &t in &tokens {
        sampler.accept(t)?;
    }
    let mut failed = None;
    let t = time(&rows, o.warmup, o.iters, |r| {
        let (result, elapsed) = timed(|| sampler.sample(r));
        match result {
            Ok(_) => sampler.rollback(1),
            Err(e) => failed = Some(e),
        }
        elapsed
    });
    if let Some(e) = failed {
        return Err(e.into());
    }
    out.push(stats("sampler", t));

    let mut c = match &o.chain {
        Some(spec) => custom_chain(o.vocab, spec)?,
        None => chain(o, &p)?,
    };
    for &t in &tokens {
        c.accept(t)?;
    }
    let mut failed = None;
    let t = time(&rows, o.warmup, o.iters, |r| {
        let (result, elapsed) = timed(|| c.sample(r));
        if let Err(e) = result {
            failed = Some(e);
        }
        // Back to the same history for the next call.
        c.reset();
        for &t in &tokens {
            let _ = c.accept(t);
        }
        elapsed
    });
    if let Some(e) = failed {
        return Err(e.into());
    }
    out.push(stats(
        match (&o.chain, o.order.as_str()) {
            (Some(_), _) => "chain (--chain)",
            (None, "llama") => "chain (llama order)",
            _ => "chain",
        },
        t,
    ));

    let ref_iters = o.ref_iters.unwrap_or(o.iters.min(30));
    let h = History::new(&tokens, 0);
    let mut failed = None;
    let t = time(&rows, o.warmup.min(3), ref_iters, |r| {
        let (result, elapsed) = timed(|| {
            let row: Vec<f32> = r.iter().map(|x| x.to_f32()).collect();
            reference::sample(&row, o.vocab, &p, &h, None, 0.5)
        });
        if let Err(e) = result {
            failed = Some(e);
        }
        elapsed
    });
    if let Some(e) = failed {
        return Err(e.into());
    }
    out.push(stats("reference (sort)", t));
    Ok(out)
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    let result = match o.dtype.as_str() {
        "f32" => run::<f32>(&o, |x| x),
        "bf16" => run::<bf16>(&o, bf16::from_f32),
        "f16" => run::<f16>(&o, f16::from_f32),
        other => {
            eprintln!("--dtype {other}: expected f32, bf16 or f16");
            std::process::exit(2);
        }
    };
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(1);
        }
    };
    let floor = rows[0].median;
    let k = o.top_k.map_or("off".to_string(), |k| k.to_string());
    if o.csv {
        println!(
            "impl,dtype,shape,vocab,temperature,top_k,top_p,min_p,iters,median_us,p10_us,p90_us,x_floor"
        );
        for r in &rows {
            println!(
                "{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.2}",
                r.name,
                o.dtype,
                o.shape,
                o.vocab,
                o.temperature,
                k,
                o.top_p,
                o.min_p,
                r.iters,
                r.median,
                r.p10,
                r.p90,
                r.median / floor
            );
        }
        return;
    }
    println!(
        "vocab {} · {} · {} · T {} · top-k {} · top-p {} · min-p {} · per call, µs",
        o.vocab, o.shape, o.dtype, o.temperature, k, o.top_p, o.min_p
    );
    println!(
        "{:<22}{:>8}{:>12}{:>12}{:>12}{:>10}",
        "", "calls", "median", "p10", "p90", "x floor"
    );
    for r in &rows {
        println!(
            "{:<22}{:>8}{:>12.2}{:>12.2}{:>12.2}{:>10.2}",
            r.name,
            r.iters,
            r.median,
            r.p10,
            r.p90,
            r.median / floor
        );
    }
}
