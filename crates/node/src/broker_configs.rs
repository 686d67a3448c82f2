//! The broker configs DescribeConfigs answers for a BROKER resource: every key the broker reads
//! (Kafka's name, Kafka's `ConfigDef` type, Keel's default, what it does), and every broker
//! synonym of a topic config (`log.retention.ms`, `compression.type`, …: the topics' defaults,
//! [`crate::topic_config`]).
//!
//! `read_only` says whether the value can change while the broker runs: the topic defaults can
//! (the cluster-wide dynamic default, IncrementalAlterConfigs on the BROKER resource with an
//! empty name, as Kafka's `DynamicLogConfig`), and so can `eligible.leader.replicas.enable`;
//! everything else is read from the config file at start — Keel has no per-broker dynamic
//! configs, so `listeners`, which Kafka can reconfigure, is read-only here.

use crate::config::{BrokerConfig, CONTROLLER_QUORUM_BOOTSTRAP_SERVERS};
use crate::topic_config::{self, TopicConfigDef};

/// Kafka's `DescribeConfigsResponse.ConfigType` codes.
pub const TYPE_UNKNOWN: i8 = 0;
const BOOLEAN: i8 = 1;
const STRING: i8 = 2;
const INT: i8 = 3;
const SHORT: i8 = 4;
const LONG: i8 = 5;
const LIST: i8 = 7;
const CLASS: i8 = 8;

