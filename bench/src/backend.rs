//! The backends psybench can drive: the native psyne [`Group`] and, with the `mpi` feature, an MPI
//! communicator. Both implement psyne's [`Communicator`] and [`BenchComm`]; the code that measures
//! is generic over [`BenchComm`], and [`on_backend!`] picks the concrete type once per
//! measurement, outside the timed loop, so every timed call is a direct call on the backend.

use crate::model::Backend;
use psyne::{Algo, Communicator, Group, ReduceOrder};

/// What psybench needs of a backend beyond the collectives.
pub trait BenchComm: Communicator {
    /// Which backend this is.
    fn kind(&self) -> Backend;
    /// psyne's own group, if this is one (algorithm names, shared buffers, tuning).
    fn native(&self) -> Option<&Group>;
    /// This communicator with `algo` forced and reductions in `order`, if either is given and the
    /// backend takes them (the native one does; MPI makes its own choices: `None`).
    fn view(&self, algo: Option<Algo>, order: Option<ReduceOrder>) -> Option<Self>
    where
        Self: Sized;
}

impl BenchComm for Group {
    fn kind(&self) -> Backend {
        Backend::Native
    }
    fn native(&self) -> Option<&Group> {
        Some(self)
    }
    fn view(&self, algo: Option<Algo>, order: Option<ReduceOrder>) -> Option<Group> {
        if algo.is_none() && order.is_none() {
            return None;
        }
        let g = algo.map_or_else(|| self.clone(), |a| self.with_algo(a));
        Some(order.map_or(g.clone(), |o| g.with_reduce_order(o)))
    }
}

#[cfg(feature = "mpi")]
impl BenchComm for psyne::mpi::MpiComm {
    fn kind(&self) -> Backend {
        Backend::Mpi
    }
    fn native(&self) -> Option<&Group> {
        None
    }
    fn view(&self, _: Option<Algo>, _: Option<ReduceOrder>) -> Option<Self> {
        None
    }
}

/// A communicator of either backend.
pub enum AnyComm {
    /// psyne's own engine.
    Native(Group),
    /// MPI through rsmpi.
    #[cfg(feature = "mpi")]
    Mpi(psyne::mpi::MpiComm),
}

/// `on_backend!(any, c => expr)`: `expr` with `c` bound to the [`AnyComm`]'s communicator
/// (`&Group` or `&MpiComm`), so generic code over [`BenchComm`] runs on the concrete type.
macro_rules! on_backend {
    ($any:expr, $c:ident => $e:expr) => {
        match $any {
            $crate::backend::AnyComm::Native($c) => $e,
            #[cfg(feature = "mpi")]
            $crate::backend::AnyComm::Mpi($c) => $e,
        }
    };
}
pub(crate) use on_backend;

impl AnyComm {
    /// Which backend this is.
    pub fn kind(&self) -> Backend {
        on_backend!(self, c => c.kind())
    }

    /// The native group, if this is one.
    pub fn native(&self) -> Option<&Group> {
        on_backend!(self, c => c.native())
    }
}
