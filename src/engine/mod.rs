//! [`Engine`]: the one engine behind [`Sampler`](crate::Sampler) and
//! [`Chain`](crate::Chain).
//!
//! A plan (see [`Plan`]) splits a chain of stages in four: the leading adjustments the
//! engine knows (logit bias, penalties), which become patches over the caller's row; the
//! stages that need the whole row (a user's processor or stage, DRY, ...), run on a dense
//! `f32` copy only when there are any; the first cut group (temperature, top-k, top-p,
//! min-p in that order), which runs on the shared kernels (selection, histogram,
//! vectorised mass, masks read as marks, `f16`/`bf16` converted inside the passes); and
//! the rest, which runs on the compact candidate set the first cut leaves. A `Sampler` is
//! the plan its [`SamplingParams`] describe.

pub(crate) mod candidates;
pub(crate) mod chain;
pub(crate) mod processor;
pub(crate) mod sampler;
pub(crate) mod scratch;
pub(crate) mod sequence_sampler;

use crate::candidates::Candidates;
use crate::chain::lower::{Floor, Lowering, XtcRule};
use crate::chain::{Stage, StageContext};
use crate::element::Logit;
use crate::error::Error;
use crate::histogram::{Frame, BUCKETS, LAST};
use crate::history::Sequence;
use crate::kernels::exact_sum::{self, ExactSum};
use crate::mask::TokenMask;
use crate::params::SamplingParams;
use crate::rng::DrawRng;
use crate::sample::Sample;
use crate::scratch::Scratch;
use crate::TokenId;
use crate::{adjust, draw, flat, greedy, histogram, logprobs, nucleus, penalize, select};

/// Min-p alone sorts the tokens near its threshold directly when there are at most this
/// many; beyond, it goes through the histogram. (For the precise weights: the fast
/// ones take [`MIN_P_NEAR`] and [`flat_min_p`].)
const MIN_P_DIRECT: usize = 4096;
/// Candidates the top-p path without top-k selects first: enough for the nucleus of a
/// peaked row (hundreds of tokens).
const NUCLEUS: usize = 1024;
/// The most candidates that path selects before it leaves a large nucleus to the
/// histogram.
const NUCLEUS_MAX: usize = 4096;
/// Candidates a draw from the whole row selects first (see [`draw_from_best`]).
const DRAW_BEST: usize = 256;

/// The one-pass min-p path gives up after collecting more than this many tokens near
/// the running maximum (on a crowded row it would read the rest entry by entry), for
/// [`flat_min_p`], which also sorts its survivors when they are at most this many: so
/// the survivors, their weights and their total are the same bit for bit whichever of
/// the two takes a row, and whatever form the row has (the compact row of a mask, the
/// row under marks, a masked copy).
///
/// With the precise weights, [`MIN_P_DIRECT`]: at least [`SPARSE_MAX`], so that neither
/// path gives up on a compact row.
const MIN_P_NEAR: usize = 1024;

/// The draw over `Survivors::Flat` narrows its window down to at most this many
/// survivors before it sorts them.
const FLAT_WINDOW: usize = 64;

/// The fraction of a row's mass on each side of a draw's target that
/// [`draw_in_place`]'s window holds, as the selection's sample of the row places it: the
/// band [`draw_flat`] takes before it compacts the survivors, whose first points come
/// from the same sample. The sample's mass fractions are off by about `1 / sqrt(n)` for
/// its `n` entries (2% for the 2,374 blocks of 151,936 tokens), so the window holds the
/// target about three of those away from either end, and a miss costs the pass again.
const IN_PLACE_BAND: f64 = 1.0 / 16.0;

/// A mask that allows at most this many tokens is read as a compact row: the allowed
/// tokens' adjusted logits, gathered in id order, instead of a masked copy of the whole
/// row.
///
/// At most [`MIN_P_DIRECT`], so that the precise min-p paths never give up on either
/// form of the row (they can only collect finite entries): every decision of the tail
/// cuts is then made the same way on the compact row as on the masked copy, and the
/// result is the same bit for bit. Gathering 4,096 tokens spread at random takes about 20 us at
/// 151,936 logits (10 neighbouring ones about 2 us); marking the others takes 2.5 us,
/// but then a cut without top-k reads the whole row: top-p 0.95 alone took 128 us on
/// 4,096 gathered tokens against 331 us under marks for 4,097 (see `BENCHMARKS.md`).
const SPARSE_MAX: usize = MIN_P_DIRECT;

/// [`SPARSE_MAX`] for greedy and a top-k of the one-pass selection, which read marks at
/// almost no cost (the mask stage is about 2.5 us at 151,936 logits, whatever the mask):
/// gathering costs about 3.5 ns per allowed token spread over the row, and Qwen3's chain
/// took 12.9 us on 10 gathered tokens, 21.4 us on 1,024 and 23.8 us under marks with
/// 1,025 allowed, so the compact row is kept for the masks that allow the fewest.
const SPARSE_MAX_SELECT: usize = 1024;

/// The longest history [`Engine::reserve`] makes room for: as many token ids as a `Vec`
/// can hold (`isize::MAX` bytes).
pub(crate) const MAX_HISTORY: usize = isize::MAX as usize / std::mem::size_of::<TokenId>();

/// A floor stage's first-stage cut.
#[derive(Clone, Copy, Debug)]
enum FloorCut {
    /// The survivors are in `cands`, in draw order.
    Done,
    /// More than [`FLOOR_DIRECT`] survivors and none within the band: the first cut
    /// group keeps the tokens whose scaled logit is at least `ln`, as min-p would.
    Crowded { ln: f64 },
    /// A token within the band, or a case the fast statistic leaves to the stage.
    Undecided,
}

/// A floor stage collects and sorts its survivors itself when there are at most this
/// many; beyond, the first cut group takes them through the histogram.
const FLOOR_DIRECT: usize = 4096;

/// A floor (min-p's threshold, or a first stage's) that keeps at least one in this many
/// of the row's sampled tokens is drawn from the row in place ([`draw_in_place`], one
/// pass over the row), not from its survivors collected and weighed ([`flat_min_p`],
/// whose cost grows with their number). Measured on the bench's flat row (151,936
/// tokens, min-p alone at T 1, 200 uniforms), in place against collected: 128 against
/// 101 µs keeping 36% of the row, 136 against 139 keeping 56%, 156 against 181 keeping
/// 74%, 177 against 243 keeping 95%.
const IN_PLACE_FLOOR: usize = 2;

/// [`flat_min_p`] first looks at one block in this many for the share of the row its
/// floor keeps: about 150 of Qwen3's 151,936 tokens, which place a share near a half
/// within a few percent, at a sixteenth of the reads of the full sample (one entry per
/// block, about 2 µs on a flat row where min-p 0.05's whole draw is 40), which only a
/// floor that keeps most of the row then takes.
const PROBE_BLOCKS: usize = 16;

/// Typical-p samples every this many tokens of the row to guess where it cuts (see
/// [`Engine::typical_guess`]): about 1,200 of Qwen3's 151,936, which weigh the bulk
/// of a row's tail within a few percent at a fortieth of a pass's cost.
const TYPICAL_STRIDE: usize = 128;

/// The widest bracket, relative to its lower end, at which a sample of dynamic
/// temperature first (see [`Engine::run_dyn_temp`]) reports logprobs: those are taken
/// at the lower end, so within a millionth of the stage's temperature. A bracket
/// wider than this (with logprobs requested) is narrowed by the precise statistics, or
/// else left to the dense copy. Any width gives the stage's token.
const DYN_TEMP_WIDTH: f64 = 1e-6;

/// Dynamic temperature first's bracket `(ta, tb)` of draw temperatures and the bound on
/// the row's mean distance below its maximum (see [`Engine::dyn_temp_bracket`]).
type Bracket = ((f32, f32), f64);

/// The second uniform a draw tests for dynamic temperature first (see
/// [`Engine::draw_at_both`]): for a draw with uniform `u` at `ta` from a set of at most
/// `N` tokens (the row's, or fewer given) whose total is `Z >= z` there, `u` times the
/// smaller of `(N / z)^power` and `e^share`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reach {
    /// `1 - ta / tb`.
    power: f64,
    /// The row's tokens and patches.
    n: f64,
    /// `(1 / ta - 1 / tb) gap`, or `inf`.
    share: f64,
}

impl Reach {
    /// The second uniform for `u`, a lower bound `z` on the set's total at `ta` and a
    /// bound `n` on its size (`inf`: the row's); `None` at 1 or above.
    fn uniform(&self, u: f64, z: f64, n: f64) -> Option<f64> {
        let ln = (self.n.min(n) / z.max(1.0)).ln().max(0.0);
        // (The quotients, the logarithm, the exponential and the products each round
        // within an ulp or two: `1e-12` of the whole covers them.)
        let r = u * (self.power * ln).min(self.share).exp() * (1.0 + 1e-12);
        (r < 1.0).then_some(r)
    }
}

/// Typical-p's centre on a row: the row's maximum, the centre `c` relative to it, and
/// the bounds of [`floor_band::typical`](crate::floor_band::typical).
struct Centre {
    max: f32,
    c: f64,
    delta: f64,
    mag: f64,
}

/// The outcome of typical-p's cut on the row ([`Engine::typical_walk`],
/// [`Engine::typical_crowded`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum TypicalCut {
    /// The survivors are in `cands`.
    Done,
    /// As [`FloorCut::Crowded`], with the tokens above the interval banned.
    Crowded { ln: f64 },
    /// A decision fell within the bounds of the fast statistics: the precise ones may
    /// decide it.
    Tight,
    /// The tokens collected do not reach the cut: a wider collection may.
    Short,
    /// More tokens than the collection holds.
    Overflow,
    /// The fast statistics cannot decide.
    Undecided,
}

impl From<TypicalCut> for FloorCut {
    fn from(cut: TypicalCut) -> Self {
        match cut {
            TypicalCut::Done => FloorCut::Done,
            TypicalCut::Crowded { ln } => FloorCut::Crowded { ln },
            _ => FloorCut::Undecided,
        }
    }
}

/// What to do with the adjusted row.
#[derive(Debug)]
enum Goal<'a> {
    /// Draw, with this uniform or the sequence's own.
    Draw(Option<f64>),
    /// Write the final distribution.
    Distribution(&'a mut Vec<(TokenId, f64)>),
    /// Write every token's final probability (its logprob when `log`) at its id.
    Probabilities { out: &'a mut [f32], log: bool },
}

/// Where the survivors of the tail cuts are, once they are known.
#[derive(Clone, Copy, Debug)]
enum Survivors {
    /// `scratch.cand[..n]` with weights `scratch.weight[..n]` summing to `total`.
    Prefix { n: usize, total: f64 },
    /// Every finite token of the histogram buckets before `lo` (unsorted, never
    /// materialised), then `scratch.cand[..n]` (the sorted tokens from bucket `lo` on,
    /// weights `scratch.weight[..n]`); `total` is their weight.
    Hist {
        lo: usize,
        n: usize,
        total: f64,
        frame: Frame,
        /// Bound on the error of the buckets' cumulative masses (0 when precise).
        err: f64,
    },
    /// Min-p's survivors on a flat row (more than [`MIN_P_NEAR`]), or every finite token
    /// of a flat row that a draw takes whole: every token of `scratch.flat` /
    /// `scratch.flat_ids` (`n`, in id order, never sorted whole), the least at the logit
    /// `floor`, with their fast weights `scratch.flat_w` at
    /// temperature `t` in frame `frame`, which sum to `total`; `err` bounds the error of
    /// the sum of any of them.
    Flat {
        n: usize,
        total: f64,
        frame: Frame,
        t: f32,
        floor: f32,
        err: f64,
        /// Every finite token of the row (no threshold): see [`draw_flat`].
        whole: bool,
    },
    /// Greedy: the argmax alone.
    Greedy(TokenId),
    /// A draw from the whole adjusted row, decided among its best tokens: every token at
    /// or above `floor` survives (`-inf`: every token); `scratch.cand[..n]` are some of
    /// them in draw order (its best ones, see [`draw_from_best`], or those of a window
    /// around the target, see [`draw_in_place`]), with weights `scratch.weight[..n]` at
    /// the draw's temperature `t` against the maximum `max`; `total` is the survivors'
    /// mass, and the draw is token `i` (see [`draw_from_best`]). Only a draw at the end
    /// of the chain makes it.
    Row {
        i: usize,
        n: usize,
        total: f64,
        max: f32,
        t: f32,
        floor: f32,
    },
}

/// How a chain ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// A seeded draw (inverse CDF).
    Draw,
    /// The largest logit, ties to the lower id.
    Greedy,
}

/// A chain as the engine runs it: `stages` with the positions that split them.
///
/// - `stages[..lead]`: the leading logit bias and penalties, lowered into `params` and
///   applied as patches (or, when stages follow that need the whole row, to its copy);
/// - `stages[lead..pre]`: stages that need the whole row, run on a dense `f32` copy;
/// - `stages[pre..group]`: the first cut group, lowered into `params` (temperature, then
///   top-k, top-p and min-p in that order, one `min_keep`) and run on the shared kernels
///   over the row in place;
/// - `stages[group..]`: run on the compact candidate set the first cut leaves.
///
/// A [`Sampler`](crate::Sampler) has no stage objects for its lowered parts: its
/// `params` are the plan, and its processors are the `stages[lead..pre]`.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// The lowered stages, and the seed and logprobs of the draw.
    pub(crate) params: SamplingParams,
    pub(crate) stages: Vec<Box<dyn Stage>>,
    pub(crate) lead: usize,
    pub(crate) pre: usize,
    pub(crate) group: usize,
    pub(crate) end: End,
    /// The temperature of the draw when it is not the group's: a chain's trailing
    /// temperature after the first cut group (llama.cpp's order), folded into the draw
    /// instead of run on a materialised candidate set.
    pub(crate) draw_temperature: Option<f32>,
}

/// One sequence's engine: the plan, the sequence state and every buffer a step reuses.
#[derive(Debug)]
pub(crate) struct Engine {
    params: SamplingParams,
    vocab_size: usize,
    stages: Vec<Box<dyn Stage>>,
    lead: usize,
    pre: usize,
    group: usize,
    end: End,
    draw_temperature: Option<f32>,
    /// True when the first stage after the bias and penalties keeps the tokens above a
    /// floor that a whole-row statistic decides (see [`Engine::run_floor`]); the stage
    /// gives its floor at each step, since a stateful one moves it.
    floor_first: bool,
    /// [`Xtc`](crate::Xtc)'s parameters when it is the first stage after the bias and
    /// penalties (see [`Engine::run_xtc`]).
    xtc: Option<XtcRule>,
    /// The first stage's `(t, delta, exponent)` when it is a dynamic temperature (see
    /// [`Engine::run_dyn_temp`]).
    dyn_temp: Option<(f32, f32, f32)>,
    /// The threshold on the scaled logit that a floor stage decided for this step, when
    /// the first cut group applies it (see [`Engine::run_floor`]).
    floor_ln: Option<f64>,
    /// The lowered `top_p` and `ln(min_p)` as compared: each read as the decimal it was
    /// written as ([`as_decimal`](crate::as_decimal)), once.
    top_p: f64,
    ln_min_p: Option<f64>,
    pub(crate) seq: Sequence,
    rng: DrawRng,
    scratch: Scratch,
    /// The dense copy of the row, for the stages that need the whole row.
    dense: Candidates,
    /// The compact candidate set, for the stages after the first cut.
    cands: Candidates,
    /// The candidates' weights, for the end of a chain on the compact set.
    weights: Vec<f64>,
    /// Indices into the candidate set, for a draw from a set not in draw order.
    order: Vec<u32>,
}

/// A copy with buffers of its own, sized as [`Engine::new`] sizes them, so that a clone
/// allocates nothing per step either (should the allocator refuse, the copies of the
/// original's buffers serve, growing on first use).
impl Clone for Engine {
    fn clone(&self) -> Self {
        let n = self.vocab_size;
        let scratch = match Scratch::new(n, SPARSE_MAX.min(n)) {
            Ok(mut s) => {
                let _ = crate::scratch::reserve_total(
                    &mut s.overlay.patch,
                    self.scratch.overlay.patch.capacity(),
                );
                s
            }
            Err(_) => self.scratch.clone(),
        };
        let mut e = Engine {
            params: self.params.clone(),
            vocab_size: n,
            stages: self.stages.clone(),
            lead: self.lead,
            pre: self.pre,
            group: self.group,
            end: self.end,
            draw_temperature: self.draw_temperature,
            floor_first: self.floor_first,
            xtc: self.xtc.clone(),
            dyn_temp: self.dyn_temp,
            floor_ln: self.floor_ln,
            top_p: self.top_p,
            ln_min_p: self.ln_min_p,
            seq: self.seq.clone(),
            rng: self.rng.clone(),
            scratch,
            dense: Candidates::new(),
            cands: Candidates::new(),
            weights: Vec::new(),
            order: Vec::new(),
        };
        let _ = e.size_buffers();
        e
    }
}

impl Engine {
    /// An engine for `plan` over a vocabulary of `vocab_size` tokens.
    ///
    /// # Errors
    /// [`Error::EmptyVocabulary`] when `vocab_size == 0`; [`Error::InvalidParameter`] for a
    /// vocabulary beyond [`MAX_VOCAB_SIZE`](crate::MAX_VOCAB_SIZE); [`Error::OutOfMemory`]
    /// when its buffers cannot be allocated; [`Error::TokenOutOfRange`] for a logit-bias
    /// id `>= vocab_size`.
    pub(crate) fn new(plan: Plan, vocab_size: usize) -> Result<Self, Error> {
        crate::check_vocab_size(vocab_size)?;
        let oom = |_| Error::OutOfMemory {
            name: "vocab_size",
            value: vocab_size,
        };
        let Plan {
            params,
            stages,
            lead,
            pre,
            group,
            end,
            draw_temperature,
        } = plan;
        debug_assert!(lead <= pre && pre <= group && group <= stages.len());
        if let Some(&(id, _)) = params
            .logit_bias()
            .iter()
            .find(|(id, _)| *id as usize >= vocab_size)
        {
            return Err(Error::TokenOutOfRange { id, vocab_size });
        }
        let mut scratch = Scratch::new(vocab_size, SPARSE_MAX.min(vocab_size)).map_err(oom)?;
        // Room for every patch a step can make: the biased tokens and the penalised ones
        // (at most the window; with no window, `reserve` adds room with the history).
        let window = if params.has_penalties() {
            params.penalty_window().unwrap_or(0)
        } else {
            0
        };
        scratch
            .overlay
            .patch
            .try_reserve((params.logit_bias().len().saturating_add(window)).min(vocab_size))
            .map_err(oom)?;
        let mut engine = Engine {
            floor_first: false,
            xtc: None,
            dyn_temp: None,
            floor_ln: None,
            top_p: crate::as_decimal(params.top_p()),
            ln_min_p: (params.min_p() > 0.0).then(|| crate::as_decimal(params.min_p()).ln()),
            rng: DrawRng::new(params.seed()),
            params,
            vocab_size,
            stages,
            lead,
            pre,
            group,
            end,
            draw_temperature,
            seq: Sequence::default(),
            scratch,
            dense: Candidates::new(),
            cands: Candidates::new(),
            weights: Vec::new(),
            order: Vec::new(),
        };
        engine.plan_first();
        engine.size_buffers().map_err(oom)?;
        Ok(engine)
    }

    /// Notes what the first stage after the bias and penalties is, when the engine
    /// runs it on the row in place: a floor stage or XTC.
    fn plan_first(&mut self) {
        let first = (self.lead < self.pre).then(|| self.stages[self.lead].lowering());
        self.floor_first = matches!(first, Some(Lowering::Floor(_)));
        // Dynamic temperature on the row in place when the rest of the chain is a
        // temperature, a top-k or both, and the draw (see [`Engine::run_dyn_temp`]).
        let p = &self.params;
        let rest_draws = self.pre == self.lead + 1
            && self.group == self.stages.len()
            && self.end == End::Draw
            && !p.is_greedy()
            && p.top_p() >= 1.0
            && p.min_p() <= 0.0;
        self.dyn_temp = match first {
            Some(Lowering::DynamicTemperature { t, delta, exponent }) if rest_draws => {
                Some((t, delta, exponent))
            }
            _ => None,
        };
        self.xtc = match first {
            Some(Lowering::Xtc(rule)) => Some(rule),
            _ => None,
        };
    }

    /// Sizes the candidate buffers for every token, where the plan uses them, so that no
    /// step allocates whatever the row.
    fn size_buffers(&mut self) -> Result<(), std::collections::TryReserveError> {
        let n = self.vocab_size;
        if self.pre > self.lead {
            self.dense.reserve(n)?;
        }
        if self.group < self.stages.len() || self.pre > self.lead {
            self.cands.reserve(n)?;
            crate::scratch::reserve_total(&mut self.weights, n)?;
            crate::scratch::reserve_total(&mut self.order, n)?;
        }
        Ok(())
    }

    /// The lowered parameters.
    pub(crate) fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The vocabulary size.
    pub(crate) fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The stages, in order.
    pub(crate) fn stages(&self) -> &[Box<dyn Stage>] {
        &self.stages
    }

    /// The temperature the survivors of the first cut are drawn at.
    fn draw_temperature(&self) -> f32 {
        self.draw_temperature
            .unwrap_or_else(|| self.params.temperature())
    }

    /// How the chain ends.
    pub(crate) fn end(&self) -> End {
        self.end
    }

    /// Adds a stage that needs the whole row after the others of that kind (a
    /// [`Sampler`](crate::Sampler)'s processor): before the first cut group.
    pub(crate) fn push_whole_row_stage(&mut self, stage: Box<dyn Stage>) {
        self.stages.insert(self.pre, stage);
        self.pre += 1;
        self.group += 1;
        self.plan_first();
        // Refused room is asked for again, as a typed error, by the next step (`run_dense`).
        let _ = self.size_buffers();
    }

    /// Replaces the lowered parameters of a [`Sampler`](crate::Sampler) (a new request on
    /// a warm engine): checks them as [`Engine::new`] does, then forgets the history and
    /// resets every stage. The buffers stay; only a longer bias list or penalty window
    /// than any before grows the patch list. On error nothing changes.
    ///
    /// # Errors
    /// [`Error::TokenOutOfRange`] for a logit-bias id `>= vocab_size`;
    /// [`Error::OutOfMemory`] when the patch list cannot grow.
    pub(crate) fn set_params(&mut self, params: SamplingParams, end: End) -> Result<(), Error> {
        let vocab_size = self.vocab_size;
        if let Some(&(id, _)) = params
            .logit_bias()
            .iter()
            .find(|(id, _)| *id as usize >= vocab_size)
        {
            return Err(Error::TokenOutOfRange { id, vocab_size });
        }
        let window = if params.has_penalties() {
            params.penalty_window().unwrap_or(0)
        } else {
            0
        };
        let patches = params
            .logit_bias()
            .len()
            .saturating_add(window)
            .min(vocab_size);
        crate::scratch::reserve_total(&mut self.scratch.overlay.patch, patches).map_err(|_| {
            Error::OutOfMemory {
                name: "vocab_size",
                value: vocab_size,
            }
        })?;
        self.top_p = crate::as_decimal(params.top_p());
        self.ln_min_p = (params.min_p() > 0.0).then(|| crate::as_decimal(params.min_p()).ln());
        self.rng = DrawRng::new(params.seed());
        self.params = params;
        self.end = end;
        self.reset();
        Ok(())
    }

    /// Draws from now on with `seed` (the stages' [`StageContext::seed`] too); the
    /// history and the stages' state stay.
    pub(crate) fn set_seed(&mut self, seed: u64) {
        self.params.seed = seed;
        self.rng = DrawRng::new(seed);
    }

    /// Forgets the history and resets every stateful stage.
    pub(crate) fn reset(&mut self) {
        self.seq.reset();
        self.stages.iter_mut().for_each(|s| s.reset());
    }

    /// Reserves room for `additional` more history tokens, in the history, the penalties'
    /// patches and every stage ([`Stage::reserve`]), so that the next `additional` steps
    /// allocate nothing.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `additional` when the history would pass
    /// [`MAX_HISTORY`]; [`Error::OutOfMemory`] when the room cannot be allocated; any
    /// other error a stage's `reserve` returns.
    pub(crate) fn reserve(&mut self, additional: usize) -> Result<(), Error> {
        let len = self.seq.view().tokens().len();
        let total = match len.checked_add(additional) {
            Some(total) if total <= MAX_HISTORY => total,
            _ => {
                return Err(Error::InvalidParameter {
                    name: "additional",
                    value: additional as f64,
                    expected: "a history of at most isize::MAX / 4 tokens in all",
                })
            }
        };
        let oom = Error::OutOfMemory {
            name: "additional",
            value: additional,
        };
        self.seq.reserve(additional).map_err(|_| oom.clone())?;
        if self.params.has_penalties() && self.params.penalty_window().is_none() {
            let most = self.params.logit_bias().len().saturating_add(total);
            let patch = &mut self.scratch.overlay.patch;
            crate::scratch::reserve_total(patch, most.min(self.vocab_size))
                .map_err(|_| oom.clone())?;
        }
        for stage in &mut self.stages {
            match stage.reserve(total) {
                Err(Error::OutOfMemory { .. }) => return Err(oom),
                r => r?,
            }
        }
        Ok(())
    }

