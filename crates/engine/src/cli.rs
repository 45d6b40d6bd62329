//! The `query` command: ranked passages for a question from an index artifact, every layer a
//! flag over [`RetrievalConfig`] (defaults → `--config` → `--set` → flags, the one merge path
//! every stage uses).
use std::path::PathBuf;

use clap::Args;
use gauge_core::config::{parse_as, switch_off, switch_on, ConfigArgs, Layer};
use gauge_index::FaissDevice;
use gauge_rank::{Normalization, RerankKind};
use serde::Serialize;

use crate::{DedupKey, Engine, RetrievalConfig};

/// Arguments of `query` that are not retrieval settings.
#[derive(Args, Debug)]
pub struct QueryArgs {
    /// The question.
    pub question: String,
    /// The index artifact directory; repeat it to search shard indexes (`index --shard i/n`)
    /// together.
    #[arg(long, required = true)]
    pub index: Vec<PathBuf>,
    /// Query embedder (default: the model the index was built with; another one is refused).
    #[arg(long)]
    pub model: Option<String>,
    /// Device of the query embedder and the reranker: cpu, or cuda[:N] in a `--features cuda`
    /// build.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Where faiss searches: cpu, or cuda[:N] in a `--features faiss-gpu` build (the index is
    /// copied to the GPU when opened).
    #[arg(long, default_value = "cpu")]
    pub faiss_device: FaissDevice,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    /// Config file and --set overrides (a [`RetrievalConfig`], e.g. a pipeline's `retrieval`).
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Retrieval flags.
    #[command(flatten)]
    pub retrieval: RetrievalFlags,
    /// Reranking flags.
    #[command(flatten)]
    pub rerank: RerankFlags,
}

fn nonempty<S: serde::Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
    if v.is_empty() { s.serialize_none() } else { v.serialize(s) }
}

pub(crate) fn page_range(raw: &str) -> Result<(i32, i32), String> {
    let (a, b) = raw.split_once('-').ok_or_else(|| format!("takes A-B, got `{raw}`"))?;
    let a = a.trim().parse().map_err(|_| format!("`{a}` is not a page number"))?;
    let b = b.trim().parse().map_err(|_| format!("`{b}` is not a page number"))?;
    if a > b {
        return Err(format!("{a}-{b}: the first page is after the last; write {b}-{a}"));
    }
    Ok((a, b))
}

/// Flags over [`RetrievalConfig`]; each sets the field named in its help.
#[derive(Args, Debug, Serialize)]
pub struct RetrievalFlags {
    /// Dense retrieval off (`dense = false`).
    #[arg(long)]
    #[serde(rename = "dense", serialize_with = "switch_off")]
    pub no_dense: bool,
    /// BM25 retrieval off (`bm25 = false`).
    #[arg(long)]
    #[serde(rename = "bm25", serialize_with = "switch_off")]
    pub no_bm25: bool,
    /// Fusion (`fusion.kind`).
    #[arg(long, value_parser = ["rrf", "union", "weighted", "none"])]
    #[serde(rename = "fusion.kind")]
    pub fusion: Option<String>,
    /// RRF constant k (`fusion.k`; default 60).
    #[arg(long, value_parser = gauge_core::cli::finite_f32)]
    #[serde(rename = "fusion.k")]
    pub rrf_k: Option<f32>,
    /// Weight of dense scores in weighted fusion (`fusion.alpha`; default 0.5).
    #[arg(long, value_parser = gauge_core::cli::finite_f32)]
    #[serde(rename = "fusion.alpha")]
    pub alpha: Option<f32>,
    /// Weighted fusion normalisation: min_max or z_score (`fusion.normalization`).
    #[arg(long, value_parser = parse_normalization)]
    #[serde(rename = "fusion.normalization")]
    pub normalization: Option<Normalization>,
    /// Keep only this source (repeatable; `filter.sources`).
    #[arg(long)]
    #[serde(rename = "filter.sources", serialize_with = "nonempty")]
    pub source: Vec<String>,
    /// Keep only this document type (repeatable; `filter.doc_types`).
    #[arg(long)]
    #[serde(rename = "filter.doc_types", serialize_with = "nonempty")]
    pub doc_type: Vec<String>,
    /// Keep only chunks overlapping pages A-B (`filter.pages`).
    #[arg(long, value_parser = page_range)]
    #[serde(rename = "filter.pages")]
    pub pages: Option<(i32, i32)>,
    /// At most this many passages per document, 0: no limit (`max_per_doc`).
    #[arg(long)]
    pub max_per_doc: Option<usize>,
    /// What --max-per-doc counts per: doc or page (`dedup_by`).
    #[arg(long, value_parser = parse_as::<DedupKey>)]
    pub dedup_by: Option<DedupKey>,
    /// Small-to-big: neighbouring chunks on each side, 0: off (`window`).
    #[arg(long)]
    pub window: Option<usize>,
    /// Refuse when the best score is under this (`cutoff`).
    #[arg(long, value_parser = gauge_core::cli::finite_f32)]
    pub cutoff: Option<f32>,
    /// Do not move chunks holding the query's identifiers (e.g. `174.63`) to the front
    /// (`promote_exact = false`).
    #[arg(long)]
    #[serde(rename = "promote_exact", serialize_with = "switch_off")]
    pub no_exact: bool,
    /// faiss nprobe, IVF indexes (`nprobe`).
    #[arg(long)]
    pub nprobe: Option<usize>,
    /// faiss efSearch, HNSW indexes (`ef_search`).
    #[arg(long)]
    pub ef_search: Option<usize>,
    /// Candidates from each retriever (`candidates`; raised to k and --n-initial).
    #[arg(long)]
    pub candidates: Option<usize>,
    /// Number of passages (`k`).
    #[arg(short)]
    pub k: Option<usize>,
    /// RAPTOR summary nodes (an index built from a `raptor` artifact): keep, expand (to the
    /// chunks under them) or exclude (`summaries`).
    #[arg(long, value_parser = parse_as::<crate::SummaryUse>)]
    pub summaries: Option<crate::SummaryUse>,
}

