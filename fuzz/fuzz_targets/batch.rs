//! `BatchSampler` over arbitrary rows: up to 6 sequences, each with its own parameters
//! (or its own chain), prompt and seed, sampled for a few steps as one block in f32, f16
//! or bf16, on rayon's threads, each row with its own mask (of any width, wrong ones
//! included) and bans (ids outside the vocabulary included) through
//! `BatchSampler::sample_rows`, or through `sample` alone. Every row's result (token,
//! logprobs and alternatives, or error) must equal what sampling that row alone gives,
//! and the same batch in another row order must give the same results, row for row. A
//! row's error must not move its history.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use logits::{
    BatchSampler, Chain, Error, Logit, MinP, RowInput, Sample, Sampler, Temperature, TokenId,
    TokenMask, TopK, TopP, TypicalP,
};
use logits_fuzz::{param, sampling_params, Dtype, Row};

/// A sequence the batch and the lone copies can both be built from.
trait Sequence: Sized + logits::SequenceSampler {
    fn sample_alone<T: Logit>(
        &mut self,
        row: &[T],
        mask: Option<&TokenMask>,
        banned: &[TokenId],
    ) -> Result<Sample, Error>;
    fn push(&mut self, prompt: &[TokenId]) -> Result<(), Error>;
    fn tokens(&self) -> Vec<TokenId>;
}

/// `Sampler` and `Chain` have the same inherent methods, so one body serves both.
macro_rules! impl_sequence {
    ($($t:ty),*) => {$(
        impl Sequence for $t {
            fn sample_alone<T: Logit>(
                &mut self,
                row: &[T],
                mask: Option<&TokenMask>,
                banned: &[TokenId],
            ) -> Result<Sample, Error> {
                self.sample_banned(row, mask, banned)
            }
            fn push(&mut self, prompt: &[TokenId]) -> Result<(), Error> {
                self.push_prompt(prompt)
            }
            fn tokens(&self) -> Vec<TokenId> {
                self.history().tokens().to_vec()
            }
        }
    )*};
}
impl_sequence!(Sampler, Chain);

/// One result per row, in row order.
type Results = Vec<Result<Sample, Error>>;

/// One stage of a chain, with its parameter.
#[derive(Clone, Copy, Debug)]
enum Spec {
    Temperature(f32),
    TopK(usize),
    TopP(f32),
    MinP(f32),
    Typical(f32),
}

/// Up to 4 of the core cuts and typical-p, in arbitrary order, and a seed.
fn chain_spec(u: &mut Unstructured<'_>) -> arbitrary::Result<(Vec<Spec>, u64)> {
    let mut spec = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        spec.push(match u.int_in_range(0..=4)? {
            0 => Spec::Temperature(param(u, 0.0, 3.0)?),
            1 => Spec::TopK(u.int_in_range(0..=8)?),
            2 => Spec::TopP(param(u, 0.0, 1.0)?),
            3 => Spec::MinP(param(u, 0.0, 1.0)?),
            _ => Spec::Typical(param(u, 0.0, 1.0)?),
        });
    }
    Ok((spec, u.arbitrary()?))
}

/// The chain `spec` describes, or `None` when a stage refuses its parameter.
fn build(spec: &[Spec], seed: u64, vocab: usize) -> Option<Chain> {
    let mut b = Chain::builder(vocab);
    for &s in spec {
        b = match s {
            Spec::Temperature(t) => b.stage(Temperature::new(t).ok()?),
            Spec::TopK(k) => b.stage(TopK::new(k).ok()?),
            Spec::TopP(p) => b.stage(TopP::new(p).ok()?),
            Spec::MinP(p) => b.stage(MinP::new(p).ok()?),
            Spec::Typical(p) => b.stage(TypicalP::new(p).ok()?),
        };
    }
    b.draw().seed(seed).build().ok()
}

/// Runs the batch, its lone copies and a reordered batch for `steps` blocks.
fn check<S: Sequence>(
    u: &mut Unstructured<'_>,
    mut make: impl FnMut() -> S,
    rows: usize,
    vocab: usize,
    dtype: Dtype,
) -> arbitrary::Result<()> {
    let mut batch = Vec::with_capacity(rows);
    let mut alone = Vec::with_capacity(rows);
    let mut shuffled = Vec::with_capacity(rows);
    for _ in 0..rows {
        batch.push(make());
        alone.push(make());
        shuffled.push(make());
    }
    for i in 0..rows {
        let prompt: Vec<TokenId> = (0..u.int_in_range(0..=4)?)
            .map(|_| u.int_in_range(0..=30))
            .collect::<arbitrary::Result<_>>()?;
        let r = batch[i].push(&prompt);
        assert_eq!(r, alone[i].push(&prompt));
        assert_eq!(r, shuffled[i].push(&prompt));
    }
    // `order[j]` is the sequence at row `j` of the reordered batch.
    let mut order: Vec<usize> = (0..rows).collect();
    for j in (1..rows).rev() {
        order.swap(j, u.int_in_range(0..=j)?);
    }
    let mut shuffled_seqs: Vec<Option<S>> = shuffled.into_iter().map(Some).collect();
    let shuffled: Vec<S> = order
        .iter()
        .map(|&i| shuffled_seqs[i].take().expect("a permutation"))
        .collect();
    let mut batch = BatchSampler::new(batch);
    let mut shuffled = BatchSampler::new(shuffled);
    let row_len = vocab + u.int_in_range(0..=3)?;
    for _ in 0..u.int_in_range(1..=4)? {
        let block = Row::arbitrary(u, dtype, rows * row_len)?;
        // `None`: the plain `sample`; else each row's mask and bans.
        let inputs = if u.arbitrary()? {
            let mut v = Vec::with_capacity(rows);
            for _ in 0..rows {
                v.push(row_input(u, vocab, row_len)?);
            }
            Some(v)
        } else {
            None
        };
        let step_in = Step {
            order: &order,
            row_len,
            inputs: inputs.as_deref(),
        };
        match &block {
            Row::F32(v) => step(&mut batch, &mut alone, &mut shuffled, &step_in, v),
            Row::F16(v) => step(&mut batch, &mut alone, &mut shuffled, &step_in, v),
            Row::Bf16(v) => step(&mut batch, &mut alone, &mut shuffled, &step_in, v),
        }
    }
    Ok(())
}

