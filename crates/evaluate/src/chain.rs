//! The build chain of one config: extract → chunk → embed → index (with `raptor`: extract →
//! chunk → embed → raptor → embed → index; with `embed_shards = n`: n embed shards, one
//! index over them), written once over a [`Builder`]: the stage DAG that builds it now
//! ([`gauge_core::stage::Dag`]: each distinct artifact built once, cached across runs), or a
//! [`TaskPlan`] that records it as command lines for a cluster launcher (`pipeline-dag`,
//! `just ablate-ray`).
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use gauge_chunk::Chunk;
use gauge_core::cli::StageCli;
use gauge_core::shard::Shard;
use gauge_core::stage::Dag;
use gauge_embed::Embed;
use gauge_extract::Extract;
use gauge_index::{Index, IndexInputs};
use gauge_raptor::{Raptor, RaptorInputs};
use serde::Serialize;

use crate::pipeline::Variant;

/// Where a config's upstream artifacts live.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// The extract artifact.
    pub pages: PathBuf,
    /// The index artifact.
    pub index: PathBuf,
    /// The index's fingerprint (an input of the evaluation).
    pub fingerprint: String,
}

/// A stage's command line for its inputs (artifact directories as arguments), after the
/// binary's name; `--config` and `--artifacts` are added by whoever runs it.
pub trait StageArgv: StageCli {
    /// The arguments naming the inputs.
    fn argv(inputs: &Self::Inputs) -> Vec<String>;
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

impl StageArgv for Extract {
    fn argv(inputs: &Vec<PathBuf>) -> Vec<String> {
        inputs.iter().map(|p| s(p)).collect()
    }
}
impl StageArgv for Chunk {
    fn argv(pages: &PathBuf) -> Vec<String> {
        vec![s(pages)]
    }
}
impl StageArgv for Embed {
    fn argv(chunks: &PathBuf) -> Vec<String> {
        vec![s(chunks)]
    }
}
impl StageArgv for Raptor {
    fn argv(i: &RaptorInputs) -> Vec<String> {
        let mut v = vec![s(&i.embeddings)];
        if let Some(c) = &i.chunks {
            v.extend(["--chunks".into(), s(c)]);
        }
        v
    }
}
impl StageArgv for Index {
    fn argv(i: &IndexInputs) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(c) = &i.chunks {
            v.extend(["--chunks".into(), s(c)]);
        }
        for e in std::iter::once(&i.embeddings).chain(&i.more_embeddings) {
            v.extend(["--embeddings".into(), s(e)]);
        }
        v
    }
}

/// Where a chain's stages go.
pub trait Builder {
    /// The artifact of stage `S` for this config and these inputs (built, found, or planned).
    fn stage<S: StageArgv>(&mut self, config: &S::Config, inputs: &S::Inputs) -> anyhow::Result<PathBuf>;
}

impl Builder for Dag<'_> {
    fn stage<S: StageArgv>(&mut self, config: &S::Config, inputs: &S::Inputs) -> anyhow::Result<PathBuf> {
        self.ensure::<S>(config, inputs)
    }
}

/// One stage run of a plan.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Task {
    /// `t0`, `t1`, … in dependency order.
    pub id: String,
    /// Stage name.
    pub stage: String,
    /// The binary.
    pub bin: String,
    /// Arguments after the binary; `@task:<id>` stands for that task's output directory.
    pub argv: Vec<String>,
    /// The stage config (JSON), passed with `--config`.
    pub config: serde_json::Value,
    /// Tasks whose outputs it reads.
    pub needs: Vec<String>,
    /// The shard it embeds or indexes, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

/// The chains of a pipeline as tasks: every distinct (stage, config, inputs) once.
#[derive(Debug, Default, Serialize)]
pub struct TaskPlan {
    /// The tasks, each after the ones it needs.
    pub tasks: Vec<Task>,
    #[serde(skip)]
    memo: HashMap<String, String>,
}

const PLACEHOLDER: &str = "@task:";

impl Builder for TaskPlan {
    fn stage<S: StageArgv>(&mut self, config: &S::Config, inputs: &S::Inputs) -> anyhow::Result<PathBuf> {
        let argv = S::argv(inputs);
        let config = serde_json::to_value(config)?;
        let key = serde_json::json!([S::NAME, config, argv]).to_string();
        if let Some(id) = self.memo.get(&key) {
            return Ok(PathBuf::from(format!("{PLACEHOLDER}{id}")));
        }
        let id = format!("t{}", self.tasks.len());
        let needs = argv.iter().filter_map(|a| a.strip_prefix(PLACEHOLDER).map(str::to_string)).collect();
        let shard = config.get("shard").and_then(|v| v.as_str()).and_then(|v| v.parse().ok());
        self.tasks.push(Task { id: id.clone(), stage: S::NAME.into(), bin: S::BIN.into(), argv, config, needs, shard });
        self.memo.insert(key, id.clone());
        Ok(PathBuf::from(format!("{PLACEHOLDER}{id}")))
    }
}

/// The artifacts a config evaluates on: its extract artifact and its index.
pub fn chain<B: Builder>(b: &mut B, corpus: &Path, v: &Variant) -> anyhow::Result<(PathBuf, PathBuf)> {
    let st = &v.stages;
    let name = &v.name;
    let pages = b.stage::<Extract>(&st.extract, &vec![corpus.to_path_buf()]).with_context(|| format!("config `{name}`: extract"))?;
    let chunks = b.stage::<Chunk>(&st.chunk, &pages).with_context(|| format!("config `{name}`: chunk"))?;
    let embed_context = || {
        if st.retrieval.dense {
            format!("config `{name}`: embed")
        } else {
            format!("config `{name}`: embed (a BM25-only config still needs the embedding model: its index holds the dense vectors too)")
        }
    };
    let chunks = match &st.raptor {
        None => chunks,
        Some(r) => {
            let embeddings = b.stage::<Embed>(&st.embed, &chunks).with_context(embed_context)?;
            b.stage::<Raptor>(r, &RaptorInputs { embeddings, chunks: Some(chunks) }).with_context(|| format!("config `{name}`: raptor"))?
        }
    };
    // The index's embeddings: one artifact, or one per shard (the same index either way).
    let shards = st.embed_shards.max(1);
    let mut embeddings = Vec::with_capacity(shards);
    for i in 0..shards {
        let config = gauge_embed::EmbedConfig { shard: (shards > 1).then(|| Shard::new(i, shards).expect("i < n")), ..st.embed.clone() };
        embeddings.push(b.stage::<Embed>(&config, &chunks).with_context(embed_context)?);
    }
    let first = embeddings.remove(0);
    let index = b.stage::<Index>(&st.index, &IndexInputs { chunks: Some(chunks), embeddings: first, more_embeddings: embeddings }).with_context(|| format!("config `{name}`: index"))?;
    Ok((pages, index))
}

/// Builds (or finds) the artifacts a config evaluates on.
pub fn upstream(dag: &mut Dag<'_>, corpus: &Path, v: &Variant) -> anyhow::Result<Upstream> {
    let (pages, index) = chain(dag, corpus, v)?;
    let fingerprint = gauge_core::Manifest::read(&index)?.fingerprint;
    Ok(Upstream { pages, index, fingerprint })
}
