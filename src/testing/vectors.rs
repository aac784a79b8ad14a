//! The conformance vectors, shipped with the crate: load them and run a sampler over every
//! case.
//!
//! The vectors (`tests/data/vectors/*.json` in the repository, format in the README
//! there) are the crate's semantic test cases as data: a row, its vocabulary size,
//! parameters and a history; the surviving tokens with their final probabilities, in
//! draw order; the token to draw for given uniforms. Their expected values were computed
//! by an implementation of the documented semantics that never runs the crate, so they
//! pin the semantics rather than this crate's agreement with itself.
//!
//! The files are embedded in the library ([`all`] needs no file system and works from a
//! crates.io dependency); [`parse`] reads another file of the same format. Every file
//! states its format version, [`FORMAT`], and the loader refuses any other.
//!
//! **Draw order: adjusted logit descending, ties to the lower token id.** The logit is
//! the one after bias and penalties, before temperature; `-0.0` and `0.0` are equal. The
//! order never depends on weights or probabilities, so tokens whose weights underflow to
//! 0 (or round to equal values) keep their logit order.
//!
//! # Example: a sampler of your own over every vector
//! ```
//! use logits::testing::vectors;
//! use logits::{Error, History, TokenId};
//!
//! /// Stands in for the implementation under test: here, the crate's reference.
//! fn my_distribution(v: &vectors::Vector) -> Result<Vec<(TokenId, f64)>, Error> {
//!     let tokens = v.history_tokens();
//!     let history = History::new(&tokens, v.prompt.len());
//!     let adjusted = logits::reference::adjust(&v.logits, v.vocab_size, &v.params, &history, None)?;
//!     let survivors = logits::reference::survivors(&adjusted, &v.params)?;
//!     Ok(logits::reference::normalize(&survivors))
//! }
//!
//! let report = vectors::run(|v| {
//!     match my_distribution(v) {
//!         Err(Error::NoCandidates) => v.check_no_candidates(),
//!         Err(e) => Err(vectors::failure(format!("refused the input: {e}"))),
//!         Ok(dist) => {
//!             v.check_distribution(&dist, 1e-9)?;
//!             for &(u, _) in v.draws() {
//!                 // Your sampler's token for the uniform u goes here.
//!                 let token = v.token_for(u).unwrap();
//!                 v.check_draw(u, token)?;
//!             }
//!             Ok(())
//!         }
//!     }
//! });
//! assert!(report.cases() >= 40);
//! report.assert_ok();
//! ```

use std::fmt;

use crate::error::Error;
use crate::history::History;
use crate::params::SamplingParams;
use crate::testing::properties::{compare_distribution, Mismatch};
use crate::TokenId;

/// The format version every vector file states in its `"format"` field, and the only one
/// this loader reads. It changes when the meaning of a field changes or a field is added
/// that an implementation must not ignore.
pub const FORMAT: &str = "logits-conformance/1";

/// The vector files embedded in the crate: `(file name, contents)`.
const FILES: [(&str, &str); 11] = [
    (
        "combined.json",
        include_str!("../../tests/data/vectors/combined.json"),
    ),
    (
        "logit_bias.json",
        include_str!("../../tests/data/vectors/logit_bias.json"),
    ),
    (
        "min_p.json",
        include_str!("../../tests/data/vectors/min_p.json"),
    ),
    (
        "min_tokens_to_keep.json",
        include_str!("../../tests/data/vectors/min_tokens_to_keep.json"),
    ),
    (
        "penalties.json",
        include_str!("../../tests/data/vectors/penalties.json"),
    ),
    (
        "scale.json",
        include_str!("../../tests/data/vectors/scale.json"),
    ),
    (
        "temperature.json",
        include_str!("../../tests/data/vectors/temperature.json"),
    ),
    (
        "ties_and_edges.json",
        include_str!("../../tests/data/vectors/ties_and_edges.json"),
    ),
    (
        "top_k.json",
        include_str!("../../tests/data/vectors/top_k.json"),
    ),
    (
        "top_p.json",
        include_str!("../../tests/data/vectors/top_p.json"),
    ),
    (
        "worked_examples.json",
        include_str!("../../tests/data/vectors/worked_examples.json"),
    ),
];

/// The names of the embedded vector files, sorted.
pub fn file_names() -> impl Iterator<Item = &'static str> {
    FILES.iter().map(|&(name, _)| name)
}

