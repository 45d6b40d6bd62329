//! The one assembly of an engine for a retrieval config: the index opened (its dense retriever
//! when the config uses one, on the faiss device asked for), and the models the config names —
//! its reranker and its query rewriter — loaded through [`Models`], which loads each distinct
//! model once and shares it across configs. `query`, `answer` and `synth` call
//! [`Engine::assemble`]; `evaluate`, which searches many configs over one opened index, keeps one
//! [`Models`] for all of them and searches with [`Models::of`]. Both paths load with the same
//! code, so a config searched by `evaluate` finds what `answer` and `query` find for it.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use gauge_generator::cache::CallCache;
use gauge_index::FaissDevice;
use gauge_rank::{RerankConfig, Reranker};

use crate::rewrite::{LlmRewriter, RewriteConfig};
use crate::{Engine, EngineOptions, RetrievalConfig};

/// The model-call cache at the artifact root an index lives in (`<root>/index/<fingerprint>` →
/// `<root>/llm-cache`), where `evaluate` and `answer` keep theirs: a rewrite asked once by any
/// of them is not asked again.
pub fn call_cache_beside(index: &Path) -> Arc<CallCache> {
    let root = index.parent().and_then(Path::parent).unwrap_or(Path::new("artifacts"));
    Arc::new(CallCache::new(root.join("llm-cache")))
}

/// The rerankers and query rewriters retrieval configs name, each loaded once per distinct
/// model (a reranker per kind, model and length; a rewriter per generator config), with the
/// model-call cache every rewrite goes through.
pub struct Models {
    device: String,
    calls: Option<Arc<CallCache>>,
    rerankers: HashMap<String, Box<dyn Reranker>>,
    rewriters: HashMap<String, LlmRewriter>,
}

fn reranker_key(rc: &RerankConfig) -> String {
    serde_json::json!([rc.kind, rc.model, rc.max_length]).to_string()
}

fn rewriter_key(rc: &RewriteConfig) -> String {
    serde_json::to_string(&rc.model).expect("generator config serialises")
}

impl Models {
    /// No model loaded yet; they will run on `device` (`cpu`, `cuda[:N]`), rewrites through
    /// `calls`.
    pub fn new(device: &str, calls: Arc<CallCache>) -> Models {
        Models { device: device.to_string(), calls: Some(calls), rerankers: HashMap::new(), rewriters: HashMap::new() }
    }

    /// No model and no cache: what [`Engine::open`] starts with (it loads nothing; a rewrite
    /// config then needs [`Engine::assemble`] or [`Models::new`]).
    pub(crate) fn none() -> Models {
        Models { device: "cpu".into(), calls: None, rerankers: HashMap::new(), rewriters: HashMap::new() }
    }

    /// Loads the reranker and rewriter `cfg` names, unless loaded already.
    pub fn load(&mut self, cfg: &RetrievalConfig) -> anyhow::Result<()> {
        if let Some(rc) = &cfg.rerank {
            if let std::collections::hash_map::Entry::Vacant(slot) = self.rerankers.entry(reranker_key(rc)) {
                slot.insert(gauge_rerank::load_reranker(rc, &self.device, self.calls.clone()).context("reranker")?);
            }
        }
        if let Some(rc) = &cfg.rewrite {
            if let std::collections::hash_map::Entry::Vacant(slot) = self.rewriters.entry(rewriter_key(rc)) {
                let calls = self.calls.clone().ok_or_else(|| anyhow::anyhow!("the config asks for query rewriting, but these models have no model-call cache (use Engine::assemble or Models::new)"))?;
                slot.insert(LlmRewriter::open(rc, calls, &self.device).context("rewrite model")?);
            }
        }
        Ok(())
    }

    /// The reranker and rewriter of `cfg` ([`Models::load`]ed before; `None` for what the config
    /// does not name or what was not loaded).
    pub fn of(&self, cfg: &RetrievalConfig) -> (Option<&dyn Reranker>, Option<&LlmRewriter>) {
        (cfg.rerank.as_ref().and_then(|rc| self.rerankers.get(&reranker_key(rc))).map(|r| r.as_ref()), cfg.rewrite.as_ref().and_then(|rc| self.rewriters.get(&rewriter_key(rc))))
    }

}

/// Which index to open for [`Engine::assemble`], and where.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// The index directory, or the shards of one (`index --shard i/n`).
    pub dirs: Vec<PathBuf>,
    /// Query embedder instead of the index's own (refused unless it is the same model).
    pub model: Option<String>,
    /// Device of the models (`cpu`, `cuda[:N]`).
    pub device: String,
    /// Where the dense index searches.
    pub faiss_device: FaissDevice,
}

impl IndexOptions {
    /// One index directory, its own embedder, on `device`, faiss on the CPU.
    pub fn one(dir: &Path, device: &str) -> IndexOptions {
        IndexOptions { dirs: vec![dir.to_path_buf()], model: None, device: device.to_string(), faiss_device: FaissDevice::Cpu }
    }
}

impl Engine {
    /// Opens the index for a normalised retrieval config with everything the config names: the
    /// dense retriever when it uses one (placed on `index.faiss_device` with the config's
    /// `nprobe` / `efSearch`), its reranker and its query rewriter (rewrites through `calls`).
    /// [`Engine::search`] then runs the config as a whole.
    pub fn assemble(cfg: &RetrievalConfig, index: &IndexOptions, calls: Arc<CallCache>) -> anyhow::Result<Engine> {
        let engine = Engine::open_shards(&index.dirs, &EngineOptions { dense: cfg.dense, model: index.model.clone(), device: index.device.clone() })?;
        let mut engine = engine.on_faiss_device(index.faiss_device, cfg)?;
        engine.models = Models::new(&index.device, calls);
        engine.models.load(cfg)?;
        Ok(engine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::RewriteKind;

    /// A rewrite config on an endpoint that is never called (opening a rewriter asks nothing).
    fn rewriting(model: &str) -> RetrievalConfig {
        let chat = gauge_chat_client::ChatConfig { base_url: "http://127.0.0.1:9/v1".into(), model: model.into(), ..Default::default() };
        RetrievalConfig { rewrite: Some(RewriteConfig { kind: RewriteKind::Expand, model: gauge_generator::GeneratorConfig::Api(chat), ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn models_load_each_rewriter_once_and_refuse_one_without_a_cache() {
        let dir = tempfile::tempdir().unwrap();
        let mut models = Models::new("cpu", Arc::new(CallCache::new(dir.path().join("llm-cache"))));
        let (a, b) = (rewriting("model-a"), rewriting("model-b"));
        assert!(models.of(&a).1.is_none(), "nothing before load");
        models.load(&a).unwrap();
        models.load(&a).unwrap();
        assert_eq!(models.rewriters.len(), 1, "one rewriter per distinct model");
        assert!(models.of(&a).1.is_some());
        assert!(models.of(&b).1.is_none(), "another model is not the loaded one");
        models.load(&b).unwrap();
        assert_eq!(models.rewriters.len(), 2);
        // A config without rewrite or rerank gets neither.
        let plain = RetrievalConfig::default();
        assert!(matches!(models.of(&plain), (None, None)));
        // An engine opened bare (no cache) refuses a rewrite config by saying what is missing.
        let err = Models::none().load(&a).unwrap_err().to_string();
        assert!(err.contains("model-call cache"), "{err}");
    }
}
