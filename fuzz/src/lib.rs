//! Shared pieces of the fuzz targets: decoding rows of logits from raw bytes and the
//! invariants every sampled token must satisfy.

use arbitrary::{Arbitrary, Unstructured};
use logits::half::{bf16, f16};
use logits::reference;
use logits::{Error, Sample, SamplingParams, TokenId};

/// The element type a row is given in.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

/// A row of logits in one element type, with its exact `f32` copy.
#[derive(Clone, Debug)]
pub enum Row {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

impl Row {
    /// `len` entries decoded from raw bit patterns (NaN, infinities, subnormals included).
    /// A few "shaped" values are mixed in so that rows are not all noise: equal logits,
    /// huge finite logits and `-inf` bans.
    pub fn arbitrary(u: &mut Unstructured<'_>, dtype: Dtype, len: usize) -> arbitrary::Result<Row> {
        let mut f = Vec::with_capacity(len);
        for _ in 0..len {
            let sel: u8 = u.arbitrary()?;
            let v = match sel % 16 {
                0 => f32::NEG_INFINITY,
                1 => 0.0,
                2 => 1e38,
                3 => -1e38,
                4 => f32::MIN_POSITIVE / 4.0,
                5..=9 => f32::from(u.arbitrary::<i8>()?) / 8.0,
                _ => f32::from_bits(u.arbitrary()?),
            };
            f.push(v);
        }
        Ok(match dtype {
            Dtype::F32 => Row::F32(f),
            // Raw bit patterns in the half formats too, not only converted f32 values.
            Dtype::F16 => Row::F16(
                f.iter()
                    .map(|&v| {
                        if v.is_finite() && v.abs() < 1e4 {
                            f16::from_f32(v)
                        } else {
                            f16::from_bits(v.to_bits() as u16)
                        }
                    })
                    .collect(),
            ),
            Dtype::Bf16 => Row::Bf16(
                f.iter()
                    .map(|&v| {
                        if v.is_finite() {
                            bf16::from_f32(v)
                        } else {
                            bf16::from_bits((v.to_bits() >> 16) as u16)
                        }
                    })
                    .collect(),
            ),
        })
    }

    /// The same values as `f32` (exact for both half formats).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            Row::F32(v) => v.clone(),
            Row::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Row::Bf16(v) => v.iter().map(|x| x.to_f32()).collect(),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        match self {
            Row::F32(v) => v.len(),
            Row::F16(v) => v.len(),
            Row::Bf16(v) => v.len(),
        }
    }

