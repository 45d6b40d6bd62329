//! `evaluate --verify eval/<name>`: a reproducibility certificate for a shared result.
//!
//! From the evaluation's `manifest.json` alone it
//! 1. re-hashes every output file (a table edited after the run is named),
//! 2. re-hashes every input it can reach: files (the golden set) by their bytes, artifacts
//!    (indexes and, through their own manifests, the chunks, vectors, pages and corpus files
//!    under them) by fingerprint and output hashes, and models by their weights; an artifact
//!    that is not on this machine is listed, and with `--rebuild` the pipeline's upstream
//!    stages are run (cached ones reused) and each config's index must come out with the
//!    recorded fingerprint,
//! 3. re-scores `runs.parquet` against the golden set: the relevance of every ranked passage
//!    (page mode: re-judged from its source and pages), every question's metrics in
//!    `per_query.parquet`, and every retrieval metric of `metrics.parquet` (means, intervals,
//!    paired deltas, raw and adjusted p-values, wins/ties/losses) recomputed with the recorded
//!    seed — latency aside, the numbers that must hold on any machine.
//!
//! Each check prints one line; any failure makes the command fail, naming what changed.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use gauge_core::artifact::FileEntry;
use gauge_core::golden::GoldenQuestion;
use gauge_core::table::{read_parquet_any, Columns};
use gauge_core::Manifest;
use gauge_engine::PassageSpan;

use crate::metric::registry;
use crate::relevance::{score_question, RelevanceMode};
use crate::rows::{MetricRow, QueryRow};

/// One finding.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// It holds.
    Holds(String),
    /// Not checkable here (and why); not a failure.
    Absent(String),
    /// It no longer holds.
    Changed(String),
}

/// Everything `--verify` found.
#[derive(Debug, Default)]
pub struct Report {
    /// In check order.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The failures.
    pub fn changed(&self) -> Vec<&str> {
        self.findings.iter().filter_map(|f| if let Finding::Changed(s) = f { Some(s.as_str()) } else { None }).collect()
    }
}

/// Options of `--verify`.
pub struct VerifyOptions {
    /// Run the pipeline's upstream stages for artifacts that are not here (needs `pipeline`).
    pub rebuild: Option<PathBuf>,
    /// Artifact root for `rebuild`.
    pub artifacts: PathBuf,
    /// Device for `rebuild`.
    pub device: String,
}

/// Verifies `dir` (an `eval/<name>/` folder or an evaluate artifact). Paths in its manifest
/// are relative to the directory `evaluate` ran in (this one).
pub fn verify(dir: &Path, opts: &VerifyOptions) -> anyhow::Result<Report> {
    let manifest = Manifest::read(dir).map_err(|e| anyhow::anyhow!("{}: not an evaluation folder ({e})", dir.display()))?;
    anyhow::ensure!(manifest.stage == crate::ablate::STAGE, "{}: a `{}` artifact, not an evaluation", dir.display(), manifest.stage);
    let mut report = Report::default();
    check_outputs(dir, &manifest, &mut report);
    let mut seen = BTreeSet::new();
    for entry in &manifest.inputs {
        check_input(entry, &manifest, &mut seen, &mut report);
    }
    if let Some(pipeline) = &opts.rebuild {
        rebuild(pipeline, &manifest, opts, &mut report)?;
    }
    rescore(dir, &manifest, &mut report)?;
    Ok(report)
}

/// Where `--verify` reads an input a manifest names: its path is relative to the directory
/// `evaluate` ran in (this one) and must stay, once `.` and `..` are resolved and links
/// followed, inside this directory's parent (the checkout and the data beside it, such as
/// `../shared`); it must be a regular file or a folder. A manifest is data that may come from
/// anyone: an absolute path, an escape or a device (`/dev/zero`) is never opened.
fn readable(recorded: &str) -> Result<PathBuf, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("no current directory ({e})"))?;
    let root = cwd.parent().unwrap_or(&cwd).to_path_buf();
    let here = cwd.file_name().map(PathBuf::from).unwrap_or_default();
    let rel = Path::new(recorded);
    if rel.is_absolute() {
        return Err(format!("an absolute path; --verify reads only paths relative to where evaluate ran, inside {}", root.display()));
    }
    gauge_core::names::confined(&root, &here.join(rel)).map_err(|why| format!("{why}; --verify reads nothing outside it"))?;
    if let Ok(real) = rel.canonicalize() {
        let real_root = root.canonicalize().unwrap_or(root.clone());
        if !real.starts_with(&real_root) {
            return Err(format!("a link to {}, outside {}", real.display(), root.display()));
        }
        let meta = std::fs::metadata(&real).map_err(|e| e.to_string())?;
        if !(meta.is_file() || meta.is_dir()) {
            return Err("neither a file nor a folder".into());
        }
    }
    Ok(rel.to_path_buf())
}

