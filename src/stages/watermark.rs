//! The greenlist watermark of Kirchenbauer et al. (arXiv:2301.10226), as Hugging Face's
//! `WatermarkLogitsProcessor` (`watermarking_config`, `"lefthash"`), and its detector.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::TokenId;

/// SplitMix64's increment (the golden ratio in 64 bits).
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The parameters the processor and the detector share.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Params {
    vocab_size: usize,
    greenlist_size: usize,
    ratio: f32,
    key: u64,
    context_width: usize,
}

impl Params {
    fn new(vocab_size: usize, ratio: f32, key: u64, context_width: usize) -> Result<Self, Error> {
        crate::check_vocab_size(vocab_size)?;
        if !(ratio > 0.0 && ratio < 1.0) {
            return Err(Error::InvalidParameter {
                name: "greenlist_ratio",
                value: ratio.into(),
                expected: "a value in (0, 1)",
            });
        }
        if context_width == 0 {
            return Err(Error::InvalidParameter {
                name: "context_width",
                value: 0.0,
                expected: "an integer >= 1",
            });
        }
        Ok(Params {
            vocab_size,
            // transformers: int(vocab_size * greenlist_ratio).
            greenlist_size: (vocab_size as f64 * f64::from(ratio)) as usize,
            ratio,
            key,
            context_width,
        })
    }

    /// The greenlist's seed for the context `tokens` (the last `context_width` tokens
    /// before the scored one).
    fn seed(&self, context: &[TokenId]) -> u64 {
        context
            .iter()
            .fold(self.key, |s, &t| mix(s ^ u64::from(t).wrapping_add(GOLDEN)))
    }

    /// Writes the greenlist of `seed` into `perm[..greenlist_size]` (`perm` holds
    /// `vocab_size` entries): a partial Fisher-Yates shuffle of `0..vocab_size` driven
    /// by SplitMix64 from `seed`.
    fn greenlist<'p>(&self, seed: u64, perm: &'p mut [TokenId]) -> &'p [TokenId] {
        let n = self.vocab_size;
        for (i, p) in perm.iter_mut().enumerate() {
            *p = i as TokenId;
        }
        let mut state = seed;
        for i in 0..self.greenlist_size {
            state = state.wrapping_add(GOLDEN);
            let r = mix(state);
            let j = i + ((u128::from(r) * (n - i) as u128) >> 64) as usize;
            perm.swap(i, j);
        }
        &perm[..self.greenlist_size]
    }
}

/// Allocates a permutation buffer of `n` ids.
fn buffer(n: usize) -> Result<Vec<TokenId>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        name: "vocab_size",
        value: n,
    })?;
    v.resize(n, 0);
    Ok(v)
}

/// Adds `bias` to a pseudo-random "green" part of the vocabulary chosen from the last
/// token (Hugging Face `WatermarkLogitsProcessor` with `seeding_scheme = "lefthash"`;
/// Kirchenbauer et al., Algorithm 2), so that the text it helps generate can later be
/// recognised by [`WatermarkDetector`] from the tokens alone.
///
/// At each step the last `context_width` tokens of the history (prompt and generated)
/// seed a greenlist of `int(vocab_size * greenlist_ratio)` token ids, and each green
/// token's logit gets `+ bias`. With fewer tokens in the history than
/// `context_width`, nothing changes (transformers skips the step the same way).
///
/// The greenlist is this crate's own and is fixed by this documentation, so the same
/// key, context and vocabulary size give the same greenlist on every platform and in
/// every release (transformers draws it with `torch.randperm`, which no other library
/// reproduces, so the two watermarks do not detect each other):
///
/// - SplitMix64: `mix(z)`: `z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9`,
///   `z = (z ^ z >> 27) * 0x94D049BB133111EB`, `z ^ z >> 31`, wrapping `u64`
///   arithmetic; `G = 0x9E3779B97F4A7C15`.
/// - Seed: `s = hashing_key`, then for each context token `t`, oldest first,
///   `s = mix(s ^ (t + G))`.
/// - Greenlist: start from `perm = [0, 1, .., vocab_size - 1]` and a state `x = s`; for
///   `i` in `0..greenlist_size`: `x += G`, `r = mix(x)`,
///   `j = i + ((r * (vocab_size - i)) >> 64)` (a 128-bit product), swap `perm[i]` and
///   `perm[j]`. The greenlist is `perm[..greenlist_size]`.
///
/// With the default `context_width = 1` this is transformers' `lefthash` scheme (its
/// seed is `hashing_key * last_token`); a wider context hashes more tokens, which
/// makes the watermark harder to wash out by editing single tokens. transformers'
/// `selfhash` scheme is not offered.
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor); the draw stays the
/// chain's own, seeded and reproducible.
///
/// - **Defaults** (transformers'): `greenlist_ratio = 0.25`, `bias = 2.0`,
///   `hashing_key = 15485863` (use a private key in deployment), `context_width = 1`.
/// - **Valid**: `vocab_size` in `1..=MAX_VOCAB_SIZE`; `0 < greenlist_ratio < 1`;
///   `bias` finite; `context_width >= 1`.
/// - **Edge cases**: a row shorter than `vocab_size` gives
///   [`Error::TokenOutOfRange`] (for the id `vocab_size - 1`) when the chain is built and
///   as a processor; tokens past `vocab_size` (padding, or a tokenizer's added tokens
///   beyond the size given) are never green.
/// - **Cost**: `O(vocab_size)` per step to lay out the permutation, plus
///   `greenlist_size` swaps; the buffers (`vocab_size` ids and bits) are allocated by
///   [`new`](Self::new), nothing per step.
///
/// # Example
/// ```
/// use logits::{Chain, Watermark, WatermarkDetector};
///
/// let wm = Watermark::new(1000)?.bias(6.0)?;
/// let mut chain = Chain::builder(1000).stage(wm.clone()).draw().seed(7).build()?;
/// chain.push_prompt(&[1, 2, 3])?;
/// let flat = vec![0.0f32; 1000];
/// for _ in 0..40 {
///     chain.sample(&flat)?;
/// }
/// let mut detector = WatermarkDetector::new(&wm)?;
/// let d = detector.detect(chain.history().tokens())?;
/// assert_eq!(d.tokens_scored, 42);
/// assert!(d.z_score > 4.0, "{d:?}");
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Watermark {
    params: Params,
    bias: f32,
    perm: Vec<TokenId>,
    /// One bit per id, all clear between steps (the green ids, after a cut).
    green: Vec<u64>,
}

