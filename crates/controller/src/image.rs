//! The cluster metadata image: brokers, topics, partitions, configs, features — and
//! [`ClusterImage::replay`], the only thing that changes it.
//!
//! Replay is deterministic (ordered maps everywhere) and checks invariants: a record that would
//! break one is rejected with a [`ReplayError`] and leaves the image untouched.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::acl::AclBinding;
use crate::config::{self, ELR_FEATURE};
use crate::errors::ReplayError;
use crate::partition::PartitionState;
use crate::records::{
    AccessControlEntryRecord, BrokerStateChange, ConfigRecord, ConfigResource, FeatureLevelRecord,
    Listener, PartitionRecord, PendingTopicRecord, Record, RegisterBrokerRecord,
    RemoveUserScramCredentialRecord, TopicRecord, UserScramCredentialRecord,
};
use crate::scram::{ScramCredentialData, ScramMechanism};
use crate::types::{
    AclId, BrokerEpoch, BrokerId, DirectoryId, IncarnationId, MetadataOffset, TopicId,
    TopicPartition, UncleanRecoveryStrategy,
};

/// Where a registered broker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BrokerState {
    /// Registered but not serving: not electable, not allowed in an ISR.
    Fenced,
    /// Serving.
    Unfenced,
    /// Serving but shutting down: not electable, leaves every ISR.
    ControlledShutdown,
}

/// A broker's registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerRegistration {
    /// The broker.
    pub id: BrokerId,
    /// Its broker epoch.
    pub epoch: BrokerEpoch,
    /// Its process incarnation.
    pub incarnation: IncarnationId,
    /// Its listeners.
    pub listeners: Vec<Listener>,
    /// Its rack.
    pub rack: Option<String>,
    /// Its online log directories.
    pub log_dirs: Vec<DirectoryId>,
    /// Fenced, unfenced, or in controlled shutdown.
    pub state: BrokerState,
    /// The metadata-log offset its registration record was replayed at: it is unfenced once its
    /// own metadata offset reaches this.
    pub registered_at: MetadataOffset,
}

impl BrokerRegistration {
    /// Unfenced and not shutting down: may lead and may be in an ISR.
    pub fn is_live(&self) -> bool {
        self.state == BrokerState::Unfenced
    }
}

/// A topic and its partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicImage {
    /// The topic id.
    pub id: TopicId,
    /// The topic name.
    pub name: String,
    /// Topic-level configs.
    pub configs: BTreeMap<String, String>,
    /// Partitions by index.
    pub partitions: BTreeMap<u32, PartitionState>,
}

impl TopicImage {
    /// The replication factor (of partition 0, as Kafka's controller does).
    pub fn replication_factor(&self) -> usize {
        self.partitions
            .values()
            .next()
            .map_or(1, PartitionState::replication_factor)
    }
}

/// A topic being created in several batches ([`Record::PendingTopic`]): invisible until it
/// has all its partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingTopic {
    /// The topic as far as its records go.
    pub topic: TopicImage,
    /// How many partitions complete it.
    pub partitions: u32,
}

/// The whole metadata image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterImage {
    brokers: BTreeMap<BrokerId, BrokerRegistration>,
    /// Shared with clones until changed (`Arc::make_mut`): an operation's scratch copy of the
    /// image costs a pointer per topic, not a copy of every partition.
    topics: BTreeMap<TopicId, Arc<TopicImage>>,
    topic_names: BTreeMap<String, TopicId>,
    /// Topics being created in several batches, by id (their names are in `pending_names`).
    pending: BTreeMap<TopicId, Arc<PendingTopic>>,
    pending_names: BTreeMap<String, TopicId>,
    cluster_configs: BTreeMap<String, String>,
    features: BTreeMap<String, u16>,
    /// The first producer id no broker has been given yet.
    next_producer_id: i64,
    /// SCRAM credentials by user, then mechanism (KIP-554); shared with clones until changed.
    scram: Arc<ScramUsers>,
    /// ACL bindings (Kafka's `AclControlManager` state); shared with clones until changed.
    acls: Arc<Acls>,
    /// Client quotas by entity (Kafka's `ClientQuotasImage`); shared with clones until changed.
    quotas: Arc<crate::quota::ClientQuotas>,
    last_applied: Option<MetadataOffset>,
}

/// Every ACL binding, by id and by value (a binding exists at most once).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acls {
    by_id: BTreeMap<AclId, AclBinding>,
    ids: BTreeMap<AclBinding, AclId>,
}

