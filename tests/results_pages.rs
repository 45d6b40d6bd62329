//! The results pages and the README's results table are tied to the tables they cite: every
//! metric figure (a number with two or three decimals, signed or not, outside code) in
//! `docs/src/results/*.md` and in the README above its quickstart must appear in a table of an
//! eval folder the page links (`eval/<name>`): in its `.md` files, or — for three-decimal
//! figures — among the numbers of its `manifest.json` (training losses). A figure written
//! with fewer decimals than the table's matches the table's value rounded half-up. Exempt:
//! numbers followed by a unit (`s`, `min`, `%`, `×`, `MiB` …), bounds (`<0.001`), and text
//! between `<!-- unchecked: REASON -->` and `<!-- /unchecked -->` (each exemption says why).

use std::collections::BTreeSet;
use std::path::Path;

use gauge::repo_root;

/// A figure: whether it was written `±x`, and its digits without sign (`0.133`).
type Figure = (bool, String);

fn figures(text: &str) -> Vec<(usize, String, Figure)> {
    let re = regex::Regex::new(r"[+−±-]?\d+\.\d{2,3}").unwrap();
    let mut out = Vec::new();
    for m in re.find_iter(text) {
        let before = text[..m.start()].chars().next_back().unwrap_or(' ');
        let after = text[m.end()..].chars().next().unwrap_or(' ');
        if before.is_alphanumeric() || ".<>".contains(before) || after.is_ascii_digit() {
            continue;
        }
        let s = m.as_str();
        let digits = s.trim_start_matches(['+', '−', '±', '-']).to_string();
        out.push((m.start(), s.to_string(), (s.starts_with('±'), digits)));
    }
    out
}

/// `text` with exempt regions (unchecked markers, code blocks and spans) blanked, offsets kept.
fn checked_text(text: &str) -> String {
    let blank = |re: &str, t: &str| regex::Regex::new(re).unwrap().replace_all(t, |c: &regex::Captures| " ".repeat(c[0].len())).to_string();
    let t = blank(r"(?s)<!-- unchecked: [^>-]*[^\s>-][^>]*-->.*?<!-- /unchecked -->", text);
    let t = blank(r"(?s)```.*?```", &t);
    blank(r"`[^`\n]*`", &t)
}

/// `digits` rounded half-up to `places` decimals, as a string (`0.295`, 2 → `0.30`).
fn round_half_up(digits: &str, places: usize) -> Option<String> {
    let (int, frac) = digits.split_once('.')?;
    if frac.len() <= places {
        return (frac.len() == places).then(|| digits.to_string());
    }
    let scale = 10u64.pow(frac.len() as u32);
    let value = int.parse::<u64>().ok()? * scale + frac.parse::<u64>().ok()?;
    let step = 10u64.pow((frac.len() - places) as u32);
    let rounded = (value + step / 2) / step;
    let p = 10u64.pow(places as u32);
    Some(format!("{}.{:0width$}", rounded / p, rounded % p, width = places))
}

fn matches(figure: &Figure, table: &BTreeSet<Figure>, json: &BTreeSet<String>) -> bool {
    let places = figure.1.split_once('.').map_or(0, |(_, f)| f.len());
    table.iter().any(|(pm, d)| *pm == figure.0 && round_half_up(d, places).as_deref() == Some(figure.1.as_str()))
        || (places == 3 && !figure.0 && json.iter().any(|d| round_half_up(d, 3).as_deref() == Some(figure.1.as_str())))
}

fn json_numbers(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap().abs();
            out.insert(format!("{x:.6}"));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| json_numbers(x, out)),
        serde_json::Value::Object(o) => o.values().for_each(|x| json_numbers(x, out)),
        _ => {}
    }
}

