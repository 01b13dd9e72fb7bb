//! The buffers a measurement times its calls on, placed in memory the same way whatever ran
//! before them: a buffer of [`MAPPED_FROM`] bytes or more gets pages of its own and starts
//! [`MAPPED_OFFSET`] bytes into the first, as a program's first `malloc` of that size gets it
//! from glibc (and as `bench/c/mpi_coll_bench.c`'s buffers are); smaller ones come from the heap.
//!
//! glibc raises its mmap threshold when a mapped block is freed, so with plain `Vec`s a size's
//! buffers were mapped in a job's first round and taken from the heap, at another offset in the
//! page, in every later round and for the second backend of a paired job (`--backend
//! native,mpi`). Some MPIs' copies depend on that offset: MPICH 5's 2-rank 1 MiB all-reduce took
//! about 1000 µs at a fresh `malloc`'s placement and 370 µs at the heap's
//! (`results/versus-paired/`). Setting the threshold for the whole process instead
//! (`MALLOC_MMAP_THRESHOLD_`) changes the MPI's own allocations too: Open MPI's 1 MiB all-reduce
//! then maps and unmaps a temporary buffer every call (590 µs against 160).

use psyne::{Element, Error, Result};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Buffers of at least this many bytes are mapped: glibc's initial mmap threshold (128 KiB).
pub const MAPPED_FROM: usize = 128 << 10;

/// Where a mapped buffer starts in its first page: after the 16-byte header glibc puts at the
/// start of a mapped block on 64-bit Linux.
pub const MAPPED_OFFSET: usize = 16;

/// A buffer of `T`s, on the heap or in pages of its own (see the module docs).
pub struct Buffer<T: Element> {
    storage: Storage<T>,
}

enum Storage<T> {
    Heap(Vec<T>),
    Mapped(Mapping),
}

/// Anonymous pages holding one buffer at [`MAPPED_OFFSET`].
struct Mapping {
    base: NonNull<libc::c_void>,
    map_len: usize,
    len: usize,
}

impl<T: Element> Buffer<T> {
    /// `len` zeroed elements.
    pub fn zeroed(len: usize) -> Result<Buffer<T>> {
        let bytes = len * size_of::<T>();
        let storage = if bytes >= MAPPED_FROM {
            Storage::Mapped(Mapping::new::<T>(len)?)
        } else {
            Storage::Heap(vec![T::zeroed(); len])
        };
        Ok(Buffer { storage })
    }

    /// A copy of `values`.
    pub fn from_slice(values: &[T]) -> Result<Buffer<T>> {
        let mut b = Buffer::zeroed(values.len())?;
        b.copy_from_slice(values);
        Ok(b)
    }
}

impl Mapping {
    fn new<T>(len: usize) -> Result<Mapping> {
        // Every Element's alignment divides the offset, and the first page is page-aligned.
        debug_assert_eq!(MAPPED_OFFSET % align_of::<T>(), 0);
        let map_len = MAPPED_OFFSET + len * size_of::<T>();
        // SAFETY: a fresh private anonymous mapping: no address is asked for, so nothing that
        // exists is replaced; the result is checked before use.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::io(
                format!("mapping a {map_len}-byte benchmark buffer"),
                std::io::Error::last_os_error(),
            ));
        }
        let base = NonNull::new(base).ok_or_else(|| Error::invalid("mmap returned null"))?;
        Ok(Mapping { base, map_len, len })
    }

    fn data<T>(&self) -> *mut T {
        // SAFETY: the offset lies inside the mapping (map_len includes it).
        unsafe {
            self.base
                .as_ptr()
                .cast::<u8>()
                .add(MAPPED_OFFSET)
                .cast::<T>()
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `Mapping::new` with this length and is unmapped once;
        // every slice into it borrows its Buffer, so none outlives this.
        unsafe {
            libc::munmap(self.base.as_ptr(), self.map_len);
        }
    }
}

impl<T: Element> Deref for Buffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.storage {
            Storage::Heap(v) => v,
            // SAFETY: `len` elements of T fit after the offset (Mapping::new sized it so), the
            // pointer is aligned for T, the pages are zero-filled or written through this type
            // (every bit pattern is a valid Element: Pod), and the slice borrows self.
            Storage::Mapped(m) => unsafe { std::slice::from_raw_parts(m.data::<T>(), m.len) },
        }
    }
}

impl<T: Element> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.storage {
            Storage::Heap(v) => v,
            // SAFETY: as in `deref`, and the borrow of self is exclusive.
            Storage::Mapped(m) => unsafe { std::slice::from_raw_parts_mut(m.data::<T>(), m.len) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_are_mapped_at_the_offset_small_ones_are_not() {
        let big = Buffer::<f32>::zeroed(MAPPED_FROM / 4).unwrap();
        assert_eq!(big.as_ptr() as usize % 4096, MAPPED_OFFSET);
        assert!(big.iter().all(|&x| x == 0.0));
        let small = Buffer::<f32>::from_slice(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(&small[..], &[1.0, 2.0, 3.0]);
        assert!(matches!(small.storage, Storage::Heap(_)));
    }

    #[test]
    fn a_mapped_copy_holds_the_values_and_takes_writes() {
        let values: Vec<u64> = (0..(MAPPED_FROM as u64)).collect();
        let mut b = Buffer::from_slice(&values).unwrap();
        assert!(matches!(b.storage, Storage::Mapped(_)));
        assert_eq!(&b[..], &values[..]);
        b[7] = 99;
        assert_eq!(b[7], 99);
        assert_eq!(b.len(), values.len());
    }
}
