//! `extract` and `chunk` over the real FRA corpus in ../shared/corpora/fra.
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use gauge::{last_line, ok, run, shared};
use gauge_core::schema::{read_chunks, read_pages, PageRecord, PAGE_SEPARATOR};
use gauge_core::Manifest;

const HAZMAT: &str = "FRA-Hazardous_Materials_Compliance_Manual_01.07.25.pdf";
const SIGNAL: &str = "FRA-Signal_Train_Control-2012.pdf";
const HRGC: &str = "FRA-HRGC-Compliance Manual 11-8-19 Final.pdf";

fn doc_texts(pages: &[PageRecord]) -> BTreeMap<String, String> {
    let mut by_doc: BTreeMap<String, Vec<&PageRecord>> = BTreeMap::new();
    for p in pages {
        by_doc.entry(p.doc_id.clone()).or_default().push(p);
    }
    by_doc
        .into_iter()
        .map(|(id, mut ps)| {
            ps.sort_by_key(|p| p.page);
            (id, ps.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join(PAGE_SEPARATOR))
        })
        .collect()
}

#[test]
fn extract_and_chunk_the_fra_manuals() {
    let corpus = shared().join("corpora/fra");
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("artifacts");
    let art_s = art.to_str().unwrap();

    let out = ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", art_s]));
    let pages_dir = last_line(&out);
    let pages = read_pages(&Path::new(&pages_dir).join("pages.parquet")).unwrap();
    assert_eq!(pages.len(), 648);

    // Exactly the scanned Signal pages and the blank HRGC pages are empty.
    let empty: HashSet<(String, i32)> = pages.iter().filter(|p| p.empty).map(|p| (p.source.clone(), p.page)).collect();
    let mut expected: HashSet<(String, i32)> = [440, 442, 443, 444, 445, 446, 447, 448, 449].iter().map(|&p| (SIGNAL.to_string(), p)).collect();
    expected.insert((HRGC.to_string(), 108));
    expected.insert((HRGC.to_string(), 114));
    assert_eq!(empty, expected);

    // Page numbers are 1-based file pages.
    let hazmat: Vec<&PageRecord> = pages.iter().filter(|p| p.source == HAZMAT).collect();
    assert_eq!(hazmat.len(), 43);
    let p35 = hazmat.iter().find(|p| p.page == 35).unwrap();
    assert!(p35.text.contains("11.2.2") && p35.text.contains("COFC/TOFC Approval"), "{}", p35.text);
    assert!(p35.text.contains("11.2.2 COFC/TOFC Approval"));

    // Running header removed from the edges of every HazMat page but the cover.
    for p in hazmat.iter().filter(|p| p.page > 1) {
        let first = p.text.lines().next().unwrap_or_default();
        assert_ne!(first, "HAZARDOUS MATERIALS COMPLIANCE MANUAL", "page {}", p.page);
    }

    // Defect codes and their descriptions share a line.
    let signal_text: String = pages.iter().filter(|p| p.source == SIGNAL).map(|p| p.text.as_str()).collect::<Vec<_>>().join("\n");
    assert!(signal_text.lines().any(|l| l.starts_with("234.219.A1 Gate arm light burned out or missing")));
    let code_line = regex::Regex::new(r"^(?:§ )?(\d{3}\.\d+\.[A-Z]\d+) \S").unwrap();
    let codes: HashSet<&str> =
        signal_text.lines().filter_map(|l| code_line.captures(l).map(|c| c.get(1).unwrap().as_str())).collect();
    assert!(codes.len() >= 649, "{} defect codes with their description on the same line", codes.len());

    // Compounds split at a line end keep their hyphen.
    let all: String = pages.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join("\n");
    assert!(all.contains("highway-rail"));
    assert!(!all.to_lowercase().contains("highwayrail"));
    let manifest = Manifest::read(Path::new(&pages_dir)).unwrap();
    assert_eq!(manifest.stats["hyphen_splits_joined"], 0);
    assert!(manifest.stats["hyphen_compounds_kept"].as_u64().unwrap() > 100);
    assert_eq!(manifest.inputs.len(), 4);
    assert_eq!(manifest.inputs.iter().map(|i| i.rows.unwrap()).sum::<u64>(), 648);

    // Second run: cache hit, same directory, nothing rewritten.
    let before = std::fs::metadata(Path::new(&pages_dir).join("manifest.json")).unwrap().modified().unwrap();
    let again = ok(run("extract", &[corpus.to_str().unwrap(), "--artifacts", art_s]));
    assert_eq!(last_line(&again), pages_dir);
    assert!(String::from_utf8_lossy(&again.stderr).contains("cache hit"));
    assert_eq!(std::fs::metadata(Path::new(&pages_dir).join("manifest.json")).unwrap().modified().unwrap(), before);

    // Chunking: both strategies run, chunks are exact slices of the document text.
    let docs = doc_texts(&pages);
    for args in [&["--strategy", "recursive", "--size", "1000", "--overlap", "150"][..], &["--strategy", "section"][..]] {
        let mut full = vec![pages_dir.as_str(), "--artifacts", art_s];
        full.extend_from_slice(args);
        let out = ok(run("chunk", &full));
        let dir = last_line(&out);
        let chunks = read_chunks(&Path::new(&dir).join("chunks.parquet")).unwrap();
        assert!(chunks.len() > 1000, "{args:?}: {} chunks", chunks.len());
        for c in &chunks {
            let text = &docs[&c.doc_id];
            let slice: String = text.chars().skip(c.char_start as usize).take((c.char_end - c.char_start) as usize).collect();
            assert_eq!(slice, c.text, "{args:?} chunk {}", c.chunk_id);
            assert!(c.page_start <= c.page_end && c.page_start >= 1);
            assert!(c.text.chars().count() >= 100);
        }
        let ids: HashSet<&str> = chunks.iter().map(|c| c.chunk_id.as_str()).collect();
        assert_eq!(ids.len(), chunks.len());
        // The HazMat page-35 content lands in a chunk that says it comes from page 35.
        assert!(chunks.iter().any(|c| c.source == HAZMAT && c.page_start <= 35 && c.page_end >= 35 && c.text.contains("COFC/TOFC Approval")));
        let again = ok(run("chunk", &full));
        assert_eq!(last_line(&again), dir);
        assert!(String::from_utf8_lossy(&again.stderr).contains("cache hit"));
        if args[1] == "section" {
            assert!(chunks.iter().any(|c| c.source == HAZMAT && c.section.ends_with("11.2.2 COFC/TOFC Approval")));
        }
    }
}