/// What a vector expects of one step. A new kind of outcome would be a new [`FORMAT`].
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every token is banned: no token may be returned ([`Error::NoCandidates`]).
    NoCandidates,
    /// Tokens survive.
    Tokens {
        /// Every surviving token with its final probability, in draw order. Survivors
        /// whose probability underflows are listed too.
        survivors: Vec<(TokenId, f64)>,
        /// `(u, token)`: with the uniform `u` in `[0, 1)`, the token to draw (the first
        /// survivor in draw order whose cumulative probability exceeds `u`).
        draws: Vec<(f64, TokenId)>,
    },
}

/// One conformance vector: the input of one sampling step and its expected outcome.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Vector {
    /// The file it comes from, e.g. `top_p.json`.
    pub file: String,
    /// Its name, unique within the file.
    pub name: String,
    /// What it checks, in a sentence.
    pub description: String,
    /// The row; entries past `vocab_size` are padding (possibly NaN or `+inf`), never to
    /// be read.
    pub logits: Vec<f32>,
    /// The vocabulary size: the first `vocab_size` entries of `logits`.
    pub vocab_size: usize,
    /// The parameters.
    pub params: SamplingParams,
    /// The prompt's tokens (the penalties count them unless `penalize_prompt` is off).
    pub prompt: Vec<TokenId>,
    /// The generated tokens; the step is `generated.len()`.
    pub generated: Vec<TokenId>,
    /// What the step must give.
    pub expected: Outcome,
}

/// A vector that does not hold: its label (`file:name`) and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// `file:name` of the vector.
    pub label: String,
    /// The closure's error message.
    pub message: String,
}

/// The outcome of [`run`]: how many vectors ran and which of them failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    cases: usize,
    failures: Vec<Failure>,
}

impl Report {
    /// How many vectors ran.
    pub fn cases(&self) -> usize {
        self.cases
    }

    /// The vectors that failed, in the order they ran.
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }

    /// Whether every vector passed.
    pub fn is_ok(&self) -> bool {
        self.failures.is_empty()
    }

    /// Panics with every failure unless all vectors passed.
    ///
    /// # Panics
    /// When a vector failed, or when no vector ran.
    #[track_caller]
    pub fn assert_ok(&self) {
        assert!(self.cases > 0, "no conformance vector ran");
        assert!(self.is_ok(), "{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} conformance vectors failed",
            self.failures.len(),
            self.cases
        )?;
        for x in &self.failures {
            write!(f, "\n  {}: {}", x.label, x.message)?;
        }
        Ok(())
    }
}

/// A [`Mismatch`] with the given message, for a closure passed to [`run`] to return.
pub fn failure(message: impl Into<String>) -> Mismatch {
    Mismatch::new(message.into())
}

impl Vector {
    /// `file:name`.
    pub fn label(&self) -> String {
        format!("{}:{}", self.file, self.name)
    }

    /// The whole history, prompt then generated tokens, as [`History::new`] takes it
    /// (with `prompt.len()` as the prompt length).
    pub fn history_tokens(&self) -> Vec<TokenId> {
        let mut h = self.prompt.clone();
        h.extend(&self.generated);
        h
    }

