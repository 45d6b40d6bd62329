//! LoRA adapters for Llama-family decoders: the PEFT folder format itself lives in
//! [`gauge_tensor::adapter`] (shared with the encoders); this module names the Llama modules.
pub use gauge_tensor::adapter::*;

/// The seven Llama projections, in PEFT's `target_modules` names.
pub const PROJECTIONS: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

/// The Hugging Face module path of projection `proj` in layer `layer`
/// (`model.layers.0.self_attn.q_proj`, `model.layers.0.mlp.up_proj`).
pub fn module_path(layer: usize, proj: &str) -> String {
    let block = if matches!(proj, "gate_proj" | "up_proj" | "down_proj") { "mlp" } else { "self_attn" };
    format!("model.layers.{layer}.{block}.{proj}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn module_paths_follow_the_hugging_face_names() {
        assert_eq!(super::module_path(3, "down_proj"), "model.layers.3.mlp.down_proj");
        assert_eq!(super::module_path(0, "q_proj"), "model.layers.0.self_attn.q_proj");
    }
}
