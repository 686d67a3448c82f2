//! The invariants of `DESIGN.md`, checked against the live state of the simulated cluster
//! after every step: the brokers' metadata images, their partitions (role, epoch, high
//! watermark) and their logs, and what the clients were told (the [`Oracle`]).
//!
//! Properties are *durability* properties (records lost, a leader or ISR/ELR member missing
//! a committed record, consumers seeing a backward HWM or changed records, replicas that
//! disagree below the HWM, a replica that lost data registering as clean) or *structural*
//! ones (ISR ∩ ELR = ∅, ELR ⊆ replicas, |ISR| ≥ min ISR ⇒ ELR = ∅, one leader per epoch,
//! epochs only grow, the same metadata records in the same order everywhere, a replica that
//! found damage never leads as a clean one). Classic mode is expected to break durability
//! properties — that is what the scenarios measure — never structural ones.
//!
//! Storage faults (issue 19) enter as losses: a replica whose disk failed or lied counts
//! against its partition's budget of min ISR − 1 lost replicas, like a power loss. A disk that
//! *lies* (bit rot, torn, misdirected or lost writes) can leave damage no one has found yet, so
//! a leader on such a disk may hold an acknowledged record in a batch that fails validation
//! without that being a violation yet: Keel must find it (a follower's verified read, the
//! scrubber, recovery) and re-replicate before the end of the run, where every acknowledged
//! record must be readable from the leader.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use keel_controller::image::ClusterImage;
use keel_controller::types::BrokerId;
use keel_log::batch::BatchIter;
use keel_log::plain_batch::decode_records;
use keel_log::Offset;
use keel_node::broker::Broker;
use keel_node::partition::{Partition, StorageHealth};

use crate::client::{Oracle, Tp};
use crate::trace::Fnv;
use crate::world::World;

/// A violated property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub property: &'static str,
    pub detail: String,
    /// A durability property (classic mode is allowed to break these).
    pub durability: bool,
}

/// Who leads a partition, as far as the durability checks care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LeaderKey {
    broker: i32,
    incarnation: u32,
    epoch: i32,
}

/// Checker state carried from step to step.
#[derive(Debug, Default)]
pub struct Checker {
    /// Image hash per metadata offset (the first broker to apply it sets it).
    image_hashes: BTreeMap<i64, (i32, u64)>,
    /// Last image offset checked per broker (and its incarnation).
    last_image: BTreeMap<i32, (u32, i64)>,
    /// Highest (leader epoch, partition epoch) per broker and partition, from its images.
    epochs: BTreeMap<(i32, String), (i32, i32)>,
    /// Leader per (partition, leader epoch), from images.
    image_leaders: BTreeMap<(String, i32), i32>,
    /// Leader per (partition, leader epoch), from the brokers' own partitions.
    broker_leaders: BTreeMap<(String, i32), i32>,
    /// Per partition: the leader whose log was last verified and the acked offsets verified.
    verified: BTreeMap<Tp, (LeaderKey, BTreeSet<i64>)>,
    /// Brokers that lost data uncleanly (power loss, torn writes, a replaced disk), per
    /// partition they were a replica of at the time.
    pub unclean_losses: BTreeMap<Tp, BTreeSet<i32>>,
    /// Brokers whose disk returned other bytes than were written (bit rot, torn, misdirected
    /// or lost writes): their logs may hold damage nobody has found yet.
    pub lying_disks: BTreeSet<i32>,
    /// Per broker, the incarnation whose registration was checked.
    registrations_checked: BTreeMap<i32, u32>,
    /// The newest image of the previous check.
    previous_image: Option<Arc<ClusterImage>>,
    /// Violations already reported (each is reported once).
    reported: BTreeSet<String>,
}

impl Checker {
    pub fn new() -> Checker {
        Checker::default()
    }

    /// Notes that `broker` lost unflushed data (or its whole disk): every partition it is a
    /// replica of, by the newest image, counts it against its budget of M-1 such losses.
    pub fn note_unclean_loss(&mut self, world: &World, broker: i32) {
        let Some(image) = newest_image(world) else {
            return;
        };
        for (tp, state) in image.partitions() {
            if state.replicas.contains(&BrokerId(broker)) {
                if let Some(name) = topic_name(&image, tp.topic) {
                    self.unclean_losses
                        .entry((name, tp.partition as i32))
                        .or_default()
                        .insert(broker);
                }
            }
        }
    }

    /// Notes that `broker`'s replica of `tp` lost data (a storage fault of that replica).
    pub fn note_loss(&mut self, tp: &Tp, broker: i32) {
        self.unclean_losses
            .entry(tp.clone())
            .or_default()
            .insert(broker);
    }