/// A row's mask and bans for one step: a mask (usually of a valid width, sometimes of a
/// wrong one) or none, and up to 3 banned ids (some outside the vocabulary).
fn row_input(
    u: &mut Unstructured<'_>,
    vocab: usize,
    row_len: usize,
) -> arbitrary::Result<(Option<TokenMask>, Vec<TokenId>)> {
    let mask = if u.arbitrary()? {
        let width = if u.ratio(1, 8)? {
            u.int_in_range(0..=row_len + 1)?
        } else {
            u.int_in_range(vocab..=row_len)?
        };
        let mut m = TokenMask::new_empty(width);
        for id in 0..width as u32 {
            if u.ratio(2, 3)? {
                m.allow(id).unwrap();
            }
        }
        Some(m)
    } else {
        None
    };
    let banned = (0..u.int_in_range(0..=3)?)
        .map(|_| u.int_in_range(0..=vocab as u32 + 2))
        .collect::<arbitrary::Result<_>>()?;
    Ok((mask, banned))
}

/// What one step of every batch shares.
struct Step<'a> {
    /// `order[j]` is the sequence at row `j` of the reordered batch.
    order: &'a [usize],
    row_len: usize,
    /// Each sequence's mask and bans, or `None` for the plain `sample`.
    inputs: Option<&'a [(Option<TokenMask>, Vec<TokenId>)]>,
}

fn step<S: Sequence, T: Logit>(
    batch: &mut BatchSampler<S>,
    alone: &mut [S],
    shuffled: &mut BatchSampler<S>,
    st: &Step<'_>,
    block: &[T],
) {
    let (order, row_len) = (st.order, st.row_len);
    let input = |i: usize| match st.inputs {
        Some(v) => RowInput {
            mask: v[i].0.as_ref(),
            banned: &v[i].1,
        },
        None => RowInput::default(),
    };
    let before: Vec<Vec<TokenId>> = alone.iter().map(Sequence::tokens).collect();
    let mut reordered = Vec::with_capacity(block.len());
    for &i in order {
        reordered.extend_from_slice(&block[i * row_len..(i + 1) * row_len]);
    }
    let (got, other): (Results, Results) = match st.inputs {
        None => (
            batch.sample(block, row_len).unwrap().to_vec(),
            shuffled.sample(&reordered, row_len).unwrap().to_vec(),
        ),
        Some(_) => {
            let ins: Vec<RowInput<'_>> = (0..alone.len()).map(input).collect();
            let ins_reordered: Vec<RowInput<'_>> = order.iter().map(|&i| input(i)).collect();
            (
                batch.sample_rows(block, row_len, &ins).unwrap().to_vec(),
                (shuffled.sample_rows(&reordered, row_len, &ins_reordered))
                    .unwrap()
                    .to_vec(),
            )
        }
    };
    for (i, s) in alone.iter_mut().enumerate() {
        let RowInput { mask, banned } = input(i);
        let want = s.sample_alone(&block[i * row_len..(i + 1) * row_len], mask, banned);
        assert_eq!(got[i], want, "row {i}");
        if want.is_err() {
            assert_eq!(s.tokens(), before[i], "row {i}: an error moved the history");
        }
        if let Ok(x) = &want {
            assert!(
                mask.is_none_or(|m| m.is_allowed(x.token)),
                "row {i}: masked"
            );
            assert!(!banned.contains(&x.token), "row {i}: banned");
        }
        assert_eq!(batch.samplers()[i].tokens(), s.tokens(), "row {i}");
    }
    for (j, &i) in order.iter().enumerate() {
        assert_eq!(
            other[j], got[i],
            "sequence {i} at row {j} of the reordered batch"
        );
        assert_eq!(shuffled.samplers()[j].tokens(), alone[i].tokens());
    }
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let dtype: Dtype = u.arbitrary()?;
    let vocab: usize = u.int_in_range(1..=24)?;
    let rows: usize = u.int_in_range(0..=6)?;
    if u.arbitrary()? {
        // One parameter set per row, each sampler built three times.
        let mut params = Vec::with_capacity(rows);
        for _ in 0..rows {
            match sampling_params(u)? {
                Ok(p) if Sampler::new(p.clone(), vocab).is_ok() => params.push(p),
                _ => return Ok(()),
            }
        }
        let mut n = 0;
        let make = || {
            let s = Sampler::new(params[(n / 3) % rows.max(1)].clone(), vocab).unwrap();
            n += 1;
            s
        };
        check(u, make, rows, vocab, dtype)
    } else {
        let mut specs = Vec::with_capacity(rows);
        for _ in 0..rows {
            let (spec, seed) = chain_spec(u)?;
            if build(&spec, seed, vocab).is_none() {
                return Ok(());
            }
            specs.push((spec, seed));
        }
        let mut n = 0;
        let make = || {
            let (spec, seed) = &specs[(n / 3) % rows.max(1)];
            n += 1;
            build(spec, *seed, vocab).unwrap()
        };
        check(u, make, rows, vocab, dtype)
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
