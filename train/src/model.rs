//! The model: a multi-layer perceptron `FEATURES -> hidden (ReLU) -> CLASSES` with a softmax
//! cross-entropy loss, in plain single-threaded `f32`.
//!
//! All parameters live in one flat vector, tensor after tensor: `W1` (`inputs x hidden`, row-major),
//! `b1`, `W2` (`hidden x classes`), `b2`. Backpropagation produces gradients in the reverse order
//! (`b2`, `W2`, `b1`, `W1`), so every run of tensors in backward order is one contiguous range of
//! the flat vector: a gradient bucket is a slice, with no packing.
//!
//! Gradients are *sums* over the samples of a batch (not means): shards on different ranks add up
//! to the gradient sum of the whole batch, and one division by the global batch size then gives
//! exactly the quantity a single process computes.

use crate::rng::Rng;
use std::ops::Range;

/// Tensor indices, in flat (forward) order.
pub const W1: usize = 0;
/// The hidden layer's bias.
pub const B1: usize = 1;
/// The output layer's weights.
pub const W2: usize = 2;
/// The output layer's bias.
pub const B2: usize = 3;
/// The order backpropagation completes tensors in.
pub const BACKWARD_ORDER: [usize; 4] = [B2, W2, B1, W1];

/// The sizes of the layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Inputs per sample.
    pub inputs: usize,
    /// Hidden units.
    pub hidden: usize,
    /// Output classes.
    pub classes: usize,
}

/// One parameter tensor: its name and where it sits in the flat vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    /// `W1`, `b1`, `W2` or `b2`.
    pub name: &'static str,
    /// Its elements in the flat parameter (and gradient) vector.
    pub range: Range<usize>,
}

impl Shape {
    /// The four tensors in flat order (index with [`W1`], [`B1`], [`W2`], [`B2`]).
    pub fn tensors(&self) -> [Tensor; 4] {
        let (i, h, c) = (self.inputs, self.hidden, self.classes);
        let w1 = 0..i * h;
        let b1 = w1.end..w1.end + h;
        let w2 = b1.end..b1.end + h * c;
        let b2 = w2.end..w2.end + c;
        [
            Tensor {
                name: "W1",
                range: w1,
            },
            Tensor {
                name: "b1",
                range: b1,
            },
            Tensor {
                name: "W2",
                range: w2,
            },
            Tensor {
                name: "b2",
                range: b2,
            },
        ]
    }

    /// The number of parameters.
    pub fn len(&self) -> usize {
        (self.inputs + 1) * self.hidden + (self.hidden + 1) * self.classes
    }

    /// True for a model without parameters (never, for a valid shape).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fresh parameters: He-uniform weights for the ReLU layer (`±sqrt(6 / inputs)`),
    /// Glorot-uniform for the output layer (`±sqrt(6 / (hidden + classes))`), zero biases.
    pub fn init(&self, rng: &mut Rng) -> Vec<f32> {
        let mut p = vec![0.0f32; self.len()];
        let t = self.tensors();
        let a1 = (6.0 / self.inputs as f32).sqrt();
        for w in &mut p[t[W1].range.clone()] {
            *w = rng.symmetric(a1);
        }
        let a2 = (6.0 / (self.hidden + self.classes) as f32).sqrt();
        for w in &mut p[t[W2].range.clone()] {
            *w = rng.symmetric(a2);
        }
        p
    }
}

/// Loss and accuracy of some samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Score {
    /// The sum of the per-sample cross-entropy losses.
    pub loss: f64,
    /// Samples whose largest output is their label.
    pub correct: usize,
}

/// The activations of a batch, kept from the forward pass for the backward pass; buffers grow
/// to the largest batch seen and are reused.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Hidden pre-activations, `m x hidden`.
    z1: Vec<f32>,
    /// Hidden activations (ReLU of `z1`), `m x hidden`.
    h: Vec<f32>,
    /// Output probabilities, `m x classes`; the backward pass turns them into `dLoss/dz2`.
    p: Vec<f32>,
    /// `dLoss/dz1`, `m x hidden`.
    dz1: Vec<f32>,
}