    /// Whether the durability promise covers `tp`: at most M-1 of its replicas lost data
    /// uncleanly.
    pub fn promise_holds(&self, image: &ClusterImage, tp: &Tp) -> bool {
        let Some(topic) = image.topic_id(&tp.0) else {
            return true;
        };
        let m = image.effective_min_isr(topic);
        self.unclean_losses.get(tp).map_or(0, BTreeSet::len) < m
    }

    /// Checks every property; returns the violations not reported before.
    pub fn check(&mut self, world: &World, oracle: &Oracle, full: bool) -> Vec<Violation> {
        let mut out = Vec::new();
        let brokers = world.brokers();
        check_one_active_controller_per_epoch(world, &mut out);
        self.check_images(world, &brokers, &mut out);
        self.check_leaders(&brokers, &mut out);
        check_damaged_replicas(&brokers, &mut out);
        if let Some(image) = newest_image(world) {
            self.check_registrations(world, &image, &brokers, &mut out);
            self.check_committed(world, &image, &brokers, oracle, &mut out);
            if full {
                check_agreement(&image, &brokers, &mut out);
            }
            self.previous_image = Some(image);
        }
        for v in &oracle.violations {
            out.push(Violation {
                property: v.property,
                detail: v.detail.clone(),
                durability: true,
            });
        }
        out.retain(|v| {
            self.reported
                .insert(format!("{}: {}", v.property, v.detail))
        });
        out
    }

    fn check_images(
        &mut self,
        world: &World,
        brokers: &[(i32, Arc<Broker>)],
        out: &mut Vec<Violation>,
    ) {
        for (id, broker) in brokers {
            let incarnation = world
                .host(&crate::world::broker_host(*id))
                .map_or(0, |h| h.incarnation);
            let image = broker.image();
            let Some(offset) = image.last_applied() else {
                continue;
            };
            let offset = offset.0;
            if self.last_image.get(id) == Some(&(incarnation, offset)) {
                continue;
            }
            self.last_image.insert(*id, (incarnation, offset));
            let mut hash = Fnv::default();
            hash.write(format!("{:?}", image.to_snapshot()).as_bytes());
            let hash = hash.finish();
            match self.image_hashes.get(&offset) {
                Some((first, h)) if *h != hash => out.push(Violation {
                    property: "every broker applies the same metadata records in the same order",
                    detail: format!(
                        "broker {id}'s image at metadata offset {offset} differs from broker {first}'s"
                    ),
                    durability: false,
                }),
                Some(_) => {}
                None => {
                    self.image_hashes.insert(offset, (*id, hash));
                }
            }
            for (tp, state) in image.partitions() {
                let Some(name) = topic_name(&image, tp.topic) else {
                    continue;
                };
                let label = format!("{name}-{}", tp.partition);
                let key = format!("{name}-{}@{}", tp.partition, tp.topic.0);
                if let Some(both) = state.isr.intersection(&state.elr).next() {
                    out.push(structural(
                        "ISR ∩ ELR = ∅",
                        format!("{label} at offset {offset}: broker {} in both", both.0),
                    ));
                }
                if let Some(stray) = state.elr.iter().find(|b| !state.replicas.contains(b)) {
                    out.push(structural(
                        "ELR ⊆ replicas",
                        format!(
                            "{label} at offset {offset}: ELR member {} is no replica",
                            stray.0
                        ),
                    ));
                }
                let min_isr = image.effective_min_isr(tp.topic);
                if state.isr.len() >= min_isr && !state.elr.is_empty() {
                    out.push(structural(
                        "|ISR| >= min ISR implies ELR = ∅",
                        format!(
                            "{label} at offset {offset}: ISR {:?} (min ISR {min_isr}) with ELR {:?}",
                            ids(&state.isr),
                            ids(&state.elr)
                        ),
                    ));
                }
                let now = (state.leader_epoch.0, state.partition_epoch.0);
                let before = self.epochs.insert((*id, key.clone()), now);
                if let Some(before) = before {
                    if now.0 < before.0 || now.1 < before.1 {
                        out.push(structural(
                            "leader and partition epochs only grow",
                            format!(
                                "{label} on broker {id}: (leader epoch, partition epoch) went from {before:?} to {now:?}"
                            ),
                        ));
                    }
                }
                if let Some(leader) = state.leader {
                    let slot = self
                        .image_leaders
                        .entry((key.clone(), state.leader_epoch.0))
                        .or_insert(leader.0);
                    if *slot != leader.0 {
                        out.push(structural(
                            "at most one leader per leader epoch",
                            format!(
                                "{label} leader epoch {}: the metadata names broker {} and broker {}",
                                state.leader_epoch.0, slot, leader.0
                            ),
                        ));
                    }
                }
            }
        }
    }

