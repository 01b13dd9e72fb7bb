//! [`Communicator`]: the collectives as a trait, implemented by the native [`Group`] and (with the
//! `mpi` feature) by an MPI communicator, so benchmarks and checks run the same code on either.

use crate::dtype::Element;
use crate::error::Result;
use crate::group::Group;
use crate::reduce::ReduceOp;

/// Refuses a point-to-point peer that is out of range or this rank itself; `what` is `send to`
/// or `receive from`. Shared by every backend so their errors read the same.
pub(crate) fn check_peer(rank: usize, size: usize, peer: usize, what: &str) -> Result<()> {
    if peer >= size {
        return Err(crate::Error::invalid(format!(
            "cannot {what} rank {peer}: the group has ranks 0..{size}"
        )));
    }
    if peer == rank {
        return Err(crate::Error::invalid(format!(
            "rank {peer} cannot {what} itself; copy the buffer locally instead"
        )));
    }
    Ok(())
}

/// The collectives of a group of ranks, in their allocation-free forms.
///
/// Semantics are those of [`Group`]: "chunk `i`" of a count is the even split into `size()` parts,
/// the first `count % size()` one element longer.
pub trait Communicator {
    /// A short name of the backend (`native`, `mpi`).
    fn backend(&self) -> &'static str;
    /// This rank.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// See [`Group::all_reduce`].
    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()>;
    /// See [`Group::broadcast`].
    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()>;
    /// See [`Group::reduce`].
    fn reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: usize) -> Result<()>;
    /// See [`Group::all_gather_into`].
    fn all_gather_into<T: Element>(&self, local: &[T], out: &mut [T]) -> Result<()>;
    /// See [`Group::reduce_scatter_into`].
    fn reduce_scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        op: ReduceOp,
    ) -> Result<()>;
    /// See [`Group::scatter_into`].
    fn scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        count: usize,
        root: usize,
    ) -> Result<()>;
    /// See [`Group::gather_into`].
    fn gather_into<T: Element>(
        &self,
        local: &[T],
        out: &mut [T],
        count: usize,
        root: usize,
    ) -> Result<()>;
    /// See [`Group::all_to_all_into`].
    fn all_to_all_into<T: Element>(&self, input: &[T], out: &mut [T]) -> Result<()>;
    /// See [`Group::barrier`].
    fn barrier(&self) -> Result<()>;
    /// See [`Group::send`].
    fn send<T: Element>(&self, buf: &[T], dst: usize) -> Result<()>;
    /// See [`Group::recv`].
    fn recv<T: Element>(&self, buf: &mut [T], src: usize) -> Result<()>;
}

/// Implements every method of [`Communicator`] but `backend` by forwarding to a target chosen by `$via`, a
/// macro called as `$via!(self, c => expression using c)`: the one list of the collectives'
/// signatures besides the trait itself. Method-call syntax picks a type's inherent method first,
/// so [`Group`] forwards to its own collectives, and an enum of backends to each variant's.
#[doc(hidden)]
#[macro_export]
macro_rules! forward_communicator {
    ($via:ident) => {
        fn rank(&self) -> usize {
            $via!(self, c => c.rank())
        }
        fn size(&self) -> usize {
            $via!(self, c => c.size())
        }
        fn all_reduce<T: $crate::Element>(&self, buf: &mut [T], op: $crate::ReduceOp) -> $crate::Result<()> {
            $via!(self, c => c.all_reduce(buf, op))
        }
        fn broadcast<T: $crate::Element>(&self, buf: &mut [T], root: usize) -> $crate::Result<()> {
            $via!(self, c => c.broadcast(buf, root))
        }
        fn reduce<T: $crate::Element>(
            &self,
            buf: &mut [T],
            op: $crate::ReduceOp,
            root: usize,
        ) -> $crate::Result<()> {
            $via!(self, c => c.reduce(buf, op, root))
        }
        fn all_gather_into<T: $crate::Element>(&self, local: &[T], out: &mut [T]) -> $crate::Result<()> {
            $via!(self, c => c.all_gather_into(local, out))
        }
        fn reduce_scatter_into<T: $crate::Element>(
            &self,
            input: &[T],
            out: &mut [T],
            op: $crate::ReduceOp,
        ) -> $crate::Result<()> {
            $via!(self, c => c.reduce_scatter_into(input, out, op))
        }
        fn scatter_into<T: $crate::Element>(
            &self,
            input: &[T],
            out: &mut [T],
            count: usize,
            root: usize,
        ) -> $crate::Result<()> {
            $via!(self, c => c.scatter_into(input, out, count, root))
        }
        fn gather_into<T: $crate::Element>(
            &self,
            local: &[T],
            out: &mut [T],
            count: usize,
            root: usize,
        ) -> $crate::Result<()> {
            $via!(self, c => c.gather_into(local, out, count, root))
        }
        fn all_to_all_into<T: $crate::Element>(&self, input: &[T], out: &mut [T]) -> $crate::Result<()> {
            $via!(self, c => c.all_to_all_into(input, out))
        }
        fn barrier(&self) -> $crate::Result<()> {
            $via!(self, c => c.barrier())
        }
        fn send<T: $crate::Element>(&self, buf: &[T], dst: usize) -> $crate::Result<()> {
            $via!(self, c => c.send(buf, dst))
        }
        fn recv<T: $crate::Element>(&self, buf: &mut [T], src: usize) -> $crate::Result<()> {
            $via!(self, c => c.recv(buf, src))
        }
    };
}

/// `$via` for a type whose inherent methods are the collectives.
macro_rules! inherent {
    ($s:ident, $c:ident => $e:expr) => {{
        let $c = $s;
        $e
    }};
}

impl Communicator for Group {
    fn backend(&self) -> &'static str {
        "native"
    }
    forward_communicator!(inherent);
}
