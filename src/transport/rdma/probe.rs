//! Whether this process can use RDMA, and if not, why and what would fix it: one line each.

use super::config::RdmaConfig;

pub use super::status::Availability;
#[cfg(not(feature = "rdma"))]
use super::status::FEATURE_OFF;

/// Looks for the adapter and port `config` asks for (or the first active one).
pub fn availability(config: &RdmaConfig) -> Availability {
    #[cfg(feature = "rdma")]
    {
        match super::verbs::Device::open(config) {
            Ok(device) => Availability::Present(device.describe()),
            Err(absent) => absent,
        }
    }
    #[cfg(not(feature = "rdma"))]
    {
        let _ = config;
        Availability::absent(
            FEATURE_OFF,
            "rebuild with `cargo build --features rdma` (psyne's `rdma` feature)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absence_is_one_line_with_a_reason() {
        let a = availability(&RdmaConfig::default());
        if let Availability::Absent { reason, fix } = &a {
            assert!(!reason.is_empty() && !fix.is_empty());
            assert!(!a.to_string().contains('\n'));
            assert!(a.to_string().starts_with("rdma: absent ("), "{a}");
        }
        #[cfg(not(feature = "rdma"))]
        assert!(a.to_string().contains("without the `rdma` cargo feature"));
    }

    #[test]
    fn a_device_that_does_not_exist_is_absent_and_named() {
        let config = RdmaConfig {
            device: Some("no_such_hca9".into()),
            ..RdmaConfig::default()
        };
        match availability(&config) {
            Availability::Present(p) => panic!("found {p}"),
            Availability::Absent { reason, .. } => {
                #[cfg(feature = "rdma")]
                assert!(
                    reason.contains("no_such_hca9") || reason.contains("libibverbs"),
                    "{reason}"
                );
                #[cfg(not(feature = "rdma"))]
                assert_eq!(reason, FEATURE_OFF);
            }
        }
    }
}
