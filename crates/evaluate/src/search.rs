//! `[search]` in a pipeline file: a space over any config field, searched by grid, seeded
//! random sampling or successive halving on a **search split** of the golden set, the best
//! configs then confirmed on a **confirmation split** the search never saw (page-grouped,
//! seeded) beside the baseline, with intervals and corrected paired tests.
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
//!
//! Every (config, question) result is journaled in the evaluation's checkpoint folder, so a
//! killed search resumes where it stopped; upstream artifacts are built through the stage DAG
//! (a chunking change embeds once; a retrieval change reuses its index).
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, Float64Array, Int32Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use gauge_core::golden::GoldenQuestion;
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

/// The question counts of the rungs: halving starts on few questions and ends on all of
/// the search split; grid and random have one rung.
pub fn rungs(strategy: Strategy, configs: usize, questions: usize, eta: usize, keep: usize) -> Vec<usize> {
    if strategy != Strategy::Halving || questions == 0 {
        return vec![questions];
    }
    // Rungs until the survivors are no more than `keep` (at least one rung).
    let mut n = 1;
    let mut survivors = configs;
    while survivors > keep.max(1) * eta && n < 6 {
        survivors = survivors.div_ceil(eta);
        n += 1;
    }
    let mut counts: Vec<usize> = (0..n).map(|r| ((questions as f64) / (eta as f64).powi(n - 1 - r)).ceil().max(5.0_f64.min(questions as f64)) as usize).collect();
    // Rungs floored at the same count would only prune again on the same questions.
    counts.dedup();
    counts
}

/// One evaluation of a config on a rung.
#[derive(Debug, Clone)]
pub struct SearchRow {
    /// The config (its candidate id).
    pub id: usize,
    /// Config name.
    pub config: String,
    /// Rung (0 first).
    pub rung: usize,
    /// Questions of the search split it was scored on.
    pub questions: usize,
    /// The searched metric's mean over them.
    pub value: f64,
    /// Wall seconds of its upstream artifacts (their manifests) plus its searches so far.
    pub cost_seconds: f64,
    /// Whether it survived the rung (the last rung: its rank among the finalists).
    pub rank: Option<usize>,
    /// The fields it sets.
    pub fields: Vec<(String, Value)>,
}

/// What a search found.
#[derive(Debug, Clone)]
pub struct SearchOutcome {
    /// Every evaluation, rung by rung.
    pub rows: Vec<SearchRow>,
    /// The finalists, the best first (candidate positions).
    pub ranking: Vec<usize>,
    /// (configs, questions) per rung.
    pub rungs: Vec<(usize, usize)>,
    /// Configs never tried because the seconds budget ran out.
    pub not_tried: usize,
    /// Wall seconds of the search (this run; a resumed run counts its own time).
    pub seconds: f64,
}

/// A (config, question) result in the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JournalLine {
    key: String,
    qid: String,
    value: f64,
    seconds: f64,
}

/// The journal of a search: one line per (config, question) scored, appended and fsynced per
/// group of configs; a torn last line (a kill mid-write) is ignored.
pub struct Journal {
    file: std::fs::File,
    done: HashMap<(String, String), (f64, f64)>,
}

impl Journal {
    /// Opens (or starts) the journal at `path`.
    pub fn open(path: &Path) -> anyhow::Result<Journal> {
        let mut done = HashMap::new();
        if let Ok(text) = std::fs::read_to_string(path) {
            for line in text.lines() {
                if let Ok(l) = serde_json::from_str::<JournalLine>(line) {
                    done.insert((l.key, l.qid), (l.value, l.seconds));
                }
            }
        }
        // A torn last line would glue onto the next append: start appends on a fresh line.
        let torn = std::fs::read(path).map(|b| !b.is_empty() && b.last() != Some(&b'\n')).unwrap_or(false);
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| anyhow::anyhow!("{}: cannot open the search journal ({e})", path.display()))?;
        if torn {
            file.write_all(b"\n")?;
        }
        Ok(Journal { file, done })
    }

    fn get(&self, key: &str, qid: &str) -> Option<(f64, f64)> {
        self.done.get(&(key.to_string(), qid.to_string())).copied()
    }

    fn append(&mut self, lines: &[(String, String, f64, f64)]) -> anyhow::Result<()> {
        let mut buf = String::new();
        for (key, qid, value, seconds) in lines {
            buf.push_str(&serde_json::to_string(&JournalLine { key: key.clone(), qid: qid.clone(), value: *value, seconds: *seconds })?);
            buf.push('\n');
            self.done.insert((key.clone(), qid.clone()), (*value, *seconds));
        }
        self.file.write_all(buf.as_bytes())?;
        self.file.sync_data()?;
        Ok(())
    }
}

