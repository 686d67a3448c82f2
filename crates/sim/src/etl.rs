//! Consume-transform-produce in the simulator (issue 23): a processor that reads an input
//! partition with read_committed, writes one output record per input record and commits the
//! consumed offsets in the same transaction (`sendOffsetsToTransaction`), as Kafka Streams and
//! the Java client's ETL loop do. After an abort or a failure it starts again from the group's
//! committed offset (OffsetFetch with `require_stable`), like a restarted task.
//!
//! The property, *the committed offsets never diverge from the output*: every input record
//! below the group's committed offset has exactly one output record visible to read_committed
//! readers, and no input record at or above it has one. Checked when the processor reads the
//! committed offset (it is one a transaction asked to commit, and not below one whose commit
//! was acknowledged) and at the end of the run ([`etl_violations`]).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use keel_wire::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use keel_wire::kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, OffsetFetchRequest,
    OffsetFetchResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;

use crate::client::{lock, Client, ClientViolation, Tp};
use crate::txn::{retriable_coordinator_error, TxnEnd, TxnError, TxnOracle, TxnProducer};

const RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// `UNSTABLE_OFFSET_COMMIT`: a transaction holding offsets of the partition is still open.
const UNSTABLE_OFFSET_COMMIT: i16 = 88;

impl Client {
    /// The coordinator of `group`, asking each broker in turn (FindCoordinator key type 0).
    pub(crate) async fn group_coordinator(&mut self, group: &str) -> Option<i32> {
        let request = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]);
        for broker in self.broker_ids() {
            let response: Option<FindCoordinatorResponse> = self
                .call(broker, ApiKey::FindCoordinator, 4, &request)
                .await;
            if let Some(c) = response.as_ref().and_then(|r| r.coordinators.first()) {
                if c.error_code == 0 && c.node_id.0 >= 0 {
                    return Some(c.node_id.0);
                }
            }
        }
        None
    }

    /// The offset `group` committed for `tp` (`Some(None)`: none), read with
    /// `require_stable` (OffsetFetch v7) and retried while a transaction holding it is open;
    /// `None` if no coordinator answered before `deadline_us`.
    pub async fn committed_offset(
        &mut self,
        group: &str,
        tp: &Tp,
        deadline_us: u64,
    ) -> Option<Option<i64>> {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(tp.0.clone())))
                .with_partition_indexes(vec![tp.1])]))
            .with_require_stable(true);
        loop {
            if self.now() >= deadline_us {
                return None;
            }
            if let Some(coordinator) = self.group_coordinator(group).await {
                let response: Option<OffsetFetchResponse> = self
                    .call(coordinator, ApiKey::OffsetFetch, 7, &request)
                    .await;
                if let Some(r) = response.filter(|r| r.error_code == 0) {
                    let partition = r
                        .topics
                        .iter()
                        .flat_map(|t| t.partitions.iter())
                        .find(|p| p.partition_index == tp.1);
                    match partition.map(|p| (p.error_code, p.committed_offset)) {
                        Some((0, offset)) => return Some((offset >= 0).then_some(offset)),
                        Some((code, _))
                            if code == UNSTABLE_OFFSET_COMMIT
                                || retriable_coordinator_error(code) => {}
                        _ => return Some(None),
                    }
                }
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }
}

/// A consume-transform-produce processor: one input partition, one output partition, one
/// consumer group, one transactional producer.
pub struct Etl {
    producer: TxnProducer,
    reader: Client,
    group: String,
    input: Tp,
    output: Tp,
    /// Where the next round reads; `None`: from the group's committed offset.
    position: Option<i64>,
}

impl Etl {
    pub fn new(producer: TxnProducer, reader: Client, group: &str, input: Tp, output: Tp) -> Etl {
        lock(reader.oracle()).txns.etl_runs.insert((
            group.to_string(),
            input.clone(),
            output.clone(),
        ));
        Etl {
            producer,
            reader,
            group: group.to_string(),
            input,
            output,
            position: None,
        }
    }

