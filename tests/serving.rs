//! Serving: `n > 1` samples of one prompt (`fork`), a new request on a warm sampler
//! (`set_params`, `reset` + `set_seed`), per-step bans without a `TokenMask`
//! (`sample_banned`), and batches whose rows each bring their own mask, bans, chain,
//! history and grammar, with results equal to sampling each row alone.

use std::sync::Arc;

use logits::grammar::{Choice, GrammarMask, Status, TokenKind, Vocab};
use logits::stop::{StopChecker, StopConditions};
use logits::{
    BatchSampler, Chain, DrawRng, Error, History, LogitsProcessor, MinP, MirostatV2, Penalties,
    RowInput, Sample, Sampler, SamplingParams, Temperature, TokenId, TokenMask, TopK, TopP,
};
use proptest::prelude::*;

const VOCAB: usize = 64;

/// A deterministic row of `n` logits for `(seed, step)`: a spread wide enough that a
/// draw at temperature 1 has many likely tokens.
fn row(seed: u64, step: u64, n: usize) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let w = DrawRng::fork_seed(seed ^ step.rotate_left(17), i + 1);
            (w >> 40) as f32 / (1u64 << 24) as f32 * 4.0
        })
        .collect()
}

fn params(seed: u64) -> SamplingParams {
    SamplingParams::builder()
        .temperature(1.0)
        .top_p(0.95)
        .seed(seed)
        .build()
        .unwrap()
}

/// The tokens of `steps` draws of `s` on the rows of `(row_seed, step)`.
fn run(s: &mut Sampler, row_seed: u64, steps: u64) -> Vec<TokenId> {
    (0..steps)
        .map(|t| s.sample(&row(row_seed, t, VOCAB)).unwrap().token)
        .collect()
}

fn run_chain(c: &mut Chain, row_seed: u64, steps: u64) -> Vec<TokenId> {
    (0..steps)
        .map(|t| c.sample(&row(row_seed, t, VOCAB)).unwrap().token)
        .collect()
}

fn base_sampler() -> Sampler {
    let mut s = Sampler::new(params(42), VOCAB).unwrap();
    s.push_prompt(&[3, 5, 7]).unwrap();
    s
}

#[test]
fn sample_zero_does_not_depend_on_n() {
    let alone = run(&mut base_sampler(), 1, 40);
    let mut per_n = Vec::new();
    for n in [1u64, 3, 8] {
        let base = base_sampler();
        let mut forks: Vec<Sampler> = (0..n).map(|i| base.fork(i)).collect();
        let tokens: Vec<Vec<TokenId>> = forks.iter_mut().map(|f| run(f, 1, 40)).collect();
        assert_eq!(tokens[0], alone, "sample 0 of {n}");
        per_n.push(tokens);
    }
    // The forks of every `n` are the same samples: fork `i` depends on `(seed, i)` only.
    assert_eq!(per_n[1][..], per_n[2][..3]);
    // Forks draw differently from each other.
    let eight = &per_n[2];
    for i in 0..eight.len() {
        for j in i + 1..eight.len() {
            assert_ne!(eight[i], eight[j], "forks {i} and {j}");
        }
    }
}

#[test]
fn forks_are_reproducible_and_share_the_prompt() {
    let base = base_sampler();
    for i in [0u64, 1, 5, u64::MAX] {
        let (mut a, mut b) = (base.fork(i), base.fork(i));
        assert_eq!(a.params().seed(), DrawRng::fork_seed(42, i));
        assert_eq!(a.history().prompt(), &[3, 5, 7]);
        assert_eq!(run(&mut a, 2, 30), run(&mut b, 2, 30));
    }
    // A fork has its own history: drawing on it leaves the original as it was.
    let mut f = base.fork(2);
    run(&mut f, 2, 5);
    assert_eq!(f.history().generated().len(), 5);
    assert!(base.history().generated().is_empty());
}

/// The mirostat chain the fork tests use.
fn mirostat_chain(seed: u64) -> Chain {
    Chain::builder(VOCAB)
        .stage(Penalties::new(1.1, 0.0, 0.0).unwrap())
        .stage(MirostatV2::new(3.0, 0.2).unwrap())
        .draw()
        .seed(seed)
        .build()
        .unwrap()
}

