//! The search space of `[search]`: the section as written, its parameters expanded from
//! dotted config paths into values, and the distinct candidate configs drawn from them (grid,
//! or seeded random within the budget), each resolved through the pipeline's one merge path.
//!
//! The space is written as dotted config paths (the same paths as `--set`):
//!
//! ```toml
//! [search]
//! strategy = "halving"          # grid | random | halving
//! budget = 64                   # configs tried at most (halving: its first rung)
//! [search.space]
//! "chunk.size" = [500, 1000, 1500]
//! "retrieval.fusion.k" = { log_range = [10, 100], steps = 3 }
//! "retrieval.candidates" = { range = [25, 75], step = 25 }
//! "retrieval.rerank" = ["none", { kind = "max_sim", model = "sentence-transformers/all-MiniLM-L6-v2", n_initial = 25, top_n = 10 }]
//! "retrieval.rerank.n_initial" = { values = [25, 50], when = { "retrieval.rerank" = "on" } }
//! ```
//!
//! `"none"` unsets an optional field (no reranker). A field with `when` is set only in the
//! configs where the named field takes that value (`"on"`: any value but `"none"`), so the
//! space holds no two configs that differ only in a field that does nothing.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::variant::{StageConfigs, Variant};

/// How the space is searched.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(rename = "SearchStrategy")]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Every config of the space (refused when the grid is larger than `budget`).
    Grid,
    /// `budget` configs drawn from the space with the seed.
    Random,
    /// Successive halving: `budget` configs (all, when the space is smaller) on a few
    /// questions; the best 1/eta go on to eta times as many questions, until the whole search
    /// split; cheap configs (those sharing an index already built) first.
    #[default]
    Halving,
}

/// The `[search]` section.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SearchSection {
    /// Grid, seeded random or successive halving (default).
    pub strategy: Strategy,
    /// Configs tried at most (halving: on its first rung).
    pub budget: usize,
    /// Stop starting configs after this many seconds of search (0: no limit); the configs
    /// already tried still compete.
    pub seconds: f64,
    /// Halving's rate: each rung keeps the best 1/eta on eta times the questions.
    pub eta: usize,
    /// The metric searched on, as named in metrics.parquet (`mrr@10`, `hit@1`, `ndcg@10`…;
    /// default: MRR at the pipeline's k).
    pub metric: Option<String>,
    /// Share of the golden set's questions (whole page groups) kept out of the search to
    /// confirm its winners.
    pub confirm_share: f64,
    /// How many of the best configs are re-evaluated on the confirmation split.
    pub confirm_top: usize,
    /// Seed of the split, the sampling and the question order (default: the pipeline's seed).
    pub seed: Option<u64>,
    /// Dotted config path → its choices (a list; `{ values = [...] }`; `{ range = [lo, hi],
    /// step = s }`; `{ log_range = [lo, hi], steps = n }`; any of them with `when`).
    pub space: BTreeMap<String, Value>,
}

impl Default for SearchSection {
    fn default() -> Self {
        SearchSection { strategy: Strategy::Halving, budget: 64, seconds: 0.0, eta: 3, metric: None, confirm_share: 0.4, confirm_top: 3, seed: None, space: BTreeMap::new() }
    }
}

/// One searched field with its choices.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Param {
    /// Dotted config path (`chunk.size`).
    pub path: String,
    /// Its values (JSON null: unset).
    pub values: Vec<Value>,
    /// Set only where another field takes a value (`"on"`: any but unset).
    pub when: Option<(String, Value)>,
}

/// A config of the space: its field values and the resolved stage settings.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// Position in the space's enumeration (stable for a space; names the config).
    pub id: usize,
    /// The fields it sets (those whose condition holds), in space order.
    pub fields: Vec<(String, Value)>,
    /// The config as a row (name `search #id`, the fields as description).
    pub variant: Variant,
}

/// The space and the configs the strategy will try.
#[derive(Debug, Clone, Serialize)]
pub struct SearchPlan {
    /// The section as written (defaults filled).
    pub section: SearchSection,
    /// The expanded fields.
    pub params: Vec<Param>,
    /// Size of the whole space (distinct configs).
    pub space_size: usize,
    /// The configs tried, in enumeration order.
    pub candidates: Vec<Candidate>,
}

/// Largest space enumerated.
const MAX_SPACE: usize = 100_000;

