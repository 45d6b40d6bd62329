//! One config language for every stage: a config is a typed serde struct with defaults, and
//! what a user writes on top of it — a config file (TOML or JSON), `--set section.field=value`,
//! a stage's own flags, a pipeline's `[baseline]` and `[[variants]]` — is a JSON *patch*
//! merged by [`merge`], in that order, before the struct is deserialised once.
//!
//! Patches merge object by object; any other value (arrays included) replaces. An object with
//! a `kind` (a tagged enum such as `fusion`) whose `kind` changes replaces the old object
//! instead of merging into it, so `--fusion weighted` over `{kind = "rrf", k = 60}` does not
//! carry `k` along.
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

/// A config that could not be read or does not fit its type.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {message}")]
pub struct ConfigError {
    /// Where the offending value came from (a file, `--set`, flags, a pipeline config).
    pub origin: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl ConfigError {
    fn new(origin: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { origin: origin.into(), message: message.into() }
    }
}

/// One layer over the defaults, with where it came from (for error messages).
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Where the values came from (`config.toml`, `--set`, `flags`…).
    pub origin: String,
    /// The patch: a JSON object.
    pub patch: Value,
}

impl Layer {
    /// A layer from an origin and a patch.
    pub fn new(origin: impl Into<String>, patch: Value) -> Layer {
        Layer { origin: origin.into(), patch }
    }

    /// A layer from a struct of flags: fields that are `None` (serialised as null) are left
    /// out, and a field renamed `a.b` (`#[serde(rename = "filters.min_chars")]`) sets that
    /// path.
    pub fn from_flags<F: Serialize>(origin: impl Into<String>, flags: &F) -> Layer {
        let mut patch = Value::Object(Map::new());
        if let Ok(Value::Object(map)) = serde_json::to_value(flags) {
            for (key, value) in map {
                if !value.is_null() {
                    set_path(&mut patch, &key, value);
                }
            }
        }
        Layer { origin: origin.into(), patch }
    }
}

/// Merges `over` into `base` (see the module doc for the rules).
pub fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            let kind_changes = matches!((b.get("kind"), o.get("kind")), (Some(x), Some(y)) if x != y);
            if kind_changes {
                *b = o.clone();
                return;
            }
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (base, over) => *base = over.clone(),
    }
}

/// Merges `layers` over `defaults` field by field, each tagged table (one with a `kind`) taking
/// the kind the last layer gives it: a field set in any layer for that kind is kept, whether the
/// kind came before it or after it (`--set fusion.alpha=0.9 --fusion weighted` keeps alpha), and
/// fields a layer set for a kind a later layer replaced are dropped (a file's `rrf` `k` does not
/// leak into `weighted`).
pub fn merge_layers(defaults: Value, layers: &[Layer]) -> Value {
    // First pass: the last word on every table's kind.
    let mut last = defaults.clone();
    for layer in layers {
        merge(&mut last, &layer.patch);
    }
    let mut merged = defaults;
    for layer in layers {
        merge_toward(&mut merged, &layer.patch, &last);
    }
    merged
}

