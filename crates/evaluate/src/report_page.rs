//! `report.html`: one self-contained page per evaluation folder, rendered from the folder's
//! committed files alone (`manifest.json`, `metrics.parquet`, `per_query.parquet`,
//! `runs.parquet`, `failures.parquet`, `questions.parquet`, `passages.parquet`, and
//! `answers.parquet` / `search.parquet` when present), so `evaluate --report-only eval/<name>`
//! rebuilds it byte for byte without re-running anything, on any machine.
//!
//! Two files the page writes besides itself: [`write`] records the evaluated questions in
//! `questions.parquet` (`qid`, `question`, `gold`: the gold passages as the page names them,
//! `reference_answer`) from the golden set (and the out-of-corpus file) the manifest names, when
//! that file is present with its recorded hash, and the start of each ranked passage's text in
//! `passages.parquet` from the index artifacts the manifest names, when every one of them is here
//! with its fingerprint; otherwise it keeps the recorded ones — so a folder whose golden set or indexes
//! are not on this machine renders the same everywhere.
//!
//! What it shows: the ablation table (value and 95 % interval per metric with the best of each
//! column marked, Δ against the baseline with its interval coloured by direction where
//! significant, corrected p with the correction and family named, wins/ties/losses, the paired
//! minimum detectable effect, latency, the settings that differ), every pair's corrected
//! comparison, SVG plots (the primary metric against median latency, paired-Δ forests with a
//! zero line, Hit@k against k), the answer metrics with their paired Δ, the gate, the config
//! search, every question (each config's rank of the gold, where the gold was lost, the ranked
//! passages with the gold highlighted and linked to its PDF page and their texts and scores on
//! demand, the reference answer, answers with their citation counts, judge grades on their 1–5
//! scale and a flag on an answer that echoes its question) and the run's provenance with links
//! to the folder's tables.
//!
//! Tables and plots are static HTML and SVG; the inline script sorts tables (click a heading, or
//! `#sort=<column>`), filters the questions (an exact id, or words; "hide alike"; pick two
//! configs), shows passage texts, exports the config table as CSV, and opens `#q=<qid>`. No
//! server, no network, no timestamps but the manifest's.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use gauge_core::table::{read_parquet_any, Columns};
use gauge_raptor::source_files;

/// The file name beside `ablation.md`.
pub const REPORT_FILE: &str = "report.html";

/// The evaluated questions' text and gold passages, beside the page (see the module docs).
pub const QUESTIONS_FILE: &str = "questions.parquet";

/// The passages' texts as the page shows them, recorded beside it (`chunk_id`, `text`: the
/// start of each passage's text, [`TEXT_CHARS`] characters at most), from the index artifacts
/// the manifest names whenever they are here with their recorded fingerprint, and kept otherwise.
pub const PASSAGES_FILE: &str = "passages.parquet";

/// Characters of a passage's text the page keeps.
const TEXT_CHARS: usize = 600;

/// Bytes of passage text a page holds at most: the relevant passages first, then by rank, until
/// this much (a large study's page stays under ~2 MB; the rest are named, not shown).
const TEXT_BUDGET: usize = 512 << 10;

/// Ranked passages above which a page records no texts (see [`index_texts`]).
const TEXT_MAX_PASSAGES: usize = 10_000;

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
        let rows: Vec<(&String, &QuestionRecord)> = study.qids.iter().filter_map(|q| golden.get_key_value(q)).collect();
        replace_file(dir, QUESTIONS_FILE, |tmp| write_questions(tmp, &rows))?;
    }
    study.questions = recorded_questions(&dir.join(QUESTIONS_FILE))?;
    let texts = index_texts(&study, root);
    if !texts.is_empty() {
        replace_file(dir, PASSAGES_FILE, |tmp| write_texts(tmp, &texts))?;
    }
    study.texts = recorded_texts(&dir.join(PASSAGES_FILE))?;
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
    chunk_id: String,
    score: f64,
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
    questions: BTreeMap<String, QuestionRecord>,
    corpus: Option<String>,
    /// Every file of the corpus folder (relative paths, sorted), when it is found: sources are
    /// numbered by their place here, so one corpus's S1, S2 … are the same on every page.
    corpus_files: Vec<String>,
    /// Passage texts by chunk id (`passages.parquet`, recorded from the index artifacts).
    texts: BTreeMap<String, String>,
    search: Option<arrow::record_batch::RecordBatch>,
}

/// A question as the page shows it: its text, its gold passages (`source p. N`), its reference
/// answer when the golden set has one.
type QuestionRecord = (String, Vec<String>, Option<String>);

/// The page for `dir` (see [`write`]).
pub fn render(dir: &Path, root: &Path) -> anyhow::Result<String> {
    let mut study = load(dir, root)?;
    study.questions = recorded_questions(&dir.join(QUESTIONS_FILE))?;
    study.texts = recorded_texts(&dir.join(PASSAGES_FILE))?;
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
    refusal(&mut h, study);
    search(&mut h, study);
    questions(&mut h, study);
    footer(&mut h, study);
    if !study.texts.is_empty() {
        // The passages' texts once, for the drill-downs' "texts" buttons, as an array indexed by
        // each passage's `data-t` (every `<` escaped, so no text can close or comment out the
        // script element).
        let json = serde_json::to_string(&study.texts.values().collect::<Vec<_>>()).expect("texts serialise").replace('<', "\\u003c");
        let _ = writeln!(h, "<script type=\"application/json\" id=\"passage-texts\">{json}</script>");
    }
    h.push_str(concat!("<script>", include_str!("report_page.js"), "</script>\n</body>\n</html>\n"));
    h
}

