//! The searches of `evaluate`: every config's questions through the engine (each distinct
//! index opened once, each reranker and rewrite model loaded once), scored against the golden
//! set — per-question rows, ranked runs, qrels, the passages the judged answer rows were given,
//! and where each miss lost its gold.
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use gauge_core::golden::GoldenQuestion;
use gauge_engine::rewrite::LlmRewriter;
use gauge_engine::{Engine, EngineOptions, Models, Passage};
use gauge_generator::cache::CallCache;
use gauge_rank::Reranker;

use crate::chain::Upstream;
use crate::failures::FailureRow;
use crate::pipeline::{Pipeline, Variant};
use crate::relevance::{score_question, PassageSpan, RelevanceMode};
use crate::rows::{QueryRow, RunRow};

/// (question, chunk, grade) of every chunk relevant on its own.
pub type Qrels = Vec<(String, String, f64)>;

/// The passages each (config, question) retrieved, for the judge.
pub type Contexts = HashMap<(String, String), Vec<crate::judge::JudgedPassage>>;

/// What the searches of every config give.
#[derive(Default)]
pub struct Retrieved {
    /// One row per (config, question), in the pipeline's config order, then question order.
    pub query_rows: Vec<QueryRow>,
    /// Every judged passage of every search, ranked.
    pub run_rows: Vec<RunRow>,
    /// Per config (pipeline order), the chunks of its index relevant on their own.
    pub qrels: Vec<Qrels>,
    /// The passages the judged answer rows' configs retrieved.
    pub contexts: Contexts,
    /// Where each missed question lost its gold (traced searches only).
    pub failures: Vec<FailureRow>,
}

/// How [`evaluate_variants`] runs the searches: the device, the model-call cache, and whether
/// misses are traced (failure attribution) and progress is shown (a config search does
/// neither).
#[derive(Clone, Copy)]
pub struct SearchRun<'a> {
    /// `cpu` or `cuda[:N]`.
    pub device: &'a str,
    /// The model-call cache of rewrites.
    pub cache: &'a Arc<CallCache>,
    /// Trace misses and show progress.
    pub trace_and_show: bool,
}

/// The retrieval config a question is searched with: the config's, restricted to the
/// question's gold sources when the config is the oracle source filter.
pub fn config_for(v: &Variant, q: &GoldenQuestion) -> gauge_engine::RetrievalConfig {
    let mut cfg = v.stages.retrieval.clone();
    if v.oracle_source_filter {
        let sources: BTreeSet<String> = q.gold.iter().map(|g| g.source().to_string()).collect();
        cfg.filter.sources = sources.into_iter().collect();
    }
    cfg
}

/// The judged units of a search: each distinct passage (a merged window counts once, at the
/// rank of its best hit) with the span the engine resolved.
fn judged_passages(result: &gauge_engine::SearchResult) -> Vec<(String, f64, PassageSpan)> {
    result.distinct().into_iter().map(|p: &Passage| (p.chunk.chunk_id.clone(), p.candidate.score as f64, p.span.clone())).collect()
}

/// What every search shares: each distinct reranker (what changes its scores: kind, model, max
/// length) and rewrite model, loaded once (every rewrite call goes through the shared cache),
/// the judged depth and the relevance mode.
struct Searcher<'a> {
    models: Models,
    how: SearchRun<'a>,
    /// The pipeline's judged depth.
    judge_depth: usize,
    mode: RelevanceMode,
}

