//! `train-lora` end to end on the tiny Llama fixture (NF4 base, the default storage for
//! safetensors): the training loss falls, the adapter is a PEFT folder the decoder loads (and
//! a save/load round trip gives identical logits), `--merge` equals base + adapter, a run
//! killed with SIGKILL resumes from its checkpoint to the same adapter as an uninterrupted
//! run, and bad input is refused with the file named.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gauge::{bin, last_line, ok, run, shared};
use gauge_decoder::{LanguageModel, LoadOptions};

const TEMPLATE: &str = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} [SEP] {% endfor %}{% if add_generation_prompt %}assistant :{% endif %}";

/// Chat rows whose words are in the fixture's BERT vocabulary.
fn write_data(dir: &Path) -> PathBuf {
    let facts = [
        ("what is the speed limit in the yard", "the speed limit in the yard is ten miles per hour"),
        ("who inspects the brakes", "the car inspector inspects the brakes before departure"),
        ("when must the crew report", "the crew must report thirty minutes before the train leaves"),
        ("what does a red flag mean", "a red flag means stop the train at once"),
        ("where are the switches checked", "the switches are checked at the north end of the yard"),
        ("how often is the track inspected", "the track is inspected twice each week"),
        ("who may move the locomotive", "only a qualified engineer may move the locomotive"),
        ("what is required before coupling", "a brake test is required before coupling cars"),
    ];
    let row = |i: usize, q: &str, a: &str| serde_json::json!({"id": format!("ex-{i}"), "messages": [{"role": "system", "content": "answer from the rules"}, {"role": "user", "content": q}, {"role": "assistant", "content": a}]}).to_string();
    let train: Vec<String> = facts.iter().enumerate().map(|(i, (q, a))| row(i, q, a)).collect();
    let dev: Vec<String> = facts.iter().take(3).enumerate().map(|(i, (q, a))| row(100 + i, q, a)).collect();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("train.jsonl"), train.join("\n") + "\n").unwrap();
    std::fs::write(dir.join("dev.jsonl"), dev.join("\n") + "\n").unwrap();
    dir.to_path_buf()
}

fn config(dir: &Path, max_steps: u64) -> PathBuf {
    let base = shared().join("fixtures/tiny-llama");
    let toml = format!(
        "base = {:?}\nchat_template = {:?}\nr = 4\nlora_alpha = 8.0\nlearning_rate = 0.01\nwarmup_steps = 2\nepochs = 40\nmax_steps = {max_steps}\nbatch_size = 2\ngrad_accum = 2\neval_every = 5\ncheckpoint_every = 2\nlora_dropout = 0.1\nseed = 3\n",
        base.display().to_string(),
        TEMPLATE
    );
    let p = dir.join("train.toml");
    std::fs::write(&p, toml).unwrap();
    p
}

fn adapter_bytes(run_dir: &Path) -> Vec<u8> {
    std::fs::read(run_dir.join("adapter/adapter_model.safetensors")).unwrap()
}

fn logits(lm: &LanguageModel, ids: &[u32]) -> Vec<f32> {
    lm.model.forward(ids, &mut lm.model.new_cache()).unwrap()
}