#[test]
fn forked_chains_keep_their_own_stage_state() {
    let mut base = mirostat_chain(8);
    base.push_prompt(&[1, 2]).unwrap();
    run_chain(&mut base, 3, 6);
    let mut twin = mirostat_chain(8);
    twin.push_prompt(&[1, 2]).unwrap();
    run_chain(&mut twin, 3, 6);

    // Fork 0 carries the warmed state: it draws what the original goes on to draw.
    let mut zero = base.fork(0);
    let mut others: Vec<Chain> = (1..4).map(|i| base.fork(i)).collect();
    // Draw on the other forks first, on different rows: if they shared mirostat's `mu`
    // (or the history, or scratch) with the original, its draws would move.
    let other_tokens: Vec<Vec<TokenId>> = others.iter_mut().map(|c| run_chain(c, 4, 25)).collect();
    let from_base = run_chain(&mut base, 3, 25);
    assert_eq!(from_base, run_chain(&mut twin, 3, 25));
    assert_eq!(from_base, run_chain(&mut zero, 3, 25));
    assert_ne!(other_tokens[0], other_tokens[1]);
    assert_eq!(base.seed(), 8);
    assert_eq!(others[2].seed(), DrawRng::fork_seed(8, 3));
}

/// A user processor with state, to check that clones own theirs.
#[derive(Clone, Debug, Default)]
struct Counter {
    calls: u32,
}

impl LogitsProcessor for Counter {
    fn process(&mut self, logits: &mut [f32], _history: &History<'_>) -> Result<(), Error> {
        self.calls += 1;
        // Favour a token that moves with the number of calls.
        logits[(self.calls as usize * 7) % logits.len()] += 3.0;
        Ok(())
    }
}

#[test]
fn cloned_processors_have_their_own_state() {
    let mut base = base_sampler();
    base.add_processor(Box::new(Counter::default()));
    run(&mut base, 5, 4);
    let mut clone = base.clone();
    let mut fork = base.fork(0);
    let expected = run(&mut base, 5, 20);
    assert_eq!(run(&mut clone, 5, 20), expected);
    assert_eq!(run(&mut fork, 5, 20), expected);
}

fn request_params() -> SamplingParams {
    SamplingParams::builder()
        .temperature(0.8)
        .top_k(20)
        .min_p(0.02)
        .repetition_penalty(1.3)
        .presence_penalty(0.4)
        .penalty_window(16)
        .logit_bias(9, 2.5)
        .logit_bias(10, f32::NEG_INFINITY)
        .seed(77)
        .build()
        .unwrap()
}

#[test]
fn set_params_on_a_warm_sampler_equals_a_fresh_one() {
    let mut warm = Sampler::new(SamplingParams::greedy(), VOCAB).unwrap();
    warm.push_prompt(&[1, 1, 2]).unwrap();
    run(&mut warm, 6, 12);
    warm.set_params(request_params()).unwrap();
    assert!(warm.history().tokens().is_empty());
    assert_eq!(warm.params(), &request_params());
    let mut fresh = Sampler::new(request_params(), VOCAB).unwrap();
    for s in [&mut warm, &mut fresh] {
        s.push_prompt(&[4, 4, 9]).unwrap();
    }
    let (w, f) = (run(&mut warm, 7, 40), run(&mut fresh, 7, 40));
    assert_eq!(w, f);
    assert!(!w.contains(&10));
    // And back to greedy: the end follows the parameters.
    warm.set_params(SamplingParams::greedy()).unwrap();
    let r = row(8, 0, VOCAB);
    let argmax = (0..VOCAB).max_by(|&a, &b| r[a].total_cmp(&r[b]).then(b.cmp(&a)));
    assert_eq!(warm.sample(&r).unwrap().token as usize, argmax.unwrap());
}