    /// Runs `f` with the vector's [`History`].
    pub fn with_history<R>(&self, f: impl FnOnce(&History<'_>) -> R) -> R {
        let tokens = self.history_tokens();
        f(&History::new(&tokens, self.prompt.len()))
    }

    /// The expected survivors in draw order with their probabilities (empty when the
    /// vector expects no candidates).
    pub fn survivors(&self) -> &[(TokenId, f64)] {
        match &self.expected {
            Outcome::Tokens { survivors, .. } => survivors,
            Outcome::NoCandidates => &[],
        }
    }

    /// The expected `(u, token)` draws (empty when the vector expects no candidates).
    pub fn draws(&self) -> &[(f64, TokenId)] {
        match &self.expected {
            Outcome::Tokens { draws, .. } => draws,
            Outcome::NoCandidates => &[],
        }
    }

    /// The token the expected survivors give for the uniform `u` (inverse CDF in draw
    /// order, `cum > u`), `None` when the vector expects no candidates.
    pub fn token_for(&self, u: f64) -> Option<TokenId> {
        let survivors = self.survivors();
        let mut cum = 0.0;
        let mut last = None;
        for &(id, p) in survivors {
            if p > 0.0 {
                last = Some(id);
            }
            cum += p;
            if cum > u {
                return Some(id);
            }
        }
        last
    }

    /// Checks a final distribution against the expected survivors, with the rules of
    /// [`compare_distribution`]: the same tokens in draw order, probabilities within
    /// `tolerance`, survivors of probability exactly 0 optional.
    ///
    /// # Errors
    /// A [`Mismatch`] naming the difference, or saying that the vector expects no
    /// candidates.
    pub fn check_distribution(
        &self,
        actual: &[(TokenId, f64)],
        tolerance: f64,
    ) -> Result<(), Mismatch> {
        match &self.expected {
            Outcome::NoCandidates => Err(Mismatch::new(format!(
                "every token is banned, but the implementation returns {actual:?}"
            ))),
            Outcome::Tokens { survivors, .. } => compare_distribution(survivors, actual, tolerance),
        }
    }

    /// Checks the token an implementation draws for the uniform `u`. For the vector's
    /// own `(u, token)` pairs the expected token is exact; for another `u`, it is the
    /// inverse CDF of the expected survivors ([`token_for`](Self::token_for)).
    ///
    /// # Errors
    /// A [`Mismatch`] naming both tokens, or saying that the vector expects no
    /// candidates.
    pub fn check_draw(&self, u: f64, token: TokenId) -> Result<(), Mismatch> {
        let listed = self.draws().iter().find(|d| d.0 == u).map(|d| d.1);
        match listed.or_else(|| self.token_for(u)) {
            None => Err(Mismatch::new(format!(
                "every token is banned, but the implementation draws {token}"
            ))),
            Some(want) if want == token => Ok(()),
            Some(want) => Err(Mismatch::new(format!(
                "u = {u}: drew token {token}, the vector draws {want} (survivors {:?})",
                self.survivors()
            ))),
        }
    }

    /// Checks that the vector expects every token banned, for an implementation that
    /// refused the step with no candidates.
    ///
    /// # Errors
    /// A [`Mismatch`] when the vector expects survivors.
    pub fn check_no_candidates(&self) -> Result<(), Mismatch> {
        match self.expected {
            Outcome::NoCandidates => Ok(()),
            Outcome::Tokens { .. } => Err(Mismatch::new(format!(
                "the implementation finds no candidates, the vector expects {:?}",
                self.survivors()
            ))),
        }
    }
}

/// Runs `check` on every embedded vector ([`all`]) and reports every failure: a vector
/// fails when `check` returns an error or panics.
///
/// # Panics
/// If an embedded file does not parse, which the crate's own tests rule out.
pub fn run<E: fmt::Display>(check: impl FnMut(&Vector) -> Result<(), E>) -> Report {
    let vectors = all().unwrap_or_else(|e| panic!("the embedded vectors do not load: {e}"));
    run_on(&vectors, check)
}

/// Runs `check` on each of `vectors` and reports every failure: a vector fails when
/// `check` returns an error or panics.
pub fn run_on<E: fmt::Display>(
    vectors: &[Vector],
    mut check: impl FnMut(&Vector) -> Result<(), E>,
) -> Report {
    let mut report = Report::default();
    for v in vectors {
        report.cases += 1;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(v)));
        let message = match outcome {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(panic) => {
                let text = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic");
                format!("panicked: {text}")
            }
        };
        report.failures.push(Failure {
            label: v.label(),
            message,
        });
    }
    report
}

/// Every embedded vector, file by file ([`file_names`] order), each file's vectors in
/// their order.
///
/// # Errors
/// A [`LoadError`] if an embedded file does not parse (the crate's tests rule it out).
pub fn all() -> Result<Vec<Vector>, LoadError> {
    let mut out = Vec::new();
    for (name, text) in FILES {
        out.extend(parse(name, text)?);
    }
    Ok(out)
}

/// Why a vector file does not load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The file name given to [`parse`].
    pub file: String,
    /// What is wrong, and where.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.message)
    }
}

impl std::error::Error for LoadError {}

