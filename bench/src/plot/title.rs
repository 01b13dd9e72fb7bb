//! The two title lines: what ran (operations, backends, world size, transport), and on what
//! (CPU, hosts, dates).

use std::collections::BTreeSet;

use super::series::{distinct, records};
use crate::model::Report;

/// The two title lines: what ran, and on what.
pub fn title(reports: &[Report]) -> (String, String) {
    (what_ran(reports), where_it_ran(reports))
}

/// The first title line: the operations (counted when more than three), backends, world sizes
/// and the transport when there is one.
fn what_ran(reports: &[Report]) -> String {
    let colls = distinct(records(reports).map(|r| r.collective.as_str()));
    let backends = distinct(records(reports).map(|r| r.backend.as_str()));
    let ranks = ranks_part(reports);
    let transport = transport_part(reports);
    // More than three operations are counted, not listed: their rows name them.
    if colls.len() > 3 {
        format!(
            "psybench · {} collectives · {}{ranks}{transport}",
            colls.len(),
            backends.join(" vs ")
        )
    } else {
        format!(
            "psybench: {} · {}{ranks}{transport}",
            colls.join(", "),
            backends.join(" vs ")
        )
    }
}

/// ` · N ranks` (several world sizes joined by `/`; nothing when none is known).
fn ranks_part(reports: &[Report]) -> String {
    let world: BTreeSet<usize> = reports
        .iter()
        .map(|r| r.meta.world_size)
        .chain(records(reports).map(|r| r.ranks))
        .filter(|n| *n > 0)
        .collect();
    let world: Vec<String> = world.iter().map(|n| n.to_string()).collect();
    match world.len() {
        0 => String::new(),
        1 if world[0] == "1" => " · 1 rank".to_string(),
        _ => format!(" · {} ranks", world.join("/")),
    }
}

/// ` · over T` when every row names the same transport `T`, else nothing.
fn transport_part(reports: &[Report]) -> String {
    let transports = distinct(
        records(reports)
            .map(|x| x.transport.as_str())
            .filter(|t| !t.is_empty()),
    );
    if transports.len() == 1 {
        format!(" · over {}", transports[0])
    } else {
        String::new()
    }
}

/// The second title line: CPU models and cores, hosts (the first four), dates.
fn where_it_ran(reports: &[Report]) -> String {
    let parts: Vec<String> = [cpu_part(reports), hosts_part(reports), dates_part(reports)]
        .into_iter()
        .flatten()
        .collect();
    parts.join(" · ")
}

/// The known CPU models, with the most cores any report saw.
fn cpu_part(reports: &[Report]) -> Option<String> {
    let cpus = distinct(
        reports
            .iter()
            .map(|r| r.meta.cpu_model.as_str())
            .filter(|c| !c.is_empty() && *c != "unknown"),
    );
    if cpus.is_empty() {
        return None;
    }
    let cores = reports.iter().map(|r| r.meta.cores).max().unwrap_or(0);
    let c = if cores > 0 {
        format!(" ({cores} cores)")
    } else {
        String::new()
    };
    Some(format!("{}{c}", cpus.join(" / ")))
}

/// `host a, b, c, d +N`.
fn hosts_part(reports: &[Report]) -> Option<String> {
    let hosts = distinct(
        reports
            .iter()
            .flat_map(|r| r.meta.hosts.iter().map(String::as_str)),
    );
    if hosts.is_empty() {
        return None;
    }
    let shown: Vec<&str> = hosts.iter().take(4).map(String::as_str).collect();
    let more = hosts.len().saturating_sub(4);
    let more = if more > 0 {
        format!(" +{more}")
    } else {
        String::new()
    };
    Some(format!("host {}{more}", shown.join(", ")))
}

/// The days the reports were made on (`YYYY-MM-DD`, comma-separated).
fn dates_part(reports: &[Report]) -> Option<String> {
    let dates = distinct(
        reports
            .iter()
            .map(|r| r.meta.date.get(..10).unwrap_or(""))
            .filter(|d| !d.is_empty()),
    );
    (!dates.is_empty()).then(|| dates.join(", "))
}
