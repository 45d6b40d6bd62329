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
pub const ABOUT: &str = "Prints a pipeline's stage DAG as JSON (tasks: id, stage, bin, argv with @task:<id> placeholders, config, needs, shard; then the evaluate command), for cluster launchers.";

/// Arguments of `pipeline-dag`.
#[derive(clap::Args, Debug)]
pub struct DagArgs {
    /// The pipeline file.
    #[arg(default_value = "pipelines/fra.toml")]
    pub pipeline: PathBuf,
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

/// Prints [`pipeline_dag`].
pub fn print_dag(args: &DagArgs) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(&pipeline_dag(&args.pipeline)?)?);
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
    }
}
