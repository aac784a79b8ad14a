//! The crate's layers, checked on its source: the kernels (`src/kernels`) use only the
//! base modules (element, error, mask, params, decimal) and each other; the engine
//! (`src/engine`) uses the kernels and the sequence state, never a stage; the stages
//! (`src/stages`) sit on both. Inside the kernels the imports form no circle (the SIMD
//! dispatch sits above the bodies it compiles and below the passes that call it), and
//! `unsafe` code is only in `src/kernels/simd.rs`. A file that reaches up a layer fails
//! here, naming the file and the module it reaches.
//!
//! Modules are named as the code names them: the short paths that `src/lib.rs` declares
//! (`use kernels::{adjust, ...}`), the folders' own names (`crate::engine::...`), and
//! the items `src/lib.rs` re-exports (`crate::Chain` is the engine's). Comments and doc
//! comments are not code and are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The base modules, below every layer; `lib` stands for the items `src/lib.rs` defines
/// itself (`TokenId`, `MAX_VOCAB_SIZE`, ...).
const BASE: &[&str] = &[
    "element",
    "error",
    "mask",
    "params",
    "decimal",
    "test_rows",
    "lib",
];

/// The folders whose files `src/lib.rs` gives short paths.
const LAYERS: &[&str] = &["kernels", "engine", "sequence", "stages"];

/// The sequence modules above the engine: the batch holds samplers.
const ABOVE_ENGINE: &[&str] = &["batch"];

/// The crate's source, as `(path relative to src/, text)`.
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("read src/") {
            let path = entry.expect("read src/").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    walk(&src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, fs::read_to_string(&p).expect("read a source file"))
        })
        .collect()
}

/// `text` without its comments (line, doc and block comments), string literals kept as
/// `""` so that nothing inside them is read as a path.
fn code(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'r' if matches!(b.get(i + 1), Some(b'"') | Some(b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                // A raw string: r"..." or r#"..."#.
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                j += 1;
                loop {
                    if j >= b.len() {
                        break;
                    }
                    if b[j] == b'"'
                        && b[j + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&c| c == b'#')
                            .count()
                            == hashes
                    {
                        j += 1 + hashes;
                        break;
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' => {
                // A char literal ('x', '\n', '"'); otherwise a lifetime.
                if b.get(i + 1) == Some(&b'\\') {
                    let end = b[i + 2..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map_or(b.len(), |p| i + 3 + p);
                    out.push_str("' '");
                    i = end;
                } else if b.get(i + 2) == Some(&b'\'') {
                    out.push_str("' '");
                    i += 3;
                } else {
                    out.push('\'');
                    i += 1;
                }
            }
            c => {
                let len = text[i..].chars().next().map_or(1, char::len_utf8);
                if c.is_ascii() {
                    out.push(c as char);
                } else {
                    out.push_str(&text[i..i + len]);
                }
                i += len;
            }
        }
    }
    out
}

/// `code` without its `#[cfg(test)] mod ... { ... }` blocks: a unit test may build
/// anything, the layers are those of the code that ships.
fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        let is_mod = after.strip_prefix("mod ").is_some_and(|m| {
            let m = m.trim_start();
            m[ident(m).len()..].trim_start().starts_with('{')
        });
        out.push_str(&rest[..at]);
        if !is_mod {
            out.push_str("#[cfg(test)]");
            rest = &rest[at + "#[cfg(test)]".len()..];
            continue;
        }
        let open = rest[at..].find('{').unwrap() + at;
        let mut depth = 0;
        let mut end = rest.len();
        for (i, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The first identifier of `s`.
fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The names right after `crate::` in `code`: `crate::a::b` gives `a`, and
/// `crate::{a, b::c, d}` gives `a`, `b` and `d`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 {
            let before = code.as_bytes()[at - 1];
            if before.is_ascii_alphanumeric() || before == b'_' {
                continue; // `pub(crate)` is not followed by `::`; this skips `xcrate::`.
            }
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // Split the group at its top-level commas.
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        names.insert(ident(group[start..i].trim()).to_string());
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.insert(ident(group[start..i].trim()).to_string());
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(ident(rest).to_string());
        }
    }
    names.remove("");
    names
}

