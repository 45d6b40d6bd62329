//! `eval/<name>/report.html`: every committed evaluation folder has the page the code renders
//! from its files (byte for byte), `evaluate --report-only` rewrites it, bad input is refused
//! in one line, and eval/fra's page works in headless Chromium (Debian's `chromium`, which
//! `just test` installs): one table row per config, `#sort=mrr@10` reorders it best first, a
//! question's drill-down opens with its gold passages highlighted, no console error, and a
//! screenshot of the page is written.
use std::path::{Path, PathBuf};
use std::process::Command;

use gauge::{bin, repo_root};
use gauge_core::table::{read_parquet_any, Columns};

/// The committed evaluation folders (a `manifest.json` of stage `evaluate`).
fn evaluation_folders(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root.join("eval"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|d| {
            let m = std::fs::read_to_string(d.join("manifest.json")).unwrap_or_default();
            serde_json::from_str::<serde_json::Value>(&m).is_ok_and(|v| v["stage"] == "evaluate")
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_committed_evaluation_has_the_report_its_files_render() {
    let root = repo_root();
    let folders = evaluation_folders(&root);
    assert!(folders.len() >= 10, "found only {} evaluation folders", folders.len());
    let mut stale = Vec::new();
    for dir in &folders {
        let rel = dir.strip_prefix(&root).unwrap();
        let want = gauge_evaluate::report_page::render(dir, &root).unwrap_or_else(|e| panic!("{}: {e:#}", rel.display()));
        match std::fs::read_to_string(dir.join("report.html")) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("{} (differs)", rel.display())),
            Err(_) => stale.push(format!("{} (missing)", rel.display())),
        }
    }
    assert!(stale.is_empty(), "report.html is not what the code renders for: {}; run `just reports` (evaluate --report-only DIR for each)", stale.join(", "));
}

/// eval/fra-llm retrieves RAPTOR summaries whose source joins several PDFs (`a.pdf; b.pdf`): the
/// page still finds the corpus, lists and links each PDF once, and names a summary by its files'
/// short names (`S1+S3`) with no page link (a summary has no one page to open).
#[test]
fn summaries_over_several_files_keep_the_corpus_links() {
    let page = std::fs::read_to_string(repo_root().join("eval/fra-llm/report.html")).unwrap();
    let list = page.split("<p class=\"sources\">").nth(1).and_then(|r| r.split("</p>").next()).expect("a source list");
    let entries: Vec<&str> = list.split("<span>").skip(1).collect();
    assert_eq!(entries.len(), 4, "one entry per PDF of the corpus: {list}");
    for e in &entries {
        assert!(e.contains("<a id=\"src-S") && e.contains(".pdf\">") && !e.contains("; "), "a linked single file: {e}");
    }
    let joined = regex::Regex::new(r#"<a( class="hit")?( data-t="\d+" data-s="[^"]*")?>\d+ S\d+(\+S\d+)+ pp?\. "#).unwrap();
    assert!(joined.is_match(&page), "a summary chip named S1+S2 …");
    assert!(!regex::Regex::new(r#"href="[^"]*; [^"]*""#).unwrap().is_match(&page), "no link to a joined name");
    assert!(page.contains("#page="), "single-file passages link to their page");
}

#[test]
fn report_only_rewrites_the_page_and_refuses_a_folder_that_is_not_an_evaluation() {
    let root = repo_root();
    let tmp = tempfile::tempdir().unwrap();
    // A copy of eval/fra beside the repository's eval folders keeps its links' depth.
    let dir = tmp.path().join("fra");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["manifest.json", "metrics.parquet", "per_query.parquet", "runs.parquet", "failures.parquet", "ablation.md"] {
        std::fs::copy(root.join("eval/fra").join(f), dir.join(f)).unwrap();
    }
    let out = Command::new(bin("evaluate")).current_dir(&root).arg("--report-only").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains("id=\"config-table\"") && page.contains("<svg"), "not a report page");
    // (Passage texts may quote a web address; no attribute or style loads one.)
    assert!(!["src=\"http", "href=\"http", "url(http", "<script src", "@import"].iter().any(|n| page.contains(n)), "the page reaches outside itself");
    // The same files render the same bytes wherever the folder is (the corpus links aside).
    let again = Command::new(bin("evaluate")).current_dir(&root).arg("--report-only").arg(&dir).output().unwrap();
    assert!(again.status.success());
    assert_eq!(std::fs::read_to_string(dir.join("report.html")).unwrap(), page, "a second rendering differs");
    // No leftover temporary.
    assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains("partial")));

    // The golden set is there unchanged: the evaluated questions are recorded beside the page.
    let recorded = std::fs::read(dir.join("questions.parquet")).expect("questions.parquet written");
    let batch = read_parquet_any(&dir.join("questions.parquet")).unwrap();
    assert_eq!(batch.num_rows(), 41, "one row per evaluated dev question");
    let c = Columns::new(&batch);
    let first = c.strings_required("qid").iter().position(|q| q == "fra-1").expect("fra-1 recorded");
    let text = c.strings_required("question")[first].clone();
    assert!(text.starts_with("A tourist operation"), "{text}");
    // Its gold passages as the golden set names them.
    let golden = std::fs::read_to_string(root.join("../shared/golden/fra-dev.jsonl")).unwrap();
    let fra1: serde_json::Value = serde_json::from_str(golden.lines().next().unwrap()).unwrap();
    let want: Vec<String> = fra1["gold"].as_array().unwrap().iter().map(|g| format!("{} p. {}", g["source"].as_str().unwrap(), g["page"])).collect();
    let gold = batch.column_by_name("gold").unwrap().as_any().downcast_ref::<arrow::array::ListArray>().unwrap().value(first);
    let gold: Vec<String> = gold.as_any().downcast_ref::<arrow::array::StringArray>().unwrap().iter().map(|s| s.unwrap().to_string()).collect();
    assert_eq!(gold, want);
    assert!(page.contains(&text[..40]), "the page shows the recorded question");
    // A golden set that changed since the run (or is not on this machine): the recorded
    // questions stay and the page still shows them.
    let manifest = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    for input in m["inputs"].as_array_mut().unwrap() {
        if input["name"] == "golden" {
            input["path"] = serde_json::json!("data/golden/not-on-this-machine.jsonl");
        }
    }
    std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let out = Command::new(bin("evaluate")).current_dir(&root).arg("--report-only").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(dir.join("questions.parquet")).unwrap(), recorded, "the recorded questions were rewritten without their golden set");
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains(&text[..40]), "without the golden set the page lost the question text");
    // Neither golden set nor record: the page is rendered without question text.
    std::fs::remove_file(dir.join("questions.parquet")).unwrap();
    let out = Command::new(bin("evaluate")).current_dir(&root).arg("--report-only").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!std::fs::read_to_string(dir.join("report.html")).unwrap().contains(&text[..40]));
    // A questions.parquet that is some other table: one line naming it…
    std::fs::copy(dir.join("metrics.parquet"), dir.join("questions.parquet")).unwrap();
    let out = Command::new(bin("evaluate")).current_dir(&root).arg("--report-only").arg(&dir).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("questions.parquet") && err.contains("not a questions table") && err.trim().lines().count() <= 2, "{err}");
    // …and rewritten where the golden set is.
    std::fs::write(dir.join("manifest.json"), &manifest).unwrap();
    let out = Command::new(bin("evaluate")).current_dir(&root).arg("--report-only").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(dir.join("questions.parquet")).unwrap(), recorded);

    // Not an evaluation folder: one line naming the file.
    let bad = tmp.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("manifest.json"), r#"{"stage": "embed"}"#).unwrap();
    let out = Command::new(bin("evaluate")).current_dir(&root).arg("--report-only").arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("manifest.json") && err.contains("not an evaluation manifest") && err.trim().lines().count() <= 2, "{err}");
    assert!(!bad.join("report.html").exists());
    let out = Command::new(bin("evaluate")).current_dir(&root).arg("--report-only").arg(tmp.path().join("missing")).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is ") && String::from_utf8_lossy(&out.stderr).contains("an evaluation folder?"));
}