/// A broker config's value when the config file does not set it.
#[derive(Clone, Copy)]
pub enum Unset {
    /// This value.
    Fixed(&'static str),
    /// No value (Kafka's `null`).
    Null,
    /// Derived from the rest of the configuration (`advertised.listeners` from `listeners`, …).
    Derived(fn(&BrokerConfig) -> Option<String>),
}

/// One broker config key.
pub struct BrokerConfigDef {
    pub name: &'static str,
    pub config_type: i8,
    pub unset: Unset,
    pub doc: &'static str,
}

const fn def(
    name: &'static str,
    config_type: i8,
    unset: Unset,
    doc: &'static str,
) -> BrokerConfigDef {
    BrokerConfigDef {
        name,
        config_type,
        unset,
        doc,
    }
}

use Unset::{Derived, Fixed, Null};

fn join<T: ToString>(items: impl IntoIterator<Item = T>) -> Option<String> {
    let joined: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    (!joined.is_empty()).then(|| joined.join(","))
}

fn log_dirs(c: &BrokerConfig) -> Option<String> {
    join(c.log_dirs.iter().map(|d| d.display()))
}

fn advertised_listeners(c: &BrokerConfig) -> Option<String> {
    join(
        c.advertised_listeners
            .iter()
            .map(|l| format!("{}://{}:{}", l.name, l.host, l.port)),
    )
}

/// Every key the broker reads, sorted by name.
pub const BROKER_CONFIGS: &[BrokerConfigDef] = &[
    def("advertised.listeners", STRING, Derived(advertised_listeners),
        "The listeners given to clients in Metadata (NAME://host:port,...); unset: the broker's listeners, an empty or wildcard host given as localhost."),
    def("allow.everyone.if.no.acl.found", BOOLEAN, Fixed("false"),
        "With the authorizer: whether an action on a resource no ACL names is allowed."),
    def("authorizer.class.name", CLASS, Fixed(""),
        "The authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer enables Kafka's ACLs (with super.users and allow.everyone.if.no.acl.found); empty: every request is allowed."),
    def("auto.create.topics.enable", BOOLEAN, Fixed("true"),
        "Whether a Metadata request for a topic that does not exist creates it."),
    def("broker.heartbeat.interval.ms", INT, Fixed("2000"),
        "How often the broker heartbeats to the active controller."),
    def("broker.id", INT, Null,
        "This broker's id: the same as node.id."),
    def("broker.session.timeout.ms", INT, Fixed("9000"),
        "How long a broker the controller does not hear from stays unfenced (used by an in-process controller)."),
    def("controlled.shutdown.enable", BOOLEAN, Fixed("true"),
        "Whether SIGTERM first moves the broker's leaderships away before it stops."),
    def("controller.listener.names", STRING, Fixed("CONTROLLER"),
        "Listeners with these names are the controller's; the broker serves clients on the others."),
    def(CONTROLLER_QUORUM_BOOTSTRAP_SERVERS, LIST, Null,
        "host:port of controllers to contact, without their ids (KIP-853); the voters win when both are set."),
    def("controller.quorum.voters", LIST, Null,
        "The Raft voters, id@host:port,...; unset with no bootstrap servers: a single-node cluster with an in-process controller."),
    def("controller.quota.window.num", INT, Fixed("11"),
        "The controller mutation quota's burst, in windows of its rate (controller_mutation_rate; read by the controller)."),
    def("controller.quota.window.size.seconds", INT, Fixed("1"),
        "The length of one controller mutation quota window (read by the controller)."),
    def("default.replication.factor", INT, Fixed("1"),
        "Replication factor of a topic created without one."),
    def("delete.topic.enable", BOOLEAN, Fixed("true"),
        "Whether DeleteTopics is allowed."),
    def("eligible.leader.replicas.enable", BOOLEAN, Fixed("true"),
        "(Keel) KIP-966's eligible leader replicas; false runs Kafka's classic ISR rules. Changed at runtime on the cluster resource."),
    def("fetch.max.bytes", INT, Fixed("57671680"),
        "The most one Fetch response carries, whatever the client asks."),
    def("group.initial.rebalance.delay.ms", INT, Fixed("3000"),
        "How long the first rebalance of an empty group waits for more members to join."),
    def("group.max.session.timeout.ms", INT, Fixed("1800000"),
        "The longest session timeout a consumer may ask for."),
    def("group.max.size", INT, Fixed("2147483647"),
        "The most members one consumer group may have."),
    def("group.min.session.timeout.ms", INT, Fixed("6000"),
        "The shortest session timeout a consumer may ask for."),
    def("inter.broker.listener.name", STRING, Null,
        "The listener brokers use among themselves; unset: the one of security.inter.broker.protocol."),
    def("listener.security.protocol.map", STRING, Fixed("SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"),
        "NAME:PROTOCOL for each listener (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."),
    def("listeners", STRING, Fixed("PLAINTEXT://:9092"),
        "Where the broker (and, for listeners named in controller.listener.names, the controller) listens: NAME://host:port,..."),
    def("log.cleaner.backoff.ms", LONG, Fixed("15000"),
        "Pause between two passes of the log cleaner."),
    def("log.cleaner.dedupe.buffer.size", LONG, Fixed("134217728"),
        "Memory for one cleaner pass's key-to-offset map."),
    def("log.cleaner.enable", BOOLEAN, Fixed("true"),
        "Whether the log cleaner compacts topics with cleanup.policy=compact."),
    def("log.dir", STRING, Derived(log_dirs),
        "The data directory when log.dirs is not set."),
    def("log.dirs", STRING, Derived(log_dirs),
        "Comma-separated data directories, each formatted with keel format; default /tmp/kraft-combined-logs."),
    def("log.flush.offset.checkpoint.interval.ms", INT, Fixed("60000"),
        "How often the recovery points are written to their checkpoint file."),
    def("log.flush.scheduler.interval.ms", LONG, Fixed("9223372036854775807"),
        "How often logs are checked for a flush due by flush.ms (Keel checks at least every second); also the default of flush.ms when log.flush.interval.ms is not set."),
    def("log.retention.check.interval.ms", LONG, Fixed("300000"),
        "How often retention deletes old segments."),
    def("log.scrub.bytes.per.second", LONG, Fixed("52428800"),
        "(Keel) The scrubber's read rate."),
    def("log.scrub.enable", BOOLEAN, Fixed("true"),
        "(Keel) Validate every batch of every segment in the background, to find damaged data nobody reads."),
    def("log.scrub.interval.ms", LONG, Fixed("86400000"),
        "(Keel) A scrub pass over every hosted partition starts at most this often."),
    def("message.max.bytes", INT, Fixed("1048588"),
        "The default max.message.bytes of topics: the largest record batch accepted."),
    def("metadata.log.dir", STRING, Null,
        "The controller's metadata log directory; unset: the first of log.dirs."),
    def("metrics.host", STRING, Null,
        "(Keel) The address the metrics endpoint binds; unset: the host of the first broker listener."),
    def("metrics.port", INT, Fixed("-1"),
        "(Keel) Serve Prometheus metrics on GET /metrics at this port; -1: no endpoint."),
    def("node.id", INT, Null,
        "This node's id (required)."),
    def("num.partitions", INT, Fixed("1"),
        "Partitions of a topic created without a count (also by auto-creation)."),
    def("offset.metadata.max.bytes", INT, Fixed("4096"),
        "The longest metadata string of a committed offset."),
    def("offsets.commit.timeout.ms", INT, Fixed("5000"),
        "How long a group write (a commit, an assignment) waits for acks=all."),
    def("offsets.retention.check.interval.ms", LONG, Fixed("600000"),
        "How often expired committed offsets are looked for."),
    def("offsets.retention.minutes", INT, Fixed("10080"),
        "Committed offsets of a group empty this long are deleted."),
    def("offsets.topic.num.partitions", INT, Fixed("50"),
        "Partitions of __consumer_offsets, fixed when it is created."),
    def("offsets.topic.replication.factor", SHORT, Derived(|c| Some(c.offsets_topic_replication_factor.to_string())),
        "Replication factor of __consumer_offsets; default 3, or 1 for a single-node cluster."),
    def("offsets.topic.segment.bytes", INT, Fixed("104857600"),
        "Segment size of __consumer_offsets."),
    def("process.roles", LIST, Null,
        "broker, controller or broker,controller; unset: a single-node cluster."),
    def("producer.id.expiration.check.interval.ms", INT, Fixed("600000"),
        "How often idle idempotent producers are looked for."),
    def("producer.id.expiration.ms", INT, Fixed("86400000"),
        "An idempotent producer that has not written to a partition for this long is forgotten there."),
    def("quota.window.num", INT, Fixed("11"),
        "The windows client quota usage is measured over (producer_byte_rate, consumer_byte_rate)."),
    def("quota.window.size.seconds", INT, Fixed("1"),
        "The length of one client quota window."),
    def("replica.fetch.backoff.ms", INT, Fixed("1000"),
        "How long a follower waits after a failed fetch."),
    def("replica.fetch.max.bytes", INT, Fixed("1048576"),
        "Per-partition size of a follower fetch."),
    def("replica.fetch.response.max.bytes", INT, Fixed("10485760"),
        "Size of a follower fetch response."),
    def("replica.fetch.wait.max.ms", INT, Fixed("500"),
        "How long a follower fetch waits at the leader for new data."),
    def("replica.high.watermark.checkpoint.interval.ms", LONG, Fixed("5000"),
        "How often the high watermarks are written to their checkpoint file."),
    def("replica.lag.time.max.ms", LONG, Fixed("30000"),
        "A follower that has not caught up for this long leaves the ISR."),
    def("security.inter.broker.protocol", STRING, Fixed("PLAINTEXT"),
        "The protocol brokers use among themselves; Keel has PLAINTEXT only."),
    def("socket.request.max.bytes", INT, Fixed("104857600"),
        "Larger request frames close the connection."),
    def("super.users", STRING, Null,
        "With the authorizer: principals every check allows (User:a;User:b)."),
    def("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT,
        Derived(|c| Some(c.transactions.abort_timed_out_interval_ms.to_string())),
        "How often the transaction coordinator aborts transactions past their timeout."),
    def("transaction.max.timeout.ms", INT,
        Derived(|c| Some(c.transactions.max_timeout_ms.to_string())),
        "The longest transaction.timeout.ms a producer may ask for."),
    def("transaction.remove.expired.transaction.cleanup.interval.ms", INT,
        Derived(|c| Some(c.transactions.remove_expired_interval_ms.to_string())),
        "How often expired transactional ids are removed."),
    def("transaction.state.log.min.isr", INT,
        Derived(|c| Some(c.transactions.min_isr.to_string())),
        "min.insync.replicas of __transaction_state (capped at its replication factor)."),
    def("transaction.state.log.num.partitions", INT,
        Derived(|c| Some(c.transactions.num_partitions.to_string())),
        "Partitions of __transaction_state, fixed when it is created."),
    def("transaction.state.log.replication.factor", SHORT,
        Derived(|c| Some(c.transactions.replication_factor.to_string())),
        "Replication factor of __transaction_state; default 3, or 1 for a single-node cluster."),
    def("transaction.state.log.segment.bytes", INT,
        Derived(|c| Some(c.transactions.segment_bytes.to_string())),
        "Segment size of __transaction_state."),
    def("transactional.id.expiration.ms", INT,
        Derived(|c| Some(c.transactions.id_expiration_ms.to_string())),
        "A transactional id without a transaction for this long is removed."),
];

/// The definition of broker key `name`.
pub fn definition(name: &str) -> Option<&'static BrokerConfigDef> {
    BROKER_CONFIGS.iter().find(|d| d.name == name)
}

