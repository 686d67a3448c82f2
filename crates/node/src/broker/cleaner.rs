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

use std::io::Read;

use bytes::BytesMut;
use keel_log::RecordCodecs;
use keel_wire::kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
use tracing::{info, warn};

use super::Broker;

/// The most one batch's records may take decompressed. A producer's batch to a compacted topic
/// that decompresses to more is refused, a stored one the cleaner keeps whole: a 1 MB batch of
/// zeros would otherwise decompress to a gigabyte (a decompression bomb).
pub const DECOMPRESSED_BATCH_MAX: usize = 64 << 20;

/// Kafka's codecs (1 gzip, 2 snappy with xerial framing, 3 lz4 frame, 4 zstd) for the cleaner and
/// the produce path's key check: decompression streams with the [`DECOMPRESSED_BATCH_MAX`]
/// limit; compression is kafka-protocol's, byte for byte what its producers send.
#[derive(Debug, Clone, Copy, Default)]
pub struct KafkaCodecs;

/// The xerial framing of Kafka's snappy: this header, then blocks of (u32 length, raw snappy).
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;

fn read_bounded(reader: impl Read, limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    if out.len() > limit {
        return Err(format!("records decompress to more than {limit} bytes"));
    }
    Ok(out)
}

fn snappy_block(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), String> {
    let len = snap::raw::decompress_len(block).map_err(|e| e.to_string())?;
    if out.len().saturating_add(len) > limit {
        return Err(format!("records decompress to more than {limit} bytes"));
    }
    let start = out.len();
    out.resize(start + len, 0);
    snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn snappy_decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    if !data.starts_with(XERIAL_MAGIC) || data.len() < XERIAL_HEADER_LEN {
        // Raw snappy, as Kafka's reader also accepts.
        snappy_block(data, &mut out, limit)?;
        return Ok(out);
    }
    let mut rest = &data[XERIAL_HEADER_LEN..];
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or("a snappy block length is cut short")?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = tail.get(..len).ok_or("a snappy block is cut short")?;
        snappy_block(block, &mut out, limit)?;
        rest = &tail[len..];
    }
    Ok(out)
}

