//! Paths to the repository's test data.

#![allow(dead_code)]

use std::path::PathBuf;

/// `tests/data` of the repository root.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

/// The tiny random Qwen3 with reference logits.
pub fn tiny_dir() -> PathBuf {
    data_dir().join("tiny-qwen3")
}

/// The real Qwen3 tokenizer and the Qwen3-0.6B configs.
pub fn qwen3_dir() -> PathBuf {
    data_dir().join("qwen3")
}

/// The herb question of the fixtures.
pub const HERB: &str = "Name one herb to add to tomato soup. Answer with one word.";

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};

/// Width of the random full-vocabulary test models.
pub const HIDDEN: usize = 16;
/// Qwen3's logits row.
pub const VOCAB: usize = 151_936;

/// A deterministic generator of weights in [-1, 1).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| self.next() * scale).collect();
        Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
    }
}

/// How the random model is wired.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Tied embeddings, random weights: a spread-out next-token distribution.
    Random,
    /// An output head that makes `<|im_end|>` by far the most likely token.
    EndsAtOnce,
    /// Like `Random`, with other random weights: a draft that disagrees with it.
    OtherRandom,
}

/// Writes a random Qwen3 with the full 151,936-logit vocabulary and the real
/// tokenizer into `dir`, as a Hugging Face model directory.
pub fn write_random_model(dir: &Path, kind: Kind) {
    let q = qwen3_dir();
    for f in [
        "tokenizer.json.gz",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        std::fs::copy(q.join(f), dir.join(f)).unwrap();
    }
    let (heads, kv_heads, head_dim, inter, layers) = (2, 1, 8, 32, 2);
    let config = serde_json::json!({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": kind != Kind::EndsAtOnce,
        "attention_bias": false,
        "use_sliding_window": false,
        "bos_token_id": 151643,
        "eos_token_id": 151645
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();

    let mut rng = Lcg(0x5eed_0000 + kind as u64);
    let mut t: HashMap<String, Tensor> = HashMap::new();
    let mut embed = rng.tensor(&[VOCAB, HIDDEN], 1.0);
    if kind == Kind::EndsAtOnce {
        // Dimension 0 of every embedding is a large constant that survives the
        // small layers, and the head reads it only for <|im_end|>.
        let ones = Tensor::ones((VOCAB, 1), candle_core::DType::F32, &Device::Cpu).unwrap();
        embed = Tensor::cat(
            &[
                (ones * 4.0).unwrap(),
                embed.narrow(1, 1, HIDDEN - 1).unwrap(),
            ],
            1,
        )
        .unwrap();
        let mut head = rng.tensor(&[VOCAB, HIDDEN], 0.3).to_vec2::<f32>().unwrap();
        for row in head.iter_mut() {
            row[0] = 0.0;
        }
        head[151_645] = vec![0.0; HIDDEN];
        head[151_645][0] = 8.0;
        let flat: Vec<f32> = head.into_iter().flatten().collect();
        t.insert(
            "lm_head.weight".into(),
            Tensor::from_vec(flat, (VOCAB, HIDDEN), &Device::Cpu).unwrap(),
        );
    }
    t.insert("model.embed_tokens.weight".into(), embed);
    let small = if kind == Kind::EndsAtOnce { 0.05 } else { 0.5 };
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        let mut put = |name: &str, shape: &[usize], scale: f32| {
            t.insert(format!("{p}.{name}"), rng.tensor(shape, scale));
        };
        put("self_attn.q_proj.weight", &[heads * head_dim, HIDDEN], 0.5);
        put(
            "self_attn.k_proj.weight",
            &[kv_heads * head_dim, HIDDEN],
            0.5,
        );
        put(
            "self_attn.v_proj.weight",
            &[kv_heads * head_dim, HIDDEN],
            0.5,
        );
        put(
            "self_attn.o_proj.weight",
            &[HIDDEN, heads * head_dim],
            small,
        );
        put("mlp.gate_proj.weight", &[inter, HIDDEN], 0.5);
        put("mlp.up_proj.weight", &[inter, HIDDEN], 0.5);
        put("mlp.down_proj.weight", &[HIDDEN, inter], small);
        let ones = |n: usize| Tensor::ones(n, candle_core::DType::F32, &Device::Cpu).unwrap();
        t.insert(format!("{p}.self_attn.q_norm.weight"), ones(head_dim));
        t.insert(format!("{p}.self_attn.k_norm.weight"), ones(head_dim));
        t.insert(format!("{p}.input_layernorm.weight"), ones(HIDDEN));
        t.insert(format!("{p}.post_attention_layernorm.weight"), ones(HIDDEN));
    }
    t.insert(
        "model.norm.weight".into(),
        Tensor::ones(HIDDEN, candle_core::DType::F32, &Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
}
