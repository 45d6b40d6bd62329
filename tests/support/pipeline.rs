//! Pipeline files for tests, written through the `toml` crate: fields are `serde_json` values
//! (`json!`), so nothing is escaped by hand and a path or URL is quoted correctly whatever it
//! holds.
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// A pipeline file under construction: `name`, `corpus = "corpus"`, `golden = "golden.jsonl"`,
/// `resamples = 1000`, then what the test sets.
pub struct TestPipeline {
    top: Map<String, Value>,
    variants: Vec<Value>,
}

/// A pipeline named `name` over `corpus/` and `golden.jsonl` beside the file.
pub fn pipeline(name: &str) -> TestPipeline {
    let mut top = Map::new();
    top.insert("name".into(), json!(name));
    top.insert("corpus".into(), json!("corpus"));
    top.insert("golden".into(), json!("golden.jsonl"));
    top.insert("resamples".into(), json!(1000));
    TestPipeline { top, variants: Vec::new() }
}

impl TestPipeline {
    /// Sets a top-level field or section (`k`, `judge_depth`, `answer`, `judge`, `search` …).
    pub fn set(mut self, key: &str, value: Value) -> Self {
        self.top.insert(key.into(), value);
        self
    }

    /// The `[baseline]` row.
    pub fn baseline(self, row: Value) -> Self {
        self.set("baseline", row)
    }

    /// One more `[[variants]]` row.
    pub fn variant(mut self, row: Value) -> Self {
        self.variants.push(row);
        self
    }

    /// The file's TOML text.
    pub fn text(&self) -> String {
        let mut top = self.top.clone();
        if !self.variants.is_empty() {
            top.insert("variants".into(), Value::Array(self.variants.clone()));
        }
        toml::to_string(&Value::Object(top)).expect("a pipeline serialises as TOML")
    }

    /// Writes the file to `path` and returns the path.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, self.text()).unwrap();
        path.to_path_buf()
    }
}

/// The scripted OpenAI-compatible server at `url` as a model table (no key: the variable
/// named does not exist).
pub fn scripted_api(url: &str) -> Value {
    json!({ "kind": "api", "base_url": url, "model": "scripted", "api_key_env": "GAUGE_NO_SUCH_KEY" })
}

/// The stage settings of a small Markdown corpus: one chunk per page (however short), embedded
/// with all-MiniLM-L6-v2 from the models directory.
pub fn small_corpus_stages() -> Value {
    json!({
        "chunk": { "strategy": "page", "filters": { "min_chars": 0 } },
        "embed": { "model": crate::repo_root().join("models/all-MiniLM-L6-v2").to_str().unwrap() },
    })
}

/// `base` with `over`'s fields merged in, through the config language's one merge path
/// (`gauge_core::config::merge`: the way a variant's fields are laid over its base).
pub fn merged(mut base: Value, over: Value) -> Value {
    gauge_core::config::merge(&mut base, &over);
    base
}