    /// Samples the next token, with the uniform `u` or the sequence's own, and appends it
    /// to the history.
    pub(crate) fn sample<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        u: Option<f64>,
    ) -> Result<Sample, Error> {
        if let Some(u) = u.filter(|u| !(0.0..1.0).contains(u)) {
            return Err(Error::InvalidParameter {
                name: "u",
                value: u,
                expected: "a value in [0, 1)",
            });
        }
        self.sample_impl(row, mask, u)
    }

    /// True when the chain ends in the argmax: a greedy end, or a temperature of 0.
    pub(crate) fn is_greedy(&self) -> bool {
        self.end == End::Greedy || self.params.is_greedy()
    }

    /// The uniform the draw of `step` uses (stream 0 of the sequence's seed).
    pub(crate) fn draw_uniform(&mut self, step: u64) -> f64 {
        self.rng.uniform(step)
    }

    /// Draws the next token with the sequence's own uniform, without appending it to the
    /// history and without telling the stages.
    pub(crate) fn draw_only<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
    ) -> Result<Sample, Error> {
        self.run(row, mask, Goal::Draw(None))?
            .ok_or(Error::NoCandidates)
    }

    /// Tells every stage which token was emitted, as after a draw.
    pub(crate) fn observe(&mut self, token: TokenId, logprob: f32) {
        for stage in &mut self.stages {
            stage.observe(token, logprob);
        }
    }

    /// Writes the final distribution the next draw would use.
    pub(crate) fn distribution<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        out: &mut Vec<(TokenId, f64)>,
    ) -> Result<(), Error> {
        self.run(row, mask, Goal::Distribution(out)).map(|_| ())
    }

    /// Writes every token's final probability into `out[id]` (with `log`, its natural
    /// logarithm, `-inf` for the removed tokens).
    pub(crate) fn probabilities<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        out: &mut [f32],
        log: bool,
    ) -> Result<(), Error> {
        if out.len() != self.vocab_size {
            return Err(Error::LengthMismatch {
                expected: self.vocab_size,
                actual: out.len(),
            });
        }
        if self.cuts_nothing() {
            return self.softmax_into(row, mask, out, log);
        }
        self.run(row, mask, Goal::Probabilities { out, log })
            .map(|_| ())
    }

    /// True when the plan draws from the whole adjusted row: no stage beyond the bias
    /// and penalties, no cut, a temperature the `f32` weights hold at.
    fn cuts_nothing(&self) -> bool {
        let p = &self.params;
        !self.floor_first
            && self.pre == self.lead
            && self.group == self.stages.len()
            && self.end == End::Draw
            && !p.is_greedy()
            && p.top_k().is_none()
            && p.top_p() >= 1.0
            && p.min_p() <= 0.0
            && histogram::f32_weights_hold(self.draw_temperature())
    }

    /// Every token's probability (its logprob when `log`) when nothing is cut: a softmax
    /// of the adjusted row, read in place under the overlay of patches and marks. One
    /// vectorised pass finds the maximum, checks the row and writes each weight into
    /// `out`, relative to the running maximum before its span, and sums them (see
    /// [`mass::online_weights_into`](crate::mass::online_weights_into) and
    /// [`mass::weights_into`](crate::mass::weights_into) for the bounds: each weight
    /// within `2.81e-7` of the exact value (`SHIFTED_REL_ERROR`, fused; `2.39e-7`
    /// unfused), the sum within that and `3.01 * 2^-24` more (`4.7e-7`) and the
    /// rescales' `1.3e-10`); a second scales each span by `exp((used - max) / T) / Z`,
    /// computed in `f64` and rounded once to `f32`; the logprobs are
    /// `(l - max) / T - ln Z` in `f64`, rounded once. The probabilities are within `1e-6`
    /// (relative) of the exact ones (the sum of the bounds is below `8.2e-7`), or `2e-38`
    /// (absolute) for those below `e^-87`. The weights' multiply-adds
    /// are fused on every CPU that has FMA, which all write the same values; an x86-64
    /// CPU without FMA writes them unfused, within the same bound
    /// ([`mass::weights_into_in`](crate::mass::weights_into_in)).
    fn softmax_into<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        out: &mut [f32],
        log: bool,
    ) -> Result<(), Error> {
        let row = adjust::check_input(self.vocab_size, row, mask)?;
        self.build_patches(row, mask);
        let t = self.draw_temperature();
        let r = softmax_in(row, &self.scratch.overlay, t, out, log);
        self.scratch.overlay.clear();
        r
    }

    /// Writes the log-softmax of the raw row (no adjustment, no mask, no cut) into
    /// `out[id]`: `(l - max) - ln Z` in `f64`, rounded once, with `Z` the sum of the
    /// one-pass weights (`mass::online_weights_into`: within `4.7e-7` of the exact sum,
    /// relative, so `ln Z` within `4.7e-7`, absolute), as [`softmax_into`](Self::softmax_into).
    pub(crate) fn raw_logprobs<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        out: &mut [f32],
    ) -> Result<(), Error> {
        if out.len() != self.vocab_size {
            return Err(Error::LengthMismatch {
                expected: self.vocab_size,
                actual: out.len(),
            });
        }
        let row = adjust::check_input(self.vocab_size, row, mask)?;
        // The maximum and `Z` from the one-pass weights (summed, not written), as for
        // the processed logprobs.
        let mut used = [0.0f32; crate::mass::SPANS];
        let on = crate::simd::online_weights_into::<_, false>(row, None, 1.0, out, &mut used);
        if on.bad {
            adjust::first_non_finite_of(row)?;
        }
        if on.max == f32::NEG_INFINITY {
            return Err(Error::NoCandidates);
        }
        crate::simd::logprobs_into(row, None, on.max, 1.0, on.z.ln(), out);
        Ok(())
    }

    fn sample_impl<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        u: Option<f64>,
    ) -> Result<Sample, Error> {
        let out = self
            .run(row, mask, Goal::Draw(u))?
            .ok_or(Error::NoCandidates)?;
        for stage in &mut self.stages {
            stage.observe(out.token, out.logprob);
        }
        self.seq.push_drawn(out.token);
        Ok(out)
    }

    /// `goal` on the adjusted row. Without stages that need the whole row, the sparse
    /// adjustments (bias, penalties) become an overlay of patches over the caller's row,
    /// which is never copied, and a mask becomes marks on that overlay, or a compact row
    /// when it allows few tokens. A stage that needs the whole row gets an `f32` copy.
    fn run<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        goal: Goal<'_>,
    ) -> Result<Option<Sample>, Error> {
        let row = adjust::check_input(self.vocab_size, row, mask)?;
        if self.floor_first {
            // (A stateful stage's floor moves from step to step: ask it.)
            if let Lowering::Floor(rule) = self.stages[self.lead].lowering() {
                return self.run_floor(row, mask, rule, goal);
            }
        }
        if self.pre == self.lead + 1 && self.xtc.is_some() {
            return self.run_xtc(row, mask, goal);
        }
        if let Some(rule) = self.dyn_temp {
            return self.run_dyn_temp(row, mask, rule, goal);
        }
        if self.pre > self.lead {
            return self.run_dense(row, mask, goal);
        }
        self.run_in_place(row, mask, goal)
    }

    /// `goal` with no stage that needs the whole row before the first cut group: on the
    /// compact row of a sparse mask's allowed tokens, or on the row in place.
    fn run_in_place<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        goal: Goal<'_>,
    ) -> Result<Option<Sample>, Error> {
        match mask {
            Some(mask) if count_allowed(mask, self.vocab_size) <= self.sparse_max() => {
                self.run_sparse(row, mask, goal)
            }
            _ => self.run_overlay(row, mask, goal),
        }
    }

    /// `goal` through the stages that need the whole row: on an `f32` copy of the row
    /// with the lowered adjustments and the mask applied. While those stages leave every
    /// token in id order at temperature 1, the first cut group still runs on the shared
    /// kernels, over the copy; otherwise every later stage runs on the set they leave.
    fn run_dense<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        goal: Goal<'_>,
    ) -> Result<Option<Sample>, Error> {
        // (Sized when the plan was made; only a processor added later can find it short.)
        self.size_buffers().map_err(|_| Error::OutOfMemory {
            name: "vocab_size",
            value: self.vocab_size,
        })?;
        let mut dense = std::mem::take(&mut self.dense);
        self.scratch.overlay.clear();
        let r = self.adjust_dense(row, mask, &mut dense).and_then(|()| {
            // (A stage may have refilled the set shorter: that is a set, not the row.)
            if dense.is_dense() && dense.temperature() == 1.0 && dense.len() == row.len() {
                self.finish(row, dense.logits(), None, goal)
            } else {
                self.finish_set(row, &mut dense, self.pre, goal)
            }
        });
        self.dense = dense;
        r
    }

    /// `goal` for a chain whose first stage after the bias and penalties keeps the tokens
    /// at or above a floor that a statistic of the whole row decides (epsilon, eta,
    /// top-n-sigma): one vectorised pass over the caller's row, in place under the
    /// overlay of patches and marks, bounds the floor within a narrow band; a collection
    /// pass takes the tokens above it, in draw order; every later stage runs on that
    /// compact set.
    ///
    /// Exact: a token outside the band is decided as the stage's own `f64` arithmetic
    /// decides it. When a token lies inside the band, or the stage's `min_keep` reaches
    /// past the tokens collected, or the row is degenerate (no finite token), the stage
    /// runs through its own `apply` on the dense copy instead, which also reports any
    /// error exactly as that path does.
    fn run_floor<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        rule: Floor,
        goal: Goal<'_>,
    ) -> Result<Option<Sample>, Error> {
        self.build_patches(row, mask);
        match self.floor_cut(row, rule) {
            Ok(FloorCut::Done) => {
                self.scratch.overlay.clear();
                let mut c = std::mem::take(&mut self.cands);
                let r = self.finish_set(row, &mut c, self.lead + 1, goal);
                self.cands = c;
                r
            }
            Ok(FloorCut::Crowded { ln }) => {
                // The first cut group takes the floor as its min-p threshold, on the row
                // in place (the histogram, for many survivors).
                self.floor_ln = Some(ln);
                let r = self.finish(row, row, None, goal);
                self.floor_ln = None;
                self.scratch.overlay.clear();
                r
            }
            Ok(FloorCut::Undecided) | Err(_) => {
                self.scratch.overlay.clear();
                self.run_dense(row, mask, goal)
            }
        }
    }

    /// `goal` for a chain whose first stage after the bias and penalties is
    /// [`Xtc`](crate::Xtc) and whose next stages are the first cut group's: the stage
    /// becomes bans on the row in place.
    ///
    /// The coin comes first (the stage's own uniform for this step): when it does not
    /// come up, the stage changes nothing and the rest of the chain runs as if it were
    /// not there. Otherwise one pass finds the row's maximum and mass and collects the
    /// tokens near the maximum (those the stage can find above its threshold: each
    /// weighs at least `threshold` of a total of at least 1); each of them is weighed
    /// in `f64` as the stage weighs it and compared with the threshold against the
    /// interval that holds the stage's own total (see [`xtc_bans`](Self::xtc_bans)). The
    /// tokens the stage removes are banned under the overlay, and the rest of the chain
    /// runs on the row in place.
    ///
    /// Exact: a comparison that the interval leaves open, a `min_keep` the collected
    /// tokens do not show to be met, more near tokens than the pass collects, or a row
    /// with no finite token: the stage runs through its own `apply` on the dense copy
    /// instead, which also reports any error exactly as that path does.
    fn run_xtc<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        goal: Goal<'_>,
    ) -> Result<Option<Sample>, Error> {
        let Some((probability, salt)) = self.xtc.as_ref().map(|r| (r.probability, r.salt)) else {
            return self.run_dense(row, mask, goal);
        };
        let ctx = StageContext {
            history: self.seq.view(),
            seed: self.params.seed(),
            step: self.seq.step(),
        };
        if probability <= 0.0 || ctx.uniform(salt) >= probability {
            return self.run_in_place(row, mask, goal);
        }
        self.build_patches(row, mask);
        match self.xtc_bans(row) {
            Ok(Some(bans)) => {
                // (The draw selects its best tokens from the block maxima the pass
                // recorded; the bans may be among them.)
                self.scratch.maxima_ready = Some(bans);
                let r = self.finish(row, row, None, goal);
                self.scratch.maxima_ready = None;
                self.scratch.overlay.clear();
                r
            }
            Ok(None) | Err(_) => {
                self.scratch.overlay.clear();
                self.run_dense(row, mask, goal)
            }
        }
    }

    /// `goal` for a chain whose first stage after the bias and penalties is a dynamic
    /// temperature and whose rest is a temperature, a top-k or both, and the draw: a draw
    /// runs on the row in place (a distribution on the dense copy). A top-k keeps the
    /// same tokens at every temperature, so it is cut from the row as planned and only
    /// the draw's temperature carries the stage's.
    ///
    /// One vectorised pass bounds the row's entropy as the stage computes it
    /// ([`floor_band::entropy`](crate::floor_band::entropy)), which bounds the stage's
    /// temperature, times the draw's, within `[lo, hi]`; `ta <= lo` and `tb >= hi` are
    /// the nearest `f32`s. The mass of the first `i` tokens in draw order, relative to
    /// the total, falls as the temperature rises (each weight of a token after them,
    /// relative to each of theirs, `exp((l_j - l_k) / T)` with `l_j <= l_k`, rises), so
    /// the token a uniform picks moves only later in draw order as the temperature
    /// rises. The draw on the row in place is exact at any one `f32` temperature: when
    /// it picks the same token at `ta` and at `tb`, that is the token at every
    /// temperature between them, the stage's among them. Otherwise (the uniform within
    /// the bounds' reach of a boundary), the dense copy decides.
    ///
    /// The sample's logprobs are those at `ta`, within [`DYN_TEMP_WIDTH`] of the stage's
    /// temperature, relative to it: when logprobs are requested and the fast bracket is
    /// wider, the precise statistics narrow it, or else the dense copy draws.
    fn run_dyn_temp<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        rule: (f32, f32, f32),
        goal: Goal<'_>,
    ) -> Result<Option<Sample>, Error> {
        let Goal::Draw(u) = goal else {
            return self.run_dense(row, mask, goal);
        };
        let u = u.unwrap_or_else(|| self.rng.uniform(self.seq.step()));
        self.build_patches(row, mask);
        let drawn = match self.dyn_temp_bracket(row, rule) {
            Ok(Some((bracket, gap))) => {
                // (The bracket's pass recorded the row's block maxima: the draws select
                // their best tokens from them.)
                self.scratch.maxima_ready = Some(0);
                let drawn = self.draw_at_both(row, bracket, gap, u).map(|d| d.0);
                self.scratch.maxima_ready = None;
                drawn
            }
            _ => None,
        };
        self.scratch.overlay.clear();
        match drawn {
            Some(out) => Ok(Some(out)),
            None => self.run_dense(row, mask, Goal::Draw(Some(u))),
        }
    }

    /// The draw with uniform `u` from `row` under `scratch.overlay` at the draw
    /// temperatures `ta` and `tb`, as the sample at `ta` when both pick the same token
    /// (see [`run_dyn_temp`](Self::run_dyn_temp)), and whether one draw decided it;
    /// `None` otherwise, or on an error, which the dense copy then reports.
    ///
    /// One draw at `ta` decides both when its target for a second uniform above `u`
    /// ([`Reach`]) lands on the same token, as a draw from the whole row's best tokens
    /// tests ([`draw_from_best`]; a flat row's search, [`draw_flat`], in its last walk;
    /// the draw from a top-k's prefix, with `N` its size, in [`draw`](Self::draw)).
    /// The share `F_k(T)` of the first `k` tokens in draw order only falls as `T` rises,
    /// so the token at `tb` is the one at `ta` when `u < F_k(tb)`, and `F_k(ta) / F_k(tb)`
    /// is at most the second uniform over `u` for the smaller of two bounds:
    /// - `(N / Z)^(1 - ta / tb)`, `N` the row's tokens and patches (at least its finite
    ///   ones; the top-k's size for its prefix) and `Z` the total at `ta` (at least the
    ///   maximum's weight 1): at `T = tb`
    ///   each weight `w = e^((l - max) / ta) <= 1` becomes `w^a`, `a = ta / tb`, no
    ///   smaller, and, `x^a` being concave, the total at most `N^(1 - a) Z^a`;
    /// - when `tb <= 1`, `e^((1 / ta - 1 / tb) gap)`, `gap` a bound on the mean distance
    ///   `E[max - l]` below the maximum at temperature 1: `ln F_k` falls, as `1 / T`
    ///   falls, at the rate `E_k[l] - E[l] <= E[max - l]` (the first over the first `k`
    ///   tokens, the second over all, at `1 / T`), which rises as `1 / T` falls, so is
    ///   at most its value at 1 (over a top-k's set, at most the row's: the tokens it
    ///   leaves out lie lower).
    ///
    /// Otherwise the draw at `tb` decides as well.
    fn draw_at_both<T: Logit>(
        &mut self,
        row: &[T],
        (ta, tb): (f32, f32),
        gap: f64,
        u: f64,
    ) -> Option<(Sample, bool)> {
        let (group_t, draw_t) = (self.params.temperature, self.draw_temperature);
        let at = |e: &mut Self, t: f32| {
            // (The draw's temperature: a trailing one's when the chain has it.)
            match draw_t {
                Some(_) => e.draw_temperature = Some(t),
                None => e.params.temperature = t,
            }
            e.finish(row, row, None, Goal::Draw(Some(u)))
        };
        let n = (row.len() + self.scratch.overlay.patch.len()) as f64;
        let (ta64, tb64) = (f64::from(ta), f64::from(tb));
        let rise = 1.0 / ta64 - 1.0 / tb64;
        self.scratch.reach = Some(Reach {
            power: ta64 * rise,
            n,
            share: if tb64 <= 1.0 {
                rise * gap
            } else {
                f64::INFINITY
            },
        });
        let a = at(self, ta);
        self.scratch.reach = None;
        let b = match std::mem::take(&mut self.scratch.reached) {
            true => None,
            false => Some(at(self, tb)),
        };
        (self.params.temperature, self.draw_temperature) = (group_t, draw_t);
        match (a, b) {
            (Ok(Some(a)), None) => Some((a, true)),
            (Ok(Some(a)), Some(Ok(Some(b)))) if a.token == b.token => Some((a, false)),
            _ => None,
        }
    }

    /// The `f32` temperatures `(ta, tb)` that bracket the dynamic temperature `rule`
    /// times the draw's on `row` under `scratch.overlay` (see
    /// [`run_dyn_temp`](Self::run_dyn_temp)), and a bound on the row's mean distance
    /// below its maximum at temperature 1 (`s / z` of its entropy sums, `inf` when
    /// they do not bound it); `None` when the bounds cannot give them, or give a
    /// temperature the `f32` weights do not hold at. The entropy pass records the row's
    /// block maxima in `scratch.block_max`, for the draws after it.
    fn dyn_temp_bracket<T: Logit>(
        &mut self,
        row: &[T],
        rule: (f32, f32, f32),
    ) -> Result<Option<Bracket>, Error> {
        let s = &mut self.scratch;
        let (max, e, above_neg_inf) = entropy_under_blocks(row, &s.overlay, &mut s.block_max)?;
        let ov = &self.scratch.overlay;
        if max == f32::NEG_INFINITY {
            return Ok(None);
        }
        let n = finite_under(row, ov, above_neg_inf);
        if n < 2 {
            return Ok(None);
        }
        let fast = self.dyn_temp_at(&e, n, rule);
        let wide = |b: Option<(f32, f32)>| {
            b.is_some_and(|(a, b)| f64::from(b) - f64::from(a) > DYN_TEMP_WIDTH * f64::from(a))
        };
        // (The quotient and its operands' bounds within a few ulps.)
        let gap = |e: &crate::stats::Entropy| match e.z - e.z_err {
            z if z > 0.0 => (e.s + e.s_err) / z * (1.0 + 4.0 * crate::stats::U64),
            _ => f64::INFINITY,
        };
        if self.params.logprobs().is_none() || !wide(fast) {
            return Ok(fast.map(|b| (b, gap(&e))));
        }
        // The logprobs are reported at the lower end: the precise statistics narrow a
        // bracket too wide for them (near a zero entropy, an exponent below 1 magnifies
        // the fast bound's error), or the dense copy gives them.
        let mut e = crate::stats::entropy_precise(row, ov.marked(), max);
        for &(_, l) in &ov.patch {
            e.add_exact(l, max);
        }
        let precise = self.dyn_temp_at(&e, n, rule);
        Ok(precise.filter(|_| !wide(precise)).map(|b| (b, gap(&e))))
    }

    /// The bracket of [`dyn_temp_bracket`](Self::dyn_temp_bracket) from the entropy
    /// statistics `e` of the row's `n >= 2` finite tokens.
    fn dyn_temp_at(
        &self,
        e: &crate::stats::Entropy,
        n: usize,
        (t, delta, exponent): (f32, f32, f32),
    ) -> Option<(f32, f32)> {
        let (h_lo, h_hi) = crate::floor_band::entropy(e, n)?;
        let at = |h: f64| crate::floor_band::temperature_at(t, delta, exponent, h, n);
        // The stage's temperature is `at` of its own entropy, which lies within the
        // bounds; `at` rises with the entropy. Its roundings and these (`ln`, the
        // quotient, `powf`, which scales its argument's relative error by the exponent,
        // and the products) are each within a few ulps.
        let slack = 1e-12 * (1.0 + f64::from(exponent));
        let rest = f64::from(self.draw_temperature());
        let lo = at(h_lo.max(0.0)) * rest * (1.0 - slack);
        let hi = at(h_hi.max(0.0)) * rest * (1.0 + slack);
        if !(lo > 0.0 && hi < f64::from(f32::MAX)) {
            return None;
        }
        let ta = match lo as f32 {
            a if f64::from(a) > lo => a.next_down(),
            a => a,
        };
        let tb = match hi as f32 {
            b if f64::from(b) < hi => b.next_up(),
            b => b,
        };
        let hold = ta > 0.0 && histogram::f32_weights_hold(ta) && histogram::f32_weights_hold(tb);
        hold.then_some((ta, tb))
    }

    /// Bans under `scratch.overlay` the tokens [`Xtc`](crate::Xtc) removes from `row`
    /// (none when it removes none), and returns how many; `None` when the fast pass cannot
    /// decide (see [`run_xtc`](Self::run_xtc)). The pass records the row's block maxima
    /// in `scratch.block_max`.
    ///
    /// The stage weighs each token `w = exp(l - max)` in `f64` and sums the weights in
    /// id order: that total lies within `err + (n + 2) 2^-52 z` of the pass's mass `z`
    /// (`err` the pass's bound; each `exp` within an ulp and `n` roundings of the sum).
    /// Since rounding a quotient is monotone, `w / T` for every total `T` of the interval
    /// lies between `w` divided by its ends, and a token is decided when both sides of
    /// the threshold agree. A token the pass does not collect weighs less than
    /// `threshold` against a total of at least 1, so it is neither above the threshold
    /// nor heavier than the lightest token above it.
    fn xtc_bans<T: Logit>(&mut self, row: &[T]) -> Result<Option<usize>, Error> {
        let (s, Some(rule)) = (&mut self.scratch, self.xtc.as_ref()) else {
            return Ok(None);
        };
        let offset = rule.threshold.ln() - 1e-3;
        if offset == f64::NEG_INFINITY {
            // (A threshold of 0: every token.)
            return Ok(None);
        }
        let maxima = Some(&mut s.block_max);
        let near = near_max_mass(row, &s.overlay, offset, &mut s.cand, maxima)?;
        let max = near.max;
        if max == f32::NEG_INFINITY {
            return Ok(None);
        }
        let weight = |l: f32| scaled(l, max, 1.0).exp();
        let u = crate::stats::U64;
        // The stage's own total, in id order: `n` roundings of the sum and an ulp per
        // `exp`.
        let (z, err) = (
            near.z,
            near.err + near.z * (row.len() as f64 + 2.0) * 2.0 * u,
        );
        let (lo, hi) = ((z - err) * (1.0 - 4.0 * u), (z + err) * (1.0 + 4.0 * u));
        if lo.is_nan() || lo <= 0.0 {
            return Ok(None);
        }
        let thr = rule.threshold;
        // No weight exceeds the maximum's, 1, and a rounded quotient is monotone: when
        // `1 / lo` is below the threshold, so is every token (a flat row's common case,
        // decided without an `exp`, and whether or not the pass collected every token
        // near the maximum).
        if 1.0 / lo < thr {
            return Ok(Some(0));
        }
        let Some(above) = near.above else {
            return Ok(None);
        };
        let ov = &s.overlay;
        s.cand.extend(
            ov.patch
                .iter()
                .filter(|p| p.1 >= above)
                .map(|&(id, l)| (l, id)),
        );
        let (mut n_above, mut least) = (0usize, f64::INFINITY);
        for &(l, _) in &s.cand {
            let w = weight(l);
            let (p_lo, p_hi) = (w / hi, w / lo);
            let yes = p_lo > thr || (!rule.strict && p_lo == thr);
            let no = p_hi < thr || (rule.strict && p_hi == thr);
            match (yes, no) {
                (true, _) => {
                    n_above += 1;
                    least = least.min(w);
                }
                (false, true) => {}
                (false, false) => return Ok(None),
            }
        }
        if n_above < 2 {
            return Ok(Some(0));
        }
        let special = &rule.special;
        let removed =
            |&&(l, id): &&(f32, TokenId)| weight(l) > least && special.binary_search(&id).is_err();
        let n_removed = s.cand.iter().filter(removed).count();
        if n_removed == 0 {
            return Ok(Some(0));
        }
        // Every collected token has a positive weight: the stage counts at least these.
        if s.cand.len() - n_removed < rule.keep {
            return Ok(None);
        }
        for &(_, id) in s.cand.iter().filter(removed) {
            s.overlay.ban(id);
        }
        Ok(Some(n_removed))
    }

    /// True when a floor stage's survivors can be left to the first cut group: the
    /// group right after it is the rest of the chain (but for a trailing temperature)
    /// and cuts nothing itself but a top-k, the stage keeps at least its best token, and
    /// the group's temperature holds for the histogram.
    ///
    /// A top-k after the floor stage keeps the best `k` of the tokens at or above the
    /// floor: the best `k` of the row (the tokens the stage cuts above its interval
    /// banned), cut at the floor, which is what the group's top-k does with the floor as
    /// its min-p threshold. Its `min_keep` must be 1, for it would keep tokens below the
    /// floor, and top-p and min-p after the floor would weigh the top-k's survivors
    /// before the floor cut them, so they take the compact set instead.
    fn floor_to_group(&self, rule: Floor) -> bool {
        let p = &self.params;
        let cut_nothing = p.top_k().is_none() && self.draw_temperature.is_none();
        let top_k_alone = p.top_k().is_some() && p.min_tokens_to_keep() == 1;
        rule.keep() == 1
            && self.pre == self.lead + 1
            && self.group == self.stages.len()
            && (cut_nothing || top_k_alone)
            && p.top_p() >= 1.0
            && p.min_p() <= 0.0
            && (p.is_greedy() || histogram::f32_weights_hold(p.temperature()))
    }

    /// The survivors of the floor stage `rule` on `row` under `scratch.overlay`, into
    /// `cands` in draw order at temperature 1; false when the fast statistic cannot
    /// decide (see [`run_floor`](Self::run_floor)).
    fn floor_cut<T: Logit>(&mut self, row: &[T], rule: Floor) -> Result<FloorCut, Error> {
        if let Floor::Typical { mass, keep } = rule {
            let crowded = self.floor_to_group(rule);
            return self.typical_cut(row, mass, keep, crowded);
        }
        let to_group = self.floor_to_group(rule);
        let s = &mut self.scratch;
        let ov = &s.overlay;
        let (n, marks) = (row.len(), ov.marked());
        // `Some(a)` once `scratch.cand` holds every unmarked token `>= a`.
        let mut collected = None;
        // (The passes that take the maximum on the way give it here.)
        let mut fused_max = None;
        let (mut fused, mut fused_entropy) = (None, None);
        if let Floor::Epsilon { .. } | Floor::Mirostat { .. } = rule {
            let cut = match rule {
                Floor::Epsilon { epsilon, .. } => crate::as_decimal(epsilon),
                Floor::Mirostat { cut } => cut,
                _ => unreachable!(),
            };
            // A kept token weighs at least `cut` of the total, itself at least the
            // maximum's weight 1: none lies below `max + ln(cut)`. The mass pass finds
            // the maximum and collects the tokens above that (with a margin) on the way.
            let near = near_max_mass(row, ov, cut.ln() - 1e-3, &mut s.cand, None)?;
            fused_max = Some(near.max);
            if near.max > f32::NEG_INFINITY {
                collected = near.above;
                fused = Some((cut, near.z, near.err));
            }
        }
        // The largest entry of each block, when the pass recorded them: the collection
        // below then reads only the blocks that can hold a survivor.
        let mut maxima = None;
        if let Floor::Eta { .. } = rule {
            let (max, e, _) = entropy_under_blocks(row, ov, &mut s.block_max)?;
            fused_max = Some(max);
            fused_entropy = Some(e);
            maxima = Some(&s.block_max[..]);
        }
        let max = match fused_max {
            Some(m) => m,
            None => adjusted_max(row, ov)?,
        };
        if max == f32::NEG_INFINITY {
            return Ok(FloorCut::Undecided);
        }
        let band = match rule {
            Floor::Epsilon { .. } | Floor::Mirostat { .. } => {
                let Some((cut, z, err)) = fused else {
                    return Ok(FloorCut::Undecided);
                };
                crate::floor_band::epsilon(cut, z, err, n, max)
            }
            Floor::Eta { epsilon, .. } => {
                let Some(e) = fused_entropy else {
                    return Ok(FloorCut::Undecided);
                };
                crate::floor_band::eta(crate::as_decimal(epsilon), &e, n, max)
            }
            Floor::TopNSigma { n: k } => {
                // (The moments need no `exp`: a pass of their own, after the maximum's,
                // costs less than folding the maximum in.)
                let mut m = crate::simd::row_moments(row, marks, max);
                for &(_, l) in &ov.patch {
                    m.add(l, max);
                }
                crate::floor_band::top_n_sigma(k, &m, n, max)
            }
            // (Decided by `typical_cut` above.)
            Floor::Typical { .. } => None,
        };
        let Some((lo, hi)) = band else {
            return Ok(FloorCut::Undecided);
        };
        // Every token with `l >= lo`: the buckets up to that of `lo` rounded down to
        // `f32` (bucket order is logit order, so this is a prefix of the draw order).
        let frame = Frame::new(max, 1.0);
        let mut lo32 = lo as f32;
        if f64::from(lo32) > lo {
            lo32 = lo32.next_down();
        }
        let last = if lo32 >= max {
            0
        } else if lo32 > f32::NEG_INFINITY {
            (histogram::key(lo32, frame) as usize).min(LAST)
        } else {
            LAST
        };
        let cap = if to_group { FLOOR_DIRECT } else { usize::MAX };
        if let Some(above) = collected.filter(|&a| f64::from(a) <= lo) {
            // The mass pass took every unmarked token at or above `lo`: add the patches
            // and put them in draw order.
            let patches = ov.patch.iter().filter(|p| p.1 >= above);
            s.cand.extend(patches.map(|&(id, l)| (l, id)));
            crate::order::sort(&mut s.cand, &mut s.keys);
        } else if !crate::simd::collect_in(
            row,
            ov,
            frame,
            (0, last),
            cap,
            &mut s.cand,
            &mut s.keys,
            maxima,
        ) {
            // Many survivors: the group cuts at the floor, provided that no token lies
            // within the band, which the band's own buckets show, and that the best
            // token is kept.
            let up = |x: f64| {
                let y = x as f32;
                if f64::from(y) < x {
                    y.next_up()
                } else {
                    y
                }
            };
            let (k_hi, k_lo) = (histogram::key(up(hi), frame) as usize, last);
            if f64::from(max) < hi || k_hi > k_lo {
                return Ok(FloorCut::Undecided);
            }
            crate::simd::collect(
                row,
                ov,
                frame,
                k_hi,
                k_lo,
                usize::MAX,
                &mut s.cand2,
                &mut s.keys,
            );
            if s.cand2.iter().any(|c| (lo..hi).contains(&f64::from(c.0))) {
                return Ok(FloorCut::Undecided);
            }
            let t = f64::from(self.params.temperature());
            let mid = 0.5 * (lo + hi);
            let ln = (mid - f64::from(max)) / if self.params.is_greedy() { 1.0 } else { t };
            return Ok(FloorCut::Crowded { ln });
        }
        // (Top-n-sigma's floor is never above the maximum.)
        let at_max = matches!(rule, Floor::TopNSigma { .. });
        let n_lo = s.cand.partition_point(|c| f64::from(c.0) >= lo);
        let n_hi = s
            .cand
            .partition_point(|c| f64::from(c.0) >= hi || (at_max && c.0 == max));
        if n_hi < n_lo {
            // A token within the band.
            return Ok(FloorCut::Undecided);
        }
        let keep = rule.keep();
        let mut kept = n_hi;
        if kept == 0 && matches!(rule, Floor::Mirostat { .. }) {
            // Nothing reaches the cut: the best token alone, ties to the lower id (the
            // first in draw order).
            if s.cand.is_empty() {
                crate::simd::collect(row, ov, frame, 0, 0, usize::MAX, &mut s.cand, &mut s.keys);
            }
            kept = 1.min(s.cand.len());
        } else if kept < keep {
            // Every token at or above the `keep`-th largest.
            if s.cand.len() < keep {
                if keep > 1 {
                    return Ok(FloorCut::Undecided);
                }
                crate::simd::collect(row, ov, frame, 0, 0, usize::MAX, &mut s.cand, &mut s.keys);
            }
            let Some(&(kth, _)) = s.cand.get(keep - 1) else {
                return Ok(FloorCut::Undecided);
            };
            kept = s.cand.partition_point(|c| c.0 >= kth);
        }
        s.cand.truncate(kept);
        self.cands
            .reset_sorted(s.cand.iter().map(|&(l, id)| (id, l)), 1.0);
        Ok(FloorCut::Done)
    }

    /// The survivors of [`TypicalP`](crate::TypicalP) (`mass` below 1, `keep` its
    /// `min_keep`) on `row` under `scratch.overlay`: into `cands` in draw order at
    /// temperature 1 (`Done`), or, where `crowded` allows it, as bans above a ceiling and
    /// a floor the first cut group takes (`Crowded`); `Undecided` when the fast
    /// statistics cannot decide (see [`run_floor`](Self::run_floor)).
    ///
    /// The stage keeps the tokens nearest its centre `ln total - H`: an interval of
    /// logits. One pass gives the row's maximum, mass and entropy sums, which bound the
    /// centre ([`floor_band::typical`](crate::floor_band::typical)). A guess of the
    /// interval's reach then sets the logits to collect (at most [`FLOOR_DIRECT`]
    /// tokens), which [`typical_walk`](Self::typical_walk) orders by distance and weighs
    /// exactly. The first guess comes from a sample of the row
    /// ([`typical_guess`](Self::typical_guess)); when the tokens it collects hold too
    /// little of the row's mass, a histogram of the whole row gives the second. When
    /// the interval holds more tokens than that, [`typical_crowded`](Self::typical_crowded)
    /// decides it from the histogram and the tokens near its two ends.
    fn typical_cut<T: Logit>(
        &mut self,
        row: &[T],
        mass: f64,
        keep: usize,
        crowded: bool,
    ) -> Result<FloorCut, Error> {
        let n = row.len();
        // (The blocks' maxima serve the collections from the top below.)
        let s = &mut self.scratch;
        let (max, e, _) = entropy_under_blocks(row, &s.overlay, &mut s.block_max)?;
        if max == f32::NEG_INFINITY || n < 2 {
            return Ok(FloorCut::Undecided);
        }
        let rule = (mass, keep, crowded);
        match self.typical_try(row, (max, &e, false), rule) {
            TypicalCut::Tight => {}
            cut => return Ok(cut.into()),
        }
        // The fast bounds too wide for a decision: again from the precise statistics (and
        // a precise histogram).
        let mut e = crate::stats::entropy_precise(row, self.scratch.overlay.marked(), max);
        for &(_, l) in &self.scratch.overlay.patch {
            e.add_exact(l, max);
        }
        Ok(self.typical_try(row, (max, &e, true), rule).into())
    }

    /// [`typical_cut`](Self::typical_cut) from the statistics `e` of the row (whose
    /// maximum is `max`; `precise` when they come from the `f64` pass, and so does the
    /// histogram): the sampled guess and its walk, then the histogram's guess and its
    /// walk, then the crowded cut, as each calls for the next (the histogram filled once
    /// at most).
    fn typical_try<T: Logit>(
        &mut self,
        row: &[T],
        (max, e, precise): (f32, &crate::stats::Entropy, bool),
        (mass, keep, crowded): (f64, usize, bool),
    ) -> TypicalCut {
        let Some((c, delta, mag)) = crate::floor_band::typical(e, row.len()) else {
            return TypicalCut::Undecided;
        };
        let u = crate::stats::U64;
        // The stage's target `mass * total`, for every total the bound of the mass holds
        // (the stage's total within `3 * 2^-53` of the exact mass; rounding a product is
        // monotone).
        let targets = (
            mass * ((e.z - e.z_err) * (1.0 - 4.0 * u)),
            mass * ((e.z + e.z_err) * (1.0 + 4.0 * u)),
        );
        let centre = Centre { max, c, delta, mag };
        let (reach, many) = self.typical_guess(row, &centre, (1.0 - mass) * e.z);
        let mut histogram = false;
        if !many {
            match self.typical_walk(row, &centre, reach, targets, keep) {
                TypicalCut::Overflow => {}
                TypicalCut::Short => {
                    self.typical_histogram(row, &centre, precise);
                    histogram = true;
                    let reach = self.typical_histogram_guess(&centre, targets.0) + 2.0 / 64.0;
                    match self.typical_walk(row, &centre, reach, targets, keep) {
                        TypicalCut::Overflow => {}
                        TypicalCut::Short => return TypicalCut::Undecided,
                        cut => return cut,
                    }
                }
                cut => return cut,
            }
        }
        if !crowded {
            return TypicalCut::Undecided;
        }
        if !histogram {
            self.typical_histogram(row, &centre, precise);
        }
        self.typical_crowded(row, &centre, targets, precise)
    }

    /// A guess of the distance from `centre` beyond which typical-p cuts, from every
    /// [`TYPICAL_STRIDE`]th token of `row`: the distance at which the sampled tokens
    /// below the centre, scaled by the stride, weigh `tail` (the mass the stage cuts),
    /// widened by up to a nat while the sample shows at most a quarter of
    /// [`FLOOR_DIRECT`] tokens within it; and whether the sample shows more than
    /// [`FLOOR_DIRECT`] tokens within the guess itself. The tokens above the centre are
    /// few and near the maximum, where the collection takes them all.
    fn typical_guess<T: Logit>(&mut self, row: &[T], centre: &Centre, tail: f64) -> (f64, bool) {
        const PER_NAT: f64 = 16.0;
        const BINS: usize = 64 * 16;
        let mut w = [0.0f64; BINS];
        let mut count = [0u32; BINS];
        let marks = self.scratch.overlay.marked();
        let (max, c) = (f64::from(centre.max), centre.c);
        for i in (0..row.len()).step_by(TYPICAL_STRIDE) {
            if marks.is_some_and(|m| adjust::is_marked(m, i)) {
                continue;
            }
            let x = f64::from(row[i].to_f32()) - max;
            if x < c {
                let b = (((c - x) * PER_NAT) as usize).min(BINS - 1);
                w[b] += x.exp();
                count[b] += 1;
            }
        }
        let stride = TYPICAL_STRIDE as f64;
        // From the farthest bin in: the first bin that brings the sampled tail to `tail`.
        let (mut acc, mut at) = (0.0, 0);
        for b in (0..BINS).rev() {
            acc += w[b] * stride;
            if acc >= tail {
                at = b + 1;
                break;
            }
        }
        // Then a nat more, as long as the sample shows few tokens within it.
        let inner: u32 = count[..at].iter().sum();
        let (mut extra, mut tokens) = (at, f64::from(inner) * stride);
        let many = tokens > FLOOR_DIRECT as f64;
        while extra < BINS && extra < at + PER_NAT as usize {
            tokens += f64::from(count[extra]) * stride;
            if tokens > (FLOOR_DIRECT / 4) as f64 {
                break;
            }
            extra += 1;
        }
        (extra as f64 / PER_NAT, many)
    }

    /// Fills the histogram of the row at temperature 1 from `centre`'s maximum, with the
    /// `f64` weights when `precise`.
    fn typical_histogram<T: Logit>(&mut self, row: &[T], centre: &Centre, precise: bool) {
        let s = &mut self.scratch;
        crate::simd::build(
            row,
            &s.overlay,
            Frame::new(centre.max, 1.0),
            LAST,
            precise,
            &mut s.hist_count,
            &mut s.hist_mass,
            None,
        );
    }

    /// A guess of the distance from `centre` within which the row holds `target`, from
    /// the histogram [`typical_histogram`](Self::typical_histogram) filled: the distance
    /// of the bucket's centre at which the buckets, taken by that distance, reach the
    /// target.
    fn typical_histogram_guess(&self, centre: &Centre, target: f64) -> f64 {
        let mass = &self.scratch.hist_mass;
        let c = centre.c;
        let dist = |b: usize| (-(b as f64) / 64.0 - c).abs();
        let mut up = histogram::bucket_of(c.min(0.0));
        let mut down = up;
        let (mut acc, mut reach) = (0.0, 0.0);
        while acc < target {
            let d_up = up.checked_sub(1).map_or(f64::INFINITY, dist);
            let d_down = if down <= LAST {
                dist(down)
            } else {
                f64::INFINITY
            };
            let b = if d_up < d_down {
                up -= 1;
                reach = d_up;
                up
            } else if d_down.is_finite() {
                down += 1;
                reach = d_down;
                down - 1
            } else {
                break;
            };
            acc += mass[b];
        }
        reach
    }

    /// Typical-p's cut from the tokens within `reach` (and `2 delta` more) of
    /// `centre.c`, collected from the row: `Done` with the survivors in `cands`, `Short`
    /// when the collected tokens do not reach the target, `Overflow` when they are more
    /// than [`FLOOR_DIRECT`], `Undecided` otherwise when the walk cannot decide.
    ///
    /// The tokens are ordered by their distance and weighed in `f64` as the stage
    /// weighs them, and the first whose running weight passes the stage's target (any
    /// in `targets`) decides the cut. It stands when the interval of the target lies
    /// within that token's weight, every token of another logit is more than twice the
    /// bound `sigma` on the distances away from its own (so the stage orders them alike;
    /// tokens of the same logit share a distance and are kept together), and every token
    /// not collected lies further out. Otherwise, and for a `min_keep` the cut does not
    /// meet, the stage runs on the dense copy.
    fn typical_walk<T: Logit>(
        &mut self,
        row: &[T],
        centre: &Centre,
        reach: f64,
        targets: (f64, f64),
        keep: usize,
    ) -> TypicalCut {
        let s = &mut self.scratch;
        let &Centre { max, c, delta, mag } = centre;
        let frame = Frame::new(max, 1.0);
        let reach = reach + 2.0 * delta;
        let (x_hi, x_lo) = (c + reach, c - reach);
        let top = if x_hi >= 0.0 {
            0
        } else {
            histogram::bucket_of(x_hi)
        };
        let bottom = if x_lo > -64.0 {
            histogram::bucket_of(x_lo).min(LAST)
        } else {
            LAST
        };
        // (`typical_cut` recorded the blocks' maxima.)
        if !crate::simd::collect_in(
            row,
            &s.overlay,
            frame,
            (top, bottom),
            FLOOR_DIRECT,
            &mut s.cand,
            &mut s.keys,
            Some(&s.block_max),
        ) {
            return TypicalCut::Overflow;
        }
        let maxd = f64::from(max);
        let x_of = |l: f32| f64::from(l) - maxd;
        let dist = |l: f32| (c - x_of(l)).abs();
        // The nearest that a token not collected can be: beyond the logit bounds of the
        // buckets on either side of the collected ones.
        let mut beyond = f64::INFINITY;
        let mut reach_x = mag;
        if top > 0 {
            let (a, _) = frame.interval(0, top - 1);
            beyond = beyond.min(x_of(a) - c);
        }
        if bottom < LAST {
            let (_, b) = frame.interval(bottom + 1, LAST);
            beyond = beyond.min(c - x_of(b));
            reach_x = reach_x.max(x_of(b).abs());
        }
        let (sigma, sigma_r) = typical_sigmas(centre, &[&s.cand], reach_x);
        // The collected tokens by distance: those at or above the centre backwards, and
        // those below it forwards, merged.
        let cand = &s.cand;
        let split = cand.partition_point(|p| x_of(p.0) >= c);
        let sides = (&cand[..split], &cand[split..]);
        let l_i = match typical_crossing(sides, &dist, max, (0.0, 0.0), targets) {
            Ok(l) => l,
            Err(false) => return TypicalCut::Short,
            Err(true) => return TypicalCut::Tight,
        };
        let d_i = dist(l_i);
        if beyond - sigma <= d_i + sigma {
            return TypicalCut::Short;
        }
        if !typical_separated(cand, (l_i, d_i, c), &x_of, (sigma, sigma_r)) {
            return TypicalCut::Tight;
        }
        s.cand.retain(|c| dist(c.0) <= d_i);
        if s.cand.len() < keep {
            return TypicalCut::Undecided;
        }
        self.cands
            .reset_sorted(s.cand.iter().map(|&(l, id)| (id, l)), 1.0);
        TypicalCut::Done
    }

    /// Typical-p's cut on a row where it keeps more than [`FLOOR_DIRECT`] tokens, from
    /// the histogram [`typical_histogram`](Self::typical_histogram) filled: `Crowded`
    /// with the tokens above the interval banned under `scratch.overlay` and the floor
    /// below it for the first cut group, or `Undecided`.
    ///
    /// A guess `d` of the interval's reach sets two zones, `2 / 64` nat (and `2 delta`)
    /// either side of `c + d` and of `c - d`. The buckets between them weigh what the
    /// histogram says, within its bound; every token above the lower zone's buckets and
    /// every token of the lower zone is collected. Those are ordered by distance and
    /// weighed exactly after the buckets' mass, and the first whose running weight
    /// passes the stage's target decides the cut, as in
    /// [`typical_walk`](Self::typical_walk): it stands when the interval of the target
    /// lies within its weight, every token of another logit is more than `2 sigma` away
    /// from its distance, the tokens of the buckets between the zones are nearer than
    /// that and those below the lower zone further. The collected tokens above the
    /// centre and beyond the cut are banned; the floor lies half an `f32` step below the
    /// lowest token kept below the centre, as a threshold from the largest token kept.
    fn typical_crowded<T: Logit>(
        &mut self,
        row: &[T],
        centre: &Centre,
        targets: (f64, f64),
        precise: bool,
    ) -> TypicalCut {
        let d = self.typical_histogram_guess(centre, targets.0);
        let s = &mut self.scratch;
        let u = crate::stats::U64;
        let &Centre { max, c, delta, mag } = centre;
        let frame = Frame::new(max, 1.0);
        let w = 2.0 / 64.0 + 2.0 * delta;
        if d <= 3.0 * w {
            return TypicalCut::Undecided;
        }
        let key_of = |x: f64| {
            if x >= 0.0 {
                0
            } else if x > -64.0 {
                histogram::bucket_of(x).min(LAST)
            } else {
                LAST
            }
        };
        // The buckets: `0..=upper` collected (none when the upper zone lies above the
        // maximum), `inner` weighed by the histogram, `lower` collected.
        let upper = (c + d - w < 0.0).then(|| key_of(c + d - w));
        let lower = (key_of(c - d + w), key_of(c - d - w));
        let first_inner = upper.map_or(0, |k| k + 1);
        if first_inner >= lower.0 {
            return TypicalCut::Undecided;
        }
        let inner = first_inner..lower.0;
        let ov = &s.overlay;
        let cap = 4 * FLOOR_DIRECT;
        match upper {
            Some(k) => {
                let (maxima, cand) = (Some(&s.block_max[..]), &mut s.cand);
                if !crate::simd::collect_in(row, ov, frame, (0, k), cap, cand, &mut s.keys, maxima)
                {
                    return TypicalCut::Undecided;
                }
            }
            None => s.cand.clear(),
        }
        if !crate::simd::collect(
            row,
            ov,
            frame,
            lower.0,
            lower.1,
            cap,
            &mut s.cand2,
            &mut s.keys,
        ) {
            return TypicalCut::Undecided;
        }
        let maxd = f64::from(max);
        let x_of = |l: f32| f64::from(l) - maxd;
        let dist = |l: f32| (c - x_of(l)).abs();
        let (mut m_in, mut e_in) = (0.0, 0.0);
        for b in inner.clone() {
            let (count, mass) = (s.hist_count[b], s.hist_mass[b]);
            m_in += mass;
            e_in += if precise {
                precise_bucket_bound(b, count, mass)
            } else {
                histogram::error_bound(b, count, mass, frame)
            };
        }
        // (The stage's weights within an ulp of the exact ones; the buckets' sum.)
        e_in += (4.0 + inner.len() as f64) * u * m_in;
        let (a_in, b_in) = frame.interval(inner.start, inner.end - 1);
        // (No token lies above the maximum.)
        let d_inner = (x_of(b_in).min(0.0) - c).max(c - x_of(a_in));
        let mut reach_x = mag.max(x_of(a_in).abs());
        let mut beyond = f64::INFINITY;
        if lower.1 < LAST {
            let (_, b) = frame.interval(lower.1 + 1, LAST);
            beyond = c - x_of(b);
            reach_x = reach_x.max(x_of(b).abs());
        }
        let (sigma, sigma_r) = typical_sigmas(centre, &[&s.cand, &s.cand2], reach_x);
        // Every collected token above the centre, nearest first (backwards), merged with
        // the lower zone's (forwards).
        let (hi_side, lo_side) = (&s.cand, &s.cand2);
        if hi_side.last().is_some_and(|p| x_of(p.0) < c)
            || lo_side.first().is_some_and(|p| x_of(p.0) >= c)
        {
            return TypicalCut::Undecided;
        }
        let inner = (m_in, e_in);
        let l_i = match typical_crossing((hi_side, lo_side), &dist, max, inner, targets) {
            Ok(l) => l,
            Err(false) => return TypicalCut::Undecided,
            Err(true) => return TypicalCut::Tight,
        };
        let d_i = dist(l_i);
        if d_inner + 2.0 * sigma >= d_i || beyond - sigma <= d_i + sigma {
            return TypicalCut::Undecided;
        }
        let bounds = (sigma, sigma_r);
        if !typical_separated(hi_side, (l_i, d_i, c), &x_of, bounds)
            || !typical_separated(lo_side, (l_i, d_i, c), &x_of, bounds)
        {
            return TypicalCut::Tight;
        }
        // The largest token kept: the first above the centre within the cut, or the
        // maximum when every token above the centre is in the buckets between the zones.
        let top = match upper {
            Some(_) => match hi_side.iter().find(|p| dist(p.0) <= d_i) {
                Some(p) => p.0,
                None => return TypicalCut::Undecided,
            },
            None => max,
        };
        let t = if self.params.is_greedy() {
            1.0
        } else {
            f64::from(self.params.temperature())
        };
        // The floor: half an `f32` step below the lowest token kept below the centre, so
        // that the group's comparison keeps it and cuts every token below it.
        let n_kept = lo_side.partition_point(|p| dist(p.0) <= d_i);
        let Some(&(lowest, _)) = lo_side[..n_kept].last() else {
            return TypicalCut::Undecided;
        };
        let floor = 0.5 * (f64::from(lowest) + f64::from(lowest.next_down()));
        let top = f64::from(top);
        if f64::from(lowest) - floor <= 1e-12 * (top - floor) {
            return TypicalCut::Undecided;
        }
        for &(l, id) in hi_side.iter() {
            if dist(l) > d_i {
                s.overlay.ban(id);
            }
        }
        TypicalCut::Crowded {
            ln: (floor - top) / t,
        }
    }

    /// The most allowed tokens a mask may have to be read as a compact row: [`SPARSE_MAX`],
    /// or [`SPARSE_MAX_SELECT`] when the marks are the alternative.
    fn sparse_max(&self) -> usize {
        if self.selects_only() {
            SPARSE_MAX_SELECT
        } else {
            SPARSE_MAX
        }
    }

    /// True when the cut only selects the best tokens: greedy, or a top-k the one-pass
    /// selection takes. It tests a token's mark only when the token beats its running
    /// threshold, so marks cost it nearly nothing, and a compact row pays off only for
    /// the sparsest masks.
    fn selects_only(&self) -> bool {
        let p = &self.params;
        p.is_greedy()
            || p.top_k()
                .is_some_and(|k| k.max(p.min_tokens_to_keep()) <= select::SMALL_K)
    }

    /// `goal` on the caller's row under the overlay: the patches of the bias and the
    /// penalties, and a mark for every token `ban` disallows.
    fn run_overlay<T: Logit>(
        &mut self,
        row: &[T],
        ban: Option<&TokenMask>,
        goal: Goal<'_>,
    ) -> Result<Option<Sample>, Error> {
        self.build_patches(row, ban);
        let r = self.finish(row, row, None, goal);
        self.scratch.overlay.clear();
        r
    }

    /// Fills `scratch.overlay` with the bias and penalty patches, then marks every token
    /// `ban` disallows.
    fn build_patches<T: Logit>(&mut self, row: &[T], ban: Option<&TokenMask>) {
        let window = penalty_window(&self.params, &self.seq);
        let s = &mut self.scratch;
        s.overlay.build(row, &self.params, window, &mut s.counts);
        if let Some(mask) = ban {
            s.overlay.ban_marks(mask.words());
        }
    }

    /// `goal` under a sparse mask, on the compact row of the allowed tokens' adjusted
    /// logits; the token and the distribution's ids are mapped back to vocabulary ids.
    ///
    /// The compact row keeps the tokens in id order and leaves out only `-inf` entries,
    /// which no stage counts (not even to keep `min_tokens_to_keep`), so every cut and
    /// every draw comes out as on the masked copy of the row.
    fn run_sparse<T: Logit>(
        &mut self,
        row: &[T],
        mask: &TokenMask,
        goal: Goal<'_>,
    ) -> Result<Option<Sample>, Error> {
        // The whole row is checked, disallowed tokens included, as on the dense path.
        crate::simd::max_checked(row, None)?;
        self.gather(row, mask);
        let vals = std::mem::take(&mut self.scratch.compact);
        let ids = std::mem::take(&mut self.scratch.compact_ids);
        let r = check_compact(&vals, &ids).and_then(|()| self.finish(row, &vals, Some(&ids), goal));
        self.scratch.compact = vals;
        self.scratch.compact_ids = ids;
        r
    }

    /// Fills `scratch.compact` with the adjusted logits (bias and penalties, with the
    /// dense stages' arithmetic) of the tokens `mask` allows, and `scratch.compact_ids`
    /// with their ids, in id order.
    fn gather<T: Logit>(&mut self, row: &[T], mask: &TokenMask) {
        let window = penalty_window(&self.params, &self.seq);
        let s = &mut self.scratch;
        let patched = !self.params.logit_bias().is_empty() || !window.is_empty();
        if patched {
            s.overlay.build(row, &self.params, window, &mut s.counts);
        }
        let (vals, ids, ov) = (&mut s.compact, &mut s.compact_ids, &s.overlay);
        vals.clear();
        ids.clear();
        for_each_bit(mask, self.vocab_size, false, |id| {
            ids.push(id);
            vals.push(if patched {
                ov.value(row, id)
            } else {
                row[id as usize].to_f32()
            });
        });
        s.overlay.clear();
    }

    /// The mask stage alone, for benchmarks: builds the engine's view of `logits` under
    /// `mask` as a masked sample would (the compact row, the marks or, with a stage that
    /// needs the whole row, the masked copy), then discards it. Returns how many entries
    /// that view holds: the allowed tokens, the marked ones, or the row's length. The
    /// row's NaN/`+inf` check is not part of it, except on the dense path, where the copy
    /// makes it.
    pub(crate) fn mask_stage<T: Logit>(
        &mut self,
        logits: &[T],
        mask: &TokenMask,
    ) -> Result<usize, Error> {
        let row = adjust::check_input(self.vocab_size, logits, Some(mask))?;
        let allowed = count_allowed(mask, self.vocab_size);
        let whole_row = self.pre > self.lead;
        if !whole_row && allowed <= self.sparse_max() {
            self.gather(row, mask);
            return Ok(self.scratch.compact.len());
        }
        if !whole_row {
            self.build_patches(row, Some(mask));
            self.scratch.overlay.clear();
            // Marks: one per disallowed token.
            return Ok(self.vocab_size - allowed);
        }
        let mut dense = std::mem::take(&mut self.dense);
        dense.reset_dense(row.len());
        let r = adjust::convert_checked(row, dense.logits_mut())
            .map(|_| mask.apply_prefix(dense.logits_mut()))
            .map(|()| row.len());
        self.dense = dense;
        r
    }

    /// The lowered adjustments, the mask and the stages that need the whole row, on the
    /// `f32` copy `c` of `row`.
    fn adjust_dense<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        c: &mut Candidates,
    ) -> Result<(), Error> {
        c.reset_dense(row.len());
        adjust::convert_checked(row, c.logits_mut())?;
        let logits = c.logits_mut();
        penalize::apply_bias(logits, self.params.logit_bias());
        let window = penalty_window(&self.params, &self.seq);
        if !window.is_empty() {
            penalize::apply_penalties(logits, window, &self.params, &mut self.scratch.counts);
        }
        if let Some(mask) = mask {
            mask.apply_prefix(logits);
        }
        // A bias or a penalty can push a huge finite logit to `+inf` (the row itself was
        // checked): refused as the patched passes and a `Penalties` stage refuse it,
        // before any stage sees the row. Only the tokens they touched can be such.
        let bad = (self.params.logit_bias().iter().map(|&(id, _)| id))
            .chain(window.iter().copied())
            .filter(|&id| adjust::not_finite_above(logits[id as usize]))
            .min();
        if let Some(id) = bad {
            let index = id as usize;
            return Err(if logits[index].is_nan() {
                Error::NanLogit { index }
            } else {
                Error::InfiniteLogit { index }
            });
        }
        let ctx = StageContext {
            history: self.seq.view(),
            seed: self.params.seed(),
            step: self.seq.step(),
        };
        let stages = &mut self.stages[self.lead..self.pre];
        run_stages(stages, c, &ctx, self.vocab_size)
    }

    /// The stages from `from` on, over the candidate set `c`, then the end of the chain
    /// (or the final distribution) over what they leave.
    fn finish_set<T: Logit>(
        &mut self,
        raw: &[T],
        c: &mut Candidates,
        from: usize,
        goal: Goal<'_>,
    ) -> Result<Option<Sample>, Error> {
        let ctx = StageContext {
            history: self.seq.view(),
            seed: self.params.seed(),
            step: self.seq.step(),
        };
        run_stages(&mut self.stages[from..], c, &ctx, self.vocab_size)?;
        // A set that a stage left out of draw order is drawn, and its probabilities
        // filled, without sorting it; only a distribution lists it in draw order.
        let unsorted = !c.is_sorted() && !matches!(goal, Goal::Distribution(_));
        if !unsorted {
            c.sort();
        }
        if c.max_logit() == f32::NEG_INFINITY {
            return Err(Error::NoCandidates);
        }
        let greedy = self.end == End::Greedy;
        // The greedy pick's index: the first in draw order.
        let top = if greedy && unsorted {
            best_index(c.ids(), c.logits())
        } else {
            0
        };
        let mut total = if greedy {
            self.weights.clear();
            1.0
        } else {
            c.weights(&mut self.weights)
        };
        let u = match goal {
            Goal::Distribution(out) => {
                out.clear();
                if greedy {
                    out.push((c.ids()[0], 1.0));
                } else {
                    out.extend(
                        (c.ids().iter().zip(&self.weights)).map(|(&id, &w)| (id, w / total)),
                    );
                }
                return Ok(None);
            }
            Goal::Probabilities { out, log } => {
                let none = if log { f32::NEG_INFINITY } else { 0.0 };
                out.fill(none);
                if greedy {
                    out[c.ids()[top] as usize] = if log { 0.0 } else { 1.0 };
                } else {
                    for (&id, &w) in c.ids().iter().zip(&self.weights) {
                        out[id as usize] = probability(w, total, log);
                    }
                }
                return Ok(None);
            }
            Goal::Draw(u) => u.unwrap_or_else(|| self.rng.uniform(ctx.step)),
        };
        let (mut out, top_id) = if greedy {
            let id = c.ids()[top];
            (Sample::new(id, 0.0), id)
        } else {
            let fast = unsorted.then(|| {
                let (ids, logits) = (c.ids(), c.logits());
                draw::inverse_cdf_unsorted(ids, logits, &self.weights, total, u, &mut self.order)
            });
            let i = match fast.flatten() {
                Some(i) => i,
                None => {
                    // (Where the bound cannot decide: the sorted walk, and its exact sums.)
                    if unsorted {
                        c.sort();
                        total = c.weights(&mut self.weights);
                    }
                    draw::inverse_cdf(&self.weights, total, u)
                }
            };
            let id = c.ids()[i];
            (Sample::new(id, (self.weights[i] / total).ln() as f32), id)
        };
        if let Some(n_alt) = self.params.logprobs() {
            let raw_max = crate::simd::max_checked(raw, None)?;
            let weights = &self.weights;
            logprobs::fill(raw, raw_max, n_alt, &mut out, |id| {
                match c.ids().iter().position(|&x| x == id) {
                    None => f32::NEG_INFINITY,
                    Some(_) if greedy && id == top_id => 0.0,
                    Some(_) if greedy => f32::NEG_INFINITY,
                    Some(i) => (weights[i] / total).ln() as f32,
                }
            });
        }
        Ok(Some(out))
    }

    /// Writes the survivors of the first cut group into `c`, in draw order, with their
    /// adjusted logits and vocabulary ids, at the group's temperature.
    fn survivors_into<U: Logit>(
        &mut self,
        adj: &[U],
        ids: Option<&[TokenId]>,
        survivors: Survivors,
        c: &mut Candidates,
    ) {
        let s = &mut self.scratch;
        let id_of = |id: TokenId| ids.map_or(id, |ids| ids[id as usize]);
        let t = f64::from(self.params.temperature());
        match survivors {
            Survivors::Greedy(id) => {
                c.reset_sorted(std::iter::once((id_of(id), s.overlay.value(adj, id))), 1.0);
            }
            Survivors::Row { .. } => unreachable!("only a draw at the chain's end"),
            Survivors::Prefix { n, .. } => {
                c.reset_sorted(s.cand[..n].iter().map(|&(l, id)| (id_of(id), l)), t);
            }
            Survivors::Flat { .. } => {
                sort_flat(s);
                c.reset_sorted(s.cand.iter().map(|&(l, id)| (id_of(id), l)), t);
            }
            Survivors::Hist { lo, n, frame, .. } => {
                s.cand2.clear();
                if lo > 0 {
                    let ov = &s.overlay;
                    crate::simd::collect(
                        adj,
                        ov,
                        frame,
                        0,
                        lo - 1,
                        usize::MAX,
                        &mut s.cand2,
                        &mut s.keys,
                    );
                }
                let all = s.cand2.iter().chain(&s.cand[..n]);
                c.reset_sorted(all.map(|&(l, id)| (id_of(id), l)), t);
            }
        }
    }

    /// Stages 2 to 5 on the adjusted row `adj` (under `scratch.overlay`), and the
    /// logprobs of the raw row `raw`; or the final distribution.
    ///
    /// With `ids`, `adj` is a compact row: entry `i` is token `ids[i]` (ids ascending),
    /// and the token, the distribution and the logprobs are given in vocabulary ids.
    fn finish<T: Logit, U: Logit>(
        &mut self,
        raw: &[T],
        adj: &[U],
        ids: Option<&[TokenId]>,
        goal: Goal<'_>,
    ) -> Result<Option<Sample>, Error> {
        if self.group < self.stages.len() {
            // Stages follow the first cut: they work on the set it leaves. (A precise cut
            // decides wherever the fast weights cannot.)
            let survivors = match self.cut(adj, false, None)? {
                Some(survivors) => survivors,
                None => self.cut(adj, true, None)?.ok_or(Error::NoCandidates)?,
            };
            let mut c = std::mem::take(&mut self.cands);
            self.survivors_into(adj, ids, survivors, &mut c);
            let r = self.finish_set(raw, &mut c, self.group, goal);
            self.cands = c;
            return r;
        }
        // First with the fast weights; again with the precise ones only if a decision
        // fell within the fast weights' error bound.
        let u = match goal {
            Goal::Distribution(_) | Goal::Probabilities { .. } => 0.0,
            Goal::Draw(u) => u.unwrap_or_else(|| self.rng.uniform(self.seq.step())),
        };
        // (The distribution is reported with the precise weights, so that it sums to 1.)
        let mut fast = matches!(goal, Goal::Draw(_));
        let (survivors, mut out) = loop {
            let draw_u = fast.then_some(u);
            let Some(survivors) = self.cut(adj, !fast, draw_u)? else {
                fast = false;
                continue;
            };
            let survivors = match self.draw_temperature {
                None => survivors,
                Some(t) => match self.reframe(adj, survivors, t, !fast) {
                    Some(survivors) => survivors,
                    None if fast => {
                        fast = false;
                        continue;
                    }
                    None => return Err(Error::NoCandidates),
                },
            };
            if let Goal::Distribution(_) | Goal::Probabilities { .. } = goal {
                break (survivors, Sample::new(0, 0.0));
            }
            match self.draw(adj, survivors, u, !fast) {
                Some(out) => break (survivors, out),
                None => fast = false,
            }
        };
        match goal {
            Goal::Distribution(out) => {
                self.distribution_of(adj, survivors, out);
                if let Some(ids) = ids {
                    out.iter_mut().for_each(|e| e.0 = ids[e.0 as usize]);
                }
                return Ok(None);
            }
            Goal::Probabilities { out, log } => {
                self.probabilities_of(adj, survivors, ids, out, log);
                return Ok(None);
            }
            Goal::Draw(_) => {}
        }
        if let Some(ids) = ids {
            out.token = ids[out.token as usize];
        }
        if let Some(n_alt) = self.params.logprobs() {
            let raw_max = crate::simd::max_checked(raw, None)?;
            logprobs::fill(raw, raw_max, n_alt, &mut out, |id| match ids {
                None => self.final_logprob(adj, &survivors, id),
                // A token the compact row leaves out was masked: `-inf`.
                Some(ids) => ids.binary_search(&id).map_or(f32::NEG_INFINITY, |i| {
                    self.final_logprob(adj, &survivors, i as TokenId)
                }),
            });
        }
        Ok(Some(out))
    }

    /// The survivors of the cut at the group's temperature, re-weighted at the draw's
    /// temperature `t`: the same tokens (a prefix of the draw order, which no
    /// temperature changes), their weights `exp((l - max) / t)`.
    ///
    /// A prefix is re-weighted token by token. The histogram's survivors are every token
    /// up to the last one in draw order: when the cut's pass also summed the weights at
    /// `t` in its buckets (`scratch.hist_second`), the draw walks those masses and only
    /// the sorted tail is re-weighted; otherwise a new histogram at `t` counts the
    /// buckets up to that token's, and the tokens of its bucket are sorted and cut at it.
    /// `None` when `precise` is false and the draw of the new histogram cannot be decided.
    fn reframe<U: Logit>(
        &mut self,
        adj: &[U],
        survivors: Survivors,
        t: f32,
        precise: bool,
    ) -> Option<Survivors> {
        let s = &mut self.scratch;
        match survivors {
            Survivors::Greedy(id) => Some(Survivors::Greedy(id)),
            // (Weighed at the draw's temperature already.)
            Survivors::Row { .. } => Some(survivors),
            Survivors::Prefix { n, .. } => {
                let max = s.cand.first().map_or(f32::NEG_INFINITY, |c| c.0);
                fill_weights(&s.cand[..n], max, t, &mut s.weight);
                let total = s.weight.iter().sum();
                Some(Survivors::Prefix { n, total })
            }
            Survivors::Flat {
                frame,
                t: at,
                whole,
                ..
            } => Some(if at == t {
                survivors
            } else {
                weigh_flat(s, frame.max, t, whole)
            }),
            Survivors::Hist { lo, n, frame, .. }
                if s.hist_second == Some(t) && lo <= histogram::LAST =>
            {
                // The cut's pass weighed every token at `t` too, in the cut's buckets:
                // the survivors stay those buckets before `lo` and `cand[..n]`, and the
                // draw walks the second masses. (Not through the last bucket, whose
                // second mass has no finite bound.)
                let slots = s.hist_mass.len();
                s.hist_mass.copy_from_slice(&s.hist_mass2[..slots]);
                s.hist_second = None;
                fill_weights(&s.cand[..n], frame.max, t, &mut s.weight);
                let g = Frame::new(frame.max, t);
                let err = if precise {
                    0.0
                } else {
                    histogram::bound_sum(0..lo, &s.hist_count, &s.hist_mass, |b, c, m| {
                        histogram::second_error_bound(b, c, m, frame, g)
                    })
                };
                let total = s.hist_mass[..lo].iter().sum::<f64>() + s.weight.iter().sum::<f64>();
                Some(Survivors::Hist {
                    lo,
                    n,
                    total,
                    frame,
                    err,
                })
            }
            Survivors::Hist { lo, n, frame, .. } => {
                let last = if n > 0 {
                    s.cand[n - 1]
                } else {
                    // Every token of the buckets before `lo`: the last is that of the
                    // last non-empty one.
                    let b = (0..lo).rev().find(|&b| s.hist_count[b] > 0)?;
                    collect_bucket(s, adj, frame, b);
                    *s.cand2.last()?
                };
                let f = Frame::new(frame.max, t);
                let k = histogram::key(last.0, f) as usize;
                crate::simd::build(
                    adj,
                    &s.overlay,
                    f,
                    k,
                    precise,
                    &mut s.hist_count,
                    &mut s.hist_mass,
                    None,
                );
                crate::simd::collect(
                    adj,
                    &s.overlay,
                    f,
                    k,
                    k,
                    usize::MAX,
                    &mut s.cand,
                    &mut s.keys,
                );
                let end = s
                    .cand
                    .partition_point(|c| select::order(c, &last) != std::cmp::Ordering::Greater);
                s.cand.truncate(end);
                fill_weights(&s.cand, f.max, t, &mut s.weight);
                let cum_before: f64 = s.hist_mass[..k].iter().sum();
                let err = if precise {
                    0.0
                } else {
                    histogram::error_bound_sum(0..k, &s.hist_count, &s.hist_mass, f)
                };
                let total = cum_before + s.weight.iter().sum::<f64>();
                Some(Survivors::Hist {
                    lo: k,
                    n: s.cand.len(),
                    total,
                    frame: f,
                    err,
                })
            }
        }
    }

    /// Writes the survivors with their probabilities, in draw order.
    fn distribution_of<U: Logit>(
        &mut self,
        adj: &[U],
        survivors: Survivors,
        out: &mut Vec<(TokenId, f64)>,
    ) {
        out.clear();
        let t = self.draw_temperature();
        let s = &mut self.scratch;
        let survivors = settle_flat(s, survivors);
        match survivors {
            Survivors::Greedy(id) => out.push((id, 1.0)),
            Survivors::Row { .. } => unreachable!("only a draw"),
            // (Settled into a prefix above.)
            Survivors::Flat { .. } => {}
            Survivors::Prefix { n, total } => out.extend(
                s.cand[..n]
                    .iter()
                    .zip(&s.weight)
                    .map(|(&(_, id), &w)| (id, w / total)),
            ),
            Survivors::Hist {
                lo,
                n,
                total,
                frame,
                ..
            } => {
                if lo > 0 {
                    crate::simd::collect(
                        adj,
                        &s.overlay,
                        frame,
                        0,
                        lo - 1,
                        usize::MAX,
                        &mut s.cand2,
                        &mut s.keys,
                    );
                    fill_weights(&s.cand2, frame.max, t, &mut s.weight2);
                    out.extend(
                        s.cand2
                            .iter()
                            .zip(&s.weight2)
                            .map(|(&(_, id), &w)| (id, w / total)),
                    );
                }
                out.extend(
                    s.cand[..n]
                        .iter()
                        .zip(&s.weight)
                        .map(|(&(_, id), &w)| (id, w / total)),
                );
            }
        }
    }

    /// Writes every token's probability (its logprob when `log`) into `out[id]`, in
    /// vocabulary ids (through `ids` for a compact row): 0 (`-inf`) for every token the
    /// cuts removed.
    ///
    /// The histogram's survivors are not sorted: one pass over the row writes each
    /// token of the buckets before `lo` (see [`histogram::fill`]) and the sorted ones
    /// from bucket `lo` on then take their exact weights. With [`FAST_PROBABILITIES`]
    /// that pass computes the weights in `f32`.
    fn probabilities_of<U: Logit>(
        &mut self,
        adj: &[U],
        survivors: Survivors,
        ids: Option<&[TokenId]>,
        out: &mut [f32],
        log: bool,
    ) {
        let t = self.draw_temperature();
        let none = if log { f32::NEG_INFINITY } else { 0.0 };
        let survivors = settle_flat(&mut self.scratch, survivors);
        let s = &self.scratch;
        let id_of = |i: TokenId| ids.map_or(i, |ids| ids[i as usize]) as usize;
        let (n, total) = match survivors {
            Survivors::Greedy(id) => {
                out.fill(none);
                out[id_of(id)] = if log { 0.0 } else { 1.0 };
                return;
            }
            Survivors::Prefix { n, total } => {
                out.fill(none);
                (n, total)
            }
            Survivors::Row { .. } => unreachable!("only a draw"),
            // (Settled into a prefix above.)
            Survivors::Flat { .. } => {
                out.fill(none);
                return;
            }
            Survivors::Hist {
                lo,
                n,
                total,
                frame,
                ..
            } => {
                match ids {
                    None => {
                        let fill = if log {
                            histogram::Fill::Log {
                                ln_total: total.ln(),
                            }
                        } else if FAST_PROBABILITIES {
                            histogram::Fill::ProbFast {
                                inv_total: (1.0 / total) as f32,
                            }
                        } else {
                            histogram::Fill::Prob {
                                inv_total: 1.0 / total,
                            }
                        };
                        // (Weighed at the draw's temperature, in the cut's buckets.)
                        let frames = (frame, Frame::new(frame.max, t));
                        crate::simd::fill(adj, &s.overlay, frames, lo, fill, none, out);
                    }
                    Some(ids) => {
                        // A compact row (at most `SPARSE_MAX` tokens, no overlay).
                        out.fill(none);
                        for (x, &id) in adj.iter().zip(ids) {
                            let l = x.to_f32();
                            if (histogram::key(l, frame) as usize) < lo {
                                let w = scaled(l, frame.max, t).exp();
                                out[id as usize] = probability(w, total, log);
                            }
                        }
                    }
                }
                (n, total)
            }
        };
        for (&(_, id), &w) in s.cand[..n].iter().zip(&s.weight) {
            out[id_of(id)] = probability(w, total, log);
        }
    }

    /// Stages 2 to 4: temperature, softmax and the tail cuts.
    ///
    /// `None` when `precise` is false and a top-p decision fell within the error bound of
    /// the fast weights.
    fn cut<U: Logit>(
        &mut self,
        adj: &[U],
        precise: bool,
        draw_u: Option<f64>,
    ) -> Result<Option<Survivors>, Error> {
        let (floor_ln, p_dec) = (self.floor_ln, self.top_p);
        let t_draw = self.draw_temperature();
        let second_t = self.draw_temperature;
        let p = &self.params;
        let keep = p.min_tokens_to_keep();
        let s = &mut self.scratch;
        if p.is_greedy() {
            let id = if s.overlay.patch.is_empty() {
                greedy::argmax_row(adj, &s.overlay, &mut s.cand)?
            } else {
                select::select_patched(adj, 1, &s.overlay, &mut s.cand)?;
                s.cand.first().ok_or(Error::NoCandidates)?.1
            };
            return Ok(Some(Survivors::Greedy(id)));
        }
        let (t, top_p) = (p.temperature(), p.top_p());
        // Min-p's threshold on the scaled logit, `ln(min_p)`, or the floor a first stage
        // decided (see [`Engine::run_floor`]).
        let ln_min = floor_ln.or(self.ln_min_p);
        // At an extreme temperature (subnormal, or above 1e30) the histogram's `f32` keys
        // and weights lose their meaning: every finite token is sorted instead.
        let sort_all = !histogram::f32_weights_hold(t);
        if let Some(k) = p.top_k().or(sort_all.then_some(adj.len())) {
            let k = k.max(keep);
            if k <= select::SMALL_K {
                select::select_patched(adj, k, &s.overlay, &mut s.cand)?;
            } else {
                crate::simd::max_checked(adj, None)?;
                s.overlay.check()?;
                materialise(adj, &s.overlay, &mut s.spare);
                select::select(&s.spare, k, &mut s.cand);
            }
            let max = s.cand.first().ok_or(Error::NoCandidates)?.0;
            fill_weights(&s.cand, max, t, &mut s.weight);
            let total: f64 = s.weight.iter().sum();
            let mut n = s.cand.len();
            if top_p < 1.0 {
                if let Some(len) = nucleus::prefix_len(&s.weight, p_dec, total) {
                    n = len.max(keep).min(n);
                }
            }
            if let Some(lm) = ln_min {
                let m = above_ln(&s.cand[..n], max, t, lm);
                n = m.max(keep).min(n);
            }
            let total = s.weight[..n].iter().sum();
            return Ok(Some(Survivors::Prefix { n, total }));
        }
        // Min-p alone on an untouched row: one pass finds the maximum and the tokens near
        // it; when they are few, sort them and cut exactly.
        let near_cap = if precise { MIN_P_DIRECT } else { MIN_P_NEAR };
        // (The row's maximum, which that pass finds even when it gives up.)
        let mut row_max = None;
        if let (true, Some(lm), None) = (top_p >= 1.0, ln_min, s.overlay.marked()) {
            // In logit units, with a margin of a sixteenth of a nat for rounding.
            let width = (f64::from(t) * (lm - 1.0 / 16.0)) as f32;
            let (max, complete) = select::near_max(adj, width, near_cap, !precise, &mut s.cand)?;
            if max == f32::NEG_INFINITY {
                return Err(Error::NoCandidates);
            }
            // (Without marks there are no patches: the row's maximum is the adjusted
            // row's.)
            row_max = Some(max);
            if complete {
                // Every token above `floor` was collected (the threshold only rose
                // towards it); tokens at `floor` exactly may be missing, so drop them.
                let floor = max + width;
                let margin_ok =
                    (f64::from(floor) - f64::from(max)) / f64::from(t) < lm - 1.0 / 32.0;
                s.cand.retain(|&(l, _)| l > floor);
                crate::order::sort(&mut s.cand, &mut s.keys);
                let m = above_ln(&s.cand, max, t, lm);
                let n = m.max(keep);
                // (Every token above `floor` is here, in order, so these are also the
                // `keep` best when there are that many.)
                if margin_ok && n <= s.cand.len() {
                    s.cand.truncate(n);
                    fill_weights(&s.cand, max, t, &mut s.weight);
                    let total = s.weight.iter().sum();
                    return Ok(Some(Survivors::Prefix { n, total }));
                }
            }
        }
        // Min-p alone with many survivors (or under marks), for the fast draw: the exact
        // threshold on the logit, the survivors above it, and the histogram of those
        // alone.
        if let (true, Some(lm), false) = (top_p >= 1.0, ln_min, precise) {
            return flat_min_p(s, adj, row_max, (t, t_draw), (lm, draw_u), keep).map(Some);
        }
        // Top-p without top-k: the best `NUCLEUS` tokens, the total mass from one
        // vectorised pass, and an exact cut among those tokens when the nucleus lies
        // within them; if it does not, more tokens while their number stays below
        // `NUCLEUS_MAX`.
        let mut known_max = None;
        // A draw from the whole row: decided among its best tokens when the target lies
        // there (a peaked row); otherwise by a search over the fast weights of every
        // finite token. (At a temperature the `f32` weights do not hold, the histogram's
        // own paths.)
        let whole_row = top_p >= 1.0 && histogram::f32_weights_hold(t_draw);
        if let (Some(u), true, None, false) = (draw_u, whole_row, ln_min, precise) {
            match draw_from_best(s, adj, t_draw, u)? {
                BestDraw::Drawn(row) => return Ok(Some(row)),
                BestDraw::Beyond { max } => {
                    // A flat row: drawn from the row in place where the search around
                    // the sample's place for the target decides.
                    let whole = (t_draw, f32::NEG_INFINITY);
                    if let Some(row) = draw_in_place(s, adj, max, whole, u) {
                        return Ok(Some(row));
                    }
                    // Otherwise every finite token survives, as min-p 0 keeps them, and
                    // the draw searches their fast weights (see [`draw_flat`]).
                    let every = (f64::NEG_INFINITY, None);
                    return flat_min_p(s, adj, Some(max), (t, t_draw), every, keep).map(Some);
                }
            }
        }
        if top_p < 1.0 && keep <= NUCLEUS_MAX {
            let mut cap = keep.max(NUCLEUS);
            let mut mass = None;
            let mut exact_thr = None;
            s.weight.clear();
            s.rest.clear();
            loop {
                if s.rest.is_empty() {
                    let (keys, seeds, rest) = (&mut s.keys, &mut s.seeds, &mut s.rest);
                    select::select_buffered(adj, cap, &s.overlay, keys, seeds, &mut s.cand, rest)?;
                } else {
                    // The entries the last selection found beyond its best `cap`, which
                    // are the next best (left only when the candidates fell short): taken
                    // before selecting again.
                    select::append_rest(&mut s.rest, &mut s.cand);
                }
                let max = s.cand.first().ok_or(Error::NoCandidates)?.0;
                known_max = Some(max);
                let floor = s.cand.last().map_or(max, |c| c.0);
                // The best `cap` begin with the best of the previous attempt, in the same
                // order: only the new ones need a weight.
                let done = s.weight.len();
                s.weight
                    .extend(s.cand[done..].iter().map(|&(l, _)| scaled(l, max, t).exp()));
                if mass.is_none()
                    && !precise
                    && beyond_reach(&s.seeds, adj.len(), (max, floor), t, p_dec, &s.weight)
                {
                    // A flat row: the histogram, without the total mass pass.
                    break;
                }
                let (z, err) = *mass.get_or_insert_with(|| {
                    let ov = &s.overlay;
                    let weight = |&(_, l): &(u32, f32)| scaled(l, max, t).exp();
                    if precise {
                        // The row's unmarked tokens, then the patches (in `f64`).
                        let z =
                            crate::simd::row_mass_precise(adj, ov.marked(), max, t, f32::INFINITY);
                        let zp: f64 = ov.patch.iter().map(weight).sum();
                        return (z + zp, 0.0);
                    }
                    let (z, err) = mass_with_candidates(s, adj, max, t, floor);
                    // (With the rounding of the `f64` weights and sums, and that of the
                    // precise `Z` that decides again when this bound is not enough.)
                    (z, err + z * 1e-11)
                });
                let target = p_dec * z;
                let n_p = if precise {
                    // Exact sums decide: the row's exact total, once.
                    let thr = exact_thr.get_or_insert_with(|| {
                        let (z, _) = exact_row_mass(adj, &s.overlay, max, t, None);
                        z.scaled_ceil(p_dec)
                    });
                    exact_sum::prefix_reaching(s.weight.iter().copied(), &ExactSum::new(), thr)
                } else {
                    // The decision stands only if the error of `z` and the rounding of the
                    // sums cannot move the target across either neighbouring cumulative sum.
                    match nucleus::crossing(&s.weight, 0.0, target, p_dec * err) {
                        nucleus::Crossing::Undecided => return Ok(None),
                        nucleus::Crossing::At(n) => Some(n),
                        nucleus::Crossing::Short => None,
                    }
                };
                if let Some(n_p) = n_p {
                    let mut n = n_p.max(keep).min(s.cand.len());
                    if let Some(lm) = ln_min {
                        let m = above_ln(&s.cand[..n], max, t, lm);
                        n = n.min(m.max(keep)).min(s.cand.len());
                    }
                    s.cand.truncate(n);
                    s.weight.truncate(n);
                    let total = s.weight.iter().sum();
                    return Ok(Some(Survivors::Prefix { n, total }));
                }
                if !s.rest.is_empty() {
                    continue;
                }
                // Every remaining token weighs at most the last one taken, so at least
                // `(target - c) / last` more are needed.
                let last = s.weight.last().copied().unwrap_or(0.0);
                let c: f64 = s.weight.iter().sum();
                // (A lower bound: half as many again are taken.)
                let need = s.cand.len() as f64 + ((target - c) / last).ceil();
                let next = 1.5 * need;
                if s.cand.len() < cap || need.is_nan() || need > NUCLEUS_MAX as f64 {
                    // Every finite token taken yet short of the target (a rounding case
                    // for the histogram to settle), or a large nucleus (a flat row).
                    break;
                }
                // (At least twice as many, at most `NUCLEUS_MAX`: the loop ends within two
                // more selections.)
                cap = (next as usize)
                    .next_power_of_two()
                    .max(2 * cap)
                    .min(NUCLEUS_MAX);
            }
        }
        // No top-k: the histogram.
        let ov = &s.overlay;
        let max = match known_max {
            // The best of top-p's candidates (or the draw's), whose selection checked
            // the row and the patches: the adjusted row's maximum.
            Some(max) => max,
            None => adjusted_max(adj, ov)?,
        };
        if max == f32::NEG_INFINITY {
            return Err(Error::NoCandidates);
        }
        let f = Frame::new(max, t);
        let key_thr = ln_min.map_or(LAST, histogram::bucket_of);
        let need_total = top_p < 1.0 || ln_min.is_none();
        if !need_total {
            // Min-p alone needs no total: when few tokens come near the threshold (a
            // peaked row), take them all in one pass, sort them and cut exactly. (The
            // same as above, for a row with marks or one that pass gave up on: a mask
            // read as marks and a masked copy then take the same exact cut, not one
            // the buckets' masses and the other the sorted sum.)
            let hi = (key_thr + 1).min(LAST);
            if crate::simd::collect(adj, ov, f, 0, hi, MIN_P_DIRECT, &mut s.cand, &mut s.keys) {
                let m = above_ln(&s.cand, max, t, ln_min.unwrap_or(f64::NEG_INFINITY));
                // (The tokens of buckets 0..=hi are the top ones, in order, so they
                // also hold the `keep` best when there are that many.)
                let n = m.max(keep);
                if n <= s.cand.len() {
                    s.cand.truncate(n);
                    fill_weights(&s.cand, max, t, &mut s.weight);
                    let total = s.weight.iter().sum();
                    return Ok(Some(Survivors::Prefix { n, total }));
                }
            }
        }
        let limit = if need_total {
            LAST
        } else {
            (key_thr + 1).min(LAST)
        };
        // A draw at another temperature than the cut's (a temperature stage after it):
        // the same pass weighs every token at the draw's temperature too, in the same
        // buckets, so that [`Engine::reframe`] needs no second pass over the row.
        s.hist_second = second_t.filter(|&t2| t2 != t && histogram::f32_weights_hold(t2));
        let second = s
            .hist_second
            .map(|t2| (Frame::new(max, t2), &mut s.hist_mass2[..]));
        crate::simd::build(
            adj,
            ov,
            f,
            limit,
            precise,
            &mut s.hist_count,
            &mut s.hist_mass,
            second,
        );
        let z: f64 = s.hist_mass.iter().sum();
        let err_of = |range: std::ops::Range<usize>| -> f64 {
            if precise {
                return 0.0;
            }
            histogram::error_bound_sum(range, &s.hist_count, &s.hist_mass, f)
        };
        if top_p >= 1.0 && ln_min.is_none() {
            return Ok(Some(Survivors::Hist {
                lo: BUCKETS,
                n: 0,
                total: z,
                frame: f,
                err: err_of(0..BUCKETS),
            }));
        }
        // The precise masses are within `slack` of the exact sums of the candidates'
        // weights (the `f64` exp's error and the rounding of sums of at most a row's
        // weights, twice over): the buckets from `lo_p` to `b_p` hold the exact crossing.
        let slack = if precise {
            let n = (adj.len() + ov.patch.len() + BUCKETS) as f64;
            2.0 * ((n + 4.0) * f64::EPSILON + 1e-13) * z
        } else {
            0.0
        };
        let (lo_p, b_p) = if top_p < 1.0 {
            let at = |x: f64| histogram::mass_bucket(&s.hist_mass[..BUCKETS], x).unwrap_or(LAST);
            (at(p_dec * z - slack), at(p_dec * z + slack))
        } else {
            (LAST, LAST)
        };
        let (b_m_lo, b_m_hi) = if ln_min.is_some() {
            (key_thr.saturating_sub(1), (key_thr + 1).min(LAST))
        } else {
            (LAST, LAST)
        };
        let b_k = histogram::count_bucket(&s.hist_count[..BUCKETS], keep);
        let b_k = match b_k {
            Some(b) if b <= limit => b,
            _ if need_total => LAST,
            _ => {
                // min-p alone with fewer than `keep` tokens near the top: the top `keep`.
                select::select_patched(adj, keep, ov, &mut s.cand)?;
                fill_weights(&s.cand, max, t, &mut s.weight);
                let n = s.cand.len();
                let total = s.weight.iter().sum();
                return Ok(Some(Survivors::Prefix { n, total }));
            }
        };
        let lo = lo_p.min(b_m_lo);
        let hi = b_k.max(b_p.min(b_m_hi));
        let err_before = err_of(0..lo);
        let err_total = if top_p < 1.0 {
            err_before + err_of(lo..BUCKETS)
        } else {
            0.0
        };
        crate::simd::collect(adj, ov, f, lo, hi, usize::MAX, &mut s.cand, &mut s.keys);
        fill_weights(&s.cand, max, t, &mut s.weight);
        let before: usize = s.hist_count[..lo].iter().map(|&c| c as usize).sum();
        let cum_before: f64 = s.hist_mass[..lo].iter().sum();
        let len = s.cand.len();
        let mut n = usize::MAX;
        if top_p < 1.0 {
            let n_p = if precise {
                // Exact sums decide: the row's total and the weight before bucket `lo`.
                let (z, head) = exact_row_mass(adj, ov, max, t, Some((f, lo)));
                let thr = z.scaled_ceil(p_dec);
                exact_sum::prefix_reaching(s.weight.iter().copied(), &head, &thr).unwrap_or(len)
            } else {
                let target = p_dec * z;
                // The decision stands if neither the fast masses nor the fast total nor
                // the rounding of the sums can move the target across either
                // neighbouring cumulative sum.
                let margin = err_before + p_dec * err_total;
                match nucleus::crossing(&s.weight, cum_before, target, margin) {
                    nucleus::Crossing::At(n) => n,
                    nucleus::Crossing::Short | nucleus::Crossing::Undecided => return Ok(None),
                }
            };
            n = n.min((before + n_p).max(keep));
        }
        if let Some(lm) = ln_min {
            let m = above_ln(&s.cand, max, t, lm);
            n = n.min((before + m).max(keep));
        }
        let n = n.saturating_sub(before).min(len);
        let total = cum_before + s.weight[..n].iter().sum::<f64>();
        Ok(Some(Survivors::Hist {
            lo,
            n,
            total,
            frame: f,
            err: err_before,
        }))
    }

    /// Stage 5: the draw.
    ///
    /// `None` when `precise` is false and the target fell within the error bound of the
    /// fast bucket masses.
    fn draw<U: Logit>(
        &mut self,
        adj: &[U],
        survivors: Survivors,
        u: f64,
        precise: bool,
    ) -> Option<Sample> {
        Some(match survivors {
            Survivors::Greedy(id) => Sample::new(id, 0.0),
            Survivors::Row { i, total, .. } => {
                let s = &self.scratch;
                Sample::new(s.cand[i].1, (s.weight[i] / total).ln() as f32)
            }
            Survivors::Prefix { n, total } => {
                let s = &mut self.scratch;
                let i = draw::inverse_cdf(&s.weight[..n], total, u);
                // A second uniform (see [`Engine::draw_at_both`]) whose target keeps
                // short of the same running sum by the sums' rounding and the weights'
                // picks the same token.
                let reach = s.reach.and_then(|r| r.uniform(u, total, n as f64));
                s.reached = reach.is_some_and(|r| {
                    let c: f64 = s.weight[..=i].iter().sum();
                    r * total + draw::margin(n, total) + 4.0 * f64::EPSILON * total < c
                });
                Sample::new(s.cand[i].1, (s.weight[i] / total).ln() as f32)
            }
            Survivors::Flat {
                n,
                total,
                frame,
                t,
                floor,
                err,
                whole,
            } => {
                // As for `Hist` below, with the survivors alone as terms.
                let margin =
                    2.0 * err + draw::margin(n + BUCKETS, total) + 4.0 * f64::EPSILON * total;
                let walk = (frame, t, floor, whole);
                let (id, w) = draw_flat(&mut self.scratch, walk, (u, total), margin, None).ok()?;
                Sample::new(id, (w / total).ln() as f32)
            }
            Survivors::Hist {
                lo,
                n,
                total,
                frame,
                err,
            } => {
                let t = self.draw_temperature();
                if precise {
                    let (id, w) = exact_hist(&mut self.scratch, adj, frame, t, lo, n, u);
                    return Some(Sample::new(id, (w / total).ln() as f32));
                }
                // The target moves by at most `err` with the total, the sums by `err`;
                // the `f64` sums and the product round by at most `draw::margin` (at
                // most every token of the row, and the bucket masses, summed), and the
                // bound on the fast masses is to the exact exponential, within 2^-52
                // of each weight.
                let terms = adj.len() + BUCKETS;
                let margin = 2.0 * err + draw::margin(terms, total) + 4.0 * f64::EPSILON * total;
                let walk = Walk {
                    frame,
                    t,
                    lo,
                    n,
                    target: u * total,
                    margin: Some(margin),
                };
                let (id, w) = draw_hist(&mut self.scratch, adj, walk)?;
                Sample::new(id, (w / total).ln() as f32)
            }
        })
    }

    /// The final-distribution logprob of token `id`.
    fn final_logprob<U: Logit>(&self, adj: &[U], survivors: &Survivors, id: TokenId) -> f32 {
        let s = &self.scratch;
        match *survivors {
            Survivors::Greedy(g) => {
                if g == id {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            }
            Survivors::Prefix { n, total } => s.cand[..n]
                .iter()
                .position(|&(_, c)| c == id)
                .map_or(f32::NEG_INFINITY, |i| (s.weight[i] / total).ln() as f32),
            Survivors::Row {
                n,
                total,
                max,
                t,
                floor,
                ..
            } => {
                let w = match s.cand[..n].iter().position(|&(_, c)| c == id) {
                    Some(i) => s.weight[i],
                    // (A token below the floor was cut: weight 0, logprob `-inf`.)
                    None => match s.overlay.value(adj, id) {
                        l if l >= floor => scaled(l, max, t).exp(),
                        _ => 0.0,
                    },
                };
                (w / total).ln() as f32
            }
            Survivors::Flat {
                total, frame, t, ..
            } => s
                .flat_ids
                .binary_search(&id)
                .map_or(f32::NEG_INFINITY, |i| {
                    (scaled(s.flat[i], frame.max, t).exp() / total).ln() as f32
                }),
            Survivors::Hist {
                lo,
                n,
                total,
                frame,
                ..
            } => {
                let l = s.overlay.value(adj, id);
                let k = histogram::key(l, frame) as usize;
                if k < lo {
                    let w = scaled(l, frame.max, self.draw_temperature()).exp();
                    (w / total).ln() as f32
                } else {
                    s.cand[..n]
                        .iter()
                        .position(|&(_, c)| c == id)
                        .map_or(f32::NEG_INFINITY, |i| (s.weight[i] / total).ln() as f32)
                }
            }
        }
    }
}

