//! The loss curve of a training run: one row per optimiser step (training loss of its window)
//! and per evaluation (held-out loss), as `loss_curve.parquet` and `loss_curve.png`.
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
use serde::{Deserialize, Serialize};

/// One point of the curve.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CurvePoint {
    /// Optimiser steps taken when measured.
    pub step: u64,
    /// Epochs done (fractional).
    pub epoch: f64,
    /// `train` (the step's window, token-weighted) or `dev` (the held-out subset).
    pub split: String,
    /// Mean NLL per target token.
    pub loss: f64,
    /// Learning rate of the step (train rows).
    pub learning_rate: f64,
    /// Global gradient norm before clipping (train rows).
    pub grad_norm: f64,
    /// Target tokens in the window (train) or the subset (dev).
    pub target_tokens: u64,
    /// All tokens run per second in the step, forward and backward (train rows).
    pub tokens_per_second: f64,
}

/// Writes the curve as Parquet.
pub fn write_parquet(path: &Path, points: &[CurvePoint]) -> anyhow::Result<u64> {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(points.iter().map(|p| p.step as i64))),
        Arc::new(Float64Array::from_iter_values(points.iter().map(|p| p.epoch))),
        Arc::new(StringArray::from_iter_values(points.iter().map(|p| p.split.as_str()))),
        Arc::new(Float64Array::from_iter_values(points.iter().map(|p| p.loss))),
        Arc::new(Float64Array::from_iter_values(points.iter().map(|p| p.learning_rate))),
        Arc::new(Float64Array::from_iter_values(points.iter().map(|p| p.grad_norm))),
        Arc::new(Int64Array::from_iter_values(points.iter().map(|p| p.target_tokens as i64))),
        Arc::new(Float64Array::from_iter_values(points.iter().map(|p| p.tokens_per_second))),
    ];
    Ok(gauge_core::table::write_parquet(path, gauge_core::schema::arrow_schema(gauge_core::schema::LOSS_CURVE_COLUMNS), cols)?)
}

/// Draws training loss (per step) and held-out loss (points) against the step.
pub fn write_png(path: &Path, points: &[CurvePoint], title: &str) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let font = gauge_core::font::chart_font().map_err(|e| anyhow::anyhow!(e))?;
    // Registering the same family twice is harmless; the first registration wins.
    let _ = plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, font);
    let train: Vec<(f64, f64)> = points.iter().filter(|p| p.split == "train").map(|p| (p.step as f64, p.loss)).collect();
    let dev: Vec<(f64, f64)> = points.iter().filter(|p| p.split == "dev").map(|p| (p.step as f64, p.loss)).collect();
    let max_step = points.iter().map(|p| p.step).max().unwrap_or(1).max(1) as f64;
    let (lo, hi) = points.iter().map(|p| p.loss).filter(|l| l.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), l| (a.min(l), b.max(l)));
    let (lo, hi) = if lo.is_finite() { (lo.min(hi) * 0.95, hi * 1.05 + 1e-9) } else { (0.0, 1.0) };
    let tmp = path.with_extension("png.partial.png");
    {
        let root = BitMapBackend::new(&tmp, (900, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root).caption(title, ("sans-serif", 18)).margin(15).x_label_area_size(40).y_label_area_size(60).build_cartesian_2d(0f64..max_step, lo..hi)?;
        chart.configure_mesh().x_desc("optimizer step").y_desc("loss (NLL per target token)").label_style(("sans-serif", 14)).draw()?;
        let blue = RGBColor(0x1f, 0x77, 0xb4);
        let orange = RGBColor(0xff, 0x7f, 0x0e);
        chart.draw_series(LineSeries::new(train.iter().copied(), blue.stroke_width(2)))?.label("train (step window)").legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], blue.stroke_width(2)));
        chart.draw_series(LineSeries::new(dev.iter().copied(), orange.stroke_width(2)))?;
        chart.draw_series(dev.iter().map(|&(x, y)| Circle::new((x, y), 4, orange.filled())))?.label("held-out").legend(move |(x, y)| Circle::new((x + 10, y), 4, orange.filled()));
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).label_font(("sans-serif", 14)).draw()?;
        root.present()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Writes `loss_curve.parquet` and `loss_curve.png` into a run and records both as outputs.
pub fn write_outputs(run: &mut gauge_core::artifact::StageRun, points: &[CurvePoint], title: &str) -> anyhow::Result<()> {
    let rows = write_parquet(&run.path("loss_curve.parquet"), points)?;
    run.add_output("loss_curve.parquet", Some(rows))?;
    write_png(&run.path("loss_curve.png"), points, title)?;
    run.add_output("loss_curve.png", None)?;
    Ok(())
}