#[test]
fn set_params_keeps_processors_and_matches_a_fresh_sampler_with_them() {
    let mut warm = base_sampler();
    warm.add_processor(Box::new(Counter::default()));
    run(&mut warm, 5, 3);
    warm.set_params(params(5)).unwrap();
    let mut fresh = Sampler::new(params(5), VOCAB).unwrap();
    // `Counter` has no `reset`: its call count carries over, so the fresh one gets
    // the same count.
    fresh.add_processor(Box::new(Counter { calls: 3 }));
    assert_eq!(run(&mut warm, 5, 20), run(&mut fresh, 5, 20));
}

#[test]
fn bad_params_are_refused_and_change_nothing() {
    let mut s = base_sampler();
    run(&mut s, 9, 5);
    let before = s.clone();
    let bad = SamplingParams::builder()
        .logit_bias(VOCAB as TokenId, 1.0)
        .seed(1)
        .build()
        .unwrap();
    assert_eq!(
        s.set_params(bad),
        Err(Error::TokenOutOfRange {
            id: VOCAB as TokenId,
            vocab_size: VOCAB
        })
    );
    assert_eq!(s.params(), before.params());
    assert_eq!(s.history().tokens(), before.history().tokens());
    let mut before = before;
    assert_eq!(run(&mut s, 10, 20), run(&mut before, 10, 20));
}

#[test]
fn reset_and_set_seed_give_a_fresh_chain() {
    let mut warm = mirostat_chain(1);
    warm.push_prompt(&[5]).unwrap();
    run_chain(&mut warm, 11, 10);
    warm.reset();
    warm.set_seed(99);
    let mut fresh = mirostat_chain(99);
    for c in [&mut warm, &mut fresh] {
        c.push_prompt(&[6, 7]).unwrap();
    }
    assert_eq!(run_chain(&mut warm, 12, 30), run_chain(&mut fresh, 12, 30));
}

/// `mask` (or all-allowed over `VOCAB`) with `banned` disallowed, built by hand.
fn mask_with(mask: Option<&TokenMask>, banned: &[TokenId]) -> TokenMask {
    let mut m = mask.cloned().unwrap_or_else(|| TokenMask::new_full(VOCAB));
    for &id in banned {
        m.disallow(id).unwrap();
    }
    m
}

fn any_params() -> impl Strategy<Value = SamplingParams> {
    (
        prop_oneof![1 => Just(0.0f32), 4 => 0.2f32..2.0],
        prop::option::of(1usize..30),
        0.5f32..=1.0,
        0.0f32..0.2,
        1.0f32..1.5,
        any::<u64>(),
    )
        .prop_map(|(t, k, p, min_p, rep, seed)| {
            let mut b = SamplingParams::builder()
                .temperature(t)
                .top_p(p)
                .min_p(min_p)
                .repetition_penalty(rep)
                .seed(seed);
            if let Some(k) = k {
                b = b.top_k(k);
            }
            b.build().unwrap()
        })
}

fn any_row() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-8.0f32..8.0, VOCAB)
}

fn any_mask() -> impl Strategy<Value = Option<TokenMask>> {
    prop::option::of(
        prop::collection::vec(any::<bool>(), VOCAB).prop_map(|bits| {
            let mut m = TokenMask::new_empty(VOCAB);
            for (i, &b) in bits.iter().enumerate() {
                if b {
                    m.allow(i as TokenId).unwrap();
                }
            }
            m
        }),
    )
}

fn any_bans() -> impl Strategy<Value = Vec<TokenId>> {
    prop::collection::vec(0..VOCAB as TokenId, 0..6)
}

fn same(a: &Result<Sample, Error>, b: &Result<Sample, Error>) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => x == y,
        (Err(x), Err(y)) => x == y,
        _ => false,
    }
}

