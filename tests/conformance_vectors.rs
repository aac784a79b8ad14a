//! Runs the conformance vectors (`tests/data/vectors/*.json`, format in the README there)
//! against the reference, the fast `Sampler` and a `Chain` in the default order.
//!
//! The expected values in the vectors were computed independently of this crate (by
//! `tests/data/vectors/generate.py`), so these tests pin the semantics, not merely the
//! agreement of two implementations.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use logits::reference;
use logits::{
    Chain, DrawRng, Error, History, LogitBias, MinP, Penalties, Sample, Sampler, SamplingParams,
    Temperature, TokenId, TopK, TopP,
};
use serde_json::Value;

/// Tolerance on probabilities for the `f64` reference.
const REFERENCE_TOL: f64 = 1e-9;
/// Tolerance on probabilities read back from `f32` logprobs.
const LOGPROB_TOL: f64 = 1e-6;
/// Seeds whose draws the fast paths are checked on, per vector.
const SEEDS: u64 = 48;

#[derive(Debug)]
struct Vector {
    file: String,
    name: String,
    logits: Vec<f32>,
    vocab_size: usize,
    params: SamplingParams,
    prompt: Vec<TokenId>,
    generated: Vec<TokenId>,
    expected: Outcome,
}

#[derive(Debug)]
enum Outcome {
    Error(String),
    Tokens {
        /// Survivors in draw order with their probabilities.
        survivors: Vec<(TokenId, f64)>,
        /// `(u, token)` pairs.
        draws: Vec<(f64, TokenId)>,
    },
}

impl Vector {
    fn label(&self) -> String {
        format!("{}:{}", self.file, self.name)
    }

    fn history(&self) -> Vec<TokenId> {
        let mut h = self.prompt.clone();
        h.extend(&self.generated);
        h
    }

    fn survivors(&self) -> &[(TokenId, f64)] {
        match &self.expected {
            Outcome::Tokens { survivors, .. } => survivors,
            Outcome::Error(_) => &[],
        }
    }
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vectors")
}

fn number(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().expect("a finite number"),
        Value::String(s) => match s.as_str() {
            "-inf" => f64::NEG_INFINITY,
            "inf" => f64::INFINITY,
            "nan" => f64::NAN,
            other => panic!("unknown number string {other:?}"),
        },
        other => panic!("expected a number, got {other}"),
    }
}

fn ids(v: Option<&Value>) -> Vec<TokenId> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().map(|x| x.as_u64().unwrap() as TokenId).collect())
        .unwrap_or_default()
}

fn params(v: &Value) -> SamplingParams {
    let mut b = SamplingParams::builder();
    for (key, x) in v.as_object().expect("params is an object") {
        b = match key.as_str() {
            "temperature" => b.temperature(number(x) as f32),
            "top_k" if x.is_null() => b.no_top_k(),
            "top_k" => b.top_k(x.as_u64().unwrap() as usize),
            "top_p" => b.top_p(number(x) as f32),
            "min_p" => b.min_p(number(x) as f32),
            "repetition_penalty" => b.repetition_penalty(number(x) as f32),
            "frequency_penalty" => b.frequency_penalty(number(x) as f32),
            "presence_penalty" => b.presence_penalty(number(x) as f32),
            "penalty_window" if x.is_null() => b,
            "penalty_window" => b.penalty_window(x.as_u64().unwrap() as usize),
            "penalize_prompt" => b.penalize_prompt(x.as_bool().unwrap()),
            "min_tokens_to_keep" => b.min_tokens_to_keep(x.as_u64().unwrap() as usize),
            "logit_bias" => x.as_array().unwrap().iter().fold(b, |b, e| {
                b.logit_bias(e[0].as_u64().unwrap() as TokenId, number(&e[1]) as f32)
            }),
            other => panic!("unknown parameter {other:?}: document it in the README"),
        };
    }
    b.build().expect("vector parameters are valid")
}