/// What `src/lib.rs` declares: each short path's folder, and each re-exported item's
/// module.
struct Lib {
    /// `adjust` -> `kernels`, ...
    layer_of: BTreeMap<String, String>,
    /// `Chain` -> `chain`, ...
    module_of: BTreeMap<String, String>,
}

/// Splits the body of a `{ ... }` list (no nesting) into its names.
fn list(body: &str) -> impl Iterator<Item = String> + '_ {
    body.split(',')
        .map(|s| ident(s.trim()).to_string())
        .filter(|s| !s.is_empty())
}

fn lib(lib_rs: &str) -> Lib {
    let code = code(lib_rs);
    let mut layer_of = BTreeMap::new();
    for layer in LAYERS {
        let head = format!("use {layer}::{{");
        let at = code
            .find(&head)
            .unwrap_or_else(|| panic!("src/lib.rs declares the short paths of `{layer}`"));
        let body = &code[at + head.len()..];
        let body = &body[..body.find('}').unwrap()];
        for name in list(body) {
            layer_of.insert(name, layer.to_string());
        }
    }
    let mut module_of = BTreeMap::new();
    for line in code.lines() {
        for head in ["pub type ", "pub const ", "pub(crate) fn ", "pub fn "] {
            if let Some(rest) = line.strip_prefix(head) {
                module_of.insert(ident(rest).to_string(), "lib".to_string());
            }
        }
    }
    for line in code.split(';') {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = ident(rest).to_string();
        let Some(items) = rest[module.len()..].strip_prefix("::") else {
            continue;
        };
        let items = items.trim();
        if let Some(body) = items.strip_prefix('{') {
            for item in list(body.trim_end_matches('}')) {
                module_of.insert(item, module.clone());
            }
        } else {
            module_of.insert(ident(items).to_string(), module.clone());
        }
    }
    Lib {
        layer_of,
        module_of,
    }
}

impl Lib {
    /// The layer of the name after `crate::`: a folder, a short path's folder, a
    /// re-exported item's module's folder, or the name itself (a top-level module such as
    /// `mask` or `reference`, or an item of `src/lib.rs`).
    fn layer(&self, name: &str) -> String {
        if LAYERS.contains(&name) {
            return name.to_string();
        }
        let module = self.module_of.get(name).map_or(name, String::as_str);
        self.layer_of
            .get(module)
            .cloned()
            .unwrap_or_else(|| module.to_string())
    }

    /// The short-path module name of a file under `src/`: `kernels/adjust.rs` is
    /// `adjust`, `engine/mod.rs` is `engine`.
    fn module_of_file(path: &str) -> String {
        let file = path.rsplit('/').next().unwrap().trim_end_matches(".rs");
        if file == "mod" {
            path.split('/').rev().nth(1).unwrap().to_string()
        } else {
            file.to_string()
        }
    }
}

/// Each file of `folder` with the names it reaches through `crate::` that `allowed`
/// refuses, as `path: name (layer)` lines.
fn violations(folder: &str, allowed: impl Fn(&str, &str, &str) -> bool) -> Vec<String> {
    let sources = sources();
    let lib_rs = &sources.iter().find(|(p, _)| p == "lib.rs").unwrap().1;
    let lib = lib(lib_rs);
    let mut bad = Vec::new();
    for (path, text) in &sources {
        if !path.starts_with(&format!("{folder}/")) {
            continue;
        }
        let me = Lib::module_of_file(path);
        for name in crate_paths(&without_tests(&code(text))) {
            let layer = lib.layer(&name);
            if !allowed(&me, &name, &layer) {
                bad.push(format!("src/{path}: crate::{name} ({layer})"));
            }
        }
    }
    bad
}

