//! `pipeline-dag`: the stage runs a pipeline needs, as JSON, without running any — every
//! distinct upstream artifact once (the same dedup `evaluate` does), shards where a config
//! asks for them, then the evaluation. A launcher (`scripts/ray_ablate.py`) runs each task as
//! `BIN ARGV… --config CONFIG.json --artifacts ROOT` once the tasks it needs are done,
//! replacing each `@task:<id>` argument by that task's output directory (the last line its
//! binary prints); every stage is content-addressed, so a retried or repeated task is a
//! cache hit, and the final `evaluate` finds every artifact built.
use std::path::PathBuf;

use crate::chain::{chain, TaskPlan};
use crate::pipeline::Pipeline;

/// What `pipeline-dag` prints.
pub const ABOUT: &str = "Prints a pipeline's stage DAG without running it: as JSON (tasks: id, stage, bin, argv with @task:<id> placeholders, config, needs, shard; then the evaluate command) for cluster launchers, or as a Mermaid or Graphviz DOT graph for the docs.";

/// How the DAG is printed.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DagFormat {
    /// The tasks as JSON (for launchers).
    #[default]
    Json,
    /// A Mermaid `flowchart` (renders in GitHub Markdown and mdBook).
    Mermaid,
    /// A Graphviz `digraph` (`dot -Tsvg`).
    Dot,
}

/// Arguments of `pipeline-dag`.
#[derive(clap::Args, Debug)]
pub struct DagArgs {
    /// The pipeline file.
    #[arg(default_value = "pipelines/fra.toml")]
    pub pipeline: PathBuf,
    /// Output: json (tasks for launchers), mermaid or dot (a picture of the DAG).
    #[arg(long, value_enum, default_value_t = DagFormat::Json)]
    pub format: DagFormat,
}

/// The DAG of a pipeline: its tasks and the final evaluation.
pub fn pipeline_dag(path: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    let pipeline = Pipeline::load(path)?;
    let mut plan = TaskPlan::default();
    let mut indexes = Vec::new();
    for v in &pipeline.variants {
        let (_, index) = chain(&mut plan, &pipeline.corpus, v)?;
        indexes.push(serde_json::json!({ "config": v.name, "index": index.display().to_string() }));
    }
    Ok(serde_json::json!({
        "pipeline": pipeline.name,
        "file": path.display().to_string(),
        "tasks": plan.tasks,
        "indexes": indexes,
        "evaluate": { "bin": "evaluate", "argv": [path.display().to_string()] },
    }))
}

/// A task's label in a picture: its stage and what tells it apart from its siblings (the
/// chunking, the embedding model, the shard, the index type).
fn task_label(t: &serde_json::Value) -> String {
    let c = &t["config"];
    let stage = t["stage"].as_str().unwrap_or("?");
    let short = |v: &serde_json::Value| v.as_str().map(|s| s.rsplit('/').next().unwrap_or(s).to_string());
    let detail = match stage {
        "chunk" => Some(format!("{} {}/{}", c["strategy"].as_str().unwrap_or(""), c["size"], c["overlap"])),
        "embed" => short(&c["model"]).map(|m| match t["shard"].as_str() { Some(s) => format!("{m} shard {s}"), None => m }),
        "index" => c["faiss"].as_str().map(str::to_string),
        "raptor" => Some("summaries".to_string()),
        _ => None,
    };
    match detail {
        Some(d) if !d.trim().is_empty() => format!("{stage}: {}", d.trim()),
        _ => stage.to_string(),
    }
}