fn load() -> Vec<Vector> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("tests/data/vectors exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(doc["format"], "logits-conformance/1", "{file}");
        for v in doc["vectors"].as_array().expect("a vectors array") {
            let logits: Vec<f32> = v["logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| number(x) as f32)
                .collect();
            let vocab_size = v
                .get("vocab_size")
                .map_or(logits.len(), |n| n.as_u64().unwrap() as usize);
            let e = &v["expected"];
            let expected = match e.get("error") {
                Some(err) => Outcome::Error(err.as_str().unwrap().to_owned()),
                None => Outcome::Tokens {
                    survivors: e["survivors"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|s| (s[0].as_u64().unwrap() as TokenId, number(&s[1])))
                        .collect(),
                    draws: e["draws"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|d| (number(&d[0]), d[1].as_u64().unwrap() as TokenId))
                        .collect(),
                },
            };
            out.push(Vector {
                file: file.clone(),
                name: v["name"].as_str().unwrap().to_owned(),
                logits,
                vocab_size,
                params: params(&v["params"]),
                prompt: ids(v.get("history").and_then(|h| h.get("prompt"))),
                generated: ids(v.get("history").and_then(|h| h.get("generated"))),
                expected,
            });
        }
    }
    out
}

/// Inverse CDF over the expected survivors: the first whose cumulative probability
/// exceeds `u`, and whether `u` lies within `margin` of an interval boundary.
fn cdf(survivors: &[(TokenId, f64)], u: f64, margin: f64) -> (TokenId, bool) {
    let mut cum = 0.0;
    for &(id, p) in survivors {
        let next = cum + p;
        if next > u {
            let near = (u - cum).abs() < margin || (next - u).abs() < margin;
            return (id, near);
        }
        cum = next;
    }
    (survivors.last().unwrap().0, true)
}

/// The final distribution a `Sample` reports through its alternatives (every token of a
/// vocabulary of at most 20): the tokens with a finite final logprob.
fn reported(out: &Sample) -> Vec<(TokenId, f64)> {
    out.alternatives()
        .iter()
        .filter(|a| a.logprob > f32::NEG_INFINITY)
        .map(|a| (a.token, f64::from(a.logprob).exp()))
        .collect()
}

fn assert_same_distribution(label: &str, what: &str, got: &[(TokenId, f64)], v: &Vector) {
    let want = v.survivors();
    let got_ids: BTreeSet<TokenId> = got.iter().map(|x| x.0).collect();
    let want_ids: BTreeSet<TokenId> = want.iter().map(|x| x.0).collect();
    assert_eq!(got_ids, want_ids, "{label}: {what} keeps another set");
    for &(id, p) in want {
        let q = got.iter().find(|x| x.0 == id).unwrap().1;
        assert!(
            (p - q).abs() <= LOGPROB_TOL,
            "{label}: {what} gives token {id} probability {q}, expected {p}"
        );
    }
}

#[test]
fn vectors_are_well_formed_and_cover_every_stage() {
    let vectors = load();
    assert!(vectors.len() >= 40, "only {} vectors", vectors.len());
    assert!(
        vectors
            .iter()
            .any(|v| v.vocab_size >= 1000 && v.params.top_p() < 1.0),
        "no vector at scale"
    );
    let mut names = BTreeSet::new();
    let mut keys = BTreeSet::new();
    for v in &vectors {
        assert!(names.insert(v.label()), "duplicate {}", v.label());
        let p = &v.params;
        for (key, on) in [
            ("logit_bias", !p.logit_bias().is_empty()),
            ("repetition_penalty", p.repetition_penalty() != 1.0),
            ("frequency_penalty", p.frequency_penalty() != 0.0),
            ("presence_penalty", p.presence_penalty() != 0.0),
            ("penalty_window", p.penalty_window().is_some()),
            ("penalize_prompt", !p.penalize_prompt()),
            ("greedy", p.is_greedy()),
            ("temperature", !p.is_greedy() && p.temperature() != 1.0),
            ("top_k", p.top_k().is_some()),
            ("top_p", p.top_p() < 1.0),
            ("min_p", p.min_p() > 0.0),
            ("min_tokens_to_keep", p.min_tokens_to_keep() > 1),
            ("padding", v.vocab_size < v.logits.len()),
            ("-inf", v.logits.contains(&f32::NEG_INFINITY)),
            ("error", matches!(v.expected, Outcome::Error(_))),
        ] {
            if on {
                keys.insert(key);
            }
        }
        if let Outcome::Tokens { survivors, draws } = &v.expected {
            let total: f64 = survivors.iter().map(|x| x.1).sum();
            assert!((total - 1.0).abs() < 1e-9, "{}: sums to {total}", v.label());
            assert!(
                survivors.windows(2).all(|w| w[0].1 >= w[1].1),
                "{}",
                v.label()
            );
            assert!(!draws.is_empty(), "{}", v.label());
            for &(u, token) in draws {
                assert!((0.0..1.0).contains(&u), "{}: u = {u}", v.label());
                assert_eq!(cdf(survivors, u, 0.0).0, token, "{}: u = {u}", v.label());
            }
        }
    }
    assert_eq!(keys.len(), 15, "stages covered: {keys:?}");
    let zeros = vectors
        .iter()
        .find(|v| v.name == "signed_zeros_tie")
        .expect("the signed-zero vector");
    assert!(zeros.logits[0] == 0.0 && zeros.logits[0].is_sign_negative());
    assert!(zeros.logits[1] == 0.0 && zeros.logits[1].is_sign_positive());
    for name in [
        "worked_examples.json:fruit_t1",
        "worked_examples.json:fruit_t0.5",
        "worked_examples.json:fruit_t1.5",
        "worked_examples.json:top_p_0.8_worked",
        "worked_examples.json:min_p_0.1_worked",
        "top_p.json:top_p_crossing_kept",
        "min_p.json:min_p_equality_kept",
        "top_k.json:top_k_ties",
    ] {
        assert!(names.contains(name), "missing {name}");
    }
}

