//! The `raptor` stage: RAPTOR-style summary nodes (Sarthi et al., 2024) added to a chunk
//! artifact.
//!
//! The chunks' embeddings are clustered ([`kmeans::spherical_kmeans`]: `⌈n / cluster_size⌉`
//! clusters of the L2-normalised vectors), and a language model (the local Burn decoder or an
//! OpenAI-compatible endpoint) writes one summary per cluster from its members, nearest to the
//! centroid first, each cut to `max_leaf_chars`, up to `max_input_chars` in all. With
//! `levels = 2` the level-1 summaries are clustered again (by their clusters' centroids: the
//! normalised mean of their leaves' vectors, so no embedder is needed here) and summarised
//! once more. The output is a chunk artifact: every leaf unchanged (level 0), then the
//! summaries (`level` 1 or 2, `children` = the ids summarised); `embed` and `index` take it
//! like any chunk artifact, and the engine can return summaries or expand them to their
//! leaves (`retrieval.summaries`).
//!
//! Every call goes through the shared [`CallCache`] (`<artifact root>/llm-cache/`), so an
//! interrupted run resumes where it stopped and a rebuild asks the model nothing.
#![deny(missing_docs)]
pub mod cli;
pub mod kmeans;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use gauge_core::artifact::{artifact_dir, embedded_chunks};
use gauge_core::schema::{leaves_of, read_chunks, read_embeddings, write_chunks, ChunkRecord};
use gauge_core::{hash, Plan, Stage, StageRun};
use gauge_generator::cache::{model_identity, CallCache};
use gauge_generator::{Generator, GeneratorConfig};
use gauge_chat_client::{Message, RetryPolicy};
use serde::{Deserialize, Serialize};

/// Stage name.
pub const STAGE: &str = "raptor";

/// The built-in summary prompt (`pipelines/prompts/raptor_summary.md`), rendered with
/// `passages` (each with `label` and `text`).
pub const BUILTIN_TEMPLATE: &str = include_str!("../../../pipelines/prompts/raptor_summary.md");

/// `raptor` settings, echoed into the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RaptorConfig {
    /// Wanted members per cluster: `⌈n / cluster_size⌉` clusters per level.
    pub cluster_size: usize,
    /// Summary levels: 1 (summaries of chunks) or 2 (also summaries of those summaries).
    pub levels: usize,
    /// Characters of each member shown to the model (cut at a word boundary).
    pub max_leaf_chars: usize,
    /// Characters of members in one prompt, nearest to the centroid first (at least one member).
    pub max_input_chars: usize,
    /// The model that writes the summaries.
    pub model: GeneratorConfig,
    /// A template file replacing the built-in prompt.
    pub template: Option<String>,
    /// Tokens a summary may have.
    pub max_new_tokens: usize,
    /// k-means iterations at most.
    pub iterations: usize,
    /// Seed of the clustering and of sampling.
    pub seed: u64,
    /// Sampling temperature (0: greedy).
    pub temperature: f32,
}

impl Default for RaptorConfig {
    fn default() -> Self {
        RaptorConfig {
            cluster_size: 16,
            levels: 1,
            max_leaf_chars: 400,
            max_input_chars: 3200,
            model: GeneratorConfig::default(),
            template: None,
            max_new_tokens: 128,
            iterations: 25,
            seed: 42,
            temperature: 0.0,
        }
    }
}