/// Parses one vector file, `text`, named `file` (for labels and messages).
///
/// # Errors
/// A [`LoadError`] for text that is not JSON, a `"format"` other than [`FORMAT`], a
/// missing or mistyped field, an unknown parameter, or parameters that
/// [`SamplingParams::builder`] refuses.
///
/// # Example
/// ```
/// use logits::testing::vectors;
///
/// let text = r#"{"format": "logits-conformance/1", "vectors": [{
///     "name": "two", "description": "", "logits": [0.0, "-inf"], "params": {},
///     "expected": {"survivors": [[0, 1.0]], "draws": [[0.5, 0]]}}]}"#;
/// let v = vectors::parse("mine.json", text)?;
/// assert_eq!(v[0].label(), "mine.json:two");
/// assert_eq!(v[0].logits[1], f32::NEG_INFINITY);
/// let other = text.replace("conformance/1", "conformance/2");
/// assert!(vectors::parse("mine.json", &other).is_err());
/// # Ok::<(), vectors::LoadError>(())
/// ```
pub fn parse(file: &str, text: &str) -> Result<Vec<Vector>, LoadError> {
    let fail = |message: String| LoadError {
        file: file.to_owned(),
        message,
    };
    let doc = json::parse(text).map_err(fail)?;
    match doc.get("format").and_then(json::Value::as_str) {
        Some(FORMAT) => {}
        Some(other) => {
            return Err(fail(format!(
                "format {other:?}: this loader reads only {FORMAT:?}"
            )))
        }
        None => return Err(fail("no \"format\" field".to_owned())),
    }
    let list = doc
        .get("vectors")
        .and_then(json::Value::as_array)
        .ok_or_else(|| fail("no \"vectors\" array".to_owned()))?;
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            vector(file, v).map_err(|e| {
                let name = v.get("name").and_then(json::Value::as_str).unwrap_or("?");
                fail(format!("vector {i} ({name}): {e}"))
            })
        })
        .collect()
}

fn vector(file: &str, v: &json::Value) -> Result<Vector, String> {
    let field = |key: &str| v.get(key).ok_or_else(|| format!("no {key:?}"));
    let string = |key: &str| {
        field(key)?
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("{key:?} is not a string"))
    };
    let logits = field("logits")?
        .as_array()
        .ok_or("\"logits\" is not an array")?
        .iter()
        .map(logit)
        .collect::<Result<Vec<f32>, _>>()?;
    let vocab_size = match v.get("vocab_size") {
        None => logits.len(),
        Some(n) => index(n)?,
    };
    let (prompt, generated) = match v.get("history") {
        None => (Vec::new(), Vec::new()),
        Some(h) => (
            h.get("prompt").map_or(Ok(Vec::new()), ids)?,
            h.get("generated").map_or(Ok(Vec::new()), ids)?,
        ),
    };
    let e = field("expected")?;
    let expected = match e.get("error") {
        Some(err) => match err.as_str() {
            Some("no_candidates") => Outcome::NoCandidates,
            _ => return Err(format!("unknown expected error {err:?}")),
        },
        None => {
            let pairs = |key: &str| {
                e.get(key)
                    .and_then(json::Value::as_array)
                    .ok_or_else(|| format!("no expected {key:?} array"))
            };
            let pair = |x: &json::Value| -> Result<(json::Value, json::Value), String> {
                match x.as_array() {
                    Some([a, b]) => Ok((a.clone(), b.clone())),
                    _ => Err(format!("{x:?} is not a pair")),
                }
            };
            let survivors = pairs("survivors")?
                .iter()
                .map(|x| {
                    let (id, p) = pair(x)?;
                    Ok((index(&id)? as TokenId, number(&p)?))
                })
                .collect::<Result<_, String>>()?;
            let draws = pairs("draws")?
                .iter()
                .map(|x| {
                    let (u, id) = pair(x)?;
                    Ok((number(&u)?, index(&id)? as TokenId))
                })
                .collect::<Result<_, String>>()?;
            Outcome::Tokens { survivors, draws }
        }
    };
    Ok(Vector {
        file: file.to_owned(),
        name: string("name")?,
        description: string("description").unwrap_or_default(),
        logits,
        vocab_size,
        params: params(field("params")?)?,
        prompt,
        generated,
        expected,
    })
}