/// An output's path inside its artifact folder (a plain relative path that stays inside, a
/// regular file or a folder — never a link or a device).
fn inside(dir: &Path, recorded: &str) -> Result<PathBuf, String> {
    let path = gauge_core::names::confined(dir, Path::new(recorded))?;
    // No folder on the way may be a link either (`trec/` linked elsewhere).
    let mut at = dir.to_path_buf();
    for part in path.strip_prefix(dir).unwrap_or(Path::new("")).parent().into_iter().flat_map(Path::components) {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(format!("`{}` on its way is a symbolic link; an artifact's outputs are its own files", at.display()));
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        if meta.file_type().is_symlink() {
            return Err("a symbolic link; an artifact's outputs are its own files".into());
        }
        if !(meta.is_file() || meta.is_dir()) {
            return Err("neither a file nor a folder".into());
        }
    }
    Ok(path)
}

fn check_outputs(dir: &Path, manifest: &Manifest, report: &mut Report) {
    let mut held = 0;
    for o in &manifest.outputs {
        let path = match inside(dir, &o.path) {
            Ok(p) => p,
            Err(why) => {
                report.findings.push(Finding::Changed(format!("{}: output `{}` not read: {why}", dir.display(), o.path)));
                continue;
            }
        };
        match gauge_core::hash::file_hash(&path) {
            Ok(h) if h == o.hash => held += 1,
            Ok(h) => report.findings.push(Finding::Changed(format!("{}: changed since the evaluation wrote it (hash {} , recorded {})", path.display(), short(&h), short(&o.hash)))),
            Err(_) if path.is_dir() => held += 1,
            Err(e) => report.findings.push(Finding::Changed(format!("{}: missing ({e})", path.display()))),
        }
    }
    report.findings.push(Finding::Holds(format!("{held} of {} output files hash as recorded", manifest.outputs.len())));
}

fn short(h: &str) -> &str {
    &h[..h.len().min(12)]
}

