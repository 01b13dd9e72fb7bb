//! Pure helpers of the MPI backend: psyne's chunk definition as MPI counts and displacements (for
//! the `v` collectives), the launcher's idea of the world size, and the message that hands the
//! native group's store to every rank. No MPI calls here, so all of it is unit tested.

use crate::error::{Error, ErrorKind, Result};
use crate::schedule::chunk_span;
use crate::{launch, names};
use ::mpi::Count;

/// `n` as an MPI count, or an error naming `what` when MPI's `int` counts cannot hold it.
pub(crate) fn to_count(n: usize, what: &str) -> Result<Count> {
    Count::try_from(n).map_err(|_| {
        Error::invalid(format!(
            "{what}: {n} elements is more than MPI's int counts can hold ({}); split the call, \
             or use the native backend",
            Count::MAX
        ))
    })
}

/// Counts and displacements of a buffer of `count` elements split into psyne's `size` chunks
/// (chunk `i` = [`chunk_span`]`(count, size, i)`): the partition of Allgatherv, Scatterv and
/// Gatherv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Partition {
    /// Elements of each chunk.
    pub counts: Vec<Count>,
    /// Offset of each chunk.
    pub displs: Vec<Count>,
}

/// The even split of `count` elements over `size` ranks as MPI counts and displacements.
pub(crate) fn chunks(count: usize, size: usize, what: &str) -> Result<Partition> {
    to_count(count, what)?;
    let mut p = Partition {
        counts: Vec::with_capacity(size),
        displs: Vec::with_capacity(size),
    };
    for i in 0..size {
        let s = chunk_span(count, size, i);
        // Both fit: the chunks tile 0..count and count fits in a Count.
        p.counts.push(to_count(s.len(), what)?);
        p.displs.push(to_count(s.start, what)?);
    }
    Ok(p)
}

/// `size` blocks of `block` elements each, back to back.
pub(crate) fn blocks(block: usize, size: usize, what: &str) -> Result<Partition> {
    let total = block
        .checked_mul(size)
        .ok_or_else(|| Error::invalid(format!("{what}: {block} x {size} elements overflows")))?;
    to_count(total, what)?;
    let c = to_count(block, what)?;
    Ok(Partition {
        counts: vec![c; size],
        displs: (0..size)
            .map(|i| to_count(i * block, what))
            .collect::<Result<_>>()?,
    })
}

/// The two sides of an Alltoallv in psyne's definition, for `rank` of `size` with an input of
/// `n` elements on every rank: rank `rank` sends chunk `j` of its input to rank `j`, and receives
/// from every rank a block of its own chunk length, stored in rank order.
pub(crate) fn all_to_all(n: usize, size: usize, rank: usize) -> Result<(Partition, Partition)> {
    let what = "all_to_all";
    let send = chunks(n, size, what)?;
    let recv = blocks(chunk_span(n, size, rank).len(), size, what)?;
    Ok((send, recv))
}