fn load(dir: &Path, root: &Path) -> anyhow::Result<Study> {
    let manifest_path = dir.join("manifest.json");
    let manifest: serde_json::Value = serde_json::from_str(&gauge_core::read::read_bounded_string(&manifest_path, gauge_core::read::MANIFEST_LIMIT).with_context(|| format!("{}: cannot read (is {} an evaluation folder?)", manifest_path.display(), dir.display()))?)
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
    let (chunk, score) = (c.strings_required("chunk_id"), c.f64s("score"));
    let mut runs: BTreeMap<(String, String), Vec<(i32, Passage)>> = BTreeMap::new();
    for i in 0..batch.num_rows() {
        let p = Passage { chunk_id: chunk[i].clone(), score: score[i].unwrap_or(f64::NAN), source: source[i].clone(), page_start: ps[i], page_end: pe[i], relevant: relevant[i] };
        runs.entry((rconfig[i].clone(), rqid[i].clone())).or_default().push((rank[i], p));
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
    let sources: BTreeSet<&str> = runs.values().flatten().flat_map(|p| source_files(&p.source)).collect();
    let (corpus, corpus_files) = match corpus_dir(root, dir, &sources) {
        Some((link, files)) => (Some(link), files),
        None => (None, Vec::new()),
    };
    let path = dir.join("search.parquet");
    let search = if path.is_file() { Some(read_parquet_any(&path)?) } else { None };
    Ok(Study { name, manifest, configs, metrics, metric_names, queries, qids, answer_only: answer_only_count, runs, failures, answers, questions, corpus, corpus_files, texts: BTreeMap::new(), search })
}

/// `questions.parquet`: one row per question, its text and its gold passages as the page names
/// them (none for an out-of-corpus question).
fn write_questions(path: &Path, rows: &[(&String, &QuestionRecord)]) -> anyhow::Result<()> {
    use arrow::array::{ArrayRef, ListBuilder, StringArray, StringBuilder};
    use arrow::datatypes::{DataType, Field, Schema};
    let item = Field::new("item", DataType::Utf8, true);
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("qid", DataType::Utf8, false),
        Field::new("question", DataType::Utf8, false),
        Field::new("gold", DataType::List(std::sync::Arc::new(item.clone())), false),
        Field::new("reference_answer", DataType::Utf8, true),
    ]));
    let mut gold = ListBuilder::new(StringBuilder::new()).with_field(item);
    for (_, (_, g, _)) in rows {
        for label in g {
            gold.values().append_value(label);
        }
        gold.append(true);
    }
    let columns: Vec<ArrayRef> = vec![
        std::sync::Arc::new(StringArray::from_iter_values(rows.iter().map(|(q, _)| q.as_str()))),
        std::sync::Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, (t, _, _))| t.as_str()))),
        std::sync::Arc::new(gold.finish()),
        std::sync::Arc::new(StringArray::from_iter(rows.iter().map(|(_, (_, _, r))| r.as_deref()))),
    ];
    gauge_core::table::write_parquet(path, schema, columns)?;
    Ok(())
}

/// The questions recorded in `questions.parquet` (empty when the folder has none).
fn recorded_questions(path: &Path) -> anyhow::Result<BTreeMap<String, QuestionRecord>> {
    if !path.is_file() {
        return Ok(BTreeMap::new());
    }
    let batch = read_parquet_any(path)?;
    let c = Columns::new(&batch);
    anyhow::ensure!(c.has("qid") && c.has("question") && c.has("gold"), "{}: not a questions table (qid, question, gold); delete it and run `evaluate --report-only` where the golden set is", path.display());
    let gold = batch.column_by_name("gold").and_then(|g| g.as_any().downcast_ref::<arrow::array::ListArray>()).with_context(|| format!("{}: `gold` is not a list of strings", path.display()))?;
    // Recorded before reference answers were: no column, no references.
    let references = if c.has("reference_answer") { c.strings("reference_answer") } else { vec![None; batch.num_rows()] };
    let mut out = BTreeMap::new();
    for (i, (qid, question)) in c.strings_required("qid").into_iter().zip(c.strings_required("question")).enumerate() {
        let labels = gold.value(i);
        let labels = labels.as_any().downcast_ref::<arrow::array::StringArray>().with_context(|| format!("{}: `gold` is not a list of strings", path.display()))?;
        out.insert(qid, (question, labels.iter().flatten().map(str::to_string).collect(), references[i].clone()));
    }
    Ok(out)
}

/// The texts of the passages the study ranked, from the index artifacts its manifest names
/// (`index:<config>` inputs) that are here with their recorded fingerprint: relevant passages
/// first, then by rank, each cut to [`TEXT_CHARS`] characters, up to [`TEXT_BUDGET`] bytes.
fn index_texts(s: &Study, root: &Path) -> BTreeMap<String, String> {
    // A study of more than TEXT_MAX_PASSAGES ranked passages keeps its page under 2 MiB
    // without texts (each passage with a text also carries its place and score).
    if s.runs.values().map(Vec::len).sum::<usize>() > TEXT_MAX_PASSAGES {
        return BTreeMap::new();
    }
    let mut wanted: Vec<(bool, i32, &str)> = Vec::new();
    for list in s.runs.values() {
        for (i, p) in list.iter().enumerate() {
            wanted.push((!p.relevant, i as i32, p.chunk_id.as_str()));
        }
    }
    wanted.sort();
    let mut all: BTreeMap<String, String> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for input in s.manifest["inputs"].as_array().into_iter().flatten().filter(|i| i["name"].as_str().is_some_and(|n| n.starts_with("index:"))) {
        let (Some(path), Some(fp)) = (input["path"].as_str(), input["hash"].as_str()) else { continue };
        if !seen.insert(path.to_string()) {
            continue;
        }
        let dir = root.join(path);
        let here = gauge_core::artifact::Manifest::read(&dir).is_ok_and(|m| m.fingerprint == fp);
        // Every index the study read, or none: texts from some of them would replace the
        // recorded file with fewer passages (a machine holding only some of the artifacts).
        let Ok(Some(chunks)) = here.then(|| gauge_core::schema::read_chunks(&dir.join("chunks.parquet"))).transpose() else { return BTreeMap::new() };
        for c in chunks {
            all.entry(c.chunk_id).or_insert(c.text);
        }
    }
    let mut out = BTreeMap::new();
    let mut used = 0;
    for (_, _, id) in wanted {
        if out.contains_key(id) {
            continue;
        }
        let Some(text) = all.get(id) else { continue };
        let cut: String = text.chars().take(TEXT_CHARS).collect();
        if used + cut.len() > TEXT_BUDGET {
            break;
        }
        used += cut.len();
        out.insert(id.to_string(), cut);
    }
    out
}

/// `passages.parquet`: `chunk_id`, `text`.
fn write_texts(path: &Path, texts: &BTreeMap<String, String>) -> anyhow::Result<()> {
    use arrow::array::{ArrayRef, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("chunk_id", DataType::Utf8, false), Field::new("text", DataType::Utf8, false)]));
    let columns: Vec<ArrayRef> = vec![std::sync::Arc::new(StringArray::from_iter_values(texts.keys())), std::sync::Arc::new(StringArray::from_iter_values(texts.values()))];
    gauge_core::table::write_parquet(path, schema, columns)?;
    Ok(())
}

/// The passage texts recorded in `passages.parquet` (empty when the folder has none).
fn recorded_texts(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    if !path.is_file() {
        return Ok(BTreeMap::new());
    }
    let batch = read_parquet_any(path)?;
    let c = Columns::new(&batch);
    anyhow::ensure!(c.has("chunk_id") && c.has("text"), "{}: not a passages table (chunk_id, text); delete it and run `evaluate --report-only` where the index artifacts are", path.display());
    Ok(c.strings_required("chunk_id").into_iter().zip(c.strings_required("text")).collect())
}