fn parse_normalization(raw: &str) -> Result<Normalization, String> {
    match raw {
        "minmax" => Ok(Normalization::MinMax),
        "zscore" => Ok(Normalization::ZScore),
        other => parse_as(other),
    }
}

/// Flags over `rerank` (a [`gauge_rank::RerankConfig`]); the settings apply when a reranker is
/// configured (--rerank, --rerank-kind, or the config).
#[derive(Args, Debug, Serialize)]
pub struct RerankFlags {
    /// Rerank with this cross-encoder (folder or id), or with this bi-encoder when
    /// `--rerank-kind maxsim` (default there: the index's model) (`rerank.model`).
    #[arg(long = "rerank")]
    #[serde(rename = "rerank.model")]
    pub rerank_model: Option<String>,
    /// Reranker kind: cross_encoder, maxsim or query_likelihood (a local decoder's log P(query |
    /// passage); default model there: the local generator's) (`rerank.kind`).
    #[arg(long, value_parser = parse_as::<RerankKind>)]
    #[serde(rename = "rerank.kind")]
    pub rerank_kind: Option<RerankKind>,
    /// Fused candidates the reranker reads (`rerank.n_initial`).
    #[arg(long)]
    #[serde(rename = "rerank.n_initial")]
    pub n_initial: Option<usize>,
    /// Put `Query: ` / `Passage: ` before query and passages for the reranker
    /// (`rerank.query_prefix`, `rerank.passage_prefix`).
    #[arg(long)]
    #[serde(skip)]
    pub rerank_prefixes: bool,
    /// Instruction put before the query for the reranker (`rerank.instruction`).
    #[arg(long)]
    #[serde(rename = "rerank.instruction")]
    pub instruction: Option<String>,
    /// Report reranker scores through the logistic function, 0..1 (`rerank.sigmoid`).
    #[arg(long)]
    #[serde(rename = "rerank.sigmoid", serialize_with = "switch_on")]
    pub sigmoid: bool,
}

impl QueryArgs {
    /// The retrieval config the arguments describe (before the index fills in defaults).
    pub fn retrieval_config(&self) -> anyhow::Result<RetrievalConfig> {
        let mut layers = self.config.layers()?;
        layers.push(Layer::from_flags("flags", &self.retrieval));
        let without_rerank_flags: RetrievalConfig = gauge_core::config::resolve(&layers)?;
        let asks_rerank = self.rerank.rerank_model.is_some() || self.rerank.rerank_kind.is_some();
        if !(asks_rerank || without_rerank_flags.rerank.is_some()) {
            return Ok(without_rerank_flags);
        }
        let mut rerank = Layer::from_flags("flags", &self.rerank);
        if self.rerank.rerank_prefixes {
            gauge_core::config::set_path(&mut rerank.patch, "rerank.query_prefix", "Query: ".into());
            gauge_core::config::set_path(&mut rerank.patch, "rerank.passage_prefix", "Passage: ".into());
        }
        if rerank.patch.get("rerank").is_none() {
            gauge_core::config::set_path(&mut rerank.patch, "rerank", serde_json::json!({}));
        }
        layers.push(rerank);
        Ok(gauge_core::config::resolve(&layers)?)
    }
}