/// The key of a config in the journal: its resolved settings (so a reordered space resumes).
pub fn candidate_key(c: &Candidate) -> String {
    gauge_core::hash::bytes_hash(serde_json::to_string(&c.variant.stages).expect("stage configs serialise").as_bytes())
}

/// Everything a config's retrieval depends on except the retrieval settings (configs with
/// the same key share one index).
pub fn upstream_key(stages: &StageConfigs) -> String {
    let mut v = serde_json::to_value(stages).expect("stage configs serialise");
    if let Some(o) = v.as_object_mut() {
        o.remove("retrieval");
    }
    v.to_string()
}

/// Wall seconds of an artifact and every artifact it was built from (each counted once).
pub fn build_seconds(dirs: &[&Path]) -> f64 {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<std::path::PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    let mut total = 0.0;
    while let Some(d) = stack.pop() {
        if !seen.insert(d.clone()) {
            continue;
        }
        let Ok(m) = gauge_core::Manifest::read(&d) else { continue };
        total += m.wall_seconds;
        // Inputs name files inside upstream artifacts (`…/embed/<fp>/embeddings.parquet`) or
        // the artifact folders themselves; corpus files lead nowhere.
        for i in &m.inputs {
            let p = std::path::PathBuf::from(&i.path);
            let dir = if p.is_dir() { Some(p) } else { p.parent().map(Path::to_path_buf) };
            if let Some(dir) = dir.filter(|d| d.join("manifest.json").is_file()) {
                stack.push(dir);
            }
        }
    }
    total
}

/// Scores a group of configs sharing an index on some questions: (config position, qid) →
/// (metric value, seconds). Supplied by the orchestration (it owns the engine).
pub type ScoreFn<'a> = dyn FnMut(&[usize], &[&GoldenQuestion]) -> anyhow::Result<Vec<(usize, String, f64, f64)>> + 'a;