impl Watermark {
    /// The watermark over a vocabulary of `vocab_size` tokens (transformers: the
    /// tokenizer's `vocab_size`), with transformers' defaults.
    ///
    /// # Errors
    /// [`Error::EmptyVocabulary`] for 0; [`Error::InvalidParameter`] naming `vocab_size`
    /// beyond [`MAX_VOCAB_SIZE`](crate::MAX_VOCAB_SIZE); [`Error::OutOfMemory`] when the
    /// `vocab_size` buffer cannot be allocated.
    pub fn new(vocab_size: usize) -> Result<Self, Error> {
        let params = Params::new(vocab_size, 0.25, 15_485_863, 1)?;
        let mut green = Vec::new();
        let words = vocab_size.div_ceil(64);
        green
            .try_reserve_exact(words)
            .map_err(|_| Error::OutOfMemory {
                name: "vocab_size",
                value: vocab_size,
            })?;
        green.resize(words, 0);
        Ok(Watermark {
            params,
            bias: 2.0,
            perm: buffer(vocab_size)?,
            green,
        })
    }

    /// The share of the vocabulary that is green (default 0.25).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `greenlist_ratio` unless `0 < ratio < 1`.
    pub fn greenlist_ratio(mut self, ratio: f32) -> Result<Self, Error> {
        let p = self.params;
        self.params = Params::new(p.vocab_size, ratio, p.key, p.context_width)?;
        Ok(self)
    }

    /// The bias added to green tokens (default 2.0; transformers suggests 0.5 to 2.0).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `bias` unless it is finite.
    pub fn bias(mut self, bias: f32) -> Result<Self, Error> {
        if !bias.is_finite() {
            return Err(Error::InvalidParameter {
                name: "bias",
                value: bias.into(),
                expected: "a finite value",
            });
        }
        self.bias = bias;
        Ok(self)
    }

    /// The private key of the greenlists (default 15485863, transformers' default).
    pub fn hashing_key(mut self, key: u64) -> Self {
        self.params.key = key;
        self
    }

    /// How many previous tokens seed a greenlist (default 1).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `context_width` when it is 0.
    pub fn context_width(mut self, width: usize) -> Result<Self, Error> {
        let p = self.params;
        self.params = Params::new(p.vocab_size, p.ratio, p.key, width)?;
        Ok(self)
    }

    /// The number of green tokens at each step: `int(vocab_size * greenlist_ratio)`.
    pub fn greenlist_size(&self) -> usize {
        self.params.greenlist_size
    }

    /// The greenlist that follows `context` (its last `context_width` tokens), in the
    /// order drawn; `None` when `context` is shorter than `context_width`.
    pub fn greenlist(&mut self, context: &[TokenId]) -> Option<&[TokenId]> {
        let g = self.params_greenlist(context)?;
        Some(&self.perm[..g])
    }

    /// Lays out the greenlist of `context` in `perm[..g]` and returns `g`.
    fn params_greenlist(&mut self, context: &[TokenId]) -> Option<usize> {
        let w = self.params.context_width;
        let ctx = context.get(context.len().checked_sub(w)?..)?;
        let seed = self.params.seed(ctx);
        Some(self.params.greenlist(seed, &mut self.perm).len())
    }

