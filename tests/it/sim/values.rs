//! The inputs the schedule tests give their ranks.

use psyne::ReduceOp;

/// The input value of `rank` at work-buffer index `index`: distinct across ranks and indices
/// and of both signs, so a lost, doubled or misplaced contribution changes the result. For
/// `Prod` the values are 1, 2 or -1 (no overflow over 17 ranks, yet every rank matters).
pub fn value(rank: usize, index: usize, op: ReduceOp) -> i64 {
    if op == ReduceOp::Prod {
        [1, 2, -1][(rank * 7 + index * 3 + rank * index) % 3]
    } else {
        ((rank * 7919 + index * 104_729) % 20_011) as i64 - 10_000
    }
}
