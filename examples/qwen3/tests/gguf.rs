//! `--gguf`: the tiny Qwen3 written as a GGUF file runs through candle's
//! quantized Qwen3 and reproduces the reference logits.

mod common;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device};
use logits_qwen3::model::Model;

/// Hugging Face tensor name -> GGUF tensor name.
fn gguf_name(hf: &str) -> String {
    if hf == "model.embed_tokens.weight" {
        return "token_embd.weight".into();
    }
    if hf == "model.norm.weight" {
        return "output_norm.weight".into();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap();
    let (layer, name) = rest.split_once('.').unwrap();
    let name = match name {
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        other => panic!("unexpected tensor {other}"),
    };
    format!("blk.{layer}.{name}")
}

fn write_tiny_gguf(path: &std::path::Path, architecture: &str) {
    let tensors =
        candle_core::safetensors::load(common::tiny_dir().join("model.safetensors"), &Device::Cpu)
            .unwrap();
    let mut q: Vec<(String, QTensor)> = tensors
        .iter()
        .map(|(name, t)| {
            let t = t.to_dtype(DType::F32).unwrap();
            (
                gguf_name(name),
                QTensor::quantize(&t, GgmlDType::F32).unwrap(),
            )
        })
        .collect();
    q.sort_by(|a, b| a.0.cmp(&b.0));
    use gguf_file::Value;
    let meta: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String(architecture.into())),
        ("general.dtype", Value::U32(0)),
        ("qwen3.attention.head_count", Value::U32(4)),
        ("qwen3.attention.head_count_kv", Value::U32(2)),
        ("qwen3.attention.key_length", Value::U32(16)),
        ("qwen3.block_count", Value::U32(2)),
        ("qwen3.embedding_length", Value::U32(64)),
        ("qwen3.context_length", Value::U32(4096)),
        ("qwen3.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
        ("qwen3.rope.freq_base", Value::F32(1e6)),
    ];
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = q.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut file, &meta_refs, &tensor_refs).unwrap();
}

#[test]
fn gguf_model_reproduces_the_reference_logits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_tiny_gguf(&path, "qwen3");
    let mut model = Model::from_gguf(&path).unwrap();
    assert_eq!(model.logits_len(), 2048);
    assert_eq!(model.context_len(), 4096);
    let bytes = std::fs::read(common::tiny_dir().join("all_logits.f32")).unwrap();
    let expected: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let prompt = [
        1u32, 17, 300, 1999, 42, 42, 7, 512, 1024, 5, 77, 1500, 3, 900, 2000, 64,
    ];
    for (pos, &token) in prompt.iter().enumerate() {
        let row = model.forward(&[token]).unwrap();
        let want = &expected[pos * 2048..(pos + 1) * 2048];
        let diff = row
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(diff < 1e-3, "position {pos}: max abs diff {diff}");
    }
}

#[test]
fn gguf_of_another_architecture_or_garbage_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("llama.gguf");
    write_tiny_gguf(&path, "llama");
    let err = format!("{:#}", Model::from_gguf(&path).unwrap_err());
    assert!(
        err.contains("llama.gguf") && err.contains("\"llama\""),
        "{err}"
    );

    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"not a gguf file at all").unwrap();
    let err = format!("{:#}", Model::from_gguf(&junk).unwrap_err());
    assert!(
        err.contains("junk.gguf") && err.contains("invalid GGUF"),
        "{err}"
    );

    let missing = dir.path().join("missing.gguf");
    let err = format!("{:#}", Model::from_gguf(&missing).unwrap_err());
    assert!(
        err.contains("missing.gguf") && err.contains("cannot open"),
        "{err}"
    );
}