impl RaptorConfig {
    /// Checks the settings.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.cluster_size >= 2, "raptor: cluster_size must be at least 2");
        anyhow::ensure!((1..=2).contains(&self.levels), "raptor: levels must be 1 or 2");
        anyhow::ensure!(self.max_leaf_chars >= 50 && self.max_input_chars >= self.max_leaf_chars, "raptor: need max_leaf_chars ≥ 50 and max_input_chars ≥ max_leaf_chars");
        anyhow::ensure!((8..=1 << 20).contains(&self.max_new_tokens), "raptor: max_new_tokens must be 8 to 1048576");
        anyhow::ensure!((1..=10_000).contains(&self.iterations), "raptor: iterations (of k-means) must be 1 to 10000");
        anyhow::ensure!(self.temperature.is_finite() && self.temperature >= 0.0, "raptor: temperature = {} must be a finite number ≥ 0", self.temperature);
        Ok(())
    }

    /// The prompt template (the named file, or the built-in one).
    pub fn template_text(&self) -> anyhow::Result<String> {
        match &self.template {
            Some(path) => std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{path}: cannot read the raptor summary template ({e})")),
            None => Ok(BUILTIN_TEMPLATE.to_string()),
        }
    }
}

/// Inputs: an embed artifact and (optionally) the chunk artifact it was made from.
#[derive(Debug, Clone, Serialize)]
pub struct RaptorInputs {
    /// The embed artifact directory.
    pub embeddings: PathBuf,
    /// The chunk artifact (default: the one the embed manifest names).
    pub chunks: Option<PathBuf>,
}

/// Run settings that do not change the output.
#[derive(Debug, Clone)]
pub struct RaptorOptions {
    /// Device of the local decoder.
    pub device: String,
    /// Model-call cache (default: `llm-cache/` in the artifact root the embeddings are in).
    pub cache: Option<PathBuf>,
    /// Endpoint calls in flight at once (the local decoder answers one at a time).
    pub concurrency: usize,
}

impl Default for RaptorOptions {
    fn default() -> Self {
        RaptorOptions { device: "cpu".into(), cache: None, concurrency: 4 }
    }
}

/// What a build did.
#[derive(Debug, Default)]
pub struct RaptorSummary {
    /// Leaf chunks.
    pub leaves: usize,
    /// Summary nodes written.
    pub summaries: usize,
    /// Model calls made (the rest came from the cache).
    pub model_calls: u64,
    /// Replies served from the cache.
    pub cache_hits: u64,
}

/// The `raptor` stage.
pub struct Raptor;

/// A node to summarise: its members' texts (nearest to the centroid first) and ids.
struct Group {
    members: Vec<usize>,
}

/// Cuts `text` to at most `max` characters at a word boundary, marking the cut with `…`.
pub fn cut(text: &str, max: usize) -> String {
    gauge_core::text::cut_at_word(text, max)
}

/// The prompt for one cluster: members (label, text) in the given order, each cut to
/// `max_leaf_chars`, while the total stays within `max_input_chars` (the first always kept).
pub fn render_prompt(template: &str, members: &[(String, String)], cfg: &RaptorConfig) -> anyhow::Result<String> {
    let mut passages = Vec::new();
    let mut used = 0;
    for (label, text) in members {
        let t = cut(text, cfg.max_leaf_chars);
        let n = t.chars().count();
        if !passages.is_empty() && used + n > cfg.max_input_chars {
            break;
        }
        used += n;
        passages.push(serde_json::json!({ "label": label, "text": t }));
    }
    let mut env = minijinja::Environment::new();
    env.add_template("raptor", template).map_err(|e| anyhow::anyhow!("raptor template: {e}"))?;
    env.get_template("raptor")
        .and_then(|t| t.render(minijinja::context! { passages => passages }))
        .map_err(|e| anyhow::anyhow!("raptor template: {e}"))
}

/// Members of each cluster, nearest to its centroid first (ties by input order).
fn ordered_groups(vectors: &[f32], dim: usize, clusters: &kmeans::Clusters) -> Vec<Group> {
    let mut unit = vectors.to_vec();
    unit.chunks_mut(dim).for_each(kmeans::normalize);
    clusters
        .members()
        .into_iter()
        .enumerate()
        .map(|(c, mut members)| {
            let centroid = &clusters.centroids[c * dim..(c + 1) * dim];
            let sim = |i: usize| -> f32 { unit[i * dim..(i + 1) * dim].iter().zip(centroid).map(|(a, b)| a * b).sum() };
            members.sort_by(|&a, &b| sim(b).total_cmp(&sim(a)).then(a.cmp(&b)));
            Group { members }
        })
        .collect()
}

