//! Following the committed metadata log: Fetch `__cluster_metadata` from the controller, decode
//! the records, replay them in order into a local `ClusterImage` (the same replay the
//! controller runs, so every broker applies the same records in the same order), and publish
//! each new image. Records at or below what was applied are ignored, so a re-fetch after a
//! reconnect cannot apply anything twice.

use std::sync::Arc;

use keel_controller::types::MetadataOffset;
use keel_controller::{ClusterImage, ReplayError};
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::client::{ClientError, Connection};
use crate::metadata_log::{decode_metadata_batches, MetadataLogError, METADATA_TOPIC};

/// How long one metadata fetch waits for new records at the controller.
pub const METADATA_FETCH_MAX_WAIT_MS: i32 = 500;
/// Most bytes of metadata one fetch returns.
const METADATA_FETCH_MAX_BYTES: i32 = 8 * 1024 * 1024;

/// Why following stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("metadata fetch failed with error code {0}")]
    Fetch(i16),
    #[error(transparent)]
    Decode(#[from] MetadataLogError),
    #[error("metadata record at offset {offset} does not replay: {source}")]
    Replay {
        offset: i64,
        #[source]
        source: ReplayError,
    },
}

/// A broker's replayed view of the cluster.
#[derive(Debug, Clone, Default)]
pub struct MetadataFollower {
    image: ClusterImage,
}

impl MetadataFollower {
    pub fn new() -> Self {
        MetadataFollower {
            image: ClusterImage::new(),
        }
    }

    /// The image replayed so far.
    pub fn image(&self) -> &ClusterImage {
        &self.image
    }

    /// The offset of the next record to apply.
    pub fn next_offset(&self) -> MetadataOffset {
        self.image.next_offset()
    }

    /// The last applied offset, as heartbeats report it (`None` before the first record).
    pub fn applied_offset(&self) -> Option<i64> {
        let next = self.next_offset().0;
        (next > 0).then_some(next - 1)
    }

    /// Fetches once (waiting up to [`METADATA_FETCH_MAX_WAIT_MS`] for new records) and replays
    /// what arrived; returns how many records were applied.
    pub async fn fetch_once<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        connection: &mut Connection<S>,
        broker_id: i32,
    ) -> Result<usize, FollowError> {
        let version = connection.version(ApiKey::Fetch, 4, 12)?;
        let from = self.next_offset();
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(broker_id))
            .with_max_wait_ms(METADATA_FETCH_MAX_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(METADATA_FETCH_MAX_BYTES)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(from.0)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(METADATA_FETCH_MAX_BYTES)])]);
        let response: FetchResponse = connection
            .call_version(ApiKey::Fetch, version, &request)
            .await?;
        if response.error_code != 0 {
            return Err(FollowError::Fetch(response.error_code));
        }
        let mut applied = 0;
        for topic in &response.responses {
            for partition in &topic.partitions {
                if partition.error_code != 0 {
                    return Err(FollowError::Fetch(partition.error_code));
                }
                let Some(bytes) = &partition.records else {
                    continue;
                };
                for (offset, record) in decode_metadata_batches(bytes, from)? {
                    if offset < self.next_offset() {
                        continue;
                    }
                    self.image
                        .replay(offset, &record)
                        .map_err(|source| FollowError::Replay {
                            offset: offset.0,
                            source,
                        })?;
                    applied += 1;
                }
            }
        }
        Ok(applied)
    }

    /// A shared snapshot of the current image.
    pub fn snapshot(&self) -> Arc<ClusterImage> {
        Arc::new(self.image.clone())
    }
}
