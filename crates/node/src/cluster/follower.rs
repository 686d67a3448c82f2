//! Following the committed metadata log: Fetch `__cluster_metadata` from the controller, decode
//! the records, replay them in order into a local `ClusterImage` (the same replay the
//! controller runs, so every broker applies the same records in the same order), and publish
//! each new image. Records at or below what was applied are ignored, so a re-fetch after a
//! reconnect cannot apply anything twice. A broker behind the controller's compacted log is
//! answered KRaft's `SnapshotId`: it reads that snapshot with FetchSnapshot, replaces its image
//! with it and fetches on from the snapshot's end.

use std::sync::Arc;

use bytes::BytesMut;
use keel_controller::types::MetadataOffset;
use keel_controller::{ClusterImage, ReplayError};
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::fetch_snapshot_request;
use keel_wire::kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse,
    TopicName,
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
    /// The controller's committed end of the metadata log, as its last fetch answer said.
    high_watermark: Option<i64>,
}

impl MetadataFollower {
    pub fn new() -> Self {
        MetadataFollower {
            image: ClusterImage::new(),
            high_watermark: None,
        }
    }

    /// Whether the image holds everything the controller had committed at the last fetch.
    pub fn caught_up(&self) -> bool {
        self.high_watermark
            .is_some_and(|hw| self.next_offset().0 >= hw)
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
                if partition.high_watermark >= 0 {
                    self.high_watermark = Some(partition.high_watermark);
                }
                if partition.snapshot_id.end_offset >= 0 {
                    let id = (
                        partition.snapshot_id.end_offset,
                        partition.snapshot_id.epoch,
                    );
                    return self.load_snapshot(connection, broker_id, id).await;
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

    /// Reads the snapshot `(end offset, epoch)` with FetchSnapshot and makes it the image;
    /// returns how many records it holds.
    async fn load_snapshot<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        connection: &mut Connection<S>,
        broker_id: i32,
        (end_offset, epoch): (i64, i32),
    ) -> Result<usize, FollowError> {
        let version = connection.version(ApiKey::FetchSnapshot, 0, 1)?;
        let mut bytes = BytesMut::new();
        loop {
            let request = FetchSnapshotRequest::default()
                .with_replica_id(BrokerId(broker_id))
                .with_max_bytes(METADATA_FETCH_MAX_BYTES)
                .with_topics(vec![fetch_snapshot_request::TopicSnapshot::default()
                    .with_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
                    .with_partitions(vec![
                        fetch_snapshot_request::PartitionSnapshot::default()
                            .with_partition(0)
                            .with_current_leader_epoch(-1)
                            .with_snapshot_id(
                                fetch_snapshot_request::SnapshotId::default()
                                    .with_end_offset(end_offset)
                                    .with_epoch(epoch),
                            )
                            .with_position(bytes.len() as i64),
                    ])]);
            let response: FetchSnapshotResponse = connection
                .call_version(ApiKey::FetchSnapshot, version, &request)
                .await?;
            if response.error_code != 0 {
                return Err(FollowError::Fetch(response.error_code));
            }
            let Some(partition) = response.topics.first().and_then(|t| t.partitions.first()) else {
                return Err(FollowError::Fetch(-1));
            };
            if partition.error_code != 0 {
                return Err(FollowError::Fetch(partition.error_code));
            }
            bytes.extend_from_slice(&partition.unaligned_records);
            let size = usize::try_from(partition.size).unwrap_or(0);
            if bytes.len() >= size {
                break;
            }
            if partition.unaligned_records.is_empty() {
                return Err(FollowError::Fetch(-1));
            }
        }
        let records: Vec<_> = decode_metadata_batches(&bytes, MetadataOffset(0))?
            .into_iter()
            .map(|(_, record)| record)
            .collect();
        let image = ClusterImage::from_snapshot(MetadataOffset(end_offset), &records).map_err(
            |source| FollowError::Replay {
                offset: end_offset,
                source,
            },
        )?;
        tracing::info!(
            end_offset,
            records = records.len(),
            "loaded a metadata snapshot"
        );
        self.image = image;
        Ok(records.len().max(1))
    }

    /// A shared snapshot of the current image.
    pub fn snapshot(&self) -> Arc<ClusterImage> {
        Arc::new(self.image.clone())
    }
}