/// An input: a file by its bytes, an artifact folder by its fingerprint and (recursively) its
/// own manifest, a model by its identity.
fn check_input(entry: &FileEntry, parent: &Manifest, seen: &mut BTreeSet<String>, report: &mut Report) {
    if !seen.insert(format!("{}#{}", entry.path, entry.hash)) {
        return;
    }
    if entry.name.starts_with("reranker:") {
        check_reranker(entry, parent, report);
        return;
    }
    let path = match readable(&entry.path) {
        Ok(p) => p,
        Err(why) => {
            report.findings.push(Finding::Absent(format!("{} ({}): not read: {why}", entry.path, entry.name)));
            return;
        }
    };
    let path = path.as_path();
    if entry.name == "golden" && path.is_dir() {
        match gauge_core::golden::golden_hash(path) {
            Ok(h) if h == entry.hash => report.findings.push(Finding::Holds(format!("{} (golden, a BEIR folder) hashes as recorded", entry.path))),
            Ok(h) => report.findings.push(Finding::Changed(format!("{}: input `golden` changed (hash {}, recorded {})", entry.path, short(&h), short(&entry.hash)))),
            Err(e) => report.findings.push(Finding::Changed(format!("{}: cannot read ({e})", entry.path))),
        }
        return;
    }
    if path.is_file() {
        match gauge_core::hash::file_hash(path) {
            Ok(h) if h == entry.hash => report.findings.push(Finding::Holds(format!("{} ({}) hashes as recorded", entry.path, entry.name))),
            Ok(h) => report.findings.push(Finding::Changed(format!("{}: input `{}` changed (hash {}, recorded {})", entry.path, entry.name, short(&h), short(&entry.hash)))),
            Err(e) => report.findings.push(Finding::Changed(format!("{}: cannot read ({e})", entry.path))),
        }
        // A file inside another artifact: that artifact (and what it was made from) too.
        if let Some(parent) = path.parent().filter(|p| p.join("manifest.json").is_file()) {
            if let Ok(m) = Manifest::read(parent) {
                if seen.insert(format!("{}#{}", parent.display(), m.fingerprint)) {
                    check_artifact(parent, &m.fingerprint, seen, report);
                }
            }
        }
        return;
    }
    if path.join("manifest.json").is_file() {
        seen.insert(format!("{}#{}", path.display(), entry.hash));
        check_artifact(path, &entry.hash, seen, report);
        return;
    }
    // A model file named by its model id (`org/model/model.safetensors`): resolved like a model.
    if let (Some(model), Some(file)) = (path.parent().filter(|p| !p.as_os_str().is_empty()), path.file_name()) {
        if let Ok(src) = gauge_core::models::resolve_model(&model.to_string_lossy()) {
            let f = src.dir.join(file);
            match gauge_core::hash::file_hash(&f) {
                Ok(h) if h == entry.hash => report.findings.push(Finding::Holds(format!("{} (model file, {}) hashes as recorded", entry.path, f.display()))),
                Ok(h) => report.findings.push(Finding::Changed(format!("{}: model file changed ({}: hash {}, recorded {})", entry.path, f.display(), short(&h), short(&entry.hash)))),
                Err(_) => report.findings.push(Finding::Absent(format!("{}: model found at {} without that file", entry.path, src.dir.display()))),
            }
            return;
        }
    }
    report.findings.push(Finding::Absent(format!("{} ({}): not on this machine{}", entry.path, entry.name, if path.starts_with("artifacts") || entry.path.contains("/artifacts/") { "; `--rebuild` rebuilds it" } else { "" })));
}

fn check_artifact(dir: &Path, fingerprint: &str, seen: &mut BTreeSet<String>, report: &mut Report) {
    let m = match Manifest::read(dir) {
        Ok(m) => m,
        Err(e) => {
            report.findings.push(Finding::Changed(format!("{}: unreadable manifest ({e})", dir.display())));
            return;
        }
    };
    if m.fingerprint != fingerprint {
        report.findings.push(Finding::Changed(format!("{}: fingerprint {} (recorded {})", dir.display(), m.fingerprint, fingerprint)));
        return;
    }
    let mut bad = false;
    for o in &m.outputs {
        let path = match inside(dir, &o.path) {
            Ok(p) => p,
            Err(why) => {
                bad = true;
                report.findings.push(Finding::Changed(format!("{}: output `{}` not read: {why}", dir.display(), o.path)));
                continue;
            }
        };
        if path.is_dir() {
            continue;
        }
        match gauge_core::hash::file_hash(&path) {
            Ok(h) if h == o.hash => {}
            Ok(h) => {
                bad = true;
                report.findings.push(Finding::Changed(format!("{}: artifact file changed (hash {}, recorded {})", path.display(), short(&h), short(&o.hash))));
            }
            Err(e) => {
                bad = true;
                report.findings.push(Finding::Changed(format!("{}: missing ({e})", path.display())));
            }
        }
    }
    if !bad {
        report.findings.push(Finding::Holds(format!("{} ({} artifact {}): outputs hash as recorded", dir.display(), m.stage, m.fingerprint)));
    }
    for i in &m.inputs {
        check_input(i, &m, seen, report);
    }
}

/// Every config an evaluation's echo describes: its variants, then a config search's configs.
fn config_rows(cfg: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut out: Vec<&serde_json::Value> = cfg["variants"].as_array().map(|vs| vs.iter().collect()).unwrap_or_default();
    if let Some(cs) = cfg["search"]["candidates"].as_array() {
        out.extend(cs.iter().map(|c| &c["variant"]));
    }
    out
}