/// A chain that mixes stages the engine lowers with one it runs through `apply`.
fn some_chain(seed: u64) -> Chain {
    Chain::builder(VOCAB)
        .stage(TopK::new(24).unwrap())
        .stage(TopP::new(0.9).unwrap())
        .stage(MinP::new(0.01).unwrap())
        .stage(MirostatV2::new(4.0, 0.1).unwrap())
        .stage(Temperature::new(0.9).unwrap())
        .draw()
        .seed(seed)
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn bans_equal_the_mask_path(
        p in any_params(),
        steps in prop::collection::vec((any_row(), any_mask(), any_bans()), 1..6),
    ) {
        let mut banned_s = Sampler::new(p.clone(), VOCAB).unwrap();
        let mut masked_s = Sampler::new(p.clone(), VOCAB).unwrap();
        let mut banned_c = some_chain(p.seed());
        let mut masked_c = some_chain(p.seed());
        for (r, mask, bans) in &steps {
            let m = mask_with(mask.as_ref(), bans);
            let a = banned_s.sample_banned(r, mask.as_ref(), bans);
            let b = masked_s.sample_masked(r, &m);
            prop_assert!(same(&a, &b), "{a:?} vs {b:?}");
            let a = banned_c.sample_banned(r, mask.as_ref(), bans);
            let b = masked_c.sample_masked(r, &m);
            prop_assert!(same(&a, &b), "{a:?} vs {b:?}");
            prop_assert_eq!(banned_s.history().tokens(), masked_s.history().tokens());
            prop_assert_eq!(banned_c.history().tokens(), masked_c.history().tokens());
        }
    }
}

#[test]
fn no_bans_is_the_plain_path() {
    let r = row(3, 0, VOCAB);
    let (mut a, mut b) = (base_sampler(), base_sampler());
    assert_eq!(a.sample_banned(&r, None, &[]), b.sample(&r));
    let mask = mask_with(None, &[1, 2, 3]);
    assert_eq!(
        a.sample_banned(&r, Some(&mask), &[]),
        b.sample_masked(&r, &mask)
    );
}

#[test]
fn out_of_range_bans_are_refused() {
    let mut s = base_sampler();
    let mut c = some_chain(1);
    let r = row(3, 0, VOCAB);
    let err = Err(Error::TokenOutOfRange {
        id: VOCAB as TokenId,
        vocab_size: VOCAB,
    });
    assert_eq!(s.sample_banned(&r, None, &[1, VOCAB as TokenId]), err);
    assert_eq!(c.sample_banned(&r, None, &[VOCAB as TokenId]), err);
    assert!(s.history().generated().is_empty());
    assert!(c.history().generated().is_empty());
    // Every token banned: nothing to draw, and nothing moves.
    let all: Vec<TokenId> = (0..VOCAB as TokenId).collect();
    assert_eq!(s.sample_banned(&r, None, &all), Err(Error::NoCandidates));
    assert!(s.history().generated().is_empty());
    // A mask narrower than the vocabulary is refused as on the mask path.
    let narrow = TokenMask::new_full(VOCAB - 1);
    assert_eq!(
        s.sample_banned(&r, Some(&narrow), &[0]),
        s.sample_masked(&r, &narrow)
    );
}

#[test]
fn stop_checker_bans_end_of_sequence_before_min_tokens() {
    let eos = 5;
    let stop = StopConditions::builder()
        .stop_tokens([eos])
        .min_tokens(3)
        .build()
        .unwrap();
    let mut checker = StopChecker::new(&stop);
    let mut s = Sampler::new(SamplingParams::greedy(), VOCAB).unwrap();
    let mut r = row(1, 0, VOCAB);
    r[eos as usize] = 100.0;
    let mut tokens = Vec::new();
    loop {
        let out = s.sample_banned(&r, None, checker.banned_tokens()).unwrap();
        tokens.push(out.token);
        if checker.push(out.token, b"x").finish.is_some() {
            break;
        }
    }
    assert_eq!(tokens.len(), 4);
    assert!(tokens[..3].iter().all(|&t| t != eos));
    assert_eq!(tokens[3], eos);
}

/// The rows of a mixed batch: samplers of different parameters and chains of different
/// stages, each with its own prompt.
fn chain_rows(n: usize) -> Vec<Chain> {
    (0..n)
        .map(|i| {
            let b = Chain::builder(VOCAB).seed(100 + i as u64);
            let mut c = match i % 3 {
                0 => b.stage(TopK::new(8).unwrap()).draw(),
                1 => b
                    .stage(Penalties::new(1.4, 0.1, 0.2).unwrap())
                    .stage(MirostatV2::new(3.0, 0.3).unwrap())
                    .draw(),
                _ => b
                    .stage(TopP::new(0.8).unwrap())
                    .stage(Temperature::new(1.5).unwrap())
                    .draw(),
            }
            .build()
            .unwrap();
            c.push_prompt(&[i as TokenId, 1]).unwrap();
            c
        })
        .collect()
}

