//! Verdicts across question sets: every finding the README and the results pages state,
//! measured again on each set of different origin that has both of its configs — the dev set,
//! the held-out synthetic set, BEIR SciFact — in one table "finding × set → Δ [95 % CI],
//! verdict", generated from the committed evaluation folders' `per_query.parquet`.
//!
//! The findings are listed in `docs/src/results/findings.toml` (each: a name, a metric, and per
//! set the evaluation folder with the config and the config it is compared to);
//! [`page`] writes `docs/src/results/cross-set.md` from it, and `tests/reference_docs.rs`
//! fails while the committed page is stale (`just docs-gen` rewrites it). Each Δ is the paired
//! comparison `ablation.md` makes (same resamples, same seed per metric), so a cell equals the
//! folder's own figure where the folder compares the same pair; the p-values are Holm-adjusted
//! over the whole table.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use gauge_core::table::{read_parquet_any, Columns};
use serde::Deserialize;

use crate::stats::{adjust, paired_comparison, Correction, PairedComparison};

/// `findings.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Findings {
    /// The question sets, by key: how each is shown.
    pub sets: BTreeMap<String, SetInfo>,
    /// The findings, in the order the page lists them.
    pub finding: Vec<Finding>,
}

/// A question set.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetInfo {
    /// Column label (`dev (41)`).
    pub label: String,
    /// Who wrote and judged the questions, where no evaluation folder records it (the dev set
    /// lives read-only in ../shared); otherwise read from the folder's manifest or the set's
    /// provenance record.
    pub who: Option<String>,
    /// Order on the page.
    pub order: usize,
}

/// One finding: a config against another on one metric, per set.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// What is claimed (`Hybrid RRF beats dense retrieval`).
    pub name: String,
    /// Where it is stated (a results page or the README).
    pub stated: String,
    /// `mrr@10`, `ndcg@10`, `hit@1` … (a per-question column of `per_query.parquet`).
    pub metric: String,
    /// Per set key: the evaluation and its two configs.
    pub on: Vec<OnSet>,
}

/// A finding on one set.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnSet {
    /// The set's key in `[sets]`.
    pub set: String,
    /// The evaluation folder under `eval/`.
    pub folder: String,
    /// The config the finding is about.
    pub config: String,
    /// The config it is compared to.
    pub base: String,
}

/// The per-question column and the registry name (for the seed) of a metric.
fn column_of(metric: &str) -> anyhow::Result<String> {
    let (name, k) = metric.split_once('@').with_context(|| format!("metric `{metric}`: expected `mrr@10`, `ndcg@10`, `hit@1`, …"))?;
    Ok(match name {
        "mrr" => "reciprocal_rank".to_string(),
        "ndcg" => format!("ndcg_{k}"),
        "hit" => format!("hit_{k}"),
        "recall" => "recall".to_string(),
        _ => anyhow::bail!("metric `{metric}`: one of mrr@k, ndcg@k, hit@k, recall@k"),
    })
}

/// One evaluated cell.
struct Cell {
    set: String,
    config: String,
    base: String,
    folder: String,
    n: usize,
    comparison: PairedComparison,
}

/// Reads a folder's per-question values of `column` for two configs, paired by qid.
fn paired_values(folder: &Path, column: &str, config: &str, base: &str) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let pq = folder.join("per_query.parquet");
    let batch = read_parquet_any(&pq).with_context(|| pq.display().to_string())?;
    let c = Columns::new(&batch);
    let (configs, qids, values) = (c.strings_required("config"), c.strings_required("qid"), c.f64s(column));
    let of = |name: &str| -> BTreeMap<&str, f64> { (0..batch.num_rows()).filter(|&i| configs[i] == name).filter_map(|i| values[i].map(|v| (qids[i].as_str(), v))).collect() };
    let (a, b) = (of(config), of(base));
    anyhow::ensure!(!a.is_empty(), "{}: no config `{config}` with `{column}`", pq.display());
    anyhow::ensure!(!b.is_empty(), "{}: no config `{base}` with `{column}`", pq.display());
    anyhow::ensure!(a.keys().eq(b.keys()), "{}: `{config}` and `{base}` were evaluated on different questions", pq.display());
    Ok((a.values().copied().collect(), b.values().copied().collect()))
}