    fn check_leaders(&mut self, brokers: &[(i32, Arc<Broker>)], out: &mut Vec<Violation>) {
        for (id, broker) in brokers {
            for partition in broker.all_partitions() {
                if !partition.is_leader() {
                    continue;
                }
                let epoch = partition.leader_epoch().0;
                let key = (
                    format!(
                        "{}-{}@{}",
                        partition.tp.topic, partition.tp.partition, partition.topic_id
                    ),
                    epoch,
                );
                let slot = self.broker_leaders.entry(key).or_insert(*id);
                if *slot != *id {
                    out.push(structural(
                        "at most one leader per leader epoch",
                        format!(
                            "{} leader epoch {epoch}: brokers {} and {id} both lead",
                            partition.tp, slot
                        ),
                    ));
                }
            }
        }
    }

    /// Every acknowledged `acks=all` record is in the current leader's log, and in the log of
    /// every live ISR and ELR member (while the promise covers the partition).
    fn check_committed(
        &mut self,
        world: &World,
        image: &ClusterImage,
        brokers: &[(i32, Arc<Broker>)],
        oracle: &Oracle,
        out: &mut Vec<Violation>,
    ) {
        for (tp, acked) in &oracle.acked {
            if !acked.values().any(|a| a.acks_all) || !self.promise_holds(image, tp) {
                continue;
            }
            let Some(topic) = image.topic_id(&tp.0) else {
                continue;
            };
            let Ok(index) = u32::try_from(tp.1) else {
                continue;
            };
            let Some(state) =
                image.partition(keel_controller::types::TopicPartition::new(topic, index))
            else {
                continue;
            };
            // The leader, once it has taken up the role the image gives it.
            if let Some(leader) = state.leader {
                let hosted = brokers
                    .iter()
                    .find(|(id, _)| *id == leader.0)
                    .and_then(|(_, b)| b.partition(&tp.0, tp.1));
                if let Some(partition) =
                    hosted.filter(|p| p.is_leader() && p.leader_epoch().0 == state.leader_epoch.0)
                {
                    let key = LeaderKey {
                        broker: leader.0,
                        incarnation: world
                            .host(&crate::world::broker_host(leader.0))
                            .map_or(0, |h| h.incarnation),
                        epoch: state.leader_epoch.0,
                    };
                    let entry = self
                        .verified
                        .entry(tp.clone())
                        .or_insert_with(|| (key, BTreeSet::new()));
                    if entry.0 != key {
                        *entry = (key, BTreeSet::new());
                    }
                    let may_hold_damage = self.lying_disks.contains(&leader.0);
                    for (offset, a) in acked.iter().filter(|(_, a)| a.acks_all) {
                        if entry.1.contains(offset) {
                            continue;
                        }
                        match stored_record(&partition, *offset) {
                            Stored::Value(v) if v == a.value => {
                                entry.1.insert(*offset);
                            }
                            // Damage on a lying disk that Keel has not found yet: it must find
                            // it before the end (checked again at every step until then).
                            Stored::Damaged if may_hold_damage => {}
                            // A disk that fails loudly: Keel's own reads meet the same error
                            // and take the directory offline.
                            Stored::Unreadable => {}
                            found => out.push(Violation {
                                property: "an elected leader holds every committed record",
                                detail: format!(
                                    "{}-{}: leader {} (epoch {}) has {} at offset {offset}, where {:?} was acknowledged (acks=all)",
                                    tp.0,
                                    tp.1,
                                    leader.0,
                                    state.leader_epoch.0,
                                    found.describe(),
                                    String::from_utf8_lossy(&a.value)
                                ),
                                durability: true,
                            }),
                        }
                    }
                }
            }
            // Live ISR and ELR members (registered in their current incarnation).
            for member in state.isr.iter().chain(state.elr.iter()) {
                if state.leader == Some(*member) {
                    continue;
                }
                let Some((_, broker)) = brokers.iter().find(|(id, _)| *id == member.0) else {
                    continue;
                };
                let registered = image
                    .broker(*member)
                    .is_some_and(|r| r.epoch.0 == broker.broker_epoch());
                if !registered {
                    continue;
                }
                let Some(partition) = broker.partition(&tp.0, tp.1) else {
                    continue;
                };
                if partition.health() != StorageHealth::Healthy {
                    // It found damage or its directory failed: it reports itself lost until
                    // the controller takes it out (`check_damaged_replicas` keeps it from
                    // leading meanwhile).
                    continue;
                }
                let end = partition.offsets().map_or(0, |(_, _, end)| end.0);
                if let Some((offset, a)) = oracle.acked_all(tp).find(|(o, _)| *o >= end) {
                    out.push(Violation {
                        property: "no live ISR or ELR member lacks a committed record",
                        detail: format!(
                            "{}-{}: broker {} ({}) ends at offset {end}, but {:?} was acknowledged (acks=all) at offset {offset}",
                            tp.0,
                            tp.1,
                            member.0,
                            if state.isr.contains(member) { "ISR" } else { "ELR" },
                            String::from_utf8_lossy(&a.value)
                        ),
                        durability: true,
                    });
                }
            }
        }
    }
}