/// The per-row masks and bans of step `t`.
fn step_inputs(n: usize, t: u64) -> (Vec<Option<TokenMask>>, Vec<Vec<TokenId>>) {
    let masks = (0..n)
        .map(|i| {
            i.is_multiple_of(2).then(|| {
                let mut m = TokenMask::new_full(VOCAB);
                for id in
                    (0..VOCAB as TokenId).filter(|id| (id + t as u32 + i as u32).is_multiple_of(3))
                {
                    m.disallow(id).unwrap();
                }
                m
            })
        })
        .collect();
    let bans = (0..n)
        .map(|i| {
            (0..(i % 4) as TokenId)
                .map(|k| (k * 13 + t as TokenId) % VOCAB as TokenId)
                .collect()
        })
        .collect();
    (masks, bans)
}

/// Runs `steps` batch steps over the rows in `order` (a permutation of `0..n`), row
/// `order[j]` at position `j`; returns each original row's tokens, by original index,
/// and checks every history against them.
fn run_batch(n: usize, order: &[usize], steps: u64) -> Vec<Vec<TokenId>> {
    let rows = chain_rows(n);
    let mut placed: Vec<Option<Chain>> = rows.into_iter().map(Some).collect();
    let samplers: Vec<Chain> = order.iter().map(|&i| placed[i].take().unwrap()).collect();
    let mut batch = BatchSampler::new(samplers);
    let mut tokens = vec![Vec::new(); n];
    for t in 0..steps {
        let (masks, bans) = step_inputs(n, t);
        let logits: Vec<f32> = order
            .iter()
            .flat_map(|&i| row(i as u64, t, VOCAB))
            .collect();
        let inputs: Vec<RowInput<'_>> = order
            .iter()
            .map(|&i| RowInput {
                mask: masks[i].as_ref(),
                banned: &bans[i],
            })
            .collect();
        let out = batch.sample_rows(&logits, VOCAB, &inputs).unwrap();
        for (j, &i) in order.iter().enumerate() {
            tokens[i].push(out[j].as_ref().unwrap().token);
        }
    }
    for (j, &i) in order.iter().enumerate() {
        assert_eq!(batch.samplers()[j].history().generated(), &tokens[i][..]);
        assert_eq!(batch.samplers()[j].history().prompt(), &[i as TokenId, 1]);
    }
    tokens
}

/// Each row sampled alone, with its own inputs.
fn run_alone(n: usize, steps: u64) -> Vec<Vec<TokenId>> {
    let mut rows = chain_rows(n);
    let mut tokens = vec![Vec::new(); n];
    for t in 0..steps {
        let (masks, bans) = step_inputs(n, t);
        for (i, c) in rows.iter_mut().enumerate() {
            let out = c.sample_banned(&row(i as u64, t, VOCAB), masks[i].as_ref(), &bans[i]);
            tokens[i].push(out.unwrap().token);
        }
    }
    tokens
}

#[test]
fn batch_rows_equal_each_row_alone_in_any_order() {
    let n = 7;
    let alone = run_alone(n, 12);
    let forward: Vec<usize> = (0..n).collect();
    assert_eq!(run_batch(n, &forward, 12), alone);
    let permuted = [4, 0, 6, 2, 5, 1, 3];
    assert_eq!(run_batch(n, &permuted, 12), alone);
    // The rows are not all alike: different chains draw different tokens.
    assert!(alone.iter().any(|t| t != &alone[0]));
}

