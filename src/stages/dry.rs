//! DRY, "don't repeat yourself" (p-e-w, oobabooga/text-generation-webui#5677), with
//! the semantics of llama.cpp's and koboldcpp's implementation.

use std::sync::Mutex;

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::TokenId;

/// `ln(f32::MAX)`, llama.cpp's guard against `base^exponent` overflowing.
const FLOAT_MAX_LOG: f64 = 88.722_839_1;

/// Per-call buffers, reused.
#[derive(Debug, Default)]
struct Scratch {
    /// Z-array of the reversed window.
    z: Vec<usize>,
    /// `(token, repeat length)` of every token that would extend a repeat.
    hits: Vec<(TokenId, usize)>,
}

impl Clone for Scratch {
    /// Empty buffers of the same capacity, so that a clone allocates no more per step
    /// than the original.
    fn clone(&self) -> Self {
        Scratch {
            z: Vec::with_capacity(self.z.capacity()),
            hits: Vec::with_capacity(self.hits.capacity()),
        }
    }
}

/// `base^e` by squaring, in `f64` (IEEE multiplications only, so identical everywhere).
fn pow_exact(base: f64, mut e: usize) -> f64 {
    let (mut acc, mut b) = (1.0f64, base);
    while e > 0 {
        if e & 1 == 1 {
            acc *= b;
        }
        b *= b;
        e >>= 1;
    }
    acc
}

/// The DRY penalty (llama.cpp `dry_multiplier`, `dry_base`, `dry_allowed_length`,
/// `dry_penalty_last_n`, `dry_sequence_breakers`).
///
/// Let `x` be the last `window` tokens of the history (prompt and generated; all of it
/// when no window is set) and `n` its length. For every earlier position `j < n - 1`,
/// `len(j)` is the length of the longest common suffix of `x[..=j]` and `x` (how long a
/// run ending at `j` repeats the run ending now), capped at `limit`, the number of
/// tokens after the last sequence breaker in `x` (so a repeat never spans a breaker). If
/// `len(j) >= allowed_length`, emitting `x[j + 1]` would extend the repeat, and that
/// token is penalised by
///
/// ```text
/// l -= multiplier * base^(len - allowed_length)
/// ```
///
/// with `len` the largest such length for that token and the exponent capped at
/// `floor(88.7228391 / ln base)` when `base > 1.000001` (llama.cpp's overflow guard).
/// Tokens that are single-token sequence breakers are never penalised. The power is
/// computed by squaring in `f64`, then rounded to `f32`.
///
/// Sequence breakers are token-id sequences (the model-free form of llama.cpp's
/// strings, which it tokenises as head token plus tail): a breaker `[h, t1, t2]` ends a
/// repeat where the window contains `h, t1, t2`. The nearest breaker from the end sets
/// `limit`; when `limit < allowed_length`, nothing is penalised.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor).
///
/// - **Defaults** (llama.cpp): `multiplier = 0` (off), `base = 1.75`,
///   `allowed_length = 2`, window 64 (`-1` there = the context size; here, no window),
///   breakers `"\n" ":" "\"" "*"` (tokenise them and pass the ids).
/// - **Edge cases**: `n <= allowed_length`: nothing penalised; `multiplier = 0` or a
///   `0` window: off; a token id beyond the row is ignored.
/// - **Cost**: `O(n)` per step (the reverse Z-algorithm), plus a sort of the hits; no
///   allocation once the buffers have grown to the window, or, without a window, to
///   the history that [`Chain::reserve`](crate::Chain::reserve) or
///   [`Sampler::reserve`](crate::Sampler::reserve) made room for.
///
/// # Example
/// ```
/// use logits::{Chain, Dry};
///
/// // "1 2 3 1 2": continuing with 3 would repeat "1 2 3" (length 2 >= allowed 2).
/// let mut chain = Chain::builder(5)
///     .stage(Dry::new(5.0, 1.75, 2)?)
///     .greedy()
///     .build()?;
/// chain.push_prompt(&[1, 2, 3, 1, 2])?;
/// let out = chain.sample(&[0.0f32, 0.0, 0.0, 4.0, 3.0])?;
/// assert_eq!(out.token, 4); // 3 lost 5.0
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Debug)]
pub struct Dry {
    multiplier: f32,
    base: f32,
    allowed_length: usize,
    window: Option<usize>,
    /// Breakers sorted by head token.
    breakers: Vec<Vec<TokenId>>,
    scratch: Mutex<Scratch>,
}