/// A reranker input: the model's identity recomputed from the config the evaluation echoed.
fn check_reranker(entry: &FileEntry, parent: &Manifest, report: &mut Report) {
    let config = entry.name.trim_start_matches("reranker:");
    let rc = match config.strip_prefix("search:") {
        // A searched reranker: the first searched config with that model.
        Some(model) => config_rows(&parent.config).into_iter().find(|v| v["stages"]["retrieval"]["rerank"]["model"] == model),
        None => config_rows(&parent.config).into_iter().find(|v| v["name"] == config),
    }
    .map(|v| v["stages"]["retrieval"]["rerank"].clone());
    let Some(Ok(rc)) = rc.map(serde_json::from_value::<gauge_rank::RerankConfig>) else {
        report.findings.push(Finding::Absent(format!("reranker of `{config}`: no rerank config in the manifest")));
        return;
    };
    match gauge_rerank::reranker_identity(&rc) {
        Ok(h) if h == entry.hash => report.findings.push(Finding::Holds(format!("reranker `{}` of `{config}`: weights as recorded", entry.path))),
        Ok(h) => report.findings.push(Finding::Changed(format!("reranker `{}` of `{config}`: weights changed (identity {}, recorded {})", entry.path, short(&h), short(&entry.hash)))),
        Err(reason) => report.findings.push(Finding::Absent(format!("reranker `{}` of `{config}`: {reason}", entry.path))),
    }
}

/// Runs the pipeline's upstream stages (cached ones reused) and compares each config's index
/// fingerprint with the recorded one.
fn rebuild(pipeline: &Path, manifest: &Manifest, opts: &VerifyOptions, report: &mut Report) -> anyhow::Result<()> {
    let built = crate::planning::upstream_indexes(pipeline, &opts.artifacts, &opts.device)?;
    for entry in manifest.inputs.iter().filter(|e| e.name.starts_with("index:")) {
        let config = entry.name.trim_start_matches("index:");
        match built.get(config) {
            Some(fp) if *fp == entry.hash => report.findings.push(Finding::Holds(format!("rebuilt index of `{config}`: fingerprint {fp} as recorded"))),
            Some(fp) => report.findings.push(Finding::Changed(format!("rebuilt index of `{config}`: fingerprint {fp}, recorded {} (the pipeline file, the corpus or a model differs)", entry.hash))),
            None => report.findings.push(Finding::Changed(format!("config `{config}`: not in {}", pipeline.display()))),
        }
    }
    Ok(())
}

/// One row of runs.parquet: rank, what it covers, the recorded relevance.
type RankedPassage = (i32, PassageSpan, bool);

