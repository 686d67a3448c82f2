//! The group coordinator (classic consumer-group protocol), built on Keel's own replication.
//!
//! A group lives in one partition of the internal topic `__consumer_offsets`
//! (`abs(javaStringHashCode(group)) % partitions`, Kafka's mapping), and the leader of that
//! partition is its coordinator. Every state change that must survive — a generation's
//! membership and assignment, committed offsets, deletions — is a record appended to that
//! partition with `acks=all` and answered only once the high watermark covers it, so a committed
//! offset has the same durability as any acknowledged `acks=all` record (KIP-966's rules
//! included). A broker that becomes leader of a `__consumer_offsets` partition loads its groups by
//! reading the partition (last record per key wins, tombstones delete) before it answers for them
//! (`COORDINATOR_LOAD_IN_PROGRESS` never lasts beyond that read); one that stops leading drops
//! them and answers `NOT_COORDINATOR`, and clients find the new coordinator.
//!
//! Modules: [`group`] (the state machine of one group), [`records`] (the topic's key and value
//! layout, Kafka's own), [`consumer_protocol`] (reading the consumer protocol's subscription and
//! assignment bytes where the broker needs them). The request handlers are in
//! `crate::handlers::{find_coordinator, groups, offsets}`.

pub mod consumer_protocol;
pub mod group;
pub mod records;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use keel_log::plain_batch::{build_keyed_batch, decode_records};
use keel_log::Offset;
use keel_replication::{Acks, ErrorCode};
use keel_wire::ResponseError;
use tracing::{info, warn};

use self::group::{Group, GroupSettings, Persist};
use self::records::{
    decode_group, decode_key, decode_offset, encode_group, encode_key, OffsetValue, RecordKey,
};
use crate::broker::{AppendError, Broker};
use crate::metrics::GROUP_STATES;
use crate::partition::Partition;

/// The internal topic holding groups and committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The `__consumer_offsets` partition of `group` among `partitions`: Kafka's
/// `Utils.abs(groupId.hashCode) % partitions` (Java's `String.hashCode` over UTF-16 units).
pub fn partition_for(group: &str, partitions: usize) -> i32 {
    let mut hash: i32 = 0;
    for unit in group.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % i32::try_from(partitions.max(1)).unwrap_or(i32::MAX)
}

/// The groups of one `__consumer_offsets` partition this broker leads, loaded at `leader_epoch`.
#[derive(Debug)]
struct LoadedPartition {
    leader_epoch: i32,
    groups: BTreeMap<String, Group>,
}

/// Every group this broker coordinates, by `__consumer_offsets` partition.
#[derive(Debug)]
pub struct GroupCoordinator {
    loaded: Mutex<BTreeMap<i32, LoadedPartition>>,
    pub settings: GroupSettings,
    /// Topics deleted by metadata images since the last timer tick: their committed offsets are
    /// removed from the groups (Kafka's `onPartitionsDeleted`).
    deleted_topics: Mutex<Vec<String>>,
}

/// Records for `__consumer_offsets`: each key with its value, `None` for a tombstone.
pub type GroupRecords = Vec<(RecordKey, Option<Vec<u8>>)>;

/// One group-scoped call's context: the partition it lives in.
pub struct Scope {
    pub partition: Arc<Partition>,
    pub index: i32,
}

impl GroupCoordinator {
    pub fn new(settings: GroupSettings) -> Self {
        GroupCoordinator {
            loaded: Mutex::new(BTreeMap::new()),
            settings,
            deleted_topics: Mutex::new(Vec::new()),
        }
    }