/// One summary level: clusters `vectors` (rows of `nodes`) and asks the model for a summary
/// of each cluster. Returns the new nodes and their centroids (for the next level).
struct Level<'a> {
    cfg: &'a RaptorConfig,
    template: &'a str,
    generator: &'a Generator,
    identity: &'a str,
    cache: &'a CallCache,
    concurrency: usize,
}

impl Level<'_> {
    fn summarise(&self, level: i32, nodes: &[ChunkRecord], vectors: &[f32], dim: usize, all: &[ChunkRecord]) -> anyhow::Result<(Vec<ChunkRecord>, Vec<f32>)> {
        let k = nodes.len().div_ceil(self.cfg.cluster_size);
        let clusters = kmeans::spherical_kmeans(vectors, dim, k, self.cfg.iterations, self.cfg.seed.wrapping_add(level as u64));
        let groups = ordered_groups(vectors, dim, &clusters);
        let bar = gauge_core::progress::ReplyBar::new(groups.len() as u64, &format!("level-{level} summaries"));
        let opts = gauge_chat::GenerateOptions {
            max_new_tokens: self.cfg.max_new_tokens,
            temperature: self.cfg.temperature,
            top_k: 0,
            top_p: 1.0,
            seed: self.cfg.seed,
            stop: Vec::new(),
            ..Default::default()
        };
        let replies: Mutex<Vec<Option<String>>> = Mutex::new(vec![None; groups.len()]);
        let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
        let next = AtomicUsize::new(0);
        if self.generator.is_local() {
            // The local decoder: every cluster's prompt in one continuous batch.
            let mut chats = Vec::with_capacity(groups.len());
            for (g, group) in groups.iter().enumerate() {
                let members: Vec<(String, String)> = group.members.iter().map(|&i| (label(&nodes[i]), nodes[i].text.clone())).collect();
                let prompt = render_prompt(self.template, &members, self.cfg).map_err(|e| e.context(format!("level-{level} summary {} of {}", g + 1, groups.len())))?;
                chats.push(vec![Message::user(prompt)]);
            }
            let results = self.cache.complete_batch(self.generator, self.identity, &chats, &opts, None, &|tokens| bar.reply(tokens));
            let mut slots = replies.lock().expect("lock");
            for (g, r) in results.into_iter().enumerate() {
                match r {
                    Ok(reply) => slots[g] = Some(reply.completion.text),
                    Err(e) => {
                        failure.lock().expect("lock").get_or_insert(anyhow::Error::from(e).context(format!("level-{level} summary {} of {}", g + 1, groups.len())));
                    }
                }
            }
        }
        let workers = if self.generator.is_local() { 0 } else { self.concurrency.max(1) };
        std::thread::scope(|s| {
            for _ in 0..workers.min(groups.len()) {
                s.spawn(|| loop {
                    let g = next.fetch_add(1, Ordering::Relaxed);
                    if g >= groups.len() || failure.lock().expect("lock").is_some() {
                        break;
                    }
                    let members: Vec<(String, String)> = groups[g].members.iter().map(|&i| (label(&nodes[i]), nodes[i].text.clone())).collect();
                    let result = render_prompt(self.template, &members, self.cfg).and_then(|prompt| {
                        let reply = self.cache.complete(self.generator, self.identity, &[Message::user(prompt)], &opts, None)?;
                        Ok((reply.completion.text, if reply.hit { 0 } else { reply.completion.completion_tokens }))
                    });
                    match result {
                        Ok((text, tokens)) => {
                            replies.lock().expect("lock")[g] = Some(text);
                            bar.reply(tokens);
                        }
                        Err(e) => {
                            failure.lock().expect("lock").get_or_insert(e.context(format!("level-{level} summary {} of {}", g + 1, groups.len())));
                            bar.reply(0);
                        }
                    }
                });
            }
        });
        bar.bar.finish_and_clear();
        if let Some(e) = failure.into_inner().expect("lock") {
            return Err(e);
        }
        let replies = replies.into_inner().expect("lock");
        // Every node a summary can reach (chunks and lower summaries), indexed once.
        let by_id: std::collections::HashMap<&str, &ChunkRecord> = all.iter().map(|c| (c.chunk_id.as_str(), c)).collect();
        let mut out = Vec::new();
        let mut centroids = Vec::new();
        for (c, (group, reply)) in groups.iter().zip(replies).enumerate() {
            let text = reply.unwrap_or_default().trim().to_string();
            if text.is_empty() {
                tracing::warn!("level-{level} cluster {c}: the model wrote an empty summary; no node for it");
                continue;
            }
            let mut children: Vec<&ChunkRecord> = group.members.iter().map(|&i| &nodes[i]).collect();
            children.sort_by_key(|n| (n.level, n.source.clone(), n.chunk_index, n.chunk_id.clone()));
            out.push(summary_node(level, out.len(), &children, text, &|id| by_id.get(id).copied()));
            centroids.extend_from_slice(&clusters.centroids[c * dim..(c + 1) * dim]);
        }
        Ok((out, centroids))
    }
}

