//! The README's "How fast" table, generated from the harness's bench files.
//!
//! Every row is one ratio of one comparison that a bench plan put in its `readme` list: gauge's
//! median with its range, the reference's, the median per-pair ratio with its range, and the
//! file with the CPU and date of its run. The table lives between `<!-- bench-table:begin -->`
//! and `<!-- bench-table:end -->`; `gauge-bench readme` rewrites it and a test fails when it
//! is not what the files say, or when it cites a file whose measured sources changed since.

use std::path::Path;

use serde_json::Value;

use crate::{BenchError, Result};

/// The marker before the table.
pub const BEGIN: &str = "<!-- bench-table:begin -->";
/// The marker after the table.
pub const END: &str = "<!-- bench-table:end -->";

/// The order of benches in the table (others follow by name).
const ORDER: [&str; 6] = ["generate", "train", "train-encoder", "embed", "query", "rerank"];

/// A figure as the table prints it: three significant digits, thousands separated.
pub fn number(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        let n = x.round() as i64;
        let digits = n.abs().to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 {
            format!("-{out}")
        } else {
            out
        }
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn range(s: &Value, unit: &str) -> String {
    let f = |k: &str| s[k].as_f64().unwrap_or(f64::NAN);
    format!("{} {unit} ({}–{})", number(f("median")), number(f("min")), number(f("max")))
}

/// The table's markdown from the bench files under `root/bench`.
pub fn generate(root: &Path) -> Result<String> {
    let mut files: Vec<(usize, String, Value)> = Vec::new();
    for (file, _) in crate::sources::stamped_files(root)? {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(root.join(&file)).map_err(|e| BenchError::io(root.join(&file), e))?).map_err(|e| BenchError::Invalid(format!("{file}: {e}")))?;
        if v.get("harness").is_none() || !matches!(v["readme"].as_array(), Some(r) if !r.is_empty()) {
            continue;
        }
        let bench = v["bench"].as_str().unwrap_or("").to_string();
        let rank = ORDER.iter().position(|b| *b == bench).unwrap_or(ORDER.len());
        files.push((rank, file, v));
    }
    files.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut out = String::from("| what | gauge | reference | ratio gauge / reference | run |\n|---|---:|---:|---:|---|\n");
    for (_, file, v) in &files {
        let pairs = v["harness"]["pairs"].as_u64().unwrap_or(0);
        let cpu = v["machine"]["before"]["cpu_model"].as_str().unwrap_or("?");
        let date = v["machine"]["before"]["at"].as_str().unwrap_or("?").get(..10).unwrap_or("?");
        for row in v["readme"].as_array().into_iter().flatten() {
            let (cname, rname) = (row["comparison"].as_str().unwrap_or(""), row["ratio"].as_str().unwrap_or(""));
            let c = v["comparisons"].as_array().into_iter().flatten().find(|c| c["name"] == cname).ok_or_else(|| BenchError::Invalid(format!("{file}: readme row names comparison `{cname}`, which the file lacks")))?;
            let r = c["ratios"].as_array().into_iter().flatten().find(|r| r["name"] == rname).ok_or_else(|| BenchError::Invalid(format!("{file}: comparison `{cname}` has no ratio `{rname}`")))?;
            let unit = r["unit"].as_str().unwrap_or("");
            // The comparison's own reference name where it has one (older files: the plan's).
            let name = c["reference"]["name"].as_str().or(v["reference"].as_str()).unwrap_or("?");
            let denominator = match r["reference_comparison"].as_str() {
                Some(other) => format!("{name} ({other})"),
                None => name.to_string(),
            };
            let ratio = &r["ratio"];
            let better = if r["better"] == "lower" { ", lower is better" } else { "" };
            out.push_str(&format!(
                "| {} | {} | {}: {} | **{}×** ({}–{}, {pairs} pairs{better}) | [{}]({file}), {cpu}, {date} |\n",
                row["what"].as_str().unwrap_or("?"),
                range(&r["gauge"], unit),
                denominator,
                range(&r["reference"], unit),
                number(ratio["median"].as_f64().unwrap_or(f64::NAN)),
                number(ratio["min"].as_f64().unwrap_or(f64::NAN)),
                number(ratio["max"].as_f64().unwrap_or(f64::NAN)),
                file.trim_start_matches("bench/"),
            ));
        }
    }
    Ok(out)
}