/// `stages` in turn on `c`, each checked by [`check_set`] before the next stage sees
/// the set (and the last before the chain's end does): no stage ever works on, or draws
/// from, a set a stage before it poisoned.
fn run_stages(
    stages: &mut [Box<dyn Stage>],
    c: &mut Candidates,
    ctx: &StageContext<'_>,
    vocab_size: usize,
) -> Result<(), Error> {
    for stage in stages {
        stage.apply(c, ctx)?;
        check_set(c, vocab_size)?;
    }
    Ok(())
}

/// The maximum of the adjusted row (`adj` under `ov`), checking the row and the patches
/// for NaN and `+inf`. The row's maximum may belong to a banned token, or to one a patch
/// lowered: then the maximum is that of the unmarked tokens (a mask's bans: in the same
/// pass as the row's check).
fn adjusted_max<U: Logit>(adj: &[U], ov: &adjust::Overlay) -> Result<f32, Error> {
    let mut max = if ov.has_bulk_bans() {
        crate::simd::max_checked(adj, ov.marked())?
    } else {
        let raw_max = crate::simd::max_checked(adj, None)?;
        let lowered_top = ov
            .patch
            .iter()
            .any(|&(id, l)| adj[id as usize].to_f32() == raw_max && l < raw_max);
        if lowered_top {
            crate::simd::max_checked(adj, ov.marked())?
        } else {
            raw_max
        }
    };
    ov.check()?;
    for &(_, l) in &ov.patch {
        max = max.max(l);
    }
    Ok(max)
}

