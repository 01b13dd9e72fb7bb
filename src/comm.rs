//! [`Communicator`]: the collectives, declared once as a trait, implemented by the native
//! [`Group`](crate::Group) and (with the `mpi` feature) by an MPI communicator, so programs,
//! benchmarks and checks run the same code on either.

use crate::dtype::Element;
use crate::error::Result;
use crate::group::work::Work;
use crate::reduce::ReduceOp;
use std::ops::Range;

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

/// Refuses a root outside the group; `what` names the call. Shared by every backend.
pub(crate) fn check_root(size: usize, what: &str, root: usize) -> Result<()> {
    if root >= size {
        return Err(crate::Error::invalid(format!(
            "{what}: root {root} is out of range; the group has ranks 0..{size}"
        )));
    }
    Ok(())
}

/// Refuses a buffer `name` of call `what` that holds `got` elements instead of `want`.
pub(crate) fn check_len(what: &str, name: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(crate::Error::invalid(format!(
            "{what}: `{name}` holds {got} elements but must hold {want} (chunks are the even \
             split of the total count, the first ones one longer)"
        )));
    }
    Ok(())
}

/// Refuses an all-gather whose `local` is not this rank's chunk of `out`; returns that chunk's
/// span in `out`.
pub(crate) fn check_all_gather(
    rank: usize,
    size: usize,
    local: usize,
    out: usize,
) -> Result<Range<usize>> {
    let span = crate::schedule::chunk_span(out, size, rank);
    let mine = span.len();
    if local != mine {
        return Err(crate::Error::invalid(format!(
            "all_gather_into: rank {rank} passed {local} elements but an output of {out} elements \
             over {size} ranks gives it {mine} (chunks split as evenly as possible, the first \
             ones larger)"
        )));
    }
    Ok(span)
}

/// Refuses a reduce-scatter whose `out` is not this rank's chunk of `input`; returns that
/// chunk's span in `input`.
pub(crate) fn check_reduce_scatter(
    rank: usize,
    size: usize,
    input: usize,
    out: usize,
) -> Result<Range<usize>> {
    let span = crate::schedule::chunk_span(input, size, rank);
    let mine = span.len();
    if out != mine {
        return Err(crate::Error::invalid(format!(
            "reduce_scatter_into: rank {rank} gets {mine} of the {input} input elements but its \
             output holds {out}"
        )));
    }
    Ok(span)
}

/// Divides a sum by the group's `size` where `op` is [`ReduceOp::Avg`].
pub(crate) fn finish_avg<T: Element>(op: ReduceOp, size: usize, buf: &mut [T]) {
    if op == ReduceOp::Avg {
        for x in buf {
            *x = x.div_count(size);
        }
    }
}

