//! Tests of the producer-batch checks and the conversion to the topic's codec. A toy codec stands
//! in for the real ones (keel-node tests those against kafka-protocol's decoders): it marks the
//! codec and level it compressed with, so a test can see which were used.

use super::*;
use crate::batch::{parse_batch_at, CONTROL_ATTRIBUTE, TIMESTAMP_TYPE_ATTRIBUTE};
use crate::plain_batch::{build_keyed_batch, set_producer, KeyedRecord};

const NOW: i64 = 1_800_000_000_000;
const HOUR: i64 = 3_600_000;

/// Output: `[codec, level or 0x7f]` then the input with every byte flipped. Decompression
/// refuses more than `LIMIT` bytes, as the real codecs' bounded readers do.
struct Marking;

const LIMIT: usize = 64 << 10;

impl RecordCodecs for Marking {
    fn decompress(&self, codec: i16, data: &[u8]) -> Result<Vec<u8>, String> {
        match data {
            [c, _, rest @ ..] if i16::from(*c) == codec => {
                if rest.len() > LIMIT {
                    return Err(format!("records decompress to more than {LIMIT} bytes"));
                }
                Ok(rest.iter().map(|b| !b).collect())
            }
            _ => Err(format!("not codec {codec}")),
        }
    }

    fn compress(&self, codec: i16, data: &[u8]) -> Result<Vec<u8>, String> {
        self.compress_at_level(codec, None, data)
    }

    fn compress_at_level(
        &self,
        codec: i16,
        level: Option<i32>,
        data: &[u8],
    ) -> Result<Vec<u8>, String> {
        let mut out = vec![codec as u8, level.map_or(0x7f, |l| l as u8)];
        out.extend(data.iter().map(|b| !b));
        Ok(out)
    }
}

fn tp() -> TopicPartition {
    TopicPartition {
        topic: "orders".to_string(),
        partition: 3,
    }
}

fn rules() -> ProducerBatchRules {
    ProducerBatchRules {
        compacted: false,
        timestamp_type: TimestampType::CreateTime,
        timestamp_before_max_ms: i64::MAX,
        timestamp_after_max_ms: HOUR,
        max_message_bytes: 1_048_588,
        compression: TopicCompression::Producer,
    }
}

fn check<'a>(batch: &'a [u8], rules: &ProducerBatchRules) -> Result<Validated<'a>, Refused> {
    validate_producer_batches(batch, rules, &tp(), NOW, &Marking)
}

fn record_errors(result: Result<Validated<'_>, Refused>) -> RecordErrors {
    match result {
        Err(Refused::Records(errors)) => errors,
        other => panic!("expected record errors, got {other:?}"),
    }
}

fn batch_error(result: Result<Validated<'_>, Refused>) -> LogError {
    match result {
        Err(Refused::Batch(error)) => error,
        other => panic!("expected a batch error, got {other:?}"),
    }
}

fn indexes(errors: &RecordErrors) -> Vec<i32> {
    errors.errors.iter().map(|e| e.batch_index).collect()
}

/// `batch` in codec `id` (through the toy codec), as a producer would send it.
fn compressed(batch: &[u8], id: i16) -> Vec<u8> {
    let to_codec = ProducerBatchRules {
        compression: TopicCompression::Codec { id, level: None },
        ..rules()
    };
    check(batch, &to_codec).unwrap().bytes.into_owned()
}

fn codec_of(batch: &[u8]) -> i16 {
    BatchHeader::parse(batch).unwrap().attributes & COMPRESSION_CODEC_MASK
}

/// A record read back: key, value, timestamp, offset delta.
type Contents = (Option<Vec<u8>>, Option<Vec<u8>>, i64, i64);

/// The (key, value, timestamp, offset delta) of each record of `batch`, decompressed by the toy
/// codec.
fn contents(batch: &[u8]) -> Vec<Contents> {
    let view = parse_batch_at(batch, 0).expect("a valid batch, CRC included");
    let section = records_section(&view, codec_of(batch), &Marking).unwrap();
    parse_records(&section, view.header.records_count)
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.key.map(<[u8]>::to_vec),
                r.value.map(<[u8]>::to_vec),
                view.header.base_timestamp + r.timestamp_delta,
                r.offset_delta,
            )
        })
        .collect()
}

