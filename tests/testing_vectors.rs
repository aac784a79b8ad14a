//! The conformance vectors through `logits::testing::vectors`, the loader that ships with
//! the crate: the crate's own `Sampler` over every vector, and the loader's reading of
//! every file against an independent JSON parser.

#![cfg(feature = "testing")]

use logits::half::{bf16, f16};
use logits::testing::vectors::{self, Outcome, Vector};
use logits::{Error, Logit, Sampler, TokenId};
use serde_json::Value;

/// A `Sampler` for the vector with its history.
fn sampler(v: &Vector) -> Result<Sampler, Error> {
    let mut s = Sampler::new(v.params.clone(), v.vocab_size)?;
    s.push_prompt(&v.prompt)?;
    v.generated.iter().try_for_each(|&t| s.accept(t))?;
    Ok(s)
}

/// The sampler's distribution and its token for every listed uniform, on `row`.
fn check_sampler<T: Logit>(v: &Vector, row: &[T]) -> Result<(), Box<dyn std::error::Error>> {
    let mut dist = Vec::new();
    match sampler(v)?.distribution(row, None, &mut dist) {
        Err(Error::NoCandidates) => return Ok(v.check_no_candidates()?),
        Err(e) => return Err(e.into()),
        Ok(()) => v.check_distribution(&dist, 1e-9)?,
    }
    for &(u, _) in v.draws() {
        let token = sampler(v)?.sample_with_uniform(row, None, u)?.token;
        v.check_draw(u, token)?;
    }
    Ok(())
}

#[test]
fn the_sampler_passes_every_vector() {
    let report = vectors::run(|v| check_sampler(v, &v.logits));
    assert!(report.cases() >= 40, "{} vectors", report.cases());
    report.assert_ok();
}

#[test]
fn the_sampler_passes_every_vector_exact_in_half_precision() {
    let exact = |v: &Vector, f: fn(f32) -> f32| v.logits.iter().all(|&x| x.is_nan() || f(x) == x);
    let mut ran = 0;
    let report = vectors::run(|v| -> Result<(), Box<dyn std::error::Error>> {
        if exact(v, |x| bf16::from_f32(x).to_f32()) {
            let row: Vec<bf16> = v.logits.iter().map(|&x| bf16::from_f32(x)).collect();
            check_sampler(v, &row).map_err(|e| format!("bf16: {e}"))?;
            ran += 1;
        }
        if exact(v, |x| f16::from_f32(x).to_f32()) {
            let row: Vec<f16> = v.logits.iter().map(|&x| f16::from_f32(x)).collect();
            check_sampler(v, &row).map_err(|e| format!("f16: {e}"))?;
            ran += 1;
        }
        Ok(())
    });
    report.assert_ok();
    assert!(ran >= 20, "only {ran} half-precision runs");
}

#[test]
fn a_wrong_implementation_fails_and_is_reported_by_name() {
    // Survivors listed in id order instead of draw order, and the first survivor drawn
    // whatever the uniform.
    let report = vectors::run(|v| {
        let mut by_id = v.survivors().to_vec();
        by_id.sort_by_key(|&(id, _)| id);
        match &v.expected {
            Outcome::NoCandidates => v.check_no_candidates(),
            Outcome::Tokens { survivors, draws } => {
                v.check_distribution(&by_id, 1e-9)?;
                draws
                    .iter()
                    .try_for_each(|&(u, _)| v.check_draw(u, survivors[0].0))
            }
        }
    });
    let failed: Vec<&str> = report.failures().iter().map(|f| f.label.as_str()).collect();
    assert!(
        failed.contains(&"ties_and_edges.json:draw_boundary_goes_up"),
        "{report}"
    );
    assert!(
        failed.contains(&"ties_and_edges.json:neg_inf_never_drawn"),
        "{report}"
    );
    // Every failing vector really does have survivors out of id order or two drawable
    // tokens, and every passing one has neither.
    for v in vectors::all().unwrap() {
        let ids: Vec<TokenId> = v.survivors().iter().map(|x| x.0).collect();
        let sorted = ids.windows(2).all(|w| w[0] < w[1]);
        let one_token = v.draws().iter().all(|d| Some(d.1) == ids.first().copied());
        let wrong = !(sorted && one_token);
        assert_eq!(failed.contains(&v.label().as_str()), wrong, "{}", v.label());
    }
    assert!(report.to_string().contains("draw_boundary_goes_up"));
}

#[test]
fn a_panicking_check_is_a_failure_not_a_crash() {
    let report = vectors::run(|v| -> Result<(), String> {
        assert!(v.name != "top_k_ties", "boom");
        Ok(())
    });
    assert_eq!(report.failures().len(), 1, "{report}");
    assert_eq!(report.failures()[0].label, "top_k.json:top_k_ties");
    assert!(report.failures()[0].message.contains("boom"));
}

