//! The ablation DAG: build every distinct upstream artifact once (content-addressed), then
//! evaluate every config on the golden set and write the tables.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use gauge_core::artifact::{StageOutcome, StageSpec};
use gauge_core::{hash, ArtifactStore, FileEntry};
use gauge_engine::{Engine, Passage};
use serde::Serialize;

use crate::golden::{load_golden, GoldenQuestion};
use crate::pipeline::{Pipeline, Variant};
use crate::relevance::{is_relevant, score_question, QuestionScores, RelevanceMode, RetrievedPassage};
use crate::report;
use crate::stats::{bootstrap_ci, mean, paired_comparison, percentile};

/// Stage name of evaluation artifacts.
pub const STAGE: &str = "evaluate";
/// Output format version.
pub const FORMAT_VERSION: u32 = 2;

/// Options that do not change the numbers.
#[derive(Debug, Clone)]
pub struct AblateOptions {
    /// Artifact root.
    pub artifacts: PathBuf,
    /// Where `<pipeline name>/` is copied (usually `eval/`).
    pub eval_dir: PathBuf,
    /// Recompute the evaluation even when it is cached (upstream stages stay cached).
    pub force: bool,
    /// Overrides the pipeline's relevance mode.
    pub relevance: Option<RelevanceMode>,
}

/// What a run produced.
#[derive(Debug)]
pub struct AblateOutput {
    /// The evaluation artifact directory.
    pub dir: PathBuf,
    /// The copy under `eval/<name>/`.
    pub eval_copy: PathBuf,
    /// Whether the evaluation was a cache hit.
    pub cache_hit: bool,
    /// Configs evaluated (skipped ones excluded).
    pub configs: usize,
    /// Configs skipped, with the reason.
    pub skipped: usize,
    /// Upstream artifacts built this run (the rest were cache hits).
    pub built: Vec<String>,
}

/// One row of `per_query.parquet`.
#[derive(Debug, Clone)]
pub struct QueryRow {
    /// Config name.
    pub config: String,
    /// Question id.
    pub qid: String,
    /// Category ("" when none).
    pub category: String,
    /// The question's scores.
    pub scores: QuestionScores,
    /// Refused by the cutoff.
    pub refused: bool,
    /// Passages returned.
    pub n_results: usize,
    /// Search wall time.
    pub latency_ms: f64,
}

/// One row of `runs.parquet`.
#[derive(Debug, Clone)]
pub struct RunRow {
    /// Config name.
    pub config: String,
    /// Question id.
    pub qid: String,
    /// 1-based rank.
    pub rank: usize,
    /// Hit chunk.
    pub chunk_id: String,
    /// Final score.
    pub score: f64,
    /// Source.
    pub source: String,
    /// Pages of the passage.
    pub page_start: i32,
    /// Last page.
    pub page_end: i32,
    /// Judged relevant.
    pub relevant: bool,
}

/// One row of `metrics.parquet`.
#[derive(Debug, Clone, Serialize)]
pub struct MetricRow {
    /// Config name.
    pub config: String,
    /// `all` or a category.
    pub category: String,
    /// Metric name.
    pub metric: String,
    /// Questions.
    pub n: usize,
    /// Mean (or percentile for latency).
    pub value: f64,
    /// Bootstrap interval.
    pub ci: Option<(f64, f64)>,
    /// Paired comparison with the baseline.
    pub delta: Option<crate::stats::PairedComparison>,
}

/// Where each stage's artifact for a config lives.
#[derive(Debug, Clone)]
struct Upstream {
    index: PathBuf,
    fingerprint: String,
}

struct Builder<'a> {
    store: &'a ArtifactStore,
    corpus: PathBuf,
    memo: HashMap<String, PathBuf>,
    built: Vec<String>,
}