/// The manifest's resamples, seed and judged depth.
fn folder_settings(folder: &Path) -> anyhow::Result<(usize, u64, usize, serde_json::Value)> {
    let path = folder.join("manifest.json");
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).with_context(|| path.display().to_string())?).with_context(|| path.display().to_string())?;
    let resamples = m["config"]["resamples"].as_u64().unwrap_or(2000) as usize;
    let seed = m["seed"].as_u64().unwrap_or(42);
    let k = m["config"]["k"].as_u64().unwrap_or(10) as usize;
    Ok((resamples, seed, k, m))
}

/// Who wrote and judged a folder's questions: its manifest's record, else the record its
/// golden set resolves to now (evaluations made before provenance was recorded).
fn who_of(root: &Path, manifest: &serde_json::Value) -> String {
    if let Ok(p) = serde_json::from_value::<gauge_core::golden::Provenance>(manifest["stats"]["question_provenance"].clone()) {
        return p.summary();
    }
    let golden = manifest["inputs"].as_array().into_iter().flatten().find(|i| i["name"] == "golden").and_then(|i| i["path"].as_str()).unwrap_or("");
    // Only a set inside the repository is read (a manifest is data, not an instruction).
    let inside = !golden.is_empty() && Path::new(golden).components().all(|c| matches!(c, std::path::Component::Normal(_)));
    if !inside {
        return "not recorded".into();
    }
    let path = root.join(golden);
    match gauge_core::golden::resolve_provenance(&path, None) {
        Ok(p) => p.summary(),
        Err(_) => "not recorded".into(),
    }
}

/// The overall verdict of a finding from its per-set verdicts.
fn overall(verdicts: &[&str]) -> &'static str {
    let (better, worse) = (verdicts.iter().filter(|v| **v == "better").count(), verdicts.iter().filter(|v| **v == "worse").count());
    match (better, worse, verdicts.len()) {
        (_, _, n) if n < 2 => "one set only",
        (b, 0, n) if b == n => "holds: better on every set",
        (0, w, n) if w == n => "holds: worse on every set",
        (b, w, _) if b > 0 && w > 0 => "**reverses** between sets",
        (b, 0, _) if b > 0 => "better on some sets only",
        (0, w, _) if w > 0 => "worse on some sets only",
        _ => "no difference shown on any set",
    }
}

