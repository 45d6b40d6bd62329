//! `report.html`: one self-contained page per evaluation folder, rendered from the folder's
//! committed files alone (`manifest.json`, `metrics.parquet`, `per_query.parquet`,
//! `runs.parquet`, `failures.parquet`, `questions.parquet`, and `answers.parquet` /
//! `search.parquet` when present), so `evaluate --report-only eval/<name>` rebuilds it byte for
//! byte without re-running anything, on any machine.
//!
//! `questions.parquet` (`qid`, `question`, `gold`: the gold passages as the page names them) is
//! the one file the page writes besides itself: [`write`] records the evaluated questions there
//! from the golden set (and the out-of-corpus file) the manifest names, when that file is
//! present with its recorded hash, and keeps the recorded one otherwise — so a folder whose
//! golden set is not committed (a generated one under `data/`) renders the same everywhere.
//!
//! What it shows: the ablation table (value and 95 % interval per metric, Δ against the
//! baseline with its interval, corrected p, wins/ties/losses, the paired minimum detectable
//! effect, latency), two SVG plots (the primary metric against median latency; every
//! config's interval on the primary metric and Hit@1), the answer metrics, the gate, the
//! config search, every question (each config's rank of the gold, where the gold was lost,
//! the ranked passages with the gold highlighted and linked to its PDF page, answers with
//! their citation counts and judge grades) and the run's provenance.
//!
//! Tables and plots are static HTML and SVG; the inline script only sorts tables (click a
//! heading, or `#sort=<column>`), filters the questions, and opens `#q=<qid>`. No server, no
//! network, no timestamps but the manifest's.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use gauge_core::table::{read_parquet_any, Columns};

/// The file name beside `ablation.md`.
pub const REPORT_FILE: &str = "report.html";

/// The evaluated questions' text and gold passages, beside the page (see the module docs).
pub const QUESTIONS_FILE: &str = "questions.parquet";

/// Renders `dir/report.html` from the folder's files and writes it atomically (a temporary
/// beside it, renamed). `root` is where relative input paths in the manifest resolve (the
/// directory `evaluate` ran in: the repository root); when the golden set there still has the
/// recorded hash, the evaluated questions are first recorded in `dir/questions.parquet`
/// (see the module docs); the corpus links use the corpus folder found under `root`.
///
/// `evaluate` writes it into its copy of the results before the copy becomes `eval/<name>`
/// (`gauge_core::artifact::replace_dir_with_finished_copy`), so two evaluates never write one
/// folder's page; `--report-only` writes in place.
pub fn write(dir: &Path, root: &Path) -> anyhow::Result<PathBuf> {
    let mut study = load(dir, root)?;
    let golden = golden_questions(&study.manifest, root);
    // With the golden set at hand the record is rewritten (whatever was there, even a file
    // that is not a questions table); without it the record is what the page shows.
    if !golden.is_empty() {
        let rows: Vec<(&String, &(String, Vec<String>))> = study.qids.iter().filter_map(|q| golden.get_key_value(q)).collect();
        replace_file(dir, QUESTIONS_FILE, |tmp| write_questions(tmp, &rows))?;
    }
    study.questions = recorded_questions(&dir.join(QUESTIONS_FILE))?;
    let html = page(&study);
    replace_file(dir, REPORT_FILE, |tmp| std::fs::write(tmp, html).with_context(|| format!("{}: cannot write the report page (is the disk full or the folder read-only?)", tmp.display())))
}

/// Writes `dir/name` through `dir/.<stem>.partial-<pid>.<extension>` (see [`partial_name`]),
/// renamed into place: two processes writing one folder (concurrent evaluates of a pipeline)
/// each replace the file whole, and a failed write or rename leaves nothing behind (a full
/// disk, a read-only folder).
fn replace_file(dir: &Path, name: &str, write: impl FnOnce(&Path) -> anyhow::Result<()>) -> anyhow::Result<PathBuf> {
    let (out, tmp) = (dir.join(name), dir.join(partial_name(name, std::process::id())));
    let written = write(&tmp).and_then(|()| std::fs::rename(&tmp, &out).with_context(|| format!("{}: cannot move it into place", out.display())));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| out)
}

/// The per-process temporary name of `name`: the process id goes before the extension, so
/// that a writer deriving its own temporary from the extension still gets one name per process
/// (`.questions.partial-7.parquet.partial-7`). With the id after the extension, and before
/// `write_parquet` named its own temporary per process, both processes' tables went through
/// one `.questions.parquet.parquet.partial`, each truncating the other's.
fn partial_name(name: &str, pid: u32) -> String {
    match name.rsplit_once('.') {
        Some((stem, extension)) => format!(".{stem}.partial-{pid}.{extension}"),
        None => format!(".{name}.partial-{pid}"),
    }
}

/// One metric row of `metrics.parquet`.
#[derive(Debug, Clone, Default)]
struct Metric {
    value: f64,
    ci: Option<(f64, f64)>,
    delta: Option<(f64, f64, f64)>,
    p_adjusted: Option<f64>,
    significant: bool,
    wtl: Option<(i32, i32, i32)>,
}

/// One passage of `runs.parquet`.
#[derive(Debug, Clone)]
struct Passage {
    source: String,
    page_start: i32,
    page_end: i32,
    relevant: bool,
}

/// One row of `per_query.parquet` (what the page uses).
#[derive(Debug, Clone, Default)]
struct QueryRow {
    first_relevant_rank: Option<i32>,
    reciprocal_rank: f64,
    hit_1: f64,
    refused: bool,
}

