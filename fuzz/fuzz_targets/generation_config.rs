//! `SamplingParams::from_generation_config_json` over arbitrary text and over
//! well-formed files with arbitrary values: it returns valid parameters or a documented
//! error, and the parameters it returns sample without error.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use logits::{Error, GenerationConfig, Sampler, SamplingParams};

fn number(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(match u.int_in_range(0..=6)? {
        0 => "null".to_string(),
        1 => format!("{}", u.arbitrary::<i64>()?),
        2 => format!("{:e}", f64::from_bits(u.arbitrary()?)),
        3 => format!("{}", f32::from(u.arbitrary::<u8>()?) / 100.0),
        4 => "-0.0".to_string(),
        5 => "1e999".to_string(),
        _ => format!("\"{}\"", u.arbitrary::<u8>()?),
    })
}

fn structured(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let mut fields = Vec::new();
    for key in [
        "do_sample",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "repetition_penalty",
        "eos_token_id",
    ] {
        if u.arbitrary()? {
            let value = match key {
                "do_sample" => match u.int_in_range(0..=2)? {
                    0 => "true".to_string(),
                    1 => "false".to_string(),
                    _ => number(u)?,
                },
                "eos_token_id" => match u.int_in_range(0..=2)? {
                    0 => number(u)?,
                    1 => format!("[{}, {}]", number(u)?, number(u)?),
                    _ => "[]".to_string(),
                },
                _ => number(u)?,
            };
            fields.push(format!("\"{key}\": {value}"));
        }
    }
    if u.arbitrary()? {
        fields.push("\"transformers_version\": \"4.51.0\"".to_string());
    }
    Ok(format!("{{{}}}", fields.join(", ")))
}

fn run(data: &[u8]) -> arbitrary::Result<()> {
    let mut u = Unstructured::new(data);
    let text = if u.arbitrary()? {
        structured(&mut u)?
    } else {
        String::from_utf8_lossy(u.take_rest()).into_owned()
    };
    match SamplingParams::from_generation_config_json(&text) {
        Ok(p) => {
            let config = GenerationConfig::from_json(&text).expect("parsed once already");
            // Valid parameters, exactly the documented mapping.
            assert_eq!(p.to_builder().build().as_ref(), Ok(&p));
            assert_eq!(
                p.is_greedy(),
                !config.do_sample || config.temperature == Some(0.0)
            );
            if config.do_sample {
                assert_eq!(p.top_p(), config.top_p.map_or(1.0, |t| t as f32));
                assert!(config.top_p.is_none_or(|t| t <= 1.0));
                assert_eq!(
                    p.top_k(),
                    match config.top_k.unwrap_or(50) {
                        0 => None,
                        k => Some(k),
                    }
                );
            }
            let mut s = Sampler::new(p, 4).expect("no bias, vocabulary 4");
            let out = s
                .sample(&[0.5f32, 0.25, 0.0, -1.0])
                .expect("a valid row samples");
            assert!(out.token < 4);
        }
        Err(Error::InvalidConfig(msg)) => assert!(!msg.is_empty()),
        Err(Error::InvalidParameter { name, .. }) => assert!(
            [
                "temperature",
                "top_k",
                "top_p",
                "min_p",
                "repetition_penalty"
            ]
            .contains(&name),
            "{name}"
        ),
        Err(e) => panic!("undocumented error {e:?}"),
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