/// The page `docs/src/results/cross-set.md`, from `docs/src/results/findings.toml` and the
/// evaluation folders under `root/eval/`.
pub fn page(root: &Path) -> anyhow::Result<String> {
    let spec_path = root.join("docs/src/results/findings.toml");
    let findings: Findings = toml::from_str(&std::fs::read_to_string(&spec_path).with_context(|| spec_path.display().to_string())?).with_context(|| spec_path.display().to_string())?;
    let mut cells: Vec<(usize, Cell)> = Vec::new();
    let mut who: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (fi, f) in findings.finding.iter().enumerate() {
        let column = column_of(&f.metric)?;
        for on in &f.on {
            let info = findings.sets.get(&on.set).with_context(|| format!("{}: finding `{}` names set `{}`, not in [sets]", spec_path.display(), f.name, on.set))?;
            let folder = root.join("eval").join(&on.folder);
            let (resamples, seed, k, manifest) = folder_settings(&folder)?;
            // The seed ablation.md used for this metric: the pipeline's plus the metric's place in the registry.
            let offset = crate::metric::registry(k, false).iter().position(|m| m.name == f.metric).unwrap_or(0) as u64;
            let (a, b) = paired_values(&folder, &column, &on.config, &on.base).with_context(|| format!("finding `{}` on `{}`", f.name, on.set))?;
            let comparison = paired_comparison(&a, &b, resamples, seed + offset);
            who.entry(on.set.clone()).or_default().insert(on.folder.clone(), info.who.clone().unwrap_or_else(|| who_of(root, &manifest)));
            cells.push((fi, Cell { set: on.set.clone(), config: on.config.clone(), base: on.base.clone(), folder: on.folder.clone(), n: a.len(), comparison }));
        }
    }
    let adjusted = adjust(&cells.iter().map(|(_, c)| c.comparison.p_value).collect::<Vec<_>>(), Correction::Holm);
    for ((_, c), a) in cells.iter_mut().zip(adjusted) {
        c.comparison.p_adjusted = Some(a);
    }

    let mut s = String::from("# Verdicts across question sets\n\n");
    s.push_str("<!-- Generated from docs/src/results/findings.toml and each evaluation folder's per_query.parquet by tests/reference_docs.rs (`just docs-gen`); do not edit. -->\n\n");
    s.push_str(&format!(
        "Each finding the README and the results pages state, measured again on every question set that has both of its configs. Δ is the mean paired difference (config − compared config) with its 95 % paired-bootstrap interval, computed as the folder's `ablation.md` computes it; p is the paired sign-flip p-value, **Holm-adjusted over all {} cells of this table** (so a cell can be weaker here than in its own folder); the verdict is *better* or *worse* at adjusted p < 0.05, else *not better*. A finding holds only where it holds on sets of different origin.\n\n",
        cells.len()
    ));
    s.push_str("## The question sets\n\n| Set | Evaluation folders | Who wrote and judged the questions |\n|---|---|---|\n");
    let mut sets: Vec<(&String, &SetInfo)> = findings.sets.iter().collect();
    sets.sort_by_key(|(_, i)| i.order);
    for (key, info) in &sets {
        for (folder, w) in who.get(*key).into_iter().flatten() {
            s.push_str(&format!("| {} | [`eval/{folder}`](../../../eval/{folder}/report.html) ([ablation.md](../../../eval/{folder}/ablation.md)) | {} |\n", info.label, w.replace('|', "\\|")));
        }
    }
    s.push_str("\n## Findings\n\n<!-- unchecked: every figure below is computed from the folders' per_query.parquet, with this table's own Holm family -->\n");
    s.push_str("| Finding | Metric | Set | Config vs compared | n | Δ [95 % CI] | p adj. | Verdict |\n|---|---|---|---|---|---|---|---|\n");
    let mut summaries = Vec::new();
    for (fi, f) in findings.finding.iter().enumerate() {
        let mut mine: Vec<&Cell> = cells.iter().filter(|(i, _)| *i == fi).map(|(_, c)| c).collect();
        mine.sort_by_key(|c| findings.sets.get(&c.set).map_or(usize::MAX, |i| i.order));
        let verdicts: Vec<&str> = mine.iter().map(|c| crate::gate::verdict(&c.comparison)).collect();
        for (j, (c, v)) in mine.iter().zip(&verdicts).enumerate() {
            let d = &c.comparison;
            let label = findings.sets.get(&c.set).map_or(c.set.as_str(), |i| i.label.as_str());
            s.push_str(&format!(
                "| {} | {} | {label} ([{}](../../../eval/{}/ablation.md)) | {} vs {} | {} | {:+.3} [{:+.3}, {:+.3}] | {:.3} | {} |\n",
                if j == 0 { f.name.replace('|', "\\|") } else { String::new() },
                if j == 0 { f.metric.clone() } else { String::new() },
                c.folder,
                c.folder,
                c.config.replace('|', "\\|"),
                c.base.replace('|', "\\|"),
                c.n,
                d.delta,
                d.ci_low,
                d.ci_high,
                d.p_adjusted.unwrap_or(d.p_value),
                v
            ));
        }
        let labels: Vec<&str> = mine.iter().map(|c| findings.sets.get(&c.set).map_or(c.set.as_str(), |i| i.label.as_str())).collect();
        let by = |v: &str| labels.iter().zip(&verdicts).filter(|(_, x)| **x == v).map(|(l, _)| *l).collect::<Vec<_>>().join(", ");
        let detail = ["better", "worse", "not better"].iter().map(|v| (v, by(v))).filter(|(_, l)| !l.is_empty()).map(|(v, l)| format!("{v} on {l}")).collect::<Vec<_>>().join("; ");
        summaries.push(format!("- **{}** ({}): {} ({detail}).", f.name, f.stated, overall(&verdicts)));
    }
    s.push_str("<!-- /unchecked -->\n\n## What holds\n\n");
    s.push_str(&summaries.join("\n"));
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overall_verdict_reads_every_set() {
        assert_eq!(overall(&["better", "better"]), "holds: better on every set");
        assert_eq!(overall(&["better", "worse"]), "**reverses** between sets");
        assert_eq!(overall(&["better", "not better", "not better"]), "better on some sets only");
        assert_eq!(overall(&["not better", "not better"]), "no difference shown on any set");
        assert_eq!(overall(&["worse", "worse", "worse"]), "holds: worse on every set");
        assert_eq!(overall(&["better"]), "one set only");
    }

    #[test]
    fn metrics_map_to_their_columns() {
        assert_eq!(column_of("mrr@10").unwrap(), "reciprocal_rank");
        assert_eq!(column_of("ndcg@10").unwrap(), "ndcg_10");
        assert_eq!(column_of("hit@1").unwrap(), "hit_1");
        assert!(column_of("map").unwrap_err().to_string().contains("mrr@10"));
    }
}