/// One row of `answers.parquet`.
#[derive(Debug, Clone, Default)]
struct Answer {
    question: String,
    answer: String,
    refused: bool,
    citations: (i32, i32, i32),
    judge: Vec<(&'static str, Option<i32>)>,
}

/// Everything the page is drawn from.
struct Study {
    name: String,
    manifest: serde_json::Value,
    configs: Vec<String>,
    metrics: BTreeMap<(String, String), Metric>,
    metric_names: Vec<String>,
    queries: BTreeMap<(String, String), QueryRow>,
    qids: Vec<String>,
    /// How many of `qids` (the last ones) only the answer rows asked: out-of-corpus questions.
    answer_only: usize,
    runs: BTreeMap<(String, String), Vec<Passage>>,
    failures: BTreeMap<(String, String), String>,
    answers: BTreeMap<(String, String), Answer>,
    questions: BTreeMap<String, (String, Vec<String>)>,
    corpus: Option<String>,
    search: Option<arrow::record_batch::RecordBatch>,
}

/// The page for `dir` (see [`write`]).
pub fn render(dir: &Path, root: &Path) -> anyhow::Result<String> {
    let mut study = load(dir, root)?;
    study.questions = recorded_questions(&dir.join(QUESTIONS_FILE))?;
    Ok(page(&study))
}

/// The page's HTML.
fn page(study: &Study) -> String {
    let mut h = String::with_capacity(1 << 20);
    head(&mut h, study);
    summary(&mut h, study);
    config_table(&mut h, study);
    plots(&mut h, study);
    answer_table(&mut h, study);
    gate(&mut h, study);
    search(&mut h, study);
    questions(&mut h, study);
    footer(&mut h, study);
    h.push_str(concat!("<script>", include_str!("report_page.js"), "</script>\n</body>\n</html>\n"));
    h
}

fn load(dir: &Path, root: &Path) -> anyhow::Result<Study> {
    let manifest_path = dir.join("manifest.json");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&manifest_path).with_context(|| format!("{}: cannot read (is {} an evaluation folder?)", manifest_path.display(), dir.display()))?)
        .with_context(|| format!("{}: not JSON", manifest_path.display()))?;
    anyhow::ensure!(manifest["stage"] == "evaluate", "{}: not an evaluation manifest (stage {})", manifest_path.display(), manifest["stage"]);
    let name = manifest["config"]["pipeline"].as_str().unwrap_or("evaluation").to_string();

    let batch = read_parquet_any(&dir.join("metrics.parquet"))?;
    let c = Columns::new(&batch);
    let (config, category, metric, value) = (c.strings_required("config"), c.strings_required("category"), c.strings_required("metric"), c.f64s("value"));
    let (lo, hi, d, dlo, dhi) = (c.f64s("ci_low"), c.f64s("ci_high"), c.f64s("delta"), c.f64s("delta_ci_low"), c.f64s("delta_ci_high"));
    let n = batch.num_rows();
    let adj = if c.has("p_adjusted") { c.f64s("p_adjusted") } else { vec![None; n] };
    let sig: Vec<bool> = if c.has("significant") { c.strings("significant").into_iter().map(|s| s.as_deref() == Some("true")).collect() } else { vec![false; n] };
    let (w, t, l) = if c.has("wins") { (c.i32s_nullable("wins"), c.i32s_nullable("ties"), c.i32s_nullable("losses")) } else { (vec![None; n], vec![None; n], vec![None; n]) };
    let (mut configs, mut metric_names, mut metrics) = (Vec::<String>::new(), Vec::<String>::new(), BTreeMap::new());
    for i in 0..n {
        if category[i] != "all" {
            continue;
        }
        if !configs.contains(&config[i]) {
            configs.push(config[i].clone());
        }
        if !metric_names.contains(&metric[i]) {
            metric_names.push(metric[i].clone());
        }
        let m = Metric {
            value: value[i].unwrap_or(f64::NAN),
            ci: lo[i].zip(hi[i]),
            delta: d[i].map(|d| (d, dlo[i].unwrap_or(f64::NAN), dhi[i].unwrap_or(f64::NAN))),
            p_adjusted: adj[i],
            significant: sig[i],
            wtl: match (w[i], t[i], l[i]) {
                (Some(a), Some(b), Some(c)) => Some((a, b, c)),
                _ => None,
            },
        };
        metrics.insert((config[i].clone(), metric[i].clone()), m);
    }

    let batch = read_parquet_any(&dir.join("per_query.parquet"))?;
    let c = Columns::new(&batch);
    let (pconfig, pqid, frr, rr, hit1, refused) = (c.strings_required("config"), c.strings_required("qid"), c.i32s_nullable("first_relevant_rank"), c.f64s("reciprocal_rank"), c.f64s("hit_1"), c.bools("refused"));
    let (mut queries, mut qids) = (BTreeMap::new(), Vec::<String>::new());
    let mut seen = BTreeSet::new();
    for i in 0..batch.num_rows() {
        if seen.insert(pqid[i].clone()) {
            qids.push(pqid[i].clone());
        }
        queries.insert((pconfig[i].clone(), pqid[i].clone()), QueryRow { first_relevant_rank: frr[i], reciprocal_rank: rr[i].unwrap_or(0.0), hit_1: hit1[i].unwrap_or(0.0), refused: refused[i] });
    }

    let batch = read_parquet_any(&dir.join("runs.parquet"))?;
    let c = Columns::new(&batch);
    let (rconfig, rqid, source, ps, pe, relevant) = (c.strings_required("config"), c.strings_required("qid"), c.strings_required("source"), c.i32s("page_start"), c.i32s("page_end"), c.bools("relevant"));
    let rank = c.i32s("rank");
    let mut runs: BTreeMap<(String, String), Vec<(i32, Passage)>> = BTreeMap::new();
    for i in 0..batch.num_rows() {
        runs.entry((rconfig[i].clone(), rqid[i].clone())).or_default().push((rank[i], Passage { source: source[i].clone(), page_start: ps[i], page_end: pe[i], relevant: relevant[i] }));
    }
    let runs: BTreeMap<(String, String), Vec<Passage>> = runs
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_by_key(|(r, _)| *r);
            (k, v.into_iter().map(|(_, p)| p).collect())
        })
        .collect();

    let mut failures = BTreeMap::new();
    let path = dir.join("failures.parquet");
    if path.is_file() {
        let batch = read_parquet_any(&path)?;
        let c = Columns::new(&batch);
        for ((cfg, q), lost) in c.strings_required("config").into_iter().zip(c.strings_required("qid")).zip(c.strings_required("lost_at")) {
            failures.insert((cfg, q), lost);
        }
    }

    let mut answers = BTreeMap::new();
    // Questions only the answer rows asked (a pipeline's `out_of_corpus`), after the golden set's.
    let mut answer_only = Vec::new();
    let path = dir.join("answers.parquet");
    if path.is_file() {
        let batch = read_parquet_any(&path)?;
        let c = Columns::new(&batch);
        let (cfg, qid, question, answer, refused) = (c.strings_required("config"), c.strings_required("qid"), c.strings_required("question"), c.strings_required("answer"), c.bools("refused"));
        let (nc, nv, ni) = (c.i32s("n_citations"), c.i32s("n_verified"), c.i32s("n_invented"));
        const JUDGE: [(&str, &str); 5] = [("faithfulness", "judge_faithfulness"), ("accuracy", "judge_accuracy"), ("completeness", "judge_completeness"), ("relevance", "judge_relevance"), ("citation quality", "judge_citation_quality")];
        let judge: Vec<Vec<Option<i32>>> = JUDGE.iter().map(|(_, col)| if c.has(col) { c.i32s_nullable(col) } else { vec![None; batch.num_rows()] }).collect();
        for i in 0..batch.num_rows() {
            let grades = JUDGE.iter().zip(&judge).map(|((label, _), col)| (*label, col[i])).collect();
            if seen.insert(qid[i].clone()) {
                answer_only.push(qid[i].clone());
            }
            answers.insert((cfg[i].clone(), qid[i].clone()), Answer { question: question[i].clone(), answer: answer[i].clone(), refused: refused[i], citations: (nc[i], nv[i], ni[i]), judge: grades });
        }
    }

    let answer_only_count = answer_only.len();
    qids.extend(answer_only);
    // Read by the callers (`render` reads the record; `write` first rewrites it).
    let questions = BTreeMap::new();
    let sources: BTreeSet<&str> = runs.values().flatten().map(|p| p.source.as_str()).collect();
    let corpus = corpus_dir(root, dir, &sources);
    let path = dir.join("search.parquet");
    let search = if path.is_file() { Some(read_parquet_any(&path)?) } else { None };
    Ok(Study { name, manifest, configs, metrics, metric_names, queries, qids, answer_only: answer_only_count, runs, failures, answers, questions, corpus, search })
}

