//! `train-lora`: LoRA adapters for a Llama-family base from chat-format SFT examples.
fn main() {
    gauge_core::cli::stage_main::<gauge_train::TrainLora>();
}