/// A number as `f64`, or one of the strings `"-inf"`, `"inf"`, `"nan"`.
fn number(v: &json::Value) -> Result<f64, String> {
    match v {
        json::Value::Number(text) => text.parse().map_err(|_| format!("bad number {text}")),
        json::Value::String(s) => match s.as_str() {
            "-inf" => Ok(f64::NEG_INFINITY),
            "inf" => Ok(f64::INFINITY),
            "nan" => Ok(f64::NAN),
            other => Err(format!("unknown number string {other:?}")),
        },
        other => Err(format!("expected a number, got {other:?}")),
    }
}

/// A logit: the decimal text rounded once, to the nearest `f32`.
fn logit(v: &json::Value) -> Result<f32, String> {
    match v {
        json::Value::Number(text) => text.parse().map_err(|_| format!("bad number {text}")),
        other => number(other).map(|x| x as f32),
    }
}

/// A non-negative integer.
fn index(v: &json::Value) -> Result<usize, String> {
    match v {
        json::Value::Number(text) => text
            .parse()
            .map_err(|_| format!("{text} is not a non-negative integer")),
        other => Err(format!("expected an integer, got {other:?}")),
    }
}

fn ids(v: &json::Value) -> Result<Vec<TokenId>, String> {
    v.as_array()
        .ok_or_else(|| format!("{v:?} is not an array of ids"))?
        .iter()
        .map(|x| index(x).map(|i| i as TokenId))
        .collect()
}

fn params(v: &json::Value) -> Result<SamplingParams, String> {
    let json::Value::Object(fields) = v else {
        return Err("\"params\" is not an object".to_owned());
    };
    let mut b = SamplingParams::builder();
    for (key, x) in fields {
        let f = || number(x).map(|n| n as f32);
        b = match key.as_str() {
            "temperature" => b.temperature(f()?),
            "top_k" if x.is_null() => b.no_top_k(),
            "top_k" => b.top_k(index(x)?),
            "top_p" => b.top_p(f()?),
            "min_p" => b.min_p(f()?),
            "repetition_penalty" => b.repetition_penalty(f()?),
            "frequency_penalty" => b.frequency_penalty(f()?),
            "presence_penalty" => b.presence_penalty(f()?),
            "penalty_window" if x.is_null() => b,
            "penalty_window" => b.penalty_window(index(x)?),
            "penalize_prompt" => match x {
                json::Value::Bool(on) => b.penalize_prompt(*on),
                _ => return Err("\"penalize_prompt\" is not a boolean".to_owned()),
            },
            "min_tokens_to_keep" => b.min_tokens_to_keep(index(x)?),
            "logit_bias" => {
                let entries = x.as_array().ok_or("\"logit_bias\" is not an array")?;
                let mut b = b;
                for e in entries {
                    match e.as_array() {
                        Some([id, bias]) => {
                            b = b.logit_bias(index(id)? as TokenId, number(bias)? as f32);
                        }
                        _ => return Err(format!("bad logit_bias entry {e:?}")),
                    }
                }
                b
            }
            other => return Err(format!("unknown parameter {other:?}")),
        };
    }
    b.build()
        .map_err(|e: Error| format!("invalid parameters: {e}"))
}

/// A small JSON reader: enough for the vector files, with numbers kept as their text so
/// that logits round once, straight to `f32`.
mod json {
    #[derive(Clone, Debug, PartialEq)]
    pub(super) enum Value {
        Null,
        Bool(bool),
        Number(String),
        String(String),
        Array(Vec<Value>),
        Object(Vec<(String, Value)>),
    }