/// Runs `m` samples (`x`: `m x inputs`) forward, keeping the activations in `s`, and scores them
/// against `y`.
pub fn forward(shape: &Shape, params: &[f32], x: &[f32], y: &[u8], s: &mut Scratch) -> Score {
    let (ni, nh, nc) = (shape.inputs, shape.hidden, shape.classes);
    let m = y.len();
    debug_assert_eq!(x.len(), m * ni);
    let t = shape.tensors();
    let (w1, b1) = (&params[t[W1].range.clone()], &params[t[B1].range.clone()]);
    let (w2, b2) = (&params[t[W2].range.clone()], &params[t[B2].range.clone()]);
    s.z1.resize(m * nh, 0.0);
    s.h.resize(m * nh, 0.0);
    s.p.resize(m * nc, 0.0);
    let mut score = Score::default();
    for r in 0..m {
        let z1 = &mut s.z1[r * nh..(r + 1) * nh];
        z1.copy_from_slice(b1);
        for (k, &xv) in x[r * ni..(r + 1) * ni].iter().enumerate() {
            if xv != 0.0 {
                axpy(z1, xv, &w1[k * nh..(k + 1) * nh]);
            }
        }
        let h = &mut s.h[r * nh..(r + 1) * nh];
        for (h, &z) in h.iter_mut().zip(z1.iter()) {
            *h = z.max(0.0);
        }
        let z2 = &mut s.p[r * nc..(r + 1) * nc];
        z2.copy_from_slice(b2);
        for (j, &hv) in h.iter().enumerate() {
            if hv != 0.0 {
                axpy(z2, hv, &w2[j * nc..(j + 1) * nc]);
            }
        }
        // Softmax and cross-entropy, shifted by the largest logit.
        let label = usize::from(y[r]);
        let (mut best, mut max) = (0, z2[0]);
        for (c, &z) in z2.iter().enumerate() {
            if z > max {
                (best, max) = (c, z);
            }
        }
        let zy = z2[label];
        let mut sum = 0.0f32;
        for z in z2.iter_mut() {
            *z = (*z - max).exp();
            sum += *z;
        }
        let inv = 1.0 / sum;
        for z in z2.iter_mut() {
            *z *= inv;
        }
        score.loss += f64::from(sum.ln() + max - zy);
        score.correct += usize::from(best == label);
    }
    score
}

/// Called by [`backward`] with each tensor whose gradient is complete, and all the gradients.
pub type Ready<'a, E> = dyn FnMut(usize, &[f32]) -> Result<(), E> + 'a;

/// Backpropagates the batch of the last [`forward`] (same `x` and `y`) into `grads` (the sums
/// of the per-sample gradients, overwritten), layer by layer from the output. After each tensor's
/// gradient is complete, `ready(tensor, grads)` is called (in [`BACKWARD_ORDER`]) so its
/// all-reduce can start while the rest of the backward pass runs; an error from `ready` stops it.
pub fn backward<E>(
    shape: &Shape,
    params: &[f32],
    x: &[f32],
    y: &[u8],
    s: &mut Scratch,
    grads: &mut [f32],
    ready: &mut Ready<'_, E>,
) -> Result<(), E> {
    let (ni, nh, nc) = (shape.inputs, shape.hidden, shape.classes);
    let m = y.len();
    let t = shape.tensors();
    let w2 = &params[t[W2].range.clone()];

    // dLoss/dz2 = softmax - onehot, in place of the probabilities.
    for (r, &label) in y.iter().enumerate() {
        s.p[r * nc + usize::from(label)] -= 1.0;
    }
    let dz2 = &s.p[..m * nc];

    let gb2 = &mut grads[t[B2].range.clone()];
    gb2.fill(0.0);
    for row in dz2.chunks_exact(nc) {
        for (g, &d) in gb2.iter_mut().zip(row) {
            *g += d;
        }
    }
    ready(B2, grads)?;

    let gw2 = &mut grads[t[W2].range.clone()];
    gw2.fill(0.0);
    for r in 0..m {
        let row = &dz2[r * nc..(r + 1) * nc];
        for (j, &hv) in s.h[r * nh..(r + 1) * nh].iter().enumerate() {
            if hv != 0.0 {
                axpy(&mut gw2[j * nc..(j + 1) * nc], hv, row);
            }
        }
    }
    ready(W2, grads)?;

    // dLoss/dz1 = (dz2 W2^T) masked by the ReLU.
    s.dz1.resize(m * nh, 0.0);
    for r in 0..m {
        let row = &dz2[r * nc..(r + 1) * nc];
        for j in 0..nh {
            s.dz1[r * nh + j] = if s.z1[r * nh + j] > 0.0 {
                dot(row, &w2[j * nc..(j + 1) * nc])
            } else {
                0.0
            };
        }
    }
    let dz1 = &s.dz1[..m * nh];

    let gb1 = &mut grads[t[B1].range.clone()];
    gb1.fill(0.0);
    for row in dz1.chunks_exact(nh) {
        for (g, &d) in gb1.iter_mut().zip(row) {
            *g += d;
        }
    }
    ready(B1, grads)?;

    let gw1 = &mut grads[t[W1].range.clone()];
    gw1.fill(0.0);
    for r in 0..m {
        let row = &dz1[r * nh..(r + 1) * nh];
        for (k, &xv) in x[r * ni..(r + 1) * ni].iter().enumerate() {
            if xv != 0.0 {
                axpy(&mut gw1[k * nh..(k + 1) * nh], xv, row);
            }
        }
    }
    ready(W1, grads)
}

