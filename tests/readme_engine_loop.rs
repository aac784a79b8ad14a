//! README's engine loop is the crate documentation's first example, which runs as a
//! doctest: the two copies must be the same text.

const README: &str = include_str!("../README.md");
const LIB: &str = include_str!("../src/lib.rs");

/// The lines of the first code block after the line `heading`, in `lines`.
fn block<'a>(lines: impl Iterator<Item = &'a str>, heading: &str, fence: &str) -> Vec<&'a str> {
    let mut lines = lines.skip_while(|l| *l != heading);
    assert!(lines.next().is_some(), "no {heading:?}");
    let mut lines = lines.skip_while(|l| *l != fence);
    assert!(lines.next().is_some(), "no code block after {heading:?}");
    let body: Vec<&str> = lines.take_while(|l| *l != "```").collect();
    assert!(body.len() > 20, "{body:?}");
    body
}

#[test]
fn readme_shows_the_doctested_engine_loop() {
    let readme = block(README.lines(), "## The engine loop", "```rust");
    let doc = LIB
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.strip_prefix("//!").unwrap())
        .map(|l| l.strip_prefix(' ').unwrap_or(l));
    let doc = block(doc, "# The engine loop", "```");
    for (i, (r, d)) in readme.iter().zip(&doc).enumerate() {
        assert_eq!(r, d, "line {} of the block", i + 1);
    }
    assert_eq!(readme.len(), doc.len());
    // It is the whole loop, once.
    assert!(readme.iter().any(|l| l.contains("checker.push(")));
    assert_eq!(README.matches("fn forward(").count(), 1);
}
