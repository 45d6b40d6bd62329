//! The README's speed table is what the harness's bench files say, and it cites no bench file
//! whose measured sources (the crates on its path, its example and script) changed since its
//! run. Stale files it does not cite are listed, not failed: rerun their recipes
//! (`just bench-stale` lists them). The harness's own tests break both on purpose (an edited
//! figure, a touched dependency: `crates/bench/src/table.rs`).

use gauge::repo_root;

#[test]
fn the_readme_speed_table_is_generated_from_current_bench_files() {
    let root = repo_root();
    for s in gauge_bench::sources::stale(&root).unwrap() {
        eprintln!("stale (not cited by the README): {}: {}", s.file, s.why);
    }
    let files = gauge_bench::sources::stamped_files(&root).unwrap();
    assert!(files.iter().any(|(f, _)| f == "bench/generate.json"), "bench/generate.json has no harness stamp: run `just bench-generate`");
    if let Err(e) = gauge_bench::table::check(&root) {
        panic!("{e}");
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(gauge_bench::table::cited(&readme).contains(&"bench/generate.json".to_string()), "the README's speed table cites bench/generate.json");
}