/// `questions.parquet`: one row per question, its text and its gold passages as the page names
/// them (none for an out-of-corpus question).
fn write_questions(path: &Path, rows: &[(&String, &(String, Vec<String>))]) -> anyhow::Result<()> {
    use arrow::array::{ArrayRef, ListBuilder, StringArray, StringBuilder};
    use arrow::datatypes::{DataType, Field, Schema};
    let item = Field::new("item", DataType::Utf8, true);
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("qid", DataType::Utf8, false),
        Field::new("question", DataType::Utf8, false),
        Field::new("gold", DataType::List(std::sync::Arc::new(item.clone())), false),
    ]));
    let mut gold = ListBuilder::new(StringBuilder::new()).with_field(item);
    for (_, (_, g)) in rows {
        for label in g {
            gold.values().append_value(label);
        }
        gold.append(true);
    }
    let columns: Vec<ArrayRef> = vec![
        std::sync::Arc::new(StringArray::from_iter_values(rows.iter().map(|(q, _)| q.as_str()))),
        std::sync::Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, (t, _))| t.as_str()))),
        std::sync::Arc::new(gold.finish()),
    ];
    gauge_core::table::write_parquet(path, schema, columns)?;
    Ok(())
}

/// The questions recorded in `questions.parquet` (empty when the folder has none).
fn recorded_questions(path: &Path) -> anyhow::Result<BTreeMap<String, (String, Vec<String>)>> {
    if !path.is_file() {
        return Ok(BTreeMap::new());
    }
    let batch = read_parquet_any(path)?;
    let c = Columns::new(&batch);
    anyhow::ensure!(c.has("qid") && c.has("question") && c.has("gold"), "{}: not a questions table (qid, question, gold); delete it and run `evaluate --report-only` where the golden set is", path.display());
    let gold = batch.column_by_name("gold").and_then(|g| g.as_any().downcast_ref::<arrow::array::ListArray>()).with_context(|| format!("{}: `gold` is not a list of strings", path.display()))?;
    let mut out = BTreeMap::new();
    for (i, (qid, question)) in c.strings_required("qid").into_iter().zip(c.strings_required("question")).enumerate() {
        let labels = gold.value(i);
        let labels = labels.as_any().downcast_ref::<arrow::array::StringArray>().with_context(|| format!("{}: `gold` is not a list of strings", path.display()))?;
        out.insert(qid, (question, labels.iter().flatten().map(str::to_string).collect()));
    }
    Ok(out)
}

/// The golden set's questions and gold pages, and the out-of-corpus questions (no gold), each
/// when its recorded file is there unchanged.
fn golden_questions(manifest: &serde_json::Value, root: &Path) -> BTreeMap<String, (String, Vec<String>)> {
    let recorded = |name: &str| {
        let input = manifest["inputs"].as_array().into_iter().flatten().find(|i| i["name"] == name)?;
        let path = root.join(input["path"].as_str().unwrap_or(""));
        gauge_core::hash::file_hash(&path).ok().is_some_and(|h| Some(h.as_str()) == input["hash"].as_str()).then_some(path)
    };
    let Some(Ok(mut golden)) = recorded("golden").map(|p| gauge_core::golden::load_golden(&p)) else { return BTreeMap::new() };
    if let Some(Ok(more)) = recorded("out_of_corpus").map(|p| gauge_answer::load_out_of_corpus(&p, &golden)) {
        golden.extend(more);
    }
    golden
        .into_iter()
        .map(|q| {
            let gold = q.gold.iter().map(|g| match g {
                gauge_core::golden::GoldItem::Page { source, page, .. } => format!("{source} p. {page}"),
                gauge_core::golden::GoldItem::Span { source, page_start: Some(a), page_end: Some(b), .. } if a != b => format!("{source} pp. {a}–{b}"),
                gauge_core::golden::GoldItem::Span { source, page_start: Some(a), .. } => format!("{source} p. {a}"),
                gauge_core::golden::GoldItem::Span { source, char_start, char_end, .. } => format!("{source} chars {char_start}–{char_end}"),
            });
            (q.qid, (q.question, gold.collect()))
        })
        .collect()
}

/// The corpus folder the passages' sources live in, as a path relative to `dir`: the first
/// `corpus` of `root/pipelines/*.toml` (sorted) that holds every source.
fn corpus_dir(root: &Path, dir: &Path, sources: &BTreeSet<&str>) -> Option<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("pipelines")).ok()?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|e| e == "toml")).collect();
    files.sort();
    let (root_abs, dir_abs) = (root.canonicalize().ok()?, dir.canonicalize().ok()?);
    let mut tried = BTreeSet::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let Ok(value) = text.parse::<toml::Table>() else { continue };
        let Some(corpus) = value.get("corpus").and_then(|c| c.as_str()) else { continue };
        // Pipeline paths are relative to the pipeline file; the link is relative to `dir`.
        let target = normalise(&root_abs.join("pipelines").join(corpus));
        if !tried.insert(target.clone()) || sources.is_empty() || !sources.iter().all(|s| target.join(s).is_file()) {
            continue;
        }
        return Some(relative(&dir_abs, &target).to_string_lossy().replace('\\', "/"));
    }
    None
}

/// The path from folder `from` to `to` (both absolute and normalised).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let (a, b): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out: PathBuf = std::iter::repeat_n("..", a.len() - common).collect();
    for c in &b[common..] {
        out.push(c.as_os_str());
    }
    out
}

/// `a/./b/../c` → `a/c`, keeping leading `..`.
fn normalise(p: &Path) -> PathBuf {
    let mut out: Vec<std::ffi::OsString> = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if out.last().is_some_and(|l| l != "..") => {
                out.pop();
            }
            other => out.push(other.as_os_str().to_owned()),
        }
    }
    out.iter().collect()
}

/// HTML-escapes text.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A figure with three decimals (`–` when missing).
fn f3(v: f64) -> String {
    if v.is_finite() { format!("{v:.3}") } else { "–".into() }
}

/// A signed figure with three decimals.
fn s3(v: f64) -> String {
    if v.is_finite() { format!("{v:+.3}") } else { "–".into() }
}

/// A sort key attribute (`data-v`), empty when missing.
fn key(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!(" data-v=\"{v:.6}\""),
        _ => " data-v=\"\"".into(),
    }
}