fn set_attribute(batch: &mut [u8], bit: i16) {
    let attributes = i16::from_be_bytes([batch[ATTRIBUTES_POS], batch[ATTRIBUTES_POS + 1]]) | bit;
    batch[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
}

// Shows: KIP-467 on a compacted topic — the keyless records (and only they) are named by their
// index with Kafka's message (LogValidator.validateKey), the partition error is INVALID_RECORD
// and the summary is processRecordErrors' (Kafka 4.1 answers exactly this; test_configs_produce.py).
#[test]
fn keyless_records_of_a_compacted_topic_are_named_by_index() {
    let records: Vec<KeyedRecord<'_>> = vec![
        (Some(b"a"), Some(b"1"), NOW),
        (None, Some(b"2"), NOW),
        (Some(b"c"), Some(b"3"), NOW),
        (None, Some(b"4"), NOW),
        (None, None, NOW),
        (None, Some(b"6"), NOW),
    ];
    let batch = build_keyed_batch(&records);
    let compacted = ProducerBatchRules {
        compacted: true,
        ..rules()
    };
    for batch in [batch.clone(), compressed(&batch, CODEC_ZSTD)] {
        let errors = record_errors(check(&batch, &compacted));
        assert_eq!(errors.kind, RecordErrorKind::InvalidRecord);
        assert_eq!(errors.kind.code(), 87);
        assert_eq!(indexes(&errors), [1, 3, 4, 5]);
        assert_eq!(errors.total, 4);
        let message =
            "Compacted topic cannot accept message without key in topic partition orders-3";
        assert!(errors.errors.iter().all(|e| e.message == message));
        assert_eq!(
            errors.summary(),
            format!(
                "One or more records have been rejected due to 4 record errors in total, and only \
                 showing the first three errors at most: [RecordError(batchIndex=1, message='{message}'), \
                 RecordError(batchIndex=3, message='{message}'), RecordError(batchIndex=4, message='{message}')]"
            )
        );
    }
    // The same batch on a topic that is not compacted is fine.
    assert!(check(&batch, &rules()).is_ok());
}

// Shows: KIP-937's bounds on a CreateTime topic — records outside [now - before, now + after]
// are INVALID_TIMESTAMP with Kafka's message (LogValidator.validateTimestamp), -1 (no
// timestamp) is never out of range, any other negative timestamp is, and a timestamp error
// makes the partition's error INVALID_TIMESTAMP even beside a key error.
#[test]
fn timestamps_outside_the_bounds_are_refused() {
    let minute = 60_000;
    let bounded = ProducerBatchRules {
        timestamp_before_max_ms: minute,
        timestamp_after_max_ms: minute,
        ..rules()
    };
    let batch = build_keyed_batch(&[
        (None, Some(b"1"), NOW),
        (None, Some(b"2"), NOW + HOUR),
        (None, Some(b"3"), NOW - HOUR),
        (None, Some(b"4"), NO_TIMESTAMP),
        (None, Some(b"5"), -5),
        (None, Some(b"6"), NOW + minute),
        (None, Some(b"7"), NOW - minute),
    ]);
    let errors = record_errors(check(&batch, &bounded));
    assert_eq!(errors.kind, RecordErrorKind::InvalidTimestamp);
    assert_eq!(errors.kind.code(), 32);
    assert_eq!(indexes(&errors), [1, 2, 4]);
    assert_eq!(
        errors.errors[0].message,
        format!(
            "Timestamp {} of message with offset 1 is out of range. The timestamp should be \
             within [{}, {}]",
            NOW + HOUR,
            NOW - minute,
            NOW + minute
        )
    );
    assert_eq!(
        errors.summary(),
        "One or more records have been rejected due to invalid timestamp"
    );

    // Kafka 4's defaults: no lower bound (its message shows now - Long.MAX), one hour ahead.
    let batch = build_keyed_batch(&[
        (None, Some(b"1"), 0),
        (Some(b"k"), Some(b"2"), NOW + 2 * HOUR),
    ]);
    let errors = record_errors(check(
        &batch,
        &ProducerBatchRules {
            compacted: true,
            ..rules()
        },
    ));
    assert_eq!(errors.kind, RecordErrorKind::InvalidTimestamp);
    assert_eq!(indexes(&errors), [0, 1]);
    assert!(errors.errors[0]
        .message
        .starts_with("Compacted topic cannot accept"));
    assert!(errors.errors[1].message.ends_with(&format!(
        "within [{}, {}]",
        NOW - i64::MAX,
        NOW + HOUR
    )));

    // A LogAppendTime topic does not bound what producers write: the broker stamps the batch.
    let log_append = ProducerBatchRules {
        timestamp_type: TimestampType::LogAppendTime,
        ..bounded
    };
    assert!(check(&batch, &log_append).is_ok());
}