impl Searcher<'_> {
    /// Loads what a config needs, unless loaded already.
    fn load(&mut self, v: &Variant) -> anyhow::Result<()> {
        self.models.load(&v.stages.retrieval).with_context(|| format!("config `{}`", v.name))
    }

    fn of(&self, v: &Variant) -> (Option<&dyn Reranker>, Option<&LlmRewriter>) {
        self.models.of(&v.stages.retrieval)
    }

    /// One config's search of one question, scored, its rows added to `out` (see the module
    /// docs).
    fn search_question(&self, scope: &IndexScope, v: &Variant, q: &GoldenQuestion, keep_context: bool, out: &mut Retrieved) -> anyhow::Result<()> {
        let (k, mode) = (self.judge_depth, self.mode);
        let (reranker, rewriter) = self.of(v);
        let cfg = config_for(v, q);
        let started = Instant::now();
        let result = scope.engine.search_full(&q.question, &cfg, reranker, rewriter).with_context(|| format!("config `{}`, question `{}`", v.name, q.qid))?;
        let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
        let judged = judged_passages(&result);
        let passages: Vec<PassageSpan> = judged.iter().map(|(_, _, p)| p.clone()).take(k).collect();
        if keep_context {
            let given = passages.iter().map(|p| crate::judge::JudgedPassage { label: gauge_cite::page_tag(&p.source, p.page_start, p.page_end), text: p.text.clone() }).collect();
            out.contexts.insert((v.name.clone(), q.qid.clone()), given);
        }
        let scores = score_question(q, &passages, mode, k);
        if self.how.trace_and_show && !scores.relevant.iter().any(|&r| r) {
            // Missed: trace the search again to say where the gold was lost.
            let (_, trace) = scope.engine.search_traced(&q.question, &cfg, reranker, rewriter).with_context(|| format!("config `{}`, question `{}`: tracing the miss", v.name, q.qid))?;
            let empty = HashSet::new();
            let relevant = scope.relevant_ids.get(&q.qid).unwrap_or(&empty);
            let ranks = crate::failures::stage_ranks(&trace, relevant, crate::failures::gold_has_text(q, &scope.pages), cfg.rerank.as_ref().map(|r| r.n_initial), k);
            out.failures.push(FailureRow { config: v.name.clone(), qid: q.qid.clone(), lost_at: crate::failures::first_loss(&ranks), ranks });
        }
        for (rank, ((chunk_id, score, p), relevant)) in judged.iter().zip(&scores.relevant).enumerate() {
            out.run_rows.push(RunRow {
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
        out.query_rows.push(QueryRow {
            config: v.name.clone(),
            qid: q.qid.clone(),
            category: q.category.clone().unwrap_or_default(),
            scores,
            refused: result.refusal.is_some(),
            n_results: passages.len(),
            latency_ms,
            cold_latency_ms: latency_ms + result.rewrite.as_ref().map_or(0.0, |r| if r.cache_hits > 0 { r.model_ms } else { 0.0 }),
            model_calls: result.rewrite.as_ref().map_or(0, |r| r.model_calls),
        });
        Ok(())
    }
}

/// One index opened with the query embedder it was built with, its chunks judged on their own
/// against every question, and which pages came out of extraction with text.
struct IndexScope {
    engine: Engine,
    qrels: Qrels,
    relevant_ids: HashMap<String, HashSet<String>>,
    pages: HashMap<(String, i32), bool>,
}

impl IndexScope {
    fn open(index: &std::path::Path, configs: &[&Variant], pages_of: &Upstream, golden: &[GoldenQuestion], mode: RelevanceMode, how: &SearchRun<'_>) -> anyhow::Result<IndexScope> {
        let dense = configs.iter().any(|v| v.stages.retrieval.dense);
        let engine = Engine::open(index, &EngineOptions { dense, model: None, device: how.device.to_string() })?;
        // Qrels: every chunk of this index judged on its own, for trec_eval/ranx users.
        let qrels: Qrels = golden
            .iter()
            .flat_map(|q| {
                engine
                    .chunks()
                    .chunks
                    .iter()
                    .filter_map(|c| {
                        let grade = crate::relevance::relevance_grade(q, &engine.passage_span(c), mode);
                        (grade > 0.0).then(|| (q.qid.clone(), c.chunk_id.clone(), grade))
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut relevant_ids: HashMap<String, HashSet<String>> = HashMap::new();
        for (q, c, _) in &qrels {
            relevant_ids.entry(q.clone()).or_default().insert(c.clone());
        }
        // Failure attribution reads the pages; a config search, which traces nothing, does not
        // read them on every group and rung.
        let pages = if how.trace_and_show {
            gauge_core::schema::read_pages(&pages_of.pages.join("pages.parquet"))?.into_iter().map(|p| ((p.source, p.page), p.empty)).collect()
        } else {
            HashMap::new()
        };
        Ok(IndexScope { engine, qrels, relevant_ids, pages })
    }
}

/// Searches every config that is not skipped over the golden set (see the module docs).
pub fn evaluate_variants(pipeline: &Pipeline, upstream: &[Upstream], golden: &[GoldenQuestion], mode: RelevanceMode, skip: &BTreeSet<&str>, how: &SearchRun<'_>) -> anyhow::Result<Retrieved> {
    // The passages the answer rows' configs retrieve, kept for the judge (the answer stage
    // searches with the same engine and config, so they are the passages it was given).
    let judged_configs: BTreeSet<&str> = match (&pipeline.answer, &pipeline.judge) {
        (Some(a), Some(_)) => a.configs.iter().map(String::as_str).collect(),
        _ => BTreeSet::new(),
    };
    // Open each distinct index once, with the query embedder it was built with.
    let mut by_index: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
    for (i, u) in upstream.iter().enumerate() {
        if !skip.contains(pipeline.variants[i].name.as_str()) {
            by_index.entry(u.index.clone()).or_default().push(i);
        }
    }
    let mut searcher = Searcher { models: Models::new(how.device, how.cache.clone()), how: *how, judge_depth: pipeline.judge_depth, mode };
    let bar = if how.trace_and_show { gauge_core::progress::bar(((pipeline.variants.len() - skip.len()) * golden.len()) as u64, "searches") } else { gauge_core::progress::hidden() };
    let mut out = Retrieved { qrels: vec![Vec::new(); pipeline.variants.len()], ..Default::default() };
    for (index, variant_ids) in &by_index {
        let configs: Vec<&Variant> = variant_ids.iter().map(|&i| &pipeline.variants[i]).collect();
        let scope = IndexScope::open(index, &configs, &upstream[variant_ids[0]], golden, mode, how)?;
        for &vi in variant_ids {
            let v = &pipeline.variants[vi];
            out.qrels[vi] = scope.qrels.clone();
            searcher.load(v)?;
            let keep_context = judged_configs.contains(v.name.as_str());
            for q in golden {
                searcher.search_question(&scope, v, q, keep_context, &mut out)?;
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    sort_in_report_order(pipeline, golden, &mut out);
    Ok(out)
}

/// Report order: the pipeline's config order, then question order.
fn sort_in_report_order(pipeline: &Pipeline, golden: &[GoldenQuestion], out: &mut Retrieved) {
    let order: HashMap<&str, usize> = pipeline.variants.iter().enumerate().map(|(i, v)| (v.name.as_str(), i)).collect();
    let qorder: HashMap<&str, usize> = golden.iter().enumerate().map(|(i, q)| (q.qid.as_str(), i)).collect();
    out.query_rows.sort_by_key(|r| (order[r.config.as_str()], qorder[r.qid.as_str()]));
    out.run_rows.sort_by_key(|r| (order[r.config.as_str()], qorder[r.qid.as_str()], r.rank));
    out.failures.sort_by_key(|f| (order[f.config.as_str()], qorder[f.qid.as_str()]));
}

/// Each question's best score under each config of `asks` — (config, which score, its
/// (set, question) pairs) — keyed by (config, set, qid); `None`: no passage. The final score
/// is the rank-1 passage's, searched with no cutoff; a retriever's (`dense`, `bm25`) is the
/// best of that retriever's own list, before any fusion. Each distinct index is opened once,
/// each reranker loaded once; the oracle source filter is never applied (these questions may
/// have no gold). For `[refusal]`.
pub fn best_scores(pipeline: &Pipeline, upstream: &[Upstream], mode: RelevanceMode, asks: &[crate::refusal::Ask<'_>], how: &SearchRun<'_>) -> anyhow::Result<HashMap<(String, String, String), Option<f64>>> {
    use crate::refusal::ScoreKind;
    let mut by_index: BTreeMap<PathBuf, Vec<(usize, &crate::refusal::Ask<'_>)>> = BTreeMap::new();
    for ask in asks {
        let i = pipeline.variants.iter().position(|v| v.name == ask.config).ok_or_else(|| anyhow::anyhow!("config `{}` is not defined", ask.config))?;
        by_index.entry(upstream[i].index.clone()).or_default().push((i, ask));
    }
    let mut searcher = Searcher { models: Models::new(how.device, how.cache.clone()), how: *how, judge_depth: pipeline.judge_depth, mode };
    let total: usize = asks.iter().map(|a| a.questions.len()).sum();
    let bar = if how.trace_and_show { gauge_core::progress::bar(total as u64, "refusal searches") } else { gauge_core::progress::hidden() };
    let mut out = HashMap::new();
    for (index, group) in &by_index {
        let dense = group.iter().any(|(i, _)| pipeline.variants[*i].stages.retrieval.dense);
        let engine = Engine::open(index, &EngineOptions { dense, model: None, device: how.device.to_string() })?;
        for (vi, ask) in group {
            let v = &pipeline.variants[*vi];
            searcher.load(v)?;
            let (reranker, rewriter) = searcher.of(v);
            let mut cfg = v.stages.retrieval.clone();
            cfg.cutoff = None;
            // A retriever asked alone gets the list lengths a search would give it.
            let alone = cfg.clone().normalize().clamped_to(engine.chunks().chunks.len());
            for (set, q) in &ask.questions {
                let at = || format!("config `{}`, question `{}` ({set})", v.name, q.qid);
                let best = match ask.score {
                    ScoreKind::Final | ScoreKind::Auto => engine.search_full(&q.question, &cfg, reranker, rewriter).with_context(at)?.passages.first().map(|p| p.candidate.score as f64),
                    ScoreKind::Dense => engine.retrieve("dense", &q.question, &alone).with_context(at)?.hits.first().map(|h| h.1 as f64),
                    ScoreKind::Bm25 => engine.retrieve("bm25", &q.question, &alone).with_context(at)?.hits.first().map(|h| h.1 as f64),
                };
                out.insert((v.name.clone(), set.clone(), q.qid.clone()), best);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(out)
}