/// The index of the first of the candidates in draw order: the largest logit, ties to
/// the lower id.
fn best_index(ids: &[TokenId], logits: &[f32]) -> usize {
    (0..ids.len())
        .min_by(|&a, &b| crate::kernels::order::order(&(logits[a], ids[a]), &(logits[b], ids[b])))
        .unwrap_or(0)
}

/// What one pass finds near the maximum of the adjusted row: see [`near_max_mass`].
struct NearMax {
    /// The adjusted row's maximum (the patches' included).
    max: f32,
    /// The adjusted row's mass relative to `max` (the patches' `f64` weights included)
    /// and a bound on its error: the pass's own, its rescale to `max` and the patches'
    /// weights within a few ulps each.
    z: f64,
    err: f64,
    /// `Some(above)` when the candidates hold every unmarked token at or above `above`
    /// (no patch), in no particular order.
    above: Option<f32>,
}

/// One vectorised pass over `row` under `ov` (checking the row and the patches): the
/// adjusted row's maximum and mass, with the unmarked tokens within `offset` (`< 0`)
/// nats of the maximum collected into `cand` when there are at most [`FLOOR_DIRECT`].
/// A patch above the row's maximum raises the collection's threshold with it.
fn near_max_mass<T: Logit>(
    row: &[T],
    ov: &adjust::Overlay,
    offset: f64,
    cand: &mut Vec<Cand>,
    maxima: Option<&mut Vec<f32>>,
) -> Result<NearMax, Error> {
    let marks = ov.marked();
    let (on, all) = match maxima {
        Some(maxima) => {
            // (Within the capacity reserved for the vocabulary: no allocation.)
            maxima.resize(row.len() / adjust::BLOCK, f32::NEG_INFINITY);
            crate::simd::online_collect_blocks(row, marks, offset, FLOOR_DIRECT, cand, maxima)
        }
        None => crate::simd::online_collect(row, marks, offset, FLOOR_DIRECT, cand),
    };
    if on.bad {
        adjust::first_non_finite_of(row)?;
    }
    ov.check()?;
    let max = ov.patch.iter().fold(on.max, |m, p| m.max(p.1));
    if max == f32::NEG_INFINITY {
        return Ok(NearMax {
            max,
            z: 0.0,
            err: 0.0,
            above: None,
        });
    }
    let above = crate::mass::collect_above(max, offset);
    let above = all.then(|| {
        cand.retain(|c| c.0 >= above);
        above
    });
    // The row's mass relative to `max`: one more factor (within a few ulps).
    let k = scaled(on.max, max, 1.0).exp();
    let zp: f64 = ov.patch.iter().map(|p| scaled(p.1, max, 1.0).exp()).sum();
    let z = on.z * k + zp;
    let u = crate::stats::U64;
    let err = on.err * k * (1.0 + 8.0 * u) + 8.0 * u * z;
    Ok(NearMax { max, z, err, above })
}

