//! The custom chain: the builder's checks and a non-default order.

use logits::{Chain, Error, MinP, Sampler, SamplingParams, Temperature, TopK, TopP};

#[test]
fn a_chain_needs_exactly_one_draw_at_the_end() {
    let no_end = Chain::builder(4).stage(TopK::new(2).unwrap()).build();
    assert!(matches!(no_end, Err(Error::InvalidChain(_))));
    let two = Chain::builder(4).draw().greedy().build();
    assert!(matches!(two, Err(Error::InvalidChain(_))));
    let after = Chain::builder(4)
        .draw()
        .stage(TopK::new(2).unwrap())
        .build();
    assert!(matches!(after, Err(Error::InvalidChain(_))));
    assert_eq!(
        Chain::builder(0).draw().build().unwrap_err(),
        Error::EmptyVocabulary
    );
    let ok = Chain::builder(4)
        .stage(TopK::new(2).unwrap())
        .draw()
        .build()
        .unwrap();
    assert_eq!(ok.stage_names().collect::<Vec<_>>(), ["top_k", "draw"]);
}

#[test]
fn temperature_last_differs_from_temperature_first() {
    // Top-p 0.6 at T = 1 keeps two tokens; after temperature 0.25 the top token alone
    // reaches 0.6. So the order decides the survivors.
    let row = [2.0f32, 1.5, 1.0, 0.0];
    let mut llama_order = Chain::builder(4)
        .stage(TopP::new(0.6).unwrap())
        .stage(Temperature::new(0.25).unwrap())
        .logprobs(4)
        .draw()
        .build()
        .unwrap();
    let out = llama_order.sample(&row).unwrap();
    let kept = out
        .alternatives()
        .iter()
        .filter(|a| a.logprob > f32::NEG_INFINITY)
        .count();
    assert_eq!(kept, 2);

    let p = SamplingParams::builder()
        .temperature(0.25)
        .top_p(0.6)
        .build()
        .unwrap();
    let mut dist = Vec::new();
    Sampler::new(p, 4)
        .unwrap()
        .distribution(&row, None, &mut dist)
        .unwrap();
    assert_eq!(dist.len(), 1);
}

#[test]
fn greedy_chain_takes_the_first_maximum() {
    let mut c = Chain::builder(5)
        .stage(MinP::new(0.5).unwrap())
        .greedy()
        .build()
        .unwrap();
    let out = c
        .sample(&[1.0f32, 4.0, 4.0, f32::NEG_INFINITY, 2.0])
        .unwrap();
    assert_eq!(out.token, 1);
    assert_eq!(out.logprob, 0.0);
    let all_banned = c.sample(&[f32::NEG_INFINITY; 5]);
    assert_eq!(all_banned.unwrap_err(), Error::NoCandidates);
}