/// Re-scores `runs.parquet` and compares `per_query.parquet` and `metrics.parquet`.
fn rescore(dir: &Path, manifest: &Manifest, report: &mut Report) -> anyhow::Result<()> {
    let golden_entry = manifest.inputs.iter().find(|e| e.name == "golden").ok_or_else(|| anyhow::anyhow!("{}: no golden input in the manifest", dir.display()))?;
    let golden_path = match readable(&golden_entry.path) {
        Ok(p) => p,
        Err(why) => {
            report.findings.push(Finding::Absent(format!("{}: golden set not read ({why}); runs not re-scored", golden_entry.path)));
            return Ok(());
        }
    };
    let golden_path = golden_path.as_path();
    if !golden_path.exists() {
        report.findings.push(Finding::Absent(format!("{}: golden set not here; runs not re-scored", golden_entry.path)));
        return Ok(());
    }
    let golden: HashMap<String, GoldenQuestion> = gauge_core::golden::load_golden(golden_path)?.into_iter().map(|q| (q.qid.clone(), q)).collect();
    let cfg = &manifest.config;
    let mode: RelevanceMode = serde_json::from_value(cfg["relevance"].clone()).unwrap_or(RelevanceMode::Page);
    let k = cfg["k"].as_u64().unwrap_or(10) as usize;
    let resamples = cfg["resamples"].as_u64().unwrap_or(2000) as usize;
    anyhow::ensure!((1..=crate::pipeline::MAX_RESAMPLES).contains(&resamples), "{}: the manifest asks for {resamples} resamples; a pipeline allows 1000 to {}", dir.display(), crate::pipeline::MAX_RESAMPLES);
    let seed = manifest.seed.unwrap_or(42);
    let correction: crate::stats::Correction = serde_json::from_value(cfg["stats"]["correction"].clone()).unwrap_or_default();

    // Ranked passages per (config, question), from runs.parquet.
    let own = |name: &str| inside(dir, name).map_err(|why| anyhow::anyhow!("{}: {name} not read: {why}", dir.display()));
    let runs = read_parquet_any(&own("runs.parquet")?)?;
    let c = Columns::new(&runs);
    let (config, qid, rank, source, ps, pe, relevant) = (c.strings_required("config"), c.strings_required("qid"), c.i32s("rank"), c.strings_required("source"), c.i32s("page_start"), c.i32s("page_end"), c.bools("relevant"));
    let mut ranked: BTreeMap<(String, String), Vec<RankedPassage>> = BTreeMap::new();
    for i in 0..runs.num_rows() {
        let span = PassageSpan { source: source[i].clone(), page_start: ps[i], page_end: pe[i], char_start: 0, char_end: 0, text: String::new(), leaves: Vec::new() };
        ranked.entry((config[i].clone(), qid[i].clone())).or_default().push((rank[i], span, relevant[i]));
    }
    // Relevance: page mode re-judges from pages; other modes keep the recorded flags.
    let mut flips = Vec::new();
    if mode == RelevanceMode::Page {
        for ((cname, q), list) in &ranked {
            let Some(gq) = golden.get(q) else {
                flips.push(format!("`{cname}` {q}: question not in the golden set"));
                continue;
            };
            for (r, span, rel) in list {
                if crate::relevance::is_relevant(gq, span, mode) != *rel {
                    flips.push(format!("`{cname}` {q} rank {r}"));
                }
            }
        }
        if flips.is_empty() {
            report.findings.push(Finding::Holds(format!("{} ranked passages re-judged against the golden set: relevance as recorded", runs.num_rows())));
        } else {
            report.findings.push(Finding::Changed(format!("runs.parquet: relevance differs from the golden set for {} passages (first: {})", flips.len(), flips[0])));
        }
    }

    // Per-question rows: scores re-derived; refusals, counts and latency as recorded.
    let pq = read_parquet_any(&own("per_query.parquet")?)?;
    let p = Columns::new(&pq);
    let (pconfig, pqid, pcat, refused, nres, lat, cold, calls) = (p.strings_required("config"), p.strings_required("qid"), p.strings_required("category"), p.bools("refused"), p.i32s("n_results"), p.f64s("latency_ms"), p.f64s("cold_latency_ms"), p.i32s("model_calls"));
    let (rr, ndcg, recall) = (p.f64s("reciprocal_rank"), p.f64s("ndcg_10"), p.f64s("recall"));
    let hits: Vec<(usize, Vec<Option<f64>>)> = [1, 3, 5, 10].into_iter().map(|n| (n, p.f64s(&format!("hit_{n}")))).collect();
    let mut rows = Vec::new();
    let mut mismatches = Vec::new();
    for i in 0..pq.num_rows() {
        let Some(gq) = golden.get(&pqid[i]) else { continue };
        let list = ranked.get(&(pconfig[i].clone(), pqid[i].clone())).cloned().unwrap_or_default();
        let spans: Vec<PassageSpan> = list.iter().map(|(_, s, _)| s.clone()).collect();
        let mut scores = score_question(gq, &spans, if mode == RelevanceMode::Page { mode } else { RelevanceMode::Span }, k);
        if mode != RelevanceMode::Page {
            // Spans and texts are not in runs.parquet: the recorded flags and values stand.
            scores.relevant = list.iter().map(|(_, _, r)| *r).collect();
            scores.first_relevant_rank = crate::metrics::first_relevant_rank(&scores.relevant);
            scores.reciprocal_rank = rr[i].unwrap_or(0.0);
            scores.ndcg = ndcg[i].unwrap_or(0.0);
            scores.recall = recall[i].unwrap_or(0.0);
        }
        let mut values = vec![("reciprocal_rank".to_string(), scores.reciprocal_rank, rr[i]), ("ndcg_10".to_string(), scores.ndcg, ndcg[i]), ("recall".to_string(), scores.recall, recall[i])];
        values.extend(hits.iter().map(|(n, col)| (format!("hit_{n}"), crate::metrics::hit_at(&scores.relevant, *n), col[i])));
        for (name, got, want) in values {
            if want.is_none_or(|w| (w - got).abs() > 1e-12) {
                mismatches.push(format!("`{}` {} {name}: {got} re-scored, {want:?} recorded", pconfig[i], pqid[i]));
            }
        }
        rows.push(QueryRow {
            config: pconfig[i].clone(),
            qid: pqid[i].clone(),
            category: pcat[i].clone(),
            scores,
            refused: refused[i],
            n_results: nres[i] as usize,
            latency_ms: lat[i].unwrap_or(0.0),
            cold_latency_ms: cold[i].unwrap_or(0.0),
            model_calls: calls[i] as usize,
        });
    }
    if mismatches.is_empty() && mode != RelevanceMode::Page {
        // Span and keyword relevance need the passages' offsets and texts, which runs.parquet
        // does not hold: only the hits are re-derived from its flags.
        report.findings.push(Finding::Holds(format!("{} per-question rows: hits agree with runs.parquet's relevance flags ({} relevance is not re-judged from runs.parquet)", rows.len(), mode.name())));
    } else if mismatches.is_empty() {
        report.findings.push(Finding::Holds(format!("{} per-question rows re-scored from runs.parquet: as recorded", rows.len())));
    } else {
        report.findings.push(Finding::Changed(format!("per_query.parquet: {} values differ when re-scored (first: {})", mismatches.len(), mismatches[0])));
    }

    // Metrics: the same summaries with the recorded seed.
    // The evaluated configs in table order (per_query.parquet's order): the declared ones and,
    // after a config search, the confirmed ones.
    let declared = config_rows(cfg);
    let mut evaluated: Vec<String> = Vec::new();
    for r in &rows {
        if !evaluated.contains(&r.config) && declared.iter().any(|v| v["name"] == r.config.as_str()) {
            evaluated.push(r.config.clone());
        }
    }
    let pairs: Vec<(String, Option<String>)> = declared.iter().map(|v| (v["name"].as_str().unwrap_or_default().to_string(), v["compare_to"].as_str().map(str::to_string))).collect();
    let Some(baseline) = evaluated.first().cloned() else {
        report.findings.push(Finding::Changed("per_query.parquet: no evaluated config".into()));
        return Ok(());
    };
    let has_keywords = golden.values().any(|q| !q.keywords.is_empty());
    let reg = registry(k, has_keywords);
    let mut metrics = crate::tables::summarize(&rows, &evaluated, &baseline, &reg, resamples, seed);
    let mut named = crate::tables::named_comparisons(&rows, &pairs, &evaluated, &reg, resamples, seed);
    crate::tables::correct_retrieval_family(&mut metrics, &mut named, &reg, correction);
    let recorded = read_metric_rows(&own("metrics.parquet")?)?;
    let mut differ = Vec::new();
    let mut compared = 0;
    for m in metrics.iter().filter(|m| !m.metric.starts_with("latency")) {
        if m.metric.starts_with("keyword_coverage") && mode != RelevanceMode::Page {
            continue;
        }
        compared += 1;
        let key = (m.config.clone(), m.category.clone(), m.metric.clone());
        match recorded.get(&key) {
            Some(r) if same_metric(m, r) => {}
            Some(r) => differ.push(format!("`{}` {} {}: {} re-derived, {} recorded", m.config, m.category, m.metric, describe(m), describe(r))),
            None => differ.push(format!("`{}` {} {}: not in metrics.parquet", m.config, m.category, m.metric)),
        }
    }
    if differ.is_empty() {
        report.findings.push(Finding::Holds(format!("{compared} metric values re-derived (seed {seed}, {resamples} resamples, {} correction): as recorded", correction.label())));
    } else {
        report.findings.push(Finding::Changed(format!("metrics.parquet: {} of {compared} values differ (first: {})", differ.len(), differ[0])));
    }
    Ok(())
}

