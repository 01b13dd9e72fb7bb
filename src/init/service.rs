//! [`form`]: a group from a launcher's process-management service (PMIx or PMI-1), or the
//! launch's refusal where it offers none psyne can use.

use super::advertised_ip;
use crate::bootstrap::meet::{self, Rendezvous, Seat};
use crate::bootstrap::{pmi, pmix};
use crate::error::{Error, Result};
use crate::group::Group;
use crate::launch::{ForeignLaunch, Service};
use crate::options::Tunables;
use std::sync::Arc;
use std::time::Instant;

/// Forms the group of a job another launcher started, through its service; without one (or
/// where the PMIx library cannot be loaded) the launch is refused with the launcher's error.
pub(super) fn form(
    launch: &ForeignLaunch,
    tunables: &Tunables,
    deadline: Instant,
) -> Result<Group> {
    match launch.service {
        Some(Service::Pmix) => over_pmix(launch, tunables, deadline),
        Some(Service::Pmi) => over_pmi(launch, tunables, deadline),
        None => Err(launch.error()),
    }
}

/// Through PMIx ([`pmix`]): rank, size and whether every rank shares rank 0's node from the
/// server.
fn over_pmix(launch: &ForeignLaunch, tunables: &Tunables, deadline: Instant) -> Result<Group> {
    let client = pmix::Client::connect().map_err(|e| refused(launch, "PMIx", &e))?;
    let placement = client.placement(deadline)?;
    if placement.size == 1 {
        return Ok(Group::alone());
    }
    let seat = Seat {
        rank: placement.rank,
        all_here: Some(placement.local_size == placement.size),
    };
    let met = meet::rendezvous(&client, seat, deadline)?;
    drop(client);
    let job_id = format!("pmix-{}", placement.namespace);
    join(met, placement.rank, placement.size, job_id, tunables)
}

/// Through PMI-1 ([`pmi`]): rank and size from `PMI_RANK` and `PMI_SIZE`.
fn over_pmi(launch: &ForeignLaunch, tunables: &Tunables, deadline: Instant) -> Result<Group> {
    let (Some(rank), Some(size)) = (launch.rank, launch.world_size) else {
        return Err(launch.error());
    };
    let client = pmi::Client::connect(deadline).map_err(|e| refused(launch, "PMI-1", &e))?;
    let seat = Seat {
        rank,
        all_here: None,
    };
    let met = meet::rendezvous(&client, seat, deadline)?;
    let job_id = format!("pmi-{}", client.kvs_name());
    drop(client);
    join(met, rank, size, job_id, tunables)
}

/// The launcher's error, and why its service could not be used.
fn refused(launch: &ForeignLaunch, service: &str, why: &Error) -> Error {
    Error::new(
        why.kind(),
        format!(
            "{}\n(psyne forms such a job through {service}, but {why})",
            launch.error()
        ),
    )
}

/// Forms the group on the store the meeting reached.
fn join(
    met: Rendezvous,
    rank: usize,
    size: usize,
    job_id: String,
    tunables: &Tunables,
) -> Result<Group> {
    let store = Arc::new(met.store);
    let member = super::Membership {
        rank,
        size,
        prefix: format!("{job_id}/world"),
        job_id,
    };
    let options = member.options(met.secret, advertised_ip(&store)?, tunables);
    Group::builder(options)
        .shared_store(store)
        .serving(met.server)
        .build()
}