/// An id-safe form of a question id.
fn anchor(qid: &str) -> String {
    qid.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// The primary ranking metric's name (`mrr@k`), else the first metric.
fn primary(s: &Study) -> Option<&str> {
    s.metric_names.iter().find(|m| m.starts_with("mrr@")).or(s.metric_names.first()).map(String::as_str)
}

fn is_retrieval(m: &str) -> bool {
    ["hit@", "mrr@", "ndcg@", "recall@"].iter().any(|p| m.starts_with(p))
}

fn label(m: &str) -> String {
    let m = m.strip_prefix("answer/").unwrap_or(m);
    for (p, l) in [("hit@", "Hit@"), ("mrr@", "MRR@"), ("ndcg@", "nDCG@"), ("recall@", "Recall@")] {
        if let Some(k) = m.strip_prefix(p) {
            return format!("{l}{k}");
        }
    }
    m.replace('_', " ")
}

fn head(h: &mut String, s: &Study) {
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>gauge · {}</title>\n<style>{}</style>\n</head>\n<body>\n",
        esc(&s.name),
        include_str!("report_page.css")
    );
}

fn summary(h: &mut String, s: &Study) {
    let m = &s.manifest;
    let golden = m["inputs"].as_array().into_iter().flatten().find(|i| i["name"] == "golden").and_then(|i| i["path"].as_str()).unwrap_or("?");
    let _ = write!(
        h,
        "<header><h1>Evaluation <code>{}</code></h1>\n<p>{} questions from <code>{}</code>{}, {} configs; relevance {}, k {}, {} bootstrap resamples; corrected p by {} over the family of comparisons (<a href=\"ablation.md\">ablation.md</a> has the same tables).</p>\n",
        esc(&s.name),
        s.qids.len() - s.answer_only,
        esc(golden),
        if s.answer_only > 0 { format!(" (and {} out-of-corpus questions, answered only)", s.answer_only) } else { String::new() },
        s.configs.len(),
        esc(m["config"]["relevance"].as_str().unwrap_or("?")),
        m["config"]["k"],
        m["config"]["resamples"],
        esc(m["config"]["stats"]["correction"].as_str().unwrap_or("holm")),
    );
    let _ = writeln!(h, "<nav><a href=\"#configs\">Configs</a> · <a href=\"#plots\">Plots</a>{}{}{} · <a href=\"#questions\">Questions</a> · <a href=\"#provenance\">Provenance</a></nav></header>",
        if s.metric_names.iter().any(|m| m.starts_with("answer/")) { " · <a href=\"#answers\">Answers</a>" } else { "" },
        if m["stats"]["gate"].is_array() { " · <a href=\"#gate\">Gate</a>" } else { "" },
        if s.search.is_some() { " · <a href=\"#search\">Config search</a>" } else { "" });
}

/// Paired differences of `f` between `config` and the baseline over the questions both have.
fn paired(s: &Study, config: &str, f: impl Fn(&QueryRow) -> f64) -> Vec<f64> {
    let base = &s.configs[0];
    s.qids.iter().filter_map(|q| Some(f(s.queries.get(&(config.to_string(), q.clone()))?) - f(s.queries.get(&(base.clone(), q.clone()))?))).collect()
}

fn config_table(h: &mut String, s: &Study) {
    let Some(primary) = primary(s) else { return };
    let shown: Vec<&String> = s.metric_names.iter().filter(|m| is_retrieval(m)).collect();
    let _ = writeln!(h, "<section id=\"configs\"><h2>Configs</h2>\n<p>Value [95 % interval] per metric; Δ against the baseline <b>{}</b> on {} with its paired interval, the corrected p (<b>bold</b> below 0.05), question-by-question wins / ties / losses, and the paired minimum detectable effect (80 % power at α 0.05: a Δ below it cannot be told from chance here). Click a heading to sort.</p>", esc(&s.configs[0]), esc(&label(primary)));
    h.push_str("<table class=\"sortable\" id=\"config-table\"><thead><tr><th data-k=\"config\">Config</th>");
    for m in &shown {
        let _ = write!(h, "<th data-k=\"{}\">{}</th>", esc(m), esc(&label(m)));
    }
    let _ = write!(h, "<th data-k=\"delta\">Δ {}</th><th data-k=\"p\">p adj.</th><th data-k=\"wtl\">W / T / L</th><th data-k=\"mde\">MDE</th><th data-k=\"latency\">p50 ms</th></tr></thead>\n<tbody>\n", esc(&label(primary)));
    for (i, cfg) in s.configs.iter().filter(|c| s.metrics.contains_key(&((*c).clone(), primary.to_string()))).enumerate() {
        let get = |m: &str| s.metrics.get(&(cfg.clone(), m.to_string()));
        let _ = write!(h, "<tr><td data-v=\"{i}\">{}{}</td>", esc(cfg), if i == 0 { " <span class=\"tag\">baseline</span>" } else { "" });
        for m in &shown {
            match get(m) {
                Some(x) => {
                    let ci = x.ci.map(|(a, b)| format!(" <small>[{}, {}]</small>", f3(a), f3(b))).unwrap_or_default();
                    let _ = write!(h, "<td{}>{}{}</td>", key(Some(x.value)), f3(x.value), ci);
                }
                None => h.push_str("<td data-v=\"\">–</td>"),
            }
        }
        let p = get(primary);
        match p.and_then(|x| x.delta) {
            Some((d, lo, hi)) => {
                let _ = write!(h, "<td{}>{} <small>[{}, {}]</small></td>", key(Some(d)), s3(d), s3(lo), s3(hi));
            }
            None => h.push_str("<td data-v=\"\">–</td>"),
        }
        match p.and_then(|x| x.p_adjusted) {
            Some(v) => {
                let sig = p.is_some_and(|x| x.significant) || v < 0.05;
                let _ = write!(h, "<td{}>{}{}{}</td>", key(Some(v)), if sig { "<b>" } else { "" }, f3(v), if sig { "</b>" } else { "" });
            }
            None => h.push_str("<td data-v=\"\">–</td>"),
        }
        match p.and_then(|x| x.wtl) {
            Some((w, t, l)) => {
                let _ = write!(h, "<td data-v=\"{}\">{w} / {t} / {l}</td>", w - l);
            }
            None => h.push_str("<td data-v=\"\">–</td>"),
        }
        let diffs = if i == 0 { Vec::new() } else { paired(s, cfg, |q| q.reciprocal_rank) };
        let mde = (diffs.len() >= 2 && primary.starts_with("mrr@")).then(|| crate::stats::minimum_detectable_effect(crate::stats::std_dev(&diffs), diffs.len()));
        let _ = write!(h, "<td{}>{}</td>", key(mde), mde.map(|v| format!("±{}", f3(v))).unwrap_or_else(|| "–".into()));
        let lat = get("latency_p50_ms").map(|x| x.value);
        let _ = writeln!(h, "<td{}>{}</td></tr>", key(lat), lat.map(|v| format!("{v:.1}")).unwrap_or_else(|| "–".into()));
    }
    h.push_str("</tbody></table></section>\n");
}