/// How a member is labelled in the prompt: `source p.N` for a chunk, `summary` otherwise.
fn label(c: &ChunkRecord) -> String {
    if c.is_summary() {
        "summary".into()
    } else if c.page_start == c.page_end {
        format!("{} p.{}", c.source, c.page_start)
    } else {
        format!("{} pp.{}-{}", c.source, c.page_start, c.page_end)
    }
}

/// What joins a summary's source files in its `source` (`a.pdf; b.pdf`).
pub const SOURCE_SEPARATOR: &str = "; ";

/// The files a passage's `source` names: one, or a summary's several.
pub fn source_files(source: &str) -> impl Iterator<Item = &str> {
    source.split(SOURCE_SEPARATOR).filter(|f| !f.is_empty())
}

/// A summary row: id from its level and children; source, doc type, title and pages from its
/// leaves (sources joined by [`SOURCE_SEPARATOR`] when it spans several documents).
fn summary_node<'a>(level: i32, index: usize, children: &[&'a ChunkRecord], text: String, lookup: &dyn Fn(&str) -> Option<&'a ChunkRecord>) -> ChunkRecord {
    let ids: Vec<String> = children.iter().map(|c| c.chunk_id.clone()).collect();
    let leaves = leaves_of(children.iter().map(|c| c.chunk_id.as_str()), lookup);
    let distinct = |f: &dyn Fn(&ChunkRecord) -> &str| leaves.iter().map(|c| f(c).to_string()).collect::<BTreeSet<String>>().into_iter().collect::<Vec<_>>();
    let sources = distinct(&|c| c.source.as_str());
    let doc_types = distinct(&|c| c.doc_type.as_str());
    let titles = distinct(&|c| c.title.as_str());
    let chunk_id = hash::bytes_hash(format!("raptor|{level}|{}", ids.join(",")).as_bytes())[..16].to_string();
    ChunkRecord {
        doc_id: format!("raptor-{chunk_id}"),
        chunk_id,
        source: sources.join(SOURCE_SEPARATOR),
        doc_type: if doc_types.len() == 1 { doc_types[0].clone() } else { String::new() },
        title: if titles.len() == 1 { format!("{} (summary of {} passages)", titles[0], leaves.len()) } else { format!("Summary of {} passages from {} documents", leaves.len(), titles.len()) },
        section: String::new(),
        page_start: leaves.iter().map(|c| c.page_start).min().unwrap_or(0),
        page_end: leaves.iter().map(|c| c.page_end).max().unwrap_or(0),
        char_start: 0,
        char_end: 0,
        chunk_index: index as i32,
        prev_chunk_id: None,
        next_chunk_id: None,
        text,
        embed_text: None,
        level,
        children: ids,
    }
}

