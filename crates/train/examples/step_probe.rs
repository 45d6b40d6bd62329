//! Probe: time of the parts of one training step on SmolLM2.
use gauge_decoder::ModelFiles;
use gauge_train::generator::model::{LoraShape, Sequence, TrainableLlama};
use gauge_train::BaseStorage;
use std::time::Instant;
fn main() {
    let files = ModelFiles::open("SmolLM2-135M-Instruct.Q4_1.gguf", false).unwrap();
    let t = Instant::now();
    let model = TrainableLlama::load(files.config.clone(), &files.checkpoint, BaseStorage::Auto, &gauge_tensor::device::cpu()).unwrap();
    println!("load {:.2}s", t.elapsed().as_secs_f64());
    let params = model.init_lora(LoraShape { r: 16, alpha: 16.0, rslora: false, targets: (0..7).collect() }, 0);
    {
        use gauge_train::generator::frozen::Frozen;
        let t = Instant::now();
        let f = Frozen::load(&files.checkpoint, "model.layers.0.mlp.up_proj.weight", 1536, 576, BaseStorage::Auto).unwrap();
        println!("kind {}", f.kind());
        for _ in 0..10 { let _ = f.dequantize_transposed(); }
        println!("dequant up_proj x10 {:.3}s", t.elapsed().as_secs_f64());
        let h = Frozen::load(&files.checkpoint, "model.embed_tokens.weight", 49152, 576, BaseStorage::Auto).unwrap();
        println!("head kind {}", h.kind());
        let t = Instant::now();
        let _ = h.dequantize_transposed();
        println!("dequant head {:.3}s", t.elapsed().as_secs_f64());
    }
    let n = 512;
    let ids: Vec<u32> = (0..n).map(|i| (i * 37 % 40000) as u32 + 100).collect();
    let target: Vec<bool> = (0..n - 1).map(|i| i >= n / 2).collect();
    let seq = Sequence { ids, target };
    let two = vec![seq.clone(), seq.clone()];
    let mut g = params.zeros_like();
    let t = Instant::now();
    model.accumulate_gradients(&params, &two, 1.0 / 512.0, None, &mut g).unwrap();
    println!("two sequences: {:.2}s = {:.0} tok/s", t.elapsed().as_secs_f64(), 2.0 * n as f64 / t.elapsed().as_secs_f64());
    for _ in 0..1 {
        let t = Instant::now();
        let _ = model.nll(&params, std::slice::from_ref(&seq)).unwrap();
        println!("nll (forward + head) {:.2}s", t.elapsed().as_secs_f64());
        let mut g = params.zeros_like();
        let t = Instant::now();
        model.accumulate_gradients(&params, std::slice::from_ref(&seq), 1.0 / 256.0, None, &mut g).unwrap();
        println!("step {:.2}s = {:.0} tok/s", t.elapsed().as_secs_f64(), n as f64 / t.elapsed().as_secs_f64());
    }
}
