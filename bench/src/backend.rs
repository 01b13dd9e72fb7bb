//! The backends psybench can drive, behind one type: the native psyne [`Group`] and, with the
//! `mpi` feature, an MPI communicator.

use crate::model::Backend;
use psyne::{Communicator, Element, Group, ReduceOp, Result, Work};

/// A communicator of either backend.
pub enum AnyComm {
    /// psyne's own engine.
    Native(Group),
    /// MPI through rsmpi.
    #[cfg(feature = "mpi")]
    Mpi(psyne::mpi::MpiComm),
}

impl AnyComm {
    /// Which backend this is.
    pub fn kind(&self) -> Backend {
        match self {
            AnyComm::Native(_) => Backend::Native,
            #[cfg(feature = "mpi")]
            AnyComm::Mpi(_) => Backend::Mpi,
        }
    }

    /// The native group, if this is one.
    pub fn native(&self) -> Option<&Group> {
        match self {
            AnyComm::Native(g) => Some(g),
            #[cfg(feature = "mpi")]
            AnyComm::Mpi(_) => None,
        }
    }
}

/// Runs `$e` with `$c` bound to the backend's communicator.
macro_rules! delegate {
    ($self:ident, $c:ident => $e:expr) => {
        match $self {
            AnyComm::Native($c) => $e,
            #[cfg(feature = "mpi")]
            AnyComm::Mpi($c) => $e,
        }
    };
}

impl Communicator for AnyComm {
    fn backend(&self) -> &'static str {
        delegate!(self, c => c.backend())
    }
    fn rank(&self) -> usize {
        delegate!(self, c => c.rank())
    }
    fn size(&self) -> usize {
        delegate!(self, c => c.size())
    }
    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        delegate!(self, c => c.all_reduce(buf, op))
    }
    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        delegate!(self, c => c.broadcast(buf, root))
    }
    fn reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: usize) -> Result<()> {
        delegate!(self, c => c.reduce(buf, op, root))
    }
    fn all_gather_into<T: Element>(&self, local: &[T], out: &mut [T]) -> Result<()> {
        delegate!(self, c => c.all_gather_into(local, out))
    }
    fn reduce_scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        delegate!(self, c => c.reduce_scatter_into(input, out, op))
    }
    fn scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        n: usize,
        root: usize,
    ) -> Result<()> {
        delegate!(self, c => c.scatter_into(input, out, n, root))
    }
    fn gather_into<T: Element>(
        &self,
        local: &[T],
        out: &mut [T],
        n: usize,
        root: usize,
    ) -> Result<()> {
        delegate!(self, c => c.gather_into(local, out, n, root))
    }
    fn all_to_all_into<T: Element>(&self, input: &[T], out: &mut [T]) -> Result<()> {
        delegate!(self, c => c.all_to_all_into(input, out))
    }
    fn barrier(&self) -> Result<()> {
        delegate!(self, c => c.barrier())
    }
    fn send<T: Element>(&self, buf: &[T], dst: usize) -> Result<()> {
        delegate!(self, c => c.send(buf, dst))
    }
    fn recv<T: Element>(&self, buf: &mut [T], src: usize) -> Result<()> {
        delegate!(self, c => c.recv(buf, src))
    }
    /// The native group's job runs on its worker thread, handed the group as an `AnyComm`
    /// (a clone: the job's calls still run in its turn); MPI's runs at once.
    fn submit<R, F>(&self, what: &str, f: F) -> Work<R>
    where
        R: Send + 'static,
        F: FnOnce(&Self) -> Result<R> + Send + 'static,
    {
        match self {
            AnyComm::Native(g) => g.submit(what, move |g| f(&AnyComm::Native(g.clone()))),
            #[cfg(feature = "mpi")]
            AnyComm::Mpi(_) => Work::ready(f(self)),
        }
    }
}