/// A scatter of (x, y) points with labels; `log_x` for latency.
fn scatter(h: &mut String, title: &str, x_label: &str, y_label: &str, points: &[(String, f64, f64, bool)], log_x: bool) {
    let (w, ht, left, right, top, bottom) = (720.0, 360.0, 64.0, 220.0, 28.0, 48.0);
    let tx = |x: f64| if log_x { x.max(1e-3).log10() } else { x };
    let xs: Vec<f64> = points.iter().map(|p| tx(p.1)).filter(|v| v.is_finite()).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.2).filter(|v| v.is_finite()).collect();
    if xs.is_empty() || ys.is_empty() {
        return;
    }
    let (mut x0, mut x1) = (xs.iter().copied().fold(f64::INFINITY, f64::min), xs.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    let (mut y0, mut y1) = (ys.iter().copied().fold(f64::INFINITY, f64::min), ys.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    if x1 - x0 < 1e-9 {
        x0 -= 0.5;
        x1 += 0.5;
    }
    if y1 - y0 < 1e-9 {
        y0 -= 0.05;
        y1 += 0.05;
    }
    let (padx, pady) = ((x1 - x0) * 0.06, (y1 - y0) * 0.08);
    let (x0, x1, y0, y1) = (x0 - padx, x1 + padx, y0 - pady, y1 + pady);
    let px = |x: f64| left + (tx(x) - x0) / (x1 - x0) * (w - left - right);
    let py = |y: f64| top + (y1 - y) / (y1 - y0) * (ht - top - bottom);
    let _ = writeln!(h, "<figure><svg viewBox=\"0 0 {w} {ht}\" role=\"img\" aria-label=\"{}\"><title>{}</title>", esc(title), esc(title));
    let _ = writeln!(h, "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" class=\"frame\"/>", w - left - right, ht - top - bottom);
    for k in 0..=4 {
        let yv = y0 + (y1 - y0) * k as f64 / 4.0;
        let _ = writeln!(h, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"end\">{}</text>", left - 4.0, py(yv) + 4.0, f3(yv));
        let xv = x0 + (x1 - x0) * k as f64 / 4.0;
        let shown = if log_x { 10f64.powf(xv) } else { xv };
        let _ = writeln!(h, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"middle\">{}</text>", left + (xv - x0) / (x1 - x0) * (w - left - right), ht - bottom + 16.0, if shown >= 100.0 { format!("{shown:.0}") } else { format!("{shown:.1}") });
    }
    let _ = writeln!(h, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"axis\" text-anchor=\"middle\">{}</text>", left + (w - left - right) / 2.0, ht - 8.0, esc(x_label));
    let _ = writeln!(h, "<text x=\"14\" y=\"{:.1}\" class=\"axis\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">{}</text>", top + (ht - top - bottom) / 2.0, top + (ht - top - bottom) / 2.0, esc(y_label));
    for (i, (name, x, y, base)) in points.iter().enumerate() {
        if !(tx(*x).is_finite() && y.is_finite()) {
            continue;
        }
        let _ = writeln!(h, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" class=\"{}\"><title>{}: {} at {}</title></circle><text x=\"{:.1}\" y=\"{:.1}\" class=\"label\">{}</text>", px(*x), py(*y), if *base { "pt base" } else { "pt" }, esc(name), f3(*y), f3(*x), px(*x) + 6.0, py(*y) + 4.0, i + 1);
    }
    // The legend: numbers to names, right of the frame.
    for (i, (name, ..)) in points.iter().enumerate() {
        let _ = writeln!(h, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{} {}</text>", w - right + 8.0, top + 12.0 + i as f64 * 13.0, i + 1, esc(&shorten(name, 30)));
    }
    h.push_str("</svg></figure>\n");
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { s.chars().take(n - 1).collect::<String>() + "…" }
}

/// Horizontal intervals of one metric, one row per config.
fn intervals(h: &mut String, s: &Study, metric: &str) {
    let rows: Vec<(&String, &Metric)> = s.configs.iter().filter_map(|c| Some((c, s.metrics.get(&(c.clone(), metric.to_string()))?))).collect();
    if rows.is_empty() {
        return;
    }
    let (w, left, right, row_h, top) = (720.0, 250.0, 20.0, 18.0, 24.0);
    let ht = top + rows.len() as f64 * row_h + 30.0;
    // From 0 (every metric drawn here is a share) to the largest upper bound, at least 1.
    let lo = 0.0;
    let hi = rows.iter().map(|(_, m)| m.ci.map_or(m.value, |c| c.1)).fold(f64::NEG_INFINITY, f64::max).max(1.0);
    let px = |v: f64| left + (v - lo) / (hi - lo) * (w - left - right);
    let title = format!("{} per config with its 95 % interval", label(metric));
    let _ = writeln!(h, "<figure><svg viewBox=\"0 0 {w} {ht:.0}\" role=\"img\" aria-label=\"{}\"><title>{}</title>", esc(&title), esc(&title));
    for k in 0..=4 {
        let v = lo + (hi - lo) * k as f64 / 4.0;
        let _ = writeln!(h, "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{top}\" y2=\"{:.1}\" class=\"grid\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"middle\">{}</text>", px(v), px(v), ht - 26.0, px(v), ht - 12.0, f3(v));
    }
    let _ = writeln!(h, "<text x=\"{left}\" y=\"14\" class=\"axis\">{}</text>", esc(&title));
    for (i, (name, m)) in rows.iter().enumerate() {
        let y = top + i as f64 * row_h + row_h / 2.0;
        let _ = writeln!(h, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\" text-anchor=\"end\">{}</text>", left - 8.0, y + 4.0, esc(&shorten(name, 40)));
        if let Some((a, b)) = m.ci {
            let _ = writeln!(h, "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" class=\"ci\"/>", px(a), px(b));
        }
        let _ = writeln!(h, "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"4\" class=\"{}\"><title>{}: {}</title></circle>", px(m.value), if i == 0 { "pt base" } else { "pt" }, esc(name), f3(m.value));
    }
    h.push_str("</svg></figure>\n");
}

fn plots(h: &mut String, s: &Study) {
    let Some(primary) = primary(s) else { return };
    h.push_str("<section id=\"plots\"><h2>Plots</h2>\n");
    let points: Vec<(String, f64, f64, bool)> = s
        .configs
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((c.clone(), s.metrics.get(&(c.clone(), "latency_p50_ms".into()))?.value, s.metrics.get(&(c.clone(), primary.to_string()))?.value, i == 0)))
        .collect();
    scatter(h, &format!("{} against median query latency", label(primary)), "median latency per question, ms (log scale)", &label(primary), &points, true);
    intervals(h, s, primary);
    if s.metric_names.iter().any(|m| m == "hit@1") {
        intervals(h, s, "hit@1");
    }
    h.push_str("</section>\n");
}

fn answer_table(h: &mut String, s: &Study) {
    let names: Vec<&String> = s.metric_names.iter().filter(|m| m.starts_with("answer/")).collect();
    if names.is_empty() {
        return;
    }
    let configs: Vec<&String> = s.configs.iter().filter(|c| names.iter().any(|m| s.metrics.contains_key(&((*c).clone(), (*m).clone())))).collect();
    h.push_str("<section id=\"answers\"><h2>Answers</h2>\n<p>Answer metrics per answering config (value and 95 % interval; Δ and p are in ablation.md).</p>\n<table class=\"sortable\" id=\"answer-table\"><thead><tr><th data-k=\"config\">Config</th>");
    for m in &names {
        let _ = write!(h, "<th data-k=\"{}\">{}</th>", esc(m), esc(&label(m)));
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for (i, c) in configs.iter().enumerate() {
        let _ = write!(h, "<tr><td data-v=\"{i}\">{}</td>", esc(c));
        for m in &names {
            match s.metrics.get(&((*c).clone(), (*m).clone())) {
                Some(x) => {
                    let ci = x.ci.map(|(a, b)| format!(" <small>[{}, {}]</small>", f3(a), f3(b))).unwrap_or_default();
                    let _ = write!(h, "<td{}>{}{}</td>", key(Some(x.value)), f3(x.value), ci);
                }
                None => h.push_str("<td data-v=\"\">–</td>"),
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></section>\n");
}

fn gate(h: &mut String, s: &Study) {
    let Some(rows) = s.manifest["stats"]["gate"].as_array() else { return };
    h.push_str("<section id=\"gate\"><h2>Gate: trained models against their untrained base</h2>\n<p>Declared before the run: each trained row against the row it changes on the primary metric, corrected over the gate's own family. A row that is not <b>better</b> should not replace its base.</p>\n<table class=\"sortable\" id=\"gate-table\"><thead><tr><th data-k=\"row\">Trained row</th><th data-k=\"base\">Base</th><th data-k=\"metric\">Metric</th><th data-k=\"delta\">Δ</th><th data-k=\"mde\">MDE</th><th data-k=\"power\">Power at the target gain</th><th data-k=\"p\">p</th><th data-k=\"padj\">p adjusted</th><th data-k=\"verdict\">Verdict</th></tr></thead>\n<tbody>\n");
    for (i, r) in rows.iter().enumerate() {
        let num = |k: &str| r[k].as_f64();
        let verdict = r["verdict"].as_str().unwrap_or("?");
        let _ = writeln!(
            h,
            "<tr class=\"{}\"><td data-v=\"{i}\">{}</td><td>{}</td><td>{}</td><td{}>{}</td><td{}>±{}</td><td{}>{} at {}</td><td{}>{}</td><td{}>{}</td><td>{}</td></tr>",
            if verdict == "better" { "better" } else { "not" },
            esc(r["row"].as_str().unwrap_or("?")),
            esc(r["base"].as_str().unwrap_or("?")),
            esc(r["metric"].as_str().unwrap_or("?")),
            key(num("delta")),
            s3(num("delta").unwrap_or(f64::NAN)),
            key(num("mde")),
            f3(num("mde").unwrap_or(f64::NAN)),
            key(num("power_at_target_gain")),
            num("power_at_target_gain").map(|p| format!("{:.0} %", p * 100.0)).unwrap_or_else(|| "–".into()),
            s3(num("target_gain").unwrap_or(f64::NAN)),
            key(num("p")),
            f3(num("p").unwrap_or(f64::NAN)),
            key(num("p_adjusted")),
            f3(num("p_adjusted").unwrap_or(f64::NAN)),
            esc(verdict),
        );
    }
    h.push_str("</tbody></table>");
    if let Some(rows) = s.manifest["stats"]["non_inferiority"].as_array() {
        h.push_str("\n<h3>Secondary metrics: non-inferiority</h3>\n<p>Declared before the run with their margins: non-inferior when the lower end of the paired 95 % interval lies above −margin.</p>\n<table><thead><tr><th>Trained row</th><th>Base</th><th>Metric</th><th>n</th><th>Δ [95 %]</th><th>Margin</th><th>Verdict</th></tr></thead>\n<tbody>\n");
        for r in rows {
            let num = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            let verdict = r["verdict"].as_str().unwrap_or("?");
            let _ = writeln!(
                h,
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} [{}, {}]</td><td>−{}</td><td>{}</td></tr>",
                if verdict == "non-inferior" { "better" } else { "not" },
                esc(r["row"].as_str().unwrap_or("?")),
                esc(r["base"].as_str().unwrap_or("?")),
                esc(r["metric"].as_str().unwrap_or("?")),
                r["n"].as_u64().map_or("–".to_string(), |n| n.to_string()),
                s3(num("delta")),
                s3(num("ci_low")),
                s3(num("ci_high")),
                f3(num("margin")),
                esc(verdict),
            );
        }
        h.push_str("</tbody></table>\n");
    }
    h.push_str("</section>\n");
}

fn search(h: &mut String, s: &Study) {
    let Some(batch) = &s.search else { return };
    let c = Columns::new(batch);
    let (config, rung, questions, metric, value, cost) = (c.strings_required("config"), c.i32s("rung"), c.i32s("questions"), c.strings_required("metric"), c.f64s("value"), c.f64s("cost_seconds"));
    let fields: Vec<String> = batch.schema().fields().iter().map(|f| f.name().clone()).filter(|n| n.starts_with("field:")).collect();
    let field_values: Vec<Vec<Option<String>>> = fields.iter().map(|f| c.strings(f)).collect();
    let _ = writeln!(h, "<section id=\"search\"><h2>Config search</h2>\n<p>{} configs tried ({}); each rung re-scores the best of the one before on more questions. The metric against the cumulative cost of its evaluation:</p>", batch.num_rows(), esc(metric.first().map(String::as_str).unwrap_or("?")));
    let last_rung = rung.iter().copied().max().unwrap_or(0);
    let points: Vec<(String, f64, f64, bool)> = (0..batch.num_rows()).filter(|&i| rung[i] == last_rung).map(|i| (config[i].clone(), cost[i].unwrap_or(f64::NAN), value[i].unwrap_or(f64::NAN), false)).collect();
    if points.len() <= 24 {
        scatter(h, &format!("{} against cost, last rung", label(metric.first().map(String::as_str).unwrap_or(""))), "seconds to evaluate (log scale)", &label(metric.first().map(String::as_str).unwrap_or("")), &points, true);
    }
    // Per parameter: the best value reached with each setting (first rung: every config).
    h.push_str("<h3>Per parameter: the best first-rung value with each setting</h3>\n<table class=\"sortable\" id=\"search-params\"><thead><tr><th data-k=\"param\">Parameter</th><th data-k=\"setting\">Setting</th><th data-k=\"best\">Best</th><th data-k=\"configs\">Configs</th></tr></thead>\n<tbody>\n");
    for (f, vals) in fields.iter().zip(&field_values) {
        let mut by: BTreeMap<String, (f64, usize)> = BTreeMap::new();
        for i in (0..batch.num_rows()).filter(|&i| rung[i] == 0) {
            let e = by.entry(vals[i].clone().unwrap_or_else(|| "–".into())).or_insert((f64::NEG_INFINITY, 0));
            e.0 = e.0.max(value[i].unwrap_or(f64::NAN));
            e.1 += 1;
        }
        for (setting, (best, n)) in by {
            let _ = writeln!(h, "<tr><td>{}</td><td>{}</td><td{}>{}</td><td data-v=\"{n}\">{n}</td></tr>", esc(f.trim_start_matches("field:")), esc(&setting), key(Some(best)), f3(best));
        }
    }
    h.push_str("</tbody></table>\n<h3>Every config</h3>\n<table class=\"sortable\" id=\"search-table\"><thead><tr><th data-k=\"config\">Config</th><th data-k=\"rung\">Rung</th><th data-k=\"questions\">Questions</th><th data-k=\"value\">Value</th><th data-k=\"cost\">Seconds</th>");
    for f in &fields {
        let _ = write!(h, "<th data-k=\"{}\">{}</th>", esc(f), esc(f.trim_start_matches("field:")));
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for i in 0..batch.num_rows() {
        let _ = write!(h, "<tr><td>{}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td><td{}>{}</td><td{}>{:.1}</td>", esc(&config[i]), rung[i], rung[i], questions[i], questions[i], key(value[i]), f3(value[i].unwrap_or(f64::NAN)), key(cost[i]), cost[i].unwrap_or(f64::NAN));
        for vals in &field_values {
            let _ = write!(h, "<td>{}</td>", esc(vals[i].as_deref().unwrap_or("–")));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></section>\n");
}

fn questions(h: &mut String, s: &Study) {
    // Sources get short names (S1, S2 …) in the passage lists.
    let sources: BTreeSet<&str> = s.runs.values().flatten().map(|p| p.source.as_str()).collect();
    let alias: BTreeMap<&str, String> = sources.iter().enumerate().map(|(i, src)| (*src, format!("S{}", i + 1))).collect();
    let _ = writeln!(h, "<section id=\"questions\"><h2>Questions</h2>\n<p>Each config's rank of the first relevant passage (– : none in the top k; R : refused). Open a question for where the gold was lost, the ranked passages (relevant ones highlighted; S<i>n</i> p. <i>a</i>–<i>b</i> links to the page{}) and the answers.</p>",
        if s.corpus.is_some() { "" } else { " when the corpus is found" });
    h.push_str("<p class=\"sources\">");
    for (src, a) in &alias {
        let link = s.corpus.as_ref().map(|c| format!("<a id=\"src-{a}\" href=\"{}/{}\">{}</a>", esc(c), esc(src), esc(src))).unwrap_or_else(|| esc(src));
        let _ = write!(h, "<span><b>{a}</b> {link}</span> ");
    }
    h.push_str("</p>\n<p><label>Filter <input id=\"q-filter\" type=\"search\" placeholder=\"question id or words\"></label></p>\n");
    let ranked: Vec<&String> = s.configs.iter().filter(|c| s.qids.iter().any(|q| s.queries.contains_key(&((*c).clone(), q.clone())))).collect();
    h.push_str("<div class=\"wide\"><table class=\"sortable\" id=\"question-table\"><thead><tr><th data-k=\"qid\">Question</th>");
    for (i, c) in ranked.iter().enumerate() {
        let _ = write!(h, "<th data-k=\"c{i}\" title=\"{}\">{}</th>", esc(c), i + 1);
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for (n, q) in s.qids.iter().enumerate() {
        let text = question_text(s, q);
        let _ = write!(h, "<tr data-q=\"{}\"><td data-v=\"{n}\"><a href=\"#q-{}\">{}</a> <small>{}</small></td>", esc(&anchor(q)), esc(&anchor(q)), esc(q), esc(&shorten(&text, 90)));
        for c in &ranked {
            match s.queries.get(&((*c).clone(), q.clone())) {
                Some(r) if r.refused => h.push_str("<td data-v=\"99\" class=\"refused\">R</td>"),
                Some(QueryRow { first_relevant_rank: Some(k), .. }) => {
                    let class = if *k == 1 { "r1" } else if *k <= 3 { "r3" } else { "rk" };
                    let _ = write!(h, "<td data-v=\"{k}\" class=\"{class}\">{k}</td>");
                }
                Some(_) => h.push_str("<td data-v=\"98\" class=\"miss\">–</td>"),
                None => h.push_str("<td data-v=\"\"></td>"),
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></div>\n<p class=\"legend-list\">");
    for (i, c) in ranked.iter().enumerate() {
        let _ = write!(h, "<span><b>{}</b> {}</span> ", i + 1, esc(c));
    }
    h.push_str("</p>\n");
    for q in &s.qids {
        let gold = s.questions.get(q).map(|(_, g)| g.clone()).unwrap_or_default();
        let text = question_text(s, q);
        let _ = writeln!(h, "<details id=\"q-{}\" class=\"question\"><summary><b>{}</b> {}</summary>", esc(&anchor(q)), esc(q), esc(&text));
        if !gold.is_empty() {
            let _ = writeln!(h, "<p class=\"gold\">Gold: {}</p>", gold.iter().map(|g| esc(g)).collect::<Vec<_>>().join("; "));
        }
        h.push_str("<table class=\"passages\"><tbody>\n");
        for c in &s.configs {
            let row = s.queries.get(&(c.clone(), q.clone()));
            let ans = s.answers.get(&(c.clone(), q.clone()));
            if let Some(row) = row {
                let lost = s.failures.get(&(c.clone(), q.clone())).map(|l| format!(" <span class=\"lost\">lost at {}</span>", esc(l))).unwrap_or_default();
                let rank = match (row.refused, row.first_relevant_rank) {
                    (true, _) => "refused".to_string(),
                    (_, Some(k)) => format!("gold at {k}"),
                    _ => "no gold in the top k".to_string(),
                };
                let _ = write!(h, "<tr><th>{}<br><small>{rank}, RR {} · Hit@1 {}</small>{lost}</th><td>", esc(c), f3(row.reciprocal_rank), f3(row.hit_1));
                for (i, p) in s.runs.get(&(c.clone(), q.clone())).into_iter().flatten().enumerate() {
                    let pages = if p.page_start == p.page_end { format!("p. {}", p.page_start) } else { format!("pp. {}–{}", p.page_start, p.page_end) };
                    let a = alias.get(p.source.as_str()).cloned().unwrap_or_default();
                    let class = if p.relevant { " class=\"hit\"" } else { "" };
                    match &s.corpus {
                        // The relevant passages link to their page in the page itself; the
                        // others get their link from the script (from the source list above
                        // and the page in their text): a full href on every one of thousands
                        // of passages made large evaluations' pages several megabytes.
                        Some(corpus) if p.relevant => {
                            let _ = write!(h, "<a{class} href=\"{}/{}#page={}\">{} {a} {pages}</a> ", esc(corpus), esc(&p.source), p.page_start, i + 1);
                        }
                        Some(_) => {
                            let _ = write!(h, "<a>{} {a} {pages}</a> ", i + 1);
                        }
                        None => {
                            let _ = write!(h, "<span{class}>{} {a} {pages}</span> ", i + 1);
                        }
                    }
                }
                h.push_str("</td></tr>\n");
            }
            if let Some(ans) = ans {
                let (n, v, inv) = ans.citations;
                let grades: Vec<String> = ans.judge.iter().filter_map(|(l, g)| g.map(|g| format!("{l} {g}"))).collect();
                // The passages the answer was given: its retrieval config's ranked passages
                // (`<retrieval> · <generator>`), when checking against them gives the recorded counts.
                let retrieval = c.split(" · ").next().unwrap_or(c);
                let given: Vec<gauge_cite::GivenPassage> = s.runs.get(&(retrieval.to_string(), q.clone())).into_iter().flatten().map(|p| gauge_cite::GivenPassage { chunk_id: String::new(), source: p.source.clone(), page_start: p.page_start, page_end: p.page_end }).collect();
                let found = gauge_cite::check(&ans.answer, &given);
                let marked = found.len() as i32 == n && found.iter().filter(|c| c.verified).count() as i32 == v;
                let _ = writeln!(
                    h,
                    "<tr class=\"answer\"><th>{}<br><small>answer{}</small></th><td><p class=\"cites\">{n} citations: <span class=\"ok\">{v} verified</span>, <span class=\"bad\">{inv} invented</span>{}{}</p><pre>{}</pre></td></tr>",
                    esc(c),
                    if ans.refused { " (refused)" } else { "" },
                    if marked { " (marked in the text: ✓ verified, ✗ not)" } else { "" },
                    if grades.is_empty() { String::new() } else { format!("; judge: {}", grades.join(", ")) },
                    mark_citations(&ans.answer, marked.then_some(given.as_slice()))
                );
            }
        }
        h.push_str("</tbody></table></details>\n");
    }
    h.push_str("</section>\n");
}

/// A question's text: the golden set's, else an answer row's, else empty.
fn question_text(s: &Study, q: &str) -> String {
    s.questions.get(q).map(|(t, _)| t.clone()).filter(|t| !t.is_empty()).or_else(|| s.answers.iter().find(|((_, aq), _)| aq == q).map(|(_, a)| a.question.clone())).unwrap_or_default()
}

/// The answer text escaped, with bracketed citations (`[source p. 3]`) marked: with the
/// passages it was given, each as verified (`✓`) or not (`✗`) by [`gauge_cite::check`].
fn mark_citations(text: &str, given: Option<&[gauge_cite::GivenPassage]>) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(len) = rest[open..].find(']') else { break };
        let token = &rest[open..=open + len];
        out.push_str(&esc(&rest[..open]));
        let cited = gauge_cite::check(token, given.unwrap_or(&[]));
        match (cited.first(), given) {
            (Some(c), Some(_)) if c.verified => {
                let _ = write!(out, "<mark class=\"ok\" title=\"verified: a passage given holds this page\">{} ✓</mark>", esc(token));
            }
            (Some(_), Some(_)) => {
                let _ = write!(out, "<mark class=\"bad\" title=\"not verified: no passage given holds this page\">{} ✗</mark>", esc(token));
            }
            (Some(_), None) => {
                let _ = write!(out, "<mark>{}</mark>", esc(token));
            }
            (None, _) => out.push_str(&esc(token)),
        }
        rest = &rest[open + len + 1..];
    }
    out.push_str(&esc(rest));
    out
}

fn footer(h: &mut String, s: &Study) {
    let m = &s.manifest;
    let _ = writeln!(
        h,
        "<footer id=\"provenance\"><h2>Provenance</h2>\n<p>gauge {} · commit <code>{}</code> · run {} → {} · fingerprint <code>{}</code> · seed {}</p>\n<table><thead><tr><th>Input</th><th>Path</th><th>BLAKE3 / hash</th><th>Rows</th></tr></thead><tbody>",
        esc(m["gauge_version"].as_str().unwrap_or("?")),
        esc(m["git_commit"].as_str().unwrap_or("?")),
        esc(m["started_at"].as_str().unwrap_or("?")),
        esc(m["finished_at"].as_str().unwrap_or("?")),
        esc(m["fingerprint"].as_str().unwrap_or("?")),
        m["seed"],
    );
    for i in m["inputs"].as_array().into_iter().flatten() {
        let hash = i["hash"].as_str().unwrap_or("");
        let _ = writeln!(h, "<tr><td>{}</td><td><code>{}</code></td><td><code title=\"{}\">{}</code></td><td>{}</td></tr>", esc(i["name"].as_str().unwrap_or("?")), esc(i["path"].as_str().unwrap_or("")), esc(hash), esc(&hash.chars().take(16).collect::<String>()), i["rows"].as_u64().map(|r| r.to_string()).unwrap_or_default());
    }
    h.push_str("</tbody></table>\n<p>Written by <code>evaluate</code> from this folder's files; <code>evaluate --report-only DIR</code> rewrites it.</p></footer>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_processes_never_share_a_temporary_not_even_the_one_write_parquet_derives() {
        // write_parquet writes `p` through `p.with_extension("parquet.partial")`: the process id
        // must survive that, or two concurrent evaluates truncate one file (CI saw a 0-byte
        // questions.parquet from exactly that).
        let (a, b) = (partial_name(QUESTIONS_FILE, 7), partial_name(QUESTIONS_FILE, 8));
        assert_eq!(a, ".questions.partial-7.parquet");
        let derived = |n: &str| Path::new(n).with_extension("parquet.partial");
        assert_ne!(derived(&a), derived(&b));
        assert_ne!(partial_name(REPORT_FILE, 7), partial_name(REPORT_FILE, 8));
        assert!(partial_name("plain", 7).starts_with('.'));
        // And the write through it lands whole under the real name, nothing left beside it.
        let dir = tempfile::tempdir().unwrap();
        let (q, row) = ("q1".to_string(), ("What?".to_string(), vec!["A.pdf p. 3".to_string()]));
        let out = replace_file(dir.path(), QUESTIONS_FILE, |tmp| write_questions(tmp, &[(&q, &row)])).unwrap();
        assert_eq!(recorded_questions(&out).unwrap().get("q1"), Some(&row));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn citations_are_marked_verified_or_not_against_the_passages_given() {
        let given = [gauge_cite::GivenPassage { chunk_id: "a".into(), source: "Track.pdf".into(), page_start: 4, page_end: 5 }];
        let text = "Gates <b> [Track.pdf p. 5] and [Track.pdf p. 9], see [note].";
        let marked = mark_citations(text, Some(&given));
        assert_eq!(marked, "Gates &lt;b&gt; <mark class=\"ok\" title=\"verified: a passage given holds this page\">[Track.pdf p. 5] ✓</mark> and <mark class=\"bad\" title=\"not verified: no passage given holds this page\">[Track.pdf p. 9] ✗</mark>, see [note].");
        // Without the passages (counts that do not agree), citations are marked plainly.
        assert_eq!(mark_citations("x [Track.pdf p. 9] [y", None), "x <mark>[Track.pdf p. 9]</mark> [y");
    }

    #[test]
    fn links_are_relative_to_the_report_folder() {
        assert_eq!(relative(Path::new("/r/eval/fra"), Path::new("/shared/corpora/fra")), PathBuf::from("../../../shared/corpora/fra"));
        assert_eq!(relative(Path::new("/r/eval/fra"), Path::new("/r/eval/fra/x")), PathBuf::from("x"));
        assert_eq!(normalise(Path::new("pipelines/../../shared/./c")), PathBuf::from("../shared/c"));
        assert_eq!(anchor("q 1/ä"), "q_1__");
        assert_eq!(esc("<a href='x'>&</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;");
    }
}