/// The collectives of a group of ranks: the one declaration of every collective psyne has.
///
/// A backend implements the required core: the in-place and `_into` forms, which allocate
/// nothing, and [`Communicator::submit`], how it runs a call in the background. The out-of-place
/// forms (returning a `Vec`) and the non-blocking `_async` forms are provided on top of them, so
/// [`Group`](crate::Group), the MPI backend (`psyne::mpi::MpiComm`, feature `mpi`) and any wrapper of either get them all.
/// Bring the trait in scope to call them: `use psyne::Communicator;` (or `use psyne::prelude::*`).
///
/// Every collective must be called by every rank of the group, in the same order, with matching
/// arguments. "Chunk `i`" of a count is the even split into `size()` parts, the first
/// `count % size()` one element longer ([`crate::schedule::chunk_span`]).
///
/// The `_async` forms take owned buffers and return a [`Work`] that gives the result back
/// ([`Work::wait`], [`Work::test`], or `.await`). Calls keep the order in which they were issued,
/// blocking ones included.
pub trait Communicator {
    /// A short name of the backend (`native`, `mpi`).
    fn backend(&self) -> &'static str;
    /// This rank, `0..size()`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// Every rank's `buf` becomes the element-wise reduction of all ranks' buffers.
    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()>;
    /// Copies `root`'s `buf` into every other rank's `buf` (all of the same length).
    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()>;
    /// `root`'s `buf` becomes the reduction of all ranks' buffers; other ranks' buffers are left
    /// as they were.
    fn reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: usize) -> Result<()>;
    /// All-gather into `out`, whose length is the total: rank `i` contributes chunk `i` of `out`
    /// split as evenly as possible (the first `out.len() % size` chunks one longer), so lengths may
    /// differ by one between ranks.
    fn all_gather_into<T: Element>(&self, local: &[T], out: &mut [T]) -> Result<()>;
    /// [`Communicator::reduce_scatter`] into a caller's buffer of the right length.
    fn reduce_scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        op: ReduceOp,
    ) -> Result<()>;
    /// [`Communicator::scatter`] into a caller's buffer of this rank's chunk length.
    fn scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        count: usize,
        root: usize,
    ) -> Result<()>;
    /// [`Communicator::gather`] into a caller's buffer: `count` elements on the root, ignored
    /// elsewhere.
    fn gather_into<T: Element>(
        &self,
        local: &[T],
        out: &mut [T],
        count: usize,
        root: usize,
    ) -> Result<()>;
    /// [`Communicator::all_to_all`] into a caller's buffer of `size` × this rank's chunk length.
    fn all_to_all_into<T: Element>(&self, input: &[T], out: &mut [T]) -> Result<()>;
    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()>;
    /// Sends `buf` to rank `dst`, which must call [`Communicator::recv`] with a buffer of the same
    /// length and type. Messages between two ranks arrive in the order they were sent.
    fn send<T: Element>(&self, buf: &[T], dst: usize) -> Result<()>;
    /// Receives into `buf` the next message rank `src` sent to this rank.
    fn recv<T: Element>(&self, buf: &mut [T], src: usize) -> Result<()>;

    /// Issues a call now and runs `f` in its turn, on this communicator, returning its handle:
    /// what every `_async` form is made of. `what` names the call in errors. The calls `f` makes
    /// on the communicator it is handed run in this call's turn (they must not be `_async`).
    ///
    /// [`Group`](crate::Group) runs `f` on its worker thread, in the order calls were issued; a backend with no
    /// background engine (MPI) runs it at once and returns a finished [`Work`].
    fn submit<R, F>(&self, what: &str, f: F) -> Work<R>
    where
        R: Send + 'static,
        F: FnOnce(&Self) -> Result<R> + Send + 'static;

    /// This rank's chunk length when `count` elements are split evenly over the group.
    fn chunk_len(&self, count: usize) -> usize {
        crate::schedule::chunk_span(count, self.size(), self.rank()).len()
    }

    /// Every rank gets the concatenation of all ranks' `local` (all of the same length), in rank
    /// order.
    fn all_gather<T: Element>(&self, local: &[T]) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); local.len() * self.size()];
        self.all_gather_into(local, &mut out)?;
        Ok(out)
    }

    /// Reduces all ranks' `input` and gives each rank its chunk of the result (chunk `i` of an
    /// even split, as in [`Communicator::all_gather_into`]).
    fn reduce_scatter<T: Element>(&self, input: &[T], op: ReduceOp) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.chunk_len(input.len())];
        self.reduce_scatter_into(input, &mut out, op)?;
        Ok(out)
    }

    /// Splits `root`'s `input` of `count` elements into chunks (an even split) and gives rank `i`
    /// chunk `i`. Every rank passes the same `count`; non-roots may pass an empty `input`.
    fn scatter<T: Element>(&self, input: &[T], count: usize, root: usize) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.chunk_len(count)];
        self.scatter_into(input, &mut out, count, root)?;
        Ok(out)
    }

    /// The inverse of [`Communicator::scatter`]: rank `i` passes chunk `i` of a total of `count`
    /// elements; `root` gets all of them in rank order, the others an empty vector.
    fn gather<T: Element>(&self, local: &[T], count: usize, root: usize) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); if self.rank() == root { count } else { 0 }];
        self.gather_into(local, &mut out, count, root)?;
        Ok(out)
    }

    /// Chunk `j` of this rank's `input` (an even split into `size` chunks) goes to rank `j`; the
    /// result is the chunks this rank receives, in the order of the ranks that sent them
    /// (`size` blocks of this rank's chunk length).
    fn all_to_all<T: Element>(&self, input: &[T]) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.size() * self.chunk_len(input.len())];
        self.all_to_all_into(input, &mut out)?;
        Ok(out)
    }

    /// Non-blocking [`Communicator::all_reduce`]: the handle gives the buffer back when done.
    fn all_reduce_async<T: Element>(&self, mut buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        self.submit("all_reduce_async", move |c| {
            c.all_reduce(&mut buf, op).map(|_| buf)
        })
    }

    /// Non-blocking [`Communicator::broadcast`].
    fn broadcast_async<T: Element>(&self, mut buf: Vec<T>, root: usize) -> Work<Vec<T>> {
        self.submit("broadcast_async", move |c| {
            c.broadcast(&mut buf, root).map(|_| buf)
        })
    }

    /// Non-blocking [`Communicator::reduce`]: the handle gives the buffer back (the result on
    /// `root`).
    fn reduce_async<T: Element>(&self, mut buf: Vec<T>, op: ReduceOp, root: usize) -> Work<Vec<T>> {
        self.submit("reduce_async", move |c| {
            c.reduce(&mut buf, op, root).map(|_| buf)
        })
    }

    /// Non-blocking [`Communicator::all_gather`].
    fn all_gather_async<T: Element>(&self, local: Vec<T>) -> Work<Vec<T>> {
        self.submit("all_gather_async", move |c| c.all_gather(&local))
    }

    /// Non-blocking [`Communicator::reduce_scatter`].
    fn reduce_scatter_async<T: Element>(&self, input: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        self.submit("reduce_scatter_async", move |c| {
            c.reduce_scatter(&input, op)
        })
    }

    /// Non-blocking [`Communicator::scatter`].
    fn scatter_async<T: Element>(&self, input: Vec<T>, count: usize, root: usize) -> Work<Vec<T>> {
        self.submit("scatter_async", move |c| c.scatter(&input, count, root))
    }

    /// Non-blocking [`Communicator::gather`].
    fn gather_async<T: Element>(&self, local: Vec<T>, count: usize, root: usize) -> Work<Vec<T>> {
        self.submit("gather_async", move |c| c.gather(&local, count, root))
    }

    /// Non-blocking [`Communicator::all_to_all`].
    fn all_to_all_async<T: Element>(&self, input: Vec<T>) -> Work<Vec<T>> {
        self.submit("all_to_all_async", move |c| c.all_to_all(&input))
    }

    /// Non-blocking [`Communicator::barrier`].
    fn barrier_async(&self) -> Work<()> {
        self.submit("barrier_async", |c| c.barrier())
    }

    /// Non-blocking [`Communicator::send`]: the handle gives the buffer back once it is sent.
    fn send_async<T: Element>(&self, buf: Vec<T>, dst: usize) -> Work<Vec<T>> {
        self.submit("send_async", move |c| c.send(&buf, dst).map(|_| buf))
    }

    /// Non-blocking [`Communicator::recv`]: the handle gives the buffer back holding the message.
    fn recv_async<T: Element>(&self, mut buf: Vec<T>, src: usize) -> Work<Vec<T>> {
        self.submit("recv_async", move |c| c.recv(&mut buf, src).map(|_| buf))
    }
}
