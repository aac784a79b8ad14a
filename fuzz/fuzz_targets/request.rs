//! The OpenAI, vLLM and llama.cpp request parsers over arbitrary text and over objects
//! built from their field names with arbitrary values: each returns a request whose
//! parameters are valid, or a documented error naming a field; never a panic.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use logits::request::{llama_cpp, openai, vllm, Request, RequestError};
use logits::{Error, Sampler};

const KEYS: &[&str] = &[
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "n",
    "seed",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "stop",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "response_format",
    "repetition_penalty",
    "min_tokens",
    "stop_token_ids",
    "ignore_eos",
    "bad_words",
    "allowed_token_ids",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "structured_outputs",
    "n_predict",
    "repeat_penalty",
    "repeat_last_n",
    "min_keep",
    "n_probs",
    "post_sampling_probs",
    "grammar",
    "json_schema",
    "typical_p",
    "top_n_sigma",
    "xtc_probability",
    "xtc_threshold",
    "dynatemp_range",
    "dynatemp_exponent",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
];

fn value(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<String> {
    Ok(match u.int_in_range(0..=11)? {
        0 => "null".to_string(),
        1 => format!("{}", u.arbitrary::<bool>()?),
        2 => format!("{}", u.arbitrary::<i64>()?),
        3 => format!("{:e}", f64::from_bits(u.arbitrary()?)),
        4 => format!("{}", f32::from(u.arbitrary::<u8>()?) / 50.0 - 1.0),
        5 => [
            "-1",
            "0",
            "1",
            "20",
            "21",
            "100",
            "-100",
            "1e999",
            "-0.0",
            "4294967296",
        ][u.int_in_range(0..=9)?]
        .to_string(),
        6 => {
            let n = u.int_in_range(0..=6)?;
            let text = String::from_utf8_lossy(u.bytes(n)?).into_owned();
            serde_json::to_string(&text).unwrap_or_default()
        }
        7 if depth < 3 => {
            let n = u.int_in_range(0..=3)?;
            let items: Vec<String> = (0..n)
                .map(|_| value(u, depth + 1))
                .collect::<Result<_, _>>()?;
            format!("[{}]", items.join(", "))
        }
        8 if depth < 3 => object(u, depth + 1)?,
        9 => format!(
            "{{\"{}\": {}}}",
            u.arbitrary::<u16>()?,
            value(u, depth + 1)?
        ),
        10 => format!("[[{}, {}]]", u.arbitrary::<u32>()?, value(u, depth + 1)?),
        _ => "{\"type\": \"json_object\"}".to_string(),
    })
}

fn object(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<String> {
    let mut fields = Vec::new();
    for _ in 0..u.int_in_range(0..=8)? {
        let key = KEYS[u.choose_index(KEYS.len())?];
        fields.push(format!("\"{key}\": {}", value(u, depth)?));
    }
    Ok(format!("{{{}}}", fields.join(", ")))
}

fn check(r: Result<Request, RequestError>) {
    match r {
        Ok(r) => {
            assert_eq!(r.params.to_builder().build().as_ref(), Ok(&r.params));
            let text = serde_json::to_string(&r).expect("a request serialises");
            let back: Request = serde_json::from_str(&text).expect("and reads back");
            assert_eq!(back, r);
            if r.params.logit_bias().iter().all(|&(id, _)| id < 4) {
                let mut s = Sampler::new(r.params, 4).expect("ids in range");
                // Only the bias can ban every token or overflow a logit.
                match s.sample(&[0.5f32, 0.25, 0.0, -1.0]) {
                    Ok(out) => assert!(out.token < 4),
                    Err(Error::NoCandidates | Error::InfiniteLogit { .. }) => {}
                    Err(e) => panic!("a valid request failed to sample: {e:?}"),
                }
            }
        }
        Err(RequestError::Field { field, reason }) => {
            assert!(!reason.is_empty());
            assert!(KEYS.contains(&field) || field == "params", "{field}");
        }
        Err(RequestError::Json(msg)) => assert!(!msg.is_empty()),
        Err(RequestError::NotAnObject) => {}
        Err(e) => panic!("undocumented error {e:?}"),
    }
}

fn run(data: &[u8]) -> arbitrary::Result<()> {
    let mut u = Unstructured::new(data);
    let text = if u.arbitrary()? {
        object(&mut u, 0)?
    } else {
        String::from_utf8_lossy(u.take_rest()).into_owned()
    };
    check(openai::parse(&text));
    check(vllm::parse(&text));
    check(llama_cpp::parse(&text));
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
