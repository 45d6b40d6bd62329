//! Probe: Burn flex matmul GFLOP/s on training shapes.
use burn::tensor::TensorData;
use gauge_tensor::device::{cpu, Tensor};
use std::time::Instant;
fn main() {
    let d = cpu();
    for (m, k, n) in [(512, 576, 1536), (512, 1536, 576), (512, 576, 576), (1536, 512, 576)] {
        let a: Tensor<2> = Tensor::from_data(TensorData::new(vec![0.5f32; m * k], [m, k]), &d);
        let b: Tensor<2> = Tensor::from_data(TensorData::new(vec![0.25f32; k * n], [k, n]), &d);
        let _ = a.clone().matmul(b.clone()).into_data();
        let t = Instant::now();
        let reps = 10;
        for _ in 0..reps {
            let _ = a.clone().matmul(b.clone()).into_data();
        }
        let s = t.elapsed().as_secs_f64() / reps as f64;
        println!("{m}x{k}x{n}: {:.1} GFLOP/s", 2.0 * (m * k * n) as f64 / s / 1e9);
        let bt = b.clone().transpose();
        let bt = Tensor::<2>::from_data(bt.into_data(), &d);
        let t = Instant::now();
        for _ in 0..reps {
            let _ = a.clone().matmul(bt.clone().transpose()).into_data();
        }
        let s = t.elapsed().as_secs_f64() / reps as f64;
        println!("  with transposed rhs view: {:.1} GFLOP/s", 2.0 * (m * k * n) as f64 / s / 1e9);
    }
}