/// What `plan` hands to `build`.
pub struct RaptorState {
    chunks: Vec<ChunkRecord>,
    vectors: Vec<f32>,
    dim: usize,
    cache_dir: PathBuf,
}

impl Stage for Raptor {
    const NAME: &'static str = STAGE;
    const FORMAT_VERSION: u32 = 2;
    type Config = RaptorConfig;
    type Inputs = RaptorInputs;
    type Options = RaptorOptions;
    type State = RaptorState;
    type Summary = RaptorSummary;

    fn plan(config: &RaptorConfig, inputs: &RaptorInputs, options: &RaptorOptions) -> anyhow::Result<Plan<RaptorState>> {
        config.validate()?;
        let found = embedded_chunks(&inputs.embeddings, inputs.chunks.as_deref())?;
        let chunks = read_chunks(&found.chunks_path)?;
        anyhow::ensure!(
            !chunks.iter().any(ChunkRecord::is_summary),
            "{}: this chunk artifact already has summary nodes (it is a raptor artifact); pass the chunk artifact `chunk` made",
            found.chunks_path.display()
        );
        let emb = read_embeddings(&found.embeddings_path)?;
        anyhow::ensure!(
            emb.ids.len() == chunks.len() && emb.ids.iter().zip(&chunks).all(|(a, c)| *a == c.chunk_id),
            "{}: embeddings do not list the chunks of {} in order",
            found.embeddings_path.display(),
            found.chunks_path.display()
        );
        anyhow::ensure!(!chunks.is_empty(), "{}: no chunks to summarise", found.chunks_path.display());
        let mut entries = vec![found.chunks_entry, found.embeddings_entry];
        entries.extend(gauge_generator::model_entry(&config.model)?);
        let template_hash = hash::bytes_hash(config.template_text()?.as_bytes());
        let echo = serde_json::json!({ "raptor": config, "template_hash": template_hash });
        let cache_dir = match &options.cache {
            Some(c) => c.clone(),
            None => artifact_root(&inputs.embeddings).join("llm-cache"),
        };
        Ok(Plan::new(entries, RaptorState { chunks, vectors: emb.vectors, dim: emb.dim, cache_dir }).echo(echo).seed(config.seed))
    }

    fn build(state: RaptorState, run: &mut StageRun, config: &RaptorConfig, _: &RaptorInputs, options: &RaptorOptions) -> anyhow::Result<RaptorSummary> {
        let RaptorState { chunks, vectors, dim, cache_dir } = state;
        let identity = model_identity(&config.model)?;
        let generator = Generator::open(&config.model, &options.device, RetryPolicy::default())?;
        let cache = Arc::new(CallCache::new(cache_dir));
        let template = config.template_text()?;
        let started = std::time::Instant::now();
        let level = Level { cfg: config, template: &template, generator: &generator, identity: &identity, cache: &cache, concurrency: options.concurrency };
        let (first, centroids) = level.summarise(1, &chunks, &vectors, dim, &chunks)?;
        let mut summaries = first.clone();
        let mut per_level = vec![first.len()];
        if config.levels >= 2 && first.len() > config.cluster_size {
            // Level-2 nodes reach their leaves through the level-1 nodes.
            let reachable: Vec<ChunkRecord> = chunks.iter().chain(&first).cloned().collect();
            let (second, _) = level.summarise(2, &first, &centroids, dim, &reachable)?;
            per_level.push(second.len());
            summaries.extend(second);
        }
        let leaves = chunks.len();
        let mut all = chunks;
        all.extend(summaries.iter().cloned());
        let rows = write_chunks(&run.path("chunks.parquet"), &all)?;
        run.add_output("chunks.parquet", Some(rows))?;
        run.set_input_rows("chunks.parquet", leaves as u64);
        let sizes: Vec<usize> = summaries.iter().filter(|s| s.level == 1).map(|s| s.children.len()).collect();
        run.set_stat("leaves", leaves);
        run.set_stat("summaries_per_level", per_level);
        run.set_stat("mean_cluster_size", sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64);
        run.set_stat("max_cluster_size", sizes.iter().copied().max().unwrap_or(0));
        run.set_stat("model_calls", cache.misses());
        run.set_stat("model_calls_cached", cache.hits());
        run.set_stat("seconds", started.elapsed().as_secs_f64());
        run.set_stat("model", generator.name());
        Ok(RaptorSummary { leaves, summaries: summaries.len(), model_calls: cache.misses(), cache_hits: cache.hits() })
    }

