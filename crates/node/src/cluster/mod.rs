//! The broker's side of a cluster (issue 4, in progress): registering with the controller and
//! heartbeating ([`lifecycle`]), and following the committed metadata log into a local
//! `ClusterImage` ([`follower`]). Replication and the wiring into `keel server` come next; until
//! then these run only in tests.

pub mod controller_channel;
pub mod fetcher;
pub mod follower;
pub mod lifecycle;

/// Parses `controller.quorum.voters` (`id@host:port,...`) into (id, `host:port`) pairs.
pub fn parse_quorum_voters(text: &str) -> Result<Vec<(i32, String)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|voter| {
            let (id, addr) = voter
                .split_once('@')
                .ok_or_else(|| format!("{voter:?} is not id@host:port"))?;
            let id = id
                .parse::<i32>()
                .map_err(|e| format!("bad voter id in {voter:?}: {e}"))?;
            if !addr.contains(':') {
                return Err(format!("{voter:?} has no port"));
            }
            Ok((id, addr.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: Kafka's controller.quorum.voters syntax parses; malformed entries are refused.
    #[test]
    fn parses_voters() {
        assert_eq!(
            parse_quorum_voters("1@127.0.0.1:9093, 2@host:9094").unwrap(),
            vec![
                (1, "127.0.0.1:9093".to_string()),
                (2, "host:9094".to_string())
            ]
        );
        assert!(parse_quorum_voters("127.0.0.1:9093").is_err());
        assert!(parse_quorum_voters("x@h:1").is_err());
        assert!(parse_quorum_voters("1@host").is_err());
    }
}