impl RecordCodecs for KafkaCodecs {
    fn decompress(&self, codec: i16, data: &[u8]) -> Result<Vec<u8>, String> {
        let limit = DECOMPRESSED_BATCH_MAX;
        match codec {
            1 => read_bounded(flate2::read::MultiGzDecoder::new(data), limit),
            2 => snappy_decompress(data, limit),
            3 => read_bounded(lz4::Decoder::new(data).map_err(|e| e.to_string())?, limit),
            4 => read_bounded(
                zstd::stream::read::Decoder::new(data).map_err(|e| e.to_string())?,
                limit,
            ),
            other => Err(format!("unknown compression codec {other}")),
        }
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

    /// KIP-390's levels, with Kafka's meaning of each (`GzipCompression`, `Lz4BlockOutputStream`,
    /// `ZstdCompression`): gzip -1 (zlib's default, 6) or 1–9; lz4 9 is Kafka's default and its
    /// fast compressor, any other level lz4's high-compression mode at that level (lz4 stops at
    /// 12: 13–17 compress as 12); zstd -131072–22. Snappy has no levels. The frames are the same
    /// kafka-protocol writes (gzip member, lz4 frame with independent blocks, zstd frame).
    fn compress_at_level(
        &self,
        codec: i16,
        level: Option<i32>,
        data: &[u8],
    ) -> Result<Vec<u8>, String> {
        let Some(level) = level else {
            return self.compress(codec, data);
        };
        match codec {
            1 => gzip_at(level, data),
            2 => self.compress(codec, data),
            3 => lz4_at(level, data),
            4 if (ZSTD_LEVEL_MIN..=ZSTD_LEVEL_MAX).contains(&level) => {
                zstd::stream::encode_all(data, level).map_err(|e| e.to_string())
            }
            4 => Err(format!("zstd has no level {level}")),
            other => Err(format!("unknown compression codec {other}")),
        }
    }
}

/// Kafka's `compression.gzip.level` default, zlib's own (6).
pub const GZIP_LEVEL_DEFAULT: i32 = -1;
/// Kafka's `compression.lz4.level` default: its fast compressor.
pub const LZ4_LEVEL_DEFAULT: i32 = 9;
/// zstd's level range (`ZstdCompression.MIN_LEVEL`, `MAX_LEVEL` in Kafka 4.x).
pub const ZSTD_LEVEL_MIN: i32 = -131_072;
/// See [`ZSTD_LEVEL_MIN`].
pub const ZSTD_LEVEL_MAX: i32 = 22;

fn gzip_at(level: i32, data: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Write;
    let compression = match u32::try_from(level) {
        Ok(level @ 1..=9) => flate2::Compression::new(level),
        _ if level == GZIP_LEVEL_DEFAULT => flate2::Compression::default(),
        _ => return Err(format!("gzip has no level {level}")),
    };
    let mut encoder =
        flate2::write::GzEncoder::new(Vec::with_capacity(data.len() / 2 + 64), compression);
    encoder.write_all(data).map_err(|e| e.to_string())?;
    encoder.finish().map_err(|e| e.to_string())
}

fn lz4_at(level: i32, data: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Write;
    // lz4's frame API: 0 is its fast mode, 3–12 high compression.
    let frame_level = match u32::try_from(level) {
        _ if level == LZ4_LEVEL_DEFAULT => 0,
        Ok(level @ 1..=17) => level.min(12),
        _ => return Err(format!("lz4 has no level {level}")),
    };
    let mut encoder = lz4::EncoderBuilder::new()
        .level(frame_level)
        .block_mode(lz4::BlockMode::Independent)
        .build(Vec::with_capacity(data.len() / 2 + 64))
        .map_err(|e| e.to_string())?;
    encoder.write_all(data).map_err(|e| e.to_string())?;
    let (out, result) = encoder.finish();
    result.map_err(|e| e.to_string())?;
    Ok(out)
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
            // The metric's time is the machine's (finer than the clock's milliseconds; metrics
            // never feed back into what a node does, so a simulation stays deterministic).
            let started = std::time::Instant::now();
            let metrics = &self.metrics.cleaner;
            let elapsed_ms = || self.clock.now_ms().saturating_sub(started_ms);
            let count_time = || metrics.seconds.inc_by(started.elapsed().as_secs_f64());
            let output = match plan.run(&KafkaCodecs) {
                Ok(output) => output,
                Err(e) => {
                    metrics.failures.inc();
                    count_time();
                    warn!(partition = %partition.tp, error = %e, "log cleaning failed");
                    continue;
                }
            };
            let Ok(mut log) = partition.lock_log() else {
                continue;
            };
            let finished = log.finish_compaction(output, self.clock.now_ms());
            drop(log);
            count_time();
            match finished {
                Ok(stats) if stats.aborted => {
                    metrics.aborted.inc();
                    info!(partition = %partition.tp, "log changed while cleaning; will retry")
                }
                Ok(stats) => {
                    metrics.bytes_read.inc_by(stats.bytes_before);
                    metrics.bytes_written.inc_by(stats.bytes_after);
                    metrics.records_removed.inc_by(stats.records_removed);
                    metrics.passes.inc();
                    info!(
                        partition = %partition.tp,
                        segments = stats.segments_rewritten,
                        bytes_before = stats.bytes_before,
                        bytes_after = stats.bytes_after,
                        records_removed = stats.records_removed,
                        tombstones_removed = stats.tombstones_removed,
                        markers_removed = stats.markers_removed,
                        cleaner_offset = %stats.cleaner_offset,
                        keys = stats.keys,
                        elapsed_ms = elapsed_ms(),
                        "compacted log"
                    )
                }
                Err(e) => {
                    metrics.failures.inc();
                    warn!(partition = %partition.tp, error = %e, "log cleaning failed")
                }
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

    // Shows: kafka-protocol's own decompressors read what these codecs wrote and the other way
    // round (the bounded readers parse the same framing), and a decompression bomb is refused
    // by every codec instead of allocating its output.
    #[test]
    fn bounded_decompression_matches_kafka_protocol_and_refuses_bombs() {
        use keel_wire::kafka_protocol::compression::Decompressor;
        let data: Vec<u8> = (0..50_000u32)
            .flat_map(|i| (i % 13).to_be_bytes())
            .collect();
        let theirs = |codec: i16, compressed: &[u8]| -> Vec<u8> {
            let mut input = compressed;
            let take = |b: &mut bytes::Bytes| Ok(b.to_vec());
            match codec {
                1 => Gzip::decompress(&mut input, take),
                2 => Snappy::decompress(&mut input, take),
                3 => Lz4::decompress(&mut input, take),
                _ => Zstd::decompress(&mut input, take),
            }
            .unwrap()
        };
        let zeros = vec![0u8; DECOMPRESSED_BATCH_MAX + 1];
        for codec in 1..=4 {
            let compressed = KafkaCodecs.compress(codec, &data).unwrap();
            assert_eq!(theirs(codec, &compressed), data, "codec {codec}");
            let bomb = KafkaCodecs.compress(codec, &zeros).unwrap();
            assert!(
                bomb.len() < zeros.len() / 20,
                "codec {codec} compresses zeros"
            );
            let error = KafkaCodecs.decompress(codec, &bomb).unwrap_err();
            assert!(error.contains("more than"), "codec {codec}: {error}");
        }
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(KafkaCodecs.decompress(2, &raw).unwrap(), data, "raw snappy");
    }

    // Shows: every KIP-390 level of every codec writes what kafka-protocol's decoders (the
    // framing Kafka's clients read) decode back, the levels are used (a higher gzip and zstd
    // level compresses text smaller than the lowest; lz4's default is its fast mode, smaller
    // than nothing but larger than its highest level), and a level outside Kafka's range is
    // an error, not a silent default.
    #[test]
    fn compress_at_every_level_round_trips() {
        use keel_wire::kafka_protocol::compression::Decompressor;
        let data: Vec<u8> = (0..40_000u32)
            .flat_map(|i| format!("record {} of topic orders, key {}; ", i, i % 97).into_bytes())
            .collect();
        let theirs = |codec: i16, compressed: &[u8]| -> Vec<u8> {
            let mut input = compressed;
            let take = |b: &mut bytes::Bytes| Ok(b.to_vec());
            match codec {
                1 => Gzip::decompress(&mut input, take),
                2 => Snappy::decompress(&mut input, take),
                3 => Lz4::decompress(&mut input, take),
                _ => Zstd::decompress(&mut input, take),
            }
            .unwrap()
        };
        let levels: [(i16, Vec<i32>); 4] = [
            (1, vec![-1, 1, 5, 9]),
            (2, vec![0]),
            (3, vec![1, 2, 9, 12, 17]),
            (4, vec![-131072, -5, 1, 3, 19, 22]),
        ];
        for (codec, levels) in levels {
            let mut sizes = Vec::new();
            for level in levels {
                let out = KafkaCodecs
                    .compress_at_level(codec, Some(level), &data)
                    .unwrap();
                assert_eq!(theirs(codec, &out), data, "codec {codec} level {level}");
                assert_eq!(KafkaCodecs.decompress(codec, &out).unwrap(), data);
                sizes.push((level, out.len()));
            }
            let size = |level: i32| sizes.iter().find(|(l, _)| *l == level).unwrap().1;
            match codec {
                1 => assert!(size(9) < size(1), "{sizes:?}"),
                3 => assert!(size(12) < size(9) && size(9) < data.len(), "{sizes:?}"),
                4 => assert!(size(19) < size(-5), "{sizes:?}"),
                _ => {}
            }
        }
        for (codec, level) in [(1, 0), (1, 10), (3, 0), (3, 18), (4, 23)] {
            assert!(
                KafkaCodecs
                    .compress_at_level(codec, Some(level), &data)
                    .is_err(),
                "codec {codec} level {level}"
            );
        }
    }
}
