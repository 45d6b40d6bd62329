//! A bench plan and its interleaved run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command as Process;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::machine::{Limits, MachineState};
use crate::side::{self, Format, Run};
use crate::sources::Stamp;
use crate::stats::Summary;
use crate::{BenchError, Result, HARNESS_VERSION};

/// The fewest A/B pairs a plan may ask for.
pub const MIN_PAIRS: usize = 5;

/// What a recipe asks the harness to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Short name (`generate`, `embed`, …).
    pub bench: String,
    /// One line on what is compared.
    pub title: String,
    /// A/B pairs per comparison (≥ [`MIN_PAIRS`]).
    #[serde(default = "default_pairs")]
    pub pairs: usize,
    /// What the figures measure (stamped for staleness).
    pub measures: Measures,
    /// The reference's name (`llama.cpp`, `PyTorch + PEFT`, …).
    pub reference: String,
    /// Commands run once whose output describes the reference or the setup, stored as printed
    /// (`torch.__config__.show()`, `llama-quantize`'s log …).
    #[serde(default)]
    pub describe: Vec<Describe>,
    /// Statements the reader needs (how a file was made, what differs between the sides).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The comparisons, run in order.
    pub comparisons: Vec<Comparison>,
    /// The README's rows taken from this file.
    #[serde(default)]
    pub readme: Vec<ReadmeRow>,
}

fn default_pairs() -> usize {
    MIN_PAIRS
}

/// The sources a bench measures.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measures {
    /// Workspace crates (package names); their workspace dependencies are added.
    pub crates: Vec<String>,
    /// Other paths (the example, the script), relative to the repository root.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// A command run once for what it prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Describe {
    /// Key in the output's `describe` object.
    pub name: String,
    /// Program and arguments.
    pub argv: Vec<String>,
}

/// One side's command.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Command {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// How it prints its figures.
    #[serde(default = "default_format")]
    pub format: Format,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

fn default_format() -> Format {
    Format::Figures
}

/// Which way is better for a ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Throughput: gauge / reference above 1 is gauge faster.
    Higher,
    /// Memory, time: gauge / reference below 1 is gauge leaner.
    Lower,
}

fn higher() -> Better {
    Better::Higher
}

/// A ratio gauge / reference of two figures, per pair.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatioSpec {
    /// The ratio's name.
    pub name: String,
    /// gauge's figure.
    pub gauge: String,
    /// The reference's figure.
    pub reference: String,
    /// Take the reference figure from an earlier comparison's reference runs (same pair index)
    /// instead of this one's: a second denominator (batched decode against llama-bench's single
    /// stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_comparison: Option<String>,
    /// Which way is better.
    #[serde(default = "higher")]
    pub better: Better,
    /// The figures' unit (`tok/s`, `MiB`).
    pub unit: String,
}

/// A comparison: a gauge command against a reference command.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Comparison {
    /// Unique name in the plan.
    pub name: String,
    /// gauge's command.
    pub gauge: Command,
    /// The reference's command.
    pub reference: Command,
    /// The reference's name where this comparison's differs from the plan's
    /// [`Plan::reference`] (a second model measured against another library).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_name: Option<String>,
    /// The ratios reported.
    pub ratios: Vec<RatioSpec>,
    /// Figures both sides must agree on in every pair (the first step's loss of a like-for-like
    /// training step): the run fails, writing nothing, when one differs by more than the
    /// tolerance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub equal: Vec<EqualSpec>,
}

/// A figure both sides must agree on.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EqualSpec {
    /// gauge's figure.
    pub gauge: String,
    /// The reference's figure.
    pub reference: String,
    /// The largest absolute difference allowed.
    pub tolerance: f64,
}

/// A README row: one ratio of one comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadmeRow {
    /// The row's first cell.
    pub what: String,
    /// The comparison's name.
    pub comparison: String,
    /// The ratio's name.
    pub ratio: String,
}