/// The adjusted row's maximum and its [`Entropy`](crate::stats::Entropy) sums (`row`
/// under `ov`, at temperature 1), from one vectorised pass over the unmarked entries and
/// the patches' exact terms; checks the row and the patches for NaN and `+inf`. The
/// third value is true when the pass saw no `-inf` entry in `row` (see
/// [`OnlineEntropy`](crate::stats::OnlineEntropy)). The engine takes them with the
/// blocks' maxima ([`entropy_under_blocks`]); the tests, from this plain pass too.
#[cfg(test)]
fn entropy_under<U: Logit>(
    row: &[U],
    ov: &adjust::Overlay,
) -> Result<(f32, crate::stats::Entropy, bool), Error> {
    let on = crate::simd::online_entropy(row, ov.marked());
    let (max, e) = entropy_adjusted(row, ov, &on)?;
    Ok((max, e, on.above_neg_inf))
}

/// The adjusted row's maximum and its [`Entropy`](crate::stats::Entropy) sums (`row`
/// under `ov`, at temperature 1), from one vectorised pass over the unmarked entries and
/// the patches' exact terms, recording the largest entry of each whole block of `row`
/// (marked or not) into `maxima` on the way, for a collection or selection after it
/// ([`collect_in`](crate::simd::collect_in),
/// [`select_by_maxima`](crate::select::select_by_maxima)); checks the row and the
/// patches for NaN and `+inf`. The third value is true when the pass saw no `-inf` entry
/// in `row` (see [`OnlineEntropy`](crate::stats::OnlineEntropy)).
fn entropy_under_blocks<U: Logit>(
    row: &[U],
    ov: &adjust::Overlay,
    maxima: &mut Vec<f32>,
) -> Result<(f32, crate::stats::Entropy, bool), Error> {
    // (Within the capacity reserved for the vocabulary: no allocation.)
    maxima.resize(row.len() / adjust::BLOCK, f32::NEG_INFINITY);
    let on = crate::simd::online_entropy_blocks(row, ov.marked(), maxima);
    let (max, e) = entropy_adjusted(row, ov, &on)?;
    Ok((max, e, on.above_neg_inf))
}

/// The adjusted row's maximum and entropy sums from the pass `on` over the unmarked
/// entries of `row`: the row and the patches checked, the sums taken to a patch above
/// the row's maximum and the patches' exact terms added.
fn entropy_adjusted<U: Logit>(
    row: &[U],
    ov: &adjust::Overlay,
    on: &crate::stats::OnlineEntropy,
) -> Result<(f32, crate::stats::Entropy), Error> {
    if on.bad {
        adjust::first_non_finite_of(row)?;
    }
    ov.check()?;
    let (m, mut e) = (on.max, on.e);
    let max = ov.patch.iter().fold(m, |a, p| a.max(p.1));
    if m > f32::NEG_INFINITY && max > m {
        e.rebase(m, max, row.len());
    }
    if max > f32::NEG_INFINITY {
        for &(_, l) in &ov.patch {
            e.add_exact(l, max);
        }
    }
    Ok((max, e))
}

/// The number of finite tokens of the adjusted row (`row` under `ov`): the unmarked
/// entries above `-inf` and the patches above it. With `above_neg_inf` (no entry of
/// `row` is `-inf`, as [`entropy_under_blocks`] reports), every unmarked entry counts, and
/// the marks' bits alone give their number; otherwise one pass over the row counts them.
fn finite_under<U: Logit>(row: &[U], ov: &adjust::Overlay, above_neg_inf: bool) -> usize {
    let unmarked = match ov.marked() {
        _ if !above_neg_inf => select::count_above(row, ov.marked(), f32::NEG_INFINITY),
        None => row.len(),
        Some(marks) => row.len() - count_set(marks, row.len()),
    };
    unmarked + ov.patch.iter().filter(|p| p.1 > f32::NEG_INFINITY).count()
}

/// The bounds on typical-p's distances from `centre` (see
/// [`floor_band::typical`](crate::floor_band::typical)) for the tokens of `tokens` and
/// any token within `reach` nats of the maximum: `(sigma, sigma_r)`, the bound on a
/// distance's roundings `sigma_r` and, with the centre's own bound, `sigma`.
fn typical_sigmas(centre: &Centre, tokens: &[&[Cand]], reach: f64) -> (f64, f64) {
    let max = f64::from(centre.max);
    let far = |r: f64, p: &Cand| r.max((f64::from(p.0) - max).abs());
    let reach = tokens.iter().flat_map(|t| t.iter()).fold(reach, far);
    let sigma_r = 6.06 * crate::stats::U64 * (reach + centre.mag);
    (centre.delta * 1.01 + sigma_r, sigma_r)
}

/// True when the stage orders every token of `tokens` whose logit is not `l_i` as
/// their distances from the centre `c` do, relative to the token at `l_i` (at distance
/// `d_i`, more than `2 sigma` from 0): on the same side of the centre, where the order
/// is that of the logits whatever the centre, none lies within `2 sigma_r` (the
/// distances' roundings) of `d_i`; on the other side, none within `2 sigma` (the
/// centre's bound too). `x` gives a logit's scaled value.
fn typical_separated(
    tokens: &[Cand],
    (l_i, d_i, c): (f32, f64, f64),
    x: &impl Fn(f32) -> f64,
    (sigma, sigma_r): (f64, f64),
) -> bool {
    if d_i <= 2.0 * sigma {
        return false;
    }
    let above = x(l_i) >= c;
    tokens.iter().all(|&(l, _)| {
        let bound = if (x(l) >= c) == above { sigma_r } else { sigma };
        l == l_i || ((c - x(l)).abs() - d_i).abs() > 2.0 * bound
    })
}

/// Bound on the error of `mass` (`count` weights) in bucket `b` of a precise histogram
/// at temperature 1: each `f64` weight `exp_neg(fl(l - max))` within `4e-15` plus
/// `1.01 * 2^-53 |x|` (relative, `|x| < (b + 1) / 64` nats) of `e^x`, and the bucket's
/// sum within `(count + 2) 2^-53`. The last bucket's weights are below `e^-63` each, and
/// `e^-708` where `exp_neg` clamps.
fn precise_bucket_bound(b: usize, count: u32, mass: f64) -> f64 {
    let u = crate::stats::U64;
    let count = f64::from(count);
    if b == LAST {
        count * 1e-40 + mass * (count + 2.0) * u
    } else {
        mass * (4e-15 + 1.01 * u * (b as f64 + 1.0) / 64.0 + (count + 2.0) * u)
    }
}

/// A collected token: its adjusted logit and id.
type Cand = (f32, TokenId);

/// Typical-p's crossing: the tokens of `hi_side` backwards and of `lo_side` forwards
/// (each sorted by logit descending, the first above the centre, the second below it),
/// merged by `dist`, their exact weights (relative to `max`) added to `base` (within its
/// bound): the logit of the first at which the running weight reaches the target, any
/// in `targets`; `Err(true)` when the running weight at that token leaves the target's
/// interval open, `Err(false)` when no token reaches it. (Tokens of one logit come in
/// any order: they are kept or cut together.)
fn typical_crossing(
    (hi_side, lo_side): (&[Cand], &[Cand]),
    dist: &impl Fn(f32) -> f64,
    max: f32,
    (base, base_err): (f64, f64),
    (target_lo, target_hi): (f64, f64),
) -> Result<f32, bool> {
    let u = crate::stats::U64;
    let (mut up, mut down) = (hi_side.len(), 0);
    // The exact weights' running sum, within `(i + 2) 2^-53` of itself.
    let (mut sum, mut i) = (0.0, 0usize);
    loop {
        let d_up = up
            .checked_sub(1)
            .map_or(f64::INFINITY, |j| dist(hi_side[j].0));
        let d_down = lo_side.get(down).map_or(f64::INFINITY, |p| dist(p.0));
        let l = if d_up <= d_down && up > 0 {
            up -= 1;
            hi_side[up].0
        } else if down < lo_side.len() {
            down += 1;
            lo_side[down - 1].0
        } else {
            return Err(false);
        };
        sum += scaled(l, max, 1.0).exp();
        let err = (i as f64 + 2.0) * u * sum + base_err;
        if base + sum + err >= target_lo {
            return if base + sum - err < target_hi {
                Err(true)
            } else {
                Ok(l)
            };
        }
        i += 1;
    }
}

/// [`Engine::softmax_into`] on `row` under `ov`, at temperature `t`.
fn softmax_in<T: Logit>(
    row: &[T],
    ov: &adjust::Overlay,
    t: f32,
    out: &mut [f32],
    log: bool,
) -> Result<(), Error> {
    // One pass finds the maximum of the unmarked entries while it writes their weights
    // (each span's against the running maximum, `used`), and checks the row. The
    // logprobs need only the sum: the same pass without the writes.
    let mut used = [0.0f32; crate::mass::SPANS];
    let on = if log {
        crate::simd::online_weights_into::<_, false>(row, ov.marked(), t, out, &mut used)
    } else {
        crate::simd::online_weights_into::<_, true>(row, ov.marked(), t, out, &mut used)
    };
    if on.bad {
        adjust::first_non_finite_of(row)?;
    }
    ov.check()?;
    let max = ov.patch.iter().fold(on.max, |m, p| m.max(p.1));
    if max == f32::NEG_INFINITY {
        return Err(Error::NoCandidates);
    }
    let weight = |l: f32| scaled(l, max, t).exp();
    let z = on.z * weight(on.max) + ov.patch.iter().map(|p| weight(p.1)).sum::<f64>();
    if log {
        let ln_z = z.ln();
        crate::simd::logprobs_into(row, ov.marked(), max, t, ln_z, out);
        let inv_t = 1.0 / f64::from(t);
        for &(id, l) in &ov.patch {
            out[id as usize] = ((f64::from(l) - f64::from(max)) * inv_t - ln_z) as f32;
        }
    } else {
        // Each span's weights, relative to its running maximum, times
        // `exp((used - max) / T) / Z` rounded once to `f32` (as `1 / Z` was).
        let len = crate::mass::span_len(row.len());
        let spans = row.len().div_ceil(len);
        for u in &mut used[..spans] {
            *u = (weight(*u) / z) as f32;
        }
        crate::mass::scale_spans(out, &used[..spans], len);
        for &(id, l) in &ov.patch {
            out[id as usize] = probability(weight(l), z, false);
        }
    }
    Ok(())
}

