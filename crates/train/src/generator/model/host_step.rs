//! The CPU step of [`TrainableLlama`]: the same loss and gradients as the Burn path, on the
//! hand-written host kernels ([`crate::generator::host`]) — every sequence's layers forward
//! with activations kept or recomputed per `checkpointing`, then backward from the head.
use super::*;

impl TrainableLlama {
    /// The block's shape for the host kernels.
    pub(super) fn dims(&self) -> host::Dims {
        let c = &self.config;
        host::Dims { h: c.hidden_size, nh: c.num_attention_heads, nkv: c.kv_heads(), hd: c.head_dim(), ff: c.intermediate_size, eps: c.rms_norm_eps as f32 }
    }

    fn host_weights(&self, l: usize) -> host::HostWeights<'_> {
        let layer = &self.layers[l];
        host::HostWeights {
            w: layer.proj.iter().map(|p| p.rows_f32(0, p.d_out)).collect(),
            bias: layer.bias.iter().map(|b| b.as_deref()).collect(),
            n1: &layer.input_layernorm,
            n2: &layer.post_attention_layernorm,
        }
    }

    fn host_lora<'a>(&self, params: &'a LoraParams, l: usize) -> host::HostLora<'a> {
        let mut ab = vec![None; N_PROJ];
        for m in params.modules.iter().filter(|m| m.layer == l) {
            ab[m.proj] = Some((m.a.as_slice(), m.b.as_slice()));
        }
        host::HostLora { ab, r: params.shape.r, scale: self.scale(params) as f32 }
    }

    /// The step on the host kernels: the summed NLL over the target positions and their count;
    /// with `grads`, the gradient of `weight × NLL` added into them. Layers run in groups of
    /// [`Self::recompute_group`] counted from the top: the forward pass keeps each group's input
    /// (and the top group's activations); the backward pass recomputes one group at a time from
    /// its input.
    pub(super) fn host_step(&self, params: &LoraParams, seqs: &[Sequence], dropout: Option<(f64, u64)>, grads: Option<(f64, &mut [Vec<f32>])>) -> Result<(f64, usize), TrainError> {
        let d = self.dims();
        let n_layers = self.layers.len();
        let training = grads.is_some();
        let group = if training { self.recompute_group.clamp(1, n_layers.max(1)) } else { n_layers.max(1) };
        // Groups counted from the top, so the top group (kept from the forward pass) is whole and
        // the bottom one takes the remainder: `n_layers − group` layers are recomputed.
        let starts: Vec<usize> = (1..=n_layers.div_ceil(group)).rev().map(|k| n_layers.saturating_sub(k * group)).collect();
        let top = starts.last().copied().unwrap_or(0);
        let ropes: Vec<host::HostRope> = seqs.iter().map(|s| host::HostRope::new(s.ids.len(), d.hd, &self.inv_freq)).collect();
        let mut xs: Vec<Vec<f32>> = seqs.iter().map(|s| self.embed(&s.ids)).collect::<Result<_, _>>()?;
        // saved[g][s]: the input of group g (every group but the top); top[l − top][s]: the top group's activations.
        let mut saved: Vec<Vec<Vec<f32>>> = vec![Vec::new(); starts.len()];
        let mut top_acts: Vec<Vec<Option<host::Acts>>> = Vec::new();
        for l in 0..n_layers {
            let w = self.host_weights(l);
            let lora = self.host_lora(params, l);
            let mut kept = Vec::new();
            for (s, x) in xs.iter_mut().enumerate() {
                let masks = self.mask_values(params, dropout, s, l, seqs[s].ids.len());
                let (out, acts) = host::block_forward(&host::Block { d: &d, w: &w, lora: &lora, rope: &ropes[s] }, std::mem::take(x), masks);
                *x = out;
                if !training {
                    continue;
                }
                if l >= top {
                    kept.push(Some(acts));
                } else if let Ok(gi) = starts.binary_search(&l) {
                    saved[gi].push(acts.x);
                }
            }
            if training && l >= top {
                top_acts.push(kept);
            }
        }
        // The head over every sequence's normalised target rows.
        let h = d.h;
        let mut sel = Vec::new();
        let mut next = Vec::new();
        let mut picked: Vec<(Vec<usize>, Vec<f32>, Vec<f32>)> = Vec::with_capacity(seqs.len());
        for (x, s) in xs.iter().zip(seqs) {
            let (rows, ids) = Self::targets(s);
            let rows: Vec<usize> = rows.into_iter().map(|r| r as usize).collect();
            let xsel: Vec<f32> = rows.iter().flat_map(|&r| x[r * h..(r + 1) * h].iter().copied()).collect();
            let (normed, rstd) = host::rms_norm(&xsel, h, &self.norm, d.eps);
            sel.extend_from_slice(&normed);
            next.extend(ids.into_iter().map(|t| t as u32));
            picked.push((rows, xsel, rstd));
        }
        let n_targets = next.len();
        let head = self.head();
        let rows = |a: usize, b: usize| head.rows_f32(a, b);
        let weight = grads.as_ref().map(|(w, _)| *w);
        let (total, g_sel) = if n_targets == 0 { (0.0, Some(Vec::new())) } else { host::head_loss(&sel, h, head.d_out, &next, weight, HEAD_SLICE, &rows) };
        let Some((_, grads)) = grads else { return Ok((total, n_targets)) };
        let g_sel = g_sel.expect("asked for the gradient");
        drop(xs);
        // The gradient at each sequence's last hidden states (zero off the target rows).
        let mut upstream: Vec<Option<Vec<f32>>> = Vec::with_capacity(seqs.len());
        let mut offset = 0;
        for ((rows, xsel, rstd), s) in picked.iter().zip(seqs) {
            if rows.is_empty() {
                upstream.push(None);
                continue;
            }
            let n = rows.len();
            let mut dsel = vec![0f32; n * h];
            host::rms_norm_backward(&g_sel[offset * h..(offset + n) * h], xsel, rstd, h, &self.norm, &mut dsel);
            offset += n;
            let mut up = vec![0f32; s.ids.len() * h];
            for (i, &r) in rows.iter().enumerate() {
                up[r * h..(r + 1) * h].copy_from_slice(&dsel[i * h..(i + 1) * h]);
            }
            upstream.push(Some(up));
        }
        // The groups, top down.
        for (gi, &l0) in starts.iter().enumerate().rev() {
            let l1 = starts.get(gi + 1).copied().unwrap_or(n_layers);
            let mut acts: Vec<Vec<Option<host::Acts>>> = if l0 == top {
                std::mem::take(&mut top_acts)
            } else {
                let mut xs: Vec<Option<Vec<f32>>> = std::mem::take(&mut saved[gi]).into_iter().zip(&upstream).map(|(x, up)| up.as_ref().map(|_| x)).collect();
                let mut out = Vec::with_capacity(l1 - l0);
                for l in l0..l1 {
                    let w = self.host_weights(l);
                    let lora = self.host_lora(params, l);
                    let mut kept = Vec::with_capacity(seqs.len());
                    for (s, x) in xs.iter_mut().enumerate() {
                        let Some(input) = x.take() else {
                            kept.push(None);
                            continue;
                        };
                        let masks = self.mask_values(params, dropout, s, l, seqs[s].ids.len());
                        let (y, a) = host::block_forward(&host::Block { d: &d, w: &w, lora: &lora, rope: &ropes[s] }, input, masks);
                        *x = Some(y);
                        kept.push(Some(a));
                    }
                    out.push(kept);
                }
                out
            };
            for l in (l0..l1).rev() {
                let layer_acts = acts.pop().expect("one entry per layer of the group");
                let w = self.host_weights(l);
                let lora = self.host_lora(params, l);
                for (s, a) in layer_acts.into_iter().enumerate() {
                    let (Some(a), Some(up)) = (a, upstream[s].take()) else { continue };
                    let mut g: Vec<Option<(&mut [f32], &mut [f32])>> = (0..N_PROJ).map(|_| None).collect();
                    for (i, pair) in grads.chunks_mut(2).enumerate() {
                        let m = &params.modules[i];
                        if m.layer == l {
                            let (ga, gb) = pair.split_at_mut(1);
                            g[m.proj] = Some((ga[0].as_mut_slice(), gb[0].as_mut_slice()));
                        }
                    }
                    upstream[s] = host::block_backward(&host::Block { d: &d, w: &w, lora: &lora, rope: &ropes[s] }, &a, &up, &mut g, l > 0);
                }
            }
        }
        Ok((total, n_targets))
    }
}
