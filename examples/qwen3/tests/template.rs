//! The real Qwen3 chat template and tokenizer.

mod common;

use logits_qwen3::template::{ChatTemplate, Message, Role};
use logits_qwen3::tokenizer::{tokenizer_path, Tokenizer};

fn template() -> ChatTemplate {
    ChatTemplate::from_tokenizer_config(&common::qwen3_dir().join("tokenizer_config.json")).unwrap()
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_file(&tokenizer_path(&common::qwen3_dir())).unwrap()
}

const HERB_NO_THINK: &str = "<|im_start|>user\nName one herb to add to tomato soup. Answer with one word.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

#[test]
fn herb_prompt_with_thinking_off_renders_exactly() {
    let text = template()
        .render(&[Message::new(Role::User, common::HERB)], true, false)
        .unwrap();
    assert_eq!(text, HERB_NO_THINK);
}

#[test]
fn herb_prompt_encodes_to_26_ids() {
    let tok = tokenizer();
    let ids = tok.encode(HERB_NO_THINK).unwrap();
    assert_eq!(ids.len(), 26, "{ids:?}");
    assert_eq!(ids[0], 151644, "<|im_start|>");
    assert!(ids.contains(&151645), "<|im_end|>");
    assert_eq!(tok.token_id("<think>"), Some(151667));
    assert_eq!(tok.token_id("</think>"), Some(151668));
    assert!(ids.contains(&151667) && ids.contains(&151668));
    assert_eq!(
        tok.decode(&ids[1..]).unwrap().trim_start().chars().next(),
        Some('u')
    );
}

#[test]
fn thinking_on_leaves_the_think_block_to_the_model() {
    let text = template()
        .render(&[Message::new(Role::User, common::HERB)], true, true)
        .unwrap();
    assert!(text.ends_with("<|im_start|>assistant\n"), "{text:?}");
    assert!(!text.contains("<think>"));
}

#[test]
fn system_and_history_render_with_reasoning_stripped_from_past_turns() {
    let messages = [
        Message::new(Role::System, "Be brief."),
        Message::new(Role::User, "Hi"),
        Message::new(Role::Assistant, "<think>\nplan\n</think>\n\nHello!"),
        Message::new(Role::User, "Bye"),
    ];
    let text = template().render(&messages, true, false).unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n\
         <|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
}

#[test]
fn tokenizer_size_and_token_bytes_agree_with_decoding() {
    let tok = tokenizer();
    assert_eq!(tok.vocab_size(), 151_669);
    // Every token's bytes, shown lossily, equal what the tokenizer decodes it to
    // (special tokens are skipped by both).
    let mut multibyte_fragments = 0;
    for id in 0..tok.vocab_size() as u32 {
        let bytes = tok.token_bytes(id);
        if std::str::from_utf8(bytes).is_err() {
            multibyte_fragments += 1;
        }
        let decoded = tok.inner().decode(&[id], true).unwrap();
        assert_eq!(String::from_utf8_lossy(bytes), decoded, "token {id}");
    }
    // Byte-level BPE has tokens that are parts of a UTF-8 character.
    assert!(multibyte_fragments > 100, "{multibyte_fragments}");
    assert!(tok.token_bytes(151645).is_empty(), "<|im_end|> is special");
    assert_eq!(tok.token_bytes(151667), b"<think>");
    assert!(tok.token_bytes(151_900).is_empty(), "padding id");
}

#[test]
fn bad_tokenizer_config_is_reported_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer_config.json");
    std::fs::write(&path, "{\"eos_token\": \"x\"}").unwrap();
    let err = format!(
        "{:#}",
        ChatTemplate::from_tokenizer_config(&path).unwrap_err()
    );
    assert!(
        err.contains("tokenizer_config.json") && err.contains("no chat_template"),
        "{err}"
    );
    std::fs::write(&path, "{\"chat_template\": \"{% if %}\"}").unwrap();
    let err = format!(
        "{:#}",
        ChatTemplate::from_tokenizer_config(&path).unwrap_err()
    );
    assert!(err.contains("does not compile"), "{err}");
}
