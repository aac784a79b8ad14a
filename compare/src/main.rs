//! Times `logits` beside llama.cpp's sampler stages (vendored), candle's
//! `LogitsProcessor` and a sort-based baseline, on the same rows with the same method,
//! after checking every implementation's draws against the exact distribution.
//!
//! ```text
//! cargo run --release -p logits-compare
//! cargo run --release -p logits-compare -- --iters 500 --workloads qwen3
//! cargo run --release -p logits-compare -- --quick
//! ```
//!
//! `--help` lists the options. The method is in `compare/README.md` and in [`HELP`].

use std::hint::black_box;
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use logits::reference::{self, Step};
use logits::{Chain, History, MinP, Sampler, SamplingParams, Temperature, TokenId, TopK, TopP};

#[path = "../../tests/mix/mod.rs"]
mod mix;
use mix::machine::Machine;
use mix::rows::nth_row;
use mix::Mix;

mod llama;

#[path = "../../tests/mix/counting.rs"]
mod counting;
use counting::Counting;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations so far, from Rust and from the vendored C++ (`operator new`).
fn allocations() -> u64 {
    counting::allocations() + llama::allocations()
}

const HELP: &str = "\
logits-compare: time logits beside llama.cpp's sampler stages (vendored C++), candle's
LogitsProcessor and a sort-based baseline, on the same rows with the same method. Every
implementation's draws are checked against the exact distribution first; a failed check
exits with status 1 before any time is printed.

