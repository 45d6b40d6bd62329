//! One side's run: what a bench example prints, and how the harness reads each format.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{BenchError, Result};

/// Prints one run's figures as the harness reads them (format `figures`): one JSON object on
/// stdout, `{"figures": {...}, "describe": ...}`.
pub fn emit(figures: &BTreeMap<String, f64>, describe: Value) {
    println!("{}", serde_json::json!({ "figures": figures, "describe": describe }));
}

/// How a side prints its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// [`emit`]'s object (the last line of stdout that starts with `{`).
    Figures,
    /// One flat JSON object (the last line of stdout that starts with `{`): every number in it
    /// is a figure, the object is what it printed (`../shared/reference/embed_throughput.py`).
    Json,
    /// `llama-bench -o json`: an array of tests; figure `pp<n_prompt>`, `tg<n_gen>` (with
    /// `@d<n_depth>` when the depth is not 0) = `avg_ts`.
    LlamaBench,
    /// `llama-batched-bench --output-format jsonl`: one object per line; figures
    /// `tg_pl<pl>` = `speed_tg` and `pp_pl<pl>` = `speed_pp`.
    LlamaBatchedBench,
}

/// One run's output read: its figures and what it said about itself (stored as printed).
#[derive(Debug, Clone)]
pub struct Run {
    /// Figure name → value.
    pub figures: BTreeMap<String, f64>,
    /// The side's self-description, as printed.
    pub printed: Value,
}

/// Reads one run's stdout in `format`.
pub fn read(format: Format, stdout: &str) -> Result<Run> {
    let bad = |why: &str| BenchError::Invalid(format!("{format:?} output: {why}; it printed: {}", stdout.chars().take(400).collect::<String>()));
    match format {
        Format::Figures => {
            let line = stdout.lines().rev().find(|l| l.trim_start().starts_with('{')).ok_or_else(|| bad("no JSON object line"))?;
            let v: Value = serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
            let figures = v["figures"].as_object().ok_or_else(|| bad("no `figures` object"))?.iter().filter_map(|(k, x)| x.as_f64().map(|x| (k.clone(), x))).collect();
            Ok(Run { figures, printed: v["describe"].clone() })
        }
        Format::Json => {
            let line = stdout.lines().rev().find(|l| l.trim_start().starts_with('{')).ok_or_else(|| bad("no JSON object line"))?;
            let v: Value = serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
            let figures = v.as_object().ok_or_else(|| bad("not an object"))?.iter().filter_map(|(k, x)| x.as_f64().map(|x| (k.clone(), x))).collect();
            Ok(Run { figures, printed: v })
        }
        Format::LlamaBench => {
            let v: Value = serde_json::from_str(stdout.trim()).map_err(|e| bad(&e.to_string()))?;
            let tests = v.as_array().ok_or_else(|| bad("not a JSON array"))?;
            let mut figures = BTreeMap::new();
            for t in tests {
                let (p, g, d) = (t["n_prompt"].as_u64().unwrap_or(0), t["n_gen"].as_u64().unwrap_or(0), t["n_depth"].as_u64().unwrap_or(0));
                let name = if g == 0 { format!("pp{p}") } else if p == 0 { format!("tg{g}") } else { format!("pp{p}+tg{g}") };
                let name = if d > 0 { format!("{name}@d{d}") } else { name };
                figures.insert(name, t["avg_ts"].as_f64().ok_or_else(|| bad("a test without avg_ts"))?);
            }
            Ok(Run { figures, printed: v })
        }
        Format::LlamaBatchedBench => {
            let mut figures = BTreeMap::new();
            let mut printed = Vec::new();
            for line in stdout.lines().filter(|l| l.trim_start().starts_with('{')) {
                let t: Value = serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
                let pl = t["pl"].as_u64().ok_or_else(|| bad("a line without pl"))?;
                figures.insert(format!("tg_pl{pl}"), t["speed_tg"].as_f64().ok_or_else(|| bad("a line without speed_tg"))?);
                figures.insert(format!("pp_pl{pl}"), t["speed_pp"].as_f64().ok_or_else(|| bad("a line without speed_pp"))?);
                printed.push(t);
            }
            if printed.is_empty() {
                return Err(bad("no JSON lines"));
            }
            Ok(Run { figures, printed: Value::Array(printed) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_format() {
        let r = read(Format::Figures, "warming up\n{\"figures\": {\"decode\": 150.5, \"note\": \"x\"}, \"describe\": {\"threads\": 2}}\n").unwrap();
        assert_eq!(r.figures["decode"], 150.5);
        assert!(!r.figures.contains_key("note"));
        assert_eq!(r.printed["threads"], 2);
        let r = read(Format::Json, "log line\n{\"texts\": 64, \"tokens_per_s\": 5046.5, \"model\": \"m\"}\n").unwrap();
        assert_eq!((r.figures["texts"], r.figures["tokens_per_s"]), (64.0, 5046.5));
        assert_eq!(r.printed["model"], "m");
        let lb = r#"[{"build_commit": "abc", "n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 400.0},
                     {"build_commit": "abc", "n_prompt": 0, "n_gen": 128, "n_depth": 600, "avg_ts": 90.0}]"#;
        let r = read(Format::LlamaBench, lb).unwrap();
        assert_eq!((r.figures["pp512"], r.figures["tg128@d600"]), (400.0, 90.0));
        assert_eq!(r.printed[0]["build_commit"], "abc");
        let bb = "main: n_kv_max = 2048\n{\"pl\": 4, \"speed_tg\": 160.0, \"speed_pp\": 900.0}\n{\"pl\": 8, \"speed_tg\": 200.0, \"speed_pp\": 950.0}\n";
        let r = read(Format::LlamaBatchedBench, bb).unwrap();
        assert_eq!((r.figures["tg_pl4"], r.figures["pp_pl8"]), (160.0, 950.0));
    }

    #[test]
    fn bad_output_names_the_format() {
        let e = read(Format::LlamaBench, "error: model not found").unwrap_err().to_string();
        assert!(e.contains("LlamaBench") && e.contains("model not found"), "{e}");
        assert!(read(Format::Figures, "{\"describe\": 1}").is_err());
        assert!(read(Format::LlamaBatchedBench, "nothing").is_err());
    }
}