/// Runs `query`.
pub fn query(args: &QueryArgs) -> anyhow::Result<()> {
    let mut cfg = args.retrieval_config()?;
    anyhow::ensure!(!args.index.is_empty(), "no index given");
    if let Some(rc) = &mut cfg.rerank {
        // `--rerank-kind maxsim` without a model: late interaction over the index's own embedder.
        if rc.kind == RerankKind::MaxSim && args.rerank.rerank_model.is_none() && args.rerank.rerank_kind.is_some() {
            rc.model = gauge_index::IndexManifest::read(&args.index[0])?.1.embedder.model;
        }
        if rc.kind == RerankKind::QueryLikelihood && args.rerank.rerank_model.is_none() && args.rerank.rerank_kind.is_some() {
            rc.model = gauge_generator::default_model();
        }
    }
    let cfg = cfg.normalize();
    let index = crate::IndexOptions { dirs: args.index.clone(), model: args.model.clone(), device: args.device.clone(), faiss_device: args.faiss_device };
    let engine = Engine::assemble(&cfg, &index, crate::call_cache_beside(&args.index[0]))?;
    let result = engine.search(&args.question, &cfg)?;
    if args.json {
        let passages: Vec<serde_json::Value> = result
            .passages
            .iter()
            .map(|p| {
                serde_json::json!({
                    "rank": p.rank, "chunk_id": p.chunk.chunk_id, "score": p.candidate.score, "stages": p.candidate.stages,
                    "source": p.chunk.source, "page_start": p.chunk.page_start, "page_end": p.chunk.page_end,
                    "section": p.chunk.section, "text": p.chunk.text, "window": p.window,
                    "level": p.chunk.level, "children": p.chunk.children,
                })
            })
            .collect();
        gauge_core::outln!("{}", serde_json::json!({ "question": args.question, "config": cfg, "passages": passages, "refusal": result.refusal, "rewrite": result.rewrite }));
        return Ok(());
    }
    if let Some(r) = &result.refusal {
        gauge_core::outln!("{r}");
        return Ok(());
    }
    for p in &result.passages {
        let stages: Vec<String> = p.candidate.stages.iter().map(|s| format!("{} #{} ({:.4})", s.stage, s.rank, s.score)).collect();
        let pages = if p.chunk.page_start == p.chunk.page_end { format!("p. {}", p.chunk.page_start) } else { format!("pp. {}-{}", p.chunk.page_start, p.chunk.page_end) };
        gauge_core::outln!("{:>2}. {:.4}  {}  {}  [{}]", p.rank, p.candidate.score, p.chunk.source, pages, stages.join(", "));
        if !p.chunk.section.is_empty() {
            gauge_core::outln!("    § {}", p.chunk.section);
        }
        if p.chunk.is_summary() {
            gauge_core::outln!("    summary (level {}) of {} chunks", p.chunk.level, p.span.leaves.len());
        }
        let preview: String = p.chunk.text.chars().take(200).collect::<String>().replace('\n', " ");
        gauge_core::outln!("    {preview}");
    }
    Ok(())
}

/// The `main` of `query`.
pub fn query_main() {
    let args = gauge_core::cli::parse_args::<QueryArgs>("query", "Prints the ranked passages for a question: rank, source, pages, section, the per-stage ranks and scores, and a text preview (--json for machines).");
    gauge_core::run_main("query", || query(&args));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_have_distinct_names() {
        gauge_core::cli::command::<QueryArgs>("query", "", false).debug_assert();
    }

    #[test]
    fn rerank_flags_apply_only_when_a_reranker_is_asked_for() {
        use clap::FromArgMatches;
        let parse = |args: &[&str]| {
            let m = gauge_core::cli::command::<QueryArgs>("query", "", false).get_matches_from(args);
            QueryArgs::from_arg_matches(&m).unwrap().retrieval_config().unwrap()
        };
        assert!(parse(&["query", "q", "--index", "i", "--n-initial", "40"]).rerank.is_none());
        let r = parse(&["query", "q", "--index", "i", "--rerank", "some/model", "--n-initial", "40", "--rerank-prefixes"]).rerank.unwrap();
        assert_eq!((r.model.as_str(), r.n_initial, r.query_prefix.as_str()), ("some/model", 40, "Query: "));
        let m = parse(&["query", "q", "--index", "i", "--rerank-kind", "maxsim", "-k", "3", "--fusion", "weighted", "--alpha", "0.3"]);
        assert_eq!(m.rerank.unwrap().kind, RerankKind::MaxSim);
        assert_eq!(m.fusion, gauge_rank::Fusion::Weighted { alpha: 0.3, normalization: Normalization::MinMax });
        assert_eq!(m.k, 3);
    }
}