fn describe(m: &MetricRow) -> String {
    format!("{:.6} {:?} {:?} {:?}", m.value, m.ci, m.delta.map(|d| (d.delta, d.p_value, d.p_adjusted)), m.wtl)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 || (a.is_nan() && b.is_nan())
}

fn same_metric(a: &MetricRow, b: &MetricRow) -> bool {
    let ci = match (a.ci, b.ci) {
        (Some(x), Some(y)) => close(x.0, y.0) && close(x.1, y.1),
        (None, None) => true,
        _ => false,
    };
    let delta = match (a.delta, b.delta) {
        (Some(x), Some(y)) => close(x.delta, y.delta) && close(x.ci_low, y.ci_low) && close(x.ci_high, y.ci_high) && close(x.p_value, y.p_value) && x.p_adjusted.zip(y.p_adjusted).is_none_or(|(p, q)| close(p, q)) && x.p_adjusted.is_some() == y.p_adjusted.is_some(),
        (None, None) => true,
        _ => false,
    };
    a.n == b.n && close(a.value, b.value) && ci && delta && a.wtl == b.wtl
}

/// metrics.parquet as rows keyed by (config, category, metric).
fn read_metric_rows(path: &Path) -> anyhow::Result<HashMap<(String, String, String), MetricRow>> {
    let batch = read_parquet_any(path)?;
    let c = Columns::new(&batch);
    let (config, category, metric, n, value) = (c.strings_required("config"), c.strings_required("category"), c.strings_required("metric"), c.i32s("n"), c.f64s("value"));
    let (lo, hi, d, dlo, dhi, p) = (c.f64s("ci_low"), c.f64s("ci_high"), c.f64s("delta"), c.f64s("delta_ci_low"), c.f64s("delta_ci_high"), c.f64s("p_value"));
    let adj = if c.has("p_adjusted") { c.f64s("p_adjusted") } else { vec![None; batch.num_rows()] };
    let (w, t, l) = if c.has("wins") { (c.i32s_nullable("wins"), c.i32s_nullable("ties"), c.i32s_nullable("losses")) } else { (vec![None; batch.num_rows()], vec![None; batch.num_rows()], vec![None; batch.num_rows()]) };
    let mut out = HashMap::new();
    for i in 0..batch.num_rows() {
        let delta = d[i].map(|delta| crate::stats::PairedComparison { delta, ci_low: dlo[i].unwrap_or(f64::NAN), ci_high: dhi[i].unwrap_or(f64::NAN), p_value: p[i].unwrap_or(f64::NAN), p_adjusted: adj[i] });
        let wtl = match (w[i], t[i], l[i]) {
            (Some(a), Some(b), Some(c)) => Some((a as usize, b as usize, c as usize)),
            _ => None,
        };
        let row = MetricRow { config: config[i].clone(), category: category[i].clone(), metric: metric[i].clone(), n: n[i] as usize, value: value[i].unwrap_or(f64::NAN), ci: lo[i].zip(hi[i]), delta, wtl };
        out.insert((row.config.clone(), row.category.clone(), row.metric.clone()), row);
    }
    Ok(out)
}

