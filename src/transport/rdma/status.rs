//! What probing for RDMA found ([`Availability`]): a leaf of the RDMA transport, named by the
//! probe and by the verbs that find the reasons.

use std::fmt;

/// What [`super::availability`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// An adapter with an active port: its description (`mlx5_0 port 1, InfiniBand, LID 3`).
    Present(String),
    /// No RDMA here.
    Absent {
        /// Why, in one line.
        reason: String,
        /// What would change that, in one line.
        fix: String,
    },
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Availability::Present(what) => write!(f, "rdma: present ({what})"),
            Availability::Absent { reason, .. } => write!(f, "rdma: absent ({reason})"),
        }
    }
}

/// The reason when the feature is off.
#[cfg_attr(feature = "rdma", allow(dead_code))] // the reason given without the feature
pub const FEATURE_OFF: &str = "this psyne was built without the `rdma` cargo feature";

impl Availability {
    /// Absent, with a reason and a fix.
    pub fn absent(reason: impl Into<String>, fix: impl Into<String>) -> Availability {
        Availability::Absent {
            reason: reason.into(),
            fix: fix.into(),
        }
    }

    /// Whether RDMA can be used.
    pub fn is_present(&self) -> bool {
        matches!(self, Availability::Present(_))
    }
}