#[test]
fn batch_rows_keep_their_own_history() {
    let rows: Vec<Sampler> = (0..3)
        .map(|i| Sampler::new(params(i), VOCAB).unwrap())
        .collect();
    let mut batch = BatchSampler::new(rows);
    let logits: Vec<f32> = (0..3).flat_map(|i| row(i, 0, VOCAB)).collect();
    batch.sample(&logits, VOCAB).unwrap();
    // A token accepted on row 1 (a grammar's forced token) moves row 1 alone.
    batch.samplers_mut()[1].accept(9).unwrap();
    let lens: Vec<usize> = batch
        .samplers()
        .iter()
        .map(|s| s.history().generated().len())
        .collect();
    assert_eq!(lens, [1, 2, 1]);
    let mut alone: Vec<Sampler> = (0..3)
        .map(|i| Sampler::new(params(i), VOCAB).unwrap())
        .collect();
    for (i, s) in alone.iter_mut().enumerate() {
        s.sample(&row(i as u64, 0, VOCAB)).unwrap();
    }
    alone[1].accept(9).unwrap();
    let logits: Vec<f32> = (0..3).flat_map(|i| row(i, 1, VOCAB)).collect();
    let out: Vec<TokenId> = batch
        .sample(&logits, VOCAB)
        .unwrap()
        .iter()
        .map(|r| r.as_ref().unwrap().token)
        .collect();
    let expected: Vec<TokenId> = alone
        .iter_mut()
        .enumerate()
        .map(|(i, s)| s.sample(&row(i as u64, 1, VOCAB)).unwrap().token)
        .collect();
    assert_eq!(out, expected);
}

#[test]
fn batch_inputs_must_match_the_rows() {
    let rows: Vec<Sampler> = (0..2)
        .map(|i| Sampler::new(params(i), VOCAB).unwrap())
        .collect();
    let mut batch = BatchSampler::new(rows);
    let logits = vec![0.0f32; 2 * VOCAB];
    assert_eq!(
        batch
            .sample_rows(&logits, VOCAB, &[RowInput::default()])
            .unwrap_err(),
        Error::LengthMismatch {
            expected: 2,
            actual: 1
        }
    );
    // A row's own bad input is that row's result alone.
    let bad = [VOCAB as TokenId];
    let inputs = [
        RowInput {
            banned: &bad,
            ..RowInput::default()
        },
        RowInput::default(),
    ];
    let out = batch.sample_rows(&logits, VOCAB, &inputs).unwrap();
    assert!(matches!(out[0], Err(Error::TokenOutOfRange { .. })));
    assert!(out[1].is_ok());
    assert!(batch.samplers()[0].history().generated().is_empty());
}

/// A byte-level vocabulary of `VOCAB` slots: letters, a few words, end-of-sequence.
fn vocab() -> Arc<Vocab> {
    let mut bytes: Vec<Vec<u8>> = (b'a'..=b'z').map(|b| vec![b]).collect();
    for t in ["ye", "es", "no", "yes", "may", "be", "ay", "mayb"] {
        bytes.push(t.as_bytes().to_vec());
    }
    let mut kinds = vec![TokenKind::Text; bytes.len()];
    while bytes.len() < VOCAB - 1 {
        bytes.push(format!("#{}", bytes.len()).into_bytes());
        kinds.push(TokenKind::Text);
    }
    let eos = bytes.len() as TokenId;
    bytes.push(b"<eos>".to_vec());
    kinds.push(TokenKind::Special);
    Arc::new(Vocab::new(bytes, kinds, vec![eos]).unwrap())
}

fn grammar(v: &Arc<Vocab>, i: usize) -> GrammarMask {
    let words: &[&str] = match i % 3 {
        0 => &["yes", "no", "maybe"],
        1 => &["mayday", "bay"],
        _ => &["abc", "ab", "yes"],
    };
    GrammarMask::new(Box::new(Choice::new(v.clone(), words).unwrap()), v.clone())
}

type Trace = Vec<(TokenId, Option<Status>)>;