usage: cargo run --release -p logits-compare -- [OPTIONS]

  --vocab N            row length of the timed rows [151936]
  --shapes LIST        row shapes, comma-separated: peaked, flat [peaked,flat]
  --num-rows N         rows per shape; row 0 is the criterion benches' row [2]
  --workloads LIST     llama, qwen3, comma-separated [llama,qwen3]
                       llama: top-k 40, top-p 0.95, min-p 0.05, temperature 0.8, draw
                              (llama.cpp's default chain, in its order)
                       qwen3: temperature 0.6, top-k 20, top-p 0.95, draw
                              (Qwen3's generation_config, temperature first)
  --iters N            timed iterations per row [200]
  --warmup N           untimed iterations per row, for every implementation [20]
  --draws N            draws per implementation and check row in the check [20000]
  --quick              1 row per shape, 5 iterations, 2 warm-up, 3000 draws (for CI)
  -h, --help           this text

method: per row, each iteration times every implementation once, in an order that
rotates from one iteration to the next; before each call the row is copied (untimed)
from its pristine source into the buffer the call reads, and the uniform of the draw is
drawn (untimed) and shared by the implementations that take one. The warm-up is the
same for all. Percentiles are per row and implementation, never pooled. The allocs
column counts allocations (Rust and the vendored C++) inside the timed regions.
";

#[derive(Clone, Debug)]
struct Options {
    vocab: usize,
    shapes: Vec<String>,
    num_rows: usize,
    workloads: Vec<String>,
    iters: usize,
    warmup: usize,
    draws: usize,
}

enum Parsed {
    Run(Options),
    Help,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut o = Options {
        vocab: 151_936,
        shapes: vec!["peaked".into(), "flat".into()],
        num_rows: 2,
        workloads: vec!["llama".into(), "qwen3".into()],
        iters: 200,
        warmup: 20,
        draws: 20_000,
    };
    let mut args = args.into_iter();
    let list = |v: String, allowed: &[&str], flag: &str| -> Result<Vec<String>, String> {
        let items: Vec<String> = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if items.is_empty() {
            return Err(format!("{flag}: empty list"));
        }
        match items.iter().find(|s| !allowed.contains(&s.as_str())) {
            Some(bad) => Err(format!("{flag}: unknown {bad:?} (one of {allowed:?})")),
            None => Ok(items),
        }
    };
    while let Some(a) = args.next() {
        if a == "-h" || a == "--help" {
            return Ok(Parsed::Help);
        }
        if a == "--quick" {
            o.num_rows = 1;
            o.iters = 5;
            o.warmup = 2;
            o.draws = 3000;
            continue;
        }
        let v = args
            .next()
            .ok_or_else(|| format!("{a}: missing value; --help lists the options"))?;
        let number = |v: &str| -> Result<usize, String> {
            v.parse::<usize>().map_err(|e| format!("{a} {v}: {e}"))
        };
        match a.as_str() {
            "--vocab" => o.vocab = number(&v)?,
            "--shapes" => o.shapes = list(v, &["peaked", "flat"], "--shapes")?,
            "--num-rows" => o.num_rows = number(&v)?,
            "--workloads" => o.workloads = list(v, &["llama", "qwen3"], "--workloads")?,
            "--iters" => o.iters = number(&v)?,
            "--warmup" => o.warmup = number(&v)?,
            "--draws" => o.draws = number(&v)?,
            _ => return Err(format!("unknown option {a}; --help lists the options")),
        }
    }
    if o.vocab < 64 {
        return Err("--vocab: at least 64".into());
    }
    if o.iters == 0 || o.num_rows == 0 || o.draws == 0 {
        return Err("--iters, --num-rows and --draws must be at least 1".into());
    }
    Ok(Parsed::Run(o))
}

/// A sampling configuration: its stages in order, as the reference's steps.
struct Workload {
    name: &'static str,
    steps: Vec<Step>,
}

fn workload(name: &str) -> Workload {
    let top_k = |k| Step::TopK { k, min_keep: 1 };
    let top_p = |p| Step::TopP { p, min_keep: 1 };
    match name {
        "llama" => Workload {
            name: "llama",
            steps: vec![
                top_k(40),
                top_p(0.95),
                Step::MinP {
                    p: 0.05,
                    min_keep: 1,
                },
                Step::Temperature(0.8),
            ],
        },
        _ => Workload {
            name: "qwen3",
            steps: vec![Step::Temperature(0.6), top_k(20), top_p(0.95)],
        },
    }
}

/// The steps as text.
fn describe(steps: &[Step]) -> String {
    let mut s: Vec<String> = steps
        .iter()
        .map(|st| match *st {
            Step::Temperature(t) => format!("temperature {t}"),
            Step::TopK { k, .. } => format!("top-k {k}"),
            Step::TopP { p, .. } => format!("top-p {p}"),
            Step::MinP { p, .. } => format!("min-p {p}"),
            _ => "?".into(),
        })
        .collect();
    s.push("draw".into());
    s.join(" -> ")
}

/// Something timed: one call per iteration on a fresh copy of the row.
trait Implementation {
    /// The name in the output.
    fn name(&self) -> &str;
    /// Untimed, once per row before its iterations (and before the check's draws).
    fn prepare(&mut self, _row: &[f32]) {}
    /// Samples one token from `row` with the uniform `u` in `[0, 1)` (timed); an
    /// implementation with its own random numbers ignores `u`.
    fn sample(&mut self, row: &[f32], u: f64) -> TokenId;
    /// Untimed, after each call: brings the state back.
    fn restore(&mut self) {}
    /// What the implementation does beyond the sampling proper, if anything.
    fn note(&self) -> Option<&str> {
        None
    }
    /// The steps whose exact distribution its draws must follow, when not the workload's.
    fn semantics(&self) -> Option<Vec<Step>> {
        None
    }
}

/// `logits`'s [`Sampler`], with the drawn token rolled back after each call.
struct LogitsSampler(Sampler);

impl Implementation for LogitsSampler {
    fn name(&self) -> &str {
        "logits Sampler"
    }
    fn sample(&mut self, row: &[f32], u: f64) -> TokenId {
        self.0
            .sample_with_uniform(row, None, u)
            .expect("sampler")
            .token
    }
    fn restore(&mut self) {
        self.0.rollback(1);
    }
}

/// `logits`'s [`Chain`] with the workload's stages, in its order.
struct LogitsChain(Chain);

impl Implementation for LogitsChain {
    fn name(&self) -> &str {
        "logits Chain"
    }
    fn sample(&mut self, row: &[f32], u: f64) -> TokenId {
        self.0
            .sample_with_uniform(row, None, u)
            .expect("chain")
            .token
    }
    fn restore(&mut self) {
        self.0.reset();
    }
}

/// The vendored llama.cpp stages.
struct Llama(llama::LlamaChain);

impl Implementation for Llama {
    fn name(&self) -> &str {
        "llama.cpp (vendored)"
    }
    fn sample(&mut self, row: &[f32], u: f64) -> TokenId {
        self.0.sample(row, u).expect("llama.cpp: no token")
    }
    fn note(&self) -> Option<&str> {
        Some(
            "builds its candidate array (id, logit, p) from the row inside the call, as \
             llama_sampler_sample does, into a buffer allocated once",
        )
    }
}

/// candle's [`LogitsProcessor`] on a tensor built from the row before the timed region.
struct Candle {
    processor: LogitsProcessor,
    tensor: Option<Tensor>,
    temperature: f32,
    top_k: usize,
    top_p: f32,
}

impl Implementation for Candle {
    fn name(&self) -> &str {
        "candle LogitsProcessor"
    }
    fn prepare(&mut self, row: &[f32]) {
        self.tensor = Some(Tensor::from_slice(row, row.len(), &Device::Cpu).expect("tensor"));
    }
    fn sample(&mut self, _row: &[f32], _u: f64) -> TokenId {
        let t = self.tensor.as_ref().expect("prepared");
        self.processor.sample(t).expect("candle")
    }
    fn note(&self) -> Option<&str> {
        Some(
            "the tensor is built from the row once per row, untimed; inside the call candle \
             divides by T, takes the softmax and copies it out (new tensors and a Vec), \
             sorts an index Vec and builds a WeightedIndex: it allocates on every call; \
             top-p counts full-vocabulary mass over the top-k set, so its exact distribution \
             is temperature -> top-p -> top-k",
        )
    }
    fn semantics(&self) -> Option<Vec<Step>> {
        Some(vec![
            Step::Temperature(self.temperature),
            Step::TopP {
                p: self.top_p,
                min_keep: 1,
            },
            Step::TopK {
                k: self.top_k,
                min_keep: 1,
            },
        ])
    }
}

/// The plain baseline: copy, sort every finite logit (descending, ties to the lower id),
/// run the steps over the sorted prefix with weights in `f64`, draw by inverse CDF.
/// Buffers allocated once.
struct SortBaseline {
    steps: Vec<Step>,
    logits: Vec<f32>,
    order: Vec<TokenId>,
    weights: Vec<f64>,
}

impl SortBaseline {
    fn new(vocab: usize, steps: Vec<Step>) -> SortBaseline {
        SortBaseline {
            steps,
            logits: vec![0.0; vocab],
            order: Vec::with_capacity(vocab),
            weights: Vec::with_capacity(vocab),
        }
    }
}

impl Implementation for SortBaseline {
    fn name(&self) -> &str {
        "sort baseline"
    }
    fn sample(&mut self, row: &[f32], u: f64) -> TokenId {
        self.logits.copy_from_slice(row);
        let l = &self.logits;
        self.order.clear();
        self.order
            .extend((0..l.len() as TokenId).filter(|&i| l[i as usize] > f32::NEG_INFINITY));
        self.order.sort_unstable_by(|&a, &b| {
            (l[b as usize] + 0.0)
                .total_cmp(&(l[a as usize] + 0.0))
                .then(a.cmp(&b))
        });
        let max = f64::from(l[self.order[0] as usize]);
        let mut t = 1.0f64;
        let mut n = self.order.len();
        for step in &self.steps {
            match *step {
                Step::Temperature(x) => t *= f64::from(x),
                Step::TopK { k, .. } => n = n.min(k.max(1)),
                Step::TopP { p, .. } => {
                    self.weights.clear();
                    self.weights.extend(
                        self.order[..n]
                            .iter()
                            .map(|&i| ((f64::from(l[i as usize]) - max) / t).exp()),
                    );
                    let target = f64::from(p) * self.weights.iter().sum::<f64>();
                    let mut cum = 0.0;
                    if let Some(i) = self.weights.iter().position(|&w| {
                        cum += w;
                        cum >= target
                    }) {
                        n = i + 1;
                    }
                }
                Step::MinP { p, .. } => {
                    let cut = f64::from(p).ln();
                    n = self.order[..n]
                        .iter()
                        .take_while(|&&i| (f64::from(l[i as usize]) - max) / t >= cut)
                        .count()
                        .max(1);
                }
                _ => unreachable!("the workloads use four stages"),
            }
        }
        self.weights.clear();
        self.weights.extend(
            self.order[..n]
                .iter()
                .map(|&i| ((f64::from(l[i as usize]) - max) / t).exp()),
        );
        let target = u * self.weights.iter().sum::<f64>();
        let mut cum = 0.0;
        for (&id, &w) in self.order[..n].iter().zip(&self.weights) {
            cum += w;
            if cum > target {
                return id;
            }
        }
        self.order[n - 1]
    }
}

/// The implementations of a workload, the `logits` ones first.
fn implementations(vocab: usize, w: &Workload) -> Result<Vec<Box<dyn Implementation>>, String> {
    let err = |e: logits::Error| e.to_string();
    let mut out: Vec<Box<dyn Implementation>> = Vec::new();
    let mut b = Chain::builder(vocab).seed(1);
    let mut lc = llama::LlamaChain::new(vocab);
    for step in &w.steps {
        match *step {
            Step::Temperature(t) => {
                b = b.stage(Temperature::new(t).map_err(err)?);
                lc.temperature(t);
            }
            Step::TopK { k, .. } => {
                b = b.stage(TopK::new(k).map_err(err)?);
                lc.top_k(k as i32);
            }
            Step::TopP { p, .. } => {
                b = b.stage(TopP::new(p).map_err(err)?);
                lc.top_p(p, 1);
            }
            Step::MinP { p, .. } => {
                b = b.stage(MinP::new(p).map_err(err)?);
                lc.min_p(p, 1);
            }
            _ => return Err("unsupported step".into()),
        }
    }
    if w.name == "qwen3" {
        let params = SamplingParams::builder()
            .temperature(0.6)
            .top_k(20)
            .top_p(0.95)
            .seed(1)
            .build()
            .map_err(err)?;
        out.push(Box::new(LogitsSampler(
            Sampler::new(params, vocab).map_err(err)?,
        )));
    }
    out.push(Box::new(LogitsChain(b.draw().build().map_err(err)?)));
    out.push(Box::new(Llama(lc)));
    if w.name == "qwen3" {
        out.push(Box::new(Candle {
            processor: LogitsProcessor::from_sampling(
                1,
                Sampling::TopKThenTopP {
                    k: 20,
                    p: 0.95,
                    temperature: 0.6,
                },
            ),
            tensor: None,
            temperature: 0.6,
            top_k: 20,
            top_p: 0.95,
        }));
    }
    out.push(Box::new(SortBaseline::new(vocab, w.steps.clone())));
    Ok(out)
}

/// The result of one implementation's check on one row.
struct Check {
    chi2: f64,
    df: usize,
    threshold: f64,
    outside: usize,
}

impl Check {
    fn passed(&self) -> bool {
        self.outside == 0 && self.chi2 <= self.threshold
    }
}

/// Draws `draws` tokens from `row` and compares their counts with the exact
/// distribution of `steps`: no draw may fall outside its support, and the chi-squared
/// statistic (bins with an expected count under 5 merged into one) must stay under
/// `df + 6 sqrt(2 df) + 6`, a tail probability far below 1e-4 for every `df`.
fn check(imp: &mut dyn Implementation, row: &[f32], steps: &[Step], draws: usize) -> Check {
    let history = History::new(&[], 0);
    let dist = reference::chain_survivors(row, row.len(), &history, None, steps)
        .expect("the reference distribution");
    let mut counts = vec![0usize; row.len()];
    let mut rng = Mix(0xC0FFEE);
    let mut buf = row.to_vec();
    imp.prepare(row);
    for _ in 0..draws {
        buf.copy_from_slice(row);
        let token = imp.sample(&buf, rng.unit());
        imp.restore();
        counts[token as usize] += 1;
    }
    let n = draws as f64;
    let mut inside = 0usize;
    let (mut chi2, mut bins) = (0.0, 0usize);
    let (mut rest_o, mut rest_e) = (0.0, 0.0);
    for &(id, p) in &dist {
        let o = counts[id as usize] as f64;
        inside += counts[id as usize];
        let e = n * p;
        if e < 5.0 {
            rest_o += o;
            rest_e += e;
        } else {
            chi2 += (o - e).powi(2) / e;
            bins += 1;
        }
    }
    if rest_e > 0.0 {
        chi2 += (rest_o - rest_e).powi(2) / rest_e;
        bins += 1;
    }
    let df = bins.saturating_sub(1);
    let threshold = df as f64 + 6.0 * (2.0 * df as f64).sqrt() + 6.0;
    Check {
        chi2,
        df,
        threshold,
        outside: draws - inside,
    }
}

/// The p50, p90 and p99 of `t`, in microseconds.
fn percentiles(t: &mut [Duration]) -> (f64, f64, f64) {
    t.sort_unstable();
    let at = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    (at(0.5), at(0.9), at(0.99))
}

/// One line of the timings.
struct Line {
    workload: &'static str,
    shape: String,
    row: usize,
    name: String,
    calls: usize,
    allocs: u64,
    p50: f64,
    p90: f64,
    p99: f64,
    ratio: f64,
}

/// Times the implementations of `w` on `rows`, interleaved.
fn time(
    o: &Options,
    w: &Workload,
    impls: &mut [Box<dyn Implementation>],
    shape: &str,
    rows: &[Vec<f32>],
) -> Vec<Line> {
    let mut out = Vec::new();
    let mut buf = rows[0].clone();
    let mut times: Vec<Vec<Duration>> = (0..impls.len())
        .map(|_| Vec::with_capacity(o.iters))
        .collect();
    let mut allocs = vec![0u64; impls.len()];
    let mut rng = Mix(0x5EED);
    for (r, src) in rows.iter().enumerate() {
        times.iter_mut().for_each(Vec::clear);
        allocs.fill(0);
        for imp in impls.iter_mut() {
            imp.prepare(src);
        }
        for i in 0..o.warmup + o.iters {
            let u = rng.unit();
            for j in 0..impls.len() {
                let k = (i + j) % impls.len();
                buf.copy_from_slice(src);
                let a0 = allocations();
                let start = Instant::now();
                let token = impls[k].sample(black_box(&buf), u);
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
        let mut base = 0.0;
        for (k, imp) in impls.iter().enumerate() {
            let (p50, p90, p99) = percentiles(&mut times[k]);
            if k == 0 {
                base = p50;
            }
            out.push(Line {
                workload: w.name,
                shape: shape.to_string(),
                row: r,
                name: imp.name().to_string(),
                calls: times[k].len(),
                allocs: allocs[k],
                p50,
                p90,
                p99,
                ratio: p50 / base,
            });
        }
    }
    out
}

/// The vocabulary of the check rows.
const CHECK_VOCAB: usize = 4096;

fn main() {
    let o = match parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(o)) => o,
        Ok(Parsed::Help) => {
            print!("{HELP}");
            return;
        }
        Err(msg) => {
            eprintln!("logits-compare: {msg}");
            std::process::exit(2);
        }
    };
    let machine = Machine::detect();
    println!("{}", machine.line());
    println!(
        "vocab {} · shapes {} · {} rows per shape · warm-up {} and {} timed iterations per \
         row, the same for every implementation · interleaved, rotating order · µs per call",
        o.vocab,
        o.shapes.join(","),
        o.num_rows,
        o.warmup,
        o.iters
    );
    let workloads: Vec<Workload> = o.workloads.iter().map(|n| workload(n)).collect();
    let mut all = Vec::new();
    for w in &workloads {
        let mut impls = implementations(o.vocab, w).unwrap_or_else(|e| {
            eprintln!("logits-compare: {e}");
            std::process::exit(1);
        });
        let mut check_impls = implementations(CHECK_VOCAB, w).unwrap_or_else(|e| {
            eprintln!("logits-compare: {e}");
            std::process::exit(1);
        });
        println!("\n{}: {}", w.name, describe(&w.steps));
        println!(
            "check: {} draws per implementation on each check row ({} logits, row 0 of each \
             shape), against logits::reference::chain_survivors",
            o.draws, CHECK_VOCAB
        );
        let mut failed = false;
        for imp in check_impls.iter_mut() {
            let steps = imp.semantics().unwrap_or_else(|| w.steps.clone());
            for shape in &o.shapes {
                let row = nth_row(shape, CHECK_VOCAB, 0);
                let c = check(imp.as_mut(), &row, &steps, o.draws);
                let verdict = if c.passed() { "ok" } else { "FAILED" };
                println!(
                    "  {:<24}{:<8} chi2 {:>8.1} df {:>3} threshold {:>6.1} outside support {} \
                     {verdict}",
                    imp.name(),
                    shape,
                    c.chi2,
                    c.df,
                    c.threshold,
                    c.outside
                );
                failed |= !c.passed();
            }
        }
        if failed {
            eprintln!(
                "logits-compare: an implementation's draws do not follow the exact \
                 distribution; no times printed"
            );
            std::process::exit(1);
        }
        for imp in &impls {
            if let Some(note) = imp.note() {
                println!("note: {}: {note}", imp.name());
            }
        }
        for shape in &o.shapes {
            let rows: Vec<Vec<f32>> = (0..o.num_rows as u64)
                .map(|k| nth_row(shape, o.vocab, k))
                .collect();
            all.extend(time(&o, w, &mut impls, shape, &rows));
        }
    }
    println!(
        "\n{:<8}{:<8}{:>4}  {:<24}{:>7}{:>8}{:>10}{:>10}{:>10}{:>10}",
        "workload",
        "shape",
        "row",
        "implementation",
        "calls",
        "allocs",
        "p50",
        "p90",
        "p99",
        "x logits"
    );
    for l in &all {
        println!(
            "{:<8}{:<8}{:>4}  {:<24}{:>7}{:>8}{:>10.1}{:>10.1}{:>10.1}{:>10.2}",
            l.workload, l.shape, l.row, l.name, l.calls, l.allocs, l.p50, l.p90, l.p99, l.ratio
        );
    }
    println!(
        "\nx logits: p50 over the p50 of the first logits implementation of the workload \
         on the same row (Sampler for qwen3, Chain for llama)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options_help_quick_and_errors() {
        assert!(matches!(parse(args("--help")), Ok(Parsed::Help)));
        let Ok(Parsed::Run(o)) = parse(args("--quick --workloads qwen3")) else {
            panic!("--quick parses");
        };
        assert_eq!((o.iters, o.warmup, o.num_rows), (5, 2, 1));
        assert_eq!(o.workloads, ["qwen3"]);
        assert!(parse(args("--iters")).is_err());
        assert!(parse(args("--iters x")).is_err());
        assert!(parse(args("--shapes round")).is_err());
        assert!(parse(args("--bogus 1")).is_err());
        assert!(parse(args("--iters 0")).is_err());
    }

    #[test]
    fn every_implementation_follows_the_exact_distribution() {
        for name in ["llama", "qwen3"] {
            let w = workload(name);
            for mut imp in implementations(CHECK_VOCAB, &w).unwrap() {
                let steps = imp.semantics().unwrap_or_else(|| w.steps.clone());
                for shape in ["peaked", "flat"] {
                    let row = nth_row(shape, CHECK_VOCAB, 1);
                    let c = check(imp.as_mut(), &row, &steps, 4000);
                    assert!(c.passed(), "{name} {} {shape}: chi2 {}", imp.name(), c.chi2);
                }
            }
        }
    }

    #[test]
    fn the_check_rejects_a_wrong_distribution() {
        // The llama workload's draws judged against another temperature must fail.
        let w = workload("llama");
        let mut steps = w.steps.clone();
        steps[3] = Step::Temperature(2.0);
        let row = nth_row("flat", CHECK_VOCAB, 0);
        let mut imp = SortBaseline::new(CHECK_VOCAB, w.steps.clone());
        assert!(!check(&mut imp, &row, &steps, 4000).passed());
    }

    #[test]
    fn llama_and_the_baseline_draw_the_reference_token_per_uniform() {
        // Away from the boundaries between tokens, an inverse-CDF draw over the same
        // distribution picks the same token whatever the order of the survivors.
        let w = workload("llama");
        let row = nth_row("peaked", CHECK_VOCAB, 0);
        let history = History::new(&[], 0);
        let dist = reference::chain_survivors(&row, CHECK_VOCAB, &history, None, &w.steps)
            .expect("distribution");
        let mut lc = implementations(CHECK_VOCAB, &w).unwrap();
        let mut base = SortBaseline::new(CHECK_VOCAB, w.steps.clone());
        let mut cum = 0.0;
        for &(id, p) in &dist {
            let u = cum + p / 2.0;
            cum += p;
            if p < 1e-4 {
                continue;
            }
            let (t, _) =
                reference::chain_sample(&row, CHECK_VOCAB, &history, None, &w.steps, u).unwrap();
            assert_eq!(t, id);
            assert_eq!(base.sample(&row, u), id);
            for imp in lc.iter_mut() {
                assert_eq!(imp.sample(&row, u), id, "{}", imp.name());
                imp.restore();
            }
        }
    }
}
