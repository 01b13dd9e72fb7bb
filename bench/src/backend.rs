//! The backends psybench can drive, behind one type: the native psyne [`Group`] and, with the
//! `mpi` feature, an MPI communicator.

use crate::model::Backend;
use psyne::{Communicator, Element, Group, ReduceOp, Result};

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
        delegate!(self, c => Communicator::rank(c))
    }
    fn size(&self) -> usize {
        delegate!(self, c => Communicator::size(c))
    }
    fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        delegate!(self, c => Communicator::all_reduce(c, buf, op))
    }
    fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        delegate!(self, c => Communicator::broadcast(c, buf, root))
    }
    fn reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: usize) -> Result<()> {
        delegate!(self, c => Communicator::reduce(c, buf, op, root))
    }
    fn all_gather_into<T: Element>(&self, local: &[T], out: &mut [T]) -> Result<()> {
        delegate!(self, c => Communicator::all_gather_into(c, local, out))
    }
    fn reduce_scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        delegate!(self, c => Communicator::reduce_scatter_into(c, input, out, op))
    }
    fn scatter_into<T: Element>(
        &self,
        input: &[T],
        out: &mut [T],
        count: usize,
        root: usize,
    ) -> Result<()> {
        delegate!(self, c => Communicator::scatter_into(c, input, out, count, root))
    }
    fn gather_into<T: Element>(
        &self,
        local: &[T],
        out: &mut [T],
        count: usize,
        root: usize,
    ) -> Result<()> {
        delegate!(self, c => Communicator::gather_into(c, local, out, count, root))
    }
    fn all_to_all_into<T: Element>(&self, input: &[T], out: &mut [T]) -> Result<()> {
        delegate!(self, c => Communicator::all_to_all_into(c, input, out))
    }
    fn barrier(&self) -> Result<()> {
        delegate!(self, c => Communicator::barrier(c))
    }
    fn send<T: Element>(&self, buf: &[T], dst: usize) -> Result<()> {
        delegate!(self, c => Communicator::send(c, buf, dst))
    }
    fn recv<T: Element>(&self, buf: &mut [T], src: usize) -> Result<()> {
        delegate!(self, c => Communicator::recv(c, buf, src))
    }
}