/// The check of the dense path on a candidate set: the NaN or `+inf` of the lowest
/// token id, then nothing else (an empty set is the caller's to report). A stage can
/// refill the set ([`Candidates::reset_from`]): a token id outside the vocabulary is
/// [`Error::TokenOutOfRange`]. (The temperature needs no check: `Candidates` keeps it
/// finite and `> 0`.)
fn check_set(c: &Candidates, vocab_size: usize) -> Result<(), Error> {
    if c.is_dense() {
        if c.len() > vocab_size {
            let id = TokenId::try_from(vocab_size).unwrap_or(TokenId::MAX);
            return Err(Error::TokenOutOfRange { id, vocab_size });
        }
        return adjust::recheck(c.logits()).map(|_| ());
    }
    if let Some(&id) = c.ids().iter().find(|&&id| id as usize >= vocab_size) {
        return Err(Error::TokenOutOfRange { id, vocab_size });
    }
    let bad = (c.ids().iter().zip(c.logits()))
        .filter(|(_, &l)| adjust::not_finite_above(l))
        .min_by_key(|(&id, _)| id);
    match bad {
        Some((&id, l)) if l.is_nan() => Err(Error::NanLogit { index: id as usize }),
        Some((&id, _)) => Err(Error::InfiniteLogit { index: id as usize }),
        None => Ok(()),
    }
}

/// The tokens the penalties count this step (none without penalties).
fn penalty_window<'a>(params: &SamplingParams, seq: &'a Sequence) -> &'a [TokenId] {
    if params.has_penalties() {
        seq.view()
            .penalized(params.penalty_window(), params.penalize_prompt())
    } else {
        &[]
    }
}

/// The bits of word `w` of a mask over `len` tokens that stand for tokens (all but the
/// tail of the last word, which a caller of `words_mut` may have left set).
#[inline]
fn valid_bits(w: usize, len: usize) -> u32 {
    let rest = len.saturating_sub(w * 32);
    if rest >= 32 {
        u32::MAX
    } else {
        (1u32 << rest) - 1
    }
}

/// Number of the first `len` tokens (at most the mask's length) that `mask` allows: one
/// pass over their words, stray bits past `len` ignored.
fn count_allowed(mask: &TokenMask, len: usize) -> usize {
    let len = len.min(mask.len());
    count_set(mask.words(), len)
}

/// The number of the first `len` tokens whose bit is set in `words` (at least
/// `len.div_ceil(32)` of them): stray bits past `len` are ignored.
fn count_set(words: &[u32], len: usize) -> usize {
    let words = &words[..len.div_ceil(32)];
    let Some((&last, body)) = words.split_last() else {
        return 0;
    };
    popcount(body) + (last & valid_bits(body.len(), len)).count_ones() as usize
}

/// Words per block of the mask passes.
const MASK_BLOCK: usize = 16;

/// The number of set bits in `words`.
///
/// Baseline x86-64 has no `popcnt` instruction, and `count_ones` then costs about five
/// cycles a word; this counts the bits of each byte with shifts and masks on 16 lanes,
/// which vectorises, and sums the byte counts every 31 blocks (before a byte can
/// overflow).
fn popcount(words: &[u32]) -> usize {
    const GROUP: usize = 31 * MASK_BLOCK;
    let mut total = 0usize;
    let groups = words.chunks_exact(GROUP);
    let rest = groups.remainder();
    for group in groups {
        let mut acc = [0u32; MASK_BLOCK];
        for block in group.chunks_exact(MASK_BLOCK) {
            for j in 0..MASK_BLOCK {
                acc[j] += byte_counts(block[j]);
            }
        }
        total += acc.iter().map(|&a| sum_bytes(a)).sum::<usize>();
    }
    total + rest.iter().map(|w| w.count_ones() as usize).sum::<usize>()
}

/// The number of set bits of each byte of `x`, in that byte.
#[inline(always)]
fn byte_counts(x: u32) -> u32 {
    let x = x - ((x >> 1) & 0x5555_5555);
    let x = (x & 0x3333_3333) + ((x >> 2) & 0x3333_3333);
    (x + (x >> 4)) & 0x0F0F_0F0F
}

/// The sum of the four bytes of `x`.
#[inline(always)]
fn sum_bytes(x: u32) -> usize {
    let x = (x & 0x00FF_00FF) + ((x >> 8) & 0x00FF_00FF);
    ((x & 0xFFFF) + (x >> 16)) as usize
}

/// Calls `f(w, bits)` for every word `w` of `mask`'s first `len` slots holding a token it
/// allows (`disallowed` false) or disallows (true), with those tokens' bits, in ascending order.
/// A block of 16 words with no such token costs one test.
#[inline]
fn for_each_word(mask: &TokenMask, len: usize, disallowed: bool, mut f: impl FnMut(usize, u32)) {
    let len = len.min(mask.len());
    let flip = if disallowed { u32::MAX } else { 0 };
    let words = &mask.words()[..len.div_ceil(32)];
    // Whole blocks, skipped when empty, but for the last word (its tail bits are not
    // tokens).
    let body = words.len().saturating_sub(1) / MASK_BLOCK * MASK_BLOCK;
    for (b, block) in words[..body].chunks_exact(MASK_BLOCK).enumerate() {
        if block.iter().fold(0, |acc, &w| acc | (w ^ flip)) == 0 {
            continue;
        }
        for (j, &word) in block.iter().enumerate() {
            let bits = word ^ flip;
            if bits != 0 {
                f(b * MASK_BLOCK + j, bits);
            }
        }
    }
    for (w, &word) in words.iter().enumerate().skip(body) {
        let bits = (word ^ flip) & valid_bits(w, len);
        if bits != 0 {
            f(w, bits);
        }
    }
}

/// Calls `f` with every token below `len` that `mask` allows (`disallowed` false) or
/// disallows (true), in ascending id order.
#[inline]
fn for_each_bit(mask: &TokenMask, len: usize, disallowed: bool, mut f: impl FnMut(TokenId)) {
    for_each_word(mask, len, disallowed, |w, mut bits| {
        let base = (w * 32) as TokenId;
        while bits != 0 {
            f(base + bits.trailing_zeros());
            bits &= bits - 1;
        }
    });
}

/// The checks of the dense path on a compact row: the first NaN or `+inf` (the bias or a
/// penalty overflowed) by vocabulary id, then [`Error::NoCandidates`] when no entry is
/// finite.
fn check_compact(vals: &[f32], ids: &[TokenId]) -> Result<(), Error> {
    let mut any = false;
    for (&v, &id) in vals.iter().zip(ids) {
        if v.is_nan() {
            return Err(Error::NanLogit { index: id as usize });
        }
        if v == f32::INFINITY {
            return Err(Error::InfiniteLogit { index: id as usize });
        }
        any |= v > f32::NEG_INFINITY;
    }
    if any {
        Ok(())
    } else {
        Err(Error::NoCandidates)
    }
}

/// Whether [`Engine::probabilities`] computes the weights of the histogram's unsorted
/// survivors in `f32` ([`exp_neg_f32`](crate::exp::exp_neg_f32)) rather than `f64`.
const FAST_PROBABILITIES: bool = false;

/// `w / total` as an `f32` probability, or its logarithm when `log`.
#[inline]
fn probability(w: f64, total: f64, log: bool) -> f32 {
    if log {
        (w / total).ln() as f32
    } else {
        (w / total) as f32
    }
}

/// `(l - max) / t` in `f64`: the scaled logit every stage and the reference agree on.
#[inline]
fn scaled(l: f32, max: f32, t: f32) -> f64 {
    (f64::from(l) - f64::from(max)) / f64::from(t)
}

fn fill_weights(cand: &[(f32, TokenId)], max: f32, t: f32, weight: &mut Vec<f64>) {
    weight.clear();
    weight.extend(cand.iter().map(|&(l, _)| scaled(l, max, t).exp()));
}

/// Top-p's exact sums for a decision the fast sums left open: the exact total of the
/// weights `exp((l - max) / t)` of the adjusted row (its unmarked tokens, then the
/// patches), the same `f64` weights the candidates have, and the exact weight of the
/// tokens in histogram buckets below `before.1` (zero without `before`). A scalar pass,
/// on the precise path only.
fn exact_row_mass<U: Logit>(
    adj: &[U],
    ov: &adjust::Overlay,
    max: f32,
    t: f32,
    before: Option<(Frame, usize)>,
) -> (ExactSum, ExactSum) {
    let (mut total, mut head) = (ExactSum::new(), ExactSum::new());
    let mut add = |l: f32| {
        if l > f32::NEG_INFINITY {
            let w = scaled(l, max, t).exp();
            total.add(w);
            if let Some((f, lo)) = before {
                if (histogram::key(l, f) as usize) < lo {
                    head.add(w);
                }
            }
        }
    };
    let marks = ov.marked();
    for (i, x) in adj.iter().enumerate() {
        if !marks.is_some_and(|m| adjust::is_marked(m, i)) {
            add(x.to_f32());
        }
    }
    for &(_, l) in &ov.patch {
        add(l);
    }
    (total, head)
}

/// The adjusted row as `f32` into `out` (only for a top-k larger than the one-pass
/// selection handles): `-inf` at the marked tokens, then the patches.
fn materialise<U: Logit>(adj: &[U], ov: &adjust::Overlay, out: &mut Vec<f32>) {
    out.clear();
    out.extend(adj.iter().map(|x| x.to_f32()));
    if let Some(marks) = ov.marked() {
        for (w, &bits) in marks.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                if let Some(l) = out.get_mut(w * 32 + bits.trailing_zeros() as usize) {
                    *l = f32::NEG_INFINITY;
                }
                bits &= bits - 1;
            }
        }
    }
    for &(id, l) in &ov.patch {
        out[id as usize] = l;
    }
}

/// True when the selection's seeds (one entry per block of the `n`-token row, a sample
/// of it) estimate a total mass so large that the best [`NUCLEUS_MAX`] tokens, of which
/// the best (down to the logit `floor`) have the weights `weight`, would hold less than
/// half of top-p's target: a flat row, whose nucleus the histogram finds, so the total
/// mass pass is not worth making. Only a choice of path: both give the same tokens.
///
/// The estimate is the candidates' exact mass plus the seeds below `floor` scaled to the
/// row: a seed among the candidates (a rare high token that the sample happened to hit)
/// is counted once, not once per block.
fn beyond_reach(
    seeds: &[f32],
    n: usize,
    (max, floor): (f32, f32),
    t: f32,
    top_p: f64,
    weight: &[f64],
) -> bool {
    let (Some(&last), Some(rest)) = (weight.last(), mass_below(seeds, n, (max, floor), t)) else {
        return false;
    };
    let c: f64 = weight.iter().sum();
    let reach = c + NUCLEUS_MAX.saturating_sub(weight.len()) as f64 * last;
    reach < 0.5 * top_p * (c + rest)
}

/// The selection seeds' estimate of the mass of the `n`-token row at or below the logit
/// `floor` (see [`beyond_reach`]), at temperature `t` against `max`; `None` for fewer
/// than 64 seeds.
fn mass_below(seeds: &[f32], n: usize, (max, floor): (f32, f32), t: f32) -> Option<f64> {
    if seeds.len() < 64 {
        return None;
    }
    // Every seed is an unmarked entry of the row, at most `max`; those at or above
    // `floor` are few, and taken back out.
    let all = crate::simd::row_mass(seeds, None, max, t, f32::INFINITY).0;
    let high: f64 = seeds
        .iter()
        .filter(|&&l| l >= floor)
        .map(|&l| scaled(l, max, t).exp())
        .sum();
    Some((all - high).max(0.0) * n as f64 / n.div_ceil(adjust::BLOCK) as f64)
}

/// A draw with uniform `u` from the whole adjusted row `adj` (under `s.overlay`) at
/// temperature `t`, when the best tokens decide it: the best [`DRAW_BEST`] tokens are
/// selected (with a sample of the row), weighed in `f64`, and the row's mass below them
/// taken by one vectorised pass with its bound ([`mass_with_candidates`], as top-p's cut
/// does). The draw is the
/// first token whose running weight, in draw order, passes `u` times the row's mass:
/// it stands when the target keeps clear of both neighbouring running sums by the
/// bound on the mass, the `f64` roundings of the sums and the product, and the
/// weights' own rounding (as the histogram's draw counts them). Left to a search over
/// every finite token ([`flat_min_p`] with no threshold, then [`draw_flat`]) when the
/// target lies beyond those tokens or within that margin, and without the
/// mass pass when the selection's sample of the row shows the target beyond them (a
/// flat row; see [`mass_below`]).
///
/// With `s.reach`, a second uniform above `u`, the crossing of its target is decided as
/// well, and `s.reached` tells whether both pick the same token (as [`draw_flat`] does
/// for the flat row's paths).
fn draw_from_best<U: Logit>(s: &mut Scratch, adj: &[U], t: f32, u: f64) -> Result<BestDraw, Error> {
    s.reached = false;
    let (keys, seeds, rest) = (&mut s.keys, &mut s.seeds, &mut s.rest);
    rest.clear();
    let ov = &s.overlay;
    let by_maxima = s.maxima_ready.is_some_and(|spare| {
        select::select_by_maxima(adj, DRAW_BEST, ov, (&s.block_max, spare), keys, &mut s.cand)
    });
    if by_maxima {
        // (The sample that estimates the mass below the candidates.)
        seeds.clear();
        select::sample_blocks(adj, ov.marked(), 1, seeds);
    } else {
        select::select_buffered(adj, DRAW_BEST, ov, keys, seeds, &mut s.cand, rest)?;
    }
    let Some(&(max, _)) = s.cand.first() else {
        return Err(Error::NoCandidates);
    };
    if max == f32::NEG_INFINITY {
        return Err(Error::NoCandidates);
    }
    let floor = s.cand.last().map_or(max, |c| c.0);
    fill_weights(&s.cand, max, t, &mut s.weight);
    if let Some(rest) = mass_below(&s.seeds, adj.len(), (max, floor), t) {
        // The estimate places the target beyond the candidates: the mass pass would
        // most likely be wasted.
        let c: f64 = s.weight.iter().sum();
        if c < u * (c + rest) {
            return Ok(BestDraw::Beyond { max });
        }
    }
    let (z, err) = mass_with_candidates(s, adj, max, t, floor);
    // (The bound is to the exact exponentials: each `f64` weight is within 2^-52 of its
    // own, and every sum of the row's terms within `draw::margin`.)
    let terms = adj.len() + s.cand.len();
    let margin = |u: f64| u * err + draw::margin(terms, z) + 4.0 * f64::EPSILON * z;
    let crossing = |u: f64| nucleus::crossing(&s.weight, 0.0, u * z, margin(u));
    let at = crossing(u);
    let inf = f64::INFINITY;
    let reach = s
        .reach
        .and_then(|r| r.uniform(u, z - err, inf))
        .map(crossing);
    s.reached =
        matches!((at, reach), (nucleus::Crossing::At(a), Some(nucleus::Crossing::At(b))) if a == b);
    Ok(match at {
        nucleus::Crossing::At(n) => BestDraw::Drawn(Survivors::Row {
            i: n - 1,
            n: s.cand.len(),
            total: z,
            max,
            t,
            floor: f32::NEG_INFINITY,
        }),
        nucleus::Crossing::Short | nucleus::Crossing::Undecided => BestDraw::Beyond { max },
    })
}

/// A draw with uniform `u` from the whole adjusted row `adj` (under `s.overlay`) at
/// temperature `t` against its maximum `max`, when its best tokens do not hold the
/// target ([`draw_from_best`]), from the row in place: the selection's sample of the row
/// (`s.seeds`, one entry per block) places a window `(lo, hi]` around the target's
/// fraction of the mass, [`IN_PLACE_BAND`] of it on each side
/// ([`flat::sample_points`]); one vectorised pass
/// ([`row_mass_split`](crate::simd::row_mass_split)) takes the row's fast mass and the
/// masses above the window and inside it. When the target lies inside the window by
/// more than the bound on its difference from either end
/// ([`Split::err_against`](crate::mass::Split::err_against)), the window's tokens alone
/// are collected, weighed and searched ([`draw_flat`] with a [`Part`]) with every bound
/// the search takes added to the margin: that one, and the window's own fast weights
/// within theirs. Where that walk leaves the decision open, the row's precise masses
/// (one `f64` pass over the row in place) and [`walk_precise`]. `None` when
/// the sample is too small to place a window (fewer than 64 blocks), or when the target
/// lies outside the window or within the margin of a decision: the caller then takes
/// every finite token ([`flat_min_p`] with no threshold, [`draw_flat`]), whose path
/// decides exactly.
///
/// With a finite `floor`, the draw is from the tokens at or above it alone (min-p's
/// survivors, or a first stage's floor: see [`flat_min_p`]): the sample holds only
/// those (the caller keeps them), the pass weighs nothing below it, and a walk the fast
/// bound leaves open gives `None` (the caller's path decides it).
fn draw_in_place<U: Logit>(
    s: &mut Scratch,
    adj: &[U],
    max: f32,
    (t, floor): (f32, f32),
    u: f64,
) -> Option<Survivors> {
    if s.seeds.len() < 64 {
        return None;
    }
    let f = Frame::new(max, t);
    let [lo, hi] = seed_points(s, f, None, (u, IN_PLACE_BAND));
    let lo = lo.max(floor.next_down());
    let ov = &s.overlay;
    let mut m = crate::simd::row_mass_split(adj, ov.marked(), max, t, (lo, hi), floor);
    let [total, above, inside] = patch_masses(&ov.patch, max, t, (lo, hi), floor);
    (m.total, m.above, m.window) = (m.total + total, m.above + above, m.window + inside);
    let target = u * m.total;
    // The target against the mass before a point of the window, within
    // `Split::err_against` of the exact difference at either end of the window (it is
    // linear in the mass before the point); the `f64` sums and the product round within
    // `draw::margin`, and the patches' and the walk's `f64` weights are within 2^-52 of
    // the exact exponentials.
    let terms = adj.len() + ov.patch.len();
    let (first, last) = (m.above, m.above + m.window);
    let pass = m.err_against(u, first).max(m.err_against(u, last))
        + draw::margin(terms, m.total)
        + 4.0 * f64::EPSILON * m.total;
    if !(first + pass < target && target + pass < last) {
        return None;
    }
    crate::simd::compress(adj, ov.marked(), (lo, hi), &mut s.flat, &mut s.flat_ids);
    merge_patches(s, |l| l > lo && l <= hi);
    let k = s.flat.len();
    s.flat_w.resize(k, 0.0);
    let window = crate::simd::weigh(&s.flat, f, &mut s.flat_w);
    let margin = pass + window.error_bound(k, f) + draw::margin(k, m.total);
    let part = Part {
        window: (lo, hi),
        above: m.above,
        total: m.total,
    };
    let id = match draw_flat(s, (f, t, lo, false), (u, window.total), margin, Some(part)) {
        Ok((id, _)) => id,
        Err(None) => return None,
        Err(Some(_)) if floor > f32::NEG_INFINITY => return None,
        Err(Some(hi)) => {
            // Within the fast bound: the row's precise masses, its patches with them.
            let ov = &s.overlay;
            let (z, below) = crate::simd::row_mass_precise_split(adj, ov.marked(), max, t, hi);
            let inf = f32::NEG_INFINITY;
            let [total, _, at_or_below] = patch_masses(&ov.patch, max, t, (inf, hi), inf);
            // (Arguments below -708 weigh `e^-708`, counted per token.)
            walk_precise(s, (z + total, below + at_or_below), terms, 708.0, u)?.0
        }
    };
    let i = s.cand2.iter().position(|c| c.1 == id)?;
    s.cand.clear();
    s.cand.extend_from_slice(&s.cand2);
    s.weight.clear();
    s.weight.extend_from_slice(&s.weight2);
    Some(Survivors::Row {
        i,
        n: s.cand.len(),
        total: m.total,
        max,
        t,
        floor,
    })
}

/// The points of a search's first pass, from the selection's sample of the row
/// (`scratch.seeds`, weighed at frame `f` into `scratch.win_w`): above them the sample
/// holds the fractions `q + band` and `q - band` of its mass ([`flat::sample_points`]),
/// searched between `lo` (the sample's least value when `None`) and the maximum.
fn seed_points(s: &mut Scratch, f: Frame, lo: Option<f32>, (q, band): (f64, f64)) -> [f32; 2] {
    s.win_w.clear();
    s.win_w.resize(s.seeds.len(), 0.0);
    let sample = crate::simd::weigh(&s.seeds, f, &mut s.win_w);
    let lo = lo.unwrap_or(sample.least.next_down().max(f32::MIN));
    let fs = [(q + band).min(1.0), (q - band).max(0.0)];
    let above = crate::simd::mass_above::<f32>;
    flat::sample_points(&s.seeds, &s.win_w, (lo, f.max), (fs, sample.total), above)
}

/// The `f64` weights at temperature `t` against `max` of the finite patches at or above
/// `floor` (which the row's passes leave out, as marked): their sum, that of those
/// above `hi`, and that of those in `(lo, hi]`.
fn patch_masses(
    patch: &[(TokenId, f32)],
    max: f32,
    t: f32,
    (lo, hi): (f32, f32),
    floor: f32,
) -> [f64; 3] {
    let mut m = [0.0; 3];
    for &(_, l) in patch
        .iter()
        .filter(|p| p.1 > f32::NEG_INFINITY && p.1 >= floor)
    {
        let w = scaled(l, max, t).exp();
        m[0] += w;
        if l > hi {
            m[1] += w;
        } else if l > lo {
            m[2] += w;
        }
    }
    m
}

/// The patches whose adjusted logit `keep` takes, merged into `scratch.flat` and
/// `scratch.flat_ids` (which the row's collection filled, the patches marked out), in
/// id order.
fn merge_patches(s: &mut Scratch, keep: impl Fn(f32) -> bool) {
    s.cand2.clear();
    s.cand2.extend(
        (s.overlay.patch.iter())
            .filter(|p| keep(p.1))
            .map(|&(id, l)| (l, id)),
    );
    if !s.cand2.is_empty() {
        s.cand2.sort_unstable_by_key(|c| c.1);
        flat::merge(&mut s.flat, &mut s.flat_ids, &s.cand2);
    }
}

/// The mass of the adjusted row `adj` (under `s.overlay`) at temperature `t` against
/// `max`, and the bound on its error, when `s.cand` holds its best tokens down to the
/// logit `floor` with their `f64` weights in `s.weight`: those above the floor count
/// with those weights; every other token lies at or below it, the row's unmarked ones
/// with the fast weights of one vectorised pass (whose bound is then in proportion to
/// the mass below the candidates only) and the patches in `f64`. Top-p's cut and the
/// whole-row draw share it.
fn mass_with_candidates<U: Logit>(
    s: &Scratch,
    adj: &[U],
    max: f32,
    t: f32,
    floor: f32,
) -> (f64, f64) {
    let ov = &s.overlay;
    let above: f64 = (s.cand.iter().zip(&s.weight))
        .filter(|(c, _)| c.0 > floor)
        .map(|(_, w)| w)
        .sum();
    let (zr, err) = crate::simd::row_mass(adj, ov.marked(), max, t, floor);
    let zp: f64 = (ov.patch.iter().filter(|p| p.1 <= floor))
        .map(|p| scaled(p.1, max, t).exp())
        .sum();
    (above + zr + zp, err)
}

/// What [`draw_from_best`] leaves.
#[derive(Debug)]
enum BestDraw {
    /// The draw, decided.
    Drawn(Survivors),
    /// Left to the search over every finite token; `max` is the adjusted row's maximum
    /// (the selection checked the row and the patches).
    Beyond { max: f32 },
}

/// How many of the leading candidates `cand` (in [`select::order`]) min-p keeps: those
/// with `(l - max) / T >= ln_min`, in `f64` (min-p's `ln(min_p)`, or a first stage's
/// floor).
fn above_ln(cand: &[(f32, TokenId)], max: f32, t: f32, ln_min: f64) -> usize {
    cand.iter()
        .take_while(|&&(l, _)| scaled(l, max, t) >= ln_min)
        .count()
}

/// Min-p alone (its threshold `ln(min_p)`, or a first stage's floor, `lm`; `-inf` for
/// a draw from the whole row, which keeps every finite token) for the fast draw, at the
/// cut's temperature `t` and the draw's `t_draw`: the adjusted row's maximum
/// (`known_max`, when a pass over the checked row found it), the exact threshold on the
/// logit ([`flat::threshold`]), and one vectorised pass that collects every unmarked
/// token above it, then the patches above it, in id order. Those are min-p's survivors
/// exactly, the set [`above_ln`] keeps.
///
/// At most [`MIN_P_NEAR`] of them (or fewer than `keep`): sorted, a prefix, as the
/// one-pass path gives. More: `Survivors::Flat`, their fast weights at `t_draw`, which
/// the draw searches on the logit, sorting only the window it narrows to
/// ([`draw_flat`]).
fn flat_min_p<U: Logit>(
    s: &mut Scratch,
    adj: &[U],
    known_max: Option<f32>,
    (t, t_draw): (f32, f32),
    (lm, draw_u): (f64, Option<f64>),
    keep: usize,
) -> Result<Survivors, Error> {
    let ov = &s.overlay;
    let max = match known_max {
        Some(max) => max,
        None => adjusted_max(adj, ov)?,
    };
    if max == f32::NEG_INFINITY {
        return Err(Error::NoCandidates);
    }
    let thr = flat::threshold(max, t, lm);
    if let Some(u) = draw_u.filter(|_| histogram::f32_weights_hold(t_draw)) {
        // Most of the row survives (at least `1 / IN_PLACE_FLOOR` of its sample, as a
        // coarser one shows first): drawn from the row in place above the threshold, as
        // a whole row is.
        let most = |seeds: &mut Vec<f32>| {
            let sampled = seeds.len();
            seeds.retain(|&l| l >= thr);
            IN_PLACE_FLOOR * seeds.len() >= sampled
        };
        s.seeds.clear();
        select::sample_blocks(adj, ov.marked(), PROBE_BLOCKS, &mut s.seeds);
        if most(&mut s.seeds) {
            s.seeds.clear();
            select::sample_blocks(adj, ov.marked(), 1, &mut s.seeds);
            // (Each sampled survivor is one: `keep` at most those is at most the
            // survivors.)
            if most(&mut s.seeds) && keep <= s.seeds.len() {
                if let Some(row) = draw_in_place(s, adj, max, (t_draw, thr), u) {
                    return Ok(row);
                }
            }
        }
    }
    let ov = &s.overlay;
    let (vals, ids) = (&mut s.flat, &mut s.flat_ids);
    crate::simd::compress(
        adj,
        ov.marked(),
        (thr.next_down(), f32::INFINITY),
        vals,
        ids,
    );
    merge_patches(s, |l| l >= thr);
    let m = s.flat.len();
    if keep > m {
        // Fewer survivors than `keep`: the best `keep`.
        select::select_patched(adj, keep, &s.overlay, &mut s.cand)?;
        fill_weights(&s.cand, max, t, &mut s.weight);
        let total = s.weight.iter().sum();
        return Ok(Survivors::Prefix {
            n: s.cand.len(),
            total,
        });
    }
    if m <= MIN_P_NEAR {
        sort_flat(s);
        fill_weights(&s.cand, max, t, &mut s.weight);
        let total = s.weight.iter().sum();
        return Ok(Survivors::Prefix { n: m, total });
    }
    Ok(weigh_flat(s, max, t_draw, lm == f64::NEG_INFINITY))
}