/// The marker before a page's full table of one bench file (`<!-- bench-file:begin FILE -->`).
pub const FILE_BEGIN: &str = "<!-- bench-file:begin ";
/// The marker after it.
pub const FILE_END: &str = "<!-- bench-file:end -->";

/// Every comparison and ratio of one harness bench file as a markdown table, headed by the
/// run's machine, sources and pairs.
pub fn file_table(root: &Path, file: &str) -> Result<String> {
    let path = root.join(file);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).map_err(|e| BenchError::io(&path, e))?).map_err(|e| BenchError::Invalid(format!("{file}: {e}")))?;
    if v.get("harness").is_none() {
        return Err(BenchError::Invalid(format!("{file}: not a harness bench file (no `harness`)")));
    }
    let m = &v["machine"];
    let load = |s: &Value| s["load_average"].as_array().map(|a| a.iter().map(|x| x.as_f64().map_or("?".into(), |x| format!("{x:.2}"))).collect::<Vec<_>>().join(" ")).unwrap_or_default();
    let mut out = format!(
        "Run of {} on {} ({} cores; {}; governor {}), read bandwidth {:.1} GB/s, load average {} before and {} after; commit {}{}; {} A/B pairs per comparison.\n\n",
        m["before"]["at"].as_str().unwrap_or("?"),
        m["before"]["cpu_model"].as_str().unwrap_or("?"),
        m["before"]["cores"],
        m["before"]["cpu_flags"].as_array().map(|f| f.iter().filter_map(|x| x.as_str()).filter(|x| x.starts_with("avx") || x.starts_with("amx")).collect::<Vec<_>>().join(" ")).unwrap_or_default(),
        m["before"]["governor"].as_str().unwrap_or("not readable"),
        m["limits"]["read_bandwidth_bytes_per_s"].as_f64().unwrap_or(f64::NAN) / 1e9,
        load(&m["before"]),
        load(&m["after"]),
        v["sources"]["commit"].as_str().map(|c| &c[..c.len().min(10)]).unwrap_or("?"),
        if v["sources"]["dirty"].as_bool() == Some(true) { " (with uncommitted changes to the measured sources)" } else { "" },
        v["harness"]["pairs"],
    );
    out.push_str("| comparison | figure | gauge | reference | ratio gauge / reference |\n|---|---|---:|---:|---:|\n");
    let bandwidth = m["limits"]["read_bandwidth_bytes_per_s"].as_f64().unwrap_or(f64::NAN);
    for c in v["comparisons"].as_array().into_iter().flatten() {
        // Single-stream decoding reads every weight once per token: its share of the measured
        // read bandwidth, when the gauge side printed its bytes per token.
        let bytes = c["gauge"]["figures"]["weight_bytes_read_per_token"]["median"].as_f64();
        for r in c["ratios"].as_array().into_iter().flatten() {
            let unit = r["unit"].as_str().unwrap_or("");
            // The comparison's own reference (when it is not the file's), and where its figure came from.
            let own = c["reference"]["name"].as_str().filter(|n| Some(*n) != v["reference"].as_str());
            let denominator = match (own, r["reference_comparison"].as_str()) {
                (Some(n), Some(o)) => format!(" ({n}, {o})"),
                (Some(n), None) => format!(" ({n})"),
                (None, Some(o)) => format!(" ({o})"),
                (None, None) => String::new(),
            };
            let share = |s: &Value| match bytes.filter(|_| r["gauge_figure"] == "decode_tokens_per_s" && bandwidth.is_finite()) {
                Some(b) => format!(", {:.0} % of the read bandwidth", s["median"].as_f64().unwrap_or(f64::NAN) * b / bandwidth * 100.0),
                None => String::new(),
            };
            let ratio = &r["ratio"];
            out.push_str(&format!(
                "| {} | {} | {}{} | {}{}{} | **{}×** ({}–{}){} |\n",
                c["name"].as_str().unwrap_or("?"),
                r["name"].as_str().unwrap_or("?"),
                range(&r["gauge"], unit),
                share(&r["gauge"]),
                range(&r["reference"], unit),
                share(&r["reference"]),
                denominator,
                number(ratio["median"].as_f64().unwrap_or(f64::NAN)),
                number(ratio["min"].as_f64().unwrap_or(f64::NAN)),
                number(ratio["max"].as_f64().unwrap_or(f64::NAN)),
                if r["better"] == "lower" { ", lower is better" } else { "" },
            ));
        }
    }
    Ok(out)
}

