//! The `qwen3` binary end to end, and its answers to bad input: a clear
//! error naming the file and the problem, exit code 1, no panic.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{write_random_model, Kind, HERB};

fn qwen3(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qwen3"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Checks a failed run: exit code 1, an error message with every needle, no
/// panic and no stack trace (even with RUST_BACKTRACE=1).
fn assert_fails(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err:?}");
    }
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    assert!(
        !err.contains("\n   0: ") && !err.contains(".rs:"),
        "stack frames in {err}"
    );
}

fn model_dir(kind: Kind) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_random_model(dir.path(), kind);
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The output without the speed figures, which vary from run to run.
fn without_speeds(text: &str) -> String {
    text.lines()
        .map(|l| match l.find(" | prompt ") {
            Some(i) if l.starts_with("[finish:") => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn chat_streams_an_answer_and_reports_finish_and_speed() {
    let dir = model_dir(Kind::Random);
    let d = s(dir.path());
    let args = [
        "--model-dir",
        d,
        "--prompt",
        HERB,
        "--no-think",
        "--seed",
        "3",
        "--max-tokens",
        "8",
    ];
    let a = qwen3(&args);
    assert_eq!(a.status.code(), Some(0), "{}", stderr(&a));
    let out = stdout(&a);
    assert!(out.contains("parameters"), "{out}");
    assert!(
        out.contains("vocabulary 151,669 tokens, 151,936 logits per step"),
        "{out}"
    );
    assert!(
        out.contains("temperature 0.6, top-k 20, top-p 0.95, seed 3"),
        "{out}"
    );
    assert!(
        out.contains("[finish: length limit of 8 tokens | prompt 26 tokens"),
        "{out}"
    );
    assert!(out.contains("tokens/s | generated 8 tokens"), "{out}");
    let b = qwen3(&args);
    assert_eq!(without_speeds(&out), without_speeds(&stdout(&b)));
}

#[test]
fn chat_ends_on_the_end_of_turn_token() {
    let dir = model_dir(Kind::EndsAtOnce);
    let o = qwen3(&[
        "--model-dir",
        s(dir.path()),
        "--prompt",
        "Hi",
        "--min-tokens",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("[finish: end-of-turn token <|im_end|> (151645)"),
        "{out}"
    );
    assert!(out.contains("generated 3 tokens"), "{out}");
}

#[test]
fn samples_are_seeded_one_per_line() {
    let dir = model_dir(Kind::Random);
    let d = s(dir.path());
    let args = [
        "--model-dir",
        d,
        "--prompt",
        HERB,
        "--no-think",
        "--samples",
        "4",
        "--max-tokens",
        "5",
        "--seed",
        "10",
    ];
    let a = stdout(&qwen3(&args));
    let lines: Vec<&str> = a
        .lines()
        .filter(|l| {
            l.trim_start()
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
        .collect();
    assert_eq!(lines.len(), 4, "{a}");
    for (i, l) in lines.iter().enumerate() {
        assert!(l.trim_start().starts_with(&format!("{}:", i + 1)), "{l}");
    }
    assert_eq!(a, stdout(&qwen3(&args)));
    // Sample 2 of seed 10 is sample 1 of seed 11.
    let shifted = [
        "--model-dir",
        d,
        "--prompt",
        HERB,
        "--no-think",
        "--samples",
        "1",
        "--max-tokens",
        "5",
        "--seed",
        "11",
    ];
    let b = stdout(&qwen3(&shifted));
    let first_b = b
        .lines()
        .find(|l| l.trim_start().starts_with("1:"))
        .unwrap();
    assert_eq!(first_b.trim_start()[2..], lines[1].trim_start()[2..]);
}

#[test]
fn top_next_table_has_one_column_per_temperature() {
    let dir = model_dir(Kind::Random);
    let o = qwen3(&[
        "--model-dir",
        s(dir.path()),
        "--prompt",
        HERB,
        "--no-think",
        "--top-next",
        "5",
        "--temperatures",
        "0.5,1.0,1.5",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("scores in one pass: 151936"), "{out}");
    let header = out.lines().find(|l| l.contains("T=0.5")).unwrap();
    assert!(
        header.contains("T=1") && header.contains("T=1.5"),
        "{header}"
    );
    let rows: Vec<Vec<f64>> = out
        .lines()
        .skip_while(|l| !l.contains("T=0.5"))
        .skip(1)
        .map(|l| {
            l.split_whitespace()
                .rev()
                .take(3)
                .map(|x| x.parse().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 5, "{out}");
    // Columns are T=1.5, 1.0, 0.5 reversed; the top token is most likely at
    // the lowest temperature, and probabilities fall down each column.
    assert!(
        rows[0][2] > rows[0][1] && rows[0][1] > rows[0][0],
        "{rows:?}"
    );
    for c in 0..3 {
        assert!(rows.windows(2).all(|w| w[0][c] >= w[1][c]), "{rows:?}");
    }
}

#[test]
fn logprobs_lists_each_token_with_alternatives() {
    let dir = model_dir(Kind::Random);
    let o = qwen3(&[
        "--model-dir",
        s(dir.path()),
        "--prompt",
        HERB,
        "--no-think",
        "--max-tokens",
        "3",
        "--logprobs",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let table: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("logprobs"))
        .skip(1)
        .take_while(|l| !l.starts_with("[finish"))
        .collect();
    assert_eq!(table.len(), 3, "{out}");
    for row in table {
        assert_eq!(
            row.split('|').nth(1).unwrap().split(", ").count(),
            2,
            "{row}"
        );
    }
}

#[test]
fn json_schema_run_prints_json() {
    let dir = model_dir(Kind::Random);
    let schema = dir.path().join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"herb":{"type":"string","maxLength":8}},"required":["herb"],"additionalProperties":false,"x-guidance":{"whitespace_flexible":false}}"#,
    )
    .unwrap();
    let o = qwen3(&[
        "--model-dir",
        s(dir.path()),
        "--prompt",
        HERB,
        "--no-think",
        "--json-schema",
        s(&schema),
        "--max-tokens",
        "40",
        "--seed",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let json = out.lines().find(|l| l.starts_with('{')).unwrap();
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert!(v["herb"].is_string());
    assert!(out.contains("[finish: end-of-turn token"), "{out}");
}

#[test]
fn interactive_chat_reads_turns_until_an_empty_line() {
    use std::io::Write;
    let dir = model_dir(Kind::EndsAtOnce);
    let mut child = Command::new(env!("CARGO_BIN_EXE_qwen3"))
        .args(["--model-dir", s(dir.path()), "--min-tokens", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Hi\nAgain\n\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        out.matches("[finish: end-of-turn token").count(),
        2,
        "{out}"
    );
}

// ---- bad input ----

#[test]
fn missing_model_directory() {
    let o = qwen3(&["--model-dir", "/nonexistent/qwen3", "--prompt", "x"]);
    assert_fails(&o, &["/nonexistent/qwen3", "does not exist"]);
}

#[test]
fn no_model_given() {
    let o = qwen3(&["--prompt", "x"]);
    assert_fails(&o, &["--model-dir"]);
}

#[test]
fn missing_config() {
    let dir = model_dir(Kind::Random);
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["config.json", "cannot read", "No such file"]);
}

#[test]
fn malformed_config() {
    let dir = model_dir(Kind::Random);
    std::fs::write(
        dir.path().join("config.json"),
        "{\"model_type\": \"qwen3\",",
    )
    .unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["config.json", "not valid JSON"]);
}

#[test]
fn config_of_another_architecture() {
    let dir = model_dir(Kind::Random);
    let path = dir.path().join("config.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"qwen3\"", "\"llama\"");
    std::fs::write(&path, text).unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["config.json", "\"llama\"", "only runs \"qwen3\""]);
}

#[test]
fn config_missing_a_field() {
    let dir = model_dir(Kind::Random);
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"model_type": "qwen3", "vocab_size": 10}"#,
    )
    .unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["config.json", "missing field"]);
}

#[test]
fn tokenizer_that_does_not_fit_the_logits() {
    // The tiny model has 2,048 logits; the real Qwen3 tokenizer 151,669 tokens.
    let dir = tempfile::tempdir().unwrap();
    let tiny = common::tiny_dir();
    for f in ["config.json", "model.safetensors", "generation_config.json"] {
        std::fs::copy(tiny.join(f), dir.path().join(f)).unwrap();
    }
    for f in ["tokenizer.json.gz", "tokenizer_config.json"] {
        std::fs::copy(common::qwen3_dir().join(f), dir.path().join(f)).unwrap();
    }
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(
        &o,
        &[
            "tokenizer.json.gz",
            "151669 tokens",
            "only 2048 logits",
            "config.json",
        ],
    );
}

#[test]
fn malformed_tokenizer() {
    let dir = model_dir(Kind::Random);
    std::fs::remove_file(dir.path().join("tokenizer.json.gz")).unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": 3}").unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["tokenizer.json", "invalid tokenizer"]);
}

#[test]
fn corrupt_compressed_tokenizer() {
    let dir = model_dir(Kind::Random);
    std::fs::write(dir.path().join("tokenizer.json.gz"), b"\x1f\x8b\x08garbage").unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["tokenizer.json.gz", "cannot decompress"]);
}

#[test]
fn missing_tokenizer_config() {
    let dir = model_dir(Kind::Random);
    std::fs::remove_file(dir.path().join("tokenizer_config.json")).unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["tokenizer_config.json", "cannot read"]);
}