/// One step of plain SGD: `params -= scale * grads` (`scale` is the learning rate over the number
/// of samples the gradient sums).
pub fn sgd(params: &mut [f32], grads: &[f32], scale: f32) {
    for (p, &g) in params.iter_mut().zip(grads) {
        *p -= scale * g;
    }
}

/// Scores the samples `indices` of `data` in batches of 256.
pub fn evaluate(
    shape: &Shape,
    params: &[f32],
    data: &crate::data::Dataset,
    indices: Range<usize>,
    s: &mut Scratch,
) -> Score {
    let mut total = Score::default();
    let (mut x, mut y) = (Vec::new(), Vec::new());
    let all: Vec<usize> = indices.collect();
    for chunk in all.chunks(256) {
        data.gather_into(chunk, &mut x, &mut y);
        let sc = forward(shape, params, &x, &y, s);
        total.loss += sc.loss;
        total.correct += sc.correct;
    }
    total
}

/// `y += a * x`.
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> (Shape, Vec<f32>, Vec<f32>, Vec<u8>) {
        let shape = Shape {
            inputs: 5,
            hidden: 7,
            classes: 3,
        };
        let mut rng = Rng::new(11);
        let params = shape.init(&mut rng);
        let x: Vec<f32> = (0..4 * 5).map(|_| rng.unit_f32()).collect();
        (shape, params, x, vec![0, 2, 1, 2])
    }

    #[test]
    fn tensors_tile_the_flat_vector_and_backward_order_is_contiguous() {
        let shape = Shape {
            inputs: 64,
            hidden: 64,
            classes: 10,
        };
        let t = shape.tensors();
        assert_eq!(shape.len(), 4810);
        assert_eq!(t[B2].range.end, shape.len());
        for w in BACKWARD_ORDER.windows(2) {
            assert_eq!(t[w[1]].range.end, t[w[0]].range.start);
        }
        assert_eq!(t[W1].range.start, 0);
    }

    #[test]
    fn gradients_match_finite_differences() {
        let (shape, params, x, y) = tiny();
        let mut s = Scratch::default();
        forward(&shape, &params, &x, &y, &mut s);
        let mut grads = vec![0.0; shape.len()];
        let mut order = Vec::new();
        backward::<()>(&shape, &params, &x, &y, &mut s, &mut grads, &mut |t, _| {
            order.push(t);
            Ok(())
        })
        .unwrap();
        assert_eq!(order, BACKWARD_ORDER);
        let loss = |p: &[f32]| forward(&shape, p, &x, &y, &mut Scratch::default()).loss;
        for i in 0..shape.len() {
            let (mut up, mut down) = (params.clone(), params.clone());
            let eps = 1e-2;
            up[i] += eps;
            down[i] -= eps;
            let numeric = (loss(&up) - loss(&down)) / (2.0 * f64::from(eps));
            let analytic = f64::from(grads[i]);
            assert!(
                (numeric - analytic).abs() <= 2e-3 * (1.0 + analytic.abs()),
                "parameter {i}: numeric {numeric}, analytic {analytic}"
            );
        }
    }

    #[test]
    fn shard_gradients_add_up_to_the_batch_gradient() {
        let (shape, params, x, y) = tiny();
        let grad = |x: &[f32], y: &[u8]| {
            let mut s = Scratch::default();
            forward(&shape, &params, x, y, &mut s);
            let mut g = vec![0.0; shape.len()];
            backward::<()>(&shape, &params, x, y, &mut s, &mut g, &mut |_, _| Ok(())).unwrap();
            g
        };
        let whole = grad(&x, &y);
        let a = grad(&x[..5], &y[..1]);
        let b = grad(&x[5..], &y[1..]);
        let empty = grad(&[], &[]);
        assert!(empty.iter().all(|&g| g == 0.0));
        for i in 0..shape.len() {
            assert!((a[i] + b[i] - whole[i]).abs() < 1e-5, "{i}");
        }
    }

    #[test]
    fn training_lowers_the_loss() {
        let (shape, mut params, x, y) = tiny();
        let mut s = Scratch::default();
        let first = forward(&shape, &params, &x, &y, &mut s).loss;
        let mut grads = vec![0.0; shape.len()];
        for _ in 0..50 {
            forward(&shape, &params, &x, &y, &mut s);
            backward::<()>(&shape, &params, &x, &y, &mut s, &mut grads, &mut |_, _| {
                Ok(())
            })
            .unwrap();
            sgd(&mut params, &grads, 0.5 / 4.0);
        }
        let last = forward(&shape, &params, &x, &y, &mut s);
        assert!(last.loss < first / 4.0, "{first} -> {}", last.loss);
        assert_eq!(last.correct, 4);
    }
}