impl Clone for Dry {
    /// A copy with scratch of its own.
    fn clone(&self) -> Self {
        let scratch = self
            .scratch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Dry {
            multiplier: self.multiplier,
            base: self.base,
            allowed_length: self.allowed_length,
            window: self.window,
            breakers: self.breakers.clone(),
            scratch: Mutex::new(scratch),
        }
    }
}

impl Dry {
    /// DRY with `multiplier`, `base` and `allowed_length`, no sequence breakers and no
    /// window.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] unless `multiplier` is finite and `>= 0` and `base`
    /// is finite and `>= 1`.
    pub fn new(multiplier: f32, base: f32, allowed_length: usize) -> Result<Self, Error> {
        if !(multiplier.is_finite() && multiplier >= 0.0) {
            return Err(Error::InvalidParameter {
                name: "dry_multiplier",
                value: multiplier.into(),
                expected: "a finite value >= 0 (0 is off)",
            });
        }
        if !(base.is_finite() && base >= 1.0) {
            return Err(Error::InvalidParameter {
                name: "dry_base",
                value: base.into(),
                expected: "a finite value >= 1",
            });
        }
        Ok(Dry {
            multiplier,
            base,
            allowed_length,
            window: None,
            breakers: Vec::new(),
            scratch: Mutex::new(Scratch::default()),
        })
    }

    /// Only the last `n` tokens of the history count (llama.cpp `dry_penalty_last_n`;
    /// `0` turns DRY off). The scratch buffers for a window of up to 65,536 tokens are
    /// reserved here, so a warm stage never allocates as the history grows.
    pub fn window(mut self, n: usize) -> Self {
        self.window = Some(n);
        let reserve = n.min(1 << 16);
        if let Ok(s) = self.scratch.get_mut() {
            s.z.reserve(reserve);
            s.hits.reserve(reserve);
        }
        self
    }

    /// Sizes the scratch buffers for a history of `history_len` tokens (the window's
    /// length at most).
    fn reserve_for(&mut self, history_len: usize) -> Result<(), Error> {
        let n = self.window.map_or(history_len, |w| w.min(history_len));
        let s = self.scratch.get_mut().unwrap_or_else(|e| e.into_inner());
        let oom = |_| Error::OutOfMemory {
            name: "history_len",
            value: history_len,
        };
        crate::scratch::reserve_total(&mut s.z, n).map_err(oom)?;
        crate::scratch::reserve_total(&mut s.hits, n).map_err(oom)
    }

