//! The samplers beyond the core pipeline, each checked against a plain, sort-based
//! reference written here, plus their edge cases and parameter errors.

use std::collections::BTreeSet;

use logits::{
    AllowedTokens, BadWords, Candidates, Chain, Dry, DynamicTemperature, EpsilonCutoff, Error,
    EtaCutoff, History, LogitsProcessor, MinNewTokens, Mirostat, MirostatV2, NoRepeatNGram,
    Sampler, SamplingParams, Stage, StageContext, Temperature, TokenId, TopK, TopNSigma, TypicalP,
    Xtc,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// Helpers.

fn cands(row: &[f32]) -> Candidates {
    let mut c = Candidates::new();
    c.reset_from(row.iter().copied());
    c
}

fn ctx<'a>(tokens: &'a [TokenId], prompt_len: usize) -> StageContext<'a> {
    StageContext {
        history: History::new(tokens, prompt_len),
        seed: 0,
        step: (tokens.len() - prompt_len.min(tokens.len())) as u64,
    }
}

/// Applies `stage` to `row` at temperature `t` and returns the surviving finite ids.
fn kept(stage: &mut dyn Stage, row: &[f32], t: f64) -> BTreeSet<TokenId> {
    let mut c = cands(row);
    c.set_temperature(t).unwrap();
    stage.apply(&mut c, &ctx(&[], 0)).unwrap();
    finite_ids(&c)
}

fn finite_ids(c: &Candidates) -> BTreeSet<TokenId> {
    c.ids()
        .iter()
        .zip(c.logits())
        .filter(|(_, &l)| l > f32::NEG_INFINITY)
        .map(|(&id, _)| id)
        .collect()
}

/// Reference probabilities in id order: `exp((l - max) / t) / sum`, `f64`.
fn probs(row: &[f32], t: f64) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let w: Vec<f64> = row.iter().map(|&l| ((l as f64 - max) / t).exp()).collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

/// Reference entropy (nats), from log-probabilities in logit space.
fn entropy(row: &[f32], t: f64) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let w: Vec<f64> = row.iter().map(|&l| ((l as f64 - max) / t).exp()).collect();
    // The stages round the exact sums once: so does this, in any order. (`ln(total)` is
    // ill-conditioned for a total next to 1, so one ulp of the total moves a small
    // entropy far more than 1e-12.)
    let total = fsum(w.iter().copied());
    let terms = row.iter().zip(&w).filter(|&(_, &wi)| wi > 0.0);
    fsum(terms.map(|(&l, &wi)| (wi / total) * (total.ln() - (l as f64 - max) / t)))
}

/// The correctly rounded sum of `xs` (Shewchuk's exact partials, as Python's
/// `math.fsum`), independent of the crate's accumulator.
fn fsum(xs: impl Iterator<Item = f64>) -> f64 {
    let mut partials: Vec<f64> = Vec::new();
    for mut x in xs {
        let mut i = 0;
        for j in 0..partials.len() {
            let mut y = partials[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                partials[i] = lo;
                i += 1;
            }
            x = hi;
        }
        partials.truncate(i);
        partials.push(x);
    }
    let Some(mut n) = partials.len().checked_sub(1) else {
        return 0.0;
    };
    let (mut hi, mut lo) = (partials[n], 0.0);
    while n > 0 {
        let x = hi;
        n -= 1;
        let y = partials[n];
        hi = x + y;
        lo = y - (hi - x);
        if lo != 0.0 {
            break;
        }
    }
    // Half-way: the rest of the partials decides the rounding.
    if n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0)) {
        let y = lo * 2.0;
        let x = hi + y;
        if y == x - hi {
            hi = x;
        }
    }
    hi
}

/// Finite ids sorted in draw order: logit descending, ties by lower id.
fn draw_order(row: &[f32]) -> Vec<TokenId> {
    let mut ids: Vec<TokenId> = (0..row.len() as TokenId)
        .filter(|&i| row[i as usize] > f32::NEG_INFINITY)
        .collect();
    ids.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
    ids
}

fn all_finite(row: &[f32]) -> BTreeSet<TokenId> {
    (0..row.len() as TokenId)
        .filter(|&i| row[i as usize] > f32::NEG_INFINITY)
        .collect()
}