/// Runs the search over the candidates on the search split: `score` evaluates configs,
/// `cost` gives a config's upstream build seconds (building it first if needed).
pub fn run(plan: &SearchPlan, questions: &[GoldenQuestion], seed: u64, journal: &mut Journal, score: &mut ScoreFn<'_>, cost: &mut dyn FnMut(usize) -> anyhow::Result<f64>, metric_label: &str) -> anyhow::Result<SearchOutcome> {
    let started = Instant::now();
    let section = &plan.section;
    let keys: Vec<String> = plan.candidates.iter().map(candidate_key).collect();
    // Question order: seeded, so each rung's questions are the first n (nested rungs).
    let mut order: Vec<&GoldenQuestion> = questions.iter().collect();
    gauge_core::rng::SplitMix64::new(seed ^ 0x9e3779b97f4a7c15).shuffle(&mut order);
    let counts = rungs(section.strategy, plan.candidates.len(), order.len(), section.eta, section.confirm_top);
    // Cheap first: configs sharing the baseline-most-common index first, then by index, the
    // ones without a reranker before those with one.
    let mut survivors: Vec<usize> = (0..plan.candidates.len()).collect();
    let ukeys: Vec<String> = plan.candidates.iter().map(|c| upstream_key(&c.variant.stages)).collect();
    survivors.sort_by_key(|&i| (ukeys[i].clone(), plan.candidates[i].variant.stages.retrieval.rerank.is_some(), plan.candidates[i].id));
    let mut rows = Vec::new();
    let mut rung_sizes = Vec::new();
    let mut not_tried = 0;
    let mut costs: HashMap<usize, f64> = HashMap::new();
    let mut best: Option<(f64, usize)> = None;
    for (r, &nq) in counts.iter().enumerate() {
        let qs = &order[..nq];
        let bar = gauge_core::progress::bar(survivors.len() as u64, &format!("search: rung {}/{} ({} configs × {nq} questions)", r + 1, counts.len(), survivors.len()));
        let mut tried = Vec::new();
        // Groups of survivors sharing an index, in the cheap-first order.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for &i in &survivors {
            match groups.last_mut() {
                Some(g) if ukeys[g[0]] == ukeys[i] => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        for group in groups {
            if r == 0 && section.seconds > 0.0 && started.elapsed().as_secs_f64() > section.seconds && !tried.is_empty() {
                not_tried += group.len();
                bar.inc(group.len() as u64);
                continue;
            }
            let missing: Vec<&GoldenQuestion> = qs.iter().copied().filter(|q| group.iter().any(|&i| journal.get(&keys[i], &q.qid).is_none())).collect();
            if !missing.is_empty() {
                let scored = score(&group, &missing)?;
                let lines: Vec<(String, String, f64, f64)> = scored.into_iter().filter(|(i, qid, _, _)| journal.get(&keys[*i], qid).is_none()).map(|(i, qid, v, s)| (keys[i].clone(), qid, v, s)).collect();
                journal.append(&lines)?;
            }
            for &i in &group {
                let upstream = match costs.get(&i) {
                    Some(c) => *c,
                    None => {
                        let c = cost(i)?;
                        costs.insert(i, c);
                        c
                    }
                };
                let (mut sum, mut secs) = (0.0, 0.0);
                for q in qs {
                    let (v, s) = journal.get(&keys[i], &q.qid).ok_or_else(|| anyhow::anyhow!("search: no score for config `{}`, question `{}`", plan.candidates[i].variant.name, q.qid))?;
                    sum += v;
                    secs += s;
                }
                let value = if qs.is_empty() { 0.0 } else { sum / qs.len() as f64 };
                if best.is_none_or(|(b, _)| value > b) {
                    best = Some((value, i));
                }
                tried.push(i);
                rows.push(SearchRow { id: plan.candidates[i].id, config: plan.candidates[i].variant.name.clone(), rung: r, questions: nq, value, cost_seconds: upstream + secs, rank: None, fields: plan.candidates[i].fields.clone() });
                bar.inc(1);
                if let Some((b, bi)) = best {
                    bar.set_message(format!("best so far: {} {metric_label} {b:.3}", plan.candidates[bi].variant.name));
                }
            }
        }
        bar.finish_and_clear();
        rung_sizes.push((tried.len(), nq));
        // Rank this rung's configs: value, then cheaper, then enumeration order.
        let scored: HashMap<usize, (f64, f64)> = rows.iter().filter(|row| row.rung == r).map(|row| (row.id, (row.value, row.cost_seconds))).collect();
        let value_of = |i: usize| scored.get(&plan.candidates[i].id).map_or(f64::NEG_INFINITY, |v| v.0);
        let cost_of = |i: usize| scored.get(&plan.candidates[i].id).map_or(f64::INFINITY, |v| v.1);
        tried.sort_by(|&a, &b| value_of(b).total_cmp(&value_of(a)).then(cost_of(a).total_cmp(&cost_of(b))).then(plan.candidates[a].id.cmp(&plan.candidates[b].id)));
        let last = r + 1 == counts.len();
        let keep = if last { tried.len() } else { tried.len().div_ceil(section.eta).max(section.confirm_top.min(tried.len())) };
        for (rank, &i) in tried.iter().enumerate() {
            if let Some(row) = rows.iter_mut().rev().find(|row| row.rung == r && row.id == plan.candidates[i].id) {
                row.rank = (rank < keep).then_some(rank + 1);
            }
        }
        tried.truncate(keep);
        survivors = tried;
        eprintln!("search: rung {}/{}: {} configs on {nq} questions; best {} {metric_label} {:.3}", r + 1, counts.len(), rung_sizes[r].0, survivors.first().map_or("-", |&i| plan.candidates[i].variant.name.as_str()), survivors.first().map_or(0.0, |&i| value_of(i)));
    }
    Ok(SearchOutcome { rows, ranking: survivors, rungs: rung_sizes, not_tried, seconds: started.elapsed().as_secs_f64() })
}

/// Writes `search.parquet`: one row per (config, rung) evaluated, with its fields as columns
/// (`field:<path>`; numbers as Float64, other values as their text; null where unset or
/// not applicable).
pub fn write_parquet(path: &Path, plan: &SearchPlan, rows: &[SearchRow], metric: &str) -> anyhow::Result<u64> {
    let mut fields: Vec<Field> = gauge_core::schema::arrow_schema(gauge_core::schema::SEARCH_COLUMNS).fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.config.as_str()))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.id as i32))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.rung as i32))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.questions as i32))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|_| metric))),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.value))),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.cost_seconds))),
        Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.rank.map(|x| x as i32)))),
    ];
    for p in &plan.params {
        let value = |r: &SearchRow| r.fields.iter().find(|(f, _)| f == &p.path).map(|(_, v)| v.clone()).filter(|v| !v.is_null());
        let numeric = p.values.iter().all(|v| v.is_number() || v.is_null());
        if numeric {
            fields.push(Field::new(format!("field:{}", p.path), DataType::Float64, true));
            cols.push(Arc::new(Float64Array::from_iter(rows.iter().map(|r| value(r).and_then(|v| v.as_f64())))));
        } else {
            fields.push(Field::new(format!("field:{}", p.path), DataType::Utf8, true));
            cols.push(Arc::new(StringArray::from_iter(rows.iter().map(|r| Some(value(r).map_or_else(|| "none".to_string(), |v| show(&v)))))));
        }
    }
    Ok(gauge_core::table::write_parquet(path, Arc::new(Schema::new(fields)), cols)?)
}