#[test]
fn the_parser_reads_the_crates_paths() {
    let sources = sources();
    let lib_rs = &sources.iter().find(|(p, _)| p == "lib.rs").unwrap().1;
    let lib = lib(lib_rs);
    assert_eq!(lib.layer("adjust"), "kernels");
    assert_eq!(lib.layer("chain"), "engine");
    assert_eq!(lib.layer("Chain"), "engine");
    assert_eq!(lib.layer("TopP"), "stages");
    assert_eq!(lib.layer("history"), "sequence");
    assert_eq!(lib.layer("mask"), "mask");
    assert_eq!(lib.layer("TokenId"), "lib");
    assert!(lib.layer_of.len() > 40, "{:?}", lib.layer_of);
    let engine = &sources
        .iter()
        .find(|(p, _)| p == "engine/mod.rs")
        .unwrap()
        .1;
    let used = crate_paths(&code(engine));
    for name in ["adjust", "select", "history", "params", "TokenId"] {
        assert!(
            used.contains(name),
            "engine/mod.rs uses crate::{name}: {used:?}"
        );
    }
    let sample = "use crate::{a, b::{c, d}, e::F}; // crate::g\n/* crate::h */ let s = \"crate::i\"; crate::j::k();";
    let names: Vec<String> = crate_paths(&code(sample)).into_iter().collect();
    assert_eq!(names, ["a", "b", "e", "j"]);
    let sample =
        "use crate::a;\n#[cfg(test)]\nmod tests { fn f() { crate::b::c(); } }\nuse crate::d;";
    let names: Vec<String> = crate_paths(&without_tests(&code(sample)))
        .into_iter()
        .collect();
    assert_eq!(names, ["a", "d"]);
}

#[test]
fn kernels_use_only_the_base_and_each_other() {
    let bad = violations("kernels", |_, _, layer| {
        layer == "kernels" || BASE.contains(&layer)
    });
    assert!(
        bad.is_empty(),
        "kernels reach above the kernels:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_engine_uses_no_stage() {
    let bad = violations("engine", |_, name, layer| {
        layer != "stages"
            && !ABOVE_ENGINE.contains(&name)
            && !matches!(layer, "reference" | "testing" | "request")
    });
    assert!(
        bad.is_empty(),
        "the engine reaches a stage or a layer above it:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_sequence_state_is_below_the_engine() {
    let bad = violations("sequence", |me, _, layer| {
        ABOVE_ENGINE.contains(&me) || !matches!(layer, "engine" | "stages")
    });
    assert!(
        bad.is_empty(),
        "sequence state reaches the engine or a stage:\n{}",
        bad.join("\n")
    );
}

/// The first circle of `graph` (`a -> b -> ... -> a`), if any.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut c = path[at..].to_vec();
            c.push(node.to_string());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_kernels_form_no_circle() {
    let sources = sources();
    let kernels: BTreeMap<String, &String> = sources
        .iter()
        .filter(|(p, _)| p.starts_with("kernels/") && !p.ends_with("/mod.rs"))
        .map(|(p, text)| (Lib::module_of_file(p), text))
        .collect();
    let graph: BTreeMap<String, BTreeSet<String>> = kernels
        .iter()
        .map(|(me, text)| {
            let uses = crate_paths(&without_tests(&code(text)))
                .into_iter()
                .filter(|n| n != me && kernels.contains_key(n))
                .collect();
            (me.clone(), uses)
        })
        .collect();
    // The dispatch is between the bodies it compiles and the passes that call it.
    assert!(graph["simd"].contains("histogram") && graph["select"].contains("simd"));
    assert_eq!(circle(&graph), None, "{graph:#?}");
    let mut with_circle = graph.clone();
    with_circle
        .get_mut("scan")
        .unwrap()
        .insert("simd".to_string());
    assert!(circle(&with_circle).is_some(), "the check finds a circle");
}

#[test]
fn unsafe_code_is_only_in_the_simd_dispatch() {
    for (path, text) in sources() {
        if path == "kernels/simd.rs" {
            continue;
        }
        let code = code(&text);
        let found = code.match_indices("unsafe").any(|(at, _)| {
            let before = code[..at].chars().next_back();
            let after = code[at + "unsafe".len()..].chars().next();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            !word(before) && !word(after)
        });
        assert!(!found, "src/{path} has unsafe code");
    }
}
