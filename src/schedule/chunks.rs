//! How `count` elements are split into `parts` nearly equal, contiguous chunks.

use super::Span;

/// Chunk `i` of `count` elements split into `parts` parts: the first `count % parts` chunks get one
/// element more than the others, so uneven counts need no padding. `parts` must be at least 1.
pub fn chunk_span(count: usize, parts: usize, i: usize) -> Span {
    debug_assert!(parts > 0 && i < parts);
    let base = count / parts;
    let extra = count % parts;
    let start = i * base + i.min(extra);
    let len = base + usize::from(i < extra);
    start..start + len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_tile_the_range_in_order() {
        for count in 0..40 {
            for parts in 1..18 {
                let mut next = 0;
                for i in 0..parts {
                    let s = chunk_span(count, parts, i);
                    assert_eq!(s.start, next);
                    assert!(s.len() == count / parts || s.len() == count / parts + 1);
                    next = s.end;
                }
                assert_eq!(next, count);
            }
        }
    }
}