/// The figures of `text` that appear in no table of the eval folders it cites.
fn unsupported(root: &Path, text: &str) -> (Vec<String>, Vec<String>) {
    let cited: BTreeSet<String> = regex::Regex::new(r"eval/([a-z0-9][a-z0-9-]*)").unwrap().captures_iter(text).map(|c| c[1].to_string()).filter(|f| root.join("eval").join(f).is_dir()).collect();
    let (mut table, mut json) = (BTreeSet::new(), BTreeSet::new());
    for f in &cited {
        for e in std::fs::read_dir(root.join("eval").join(f)).unwrap().flatten() {
            let p = e.path();
            match p.extension().and_then(|x| x.to_str()) {
                Some("md") => table.extend(figures(&std::fs::read_to_string(&p).unwrap()).into_iter().map(|(_, _, f)| f)),
                Some("json") if p.file_name().is_some_and(|n| n == "manifest.json") => json_numbers(&serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap(), &mut json),
                _ => {}
            }
        }
    }
    let unit = regex::Regex::new(r"^\s?(min\b|s\b|ms\b|h\b|%|×|GB\b|GiB\b|MiB\b|KiB\b|MB\b|tok)").unwrap();
    let t = checked_text(text);
    let bad = figures(&t)
        .into_iter()
        .filter(|(at, s, _)| !unit.is_match(&t[at + s.len()..]))
        .filter(|(_, _, f)| !matches(f, &table, &json))
        .map(|(at, s, _)| format!("line {}: {s}", t[..at].matches('\n').count() + 1))
        .collect();
    (cited.into_iter().collect(), bad)
}

fn pages(root: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(root.join("docs/src/results"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| (format!("docs/src/results/{}", e.file_name().to_string_lossy()), std::fs::read_to_string(e.path()).unwrap()))
        .collect();
    out.sort();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let results = readme.split("## Quickstart").next().unwrap().to_string();
    out.push(("README.md (above its quickstart)".into(), results));
    out
}

#[test]
fn every_figure_on_a_results_page_is_in_a_table_it_cites() {
    let root = repo_root();
    let mut problems = Vec::new();
    for (name, text) in pages(&root) {
        let (cited, bad) = unsupported(&root, &text);
        if cited.is_empty() {
            problems.push(format!("{name}: cites no eval folder"));
        }
        if !bad.is_empty() {
            problems.push(format!("{name} (cites {}): {}", cited.join(", "), bad.join(", ")));
        }
    }
    assert!(problems.is_empty(), "figures on results pages that no cited table holds (fix the page, or regenerate the folder):\n{}", problems.join("\n"));
}

#[test]
fn a_wrong_digit_fails_and_exemptions_need_a_reason() {
    let root = repo_root();
    let readme = &pages(&root).last().unwrap().1.clone();
    assert!(unsupported(&root, readme).1.is_empty());
    // The README's baseline MRR@10 (0.754), on a page citing only its folder: held, and with
    // one digit changed, flagged. (Only that folder, so that another folder the README cites
    // cannot happen to hold the changed figure.)
    assert!(readme.contains("| 0.754 |"));
    let page = |figure: &str| format!("[eval/fra](eval/fra/ablation.md)\n\n| baseline | {figure} |\n");
    assert!(unsupported(&root, &page("0.754")).1.is_empty());
    let (_, bad) = unsupported(&root, &page("0.745"));
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].ends_with("0.745"));
    // Rounded figures match half-up; a ± figure matches only a ± figure.
    assert_eq!(round_half_up("0.295", 2).as_deref(), Some("0.30"));
    assert_eq!(round_half_up("0.133", 2).as_deref(), Some("0.13"));
    let table: BTreeSet<Figure> = [(true, "0.133".to_string()), (false, "0.140".to_string())].into();
    assert!(!matches(&(true, "0.14".into()), &table, &BTreeSet::new()));
    assert!(matches(&(true, "0.13".into()), &table, &BTreeSet::new()));
    // An exemption without a reason exempts nothing.
    let t = "eval/fra <!-- unchecked: --> 0.999 <!-- /unchecked --> and <!-- unchecked: seeds --> 0.998 <!-- /unchecked -->";
    let (_, bad) = unsupported(&root, t);
    assert_eq!(bad, vec!["line 1: 0.999"]);
}
