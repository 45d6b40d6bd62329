//! The invariants ARCHITECTURE.md states about the code's shape, checked on the sources:
//! - no import circle between the files of one crate (a module that uses another, directly or
//!   through others, is not used back by it), read from `crate::<module>` paths;
//! - a crate depends only on crates of its own floor or below (the floors of ARCHITECTURE.md);
//! - a binary's `main.rs` is argument parsing and one library call (a few lines).
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gauge::repo_root;

/// The modules (top-level files of `src/`, `lib.rs`/`main.rs` and `bin/` excluded) each module
/// names through `crate::<module>` (also in grouped `use crate::{a, b::c}` lines).
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut modules = BTreeMap::new();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let p = e.path();
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()) else { continue };
        if p.extension().is_some_and(|x| x == "rs") && stem != "lib" && stem != "main" {
            modules.insert(stem.to_string(), std::fs::read_to_string(&p).unwrap());
        }
    }
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    modules
        .iter()
        .map(|(m, text)| {
            // Test modules may use anything: only the code before `#[cfg(test)]` counts.
            // Comments (doc links included) are not imports.
            let code: String = text.split("#[cfg(test)]").next().unwrap_or_default().lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
            let mut uses = BTreeSet::new();
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let targets: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                    group[..group.find('}').unwrap_or(group.len())].split(',').map(|s| s.trim()).collect()
                } else {
                    vec![rest]
                };
                for t in targets {
                    let name: String = t.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if name != *m && names.contains(&name) {
                        uses.insert(name);
                    }
                }
            }
            (m.clone(), uses)
        })
        .collect()
}

/// One cycle of the graph, if there is one (depth-first search).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(n: &str, graph: &BTreeMap<String, BTreeSet<String>>, state: &mut BTreeMap<String, u8>, path: &mut Vec<String>) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    let start = path.iter().position(|p| p == m).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, graph, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_crate_has_an_import_circle_between_its_files() {
    let mut circles = Vec::new();
    for e in std::fs::read_dir(repo_root().join("crates")).unwrap().flatten() {
        let src = e.path().join("src");
        if let Some(c) = find_cycle(&module_graph(&src)) {
            circles.push(format!("crates/{}: {}", e.file_name().to_string_lossy(), c.join(" → ")));
        }
    }
    assert!(circles.is_empty(), "import circles (move what both sides need into a module both import):\n{}", circles.join("\n"));
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let g = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(find_cycle(&g(&[("train", "steps"), ("steps", "optim"), ("optim", "train")])), Some(vec!["optim".into(), "train".into(), "steps".into(), "optim".into()]));
    assert_eq!(find_cycle(&g(&[("train", "steps"), ("steps", "optim"), ("train", "optim")])), None);
    // Grouped and nested uses are read; test modules are not.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.rs"), "//! See [`crate::e`].\nuse crate::{b::X, c};\n#[cfg(test)]\nmod tests { use crate::d; }\n").unwrap();
    for m in ["b", "c", "d", "e"] {
        std::fs::write(dir.path().join(format!("{m}.rs")), "").unwrap();
    }
    assert_eq!(module_graph(dir.path())["a"], ["b".to_string(), "c".to_string()].into_iter().collect());
}

/// The floor of every crate (ARCHITECTURE.md's bird's-eye view).
const FLOORS: [(&str, u8); 24] = [
    ("core", 1),
    ("test-support", 1),
    ("chat", 1),
    ("tensor", 2),
    ("rank", 3),
    ("cite", 3),
    ("chat-client", 3),
    ("encoder", 3),
    ("decoder", 3),
    ("generator", 3),
    ("extract", 4),
    ("chunk", 4),
    ("embed", 4),
    ("index", 4),
    ("rerank", 4),
    ("engine", 4),
    ("raptor", 4),
    ("answer", 4),
    ("synth", 4),
    ("train", 4),
    ("store", 4),
    ("evaluate", 5),
    ("gpu-check", 5),
    ("bench", 5),
];

#[test]
fn crates_depend_only_on_their_floor_or_below() {
    let root = repo_root();
    let floor = |c: &str| FLOORS.iter().find(|(n, _)| *n == c).map(|(_, f)| *f);
    let mut wrong = Vec::new();
    for e in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let mine = floor(&name).unwrap_or_else(|| panic!("crates/{name} has no floor in ARCHITECTURE.md (add it to FLOORS here and to the map)"));
        let manifest: toml::Table = std::fs::read_to_string(e.path().join("Cargo.toml")).unwrap().parse().unwrap();
        let deps = manifest.get("dependencies").and_then(|d| d.as_table()).cloned().unwrap_or_default();
        for dep in deps.keys().filter_map(|d| d.strip_prefix("gauge-")) {
            let theirs = floor(dep).unwrap_or_else(|| panic!("{dep}: unknown crate"));
            // Nothing uses the orchestration floor; models and logic use only the floors below
            // and, sideways, only what the map names (the generator fronts the decoder and the
            // endpoint client). Stages stand side by side: one uses another's library only where the map says —
            // the engine is the query-time library (over `index` and `rerank`), which `answer`,
            // `synth` and `train` open; `answer` also names the index's types.
            let sideways_stage = mine == 4 && theirs == 4 && !matches!((name.as_str(), dep), ("engine", "index" | "rerank") | ("answer" | "synth" | "train", "engine") | ("answer", "index"));
            if theirs > mine || sideways_stage || (mine == 3 && theirs == 3 && !matches!((name.as_str(), dep), ("generator", "decoder" | "chat-client"))) {
                wrong.push(format!("{name} (floor {mine}) depends on {dep} (floor {theirs})"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_main_is_one_library_call() {
    let root = repo_root();
    let mut long = Vec::new();
    for e in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let mut mains = vec![e.path().join("src/main.rs")];
        if let Ok(bins) = std::fs::read_dir(e.path().join("src/bin")) {
            mains.extend(bins.flatten().map(|b| b.path()));
        }
        for m in mains.into_iter().filter(|m| m.exists()) {
            let code = std::fs::read_to_string(&m).unwrap();
            let lines = code.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//")).count();
            if lines > 6 {
                long.push(format!("{}: {lines} lines of code", m.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(long.is_empty(), "a binary's main is argument parsing and one library call:\n{}", long.join("\n"));
}