    /// Notes topics a metadata image deleted; the next timer tick removes their offsets.
    pub fn topics_deleted(&self, topics: impl IntoIterator<Item = String>) {
        self.deleted_topics
            .lock()
            .expect("coordinator lock poisoned")
            .extend(topics);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<i32, LoadedPartition>> {
        self.loaded.lock().expect("coordinator lock poisoned")
    }
}

/// Kafka's mapping of an offsets-topic write failure to what group clients understand.
fn write_error(e: ErrorCode) -> ResponseError {
    match e {
        ErrorCode::NotLeaderOrFollower => ResponseError::NotCoordinator,
        _ => ResponseError::CoordinatorNotAvailable,
    }
}

impl Broker {
    /// The coordinator's view of where `group` lives: the `__consumer_offsets` partition, which
    /// this broker must lead (`NOT_COORDINATOR` otherwise; `COORDINATOR_NOT_AVAILABLE` while the
    /// topic does not exist).
    pub fn group_scope(&self, group: &str) -> Result<Scope, ResponseError> {
        // The group id is a length-prefixed (i16) string in every record of the group.
        if group.is_empty() || group.len() > records::MAX_STRING_BYTES {
            return Err(ResponseError::InvalidGroupId);
        }
        let topic = self
            .topic(OFFSETS_TOPIC)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let index = partition_for(group, topic.partitions.len());
        let partition = self
            .partition(OFFSETS_TOPIC, index)
            .filter(|p| p.is_leader())
            .ok_or(ResponseError::NotCoordinator)?;
        Ok(Scope { partition, index })
    }

    /// Runs `f` on the groups of `group`'s partition (loading them first if this broker has not
    /// since it became leader). `f` gets the groups and the time.
    pub fn with_groups<R>(
        &self,
        group: &str,
        f: impl FnOnce(&mut BTreeMap<String, Group>, i64) -> R,
    ) -> Result<(Scope, R), ResponseError> {
        let scope = self.group_scope(group)?;
        let result = self.with_partition_groups(scope.index, f)?;
        Ok((scope, result))
    }

