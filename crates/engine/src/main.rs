//! `query`: ranked passages for a question from an index artifact, every layer a flag.
use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use gauge_embed::{load_embedder, EmbedConfig, Runtime};
use gauge_engine::{Engine, RetrievalConfig};
use gauge_retrieve::{Fusion, Normalization};

/// Prints the ranked passages for a question: rank, source, pages, section, the per-stage
/// ranks and scores, and a text preview (`--json` for machines).
#[derive(Parser, Debug)]
#[command(name = "query", version)]
struct Args {
    /// The question.
    question: String,
    /// The index artifact directory.
    #[arg(long)]
    index: PathBuf,
    /// Query embedder (default: the model the index was built with).
    #[arg(long)]
    model: Option<String>,
    /// Dense retrieval off.
    #[arg(long)]
    no_dense: bool,
    /// BM25 retrieval off.
    #[arg(long)]
    no_bm25: bool,
    /// Fusion: rrf, union, weighted, none.
    #[arg(long, default_value = "rrf")]
    fusion: String,
    /// RRF constant k.
    #[arg(long, default_value_t = 60.0)]
    rrf_k: f32,
    /// Weight of dense scores in weighted fusion.
    #[arg(long, default_value_t = 0.5)]
    alpha: f32,
    /// Weighted fusion normalisation: minmax or zscore.
    #[arg(long, default_value = "minmax")]
    normalization: String,
    /// Keep only this source (repeatable).
    #[arg(long)]
    source: Vec<String>,
    /// Keep only this document type (repeatable).
    #[arg(long)]
    doc_type: Vec<String>,
    /// Keep only chunks overlapping pages A-B.
    #[arg(long)]
    pages: Option<String>,
    /// At most this many passages per document (0: no limit).
    #[arg(long, default_value_t = 0)]
    max_per_doc: usize,
    /// What --max-per-doc counts per: doc or page.
    #[arg(long, default_value = "doc")]
    dedup_by: String,
    /// Small-to-big: neighbouring chunks on each side (0: off).
    #[arg(long, default_value_t = 0)]
    window: usize,
    /// Refuse when the best score is under this.
    #[arg(long)]
    cutoff: Option<f32>,
    /// Do not move chunks holding the query's identifiers (e.g. `174.63`) to the front.
    #[arg(long)]
    no_exact: bool,
    /// faiss nprobe (IVF indexes).
    #[arg(long)]
    nprobe: Option<usize>,
    /// faiss efSearch (HNSW indexes).
    #[arg(long)]
    ef_search: Option<usize>,
    /// Device of the query embedder and the reranker: cpu, or cuda[:N] in a `--features cuda`
    /// build.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Where faiss searches: cpu, or cuda[:N] in a `--features faiss-gpu` build (the index is
    /// copied to the GPU when opened).
    #[arg(long, default_value = "cpu")]
    faiss_device: gauge_index::FaissDevice,
    /// Rerank with this cross-encoder (folder or hub id in the local cache), or with this
    /// bi-encoder when `--rerank-kind maxsim` (default there: the index's model).
    #[arg(long)]
    rerank: Option<String>,
    /// Reranker kind: cross-encoder or maxsim (late interaction, no extra weights).
    #[arg(long, default_value = "cross-encoder")]
    rerank_kind: String,
    /// Fused candidates the reranker reads.
    #[arg(long, default_value_t = 25)]
    n_initial: usize,
    /// Put `Query: ` / `Passage: ` before query and passages for the reranker.
    #[arg(long)]
    rerank_prefixes: bool,
    /// Instruction put before the query for the reranker.
    #[arg(long)]
    instruction: Option<String>,
    /// Report reranker scores through the logistic function (0..1) instead of raw logits.
    #[arg(long)]
    sigmoid: bool,
    /// Candidates from each retriever.
    #[arg(long, default_value_t = 50)]
    candidates: usize,
    /// Number of passages.
    #[arg(short, default_value_t = 10)]
    k: usize,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

fn main() {
    let args = Args::parse();
    gauge_core::run_main("query", || run(args));
}

fn run(args: Args) -> Result<()> {
    let fusion = match args.fusion.as_str() {
        "rrf" => Fusion::Rrf { k: args.rrf_k },
        "union" => Fusion::Union,
        "none" => Fusion::None,
        "weighted" => Fusion::Weighted {
            alpha: args.alpha,
            normalization: match args.normalization.as_str() {
                "minmax" => Normalization::MinMax,
                "zscore" => Normalization::ZScore,
                other => anyhow::bail!("unknown --normalization `{other}` (minmax, zscore)"),
            },
        },
        other => anyhow::bail!("unknown --fusion `{other}` (rrf, union, weighted, none)"),
    };
    let pages = match &args.pages {
        None => None,
        Some(p) => {
            let (a, b) = p.split_once('-').ok_or_else(|| anyhow::anyhow!("--pages takes A-B, got `{p}`"))?;
            Some((a.trim().parse()?, b.trim().parse()?))
        }
    };
    let manifest = gauge_core::Manifest::read(&args.index)?;
    let built_model = manifest.config["embedder"]["model"].as_str().unwrap_or(gauge_embed::DEFAULT_MODEL).to_string();
    let rerank = match (args.rerank_kind.as_str(), &args.rerank) {
        ("cross-encoder" | "cross_encoder", None) => None,
        ("cross-encoder" | "cross_encoder", Some(m)) => Some((gauge_retrieve::RerankKind::CrossEncoder, m.clone())),
        ("maxsim" | "max_sim", m) => Some((gauge_retrieve::RerankKind::MaxSim, m.clone().unwrap_or(built_model.clone()))),
        (other, _) => anyhow::bail!("unknown --rerank-kind `{other}` (cross-encoder, maxsim)"),
    };
    let rerank = rerank.map(|(kind, model)| gauge_retrieve::RerankConfig {
        kind,
        model,
        n_initial: args.n_initial.max(args.k),
        top_n: args.k,
        query_prefix: if args.rerank_prefixes { "Query: ".into() } else { String::new() },
        passage_prefix: if args.rerank_prefixes { "Passage: ".into() } else { String::new() },
        instruction: args.instruction.clone().unwrap_or_default(),
        sigmoid: args.sigmoid,
        max_length: None,
    });
    let cfg = RetrievalConfig {
        dense: !args.no_dense,
        bm25: !args.no_bm25,
        candidates: args.candidates.max(args.k).max(rerank.as_ref().map_or(0, |r| r.n_initial)),
        fusion,
        filter: gauge_engine::Filter { sources: args.source, doc_types: args.doc_type, pages },
        max_per_doc: args.max_per_doc,
        dedup_by: match args.dedup_by.as_str() {
            "doc" => gauge_engine::DedupKey::Doc,
            "page" => gauge_engine::DedupKey::Page,
            other => anyhow::bail!("unknown --dedup-by `{other}` (doc, page)"),
        },
        window: args.window,
        cutoff: args.cutoff,
        promote_exact: !args.no_exact,
        rerank: rerank.clone(),
        nprobe: args.nprobe,
        ef_search: args.ef_search,
        k: args.k,
    };
    let embedder = if cfg.dense {
        let built = &manifest.config["embedder"];
        let model = args.model.clone().unwrap_or_else(|| built["model"].as_str().unwrap_or(gauge_embed::DEFAULT_MODEL).to_string());
        let config = EmbedConfig {
            model,
            query_prefix: built["query_prefix"].as_str().map(str::to_string),
            passage_prefix: built["passage_prefix"].as_str().map(str::to_string),
            ..EmbedConfig::default()
        };
        Some(load_embedder(&config, &Runtime { device: args.device.clone(), ..Runtime::default() })?)
    } else {
        None
    };
    let mut engine = Engine::open(&args.index, embedder)?.on_faiss_device(args.faiss_device, &cfg)?;
    if let Some(rc) = &rerank {
        engine = engine.with_reranker(gauge_rerank::load_reranker(rc, &args.device)?);
    }
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
                })
            })
            .collect();
        println!("{}", serde_json::json!({ "question": args.question, "config": cfg, "passages": passages, "refusal": result.refusal }));
        return Ok(());
    }
    if let Some(r) = &result.refusal {
        println!("{r}");
        return Ok(());
    }
    for p in &result.passages {
        let stages: Vec<String> = p.candidate.stages.iter().map(|s| format!("{} #{} ({:.4})", s.stage, s.rank, s.score)).collect();
        let pages = if p.chunk.page_start == p.chunk.page_end { format!("p. {}", p.chunk.page_start) } else { format!("pp. {}-{}", p.chunk.page_start, p.chunk.page_end) };
        println!("{:>2}. {:.4}  {}  {}  [{}]", p.rank, p.candidate.score, p.chunk.source, pages, stages.join(", "));
        if !p.chunk.section.is_empty() {
            println!("    § {}", p.chunk.section);
        }
        let preview: String = p.chunk.text.chars().take(200).collect::<String>().replace('\n', " ");
        println!("    {preview}");
    }
    Ok(())
}
