//! The stage contract: a stage declares its name, output format version, typed config,
//! inputs and run options, and two steps — [`Stage::plan`] (check and hash the inputs, say
//! what the output depends on) and [`Stage::build`] (write the outputs). [`run`] does the
//! rest for every stage alike: fingerprint, cache hit, temporary directory, atomic commit,
//! manifest. [`crate::cli::stage_main`] gives each stage binary the same flags and the same
//! stdout contract, and [`Dag`] lets an orchestrator (`evaluate`) build a chain of stages
//! as data.
//!
//! Long stages (an LLM journal, a training run) keep resumable state in
//! [`StageRun::checkpoint_dir`], which survives a crash and is removed on commit.
use std::collections::HashMap;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::artifact::{StageOutcome, StageSpec};
use crate::{ArtifactStore, FileEntry, StageRun};

/// What a stage's output depends on, found before anything is written.
pub struct Plan<P> {
    /// Inputs with their content hashes (part of the fingerprint).
    pub inputs: Vec<FileEntry>,
    /// The settings echoed into the manifest and fingerprinted, when they are more than the
    /// config (e.g. the embedder's resolved prefixes); `None`: the config itself.
    pub echo: Option<serde_json::Value>,
    /// The seed, for randomised stages.
    pub seed: Option<u64>,
    /// What the plan learned that the build needs (a loaded model, a table already read).
    pub state: P,
}

impl<P> Plan<P> {
    /// A plan whose fingerprint is the config and these inputs.
    pub fn new(inputs: Vec<FileEntry>, state: P) -> Plan<P> {
        Plan { inputs, echo: None, seed: None, state }
    }

    /// Echoes (and fingerprints) these settings instead of the bare config.
    pub fn echo(mut self, echo: serde_json::Value) -> Plan<P> {
        self.echo = Some(echo);
        self
    }

    /// Records a seed.
    pub fn seed(mut self, seed: u64) -> Plan<P> {
        self.seed = Some(seed);
        self
    }
}

/// A pipeline stage (see the module doc).
pub trait Stage {
    /// Stage name: the folder under the artifact root.
    const NAME: &'static str;
    /// Output format version; bump it when the same config and inputs give other output.
    const FORMAT_VERSION: u32;
    /// The typed config (serde, with defaults, `deny_unknown_fields`).
    type Config: Serialize + DeserializeOwned + Default + Clone;
    /// The inputs (upstream artifact directories, files); serialisable so that an
    /// orchestrator can memoise a stage by config and inputs.
    type Inputs: Serialize;
    /// Run settings that do not change the output (device, workers, strictness…).
    type Options: Default;
    /// What [`Stage::plan`] hands to [`Stage::build`].
    type State;
    /// Counts for the summary line (default on a cache hit).
    type Summary: Default;

    /// Checks the config and inputs and hashes the inputs; writes nothing.
    fn plan(config: &Self::Config, inputs: &Self::Inputs, options: &Self::Options) -> anyhow::Result<Plan<Self::State>>;

    /// Writes the outputs into `run` (a temporary directory committed by [`run`]).
    fn build(state: Self::State, run: &mut StageRun, config: &Self::Config, inputs: &Self::Inputs, options: &Self::Options) -> anyhow::Result<Self::Summary>;

    /// One line on what a build did.
    fn summary_line(summary: &Self::Summary) -> String;
}

/// A stage's output directory and what it took.
#[derive(Debug)]
pub struct Built<S> {
    /// The committed artifact directory.
    pub dir: PathBuf,
    /// Whether it already existed.
    pub cache_hit: bool,
    /// What the build counted (default on a cache hit).
    pub summary: S,
}

/// Runs a stage: plan, cache hit or build into a temporary directory, commit.
pub fn run<S: Stage>(store: &ArtifactStore, config: &S::Config, inputs: &S::Inputs, options: &S::Options, force: bool) -> anyhow::Result<Built<S::Summary>> {
    let plan = S::plan(config, inputs, options)?;
    let echo = match plan.echo {
        Some(e) => e,
        None => serde_json::to_value(config)?,
    };
    let spec = StageSpec { stage: S::NAME, format_version: S::FORMAT_VERSION, config: &echo, inputs: plan.inputs, seed: plan.seed };
    match store.begin(spec, force)? {
        StageOutcome::CacheHit(dir) => Ok(Built { dir, cache_hit: true, summary: S::Summary::default() }),
        StageOutcome::Run(mut stage_run) => {
            let summary = S::build(plan.state, &mut stage_run, config, inputs, options)?;
            let dir = stage_run.commit()?;
            Ok(Built { dir, cache_hit: false, summary })
        }
    }
}

/// Builds chains of stages for an orchestrator: each distinct (stage, config, inputs) runs
/// once per process (memoised) and once per artifact store (content-addressed).
pub struct Dag<'a> {
    store: &'a ArtifactStore,
    memo: HashMap<String, PathBuf>,
    /// `stage dir` of every artifact built (not found in the store) so far.
    pub built: Vec<String>,
}

impl<'a> Dag<'a> {
    /// A DAG over a store.
    pub fn new(store: &'a ArtifactStore) -> Dag<'a> {
        Dag { store, memo: HashMap::new(), built: Vec::new() }
    }

    /// The artifact of stage `S` for this config and these inputs, built if needed (default
    /// run options).
    pub fn ensure<S: Stage>(&mut self, config: &S::Config, inputs: &S::Inputs) -> anyhow::Result<PathBuf> {
        self.ensure_with::<S>(config, inputs, &S::Options::default())
    }

    /// [`Dag::ensure`] with run options (which never change the output, so they are not part
    /// of the memo key).
    pub fn ensure_with<S: Stage>(&mut self, config: &S::Config, inputs: &S::Inputs, options: &S::Options) -> anyhow::Result<PathBuf> {
        let key = serde_json::json!([S::NAME, config, inputs]).to_string();
        if let Some(dir) = self.memo.get(&key) {
            return Ok(dir.clone());
        }
        let out = run::<S>(self.store, config, inputs, options, false)?;
        if !out.cache_hit {
            tracing::debug!("built {} {}", S::NAME, out.dir.display());
            self.built.push(format!("{} {}", S::NAME, out.dir.display()));
        }
        self.memo.insert(key, out.dir.clone());
        Ok(out.dir)
    }
}