#[test]
fn missing_weights() {
    let dir = model_dir(Kind::Random);
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["model.safetensors", "no weights"]);
}

#[test]
fn truncated_weights() {
    let dir = model_dir(Kind::Random);
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["model.safetensors"]);
}

#[test]
fn weights_that_do_not_match_the_config() {
    let dir = model_dir(Kind::Random);
    let path = dir.path().join("config.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"hidden_size\":16", "\"hidden_size\":32");
    std::fs::write(&path, text).unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["model.safetensors", "do not match"]);
}

#[test]
fn malformed_generation_config() {
    let dir = model_dir(Kind::Random);
    std::fs::write(
        dir.path().join("generation_config.json"),
        "{\"top_p\": 7, \"do_sample\": true}",
    )
    .unwrap();
    let o = qwen3(&["--model-dir", s(dir.path()), "--prompt", "x"]);
    assert_fails(&o, &["generation_config.json", "top_p"]);
}

#[test]
fn unreadable_or_invalid_schema() {
    let dir = model_dir(Kind::Random);
    let d = s(dir.path());
    let o = qwen3(&[
        "--model-dir",
        d,
        "--prompt",
        "x",
        "--json-schema",
        "/nonexistent/schema.json",
    ]);
    assert_fails(&o, &["/nonexistent/schema.json", "cannot read JSON schema"]);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"type\": ").unwrap();
    let o = qwen3(&["--model-dir", d, "--prompt", "x", "--json-schema", s(&bad)]);
    assert_fails(&o, &["bad.json", "not valid JSON"]);
}

