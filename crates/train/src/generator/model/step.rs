//! The loss and its gradients: [`TrainableLlama::nll`] and
//! [`TrainableLlama::accumulate_gradients`] (on the host kernels when they run here, else Burn
//! autodiff with layer-wise recomputation), and the output head's loss over target rows.
use super::*;

impl TrainableLlama {
    pub(super) fn head(&self) -> &Frozen {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    pub(super) fn scale(&self, params: &LoraParams) -> f64 {
        params.shape.scale()
    }

    pub(super) fn check(&self, seqs: &[Sequence]) -> Result<(), TrainError> {
        for s in seqs {
            if s.ids.len() < 2 || s.target.len() != s.ids.len() - 1 {
                return Err(TrainError::Model(format!("a training sequence needs ≥ 2 tokens and one target flag per position but the last (got {} ids, {} flags)", s.ids.len(), s.target.len())));
            }
        }
        Ok(())
    }

    /// Target rows and next-token ids of a sequence.
    pub(super) fn targets(s: &Sequence) -> (Vec<i64>, Vec<i64>) {
        s.target.iter().enumerate().filter(|(_, &t)| t).map(|(i, _)| (i as i64, s.ids[i + 1] as i64)).unzip()
    }

    /// The normalised target rows of `x` `[T, h]` (`rms_norm(x[rows]) · norm`), or `None` when
    /// the sequence has no target.
    pub(super) fn target_rows(&self, x: Tensor<2>, s: &Sequence, norm: &Tensor<1>, device: &Device) -> Option<Tensor<2>> {
        let (rows, _) = Self::targets(s);
        if rows.is_empty() {
            return None;
        }
        let n = rows.len();
        let idx = Tensor::<1, Int>::from_data(TensorData::new(rows, [n]), device);
        Some(self.rms_norm(x.select(0, idx), norm))
    }

    /// The output head over normalised rows `sel` (`[n, h]` values) predicting `next`: the
    /// summed NLL and, with `weight`, the gradient of `weight × NLL` with respect to `sel`.
    /// The vocabulary is taken [`HEAD_SLICE`] rows at a time (log-sum-exp combined across
    /// slices in f64), so only one slice of the head is ever alive in f32; the softmax
    /// gradient is `(softmax − onehot) · W`, the second pass recomputing each slice's logits.
    pub(super) fn head_loss(&self, sel: Vec<f32>, next: &[u32], weight: Option<f64>) -> (f64, Option<Vec<f32>>) {
        let head = self.head();
        let (n, h, v) = (next.len(), head.d_in, head.d_out);
        let dev = &self.device;
        let sel_host = sel.clone();
        let sel = t2(sel, [n, h], dev);
        let slices: Vec<(usize, usize)> = (0..v).step_by(HEAD_SLICE).map(|a| (a, (a + HEAD_SLICE).min(v))).collect();
        // Pass 1: each slice's log-sum-exp per row, combined.
        let mut lse = vec![f64::NEG_INFINITY; n];
        for &(a, b) in &slices {
            let w = t2(head.dequantize_rows_transposed(a, b), [h, b - a], dev);
            let logits = sel.clone().matmul(w);
            let m = logits.clone().max_dim(1);
            let se = values((logits - m.clone()).exp().sum_dim(1));
            for (i, (mi, si)) in values(m).into_iter().zip(se).enumerate() {
                let part = mi as f64 + (si as f64).ln();
                let hi = lse[i].max(part);
                lse[i] = if hi == f64::NEG_INFINITY { hi } else { hi + ((lse[i] - hi).exp() + (part - hi).exp()).ln() };
            }
        }
        // The target logits, from the target tokens' rows of the head.
        let mut row = vec![0f32; h];
        let mut nll = 0.0;
        let mut target_rows = Vec::with_capacity(n);
        for (i, &t) in next.iter().enumerate() {
            head.row(t as usize, &mut row);
            let logit: f64 = row.iter().zip(&sel_host[i * h..(i + 1) * h]).map(|(&w, &x)| w as f64 * x as f64).sum();
            nll += lse[i] - logit;
            target_rows.push(row.clone());
        }
        let grad = weight.map(|weight| {
            let lse_t = t2(lse.iter().map(|&x| x as f32).collect(), [n, 1], dev);
            let mut g = vec![0f32; n * h];
            for &(a, b) in &slices {
                let w = t2(head.dequantize_rows_transposed(a, b), [h, b - a], dev);
                let p = (sel.clone().matmul(w.clone()) - lse_t.clone()).exp();
                g.iter_mut().zip(values(p.matmul(w.transpose()))).for_each(|(g, x)| *g += x);
            }
            for (i, r) in target_rows.iter().enumerate() {
                g[i * h..(i + 1) * h].iter_mut().zip(r).for_each(|(g, &w)| *g -= w);
            }
            g.iter_mut().for_each(|x| *x = (*x as f64 * weight) as f32);
            g
        });
        (nll, grad)
    }

    /// Summed NLL over the target positions of `seqs` and their count, without gradients
    /// (evaluation loss).
    pub fn nll(&self, params: &LoraParams, seqs: &[Sequence]) -> Result<(f64, usize), TrainError> {
        self.check(seqs)?;
        if self.kernels == TrainKernels::Host {
            return self.host_step(params, seqs, None, None);
        }
        let (_, last) = self.forward_saving(params, seqs, None)?;
        let norm = t1(&self.norm, &self.device);
        let (mut sel, mut next) = (Vec::new(), Vec::new());
        for (x, s) in last.into_iter().zip(seqs) {
            if let Some(rows) = self.target_rows(x, s, &norm, &self.device) {
                sel.extend(values(rows));
                next.extend(Self::targets(s).1.into_iter().map(|t| t as u32));
            }
        }
        let total = if next.is_empty() { 0.0 } else { self.head_loss(sel, &next, None).0 };
        Ok((total, next.len()))
    }

    /// Summed NLL of `seqs` (see the module doc) and the gradient of `weight × NLL` with
    /// respect to every adapter tensor, added into `grads` (laid out like
    /// [`LoraParams::tensors`]). `dropout`: (probability, seed of this step's masks).
    pub fn accumulate_gradients(&self, params: &LoraParams, seqs: &[Sequence], weight: f64, dropout: Option<(f64, u64)>, grads: &mut [Vec<f32>]) -> Result<f64, TrainError> {
        self.check(seqs)?;
        if self.kernels == TrainKernels::Host {
            return self.host_step(params, seqs, dropout, Some((weight, grads))).map(|(nll, _)| nll);
        }
        let (inputs, last) = self.forward_saving(params, seqs, dropout)?;
        let ad = &self.ad_device;
        let scale = self.scale(params);
        // The head: the loss and its gradient at the normalised target rows of every sequence
        // at once (one pass over the head's slices), then through the final norm to the last
        // hidden states.
        let h = self.config.hidden_size;
        let norm = t1(&self.norm, ad);
        let mut leaves = Vec::with_capacity(seqs.len());
        let (mut sel, mut next) = (Vec::new(), Vec::new());
        for (x, s) in last.into_iter().zip(seqs) {
            let leaf = Tensor::<2>::from_data(x.into_data(), ad).require_grad();
            let rows = self.target_rows(leaf.clone(), s, &norm, ad);
            if let Some(r) = &rows {
                sel.extend(values(r.clone().inner()));
                next.extend(Self::targets(s).1.into_iter().map(|t| t as u32));
            }
            leaves.push((leaf, rows));
        }
        let (total, grad) = if next.is_empty() { (0.0, Some(Vec::new())) } else { self.head_loss(sel, &next, Some(weight)) };
        let grad = grad.expect("asked for the gradient");
        let mut upstream: Vec<Option<Tensor<2>>> = Vec::with_capacity(seqs.len());
        let mut offset = 0;
        for (leaf, rows) in leaves {
            let Some(rows) = rows else {
                upstream.push(None);
                continue;
            };
            let [n, _] = rows.dims();
            let g_rows = t2(grad[offset * h..(offset + n) * h].to_vec(), [n, h], ad);
            offset += n;
            let g = (rows * g_rows).sum().backward();
            upstream.push(leaf.grad(&g));
        }
        let tables: Vec<(Rope, Tensor<3>)> = seqs.iter().map(|s| (self.rope_tables(s.ids.len(), ad), self.causal_mask(s.ids.len(), ad))).collect();
        // The layers, top down: rebuild one layer's graph per sequence and push the gradient through.
        for l in (0..self.layers.len()).rev() {
            let w = self.layer_weights(l, ad);
            // Each sequence's layer graph is independent: run them in parallel, then add the
            // gradients in sequence order (deterministic).
            let results: Vec<Option<LayerGrads>> = inputs[l]
                .par_iter()
                .zip(upstream.par_iter_mut())
                .enumerate()
                .map(|(s, (x, up))| {
                    let g_out = up.take()?;
                    let t = seqs[s].ids.len();
                    let (lora, leaves) = self.layer_lora(params, l, ad, true);
                    let (rope, mask) = &tables[s];
                    let masks = self.masks(params, dropout, s, l, t, ad);
                    let leaf = Tensor::<2>::from_data(x.clone().into_data(), ad);
                    let leaf = if l > 0 { leaf.require_grad() } else { leaf };
                    let out = self.block(leaf.clone(), &w, &lora, scale, &masks, (rope, mask));
                    let g_out = Tensor::<2>::from_data(g_out.into_data(), ad);
                    let g = (out * g_out).sum().backward();
                    let mut got = Vec::new();
                    for (i, a, b) in leaves {
                        for (k, t) in [(2 * i, a), (2 * i + 1, b)] {
                            if let Some(gt) = t.grad(&g) {
                                got.push((k, values(gt)));
                            }
                        }
                    }
                    Some((got, if l > 0 { leaf.grad(&g) } else { None }))
                })
                .collect();
            for (s, r) in results.into_iter().enumerate() {
                let Some((got, up)) = r else { continue };
                for (k, v) in got {
                    grads[k].iter_mut().zip(v).for_each(|(acc, v)| *acc += v);
                }
                upstream[s] = up;
            }
        }
        Ok(total)
    }
}