/// Whether broker key `name` can change at runtime (the cluster-wide dynamic default): the
/// topic defaults and `eligible.leader.replicas.enable`.
pub fn is_dynamic(name: &str) -> bool {
    name == keel_controller::config::ELR_FEATURE || topic_config::synonym_of(name).is_some()
}

/// A topic default's broker key, described from its topic config: type, default, doc.
pub struct SynonymDef {
    pub topic: &'static TopicConfigDef,
    /// The key's unit factor against the topic config's (hours: 3600000).
    pub factor: i64,
}

impl SynonymDef {
    pub fn config_type(&self) -> i8 {
        if self.factor == 1 {
            self.topic.kind.config_type()
        } else {
            INT
        }
    }

    /// The value when nothing sets it: the topic config's default in this key's unit, or
    /// none for a key in another unit (`log.retention.hours` is unset when `log.retention.ms`
    /// is what applies).
    pub fn unset_value(&self) -> Option<String> {
        (self.factor == 1)
            .then_some(self.topic.default)
            .flatten()
            .map(str::to_string)
    }

    pub fn documentation(&self) -> String {
        let unit = if self.factor == 1 {
            String::new()
        } else {
            format!(" (in units of {} ms)", self.factor)
        };
        format!(
            "The default{unit} of the topic config {} for topics that do not set it: {}",
            self.topic.name,
            self.topic.documentation()
        )
    }
}