/// The search section of ablation.md.
pub fn markdown(plan: &SearchPlan, outcome: &SearchOutcome, metric_label: &str, split: (usize, usize), seed: u64) -> String {
    let s = &plan.section;
    let strategy = match s.strategy {
        Strategy::Grid => "grid".to_string(),
        Strategy::Random => format!("seeded random (seed {seed})"),
        Strategy::Halving => format!("successive halving (η = {}, seed {seed})", s.eta),
    };
    let mut out = format!(
        "\n## Config search\n\n{strategy} over {} of the {} configs of a {}-field space, on {metric_label}. The golden set was split by page groups (seed {seed}): **{} questions searched, {} kept for confirmation**; the table above is the confirmation split only (the baseline and the {} best configs of the search, with the pipeline's correction over the family). A config's search-split figure below is optimistic — it was chosen on those questions — and is not the figure to quote.\n\n",
        plan.candidates.len(),
        plan.space_size,
        plan.params.len(),
        split.0,
        split.1,
        outcome.ranking.len().min(s.confirm_top),
    );
    let rungs: Vec<String> = outcome.rungs.iter().map(|(c, q)| format!("{c} configs × {q} questions")).collect();
    out.push_str(&format!("Rungs: {}. ", rungs.join(" → ")));
    if outcome.not_tried > 0 {
        out.push_str(&format!("{} configs were not tried (the {} s budget ran out). ", outcome.not_tried, s.seconds));
    }
    out.push_str("Cost: the wall seconds of each config's upstream artifacts (their manifests) plus its searches; `search.parquet` has every config and rung.\n\n");
    let last = outcome.rungs.len().saturating_sub(1);
    let mut finals: Vec<&SearchRow> = outcome.rows.iter().filter(|r| r.rung == last && r.rank.is_some()).collect();
    finals.sort_by_key(|r| r.rank);
    out.push_str(&format!("| rank | config | {} | {metric_label} (search split) | cost (s) |\n|---:|---|{}---:|---:|\n", plan.params.iter().map(|p| format!("`{}`", p.path)).collect::<Vec<_>>().join(" | "), "---|".repeat(plan.params.len())));
    for r in finals.iter().take(10) {
        let cells: Vec<String> = plan.params.iter().map(|p| r.fields.iter().find(|(f, _)| f == &p.path).map_or("–".to_string(), |(_, v)| show(v))).collect();
        out.push_str(&format!("| {} | {} | {} | {:.3} | {:.1} |\n", r.rank.unwrap_or(0), r.config, cells.join(" | "), r.value, r.cost_seconds));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(space: &str, extra: &str) -> SearchSection {
        toml::from_str::<SearchSection>(&format!("{extra}\n[space]\n{space}")).unwrap()
    }

    fn resolve_ok(_: &str, v: Value) -> Result<StageConfigs, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn ranges_conditions_and_none_expand_to_distinct_configs() {
        let s = section(
            "\"chunk.size\" = { range = [500, 1500], step = 500 }\n\"retrieval.fusion.k\" = { log_range = [10, 1000], steps = 3 }\n\"retrieval.rerank\" = [\"none\", { kind = \"max_sim\", model = \"m\", n_initial = 25, top_n = 10 }]\n\"retrieval.rerank.n_initial\" = { values = [25, 50], when = { \"retrieval.rerank\" = \"on\" } }\n",
            "strategy = \"grid\"\nbudget = 100",
        );
        let base = serde_json::json!({"retrieval": {"fusion": {"kind": "rrf", "k": 60.0}}});
        let p = plan(s, &base, 1, &resolve_ok).unwrap();
        assert_eq!(p.params[0].values, vec![Value::from(500), Value::from(1000), Value::from(1500)]);
        assert_eq!(p.params[1].values, vec![Value::from(10), Value::from(100), Value::from(1000)]);
        // 3 sizes × 3 fusion k × (no reranker + reranker with 2 n_initial) = 27 distinct configs.
        assert_eq!(p.space_size, 27);
        let reranked = p.candidates.iter().filter(|c| c.variant.stages.retrieval.rerank.is_some()).count();
        assert_eq!(reranked, 18);
        assert!(p.candidates.iter().any(|c| c.variant.stages.retrieval.rerank.as_ref().is_some_and(|r| r.n_initial == 50)));
        assert!(p.candidates.iter().all(|c| c.variant.stages.retrieval.rerank.is_some() || !c.fields.iter().any(|(f, _)| f == "retrieval.rerank.n_initial")));
    }

    #[test]
    fn sampling_is_seeded_and_within_budget() {
        let s = section("\"chunk.size\" = [400, 600, 800, 1000, 1200]\n\"chunk.overlap\" = [0, 50, 100, 150]\n", "strategy = \"random\"\nbudget = 7");
        let a = plan(s.clone(), &serde_json::json!({}), 3, &resolve_ok).unwrap();
        let b = plan(s.clone(), &serde_json::json!({}), 3, &resolve_ok).unwrap();
        let c = plan(s, &serde_json::json!({}), 4, &resolve_ok).unwrap();
        let ids = |p: &SearchPlan| p.candidates.iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!((a.space_size, a.candidates.len()), (20, 7));
        assert_eq!(ids(&a), ids(&b));
        assert_ne!(ids(&a), ids(&c));
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            ("\"chunk.size\" = []\n", "", "no values"),
            ("\"chunk.size\" = { range = [5, 1] , step = 1 }\n", "", "low < high"),
            ("\"chunk.size\" = { range = [1, 5] }\n", "", "positive `step`"),
            ("\"chunk.size\" = { log_range = [0, 5], steps = 3 }\n", "", "positive"),
            ("\"chunk.size\" = { values = [1], when = { \"x.y\" = 1 } }\n", "", "not another field"),
            ("\"chunk.size\" = { valus = [1] }\n", "", "unknown key `valus`"),
            ("\"chunk.size\" = [1, 2, 3]\n", "strategy = \"grid\"\nbudget = 2", "more than budget"),
            ("\"retrieval.k\" = [3, 5]\n", "", "cannot vary"),
            ("", "", "no `space`"),
        ];
        for (space, extra, want) in cases {
            let e = plan(section(space, extra), &serde_json::json!({}), 1, &resolve_ok).unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
        // A field the configs do not have is refused by the pipeline's own resolution.
        let e = plan(section("\"chunk.sise\" = [1]\n", ""), &serde_json::json!({}), 1, &resolve_ok).unwrap_err();
        assert!(e.contains("sise"), "{e}");
    }

    #[test]
    fn halving_rungs_end_on_the_whole_split() {
        assert_eq!(rungs(Strategy::Halving, 54, 25, 3, 3), vec![5, 9, 25]);
        assert_eq!(rungs(Strategy::Halving, 4, 25, 3, 3), vec![25]);
        assert_eq!(rungs(Strategy::Halving, 144, 25, 3, 3), vec![5, 9, 25]);
        assert_eq!(rungs(Strategy::Grid, 54, 25, 3, 3), vec![25]);
    }

    fn q(id: &str) -> GoldenQuestion {
        GoldenQuestion { qid: id.into(), question: id.into(), gold: vec![], keywords: vec![], reference_answer: None, category: None }
    }

    #[test]
    fn halving_keeps_the_best_and_a_rerun_asks_nothing() {
        let s = section("\"chunk.size\" = { range = [100, 2800], step = 100 }\n", "budget = 100");
        let p = plan(s, &serde_json::json!({}), 1, &resolve_ok).unwrap();
        assert_eq!(p.candidates.len(), 28);
        let qs: Vec<GoldenQuestion> = (0..30).map(|i| q(&format!("q{i:02}"))).collect();
        // The true score of a config is its chunk size / 2800: the largest must win.
        let truth = |i: usize| p.candidates[i].variant.stages.chunk.size as f64 / 2800.0;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let mut calls = 0usize;
        let first = {
            let mut journal = Journal::open(&path).unwrap();
            let mut score = |group: &[usize], qs: &[&GoldenQuestion]| {
                calls += group.len() * qs.len();
                Ok(group.iter().flat_map(|&i| qs.iter().map(move |q| (i, q.qid.clone(), truth(i), 0.01))).collect())
            };
            run(&p, &qs, 1, &mut journal, &mut score, &mut |_| Ok(1.0), "MRR").unwrap()
        };
        assert_eq!(first.rungs.len(), 3);
        assert_eq!(first.rungs[0], (28, 5));
        assert_eq!(p.candidates[first.ranking[0]].variant.stages.chunk.size, 2800);
        // Fewer (config, question) scores than the full grid on the whole split.
        assert!(calls < 28 * 30, "{calls}");
        // A rerun (a resumed search) scores nothing again and finds the same ranking.
        let mut journal = Journal::open(&path).unwrap();
        let mut again = 0usize;
        let mut score = |group: &[usize], qs: &[&GoldenQuestion]| {
            again += group.len() * qs.len();
            Ok(Vec::new())
        };
        let second = run(&p, &qs, 1, &mut journal, &mut score, &mut |_| Ok(1.0), "MRR").unwrap();
        assert_eq!(again, 0);
        assert_eq!(second.ranking, first.ranking);
    }

    #[test]
    fn build_seconds_walk_the_upstream_artifacts_once() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = |name: &str, seconds: f64, inputs: &[String]| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            let inputs: Vec<serde_json::Value> = inputs.iter().map(|p| serde_json::json!({"path": p, "name": "x", "hash": "h", "rows": null})).collect();
            let m = serde_json::json!({"stage": name, "format_version": 1, "fingerprint": name, "gauge_version": "0", "git_commit": "", "config": {}, "inputs": inputs, "outputs": [], "seed": null, "started_at": "", "finished_at": "", "wall_seconds": seconds, "stats": {}});
            std::fs::write(d.join("manifest.json"), m.to_string()).unwrap();
            std::fs::write(d.join("out.parquet"), "").unwrap();
            d
        };
        let corpus = dir.path().join("corpus.pdf");
        std::fs::write(&corpus, "").unwrap();
        let pages = manifest("extract", 10.0, &[corpus.display().to_string()]);
        let chunks = manifest("chunk", 2.0, &[pages.join("out.parquet").display().to_string()]);
        let emb = manifest("embed", 300.0, &[chunks.join("out.parquet").display().to_string()]);
        // The index reads the chunks twice over (directly and through the embeddings): once.
        let index = manifest("index", 1.0, &[chunks.join("out.parquet").display().to_string(), emb.join("out.parquet").display().to_string()]);
        assert_eq!(build_seconds(&[index.as_path()]), 313.0);
        assert_eq!(build_seconds(&[emb.as_path(), chunks.as_path()]), 312.0);
    }

    #[test]
    fn a_torn_journal_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        std::fs::write(&path, "{\"key\":\"a\",\"qid\":\"q\",\"value\":1.0,\"seconds\":0.1}\n{\"key\":\"b\",\"qi").unwrap();
        let mut j = Journal::open(&path).unwrap();
        assert_eq!(j.get("a", "q"), Some((1.0, 0.1)));
        assert_eq!(j.get("b", "q"), None);
        j.append(&[("b".into(), "q".into(), 0.5, 0.2)]).unwrap();
        let j = Journal::open(&path).unwrap();
        assert_eq!(j.get("b", "q"), Some((0.5, 0.2)));
    }
}
