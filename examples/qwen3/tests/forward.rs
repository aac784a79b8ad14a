//! The forward pass against Hugging Face transformers' logits for the tiny
//! random Qwen3, and the parameter count from config.json.

mod common;

use logits_qwen3::config::Qwen3Config;
use logits_qwen3::model::{safetensors_files, Model};

const PROMPT: [u32; 16] = [
    1, 17, 300, 1999, 42, 42, 7, 512, 1024, 5, 77, 1500, 3, 900, 2000, 64,
];
const ARGMAX: [usize; 16] = [
    1369, 1979, 300, 1789, 42, 42, 1107, 512, 1589, 1331, 1397, 1500, 3, 1711, 275, 64,
];

fn reference() -> Vec<Vec<f32>> {
    let bytes = std::fs::read(common::tiny_dir().join("all_logits.f32")).unwrap();
    assert_eq!(bytes.len(), 16 * 2048 * 4);
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect::<Vec<_>>()
        .chunks_exact(2048)
        .map(<[f32]>::to_vec)
        .collect()
}

fn tiny_model() -> Model {
    let dir = common::tiny_dir();
    let config = Qwen3Config::from_file(&dir.join("config.json")).unwrap();
    Model::from_safetensors(&config, &safetensors_files(&dir).unwrap()).unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

#[test]
fn one_token_at_a_time_through_the_kv_cache_reproduces_every_row() {
    let expected = reference();
    let mut model = tiny_model();
    assert_eq!(model.logits_len(), 2048);
    for (pos, &token) in PROMPT.iter().enumerate() {
        let row = model.forward(&[token]).unwrap();
        let diff = max_abs_diff(&row, &expected[pos]);
        assert!(diff < 1e-3, "position {pos}: max abs diff {diff}");
        assert_eq!(argmax(&row), ARGMAX[pos], "argmax at position {pos}");
        assert_eq!(model.position(), pos + 1);
    }
}

#[test]
fn whole_prompt_at_once_and_in_chunks_gives_the_same_rows() {
    let expected = reference();
    let mut model = tiny_model();
    let row = model.forward(&PROMPT).unwrap();
    assert!(max_abs_diff(&row, &expected[15]) < 1e-3);

    // A prefix, then the rest in two chunks, over the cache.
    model.reset();
    assert_eq!(model.position(), 0);
    let row = model.forward(&PROMPT[..5]).unwrap();
    assert!(max_abs_diff(&row, &expected[4]) < 1e-3);
    let row = model.forward(&PROMPT[5..11]).unwrap();
    assert!(max_abs_diff(&row, &expected[10]) < 1e-3);
    let row = model.forward(&PROMPT[11..]).unwrap();
    assert!(max_abs_diff(&row, &expected[15]) < 1e-3);
}

#[test]
fn out_of_vocabulary_token_is_an_error_not_a_panic() {
    let mut model = tiny_model();
    let err = model.forward(&[2048]).unwrap_err().to_string();
    assert!(err.contains("2048") && err.contains("vocabulary"), "{err}");
    assert!(model.forward(&[]).is_err());
}

#[test]
fn parameter_counts_from_config() {
    let qwen3 = Qwen3Config::from_file(&common::qwen3_dir().join("config.json")).unwrap();
    assert_eq!(qwen3.parameter_count(), 596_049_920);
    assert_eq!(
        logits_qwen3::config::group_thousands(qwen3.parameter_count()),
        "596,049,920"
    );
    let tiny = Qwen3Config::from_file(&common::tiny_dir().join("config.json")).unwrap();
    // The tiny fixture stores 205,184 parameters.
    assert_eq!(tiny.parameter_count(), 205_184);
}

#[test]
fn untied_head_and_attention_bias_are_counted() {
    let text = std::fs::read_to_string(common::tiny_dir().join("config.json")).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["tie_word_embeddings"] = false.into();
    value["attention_bias"] = true.into();
    let c = Qwen3Config::from_json(&value.to_string()).unwrap();
    // + lm_head (2048 x 64) + per layer q/k/v/o biases (64 + 32 + 32 + 64) x 2 layers.
    assert_eq!(
        c.parameter_count(),
        205_184 + 2048 * 64 + 2 * (64 + 32 + 32 + 64)
    );
}
