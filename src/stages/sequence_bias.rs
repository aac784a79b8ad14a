//! A bias on token sequences, with Hugging Face's `SequenceBiasLogitsProcessor`
//! (`sequence_bias`) semantics.

use crate::candidates::Candidates;
use crate::chain::{Stage, StageContext};
use crate::error::Error;
use crate::history::History;
use crate::processor::LogitsProcessor;
use crate::TokenId;

/// One multi-token sequence: its prefix in [`SequenceBias::tokens`] and its bias.
#[derive(Clone, Debug, PartialEq)]
struct Multi {
    start: usize,
    len: usize,
    bias: f32,
}

/// The sequences that end in one token: that token, the bias of the one-token sequence
/// (if given) and the range of its multi-token sequences in [`SequenceBias::multi`].
#[derive(Clone, Debug, PartialEq)]
struct Group {
    last: TokenId,
    single: Option<f32>,
    multi: std::ops::Range<usize>,
}

/// Adds a bias to the last token of each listed sequence whose other tokens end the
/// history (Hugging Face `sequence_bias`).
///
/// For a sequence `[w1, ..., wm]` with bias `b`: when the history (prompt and generated
/// tokens, as Hugging Face's `input_ids`) ends with `w1 .. w(m-1)`, `l[wm] += b`; a
/// one-token sequence `[w]` adds its bias at every step. A positive bias makes the
/// sequence likelier to be completed, a negative one less likely, and `-inf` bans its
/// completion (which is what [`BadWords`](crate::BadWords) does).
///
/// The biases of one step are summed per token in `f32`, the one-token bias first and
/// then each matching longer sequence in the order given, and the sum is added to the
/// logit once, as transformers builds its bias row and adds it: the same `f32` results.
/// A sequence listed twice keeps its first place and its last bias (transformers turns
/// the list into a `dict`).
///
/// Works as a [`Stage`] of a [`Chain`](crate::Chain) and as a [`LogitsProcessor`] for
/// [`Sampler::add_processor`](crate::Sampler::add_processor). Put it before the cuts, as
/// transformers runs its processors before its warpers: after a cut it only changes the
/// tokens that are still candidates.
///
/// - **Default**: no sequences (the stage does nothing).
/// - **Valid**: non-empty sequences; biases finite or `-inf`.
/// - **Edge cases**: any id of any sequence outside the vocabulary gives
///   [`Error::TokenOutOfRange`] when the [`Chain`](crate::Chain) is built, wherever the
///   stage stands, and at sampling time as a processor (transformers raises on its first
///   call). A history exactly equal to a sequence's prefix applies the bias;
///   transformers skips a sequence longer than the whole `input_ids` and so does not
///   apply it there, which in decoder-only generation (the prompt is in `input_ids`)
///   only happens when the prompt and generated tokens together are exactly the
///   prefix. A bias that leaves no candidate gives [`Error::NoCandidates`].
/// - **Cost**: `O(total sequence length)` per step, no allocation.
///
/// # Example
/// ```
/// use logits::{Chain, SequenceBias};
///
/// // Discourage "1 3" (token 3 right after 1); encourage token 2 at every step.
/// let bias = SequenceBias::new([(vec![1, 3], -5.0), (vec![2], 0.5)])?;
/// let mut chain = Chain::builder(4).stage(bias).greedy().build()?;
/// chain.push_prompt(&[1])?;
/// // After "1": 3 has 7.0 - 5.0 = 2.0, 2 has 3.0 + 0.5.
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 3.0, 7.0])?.token, 2);
/// // After "1 2" the prefix "1" no longer ends the history: 3 keeps its 7.0.
/// assert_eq!(chain.sample(&[0.0f32, 1.0, 3.0, 7.0])?.token, 3);
/// assert!(SequenceBias::new([(vec![], 1.0)]).is_err());
/// assert!(SequenceBias::new([(vec![1], f32::NAN)]).is_err());
/// # Ok::<(), logits::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceBias {
    /// The prefixes of the multi-token sequences, one after another.
    tokens: Vec<TokenId>,
    /// The multi-token sequences, grouped by their last token.
    multi: Vec<Multi>,
    groups: Vec<Group>,
    /// The largest id of any sequence (checked against the vocabulary).
    max_id: Option<TokenId>,
}

/// The error of a caller-sized buffer that cannot be allocated.
fn oom(value: usize) -> Error {
    Error::OutOfMemory {
        name: "sequence_bias",
        value,
    }
}