impl Builder<'_> {
    /// The artifact of `stage` for the configs in `parts` (upstream first): from this run's
    /// memo, else from `build` (itself a cache hit when the store has it).
    fn cached(&mut self, stage: &str, parts: &[&serde_json::Value], build: impl FnOnce(&ArtifactStore) -> anyhow::Result<(PathBuf, bool)>) -> anyhow::Result<PathBuf> {
        let key = format!("{stage}:{}", serde_json::Value::Array(parts.iter().map(|v| (*v).clone()).collect()));
        if let Some(dir) = self.memo.get(&key) {
            return Ok(dir.clone());
        }
        let (dir, cache_hit) = build(self.store)?;
        if !cache_hit {
            self.built.push(format!("{stage} {}", dir.display()));
        }
        self.memo.insert(key, dir.clone());
        Ok(dir)
    }

    fn upstream(&mut self, v: &Variant) -> anyhow::Result<Upstream> {
        let s = &v.stages;
        let (ex, ch, em, ix) = (serde_json::to_value(&s.extract)?, serde_json::to_value(&s.chunk)?, serde_json::to_value(&s.embed)?, serde_json::to_value(&s.index)?);
        let corpus = self.corpus.clone();
        let pages = self.cached("extract", &[&ex], |store| {
            let out = gauge_extract::run(std::slice::from_ref(&corpus), &s.extract, store, &Default::default()).with_context(|| format!("config `{}`: extract", v.name))?;
            Ok((out.dir, out.cache_hit))
        })?;
        let chunks = self.cached("chunk", &[&ex, &ch], |store| {
            // Token windows count with the embedding model's tokenizer.
            let tokenizer = (s.chunk.strategy == gauge_chunk::Strategy::Tokens).then(|| gauge_encoder::resolve::resolve_model(&s.embed.model)).transpose()?;
            let tok_path = tokenizer.as_ref().map(|m| m.dir.join("tokenizer.json"));
            let out = gauge_chunk::run(&pages, tok_path.as_deref(), &s.chunk, store, false).with_context(|| format!("config `{}`: chunk", v.name))?;
            Ok((out.dir, out.cache_hit))
        })?;
        let embeddings = self.cached("embed", &[&ex, &ch, &em], |store| {
            let out = gauge_embed::run(&chunks, &s.embed, &gauge_embed::Runtime::default(), store).with_context(|| format!("config `{}`: embed", v.name))?;
            Ok((out.dir, out.cache_hit))
        })?;
        let index = self.cached("index", &[&ex, &ch, &em, &ix], |store| {
            let out = gauge_index::run(&chunks, &embeddings, &s.index, store, false).with_context(|| format!("config `{}`: index", v.name))?;
            Ok((out.dir, out.cache_hit))
        })?;
        let fingerprint = gauge_core::Manifest::read(&index)?.fingerprint;
        Ok(Upstream { index, fingerprint })
    }
}

/// Turns the engine's passages into judged units: the chunk, or its small-to-big window
/// (windows merged by the engine are counted once, at the rank of their best hit).
fn retrieved_passages(engine: &Engine, passages: &[Passage]) -> Vec<(String, f64, RetrievedPassage)> {
    let mut seen_windows = BTreeSet::new();
    let mut out = Vec::new();
    for p in passages {
        match &p.window {
            Some(w) => {
                if !seen_windows.insert((w.doc_id.clone(), w.first)) {
                    continue;
                }
                let chunks: Vec<&gauge_core::schema::ChunkRecord> = w.chunk_ids.iter().filter_map(|id| engine.chunk(id)).collect();
                let rp = RetrievedPassage {
                    source: p.chunk.source.clone(),
                    page_start: chunks.iter().map(|c| c.page_start).min().unwrap_or(p.chunk.page_start),
                    page_end: chunks.iter().map(|c| c.page_end).max().unwrap_or(p.chunk.page_end),
                    char_start: chunks.iter().map(|c| c.char_start).min().unwrap_or(p.chunk.char_start),
                    char_end: chunks.iter().map(|c| c.char_end).max().unwrap_or(p.chunk.char_end),
                    text: chunks.iter().map(|c| c.text.as_str()).collect::<Vec<_>>().join("\n"),
                };
                out.push((p.chunk.chunk_id.clone(), p.candidate.score as f64, rp));
            }
            None => out.push((
                p.chunk.chunk_id.clone(),
                p.candidate.score as f64,
                RetrievedPassage {
                    source: p.chunk.source.clone(),
                    page_start: p.chunk.page_start,
                    page_end: p.chunk.page_end,
                    char_start: p.chunk.char_start,
                    char_end: p.chunk.char_end,
                    text: p.chunk.text.clone(),
                },
            )),
        }
    }
    out
}