/// `text` with every `<!-- bench-file:begin FILE -->` region refilled from its file.
pub fn splice_files(root: &Path, text: &str) -> Result<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(FILE_BEGIN) {
        let after = &rest[at + FILE_BEGIN.len()..];
        let (file, tail) = after.split_once(" -->").ok_or_else(|| BenchError::Invalid(format!("an unclosed `{FILE_BEGIN}` marker")))?;
        let (_, tail) = tail.split_once(FILE_END).ok_or_else(|| BenchError::Invalid(format!("no `{FILE_END}` after `{FILE_BEGIN}{file} -->`")))?;
        out.push_str(&rest[..at]);
        out.push_str(&format!("{FILE_BEGIN}{file} -->\n{}{FILE_END}", file_table(root, file.trim())?));
        rest = tail;
    }
    out.push_str(rest);
    Ok(out)
}

/// The book pages that hold `<!-- bench-file:begin … -->` regions (docs/src/performance/).
pub fn pages_with_files(root: &Path) -> Result<Vec<std::path::PathBuf>> {
    let dir = root.join("docs/src/performance");
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "md") && std::fs::read_to_string(&p).map_err(|e| BenchError::io(&p, e))?.contains(FILE_BEGIN) {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `text` with the table between the markers replaced by `table`.
pub fn splice(text: &str, table: &str) -> Result<String> {
    let (head, rest) = text.split_once(BEGIN).ok_or_else(|| BenchError::Invalid(format!("no `{BEGIN}` marker")))?;
    let (_, tail) = rest.split_once(END).ok_or_else(|| BenchError::Invalid(format!("no `{END}` marker after `{BEGIN}`")))?;
    Ok(format!("{head}{BEGIN}\n{table}{END}{tail}"))
}

/// The bench files the table between the markers links to.
pub fn cited(text: &str) -> Vec<String> {
    let Some((_, rest)) = text.split_once(BEGIN) else { return Vec::new() };
    let region = rest.split_once(END).map_or(rest, |(r, _)| r);
    let mut out: Vec<String> = region.split("](").skip(1).filter_map(|s| s.split_once(')')).map(|(p, _)| p.to_string()).filter(|p| p.starts_with("bench/")).collect();
    out.sort();
    out.dedup();
    out
}

/// Checks `root/README.md`: the table is what the files say and cites no stale file.
pub fn check(root: &Path) -> Result<()> {
    let readme = root.join("README.md");
    let text = std::fs::read_to_string(&readme).map_err(|e| BenchError::io(&readme, e))?;
    let want = splice(&text, &generate(root)?)?;
    if want != text {
        return Err(BenchError::Invalid("README.md: the speed table differs from the bench files (run `just bench-table`, or `gauge-bench readme`)".into()));
    }
    let mut cited_files = cited(&text);
    for page in pages_with_files(root)? {
        let text = std::fs::read_to_string(&page).map_err(|e| BenchError::io(&page, e))?;
        if splice_files(root, &text)? != text {
            return Err(BenchError::Invalid(format!("{}: a bench-file table differs from its file (run `just bench-table`)", page.display())));
        }
        cited_files.extend(text.split(FILE_BEGIN).skip(1).filter_map(|s| s.split_once(" -->")).map(|(f, _)| f.trim().to_string()));
    }
    let stale = crate::sources::stale(root)?;
    let bad: Vec<String> = cited_files.into_iter().filter_map(|f| stale.iter().find(|s| s.file == f).map(|s| format!("{f}: {}", s.why))).collect();
    if !bad.is_empty() {
        return Err(BenchError::Invalid(format!("README.md cites stale bench files (rerun their recipes): {}", bad.join("; "))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(number(1234.4), "1,234");
        assert_eq!(number(152.6), "153");
        assert_eq!(number(21.34), "21.3");
        assert_eq!(number(1.2345), "1.23");
        assert_eq!(number(-1500.0), "-1,500");
    }

    #[test]
    fn the_table_is_generated_checked_and_fails_on_an_edited_figure_or_a_stale_file() {
        let root = crate::sources::tests::toy_root();
        let log = root.path().join("log");
        let side = |v: &str| crate::plan::Command { argv: vec!["sh".into(), "-c".into(), format!("echo x >> {}; echo '{{\"figures\": {{\"tps\": {v}}}}}'", log.display())], format: crate::side::Format::Figures, env: Default::default() };
        let plan = crate::plan::Plan {
            bench: "generate".into(),
            title: "t".into(),
            pairs: 5,
            measures: crate::plan::Measures { crates: vec!["gauge-b".into()], paths: vec![] },
            reference: "llama.cpp".into(),
            describe: vec![],
            notes: vec![],
            comparisons: vec![crate::plan::Comparison { name: "decode".into(), gauge: side("150"), reference: side("120"), reference_name: None, ratios: vec![crate::plan::RatioSpec { name: "decode".into(), gauge: "tps".into(), reference: "tps".into(), reference_comparison: None, better: crate::plan::Better::Higher, unit: "tok/s".into() }], equal: vec![] }],
            readme: vec![crate::plan::ReadmeRow { what: "decoding".into(), comparison: "decode".into(), ratio: "decode".into() }],
        };
        crate::plan::run_to(&plan, root.path(), &root.path().join("bench/generate.json")).unwrap();
        let table = generate(root.path()).unwrap();
        assert!(table.contains("| decoding | 150 tok/s (150–150) | llama.cpp: 120 tok/s (120–120) | **1.25×** (1.25–1.25, 5 pairs) | [generate.json](bench/generate.json)"), "{table}");
        std::fs::write(root.path().join("README.md"), format!("# x\n{BEGIN}\nold\n{END}\nafter\n")).unwrap();
        assert!(check(root.path()).unwrap_err().to_string().contains("differs"));
        let fixed = splice(&std::fs::read_to_string(root.path().join("README.md")).unwrap(), &table).unwrap();
        std::fs::write(root.path().join("README.md"), &fixed).unwrap();
        check(root.path()).unwrap();
        assert_eq!(cited(&fixed), vec!["bench/generate.json"]);
        // A book page's full table of the file: refilled, checked, an edit fails.
        let page_dir = root.path().join("docs/src/performance");
        std::fs::create_dir_all(&page_dir).unwrap();
        let page = format!("# p\n{FILE_BEGIN}bench/generate.json -->\n{FILE_END}\ntext\n");
        let filled = splice_files(root.path(), &page).unwrap();
        assert!(filled.contains("| decode | decode | 150 tok/s (150–150) | 120 tok/s (120–120) | **1.25×** (1.25–1.25) |"), "{filled}");
        std::fs::write(page_dir.join("generation.md"), filled.replace("**1.25×** (1.25", "**1.26×** (1.25")).unwrap();
        assert!(check(root.path()).unwrap_err().to_string().contains("generation.md"));
        std::fs::write(page_dir.join("generation.md"), &filled).unwrap();
        check(root.path()).unwrap();
        // An edited figure fails.
        std::fs::write(root.path().join("README.md"), fixed.replace("**1.25×**", "**1.35×**")).unwrap();
        assert!(check(root.path()).is_err());
        // A measured crate touched: the cited file is stale.
        std::fs::write(root.path().join("README.md"), &fixed).unwrap();
        std::fs::write(root.path().join("crates/c/src/lib.rs"), "// touched\n").unwrap();
        let e = check(root.path()).unwrap_err().to_string();
        assert!(e.contains("stale") && e.contains("bench/generate.json"), "{e}");
    }
}