#[test]
fn invalid_regex_and_sampling_options() {
    let dir = model_dir(Kind::Random);
    let d = s(dir.path());
    let o = qwen3(&["--model-dir", d, "--prompt", "x", "--regex", "(unclosed"]);
    assert_fails(&o, &["--regex", "unclosed group"]);
    let o = qwen3(&["--model-dir", d, "--prompt", "x", "--top-p", "1.5"]);
    assert_fails(&o, &["top_p"]);
    let o = qwen3(&["--model-dir", d, "--prompt", "x", "--max-tokens", "0"]);
    assert_fails(&o, &["max_tokens"]);
    let o = qwen3(&["--model-dir", d, "--prompt", "x", "--logprobs", "21"]);
    assert_fails(&o, &["--logprobs"]);
}

#[test]
fn malformed_flags_exit_1_and_help_exits_0() {
    let o = qwen3(&["--model-dir", "x", "--temperature", "warm"]);
    assert_fails(&o, &["--temperature", "warm"]);
    let o = qwen3(&["--no-such-flag"]);
    assert_fails(&o, &["--no-such-flag"]);
    let o = qwen3(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("--json-schema"));
}

#[test]
fn hub_id_without_the_hub_feature_is_a_clear_error() {
    if cfg!(feature = "hub") {
        return;
    }
    let o = qwen3(&["--model", "Qwen/Qwen3-0.6B", "--prompt", "x"]);
    assert_fails(&o, &["Qwen/Qwen3-0.6B", "--model-dir"]);
}
