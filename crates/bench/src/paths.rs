//! Machine paths made portable in the bench files the harness writes (they are committed).

use std::path::Path;

use serde_json::Value;

/// `s` with this machine's paths made portable: the cargo target dir → `$CARGO_TARGET_DIR`, the
/// repository root → relative, its sibling `shared/` → `../shared`, `mktemp -d` folders →
/// `$TMPDIR/tmp.X`, the home folder → `~` (a bench file is committed; its commands should read
/// the same on any machine).
pub fn portable(s: &str, root: &Path) -> String {
    let mut out = s.to_string();
    let canonical = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR").filter(|t| !t.is_empty()) {
        let target = Path::new(&target);
        let abs = if target.is_absolute() { target.to_path_buf() } else { canonical.join(target) };
        out = out.replace(&format!("{}/", abs.display()), "$CARGO_TARGET_DIR/");
    }
    if let Some(parent) = canonical.parent() {
        out = out.replace(&format!("{}/shared/", parent.display()), "../shared/");
    }
    out = out.replace(&format!("{}/", canonical.display()), "");
    let tmp = format!("{}/tmp.", std::env::temp_dir().display().to_string().trim_end_matches('/'));
    while let Some(at) = out.find(&tmp) {
        let end = out[at + tmp.len()..].find(|c: char| !c.is_ascii_alphanumeric()).map_or(out.len(), |e| at + tmp.len() + e);
        out.replace_range(at..end, "$TMPDIR/tmp.X");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| h.len() > 1) {
        out = out.replace(&format!("{}/", Path::new(&home).display()), "~/");
    }
    out
}

/// Every string of `v` made [`portable`].
pub fn make_portable(v: &mut Value, root: &Path) {
    match v {
        Value::String(s) => *s = portable(s, root),
        Value::Array(a) => a.iter_mut().for_each(|x| make_portable(x, root)),
        Value::Object(o) => o.values_mut().for_each(|x| make_portable(x, root)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn machine_paths_become_portable() {
        let root = crate::sources::tests::toy_root();
        let r = root.path().canonicalize().unwrap();
        let home = std::env::var("HOME").unwrap();
        let tmp = std::env::temp_dir().display().to_string();
        let s = format!("{r}/models/x.gguf {}/shared/corpora {tmp}/tmp.Ab12Cd/llama {home}/.cache/venv/bin/python3 /usr/bin/env", r.parent().unwrap().display(), r = r.display());
        let p = portable(&s, root.path());
        assert_eq!(p, "models/x.gguf ../shared/corpora $TMPDIR/tmp.X/llama ~/.cache/venv/bin/python3 /usr/bin/env", "{p}");
        let mut v = json!({"argv": [format!("{home}/a"), 3], "printed": {"model": format!("{}/m.gguf", r.display())}});
        make_portable(&mut v, root.path());
        assert_eq!(v["printed"]["model"], "m.gguf");
    }

}