impl Plan {
    /// Reads a plan (JSON).
    pub fn load(path: &Path) -> Result<Plan> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io(path, e))?;
        let plan: Plan = serde_json::from_str(&text).map_err(|e| BenchError::Invalid(format!("{}: {e}", path.display())))?;
        plan.validate().map_err(|e| BenchError::Invalid(format!("{}: {e}", path.display())))?;
        Ok(plan)
    }

    /// Checks the plan before anything runs.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.pairs < MIN_PAIRS {
            return Err(format!("pairs = {}: a bench runs at least {MIN_PAIRS} A/B pairs", self.pairs));
        }
        if self.comparisons.is_empty() {
            return Err("no comparisons".into());
        }
        let mut seen: Vec<&str> = Vec::new();
        for c in &self.comparisons {
            if seen.contains(&c.name.as_str()) {
                return Err(format!("comparison `{}` twice", c.name));
            }
            if c.gauge.argv.is_empty() || c.reference.argv.is_empty() {
                return Err(format!("comparison `{}`: an empty command", c.name));
            }
            if c.ratios.is_empty() {
                return Err(format!("comparison `{}`: no ratios", c.name));
            }
            for r in &c.ratios {
                if let Some(other) = &r.reference_comparison {
                    if !seen.contains(&other.as_str()) {
                        return Err(format!("comparison `{}`, ratio `{}`: reference_comparison `{other}` is not an earlier comparison", c.name, r.name));
                    }
                }
            }
            seen.push(&c.name);
        }
        for row in &self.readme {
            let c = self.comparisons.iter().find(|c| c.name == row.comparison).ok_or_else(|| format!("readme row `{}`: no comparison `{}`", row.what, row.comparison))?;
            if !c.ratios.iter().any(|r| r.name == row.ratio) {
                return Err(format!("readme row `{}`: comparison `{}` has no ratio `{}`", row.what, row.comparison, row.ratio));
            }
        }
        Ok(())
    }
}

/// Runs one command; its stdout read in its format.
fn run_once(what: &str, cmd: &Command) -> Result<Run> {
    let out = Process::new(&cmd.argv[0])
        .args(&cmd.argv[1..])
        .envs(&cmd.env)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| BenchError::Invalid(format!("{what}: cannot start `{}`: {e}", cmd.argv[0])))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
        return Err(BenchError::Invalid(format!("{what}: `{}` failed ({}): {}", cmd.argv.join(" "), out.status, tail.join(" | "))));
    }
    side::read(cmd.format, &stdout).map_err(|e| BenchError::Invalid(format!("{what}: {e}")))
}

fn figure(runs: &[Run], name: &str, what: &str) -> Result<Vec<f64>> {
    runs.iter().map(|r| r.figures.get(name).copied().ok_or_else(|| BenchError::Invalid(format!("{what}: no figure `{name}` (it printed {:?})", r.figures.keys().collect::<Vec<_>>())))).collect()
}

fn summaries(runs: &[Run]) -> BTreeMap<String, Summary> {
    let mut names: Vec<&String> = runs.iter().flat_map(|r| r.figures.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|n| {
            let v: Option<Vec<f64>> = runs.iter().map(|r| r.figures.get(n).copied()).collect();
            Some((n.clone(), Summary::of(&v?)?))
        })
        .collect()
}