/// The golden set's questions and gold pages, and the out-of-corpus questions (no gold), each
/// when its recorded file is there unchanged.
fn golden_questions(manifest: &serde_json::Value, root: &Path) -> BTreeMap<String, QuestionRecord> {
    let recorded = |name: &str| {
        let input = manifest["inputs"].as_array().into_iter().flatten().find(|i| i["name"] == name)?;
        // A manifest is data that may come from anyone: only a regular file is hashed (a device
        // such as `/dev/zero` never ends; a FIFO blocks), and its text is used only when its hash
        // is the one `evaluate` recorded, so a named `/etc/passwd` yields nothing.
        let path = root.join(input["path"].as_str().unwrap_or(""));
        if !std::fs::metadata(&path).ok()?.is_file() {
            return None;
        }
        gauge_core::hash::file_hash(&path).ok().is_some_and(|h| Some(h.as_str()) == input["hash"].as_str()).then_some(path)
    };
    let Some(Ok(mut golden)) = recorded("golden").map(|p| gauge_core::golden::load_golden(&p)) else { return BTreeMap::new() };
    if let Some(Ok(more)) = recorded("out_of_corpus").map(|p| gauge_answer::load_out_of_corpus(&p, golden.iter().map(|q| q.qid.as_str()))) {
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
            (q.qid, (q.question, gold.collect(), q.reference_answer.filter(|r| !r.trim().is_empty())))
        })
        .collect()
}

/// The corpus folder the passages' sources live in, as a path relative to `dir` (the first
/// `corpus` of `root/pipelines/*.toml`, sorted, that holds every source), and its files.
fn corpus_dir(root: &Path, dir: &Path, sources: &BTreeSet<&str>) -> Option<(String, Vec<String>)> {
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
        return Some((relative(&dir_abs, &target).to_string_lossy().replace('\\', "/"), files_under(&target)));
    }
    None
}

/// The files under `dir` (relative paths with `/`, hidden entries skipped), sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else { continue };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let r = rel.join(e.file_name());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(r);
            } else {
                out.push(r.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"));
            }
        }
    }
    out.sort();
    out
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
    let _ = writeln!(h, "<nav><a href=\"#configs\">Configs</a> · <a href=\"#plots\">Plots</a>{}{}{}{} · <a href=\"#questions\">Questions</a> · <a href=\"#provenance\">Provenance</a></nav></header>",
        if s.metric_names.iter().any(|m| m.starts_with("answer/")) { " · <a href=\"#answers\">Answers</a>" } else { "" },
        if m["stats"]["gate"].is_array() { " · <a href=\"#gate\">Gate</a>" } else { "" },
        if m["stats"]["refusal"].is_array() { " · <a href=\"#refusal\">Refusal</a>" } else { "" },
        if s.search.is_some() { " · <a href=\"#search\">Config search</a>" } else { "" });
    provenance_line(h, m);
}

/// Who wrote and judged the questions (the manifest's `stats.question_provenance`), and the
/// configs using a model of that family (`stats.same_family`), each marked † in the tables.
fn provenance_line(h: &mut String, m: &serde_json::Value) {
    let p = &m["stats"]["question_provenance"];
    let Ok(record) = serde_json::from_value::<gauge_core::golden::Provenance>(p.clone()) else {
        h.push_str("<p class=\"provenance\">Questions: who wrote and judged them is not recorded in this folder (evaluated before gauge recorded provenance).</p>\n");
        return;
    };
    let source = p["source"].as_str().unwrap_or("unknown");
    if record.written_by.is_empty() && record.judged_by.is_empty() {
        h.push_str("<p class=\"provenance\">Questions: who wrote and who judged them is not recorded (no provenance record beside the golden set).</p>\n");
        return;
    }
    let _ = writeln!(h, "<p class=\"provenance\">Questions {} <small>(record: {})</small>.</p>", esc(&record.summary()).replace('`', ""), esc(source));
    let same = same_family_of(m);
    if !same.is_empty() {
        h.push_str("<p class=\"same-family\"><b>†</b> These use a model of the family that wrote or judged the questions; a question a language model wrote from a passage tends to be likely under a language model given that passage, so their differences need a question set of other origin to stand:</p><ul class=\"same-family\">");
        for (config, why) in &same {
            let _ = write!(h, "<li><b>{}</b>: {}</li>", esc(config), esc(why).replace('`', ""));
        }
        h.push_str("</ul>\n");
    }
}

/// `(config, why)` of the manifest's `stats.same_family`.
fn same_family_of(m: &serde_json::Value) -> Vec<(String, String)> {
    m["stats"]["same_family"].as_array().into_iter().flatten().filter_map(|e| Some((e["config"].as_str()?.to_string(), e["why"].as_str().unwrap_or("").to_string()))).collect()
}

/// Paired differences of `f` between `config` and the baseline over the questions both have.
fn paired(s: &Study, config: &str, f: impl Fn(&QueryRow) -> f64) -> Vec<f64> {
    let base = &s.configs[0];
    s.qids.iter().filter_map(|q| Some(f(s.queries.get(&(config.to_string(), q.clone()))?) - f(s.queries.get(&(base.clone(), q.clone()))?))).collect()
}

/// The study's correction of its family of comparisons, as the manifest records it.
fn correction(s: &Study) -> crate::stats::Correction {
    serde_json::from_value(s.manifest["config"]["stats"]["correction"].clone()).unwrap_or_default()
}

/// The best value of each shown metric column (higher is better) and of latency (lower is
/// better), over the configs that have one.
fn best_values(s: &Study, shown: &[&String], primary: &str) -> BTreeMap<String, f64> {
    let mut best = BTreeMap::new();
    for m in shown.iter().map(|m| m.as_str()).chain(["latency_p50_ms"]) {
        // Over the rows of the table: the configs with the primary metric.
        let values = s.configs.iter().filter(|c| s.metrics.contains_key(&((*c).clone(), primary.to_string()))).filter_map(|c| s.metrics.get(&(c.clone(), m.to_string())).map(|x| x.value)).filter(|v| v.is_finite());
        let v = if m == "latency_p50_ms" { values.fold(f64::INFINITY, f64::min) } else { values.fold(f64::NEG_INFINITY, f64::max) };
        if v.is_finite() {
            best.insert(m.to_string(), v);
        }
    }
    best
}