/// The metrics with intervals and paired comparisons, per config and category.
pub fn summarize(rows: &[QueryRow], configs: &[String], baseline: &str, k: usize, resamples: usize, seed: u64) -> Vec<MetricRow> {
    let mut categories: Vec<String> = vec!["all".into()];
    let cats: BTreeSet<&str> = rows.iter().map(|r| r.category.as_str()).filter(|c| !c.is_empty()).collect();
    categories.extend(cats.into_iter().map(str::to_string));
    let has_keywords = rows.iter().any(|r| r.scores.keyword_coverage.is_some());
    type Getter = fn(&QueryRow) -> f64;
    let mut metrics: Vec<(String, Getter)> = vec![
        ("hit@1".into(), |r| r.scores.hits[0]),
        ("hit@3".into(), |r| r.scores.hits[1]),
        ("hit@5".into(), |r| r.scores.hits[2]),
        ("hit@10".into(), |r| r.scores.hits[3]),
        ("mrr@10".into(), |r| r.scores.reciprocal_rank),
        ("ndcg@10".into(), |r| r.scores.ndcg),
        (format!("recall@{k}"), |r| r.scores.recall),
    ];
    if has_keywords {
        metrics.push((format!("keyword_coverage@{k}"), |r| r.scores.keyword_coverage.unwrap_or(0.0)));
    }
    metrics.push(("refusal_rate".into(), |r| if r.refused { 1.0 } else { 0.0 }));
    let mut out = Vec::new();
    for config in configs {
        for cat in &categories {
            let sel = |name: &str| -> Vec<&QueryRow> {
                let mut v: Vec<&QueryRow> = rows.iter().filter(|r| r.config == name && (cat == "all" || &r.category == cat)).collect();
                v.sort_by(|a, b| a.qid.cmp(&b.qid));
                v
            };
            let mine = sel(config);
            let base = sel(baseline);
            for (mi, (metric, get)) in metrics.iter().enumerate() {
                let values: Vec<f64> = mine.iter().map(|r| get(r)).collect();
                let mseed = seed.wrapping_add(mi as u64);
                let delta = (config != baseline && base.len() == mine.len()).then(|| {
                    let b: Vec<f64> = base.iter().map(|r| get(r)).collect();
                    paired_comparison(&values, &b, resamples, mseed)
                });
                out.push(MetricRow {
                    config: config.clone(),
                    category: cat.clone(),
                    metric: metric.clone(),
                    n: values.len(),
                    value: mean(&values),
                    ci: Some(bootstrap_ci(&values, resamples, mseed)),
                    delta,
                });
            }
            let mut lat: Vec<f64> = mine.iter().map(|r| r.latency_ms).collect();
            lat.sort_by(f64::total_cmp);
            for (name, p) in [("latency_p50_ms", 0.5), ("latency_p95_ms", 0.95)] {
                out.push(MetricRow { config: config.clone(), category: cat.clone(), metric: name.into(), n: lat.len(), value: if lat.is_empty() { 0.0 } else { percentile(&lat, p) }, ci: None, delta: None });
            }
        }
    }
    out
}