/// The DAG as a Mermaid flowchart or a DOT digraph: one node per task, an edge per input, and
/// each index's edge into `evaluate` labelled with the configs evaluated on it.
pub fn render(dag: &serde_json::Value, format: DagFormat) -> String {
    let tasks = dag["tasks"].as_array().cloned().unwrap_or_default();
    let name = dag["pipeline"].as_str().unwrap_or("pipeline");
    // Index task id → the configs evaluated on it, in pipeline order.
    let mut on_index: Vec<(String, Vec<String>)> = Vec::new();
    for i in dag["indexes"].as_array().into_iter().flatten() {
        let id = i["index"].as_str().unwrap_or("").trim_start_matches("@task:").to_string();
        let config = i["config"].as_str().unwrap_or("").to_string();
        match on_index.iter_mut().find(|(t, _)| *t == id) {
            Some((_, cs)) => cs.push(config),
            None => on_index.push((id, vec![config])),
        }
    }
    let edges = || tasks.iter().flat_map(|t| t["needs"].as_array().cloned().unwrap_or_default().into_iter().map(move |n| (n.as_str().unwrap_or("").to_string(), t["id"].as_str().unwrap_or("").to_string())));
    match format {
        DagFormat::Mermaid => {
            let esc = |s: &str| s.replace('"', "#quot;");
            let mut out = String::from("flowchart LR\n");
            for t in &tasks {
                out.push_str(&format!("  {}[\"{}\"]\n", t["id"].as_str().unwrap_or(""), esc(&task_label(t))));
            }
            out.push_str(&format!("  evaluate[[\"evaluate: {}\"]]\n", esc(name)));
            for (a, b) in edges() {
                out.push_str(&format!("  {a} --> {b}\n"));
            }
            for (id, configs) in &on_index {
                out.push_str(&format!("  {id} -- \"{}\" --> evaluate\n", esc(&configs.join(", "))));
            }
            out
        }
        DagFormat::Dot => {
            let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
            let mut out = format!("digraph \"{}\" {{\n  rankdir=LR;\n  node [shape=box, fontname=\"Helvetica\"];\n", esc(name));
            for t in &tasks {
                out.push_str(&format!("  {} [label=\"{}\"];\n", t["id"].as_str().unwrap_or(""), esc(&task_label(t))));
            }
            out.push_str(&format!("  evaluate [label=\"evaluate: {}\", shape=doubleoctagon];\n", esc(name)));
            for (a, b) in edges() {
                out.push_str(&format!("  {a} -> {b};\n"));
            }
            for (id, configs) in &on_index {
                out.push_str(&format!("  {id} -> evaluate [label=\"{}\"];\n", esc(&configs.join(", "))));
            }
            out.push_str("}\n");
            out
        }
        DagFormat::Json => serde_json::to_string_pretty(dag).expect("JSON") + "\n",
    }
}

/// Prints [`pipeline_dag`] in the chosen format.
pub fn print_dag(args: &DagArgs) -> anyhow::Result<()> {
    print!("{}", render(&pipeline_dag(&args.pipeline)?, args.format));
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn shared_stages_appear_once_and_shards_fan_out() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            "corpus = \"c\"\ngolden = \"g.jsonl\"\n[baseline]\nname = \"A\"\n[[variants]]\nname = \"B\"\nretrieval = { bm25 = false }\n[[variants]]\nname = \"C\"\nembed_shards = 3\n[[variants]]\nname = \"D\"\nchunk = { size = 500, overlap = 50 }\n",
        )
        .unwrap();
        let dag = super::pipeline_dag(&p).unwrap();
        let tasks = dag["tasks"].as_array().unwrap();
        let count = |stage: &str| tasks.iter().filter(|t| t["stage"] == stage).count();
        // One extract; chunks for two sizes; embeds: A/B share one, C has 3 shards, D one.
        assert_eq!((count("extract"), count("chunk"), count("embed"), count("index")), (1, 2, 5, 3), "{dag:#}");
        let sharded = tasks.iter().find(|t| t["stage"] == "index" && t["argv"].as_array().unwrap().iter().filter(|a| *a == "--embeddings").count() == 3).expect("C's index reads 3 shards");
        assert_eq!(sharded["needs"].as_array().unwrap().len(), 4, "chunks + 3 shards");
        // Dependency order: every task's needs come before it.
        for (i, t) in tasks.iter().enumerate() {
            for n in t["needs"].as_array().unwrap() {
                let j = tasks.iter().position(|u| u["id"] == *n).unwrap();
                assert!(j < i);
            }
        }
        let shards: Vec<&str> = tasks.iter().filter_map(|t| t["shard"].as_str()).collect();
        assert_eq!(shards, vec!["0/3", "1/3", "2/3"]);

        // The pictures: a node per task, an edge per input, the configs on each index's edge.
        let mermaid = super::render(&dag, super::DagFormat::Mermaid);
        assert!(mermaid.starts_with("flowchart LR\n"), "{mermaid}");
        let needs: usize = tasks.iter().map(|t| t["needs"].as_array().unwrap().len()).sum();
        assert_eq!(mermaid.matches(" --> t").count(), needs, "{mermaid}");
        assert!(mermaid.contains("chunk: recursive 500/50") && mermaid.contains("-- \"A, B\" --> evaluate"), "{mermaid}");
        let dot = super::render(&dag, super::DagFormat::Dot);
        assert!(dot.starts_with("digraph \"p\" {") && dot.trim_end().ends_with('}'), "{dot}");
        assert_eq!(dot.matches(" -> t").count(), needs);
        assert_eq!(dot.matches("-> evaluate").count(), 3, "three indexes: A/B's, C's, D's");
    }
}