/// Rows with ties and banned entries: values on a coarse grid or continuous, some `-inf`.
fn row(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<f32>> {
    let cell = prop_oneof![
        6 => -20.0f32..20.0,
        3 => (-4i32..4).prop_map(|x| x as f32),
        1 => Just(f32::NEG_INFINITY),
    ];
    prop::collection::vec(cell, len)
}

/// A row with at least one finite logit.
fn live_row(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<f32>> {
    row(len).prop_filter("one finite logit", |r| r.iter().any(|l| l.is_finite()))
}

fn temperature() -> impl Strategy<Value = f64> {
    prop_oneof![Just(1.0f64), 0.25f64..3.0]
}

fn is_invalid(r: Result<impl std::fmt::Debug, Error>, param: &str) -> bool {
    matches!(r, Err(Error::InvalidParameter { name, .. }) if name == param)
}

// ---------------------------------------------------------------------------------------
// References.

fn ref_typical(row: &[f32], t: f64, mass: f32, min_keep: usize) -> BTreeSet<TokenId> {
    let p = probs(row, t);
    let h = entropy(row, t);
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let total: f64 = row.iter().map(|&l| ((l as f64 - max) / t).exp()).sum();
    let mut keyed: Vec<(f64, TokenId, f64)> = (0..row.len())
        .filter(|&i| row[i] > f32::NEG_INFINITY)
        .map(|i| {
            let logp = (row[i] as f64 - max) / t - total.ln();
            ((-logp - h).abs(), i as TokenId, p[i] * total)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let target = logits::as_decimal(mass) * total;
    let mut cum = 0.0;
    let mut cut = keyed.last().unwrap().0;
    for k in &keyed {
        cum += k.2;
        if cum >= target {
            cut = k.0;
            break;
        }
    }
    keyed
        .iter()
        .enumerate()
        .filter(|(i, k)| k.0 <= cut || *i < min_keep)
        .map(|(_, k)| k.1)
        .collect()
}

fn ref_cutoff(row: &[f32], t: f64, cut: f64, min_keep: usize) -> BTreeSet<TokenId> {
    let p = probs(row, t);
    let mut sorted: Vec<f32> = row.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let kth = sorted[min_keep.min(row.len()) - 1];
    (0..row.len())
        .filter(|&i| row[i] > f32::NEG_INFINITY && (p[i] >= cut || row[i] >= kth))
        .map(|i| i as TokenId)
        .collect()
}

fn ref_top_n_sigma(row: &[f32], n: f32) -> BTreeSet<TokenId> {
    let finite: Vec<f64> = row
        .iter()
        .filter(|l| l.is_finite())
        .map(|&l| l as f64)
        .collect();
    if finite.len() < 2 {
        return all_finite(row);
    }
    let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = finite.iter().sum::<f64>() / finite.len() as f64;
    let var = finite.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / finite.len() as f64;
    let floor = max - n as f64 * var.sqrt();
    (0..row.len())
        .filter(|&i| row[i].is_finite() && row[i] as f64 >= floor)
        .map(|i| i as TokenId)
        .collect()
}

fn ref_xtc(
    row: &[f32],
    t: f64,
    thr: f32,
    special: &[TokenId],
    min_keep: usize,
) -> BTreeSet<TokenId> {
    let p = probs(row, t);
    let order = draw_order(row);
    let above: Vec<TokenId> = order
        .iter()
        .copied()
        .filter(|&i| p[i as usize] > 0.0 && p[i as usize] >= logits::as_decimal(thr))
        .collect();
    let all = all_finite(row);
    if above.len() < 2 {
        return all;
    }
    let least = p[*above.last().unwrap() as usize];
    let out: BTreeSet<TokenId> = all
        .iter()
        .copied()
        .filter(|&i| p[i as usize] <= least || special.contains(&i))
        .collect();
    let live = order.iter().filter(|&&i| p[i as usize] > 0.0).count();
    let removed = all.len() - out.len();
    if removed == 0 || live - removed < min_keep {
        all
    } else {
        out
    }
}

/// DRY penalties by brute force: `(token, penalty)` for every penalised token.
fn ref_dry(
    history: &[TokenId],
    mult: f32,
    base: f32,
    allowed: usize,
    window: Option<usize>,
    breakers: &[Vec<TokenId>],
) -> Vec<(TokenId, f32)> {
    let x = match window {
        Some(w) if w < history.len() => &history[history.len() - w..],
        _ => history,
    };
    let n = x.len();
    if mult == 0.0 || n <= allowed {
        return vec![];
    }
    // The breaker occurrence whose head is nearest the end (longest on a tie).
    let mut best: Option<(usize, usize)> = None; // (head position, length)
    for s in 0..n {
        for b in breakers {
            if s + b.len() <= n && x[s..s + b.len()] == b[..] {
                let better = match best {
                    None => true,
                    Some((bs, bl)) => s > bs || (s == bs && b.len() > bl),
                };
                if better {
                    best = Some((s, b.len()));
                }
            }
        }
    }
    let limit = best.map_or(n, |(s, l)| n - (s + l));
    if limit < allowed {
        return vec![];
    }
    let mut max_len: std::collections::BTreeMap<TokenId, usize> = Default::default();
    for j in 0..n - 1 {
        let mut m = 0;
        while m <= j && x[j - m] == x[n - 1 - m] {
            m += 1;
        }
        let m = m.min(limit);
        if m >= allowed {
            let e = max_len.entry(x[j + 1]).or_insert(0);
            *e = (*e).max(m);
        }
    }
    let single: BTreeSet<TokenId> = breakers
        .iter()
        .filter(|b| b.len() == 1)
        .map(|b| b[0])
        .collect();
    let mut out = vec![];
    for (tok, len) in max_len {
        if single.contains(&tok) {
            continue;
        }
        let mut e = (len - allowed) as i32;
        if base > 1.000_001 {
            e = e.min((88.722_839_1f64 / (base as f64).ln()) as i32);
        }
        out.push((tok, (mult as f64 * (base as f64).powi(e)) as f32));
    }
    out
}

fn ref_mirostat_v1_k(row: &[f32], t: f64, mu: f64, m: usize, n_vocab: usize) -> usize {
    let order = draw_order(row);
    let s: Vec<f64> = order.iter().map(|&i| row[i as usize] as f64 / t).collect();
    let pairs = (m.min(order.len())).saturating_sub(1);
    let (mut tb, mut tt) = (0.0, 0.0);
    for i in 0..pairs {
        let ti = ((i + 2) as f64 / (i + 1) as f64).ln();
        tb += ti * (s[i] - s[i + 1]);
        tt += ti * ti;
    }
    let s_hat = tb / tt;
    let e = s_hat - 1.0;
    let k = ((e * 2f64.powf(mu)) / (1.0 - (n_vocab as f64).powf(-e))).powf(1.0 / s_hat);
    (k as usize).max(1)
}

// ---------------------------------------------------------------------------------------
// Typical-p.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn typical_matches_reference(r in live_row(1..48), t in temperature(), mass in 0.01f32..0.999, mk in 1usize..4) {
        let mut s = TypicalP::new(mass).unwrap().min_keep(mk);
        prop_assert_eq!(kept(&mut s, &r, t), ref_typical(&r, t, mass, mk));
    }

    #[test]
    fn epsilon_matches_reference(r in live_row(1..48), t in temperature(), eps in 1e-4f32..0.5, mk in 1usize..4) {
        let mut s = EpsilonCutoff::new(eps).unwrap().min_keep(mk);
        prop_assert_eq!(kept(&mut s, &r, t), ref_cutoff(&r, t, logits::as_decimal(eps), mk));
    }

    #[test]
    fn eta_matches_reference(r in live_row(1..48), t in temperature(), eps in 1e-4f32..0.5, mk in 1usize..4) {
        let mut s = EtaCutoff::new(eps).unwrap().min_keep(mk);
        let h = entropy(&r, t);
        let eps = logits::as_decimal(eps);
        let eta = eps.min(eps.sqrt() * (-h).exp());
        prop_assert_eq!(kept(&mut s, &r, t), ref_cutoff(&r, t, eta, mk));
    }

    #[test]
    fn top_n_sigma_matches_reference(r in row(0..48), n in 0.05f32..4.0) {
        let mut s = TopNSigma::new(n).unwrap();
        prop_assert_eq!(kept(&mut s, &r, 1.0), ref_top_n_sigma(&r, n));
        // The processor form bans exactly the complement.
        let mut row = r.clone();
        s.process(&mut row, &History::new(&[], 0)).unwrap();
        prop_assert_eq!(all_finite(&row), ref_top_n_sigma(&r, n));
    }

    #[test]
    fn top_n_sigma_ignores_temperature(r in row(0..48), n in 0.05f32..4.0, k in -3i32..3) {
        // Scaling by a power of two is exact, so the survivors must not change.
        let scaled: Vec<f32> = r.iter().map(|&l| l * 2f32.powi(k)).collect();
        let mut s = TopNSigma::new(n).unwrap();
        prop_assert_eq!(kept(&mut s, &scaled, 1.0), kept(&mut s, &r, 1.0));
    }

    #[test]
    fn xtc_matches_reference(r in live_row(1..32), t in temperature(), thr in 0.0f32..0.5,
                             special in prop::collection::vec(0u32..32, 0..3), mk in 1usize..4) {
        let mut s = Xtc::new(1.0, thr).unwrap().special_tokens(special.clone()).min_keep(mk);
        prop_assert_eq!(kept(&mut s, &r, t), ref_xtc(&r, t, thr, &special, mk));
    }

    #[test]
    fn dry_matches_reference(
        hist in prop::collection::vec(0u32..4, 0..40),
        mult in 0.0f32..3.0, base in 1.0f32..3.0, allowed in 0usize..4,
        window in prop::option::of(1usize..40),
        breakers in prop::collection::vec(prop::collection::vec(0u32..4, 1..3), 0..3),
    ) {
        let row = [0.5f32, -1.0, 2.0, 0.0, 3.0, 1.0];
        let mut dry = Dry::new(mult, base, allowed).unwrap().sequence_breakers(&breakers).unwrap();
        if let Some(w) = window {
            dry = dry.window(w);
        }
        let mut expect = row;
        for (tok, pen) in ref_dry(&hist, mult, base, allowed, window, &breakers) {
            expect[tok as usize] -= pen;
        }
        let mut c = cands(&row);
        dry.apply(&mut c, &ctx(&hist, hist.len())).unwrap();
        let mut via_processor = row;
        dry.process(&mut via_processor, &History::new(&hist, 0)).unwrap();
        for i in 0..row.len() {
            let tol = 1e-5 * expect[i].abs().max(1.0);
            prop_assert!((c.logits()[i] - expect[i]).abs() <= tol, "token {i}: {} vs {}", c.logits()[i], expect[i]);
            prop_assert_eq!(via_processor[i], c.logits()[i]);
        }
    }

    #[test]
    fn mirostat_v1_keeps_top_k(r in live_row(1..48), t in temperature(), tau in 0.0f32..8.0, m in 2usize..12) {
        let n_vocab = 1000;
        let mut s = Mirostat::new(n_vocab, tau, 0.1, m).unwrap();
        let k = ref_mirostat_v1_k(&r, t, 2.0 * tau as f64, m, n_vocab);
        let order = draw_order(&r);
        let expect: BTreeSet<TokenId> = order.iter().copied().take(k.max(1)).collect();
        prop_assert_eq!(kept(&mut s, &r, t), expect);
    }

    #[test]
    fn mirostat_v2_keeps_low_surprise(r in live_row(1..48), t in temperature(), tau in 0.0f32..8.0) {
        let mut s = MirostatV2::new(tau, 0.1).unwrap();
        let p = probs(&r, t);
        let mu = 2.0 * tau as f64;
        let order = draw_order(&r);
        let mut expect: BTreeSet<TokenId> = order.iter().copied().filter(|&i| -p[i as usize].log2() <= mu).collect();
        if expect.is_empty() {
            expect.insert(order[0]);
        }
        prop_assert_eq!(kept(&mut s, &r, t), expect);
    }

    #[test]
    fn mirostat_mu_follows_the_drawn_surprise(r in live_row(2..32), tau in 0.5f32..6.0, eta in 0.0f32..1.0, seed in any::<u64>()) {
        let mut chain = Chain::builder(r.len()).stage(MirostatV2::new(tau, eta).unwrap()).draw().seed(seed).build().unwrap();
        let mut mu = 2.0 * tau as f64;
        let mut probe = MirostatV2::new(tau, eta).unwrap();
        for _ in 0..4 {
            let out = chain.sample(&r).unwrap();
            // The reference update, from the reported probability of the drawn token.
            mu -= eta as f64 * (-(out.logprob as f64) / std::f64::consts::LN_2 - tau as f64);
            probe.observe(out.token, out.logprob);
            prop_assert!((probe.mu() - mu).abs() < 1e-9);
        }
    }

    #[test]
    fn dynamic_temperature_matches_reference(r in live_row(1..48), t in 0.0f32..2.0, delta in 0.0f32..2.0, e in 0.0f32..3.0) {
        let mut s = DynamicTemperature::new(t, delta, e).unwrap();
        let n = all_finite(&r).len();
        let expect_t = if delta == 0.0 {
            Some(t as f64)
        } else if n <= 1 {
            None
        } else {
            let (lo, hi) = ((t as f64 - delta as f64).max(0.0), t as f64 + delta as f64);
            Some(lo + (hi - lo) * (entropy(&r, 1.0) / (n as f64).ln()).powf(e as f64))
        };
        let mut c = cands(&r);
        s.apply(&mut c, &ctx(&[], 0)).unwrap();
        match expect_t {
            None => prop_assert_eq!(c.temperature(), 1.0),
            Some(x) if x > 0.0 => {
                prop_assert!((c.temperature() - x).abs() <= 1e-12 * x.max(1.0));
                prop_assert_eq!(finite_ids(&c), all_finite(&r));
            }
            Some(_) => {
                let top = draw_order(&r)[0];
                prop_assert_eq!(finite_ids(&c), BTreeSet::from([top]));
            }
        }
    }

    #[test]
    fn no_repeat_ngram_matches_reference(hist in prop::collection::vec(0u32..5, 0..30), n in 1usize..4) {
        let row = [1.0f32; 5];
        // Reference: every n-gram of the history, as a set.
        let grams: BTreeSet<Vec<TokenId>> = if hist.len() >= n {
            (0..=hist.len() - n).map(|i| hist[i..i + n].to_vec()).collect()
        } else {
            BTreeSet::new()
        };
        let tail: Vec<TokenId> = hist[hist.len().saturating_sub(n - 1)..].to_vec();
        let banned: BTreeSet<TokenId> = (0..5u32)
            .filter(|&t| hist.len() + 1 >= n && {
                let mut g = tail.clone();
                g.push(t);
                grams.contains(&g)
            })
            .collect();
        let expect: BTreeSet<TokenId> = (0..5u32).filter(|t| !banned.contains(t)).collect();
        let mut s = NoRepeatNGram::new(n).unwrap();
        let mut c = cands(&row);
        s.apply(&mut c, &ctx(&hist, 0)).unwrap();
        prop_assert_eq!(finite_ids(&c), expect.clone());
        let mut p = row;
        s.process(&mut p, &History::new(&hist, 0)).unwrap();
        prop_assert_eq!(all_finite(&p), expect);
    }

    #[test]
    fn bad_words_match_reference(hist in prop::collection::vec(0u32..4, 0..12),
                                 words in prop::collection::vec(prop::collection::vec(0u32..4, 1..4), 0..4)) {
        let row = [1.0f32; 4];
        let banned: BTreeSet<TokenId> = words
            .iter()
            .filter(|w| {
                let prefix = &w[..w.len() - 1];
                hist.len() >= prefix.len() && hist[hist.len() - prefix.len()..] == *prefix
            })
            .map(|w| *w.last().unwrap())
            .collect();
        let expect: BTreeSet<TokenId> = (0..4u32).filter(|t| !banned.contains(t)).collect();
        let mut s = BadWords::new(&words).unwrap();
        let mut c = cands(&row);
        s.apply(&mut c, &ctx(&hist, 0)).unwrap();
        prop_assert_eq!(finite_ids(&c), expect.clone());
        let mut p = row;
        s.process(&mut p, &History::new(&hist, 0)).unwrap();
        prop_assert_eq!(all_finite(&p), expect);
    }

    #[test]
    fn allowed_tokens_match_reference(r in row(1..40), allowed in prop::collection::vec(0u32..40, 1..6)) {
        let mut s = AllowedTokens::new(allowed.clone()).unwrap();
        let mut c = cands(&r);
        let res = s.apply(&mut c, &ctx(&[], 0));
        let max = *allowed.iter().max().unwrap();
        if max as usize >= r.len() {
            prop_assert_eq!(res, Err(Error::TokenOutOfRange { id: max, vocab_size: r.len() }));
        } else {
            res.unwrap();
            let expect: BTreeSet<TokenId> = all_finite(&r).into_iter().filter(|t| allowed.contains(t)).collect();
            prop_assert_eq!(finite_ids(&c), expect);
            // Allowed logits are untouched.
            for &a in &allowed {
                prop_assert_eq!(c.logits()[a as usize].to_bits(), r[a as usize].to_bits());
            }
        }
    }

    #[test]
    fn min_new_tokens_bans_eos_until_reached(prompt in 0usize..5, generated in 0usize..6, min in 0usize..6, eos in 0u32..4) {
        let hist: Vec<TokenId> = vec![0; prompt + generated];
        let row = [1.0f32; 4];
        let mut s = MinNewTokens::new(min, [eos]).unwrap();
        let mut c = cands(&row);
        s.apply(&mut c, &ctx(&hist, prompt)).unwrap();
        let expect_banned = generated < min;
        prop_assert_eq!(!finite_ids(&c).contains(&eos), expect_banned);
        prop_assert_eq!(finite_ids(&c).len(), if expect_banned { 3 } else { 4 });
        let mut p = row;
        s.process(&mut p, &History::new(&hist, prompt)).unwrap();
        prop_assert_eq!(p[eos as usize] == f32::NEG_INFINITY, expect_banned);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Long rows of close logits: many candidates share a distance bucket, so the exact
    /// cut-off inside the crossing bucket is exercised.
    #[test]
    fn typical_matches_reference_on_crowded_rows(
        r in prop::collection::vec(prop_oneof![3 => -2.0f32..2.0, 1 => (-8i32..8).prop_map(|x| x as f32 / 4.0)], 200..800),
        mass in 0.05f32..0.999, mk in 1usize..300,
    ) {
        let mut s = TypicalP::new(mass).unwrap().min_keep(mk);
        prop_assert_eq!(kept(&mut s, &r, 1.0), ref_typical(&r, 1.0, mass, mk));
    }
}

// ---------------------------------------------------------------------------------------
// Worked examples with hand-computed results.

#[test]
fn typical_cuts_the_atypically_likely_token() {
    // A uniform row: every distance |ln n - H| is the same, so all are kept.
    let row = [0.25f32; 5];
    let mut s = TypicalP::new(0.2).unwrap();
    assert_eq!(kept(&mut s, &row, 1.0).len(), 5);
    // p = [0.7, 0.1 x 3]: H = 0.94; token 0 is at |0.357 - 0.94| = 0.58, the others at
    // |2.30 - 0.94| = 1.36. With mass 0.5 only token 0 is needed.
    let row = [
        0.7f64.ln() as f32,
        0.1f64.ln() as f32,
        0.1f64.ln() as f32,
        0.1f64.ln() as f32,
    ];
    assert_eq!(kept(&mut s, &row, 1.0), BTreeSet::from([0]));
}

#[test]
fn typical_can_cut_the_most_likely_token() {
    // p = [0.9, 0.025 x 4]: H = 0.4, distances 0.29 (token 0) and 3.29: token 0 is the
    // typical one. But p = [0.4, 0.2, 0.2, 0.2]: H = 1.33; distances 0.42 and 0.28, so
    // the 0.2 tokens come first and mass 0.5 is reached by three of them.
    let row: Vec<f32> = [0.4f64, 0.2, 0.2, 0.2]
        .iter()
        .map(|p| p.ln() as f32)
        .collect();
    let mut s = TypicalP::new(0.5).unwrap();
    assert_eq!(kept(&mut s, &row, 1.0), BTreeSet::from([1, 2, 3]));
}

#[test]
fn xtc_removes_all_but_the_least_likely_above_threshold() {
    let row: Vec<f32> = [0.5f64, 0.3, 0.15, 0.05]
        .iter()
        .map(|p| p.ln() as f32)
        .collect();
    let mut s = Xtc::new(1.0, 0.1).unwrap();
    assert_eq!(kept(&mut s, &row, 1.0), BTreeSet::from([2, 3]));
    // Token 0 is special (EOS): it stays.
    let mut s = Xtc::new(1.0, 0.1).unwrap().special_tokens([0]);
    assert_eq!(kept(&mut s, &row, 1.0), BTreeSet::from([0, 2, 3]));
    // Only one token above 0.4: nothing happens.
    let mut s = Xtc::new(1.0, 0.4).unwrap();
    assert_eq!(kept(&mut s, &row, 1.0).len(), 4);
    // Never acts at probability 0.
    let mut s = Xtc::new(0.0, 0.1).unwrap();
    assert_eq!(kept(&mut s, &row, 1.0).len(), 4);
}

#[test]
fn xtc_coin_is_seeded_and_fires_at_its_rate() {
    let row: Vec<f32> = [0.5f64, 0.3, 0.15, 0.05]
        .iter()
        .map(|p| p.ln() as f32)
        .collect();
    let run = |seed: u64| -> Vec<bool> {
        let mut s = Xtc::new(0.3, 0.1).unwrap();
        (0..2000u64)
            .map(|step| {
                let mut c = cands(&row);
                let cx = StageContext {
                    history: History::new(&[], 0),
                    seed,
                    step,
                };
                s.apply(&mut c, &cx).unwrap();
                c.len() < 4
            })
            .collect()
    };
    let a = run(11);
    assert_eq!(a, run(11), "same seed, same coins");
    assert_ne!(a, run(12), "another seed, other coins");
    let rate = a.iter().filter(|&&x| x).count() as f64 / a.len() as f64;
    assert!((rate - 0.3).abs() < 0.05, "fired at {rate}");
}

#[test]
fn xtc_coin_does_not_move_the_draw() {
    // With XTC never acting (threshold too high for two tokens), a chain with XTC draws
    // exactly what the chain without it draws: the coin uses its own stream.
    let row = [1.0f32, 0.9, 0.8, 0.7, 0.6];
    let mut with = Chain::builder(5)
        .stage(Xtc::new(0.5, 0.5).unwrap())
        .draw()
        .seed(5)
        .build()
        .unwrap();
    let mut without = Chain::builder(5).draw().seed(5).build().unwrap();
    for _ in 0..50 {
        assert_eq!(with.sample(&row).unwrap(), without.sample(&row).unwrap());
    }
}

#[test]
fn dry_worked_example() {
    // History "a b c a b" (0 1 2 0 1), allowed length 2: "c" (2) would make the repeat
    // "a b c" of length 3; the repeat so far has length 2, so the penalty is
    // multiplier * base^0.
    let mut dry = Dry::new(0.8, 1.75, 2).unwrap();
    let mut c = cands(&[0.0f32; 4]);
    dry.apply(&mut c, &ctx(&[0, 1, 2, 0, 1], 0)).unwrap();
    assert_eq!(c.logits(), &[0.0, 0.0, -0.8, 0.0]);
    // "a b c d a b c": d (3) continues a length-3 repeat: 0.8 * 1.75.
    let mut c = cands(&[0.0f32; 4]);
    dry.apply(&mut c, &ctx(&[0, 1, 2, 3, 0, 1, 2], 0)).unwrap();
    assert_eq!(c.logits()[3], -((f64::from(0.8f32) * 1.75) as f32));
    assert_eq!(&c.logits()[..3], &[0.0; 3]);
}

#[test]
fn dry_breakers_stop_repeats() {
    // A single-token breaker (3) after the repeat's start cuts it, and is never penalised.
    let mut dry = Dry::new(1.0, 2.0, 1)
        .unwrap()
        .sequence_breakers([[3u32]])
        .unwrap();
    let mut c = cands(&[0.0f32; 4]);
    // "0 3 0 3": the nearest breaker is the last token, so limit = 0 < 1: no penalty.
    dry.apply(&mut c, &ctx(&[0, 3, 0, 3], 0)).unwrap();
    assert_eq!(c.logits(), &[0.0; 4]);
    // "3 0 1 0": token 1 would continue the repeat "0" (length 1); limit 3.
    let mut c = cands(&[0.0f32; 4]);
    dry.apply(&mut c, &ctx(&[3, 0, 1, 0], 0)).unwrap();
    assert_eq!(c.logits(), &[0.0, -1.0, 0.0, 0.0]);
}

#[test]
fn dry_huge_repeat_does_not_overflow() {
    let hist = vec![7u32; 5000];
    let mut dry = Dry::new(1.0, 1.75, 2).unwrap();
    let mut c = cands(&[0.0f32; 8]);
    dry.apply(&mut c, &ctx(&hist, 0)).unwrap();
    let l = c.logits()[7];
    assert!(l.is_finite() && l < -1e30, "{l}");
}

#[test]
fn mirostat_state_updates_and_resets() {
    let row = [3.0f32, 2.0, 1.0, 0.0, -1.0, -2.0];
    let mut chain = Chain::builder(6)
        .stage(Mirostat::new(6, 3.0, 0.5, 100).unwrap())
        .draw()
        .seed(4)
        .build()
        .unwrap();
    let first: Vec<TokenId> = (0..20).map(|_| chain.sample(&row).unwrap().token).collect();
    chain.reset();
    let again: Vec<TokenId> = (0..20).map(|_| chain.sample(&row).unwrap().token).collect();
    assert_eq!(
        first, again,
        "reset restores mu and the history, so the draws repeat"
    );
}

#[test]
fn mirostat_v1_observe_moves_mu() {
    let mut s = Mirostat::new(10, 5.0, 0.1, 100).unwrap();
    assert_eq!(s.mu(), 10.0);
    // Surprise 1 bit (p = 0.5): mu -= 0.1 * (1 - 5).
    s.observe(0, 0.5f32.ln());
    assert!((s.mu() - 10.4).abs() < 1e-6);
    s.reset();
    assert_eq!(s.mu(), 10.0);
}

#[test]
fn dynamic_temperature_zero_is_greedy() {
    // t = delta = 0: T = 0, only the first maximum survives.
    let mut s = DynamicTemperature::new(0.0, 0.0, 1.0).unwrap();
    assert_eq!(
        kept(&mut s, &[1.0, 3.0, 3.0, 2.0], 1.0),
        BTreeSet::from([1])
    );
    // A uniform row has normalised entropy 1: T = t + delta.
    let mut s = DynamicTemperature::new(1.0, 0.5, 2.0).unwrap();
    let mut c = cands(&[0.0f32; 8]);
    s.apply(&mut c, &ctx(&[], 0)).unwrap();
    assert!((c.temperature() - 1.5).abs() < 1e-12);
}

// ---------------------------------------------------------------------------------------
// Edge cases common to every stage: empty, one candidate, all -inf.

fn every_stage() -> Vec<Box<dyn Stage>> {
    vec![
        Box::new(TypicalP::new(0.5).unwrap()),
        Box::new(EpsilonCutoff::new(0.1).unwrap()),
        Box::new(EtaCutoff::new(0.1).unwrap()),
        Box::new(TopNSigma::new(1.0).unwrap()),
        Box::new(Xtc::new(1.0, 0.1).unwrap()),
        Box::new(Dry::new(1.0, 1.75, 2).unwrap()),
        Box::new(Mirostat::new(4, 5.0, 0.1, 100).unwrap()),
        Box::new(MirostatV2::new(5.0, 0.1).unwrap()),
        Box::new(DynamicTemperature::new(0.8, 0.5, 1.0).unwrap()),
        Box::new(NoRepeatNGram::new(2).unwrap()),
        Box::new(BadWords::new([[1u32, 2]]).unwrap()),
        Box::new(MinNewTokens::new(0, [0]).unwrap()),
    ]
}

#[test]
fn empty_and_banned_rows_never_panic() {
    for mut s in every_stage() {
        let mut c = cands(&[]);
        // An empty vocabulary: nothing, or a typed error for a stage naming token ids.
        match s.apply(&mut c, &ctx(&[], 0)) {
            Ok(()) => assert!(c.is_empty(), "{}", s.name()),
            Err(e) => assert!(
                matches!(e, Error::TokenOutOfRange { vocab_size: 0, .. }),
                "{e}"
            ),
        }
        let mut c = cands(&[f32::NEG_INFINITY; 3]);
        s.apply(&mut c, &ctx(&[1, 2, 1], 0)).unwrap();
        assert!(finite_ids(&c).is_empty(), "{}", s.name());
    }
}

#[test]
fn one_candidate_survives_every_stage() {
    for mut s in every_stage() {
        let mut c = cands(&[f32::NEG_INFINITY, 0.5, f32::NEG_INFINITY]);
        s.apply(&mut c, &ctx(&[0, 0, 2], 0)).unwrap();
        assert_eq!(finite_ids(&c), BTreeSet::from([1]), "{}", s.name());
    }
}

#[test]
fn all_banned_chain_reports_no_candidates() {
    let mut chain = Chain::builder(3)
        .stage(AllowedTokens::new([1]).unwrap())
        .draw()
        .build()
        .unwrap();
    assert_eq!(
        chain.sample(&[0.0f32, f32::NEG_INFINITY, 0.0]),
        Err(Error::NoCandidates)
    );
}

#[test]
fn ties_are_kept_together() {
    let row = [2.0f32, 2.0, 2.0, 0.0];
    // Epsilon with min_keep 2: both cut rules keep all three tied tokens.
    let mut s = EpsilonCutoff::new(0.4).unwrap().min_keep(2);
    assert_eq!(kept(&mut s, &row, 1.0), BTreeSet::from([0, 1, 2]));
    // XTC: three tied above-threshold tokens: nothing strictly more likely than the least.
    let mut s = Xtc::new(1.0, 0.1).unwrap();
    assert_eq!(kept(&mut s, &row, 1.0).len(), 4);
    // Mirostat v2 fallback keeps the lowest id among tied maxima.
    let mut s = MirostatV2::new(0.0, 0.1).unwrap();
    assert_eq!(kept(&mut s, &row, 1.0), BTreeSet::from([0]));
}

#[test]
fn parameter_errors() {
    assert!(is_invalid(TypicalP::new(0.0), "typical_p"));
    assert!(is_invalid(TypicalP::new(1.5), "typical_p"));
    assert!(is_invalid(TypicalP::new(f32::NAN), "typical_p"));
    assert!(TypicalP::new(1.0).is_ok());
    assert!(is_invalid(EpsilonCutoff::new(0.0), "epsilon_cutoff"));
    assert!(is_invalid(EpsilonCutoff::new(1.0), "epsilon_cutoff"));
    assert!(is_invalid(EtaCutoff::new(-0.1), "eta_cutoff"));
    assert!(is_invalid(EtaCutoff::new(f32::NAN), "eta_cutoff"));
    assert!(is_invalid(TopNSigma::new(0.0), "top_n_sigma"));
    assert!(is_invalid(TopNSigma::new(f32::INFINITY), "top_n_sigma"));
    assert!(is_invalid(Xtc::new(1.1, 0.1), "xtc_probability"));
    assert!(is_invalid(Xtc::new(0.5, -0.1), "xtc_threshold"));
    assert!(is_invalid(Xtc::new(0.5, 0.51), "xtc_threshold"));
    assert!(is_invalid(Dry::new(-1.0, 1.75, 2), "dry_multiplier"));
    assert!(is_invalid(Dry::new(f32::NAN, 1.75, 2), "dry_multiplier"));
    assert!(is_invalid(Dry::new(1.0, 0.9, 2), "dry_base"));
    assert!(is_invalid(Dry::new(1.0, f32::INFINITY, 2), "dry_base"));
    assert!(is_invalid(
        Dry::new(1.0, 1.75, 2)
            .unwrap()
            .sequence_breakers([vec![1u32], vec![]]),
        "dry_sequence_breakers"
    ));
    assert!(is_invalid(
        Mirostat::new(10, -1.0, 0.1, 100),
        "mirostat_tau"
    ));
    assert!(is_invalid(
        Mirostat::new(10, 5.0, f32::NAN, 100),
        "mirostat_eta"
    ));
    assert!(is_invalid(Mirostat::new(10, 5.0, 0.1, 1), "mirostat_m"));
    assert_eq!(
        Mirostat::new(0, 5.0, 0.1, 100).unwrap_err(),
        Error::EmptyVocabulary
    );
    assert!(is_invalid(
        MirostatV2::new(f32::INFINITY, 0.1),
        "mirostat_tau"
    ));
    assert!(is_invalid(
        DynamicTemperature::new(0.8, -0.5, 1.0),
        "dynatemp_range"
    ));
    assert!(is_invalid(
        DynamicTemperature::new(0.8, 0.5, f32::NAN),
        "dynatemp_exponent"
    ));
    assert!(is_invalid(
        DynamicTemperature::new(-0.8, 0.5, 1.0),
        "temperature"
    ));
    assert!(is_invalid(NoRepeatNGram::new(0), "no_repeat_ngram_size"));
    assert!(is_invalid(BadWords::new([vec![1u32], vec![]]), "bad_words"));
    assert!(is_invalid(AllowedTokens::new([]), "allowed_token_ids"));
    assert!(is_invalid(MinNewTokens::new(3, []), "eos_token_id"));
}

#[test]
fn out_of_vocabulary_ids_are_typed_errors() {
    let mut p = [0.0f32; 4];
    let h = History::new(&[], 0);
    assert_eq!(
        BadWords::new([[9u32]]).unwrap().process(&mut p, &h),
        Err(Error::TokenOutOfRange {
            id: 9,
            vocab_size: 4
        })
    );
    assert_eq!(
        MinNewTokens::new(1, [4]).unwrap().process(&mut p, &h),
        Err(Error::TokenOutOfRange {
            id: 4,
            vocab_size: 4
        })
    );
    assert_eq!(
        AllowedTokens::new([1, 7]).unwrap().process(&mut p, &h),
        Err(Error::TokenOutOfRange {
            id: 7,
            vocab_size: 4
        })
    );
}

// ---------------------------------------------------------------------------------------
// A custom processor at a named stage.

/// A user's processor: halves the logit of every token seen in the last 4 tokens.
#[derive(Clone, Debug)]
struct Dampen;

impl Dampen {
    fn run(logits: &mut [f32], history: &History<'_>) {
        let t = history.tokens();
        for &id in &t[t.len().saturating_sub(4)..] {
            if let Some(l) = logits.get_mut(id as usize) {
                *l *= 0.5;
            }
        }
    }
}

/// As a `LogitsProcessor`, it runs in the `Sampler`'s adjustment stage.
impl LogitsProcessor for Dampen {
    fn process(&mut self, logits: &mut [f32], history: &History<'_>) -> Result<(), Error> {
        Dampen::run(logits, history);
        Ok(())
    }
}

/// As a `Stage`, it goes wherever the user puts it in a `Chain`.
impl Stage for Dampen {
    fn name(&self) -> &'static str {
        "dampen"
    }
    fn apply(&mut self, c: &mut Candidates, ctx: &StageContext<'_>) -> Result<(), Error> {
        if c.is_dense() {
            Dampen::run(c.logits_mut(), &ctx.history);
        }
        Ok(())
    }
}

#[test]
fn custom_processor_at_a_named_stage() {
    let row = [4.0f32, 3.9, 1.0, 0.0];
    // In a Chain: after DRY, before the cuts and the temperature.
    let mut chain = Chain::builder(4)
        .stage(Dry::new(0.0, 1.75, 2).unwrap())
        .stage(Dampen)
        .stage(TopK::new(2).unwrap())
        .stage(Temperature::new(0.7).unwrap())
        .greedy()
        .build()
        .unwrap();
    assert_eq!(
        chain.stage_names().collect::<Vec<_>>(),
        ["dry", "dampen", "top_k", "temperature", "greedy"]
    );
    chain.push_prompt(&[0]).unwrap();
    // Token 0 was seen: 4.0 -> 2.0, so 1 (3.9) wins.
    assert_eq!(chain.sample(&row).unwrap().token, 1);
    // In a Sampler: the adjustment stage, after bias/penalties/mask, before temperature.
    let mut sampler = Sampler::new(SamplingParams::greedy(), 4).unwrap();
    sampler.add_processor(Box::new(Dampen));
    sampler.push_prompt(&[0]).unwrap();
    assert_eq!(sampler.sample(&row).unwrap().token, 1);
    // Built-in processors combine with it in the order added.
    let mut sampler = Sampler::new(SamplingParams::greedy(), 4).unwrap();
    sampler.add_processor(Box::new(AllowedTokens::new([0, 2, 3]).unwrap()));
    sampler.add_processor(Box::new(Dampen));
    sampler.push_prompt(&[0]).unwrap();
    assert_eq!(sampler.sample(&row).unwrap().token, 0); // 2.0 > 1.0
}