/// [`merge`], knowing each tagged table's final kind from `last`.
fn merge_toward(base: &mut Value, over: &Value, last: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            if let Some(kind) = last.get("kind") {
                if o.get("kind").is_some_and(|k| k != kind) {
                    // Fields for a kind a later layer replaced.
                    return;
                }
                if b.get("kind").is_some_and(|k| k != kind) {
                    // The defaults (or an earlier layer) hold another kind: start the final one.
                    b.clear();
                    b.insert("kind".into(), kind.clone());
                }
            }
            for (k, v) in o {
                let below = last.get(k).unwrap_or(&Value::Null);
                match b.get_mut(k) {
                    Some(slot) => merge_toward(slot, v, below),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (base, over) => *base = over.clone(),
    }
}

/// Sets `a.b.c` in an object, creating objects on the way (a non-object in the way is
/// replaced).
pub fn set_path(root: &mut Value, path: &str, value: Value) {
    let mut node = root;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let map = node.as_object_mut().expect("made an object above");
        if i + 1 == parts.len() {
            map.insert(part.to_string(), value);
            return;
        }
        node = map.entry(part.to_string()).or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Parses the value of `--set key=value` as a TOML value (`3`, `true`, `"a b"`, `[1, 2]`,
/// `{ kind = "rrf" }`), falling back to the bare text as a string (`--set embed.model=x/y`).
pub fn parse_value(raw: &str) -> Value {
    let doc = format!("v = {raw}");
    match toml::from_str::<toml::Table>(&doc) {
        Ok(mut t) => toml_to_json(t.remove("v").expect("parsed key")),
        Err(_) => Value::String(raw.to_string()),
    }
}

/// A `--set section.field=value` argument as a layer.
pub fn set_layer(arg: &str) -> Result<Layer, ConfigError> {
    let (key, raw) = arg
        .split_once('=')
        .ok_or_else(|| ConfigError::new("--set", format!("`{arg}` is not KEY=VALUE (e.g. --set chunk.size=500)")))?;
    let key = key.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(ConfigError::new("--set", format!("`{key}` is not a field path such as filters.min_chars")));
    }
    let mut patch = Value::Object(Map::new());
    set_path(&mut patch, key, parse_value(raw.trim()));
    // Messages name the origin; a value set for a key's field is never repeated in them.
    let secret = ["key", "token", "secret", "password"].iter().any(|w| key.to_ascii_lowercase().contains(w));
    let origin = if secret { format!("--set {key}=…") } else { format!("--set {arg}") };
    Ok(Layer::new(origin, patch))
}

/// A TOML parse error in one line: `at line L, column C: <message>` (toml's own rendering
/// draws the line and a caret over several lines).
pub fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("at line {line}, column {column}: {}", e.message().trim())
        }
        None => format!(": {}", e.message().trim()),
    }
}

/// Converts a TOML value to JSON (datetimes become strings). `nan` and `inf`, which JSON
/// cannot hold, become the strings `"nan"`/`"inf"`, so a numeric field refuses them by name
/// instead of reading an absent value (which an optional field would take silently).
pub fn toml_to_json(v: toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map(Value::Number).unwrap_or_else(|| Value::String(f.to_string())),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(t.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect()),
    }
}

/// Reads a config file as a layer: TOML for `.toml`, JSON otherwise.
pub fn read_file(path: &Path) -> Result<Layer, ConfigError> {
    let origin = path.display().to_string();
    let text = crate::read::read_bounded_string(path, crate::read::CONFIG_LIMIT).map_err(|e| ConfigError::new(&origin, format!("cannot read config ({e})")))?;
    let patch = if path.extension().is_some_and(|e| e == "toml") {
        let table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::new(&origin, format!("invalid TOML {}", toml_error(&text, &e))))?;
        toml_to_json(toml::Value::Table(table))
    } else {
        serde_json::from_str(&text).map_err(|e| ConfigError::new(&origin, format!("invalid JSON: {e}")))?
    };
    if !patch.is_object() {
        return Err(ConfigError::new(origin, "a config file holds a table (TOML) or an object (JSON)"));
    }
    Ok(Layer::new(origin, patch))
}

/// Deserialises a config: the type's defaults, then each layer in order. An error names the
/// layer that introduced the offending field when it can be found, else every layer.
pub fn resolve<C: DeserializeOwned + serde::Serialize + Default>(layers: &[Layer]) -> Result<C, ConfigError> {
    // The defaults are the first layer, so that a layer setting one field of a tagged enum
    // (`teacher.base_url`) lands in the default variant, `kind` included.
    let defaults = serde_json::to_value(C::default()).unwrap_or_else(|_| Value::Object(Map::new()));
    serde_json::from_value(merge_layers(defaults, layers)).map_err(|e| {
        let message = e.to_string();
        // serde names the field in backticks; blame the last layer that mentions it.
        let field = message.split('`').nth(1).unwrap_or_default();
        let culprit = layers.iter().rev().find(|l| !field.is_empty() && l.patch.to_string().contains(&format!("\"{field}\"")));
        let origin = match culprit {
            Some(l) => l.origin.clone(),
            None if layers.is_empty() => "defaults".to_string(),
            None => layers.iter().map(|l| l.origin.as_str()).collect::<Vec<_>>().join(" + "),
        };
        ConfigError::new(origin, format!("invalid config: {message}"))
    })
}