/// Refuses a world that is not the one the launcher started: MPI says `size` ranks (this one is
/// `rank`) but the environment says more. That is what a binary built against one MPI does when
/// another MPI's launcher starts it, or what any MPI does under an `srun` without an MPI plugin:
/// every process is a world of one, and no error comes.
pub(crate) fn check_world(
    get: &dyn Fn(&str) -> Option<String>,
    rank: usize,
    size: usize,
) -> Result<()> {
    let mismatch = |msg: String| Err(Error::new(ErrorKind::Bootstrap, msg));
    if let Some((name, said)) = launch::announced_world_size_with(get) {
        if said > size {
            if name == names::WORLD_SIZE {
                return mismatch(format!(
                    "MPI reports a world of {size} but {name}={said}: psyrun started this process, \
                     and psyrun does not start MPI jobs; start it with mpirun (or use the native \
                     backend under psyrun)"
                ));
            }
            if Some(name) == names::SLURM.size_var {
                return mismatch(format!(
                    "MPI reports a world of {size} but {name}={said}: srun started this process \
                     without an MPI plugin, so every process is a world of one; start it with \
                     `srun --mpi=pmix` (or `--mpi=pmi2`; `srun --mpi=list` lists them)"
                ));
            }
            return mismatch(format!(
                "MPI reports a world of {size} but {name}={said}: this binary was built against a \
                 different MPI than the mpirun that started it, so every process is a world of \
                 one; start it with the mpirun of the MPI it was built with (`mpicc -show`), or \
                 rebuild (`cargo clean -p mpi-sys`; set MPICC to choose the MPI)"
            ));
        }
    }
    let pmix = names::PMIX.rank_var;
    if let Some(r) = get(pmix).and_then(|v| v.trim().parse::<usize>().ok()) {
        if r >= size {
            return mismatch(format!(
                "MPI reports a world of {size} (this is rank {rank}) but {pmix}={r}: this \
                 binary was built against a different MPI than the mpirun that started it; start \
                 it with the mpirun of the MPI it was built with, or rebuild against that one"
            ));
        }
    }
    Ok(())
}

/// What rank 0 broadcasts to hand out the native group's store: `"ok ADDR SECRET_HEX"`, or
/// `"err MESSAGE"` when it could not start one (so the others fail too instead of waiting).
pub(crate) fn store_message(store: std::result::Result<(&str, &str), &str>) -> String {
    match store {
        Ok((addr, secret)) => format!("ok {addr} {secret}"),
        Err(msg) => format!("err {msg}"),
    }
}