    impl Value {
        pub(super) fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
                _ => None,
            }
        }

        pub(super) fn as_str(&self) -> Option<&str> {
            match self {
                Value::String(s) => Some(s),
                _ => None,
            }
        }

        pub(super) fn as_array(&self) -> Option<&[Value]> {
            match self {
                Value::Array(a) => Some(a),
                _ => None,
            }
        }

        pub(super) fn is_null(&self) -> bool {
            *self == Value::Null
        }
    }

    pub(super) fn parse(text: &str) -> Result<Value, String> {
        let mut p = Parser {
            s: text.as_bytes(),
            at: 0,
        };
        let v = p.value()?;
        p.space();
        if p.at != p.s.len() {
            return Err(p.error("text after the document"));
        }
        Ok(v)
    }

    struct Parser<'a> {
        s: &'a [u8],
        at: usize,
    }

    impl Parser<'_> {
        fn error(&self, what: &str) -> String {
            let line = self.s[..self.at.min(self.s.len())]
                .iter()
                .filter(|&&c| c == b'\n')
                .count();
            format!("{what} at line {}", line + 1)
        }

        fn space(&mut self) {
            while self.s.get(self.at).is_some_and(|c| c.is_ascii_whitespace()) {
                self.at += 1;
            }
        }

        fn eat(&mut self, c: u8) -> bool {
            self.space();
            if self.s.get(self.at) == Some(&c) {
                self.at += 1;
                true
            } else {
                false
            }
        }

        fn expect(&mut self, c: u8) -> Result<(), String> {
            if self.eat(c) {
                Ok(())
            } else {
                Err(self.error(&format!("expected '{}'", c as char)))
            }
        }

        fn word(&mut self, w: &str, v: Value) -> Result<Value, String> {
            if self.s[self.at..].starts_with(w.as_bytes()) {
                self.at += w.len();
                Ok(v)
            } else {
                Err(self.error("unexpected word"))
            }
        }

        fn value(&mut self) -> Result<Value, String> {
            self.space();
            match self.s.get(self.at) {
                Some(b'{') => {
                    self.at += 1;
                    let mut fields = Vec::new();
                    if !self.eat(b'}') {
                        loop {
                            self.space();
                            let key = self.string()?;
                            self.expect(b':')?;
                            fields.push((key, self.value()?));
                            if self.eat(b'}') {
                                break;
                            }
                            self.expect(b',')?;
                        }
                    }
                    Ok(Value::Object(fields))
                }
                Some(b'[') => {
                    self.at += 1;
                    let mut items = Vec::new();
                    if !self.eat(b']') {
                        loop {
                            items.push(self.value()?);
                            if self.eat(b']') {
                                break;
                            }
                            self.expect(b',')?;
                        }
                    }
                    Ok(Value::Array(items))
                }
                Some(b'"') => self.string().map(Value::String),
                Some(b't') => self.word("true", Value::Bool(true)),
                Some(b'f') => self.word("false", Value::Bool(false)),
                Some(b'n') => self.word("null", Value::Null),
                Some(c) if *c == b'-' || c.is_ascii_digit() => {
                    let start = self.at;
                    while self
                        .s
                        .get(self.at)
                        .is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
                    {
                        self.at += 1;
                    }
                    let text = std::str::from_utf8(&self.s[start..self.at]).expect("ASCII");
                    Ok(Value::Number(text.to_owned()))
                }
                _ => Err(self.error("expected a value")),
            }
        }

        fn hex4(&mut self) -> Result<u32, String> {
            let digits = self
                .s
                .get(self.at..self.at + 4)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .ok_or_else(|| self.error("bad \\u escape"))?;
            self.at += 4;
            Ok(digits)
        }

        fn string(&mut self) -> Result<String, String> {
            if self.s.get(self.at) != Some(&b'"') {
                return Err(self.error("expected a string"));
            }
            self.at += 1;
            let mut out = Vec::new();
            loop {
                match self.s.get(self.at) {
                    None => return Err(self.error("unterminated string")),
                    Some(b'"') => {
                        self.at += 1;
                        break;
                    }
                    Some(b'\\') => {
                        let c = *self
                            .s
                            .get(self.at + 1)
                            .ok_or_else(|| self.error("unterminated string"))?;
                        self.at += 2;
                        let ch = match c {
                            b'"' => '"',
                            b'\\' => '\\',
                            b'/' => '/',
                            b'b' => '\u{8}',
                            b'f' => '\u{c}',
                            b'n' => '\n',
                            b'r' => '\r',
                            b't' => '\t',
                            b'u' => {
                                let hi = self.hex4()?;
                                let code = if (0xd800..0xdc00).contains(&hi)
                                    && self.s[self.at..].starts_with(b"\\u")
                                {
                                    self.at += 2;
                                    let lo = self.hex4()?;
                                    0x10000 + ((hi - 0xd800) << 10) + (lo.wrapping_sub(0xdc00))
                                } else {
                                    hi
                                };
                                char::from_u32(code).ok_or_else(|| self.error("bad \\u escape"))?
                            }
                            _ => return Err(self.error("bad escape")),
                        };
                        let mut buf = [0; 4];
                        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    }
                    Some(&c) => {
                        out.push(c);
                        self.at += 1;
                    }
                }
            }
            String::from_utf8(out).map_err(|_| self.error("a string is not UTF-8"))
        }
    }
}
