//! The scrubber (issue 19): a background pass over every hosted partition that validates every
//! batch of its segments (length, magic, CRC-32C, offsets in order), paced to
//! `log.scrub.bytes.per.second`, a pass starting at most every `log.scrub.interval.ms`.
//!
//! Consumers' reads are not validated on the hot path (clients check CRCs themselves) and a
//! leader validates only what it serves to followers: the scrubber is what finds bit rot in
//! data nobody reads, before the day a replica that lost its copy has to be rebuilt from this
//! one. Damage it finds is set aside like any other ([`Broker::on_damage`]); an IO error takes
//! the log directory offline. The active segment is walked up to its size when the pass reaches
//! it: followers' verified reads saw its batches as they were written, not the bit rot after.
//!
//! Each step reads [`SCRUB_STEP_BYTES`] without the partition lock (blocking IO on a handle of
//! its own), then the task sleeps as long as that many bytes take at the configured rate.

use std::sync::Arc;
use std::time::Duration;

use keel_log::{LogError, Offset, ScrubStep, ScrubTask};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::Broker;
use crate::blocking::run_blocking;
use crate::partition::{Partition, StorageHealth};

/// Bytes one scrub step validates before the scrubber paces itself.
pub const SCRUB_STEP_BYTES: u64 = 1024 * 1024;

/// Runs scrub passes until `stop`.
pub async fn run(broker: Arc<Broker>, stop: CancellationToken) {
    let interval = Duration::from_millis(broker.config.log_scrub_interval_ms.max(1));
    loop {
        let started = tokio::time::Instant::now();
        let Some(stats) = broker.scrub_pass(&stop).await else {
            return;
        };
        broker.metrics.storage.scrub_passes.inc();
        info!(
            partitions = stats.partitions,
            segments = stats.segments,
            bytes = stats.bytes,
            damaged = stats.damaged,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "scrub pass complete"
        );
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(started + interval) => {}
        }
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy)]
pub struct ScrubStats {
    pub partitions: u64,
    pub segments: u64,
    pub bytes: u64,
    pub damaged: u64,
}

/// How a partition's scrub ended.
enum PartitionScrub {
    /// Every segment was walked (or the partition went away).
    Done,
    /// Damage found and set aside, or the directory failed: the log changed.
    Stopped,
    /// Told to stop.
    Cancelled,
}

impl Broker {
    /// One pass over every hosted partition; `None` if `stop` came first.
    pub async fn scrub_pass(self: &Arc<Self>, stop: &CancellationToken) -> Option<ScrubStats> {
        let mut stats = ScrubStats::default();
        let mut pacer = Pacer::new(self.config.log_scrub_bytes_per_second);
        for partition in self.all_partitions() {
            if partition.health() == StorageHealth::Offline || partition.is_deleted() {
                continue;
            }
            stats.partitions += 1;
            match self
                .scrub_partition(&partition, &mut stats, &mut pacer, stop)
                .await
            {
                PartitionScrub::Done | PartitionScrub::Stopped => {}
                PartitionScrub::Cancelled => return None,
            }
        }
        Some(stats)
    }

    async fn scrub_partition(
        self: &Arc<Self>,
        partition: &Arc<Partition>,
        stats: &mut ScrubStats,
        pacer: &mut Pacer,
        stop: &CancellationToken,
    ) -> PartitionScrub {
        let mut after: Option<Offset> = None;
        loop {
            let plan = match partition.lock_log() {
                Ok(log) => log.plan_scrub(after),
                Err(_) => return PartitionScrub::Done,
            };
            let Some(mut task) = plan else {
                return PartitionScrub::Done;
            };
            loop {
                if stop.is_cancelled() {
                    return PartitionScrub::Cancelled;
                }
                let storage = self.storage.clone();
                let Ok((returned, step)) = run_blocking(move || {
                    let step = task.step(storage.as_ref(), SCRUB_STEP_BYTES);
                    (task, step)
                })
                .await
                else {
                    return PartitionScrub::Stopped;
                };
                task = returned;
                let bytes = match &step {
                    Ok(ScrubStep::Progress { bytes } | ScrubStep::Done { bytes }) => *bytes,
                    _ => 0,
                };
                stats.bytes += bytes;
                self.metrics.storage.scrub_bytes.inc_by(bytes);
                match step {
                    Ok(ScrubStep::Progress { .. }) => {}
                    Ok(ScrubStep::Done { .. }) => {
                        stats.segments += 1;
                        self.metrics.storage.scrub_segments.inc();
                        after = Some(task.segment());
                    }
                    Ok(ScrubStep::Damaged(damage)) => {
                        if self.scrub_still_applies(partition, &task) {
                            stats.damaged += 1;
                            // Copies the damaged segment: file IO, off the async tasks.
                            let (broker, partition) = (self.clone(), partition.clone());
                            let _ = run_blocking(move || {
                                broker.on_damage(&partition, &damage, "scrub")
                            })
                            .await;
                        }
                        return PartitionScrub::Stopped;
                    }
                    Err(e) => {
                        if self.scrub_still_applies(partition, &task) {
                            let error = LogError::io("scrub", partition.tp.dir_name())(e);
                            self.check_storage_error(partition, &error);
                        } else {
                            debug!(partition = %partition.tp, error = %e, "scrub read raced with a change of the log");
                        }
                        return PartitionScrub::Stopped;
                    }
                }
                if !pacer.pace(bytes, stop).await {
                    return PartitionScrub::Cancelled;
                }
                if after == Some(task.segment()) {
                    break;
                }
            }
        }
    }

    fn scrub_still_applies(&self, partition: &Partition, task: &ScrubTask) -> bool {
        partition
            .lock_log()
            .is_ok_and(|log| log.scrub_finding_applies(task))
    }
}

/// Keeps the scrubber at `bytes_per_second`: each step's bytes are owed as time and slept off.
struct Pacer {
    bytes_per_second: u64,
}

impl Pacer {
    fn new(bytes_per_second: u64) -> Pacer {
        Pacer {
            bytes_per_second: bytes_per_second.max(1),
        }
    }

    /// Sleeps as long as `bytes` take at the rate; false if `stop` came first.
    async fn pace(&mut self, bytes: u64, stop: &CancellationToken) -> bool {
        if bytes == 0 {
            return true;
        }
        let micros = u128::from(bytes) * 1_000_000 / u128::from(self.bytes_per_second);
        let wait = Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX));
        tokio::select! {
            biased;
            () = stop.cancelled() => false,
            () = tokio::time::sleep(wait) => true,
        }
    }
}