#[test]
fn worked_examples_hold() {
    let vectors = load();
    let get = |name: &str| {
        vectors
            .iter()
            .find(|v| v.label() == format!("worked_examples.json:{name}"))
            .unwrap()
            .survivors()
    };
    for (name, gap) in [
        ("fruit_t1", 1.5f64),
        ("fruit_t0.5", 3.0),
        ("fruit_t1.5", 1.0),
    ] {
        let s = get(name);
        assert_eq!(s[0].0, 0, "{name}: Apple first");
        assert_eq!(s[1].0, 1, "{name}: M second");
        let ratio = s[0].1 / s[1].1;
        assert!((ratio / gap.exp() - 1.0).abs() < 1e-5, "{name}: {ratio}");
    }
    for name in ["top_p_0.8_worked", "min_p_0.1_worked"] {
        let s = get(name);
        let ids: Vec<TokenId> = s.iter().map(|x| x.0).collect();
        assert_eq!(ids, [0, 1, 2], "{name}");
        for (&(_, p), want) in s.iter().zip([0.716, 0.160, 0.125]) {
            assert!((p - want).abs() < 1e-3, "{name}: {p} vs {want}");
        }
    }
}

#[test]
fn reference_matches_every_vector() {
    for v in load() {
        let label = v.label();
        let tokens = v.history();
        let history = History::new(&tokens, v.prompt.len());
        let result = reference::adjust(&v.logits, v.vocab_size, &v.params, &history, None)
            .and_then(|l| reference::survivors(&l, &v.params));
        match &v.expected {
            Outcome::Error(e) => {
                assert_eq!(e, "no_candidates", "{label}");
                assert_eq!(result.unwrap_err(), Error::NoCandidates, "{label}");
            }
            Outcome::Tokens { survivors, draws } => {
                let s = result.unwrap_or_else(|e| panic!("{label}: {e}"));
                let dist = reference::normalize(&s);
                let got: Vec<TokenId> = dist.iter().map(|x| x.0).collect();
                let want: Vec<TokenId> = survivors.iter().map(|x| x.0).collect();
                assert_eq!(got, want, "{label}: survivors in draw order");
                for (&(id, p), &(_, q)) in survivors.iter().zip(&dist) {
                    assert!(
                        (p - q).abs() <= REFERENCE_TOL,
                        "{label}: token {id}: {q} vs {p}"
                    );
                }
                for &(u, token) in draws {
                    assert_eq!(reference::draw(&s, u), token, "{label}: u = {u}");
                }
                let (token, logprob) = reference::sample(
                    &v.logits,
                    v.vocab_size,
                    &v.params,
                    &history,
                    None,
                    draws[0].0,
                )
                .unwrap();
                assert_eq!(token, draws[0].1, "{label}");
                let p = survivors.iter().find(|x| x.0 == token).unwrap().1;
                assert!((logprob.exp() - p).abs() <= REFERENCE_TOL, "{label}");
            }
        }
    }
}