/// Parses a flag value as the serde form of a config type (an enum's snake_case name), so a
/// flag accepts exactly what a config file does: `value_parser = parse_as::<Pooling>`.
pub fn parse_as<T: DeserializeOwned>(raw: &str) -> Result<T, String> {
    serde_json::from_value(Value::String(raw.replace('-', "_"))).map_err(|e| e.to_string())
}

/// Serialises a bool flag that switches a setting off: set → `false`, unset → nothing.
pub fn switch_off<S: serde::Serializer>(set: &bool, s: S) -> Result<S::Ok, S::Error> {
    if *set { s.serialize_bool(false) } else { s.serialize_none() }
}

/// Serialises a bool flag that switches a setting on: set → `true`, unset → nothing.
pub fn switch_on<S: serde::Serializer>(set: &bool, s: S) -> Result<S::Ok, S::Error> {
    if *set { s.serialize_bool(true) } else { s.serialize_none() }
}

/// `--config FILE` and repeatable `--set KEY=VALUE`, shared by every binary.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ConfigArgs {
    /// Config file (TOML or JSON) over the defaults; flags and --set override it.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Set one config field, e.g. `--set filters.min_chars=0` or `--set fusion.k=30`
    /// (repeatable; values in TOML syntax, bare text is a string).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

impl ConfigArgs {
    /// The file layer, then one layer per `--set`.
    pub fn layers(&self) -> Result<Vec<Layer>, ConfigError> {
        let mut layers = Vec::new();
        if let Some(path) = &self.config {
            layers.push(read_file(path)?);
        }
        for s in &self.set {
            layers.push(set_layer(s)?);
        }
        Ok(layers)
    }