fn structural(property: &'static str, detail: String) -> Violation {
    Violation {
        property,
        detail,
        durability: false,
    }
}

fn ids(set: &BTreeSet<BrokerId>) -> Vec<i32> {
    set.iter().map(|b| b.0).collect()
}

/// What a log holds at an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// A valid batch holds a record with this value there.
    Value(Bytes),
    /// The offset is in the log, but no valid batch holds it: damage (a batch that fails
    /// validation, or one that is not where the index says).
    Damaged,
    /// The offset is not in the log.
    Missing,
    /// Reading it failed (the disk returns EIO): nothing can be said yet.
    Unreadable,
}

impl Stored {
    fn describe(&self) -> String {
        match self {
            Stored::Value(v) => format!("{:?}", String::from_utf8_lossy(v)),
            Stored::Damaged => "a damaged batch".to_string(),
            Stored::Missing => "nothing".to_string(),
            Stored::Unreadable => "an unreadable batch".to_string(),
        }
    }
}

/// A replica that found damage (or whose log directory failed) reports itself lost and must
/// not lead until the controller has taken it out of the ISR and ELR (DESIGN.md: a replica
/// that found corruption is never elected as a clean replica).
fn check_damaged_replicas(brokers: &[(i32, Arc<Broker>)], out: &mut Vec<Violation>) {
    for (id, broker) in brokers {
        for partition in broker.all_partitions() {
            let health = partition.health();
            if health != StorageHealth::Healthy && partition.is_leader() {
                out.push(structural(
                    "a replica that found damage never leads as a clean replica",
                    format!(
                        "{} on broker {id} leads in leader epoch {} while {health:?}",
                        partition.tp,
                        partition.leader_epoch().0
                    ),
                ));
            }
        }
    }
}

fn topic_name(image: &ClusterImage, id: keel_controller::types::TopicId) -> Option<String> {
    image.topic(id).map(|t| t.name.clone())
}

/// The newest metadata image: the observer's or any running broker's.
pub fn newest_image(world: &World) -> Option<Arc<ClusterImage>> {
    let observed = world
        .observed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    world
        .brokers()
        .into_iter()
        .map(|(_, b)| b.image())
        .chain(observed)
        .max_by_key(|i| i.last_applied().map_or(-1, |o| o.0))
}

/// The record at `offset` of a partition's log, if a valid batch holds it.
pub fn record_at(partition: &Partition, offset: i64) -> Option<Bytes> {
    match stored_record(partition, offset) {
        Stored::Value(v) => Some(v),
        Stored::Damaged | Stored::Missing | Stored::Unreadable => None,
    }
}

/// What a partition's log holds at `offset`.
pub fn stored_record(partition: &Partition, offset: i64) -> Stored {
    let Ok(log) = partition.lock_log() else {
        return Stored::Missing;
    };
    if offset >= log.log_end_offset().0 || offset < log.log_start_offset().0 {
        return Stored::Missing;
    }
    let Ok(data) = log.read(Offset(offset), 1, None, true) else {
        return Stored::Unreadable;
    };
    for batch in BatchIter::new(&data.records) {
        let Ok(batch) = batch else {
            return Stored::Damaged;
        };
        for r in decode_records(batch.bytes).unwrap_or_default() {
            if r.offset == offset {
                return Stored::Value(Bytes::from(r.value));
            }
        }
    }
    Stored::Damaged
}

/// Every record of a partition's log below `limit`.
pub fn records_below(partition: &Partition, limit: i64) -> BTreeMap<i64, Bytes> {
    let mut out = BTreeMap::new();
    let Ok(log) = partition.lock_log() else {
        return out;
    };
    let mut next = log.log_start_offset().0;
    let end = log.log_end_offset().0.min(limit);
    while next < end {
        let Ok(data) = log.read(Offset(next), 1 << 20, None, true) else {
            break;
        };
        let Some(last) = data.last_offset else {
            break;
        };
        for batch in BatchIter::new(&data.records) {
            let Ok(batch) = batch else { break };
            for r in decode_records(batch.bytes).unwrap_or_default() {
                if r.offset < limit {
                    out.insert(r.offset, Bytes::from(r.value));
                }
            }
        }
        next = last.0 + 1;
    }
    out
}

