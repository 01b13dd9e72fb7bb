//! Gradient buckets, planned purely: which tensors travel together in one all-reduce.
//!
//! Tensors are taken in the order backpropagation completes them and packed greedily: a tensor
//! joins the open bucket unless that would take the bucket past the cap (and the bucket already
//! holds something), in which case the bucket is closed and the tensor opens the next one. A tensor
//! larger than the cap travels alone (tensors are never split), and a cap of 0 gives one bucket per
//! tensor. This is the rule of PyTorch's DistributedDataParallel (`bucket_cap_mb`).

use std::ops::Range;

/// Bytes per gradient element (`f32`).
pub const ELEMENT_BYTES: usize = 4;

/// One bucket: the tensors in it (in the order they complete) and the contiguous range of the
/// flat gradient vector they cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Tensor indices, in completion order.
    pub tensors: Vec<usize>,
    /// Its elements in the flat gradient vector.
    pub range: Range<usize>,
}

impl Bucket {
    /// The bucket's size in bytes.
    pub fn bytes(&self) -> usize {
        self.range.len() * ELEMENT_BYTES
    }
}

/// Packs `tensors` (index and range, in completion order) into buckets of at most `cap_bytes`
/// (see the module documentation). A tensor that is not adjacent to the open bucket in the flat
/// vector starts a new bucket, so every bucket is one slice.
pub fn plan(tensors: &[(usize, Range<usize>)], cap_bytes: usize) -> Vec<Bucket> {
    let mut buckets: Vec<Bucket> = Vec::new();
    for (index, range) in tensors {
        let joins = buckets.last().is_some_and(|b| {
            let adjacent = range.end == b.range.start || range.start == b.range.end;
            adjacent && (b.range.len() + range.len()) * ELEMENT_BYTES <= cap_bytes
        });
        match buckets.last_mut() {
            Some(b) if joins => {
                b.tensors.push(*index);
                b.range = b.range.start.min(range.start)..b.range.end.max(range.end);
            }
            _ => buckets.push(Bucket {
                tensors: vec![*index],
                range: range.clone(),
            }),
        }
    }
    buckets
}

/// `--bucket-mb` as bytes: `mb` MiB (2^20 bytes, as PyTorch counts `bucket_cap_mb`), rounded down.
pub fn cap_bytes(mb: f64) -> usize {
    (mb * (1u64 << 20) as f64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Shape, BACKWARD_ORDER};

    fn backward_tensors(hidden: usize) -> Vec<(usize, Range<usize>)> {
        let t = Shape {
            inputs: 64,
            hidden,
            classes: 10,
        }
        .tensors();
        BACKWARD_ORDER
            .iter()
            .map(|&i| (i, t[i].range.clone()))
            .collect()
    }

    fn names(b: &[Bucket]) -> Vec<Vec<usize>> {
        b.iter().map(|b| b.tensors.clone()).collect()
    }

    #[test]
    fn a_big_cap_gives_one_bucket_and_zero_gives_one_per_tensor() {
        let t = backward_tensors(64);
        let one = plan(&t, cap_bytes(1.0));
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].range, 0..4810);
        assert_eq!(one[0].tensors, BACKWARD_ORDER);
        let each = plan(&t, 0);
        assert_eq!(names(&each), vec![vec![3], vec![2], vec![1], vec![0]]);
    }

    #[test]
    fn buckets_close_before_the_cap_and_big_tensors_travel_alone() {
        // hidden 1024: b2 40 B, W2 40 KiB, b1 4 KiB, W1 256 KiB.
        let t = backward_tensors(1024);
        let b = plan(&t, cap_bytes(0.1));
        assert_eq!(names(&b), vec![vec![3, 2, 1], vec![0]]);
        assert!(b[0].bytes() <= cap_bytes(0.1));
        // hidden 64 with a 4 KiB cap: b2 + W2 + b1 = 2856 B, then W1 (16 KiB) alone.
        let b = plan(&backward_tensors(64), 4096);
        assert_eq!(names(&b), vec![vec![3, 2, 1], vec![0]]);
        assert_eq!(b[1].range, 0..4096);
        assert_eq!(b[0].range, 4096..4810);
    }

    #[test]
    fn buckets_tile_the_vector_for_any_cap() {
        for hidden in [1, 3, 64, 1024] {
            let t = backward_tensors(hidden);
            let total = t.iter().map(|(_, r)| r.len()).sum::<usize>();
            for cap in [0, 1, 4, 100, 4096, 40_000, 1 << 20] {
                let b = plan(&t, cap);
                let mut covered: Vec<Range<usize>> = b.iter().map(|b| b.range.clone()).collect();
                covered.sort_by_key(|r| r.start);
                assert_eq!(covered.first().map(|r| r.start), Some(0));
                assert_eq!(covered.last().map(|r| r.end), Some(total));
                for w in covered.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                for bucket in &b {
                    assert!(bucket.tensors.len() == 1 || bucket.bytes() <= cap);
                }
            }
        }
    }

    #[test]
    fn fractional_megabytes() {
        assert_eq!(cap_bytes(0.0), 0);
        assert_eq!(cap_bytes(1.0), 1 << 20);
        assert_eq!(cap_bytes(0.004), 4194);
    }
}