fn config_table(h: &mut String, s: &Study) {
    let Some(primary) = primary(s) else { return };
    let same_family = same_family_of(&s.manifest);
    let shown: Vec<&String> = s.metric_names.iter().filter(|m| is_retrieval(m)).collect();
    let best = best_values(s, &shown, primary);
    let family = s.configs.iter().skip(1).filter(|c| s.metrics.get(&((*c).clone(), primary.to_string())).is_some_and(|x| x.p_adjusted.is_some())).count();
    let corr = correction(s);
    let _ = writeln!(
        h,
        "<section id=\"configs\"><h2>Configs</h2>\n<p>Value [95 % interval] per metric, <b>bold</b> where it is the best of its column (the lowest latency). Δ against the baseline <b>{}</b> on {} with its paired 95 % interval; <span class=\"gain\">▲ green</span> or <span class=\"loss\">▼ red</span> where the config is significantly better or worse than the baseline: p adjusted by {} over the family of {family} comparisons (every config against the baseline on {}) below 0.05. Each Δ interval is that comparison's own, not widened for the family. Then question-by-question wins / ties / losses, and the paired minimum detectable effect (80 % power at α 0.05: a Δ below it cannot be told from chance here). Click a heading to sort (best first); <a href=\"#pairs\">every pair</a> below; <button type=\"button\" class=\"csv\" data-table=\"config-table\" data-file=\"{}-configs.csv\">CSV of the rows shown</button>.</p>",
        esc(&s.configs[0]),
        esc(&label(primary)),
        corr.label(),
        esc(&label(primary)),
        esc(&s.name)
    );
    h.push_str("<table class=\"sortable\" id=\"config-table\"><thead><tr><th data-k=\"config\">Config</th>");
    for m in &shown {
        let _ = write!(h, "<th data-k=\"{}\">{}</th>", esc(m), esc(&label(m)));
    }
    let _ = write!(h, "<th data-k=\"delta\">Δ {}</th><th data-k=\"p\" data-better=\"low\">p adj.</th><th data-k=\"wtl\">W / T / L</th><th data-k=\"mde\" data-better=\"low\">MDE</th><th data-k=\"latency\" data-better=\"low\">p50 ms</th><th data-k=\"settings\">Settings</th></tr></thead>\n<tbody>\n", esc(&label(primary)));
    for (i, cfg) in s.configs.iter().filter(|c| s.metrics.contains_key(&((*c).clone(), primary.to_string()))).enumerate() {
        let get = |m: &str| s.metrics.get(&(cfg.clone(), m.to_string()));
        let same = same_family.iter().find(|(c, _)| c == cfg).map(|(_, why)| format!(" <span class=\"tag same-family\" title=\"{}\">† same family</span>", esc(why).replace('`', ""))).unwrap_or_default();
        let _ = write!(h, "<tr><td data-v=\"{i}\">{}{}{same}</td>", esc(cfg), if i == 0 { " <span class=\"tag\">baseline</span>" } else { "" });
        let is_best = |m: &str, v: f64| best.get(m).is_some_and(|b| (b - v).abs() < 1e-12);
        for m in &shown {
            match get(m) {
                Some(x) => {
                    let ci = x.ci.map(|(a, b)| format!(" <small>[{}, {}]</small>", f3(a), f3(b))).unwrap_or_default();
                    if is_best(m.as_str(), x.value) {
                        let _ = write!(h, "<td{} class=\"best\"><b>{}</b>{}</td>", key(Some(x.value)), f3(x.value), ci);
                    } else {
                        let _ = write!(h, "<td{}>{}{}</td>", key(Some(x.value)), f3(x.value), ci);
                    }
                }
                None => h.push_str("<td data-v=\"\">–</td>"),
            }
        }
        let p = get(primary);
        let sig = p.is_some_and(|x| x.significant || x.p_adjusted.is_some_and(|v| v < 0.05));
        match p.and_then(|x| x.delta) {
            Some((d, lo, hi)) => {
                let (class, mark) = match (sig, d > 0.0) {
                    (true, true) => (" class=\"gain\"", "▲ "),
                    (true, false) => (" class=\"loss\"", "▼ "),
                    _ => ("", ""),
                };
                let _ = write!(h, "<td{}{class}>{mark}{} <small>[{}, {}]</small></td>", key(Some(d)), s3(d), s3(lo), s3(hi));
            }
            None => h.push_str("<td data-v=\"\">–</td>"),
        }
        match p.and_then(|x| x.p_adjusted) {
            Some(v) => {
                let _ = write!(h, "<td{}{}>{}</td>", key(Some(v)), if sig { " class=\"sig\"" } else { "" }, f3(v));
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
        let lat_text = lat.map(|v| format!("{v:.1}")).unwrap_or_else(|| "–".into());
        if lat.is_some_and(|v| is_best("latency_p50_ms", v)) {
            let _ = write!(h, "<td{} class=\"best\"><b>{lat_text}</b></td>", key(lat));
        } else {
            let _ = write!(h, "<td{}>{lat_text}</td>", key(lat));
        }
        let _ = writeln!(h, "<td class=\"settings\">{}</td></tr>", settings_of(s, cfg));
    }
    h.push_str("</tbody></table></section>\n");
    pairs(h, s);
}

/// A config's settings that differ between the study's configs (the manifest's resolved
/// `variants`), one `field = value` per line, folded beside its metrics.
fn settings_of(s: &Study, cfg: &str) -> String {
    let variants: Vec<&serde_json::Value> = s.manifest["config"]["variants"].as_array().into_iter().flatten().collect();
    let flat = |v: &serde_json::Value| {
        let mut lines = Vec::new();
        flatten_settings("", v, &mut lines);
        lines.into_iter().collect::<BTreeMap<String, String>>()
    };
    let all: Vec<BTreeMap<String, String>> = variants.iter().map(|v| flat(v)).collect();
    let Some(mine) = variants.iter().position(|v| v["name"].as_str() == Some(cfg)).map(|i| &all[i]) else { return "–".into() };
    let varying: Vec<(&String, &String)> = mine.iter().filter(|(k, v)| k.as_str() != "description" && all.iter().any(|o| o.get(*k) != Some(*v))).collect();
    if varying.is_empty() {
        return "–".into();
    }
    let text: Vec<String> = varying.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    format!("<details><summary>{} differ</summary><pre>{}</pre></details>", text.len(), esc(&text.join("\n")))
}

fn flatten_settings(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if prefix.is_empty() && k == "name" {
                    continue;
                }
                let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten_settings(&p, x, out);
            }
        }
        serde_json::Value::Null => {}
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

/// Every pair of configs compared on the per-question reciprocal rank: Δ (row − column), a
/// paired randomisation test per pair, the p-values adjusted over all pairs with the study's
/// correction; significant cells coloured by direction. Up to 24 configs.
fn pairs(h: &mut String, s: &Study) {
    // The retrieval questions (not the out-of-corpus ones only the answer rows asked).
    let asked = &s.qids[..s.qids.len() - s.answer_only];
    let configs: Vec<&String> = s.configs.iter().filter(|c| !asked.is_empty() && asked.iter().all(|q| s.queries.contains_key(&((*c).clone(), q.clone())))).collect();
    if configs.len() < 3 || configs.len() > 24 {
        return;
    }
    let values = |c: &String| -> Vec<f64> { asked.iter().map(|q| s.queries[&(c.clone(), q.clone())].reciprocal_rank).collect() };
    let resamples = s.manifest["config"]["resamples"].as_u64().unwrap_or(10_000).clamp(1000, 100_000) as usize;
    let seed = s.manifest["seed"].as_u64().unwrap_or(42);
    let mut cells = Vec::new();
    for (i, a) in configs.iter().enumerate() {
        for b in configs.iter().skip(i + 1) {
            let c = crate::stats::paired_comparison(&values(a), &values(b), resamples, seed);
            cells.push((a.as_str(), b.as_str(), c.delta, c.p_value));
        }
    }
    let corr = correction(s);
    let adjusted = crate::stats::adjust(&cells.iter().map(|c| c.3).collect::<Vec<_>>(), corr);
    let find = |a: &str, b: &str| cells.iter().zip(&adjusted).find(|(c, _)| (c.0 == a && c.1 == b) || (c.0 == b && c.1 == a)).map(|(c, p)| (if c.0 == a { c.2 } else { -c.2 }, *p));
    let _ = writeln!(
        h,
        "<section id=\"pairs\"><h2>Every pair</h2>\n<p>Δ MRR (per-question reciprocal rank) of the row's config minus the column's, over the {} questions; a paired randomisation test per pair ({} resamples), the {} p-values adjusted by {} over all of them. <span class=\"gain\">Green ▲</span>: the row is significantly better; <span class=\"loss\">red ▼</span>: worse (adjusted p below 0.05; the p is in each cell's tooltip).</p>",
        s.qids.len() - s.answer_only,
        resamples,
        cells.len(),
        corr.label()
    );
    h.push_str("<div class=\"wide\"><table class=\"pairs\" id=\"pair-table\"><thead><tr><th></th>");
    for (j, _) in configs.iter().enumerate() {
        let _ = write!(h, "<th title=\"{}\">{}</th>", esc(configs[j]), j + 1);
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for (i, a) in configs.iter().enumerate() {
        let _ = write!(h, "<tr><td><b>{}</b> {}</td>", i + 1, esc(a));
        for b in &configs {
            match (a != b).then(|| find(a.as_str(), b.as_str())).flatten() {
                Some((d, p)) => {
                    let (class, mark) = match (p < 0.05, d > 0.0) {
                        (true, true) => (" class=\"gain\"", "▲"),
                        (true, false) => (" class=\"loss\"", "▼"),
                        _ => ("", ""),
                    };
                    let _ = write!(h, "<td{class} title=\"{} − {}: Δ {}, p adj. {}\">{}{mark}</td>", esc(a), esc(b), s3(d), f3(p), s3(d));
                }
                None => h.push_str("<td class=\"self\">·</td>"),
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></div></section>\n");
}

/// A scatter of (x, y) points with labels; `log_x` for latency.
fn scatter(h: &mut String, title: &str, x_label: &str, y_label: &str, points: &[(String, f64, f64, bool)], log_x: bool) {
    let (w, ht, left, right, top, bottom) = (720.0, 360.0, 64.0, 20.0, 28.0, 48.0);
    let tx = |x: f64| if log_x { x.max(1e-3).log10() } else { x };
    let xs: Vec<f64> = points.iter().map(|p| tx(p.1)).filter(|v| v.is_finite()).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.2).filter(|v| v.is_finite()).collect();
    // One point is no plot (its value is in the table).
    if xs.len() < 2 || ys.len() < 2 {
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
    // Number labels beside their points, moved down past any label already placed there.
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for (i, (name, x, y, base)) in points.iter().enumerate() {
        if !(tx(*x).is_finite() && y.is_finite()) {
            continue;
        }
        let (lx, mut ly) = (px(*x) + 6.0, py(*y) + 4.0);
        while placed.iter().any(|(ax, ay)| (ax - lx).abs() < 16.0 && (ay - ly).abs() < 11.0) {
            ly += 11.0;
        }
        placed.push((lx, ly));
        let _ = writeln!(h, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" class=\"{}\"><title>{}: {} at {}</title></circle><text x=\"{lx:.1}\" y=\"{ly:.1}\" class=\"label\">{}</text>", px(*x), py(*y), if *base { "pt base" } else { "pt" }, esc(name), f3(*y), f3(*x), i + 1);
    }
    h.push_str("</svg>");
    legend(h, points.iter().map(|p| p.0.as_str()));
    h.push_str("</figure>\n");
}

/// The numbers of a plot's marks to their configs' full names, below the plot (never cut).
fn legend<'a>(h: &mut String, names: impl Iterator<Item = &'a str>) {
    h.push_str("<figcaption class=\"legend-list\">");
    for (i, n) in names.enumerate() {
        let _ = write!(h, "<span><b>{}</b> {}</span> ", i + 1, esc(n));
    }
    h.push_str("</figcaption>");
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { s.chars().take(n - 1).collect::<String>() + "…" }
}

/// Each config's paired Δ of `metric` against the baseline with its 95 % interval, a line at
/// zero, the axis fitted to the intervals (not 0–1); significant rows coloured by direction.
fn forest(h: &mut String, s: &Study, metric: &str) {
    let rows: Vec<(&String, f64, f64, f64, bool)> = s.configs.iter().skip(1).filter_map(|c| {
        let m = s.metrics.get(&(c.clone(), metric.to_string()))?;
        let (d, lo, hi) = m.delta?;
        Some((c, d, lo, hi, m.significant || m.p_adjusted.is_some_and(|p| p < 0.05)))
    }).filter(|r| r.1.is_finite() && r.2.is_finite() && r.3.is_finite()).collect();
    if rows.is_empty() {
        return;
    }
    let (w, left, right, row_h, top) = (720.0, 300.0, 20.0, 18.0, 24.0);
    let ht = top + rows.len() as f64 * row_h + 30.0;
    let lo = rows.iter().map(|r| r.2).fold(0.0f64, f64::min);
    let hi = rows.iter().map(|r| r.3).fold(0.0f64, f64::max);
    let pad = ((hi - lo) * 0.05).max(1e-3);
    let (lo, hi) = (lo - pad, hi + pad);
    let px = |v: f64| left + (v - lo) / (hi - lo) * (w - left - right);
    let title = format!("Δ {} against the baseline ({}) with its paired 95 % interval", label(metric), s.configs[0]);
    let _ = writeln!(h, "<figure><svg viewBox=\"0 0 {w} {ht:.0}\" role=\"img\" aria-label=\"{}\"><title>{}</title>", esc(&title), esc(&title));
    for k in 0..=4 {
        let v = lo + (hi - lo) * k as f64 / 4.0;
        let _ = writeln!(h, "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{top}\" y2=\"{:.1}\" class=\"grid\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"middle\">{}</text>", px(v), px(v), ht - 26.0, px(v), ht - 12.0, s3(v));
    }
    let _ = writeln!(h, "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{top}\" y2=\"{:.1}\" class=\"zero\"/>", px(0.0), px(0.0), ht - 26.0);
    let _ = writeln!(h, "<text x=\"{left}\" y=\"14\" class=\"axis\">{}</text>", esc(&title));
    for (i, (name, d, a, b, sig)) in rows.iter().enumerate() {
        let y = top + i as f64 * row_h + row_h / 2.0;
        let class = match (*sig, *d > 0.0) {
            (true, true) => "pt gain",
            (true, false) => "pt loss",
            _ => "pt",
        };
        let _ = writeln!(h, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\" text-anchor=\"end\"><title>{}</title>{}</text>", left - 8.0, y + 4.0, esc(name), esc(&shorten(name, 46)));
        let _ = writeln!(h, "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" class=\"ci\"/>", px(*a), px(*b));
        let _ = writeln!(h, "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"4\" class=\"{class}\"><title>{}: Δ {} [{}, {}]</title></circle>", px(*d), esc(name), s3(*d), s3(*a), s3(*b));
    }
    h.push_str("</svg></figure>\n");
}

/// Hit@k against k for every config that has two or more k: one line per config, numbered.
fn hit_curve(h: &mut String, s: &Study) {
    let mut ks: Vec<u32> = s.metric_names.iter().filter_map(|m| m.strip_prefix("hit@")?.parse().ok()).collect();
    ks.sort_unstable();
    ks.dedup();
    if ks.len() < 2 {
        return;
    }
    let lines: Vec<(&String, Vec<Option<f64>>)> = s.configs.iter().map(|c| (c, ks.iter().map(|k| s.metrics.get(&(c.clone(), format!("hit@{k}"))).map(|m| m.value)).collect::<Vec<_>>())).filter(|(_, v)| v.iter().flatten().count() >= 2).collect();
    if lines.is_empty() {
        return;
    }
    let values: Vec<f64> = lines.iter().flat_map(|(_, v)| v.iter().flatten().copied()).collect();
    let (mut y0, mut y1) = (values.iter().copied().fold(f64::INFINITY, f64::min), values.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    if y1 - y0 < 1e-9 {
        y0 -= 0.05;
        y1 += 0.05;
    }
    let pad = (y1 - y0) * 0.06;
    let (y0, y1) = ((y0 - pad).max(0.0), (y1 + pad).min(1.0));
    let (w, ht, left, right, top, bottom) = (720.0, 320.0, 64.0, 40.0, 28.0, 44.0);
    let px = |i: usize| left + i as f64 / (ks.len() - 1) as f64 * (w - left - right);
    let py = |y: f64| top + (y1 - y) / (y1 - y0) * (ht - top - bottom);
    let title = "Hit@k against k (the share of questions with a relevant passage in the top k)";
    let _ = writeln!(h, "<figure><svg viewBox=\"0 0 {w} {ht}\" role=\"img\" aria-label=\"{title}\"><title>{title}</title>");
    let _ = writeln!(h, "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" class=\"frame\"/>", w - left - right, ht - top - bottom);
    for k in 0..=4 {
        let yv = y0 + (y1 - y0) * k as f64 / 4.0;
        let _ = writeln!(h, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"end\">{}</text>", left - 4.0, py(yv) + 4.0, f3(yv));
    }
    for (i, k) in ks.iter().enumerate() {
        let _ = writeln!(h, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"middle\">{k}</text>", px(i), ht - bottom + 16.0);
    }
    let _ = writeln!(h, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"axis\" text-anchor=\"middle\">k</text>", left + (w - left - right) / 2.0, ht - 8.0);
    for (n, (name, v)) in lines.iter().enumerate() {
        let pts: Vec<String> = v.iter().enumerate().filter_map(|(i, y)| y.map(|y| format!("{:.1},{:.1}", px(i), py(y)))).collect();
        let _ = writeln!(h, "<polyline points=\"{}\" class=\"curve{}\"><title>{}</title></polyline>", pts.join(" "), if n == 0 { " base" } else { "" }, esc(name));
        if let Some((i, Some(y))) = v.iter().enumerate().rev().find(|(_, y)| y.is_some()) {
            let _ = writeln!(h, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"label\">{}</text>", px(i) + 5.0, py(*y) + 4.0, n + 1);
        }
    }
    h.push_str("</svg>");
    legend(h, lines.iter().map(|(n, _)| n.as_str()));
    h.push_str("</figure>\n");
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
    forest(h, s, primary);
    if s.metric_names.iter().any(|m| m == "hit@1") && primary != "hit@1" {
        forest(h, s, "hit@1");
    }
    hit_curve(h, s);
    h.push_str("</section>\n");
}

/// Answer metrics where a lower value is the better one.
fn lower_is_better(m: &str) -> bool {
    ["invented", "loop", "seconds", "false_refusal"].iter().any(|w| m.contains(w))
}

fn answer_table(h: &mut String, s: &Study) {
    let names: Vec<&String> = s.metric_names.iter().filter(|m| m.starts_with("answer/")).collect();
    if names.is_empty() {
        return;
    }
    let configs: Vec<&String> = s.configs.iter().filter(|c| names.iter().any(|m| s.metrics.contains_key(&((*c).clone(), (*m).clone())))).collect();
    h.push_str("<section id=\"answers\"><h2>Answers</h2>\n<p>Answer metrics per answering config: value and 95 % interval, and below it the paired Δ against the generator the row is compared with (the first of its table, or its <code>compare_to</code>) with its paired interval, <span class=\"gain\">▲ green</span> / <span class=\"loss\">▼ red</span> where it is significantly better / worse after the study's correction (for invented citations, loops and seconds lower is better). ablation.md lists the same comparisons with their p.</p>\n<div class=\"wide\"><table class=\"sortable\" id=\"answer-table\"><thead><tr><th data-k=\"config\">Config</th>");
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
                    let delta = x.delta.map(|(d, lo, hi)| {
                        let sig = x.significant || x.p_adjusted.is_some_and(|p| p < 0.05);
                        let better = if lower_is_better(m) { d < 0.0 } else { d > 0.0 };
                        let (class, mark) = match (sig && d != 0.0, better) {
                            (true, true) => (" class=\"gain\"", "▲ "),
                            (true, false) => (" class=\"loss\"", "▼ "),
                            _ => ("", ""),
                        };
                        format!("<br><small{class}>{mark}Δ {} [{}, {}]</small>", s3(d), s3(lo), s3(hi))
                    }).unwrap_or_default();
                    let _ = write!(h, "<td{}>{}{}{delta}</td>", key(Some(x.value)), f3(x.value), ci);
                }
                None => h.push_str("<td data-v=\"\">–</td>"),
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></div></section>\n");
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

/// `[refusal]`'s figures (the manifest's `stats.refusal`): each config's calibrated cutoff, its
/// false refusals and refusals with their Wilson intervals, and the best score's AUROC.
fn refusal(h: &mut String, s: &Study) {
    let Some(rows) = s.manifest["stats"]["refusal"].as_array().filter(|r| !r.is_empty()) else { return };
    let share = |v: &serde_json::Value| match (v["value"].as_f64(), v["ci"][0].as_f64(), v["ci"][1].as_f64(), v["k"].as_u64(), v["n"].as_u64()) {
        (Some(x), Some(lo), Some(hi), Some(k), Some(n)) => format!("<td data-v=\"{x}\">{x:.2} <small>[{lo:.2}, {hi:.2}] {k}/{n}</small></td>"),
        _ => "<td>–</td>".to_string(),
    };
    let files: Vec<String> = rows[0]["refusals"].as_array().into_iter().flatten().filter_map(|f| f[0].as_str().map(str::to_string)).collect();
    h.push_str("<section id=\"refusal\"><h2>Refusal by score cutoff</h2>\n<p>Each config's cutoff is set on the calibration questions alone (answerable; at most the declared share refused), set on the config's own score (a reranker's, else the dense retriever's cosine, else BM25's; never a fused score, which comes from ranks alone), then judged on questions it never saw: false refusals of the golden set (lower is better), refusals of the out-of-corpus questions (higher is better), 95 % Wilson intervals; AUROC: the chance an answerable question's best score beats an out-of-corpus one's (0.5: no better than chance). <code>refusal.parquet</code> has every question.</p>\n<table class=\"sortable\" id=\"refusal-table\"><thead><tr><th data-k=\"config\">Config</th><th data-k=\"score\">Score</th><th data-k=\"cutoff\">Cutoff</th><th data-k=\"cal\">Refused (calibration)</th><th data-k=\"false\">False refusals</th>");
    for (i, f) in files.iter().enumerate() {
        let _ = write!(h, "<th data-k=\"ooc{i}\">Refused: {}</th>", esc(f));
    }
    h.push_str("<th data-k=\"ooc\">Refused: all out-of-corpus</th><th data-k=\"auroc\">AUROC</th></tr></thead>\n<tbody>\n");
    for (i, r) in rows.iter().enumerate() {
        let _ = write!(h, "<tr><td data-v=\"{i}\">{}</td><td>{}</td><td>{}</td>{}{}", esc(r["config"].as_str().unwrap_or("?")), esc(r["score"].as_str().unwrap_or("?")), r["threshold"].as_f64().map_or("–".to_string(), |t| format!("{t:.4}")), share(&r["calibration_refused"]), share(&r["false_refusals"]));
        for f in r["refusals"].as_array().into_iter().flatten() {
            h.push_str(&share(&f[1]));
        }
        h.push_str(&share(&r["refusals_all"]));
        let _ = writeln!(h, "{}</tr>", match (r["auroc"][0].as_f64(), r["auroc"][1][0].as_f64(), r["auroc"][1][1].as_f64()) {
            (Some(a), Some(lo), Some(hi)) => format!("<td data-v=\"{a}\">{a:.3} <small>[{lo:.3}, {hi:.3}]</small></td>"),
            _ => "<td>–</td>".to_string(),
        });
    }
    h.push_str("</tbody></table></section>\n");
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
    // Source files get short names (S1, S2 …) in the passage lists; a summary over several files
    // is named by its files' names joined (`S1+S3`), and links to no page.
    let sources: BTreeSet<&str> = s.runs.values().flatten().flat_map(|p| source_files(&p.source)).collect();
    // Numbered by the file's place in the corpus folder when it is found (the same S1 on every
    // page of one corpus), else by the files this study retrieved.
    let alias: BTreeMap<&str, String> = sources
        .iter()
        .enumerate()
        .map(|(i, src)| (*src, format!("S{}", s.corpus_files.iter().position(|f| f == src).map_or(i + 1, |p| p + 1))))
        .collect();
    let alias_of = |source: &str| source_files(source).map(|f| alias.get(f).cloned().unwrap_or_default()).collect::<Vec<_>>().join("+");
    let _ = writeln!(h, "<section id=\"questions\"><h2>Questions</h2>\n<p>Each config's rank of the first relevant passage (– : none in the top k; R : refused). Open a question for where the gold was lost, the ranked passages (relevant ones highlighted; S<i>n</i> p. <i>a</i>–<i>b</i> links to the page{}) and the answers.</p>",
        if s.corpus.is_some() { "" } else { " when the corpus is found" });
    h.push_str("<p class=\"sources\">");
    for (src, a) in &alias {
        let link = s.corpus.as_ref().map(|c| format!("<a id=\"src-{a}\" href=\"{}/{}\">{}</a>", esc(c), esc(src), esc(src))).unwrap_or_else(|| esc(src));
        let _ = write!(h, "<span><b>{a}</b> {link}</span> ");
    }
    h.push_str("</p>\n<p><label>Filter <input id=\"q-filter\" type=\"search\" placeholder=\"a question id (exact) or words\"></label> <label><input type=\"checkbox\" id=\"hide-agree\"> hide the questions every config ranks alike</label></p>\n");
    let ranked: Vec<&String> = s.configs.iter().filter(|c| s.qids.iter().any(|q| s.queries.contains_key(&((*c).clone(), q.clone())))).collect();
    // A recorded text's place in the page's texts array (the array is in chunk-id order).
    let text_index: BTreeMap<&str, usize> = s.texts.keys().enumerate().map(|(i, k)| (k.as_str(), i)).collect();
    if ranked.len() >= 2 {
        // Pick two: the questions one finds and the other misses, and who ranks the gold higher.
        let options = |selected: usize| ranked.iter().enumerate().map(|(i, c)| format!("<option value=\"c{i}\"{}>{} {}</option>", if i == selected { " selected" } else { "" }, i + 1, esc(c))).collect::<String>();
        let _ = writeln!(
            h,
            "<p class=\"pick\" id=\"pick\"><label>A <select id=\"pick-a\">{}</select></label> <label>B <select id=\"pick-b\">{}</select></label> <label>show <select id=\"pick-show\"><option value=\"all\">every question</option><option value=\"a-only\">A finds the gold, B does not</option><option value=\"b-only\">B finds the gold, A does not</option><option value=\"differ\">A and B rank the gold differently</option></select></label> <span id=\"pick-summary\"></span></p>",
            options(0),
            options(1)
        );
    }
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
        let gold = s.questions.get(q).map(|(_, g, _)| g.clone()).unwrap_or_default();
        let reference = s.questions.get(q).and_then(|(_, _, r)| r.clone());
        let text = question_text(s, q);
        let _ = writeln!(h, "<details id=\"q-{}\" class=\"question\"><summary><b>{}</b> {}</summary>", esc(&anchor(q)), esc(q), esc(&text));
        if !gold.is_empty() {
            let _ = writeln!(h, "<p class=\"gold\">Gold: {}</p>", gold.iter().map(|g| gold_link(g, s.corpus.as_deref())).collect::<Vec<_>>().join("; "));
        }
        // The golden set's reference answer, beside the answers it is judged against.
        if let Some(r) = reference.filter(|_| s.answers.keys().any(|(_, aq)| aq == q)) {
            let _ = writeln!(h, "<p class=\"reference\"><b>Reference answer</b> <small>(the golden set's)</small>: {}</p>", esc(&r));
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
                let button = if s.texts.is_empty() { "" } else { " <button type=\"button\" class=\"texts\" title=\"each passage's score and the start of its text\">texts</button>" };
                let _ = write!(h, "<tr><th>{}<br><small>{rank}, RR {} · Hit@1 {}</small>{lost}{button}</th><td>", esc(c), f3(row.reciprocal_rank), f3(row.hit_1));
                for (i, p) in s.runs.get(&(c.clone(), q.clone())).into_iter().flatten().enumerate() {
                    let pages = if p.page_start == p.page_end { format!("p. {}", p.page_start) } else { format!("pp. {}–{}", p.page_start, p.page_end) };
                    let a = alias_of(&p.source);
                    let one_file = source_files(&p.source).nth(1).is_none();
                    let class = if p.relevant { " class=\"hit\"" } else { "" };
                    // A passage whose text is recorded carries its place in the texts array and its
                    // score, for the "texts" button (the others carry nothing: thousands of
                    // attributes would add megabytes to a large study's page).
                    let data = match text_index.get(p.chunk_id.as_str()) {
                        Some(t) => format!(" data-t=\"{t}\" data-s=\"{}\"", if p.score.is_finite() { format!("{:.3}", p.score) } else { String::new() }),
                        None => String::new(),
                    };
                    match &s.corpus {
                        // The relevant passages link to their page in the page itself; the
                        // others get their link from the script (from the source list above
                        // and the page in their text): a full href on every one of thousands
                        // of passages made large evaluations' pages several megabytes.
                        Some(corpus) if p.relevant && one_file => {
                            let _ = write!(h, "<a{class}{data} href=\"{}/{}#page={}\">{} {a} {pages}</a> ", esc(corpus), esc(&p.source), p.page_start, i + 1);
                        }
                        Some(_) => {
                            let _ = write!(h, "<a{class}{data}>{} {a} {pages}</a> ", i + 1);
                        }
                        None => {
                            let _ = write!(h, "<span{class}{data}>{} {a} {pages}</span> ", i + 1);
                        }
                    }
                }
                h.push_str("</td></tr>\n");
            }
            if let Some(ans) = ans {
                let (n, v, inv) = ans.citations;
                // The judge grades on a 1–5 scale (crates/evaluate/src/judge.rs).
                let grades: Vec<String> = ans.judge.iter().filter_map(|(l, g)| g.map(|g| format!("{l} {g}/5"))).collect();
                let echo = echoes(&ans.answer, &question_text(s, q));
                // The passages the answer was given: its retrieval config's ranked passages
                // (`<retrieval> · <generator>`), when checking against them gives the recorded counts.
                let retrieval = c.split(" · ").next().unwrap_or(c);
                let given: Vec<gauge_cite::GivenPassage> = s.runs.get(&(retrieval.to_string(), q.clone())).into_iter().flatten().map(|p| gauge_cite::GivenPassage { chunk_id: String::new(), source: p.source.clone(), page_start: p.page_start, page_end: p.page_end }).collect();
                let found = gauge_cite::check(&ans.answer, &given);
                let marked = found.len() as i32 == n && found.iter().filter(|c| c.verified).count() as i32 == v;
                let _ = writeln!(
                    h,
                    "<tr class=\"answer\"><th>{}<br><small>answer{}</small>{}</th><td><p class=\"cites\">{n} citations: <span class=\"ok\">{v} verified</span>, <span class=\"bad\">{inv} invented</span>{}{}</p><pre>{}</pre></td></tr>",
                    esc(c),
                    if ans.refused { " (refused)" } else { "" },
                    if echo { " <span class=\"echo\" title=\"most of the answer's words are the question's\">⚠ echoes the question</span>" } else { "" },
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

/// A gold item (`source p. 5`, `source pp. 5–6`) as a link to its page when the corpus is found.
fn gold_link(g: &str, corpus: Option<&str>) -> String {
    let parsed = g.rsplit_once(" pp. ").or_else(|| g.rsplit_once(" p. ")).and_then(|(src, rest)| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        Some((src, digits.parse::<i32>().ok()?))
    });
    match (corpus, parsed) {
        (Some(c), Some((src, page))) => format!("<a href=\"{}/{}#page={page}\">{}</a>", esc(c), esc(src), esc(g)),
        _ => esc(g),
    }
}

/// Whether an answer mostly repeats its question: at least 80 % of the answer's words (lower-cased
/// alphanumeric runs, citations removed) are words of the question, over at least 3 words.
fn echoes(answer: &str, question: &str) -> bool {
    let words = |t: &str| -> Vec<String> {
        let no_cites: String = t.split('[').map(|part| part.split_once(']').map_or(part, |(_, rest)| rest)).collect::<Vec<_>>().join(" ");
        no_cites.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
    };
    let (a, q) = (words(answer), words(question));
    let asked: BTreeSet<&str> = q.iter().map(String::as_str).collect();
    a.len() >= 3 && !asked.is_empty() && a.iter().filter(|w| asked.contains(w.as_str())).count() * 5 >= a.len() * 4
}

/// A question's text: the golden set's, else an answer row's, else empty.
fn question_text(s: &Study, q: &str) -> String {
    s.questions.get(q).map(|(t, _, _)| t.clone()).filter(|t| !t.is_empty()).or_else(|| s.answers.iter().find(|((_, aq), _)| aq == q).map(|(_, a)| a.question.clone())).unwrap_or_default()
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
    h.push_str("</tbody></table>\n<p class=\"files\">This folder's files: ");
    let files: Vec<String> = m["outputs"].as_array().into_iter().flatten().filter_map(|o| o["path"].as_str()).filter(|p| p.ends_with(".parquet") || p.ends_with(".run") || p.ends_with(".qrels") || p.ends_with(".md")).map(|p| format!("<a href=\"{}\">{}</a>", esc(p), esc(p))).collect();
    h.push_str(&files.join(" · "));
    h.push_str("</p>\n<p>Written by <code>evaluate</code> from this folder's files; <code>evaluate --report-only DIR</code> rewrites it.</p></footer>\n");
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
        let (q, row) = ("q1".to_string(), ("What?".to_string(), vec!["A.pdf p. 3".to_string()], Some("Three.".to_string())));
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

    #[test]
    fn an_echo_of_the_question_is_told_from_an_answer() {
        let q = "When must gate arms be fully lowered?";
        assert!(echoes("When must the gate arms be fully lowered? [HRGC.pdf p. 4]", q));
        assert!(!echoes("Five seconds before the train reaches the crossing [HRGC.pdf p. 4].", q));
        assert!(!echoes("Gate arms.", q), "two words are too few to call");
    }

    #[test]
    fn gold_items_link_to_their_page_when_the_corpus_is_found() {
        assert_eq!(gold_link("FRA Manual.pdf p. 12", Some("../../c")), "<a href=\"../../c/FRA Manual.pdf#page=12\">FRA Manual.pdf p. 12</a>");
        assert_eq!(gold_link("a.pdf pp. 3–4", Some("c")), "<a href=\"c/a.pdf#page=3\">a.pdf pp. 3–4</a>");
        assert_eq!(gold_link("a.pdf chars 3–40", Some("c")), "a.pdf chars 3–40");
        assert_eq!(gold_link("a.pdf p. 3", None), "a.pdf p. 3");
    }
}