/// Runs the plan: per comparison one warm-up pair (discarded) and `pairs` A/B pairs, gauge
/// first in even pairs; returns the bench file's JSON (see the crate's docs).
pub fn run(plan: &Plan, root: &Path) -> Result<Value> {
    plan.validate().map_err(BenchError::Invalid)?;
    let sources = Stamp::take(root, &plan.measures.crates, &plan.measures.paths)?;
    let before = MachineState::observe();
    let limits = Limits::measure();
    let mut describe = serde_json::Map::new();
    for d in &plan.describe {
        let out = Process::new(&d.argv[0]).args(&d.argv[1..]).output().map_err(|e| BenchError::Invalid(format!("describe `{}`: cannot start `{}`: {e}", d.name, d.argv[0])))?;
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        let v = serde_json::from_str::<Value>(text.trim()).unwrap_or(Value::String(text));
        describe.insert(d.name.clone(), v);
    }
    let total = plan.comparisons.len() * (plan.pairs + 1) * 2;
    let mut done = 0;
    let mut reference_runs: BTreeMap<String, Vec<Run>> = BTreeMap::new();
    let mut comparisons = Vec::new();
    for c in &plan.comparisons {
        let t = Instant::now();
        let reference_name = c.reference_name.as_deref().unwrap_or(&plan.reference);
        let load_before = MachineState::observe().load_average;
        let (mut g, mut r) = (Vec::new(), Vec::new());
        let mut warm = None;
        for pair in 0..=plan.pairs {
            // Pair 0 is the warm-up; pairs 1.. are measured, gauge first in even measured pairs.
            let gauge_first = pair == 0 || (pair - 1) % 2 == 0;
            let label = if pair == 0 { "warm-up".to_string() } else { format!("pair {pair}/{}", plan.pairs) };
            let mut one = |is_gauge: bool| -> Result<Run> {
                done += 1;
                let who = if is_gauge { "gauge" } else { reference_name };
                eprintln!("[{done}/{total}] {}: {}, {label}", c.name, who);
                run_once(&format!("{} ({who}, {label})", c.name), if is_gauge { &c.gauge } else { &c.reference })
            };
            let (a, b) = if gauge_first {
                let a = one(true)?;
                (a, one(false)?)
            } else {
                let b = one(false)?;
                (one(true)?, b)
            };
            if pair == 0 {
                warm = Some((a, b));
            } else {
                g.push(a);
                r.push(b);
            }
        }
        let (warm_g, warm_r) = warm.expect("the warm-up ran");
        let mut ratios = Vec::new();
        for spec in &c.ratios {
            let what = format!("{}, ratio `{}`", c.name, spec.name);
            let gv = figure(&g, &spec.gauge, &what)?;
            let rv = match &spec.reference_comparison {
                Some(other) => figure(&reference_runs[other], &spec.reference, &what)?,
                None => figure(&r, &spec.reference, &what)?,
            };
            let per_pair: Vec<f64> = gv.iter().zip(&rv).map(|(a, b)| a / b).collect();
            let s = |v: &[f64]| Summary::of(v).ok_or_else(|| BenchError::Invalid(format!("{what}: a value is not finite")));
            ratios.push(json!({
                "name": spec.name, "gauge_figure": spec.gauge, "reference_figure": spec.reference,
                "reference_comparison": spec.reference_comparison, "better": spec.better, "unit": spec.unit,
                "gauge": s(&gv)?, "reference": s(&rv)?, "ratio": s(&per_pair)?,
            }));
        }
        let mut equal = Vec::new();
        for e in &c.equal {
            let what = format!("{}, `{}` = `{}`", c.name, e.gauge, e.reference);
            let (gv, rv) = (figure(&g, &e.gauge, &what)?, figure(&r, &e.reference, &what)?);
            let worst = gv.iter().zip(&rv).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            if worst.is_nan() || worst > e.tolerance {
                return Err(BenchError::Invalid(format!("{what}: gauge {gv:?} against {} {rv:?} differ by {worst:e}, more than {:e}", reference_name, e.tolerance)));
            }
            equal.push(json!({ "gauge": e.gauge, "reference": e.reference, "tolerance": e.tolerance, "largest_difference": worst }));
        }
        comparisons.push(json!({
            "name": c.name,
            "equal": equal,
            "gauge": { "argv": c.gauge.argv, "env": c.gauge.env, "figures": summaries(&g), "printed": warm_g.printed },
            "reference": { "name": reference_name, "argv": c.reference.argv, "env": c.reference.env, "format": c.reference.format, "figures": summaries(&r), "printed": warm_r.printed },
            "ratios": ratios,
            "load_average": { "before": load_before, "after": MachineState::observe().load_average },
            "seconds": t.elapsed().as_secs_f64(),
        }));
        reference_runs.insert(c.name.clone(), r);
    }
    Ok(json!({
        "harness": {
            "version": HARNESS_VERSION, "pairs": plan.pairs,
            "order": "per comparison: one warm-up pair, discarded; then A/B pairs, gauge first in pairs 1, 3, 5 …, the reference first in pairs 2, 4 …; a figure is the median over the pairs with min and max, a ratio the median of the per-pair ratios with their range",
        },
        "bench": plan.bench, "title": plan.title, "reference": plan.reference,
        "sources": sources,
        "machine": { "before": before, "after": MachineState::observe(), "limits": limits },
        "describe": describe,
        "notes": plan.notes,
        "comparisons": comparisons,
        "readme": plan.readme,
    }))
}