/// Runs a pipeline: upstream stages (cached), then the evaluation (cached), then the copy
/// under `eval/<name>/`.
pub fn run_pipeline(pipeline_path: &Path, opts: &AblateOptions) -> anyhow::Result<AblateOutput> {
    let mut pipeline = Pipeline::load(pipeline_path)?;
    if let Some(m) = opts.relevance {
        pipeline.relevance = m;
    }
    let golden = load_golden(&pipeline.golden)?;
    let mode = pipeline.relevance.resolve(&golden).map_err(|e| anyhow::anyhow!("{}: {e}", pipeline.golden.display()))?;
    anyhow::ensure!(pipeline.corpus.exists(), "{}: corpus not found (set `corpus` in {})", pipeline.corpus.display(), pipeline_path.display());
    let store = ArtifactStore::new(&opts.artifacts);
    let mut builder = Builder { store: &store, corpus: pipeline.corpus.clone(), memo: HashMap::new(), built: Vec::new() };
    let mut upstream = Vec::new();
    for v in &pipeline.variants {
        tracing::debug!("config `{}`: upstream artifacts", v.name);
        upstream.push(builder.upstream(v)?);
    }
    let mut inputs = vec![FileEntry {
        path: pipeline.golden.display().to_string(),
        name: "golden".into(),
        hash: hash::file_hash(&pipeline.golden)?,
        rows: Some(golden.len() as u64),
    }];
    let mut skipped: Vec<(String, String)> = Vec::new();
    // Each reranker model's weights are read (hashed) once, however many configs use it.
    let mut identities: HashMap<String, Result<String, String>> = HashMap::new();
    for (i, (v, u)) in pipeline.variants.iter().zip(&upstream).enumerate() {
        inputs.push(FileEntry { path: u.index.display().to_string(), name: format!("index:{}", v.name), hash: u.fingerprint.clone(), rows: None });
        if let Some(rc) = &v.stages.retrieval.rerank {
            // The reranker's weights are an input: a config skipped for a missing model runs
            // once the model is there, and a changed model re-evaluates.
            let identity = identities.entry(rc.model.clone()).or_insert_with(|| gauge_rerank::reranker_identity(rc)).clone();
            let hash = match identity {
                Ok(h) => h,
                Err(reason) => {
                    anyhow::ensure!(i > 0, "the baseline config's reranker is not available: {reason}");
                    skipped.push((v.name.clone(), reason));
                    "missing".to_string()
                }
            };
            inputs.push(FileEntry { path: rc.model.clone(), name: format!("reranker:{}", v.name), hash, rows: None });
        }
    }
    for (name, reason) in &skipped {
        eprintln!("evaluate: skipping config `{name}`: {reason}");
    }
    let config = serde_json::json!({
        "pipeline": pipeline.name, "relevance": mode, "k": pipeline.k, "resamples": pipeline.resamples,
        "variants": pipeline.variants,
    });
    let spec = StageSpec { stage: STAGE, format_version: FORMAT_VERSION, config: &config, inputs, seed: Some(pipeline.seed) };
    let eval_copy = opts.eval_dir.join(&pipeline.name);
    let mut run = match store.begin(spec, opts.force)? {
        StageOutcome::CacheHit(dir) => {
            copy_to_eval(&dir, &eval_copy)?;
            return Ok(AblateOutput { dir, eval_copy, cache_hit: true, configs: pipeline.variants.len() - skipped.len(), skipped: skipped.len(), built: builder.built });
        }
        StageOutcome::Run(run) => run,
    };
    let skip: BTreeSet<&str> = skipped.iter().map(|(n, _)| n.as_str()).collect();
    let (query_rows, run_rows, qrels) = evaluate_variants(&pipeline, &upstream, &golden, mode, &skip)?;
    let names: Vec<String> = pipeline.variants.iter().filter(|v| !skip.contains(v.name.as_str())).map(|v| v.name.clone()).collect();
    let metrics = summarize(&query_rows, &names, &names[0], pipeline.k, pipeline.resamples, pipeline.seed);
    let n = report::write_metrics(&run.path("metrics.parquet"), &metrics)?;
    run.add_output("metrics.parquet", Some(n))?;
    let n = report::write_per_query(&run.path("per_query.parquet"), &query_rows)?;
    run.add_output("per_query.parquet", Some(n))?;
    let n = report::write_runs(&run.path("runs.parquet"), &run_rows)?;
    run.add_output("runs.parquet", Some(n))?;
    std::fs::create_dir_all(run.path("trec"))?;
    for (i, v) in pipeline.variants.iter().enumerate().filter(|(_, v)| !skip.contains(v.name.as_str())) {
        let slug = report::slug(i, &v.name);
        let mine: Vec<&RunRow> = run_rows.iter().filter(|r| r.config == v.name).collect();
        report::write_trec_run(&run.path(&format!("trec/{slug}.run")), &mine, &slug)?;
        run.add_output(&format!("trec/{slug}.run"), Some(mine.len() as u64))?;
        let q = &qrels[i];
        report::write_qrels(&run.path(&format!("trec/{slug}.qrels")), q)?;
        run.add_output(&format!("trec/{slug}.qrels"), Some(q.len() as u64))?;
    }
    let context = report::ReportContext {
        pipeline: &pipeline,
        golden_len: golden.len(),
        mode,
        metrics: &metrics,
        skipped: &skipped,
    };
    std::fs::write(run.path("ablation.md"), report::ablation_markdown(&context))?;
    run.add_output("ablation.md", None)?;
    report::ablation_png(&run.path("ablation.png"), &context)?;
    run.add_output("ablation.png", None)?;
    run.set_stat("questions", golden.len());
    run.set_stat("configs", names.len());
    run.set_stat("skipped", serde_json::to_value(&skipped)?);
    run.set_stat("relevance", mode.name());
    let dir = run.commit()?;
    copy_to_eval(&dir, &eval_copy)?;
    Ok(AblateOutput { dir, eval_copy, cache_hit: false, configs: names.len(), skipped: skipped.len(), built: builder.built })
}

