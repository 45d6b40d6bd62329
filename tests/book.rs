//! The front door and the book, as a new user meets them:
//! - README.md stays a front door (at most 200 lines) and every relative link in it, in
//!   ARCHITECTURE.md and in the book (`docs/src`) names a file that exists, with its `#anchor`
//!   a heading of that page (no network: external links are not followed);
//! - every book page is in `SUMMARY.md` and every `SUMMARY.md` entry exists;
//! - the tutorial "Your own corpus in five minutes" works as written: its `sh` blocks, run in
//!   order from the checkout's root (artifacts and eval folders sent to a temporary folder
//!   through `GAUGE_ARTIFACTS` / `GAUGE_EVAL_DIR`), evaluate its three Markdown files and five
//!   questions.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use gauge::{repo_root, without_cargo_test_env};
use gauge_core::table::{read_parquet_any, Columns};

/// The Markdown files the checks cover: README, ARCHITECTURE and every book page.
fn pages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut out = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut stack = vec![root.join("docs/src")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The text outside fenced code blocks and inline code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if !fence {
            // Inline code: drop what lies between backticks.
            out.extend(line.split('`').step_by(2).flat_map(|s| [s, " "]));
            out.push('\n');
        }
    }
    out
}

/// Every `](target)` link target of a page's prose.
fn links(text: &str) -> Vec<String> {
    let text = prose(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].trim().to_string());
        }
    }
    out
}

/// GitHub's and mdBook's anchor of a heading: lower case, spaces to `-`, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading.trim().to_lowercase().chars().filter_map(|c| if c.is_alphanumeric() || c == '-' || c == '_' { Some(c) } else if c == ' ' { Some('-') } else { None }).collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut fence = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn the_readme_is_a_front_door_and_every_link_resolves() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let n = readme.lines().count();
    assert!(n <= 200, "README.md has {n} lines; the front door stays at most 200 (the reference lives in docs/src)");
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, frag) = target.split_once('#').map_or((target.as_str(), None), |(p, f)| (p, Some(f)));
            let file = if path.is_empty() { page.clone() } else { page.parent().unwrap().join(path) };
            checked += 1;
            if !file.exists() {
                broken.push(format!("{}: `{target}`: no such file", page.strip_prefix(&root).unwrap().display()));
                continue;
            }
            if let Some(frag) = frag.filter(|_| file.extension().is_some_and(|x| x == "md")) {
                if !anchors(&std::fs::read_to_string(&file).unwrap()).contains(frag) {
                    broken.push(format!("{}: `{target}`: no heading with that anchor", page.strip_prefix(&root).unwrap().display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{} broken links:\n{}", broken.len(), broken.join("\n"));
    assert!(checked > 100, "only {checked} links checked");
}

#[test]
fn every_book_page_is_in_the_summary() {
    let src = repo_root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&summary).into_iter().map(|l| src.join(l)).collect();
    for page in &listed {
        assert!(page.exists(), "SUMMARY.md lists {} which does not exist", page.display());
    }
    for page in pages().into_iter().filter(|p| p.starts_with(&src) && !p.ends_with("SUMMARY.md")) {
        assert!(listed.contains(&page), "{} is not in docs/src/SUMMARY.md (mdBook would not build it)", page.display());
    }
}

#[test]
fn a_link_check_catches_a_broken_link() {
    // The checker itself: a missing file and a missing anchor are seen, code is not read.
    let page = "see [a](x.md), [b](#there) and `[c](nowhere.md)`\n```\n[d](gone.md)\n```\n# There\n";
    assert_eq!(links(page), ["x.md", "#there"]);
    assert!(anchors(page).contains("there"));
    assert_eq!(anchor("`evaluate` and `just ablate`: golden set"), "evaluate-and-just-ablate-golden-set");
}

/// Removes the tutorial's folder when the test ends, also when it fails.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `sh` blocks of a Markdown page, in order.
fn sh_blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                out.push(std::mem::take(block));
                current = None;
            }
            (Some(block), l) => {
                block.push_str(l);
                block.push('\n');
            }
            _ => {}
        }
    }
    out
}

#[test]
fn the_your_own_corpus_tutorial_works_as_written() {
    let root = repo_root();
    let page = std::fs::read_to_string(root.join("docs/src/tutorial/your-corpus.md")).unwrap();
    let blocks = sh_blocks(&page);
    assert_eq!(blocks.len(), 3, "the tutorial's three steps");
    // The README's short version is the same study: its pipeline and its command are the
    // tutorial's, so running the tutorial runs the README's section too.
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = &readme[readme.find("## Your own corpus").expect("the README's own-corpus section")..];
    let toml_start = section.find("```toml\n").expect("the README's pipeline") + "```toml\n".len();
    let pipeline: String = section[toml_start..toml_start + section[toml_start..].find("```").unwrap()].lines().map(|l| format!("{}\n", l.trim_start())).collect();
    assert!(blocks[2].contains(pipeline.trim_end()), "the README's pipeline differs from the tutorial's:\n{pipeline}");
    assert!(section.contains("./just.sh ablate data/my-study/my-study.toml") && blocks[2].contains("./just.sh ablate data/my-study/my-study.toml"));
    let study = root.join("data/my-study");
    assert!(!study.exists(), "{} exists: the tutorial test writes there; move it away", study.display());
    let _cleanup = Cleanup(study.clone());
    let tmp = tempfile::tempdir().unwrap();
    // The tutorial's `./just.sh ablate` builds gauge: as a user's shell would, without cargo test's variables.
    let out = without_cargo_test_env(Command::new("bash"))
        .args(["-euo", "pipefail", "-c", &blocks.concat()])
        .current_dir(&root)
        .env("GAUGE_ARTIFACTS", tmp.path().join("artifacts"))
        .env("GAUGE_EVAL_DIR", tmp.path().join("eval"))
        .output()
        .unwrap();
    assert!(out.status.success(), "the tutorial's commands failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let ev = tmp.path().join("eval/my-study");
    let table = std::fs::read_to_string(ev.join("ablation.md")).unwrap();
    for config in ["Vector", "BM25", "Hybrid RRF"] {
        assert!(table.contains(&format!("| {config} |")), "ablation.md has no row for {config}:\n{table}");
    }
    let pq = read_parquet_any(&ev.join("per_query.parquet")).unwrap();
    assert_eq!(pq.num_rows(), 15, "3 configs × 5 questions");
    let c = Columns::new(&pq);
    let (config, hit3) = (c.strings_required("config"), c.f64s("hit_3"));
    // Each question's answer is in one of three short files and k = 3: every config finds it.
    for i in 0..pq.num_rows() {
        assert_eq!(hit3[i], Some(1.0), "{} misses a question of the tutorial", config[i]);
    }
    assert!(Path::new(&ev.join("trec/items.qrels")).exists());
}