fn number(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) => s.parse().unwrap(),
        other => panic!("{other}"),
    }
}

#[test]
fn the_loader_reads_every_file_as_serde_json_does() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vectors");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    on_disk.sort();
    let embedded: Vec<&str> = vectors::file_names().collect();
    assert_eq!(embedded, on_disk, "every vector file is embedded");
    let loaded = vectors::all().unwrap();
    let mut i = 0;
    for name in on_disk {
        let text = std::fs::read_to_string(dir.join(&name)).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["format"], vectors::FORMAT, "{name}");
        for want in doc["vectors"].as_array().unwrap() {
            let got = &loaded[i];
            i += 1;
            assert_eq!(got.file, name);
            assert_eq!(got.name, want["name"].as_str().unwrap());
            let logits: Vec<f32> = want["logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| number(x) as f32)
                .collect();
            assert_eq!(got.logits.len(), logits.len(), "{}", got.label());
            for (a, b) in got.logits.iter().zip(&logits) {
                assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            }
            let n = want
                .get("vocab_size")
                .map_or(logits.len(), |n| n.as_u64().unwrap() as usize);
            assert_eq!(got.vocab_size, n, "{}", got.label());
            let e = &want["expected"];
            match &got.expected {
                Outcome::NoCandidates => assert_eq!(e["error"], "no_candidates"),
                Outcome::Tokens { survivors, draws } => {
                    let s = e["survivors"].as_array().unwrap();
                    assert_eq!(survivors.len(), s.len());
                    for (&(id, p), w) in survivors.iter().zip(s) {
                        assert_eq!(u64::from(id), w[0].as_u64().unwrap());
                        assert_eq!(p, number(&w[1]));
                    }
                    let d = e["draws"].as_array().unwrap();
                    assert_eq!(draws.len(), d.len());
                    for (&(u, id), w) in draws.iter().zip(d) {
                        assert_eq!(u, number(&w[0]));
                        assert_eq!(u64::from(id), w[1].as_u64().unwrap());
                    }
                }
            }
            let p = &want["params"];
            let f = |key: &str, default: f64| p.get(key).map_or(default, number) as f32;
            assert_eq!(got.params.top_p(), f("top_p", 1.0), "{}", got.label());
            assert_eq!(got.params.min_p(), f("min_p", 0.0), "{}", got.label());
            assert_eq!(
                got.params.temperature(),
                f("temperature", 1.0),
                "{}",
                got.label()
            );
            assert_eq!(
                got.params.top_k(),
                p.get("top_k").and_then(Value::as_u64).map(|k| k as usize),
                "{}",
                got.label()
            );
            let hist = |key: &str| -> Vec<TokenId> {
                want.get("history")
                    .and_then(|h| h.get(key))
                    .and_then(Value::as_array)
                    .map(|a| a.iter().map(|x| x.as_u64().unwrap() as TokenId).collect())
                    .unwrap_or_default()
            };
            assert_eq!(got.prompt, hist("prompt"));
            assert_eq!(got.generated, hist("generated"));
        }
    }
    assert_eq!(i, loaded.len());
}

#[test]
fn the_loader_refuses_another_format_version_and_malformed_files() {
    let good = r#"{"format": "logits-conformance/1", "vectors": [{"name": "a",
        "logits": [1.0, 2.0], "params": {"top_k": 1},
        "expected": {"survivors": [[1, 1.0]], "draws": [[0.0, 1]]}}]}"#;
    let v = vectors::parse("x.json", good).unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].params.top_k(), Some(1));
    for bad in [
        good.replace("conformance/1", "conformance/2"),
        good.replace(r#""format": "logits-conformance/1","#, ""),
        good.replace("top_k", "top_z"),
        good.replace("[1, 1.0]]", "[1, 1.0]"),
        good.replace(r#""top_k": 1"#, r#""top_p": 2.0"#),
    ] {
        let err = vectors::parse("x.json", &bad).unwrap_err();
        assert_eq!(err.file, "x.json");
    }
    let err =
        vectors::parse("x.json", &good.replace("conformance/1", "conformance/2")).unwrap_err();
    assert!(err.message.contains(vectors::FORMAT), "{err}");
}

#[test]
fn the_vectors_readme_states_the_format_version_the_loader_reads() {
    let readme = include_str!("data/vectors/README.md");
    assert!(
        readme.contains(&format!("Format version: `{}`", vectors::FORMAT)),
        "the README states another version"
    );
}