/// `Survivors::Flat` over `scratch.flat` (not empty; every finite token of the row when
/// `whole`) at temperature `t`: the fast weights of those entries, their total, and the
/// least of them as the floor.
fn weigh_flat(s: &mut Scratch, max: f32, t: f32, whole: bool) -> Survivors {
    let f = Frame::new(max, t);
    let n = s.flat.len();
    // (Every slot is written by the pass: grown without clearing first, the vector is
    // zeroed only beyond the length it had, not over the whole row each step.)
    s.flat_w.resize(n, 0.0);
    let weighed = crate::simd::weigh(&s.flat, f, &mut s.flat_w);
    let (total, floor) = (weighed.total, weighed.least);
    // Two bounds, the smaller taken. A priori: each weight is within the bound of the
    // histogram's bucket of `floor`, the last one any survivor's key reaches (the key is
    // monotone), or, for the buckets of weights below `e^-63`, of the last bucket; the
    // total's `f32` sums round by at most `WEIGH_SUM_ERROR` of it, its `f64` sums (and
    // those of the masses the draw takes) by less than `2 n` ulps. A posteriori, from
    // the sum of `w |x|` (`flat::Weighed::error_bound`): the arguments' roundings at the
    // mass's own distance from the maximum, not at the least survivor's, about a third
    // of the first on a flat row.
    let hi = (histogram::key(floor, f) as usize).min(LAST);
    let (count, mass) = (n as u32, total);
    let prior = histogram::error_bound(hi.min(LAST - 1), count, mass, f)
        + histogram::error_bound(LAST, count, mass, f)
        + flat::WEIGH_SUM_ERROR * mass
        + 2.0 * n as f64 * f64::EPSILON * mass;
    let err = prior.min(weighed.error_bound(n, f));
    Survivors::Flat {
        n,
        total,
        frame: f,
        t,
        floor,
        err,
        whole,
    }
}

/// `scratch.flat` into `scratch.cand`, in draw order.
fn sort_flat(s: &mut Scratch) {
    s.cand.clear();
    s.cand
        .extend(s.flat.iter().copied().zip(s.flat_ids.iter().copied()));
    crate::order::sort(&mut s.cand, &mut s.keys);
}

/// `Survivors::Flat` as the prefix of `scratch.cand` it stands for, with the `f64`
/// weights at its temperature (for the paths that list every survivor); the others as
/// they are.
fn settle_flat(s: &mut Scratch, survivors: Survivors) -> Survivors {
    match survivors {
        Survivors::Flat { n, frame, t, .. } => {
            sort_flat(s);
            fill_weights(&s.cand, frame.max, t, &mut s.weight);
            let total = s.weight.iter().sum();
            Survivors::Prefix { n, total }
        }
        other => other,
    }
}

/// Inverse CDF over `Survivors::Flat` (frame, temperature and floor in `walk`, fast
/// total `total`) without sorting them: a search on the logit narrows the window
/// `(lo, hi]` that holds the token where the running mass passes `target`. Each pass
/// takes the fast mass of the survivors above two points around the target's place
/// (where [`flat::MassSlope`], fitted to the window's mass and count, puts it, or the
/// window's thirds after a step that made little progress), and a point counts as
/// decided only when `margin` cannot move its mass across the target. Then the window's
/// survivors alone are sorted (rebuilt into `(value, id)`), and walked with their exact
/// weights from the fast mass above the window. When the target comes within `margin`
/// of a running sum there, the window is walked again from precise masses
/// ([`walk_flat_precise`]); `Err(None)` when that cannot decide either, or the target
/// is not reached: the row's exact path decides. With a [`Part`], `flat` holds
/// only the survivors of a window of a larger set (see there), and a walk the fast
/// masses leave open gives `Err(Some(hi))`, the upper end of the window walked, for the
/// caller to walk again from the set's precise masses ([`walk_precise`]).
///
/// With `s.reach`, a second uniform above `u`, `s.reached` tells whether its target
/// lies short of the running sum that decided the draw by the margin (the same token).
fn draw_flat(
    s: &mut Scratch,
    (f, t, floor, whole): (Frame, f32, f32, bool),
    (u, total): (f64, f64),
    margin: f64,
    part: Option<Part>,
) -> Result<(TokenId, f64), Option<f32>> {
    s.reached = false;
    let target = u * part.map_or(total, |p| p.total);
    let mid = |a: f32, b: f32, q: f64| (f64::from(a) + (f64::from(b) - f64::from(a)) * q) as f32;
    let (mut lo, mut hi) = match part {
        Some(p) => p.window,
        None => (floor.next_down().max(f32::MIN), f.max),
    };
    // The fast mass of the survivors above `hi` (none above the maximum, or the part's
    // `above`) and above `lo` (all), and how many of `flat` they are.
    let outer = part.map_or(0.0, |p| p.above);
    let ((mut m_hi, mut n_hi), (mut m_lo, mut n_lo)) = ((outer, 0), (outer + total, s.flat.len()));
    // Once the window holds at most half of the survivors, its entries are compacted
    // into `win` (logits), `win_w` (fast weights) and `win_at` (places in `flat`), and
    // the passes after read those alone, adding the mass and count above the window as
    // it was then (`base`); again each time the window holds at most half of the
    // compacted entries. A compaction costs about one pass over the entries it reads
    // and saves at least half of one on every pass after it. (Either way a mass is a
    // sum of the same weights in another order, within the same bound.)
    let mut base: Option<(f64, usize)> = None;
    // The model describes survivors above a threshold, whose count falls as the logit
    // rises. Every token of a row rises from its least before it falls (a bell, not a
    // tail), and the model's first points miss the target by far (on the bench's flat
    // row, at T 0.8: 0.3% and 0.2% of the mass above them, for a target at 17%). A
    // whole row's first points are where the selection's sample of it (`seeds`, one
    // entry per block) crosses the band around the target's fraction instead, or, for
    // a row too short to have one, its thirds.
    let mut first = None;
    if whole && s.seeds.len() >= 64 {
        let band = 0.5 * (FLAT_WINDOW as f64 / s.flat.len() as f64).max(1.0 / 8.0);
        first = Some(seed_points(s, f, Some(lo), (target / total, band)));
    }
    let mut slow = whole && first.is_none();
    for _ in 0..32 {
        let n = n_lo - n_hi;
        if n <= FLAT_WINDOW {
            break;
        }
        let compacted = if base.is_some() {
            s.win.len()
        } else {
            s.flat.len()
        };
        if 2 * n <= compacted {
            keep_window(s, base.is_some(), (lo, hi));
            base = Some((m_hi, n_hi));
        }
        // Where the mass would pass the target if it were spread over the window's
        // logits as [`flat::MassSlope`] models it (evenly, without a model), and a band
        // around it as wide as a sixteenth of the window's mass (an eighth before the
        // compaction, where a miss costs another pass over every survivor); or, after a
        // step that kept more than a quarter of the window, the window's thirds, one of
        // which the next window is, whatever the masses.
        let (qa, qb) = if slow {
            (1.0 / 3.0, 2.0 / 3.0)
        } else {
            let q = ((target - m_hi) / (m_lo - m_hi)).clamp(0.0, 1.0);
            let part = if base.is_none() {
                1.0 / 8.0
            } else {
                1.0 / 16.0
            };
            let band = 0.5 * (FLAT_WINDOW as f64 / n as f64).max(part);
            let (fa, fb) = ((q + band).min(1.0), (q - band).max(0.0));
            let at_lo = (f64::from(lo) - f64::from(f.max)) / f64::from(t);
            let beta = (f64::from(hi) - f64::from(lo)) / f64::from(t);
            let ln_rho = ((m_lo - m_hi) / n as f64).ln() - at_lo;
            match flat::MassSlope::fit(beta, ln_rho) {
                Some(m) => (m.place(fa), m.place(fb)),
                None => (1.0 - fa, 1.0 - fb),
            }
        };
        let [xa, xb] = first.take().unwrap_or([mid(lo, hi, qa), mid(lo, hi, qb)]);
        let [(ma, ca), (mb, cb)] = mass_above_in(s, base, outer, [xa, xb]);
        let before = n;
        let mut stop = false;
        // (`xa <= xb`: the mass above `xa` is the larger.)
        for (x, m, c) in [(xb, mb, cb), (xa, ma, ca)] {
            if !(x > lo && x < hi) {
                continue;
            }
            if m + margin < target {
                (hi, m_hi, n_hi) = (x, m, c);
            } else if m - margin > target {
                (lo, m_lo, n_lo) = (x, m, c);
            } else {
                // Too close to call: the window as it is.
                stop = true;
            }
        }
        if stop || n_lo - n_hi == before {
            break;
        }
        // (A step on the thirds is followed by one on the model again.)
        slow = !slow && 4 * (n_lo - n_hi) > before;
    }
    let _ = m_lo;
    keep_window(s, base.is_some(), (lo, hi));
    s.cand2.clear();
    let ids = &s.flat_ids;
    s.cand2
        .extend((s.win.iter().zip(&s.win_at)).map(|(&l, &i)| (l, ids[i as usize])));
    crate::order::sort(&mut s.cand2, &mut s.keys);
    fill_weights(&s.cand2, f.max, t, &mut s.weight2);
    let mut c = m_hi;
    for (i, &x) in s.weight2.iter().enumerate() {
        let prev = c;
        c += x;
        if x > 0.0 && c > target {
            if target - prev <= margin || c - target <= margin {
                // (A part's precise masses need the whole set, which its caller has.)
                return match part {
                    None => walk_flat_precise(s, (f, t, floor), hi, u),
                    Some(_) => Err(Some(hi)),
                };
            }
            // A second uniform's target short of the same sum by the margin picks the
            // same token. (The margin bounds the target's error at `u`: the total is
            // at least `total - margin / u`, and the target's error at `r > u` at most
            // `r / u` times it.)
            let total = part.map_or(total, |p| p.total);
            let reach = s
                .reach
                .and_then(|r| r.uniform(u, total - margin / u, f64::INFINITY));
            s.reached = reach.is_some_and(|r| r * total + margin * (r / u) < c);
            return Ok((s.cand2[i].1, x));
        }
    }
    Err(None)
}

/// [`draw_flat`]'s survivors in `scratch.flat` as the part of a larger set in the
/// window `(lo, hi]` (every survivor of the set in it, in id order): the set's fast
/// mass `above` the window and its fast `total`, from which the target is taken. The
/// search starts from the window, and a decision within the margin is left to the
/// caller (`None`).
#[derive(Clone, Copy, Debug)]
struct Part {
    window: (f32, f32),
    above: f64,
    total: f64,
}

/// Bound on the relative error of each weight of
/// [`row_mass_precise`](crate::simd::row_mass_precise) against the `f64` weight
/// `exp((l - max) / t)` of [`fill_weights`], besides the argument's roundings:
/// `exp_neg`'s `4e-15` and `std`'s `exp` within an ulp.
const PRECISE_WEIGHT_ERROR: f64 = 4e-15 + f64::EPSILON;

/// [`draw_flat`]'s walk of its window `(.., hi]` (in `scratch.cand2`, sorted, with the
/// `f64` weights in `scratch.weight2`) when the fast masses left the decision open: the
/// survivors' total and their mass at or below `hi` in one vectorised pass with the
/// `f64` exponential, and [`walk_precise`] from them, the arguments at most `(max -
/// floor) / t` in magnitude.
fn walk_flat_precise(
    s: &Scratch,
    (f, t, floor): (Frame, f32, f32),
    hi: f32,
    u: f64,
) -> Result<(TokenId, f64), Option<f32>> {
    let masses = crate::simd::row_mass_precise_split(&s.flat, None, f.max, t, hi);
    let x = (f64::from(f.max) - f64::from(floor)) / f64::from(t);
    walk_precise(s, masses, s.flat.len(), x, u).ok_or(None)
}

/// The walk of a window `(.., hi]` (in `scratch.cand2`, sorted, with the `f64` weights
/// in `scratch.weight2`) from precise masses of the `n` tokens of its set: their total
/// `z` and their mass at or below `hi`, from one vectorised pass with the `f64`
/// exponential, so that the target and the mass above the window are within about
/// `2e-15 n` of the total (`3e-10` on 151,936 tokens) instead of the fast bound's
/// `1e-6`. Each precise weight is within [`PRECISE_WEIGHT_ERROR`] and the argument's
/// roundings (at most three, each within `2^-53 |x|`, `|x| <= x_max`) of the walk's;
/// below `e^-708` it is `e^-708` (at most that per token); each sum rounds within
/// [`draw::margin`]. `None` when the target is still within that bound of a running sum
/// (dominated by the four [`draw::margin`]s, `4 (n + 2) 2^-52` of the total), or is not
/// reached.
fn walk_precise(
    s: &Scratch,
    (z, at_or_below): (f64, f64),
    n: usize,
    x_max: f64,
    u: f64,
) -> Option<(TokenId, f64)> {
    let rel = PRECISE_WEIGHT_ERROR + 3.0 * x_max * f64::EPSILON / 2.0;
    // Each of the two sums, against the exact sum of the walk's weights.
    let each = rel * z + draw::margin(n, z) + n as f64 * 3.4e-308;
    // The target moves with the total, the mass above `hi` with both sums; the walk's
    // own sums round within `draw::margin`.
    let margin = 3.0 * each + draw::margin(s.cand2.len(), z);
    let target = u * z;
    let mut c = z - at_or_below;
    for (i, &w) in s.weight2.iter().enumerate() {
        let prev = c;
        c += w;
        if w > 0.0 && c > target {
            if target - prev <= margin || c - target <= margin {
                return None;
            }
            return Some((s.cand2[i].1, w));
        }
    }
    None
}

/// The entries of `scratch.flat` in `(lo, hi]` into `win` (logits), `win_at` (their
/// places in `flat`) and `win_w` (their fast weights, from `flat_w`), in id order.
fn compact_window(s: &mut Scratch, (lo, hi): (f32, f32)) {
    crate::simd::compress(&s.flat, None, (lo, hi), &mut s.win, &mut s.win_at);
    let w = &s.flat_w;
    s.win_w.clear();
    s.win_w.extend(s.win_at.iter().map(|&i| w[i as usize]));
}

/// The window `(lo, hi]` into `win`, `win_at` and `win_w`: from the window compacted
/// before when `compacted` ([`narrow_window`]), else from `flat` ([`compact_window`]).
fn keep_window(s: &mut Scratch, compacted: bool, window: (f32, f32)) {
    if compacted {
        narrow_window(s, window);
    } else {
        compact_window(s, window);
    }
}

/// The entries of the compacted window (`win`, `win_at`, `win_w`) in `(lo, hi]`, a
/// narrower window, in their place: the same three vectors, in id order.
fn narrow_window(s: &mut Scratch, (lo, hi): (f32, f32)) {
    crate::simd::compress(&s.win, None, (lo, hi), &mut s.win2, &mut s.win2_at);
    // (Each kept entry's place in `win` is at least its new one, and the places rise:
    // the entry read at step `j` has not been written over yet.)
    for (j, &k) in s.win2_at.iter().enumerate() {
        let k = k as usize;
        s.win_at[j] = s.win_at[k];
        s.win_w[j] = s.win_w[k];
    }
    let m = s.win2.len();
    s.win_at.truncate(m);
    s.win_w.truncate(m);
    // (A copy, not a swap: `win` keeps its room for a whole row.)
    s.win.clear();
    s.win.extend_from_slice(&s.win2);
}

/// [`flat::mass_above`](crate::flat::mass_above) of `scratch.flat` at the two points
/// `xs`: read from `flat` itself plus `outer` (the mass above a [`Part`]'s window), or,
/// once [`compact_window`] kept the window `(lo, hi]` (both points inside it), from the
/// window alone plus `base`, the fast mass and count of the survivors above `hi`.
fn mass_above_in(
    s: &Scratch,
    base: Option<(f64, usize)>,
    outer: f64,
    xs: [f32; 2],
) -> [(f64, usize); 2] {
    match base {
        None => crate::simd::mass_above(&s.flat, &s.flat_w, xs).map(|(m, c)| (m + outer, c)),
        Some((m, c)) => {
            crate::simd::mass_above(&s.win, &s.win_w, xs).map(|(mw, cw)| (m + mw, c + cw))
        }
    }
}

/// The tokens of bucket `b` of `adj` (under `scratch.overlay`) in frame `f`, in draw
/// order, into `scratch.cand2`.
fn collect_bucket<U: Logit>(s: &mut Scratch, adj: &[U], f: Frame, b: usize) {
    crate::simd::collect(
        adj,
        &s.overlay,
        f,
        b,
        b,
        usize::MAX,
        &mut s.cand2,
        &mut s.keys,
    );
}

/// One draw over `Survivors::Hist`.
struct Walk {
    frame: Frame,
    t: f32,
    lo: usize,
    n: usize,
    target: f64,
    /// With the fast masses: how close to a cumulative sum the target may not come.
    margin: Option<f64>,
}

/// Inverse CDF over `Survivors::Hist` without sorting the buckets before `lo`: walk the
/// buckets' masses to the one where the running mass passes the target, sort that bucket
/// alone and walk its exact weights; past bucket `lo`, walk `cand[..n]`. If rounding
/// leaves the target unreached, the last positive-weight survivor is taken. Returns the
/// token and its weight, or `None` when the fast masses cannot decide.
fn draw_hist<U: Logit>(s: &mut Scratch, adj: &[U], w: Walk) -> Option<(TokenId, f64)> {
    let (f, target) = (w.frame, w.target);
    let close = |prev: f64, c: f64| {
        w.margin
            .is_some_and(|m| target - prev <= m || c - target <= m)
    };
    let mut cum = 0.0;
    let mut last = None;
    for b in 0..w.lo.min(BUCKETS) {
        let m = s.hist_mass[b];
        if s.hist_count[b] == 0 {
            continue;
        }
        last = Some(b);
        if cum + m > target || w.margin.is_some_and(|e| cum + m + e > target) {
            collect_bucket(s, adj, f, b);
            fill_weights(&s.cand2, f.max, w.t, &mut s.weight2);
            let mut c = cum;
            for (i, &x) in s.weight2.iter().enumerate() {
                let prev = c;
                c += x;
                if x > 0.0 && c > target {
                    if close(prev, c) {
                        return None;
                    }
                    return Some((s.cand2[i].1, x));
                }
            }
        }
        cum += m;
    }
    let mut c = cum;
    for (i, &x) in s.weight[..w.n].iter().enumerate() {
        let prev = c;
        c += x;
        if x > 0.0 && c > target {
            if close(prev, c) {
                return None;
            }
            return Some((s.cand[i].1, x));
        }
    }
    if w.margin.is_some() {
        // Unreached with the fast masses: decide with the precise ones.
        return None;
    }
    // Rounding: the last positive-weight survivor.
    if let Some(i) = s.weight[..w.n].iter().rposition(|&x| x > 0.0) {
        return Some((s.cand[i].1, s.weight[i]));
    }
    let b = last.unwrap_or(0);
    collect_bucket(s, adj, f, b);
    fill_weights(&s.cand2, f.max, w.t, &mut s.weight2);
    let i = s.weight2.iter().rposition(|&x| x > 0.0).unwrap_or(0);
    Some(match s.cand2.get(i) {
        Some(&(_, id)) => (id, s.weight2[i]),
        None => (0, 0.0),
    })
}

