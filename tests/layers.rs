//! The layering of `docs/architecture.md`, checked on the sources: each file's `use crate::`
//! paths name only its own layer or lower ones, no files import each other in a circle, only
//! `lib.rs` names the callback file, and `unsafe` appears only in `ffi/`, each time with a
//! SAFETY comment. (No server needed.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const LAYERS: [&str; 4] = ["core", "ffi", "effects", "shell"];

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// module path ("shell::commands") → source without its unit tests.
fn sources() -> BTreeMap<String, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    rust_files(&src)
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().with_extension("");
            let module = rel
                .to_string_lossy()
                .replace('/', "::")
                .trim_end_matches("::mod")
                .to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            (module, code)
        })
        .collect()
}

fn layer(module: &str) -> usize {
    let top = module.split("::").next().unwrap_or("");
    LAYERS
        .iter()
        .position(|l| *l == top)
        .unwrap_or(LAYERS.len()) // lib.rs sits on top
}

/// The modules a file names through `crate::` paths, resolved to the longest known module.
fn imports(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        // Expand `crate::a::b::{c, d::e}` into every named path.
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let base = rest[..end].trim_end_matches("::");
        let mut paths = vec![base.to_string()];
        if rest[end..].starts_with('{') {
            let close = rest[end..].find('}').map_or(rest.len(), |c| end + c);
            for item in rest[end + 1..close].split(',') {
                let item = item.trim().split(" as ").next().unwrap_or("");
                if !item.is_empty() && item != "self" {
                    paths.push(format!("{base}::{item}"));
                }
            }
        }
        for path in paths {
            let parts: Vec<&str> = path.split("::").collect();
            if let Some(module) = (1..=parts.len())
                .rev()
                .map(|k| parts[..k].join("::"))
                .find(|m| modules.contains(m))
            {
                found.insert(module);
            }
        }
    }
    found
}

#[test]
fn layers_import_only_downward_and_nothing_in_a_circle() {
    let sources = sources();
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let mut edges = BTreeMap::new();
    let mut wrong = Vec::new();
    for (module, code) in &sources {
        let names = imports(code, &modules);
        for named in &names {
            if named == module {
                continue;
            }
            if layer(named) > layer(module) {
                wrong.push(format!("{module} names the higher {named}"));
            }
            if named == "shell::callbacks" && module != "lib" {
                wrong.push(format!("{module} names the callback file"));
            }
        }
        edges.insert(module.clone(), names);
    }
    for start in &modules {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&String> = edges[start].iter().collect();
        while let Some(m) = todo.pop() {
            if m == start {
                wrong.push(format!("{start} reaches itself"));
                break;
            }
            if seen.insert(m.clone()) {
                todo.extend(edges[m].iter());
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(modules.len() > 20, "found the sources: {modules:?}");
}

#[test]
fn unsafe_lives_only_in_ffi_and_says_why() {
    let mut wrong = Vec::new();
    for (module, code) in sources() {
        let lines: Vec<&str> = code.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let code_part = line.split("//").next().unwrap_or("");
            if !code_part.contains("unsafe ") && !code_part.contains("unsafe{") {
                continue;
            }
            if layer(&module) != 1 {
                wrong.push(format!("{module}:{}: unsafe outside ffi/", n + 1));
            }
            let explained = lines[n.saturating_sub(6)..=n]
                .iter()
                .any(|l| l.contains("SAFETY:") || l.contains("# Safety"));
            if !explained {
                wrong.push(format!(
                    "{module}:{}: unsafe without a SAFETY comment",
                    n + 1
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Whether a line of code (comments cut off) names `word`.
/// `ffi/` reads and hands over: what a setting allows is decided in `core` (a trampoline that
/// reads a `lock.*` limit is deciding something a unit test of `core` could cover).
#[test]
fn the_boundary_reads_no_limit() {
    for (module, code) in sources() {
        if !module.starts_with("ffi::") || module == "ffi::config" {
            continue;
        }
        for word in ["config::max_", "Limits", "config::Limits"] {
            assert!(
                !code.contains(word),
                "{module} reads a lock.* limit ({word}): decide in core, hand over in ffi"
            );
        }
    }
}

fn names(line: &str, word: &str) -> bool {
    line.split("//").next().unwrap_or("").contains(word)
}

#[test]
fn the_server_api_is_named_only_where_it_belongs() {
    let mut wrong = Vec::new();
    for (module, code) in sources() {
        for (n, line) in code.lines().enumerate() {
            let at = format!("{module}:{}", n + 1);
            if layer(&module) == 0 && names(line, "redis_module") {
                wrong.push(format!("{at}: core/ names redis_module"));
            }
            let ffi_or_lib = layer(&module) == 1 || module == "lib";
            let raw = names(line, "raw::") || names(line, "redis_module::raw");
            if !ffi_or_lib && (raw || names(line, "extern \"C\"")) {
                wrong.push(format!("{at}: raw:: or extern \"C\" outside ffi/"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every function of `code` (outside its unit tests) and its length in lines, from its `fn`
/// line to the closing brace at the same indentation.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let after_qualifiers = ["pub(crate) ", "pub ", "const ", "unsafe ", "extern \"C\" "]
            .iter()
            .fold(trimmed, |t, q| t.strip_prefix(q).unwrap_or(t));
        let Some(rest) = after_qualifiers.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if line.trim_end().ends_with(';') {
            continue; // a declaration
        }
        let close = format!("{indent}}}");
        if let Some(end) = (start..lines.len()).find(|&i| lines[i].trim_end() == close) {
            found.push((name, start + 1, end - start + 1));
        }
    }
    found
}

const MOST_LINES: usize = 80;

fn long_functions(root: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(root);
    let mut long = Vec::new();
    for path in rust_files(&dir) {
        let text = std::fs::read_to_string(&path).unwrap();
        let code = match text.find("#[cfg(test)]\nmod tests") {
            Some(at) => &text[..at],
            None => &text[..],
        };
        for (name, line, length) in functions(code) {
            if length > MOST_LINES {
                long.push(format!("{}:{line} {name}: {length} lines", path.display()));
            }
        }
    }
    long
}

#[test]
fn no_function_is_longer_than_80_lines() {
    let fixture = "fn short() {\n    one();\n}\n\npub fn long() {\n".to_string()
        + &"    line();\n".repeat(MOST_LINES)
        + "}\n";
    let found = functions(&fixture);
    assert_eq!(
        found,
        [("short".into(), 1, 3), ("long".into(), 5, MOST_LINES + 2)],
        "the scanner measures functions"
    );
    let long: Vec<String> = ["src", "harness/src", "bench/src"]
        .iter()
        .flat_map(|root| long_functions(root))
        .collect();
    assert!(long.is_empty(), "{long:#?}");
}

/// Text with all whitespace runs collapsed, to compare code regardless of indentation.
fn squeezed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_architecture_recipe_quotes_real_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let all_sources = squeezed(&sources().into_values().collect::<Vec<_>>().join("\n"));
    let snippets: Vec<&str> = doc
        .split("```rust")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .collect();
    assert!(snippets.len() >= 2, "the recipe has its snippets");
    for snippet in snippets {
        assert!(
            all_sources.contains(&squeezed(snippet)),
            "docs/architecture.md quotes code that is not in src/:\n{snippet}"
        );
    }
}
