//! Shared buffers for Python: [`psyne::Group::alloc_shared`] and
//! [`psyne::Group::all_reduce_shared`], for `psyne.torch.empty_shared`.
//!
//! `alloc_shared(group, dtype, len)` (a collective: every rank calls it in the same order with
//! the same length and type) returns a [`NativeShared`], whose `addr` the Python half wraps
//! as a tensor (through NumPy's `__array_interface__`, the tensor keeping the buffer alive).
//! `all_reduce_shared(group, buf, op)` reduces it in place with no copy, blocking;
//! `submit_all_reduce_shared(group, buf, op, keep)` issues it to psyne's worker in its turn and
//! returns its [`NativeWork`].

use crate::{dtype_of, op_of, to_py, NativeGroup, NativeWork};
use psyne::{bf16, f16, DType, Element, Group, ReduceOp, SharedBuf};
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};

/// A [`SharedBuf`] of any element type.
trait AnyShared: Send {
    /// The first element's address (stable: the memory is mapped or allocated once).
    fn addr(&mut self) -> usize;
    fn is_shared(&self) -> bool;
    fn all_reduce(&mut self, group: &Group, op: ReduceOp) -> psyne::Result<()>;
}

impl<T: Element> AnyShared for SharedBuf<T> {
    fn addr(&mut self) -> usize {
        self.as_mut_ptr() as usize
    }

    fn is_shared(&self) -> bool {
        SharedBuf::is_shared(self)
    }

    fn all_reduce(&mut self, group: &Group, op: ReduceOp) -> psyne::Result<()> {
        group.all_reduce_shared(self, op)
    }
}

/// `group.alloc_shared::<T>(len)` for the `T` of `dtype`.
fn alloc(group: &Group, dtype: DType, len: usize) -> psyne::Result<Box<dyn AnyShared>> {
    fn boxed<T: Element>(b: SharedBuf<T>) -> Box<dyn AnyShared> {
        Box::new(b)
    }
    Ok(match dtype {
        DType::F32 => boxed(group.alloc_shared::<f32>(len)?),
        DType::F64 => boxed(group.alloc_shared::<f64>(len)?),
        DType::F16 => boxed(group.alloc_shared::<f16>(len)?),
        DType::BF16 => boxed(group.alloc_shared::<bf16>(len)?),
        DType::I8 => boxed(group.alloc_shared::<i8>(len)?),
        DType::I16 => boxed(group.alloc_shared::<i16>(len)?),
        DType::I32 => boxed(group.alloc_shared::<i32>(len)?),
        DType::I64 => boxed(group.alloc_shared::<i64>(len)?),
        DType::U8 => boxed(group.alloc_shared::<u8>(len)?),
        DType::U16 => boxed(group.alloc_shared::<u16>(len)?),
        DType::U32 => boxed(group.alloc_shared::<u32>(len)?),
        DType::U64 => boxed(group.alloc_shared::<u64>(len)?),
    })
}

/// A buffer from `alloc_shared`: `addr`, `len` (elements), `shared` (whether the ranks share
/// it; if not, it is private memory and all-reduces take the ordinary path).
#[pyclass(module = "psyne._native", frozen, weakref)]
pub(crate) struct NativeShared {
    buf: Arc<Mutex<Box<dyn AnyShared>>>,
    #[pyo3(get)]
    addr: usize,
    #[pyo3(get)]
    len: usize,
    #[pyo3(get)]
    shared: bool,
}

/// Allocates a shared buffer of `len` elements of dtype tag `dtype` on `group` (a blocking
/// collective).
#[pyfunction]
fn alloc_shared(
    py: Python<'_>,
    group: &NativeGroup,
    dtype: u8,
    len: usize,
) -> PyResult<NativeShared> {
    let dtype = dtype_of(dtype)?;
    let mut made = None;
    group.run_with(py, |g| {
        made = Some(alloc(g, dtype, len)?);
        Ok(())
    })?;
    let mut buf = made.ok_or_else(|| to_py(psyne::Error::invalid("alloc_shared made nothing")))?;
    Ok(NativeShared {
        addr: buf.addr(),
        len,
        shared: buf.is_shared(),
        buf: Arc::new(Mutex::new(buf)),
    })
}

/// All-reduces `buf` in place (zero-copy where shared), blocking.
#[pyfunction]
fn all_reduce_shared(
    py: Python<'_>,
    group: &NativeGroup,
    buf: &NativeShared,
    op: u8,
) -> PyResult<()> {
    let op = op_of(op)?;
    let buf = buf.buf.clone();
    group.run_with(py, move |g| crate::lock(&buf).all_reduce(g, op))
}

/// The non-blocking form of [`all_reduce_shared`]: issued to psyne's worker in its turn; `keep`
/// is held until it has run.
#[pyfunction]
fn submit_all_reduce_shared(
    py: Python<'_>,
    group: &NativeGroup,
    buf: &NativeShared,
    op: u8,
    keep: Py<PyAny>,
) -> PyResult<NativeWork> {
    let op = op_of(op)?;
    let buf = buf.buf.clone();
    // SAFETY: the job borrows nothing: it owns (an Arc of) the buffer it reduces.
    unsafe {
        group.submit_with(py, "all_reduce_shared", keep, move |g| {
            crate::lock(&buf).all_reduce(g, op)
        })
    }
}

/// Adds this module's class and functions to `_native`.
pub(crate) fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeShared>()?;
    m.add_function(wrap_pyfunction!(alloc_shared, m)?)?;
    m.add_function(wrap_pyfunction!(all_reduce_shared, m)?)?;
    m.add_function(wrap_pyfunction!(submit_all_reduce_shared, m)?)?;
    Ok(())
}