    /// One round: reads up to `max` input records from the position, writes one output
    /// record each and the offset after the last to the group in one transaction, and commits
    /// or aborts it. Returns how many input records the transaction held (0: nothing to read,
    /// no transaction). On abort or failure the next round starts from the committed offset.
    pub async fn round(
        &mut self,
        max: usize,
        commit: bool,
        deadline_us: u64,
    ) -> Result<usize, TxnError> {
        let outcome = self.try_round(max, commit, deadline_us).await;
        match &outcome {
            Ok(_) if commit => {}
            Ok(_) => self.position = None,
            Err(e) => {
                self.position = None;
                // Abort what was never ended (an unanswered end is the coordinator's to decide).
                let unended = self.producer.current().is_some_and(|key| {
                    lock(self.reader.oracle())
                        .txns
                        .txns
                        .get(key)
                        .is_some_and(|t| t.end == TxnEnd::Open)
                });
                if unended && !matches!(e, TxnError::Fenced(_)) {
                    let abort_deadline = self.reader.now() + 5_000_000;
                    let _ = self.producer.end(false, abort_deadline).await;
                }
                self.producer.reset();
            }
        }
        outcome
    }

    async fn try_round(
        &mut self,
        max: usize,
        commit: bool,
        deadline_us: u64,
    ) -> Result<usize, TxnError> {
        let from = match self.position {
            Some(p) => p,
            None => {
                let committed = self
                    .reader
                    .committed_offset(&self.group, &self.input, deadline_us)
                    .await
                    .ok_or_else(|| TxnError::Failed("committed offset not read".into()))?;
                self.check_committed(committed);
                committed.unwrap_or(0)
            }
        };
        self.position = Some(from);
        let read = self
            .reader
            .fetch_committed(&self.input, from, deadline_us)
            .await
            .ok_or_else(|| {
                TxnError::Failed(format!("{}-{} not read", self.input.0, self.input.1))
            })?;
        let taken: Vec<(i64, Bytes)> = read
            .records
            .into_iter()
            .filter(|(offset, _)| *offset >= from)
            .take(max)
            .collect();
        let Some(last) = taken.last().map(|(offset, _)| *offset) else {
            // Only control batches or aborted data: the position moves past them.
            self.position = Some(read.next);
            return Ok(0);
        };
        let next = if taken.len() == max {
            last + 1
        } else {
            read.next.max(last + 1)
        };
        let key = self.producer.begin(deadline_us).await?;
        let outputs: Vec<Bytes> = {
            let mut oracle = lock(self.reader.oracle());
            taken
                .iter()
                .map(|(offset, value)| {
                    let out = Bytes::from(format!(
                        "etl {}#{} of {}-{}@{offset}",
                        key.0, key.1, self.input.0, self.input.1
                    ));
                    oracle
                        .txns
                        .etl_outputs
                        .insert(out.clone(), (self.input.clone(), *offset, value.clone()));
                    out
                })
                .collect()
        };
        let output = self.output.clone();
        self.producer
            .send_values(&output, outputs, deadline_us)
            .await?;
        let offsets = [(self.input.clone(), next)];
        self.producer
            .send_offsets(&self.group, &offsets, deadline_us)
            .await?;
        self.producer.end(commit, deadline_us).await?;
        if commit {
            self.position = Some(next);
        }
        Ok(taken.len())
    }

    /// A committed offset read back is one a transaction asked to commit, and not below one
    /// whose commit was acknowledged (the processor's transactions are sequential).
    fn check_committed(&self, committed: Option<i64>) {
        let mut oracle = lock(self.reader.oracle());
        let sent = |end_ok: fn(TxnEnd) -> bool| {
            oracle
                .txns
                .txns
                .values()
                .filter(move |t| end_ok(t.end))
                .flat_map(|t| t.offsets.iter())
                .filter(|(g, tp, _)| *g == self.group && *tp == self.input)
                .map(|(_, _, offset)| *offset)
        };
        let requested: Vec<i64> = sent(TxnEnd::commit_requested).collect();
        let acknowledged = sent(|e| e == TxnEnd::Committed).max();
        let detail = match committed {
            Some(c) if !requested.contains(&c) => Some(format!(
                "group {} committed offset {c} for {}-{}, which no transaction asked to commit",
                self.group, self.input.0, self.input.1
            )),
            _ if committed < acknowledged => Some(format!(
                "group {} committed offset {committed:?} for {}-{}, below {acknowledged:?} whose commit was acknowledged",
                self.group, self.input.0, self.input.1
            )),
            _ => None,
        };
        if let Some(detail) = detail {
            oracle.violations.push(ClientViolation {
                property: "committed offsets are those of committed transactions",
                detail,
            });
        }
    }
}