    fn check(&self, vocab_size: usize) -> Result<(), Error> {
        if self.params.vocab_size > vocab_size {
            return Err(Error::TokenOutOfRange {
                id: (self.params.vocab_size - 1) as TokenId,
                vocab_size,
            });
        }
        Ok(())
    }
}

impl Stage for Watermark {
    fn name(&self) -> &'static str {
        "watermark"
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] when the watermark's `vocab_size` exceeds the
    /// chain's.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.check(vocab_size)
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if c.is_dense() {
            return self.process(c.logits_mut(), &ctx.history);
        }
        let bias = self.bias;
        let Some(green) = self.params_greenlist(ctx.history.tokens()) else {
            return Ok(());
        };
        // Mark the green ids in the bit set, adjust the candidates, clear the marks.
        for &id in &self.perm[..green] {
            self.green[id as usize / 64] |= 1 << (id % 64);
        }
        let marks = &self.green;
        let (ids, logits) = c.ids_and_logits_mut();
        for (&id, l) in ids.iter().zip(logits) {
            if marks
                .get(id as usize / 64)
                .is_some_and(|w| w >> (id % 64) & 1 == 1)
            {
                *l += bias;
            }
        }
        for &id in &self.perm[..green] {
            self.green[id as usize / 64] = 0;
        }
        Ok(())
    }
}

impl LogitsProcessor for Watermark {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        self.check(logits.len())?;
        let bias = self.bias;
        if let Some(green) = self.greenlist(history.tokens()) {
            for &id in green {
                logits[id as usize] += bias;
            }
        }
        Ok(())
    }
}

/// The result of [`WatermarkDetector::detect`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WatermarkDetection {
    /// The tokens scored: every token after the first `context_width`.
    pub tokens_scored: usize,
    /// How many of them were green after their context.
    pub green_tokens: usize,
    /// `green_tokens / tokens_scored` (0 when nothing was scored).
    pub green_fraction: f64,
    /// `(green_tokens - g * T) / sqrt(T * g * (1 - g))` with `T = tokens_scored` and `g`
    /// the greenlist ratio: about standard normal for text written without the key, large
    /// for watermarked text (0 when nothing was scored).
    pub z_score: f64,
}

impl WatermarkDetection {
    /// Whether the z-score exceeds `z_threshold` (transformers' default is 3.0, a
    /// one-sided false-positive rate of about 0.13% for text without the watermark).
    pub fn is_watermarked(&self, z_threshold: f64) -> bool {
        self.z_score > z_threshold
    }
}

/// Detects [`Watermark`]'s greenlist bias in a token sequence (Hugging Face
/// `WatermarkDetector`, without its repeated n-gram filter): each token after the first
/// `context_width` is green or not under the greenlist its context seeds, and the count
/// of green tokens is compared with what chance gives (a one-proportion z-test).
///
/// It needs the watermark's parameters (vocabulary size, ratio, key, context width), not
/// the model. Score the generated tokens with the last `context_width` prompt tokens in
/// front of them, or the whole sequence.
///
/// - **Cost**: `O(vocab_size)` per scored token; the `vocab_size` buffer is allocated
///   by [`new`](Self::new).
///
/// See [`Watermark`] for an example.
#[derive(Clone, Debug, PartialEq)]
pub struct WatermarkDetector {
    params: Params,
    perm: Vec<TokenId>,
}

impl WatermarkDetector {
    /// A detector for `watermark`'s greenlists.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the `vocab_size` buffer cannot be allocated.
    pub fn new(watermark: &Watermark) -> Result<Self, Error> {
        Ok(WatermarkDetector {
            params: watermark.params,
            perm: buffer(watermark.params.vocab_size)?,
        })
    }

    /// Scores `tokens`.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] for a token `>= vocab_size`.
    pub fn detect(&mut self, tokens: &[TokenId]) -> Result<WatermarkDetection, Error> {
        let p = self.params;
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= p.vocab_size) {
            return Err(Error::TokenOutOfRange {
                id,
                vocab_size: p.vocab_size,
            });
        }
        let w = p.context_width;
        let (mut scored, mut green) = (0usize, 0usize);
        for i in w..tokens.len() {
            let seed = p.seed(&tokens[i - w..i]);
            let list = p.greenlist(seed, &mut self.perm);
            scored += 1;
            if list.contains(&tokens[i]) {
                green += 1;
            }
        }
        if scored == 0 {
            return Ok(WatermarkDetection {
                tokens_scored: 0,
                green_tokens: 0,
                green_fraction: 0.0,
                z_score: 0.0,
            });
        }
        let (t, g) = (scored as f64, f64::from(p.ratio));
        Ok(WatermarkDetection {
            tokens_scored: scored,
            green_tokens: green,
            green_fraction: green as f64 / t,
            z_score: (green as f64 - g * t) / (t * g * (1.0 - g)).sqrt(),
        })
    }
}
