//! Finalized feature levels the controller sets by itself: a feature the metadata has never
//! set starts at Keel's default level (Kafka's `kafka-storage format` writes them at bootstrap).

use super::{Batch, Controller, Output};
use crate::records::{FeatureLevelRecord, Record};

/// KIP-890's `transaction.version`: 2 turns on transactions v2 (server-side partition adds and
/// an epoch bump at every transaction end), which Kafka 4.x clients use once finalized.
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";
/// The highest `transaction.version` Keel serves, and the level a new cluster finalizes.
pub const TRANSACTION_VERSION_MAX: u16 = 2;

impl Controller {
    /// Writes `name` at `level` if the metadata never set it. Returns whether it wrote.
    pub fn finalize_feature_default(
        &mut self,
        name: &str,
        level: u16,
        now_ms: u64,
    ) -> Output<bool> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        if self.image.feature_level(name).is_some() {
            return batch.finish(false);
        }
        batch.push(Record::FeatureLevel(FeatureLevelRecord {
            name: name.to_string(),
            level,
        }));
        batch.finish(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ControllerConfig;

    #[test]
    fn a_default_is_written_once_and_never_over_a_set_level() {
        let mut c = Controller::new(ControllerConfig::new("c"));
        let out = c.finalize_feature_default(TRANSACTION_VERSION_FEATURE, 2, 0);
        assert!(out.response);
        assert_eq!(out.records.len(), 1);
        c.replay_all(&out.records).unwrap();
        assert_eq!(
            c.image().feature_level(TRANSACTION_VERSION_FEATURE),
            Some(2)
        );
        let again = c.finalize_feature_default(TRANSACTION_VERSION_FEATURE, 1, 1);
        assert!(!again.response && again.records.is_empty());
    }
}
