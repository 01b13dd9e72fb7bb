//! The backends psybench can drive, behind one type: the native psyne [`Group`] and, with the
//! `mpi` feature, an MPI communicator.

use crate::model::Backend;
use psyne::{Communicator, Group};

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
    psyne::forward_communicator!(delegate);
}
