//! `merge = true`: the base with the adapter folded in (`W + s·B A`) as a Hugging Face folder
//! of f32 safetensors (`model.safetensors`, `config.json`, `tokenizer.json`,
//! `tokenizer_config.json` with the chat template, `generation_config.json`), loadable by
//! transformers, by gauge, and convertible to GGUF by llama.cpp's converter.
use std::path::Path;

use gauge_decoder::adapter::{module_path, PROJECTIONS};
use gauge_decoder::{ChatTemplate, LoraAdapter, ModelFiles};

/// Writes the merged model into `dir`.
pub fn write_merged(base: &str, adapter: &LoraAdapter, template: &ChatTemplate, dir: &Path) -> anyhow::Result<()> {
    let files = ModelFiles::open(base, false)?;
    let c = &files.config;
    let (h, hd, nh, nkv, ff, v) = (c.hidden_size, c.head_dim(), c.num_attention_heads, c.kv_heads(), c.intermediate_size, c.vocab_size);
    let dims = [(h, nh * hd), (h, nkv * hd), (h, nkv * hd), (nh * hd, h), (h, ff), (h, ff), (ff, h)];
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = vec![("model.embed_tokens.weight".into(), vec![v, h], files.checkpoint.get("model.embed_tokens.weight", &[v, h])?)];
    for l in 0..c.num_hidden_layers {
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            let name = format!("model.layers.{l}.{norm}.weight");
            tensors.push((name.clone(), vec![h], files.checkpoint.get(&name, &[h])?));
        }
        for (p, &(d_in, d_out)) in dims.iter().enumerate() {
            let module = module_path(l, PROJECTIONS[p]);
            let mut w = files.checkpoint.get(&format!("{module}.weight"), &[d_out, d_in])?;
            if let Some(d) = adapter.delta(&module) {
                w.iter_mut().zip(d).for_each(|(w, d)| *w += d);
            }
            tensors.push((format!("{module}.weight"), vec![d_out, d_in], w));
            let bias = format!("{module}.bias");
            if files.checkpoint.has(&bias) {
                tensors.push((bias.clone(), vec![d_out], files.checkpoint.get(&bias, &[d_out])?));
            }
        }
    }
    tensors.push(("model.norm.weight".into(), vec![h], files.checkpoint.get("model.norm.weight", &[h])?));
    let tied = c.tie_word_embeddings || !files.checkpoint.has("lm_head.weight");
    if !tied {
        tensors.push(("lm_head.weight".into(), vec![v, h], files.checkpoint.get("lm_head.weight", &[v, h])?));
    }
    std::fs::create_dir_all(dir)?;
    crate::run::write_safetensors(&dir.join("model.safetensors"), &tensors)?;
    let mut config = serde_json::to_value(c)?;
    config["architectures"] = serde_json::json!(["LlamaForCausalLM"]);
    config["tie_word_embeddings"] = serde_json::json!(tied);
    config["torch_dtype"] = serde_json::json!("float32");
    config["hidden_act"] = serde_json::json!("silu");
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config)?)?;
    files.tokenizer.save(dir.join("tokenizer.json"), false).map_err(|e| anyhow::anyhow!("cannot write tokenizer.json: {e}"))?;
    let tok = |id: Option<u32>| id.and_then(|i| files.tokenizer.id_to_token(i));
    let tc = serde_json::json!({
        "chat_template": template.source(),
        "bos_token": tok(c.bos_token_id),
        "eos_token": tok(files.eos_ids.first().copied()),
        "tokenizer_class": "PreTrainedTokenizerFast",
    });
    std::fs::write(dir.join("tokenizer_config.json"), serde_json::to_string_pretty(&tc)?)?;
    std::fs::write(dir.join("generation_config.json"), serde_json::to_string_pretty(&serde_json::json!({"bos_token_id": c.bos_token_id, "eos_token_id": files.eos_ids}))?)?;
    Ok(())
}