/// Writes a bench file atomically (a temporary beside it, renamed), its paths made portable.
pub fn write(mut v: Value, root: &Path, out: &Path) -> Result<()> {
    crate::paths::make_portable(&mut v, root);
    let tmp = out.with_extension(format!("json.partial-{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_string_pretty(&v).expect("JSON") + "\n").map_err(|e| BenchError::io(&tmp, e))?;
    std::fs::rename(&tmp, out).map_err(|e| BenchError::io(out, e))
}

/// Runs the plan and writes the bench file ([`write`]).
pub fn run_to(plan: &Plan, root: &Path, out: &Path) -> Result<()> {
    write(run(plan, root)?, root, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(script: &str) -> Command {
        Command { argv: vec!["sh".into(), "-c".into(), script.into()], format: Format::Figures, env: BTreeMap::new() }
    }

    /// A plan whose sides print a counter kept in a file, so the order of runs is visible.
    fn plan(dir: &Path, pairs: usize) -> Plan {
        let log = dir.join("log");
        let side = |who: &str, value: &str| cmd(&format!("echo {who} >> {log}; n=$(wc -l < {log}); echo '{{\"figures\": {{\"tps\": '{value}', \"run\": '$n'}}, \"describe\": \"{who}\"}}'", log = log.display()));
        Plan {
            bench: "toy".into(),
            title: "toy".into(),
            pairs,
            measures: Measures { crates: vec!["gauge-a".into()], paths: vec![] },
            reference: "ref".into(),
            describe: vec![Describe { name: "version".into(), argv: vec!["echo".into(), "{\"v\": 3}".into()] }],
            notes: vec![],
            comparisons: vec![
                Comparison { name: "one".into(), gauge: side("g", "$((100 + n))"), reference: side("r", "50"), reference_name: None, ratios: vec![RatioSpec { name: "speed".into(), gauge: "tps".into(), reference: "tps".into(), reference_comparison: None, better: Better::Higher, unit: "tok/s".into() }], equal: vec![] },
                Comparison { name: "two".into(), gauge: side("g", "200"), reference: side("r", "80"), reference_name: Some("other library".into()), ratios: vec![RatioSpec { name: "vs one".into(), gauge: "tps".into(), reference: "tps".into(), reference_comparison: Some("one".into()), better: Better::Higher, unit: "tok/s".into() }], equal: vec![EqualSpec { gauge: "run".into(), reference: "run".into(), tolerance: 1.5 }] },
            ],
            readme: vec![ReadmeRow { what: "toy speed".into(), comparison: "one".into(), ratio: "speed".into() }],
        }
    }

    #[test]
    fn pairs_interleave_alternating_and_the_warm_up_is_discarded() {
        let root = crate::sources::tests::toy_root();
        let p = plan(root.path(), 5);
        let v = run(&p, root.path()).unwrap();
        let log = std::fs::read_to_string(root.path().join("log")).unwrap();
        let order: Vec<&str> = log.lines().take(12).collect();
        // warm-up g r; pair 1 g r; pair 2 r g; pair 3 g r; pair 4 r g; pair 5 g r.
        assert_eq!(order, ["g", "r", "g", "r", "r", "g", "g", "r", "r", "g", "g", "r"]);
        let c = &v["comparisons"][0];
        // gauge's runs were lines 3, 6, 7, 10, 11 → tps 103, 106, 107, 110, 111; warm-up (101) discarded.
        assert_eq!(c["gauge"]["figures"]["tps"]["values"], json!([103.0, 106.0, 107.0, 110.0, 111.0]));
        let ratio = &c["ratios"][0]["ratio"];
        assert_eq!(ratio["median"], json!(107.0 / 50.0));
        assert_eq!((ratio["min"].as_f64().unwrap(), ratio["max"].as_f64().unwrap()), (103.0 / 50.0, 111.0 / 50.0));
        assert_eq!(c["gauge"]["printed"], "g");
        // The second denominator comes from comparison one's reference runs.
        assert_eq!(v["comparisons"][1]["ratios"][0]["ratio"]["median"], json!(4.0));
        // Each comparison names its reference: the plan's, or its own.
        assert_eq!((v["comparisons"][0]["reference"]["name"].as_str(), v["comparisons"][1]["reference"]["name"].as_str()), (Some("ref"), Some("other library")));
        assert_eq!(v["describe"]["version"]["v"], 3);
        assert_eq!(v["harness"]["pairs"], 5);
        assert!(v["machine"]["before"]["cores"].as_u64().unwrap() >= 1);
        assert_eq!(v["sources"]["paths"], json!(["crates/a/Cargo.toml", "crates/a/src", "crates/b/Cargo.toml", "crates/b/src", "crates/c/Cargo.toml", "crates/c/src"]));
    }

    #[test]
    fn bad_plans_and_failing_sides_are_named() {
        let root = crate::sources::tests::toy_root();
        assert!(plan(root.path(), 3).validate().unwrap_err().contains("at least 5"));
        let mut p = plan(root.path(), 5);
        p.comparisons[1].ratios[0].reference_comparison = Some("three".into());
        assert!(p.validate().unwrap_err().contains("`three`"));
        let mut p = plan(root.path(), 5);
        p.readme[0].ratio = "nope".into();
        assert!(p.validate().unwrap_err().contains("no ratio `nope`"));
        let mut p = plan(root.path(), 5);
        p.comparisons[0].reference = cmd("echo broken >&2; exit 3");
        let e = run(&p, root.path()).unwrap_err().to_string();
        assert!(e.contains("one (ref, warm-up)") && e.contains("broken"), "{e}");
        // Sides that must agree and do not: the run fails naming both.
        let mut p = plan(root.path(), 5);
        p.comparisons[1].equal[0].tolerance = 0.5;
        let e = run(&p, root.path()).unwrap_err().to_string();
        assert!(e.contains("two, `run` = `run`") && e.contains("other library") && e.contains("more than"), "{e}");
        let mut p = plan(root.path(), 5);
        p.comparisons[0].ratios[0].gauge = "missing".into();
        assert!(run(&p, root.path()).unwrap_err().to_string().contains("no figure `missing`"));
    }
}
