//! The non-blocking form of every collective: it takes owned buffers, runs in its turn on the
//! group's worker thread, and returns a [`Work`] handle that gives the result back (`wait`,
//! `test`, or `.await`). Calls keep the order in which they were issued, blocking ones included.

use super::{ops, Group, Work};
use crate::dtype::Element;
use crate::reduce::ReduceOp;

impl Group {
    /// Non-blocking [`Group::all_reduce`]: the handle gives the buffer back when done.
    pub fn all_reduce_async<T: Element>(&self, mut buf: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        let algo = self.algo;
        self.spawn("all_reduce_async", move |c| {
            ops::all_reduce(c, algo, &mut buf, op).map(|_| buf)
        })
    }

    /// Non-blocking [`Group::broadcast`].
    pub fn broadcast_async<T: Element>(&self, mut buf: Vec<T>, root: usize) -> Work<Vec<T>> {
        let algo = self.algo;
        self.spawn("broadcast_async", move |c| {
            ops::broadcast(c, algo, &mut buf, root).map(|_| buf)
        })
    }

    /// Non-blocking [`Group::reduce`]: the handle gives the buffer back (the result on `root`).
    pub fn reduce_async<T: Element>(
        &self,
        mut buf: Vec<T>,
        op: ReduceOp,
        root: usize,
    ) -> Work<Vec<T>> {
        let algo = self.algo;
        self.spawn("reduce_async", move |c| {
            ops::reduce(c, algo, &mut buf, op, root).map(|_| buf)
        })
    }

    /// Non-blocking [`Group::all_gather`].
    pub fn all_gather_async<T: Element>(&self, local: Vec<T>) -> Work<Vec<T>> {
        let (algo, size) = (self.algo, self.size());
        self.spawn("all_gather_async", move |c| {
            let mut out = vec![T::zeroed(); local.len() * size];
            ops::all_gather_into(c, algo, &local, &mut out).map(|_| out)
        })
    }

    /// Non-blocking [`Group::reduce_scatter`].
    pub fn reduce_scatter_async<T: Element>(&self, input: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        let algo = self.algo;
        let out_len = self.chunk_len(input.len());
        self.spawn("reduce_scatter_async", move |c| {
            let mut out = vec![T::zeroed(); out_len];
            ops::reduce_scatter_into(c, algo, &input, &mut out, op).map(|_| out)
        })
    }

    /// Non-blocking [`Group::scatter`].
    pub fn scatter_async<T: Element>(
        &self,
        input: Vec<T>,
        count: usize,
        root: usize,
    ) -> Work<Vec<T>> {
        let algo = self.algo;
        let out_len = self.chunk_len(count);
        self.spawn("scatter_async", move |c| {
            let mut out = vec![T::zeroed(); out_len];
            ops::scatter_into(c, algo, &input, &mut out, count, root).map(|_| out)
        })
    }

    /// Non-blocking [`Group::gather`].
    pub fn gather_async<T: Element>(
        &self,
        local: Vec<T>,
        count: usize,
        root: usize,
    ) -> Work<Vec<T>> {
        let algo = self.algo;
        let out_len = if self.rank() == root { count } else { 0 };
        self.spawn("gather_async", move |c| {
            let mut out = vec![T::zeroed(); out_len];
            ops::gather_into(c, algo, &local, &mut out, count, root).map(|_| out)
        })
    }

    /// Non-blocking [`Group::all_to_all`].
    pub fn all_to_all_async<T: Element>(&self, input: Vec<T>) -> Work<Vec<T>> {
        let algo = self.algo;
        let out_len = self.size() * self.chunk_len(input.len());
        self.spawn("all_to_all_async", move |c| {
            let mut out = vec![T::zeroed(); out_len];
            ops::all_to_all_into(c, algo, &input, &mut out).map(|_| out)
        })
    }

    /// Non-blocking [`Group::barrier`].
    pub fn barrier_async(&self) -> Work<()> {
        let algo = self.algo;
        self.spawn("barrier_async", move |c| ops::barrier(c, algo))
    }

    /// Non-blocking [`Group::send`]: the handle gives the buffer back once it is sent.
    pub fn send_async<T: Element>(&self, buf: Vec<T>, dst: usize) -> Work<Vec<T>> {
        self.spawn("send_async", move |c| ops::send(c, &buf, dst).map(|_| buf))
    }

    /// Non-blocking [`Group::recv`]: the handle gives the buffer back holding the message.
    pub fn recv_async<T: Element>(&self, mut buf: Vec<T>, src: usize) -> Work<Vec<T>> {
        self.spawn("recv_async", move |c| {
            ops::recv(c, &mut buf, src).map(|_| buf)
        })
    }
}