/// Debian's Chromium binary.
fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in ["/usr/bin", "/usr/local/bin", "/snap/bin"] {
            let p = Path::new(dir).join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!("no chromium binary found: `just test` installs Debian's chromium (scripts/setup-system.sh); or apt-get install chromium");
}

/// The DOM after the page's scripts ran, and what the browser logged.
fn dump_dom(url: &str) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=2000"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string())
}

/// The config names of the config table's rows, in order.
fn table_rows(dom: &str) -> Vec<String> {
    let table = &dom[dom.find("id=\"config-table\"").expect("the config table")..];
    let body = &table[table.find("<tbody>").unwrap()..table.find("</tbody>").unwrap()];
    body.split("<tr>").skip(1).map(|row| {
        let cell = &row[row.find('>').unwrap() + 1..row.find("</td>").unwrap()];
        cell.split(" <span").next().unwrap().replace("&amp;", "&").trim().to_string()
    }).collect()
}

#[test]
fn the_fra_report_works_in_headless_chromium() {
    let root = repo_root();
    let page = root.join("eval/fra/report.html");
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    // One row per config, in metrics.parquet's order.
    let metrics = read_parquet_any(&root.join("eval/fra/metrics.parquet")).unwrap();
    let c = Columns::new(&metrics);
    let (config, metric, value) = (c.strings_required("config"), c.strings_required("metric"), c.f64s("value"));
    let mut configs: Vec<String> = Vec::new();
    let mut best = (String::new(), f64::NEG_INFINITY);
    for i in 0..metrics.num_rows() {
        if !configs.contains(&config[i]) {
            configs.push(config[i].clone());
        }
        if metric[i] == "mrr@10" && value[i].unwrap() > best.1 {
            best = (config[i].clone(), value[i].unwrap());
        }
    }
    let (dom, log) = dump_dom(&url);
    assert_eq!(table_rows(&dom), configs, "one row per config, baseline first");
    assert!(!log.contains("Uncaught") && !log.contains(":CONSOLE("), "the console logged: {log}");

    // Sorting by MRR@10 reorders the table, best first.
    let (sorted, log) = dump_dom(&format!("{url}#sort=mrr@10"));
    let rows = table_rows(&sorted);
    assert_eq!(rows[0], best.0, "sorted by MRR@10, the best config comes first");
    assert_ne!(rows, configs, "sorting changed the order");
    assert!(sorted.contains("data-k=\"mrr@10\" class=\"desc\""), "the sorted heading is marked");
    assert!(!log.contains("Uncaught") && !log.contains(":CONSOLE("), "the console logged: {log}");

    // A question's drill-down opens, with its gold passages highlighted.
    let (opened, _) = dump_dom(&format!("{url}#q=fra-1"));
    let at = opened.find("id=\"q-fra-1\"").expect("question fra-1's drill-down");
    let tag = &opened[opened[..at].rfind('<').unwrap()..at + opened[at..].find('>').unwrap()];
    assert!(tag.contains("open"), "the drill-down is open: {tag}");
    let details = &opened[at..at + opened[at..].find("</details>").unwrap()];
    assert!(details.contains("class=\"hit\"") && details.contains("#page="), "the gold passages are highlighted and linked");
    // The other passages carry no link in the file (it stays small); the script gives each
    // its source's page link.
    let file = std::fs::read_to_string(repo_root().join("eval/fra/report.html")).unwrap();
    let unlinked = regex::Regex::new(r#"<a( data-t="\d+" data-s="[^"]*")?>2 S"#).unwrap();
    assert!(unlinked.is_match(&file), "non-gold passages are written without a link");
    assert!(!details.contains("<a>") && details.matches(".pdf#page=").count() >= 10, "every passage is linked after the script ran");

    // A screenshot for the docs (`just report-screenshot` puts one in docs/src/images).
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-fra.png");
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1280,1400"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a screenshot of the page ({} bytes)", png.len());
}

