//! Every size a caller passes is checked against its documented limit, and a size past
//! it (or one whose buffers cannot be allocated) is a typed error: nothing here panics or
//! aborts.

use logits::grammar::{GrammarError, Vocab};
use logits::{
    BatchSampler, Chain, Dry, Error, Mirostat, Sampler, SamplingParams, TopK, MAX_VOCAB_SIZE,
};

/// Vocabulary sizes past [`MAX_VOCAB_SIZE`].
const HUGE: [usize; 4] = [usize::MAX, 1 << 62, 1 << 33, MAX_VOCAB_SIZE + 1];

fn names_vocab_size(r: Result<impl std::fmt::Debug, Error>) {
    match r {
        Err(Error::InvalidParameter {
            name: "vocab_size", ..
        }) => {}
        other => panic!("expected InvalidParameter naming vocab_size, got {other:?}"),
    }
}

#[test]
fn the_vocabulary_limit_is_u32_max() {
    assert_eq!(MAX_VOCAB_SIZE, u32::MAX as usize);
}

#[test]
fn a_chain_past_the_vocabulary_limit_is_refused() {
    for n in HUGE {
        names_vocab_size(Chain::builder(n).draw().build());
        names_vocab_size(Chain::builder(n).greedy().build());
        names_vocab_size(
            Chain::builder(n)
                .stage(Dry::new(0.8, 1.75, 2).unwrap())
                .stage(TopK::new(40).unwrap())
                .draw()
                .build(),
        );
        // Checked before the chain's shape: the size is the first thing wrong.
        names_vocab_size(Chain::builder(n).build());
    }
}

#[test]
fn a_sampler_past_the_vocabulary_limit_is_refused() {
    for n in HUGE {
        names_vocab_size(Sampler::new(SamplingParams::default(), n));
        names_vocab_size(Sampler::new(SamplingParams::greedy(), n));
    }
}

#[test]
fn mirostat_past_the_vocabulary_limit_is_refused() {
    for n in HUGE {
        names_vocab_size(Mirostat::new(n, 5.0, 0.1, 100));
    }
    assert_eq!(
        Mirostat::new(0, 5.0, 0.1, 100).unwrap_err(),
        Error::EmptyVocabulary
    );
}

fn tokenizer_json() -> String {
    r#"{"added_tokens": [{"id": 2, "content": "<eos>", "special": true}],
        "pre_tokenizer": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}}"#
        .to_string()
}

#[test]
fn a_tokenizer_row_past_the_vocabulary_limit_is_refused() {
    let json = tokenizer_json();
    assert_eq!(Vocab::from_tokenizer_json(&json, 8, &[2]).unwrap().len(), 8);
    for n in HUGE {
        match Vocab::from_tokenizer_json(&json, n, &[2]) {
            Err(GrammarError::InvalidVocab(msg)) => assert!(msg.contains("MAX_VOCAB_SIZE")),
            other => panic!("{n}: {other:?}"),
        }
    }
}

#[test]
fn an_empty_batch_samples_nothing() {
    let mut batch = BatchSampler::<Sampler>::new(vec![]);
    assert!(batch.sample::<f32>(&[], 0).unwrap().is_empty());
    assert!(batch.sample::<f32>(&[], 7).unwrap().is_empty());
    let mut chains = BatchSampler::<Chain>::new(vec![]);
    assert!(chains.sample::<f32>(&[], 0).unwrap().is_empty());
    // A batch with rows still refuses a row length of 0.
    let one = Sampler::new(SamplingParams::default(), 3).unwrap();
    let mut batch = BatchSampler::new(vec![one]);
    assert!(matches!(
        batch.sample::<f32>(&[], 0),
        Err(Error::LengthMismatch { .. })
    ));
}

fn sampler() -> Sampler {
    let params = SamplingParams::builder()
        .repetition_penalty(1.1)
        .seed(3)
        .build()
        .unwrap();
    let mut s = Sampler::new(params, 4).unwrap();
    s.add_processor(Box::new(Dry::new(0.8, 1.75, 2).unwrap()));
    s.push_prompt(&[1, 2, 1]).unwrap();
    s
}

fn chain() -> Chain {
    let mut c = Chain::builder(4)
        .stage(Dry::new(0.8, 1.75, 2).unwrap())
        .stage(Mirostat::new(4, 5.0, 0.1, 100).unwrap())
        .draw()
        .seed(3)
        .build()
        .unwrap();
    c.push_prompt(&[1, 2, 1]).unwrap();
    c
}

const ROW: [f32; 4] = [1.0, 0.5, 2.0, 0.0];

#[test]
fn reserve_past_the_history_limit_is_refused() {
    let (mut s, mut c) = (sampler(), chain());
    let (mut s2, mut c2) = (sampler(), chain());
    for n in [
        usize::MAX,
        usize::MAX - 2,
        isize::MAX as usize,
        isize::MAX as usize / 4,
    ] {
        match s.reserve(n) {
            Err(Error::InvalidParameter {
                name: "additional", ..
            }) => {}
            other => panic!("sampler reserve({n}): {other:?}"),
        }
        match c.reserve(n) {
            Err(Error::InvalidParameter {
                name: "additional", ..
            }) => {}
            other => panic!("chain reserve({n}): {other:?}"),
        }
    }
    // Nothing changed: the same tokens as a sampler and a chain never asked.
    for _ in 0..5 {
        assert_eq!(s.sample(&ROW).unwrap(), s2.sample(&ROW).unwrap());
        assert_eq!(c.sample(&ROW).unwrap(), c2.sample(&ROW).unwrap());
    }
    assert_eq!(s.history(), s2.history());
    assert_eq!(c.history(), c2.history());
}

#[test]
fn reserve_beyond_memory_is_out_of_memory() {
    let (mut s, mut c) = (sampler(), chain());
    // Within the limit (the history's bytes fit `isize::MAX`), but no allocator has it.
    let n = isize::MAX as usize / 4 - 16;
    assert_eq!(
        s.reserve(n).unwrap_err(),
        Error::OutOfMemory {
            name: "additional",
            value: n
        }
    );
    assert_eq!(
        c.reserve(n).unwrap_err(),
        Error::OutOfMemory {
            name: "additional",
            value: n
        }
    );
    s.reserve(1000).unwrap();
    c.reserve(1000).unwrap();
    s.sample(&ROW).unwrap();
    c.sample(&ROW).unwrap();
    assert_eq!(s.history().generated().len(), 1);
    assert_eq!(c.history().generated().len(), 1);
}

#[test]
fn a_mask_past_the_vocabulary_limit_is_refused() {
    use logits::TokenMask;
    for n in HUGE {
        for r in [TokenMask::try_new_empty(n), TokenMask::try_new_full(n)] {
            match r {
                Err(Error::InvalidParameter { name: "len", .. }) => {}
                other => panic!("expected InvalidParameter naming len, got {other:?}"),
            }
        }
        // The infallible constructors panic (which a caller can catch); they never abort.
        assert!(std::panic::catch_unwind(|| TokenMask::new_empty(n)).is_err());
    }
    let full = TokenMask::try_new_full(151_936).unwrap();
    assert_eq!(full.count_allowed(), 151_936);
    assert_eq!(full, TokenMask::new_full(151_936));
}
