//! Each tail cut alone (top-k, top-p, min-p), after an optional temperature, as a `Chain`
//! stage and as a `Sampler` parameter, compared with `logits::reference`: same survivors,
//! same probabilities (summing to 1), same token for the same uniform.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use logits::{
    reference, Chain, DrawRng, Error, MinP, Sampler, SamplingParams, Temperature, TopK, TopP,
};
use logits_fuzz::{check_sample, param, reference_draw, Dtype, Row};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Cut {
    TopK,
    TopP,
    MinP,
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let cut: Cut = u.arbitrary()?;
    let vocab: usize = u.int_in_range(1..=24)?;
    let t = if u.arbitrary()? {
        Some(param(u, 0.0, 4.0)?)
    } else {
        None
    };
    let keep: usize = u.int_in_range(1..=4)?;
    let seed: u64 = u.arbitrary()?;
    let (k, p) = (u.int_in_range(1..=30)?, param(u, 0.0, 1.0)?);

    // Build the stage; its validation must agree with SamplingParams'.
    let mut chain = Chain::builder(vocab);
    let mut params = SamplingParams::builder()
        .seed(seed)
        .min_tokens_to_keep(keep)
        .logprobs(20);
    if let Some(t) = t {
        match Temperature::new(t) {
            Ok(stage) => chain = chain.stage(stage),
            Err(e) => {
                assert!(matches!(
                    e,
                    Error::InvalidParameter {
                        name: "temperature",
                        ..
                    }
                ));
                assert!(!(t.is_finite() && t > 0.0));
                return Ok(());
            }
        }
        params = params.temperature(t);
    }
    let stage_err = match cut {
        Cut::TopK => TopK::new(k).map(|s| chain.stage(s.min_keep(keep))),
        Cut::TopP => TopP::new(p).map(|s| chain.stage(s.min_keep(keep))),
        Cut::MinP => MinP::new(p).map(|s| chain.stage(s.min_keep(keep))),
    };
    params = match cut {
        Cut::TopK => params.top_k(k),
        Cut::TopP => params.top_p(p),
        Cut::MinP => params.min_p(p),
    };
    let built = params.build();
    let mut chain = match stage_err {
        Ok(c) => c
            .draw()
            .seed(seed)
            .logprobs(20)
            .build()
            .expect("a well-formed chain"),
        Err(e) => {
            let Error::InvalidParameter { name, .. } = e else {
                panic!("{e:?}")
            };
            // The stage and the parameter refuse the same values.
            assert!(
                matches!(&built, Err(Error::InvalidParameter { name: n, .. }) if *n == name),
                "stage refused {name} but params gave {built:?}"
            );
            return Ok(());
        }
    };
    let params = built.expect("the stage accepted these values");
    let mut sampler = Sampler::new(params.clone(), vocab).unwrap();
    let temperature = params.temperature();

    // Draw n uses uniform n, where n counts the successful draws so far.
    let mut step = 0u64;
    for _ in 0..u.int_in_range(1..=4)? {
        let row = Row::arbitrary(u, Dtype::F32, vocab)?.to_f32();
        let got_chain = chain.sample(&row);
        let got_sampler = sampler.sample(&row);
        let reference = reference::check_row(&row, vocab).and_then(|()| {
            let c = reference::candidates(&row, temperature)?;
            Ok(match cut {
                Cut::TopK => reference::top_k(&c, k, keep),
                Cut::TopP => reference::top_p(&c, p, keep),
                Cut::MinP => reference::min_p(&c, p, keep),
            })
        });
        let survivors = match reference {
            Err(e) => {
                assert_eq!(got_chain.as_ref().err(), Some(&e), "chain");
                assert_eq!(got_sampler.as_ref().err(), Some(&e), "sampler");
                continue;
            }
            Ok(s) => s,
        };
        let u_draw = DrawRng::new(seed).uniform(step);
        let (want, dist, near) = reference_draw(&survivors, u_draw);
        let finite = row.iter().filter(|l| l.is_finite()).count();
        for (what, got) in [("chain", got_chain), ("sampler", got_sampler)] {
            let out = got.unwrap_or_else(|e| panic!("{what}: {e:?}, reference {dist:?}"));
            assert!(
                out.token == want || near,
                "{what} drew {} but the reference draws {want} ({dist:?}, u {u_draw}); \
                 step {step}, row {row:?}, {params:?}",
                out.token
            );
            check_sample(&out, &dist, false, finite, Some(20));
        }
        step += 1;
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
});
