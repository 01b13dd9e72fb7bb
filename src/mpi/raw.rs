//! The MPI calls the `mpi` crate has no safe form for: the in-place collectives (`MPI_IN_PLACE`)
//! and `MPI_Reduce_scatter` with per-rank counts. Each takes Rust slices, so lengths and pointers
//! always agree; the MPI handles come from the `mpi` crate.

use ::mpi::collective::SystemOperation;
use ::mpi::datatype::Equivalence;
use ::mpi::ffi;
use ::mpi::raw::AsRaw;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::Communicator as _;
use ::mpi::Count;
use std::os::raw::c_void;

use super::layout::to_count;
use crate::error::{Error, Result};

extern "C" {
    /// `MPI_IN_PLACE` of the MPI library psyne was built against (src/mpi/in_place.c).
    fn psyne_mpi_in_place() -> *mut c_void;
}

/// `MPI_IN_PLACE`.
fn in_place() -> *const c_void {
    // SAFETY: the C function takes nothing and returns a constant (a macro's value); it touches
    // no memory and needs no MPI state.
    unsafe { psyne_mpi_in_place() }
}

/// `MPI_Allreduce(MPI_IN_PLACE, buf, ...)`: every rank's `buf` becomes the reduction (every rank
/// passes the same length).
pub(super) fn all_reduce_in_place<W: Equivalence>(
    comm: &SimpleCommunicator,
    buf: &mut [W],
    op: SystemOperation,
) -> Result<()> {
    let count = to_count(buf.len(), "all_reduce")?;
    // SAFETY: `buf` is a live, exclusively borrowed buffer of `count` elements of the MPI type
    // `W` describes, so MPI reads and writes only inside it; MPI_IN_PLACE tells it the input is
    // `buf` itself. The communicator, datatype and op handles are valid for the call. Errors
    // abort the job (MPI's default handler), so the return code carries nothing to handle.
    unsafe {
        ffi::MPI_Allreduce(
            in_place(),
            buf.as_mut_ptr().cast(),
            count,
            W::equivalent_datatype().as_raw(),
            op.as_raw(),
            comm.as_raw(),
        );
    }
    Ok(())
}

/// `MPI_Reduce(MPI_IN_PLACE, buf, ..., root)` on the root: `buf` is the root's contribution and
/// receives the reduction. The other ranks call the ordinary form (`Root::reduce_into`).
pub(super) fn reduce_in_place_at_root<W: Equivalence>(
    comm: &SimpleCommunicator,
    buf: &mut [W],
    op: SystemOperation,
    root: ::mpi::Rank,
) -> Result<()> {
    let count = to_count(buf.len(), "reduce")?;
    // SAFETY: as in `all_reduce_in_place`: `buf` holds `count` elements of `W`'s MPI type and is
    // exclusively borrowed for the call; `root` names a rank of `comm` (the caller checked).
    unsafe {
        ffi::MPI_Reduce(
            in_place(),
            buf.as_mut_ptr().cast(),
            count,
            W::equivalent_datatype().as_raw(),
            op.as_raw(),
            root,
            comm.as_raw(),
        );
    }
    Ok(())
}

/// `MPI_Reduce_scatter(input, out, counts, ...)`: rank `i` receives the reduction of the
/// `counts[i]` elements at offset `counts[..i].sum()` of every rank's `input`.
/// `counts` must have one entry per rank, sum to `input.len()`, and give this rank
/// `out.len()`; anything else is refused before MPI is called.
pub(super) fn reduce_scatter<W: Equivalence>(
    comm: &SimpleCommunicator,
    input: &[W],
    out: &mut [W],
    counts: &[Count],
    op: SystemOperation,
) -> Result<()> {
    let total: usize = counts
        .iter()
        .map(|&c| usize::try_from(c).unwrap_or(0))
        .sum();
    let mine = usize::try_from(comm.rank())
        .ok()
        .and_then(|r| counts.get(r))
        .and_then(|&c| usize::try_from(c).ok());
    if counts.len() != comm.size() as usize || total != input.len() || mine != Some(out.len()) {
        return Err(Error::invalid(format!(
            "internal error: reduce_scatter counts {counts:?} do not fit an input of {} and an \
             output of {} elements",
            input.len(),
            out.len()
        )));
    }
    // SAFETY: checked above: `counts` has one entry per rank, `input` holds exactly their sum
    // (MPI reads it all) and `out` holds exactly this rank's count (MPI writes it all); the
    // buffers do not overlap (one is shared, the other exclusive) and live across the call.
    unsafe {
        ffi::MPI_Reduce_scatter(
            input.as_ptr().cast(),
            out.as_mut_ptr().cast(),
            counts.as_ptr(),
            W::equivalent_datatype().as_raw(),
            op.as_raw(),
            comm.as_raw(),
        );
    }
    Ok(())
}