#[test]
fn trains_saves_a_peft_adapter_merges_and_resumes_after_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let data = write_data(&tmp.path().join("data"));
    let cfg = config(tmp.path(), 40);
    let root_a = tmp.path().join("a");
    let out = ok(run("train-lora", &[data.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--artifacts", root_a.to_str().unwrap(), "--merge"]));
    let dir_a = PathBuf::from(last_line(&out));
    for f in ["adapter/adapter_config.json", "adapter/adapter_model.safetensors", "loss_curve.parquet", "loss_curve.png", "merged/model.safetensors", "manifest.json"] {
        assert!(dir_a.join(f).is_file(), "{f} missing in {}", dir_a.display());
    }
    // The loss falls: held-out from start to end, and the training windows.
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir_a.join("manifest.json")).unwrap()).unwrap();
    let stats = &manifest["stats"];
    let (start, end) = (stats["dev_loss_start"].as_f64().unwrap(), stats["dev_loss_end"].as_f64().unwrap());
    // The tiny random model's untied head caps how far its logits can move (the loss starts at ln 30522 ≈ 10.33).
    assert!(end < start - 0.25, "held-out loss {start} → {end}");
    assert_eq!(stats["steps"], 40);
    assert_eq!(stats["base_storage"], "nf4");
    let curve = gauge_core::table::read_parquet_any(&dir_a.join("loss_curve.parquet")).unwrap();
    assert!(curve.num_rows() >= 40 + 2);
    // PEFT config.
    let ac: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir_a.join("adapter/adapter_config.json")).unwrap()).unwrap();
    assert_eq!((ac["peft_type"].as_str(), ac["task_type"].as_str(), ac["r"].as_u64(), ac["lora_alpha"].as_f64()), (Some("LORA"), Some("CAUSAL_LM"), Some(4), Some(8.0)));
    assert_eq!(ac["target_modules"].as_array().unwrap().len(), 7);

    // The decoder loads it; saving and loading again changes nothing; merged equals base + adapter.
    let base_path = shared().join("fixtures/tiny-llama");
    let cpu = gauge_encoder::device::cpu();
    let with = |adapter: &Path| LanguageModel::load_with(base_path.to_str().unwrap(), &cpu, &LoadOptions { adapter: Some(adapter.to_path_buf()), ..Default::default() }).unwrap();
    let tuned = with(&dir_a.join("adapter"));
    let base = LanguageModel::load(base_path.to_str().unwrap(), &cpu).unwrap();
    let ids = [101u32, 2054, 2003, 1996, 3177, 5787, 102];
    let (lb, lt) = (logits(&base, &ids), logits(&tuned, &ids));
    assert!(lb.iter().zip(&lt).any(|(a, b)| (a - b).abs() > 1e-3), "the adapter changes nothing");
    let copy = tmp.path().join("copy");
    gauge_decoder::LoraAdapter::load(&dir_a.join("adapter")).unwrap().save(&copy).unwrap();
    assert_eq!(logits(&with(&copy), &ids), lt);
    let merged = LanguageModel::load(dir_a.join("merged").to_str().unwrap(), &cpu).unwrap();
    let worst = logits(&merged, &ids).iter().zip(&lt).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-4, "merged vs base + adapter: {worst}");

    // `answer`'s generator config names the adapter, and its hash joins the fingerprint.
    let cfg_with = |adapter: &Path| gauge_generator::GeneratorConfig::Local { model: base_path.display().to_string(), adapter: Some(adapter.display().to_string()) };
    let entries = gauge_generator::model_entry(&cfg_with(&dir_a.join("adapter"))).unwrap();
    assert_eq!(entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["model", "adapter"]);
    assert_eq!(entries[1].hash, gauge_core::hash::file_hash(&dir_a.join("adapter/adapter_model.safetensors")).unwrap());
    let err = gauge_generator::model_entry(&cfg_with(&tmp.path().join("no-adapter"))).unwrap_err().to_string();
    assert!(err.contains("PEFT adapter folder"), "{err}");

    // kill -9 once a checkpoint exists, rerun: same adapter as the uninterrupted run.
    let root_b = tmp.path().join("b");
    let mut resumed = false;
    for attempt in 0..3 {
        let _ = std::fs::remove_dir_all(&root_b);
        let mut child = Command::new(bin("train-lora")).args([data.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--artifacts", root_b.to_str().unwrap(), "--merge"]).env("GAUGE_NO_PROGRESS", "1").stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        let started = Instant::now();
        let checkpoint = loop {
            let found = std::fs::read_dir(root_b.join("train-lora")).ok().and_then(|rd| rd.flatten().map(|e| e.path().join("checkpoint.safetensors")).find(|p| p.is_file()));
            if found.is_some() || started.elapsed() > Duration::from_secs(120) || child.try_wait().unwrap().is_some() {
                break found;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        child.kill().ok(); // SIGKILL
        child.wait().unwrap();
        if checkpoint.is_none() || gauge::complete_dirs(&root_b, "train-lora").len() == 1 {
            eprintln!("attempt {attempt}: the run ended before it could be killed; again");
            continue;
        }
        let out = ok(run("train-lora", &[data.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--artifacts", root_b.to_str().unwrap(), "--merge"]));
        let dir_b = PathBuf::from(last_line(&out));
        let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir_b.join("manifest.json")).unwrap()).unwrap();
        assert!(m["stats"]["resumed_from_step"].as_u64().unwrap() > 0, "{}", m["stats"]);
        assert_eq!(dir_b.file_name(), dir_a.file_name(), "same settings, same fingerprint");
        assert!(adapter_bytes(&dir_b) == adapter_bytes(&dir_a), "the resumed run's adapter differs from the uninterrupted run's");
        resumed = true;
        break;
    }
    assert!(resumed, "could not kill the run while it trained");
}

#[test]
fn bad_input_is_refused_with_the_file_named() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 2);
    let art = tmp.path().join("art");
    let missing = tmp.path().join("nothing-here");
    let out = run("train-lora", &[missing.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--artifacts", art.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing-here") && err.contains("synth-data --mode sft"), "{err}");
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"prompt\": \"no messages here\"}\n").unwrap();
    let out = run("train-lora", &[bad.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--artifacts", art.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("bad.jsonl") && err.contains("line 1"), "{err}");
    let data = write_data(&tmp.path().join("data"));
    let out = run("train-lora", &[data.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--artifacts", art.to_str().unwrap(), "--set", "target_modules=[\"qkv\"]"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("unknown target module `qkv`"), "{err}");
    assert!(gauge::complete_dirs(&art, "train-lora").is_empty(), "nothing half-written");
}

#[test]
fn every_checkpointing_setting_trains_the_same_adapter_and_auto_follows_the_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let data = write_data(&tmp.path().join("data"));
    let cfg = config(tmp.path(), 4);
    let train = |name: &str, sets: &[&str]| {
        let root = tmp.path().join(name);
        let mut args = vec![data.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--artifacts", root.to_str().unwrap()];
        for s in sets {
            args.extend(["--set", s]);
        }
        let dir = PathBuf::from(last_line(&ok(run("train-lora", &args))));
        let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
        (adapter_bytes(&dir), manifest["stats"].clone(), dir)
    };
    let (bytes, stats, layers_dir) = train("layers", &["checkpointing=\"layers\""]);
    assert_eq!((stats["kernels"].as_str(), stats["checkpointing"].as_str(), stats["recompute_group"].as_u64()), (Some("host"), Some("layers"), Some(1)));
    let (none_bytes, none_stats, _) = train("none", &["checkpointing=\"none\""]);
    assert_eq!(none_stats["checkpointing"], "none");
    assert_eq!(none_bytes, bytes, "keeping every activation must train the same adapter as recomputing each layer");
    assert!(none_stats["peak_memory_estimate_mib"].as_u64() >= stats["peak_memory_estimate_mib"].as_u64());
    // `auto`: everything fits a large budget (nothing recomputed); nothing fits a 1 MiB one (each layer recomputed).
    let (big, big_stats, _) = train("auto-big", &["max_memory_mib=65536"]);
    assert_eq!((big_stats["checkpointing"].as_str(), big.as_slice()), (Some("none"), bytes.as_slice()));
    let (_, small_stats, _) = train("auto-small", &["max_memory_mib=1"]);
    assert_eq!(small_stats["checkpointing"], "layers");
    // Burn's ops train the same adapter up to f32 rounding, not bit for bit.
    let out = Command::new(bin("train-lora"))
        .args([data.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "--artifacts", tmp.path().join("burn").to_str().unwrap()])
        .env("GAUGE_TRAIN_KERNELS", "burn")
        .env("GAUGE_NO_PROGRESS", "1")
        .output()
        .unwrap();
    let dir = PathBuf::from(last_line(&ok(out)));
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["stats"]["kernels"], "burn");
    let (a, b) = (adapter_values(&layers_dir), adapter_values(&dir));
    let (diff, norm) = a.iter().zip(&b).fold((0f64, 0f64), |(d, n), (x, y)| (d + ((x - y) as f64).powi(2), n + (*y as f64).powi(2)));
    assert!(diff.sqrt() <= 1e-3 * norm.sqrt(), "host and Burn adapters differ by {} (norm {})", diff.sqrt(), norm.sqrt());
}

/// Every A and B value of a run's adapter (modules in path order).
fn adapter_values(run_dir: &Path) -> Vec<f32> {
    let adapter = gauge_decoder::LoraAdapter::load(&run_dir.join("adapter")).unwrap();
    let mut modules: Vec<_> = adapter.modules.iter().collect();
    modules.sort_by(|a, b| a.0.cmp(b.0));
    modules.iter().flat_map(|(_, m)| m.a.iter().chain(&m.b).copied()).collect()
}
