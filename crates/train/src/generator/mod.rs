//! Training the generator (`--target generator`): QLoRA-style adapters for the Llama-family
//! decoders gauge loads.
//!
//! - [`frozen`]: the frozen base held in 4 bits (GGUF blocks or NF4), dequantised per layer.
//! - [`model`]: the network with LoRA, loss on target tokens, gradients by hand-written host
//!   kernels ([`host`]) on the CPU and Burn autodiff on CUDA and as their reference.
//! - [`data`]: chat-format SFT examples → token ids and assistant-token targets.
//! - [`train`]: checkpointing plan, held-out loss and the training run.
//! - [`merge`]: merged safetensors folders of base + adapter.
pub mod data;
pub mod frozen;
pub mod host;
pub mod merge;
pub mod model;
pub mod train;