type Qrels = Vec<(String, String)>;

fn evaluate_variants(
    pipeline: &Pipeline,
    upstream: &[Upstream],
    golden: &[GoldenQuestion],
    mode: RelevanceMode,
    skip: &BTreeSet<&str>,
) -> anyhow::Result<(Vec<QueryRow>, Vec<RunRow>, Vec<Qrels>)> {
    // Open each distinct index once, with the query embedder of its embedding config.
    let mut by_index: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
    for (i, u) in upstream.iter().enumerate() {
        if !skip.contains(pipeline.variants[i].name.as_str()) {
            by_index.entry(u.index.clone()).or_default().push(i);
        }
    }
    // Each distinct reranker is loaded once.
    let mut rerankers: HashMap<String, Box<dyn gauge_retrieve::Reranker>> = HashMap::new();
    let reranker_key = |rc: &gauge_retrieve::RerankConfig| format!("{:?}|{}|{:?}", rc.kind, rc.model, rc.max_length);
    let bar = gauge_core::progress::bar(((pipeline.variants.len() - skip.len()) * golden.len()) as u64, "searches");
    let mut query_rows = Vec::new();
    let mut run_rows = Vec::new();
    let mut qrels: Vec<Qrels> = vec![Vec::new(); pipeline.variants.len()];
    for (index, variant_ids) in &by_index {
        let first = &pipeline.variants[variant_ids[0]];
        let needs_dense = variant_ids.iter().any(|&i| pipeline.variants[i].stages.retrieval.dense);
        let embedder = if needs_dense { Some(gauge_embed::load_embedder(&first.stages.embed, &gauge_embed::Runtime::default())?) } else { None };
        let engine = Engine::open(index, embedder)?;
        // Qrels: every chunk of this index judged on its own, for trec_eval/ranx users.
        let chunk_qrels: Qrels = golden
            .iter()
            .flat_map(|q| {
                engine
                    .chunks
                    .iter()
                    .filter(|c| is_relevant(q, &chunk_passage(c), mode))
                    .map(|c| (q.qid.clone(), c.chunk_id.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for &vi in variant_ids {
            let v = &pipeline.variants[vi];
            qrels[vi] = chunk_qrels.clone();
            if let Some(rc) = &v.stages.retrieval.rerank {
                if !rerankers.contains_key(&reranker_key(rc)) {
                    let r = gauge_rerank::load_reranker(rc, "cpu").with_context(|| format!("config `{}`: reranker", v.name))?;
                    rerankers.insert(reranker_key(rc), r);
                }
            }
            let reranker = v.stages.retrieval.rerank.as_ref().map(|rc| rerankers[&reranker_key(rc)].as_ref());
            for q in golden {
                let mut cfg = v.stages.retrieval.clone();
                if v.oracle_source_filter {
                    let sources: BTreeSet<String> = q.gold.iter().map(|g| g.source().to_string()).collect();
                    cfg.filter.sources = sources.into_iter().collect();
                }
                let started = Instant::now();
                let result = engine.search_with(&q.question, &cfg, reranker).with_context(|| format!("config `{}`, question `{}`", v.name, q.qid))?;
                let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
                let judged = retrieved_passages(&engine, &result.passages);
                let passages: Vec<RetrievedPassage> = judged.iter().map(|(_, _, p)| p.clone()).take(pipeline.k).collect();
                let scores = score_question(q, &passages, mode, pipeline.k);
                for (rank, ((chunk_id, score, p), relevant)) in judged.iter().zip(&scores.relevant).enumerate() {
                    run_rows.push(RunRow {
                        config: v.name.clone(),
                        qid: q.qid.clone(),
                        rank: rank + 1,
                        chunk_id: chunk_id.clone(),
                        score: *score,
                        source: p.source.clone(),
                        page_start: p.page_start,
                        page_end: p.page_end,
                        relevant: *relevant,
                    });
                }
                query_rows.push(QueryRow {
                    config: v.name.clone(),
                    qid: q.qid.clone(),
                    category: q.category.clone().unwrap_or_default(),
                    scores,
                    refused: result.refusal.is_some(),
                    n_results: passages.len(),
                    latency_ms,
                });
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    // Report order: the pipeline's config order, then question order.
    let order: HashMap<&str, usize> = pipeline.variants.iter().enumerate().map(|(i, v)| (v.name.as_str(), i)).collect();
    let qorder: HashMap<&str, usize> = golden.iter().enumerate().map(|(i, q)| (q.qid.as_str(), i)).collect();
    query_rows.sort_by_key(|r| (order[r.config.as_str()], qorder[r.qid.as_str()]));
    run_rows.sort_by_key(|r| (order[r.config.as_str()], qorder[r.qid.as_str()], r.rank));
    Ok((query_rows, run_rows, qrels))
}

fn chunk_passage(c: &gauge_core::schema::ChunkRecord) -> RetrievedPassage {
    RetrievedPassage { source: c.source.clone(), page_start: c.page_start, page_end: c.page_end, char_start: c.char_start, char_end: c.char_end, text: c.text.clone() }
}

/// Replaces `eval/<name>/` with a copy of the artifact (through a temporary folder).
fn copy_to_eval(dir: &Path, dest: &Path) -> anyhow::Result<()> {
    let parent = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("{}: cannot create", parent.display()))?;
    let tmp = parent.join(format!(".tmp-{}-{}", dest.file_name().unwrap_or_default().to_string_lossy(), std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    copy_tree(dir, &tmp)?;
    let old = parent.join(format!(".old-{}-{}", dest.file_name().unwrap_or_default().to_string_lossy(), std::process::id()));
    if dest.exists() {
        std::fs::rename(dest, &old)?;
    }
    std::fs::rename(&tmp, dest).with_context(|| format!("{}: cannot move the results into place", dest.display()))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).with_context(|| format!("{}: cannot copy", target.display()))?;
        }
    }
    Ok(())
}