/// Prints the report, one line per finding; an error naming the first change when any.
pub fn print(report: &Report) -> anyhow::Result<()> {
    for f in &report.findings {
        match f {
            Finding::Holds(s) => gauge_core::outln!("holds: {s}"),
            Finding::Absent(s) => gauge_core::outln!("not checked: {s}"),
            Finding::Changed(s) => gauge_core::outln!("CHANGED: {s}"),
        }
    }
    let changed = report.changed();
    anyhow::ensure!(changed.is_empty(), "{} check(s) failed; first: {}", changed.len(), changed[0]);
    // The runs re-scored against the golden set are the check that matters: without it nothing
    // was verified, whatever else held.
    if let Some(Finding::Absent(why)) = report.findings.iter().find(|f| matches!(f, Finding::Absent(s) if s.contains("runs not re-scored"))) {
        anyhow::bail!("not verified: {why} (run --verify where the golden set the manifest names is)");
    }
    let absent = report.findings.iter().filter(|f| matches!(f, Finding::Absent(_))).count();
    if absent > 0 {
        gauge_core::outln!("verified, except {absent} input(s) not checked here (listed above): every number that can be re-derived here holds");
    } else {
        gauge_core::outln!("verified: every number that can be re-derived here holds");
    }
    Ok(())
}