/// The exact draw over `Survivors::Hist`: every token of the buckets before `lo`, sorted
/// into draw order, then `cand[..n]`, with the weights `exp((l - max) / t)` every path
/// computes, decided by [`draw::exact`]'s exact sums. Returns the token and its weight.
fn exact_hist<U: Logit>(
    s: &mut Scratch,
    adj: &[U],
    f: Frame,
    t: f32,
    lo: usize,
    n: usize,
    u: f64,
) -> (TokenId, f64) {
    s.cand2.clear();
    if lo > 0 {
        crate::simd::collect(
            adj,
            &s.overlay,
            f,
            0,
            lo - 1,
            usize::MAX,
            &mut s.cand2,
            &mut s.keys,
        );
    }
    fill_weights(&s.cand2, f.max, t, &mut s.weight2);
    let (head, tail) = (&s.weight2[..], &s.weight[..n]);
    let i = crate::kernels::exact_sum::exact_index(head.iter().chain(tail).copied(), u)
        .unwrap_or_else(|| match tail.iter().rposition(|&w| w > 0.0) {
            Some(j) => head.len() + j,
            None => head.iter().rposition(|&w| w > 0.0).unwrap_or(0),
        });
    match i.checked_sub(head.len()) {
        None => (s.cand2[i].1, head[i]),
        Some(j) => match (s.cand.get(j), tail.get(j)) {
            (Some(&(_, id)), Some(&w)) => (id, w),
            _ => (0, 0.0),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once the flat draw's window is compacted, the mass and count above a point inside
    /// it are those of the whole set of survivors: the window's own entries above the
    /// point plus those above the window, within the bound of two `f64` sums of the same
    /// weights; and the window holds exactly the entries in `(lo, hi]`, with their
    /// weights. The same once it is narrowed in place, and it keeps its room.
    #[test]
    fn a_compacted_window_gives_the_masses_of_the_whole_set() {
        let mut x = 0x0bad_5eed_1234_5678u64;
        let mut s = Scratch::new(20_011, 0).unwrap();
        s.flat = crate::test_rows::uniform_row(&mut x, 20_011, 6.0, 1, 1);
        s.flat.retain(|l| l.is_finite());
        let max = s.flat.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        s.flat_w = s.flat.iter().map(|&l| (l - max).exp()).collect();
        let total: f64 = s.flat_w.iter().map(|&w| f64::from(w)).sum();
        let bound = crate::draw::margin(s.flat.len(), total);
        let mut r = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f32 / (1u64 << 53) as f32 * 6.0 - 3.0
        };
        for _ in 0..200 {
            let (a, b) = (r(), r());
            let (lo, hi) = (a.min(b), a.max(b));
            let base = mass_above_in(&s, None, 0.0, [hi, hi])[0];
            compact_window(&mut s, (lo, hi));
            let inside: Vec<usize> = (0..s.flat.len())
                .filter(|&i| s.flat[i] > lo && s.flat[i] <= hi)
                .collect();
            assert_eq!(s.win_at.len(), inside.len());
            for (k, &i) in inside.iter().enumerate() {
                assert_eq!(s.win_at[k] as usize, i);
                assert_eq!((s.win[k], s.win_w[k]), (s.flat[i], s.flat_w[i]));
            }
            let (xa, xb) = (lo + (hi - lo) / 3.0, lo + 2.0 * (hi - lo) / 3.0);
            let want = mass_above_in(&s, None, 0.0, [xa, xb]);
            let got = mass_above_in(&s, Some(base), 0.0, [xa, xb]);
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.1, w.1, "count above a point, window ({lo}, {hi}]");
                assert!((g.0 - w.0).abs() <= bound, "{} vs {}", g.0, w.0);
            }
            // Narrowed in place to its middle third: the entries of `flat` there, and
            // the masses again from the mass above the new window.
            let base = mass_above_in(&s, None, 0.0, [xb, xb])[0];
            narrow_window(&mut s, (xa, xb));
            let inside: Vec<usize> = (0..s.flat.len())
                .filter(|&i| s.flat[i] > xa && s.flat[i] <= xb)
                .collect();
            assert_eq!(s.win_at.len(), inside.len());
            assert_eq!((s.win.len(), s.win_w.len()), (inside.len(), inside.len()));
            for (k, &i) in inside.iter().enumerate() {
                assert_eq!(s.win_at[k] as usize, i);
                assert_eq!((s.win[k], s.win_w[k]), (s.flat[i], s.flat_w[i]));
            }
            let x = xa + (xb - xa) / 2.0;
            let want = mass_above_in(&s, None, 0.0, [x, x]);
            let got = mass_above_in(&s, Some(base), 0.0, [x, x]);
            assert_eq!(got[0].1, want[0].1, "count above {x}, window ({xa}, {xb}]");
            assert!((got[0].0 - want[0].0).abs() <= bound);
        }
        assert!(
            s.win.capacity() >= s.flat.len(),
            "the window keeps its room"
        );
    }

    /// A chain of `stage`, then temperature 0.8 and the draw, over `n` tokens.
    fn first_of(stage: impl Stage + Clone + 'static, n: usize) -> crate::Chain {
        crate::Chain::builder(n)
            .stage(stage)
            .stage(crate::Temperature::new(0.8).unwrap())
            .draw()
            .build()
            .unwrap()
    }

    /// The candidates `stage`'s own `apply` leaves of `row`, at step 0 of `e`'s history.
    fn applied(mut stage: impl Stage, row: &[f32], e: &Engine) -> Candidates {
        let mut c = Candidates::new();
        c.reset_dense(row.len());
        c.logits_mut().copy_from_slice(row);
        let ctx = StageContext {
            history: e.seq.view(),
            seed: 0,
            step: 0,
        };
        stage.apply(&mut c, &ctx).unwrap();
        c
    }

    /// Epsilon, eta, top-n-sigma and mirostat v2 first decide ordinary rows from the fast statistic
    /// alone, without the dense copy (the tests in `tests/floor_first.rs` check that
    /// every decision agrees with the stage's own `apply`).
    #[test]
    fn floor_stages_decide_ordinary_rows_from_the_fast_statistic() {
        use crate::{EpsilonCutoff, EtaCutoff, Temperature, TopNSigma};
        let mut x = 0x1234_5678_9abc_def0u64;
        for (n, scale) in [(151_936usize, 2.0f32), (151_936, 0.5), (4_099, 3.0)] {
            let row = crate::test_rows::uniform_row(&mut x, n, scale, 101, 7);
            let stages: [Box<dyn Stage>; 5] = [
                Box::new(crate::MirostatV2::new(5.0, 0.1).unwrap()),
                Box::new(EpsilonCutoff::new(3e-4).unwrap()),
                Box::new(EpsilonCutoff::new(1e-6).unwrap().min_keep(3)),
                Box::new(EtaCutoff::new(3e-4).unwrap()),
                Box::new(TopNSigma::new(1.0).unwrap()),
            ];
            for stage in stages {
                let mut chain = crate::Chain::builder(n)
                    .boxed_stage(stage)
                    .stage(Temperature::new(0.8).unwrap())
                    .draw()
                    .build()
                    .unwrap();
                let e = &mut chain.engine;
                assert!(e.floor_first, "a floor stage first");
                let Lowering::Floor(rule) = e.stages[0].lowering() else {
                    panic!("a floor stage lowers to a floor");
                };
                match e.floor_cut(&row[..], rule).unwrap() {
                    FloorCut::Done => assert!(!e.cands.is_empty()),
                    FloorCut::Crowded { ln } => assert!(ln < 0.0, "{rule:?}: {ln}"),
                    FloorCut::Undecided => panic!("{rule:?}, scale {scale}: undecided"),
                }
            }
        }
    }

    /// Typical-p first decides rows whose kept set is small from the fast statistics
    /// alone, and keeps exactly the tokens its own `apply` keeps.
    #[test]
    fn typical_p_decides_peaked_rows_from_the_fast_statistics() {
        let mut x = 0x2468_ace0_1357_9bdfu64;
        for (n, scale, peaks) in [
            (151_936usize, 4.0f32, 36usize),
            (151_936, 8.0, 200),
            (4_099, 3.0, 12),
        ] {
            let mut row = crate::test_rows::uniform_row(&mut x, n, scale, 101, 7);
            for i in 0..peaks {
                row[1 + 97 * i] = 8.0 + (i % 13) as f32 * 0.5;
            }
            for (mass, keep) in [(0.5f32, 1usize), (0.9, 1), (0.95, 4)] {
                let stage = crate::TypicalP::new(mass).unwrap().min_keep(keep);
                let mut chain = first_of(stage.clone(), n);
                let e = &mut chain.engine;
                assert!(e.floor_first, "typical-p first is planned on the row");
                let Lowering::Floor(rule) = e.stages[0].lowering() else {
                    panic!("typical-p lowers to a floor");
                };
                e.build_patches(&row[..], None);
                let cut = e.floor_cut(&row[..], rule).unwrap();
                e.scratch.overlay.clear();
                assert!(
                    matches!(cut, FloorCut::Done),
                    "{n}, {scale}, {mass}: {cut:?}"
                );
                let mut kept: Vec<TokenId> = e.cands.ids().to_vec();
                kept.sort_unstable();
                assert_eq!(kept, applied(stage, &row, e).ids(), "{n}, {scale}, {mass}");
                assert!(kept.len() < n / 2, "{n}, {scale}, {mass}: {}", kept.len());
            }
        }
    }

    /// With a top-k after it (llama.cpp's order), a floor stage still hands a flat row's
    /// floor to the first cut group, whose top-k applies it; a top-k with a `min_keep`
    /// above 1 would keep tokens below the floor, so it never gets one.
    #[test]
    fn floor_stages_then_top_k_leave_the_floor_to_the_group() {
        let mut x = 0x0f1e_2d3c_4b5a_6978u64;
        let n = 151_936;
        let mut row = crate::test_rows::uniform_row(&mut x, n, 2.0, 101, 7);
        for _ in 1..4 {
            let more = crate::test_rows::uniform_row(&mut x, n, 2.0, 101, 7);
            row.iter_mut().zip(more).for_each(|(a, b)| *a += b);
        }
        let stages: [Box<dyn Stage>; 2] = [
            Box::new(crate::TypicalP::new(0.95).unwrap()),
            Box::new(crate::EpsilonCutoff::new(3e-5).unwrap()),
        ];
        for stage in stages {
            for keep in [1, 2] {
                let mut chain = crate::Chain::builder(n)
                    .boxed_stage(stage.clone())
                    .stage(crate::TopK::new(40).unwrap().min_keep(keep))
                    .stage(crate::Temperature::new(0.8).unwrap())
                    .draw()
                    .build()
                    .unwrap();
                let e = &mut chain.engine;
                let Lowering::Floor(rule) = e.stages[0].lowering() else {
                    panic!("a floor stage lowers to a floor");
                };
                assert_eq!(e.floor_to_group(rule), keep == 1, "{rule:?}, keep {keep}");
                e.build_patches(&row[..], None);
                let cut = e.floor_cut(&row[..], rule).unwrap();
                e.scratch.overlay.clear();
                if keep == 1 {
                    assert!(matches!(cut, FloorCut::Crowded { .. }), "{rule:?}: {cut:?}");
                } else {
                    // (The survivors in the compact set, or the stage's own `apply`.)
                    assert!(
                        !matches!(cut, FloorCut::Crowded { .. }),
                        "{rule:?}: {cut:?}"
                    );
                }
            }
        }
    }

    /// Dynamic temperature first brackets the stage's own temperature (7e-8 to 2e-6 of
    /// it on these rows, the widest at exponent 2.5), and the draws at both ends agree
    /// for most uniforms, on the token a plain `f64` inverse CDF gives at the stage's
    /// temperature; one draw decides both ends for most uniforms. The same with a top-k
    /// 40 after the stage.
    #[test]
    fn dynamic_temperature_first_draws_on_the_row_in_place() {
        let mut x = 0x5a5a_0f0f_3c3c_9696u64;
        let n = 151_936;
        let flat = crate::test_rows::uniform_row(&mut x, n, 4.0, 101, 7);
        let mut peaked = flat.clone();
        for i in 0..40 {
            peaked[1 + 97 * i] = 12.0 + (i % 13) as f32 * 0.5;
        }
        for (name, row) in [("flat", &flat), ("peaked", &peaked)] {
            for (delta, exponent) in [(0.5f32, 1.0f32), (0.3, 0.0), (0.8, 2.5)] {
                let stage = crate::DynamicTemperature::new(0.8, delta, exponent).unwrap();
                let mut first = first_of(stage.clone(), n);
                let e = &mut first.engine;
                let rule = e.dyn_temp.expect("dynamic temperature first is planned");
                e.build_patches(&row[..], None);
                let ((ta, tb), gap) = e.dyn_temp_bracket(&row[..], rule).unwrap().unwrap();
                e.scratch.overlay.clear();
                let t = applied(stage.clone(), row, e).temperature() * f64::from(0.8f32);
                assert!(
                    f64::from(ta) <= t && t <= f64::from(tb),
                    "{name}: {ta} {t} {tb}"
                );
                let width = f64::from(tb - ta) / t;
                assert!(width < 1e-5, "{name}, {delta}, {exponent}: {width:e}");
                // The row in draw order, for a plain `f64` inverse CDF at the stage's
                // temperature.
                let mut order: Vec<(f32, TokenId)> =
                    (0..n).map(|i| (row[i], i as TokenId)).collect();
                order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                let w: Vec<f64> = (order.iter())
                    .map(|&(l, _)| ((f64::from(l) - f64::from(order[0].0)) / t).exp())
                    .collect();
                // As planned, and with a top-k 40 after the stage (a prefix drawn).
                for top_k in [n, 40] {
                    let mut chain = match top_k {
                        40 => crate::Chain::builder(n)
                            .stage(stage.clone())
                            .stage(crate::TopK::new(40).unwrap())
                            .stage(crate::Temperature::new(0.8).unwrap())
                            .draw()
                            .build()
                            .unwrap(),
                        _ => first_of(stage.clone(), n),
                    };
                    let w = &w[..top_k];
                    let z: f64 = w.iter().sum();
                    let (mut decided, mut once) = (0, 0);
                    for k in 0..50 {
                        let u = (f64::from(k) + 0.5) / 50.0;
                        let (mut c, mut i) = (0.0, 0);
                        while i + 1 < top_k && c + w[i] <= u * z {
                            c += w[i];
                            i += 1;
                        }
                        let case = format!("{name}, {delta}, {exponent}, top-k {top_k}: {u}");
                        // The whole step, as the chain runs it.
                        let whole = chain.sample_with_uniform(&row[..], None, u).unwrap();
                        assert_eq!(whole.token, order[i].1, "{case}, the whole step");
                        let e = &mut chain.engine;
                        let temps = (e.params.temperature, e.draw_temperature);
                        e.build_patches(&row[..], None);
                        // As the step runs them: the bracket's pass records the row's
                        // block maxima, from which the draws select their best tokens.
                        let rule = e.dyn_temp.expect("dynamic temperature first is planned");
                        assert!(e.dyn_temp_bracket(&row[..], rule).unwrap().is_some());
                        e.scratch.maxima_ready = Some(0);
                        let drawn = e.draw_at_both(&row[..], (ta, tb), gap, u);
                        e.scratch.maxima_ready = None;
                        e.scratch.overlay.clear();
                        assert_eq!(
                            (e.params.temperature, e.draw_temperature),
                            temps,
                            "the temperatures restored"
                        );
                        let Some((sample, one)) = drawn else {
                            continue;
                        };
                        assert_eq!(sample.token, order[i].1, "{case}");
                        decided += 1;
                        once += usize::from(one);
                    }
                    let case = format!("{name}, {delta}, {exponent}, top-k {top_k}");
                    assert!(decided >= 45, "{case}: {decided} of 50");
                    // One draw decides both ends: from a peaked row's best tokens, in
                    // a flat row's search, or from the top-k's prefix.
                    assert!(once >= 40, "{case}: {once} of 50 in one draw");
                }
            }
        }
    }

    /// A bracket whose two ends pick different tokens is not decided, by one draw or
    /// two: a uniform between the best token's shares at the two ends (a bracket wide
    /// enough to place one there, near the lower share, where a second uniform raised
    /// less than [`Reach`] raises it would pick the best token at `ta`), and one below
    /// both, which both ends give the best token.
    #[test]
    fn a_bracket_whose_ends_disagree_is_left_to_the_stage() {
        let mut x = 0x0123_4567_89ab_cdefu64;
        let n = 151_936;
        let base = crate::test_rows::uniform_row(&mut x, n, 4.0, 101, 7);
        let stage = crate::DynamicTemperature::new(0.8, 0.5, 1.0).unwrap();
        let mut chain = first_of(stage, n);
        let e = &mut chain.engine;
        // A best token of share near 1, and one of share 0.9 with a narrow bracket.
        for (top, (ta, tb)) in [(16.0f32, (0.8f32, 0.9f32)), (12.0, (0.8, 0.801))] {
            let mut row = base.clone();
            row[7] = top;
            let share = |t: f32| {
                let z: f64 = (row.iter())
                    .map(|&l| ((f64::from(l) - f64::from(top)) / f64::from(t)).exp())
                    .sum();
                1.0 / z
            };
            let (fa, fb) = (share(ta), share(tb));
            assert!(fb + 1e-4 < fa, "{fb} {fa}");
            for (u, want) in [(fb + 0.1 * (fa - fb), None), (0.5 * fb, Some(7))] {
                e.build_patches(&row[..], None);
                let drawn = e.draw_at_both(&row[..], (ta, tb), f64::INFINITY, u);
                e.scratch.overlay.clear();
                assert_eq!(drawn.map(|d| d.0.token), want, "{top}: {fb} {u} {fa}");
            }
        }
    }

    /// Near a zero entropy an exponent below 1 magnifies the fast bound's error: with
    /// logprobs requested, the precise statistics narrow the bracket to
    /// [`DYN_TEMP_WIDTH`], and the logprobs at its lower end are the stage's.
    #[test]
    fn dynamic_temperature_narrows_a_wide_bracket_for_logprobs() {
        let mut x = 0x0bad_cafe_f00d_d00du64;
        let n = 200;
        let mut row = crate::test_rows::uniform_row(&mut x, n, 40.0, 101, 7);
        row[2] = 110.0;
        let stage = crate::DynamicTemperature::new(0.8, 0.3, 0.5).unwrap();
        let bracket = |logprobs: bool| {
            let mut b = crate::Chain::builder(n)
                .stage(stage.clone())
                .stage(crate::Temperature::new(0.8).unwrap());
            if logprobs {
                b = b.logprobs(3);
            }
            let mut chain = b.draw().build().unwrap();
            let e = &mut chain.engine;
            let rule = e.dyn_temp.expect("dynamic temperature first is planned");
            e.build_patches(&row[..], None);
            let out = e.dyn_temp_bracket(&row[..], rule).unwrap().unwrap().0;
            e.scratch.overlay.clear();
            let t = applied(stage.clone(), &row, e).temperature() * f64::from(0.8f32);
            (out, t)
        };
        let ((ta, tb), t) = bracket(false);
        assert!(f64::from(ta) <= t && t <= f64::from(tb));
        let fast = (f64::from(tb) - f64::from(ta)) / t;
        assert!(
            fast > DYN_TEMP_WIDTH,
            "the fast bracket is wide here: {fast:e}"
        );
        let ((ta, tb), t) = bracket(true);
        assert!(f64::from(ta) <= t && t <= f64::from(tb));
        let precise = (f64::from(tb) - f64::from(ta)) / t;
        assert!(precise <= DYN_TEMP_WIDTH, "{precise:e}");
    }

    /// On flat rows, where typical-p keeps most tokens, the fast path bans the tokens
    /// above its interval and hands a floor to the first cut group: together they keep
    /// exactly the tokens the stage's own `apply` keeps.
    #[test]
    fn typical_p_decides_flat_rows_as_bans_and_a_floor() {
        let mut x = 0x1357_9bdf_2468_ace0u64;
        // (A small mass on the flattest row cuts tens of thousands of tokens above its
        // interval: too many to ban, and left to the stage.)
        for (n, scale, terms, masses) in [
            (151_936usize, 2.0f32, 4, &[0.5f32, 0.9, 0.95][..]),
            (151_936, 1.0, 4, &[0.9, 0.95][..]),
            (60_000, 3.0, 4, &[0.5, 0.9, 0.95][..]),
            (151_936, 2.0, 1, &[0.95][..]),
        ] {
            // Near-normal rows (the sum of four uniform ones), whose top tail is thin, and
            // a uniform one.
            let mut row = crate::test_rows::uniform_row(&mut x, n, scale, 101, 7);
            for _ in 1..terms {
                let more = crate::test_rows::uniform_row(&mut x, n, scale, 101, 7);
                row.iter_mut().zip(more).for_each(|(a, b)| *a += b);
            }
            for &mass in masses {
                let stage = crate::TypicalP::new(mass).unwrap();
                let mut chain = first_of(stage.clone(), n);
                let e = &mut chain.engine;
                let Lowering::Floor(rule) = e.stages[0].lowering() else {
                    panic!("typical-p lowers to a floor");
                };
                e.build_patches(&row[..], None);
                let cut = e.floor_cut(&row[..], rule).unwrap();
                let FloorCut::Crowded { ln } = cut else {
                    panic!("{n}, {scale}, {mass}: {cut:?}");
                };
                let ov = &e.scratch.overlay;
                let unbanned =
                    |&id: &TokenId| row[id as usize] > f32::NEG_INFINITY && !ov.is_patched(id);
                let ids: Vec<TokenId> = (0..n as TokenId).filter(unbanned).collect();
                let top = ids
                    .iter()
                    .map(|&id| row[id as usize])
                    .fold(f32::MIN, f32::max);
                let t = f64::from(0.8f32);
                let kept: Vec<TokenId> = ids
                    .into_iter()
                    .filter(|&id| (f64::from(row[id as usize]) - f64::from(top)) / t >= ln)
                    .collect();
                e.scratch.overlay.clear();
                let c = applied(stage, &row, e);
                let want = c.ids();
                let extra = kept.iter().filter(|id| want.binary_search(id).is_err());
                let missing = want.iter().filter(|id| kept.binary_search(id).is_err());
                assert_eq!(
                    (extra.count(), missing.count()),
                    (0, 0),
                    "{n}, {scale}, {mass}: kept {} of {} (top {top}, ln {ln})",
                    kept.len(),
                    want.len(),
                );
                assert!(kept.len() > FLOOR_DIRECT, "{n}, {scale}, {mass}");
            }
        }
    }

    /// XTC first decides ordinary rows from the fast pass alone, and bans exactly the
    /// tokens its own `apply` removes (`tests/floor_first.rs` checks whole chains). The
    /// flattest row has every token near its maximum, more than the pass collects: its
    /// total alone shows that no token reaches the threshold.
    #[test]
    fn xtc_decides_ordinary_rows_from_the_fast_pass() {
        let mut x = 0x0123_4567_89ab_cdefu64;
        for (n, scale, peaks) in [
            (151_936usize, 2.0f32, &[16.0f32, 15.5, 15.0, 14.0][..]),
            (151_936, 0.5, &[14.0, 13.9][..]),
            (151_936, 0.5, &[][..]),
            (4_099, 3.0, &[8.0, 7.5, 6.5, 6.0, 5.0][..]),
            (4_099, 3.0, &[][..]),
        ] {
            let mut row = crate::test_rows::uniform_row(&mut x, n, scale, 101, 7);
            for (i, &p) in peaks.iter().enumerate() {
                row[1 + 97 * i] = p;
            }
            for (threshold, special) in [(0.1f32, &[][..]), (0.05, &[98u32][..])] {
                let stage = crate::Xtc::new(1.0, threshold)
                    .unwrap()
                    .special_tokens(special.iter().copied());
                let mut chain = first_of(stage.clone(), n);
                let e = &mut chain.engine;
                assert!(e.xtc.is_some(), "XTC first is planned as bans");
                e.build_patches(&row[..], None);
                assert!(matches!(e.xtc_bans(&row[..]), Ok(Some(_))), "{n}, {scale}");
                let banned: Vec<TokenId> = (0..n as TokenId)
                    .filter(|&id| e.scratch.overlay.is_patched(id))
                    .collect();
                e.scratch.overlay.clear();
                let c = applied(stage, &row, e);
                let removed: Vec<TokenId> = (0..n as TokenId)
                    .filter(|id| c.ids().binary_search(id).is_err())
                    .collect();
                assert_eq!(banned, removed, "{n}, {scale}, {threshold}");
                assert_eq!(
                    banned.is_empty(),
                    peaks.len() < 2,
                    "{n}, {scale}, {banned:?}"
                );
            }
        }
    }

    /// A draw from the whole row is decided among the best tokens when they hold the
    /// target (a peaked row), and left to the histogram when the sample shows it beyond
    /// them (a flat row); `tests/exact_draw.rs` checks the tokens at the boundaries.
    #[test]
    fn a_peaked_row_draws_from_its_best_tokens() {
        let mut x = 0x5eed_1234_abcd_0001u64;
        let n = 151_936;
        let mut peaked = crate::test_rows::uniform_row(&mut x, n, 2.0, 101, 7);
        for (i, p) in [14.0f32, 13.0, 12.5, 12.0].into_iter().enumerate() {
            peaked[3 + 1000 * i] = p;
        }
        let flat = crate::test_rows::uniform_row(&mut x, n, 0.5, 101, 7);
        let mut s = Scratch::new(n, SPARSE_MAX).unwrap();
        for u in [0.0001, 0.3, 0.6, 0.9] {
            match draw_from_best(&mut s, &peaked[..], 1.0, u) {
                Ok(BestDraw::Drawn(Survivors::Row { i, n: m, .. })) => {
                    assert!(i < 4 && m == DRAW_BEST, "{u}: {i}, {m}");
                    assert_eq!(s.cand[i].1 as usize, 3 + 1000 * i);
                }
                other => panic!("{u}: {other:?}"),
            }
            // (The best tokens of the flat row hold 0.7% of its mass.)
            let flat_draw = draw_from_best(&mut s, &flat[..], 1.0, u);
            assert_eq!(
                matches!(flat_draw, Ok(BestDraw::Beyond { .. })),
                u > 0.01,
                "{u}: {flat_draw:?}"
            );
        }
    }

    /// A flat row's draw from the row in place: the window around the sample's place for
    /// the target decides nearly every uniform, after a few dozen tokens sorted, and
    /// gives the token of a plain inverse CDF over the whole row sorted, in `f64`.
    #[test]
    fn a_flat_row_draws_from_a_window_in_place() {
        let mut x = 0x0f1a_7d2a_3b4c_5d6eu64;
        let n = 151_936;
        let row = crate::test_rows::uniform_row(&mut x, n, 4.0, n + 1, n + 1);
        let mut s = Scratch::new(n, SPARSE_MAX).unwrap();
        for t in [1.0f32, 0.8] {
            let mut sorted: Vec<(f32, TokenId)> = row
                .iter()
                .enumerate()
                .map(|(i, &l)| (l, i as TokenId))
                .collect();
            sorted.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut w = Vec::new();
            fill_weights(&sorted, sorted[0].0, t, &mut w);
            let total: f64 = w.iter().sum();
            let (mut beyond, mut decided) = (0, 0);
            for u in (1..200).map(|k| f64::from(k) / 200.0) {
                // (The best 256 tokens hold the first percent or so of the mass.)
                let max = match draw_from_best(&mut s, &row[..], t, u) {
                    Ok(BestDraw::Beyond { max }) => max,
                    Ok(BestDraw::Drawn(_)) if u < 0.01 => continue,
                    other => panic!("t {t}, u {u}: {other:?}"),
                };
                beyond += 1;
                assert_eq!(max, sorted[0].0);
                if let Some(Survivors::Row {
                    i, n: m, total: z, ..
                }) = draw_in_place(&mut s, &row[..], max, (t, f32::NEG_INFINITY), u)
                {
                    decided += 1;
                    assert!(m <= 2 * FLAT_WINDOW, "t {t}, u {u}: {m} sorted");
                    let want = sorted[draw::inverse_cdf(&w, total, u)].1;
                    assert_eq!(s.cand[i].1, want, "t {t}, u {u}");
                    assert!((z - total).abs() <= 1e-5 * total, "{z} {total}");
                    assert_eq!(
                        s.weight[i],
                        w[sorted.iter().position(|c| c.1 == want).unwrap()]
                    );
                }
            }
            assert!(
                beyond >= 190 && decided >= beyond * 95 / 100,
                "t {t}: {decided} of {beyond}"
            );
            // Next to the cumulative boundaries, within the fast bound but far beyond the
            // precise sums': the walk from the row's precise masses decides.
            let mut c = 0.0;
            let cum: Vec<f64> = w
                .iter()
                .map(|&x| {
                    c += x;
                    c / total
                })
                .collect();
            for k in 1..12 {
                let b = cum[n * k / 12];
                for u in [b - 1e-9, b + 1e-9] {
                    let Ok(BestDraw::Beyond { max }) = draw_from_best(&mut s, &row[..], t, u)
                    else {
                        panic!("t {t}, u {u}: decided among the best tokens");
                    };
                    let Some(Survivors::Row { i, .. }) =
                        draw_in_place(&mut s, &row[..], max, (t, f32::NEG_INFINITY), u)
                    else {
                        panic!("t {t}, u {u}: undecided");
                    };
                    let want = sorted[draw::inverse_cdf(&w, total, u)].1;
                    assert_eq!(s.cand[i].1, want, "t {t}, u {u}");
                }
            }
        }
    }

    /// Eta on a flat row keeps most of it: the first cut group takes the floor, through
    /// the histogram, instead of a sort of every survivor.
    #[test]
    fn a_crowded_floor_goes_to_the_cut_group() {
        let mut x = 0x0bad_cafe_f00d_d00du64;
        let n = 151_936;
        let row = crate::test_rows::uniform_row(&mut x, n, 0.5, 101, 7);
        let mut chain = first_of(crate::EtaCutoff::new(3e-4).unwrap(), n);
        let e = &mut chain.engine;
        let Lowering::Floor(rule) = e.stages[0].lowering() else {
            panic!("a floor stage lowers to a floor");
        };
        assert!(matches!(
            e.floor_cut(&row[..], rule),
            Ok(FloorCut::Crowded { .. })
        ));
    }

    /// The estimate from the seeds sends a flat row's top-p to the histogram, and keeps
    /// a peaked row, whose nucleus lies among the candidates, on the candidate path.
    #[test]
    fn only_flat_rows_are_beyond_the_candidates_reach() {
        let n = 151_936;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let flat = crate::test_rows::uniform_row(&mut x, n, 4.0, n + 1, n + 1);
        let mut peaked = flat.clone();
        for i in (0..n).step_by(4_217) {
            peaked[i] = 12.0;
        }
        // Peaks of unequal height, the highest at token 0, which is also a seed: the
        // sample must not count it once per block.
        let mut seeded = flat.clone();
        for (j, i) in (0..n).step_by(5_003).enumerate() {
            seeded[i] = 14.0 - (j % 5) as f32;
        }
        let ov = adjust::Overlay::new(n);
        for (row, t, flat_row) in [
            (&flat, 1.0f32, true),
            (&flat, 0.05, false),
            (&peaked, 1.0, false),
            (&seeded, 1.0, false),
        ] {
            let (mut keys, mut seeds, mut cand) = (Vec::new(), Vec::new(), Vec::new());
            let rest = &mut Vec::new();
            select::select_buffered(row, NUCLEUS, &ov, &mut keys, &mut seeds, &mut cand, rest)
                .unwrap();
            assert!(seeds.len() >= n / adjust::BLOCK - 1);
            let (max, floor) = (cand[0].0, cand[cand.len() - 1].0);
            let mut weight = Vec::new();
            fill_weights(&cand, max, t, &mut weight);
            assert_eq!(
                beyond_reach(&seeds, n, (max, floor), t, 0.95, &weight),
                flat_row,
                "t {t}, max {max}"
            );
        }
    }

    /// The finite count of dynamic temperature's normalisation, from the marks alone
    /// when the entropy pass saw no `-inf`, equals a plain count of the adjusted row's
    /// finite tokens: with and without `-inf` entries (marked or not), bans by mask
    /// (with stray bits past the last token), and patches, one of them `-inf`.
    #[test]
    fn the_finite_count_from_the_marks_is_the_plain_count() {
        let n = 10_000;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let base = crate::test_rows::uniform_row(&mut x, n, 3.0, n + 1, n + 1);
        let mut with_neg_inf = base.clone();
        for i in (7..n).step_by(997) {
            with_neg_inf[i] = f32::NEG_INFINITY;
        }
        let params = SamplingParams::builder()
            .logit_bias(3, 2.0)
            .logit_bias(8_000, f32::NEG_INFINITY)
            .logit_bias(9_998, -1.0)
            .build()
            .unwrap();
        let mut allowed: Vec<u32> = (0..n.div_ceil(32))
            .map(|w| 0xffff_ffffu32.rotate_left(w as u32 % 7) ^ (1 << (w % 32)))
            .collect();
        // Every token past the last disallowed: bits that stand for no token.
        *allowed.last_mut().unwrap() &= (1 << (n % 32)) - 1;
        let mut counts = vec![0u32; n];
        for row in [&base, &with_neg_inf] {
            for (patched, banned) in [(false, false), (true, false), (false, true), (true, true)] {
                let mut ov = adjust::Overlay::new(n);
                if patched {
                    ov.build(&row[..], &params, &[], &mut counts);
                }
                if banned {
                    ov.ban_marks(&allowed);
                }
                let (_, _, above_neg_inf) = entropy_under(&row[..], &ov).unwrap();
                assert_eq!(above_neg_inf, row.iter().all(|&l| l > f32::NEG_INFINITY));
                let plain = (0..n as TokenId)
                    .filter(|&id| ov.value(&row[..], id) > f32::NEG_INFINITY)
                    .count();
                assert_eq!(finite_under(&row[..], &ov, above_neg_inf), plain);
                assert_eq!(finite_under(&row[..], &ov, false), plain);
            }
        }
    }

    /// The adjusted row's maximum leaves a banned token out wherever it sits (in a
    /// whole word of marks or in the row's last, partial word; a short row and rows of
    /// several spans), takes a lowered top's patch instead of its entry, and reports the
    /// row's first NaN or `+inf`, banned or not.
    #[test]
    fn the_adjusted_maximum_skips_bans_and_reports_the_first_bad_entry() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in [75usize, 4_099, 151_936] {
            let row = crate::test_rows::uniform_row(&mut x, n, 2.0, n + 1, n + 1);
            for top in [5, 40, n - 3] {
                let mut r = row.clone();
                r[top] = 300.0;
                let mut allowed = vec![u32::MAX; n.div_ceil(32)];
                allowed[top / 32] &= !(1 << (top % 32));
                let plain = |skip: usize| {
                    (0..n)
                        .filter(|&i| i != skip)
                        .map(|i| r[i])
                        .fold(f32::NEG_INFINITY, f32::max)
                };
                let mut ov = adjust::Overlay::new(n);
                assert_eq!(adjusted_max(&r[..], &ov), Ok(300.0));
                // Lowered below the rest: the patch counts, not the entry.
                let params = SamplingParams::builder()
                    .logit_bias(top as TokenId, -400.0)
                    .build()
                    .unwrap();
                ov.build(&r[..], &params, &[], &mut vec![0; n]);
                assert_eq!(adjusted_max(&r[..], &ov), Ok(plain(top)), "lowered {top}");
                ov.clear();
                ov.ban_marks(&allowed);
                assert_eq!(adjusted_max(&r[..], &ov), Ok(plain(top)), "banned {top}");
                // A NaN at the banned token and a `+inf` after it: the NaN is first.
                r[top] = f32::NAN;
                r[n - 1] = f32::INFINITY;
                let nan = Err(Error::NanLogit { index: top });
                assert_eq!(adjusted_max(&r[..], &ov), nan);
                r[top] = 300.0;
                let inf = Err(Error::InfiniteLogit { index: n - 1 });
                assert_eq!(adjusted_max(&r[..], &ov), inf);
            }
        }
    }
}