    fn summary_line(s: &RaptorSummary) -> String {
        format!("{} chunks + {} summaries ({} model calls, {} from the cache)", s.leaves, s.summaries, s.model_calls, s.cache_hits)
    }
}

/// The artifact root an artifact directory lives in (`<root>/<stage>/<fingerprint>`).
fn artifact_root(arg: &Path) -> PathBuf {
    let dir = artifact_dir(arg);
    dir.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: &str, source: &str, page: i32, text: &str) -> ChunkRecord {
        ChunkRecord { chunk_index: page, ..ChunkRecord::leaf(id, source, page, text) }
    }

    #[test]
    fn prompts_keep_the_nearest_members_within_the_budget() {
        let cfg = RaptorConfig { max_leaf_chars: 60, max_input_chars: 130, ..Default::default() };
        let long = "word ".repeat(40);
        let members = vec![("a.pdf p.1".to_string(), long.clone()), ("b.pdf p.2".to_string(), "short text".to_string()), ("c.pdf p.3".to_string(), long.clone()), ("d.pdf p.4".to_string(), long)];
        let prompt = render_prompt(BUILTIN_TEMPLATE, &members, &cfg).unwrap();
        assert!(prompt.contains("[a.pdf p.1]") && prompt.contains("[b.pdf p.2]") && prompt.contains("[c.pdf p.3]"), "{prompt}");
        assert!(!prompt.contains("[d.pdf p.4]"), "the budget keeps the first members only: {prompt}");
        assert!(prompt.contains("word word…"));
        assert_eq!(cut("alpha beta gamma", 100), "alpha beta gamma");
        assert_eq!(cut("alpha beta gamma", 12), "alpha beta…");
    }

    #[test]
    fn summary_nodes_resolve_to_their_leaves() {
        let all = vec![chunk("l1", "a.pdf", 3, "x"), chunk("l2", "a.pdf", 5, "y"), chunk("l3", "b.pdf", 9, "z")];
        let find = |set: &[ChunkRecord], id: &str| set.iter().position(|c| c.chunk_id == id);
        let in_all = |id: &str| find(&all, id).map(|i| &all[i]);
        let s1 = summary_node(1, 0, &[&all[0], &all[1]], "about a".into(), &in_all);
        assert_eq!((s1.source.as_str(), s1.page_start, s1.page_end, s1.level), ("a.pdf", 3, 5, 1));
        assert!(s1.title.starts_with("a.pdf (summary of 2"));
        let mut with = all.clone();
        with.push(s1.clone());
        let in_with = |id: &str| find(&with, id).map(|i| &with[i]);
        let s2 = summary_node(2, 0, &[&s1, &all[2]], "about a and b".into(), &in_with);
        assert_eq!((s2.source.as_str(), s2.page_start, s2.page_end), ("a.pdf; b.pdf", 3, 9));
        with.push(s2.clone());
        let lookup = |id: &str| with.iter().find(|c| c.chunk_id == id);
        let leaves: Vec<&str> = leaves_of([s2.chunk_id.as_str()], &lookup).iter().map(|c| c.chunk_id.as_str()).collect();
        assert_eq!(leaves, vec!["l1", "l2", "l3"]);
        assert_ne!(s1.chunk_id, s2.chunk_id);
        assert_eq!(s1.chunk_id, summary_node(1, 7, &[&all[0], &all[1]], "other text".into(), &in_all).chunk_id, "ids depend on level and children only");
    }
}