    /// Resolves a config: defaults → file → `--set` → `flags` (one merge path).
    pub fn resolve<C: DeserializeOwned + serde::Serialize + Default>(&self, flags: Layer) -> Result<C, ConfigError> {
        let mut layers = self.layers()?;
        layers.push(flags);
        resolve(&layers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    #[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
    enum Fusion {
        Rrf { k: f32 },
        Weighted { #[serde(default)] alpha: f32 },
    }

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Filters {
        min_chars: usize,
        toc: bool,
    }
    impl Default for Filters {
        fn default() -> Self {
            Filters { min_chars: 100, toc: true }
        }
    }

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Demo {
        size: usize,
        model: String,
        filters: Filters,
        fusion: Fusion,
    }
    impl Default for Demo {
        fn default() -> Self {
            Demo { size: 1000, model: "m".into(), filters: Filters::default(), fusion: Fusion::Rrf { k: 60.0 } }
        }
    }

    #[derive(Serialize)]
    struct Flags {
        size: Option<usize>,
        #[serde(rename = "filters.toc", serialize_with = "switch_off")]
        keep_toc: bool,
        #[serde(rename = "fusion.kind")]
        fusion: Option<String>,
    }

    #[test]
    fn defaults_then_file_then_set_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "size = 500\nfusion = { kind = \"rrf\", k = 30.0 }\n[filters]\nmin_chars = 5\n").unwrap();
        let args = ConfigArgs { config: Some(file), set: vec!["model=org/name".into(), "filters.min_chars=7".into()] };
        let untouched: Demo = args.resolve(Layer::from_flags("flags", &Flags { size: None, keep_toc: false, fusion: None })).unwrap();
        assert_eq!(untouched, Demo { size: 500, model: "org/name".into(), filters: Filters { min_chars: 7, toc: true }, fusion: Fusion::Rrf { k: 30.0 } });
        let flagged: Demo = args.resolve(Layer::from_flags("flags", &Flags { size: Some(9), keep_toc: true, fusion: Some("weighted".into()) })).unwrap();
        // The kind changed, so `k` of the file's rrf does not leak into `weighted`.
        assert_eq!(flagged, Demo { size: 9, model: "org/name".into(), filters: Filters { min_chars: 7, toc: false }, fusion: Fusion::Weighted { alpha: 0.0 } });
    }

    #[test]
    fn a_field_set_before_its_kind_is_kept() {
        // `--set fusion.alpha=0.9 --fusion weighted`: the flag layer comes after --set.
        let args = ConfigArgs { config: None, set: vec!["fusion.alpha=0.9".into()] };
        let d: Demo = args.resolve(Layer::from_flags("flags", &Flags { size: None, keep_toc: false, fusion: Some("weighted".into()) })).unwrap();
        assert_eq!(d.fusion, Fusion::Weighted { alpha: 0.9 });
        // A field with no kind beside it goes to the final kind: one it does not have is an
        // error naming its layer, never silently dropped.
        let e = resolve::<Demo>(&[set_layer("fusion.k=30").unwrap(), set_layer("fusion.kind=\"weighted\"").unwrap()]).unwrap_err().to_string();
        assert!(e.starts_with("--set fusion.k=30") && e.contains("`k`"), "{e}");
        // Fields a layer set together with a kind that a later layer replaced are dropped.
        let d: Demo = resolve(&[set_layer("fusion={ kind = \"rrf\", k = 30.0 }").unwrap(), set_layer("fusion.kind=\"weighted\"").unwrap(), set_layer("fusion.alpha=0.25").unwrap()]).unwrap();
        assert_eq!(d.fusion, Fusion::Weighted { alpha: 0.25 });
    }

    #[test]
    fn a_field_of_the_default_variant_needs_no_kind() {
        let d: Demo = resolve(&[set_layer("fusion.k=30").unwrap()]).unwrap();
        assert_eq!(d.fusion, Fusion::Rrf { k: 30.0 });
        let e = resolve::<Demo>(&[set_layer("fusion.alpha=0.5").unwrap()]).unwrap_err().to_string();
        assert!(e.contains("alpha"), "{e}");
    }

    #[test]
    fn mistakes_name_their_origin() {
        let e = resolve::<Demo>(&[set_layer("filters.min_charz=3").unwrap()]).unwrap_err().to_string();
        assert!(e.starts_with("--set filters.min_charz=3") && e.contains("min_charz"), "{e}");
        let e = resolve::<Demo>(&[set_layer("size=big").unwrap()]).unwrap_err().to_string();
        assert!(e.contains("size=big") || e.contains("invalid type"), "{e}");
        assert!(set_layer("size").unwrap_err().to_string().contains("KEY=VALUE"));
        assert!(set_layer("a..b=1").unwrap_err().to_string().contains("field path"));
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "size = ").unwrap();
        assert!(read_file(&bad).unwrap_err().to_string().contains("bad.toml: invalid TOML"));
    }

    #[test]
    fn set_values_are_toml() {
        assert_eq!(parse_value("3"), Value::from(3));
        assert_eq!(parse_value("true"), Value::Bool(true));
        assert_eq!(parse_value("[1, 2]"), serde_json::json!([1, 2]));
        assert_eq!(parse_value("{ kind = \"union\" }"), serde_json::json!({"kind": "union"}));
        assert_eq!(parse_value("sentence-transformers/all-MiniLM-L6-v2"), Value::String("sentence-transformers/all-MiniLM-L6-v2".into()));
        assert_eq!(parse_value("\"a b\""), Value::String("a b".into()));
    }
}