    /// True when the row has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A float parameter: mostly a value inside its valid range, sometimes raw bits (to reach
/// every validation branch).
pub fn param(u: &mut Unstructured<'_>, lo: f32, hi: f32) -> arbitrary::Result<f32> {
    let sel: u8 = u.arbitrary()?;
    Ok(match sel % 8 {
        0 => f32::from_bits(u.arbitrary()?),
        1 => lo,
        2 => hi,
        _ => {
            let x: u16 = u.arbitrary()?;
            lo + (hi - lo) * (f32::from(x) / f32::from(u16::MAX))
        }
    })
}

/// Asserts that `err` is one of the errors documented for sampling a row.
pub fn assert_documented_sample_error(err: &Error) {
    assert!(
        matches!(
            err,
            Error::EmptyVocabulary
                | Error::VocabLargerThanRow { .. }
                | Error::LengthMismatch { .. }
                | Error::NanLogit { .. }
                | Error::InfiniteLogit { .. }
                | Error::NoCandidates
        ),
        "undocumented error from sample: {err:?}"
    );
}

/// Checks a drawn sample against the reference's final distribution `dist` (token,
/// probability) over the survivors: the token survives, its probability matches, and
/// when every finite token is listed among the alternatives, the alternatives' final
/// probabilities are the reference's and sum to 1.
pub fn check_sample(
    out: &Sample,
    dist: &[(TokenId, f64)],
    greedy: bool,
    finite_tokens: usize,
    n_alt: Option<usize>,
) {
    let p_ref = dist
        .iter()
        .find(|&&(id, _)| id == out.token)
        .map(|&(_, p)| p);
    let Some(p_ref) = p_ref else {
        panic!("token {} is not a survivor: {dist:?}", out.token);
    };
    // A probability is at most 1, within the 1e-5 the fast path's arithmetic may add.
    assert!(out.logprob.is_finite() && out.logprob <= 1e-5, "{out:?}");
    if greedy {
        assert_eq!(out.logprob, 0.0);
    }
    let p = f64::from(out.logprob).exp();
    assert!((p - p_ref).abs() <= 1e-5, "p {p} vs reference {p_ref}");
    if let Some(n) = n_alt {
        let alts = out.alternatives();
        assert_eq!(alts.len(), n.min(finite_tokens));
        assert!(out.raw_logprob.is_some_and(|r| r <= 1e-6));
        for w in alts.windows(2) {
            assert!(w[0].raw_logprob >= w[1].raw_logprob, "{alts:?}");
        }
        for a in alts {
            assert!(a.raw_logprob.is_finite() || a.raw_logprob == f32::NEG_INFINITY);
            let want = dist
                .iter()
                .find(|&&(id, _)| id == a.token)
                .map_or(0.0, |&(_, p)| p);
            let got = f64::from(a.logprob).exp();
            assert!(
                (got - want).abs() <= 1e-5,
                "alternative {a:?}: final p {got} vs reference {want}"
            );
        }
        if n >= finite_tokens {
            let sum: f64 = alts.iter().map(|a| f64::from(a.logprob).exp()).sum();
            assert!(
                (sum - 1.0).abs() <= 1e-5,
                "final probabilities sum to {sum}"
            );
            let raw: f64 = alts.iter().map(|a| f64::from(a.raw_logprob).exp()).sum();
            assert!((raw - 1.0).abs() <= 1e-5, "raw probabilities sum to {raw}");
        }
    }
}

/// The reference's final distribution, and whether the reference draw with uniform `u`
/// lands within `1e-9` of a boundary between two survivors (where the fast path, which
/// sums in another order, may legitimately pick the neighbour).
pub fn reference_draw(
    survivors: &[reference::Candidate],
    u: f64,
) -> (TokenId, Vec<(TokenId, f64)>, bool) {
    let dist = reference::normalize(survivors);
    let token = reference::draw(survivors, u);
    let mut cum = 0.0;
    let mut near_boundary = false;
    for &(_, p) in &dist {
        cum += p;
        if (cum - u).abs() <= 1e-9 {
            near_boundary = true;
        }
    }
    (token, dist, near_boundary)
}

/// Arbitrary `SamplingParams`, valid or not: every field set or left at its default, with
/// values drawn around and outside their valid ranges, logit biases on ids up to 40 and a
/// seed. The builder's verdict is returned as is.
pub fn sampling_params(
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<Result<SamplingParams, Error>> {
    let mut b = SamplingParams::builder();
    if u.arbitrary()? {
        b = b.temperature(if u.ratio(1, 4)? {
            0.0
        } else {
            param(u, 0.0, 3.0)?
        });
    }
    if u.arbitrary()? {
        b = b.top_k(u.int_in_range(0..=40)?);
    }
    if u.arbitrary()? {
        b = b.top_p(param(u, 0.0, 1.0)?);
    }
    if u.arbitrary()? {
        b = b.min_p(param(u, 0.0, 1.0)?);
    }
    if u.arbitrary()? {
        b = b.repetition_penalty(param(u, 0.0, 3.0)?);
    }
    if u.arbitrary()? {
        b = b.frequency_penalty(param(u, -2.0, 2.0)?);
    }
    if u.arbitrary()? {
        b = b.presence_penalty(param(u, -2.0, 2.0)?);
    }
    if u.arbitrary()? {
        b = b.penalty_window(u.int_in_range(0..=8)?);
    }
    b = b.penalize_prompt(u.arbitrary()?);
    for _ in 0..u.int_in_range(0..=4)? {
        b = b.logit_bias(u.int_in_range(0..=40)?, param(u, -100.0, 100.0)?);
    }
    if u.arbitrary()? {
        b = b.min_tokens_to_keep(u.int_in_range(0..=5)?);
    }
    b = b.seed(u.arbitrary()?);
    if u.arbitrary()? {
        b = b.logprobs(u.int_in_range(0..=21)?);
    }
    Ok(b.build())
}