/// The end-of-run property of the consume-transform-produce run (`group`, `input`,
/// `output`), once both partitions were read whole with read_committed and `committed` is the
/// group's stable committed offset: each input record below it has exactly one output record
/// (made from that record), none at or above it has one.
pub fn etl_violations(
    oracle: &TxnOracle,
    group: &str,
    input: &Tp,
    output: &Tp,
    committed: Option<i64>,
) -> Vec<ClientViolation> {
    let committed = committed.unwrap_or(0);
    let empty = BTreeMap::new();
    let inputs = oracle.read.get(input).unwrap_or(&empty);
    let mut made: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    let mut out = Vec::new();
    let mut violation = |detail: String| {
        out.push(ClientViolation {
            property: "the committed offsets never diverge from the output",
            detail: format!("group {group}, {}-{}: {detail}", input.0, input.1),
        })
    };
    for (at, value) in oracle.read.get(output).unwrap_or(&empty) {
        let Some((tp, offset, source)) = oracle.etl_outputs.get(value) else {
            continue;
        };
        if tp != input {
            continue;
        }
        if inputs.get(offset).is_some_and(|v| v != source) {
            violation(format!(
                "output at {}-{}@{at} was made from {:?}, but input offset {offset} reads {:?}",
                output.0,
                output.1,
                String::from_utf8_lossy(source),
                inputs
                    .get(offset)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            ));
        }
        made.entry(*offset).or_default().push(*at);
    }
    for (offset, ats) in &made {
        if *offset >= committed {
            violation(format!(
                "input offset {offset} has output (at {ats:?}) but the committed offset is {committed}"
            ));
        } else if ats.len() > 1 {
            violation(format!(
                "input offset {offset} has {} outputs (at {ats:?})",
                ats.len()
            ));
        }
    }
    let missing: Vec<i64> = inputs
        .range(..committed)
        .map(|(offset, _)| *offset)
        .filter(|offset| !made.contains_key(offset))
        .collect();
    if !missing.is_empty() {
        violation(format!(
            "{} input records below the committed offset {committed} have no output: offsets {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str) -> Tp {
        (topic.to_string(), 0)
    }

    /// Inputs at offsets 0, 1, 3 (2 was a marker), outputs made from `made` (input offsets).
    fn oracle(made: &[i64]) -> TxnOracle {
        let mut o = TxnOracle::default();
        let inputs = o.read.entry(tp("in")).or_default();
        for offset in [0, 1, 3] {
            inputs.insert(offset, Bytes::from(format!("v{offset}")));
        }
        for (i, offset) in made.iter().enumerate() {
            let value = Bytes::from(format!("out {i}"));
            o.etl_outputs.insert(
                value.clone(),
                (tp("in"), *offset, Bytes::from(format!("v{offset}"))),
            );
            o.read.entry(tp("out")).or_default().insert(i as i64, value);
        }
        o
    }

    fn check(o: &TxnOracle, committed: Option<i64>) -> usize {
        etl_violations(o, "g", &tp("in"), &tp("out"), committed).len()
    }

    #[test]
    fn each_input_below_the_committed_offset_has_exactly_one_output() {
        assert_eq!(check(&oracle(&[0, 1, 3]), Some(4)), 0);
        assert_eq!(check(&oracle(&[0, 1]), Some(2)), 0);
        assert_eq!(check(&oracle(&[0, 1]), Some(3)), 0, "offset 2 is no record");
        assert_eq!(check(&oracle(&[]), None), 0);
        assert_eq!(check(&oracle(&[0]), Some(4)), 1, "1 and 3 have no output");
        assert_eq!(check(&oracle(&[0, 1, 1, 3]), Some(4)), 1, "1 twice");
        assert_eq!(
            check(&oracle(&[0, 1, 3]), Some(2)),
            1,
            "3 beyond the offset"
        );
        assert_eq!(check(&oracle(&[0]), None), 1, "output without a commit");
    }

    #[test]
    fn an_output_made_from_another_value_is_caught() {
        let mut o = oracle(&[0]);
        o.read
            .get_mut(&tp("in"))
            .unwrap()
            .insert(0, Bytes::from("other"));
        assert_eq!(check(&o, Some(1)), 1);
    }
}
