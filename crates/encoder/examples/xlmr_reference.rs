//! Checks the XLM-RoBERTa cross-encoder path against a tiny reference built by
//! `scripts/xlmr_reference.py` (transformers' Flax XLMRobertaForSequenceClassification):
//! identical pair ids and every logit within 1e-4. Usage: `xlmr_reference DIR OUT_JSON`.
use std::path::PathBuf;

use gauge_encoder::device;
use gauge_encoder::{CrossEncoder, CrossEncoderOptions, ModelSource};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).expect("usage: xlmr_reference DIR OUT_JSON"));
    let out = PathBuf::from(args.get(2).expect("usage: xlmr_reference DIR OUT_JSON"));
    let model = CrossEncoder::load(&ModelSource { id: "tiny-xlmr".into(), dir: dir.clone() }, &CrossEncoderOptions { max_length: Some(128), ..Default::default() }, &device::cpu())
        .unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(dir.join("reference.jsonl")).expect("reference.jsonl");
    let (mut worst, mut ids_ok, mut n) = (0.0f32, true, 0);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let c: serde_json::Value = serde_json::from_str(line).unwrap();
        let (q, p) = (c["query"].as_str().unwrap(), c["passage"].as_str().unwrap());
        let enc = model.encode_pairs(q, &[p]).unwrap().remove(0);
        let want: Vec<u32> = c["input_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        if enc.ids != want {
            eprintln!("ids differ for {q:?}:\n  ours {:?}\n  ref  {:?}", enc.ids, want);
            ids_ok = false;
        }
        let got = model.score(q, &[p]).unwrap()[0];
        let diff = (got - c["logit"].as_f64().unwrap() as f32).abs();
        worst = worst.max(diff);
        n += 1;
    }
    let pass = ids_ok && worst <= 1e-4;
    let report = serde_json::json!({ "pairs": n, "ids_identical": ids_ok, "max_abs_logit_diff": worst, "tolerance": 1e-4, "pass": pass,
        "reference": "transformers 4.57.1 FlaxXLMRobertaForSequenceClassification, random weights (scripts/xlmr_reference.py)" });
    std::fs::write(&out, serde_json::to_string_pretty(&report).unwrap() + "\n").unwrap();
    println!("{report}");
    if !pass {
        std::process::exit(1);
    }
}