impl Checker {
    /// A broker whose logs lost data at start (a torn tail, damage set aside) or whose log
    /// directory failed registers as an unclean shutdown (KIP-966, issue 19): the controller
    /// takes it out of every ISR and ELR before its registration record. Seen from the images:
    /// where it was a member before its registration appeared, the registration changed the
    /// partition (a new partition epoch).
    fn check_registrations(
        &mut self,
        world: &World,
        image: &ClusterImage,
        brokers: &[(i32, Arc<Broker>)],
        out: &mut Vec<Violation>,
    ) {
        for (id, broker) in brokers {
            let incarnation = world
                .host(&crate::world::broker_host(*id))
                .map_or(0, |h| h.incarnation);
            let epoch = broker.broker_epoch();
            if epoch < 0 || self.registrations_checked.get(id) == Some(&incarnation) {
                continue;
            }
            if image
                .broker(BrokerId(*id))
                .is_none_or(|r| r.epoch.0 != epoch)
            {
                continue;
            }
            self.registrations_checked.insert(*id, incarnation);
            if !broker.logs_lost_data() && broker.offline_log_dirs().is_empty() {
                continue;
            }
            let Some(before) = &self.previous_image else {
                continue;
            };
            let member = |s: &keel_controller::partition::PartitionState| {
                s.isr.contains(&BrokerId(*id)) || s.elr.contains(&BrokerId(*id))
            };
            for (tp, state) in image.partitions() {
                let unchanged = before
                    .partition(tp)
                    .is_some_and(|b| member(b) && b.partition_epoch == state.partition_epoch);
                if member(state) && unchanged {
                    out.push(Violation {
                        property: "a replica that lost data registers as an unclean shutdown",
                        detail: format!(
                            "broker {id} registered (broker epoch {epoch}) after its logs lost data or a log directory failed, and stays in the ISR/ELR of {}-{} (partition epoch {})",
                            topic_name(image, tp.topic).unwrap_or_default(),
                            tp.partition,
                            state.partition_epoch.0
                        ),
                        durability: true,
                    });
                }
            }
        }
    }
}

/// Replicas agree on every record below both their high watermarks.
fn check_agreement(image: &ClusterImage, brokers: &[(i32, Arc<Broker>)], out: &mut Vec<Violation>) {
    for (tp, _) in image.partitions() {
        let Some(name) = topic_name(image, tp.topic) else {
            continue;
        };
        let index = tp.partition as i32;
        let hosted: Vec<(i32, Arc<Partition>)> = brokers
            .iter()
            .filter_map(|(id, b)| b.partition(&name, index).map(|p| (*id, p)))
            .filter(|(_, p)| p.topic_id == tp.topic.0)
            .collect();
        for (i, (a_id, a)) in hosted.iter().enumerate() {
            for (b_id, b) in &hosted[i + 1..] {
                let limit = a.high_watermark().0.min(b.high_watermark().0);
                let ra = records_below(a, limit);
                let rb = records_below(b, limit);
                if let Some((offset, va)) =
                    ra.iter().find(|(o, v)| rb.get(o).is_some_and(|w| w != *v))
                {
                    out.push(Violation {
                        property: "replicas agree below their high watermarks",
                        detail: format!(
                            "{name}-{index} offset {offset} (below both HWMs, {limit}): broker {a_id} has {:?}, broker {b_id} has {:?}",
                            String::from_utf8_lossy(va),
                            String::from_utf8_lossy(&rb[offset])
                        ),
                        durability: true,
                    });
                }
            }
        }
    }
}

/// KAFKA-532 / Raft: at most one running controller acts as the active controller in a given
/// controller epoch (Raft term). A paused one may still believe it is active in an older epoch;
/// it is not running, and it cannot commit anything: its quorum moved on.
fn check_one_active_controller_per_epoch(world: &World, out: &mut Vec<Violation>) {
    let mut by_epoch: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for (host, view) in world.quorum_views() {
        if view.active {
            by_epoch.entry(view.epoch).or_default().push(host);
        }
    }
    for (epoch, hosts) in by_epoch {
        if hosts.len() > 1 {
            out.push(Violation {
                property: "one active controller per epoch",
                detail: format!("controllers {hosts:?} are all active in epoch {epoch}"),
                durability: false,
            });
        }
    }
}