/// Grammar rows in `order` (rows `i % 4 == 3` without a grammar), sampled by
/// `sample_grammars` until every grammar has finished (or 12 steps); returns each
/// original row's trace.
fn run_grammar_batch(n: usize, order: &[usize]) -> Vec<Trace> {
    let v = vocab();
    let mut grammars: Vec<Option<GrammarMask>> = order
        .iter()
        .map(|&i| (i % 4 != 3).then(|| grammar(&v, i)))
        .collect();
    let samplers: Vec<Sampler> = order
        .iter()
        .map(|&i| Sampler::new(params(i as u64), VOCAB).unwrap())
        .collect();
    let mut batch = BatchSampler::new(samplers);
    let mut traces = vec![Vec::new(); n];
    for t in 0..12 {
        let logits: Vec<f32> = order
            .iter()
            .flat_map(|&i| row(i as u64, t, VOCAB))
            .collect();
        let mut refs: Vec<Option<&mut GrammarMask>> =
            grammars.iter_mut().map(Option::as_mut).collect();
        let out = batch.sample_grammars(&logits, VOCAB, &mut refs).unwrap();
        for (j, &i) in order.iter().enumerate() {
            let (s, status) = out[j].as_ref().unwrap();
            traces[i].push((s.token, *status));
        }
        // Finished grammars leave the batch's grammar rows for plain ones.
        for g in &mut grammars {
            if g.as_mut()
                .is_some_and(|g| g.status().unwrap() == Status::Finished)
            {
                *g = None;
            }
        }
    }
    traces
}

fn run_grammar_alone(n: usize) -> Vec<Trace> {
    let v = vocab();
    (0..n)
        .map(|i| {
            let mut g = (i % 4 != 3).then(|| grammar(&v, i));
            let mut s = Sampler::new(params(i as u64), VOCAB).unwrap();
            (0..12)
                .map(|t| {
                    let r = row(i as u64, t, VOCAB);
                    let step = match g.as_mut() {
                        Some(gm) => {
                            let (out, status) = gm.sample(&mut s, &r).unwrap();
                            (out.token, Some(status))
                        }
                        None => (s.sample(&r).unwrap().token, None),
                    };
                    if step.1 == Some(Status::Finished) {
                        g = None;
                    }
                    step
                })
                .collect()
        })
        .collect()
}

#[test]
fn grammar_rows_equal_each_row_alone_in_any_order() {
    let n = 6;
    let alone = run_grammar_alone(n);
    assert!(alone[0].iter().any(|&(_, s)| s == Some(Status::Finished)));
    let forward: Vec<usize> = (0..n).collect();
    assert_eq!(run_grammar_batch(n, &forward), alone);
    assert_eq!(run_grammar_batch(n, &[5, 2, 0, 4, 1, 3]), alone);
}

#[cfg(feature = "rayon")]
#[test]
fn batch_results_do_not_depend_on_the_threads() {
    let n = 9;
    let alone = run_alone(n, 10);
    let grammar_alone = run_grammar_alone(n);
    let order: Vec<usize> = (0..n).rev().collect();
    for threads in [1, 2, 4] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let (rows, grammars) =
            pool.install(|| (run_batch(n, &order, 10), run_grammar_batch(n, &order)));
        assert_eq!(rows, alone, "{threads} threads");
        assert_eq!(grammars, grammar_alone, "{threads} threads");
    }
}

/// A cloned batch (best-of over a whole batch, or a warm spare) draws what the original
/// draws, step for step, and moving one leaves the other where it was.
#[test]
fn a_cloned_batch_draws_what_the_original_draws() {
    let mut a = BatchSampler::new(chain_rows(6));
    let mut steps = 0;
    for t in 0..3 {
        let block: Vec<f32> = (0..6).flat_map(|i| row(i, t, VOCAB)).collect();
        a.sample(&block, VOCAB).unwrap();
        steps += 1;
    }
    let mut b = a.clone();
    for t in steps..steps + 5 {
        let block: Vec<f32> = (0..6).flat_map(|i| row(i, t, VOCAB)).collect();
        let x = a.sample(&block, VOCAB).unwrap().to_vec();
        let y = b.sample(&block, VOCAB).unwrap().to_vec();
        assert_eq!(x, y, "step {t}");
    }
    let before: Vec<Vec<TokenId>> = (b.samplers().iter())
        .map(|s| s.history().tokens().to_vec())
        .collect();
    let block: Vec<f32> = (0..6).flat_map(|i| row(i, 99, VOCAB)).collect();
    a.sample(&block, VOCAB).unwrap();
    let after: Vec<Vec<TokenId>> = (b.samplers().iter())
        .map(|s| s.history().tokens().to_vec())
        .collect();
    assert_eq!(before, after);
}