// Shows: a producer's batch marked LogAppendTime is refused record by record on a
// LogAppendTime topic ("Producer should not set timestamp type to LogAppendTime"), and on a
// CreateTime topic its records take the batch's max timestamp, which passes if in range —
// both as Kafka 4.1 answers.
#[test]
fn a_batch_marked_log_append_time_by_its_producer() {
    let mut batch = build_keyed_batch(&[(None, Some(b"1"), NOW), (Some(b"kk"), Some(b"22"), NOW)]);
    set_attribute(&mut batch, TIMESTAMP_TYPE_ATTRIBUTE);
    let log_append = ProducerBatchRules {
        timestamp_type: TimestampType::LogAppendTime,
        ..rules()
    };
    let errors = record_errors(check(&batch, &log_append));
    assert_eq!(errors.kind, RecordErrorKind::InvalidTimestamp);
    assert_eq!(indexes(&errors), [0, 1]);
    assert_eq!(
        errors.errors[1].message,
        format!(
            "Invalid timestamp type in message DefaultRecord(offset=1, timestamp={NOW}, key=2 \
             bytes, value=2 bytes). Producer should not set timestamp type to LogAppendTime."
        )
    );
    assert!(check(&batch, &rules()).is_ok());
}

// Shows: the batch-level rules come first and refuse the whole batch without record errors —
// a batch over max.message.bytes is MESSAGE_TOO_LARGE even when its records are also invalid
// (UnifiedLog.analyzeAndValidateRecords checks the batch's size, not a record's), and so is more
// than one batch, a base offset other than 0, an inconsistent count, a control batch, an
// idempotent batch without a sequence.
#[test]
fn batch_rules_refuse_the_whole_batch() {
    let keyless = build_keyed_batch(&[(None, Some(&[7u8; 300]), NOW)]);
    let small = ProducerBatchRules {
        compacted: true,
        max_message_bytes: 200,
        ..rules()
    };
    let error = batch_error(check(&keyless, &small));
    assert_eq!(error.kafka_error_code(), Some(10), "{error}");

    let one = build_keyed_batch(&[(Some(b"k"), Some(b"v"), NOW)]);
    let two = [one.clone(), one.clone()].concat();
    assert_eq!(
        batch_error(check(&two, &rules())).kafka_error_code(),
        Some(87)
    );
    assert_eq!(
        batch_error(check(&[], &rules())).kafka_error_code(),
        Some(87)
    );

    let mut moved = one.clone();
    crate::batch::set_base_offset(&mut moved, crate::types::Offset(5));
    let error = batch_error(check(&moved, &rules()));
    assert!(error.to_string().contains("starts at offset 5"), "{error}");

    let mut control = one.clone();
    set_attribute(&mut control, CONTROL_ATTRIBUTE);
    assert!(batch_error(check(&control, &rules()))
        .to_string()
        .contains("control"));

    let mut no_sequence = one.clone();
    set_producer(&mut no_sequence, 42, 0, -1);
    assert!(batch_error(check(&no_sequence, &rules()))
        .to_string()
        .contains("no sequence"));

    let mut corrupt = one.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    assert_eq!(
        batch_error(check(&corrupt, &rules())).kafka_error_code(),
        Some(2)
    );
}