    /// Appends `records` (key, value or tombstone) to the group's partition with acks=all and
    /// waits for the high watermark to cover them.
    pub async fn write_group_records(
        &self,
        scope: &Scope,
        records: GroupRecords,
    ) -> Result<(), ResponseError> {
        if records.is_empty() {
            return Ok(());
        }
        let now_ms = self.clock.now_ms();
        let keys: Vec<Vec<u8>> = records.iter().map(|(k, _)| encode_key(k)).collect();
        let rows: Vec<_> = records
            .iter()
            .zip(&keys)
            .map(|((_, v), k)| (Some(k.as_slice()), v.as_deref(), now_ms))
            .collect();
        let batch = build_keyed_batch(&rows);
        let timeout_ms = self.config.offsets_commit_timeout_ms;
        let waiter = match self.append_as_leader(&scope.partition, &batch, Acks::All, timeout_ms) {
            Ok((_, Some(waiter))) => waiter,
            Ok((_, None)) => return Ok(()),
            Err(AppendError::Replication(code)) => return Err(write_error(code)),
            Err(AppendError::Log(e)) if e.kafka_error_code() == Some(10) => {
                return Err(ResponseError::InvalidCommitOffsetSize)
            }
            Err(e) => {
                warn!(error = %e, "cannot write to __consumer_offsets");
                return Err(ResponseError::CoordinatorNotAvailable);
            }
        };
        match waiter.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(code)) => Err(write_error(code)),
            Err(_) => Err(ResponseError::NotCoordinator),
        }
    }

    /// Writes a group the state machine asked to persist, then tells it how that went.
    pub async fn persist_group(&self, group_id: &str, scope: &Scope, persist: Persist) {
        let record = (
            RecordKey::Group {
                group: group_id.to_string(),
            },
            Some(encode_group(&persist.value)),
        );
        let result = self.write_group_records(scope, vec![record]).await;
        if let Err(e) = &result {
            warn!(group = group_id, error = ?e, "cannot write the group");
        }
        let settings = self.coordinator.settings;
        let _ = self.with_groups(group_id, |groups, now_ms| {
            if let Some(g) = groups.get_mut(group_id) {
                g.synced(&persist, result, now_ms, &settings);
            }
        });
    }

    /// The coordinator's timers, every 100 ms: groups of partitions this broker no longer leads
    /// are dropped (their waiting members answered `NOT_COORDINATOR`); every other group's
    /// sessions and rebalance deadlines run. Returns the writes the groups asked for.
    pub fn coordinator_tick(&self) -> Vec<(String, Scope, Persist)> {
        let now_ms = self.clock.now_ms();
        let settings = self.coordinator.settings;
        let mut writes = Vec::new();
        // For the group gauges: groups by state (as the sweep found them) and offsets.
        let mut by_state = [0u64; GROUP_STATES.len()];
        let mut offsets = 0u64;
        let mut loaded = self.coordinator.lock();
        let indexes: Vec<i32> = loaded.keys().copied().collect();
        for index in indexes {
            let partition = self
                .partition(OFFSETS_TOPIC, index)
                .filter(|p| p.is_leader());
            let current = partition.as_ref().is_some_and(|p| {
                Some(p.leader_epoch().0) == loaded.get(&index).map(|l| l.leader_epoch)
            });
            if !current {
                if let Some(mut gone) = loaded.remove(&index) {
                    info!(
                        partition = index,
                        "no longer the coordinator of this partition's groups"
                    );
                    for g in gone.groups.values_mut() {
                        g.abandon(ResponseError::NotCoordinator);
                    }
                }
                continue;
            }
            let partition = partition.expect("checked");
            let part = loaded.get_mut(&index).expect("listed");
            offsets += part
                .groups
                .values()
                .map(|g| g.offsets.len() as u64)
                .sum::<u64>();
            for (id, group) in &mut part.groups {
                let state = group.state().name();
                if let Some(i) = GROUP_STATES.iter().position(|s| *s == state) {
                    by_state[i] += 1;
                }
                if let Some(persist) = group.tick(now_ms, &settings) {
                    writes.push((
                        id.clone(),
                        Scope {
                            partition: partition.clone(),
                            index,
                        },
                        persist,
                    ));
                }
            }
        }
        drop(loaded);
        self.metrics.set_group_counts(by_state, offsets);
        writes
    }

    /// `offsets.retention.minutes`: deletes the expired offsets of the groups this broker
    /// coordinates ([`Group::expired_offsets`]) with tombstones written at acks=all, and an empty
    /// group left without offsets too (its metadata tombstone), as Kafka does. If the group got
    /// a member or a commit while the tombstones were being written, its metadata is written
    /// again after them.
    pub async fn expire_group_offsets(&self, retention_ms: i64) {
        let now_ms = self.clock.now_ms();
        type Expiry = (String, Vec<((String, i32), i64)>, bool);
        let plans: Vec<Expiry> = {
            let loaded = self.coordinator.lock();
            loaded
                .values()
                .flat_map(|part| part.groups.iter())
                .filter_map(|(id, g)| {
                    let expired = g.expired_offsets(now_ms, retention_ms);
                    let delete_group = g.is_idle() && expired.len() == g.offsets.len();
                    (!expired.is_empty() || delete_group)
                        .then(|| (id.clone(), expired, delete_group))
                })
                .collect()
        };
        for (group_id, expired, delete_group) in plans {
            let Ok(scope) = self.group_scope(&group_id) else {
                continue;
            };
            let mut records: GroupRecords = expired
                .iter()
                .map(|((topic, partition), _)| {
                    let key = RecordKey::Offset {
                        group: group_id.clone(),
                        topic: topic.clone(),
                        partition: *partition,
                    };
                    (key, None)
                })
                .collect();
            if delete_group {
                let key = RecordKey::Group {
                    group: group_id.clone(),
                };
                records.push((key, None));
            }
            if let Err(e) = self.write_group_records(&scope, records).await {
                warn!(group = %group_id, error = ?e, "cannot delete expired offsets");
                continue;
            }
            let rewrite = self.with_groups(&group_id, |groups, now_ms| {
                let g = groups.get_mut(&group_id)?;
                for (key, commit_timestamp) in &expired {
                    if g.offsets
                        .get(key)
                        .is_some_and(|v| v.commit_timestamp == *commit_timestamp)
                    {
                        g.offsets.remove(key);
                        self.metrics.offsets_expired.inc();
                    }
                }
                if !delete_group {
                    return None;
                }
                if g.is_idle() && g.offsets.is_empty() {
                    let mut gone = groups.remove(&group_id)?;
                    gone.mark_dead(now_ms);
                    return None;
                }
                Some(encode_group(&g.to_value()))
            });
            if let Ok((scope, Some(value))) = rewrite {
                let record = (
                    RecordKey::Group {
                        group: group_id.clone(),
                    },
                    Some(value),
                );
                if let Err(e) = self.write_group_records(&scope, vec![record]).await {
                    warn!(group = %group_id, error = ?e, "cannot write the group again");
                }
            }
            info!(group = %group_id, offsets = expired.len(), group_deleted = delete_group,
                "expired committed offsets (offsets.retention.minutes)");
        }
    }

    /// The committed offsets of deleted topics, removed from the groups this broker coordinates
    /// now: per partition the tombstones to write (the timers write them with acks=all). A group
    /// on a partition loaded later keeps them until they expire, as in Kafka.
    pub fn take_deleted_topic_offsets(&self) -> Vec<(Scope, GroupRecords)> {
        let deleted: Vec<String> =
            std::mem::take(&mut *self.coordinator.deleted_topics.lock().expect("poisoned"));
        if deleted.is_empty() {
            return Vec::new();
        }
        let mut writes = Vec::new();
        let mut loaded = self.coordinator.lock();
        for (index, part) in loaded.iter_mut() {
            let Some(partition) = self
                .partition(OFFSETS_TOPIC, *index)
                .filter(|p| p.is_leader())
            else {
                continue;
            };
            let mut tombstones = Vec::new();
            for (group, g) in part.groups.iter_mut() {
                let gone: Vec<(String, i32)> = g
                    .offsets
                    .keys()
                    .filter(|(topic, _)| deleted.contains(topic))
                    .cloned()
                    .collect();
                for (topic, p) in gone {
                    g.offsets.remove(&(topic.clone(), p));
                    let key = RecordKey::Offset {
                        group: group.clone(),
                        topic,
                        partition: p,
                    };
                    tombstones.push((key, None));
                }
            }
            if !tombstones.is_empty() {
                info!(partition = index, offsets = tombstones.len(), topics = ?deleted,
                    "removing the committed offsets of deleted topics");
                writes.push((
                    Scope {
                        partition,
                        index: *index,
                    },
                    tombstones,
                ));
            }
        }
        writes
    }

    /// A transaction marker reached `__consumer_offsets` partition `index`: producer
    /// `producer_id`'s pending transactional offsets there are committed or dropped. A partition
    /// not loaded here has nothing pending in memory (its load reads the marker).
    pub fn complete_txn_offsets(&self, index: i32, producer_id: i64, commit: bool) {
        let mut loaded = self.coordinator.lock();
        let Some(part) = loaded.get_mut(&index) else {
            return;
        };
        for group in part.groups.values_mut() {
            group.complete_txn_offsets(producer_id, commit);
        }
    }

    /// Writes a transaction's offset commits (TxnOffsetCommit) as a transactional batch of
    /// producer `producer_id` / `producer_epoch` with acks=all; the group holds them pending
    /// until the transaction's marker.
    pub async fn write_txn_offsets(
        &self,
        scope: &Scope,
        group: &str,
        producer_id: i64,
        producer_epoch: i16,
        offsets: Vec<((String, i32), OffsetValue)>,
    ) -> Result<(), ResponseError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let now_ms = self.clock.now_ms();
        let rows: Vec<(Vec<u8>, Vec<u8>)> = offsets
            .iter()
            .map(|((topic, partition), value)| {
                let key = RecordKey::Offset {
                    group: group.to_string(),
                    topic: topic.clone(),
                    partition: *partition,
                };
                (encode_key(&key), records::encode_offset(value))
            })
            .collect();
        let keyed: Vec<_> = rows
            .iter()
            .map(|(k, v)| (Some(k.as_slice()), Some(v.as_slice()), now_ms))
            .collect();
        let mut batch = build_keyed_batch(&keyed);
        keel_log::plain_batch::set_transactional_producer(&mut batch, producer_id, producer_epoch);
        let timeout_ms = self.config.offsets_commit_timeout_ms;
        let write = crate::broker::LeaderWrite::Coordinator(&batch);
        let waiter = match self.write_as_leader(&scope.partition, write, Acks::All, timeout_ms) {
            Ok((_, Some(waiter))) => waiter,
            Ok((_, None)) => unreachable!("acks=all always waits"),
            Err(AppendError::Replication(code)) => return Err(write_error(code)),
            Err(AppendError::Log(e))
            | Err(AppendError::Partition(crate::partition::PartitionError::Log(e)))
                if e.kafka_error_code() == Some(47) =>
            {
                return Err(ResponseError::ProducerFenced)
            }
            Err(e) => {
                warn!(error = %e, "cannot write to __consumer_offsets");
                return Err(ResponseError::CoordinatorNotAvailable);
            }
        };
        match waiter.await {
            Ok(Ok(())) => {}
            Ok(Err(code)) => return Err(write_error(code)),
            Err(_) => return Err(ResponseError::NotCoordinator),
        }
        self.with_partition_groups(scope.index, |groups, now_ms| {
            let g = groups
                .entry(group.to_string())
                .or_insert_with(|| Group::new(group, now_ms));
            g.pending_txn_offsets
                .entry(producer_id)
                .or_default()
                .extend(offsets);
        })
    }

    /// Every group this broker coordinates now (ListGroups), with its state and protocol type.
    pub fn coordinated_groups(&self) -> Vec<(String, String, String)> {
        let loaded = self.coordinator.lock();
        loaded
            .values()
            .flat_map(|l| l.groups.values())
            .filter(|g| g.state() != group::GroupState::Dead)
            .map(|g| {
                (
                    g.id().to_string(),
                    g.state().name().to_string(),
                    g.protocol_type().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// Loads every `__consumer_offsets` partition this broker leads that is not loaded yet, so
    /// ListGroups sees every group it coordinates.
    pub fn load_all_coordinated(&self) {
        let Some(topic) = self.topic(OFFSETS_TOPIC) else {
            return;
        };
        for p in &topic.partitions {
            if p.leader == Some(self.node_id()) {
                let _ = self.with_partition_groups(p.index, |_, _| ());
            }
        }
    }

    /// Like [`Broker::with_groups`] for a partition index. A partition not loaded at its
    /// current leader epoch is (re)loaded first; groups loaded under an older epoch are dropped
    /// and their waiting members answered `NOT_COORDINATOR`.
    fn with_partition_groups<R>(
        &self,
        index: i32,
        f: impl FnOnce(&mut BTreeMap<String, Group>, i64) -> R,
    ) -> Result<R, ResponseError> {
        let partition = self
            .partition(OFFSETS_TOPIC, index)
            .filter(|p| p.is_leader())
            .ok_or(ResponseError::NotCoordinator)?;
        let epoch = partition.leader_epoch().0;
        let now_ms = self.clock.now_ms();
        let mut loaded = self.coordinator.lock();
        if loaded.get(&index).is_none_or(|l| l.leader_epoch != epoch) {
            if let Some(mut old) = loaded.remove(&index) {
                for g in old.groups.values_mut() {
                    g.abandon(ResponseError::NotCoordinator);
                }
            }
            let groups = load_groups(&partition, now_ms).map_err(|e| {
                warn!(partition = index, error = %e, "cannot load __consumer_offsets");
                ResponseError::CoordinatorLoadInProgress
            })?;
            if groups.is_empty() {
                tracing::debug!(partition = index, leader_epoch = epoch, "no groups to load");
            } else {
                info!(
                    partition = index,
                    leader_epoch = epoch,
                    groups = groups.len(),
                    "loaded groups"
                );
            }
            loaded.insert(
                index,
                LoadedPartition {
                    leader_epoch: epoch,
                    groups,
                },
            );
        }
        let part = loaded.get_mut(&index).expect("loaded above");
        Ok(f(&mut part.groups, now_ms))
    }
}

/// Reads a `__consumer_offsets` partition from its log start to its end: the last record per
/// key wins, a tombstone deletes. A record that does not decode is skipped with a warning.
/// Offsets in a transactional batch (TxnOffsetCommit) wait for their producer's marker: a
/// COMMIT applies them, an ABORT drops them, and those still open at the end are pending.
fn load_groups(partition: &Partition, now_ms: i64) -> anyhow::Result<BTreeMap<String, Group>> {
    let mut offsets: BTreeMap<(String, String, i32), Option<OffsetValue>> = BTreeMap::new();
    let mut groups: BTreeMap<String, Option<records::GroupValue>> = BTreeMap::new();
    type PendingOffsets = BTreeMap<(String, String, i32), OffsetValue>;
    let mut pending: BTreeMap<i64, PendingOffsets> = BTreeMap::new();
    scan_log(partition, |batch| {
        let header = batch.header;
        if header.is_control() {
            if let Ok(Some(marker)) = keel_log::EndTxnMarker::parse(batch.bytes, &header) {
                if let Some(settled) = pending.remove(&header.producer_id) {
                    if marker.kind == keel_log::ControlType::Commit {
                        offsets.extend(settled.into_iter().map(|(k, v)| (k, Some(v))));
                    }
                }
            }
            return;
        }
        let transactional = header.attributes & keel_log::batch::TRANSACTIONAL_ATTRIBUTE != 0;
        let Some(decoded) = decode_records(batch.bytes) else {
            warn!(offset = %batch.header.base_offset, "skipping a compressed or malformed batch in __consumer_offsets");
            return;
        };
        for record in decoded {
            let Some(key) = record.key.as_deref() else {
                continue;
            };
            let skip = |e: records::RecordError| {
                warn!(offset = record.offset, error = %e, "skipping a record");
            };
            let key = match decode_key(key) {
                Ok(key) => key,
                Err(e) => {
                    skip(e);
                    continue;
                }
            };
            // A null value (tombstone) deletes the key.
            let null = record.value_is_null;
            match key {
                RecordKey::Offset {
                    group,
                    topic,
                    partition,
                } => match (!null).then(|| decode_offset(&record.value)).transpose() {
                    Ok(Some(value)) if transactional => {
                        pending
                            .entry(header.producer_id)
                            .or_default()
                            .insert((group, topic, partition), value);
                    }
                    Ok(value) => {
                        offsets.insert((group, topic, partition), value);
                    }
                    Err(e) => skip(e),
                },
                RecordKey::Group { group } => {
                    match (!null).then(|| decode_group(&record.value)).transpose() {
                        Ok(value) => {
                            groups.insert(group, value);
                        }
                        Err(e) => skip(e),
                    }
                }
            }
        }
    })?;
    let mut out: BTreeMap<String, Group> = BTreeMap::new();
    for (id, value) in groups {
        if let Some(value) = value {
            out.insert(id.clone(), Group::from_value(&id, value, now_ms));
        }
    }
    for ((group, topic, partition), value) in offsets {
        if let Some(value) = value {
            out.entry(group.clone())
                .or_insert_with(|| Group::new(&group, now_ms))
                .offsets
                .insert((topic, partition), value);
        }
    }
    for (producer_id, open) in pending {
        for ((group, topic, partition), value) in open {
            out.entry(group.clone())
                .or_insert_with(|| Group::new(&group, now_ms))
                .pending_txn_offsets
                .entry(producer_id)
                .or_default()
                .insert((topic, partition), value);
        }
    }
    Ok(out)
}

/// Calls `f` with every batch of `partition`'s log, from its log start to its end, in order —
/// how a coordinator loads the partition it now leads.
pub(crate) fn scan_log(
    partition: &Partition,
    mut f: impl FnMut(&keel_log::batch::BatchView<'_>),
) -> anyhow::Result<()> {
    let log = partition.lock_log().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut at = log.log_start_offset();
    let end = log.log_end_offset();
    while at < end {
        let data = log.read(at, 1 << 20, None, true)?;
        let Some(last) = data.last_offset else {
            break;
        };
        for batch in keel_log::batch::BatchIter::new(&data.records) {
            f(&batch?);
        }
        at = Offset(last.0 + 1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Kafka's partition for a group: abs(String.hashCode) % 50 (values computed with Java).
    #[test]
    fn groups_map_to_partitions_as_in_kafka() {
        // Java: "test-group".hashCode() = 627841412, "my-group" -1906497762, "consumer-group-1"
        // 147483020.
        assert_eq!(partition_for("test-group", 50), 12);
        assert_eq!(partition_for("my-group", 50), 12);
        assert_eq!(partition_for("consumer-group-1", 50), 20);
        assert_eq!(partition_for("", 50), 0);
        // "a".hashCode() = 97
        assert_eq!(partition_for("a", 50), 47);
        assert_eq!(partition_for("a", 1), 0);
    }
}
