//! No two files of the crate import each other, directly or through others: each file's
//! `crate::` paths (its unit tests left out) form a graph without a circle. (No server needed.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// File module ("renewal") → the crate's modules it names through `crate::` paths.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("src") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let module = path
                .file_stem()
                .expect("stem")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).expect("source");
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            sources.insert(module, code);
        }
    }
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .into_iter()
        .map(|(module, code)| {
            let named = code
                .split("crate::")
                .skip(1)
                .map(|rest| {
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    rest[..end].to_string()
                })
                .filter(|m| modules.contains(m) && *m != module && m != "lib")
                .collect();
            (module, named)
        })
        .collect()
}

/// A module that reaches itself by following imports, with the path it took.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    for start in graph.keys() {
        let mut paths = vec![vec![start.clone()]];
        let mut seen = BTreeSet::new();
        while let Some(path) = paths.pop() {
            let last = path.last().expect("a path is never empty");
            for next in graph.get(last).into_iter().flatten() {
                if next == start {
                    return Some([path.clone(), vec![next.clone()]].concat());
                }
                if seen.insert(next.clone()) {
                    paths.push([path.clone(), vec![next.clone()]].concat());
                }
            }
        }
    }
    None
}

#[test]
fn no_file_imports_itself_through_others() {
    let graph = imports();
    assert!(graph.len() > 5, "read the crate's files: {graph:?}");
    if let Some(path) = circle(&graph) {
        panic!("an import circle: {}", path.join(" -> "));
    }
}

#[test]
fn the_check_finds_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_string(), to.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        circle(&graph).map(|p| p.join(" -> ")).as_deref(),
        Some("a -> b -> c -> a")
    );
}