// Shows: records that cannot be read are refused whole, never panicking: a section that does
// not decompress, one that decompresses past the codec's bound (a decompression bomb), and
// records that do not parse.
#[test]
fn unreadable_records_are_refused_whole() {
    let compacted = ProducerBatchRules {
        compacted: true,
        ..rules()
    };
    let keyed = build_keyed_batch(&[(Some(b"k"), Some(b"v"), NOW)]);
    let mut wrong_codec = compressed(&keyed, CODEC_GZIP);
    wrong_codec[ATTRIBUTES_POS + 1] = (wrong_codec[ATTRIBUTES_POS + 1] & !0x07) | CODEC_LZ4 as u8;
    let crc = compute_crc(&wrong_codec);
    wrong_codec[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    let error = batch_error(check(&wrong_codec, &compacted));
    assert!(
        error.to_string().contains("cannot be decompressed"),
        "{error}"
    );

    let bomb = build_keyed_batch(&[(Some(b"k"), Some(&vec![0u8; LIMIT + 1]), NOW)]);
    let bomb = compressed(&bomb, CODEC_ZSTD);
    let error = batch_error(check(&bomb, &compacted));
    assert!(error.to_string().contains("more than"), "{error}");

    // A record length that runs past the section, CRC made valid again.
    let mut malformed = keyed.clone();
    malformed[HEADER_SIZE] = 0x7e;
    let crc = compute_crc(&malformed);
    malformed[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    let error = batch_error(check(&malformed, &compacted));
    assert!(error.to_string().contains("malformed"), "{error}");
}

// Shows: compression.type names the codec the topic stores (LogValidator's
// buildRecordsAndAssignOffsets): a batch in another codec is rebuilt in the topic's at its
// level — records, timestamps, producer id, epoch and sequence kept, offset deltas made 0, 1, 2
// (a producer's gaps closed), length and CRC recomputed — while `producer` and the batch's own
// codec leave the request's bytes untouched, and `uncompressed` decompresses.
#[test]
fn batches_are_rebuilt_in_the_topic_codec() {
    let records: Vec<KeyedRecord<'_>> = vec![
        (Some(b"a"), Some(b"one"), NOW),
        (None, Some(b"two"), NOW + 5),
        (Some(b"c"), None, NOW - 3),
    ];
    let mut plain = build_keyed_batch(&records);
    set_producer(&mut plain, 7, 2, 40);
    let want = contents(&plain);
    assert_eq!(want.iter().map(|r| r.3).collect::<Vec<_>>(), [0, 1, 2]);

    let validated = check(&plain, &rules()).unwrap();
    assert!(!validated.recompressed);
    assert!(matches!(validated.bytes, Cow::Borrowed(b) if b == plain.as_slice()));

    let zstd_9 = ProducerBatchRules {
        compression: TopicCompression::Codec {
            id: CODEC_ZSTD,
            level: Some(9),
        },
        ..rules()
    };
    let rebuilt = check(&plain, &zstd_9).unwrap();
    assert!(rebuilt.recompressed);
    let rebuilt = rebuilt.bytes.into_owned();
    assert_eq!(codec_of(&rebuilt), CODEC_ZSTD);
    assert_eq!(rebuilt[HEADER_SIZE..HEADER_SIZE + 2], [CODEC_ZSTD as u8, 9]);
    assert_eq!(contents(&rebuilt), want);
    let (before, after) = (
        BatchHeader::parse(&plain).unwrap(),
        BatchHeader::parse(&rebuilt).unwrap(),
    );
    assert_eq!(
        (after.producer_id, after.producer_epoch, after.base_sequence),
        (7, 2, 40)
    );
    assert_eq!(
        (
            after.base_timestamp,
            after.max_timestamp,
            after.records_count
        ),
        (before.base_timestamp, before.max_timestamp, 3)
    );
    assert_eq!(after.last_offset_delta, 2);

    // Already in the topic's codec: kept as sent.
    let kept = check(&rebuilt, &zstd_9).unwrap();
    assert!(!kept.recompressed && kept.bytes == rebuilt.as_slice());

    // gzip into an lz4 topic, and back to uncompressed.
    let gzip = compressed(&plain, CODEC_GZIP);
    let lz4 = ProducerBatchRules {
        compression: TopicCompression::Codec {
            id: CODEC_LZ4,
            level: None,
        },
        ..rules()
    };
    let in_lz4 = check(&gzip, &lz4).unwrap().bytes.into_owned();
    assert_eq!(
        (codec_of(&in_lz4), contents(&in_lz4)),
        (CODEC_LZ4, want.clone())
    );
    let uncompressed = ProducerBatchRules {
        compression: TopicCompression::Codec {
            id: CODEC_NONE,
            level: None,
        },
        ..rules()
    };
    let plain_again = check(&in_lz4, &uncompressed).unwrap().bytes.into_owned();
    assert_eq!(
        plain_again, plain,
        "decompressed to the producer's own bytes"
    );

    // A producer whose offset deltas skip (0, 5, 6): rebuilt as 0, 1, 2.
    let mut gappy = Vec::new();
    let view = parse_batch_at(&plain, 0).unwrap();
    for (index, record) in parse_records(&plain[HEADER_SIZE..], 3)
        .unwrap()
        .iter()
        .enumerate()
    {
        let delta = if index == 0 { 0 } else { index as i64 + 4 };
        encode_with_offset_delta(&mut gappy, record, delta);
    }
    let mut skewed = plain[..HEADER_SIZE].to_vec();
    skewed.extend_from_slice(&gappy);
    assert_eq!(skewed.len(), view.bytes.len());
    let crc = compute_crc(&skewed);
    skewed[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    let fixed = check(&skewed, &zstd_9).unwrap().bytes.into_owned();
    assert_eq!(contents(&fixed), want);
}

// Shows: a batch with more bad records than RECORD_ERRORS_MAX names the first
// RECORD_ERRORS_MAX of them and counts them all.
#[test]
fn record_errors_are_bounded() {
    let count = RECORD_ERRORS_MAX + 5;
    let records: Vec<KeyedRecord<'_>> = (0..count).map(|_| (None, Some(&b"v"[..]), NOW)).collect();
    let batch = build_keyed_batch(&records);
    let errors = record_errors(check(
        &batch,
        &ProducerBatchRules {
            compacted: true,
            ..rules()
        },
    ));
    assert_eq!(errors.total, count);
    assert_eq!(errors.errors.len(), RECORD_ERRORS_MAX);
    assert_eq!(
        errors.errors.last().unwrap().batch_index,
        RECORD_ERRORS_MAX as i32 - 1
    );
    assert!(errors
        .summary()
        .contains(&format!("due to {count} record errors")));
}

// Shows: whether the broker must read (decompress) records to check a batch: only compressed
// batches whose checks or conversion need their records.
#[test]
fn reads_records_only_when_needed() {
    let plain = build_keyed_batch(&[(Some(b"k"), Some(b"v"), NOW)]);
    let zstd = compressed(&plain, CODEC_ZSTD);
    let unbounded = ProducerBatchRules {
        timestamp_after_max_ms: i64::MAX,
        ..rules()
    };
    assert!(!reads_records(&plain, &rules()));
    assert!(reads_records(&zstd, &rules()));
    assert!(!reads_records(&zstd, &unbounded));
    let to_lz4 = ProducerBatchRules {
        compression: TopicCompression::Codec {
            id: CODEC_LZ4,
            level: None,
        },
        ..unbounded
    };
    assert!(reads_records(&zstd, &to_lz4));
    assert!(!reads_records(b"short", &rules()));
}
