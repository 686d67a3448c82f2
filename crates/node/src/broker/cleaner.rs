//! The log cleaner: every `log.cleaner.backoff.ms` one pass over this broker's replicas of
//! compacted topics (`cleanup.policy` holding `compact`, `__consumer_offsets` included), leader
//! or follower alike, as Kafka's cleaner threads do. Each log is compacted in keel-log's three
//! steps ([`keel_log::Log::plan_compaction`]): the partition is locked only to plan and to swap
//! the cleaned segments in; reading and writing the segment files happens without the lock, so
//! produce and fetch go on meanwhile. Only data below the partition's high watermark is ever
//! compacted.
//!
//! Compressed batches are decompressed and recompressed with their own codec through
//! kafka-protocol's codecs ([`KafkaCodecs`]).

use bytes::{Bytes, BytesMut};
use keel_log::RecordCodecs;
use keel_wire::kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};
use tracing::{info, warn};

use super::Broker;

/// Kafka's codecs (1 gzip, 2 snappy with xerial framing, 3 lz4 frame, 4 zstd) for the cleaner.
#[derive(Debug, Clone, Copy, Default)]
pub struct KafkaCodecs;

fn take(buf: &mut Bytes) -> anyhow::Result<Vec<u8>> {
    Ok(buf.to_vec())
}

impl RecordCodecs for KafkaCodecs {
    fn decompress(&self, codec: i16, data: &[u8]) -> Result<Vec<u8>, String> {
        let mut input = data;
        let result = match codec {
            1 => Gzip::decompress(&mut input, take),
            2 => Snappy::decompress(&mut input, take),
            3 => Lz4::decompress(&mut input, take),
            4 => Zstd::decompress(&mut input, take),
            other => return Err(format!("unknown compression codec {other}")),
        };
        result.map_err(|e| format!("{e:#}"))
    }

    fn compress(&self, codec: i16, data: &[u8]) -> Result<Vec<u8>, String> {
        let mut out: Vec<u8> = Vec::with_capacity(data.len() / 2 + 64);
        let fill = |tmp: &mut BytesMut| -> anyhow::Result<()> {
            tmp.extend_from_slice(data);
            Ok(())
        };
        let result = match codec {
            1 => Gzip::compress(&mut out, fill),
            2 => Snappy::compress(&mut out, fill),
            3 => Lz4::compress(&mut out, fill),
            4 => Zstd::compress(&mut out, fill),
            other => return Err(format!("unknown compression codec {other}")),
        };
        result.map_err(|e| format!("{e:#}"))?;
        Ok(out)
    }
}

impl Broker {
    /// One cleaner pass over every hosted replica of a compacted topic.
    pub fn compact_logs(&self) {
        let budget =
            usize::try_from(self.config.log_cleaner_dedupe_buffer_size).unwrap_or(usize::MAX);
        for partition in self.all_partitions() {
            let now_ms = self.clock.now_ms();
            let high_watermark = partition.high_watermark();
            let plan = match partition.lock_log() {
                Ok(log) => log.plan_compaction(now_ms, high_watermark, budget),
                Err(_) => continue,
            };
            let Some(plan) = plan else { continue };
            let started_ms = self.clock.now_ms();
            let output = match plan.run(&KafkaCodecs) {
                Ok(output) => output,
                Err(e) => {
                    warn!(partition = %partition.tp, error = %e, "log cleaning failed");
                    continue;
                }
            };
            let Ok(mut log) = partition.lock_log() else {
                continue;
            };
            match log.finish_compaction(output, self.clock.now_ms()) {
                Ok(stats) if stats.aborted => {
                    info!(partition = %partition.tp, "log changed while cleaning; will retry")
                }
                Ok(stats) => info!(
                    partition = %partition.tp,
                    segments = stats.segments_rewritten,
                    bytes_before = stats.bytes_before,
                    bytes_after = stats.bytes_after,
                    records_removed = stats.records_removed,
                    tombstones_removed = stats.tombstones_removed,
                    cleaner_offset = %stats.cleaner_offset,
                    keys = stats.keys,
                    elapsed_ms = self.clock.now_ms() - started_ms,
                    "compacted log"
                ),
                Err(e) => warn!(partition = %partition.tp, error = %e, "log cleaning failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: every codec round-trips the records section the cleaner gives it, and an unknown
    // codec is an error (the cleaner then keeps the batch whole).
    #[test]
    fn codecs_round_trip() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for codec in 1..=4 {
            let compressed = KafkaCodecs.compress(codec, &data).unwrap();
            assert_ne!(compressed, data, "codec {codec}");
            assert_eq!(KafkaCodecs.decompress(codec, &compressed).unwrap(), data);
        }
        assert!(KafkaCodecs.decompress(5, &data).is_err());
        assert!(KafkaCodecs.decompress(1, b"not gzip").is_err());
    }
}