/// Runs one step of `sample` for each seed and checks the distribution it reports and
/// the token it draws against the vector.
fn check_fast_path(what: &str, v: &Vector, mut sample: impl FnMut(u64) -> Result<Sample, Error>) {
    let label = v.label();
    let step = v.generated.len() as u64;
    if let Outcome::Error(e) = &v.expected {
        assert_eq!(e, "no_candidates", "{label}");
        assert_eq!(
            sample(0).unwrap_err(),
            Error::NoCandidates,
            "{label}: {what}"
        );
        return;
    }
    let survivors = v.survivors();
    let mut checked = 0;
    for seed in 0..SEEDS {
        let out = sample(seed).unwrap_or_else(|e| panic!("{label}: {what}: {e}"));
        if v.vocab_size <= 20 {
            // The 20 logprob alternatives cover the whole vocabulary.
            assert_same_distribution(&label, what, &reported(&out), v);
        } else {
            let p = survivors.iter().find(|x| x.0 == out.token).map(|x| x.1);
            let p = p.unwrap_or_else(|| panic!("{label}: {what} drew a cut token"));
            let q = f64::from(out.logprob).exp();
            assert!((p - q).abs() <= LOGPROB_TOL, "{label}: {what}: {q} vs {p}");
        }
        if v.params.is_greedy() {
            assert_eq!(out.token, survivors[0].0, "{label}: {what} greedy");
            assert_eq!(out.logprob, 0.0, "{label}: {what} greedy logprob");
            checked += 1;
            continue;
        }
        let u = DrawRng::new(seed).uniform(step);
        let (want, near) = cdf(survivors, u, 1e-9);
        if !near {
            assert_eq!(out.token, want, "{label}: {what}, seed {seed}, u = {u}");
            checked += 1;
        }
    }
    assert!(
        checked > SEEDS / 2,
        "{label}: {what}: too few draws checked"
    );
}

#[test]
fn sampler_matches_every_vector() {
    for v in load() {
        check_fast_path("Sampler", &v, |seed| sampler(&v, seed)?.sample(&v.logits));
    }
}

/// A `Sampler` for the vector, with its history and the given seed.
fn sampler(v: &Vector, seed: u64) -> Result<Sampler, Error> {
    let p = v.params.to_builder().seed(seed).logprobs(20).build()?;
    let mut s = Sampler::new(p, v.vocab_size)?;
    s.push_prompt(&v.prompt)?;
    v.generated.iter().try_for_each(|&t| s.accept(t))?;
    Ok(s)
}

#[test]
fn sampler_distribution_and_given_uniforms_match_every_vector() {
    for v in load() {
        let label = v.label();
        let mut dist = Vec::new();
        let result = sampler(&v, 0).and_then(|mut s| s.distribution(&v.logits, None, &mut dist));
        match &v.expected {
            Outcome::Error(_) => assert_eq!(result, Err(Error::NoCandidates), "{label}"),
            Outcome::Tokens { survivors, draws } => {
                result.unwrap_or_else(|e| panic!("{label}: {e}"));
                let got: Vec<TokenId> = dist.iter().map(|x| x.0).collect();
                let want: Vec<TokenId> = survivors.iter().map(|x| x.0).collect();
                assert_eq!(got, want, "{label}: survivors in draw order");
                for (&(id, p), &(_, q)) in survivors.iter().zip(&dist) {
                    assert!(
                        (p - q).abs() <= REFERENCE_TOL,
                        "{label}: token {id}: {q} vs {p}"
                    );
                }
                for &(u, token) in draws {
                    let mut s = sampler(&v, 0).unwrap();
                    let out = s.sample_with_uniform(&v.logits, None, u).unwrap();
                    assert_eq!(out.token, token, "{label}: u = {u}");
                    assert_eq!(s.history().generated().last(), Some(&token), "{label}");
                }
            }
        }
    }
}