impl Acls {
    /// The bindings by id.
    pub fn by_id(&self) -> &BTreeMap<AclId, AclBinding> {
        &self.by_id
    }

    /// The id of `binding`, when it exists.
    pub fn id_of(&self, binding: &AclBinding) -> Option<AclId> {
        self.ids.get(binding).copied()
    }

    /// How many bindings there are.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The bindings `filter` matches, by id (DescribeAcls; what DeleteAcls removes).
    pub fn matching<'a>(
        &'a self,
        filter: &'a crate::acl::AclFilter,
    ) -> impl Iterator<Item = (AclId, &'a AclBinding)> + 'a {
        self.by_id
            .iter()
            .filter(move |(_, b)| filter.matches(b))
            .map(|(id, b)| (*id, b))
    }
}

/// SCRAM credentials by user name, then mechanism; a user without credentials has no entry.
pub type ScramUsers = BTreeMap<String, BTreeMap<ScramMechanism, ScramCredentialData>>;

impl ClusterImage {
    /// An empty image.
    pub fn new() -> Self {
        ClusterImage::default()
    }

    /// The offset of the last replayed record.
    pub fn last_applied(&self) -> Option<MetadataOffset> {
        self.last_applied
    }

    /// The offset the next record will be replayed at when the log is contiguous.
    pub fn next_offset(&self) -> MetadataOffset {
        self.last_applied
            .map_or(MetadataOffset(0), MetadataOffset::next)
    }

    /// The first producer id not handed out yet ([`Record::ProducerIds`]).
    pub fn next_producer_id(&self) -> i64 {
        self.next_producer_id
    }

