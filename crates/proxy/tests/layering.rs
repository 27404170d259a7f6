//! The proxy's modules import one another one way only: every `crate::X` a module's code names
//! (comments aside) points down the layers ARCHITECTURE.md draws, never back up, so the module
//! graph has no circle. A submodule (`inbound/limits.rs`) counts as its top module (`inbound`).

#![allow(clippy::unwrap_used)] // a test: a failure should fail loudly

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every top module of `src/` with the top modules its code names through `crate::`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.clone()];
    while let Some(dir) = files.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(&src).unwrap();
            let top = relative
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_str()
                .unwrap()
                .trim_end_matches(".rs")
                .to_owned();
            if top == "lib" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let named = graph.entry(top.clone()).or_default();
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or("");
                for (i, _) in code.match_indices("crate::") {
                    let rest = &code[i + "crate::".len()..];
                    let rest = rest.trim_start_matches('{');
                    let names: Vec<&str> = if code[i..].starts_with("crate::{") {
                        // `use crate::{a, b::C}` on one line.
                        rest.split('}')
                            .next()
                            .unwrap_or("")
                            .split(',')
                            .map(str::trim)
                            .collect()
                    } else {
                        vec![rest]
                    };
                    for name in names {
                        let module: String = name
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        if !module.is_empty() && module != top {
                            named.insert(module);
                        }
                    }
                }
            }
        }
    }
    // Names that are not modules of this crate (items `lib.rs` re-exports) are not edges.
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for named in graph.values_mut() {
        named.retain(|m| modules.contains(m));
    }
    graph
}

/// The modules in layers from the bottom (each layer names only the layers below it), or the
/// modules left in a circle.
fn layers(
    graph: &BTreeMap<String, BTreeSet<String>>,
) -> Result<Vec<Vec<String>>, BTreeMap<String, BTreeSet<String>>> {
    let mut left = graph.clone();
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut layers = Vec::new();
    while !left.is_empty() {
        let layer: Vec<String> = left
            .iter()
            .filter(|(_, named)| named.iter().all(|n| placed.contains(n)))
            .map(|(m, _)| m.clone())
            .collect();
        if layer.is_empty() {
            return Err(left);
        }
        for m in &layer {
            left.remove(m);
            placed.insert(m.clone());
        }
        layers.push(layer);
    }
    Ok(layers)
}

#[test]
fn the_modules_import_one_another_one_way_only() {
    let graph = imports();
    match layers(&graph) {
        Ok(layers) => {
            for (i, layer) in layers.iter().enumerate() {
                println!("layer {i}: {}", layer.join(" "));
            }
        }
        Err(circle) => {
            panic!("modules in a circle of imports (each with what it names): {circle:#?}")
        }
    }
}

#[test]
fn a_circle_is_found() {
    let edge = |a: &str, b: &[&str]| (a.to_owned(), b.iter().map(|s| (*s).to_owned()).collect());
    let graph: BTreeMap<String, BTreeSet<String>> = [
        edge("a", &["b"]),
        edge("b", &["c"]),
        edge("c", &["a"]),
        edge("d", &[]),
    ]
    .into();
    let circle = layers(&graph).unwrap_err();
    assert_eq!(circle.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
}