impl SequenceBias {
    /// The sequences, as token ids, each with its bias.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming `sequence_bias` for an empty sequence (value:
    /// its index) or a bias that is NaN or `+inf` (value: the bias);
    /// [`Error::OutOfMemory`] when the sequences cannot be copied.
    pub fn new<I, S>(entries: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = (S, f32)>,
        S: AsRef<[TokenId]>,
    {
        // Every sequence, flat, in the order given: (start, len, bias).
        let mut flat: Vec<TokenId> = Vec::new();
        let mut seqs: Vec<(usize, usize, f32)> = Vec::new();
        for (i, (s, bias)) in entries.into_iter().enumerate() {
            let s = s.as_ref();
            if s.is_empty() {
                return Err(Error::InvalidParameter {
                    name: "sequence_bias",
                    value: i as f64,
                    expected: "non-empty token sequences (value: index of the empty one)",
                });
            }
            if bias.is_nan() || bias == f32::INFINITY {
                return Err(Error::InvalidParameter {
                    name: "sequence_bias",
                    value: bias.into(),
                    expected: "a finite bias or -inf",
                });
            }
            flat.try_reserve(s.len()).map_err(|_| oom(s.len()))?;
            seqs.try_reserve(1).map_err(|_| oom(i + 1))?;
            seqs.push((flat.len(), s.len(), bias));
            flat.extend_from_slice(s);
        }
        let seq = |&(start, len, _): &(usize, usize, f32)| &flat[start..start + len];
        // A sequence listed twice: its first place, its last bias (a Python dict).
        let mut order: Vec<usize> = Vec::new();
        order.try_reserve(seqs.len()).map_err(|_| oom(seqs.len()))?;
        order.extend(0..seqs.len());
        order.sort_by(|&a, &b| seq(&seqs[a]).cmp(seq(&seqs[b])).then(a.cmp(&b)));
        let mut keep = Vec::new();
        keep.try_reserve(seqs.len()).map_err(|_| oom(seqs.len()))?;
        let mut run = 0;
        while run < order.len() {
            let mut end = run + 1;
            while end < order.len() && seq(&seqs[order[end]]) == seq(&seqs[order[run]]) {
                end += 1;
            }
            let (start, len, _) = seqs[order[run]];
            keep.push((order[run], start, len, seqs[order[end - 1]].2));
            run = end;
        }
        // Grouped by last token; within a group, in the order first given.
        keep.sort_by_key(|&(first, start, len, _)| (flat[start + len - 1], first));
        let max_id = flat.iter().copied().max();
        let mut out = SequenceBias {
            tokens: Vec::new(),
            multi: Vec::new(),
            groups: Vec::new(),
            max_id,
        };
        out.tokens
            .try_reserve(flat.len())
            .map_err(|_| oom(flat.len()))?;
        out.multi
            .try_reserve(keep.len())
            .map_err(|_| oom(keep.len()))?;
        out.groups
            .try_reserve(keep.len())
            .map_err(|_| oom(keep.len()))?;
        for &(_, start, len, bias) in &keep {
            let last = flat[start + len - 1];
            if out.groups.last().map(|g| g.last) != Some(last) {
                let at = out.multi.len();
                out.groups.push(Group {
                    last,
                    single: None,
                    multi: at..at,
                });
            }
            let Some(group) = out.groups.last_mut() else {
                continue;
            };
            if len == 1 {
                group.single = Some(bias);
            } else {
                out.multi.push(Multi {
                    start: out.tokens.len(),
                    len: len - 1,
                    bias,
                });
                out.tokens.extend_from_slice(&flat[start..start + len - 1]);
                group.multi.end = out.multi.len();
            }
        }
        Ok(out)
    }

    /// Refuses an id `>= vocab_size`.
    fn check(&self, vocab_size: usize) -> Result<(), Error> {
        match self.max_id {
            Some(id) if id as usize >= vocab_size => Err(Error::TokenOutOfRange { id, vocab_size }),
            _ => Ok(()),
        }
    }

    /// Calls `add(token, bias)` once for each token with a bias after `history`.
    fn for_each_bias(&self, history: &[TokenId], mut add: impl FnMut(TokenId, f32)) {
        for g in &self.groups {
            let mut hit = g.single.is_some();
            let mut sum = g.single.unwrap_or(0.0);
            for m in &self.multi[g.multi.clone()] {
                if history.ends_with(&self.tokens[m.start..m.start + m.len]) {
                    sum += m.bias;
                    hit = true;
                }
            }
            if hit {
                add(g.last, sum);
            }
        }
    }
}

impl Stage for SequenceBias {
    fn name(&self) -> &'static str {
        "sequence_bias"
    }

    /// # Errors
    /// [`Error::TokenOutOfRange`] for an id of any sequence `>= vocab_size`.
    fn check_vocab(&self, vocab_size: usize) -> Result<(), Error> {
        self.check(vocab_size)
    }

    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if c.is_dense() {
            self.check(c.len())?;
        }
        self.for_each_bias(ctx.history.tokens(), |id, b| {
            if let Some(l) = c.logit_of_mut(id) {
                *l += b;
            }
        });
        Ok(())
    }
}

impl LogitsProcessor for SequenceBias {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        self.check(logits.len())?;
        self.for_each_bias(history.tokens(), |id, b| logits[id as usize] += b);
        Ok(())
    }
}