    /// The SCRAM credential of `user` for `mechanism`.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<&ScramCredentialData> {
        self.scram.get(user)?.get(&mechanism)
    }

    /// Every user's SCRAM credentials.
    pub fn scram_users(&self) -> &ScramUsers {
        &self.scram
    }

    /// Every client quota, by entity then key.
    pub fn client_quotas(&self) -> &Arc<crate::quota::ClientQuotas> {
        &self.quotas
    }

    /// Every ACL binding. The `Arc` changes (`Arc::ptr_eq`) exactly when a record changed them,
    /// so a broker rebuilds its [`crate::acl::AclIndex`] only then.
    pub fn acls(&self) -> &Arc<Acls> {
        &self.acls
    }

    /// Every registration.
    pub fn brokers(&self) -> &BTreeMap<BrokerId, BrokerRegistration> {
        &self.brokers
    }

    /// One registration.
    pub fn broker(&self, id: BrokerId) -> Option<&BrokerRegistration> {
        self.brokers.get(&id)
    }

    /// Brokers that are registered, unfenced and not shutting down.
    pub fn live_brokers(&self) -> BTreeSet<BrokerId> {
        self.brokers
            .values()
            .filter(|b| b.is_live())
            .map(|b| b.id)
            .collect()
    }

    /// Every topic.
    pub fn topics(&self) -> &BTreeMap<TopicId, Arc<TopicImage>> {
        &self.topics
    }

    /// One topic.
    pub fn topic(&self, id: TopicId) -> Option<&TopicImage> {
        self.topics.get(&id).map(|t| &**t)
    }

    /// A topic's id by name.
    pub fn topic_id(&self, name: &str) -> Option<TopicId> {
        self.topic_names.get(name).copied()
    }

    /// One partition.
    pub fn partition(&self, tp: TopicPartition) -> Option<&PartitionState> {
        self.topics.get(&tp.topic)?.partitions.get(&tp.partition)
    }

    /// Topics being created in several batches (invisible to every other accessor).
    pub fn pending_topics(&self) -> &BTreeMap<TopicId, Arc<PendingTopic>> {
        &self.pending
    }

    /// Whether a topic — created or pending — has this name or this id.
    pub fn topic_taken(&self, name: &str, id: TopicId) -> bool {
        self.topic_names.contains_key(name)
            || self.pending_names.contains_key(name)
            || self.topics.contains_key(&id)
            || self.pending.contains_key(&id)
    }

    /// Every partition, in (topic id, index) order.
    pub fn partitions(&self) -> impl Iterator<Item = (TopicPartition, &PartitionState)> {
        self.topics.values().flat_map(|t| {
            t.partitions
                .iter()
                .map(move |(i, p)| (TopicPartition::new(t.id, *i), p))
        })
    }

    /// Cluster-level configs.
    pub fn cluster_configs(&self) -> &BTreeMap<String, String> {
        &self.cluster_configs
    }

    /// A finalized feature level.
    pub fn feature_level(&self, name: &str) -> Option<u16> {
        self.features.get(name).copied()
    }

    /// `eligible.leader.replicas.enable`: on unless its feature level is 0.
    pub fn elr_enabled(&self) -> bool {
        self.feature_level(ELR_FEATURE)
            .is_none_or(|level| level >= 1)
    }

    /// A topic's effective min ISR: min(`min.insync.replicas`, replication factor).
    pub fn effective_min_isr(&self, topic: TopicId) -> usize {
        let Some(t) = self.topics.get(&topic) else {
            return config::DEFAULT_MIN_INSYNC_REPLICAS;
        };
        config::effective_min_isr(
            config::configured_min_isr(&t.configs, &self.cluster_configs),
            t.replication_factor(),
        )
    }

    /// A partition's effective min ISR: min(`min.insync.replicas`, its replication factor —
    /// the target of a reassignment in progress).
    pub fn partition_min_isr(&self, tp: TopicPartition) -> usize {
        match (self.topics.get(&tp.topic), self.partition(tp)) {
            (Some(t), Some(p)) => config::effective_min_isr(
                config::configured_min_isr(&t.configs, &self.cluster_configs),
                p.replication_factor(),
            ),
            _ => self.effective_min_isr(tp.topic),
        }
    }

    /// A topic's `min.insync.replicas` as configured (topic, else cluster, else 1).
    pub fn configured_min_isr(&self, topic: TopicId) -> usize {
        self.topics
            .get(&topic)
            .map_or(config::DEFAULT_MIN_INSYNC_REPLICAS, |t| {
                config::configured_min_isr(&t.configs, &self.cluster_configs)
            })
    }

    /// A topic's unclean-recovery strategy.
    pub fn strategy(&self, topic: TopicId) -> UncleanRecoveryStrategy {
        let empty = BTreeMap::new();
        let configs = self.topics.get(&topic).map_or(&empty, |t| &t.configs);
        config::resolve_strategy(configs, &self.cluster_configs)
    }

    /// What a partition is waiting for, from this image alone, given its
    /// [`live_brokers`](Self::live_brokers) (brokers use it to describe partitions; the active
    /// controller's own view is `Controller::partition_status`).
    pub fn partition_status(
        &self,
        tp: TopicPartition,
        live: &BTreeSet<BrokerId>,
    ) -> Option<crate::partition_change::PartitionStatus> {
        let p = self.partition(tp)?;
        let ctx = crate::partition_change::ChangeContext {
            live,
            min_isr: self.partition_min_isr(tp),
            configured_min_isr: self.configured_min_isr(tp.topic),
            strategy: self.strategy(tp.topic),
            elr_enabled: self.elr_enabled(),
        };
        Some(crate::partition_change::classify(p, &ctx))
    }

    /// Applies one record at `offset`. On error the image is unchanged.
    pub fn replay(&mut self, offset: MetadataOffset, record: &Record) -> Result<(), ReplayError> {
        if let Some(last) = self.last_applied {
            if offset <= last {
                return Err(ReplayError::OffsetNotIncreasing { offset, last });
            }
        }
        self.apply(offset, record)?;
        self.last_applied = Some(offset);
        Ok(())
    }

    fn apply(&mut self, offset: MetadataOffset, record: &Record) -> Result<(), ReplayError> {
        match record {
            Record::RegisterBroker(r) => {
                self.register(offset, r);
                Ok(())
            }
            Record::BrokerRegistrationChange(r) => {
                let broker = self.registered(r.broker, r.epoch)?;
                broker.state = match r.change {
                    BrokerStateChange::Fence => BrokerState::Fenced,
                    BrokerStateChange::Unfence => BrokerState::Unfenced,
                    BrokerStateChange::ControlledShutdown => BrokerState::ControlledShutdown,
                };
                Ok(())
            }
            Record::UnregisterBroker(r) => {
                self.registered(r.broker, r.epoch)?;
                self.brokers.remove(&r.broker);
                Ok(())
            }
            Record::Topic(r) => self.add_topic(r),
            Record::PendingTopic(r) => self.add_pending_topic(r),
            Record::RemoveTopic(r) => {
                if let Some(pending) = self.pending.remove(&r.id) {
                    self.pending_names.remove(&pending.topic.name);
                    return Ok(());
                }
                let topic = self
                    .topics
                    .remove(&r.id)
                    .ok_or(ReplayError::UnknownTopic(r.id))?;
                self.topic_names.remove(&topic.name);
                Ok(())
            }
            Record::Partition(r) => self.add_partition(r),
            Record::PartitionChange(r) => {
                let current = self
                    .partition(r.partition)
                    .ok_or(ReplayError::UnknownPartition(r.partition))?;
                let next = current.apply(&r.change);
                self.store_partition(r.partition, next)
            }
            Record::Config(r) => self.apply_config(r),
            Record::ClearElr(r) => self.clear_elr(r.topic),
            Record::FeatureLevel(FeatureLevelRecord { name, level }) => {
                self.features.insert(name.clone(), *level);
                Ok(())
            }
            Record::ProducerIds(r) => {
                if r.next_producer_id <= self.next_producer_id {
                    return Err(ReplayError::ProducerIdsNotIncreasing {
                        next: r.next_producer_id,
                        current: self.next_producer_id,
                    });
                }
                self.next_producer_id = r.next_producer_id;
                Ok(())
            }
            Record::UserScramCredential(r) => self.put_scram(r),
            Record::RemoveUserScramCredential(r) => self.remove_scram(r),
            Record::AccessControlEntry(r) => self.put_acl(r),
            Record::ClientQuota(r) => self.apply_client_quota(r),
            Record::RemoveAccessControlEntry(r) => {
                if !self.acls.by_id.contains_key(&r.id) {
                    return Err(ReplayError::UnknownAcl(r.id));
                }
                let acls = Arc::make_mut(&mut self.acls);
                let binding = acls.by_id.remove(&r.id).expect("checked above");
                acls.ids.remove(&binding);
                Ok(())
            }
        }
    }

    /// Kafka's `ClientQuotaControlManager.replay`: a key set or removed, checked as
    /// AlterClientQuotas checks it (removing a key that is not set is an error); an entity
    /// left without keys is gone.
    fn apply_client_quota(
        &mut self,
        r: &crate::records::ClientQuotaRecord,
    ) -> Result<(), ReplayError> {
        let invalid = |reason: String| ReplayError::InvalidClientQuota {
            entity: r.entity.to_string(),
            reason,
        };
        let parts: Vec<(String, Option<String>)> = r
            .entity
            .0
            .iter()
            .map(|(t, n)| (t.clone(), n.clone()))
            .collect();
        crate::quota::validate_entity(&parts).map_err(|e| invalid(e.message))?;
        let quotas = Arc::make_mut(&mut self.quotas);
        if r.remove {
            let keys = quotas
                .get_mut(&r.entity)
                .filter(|keys| keys.contains_key(&r.key))
                .ok_or_else(|| invalid(format!("no {} to remove", r.key)))?;
            keys.remove(&r.key);
            if keys.is_empty() {
                quotas.remove(&r.entity);
            }
        } else {
            crate::quota::validate_value(&r.entity, &r.key, r.value.0)
                .map_err(|e| invalid(e.message))?;
            quotas
                .entry(r.entity.clone())
                .or_default()
                .insert(r.key.clone(), r.value);
        }
        Ok(())
    }

    /// Kafka's `AclControlManager.replay(AccessControlEntryRecord)`: the binding is checked as
    /// CreateAcls checks it, and neither its id nor the binding may exist already.
    fn put_acl(&mut self, r: &AccessControlEntryRecord) -> Result<(), ReplayError> {
        let invalid = |reason: String| ReplayError::InvalidAcl { id: r.id, reason };
        crate::acl::validate_new(&r.binding).map_err(|e| invalid(e.message))?;
        if self.acls.by_id.contains_key(&r.id) {
            return Err(invalid("an ACL binding with this id exists".into()));
        }
        if let Some(existing) = self.acls.id_of(&r.binding) {
            return Err(invalid(format!(
                "the same binding exists with id {existing}"
            )));
        }
        let acls = Arc::make_mut(&mut self.acls);
        acls.by_id.insert(r.id, r.binding.clone());
        acls.ids.insert(r.binding.clone(), r.id);
        Ok(())
    }

    /// Kafka's `ScramControlManager.replay(UserScramCredentialRecord)`, with the credential's
    /// bounds checked again (the generating side checked them first).
    fn put_scram(&mut self, r: &UserScramCredentialRecord) -> Result<(), ReplayError> {
        let invalid = |reason: String| ReplayError::InvalidScramCredential {
            user: r.name.clone(),
            mechanism: r.mechanism.name(),
            reason,
        };
        crate::scram::check_user_name(&r.name).map_err(|e| invalid(e.message))?;
        r.credential.check(r.mechanism).map_err(invalid)?;
        Arc::make_mut(&mut self.scram)
            .entry(r.name.clone())
            .or_default()
            .insert(r.mechanism, r.credential.clone());
        Ok(())
    }

    /// Kafka's `ScramControlManager.replay(RemoveUserScramCredentialRecord)`: removing a
    /// credential that does not exist is an error ("Unable to find credential to delete").
    fn remove_scram(&mut self, r: &RemoveUserScramCredentialRecord) -> Result<(), ReplayError> {
        if self.scram_credential(&r.name, r.mechanism).is_none() {
            return Err(ReplayError::UnknownScramCredential {
                user: r.name.clone(),
                mechanism: r.mechanism.name(),
            });
        }
        let users = Arc::make_mut(&mut self.scram);
        let by_mechanism = users.get_mut(&r.name).expect("checked above");
        by_mechanism.remove(&r.mechanism);
        if by_mechanism.is_empty() {
            users.remove(&r.name);
        }
        Ok(())
    }

    fn register(&mut self, offset: MetadataOffset, r: &RegisterBrokerRecord) {
        let registration = BrokerRegistration {
            id: r.broker,
            epoch: r.epoch,
            incarnation: r.incarnation,
            listeners: r.listeners.clone(),
            rack: r.rack.clone(),
            log_dirs: r.log_dirs.clone(),
            state: if r.fenced {
                BrokerState::Fenced
            } else {
                BrokerState::Unfenced
            },
            registered_at: offset,
        };
        self.brokers.insert(r.broker, registration);
    }

    fn registered(
        &mut self,
        id: BrokerId,
        epoch: BrokerEpoch,
    ) -> Result<&mut BrokerRegistration, ReplayError> {
        let broker = self
            .brokers
            .get_mut(&id)
            .ok_or(ReplayError::UnknownBroker(id))?;
        if broker.epoch != epoch {
            return Err(ReplayError::BrokerEpochMismatch {
                broker: id,
                record: epoch.0,
                registered: broker.epoch.0,
            });
        }
        Ok(broker)
    }

    fn add_topic(&mut self, r: &TopicRecord) -> Result<(), ReplayError> {
        if self.topic_taken(&r.name, r.id) {
            return Err(ReplayError::DuplicateTopic(r.name.clone()));
        }
        self.topic_names.insert(r.name.clone(), r.id);
        self.topics.insert(
            r.id,
            Arc::new(TopicImage {
                id: r.id,
                name: r.name.clone(),
                configs: BTreeMap::new(),
                partitions: BTreeMap::new(),
            }),
        );
        Ok(())
    }

    fn add_pending_topic(&mut self, r: &PendingTopicRecord) -> Result<(), ReplayError> {
        if self.topic_taken(&r.name, r.id) {
            return Err(ReplayError::DuplicateTopic(r.name.clone()));
        }
        if r.partitions == 0 {
            return Err(ReplayError::Invariant {
                partition: TopicPartition::new(r.id, 0),
                violation: "a pending topic needs partitions".to_string(),
            });
        }
        self.pending_names.insert(r.name.clone(), r.id);
        self.pending.insert(
            r.id,
            Arc::new(PendingTopic {
                topic: TopicImage {
                    id: r.id,
                    name: r.name.clone(),
                    configs: BTreeMap::new(),
                    partitions: BTreeMap::new(),
                },
                partitions: r.partitions,
            }),
        );
        Ok(())
    }

    /// A partition of a pending topic: checked as any new partition; the last one makes the
    /// topic visible.
    fn add_pending_partition(&mut self, r: &PartitionRecord) -> Result<(), ReplayError> {
        let tp = r.partition;
        let pending = self.pending.get(&tp.topic).expect("caller checked");
        if pending.topic.partitions.contains_key(&tp.partition)
            || tp.partition >= pending.partitions
        {
            return Err(ReplayError::DuplicatePartition(tp));
        }
        check_new_partition(&pending.topic, tp, &r.state, &self.cluster_configs)?;
        let pending = Arc::make_mut(self.pending.get_mut(&tp.topic).expect("caller checked"));
        pending
            .topic
            .partitions
            .insert(tp.partition, r.state.clone());
        if pending.topic.partitions.len() == pending.partitions as usize {
            let done = self.pending.remove(&tp.topic).expect("present");
            let done = Arc::unwrap_or_clone(done).topic;
            self.pending_names.remove(&done.name);
            self.topic_names.insert(done.name.clone(), done.id);
            self.topics.insert(done.id, Arc::new(done));
        }
        Ok(())
    }

    fn add_partition(&mut self, r: &PartitionRecord) -> Result<(), ReplayError> {
        if self.pending.contains_key(&r.partition.topic) {
            return self.add_pending_partition(r);
        }
        let topic = self
            .topics
            .get(&r.partition.topic)
            .ok_or(ReplayError::UnknownTopic(r.partition.topic))?;
        if topic.partitions.contains_key(&r.partition.partition) {
            return Err(ReplayError::DuplicatePartition(r.partition));
        }
        self.store_partition(r.partition, r.state.clone())
    }

    /// Checks the invariants of `next` and stores it.
    fn store_partition(
        &mut self,
        tp: TopicPartition,
        next: PartitionState,
    ) -> Result<(), ReplayError> {
        let topic = self
            .topics
            .get(&tp.topic)
            .ok_or(ReplayError::UnknownTopic(tp.topic))?;
        check_new_partition(topic, tp, &next, &self.cluster_configs)?;
        if let Some(current) = self.partition(tp) {
            if next.leader_epoch < current.leader_epoch
                || next.partition_epoch <= current.partition_epoch
            {
                return Err(ReplayError::Invariant {
                    partition: tp,
                    violation: "epochs must grow".to_string(),
                });
            }
        }
        let topic = Arc::make_mut(self.topics.get_mut(&tp.topic).expect("checked above"));
        topic.partitions.insert(tp.partition, next);
        Ok(())
    }

    fn apply_config(&mut self, r: &ConfigRecord) -> Result<(), ReplayError> {
        let configs = match &r.resource {
            ConfigResource::Cluster => &mut self.cluster_configs,
            ConfigResource::Topic(name) => match self.pending_names.get(name) {
                Some(id) => {
                    &mut Arc::make_mut(self.pending.get_mut(id).expect("name index is in sync"))
                        .topic
                        .configs
                }
                None => {
                    let id = self
                        .topic_names
                        .get(name)
                        .ok_or_else(|| ReplayError::UnknownTopicName(name.clone()))?;
                    &mut Arc::make_mut(self.topics.get_mut(id).expect("name index is in sync"))
                        .configs
                }
            },
        };
        match &r.value {
            Some(value) => configs.insert(r.name.clone(), value.clone()),
            None => configs.remove(&r.name),
        };
        Ok(())
    }

    fn clear_elr(&mut self, topic: Option<TopicId>) -> Result<(), ReplayError> {
        if let Some(id) = topic {
            if !self.topics.contains_key(&id) {
                return Err(ReplayError::UnknownTopic(id));
            }
        }
        let mut cleared = Vec::new();
        for (tp, p) in self.partitions() {
            if topic.is_some_and(|id| id != tp.topic) {
                continue;
            }
            let has_elr = !p.elr.is_empty() || !p.last_known_elr.is_empty();
            if has_elr && p.isr.len() >= self.partition_min_isr(tp) {
                let mut next = p.clone();
                next.elr.clear();
                next.last_known_elr.clear();
                next.partition_epoch = p.partition_epoch.next();
                cleared.push((tp, next));
            }
        }
        for (tp, next) in cleared {
            self.store_partition(tp, next)?;
        }
        Ok(())
    }

    /// The image a snapshot describes: the state after every record below `end`.
    ///
    /// The snapshot's records are replayed into an empty image at the offsets just below `end`
    /// (`end - n .. end`), so the image's next offset is `end` and a broker registration's
    /// `registered_at` becomes its record's offset in the snapshot (below `end`, so a broker
    /// caught up to `end` still counts as caught up), as in Kafka.
    pub fn from_snapshot(end: MetadataOffset, records: &[Record]) -> Result<Self, ReplayError> {
        let count = i64::try_from(records.len()).unwrap_or(i64::MAX);
        if count > end.0 {
            return Err(ReplayError::SnapshotTooLarge {
                end,
                records: records.len(),
            });
        }
        let mut image = ClusterImage::new();
        for (index, record) in records.iter().enumerate() {
            let offset = MetadataOffset(end.0 - count + index as i64);
            image.replay(offset, record)?;
        }
        if image.last_applied.is_none() && end.0 > 0 {
            image.last_applied = Some(MetadataOffset(end.0 - 1));
        }
        Ok(image)
    }

    /// Records that rebuild this image when replayed into an empty one (registration offsets
    /// become the snapshot's own offsets, as in Kafka).
    pub fn to_snapshot(&self) -> Vec<Record> {
        let mut records = Vec::new();
        for (name, level) in &self.features {
            records.push(Record::FeatureLevel(FeatureLevelRecord {
                name: name.clone(),
                level: *level,
            }));
        }
        for (name, value) in &self.cluster_configs {
            records.push(Record::Config(ConfigRecord {
                resource: ConfigResource::Cluster,
                name: name.clone(),
                value: Some(value.clone()),
            }));
        }
        for b in self.brokers.values() {
            records.push(Record::RegisterBroker(RegisterBrokerRecord {
                broker: b.id,
                epoch: b.epoch,
                incarnation: b.incarnation,
                listeners: b.listeners.clone(),
                rack: b.rack.clone(),
                log_dirs: b.log_dirs.clone(),
                fenced: b.state == BrokerState::Fenced,
            }));
            if b.state == BrokerState::ControlledShutdown {
                records.push(Record::BrokerRegistrationChange(
                    crate::records::BrokerRegistrationChangeRecord {
                        broker: b.id,
                        epoch: b.epoch,
                        change: BrokerStateChange::ControlledShutdown,
                    },
                ));
            }
        }
        let pending = self
            .pending
            .values()
            .map(|p| (&p.topic, Some(p.partitions)));
        for (t, pending) in self.topics.values().map(|t| (&**t, None)).chain(pending) {
            records.push(match pending {
                None => Record::Topic(TopicRecord {
                    name: t.name.clone(),
                    id: t.id,
                }),
                Some(partitions) => Record::PendingTopic(PendingTopicRecord {
                    name: t.name.clone(),
                    id: t.id,
                    partitions,
                }),
            });
            for (name, value) in &t.configs {
                records.push(Record::Config(ConfigRecord {
                    resource: ConfigResource::Topic(t.name.clone()),
                    name: name.clone(),
                    value: Some(value.clone()),
                }));
            }
            for (index, p) in &t.partitions {
                records.push(Record::Partition(PartitionRecord {
                    partition: TopicPartition::new(t.id, *index),
                    state: p.clone(),
                }));
            }
        }
        for (name, by_mechanism) in self.scram.iter() {
            for (mechanism, credential) in by_mechanism {
                records.push(Record::UserScramCredential(UserScramCredentialRecord {
                    name: name.clone(),
                    mechanism: *mechanism,
                    credential: credential.clone(),
                }));
            }
        }
        for (id, binding) in &self.acls.by_id {
            records.push(Record::AccessControlEntry(AccessControlEntryRecord {
                id: *id,
                binding: binding.clone(),
            }));
        }
        for (entity, keys) in self.quotas.iter() {
            for (key, value) in keys {
                records.push(Record::ClientQuota(crate::records::ClientQuotaRecord {
                    entity: entity.clone(),
                    key: key.clone(),
                    value: *value,
                    remove: false,
                }));
            }
        }
        if self.next_producer_id > 0 {
            // The broker and epoch of the last block are not kept; the snapshot keeps the
            // high-water mark, which is all replay needs.
            records.push(Record::ProducerIds(crate::records::ProducerIdsRecord {
                broker: BrokerId(-1),
                broker_epoch: crate::types::BrokerEpoch(-1),
                next_producer_id: self.next_producer_id,
            }));
        }
        records
    }
}
/// The invariants of a new or changed partition `tp` of `topic` (its min ISR from the topic's
/// configs and replication factor).
fn check_new_partition(
    topic: &TopicImage,
    tp: TopicPartition,
    next: &PartitionState,
    cluster_configs: &BTreeMap<String, String>,
) -> Result<(), ReplayError> {
    let rf = next.replication_factor();
    let min_isr = config::effective_min_isr(
        config::configured_min_isr(&topic.configs, cluster_configs),
        rf,
    );
    next.check_invariants(min_isr)
        .map_err(|violation| ReplayError::Invariant {
            partition: tp,
            violation,
        })
}