/// `name` as a broker synonym of a topic config.
pub fn synonym(name: &str) -> Option<SynonymDef> {
    topic_config::synonym_of(name).map(|(topic, factor)| SynonymDef { topic, factor })
}

/// The broker synonyms that name the same topic default as `name`, from `name` on (Kafka's
/// `DynamicBrokerConfig.brokerConfigSynonyms`: `log.retention.ms` → minutes → hours).
pub fn synonym_group(name: &str) -> Vec<&'static str> {
    match topic_config::synonym_of(name) {
        Some((topic, _)) => topic
            .broker_synonyms
            .iter()
            .map(|(s, _)| *s)
            .skip_while(|s| *s != name)
            .collect(),
        None => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: the table describes exactly the keys the broker reads (config.rs's BROKER_KEYS),
    // sorted, each with a type and documentation.
    #[test]
    fn describes_every_key_the_broker_reads() {
        let names: Vec<&str> = BROKER_CONFIGS.iter().map(|d| d.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        let mut read: Vec<&str> = crate::config::BROKER_KEYS.to_vec();
        read.sort_unstable();
        assert_eq!(names, read);
        for def in BROKER_CONFIGS {
            assert!(
                !def.doc.is_empty() && def.config_type != TYPE_UNKNOWN,
                "{}",
                def.name
            );
        }
    }

    // Shows: topic defaults are described from their topic config, in their own unit, and
    // grouped as Kafka groups synonyms.
    #[test]
    fn topic_defaults_are_described_from_their_topic_config() {
        let hours = synonym("log.retention.hours").unwrap();
        assert_eq!(
            (hours.topic.name, hours.factor),
            ("retention.ms", 3_600_000)
        );
        assert_eq!(hours.unset_value(), None);
        let ms = synonym("log.retention.ms").unwrap();
        assert_eq!(ms.unset_value().as_deref(), Some("604800000"));
        assert_eq!(ms.config_type(), LONG);
        assert!(ms.documentation().contains("retention.ms"));
        assert_eq!(
            synonym_group("log.retention.ms"),
            [
                "log.retention.ms",
                "log.retention.minutes",
                "log.retention.hours"
            ]
        );
        assert_eq!(
            synonym_group("log.retention.minutes"),
            ["log.retention.minutes", "log.retention.hours"]
        );
        assert!(is_dynamic("compression.type") && is_dynamic("eligible.leader.replicas.enable"));
        assert!(!is_dynamic("listeners") && !is_dynamic("advertised.listeners"));
    }
}