fn choices(path: &str, spec: &Value) -> Result<Param, String> {
    let unset = |v: &Value| if v.as_str() == Some("none") { Value::Null } else { v.clone() };
    let list = |v: &Value| -> Result<Vec<Value>, String> {
        let a = v.as_array().ok_or_else(|| format!("[search.space] `{path}`: `values` must be a list"))?;
        if a.is_empty() {
            return Err(format!("[search.space] `{path}` has no values"));
        }
        Ok(a.iter().map(unset).collect())
    };
    let num_pair = |v: &Value, key: &str| -> Result<(f64, f64, bool), String> {
        let a = v.as_array().filter(|a| a.len() == 2 && a.iter().all(Value::is_number)).ok_or_else(|| format!("[search.space] `{path}`: `{key}` must be [low, high] numbers"))?;
        let ints = a.iter().all(|x| x.is_i64() || x.is_u64());
        let (lo, hi) = (a[0].as_f64().unwrap_or(0.0), a[1].as_f64().unwrap_or(0.0));
        if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
            return Err(format!("[search.space] `{path}`: `{key}` needs low < high"));
        }
        Ok((lo, hi, ints))
    };
    let as_value = |x: f64, ints: bool| if ints { Value::from(x.round() as i64) } else { Value::from((x * 1e6).round() / 1e6) };
    match spec {
        Value::Array(_) => Ok(Param { path: path.into(), values: list(spec)?, when: None }),
        Value::Object(o) => {
            for k in o.keys() {
                if !["values", "range", "step", "log_range", "steps", "when"].contains(&k.as_str()) {
                    return Err(format!("[search.space] `{path}`: unknown key `{k}`; expected values, range + step, log_range + steps, when"));
                }
            }
            let mut values = match (o.get("values"), o.get("range"), o.get("log_range")) {
                (Some(v), None, None) => list(v)?,
                (None, Some(r), None) => {
                    let (lo, hi, ints) = num_pair(r, "range")?;
                    let step = o.get("step").and_then(Value::as_f64).filter(|s| *s > 0.0).ok_or_else(|| format!("[search.space] `{path}`: a `range` needs a positive `step`"))?;
                    let n = ((hi - lo) / step + 1e-9).floor() + 1.0;
                    if !(n.is_finite() && n >= 1.0 && n <= MAX_SPACE as f64) {
                        return Err(format!("[search.space] `{path}`: range [{lo}, {hi}] in steps of {step} gives {n} values; at most {MAX_SPACE}, and `range` goes low to high"));
                    }
                    let n = n as usize;
                    (0..n).map(|i| as_value(lo + step * i as f64, ints && step.fract() == 0.0)).collect()
                }
                (None, None, Some(r)) => {
                    let (lo, hi, ints) = num_pair(r, "log_range")?;
                    if lo <= 0.0 {
                        return Err(format!("[search.space] `{path}`: a `log_range` must be positive"));
                    }
                    let n = o.get("steps").and_then(Value::as_u64).filter(|n| (2..=MAX_SPACE as u64).contains(n)).ok_or_else(|| format!("[search.space] `{path}`: a `log_range` needs `steps` from 2 to {MAX_SPACE}"))? as usize;
                    let mut v: Vec<Value> = (0..n).map(|i| as_value(lo * (hi / lo).powf(i as f64 / (n - 1) as f64), ints)).collect();
                    v.dedup();
                    v
                }
                _ => return Err(format!("[search.space] `{path}`: give exactly one of `values`, `range` or `log_range`")),
            };
            values.dedup();
            let when = match o.get("when") {
                None => None,
                Some(Value::Object(w)) if w.len() == 1 => {
                    let (k, v) = w.iter().next().expect("one entry");
                    Some((k.clone(), v.clone()))
                }
                Some(_) => return Err(format!("[search.space] `{path}`: `when` must be one `{{ \"other.field\" = value }}`")),
            };
            Ok(Param { path: path.into(), values, when })
        }
        other => Err(format!("[search.space] `{path}` = {other}: give a list of values or a table (values, range, log_range)")),
    }
}

fn condition_holds(chosen: &Value, wanted: &Value) -> bool {
    if wanted.as_str() == Some("on") {
        !chosen.is_null()
    } else if wanted.as_str() == Some("none") {
        chosen.is_null()
    } else {
        chosen == wanted
    }
}