/// Parses [`store_message`]: the store's address and the secret's hex form.
pub(crate) fn parse_store_message(text: &str) -> Result<(String, String)> {
    let bad = || {
        Error::new(
            ErrorKind::Bootstrap,
            format!(
                "native_group: malformed store message from rank 0 ({} bytes); are all ranks \
                 the same binary?",
                text.len()
            ),
        )
    };
    match text.split_once(' ') {
        Some(("ok", rest)) => {
            let (addr, secret) = rest.split_once(' ').ok_or_else(bad)?;
            if addr.is_empty() || secret.is_empty() || secret.contains(' ') {
                return Err(bad());
            }
            Ok((addr.to_string(), secret.to_string()))
        }
        Some(("err", msg)) => Err(Error::new(
            ErrorKind::Bootstrap,
            format!("native_group: rank 0 could not start the group's store: {msg}"),
        )),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn chunk_partitions_tile_uneven_counts_like_chunk_span() {
        for size in 1..=9 {
            for count in [0, 1, 2, size - 1, size, size + 1, 2 * size + 3, 1001] {
                let p = chunks(count, size, "t").unwrap();
                assert_eq!(p.counts.len(), size);
                let mut next = 0;
                for i in 0..size {
                    let s = chunk_span(count, size, i);
                    assert_eq!(p.displs[i] as usize, next, "count {count} size {size}");
                    assert_eq!(p.counts[i] as usize, s.len());
                    next += p.counts[i] as usize;
                }
                assert_eq!(next, count);
                // Chunks differ by at most one, longer ones first.
                assert!(p
                    .counts
                    .windows(2)
                    .all(|w| w[0] == w[1] || w[0] == w[1] + 1));
            }
        }
    }

    #[test]
    fn all_to_all_sides_match_pairwise() {
        // What rank i sends to rank j must be exactly what rank j expects from rank i.
        for size in 1..=7 {
            for n in [0, 1, size - 1, size + 1, 3 * size + 2] {
                let layouts: Vec<_> = (0..size).map(|r| all_to_all(n, size, r).unwrap()).collect();
                for i in 0..size {
                    for j in 0..size {
                        assert_eq!(
                            layouts[i].0.counts[j], layouts[j].1.counts[i],
                            "n {n} size {size}: {i} -> {j}"
                        );
                    }
                    let (send, recv) = &layouts[i];
                    let mine = chunk_span(n, size, i).len();
                    assert_eq!(
                        recv.displs,
                        (0..size).map(|k| (k * mine) as Count).collect::<Vec<_>>()
                    );
                    assert_eq!(send.counts.iter().map(|&c| c as usize).sum::<usize>(), n);
                }
            }
        }
    }

    #[test]
    fn counts_beyond_mpi_int_are_refused() {
        let err = to_count(1 << 31, "all_reduce").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains("all_reduce"), "{err}");
        assert!(chunks(usize::MAX, 2, "x").is_err());
        assert!(blocks(usize::MAX, 2, "x").is_err());
        assert_eq!(to_count(5, "x").unwrap(), 5);
    }

    #[test]
    fn singleton_worlds_started_by_another_launcher_are_refused() {
        // Open MPI's mpirun started 4 processes of a binary built against another MPI.
        let e = check_world(&env(&[("OMPI_COMM_WORLD_SIZE", "4")]), 0, 1).unwrap_err();
        assert!(e.message().contains("different MPI"), "{e}");
        assert!(e.message().contains("OMPI_COMM_WORLD_SIZE=4"), "{e}");
        // MPICH's Hydra, or Slurm.
        let e = check_world(&env(&[("PMI_SIZE", "3")]), 0, 1).unwrap_err();
        assert!(e.message().contains("different MPI"), "{e}");
        let e = check_world(&env(&[("PMIX_RANK", "2")]), 0, 1).unwrap_err();
        assert!(e.message().contains("PMIX_RANK=2"), "{e}");
        // psyrun.
        let e = check_world(&env(&[("PSY_WORLD_SIZE", "2")]), 0, 1).unwrap_err();
        assert!(e.message().contains("mpirun"), "{e}");
        // srun without an MPI plugin.
        let e = check_world(&env(&[("SLURM_STEP_NUM_TASKS", "2")]), 0, 1).unwrap_err();
        assert!(e.message().contains("srun --mpi=pmix"), "{e}");
        // An MPI launcher inside a Slurm step, or psyrun's ranks in one, say their own size.
        check_world(
            &env(&[("OMPI_COMM_WORLD_SIZE", "2"), ("SLURM_STEP_NUM_TASKS", "1")]),
            1,
            2,
        )
        .unwrap();
        let e = check_world(
            &env(&[("PSY_WORLD_SIZE", "2"), ("SLURM_STEP_NUM_TASKS", "1")]),
            0,
            1,
        )
        .unwrap_err();
        assert!(e.message().contains("psyrun"), "{e}");
        // The right worlds.
        check_world(&env(&[]), 0, 1).unwrap();
        check_world(
            &env(&[("OMPI_COMM_WORLD_SIZE", "4"), ("PMIX_RANK", "3")]),
            3,
            4,
        )
        .unwrap();
        // Open MPI's own size wins over an outer launcher's.
        check_world(
            &env(&[("OMPI_COMM_WORLD_SIZE", "4"), ("PMI_SIZE", "8")]),
            0,
            4,
        )
        .unwrap();
        assert_eq!(
            launch::announced_world_size_with(&env(&[("PMI_SIZE", " 6 ")])),
            Some(("PMI_SIZE", 6))
        );
        assert_eq!(
            launch::announced_world_size_with(&env(&[("PMI_SIZE", "x")])),
            None
        );
    }

    #[test]
    fn store_messages_round_trip_and_carry_rank_0_failures() {
        let m = store_message(Ok(("127.0.0.1:4000", "abcd")));
        assert_eq!(
            parse_store_message(&m).unwrap(),
            ("127.0.0.1:4000".to_string(), "abcd".to_string())
        );
        let e = parse_store_message(&store_message(Err("port in use"))).unwrap_err();
        assert!(
            e.message().contains("rank 0") && e.message().contains("port in use"),
            "{e}"
        );
        for bad in ["", "ok", "ok addr", "ok  x", "hello there"] {
            assert!(parse_store_message(bad).is_err(), "{bad:?}");
        }
    }
}