#[test]
fn sampler_matches_every_vector_in_half_precision() {
    // Only the vectors whose logits are exact in bf16 and f16: the row type must not
    // change the token.
    for v in load() {
        let exact = |f: fn(f32) -> f32| v.logits.iter().all(|&x| x.is_nan() || f(x) == x);
        let bf = |x| logits::half::bf16::from_f32(x).to_f32();
        let hf = |x| logits::half::f16::from_f32(x).to_f32();
        if exact(bf) {
            let row: Vec<_> = v
                .logits
                .iter()
                .map(|&x| logits::half::bf16::from_f32(x))
                .collect();
            check_fast_path("Sampler<bf16>", &v, |seed| sampler(&v, seed)?.sample(&row));
        }
        if exact(hf) {
            let row: Vec<_> = v
                .logits
                .iter()
                .map(|&x| logits::half::f16::from_f32(x))
                .collect();
            check_fast_path("Sampler<f16>", &v, |seed| sampler(&v, seed)?.sample(&row));
        }
    }
}

/// The documented default order as an explicit chain.
fn default_chain(p: &SamplingParams, vocab: usize, seed: u64) -> Result<Chain, Error> {
    let keep = p.min_tokens_to_keep();
    let mut penalties = Penalties::new(
        p.repetition_penalty(),
        p.frequency_penalty(),
        p.presence_penalty(),
    )?
    .penalize_prompt(p.penalize_prompt());
    if let Some(n) = p.penalty_window() {
        penalties = penalties.window(n);
    }
    let mut b = Chain::builder(vocab)
        .stage(LogitBias::new(p.logit_bias().iter().copied())?)
        .stage(penalties);
    if !p.is_greedy() {
        b = b.stage(Temperature::new(p.temperature())?);
    }
    if let Some(k) = p.top_k() {
        b = b.stage(TopK::new(k)?.min_keep(keep));
    }
    b = b
        .stage(TopP::new(p.top_p())?.min_keep(keep))
        .stage(MinP::new(p.min_p())?.min_keep(keep));
    b = if p.is_greedy() { b.greedy() } else { b.draw() };
    b.seed(seed).logprobs(20).build()
}

#[test]
fn default_order_chain_matches_every_vector() {
    for v in load() {
        check_fast_path("Chain", &v, |seed| {
            let mut c = default_chain(&v.params, v.vocab_size, seed)?;
            c.push_prompt(&v.prompt)?;
            v.generated.iter().try_for_each(|&t| c.accept(t))?;
            c.sample(&v.logits)
        });
    }
}

/// Numbers equal within `1e-12` (relative), everything else exactly.
fn same_json(a: &Value, b: &Value, at: &str) -> Result<(), String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            if (x - y).abs() <= 1e-12 * x.abs().max(y.abs()) || x == y {
                Ok(())
            } else {
                Err(format!("{at}: {x} vs {y}"))
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .try_for_each(|(i, (x, y))| same_json(x, y, &format!("{at}[{i}]"))),
        (Value::Object(x), Value::Object(y)) if x.len() == y.len() => {
            x.iter().try_for_each(|(k, v)| match y.get(k) {
                Some(w) => same_json(v, w, &format!("{at}.{k}")),
                None => Err(format!("{at}: no key {k}")),
            })
        }
        _ if a == b => Ok(()),
        _ => Err(format!("{at}: {a} vs {b}")),
    }
}

#[test]
fn committed_vectors_are_what_the_generator_writes() {
    let out = std::env::temp_dir().join(format!("logits-vectors-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let status = std::process::Command::new("python3")
        .arg(dir().join("generate.py"))
        .arg(&out)
        .status();
    let Ok(status) = status else {
        eprintln!("python3 is not available: the generator check is skipped");
        return;
    };
    assert!(status.success(), "generate.py failed");
    let mut compared = 0;
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let read = |p: &Path| -> Value {
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
        };
        let committed = dir().join(&name);
        assert!(committed.exists(), "{name} is generated but not committed");
        same_json(&read(&committed), &read(&path), &name)
            .unwrap_or_else(|e| panic!("edit generate.py, not the JSON: {e}"));
        compared += 1;
    }
    let committed = std::fs::read_dir(dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    assert_eq!(
        compared, committed,
        "a committed vector file has no generator"
    );
    std::fs::remove_dir_all(&out).unwrap();
}