/// Short text of a field value for names and tables.
pub fn show(v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        Value::String(s) => s.clone(),
        Value::Object(o) if o.contains_key("kind") => {
            let rest: Vec<String> = o.iter().filter(|(k, _)| *k != "kind" && *k != "model").map(|(k, v)| format!("{k} {}", show(v))).collect();
            format!("{}{}", o["kind"].as_str().unwrap_or("?"), if rest.is_empty() { String::new() } else { format!(" ({})", rest.join(", ")) })
        }
        other => other.to_string(),
    }
}

/// Expands the space over the baseline's resolved table (`base`) into configs, checks each
/// through `resolve` (the pipeline's own merge and checks), and picks the strategy's configs.
pub fn plan(section: SearchSection, base: &Value, seed: u64, resolve: &dyn Fn(&str, Value) -> Result<StageConfigs, String>) -> Result<SearchPlan, String> {
    if section.space.is_empty() {
        return Err("[search] has no `space`: add [search.space] with at least one field".into());
    }
    if !(0.05..=0.95).contains(&section.confirm_share) {
        return Err(format!("[search] confirm_share = {} must be between 0.05 and 0.95", section.confirm_share));
    }
    if section.eta < 2 || section.budget == 0 || section.confirm_top == 0 {
        return Err("[search] needs eta ≥ 2, budget ≥ 1 and confirm_top ≥ 1".into());
    }
    let params: Vec<Param> = section.space.iter().map(|(p, v)| choices(p, v)).collect::<Result<_, _>>()?;
    for p in &params {
        if let Some((other, _)) = &p.when {
            if !params.iter().any(|q| &q.path == other) || other == &p.path {
                return Err(format!("[search.space] `{}`: `when` names `{other}`, which is not another field of the space", p.path));
            }
        }
        if p.path == "retrieval.k" {
            return Err("[search.space] `retrieval.k` cannot vary: every config is judged on lists of the pipeline's k".into());
        }
    }
    let total: usize = params.iter().try_fold(1usize, |acc, p| acc.checked_mul(p.values.len()).filter(|n| *n <= MAX_SPACE)).ok_or_else(|| format!("[search] the space holds more than {MAX_SPACE} configs; narrow it"))?;
    // Enumerate (mixed radix, the last field fastest), apply conditions, drop duplicates.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut all: Vec<Vec<(String, Value)>> = Vec::new();
    for mut n in 0..total {
        let mut pick = vec![0usize; params.len()];
        for (i, p) in params.iter().enumerate().rev() {
            pick[i] = n % p.values.len();
            n /= p.values.len();
        }
        let chosen: HashMap<&str, &Value> = params.iter().zip(&pick).map(|(p, &i)| (p.path.as_str(), &p.values[i])).collect();
        let fields: Vec<(String, Value)> = params
            .iter()
            .zip(&pick)
            .filter(|(p, _)| p.when.as_ref().is_none_or(|(other, want)| condition_holds(chosen[other.as_str()], want)))
            .map(|(p, &i)| (p.path.clone(), p.values[i].clone()))
            .collect();
        if seen.insert(serde_json::to_string(&fields).expect("json")) {
            all.push(fields);
        }
    }
    let space_size = all.len();
    let mut ids: Vec<usize> = (0..space_size).collect();
    match section.strategy {
        Strategy::Grid if space_size > section.budget => {
            return Err(format!("[search] the grid holds {space_size} configs, more than budget = {}; raise the budget or use strategy = \"random\" or \"halving\"", section.budget));
        }
        Strategy::Grid => {}
        Strategy::Random | Strategy::Halving if space_size > section.budget => {
            gauge_core::rng::SplitMix64::new(seed ^ 0x5ea2c4).shuffle(&mut ids);
            ids.truncate(section.budget);
            ids.sort_unstable();
        }
        _ => {}
    }
    let mut candidates = Vec::new();
    for id in ids {
        let fields = all[id].clone();
        let mut table = base.clone();
        for (path, value) in &fields {
            gauge_core::config::set_path(&mut table, path, value.clone());
        }
        let name = format!("search #{id:03}");
        let stages = resolve(&name, table)?;
        let description = fields.iter().map(|(p, v)| format!("{p} = {}", show(v))).collect::<Vec<_>>().join(", ");
        candidates.push(Candidate { id, fields, variant: Variant { name, description, oracle_source_filter: false, stages, compare_to: None } });
    }
    Ok(SearchPlan { section, params, space_size, candidates })
}