/// eval/fra's page used by clicks, as a reader would (scripts/report_clicks.py: Selenium from
/// the references' venv driving Debian's chromium-driver): one click sorts a lower-is-better
/// column ascending and a metric best first, picking two configs shows exactly the questions
/// only the first finds (counted from the cells) with the same tally, a question id filters to
/// that question alone, "hide alike" hides the questions every config ranks alike, a click opens
/// a drill-down with linked passages, and the CSV button downloads the rows shown.
#[test]
fn the_fra_report_works_by_clicks() {
    let python = gauge::refs_python();
    let out = Command::new(&python).arg(repo_root().join("scripts/report_clicks.py")).arg(repo_root().join("eval/fra/report.html")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{} scripts/report_clicks.py (`just test` installs chromium-driver and Selenium):\n{text}", python.display());
    assert_eq!(text.matches("report-clicks: ok").count(), 8, "{text}");
}

/// Every results page of the book links the report page of each evaluation folder it cites.
#[test]
fn the_results_pages_link_their_reports() {
    let root = repo_root();
    let evaluations: Vec<String> = evaluation_folders(&root).iter().map(|d| d.file_name().unwrap().to_string_lossy().to_string()).collect();
    let cited = regex::Regex::new(r"eval/([A-Za-z0-9_.-]+)/").unwrap();
    let mut missing = Vec::new();
    let mut pages = 0;
    for entry in std::fs::read_dir(root.join("docs/src/results")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for name in cited.captures_iter(&text).map(|c| c[1].to_string()).filter(|n| evaluations.contains(n)) {
            pages += 1;
            if !text.contains(&format!("(../../../eval/{name}/report.html)")) {
                missing.push(format!("{} cites eval/{name}/ without linking its report.html", path.display()));
            }
        }
    }
    assert!(pages >= 10, "the results pages cite only {pages} evaluation folders");
    missing.dedup();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