    /// The sequence breakers, as token-id sequences. Replaces any earlier list.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for an empty sequence.
    pub fn sequence_breakers<I, S>(mut self, breakers: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<[TokenId]>,
    {
        self.breakers.clear();
        for (i, b) in breakers.into_iter().enumerate() {
            let b = b.as_ref();
            if b.is_empty() {
                return Err(Error::InvalidParameter {
                    name: "dry_sequence_breakers",
                    value: i as f64,
                    expected: "non-empty token sequences (value: index of the empty one)",
                });
            }
            self.breakers.push(b.to_vec());
        }
        self.breakers.sort();
        self.breakers.dedup();
        Ok(self)
    }

    fn breakers_with_head(&self, head: TokenId) -> &[Vec<TokenId>] {
        let lo = self.breakers.partition_point(|b| b[0] < head);
        let hi = self.breakers.partition_point(|b| b[0] <= head);
        &self.breakers[lo..hi]
    }

    fn is_single_breaker(&self, token: TokenId) -> bool {
        self.breakers_with_head(token).iter().any(|b| b.len() == 1)
    }

    /// The penalty for a repeat of length `len >= allowed_length`, as `f32`.
    fn penalty(&self, len: usize) -> f32 {
        let mut e = len - self.allowed_length;
        let base = f64::from(self.base);
        if self.base > 1.000_001 {
            let max_e = (FLOAT_MAX_LOG / base.ln()) as usize;
            e = e.min(max_e);
        }
        (f64::from(self.multiplier) * pow_exact(base, e)) as f32
    }

    /// Fills `s.hits` with `(token, max repeat length)`, sorted by token, for the
    /// history `tokens`.
    fn find(&self, tokens: &[TokenId], s: &mut Scratch) {
        s.hits.clear();
        if self.multiplier == 0.0 {
            return;
        }
        let x = match self.window {
            Some(w) if w < tokens.len() => &tokens[tokens.len() - w..],
            _ => tokens,
        };
        let n = x.len();
        if n <= self.allowed_length {
            return;
        }
        // Step 1: the nearest sequence breaker from the end caps the repeat length.
        let mut limit = n;
        for i in 0..n {
            let mut longest = None;
            for b in self.breakers_with_head(x[n - 1 - i]) {
                let tail = &b[1..];
                if tail.len() <= i
                    && longest.is_none_or(|m| tail.len() > m)
                    && tail.iter().enumerate().all(|(o, &t)| t == x[n - i + o])
                {
                    longest = Some(tail.len());
                }
            }
            if let Some(m) = longest {
                limit = i - m;
                break;
            }
        }
        if limit < self.allowed_length {
            return;
        }
        // Step 2: Z-array of the reversed window r(i) = x[n - 1 - i]: z[k] is the
        // length of the common suffix of x and x[..n - k].
        let r = |i: usize| x[n - 1 - i];
        s.z.clear();
        s.z.resize(n, 0);
        let (mut lt, mut rt) = (0usize, 0usize);
        for k in 1..n {
            let mut zk = if k < rt { (rt - k).min(s.z[k - lt]) } else { 0 };
            while k + zk < n && r(zk) == r(k + zk) {
                zk += 1;
            }
            s.z[k] = zk;
            if k + zk > rt {
                lt = k;
                rt = k + zk;
            }
        }
        // Step 3: the token after each long enough repeat, with its length.
        for k in 1..n {
            let len = s.z[k].min(limit);
            if len >= self.allowed_length {
                s.hits.push((x[n - k], len));
            }
        }
        s.hits
            .sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        s.hits.dedup_by_key(|h| h.0);
    }
}

impl Stage for Dry {
    fn name(&self) -> &'static str {
        "dry"
    }

    /// Sizes the buffers of the repeat search for `history_len` tokens (the window's
    /// length at most).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when they cannot be allocated.
    fn reserve(&mut self, history_len: usize) -> Result<(), Error> {
        self.reserve_for(history_len)
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        let mut scratch = std::mem::take(self.scratch.get_mut().unwrap_or_else(|e| e.into_inner()));
        self.find(ctx.history.tokens(), &mut scratch);
        for &(token, len) in &scratch.hits {
            if self.is_single_breaker(token) {
                continue;
            }
            if let Some(l) = c.logit_of_mut(token) {
                *l -= self.penalty(len);
            }
        }
        *self.scratch.get_mut().unwrap_or_else(|e| e.into_inner()) = scratch;
        Ok(())
    }
}

impl LogitsProcessor for Dry {
    /// As [`Stage::reserve`] for `Dry`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the buffers cannot be allocated.
    fn reserve(&mut self, history_len: usize) -> Result<(), Error> {
        self.reserve_for(history_len)
    }

    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        self.find(history.tokens(), &mut scratch);
        for &(token, len) in &scratch.hits {
            if self.is_single_breaker(token) {
                continue;
            }
            if let Some(l) = logits.get_mut(token as usize) {
                *l -= self.penalty(len);
            }
        }
        Ok(())
    }
}
