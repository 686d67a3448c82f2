//! Scenario files for the deterministic cluster simulator.
//!
//! A scenario describes a cluster (brokers, cluster configs, topics), the modes to run it in
//! (Keel's KIP-966 mode and classic mode) and a timeline of steps and expectations. The format
//! is small and line-oriented; `docs/scenarios.md` is its reference. [`parse`] turns a file into
//! a [`Scenario`], or a [`ParseError`] naming the line. Every step, condition and expectation
//! prints back in its canonical source form (`Display`), so a runner can echo what it executes,
//! and parsing that text again gives the same value.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use crate::disk::DiskFault;
pub use crate::world::SegmentChoice;

/// A broker id. Brokers are numbered `1..=brokers`; the controller is not a broker and is named
/// by the keyword `controller` (see [`Node`]).
pub type NodeId = i32;

/// The most brokers a scenario may declare (`brokers 1` ..= `brokers 9`).
pub const MAX_BROKERS: u32 = 9;

/// The most log directories per broker a scenario may declare (`log-dirs 1` ..= `log-dirs 4`).
pub const MAX_LOG_DIRS: u32 = 4;

/// How long `await` waits when the step has no `within`.
/// The Kafka APIs a `hold` step can name, with their API keys.
pub const HOLDABLE_APIS: &[(&str, i16)] = &[
    ("Produce", 0),
    ("Fetch", 1),
    ("Metadata", 3),
    ("AlterPartition", 56),
    ("BrokerRegistration", 62),
    ("BrokerHeartbeat", 63),
    ("InitProducerId", 22),
    ("AddPartitionsToTxn", 24),
    ("EndTxn", 26),
    ("WriteTxnMarkers", 27),
    // Keel's RPC for KIP-966's Unclean Recovery Manager (controller -> broker).
    (
        "GetReplicaLogInfo",
        keel_wire::keel_rpc::GET_REPLICA_LOG_INFO_KEY,
    ),
];

/// The API key of a holdable API name.
pub fn api_key(name: &str) -> Option<i16> {
    HOLDABLE_APIS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, k)| *k)
}

pub const DEFAULT_WITHIN: Duration = Duration::from_secs(30);

/// A process of the simulated cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Node {
    /// Broker `n` (`1..=brokers`), written `n`.
    Broker(NodeId),
    /// The active controller when the step runs (with one controller: the controller),
    /// written `controller`.
    Controller,
    /// Controller `i` of the quorum (`0..controllers`), written `controller-<i>`.
    ControllerAt(u32),
}

/// A topic partition, written `topic/partition` (e.g. `t/0`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tp {
    /// The topic's name; declared by a `topic` directive.
    pub topic: String,
    /// The partition index, below the topic's partition count.
    pub partition: i32,
}

impl Tp {
    /// The partition `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Tp {
            topic: topic.into(),
            partition,
        }
    }
}

/// How the simulated cluster runs a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// KIP-966 as Keel implements it (`eligible.leader.replicas.enable=true`); written `keel`.
    Keel,
    /// Pre-KIP-966 ISR semantics (`eligible.leader.replicas.enable=false`); written `classic`.
    Classic,
}

impl Mode {
    /// Both modes, in the default order.
    pub const ALL: [Mode; 2] = [Mode::Keel, Mode::Classic];

    /// The mode's keyword: `keel` or `classic`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Keel => "keel",
            Mode::Classic => "classic",
        }
    }

    /// The value of `eligible.leader.replicas.enable` in this mode.
    pub fn eligible_leader_replicas(self) -> bool {
        self == Mode::Keel
    }

    fn from_word(word: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| mode.as_str() == word)
    }
}

/// A parsed scenario file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// `name <text>`: the rest of the line.
    pub name: String,
    /// The `#` comment lines before the first directive, without the `#` and one following space.
    pub description: Vec<String>,
    /// `brokers <n>`: the brokers are `1..=brokers`.
    pub brokers: u32,
    /// `controllers <n>` (1, 3 or 5; default 1): the controller quorum.
    pub controllers: u32,
    /// `log-dirs <n>` (`1..=MAX_LOG_DIRS`; default 1): log directories per broker.
    pub log_dirs: u32,
    /// `config <key>=<value>...`: cluster configs, in file order.
    pub configs: Vec<(String, String)>,
    /// `topic ...`: the topics that exist before the first step, in file order.
    pub topics: Vec<TopicSpec>,
    /// `modes ...`: the modes the scenario runs in; default `[Keel, Classic]`.
    pub modes: Vec<Mode>,
    /// The timeline, in file order.
    pub steps: Vec<Line<Step>>,
}

impl Scenario {
    /// The declared topic called `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicSpec> {
        self.topics.iter().find(|topic| topic.name == name)
    }

    /// The steps that run in `mode`, in order.
    pub fn steps_for(&self, mode: Mode) -> impl Iterator<Item = &Line<Step>> + '_ {
        self.steps.iter().filter(move |step| step.applies_to(mode))
    }
}

/// An item of the file with its 1-based line number and its optional mode prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<T> {
    /// The 1-based line number in the scenario file.
    pub line: usize,
    /// `Some(mode)` when the line starts with `keel:` or `classic:`: the item runs in that mode
    /// only.
    pub mode: Option<Mode>,
    /// The item itself.
    pub item: T,
}

impl<T> Line<T> {
    /// Whether the item runs in `mode`.
    pub fn applies_to(&self, mode: Mode) -> bool {
        self.mode.is_none_or(|only| only == mode)
    }
}

/// A topic created before the first step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// The topic's name.
    pub name: String,
    /// `partitions=<n>`, at least 1.
    pub partitions: u32,
    /// `replication-factor=<n>`, `1..=brokers`.
    pub replication_factor: u16,
    /// `replicas=1,2,3;2,3,1`: one replica list per partition (first = preferred leader);
    /// `None` lets the simulator assign replicas.
    pub assignment: Option<Vec<Vec<NodeId>>>,
    /// `config.<key>=<value>`: topic configs, in file order.
    pub configs: Vec<(String, String)>,
}

/// The `acks` of a produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Acks {
    /// `acks=all`: acknowledged once the ISR has the records (and the ISR has at least min ISR
    /// members).
    All,
    /// `acks=1`: acknowledged once the leader appended the records.
    Leader,
}

/// What an `elect` step asks the controller for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElectKind {
    /// `preferred`: ElectionType 0, the first live replica of the assignment if it is eligible.
    Preferred,
    /// `unclean` / `unclean balanced`: ElectionType 1. Without an eligible replica the
    /// controller starts an unclean recovery, Proactive — or Balanced with `balanced` (Keel's
    /// `RecoveryMode` tagged field).
    Unclean {
        /// Send `RecoveryMode` = Balanced.
        balanced: bool,
    },
    /// `leader=<broker>`: elect exactly this replica (Keel's `DesiredLeaders` tagged field,
    /// KIP-966's "directly select a leader"); it must be a live replica.
    Leader(NodeId),
}

impl fmt::Display for ElectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElectKind::Preferred => f.write_str("preferred"),
            ElectKind::Unclean { balanced: false } => f.write_str("unclean"),
            ElectKind::Unclean { balanced: true } => f.write_str("unclean balanced"),
            ElectKind::Leader(id) => write!(f, "leader={id}"),
        }
    }
}

/// One step of the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `start <node>`: start a stopped node.
    Start(Node),
    /// `crash <node> [lose-unflushed [torn]]`: kill the process.
    Crash {
        /// The node killed.
        node: Node,
        /// Power loss: writes not yet fsynced are lost (otherwise the page cache survives).
        lose_unflushed: bool,
        /// The final unsynced write is torn (only with `lose_unflushed`).
        torn: bool,
    },
    /// `shutdown <node>`: clean, controlled shutdown.
    Shutdown(Node),
    /// `restart <node>`: clean shutdown, then start.
    Restart(Node),
    /// `wipe <broker>`: the stopped broker gets an empty, freshly formatted disk (new directory
    /// id).
    Wipe(NodeId),
    /// `pause <node>`: the process stops running but keeps its memory (SIGSTOP, a long GC pause).
    Pause(Node),
    /// `resume <node>`: a paused process runs again.
    Resume(Node),
    /// `isolate <node>`: cut every network link of the node.
    Isolate(Node),
    /// `partition <nodes> | <nodes>`: cut every link between the two sides.
    Partition(Vec<Node>, Vec<Node>),
    /// `heal`: restore every network link.
    Heal,
    /// `hold <node> -> <node> <Api>`: from now on, the first request of that Kafka API the
    /// first node sends the second (and everything after it on that connection) is held in
    /// flight until `release` — a request delayed in the network while the node's other
    /// connections (its heartbeats) flow. APIs: see [`HOLDABLE_APIS`].
    /// `hold <node> -> <node> <Api> answer`: the same for the first node's answer to the first
    /// request of that API the second node sends it (the request itself is delivered).
    Hold {
        from: Node,
        to: Node,
        api: String,
        /// Hold the answer `from` sends `to`, not a request.
        answer: bool,
    },
    /// `release`: deliver every held connection and drop every hold rule.
    Release,
    /// `elect <tp> preferred|unclean [balanced]|leader=<broker>`: an operator's ElectLeaders
    /// (API 43, v2) sent to the controller (`unclean` on a partition without an eligible replica
    /// starts an unclean recovery — the way out of the Manual strategy; `leader=N` names the
    /// new leader, KIP-966's manual election).
    Elect { tp: Tp, kind: ElectKind },
    /// `wait <duration>`: let simulated time pass.
    Wait(Duration),
    /// `await <condition> [within <duration>]`: advance simulated time until the condition
    /// holds; fail if it does not within the duration (default [`DEFAULT_WITHIN`]).
    Await {
        /// The condition waited for.
        cond: Condition,
        /// The longest simulated time to wait.
        within: Duration,
    },
    /// `produce <tp> [count=<n>] [acks=all|1]`: produce records (default one, acks=all).
    Produce {
        /// The partition written to.
        tp: Tp,
        /// How many records, at least 1.
        count: u32,
        /// The produce requests' acks.
        acks: Acks,
    },
    /// `consume <tp>`: read the partition from its leader.
    Consume(Tp),
    /// `consume-committed <tp>`: read the partition from its leader with
    /// `isolation_level=read_committed`, up to its last stable offset.
    ConsumeCommitted(Tp),
    /// `txn <id> <tp>[,<tp>...] [count=<n>] [v2] commit|abort|open [expect=<outcome>]`: the
    /// transactional producer `<id>` (its `transactional.id`; initialized on first use,
    /// speaking transactions v2 if `v2` is given then) writes `count` records (default 1) to
    /// each partition in one transaction, then commits it, aborts it, or leaves it open.
    Txn {
        id: String,
        tps: Vec<Tp>,
        count: u32,
        v2: bool,
        end: TxnStepEnd,
        expect: TxnOutcome,
    },
    /// `txn-end <id> commit|abort [expect=<outcome>]`: ends producer `<id>`'s open transaction.
    TxnEnd {
        id: String,
        commit: bool,
        expect: TxnOutcome,
    },
    /// `alter-config topic <name> <key>=<value>` / `alter-config cluster <key>=<value>`.
    AlterConfig {
        /// The topic or the cluster.
        resource: ConfigResource,
        /// The config key.
        key: String,
        /// The new value; `None` (written `key=`) deletes the config.
        value: Option<String>,
    },
    /// `expect <expectation>`: check immediately, without advancing time.
    Expect(Expectation),
    /// `corrupt <broker> <tp> [segment=<n>|last] [at=<byte>] [bytes=<n>]`: bit rot — every
    /// bit of `bytes` bytes of one segment file of the broker's replica flips, durable or not.
    Corrupt {
        broker: NodeId,
        tp: Tp,
        /// Which segment file (default the first).
        segment: SegmentChoice,
        /// The first byte (default: the middle of the file).
        at: Option<u64>,
        /// How many bytes (default 1).
        bytes: u64,
    },
    /// `disk-full <broker> [dir=<i>]`, `disk-error <broker> write|read|fsync [dir=<i>]`,
    /// `disk-lie <broker> torn|misdirected|lost [dir=<i>]`: a fault of the broker's disk, in
    /// log directory `dir` (index in `log.dirs`) or, without it, in all of them.
    Disk {
        broker: NodeId,
        fault: DiskFault,
        dir: Option<u32>,
    },
    /// `heal-disk <broker>`: every fault of the broker's disk ends (what they did stays).
    HealDisk(NodeId),
}

/// What `alter-config` changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigResource {
    /// `topic <name>`: a declared topic.
    Topic(String),
    /// `cluster`: the cluster-wide default.
    Cluster,
}

/// A fact about the cluster's metadata, waited for by `await` or checked by `expect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `leader <tp> = <broker>|none`.
    Leader {
        /// The partition.
        tp: Tp,
        /// The leader; `None` = no leader.
        is: Option<NodeId>,
    },
    /// `isr <tp> = <brokers>|none`.
    Isr {
        /// The partition.
        tp: Tp,
        /// The ISR, sorted ascending and deduplicated; empty = `none`.
        is: Vec<NodeId>,
    },
    /// `elr <tp> = <brokers>|none`.
    Elr {
        /// The partition.
        tp: Tp,
        /// The ELR, sorted ascending and deduplicated; empty = `none`.
        is: Vec<NodeId>,
    },
    /// `last-known-elr <tp> = <brokers>|none`.
    LastKnownElr {
        /// The partition.
        tp: Tp,
        /// The last known ELR, sorted ascending and deduplicated; empty = `none`.
        is: Vec<NodeId>,
    },
    /// `leader-epoch <tp> <cmp> <n>`.
    LeaderEpoch {
        /// The partition.
        tp: Tp,
        /// How the actual leader epoch compares with `value`.
        cmp: Cmp,
        /// The epoch compared with.
        value: i64,
    },
    /// `fenced <broker>` / `unfenced <broker>`.
    Fenced {
        /// The broker.
        node: NodeId,
        /// `true` for `fenced`, `false` for `unfenced`.
        fenced: bool,
    },
    /// `ready <broker>`: registered, unfenced and serving.
    Ready(NodeId),
    /// `dir-offline <broker> [dir=<i>]` / `dir-online <broker> [dir=<i>]`: the running broker
    /// has log directory `dir` offline (without `dir`: any / none).
    DirOffline {
        node: NodeId,
        dir: Option<u32>,
        /// `true` for `dir-offline`.
        offline: bool,
    },
}

/// A comparison: `actual <cmp> expected`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cmp {
    /// `=`
    Eq,
    /// `>=`
    Ge,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `<`
    Lt,
}

impl Cmp {
    /// Whether `actual <self> expected` holds.
    pub fn holds<T: Ord>(self, actual: T, expected: T) -> bool {
        match self {
            Cmp::Eq => actual == expected,
            Cmp::Ge => actual >= expected,
            Cmp::Le => actual <= expected,
            Cmp::Gt => actual > expected,
            Cmp::Lt => actual < expected,
        }
    }

    /// The operator as written: `=`, `>=`, `<=`, `>` or `<`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cmp::Eq => "=",
            Cmp::Ge => ">=",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Lt => "<",
        }
    }
}

/// What `expect` checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expectation {
    /// `expect <condition>`: the condition holds now.
    Holds(Condition),
    /// `expect lost <tp> <cmp> <n>`: acknowledged `acks=all` records that are lost.
    Lost {
        /// The partition.
        tp: Tp,
        /// How the actual count compares with `count`.
        cmp: Cmp,
        /// The count compared with.
        count: u64,
    },
    /// `expect acked <tp> <cmp> <n>`: `acks=all` acknowledgements so far.
    Acked {
        /// The partition.
        tp: Tp,
        /// How the actual count compares with `count`.
        cmp: Cmp,
        /// The count compared with.
        count: u64,
    },
    /// `expect offline <tp>` / `expect online <tp>`.
    Offline {
        /// The partition.
        tp: Tp,
        /// `true` for `offline`, `false` for `online`.
        offline: bool,
    },
    /// `expect quarantined <broker> <tp> <cmp> <bytes>`: bytes of the broker's replica set
    /// aside in quarantine directories.
    Quarantined {
        node: NodeId,
        tp: Tp,
        cmp: Cmp,
        bytes: u64,
    },
    /// `expect missing <broker> <tp> <cmp> <n>`: acknowledged `acks=all` records the running
    /// broker's replica does not hold in a valid batch.
    Missing {
        node: NodeId,
        tp: Tp,
        cmp: Cmp,
        count: u64,
    },
    /// `expect log-dir <broker> <tp> = <i>`: the broker's replica is in log directory `i`.
    LogDir { node: NodeId, tp: Tp, dir: u32 },
    /// `expect committed <tp> <cmp> <n>`: records read_committed consumers read from the
    /// partition so far.
    Committed { tp: Tp, cmp: Cmp, count: u64 },
}

/// How a `txn` step ends its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnStepEnd {
    Commit,
    Abort,
    /// Left open (for a later `txn-end`, or for the coordinator's timeout).
    Open,
}

/// What a `txn` / `txn-end` step expects: `expect=ok` (the default), `expect=fenced` (the
/// producer is refused with `INVALID_PRODUCER_EPOCH` or `PRODUCER_FENCED`), `expect=failed`
/// (any refusal or no answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOutcome {
    Ok,
    Fenced,
    Failed,
}

impl fmt::Display for TxnOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TxnOutcome::Ok => "ok",
            TxnOutcome::Fenced => "fenced",
            TxnOutcome::Failed => "failed",
        })
    }
}

/// Why a scenario file does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based line number (for a file that ends too early: its last line).
    pub line: usize,
    /// The offending line, trimmed.
    pub text: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: `{}`", self.line, self.message, self.text)
    }
}

impl std::error::Error for ParseError {}

/// Parses a scenario file.
///
/// `#` starts a comment anywhere; blank lines are ignored. The header directives (`name`,
/// `brokers`, `config`, `topic`, `modes`) come first, then at least one step. See
/// `docs/scenarios.md` for the grammar.
pub fn parse(text: &str) -> Result<Scenario, ParseError> {
    let mut parser = Parser::default();
    let mut seen_directive = false;
    let mut last = (1, "");
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        last = (line, trimmed);
        if let Some(comment) = trimmed.strip_prefix('#') {
            if !seen_directive {
                let comment = comment.strip_prefix(' ').unwrap_or(comment);
                parser.description.push(comment.trim_end().to_string());
            }
            continue;
        }
        let code = match trimmed.split_once('#') {
            Some((code, _comment)) => code.trim_end(),
            None => trimmed,
        };
        if code.is_empty() {
            continue;
        }
        seen_directive = true;
        parser.line(line, code).map_err(|message| ParseError {
            line,
            text: trimmed.to_string(),
            message,
        })?;
    }
    parser.finish().map_err(|message| ParseError {
        line: last.0,
        text: last.1.to_string(),
        message,
    })
}

type Res<T> = Result<T, String>;

const HEADER_DIRECTIVES: [&str; 7] = [
    "name",
    "brokers",
    "controllers",
    "log-dirs",
    "config",
    "topic",
    "modes",
];
const CONDITIONS: &str = "leader, isr, elr, last-known-elr, leader-epoch, fenced, unfenced, \
                          ready, dir-offline, dir-online";
const TOPIC_USAGE: &str = "topic <name> partitions=<n> replication-factor=<n> \
                           [replicas=<ids>[;<ids>...]] [config.<key>=<value>...]";

#[derive(Default)]
struct Parser {
    description: Vec<String>,
    name: Option<String>,
    brokers: Option<u32>,
    controllers: Option<u32>,
    log_dirs: Option<u32>,
    configs: Vec<(String, String)>,
    topics: Vec<TopicSpec>,
    modes: Option<Vec<Mode>>,
    steps: Vec<Line<Step>>,
}

impl Parser {
    fn line(&mut self, line: usize, code: &str) -> Res<()> {
        let tokens: Vec<&str> = code.split_whitespace().collect();
        let (mode, tokens) = split_mode(&tokens)?;
        let (keyword, args) = (tokens[0], &tokens[1..]);
        if HEADER_DIRECTIVES.contains(&keyword) {
            if let Some(mode) = mode {
                return Err(format!(
                    "`{mode}:` applies to steps only, not to the header directive `{keyword}`"
                ));
            }
            if let Some(first) = self.steps.first() {
                return Err(format!(
                    "header directive `{keyword}` after the first step (line {})",
                    first.line
                ));
            }
            return self.header(keyword, args, code);
        }
        if self.steps.is_empty() {
            if self.name.is_none() {
                return Err("missing `name <text>` before the first step".to_string());
            }
            if self.brokers.is_none() {
                return Err("missing `brokers <n>` before the first step".to_string());
            }
        }
        if let Some(mode) = mode {
            if !self.modes().contains(&mode) {
                return Err(format!(
                    "`{mode}:` step, but the scenario does not run in {mode} mode (see `modes`)"
                ));
            }
        }
        let item = self.step(keyword, args)?;
        self.steps.push(Line { line, mode, item });
        Ok(())
    }

    fn finish(self) -> Res<Scenario> {
        let Some(name) = self.name else {
            return Err("missing `name <text>`".to_string());
        };
        let Some(brokers) = self.brokers else {
            return Err("missing `brokers <n>`".to_string());
        };
        if self.steps.is_empty() {
            return Err("the scenario has no steps".to_string());
        }
        Ok(Scenario {
            name,
            description: self.description,
            brokers,
            controllers: self.controllers.unwrap_or(1),
            log_dirs: self.log_dirs.unwrap_or(1),
            configs: self.configs,
            topics: self.topics,
            modes: self.modes.unwrap_or_else(|| Mode::ALL.to_vec()),
            steps: self.steps,
        })
    }

    fn modes(&self) -> &[Mode] {
        self.modes.as_deref().unwrap_or(&Mode::ALL)
    }

    // ---- header -------------------------------------------------------------------------

    fn header(&mut self, keyword: &str, args: &[&str], code: &str) -> Res<()> {
        match keyword {
            "name" => {
                if self.name.is_some() {
                    return Err("duplicate `name`".to_string());
                }
                let text = code[keyword.len()..].trim();
                if text.is_empty() {
                    return Err("incomplete, expected `name <text>`".to_string());
                }
                self.name = Some(text.to_string());
            }
            "brokers" => {
                if self.brokers.is_some() {
                    return Err("duplicate `brokers`".to_string());
                }
                let [count] = args else {
                    return Err(arity(args, 1, "brokers <n>"));
                };
                let count: u32 = parse_uint(count, "the broker count")?;
                if !(1..=MAX_BROKERS).contains(&count) {
                    return Err(format!(
                        "broker count {count} out of range 1..={MAX_BROKERS}"
                    ));
                }
                self.brokers = Some(count);
            }
            "controllers" => {
                if self.controllers.is_some() {
                    return Err("duplicate `controllers`".to_string());
                }
                if !self.steps.is_empty() || self.brokers.is_none() {
                    return Err("`controllers` must come after `brokers`".to_string());
                }
                let [count] = args else {
                    return Err(arity(args, 1, "controllers <n>"));
                };
                let count: u32 = parse_uint(count, "the controller count")?;
                if ![1, 3, 5].contains(&count) {
                    return Err(format!(
                        "controller count {count}: a quorum has 1, 3 or 5 controllers"
                    ));
                }
                self.controllers = Some(count);
            }
            "log-dirs" => {
                if self.log_dirs.is_some() {
                    return Err("duplicate `log-dirs`".to_string());
                }
                let [count] = args else {
                    return Err(arity(args, 1, "log-dirs <n>"));
                };
                let count: u32 = parse_uint(count, "the log directory count")?;
                if !(1..=MAX_LOG_DIRS).contains(&count) {
                    return Err(format!(
                        "log directory count {count} out of range 1..={MAX_LOG_DIRS}"
                    ));
                }
                self.log_dirs = Some(count);
            }
            "config" => {
                if args.is_empty() {
                    return Err("incomplete, expected `config <key>=<value>...`".to_string());
                }
                for arg in args {
                    let (key, value) = key_value(arg)?;
                    if value.is_empty() {
                        return Err(format!("empty value for `{key}`"));
                    }
                    if self.configs.iter().any(|(k, _)| k == key) {
                        return Err(format!("duplicate key `{key}`"));
                    }
                    self.configs.push((key.to_string(), value.to_string()));
                }
            }
            "topic" => {
                let topic = self.topic(args)?;
                self.topics.push(topic);
            }
            "modes" => {
                if self.modes.is_some() {
                    return Err("duplicate `modes`".to_string());
                }
                if args.is_empty() {
                    return Err("incomplete, expected `modes keel classic`, `modes keel` or `modes classic`".to_string());
                }
                let mut modes = Vec::new();
                for arg in args {
                    let mode = Mode::from_word(arg).ok_or_else(|| {
                        format!("unknown mode `{arg}` (expected `keel` or `classic`)")
                    })?;
                    if modes.contains(&mode) {
                        return Err(format!("duplicate mode `{mode}`"));
                    }
                    modes.push(mode);
                }
                self.modes = Some(modes);
            }
            _ => return Err(format!("unknown directive `{keyword}`")),
        }
        Ok(())
    }

    fn topic(&self, args: &[&str]) -> Res<TopicSpec> {
        let Some(brokers) = self.brokers else {
            return Err("`brokers` must come before `topic`".to_string());
        };
        let Some((&name, pairs)) = args.split_first() else {
            return Err(format!("incomplete, expected `{TOPIC_USAGE}`"));
        };
        if name.contains('=') {
            return Err(format!(
                "expected a topic name, found `{name}`; expected `{TOPIC_USAGE}`"
            ));
        }
        check_topic_name(name)?;
        if self.topics.iter().any(|topic| topic.name == name) {
            return Err(format!("duplicate topic `{name}`"));
        }
        let (mut partitions, mut replication_factor, mut replicas) = (None, None, None);
        let mut configs = Vec::new();
        for (key, value) in unique_pairs(pairs)? {
            match key {
                "partitions" => partitions = Some(parse_uint::<u32>(value, "partitions")?),
                "replication-factor" => {
                    replication_factor = Some(parse_uint::<u16>(value, "replication-factor")?);
                }
                "replicas" => replicas = Some(value),
                _ => {
                    let Some(config) = key.strip_prefix("config.") else {
                        return Err(format!(
                            "unknown key `{key}` (expected partitions, replication-factor, \
                             replicas or config.<key>)"
                        ));
                    };
                    if config.is_empty() {
                        return Err("missing config key after `config.`".to_string());
                    }
                    if value.is_empty() {
                        return Err(format!("empty value for `{key}`"));
                    }
                    configs.push((config.to_string(), value.to_string()));
                }
            }
        }
        let Some(partitions) = partitions else {
            return Err(format!(
                "missing `partitions=<n>`; expected `{TOPIC_USAGE}`"
            ));
        };
        if partitions == 0 || i32::try_from(partitions).is_err() {
            return Err(format!("partitions={partitions} out of range"));
        }
        let Some(replication_factor) = replication_factor else {
            return Err(format!(
                "missing `replication-factor=<n>`; expected `{TOPIC_USAGE}`"
            ));
        };
        if replication_factor == 0 || u32::from(replication_factor) > brokers {
            return Err(format!(
                "replication-factor={replication_factor} out of range 1..={brokers} (the broker count)"
            ));
        }
        let assignment = match replicas {
            None => None,
            Some(value) => Some(self.assignment(value, partitions, replication_factor)?),
        };
        Ok(TopicSpec {
            name: name.to_string(),
            partitions,
            replication_factor,
            assignment,
            configs,
        })
    }

    fn assignment(
        &self,
        value: &str,
        partitions: u32,
        replication_factor: u16,
    ) -> Res<Vec<Vec<NodeId>>> {
        let lists: Vec<&str> = value.split(';').collect();
        if lists.len() != partitions as usize {
            return Err(format!(
                "`replicas` has {} replica list(s) but the topic has {partitions} partition(s)",
                lists.len()
            ));
        }
        let mut assignment = Vec::with_capacity(lists.len());
        for (partition, list) in lists.into_iter().enumerate() {
            let ids = self.broker_list(list)?;
            if ids.len() != usize::from(replication_factor) {
                return Err(format!(
                    "partition {partition}: {} replica(s) but replication-factor={replication_factor}",
                    ids.len()
                ));
            }
            for (i, id) in ids.iter().enumerate() {
                if ids[..i].contains(id) {
                    return Err(format!(
                        "partition {partition}: duplicate replica {id} in `{list}`"
                    ));
                }
            }
            assignment.push(ids);
        }
        Ok(assignment)
    }

    // ---- steps --------------------------------------------------------------------------

    fn step(&self, keyword: &str, args: &[&str]) -> Res<Step> {
        let step = match keyword {
            "start" => Step::Start(self.one_node(args, "start <node>")?),
            "shutdown" => Step::Shutdown(self.one_node(args, "shutdown <node>")?),
            "restart" => Step::Restart(self.one_node(args, "restart <node>")?),
            "pause" => Step::Pause(self.one_node(args, "pause <node>")?),
            "resume" => Step::Resume(self.one_node(args, "resume <node>")?),
            "isolate" => Step::Isolate(self.one_node(args, "isolate <node>")?),
            "crash" => self.crash(args)?,
            "wipe" => {
                let [id] = args else {
                    return Err(arity(args, 1, "wipe <broker>"));
                };
                Step::Wipe(self.broker(id)?)
            }
            "partition" => self.partition(args)?,
            "heal" => {
                if !args.is_empty() {
                    return Err(arity(args, 0, "heal"));
                }
                Step::Heal
            }
            "release" => {
                if !args.is_empty() {
                    return Err(arity(args, 0, "release"));
                }
                Step::Release
            }
            "elect" => {
                const USAGE: &str =
                    "elect <topic/partition> preferred|unclean [balanced]|leader=<broker>";
                let (tp, kind) = match args {
                    [tp, "preferred"] => (tp, ElectKind::Preferred),
                    [tp, "unclean"] => (tp, ElectKind::Unclean { balanced: false }),
                    [tp, "unclean", "balanced"] => (tp, ElectKind::Unclean { balanced: true }),
                    [_, "unclean", other] => {
                        return Err(format!(
                            "unknown recovery mode `{other}`: only `balanced` (the default is \
                             Proactive)"
                        ))
                    }
                    [tp, kind] => match kind.split_once('=') {
                        Some(("leader", id)) => (tp, ElectKind::Leader(self.broker(id)?)),
                        _ => {
                            return Err(format!(
                                "unknown election type `{kind}`: `preferred`, `unclean` or \
                                 `leader=<broker>`"
                            ))
                        }
                    },
                    [_, "unclean", _, ..] => return Err(arity(args, 3, USAGE)),
                    _ => return Err(arity(args, 2, USAGE)),
                };
                Step::Elect {
                    tp: self.tp(tp)?,
                    kind,
                }
            }
            "hold" => {
                const USAGE: &str = "hold <node> -> <node> <Api> [answer]";
                let (from, to, api, answer) = match args {
                    [from, "->", to, api] => (from, to, api, false),
                    [from, "->", to, api, "answer"] => (from, to, api, true),
                    [_, "->", _, _, other] => {
                        return Err(format!("unexpected `{other}`; expected `{USAGE}`"))
                    }
                    [_, "->", _, _, _, ..] => return Err(arity(args, 5, USAGE)),
                    _ => return Err(arity(args, 4, USAGE)),
                };
                let (from, to) = (self.node(from)?, self.node(to)?);
                if from == to {
                    return Err(format!(
                        "`hold` needs two different nodes, not {from} twice"
                    ));
                }
                if api_key(api).is_none() {
                    return Err(format!(
                        "unknown API `{api}`: one of {}",
                        HOLDABLE_APIS
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                Step::Hold {
                    from,
                    to,
                    api: (*api).to_string(),
                    answer,
                }
            }
            "wait" => {
                let [duration] = args else {
                    return Err(arity(args, 1, "wait <duration>"));
                };
                Step::Wait(parse_duration(duration)?)
            }
            "await" => self.await_step(args)?,
            "produce" => self.produce(args)?,
            "consume" => {
                let [tp] = args else {
                    return Err(arity(args, 1, "consume <topic>/<partition>"));
                };
                Step::Consume(self.tp(tp)?)
            }
            "consume-committed" => {
                let [tp] = args else {
                    return Err(arity(args, 1, "consume-committed <topic>/<partition>"));
                };
                Step::ConsumeCommitted(self.tp(tp)?)
            }
            "txn" => self.txn(args)?,
            "txn-end" => self.txn_end(args)?,
            "alter-config" => self.alter_config(args)?,
            "expect" => Step::Expect(self.expectation(args)?),
            "corrupt" => self.corrupt(args)?,
            "disk-full" | "disk-error" | "disk-lie" => self.disk(keyword, args)?,
            "heal-disk" => {
                let [id] = args else {
                    return Err(arity(args, 1, "heal-disk <broker>"));
                };
                Step::HealDisk(self.broker(id)?)
            }
            _ => return Err(format!("unknown directive or step `{keyword}`")),
        };
        Ok(step)
    }

    fn one_node(&self, args: &[&str], usage: &str) -> Res<Node> {
        let [node] = args else {
            return Err(arity(args, 1, usage));
        };
        self.node(node)
    }

    fn crash(&self, args: &[&str]) -> Res<Step> {
        const USAGE: &str = "crash <node> [lose-unflushed [torn]]";
        let Some((&node, flags)) = args.split_first() else {
            return Err(format!("incomplete, expected `{USAGE}`"));
        };
        let node = self.node(node)?;
        let (mut lose_unflushed, mut torn) = (false, false);
        for &flag in flags {
            let seen = match flag {
                "lose-unflushed" => std::mem::replace(&mut lose_unflushed, true),
                "torn" => std::mem::replace(&mut torn, true),
                _ => return Err(format!("unknown word `{flag}`; expected `{USAGE}`")),
            };
            if seen {
                return Err(format!("duplicate `{flag}`"));
            }
        }
        if torn && !lose_unflushed {
            return Err("`torn` requires `lose-unflushed`".to_string());
        }
        Ok(Step::Crash {
            node,
            lose_unflushed,
            torn,
        })
    }

    fn corrupt(&self, args: &[&str]) -> Res<Step> {
        const USAGE: &str =
            "corrupt <broker> <topic>/<partition> [segment=<n>|last] [at=<byte>] [bytes=<n>]";
        let [id, tp, pairs @ ..] = args else {
            return Err(format!("incomplete, expected `{USAGE}`"));
        };
        let (broker, tp) = (self.broker(id)?, self.tp(tp)?);
        let (mut segment, mut at, mut bytes) = (SegmentChoice::Index(0), None, 1);
        for (key, value) in unique_pairs(pairs)? {
            match key {
                "segment" if value == "last" => segment = SegmentChoice::Last,
                "segment" => segment = SegmentChoice::Index(parse_uint(value, "segment")?),
                "at" => at = Some(parse_uint(value, "at")?),
                "bytes" => {
                    bytes = parse_uint(value, "bytes")?;
                    if bytes == 0 {
                        return Err("bytes must be at least 1".to_string());
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown key `{key}` (expected segment, at or bytes)"
                    ))
                }
            }
        }
        Ok(Step::Corrupt {
            broker,
            tp,
            segment,
            at,
            bytes,
        })
    }

    fn disk(&self, keyword: &str, args: &[&str]) -> Res<Step> {
        let (usage, kinds): (&str, &[(&str, DiskFault)]) = match keyword {
            "disk-full" => ("disk-full <broker> [dir=<i>]", &[]),
            "disk-error" => (
                "disk-error <broker> write|read|fsync [dir=<i>]",
                &[
                    ("write", DiskFault::WriteErrors),
                    ("read", DiskFault::ReadErrors),
                    ("fsync", DiskFault::FailedFsync),
                ],
            ),
            _ => (
                "disk-lie <broker> torn|misdirected|lost [dir=<i>]",
                &[
                    ("torn", DiskFault::TornWrite),
                    ("misdirected", DiskFault::MisdirectedWrite),
                    ("lost", DiskFault::LostWrite),
                ],
            ),
        };
        let Some((&id, rest)) = args.split_first() else {
            return Err(format!("incomplete, expected `{usage}`"));
        };
        let broker = self.broker(id)?;
        let (fault, rest) = if kinds.is_empty() {
            (DiskFault::Full, rest)
        } else {
            let Some((&kind, rest)) = rest.split_first() else {
                return Err(format!("incomplete, expected `{usage}`"));
            };
            let fault = kinds
                .iter()
                .find(|(name, _)| *name == kind)
                .map(|(_, fault)| *fault)
                .ok_or_else(|| format!("unknown fault `{kind}`; expected `{usage}`"))?;
            (fault, rest)
        };
        let dir = match rest {
            [] => None,
            [pair] => match key_value(pair)? {
                ("dir", value) => Some(self.log_dir(value)?),
                (key, _) => return Err(format!("unknown key `{key}`; expected `{usage}`")),
            },
            _ => return Err(arity(rest, 1, usage)),
        };
        Ok(Step::Disk { broker, fault, dir })
    }

    /// A log directory index (`0..log-dirs`).
    fn log_dir(&self, value: &str) -> Res<u32> {
        let dir: u32 = parse_uint(value, "dir")?;
        let dirs = self.log_dirs.unwrap_or(1);
        if dir >= dirs {
            return Err(format!(
                "dir={dir} out of range: each broker has {dirs} log director{} (see `log-dirs`), 0..={}",
                if dirs == 1 { "y" } else { "ies" },
                dirs - 1
            ));
        }
        Ok(dir)
    }

    fn partition(&self, args: &[&str]) -> Res<Step> {
        const USAGE: &str = "partition <node>,... | <node>,...";
        let joined = args.join(" ");
        let Some((left, right)) = joined.split_once('|') else {
            return Err(format!("missing `|`; expected `{USAGE}`"));
        };
        if right.contains('|') {
            return Err(format!("more than one `|`; expected `{USAGE}`"));
        }
        let left = self.node_list(left.trim(), USAGE)?;
        let right = self.node_list(right.trim(), USAGE)?;
        if let Some(node) = left.iter().find(|node| right.contains(node)) {
            return Err(format!("node {node} is on both sides"));
        }
        Ok(Step::Partition(left, right))
    }

    fn await_step(&self, args: &[&str]) -> Res<Step> {
        let (cond, within) = match args.iter().position(|&token| token == "within") {
            None => (args, DEFAULT_WITHIN),
            Some(at) => match &args[at + 1..] {
                [duration] => (&args[..at], parse_duration(duration)?),
                [] => return Err("missing duration after `within`".to_string()),
                [_, extra, ..] => {
                    return Err(format!("unexpected `{extra}` after the `within` duration"));
                }
            },
        };
        let Some((&kind, rest)) = cond.split_first() else {
            return Err("incomplete, expected `await <condition> [within <duration>]`".to_string());
        };
        if matches!(
            kind,
            "lost" | "acked" | "offline" | "online" | "quarantined" | "missing" | "log-dir"
        ) {
            return Err(format!(
                "`{kind}` can only be checked by `expect`; `await` takes a condition ({CONDITIONS})"
            ));
        }
        let cond = self
            .condition(kind, rest)?
            .ok_or_else(|| format!("unknown condition `{kind}` (expected {CONDITIONS})"))?;
        Ok(Step::Await { cond, within })
    }

    fn produce(&self, args: &[&str]) -> Res<Step> {
        const USAGE: &str = "produce <topic>/<partition> [count=<n>] [acks=all|1]";
        let Some((&tp, pairs)) = args.split_first() else {
            return Err(format!("incomplete, expected `{USAGE}`"));
        };
        let tp = self.tp(tp)?;
        let (mut count, mut acks) = (1, Acks::All);
        for (key, value) in unique_pairs(pairs)? {
            match key {
                "count" => {
                    count = parse_uint(value, "count")?;
                    if count == 0 {
                        return Err("count must be at least 1".to_string());
                    }
                }
                "acks" => {
                    acks = match value {
                        "all" => Acks::All,
                        "1" => Acks::Leader,
                        _ => return Err(format!("acks must be `all` or `1`, found `{value}`")),
                    }
                }
                _ => return Err(format!("unknown key `{key}` (expected count or acks)")),
            }
        }
        Ok(Step::Produce { tp, count, acks })
    }

    fn txn(&self, args: &[&str]) -> Res<Step> {
        const USAGE: &str = "txn <id> <topic>/<partition>[,<topic>/<partition>...] [count=<n>] \
                             [v2] commit|abort|open [expect=ok|fenced|failed]";
        let [id, tps, rest @ ..] = args else {
            return Err(format!("incomplete, expected `{USAGE}`"));
        };
        let id = transactional_id(id)?;
        let tps = tps
            .split(',')
            .map(|tp| self.tp(tp))
            .collect::<Res<Vec<Tp>>>()?;
        if tps.iter().collect::<HashSet<_>>().len() != tps.len() {
            return Err("a partition is named twice".to_string());
        }
        let (mut count, mut end, mut expect, mut v2) = (1, None, TxnOutcome::Ok, false);
        for word in rest {
            match *word {
                "v2" if v2 => return Err("`v2` is given twice".to_string()),
                "v2" => v2 = true,
                "commit" | "abort" | "open" if end.is_some() => {
                    return Err(format!("`{word}`: the transaction's end is given twice"))
                }
                "commit" => end = Some(TxnStepEnd::Commit),
                "abort" => end = Some(TxnStepEnd::Abort),
                "open" => end = Some(TxnStepEnd::Open),
                _ => match word.split_once('=') {
                    Some(("count", value)) => {
                        count = parse_uint(value, "count")?;
                        if count == 0 {
                            return Err("count must be at least 1".to_string());
                        }
                    }
                    Some(("expect", value)) => expect = txn_outcome(value)?,
                    _ => return Err(format!("unexpected `{word}`, expected `{USAGE}`")),
                },
            }
        }
        let end = end.ok_or_else(|| format!("missing commit, abort or open: `{USAGE}`"))?;
        Ok(Step::Txn {
            id,
            tps,
            count,
            v2,
            end,
            expect,
        })
    }

    fn txn_end(&self, args: &[&str]) -> Res<Step> {
        const USAGE: &str = "txn-end <id> commit|abort [expect=ok|fenced|failed]";
        let (id, commit, expect) = match args {
            [id, end] => (id, end, TxnOutcome::Ok),
            [id, end, expect] => {
                let value = expect
                    .strip_prefix("expect=")
                    .ok_or_else(|| format!("unexpected `{expect}`, expected `{USAGE}`"))?;
                (id, end, txn_outcome(value)?)
            }
            _ => return Err(arity(args, 2, USAGE)),
        };
        let commit = match *commit {
            "commit" => true,
            "abort" => false,
            other => return Err(format!("expected commit or abort, found `{other}`")),
        };
        Ok(Step::TxnEnd {
            id: transactional_id(id)?,
            commit,
            expect,
        })
    }

    fn alter_config(&self, args: &[&str]) -> Res<Step> {
        const USAGE: &str =
            "alter-config topic <name> <key>=[<value>]` or `alter-config cluster <key>=[<value>]";
        let (resource, rest) = match args {
            ["topic", name, rest @ ..] => {
                self.topic_spec(name)?;
                (ConfigResource::Topic(name.to_string()), rest)
            }
            ["cluster", rest @ ..] => (ConfigResource::Cluster, rest),
            [] | ["topic"] => return Err(format!("incomplete, expected `{USAGE}`")),
            [other, ..] => {
                return Err(format!(
                    "unknown config resource `{other}` (expected `topic <name>` or `cluster`)"
                ));
            }
        };
        let [pair] = rest else {
            return Err(arity(rest, 1, USAGE));
        };
        let (key, value) = key_value(pair)?;
        Ok(Step::AlterConfig {
            resource,
            key: key.to_string(),
            value: (!value.is_empty()).then(|| value.to_string()),
        })
    }

    // ---- conditions and expectations ----------------------------------------------------

    /// `Ok(None)` when `kind` is not a condition keyword.
    fn condition(&self, kind: &str, args: &[&str]) -> Res<Option<Condition>> {
        let cond = match kind {
            "leader" => {
                let (tp, value) =
                    self.equals(args, "leader <topic>/<partition> = <broker>|none")?;
                let is = if value == "none" {
                    None
                } else {
                    Some(self.broker(value)?)
                };
                Condition::Leader { tp, is }
            }
            "isr" | "elr" | "last-known-elr" => {
                let usage = format!("{kind} <topic>/<partition> = <broker>,...|none");
                let (tp, value) = self.equals(args, &usage)?;
                let mut is = if value == "none" {
                    Vec::new()
                } else {
                    self.broker_list(value)?
                };
                is.sort_unstable();
                is.dedup();
                match kind {
                    "isr" => Condition::Isr { tp, is },
                    "elr" => Condition::Elr { tp, is },
                    _ => Condition::LastKnownElr { tp, is },
                }
            }
            "leader-epoch" => {
                let [tp, cmp, value] = args else {
                    return Err(arity(args, 3, "leader-epoch <topic>/<partition> <cmp> <n>"));
                };
                Condition::LeaderEpoch {
                    tp: self.tp(tp)?,
                    cmp: parse_cmp(cmp)?,
                    value: parse_int(value, "the leader epoch")?,
                }
            }
            "fenced" | "unfenced" => {
                let [id] = args else {
                    return Err(arity(args, 1, &format!("{kind} <broker>")));
                };
                Condition::Fenced {
                    node: self.broker(id)?,
                    fenced: kind == "fenced",
                }
            }
            "ready" => {
                let [id] = args else {
                    return Err(arity(args, 1, "ready <broker>"));
                };
                Condition::Ready(self.broker(id)?)
            }
            "dir-offline" | "dir-online" => {
                let usage = format!("{kind} <broker> [dir=<i>]");
                let (id, dir) = match args {
                    [id] => (id, None),
                    [id, pair] => match key_value(pair)? {
                        ("dir", value) => (id, Some(self.log_dir(value)?)),
                        (key, _) => return Err(format!("unknown key `{key}`; expected `{usage}`")),
                    },
                    _ => return Err(arity(args, 2, &usage)),
                };
                Condition::DirOffline {
                    node: self.broker(id)?,
                    dir,
                    offline: kind == "dir-offline",
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(cond))
    }

    fn equals<'a>(&self, args: &[&'a str], usage: &str) -> Res<(Tp, &'a str)> {
        let [tp, op, value] = args else {
            return Err(arity(args, 3, usage));
        };
        let tp = self.tp(tp)?;
        if *op != "=" {
            return Err(format!("expected `=`, found `{op}` (usage: `{usage}`)"));
        }
        Ok((tp, value))
    }

    fn expectation(&self, args: &[&str]) -> Res<Expectation> {
        let Some((&kind, args)) = args.split_first() else {
            return Err("incomplete, expected `expect <condition or expectation>`".to_string());
        };
        let expectation = match kind {
            "lost" | "acked" | "committed" => {
                let [tp, cmp, count] = args else {
                    return Err(arity(
                        args,
                        3,
                        &format!("expect {kind} <topic>/<partition> <cmp> <n>"),
                    ));
                };
                let (tp, cmp) = (self.tp(tp)?, parse_cmp(cmp)?);
                let count = parse_uint(count, "the count")?;
                match kind {
                    "lost" => Expectation::Lost { tp, cmp, count },
                    "acked" => Expectation::Acked { tp, cmp, count },
                    _ => Expectation::Committed { tp, cmp, count },
                }
            }
            "quarantined" | "missing" => {
                let [id, tp, cmp, count] = args else {
                    return Err(arity(
                        args,
                        4,
                        &format!("expect {kind} <broker> <topic>/<partition> <cmp> <n>"),
                    ));
                };
                let (node, tp, cmp) = (self.broker(id)?, self.tp(tp)?, parse_cmp(cmp)?);
                let count = parse_uint(count, "the count")?;
                if kind == "quarantined" {
                    Expectation::Quarantined {
                        node,
                        tp,
                        cmp,
                        bytes: count,
                    }
                } else {
                    Expectation::Missing {
                        node,
                        tp,
                        cmp,
                        count,
                    }
                }
            }
            "log-dir" => {
                let [id, tp, "=", dir] = args else {
                    return Err(arity(
                        args,
                        4,
                        "expect log-dir <broker> <topic>/<partition> = <i>",
                    ));
                };
                Expectation::LogDir {
                    node: self.broker(id)?,
                    tp: self.tp(tp)?,
                    dir: self.log_dir(dir)?,
                }
            }
            "offline" | "online" => {
                let [tp] = args else {
                    return Err(arity(
                        args,
                        1,
                        &format!("expect {kind} <topic>/<partition>"),
                    ));
                };
                Expectation::Offline {
                    tp: self.tp(tp)?,
                    offline: kind == "offline",
                }
            }
            _ => match self.condition(kind, args)? {
                Some(cond) => Expectation::Holds(cond),
                None => {
                    return Err(format!(
                        "unknown expectation `{kind}` (expected lost, acked, offline, online, \
                         quarantined, missing, log-dir, {CONDITIONS})"
                    ));
                }
            },
        };
        Ok(expectation)
    }

    // ---- names --------------------------------------------------------------------------

    fn node(&self, word: &str) -> Res<Node> {
        if word == "controller" {
            Ok(Node::Controller)
        } else if let Some(index) = word.strip_prefix("controller-") {
            let controllers = self.controllers.unwrap_or(1);
            index
                .parse::<u32>()
                .ok()
                .filter(|i| *i < controllers)
                .map(Node::ControllerAt)
                .ok_or_else(|| {
                    format!(
                        "`{word}` out of range: the controllers are controller-0..controller-{} \
                         (see `controllers`)",
                        controllers - 1
                    )
                })
        } else {
            self.broker(word).map(Node::Broker)
        }
    }

    fn broker(&self, word: &str) -> Res<NodeId> {
        let brokers = self.brokers.unwrap_or(0);
        if word == "controller" {
            return Err("expected a broker id, not `controller`".to_string());
        }
        if word.is_empty() || !word.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "expected a broker id (1..={brokers}) or `controller`, found `{word}`"
            ));
        }
        word.parse::<NodeId>()
            .ok()
            .filter(|id| (1..=brokers as NodeId).contains(id))
            .ok_or_else(|| format!("broker {word} out of range: the brokers are 1..={brokers}"))
    }

    /// `1,2,3`: broker ids in the order written.
    fn broker_list(&self, list: &str) -> Res<Vec<NodeId>> {
        list.split(',')
            .map(|id| {
                if id.is_empty() {
                    Err(format!("empty item in the broker list `{list}`"))
                } else {
                    self.broker(id)
                }
            })
            .collect()
    }

    fn node_list(&self, side: &str, usage: &str) -> Res<Vec<Node>> {
        if side.is_empty() {
            return Err(format!("empty side; expected `{usage}`"));
        }
        if side.contains(char::is_whitespace) {
            return Err(format!(
                "`{side}`: separate the nodes of a side with `,` and no spaces"
            ));
        }
        let mut nodes = Vec::new();
        for word in side.split(',') {
            if word.is_empty() {
                return Err(format!("empty item in the node list `{side}`"));
            }
            let node = self.node(word)?;
            if nodes.contains(&node) {
                return Err(format!("duplicate node {node} in `{side}`"));
            }
            nodes.push(node);
        }
        Ok(nodes)
    }

    fn topic_spec(&self, name: &str) -> Res<&TopicSpec> {
        self.topics
            .iter()
            .find(|topic| topic.name == name)
            .ok_or_else(|| format!("unknown topic `{name}` (declare it with `topic {name} ...`)"))
    }

    fn tp(&self, word: &str) -> Res<Tp> {
        let Some((topic, partition)) = word.rsplit_once('/') else {
            return Err(format!("expected <topic>/<partition>, found `{word}`"));
        };
        let spec = self.topic_spec(topic)?;
        let index: u32 = parse_uint(partition, "the partition")?;
        if index >= spec.partitions {
            return Err(format!(
                "partition {index} out of range: topic `{topic}` has {} partition(s)",
                spec.partitions
            ));
        }
        let partition = i32::try_from(index).map_err(|_| format!("partition {index} too large"))?;
        Ok(Tp::new(topic, partition))
    }
}

// ---- lexical helpers ------------------------------------------------------------------------

/// A transactional id of a `txn` step: letters, digits, `.`, `_`, `-`.
fn transactional_id(word: &str) -> Res<String> {
    if word.is_empty()
        || !word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!(
            "`{word}` is not a transactional id (letters, digits, `.`, `_`, `-`)"
        ));
    }
    Ok(word.to_string())
}

fn txn_outcome(word: &str) -> Res<TxnOutcome> {
    match word {
        "ok" => Ok(TxnOutcome::Ok),
        "fenced" => Ok(TxnOutcome::Fenced),
        "failed" => Ok(TxnOutcome::Failed),
        _ => Err(format!(
            "expect must be ok, fenced or failed, found `{word}`"
        )),
    }
}

/// Splits a leading `keel:` / `classic:` (a token of its own, or glued to the step keyword).
fn split_mode<'a>(tokens: &[&'a str]) -> Res<(Option<Mode>, Vec<&'a str>)> {
    let first = tokens[0];
    for mode in Mode::ALL {
        let Some(rest) = first
            .strip_prefix(mode.as_str())
            .and_then(|rest| rest.strip_prefix(':'))
        else {
            continue;
        };
        let mut step: Vec<&str> = Vec::with_capacity(tokens.len());
        if !rest.is_empty() {
            step.push(rest);
        }
        step.extend_from_slice(&tokens[1..]);
        if step.is_empty() {
            return Err(format!("`{mode}:` must be followed by a step"));
        }
        return Ok((Some(mode), step));
    }
    if first.ends_with(':') {
        return Err(format!(
            "unknown mode prefix `{first}` (expected `keel:` or `classic:`)"
        ));
    }
    Ok((None, tokens.to_vec()))
}

/// The message for a wrong number of arguments, `n` being the right one.
fn arity(args: &[&str], n: usize, usage: &str) -> String {
    match args.get(n) {
        Some(extra) => format!("unexpected `{extra}`; expected `{usage}`"),
        None => format!("incomplete, expected `{usage}`"),
    }
}

fn key_value(token: &str) -> Res<(&str, &str)> {
    let Some((key, value)) = token.split_once('=') else {
        return Err(format!("expected <key>=<value>, found `{token}`"));
    };
    if key.is_empty() {
        return Err(format!("missing key in `{token}`"));
    }
    Ok((key, value))
}

/// `k=v` tokens, rejecting a key given twice.
fn unique_pairs<'a>(tokens: &[&'a str]) -> Res<Vec<(&'a str, &'a str)>> {
    let mut seen = HashSet::new();
    let mut pairs = Vec::with_capacity(tokens.len());
    for token in tokens {
        let (key, value) = key_value(token)?;
        if !seen.insert(key) {
            return Err(format!("duplicate key `{key}`"));
        }
        pairs.push((key, value));
    }
    Ok(pairs)
}

fn check_topic_name(name: &str) -> Res<()> {
    let legal = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !legal || name.len() > 249 || name == "." || name == ".." {
        return Err(format!(
            "invalid topic name `{name}` (Kafka's rules: 1 to 249 of [a-zA-Z0-9._-], not `.` or `..`)"
        ));
    }
    Ok(())
}

/// A non-negative integer in decimal digits (no sign).
fn parse_uint<T: FromStr>(word: &str, what: &str) -> Res<T> {
    if word.is_empty() || !word.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{what} must be a non-negative integer, found `{word}`"
        ));
    }
    word.parse()
        .map_err(|_| format!("{what} `{word}` is out of range"))
}

fn parse_int(word: &str, what: &str) -> Res<i64> {
    let digits = word.strip_prefix('-').unwrap_or(word);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} must be an integer, found `{word}`"));
    }
    word.parse()
        .map_err(|_| format!("{what} `{word}` is out of range"))
}

fn parse_cmp(word: &str) -> Res<Cmp> {
    Ok(match word {
        "=" => Cmp::Eq,
        ">=" => Cmp::Ge,
        "<=" => Cmp::Le,
        ">" => Cmp::Gt,
        "<" => Cmp::Lt,
        _ => {
            return Err(format!(
                "expected a comparison (=, >=, <=, >, <), found `{word}`"
            ))
        }
    })
}

/// `<n>ms`, `<n>s` or `<n>m`.
fn parse_duration(word: &str) -> Res<Duration> {
    let malformed = || format!("malformed duration `{word}` (expected <n>ms, <n>s or <n>m)");
    let (digits, unit_ms) = if let Some(digits) = word.strip_suffix("ms") {
        (digits, 1)
    } else if let Some(digits) = word.strip_suffix('s') {
        (digits, 1_000)
    } else if let Some(digits) = word.strip_suffix('m') {
        (digits, 60_000)
    } else {
        return Err(malformed());
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed());
    }
    let millis = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_ms))
        .ok_or_else(|| format!("duration `{word}` is out of range"))?;
    Ok(Duration::from_millis(millis))
}

// ---- canonical source form ------------------------------------------------------------------

/// A duration in the largest unit that divides it: `2m`, `90s`, `1500ms` (sub-millisecond
/// parts are dropped).
struct Dur(Duration);

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_millis();
        if millis != 0 && millis.is_multiple_of(60_000) {
            write!(f, "{}m", millis / 60_000)
        } else if millis.is_multiple_of(1_000) {
            write!(f, "{}s", millis / 1_000)
        } else {
            write!(f, "{millis}ms")
        }
    }
}

/// Items joined by a separator.
struct Joined<'a, T>(&'a [T], &'static str);

impl<T: fmt::Display> fmt::Display for Joined<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(self.1)?;
            }
            write!(f, "{item}")?;
        }
        Ok(())
    }
}

/// A broker set: `1,2,3`, or `none` when empty.
struct Ids<'a>(&'a [NodeId]);

impl fmt::Display for Ids<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("none")
        } else {
            Joined(self.0, ",").fmt(f)
        }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Broker(id) => write!(f, "{id}"),
            Node::Controller => f.write_str("controller"),
            Node::ControllerAt(i) => write!(f, "controller-{i}"),
        }
    }
}

impl fmt::Display for Tp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Acks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Acks::All => "all",
            Acks::Leader => "1",
        })
    }
}

impl fmt::Display for Cmp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for ConfigResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigResource::Topic(name) => write!(f, "topic {name}"),
            ConfigResource::Cluster => f.write_str("cluster"),
        }
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Condition::Leader { tp, is: Some(id) } => write!(f, "leader {tp} = {id}"),
            Condition::Leader { tp, is: None } => write!(f, "leader {tp} = none"),
            Condition::Isr { tp, is } => write!(f, "isr {tp} = {}", Ids(is)),
            Condition::Elr { tp, is } => write!(f, "elr {tp} = {}", Ids(is)),
            Condition::LastKnownElr { tp, is } => write!(f, "last-known-elr {tp} = {}", Ids(is)),
            Condition::LeaderEpoch { tp, cmp, value } => {
                write!(f, "leader-epoch {tp} {cmp} {value}")
            }
            Condition::Fenced { node, fenced: true } => write!(f, "fenced {node}"),
            Condition::Fenced {
                node,
                fenced: false,
            } => write!(f, "unfenced {node}"),
            Condition::Ready(node) => write!(f, "ready {node}"),
            Condition::DirOffline { node, dir, offline } => {
                let kind = if *offline {
                    "dir-offline"
                } else {
                    "dir-online"
                };
                write!(f, "{kind} {node}")?;
                if let Some(dir) = dir {
                    write!(f, " dir={dir}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expectation::Holds(cond) => cond.fmt(f),
            Expectation::Lost { tp, cmp, count } => write!(f, "lost {tp} {cmp} {count}"),
            Expectation::Acked { tp, cmp, count } => write!(f, "acked {tp} {cmp} {count}"),
            Expectation::Offline { tp, offline: true } => write!(f, "offline {tp}"),
            Expectation::Offline { tp, offline: false } => write!(f, "online {tp}"),
            Expectation::Quarantined {
                node,
                tp,
                cmp,
                bytes,
            } => write!(f, "quarantined {node} {tp} {cmp} {bytes}"),
            Expectation::Missing {
                node,
                tp,
                cmp,
                count,
            } => write!(f, "missing {node} {tp} {cmp} {count}"),
            Expectation::LogDir { node, tp, dir } => write!(f, "log-dir {node} {tp} = {dir}"),
            Expectation::Committed { tp, cmp, count } => {
                write!(f, "committed {tp} {cmp} {count}")
            }
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Start(node) => write!(f, "start {node}"),
            Step::Crash {
                node,
                lose_unflushed,
                torn,
            } => {
                write!(f, "crash {node}")?;
                if *lose_unflushed {
                    f.write_str(" lose-unflushed")?;
                }
                if *torn {
                    f.write_str(" torn")?;
                }
                Ok(())
            }
            Step::Shutdown(node) => write!(f, "shutdown {node}"),
            Step::Restart(node) => write!(f, "restart {node}"),
            Step::Wipe(id) => write!(f, "wipe {id}"),
            Step::Pause(node) => write!(f, "pause {node}"),
            Step::Resume(node) => write!(f, "resume {node}"),
            Step::Isolate(node) => write!(f, "isolate {node}"),
            Step::Partition(left, right) => {
                write!(
                    f,
                    "partition {} | {}",
                    Joined(left, ","),
                    Joined(right, ",")
                )
            }
            Step::Heal => f.write_str("heal"),
            Step::Hold {
                from,
                to,
                api,
                answer,
            } => {
                write!(f, "hold {from} -> {to} {api}")?;
                if *answer {
                    f.write_str(" answer")?;
                }
                Ok(())
            }
            Step::Release => f.write_str("release"),
            Step::Elect { tp, kind } => write!(f, "elect {tp} {kind}"),
            Step::Wait(duration) => write!(f, "wait {}", Dur(*duration)),
            Step::Await { cond, within } => write!(f, "await {cond} within {}", Dur(*within)),
            Step::Produce { tp, count, acks } => {
                write!(f, "produce {tp} count={count} acks={acks}")
            }
            Step::Consume(tp) => write!(f, "consume {tp}"),
            Step::ConsumeCommitted(tp) => write!(f, "consume-committed {tp}"),
            Step::Txn {
                id,
                tps,
                count,
                v2,
                end,
                expect,
            } => {
                let tps: Vec<String> = tps.iter().map(ToString::to_string).collect();
                let end = match end {
                    TxnStepEnd::Commit => "commit",
                    TxnStepEnd::Abort => "abort",
                    TxnStepEnd::Open => "open",
                };
                let v2 = if *v2 { " v2" } else { "" };
                write!(
                    f,
                    "txn {id} {} count={count}{v2} {end} expect={expect}",
                    tps.join(",")
                )
            }
            Step::TxnEnd { id, commit, expect } => write!(
                f,
                "txn-end {id} {} expect={expect}",
                if *commit { "commit" } else { "abort" }
            ),
            Step::AlterConfig {
                resource,
                key,
                value,
            } => write!(
                f,
                "alter-config {resource} {key}={}",
                value.as_deref().unwrap_or("")
            ),
            Step::Expect(expectation) => write!(f, "expect {expectation}"),
            Step::Corrupt {
                broker,
                tp,
                segment,
                at,
                bytes,
            } => {
                write!(f, "corrupt {broker} {tp}")?;
                match segment {
                    SegmentChoice::Index(n) => write!(f, " segment={n}")?,
                    SegmentChoice::Last => f.write_str(" segment=last")?,
                }
                if let Some(at) = at {
                    write!(f, " at={at}")?;
                }
                write!(f, " bytes={bytes}")
            }
            Step::Disk { broker, fault, dir } => {
                let (keyword, kind) = match fault {
                    DiskFault::Full => ("disk-full", None),
                    DiskFault::WriteErrors => ("disk-error", Some("write")),
                    DiskFault::ReadErrors => ("disk-error", Some("read")),
                    DiskFault::FailedFsync => ("disk-error", Some("fsync")),
                    DiskFault::TornWrite => ("disk-lie", Some("torn")),
                    DiskFault::MisdirectedWrite => ("disk-lie", Some("misdirected")),
                    DiskFault::LostWrite => ("disk-lie", Some("lost")),
                };
                write!(f, "{keyword} {broker}")?;
                if let Some(kind) = kind {
                    write!(f, " {kind}")?;
                }
                if let Some(dir) = dir {
                    write!(f, " dir={dir}")?;
                }
                Ok(())
            }
            Step::HealDisk(broker) => write!(f, "heal-disk {broker}"),
        }
    }
}

/// `keel: <item>`, `classic: <item>` or `<item>`.
impl<T: fmt::Display> fmt::Display for Line<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(mode) = self.mode {
            write!(f, "{mode}: ")?;
        }
        self.item.fmt(f)
    }
}

/// `topic <name> partitions=<n> replication-factor=<n> [replicas=...] [config.<k>=<v>...]`.
impl fmt::Display for TopicSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "topic {} partitions={} replication-factor={}",
            self.name, self.partitions, self.replication_factor
        )?;
        if let Some(assignment) = &self.assignment {
            f.write_str(" replicas=")?;
            for (i, replicas) in assignment.iter().enumerate() {
                if i > 0 {
                    f.write_str(";")?;
                }
                Joined(replicas, ",").fmt(f)?;
            }
        }
        for (key, value) in &self.configs {
            write!(f, " config.{key}={value}")?;
        }
        Ok(())
    }
}

/// The whole scenario in canonical source form; [`parse`] reads it back to an equal value.
impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.description {
            if line.is_empty() {
                writeln!(f, "#")?;
            } else {
                writeln!(f, "# {line}")?;
            }
        }
        writeln!(f, "name {}", self.name)?;
        writeln!(f, "brokers {}", self.brokers)?;
        if self.controllers != 1 {
            writeln!(f, "controllers {}", self.controllers)?;
        }
        if self.log_dirs != 1 {
            writeln!(f, "log-dirs {}", self.log_dirs)?;
        }
        for (key, value) in &self.configs {
            writeln!(f, "config {key}={value}")?;
        }
        for topic in &self.topics {
            writeln!(f, "{topic}")?;
        }
        writeln!(f, "modes {}", Joined(&self.modes, " "))?;
        for step in &self.steps {
            writeln!(f, "{step}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "name test\nbrokers 3\ntopic t partitions=2 replication-factor=3\n";

    /// Parses `HEADER` followed by `steps`.
    fn steps(steps: &str) -> Vec<Line<Step>> {
        match parse(&format!("{HEADER}{steps}")) {
            Ok(scenario) => scenario.steps,
            Err(err) => panic!("{err}"),
        }
    }

    fn step(text: &str) -> Step {
        let mut lines = steps(text);
        assert_eq!(lines.len(), 1, "{text}");
        lines.remove(0).item
    }

    fn err(text: &str) -> ParseError {
        match parse(text) {
            Ok(scenario) => panic!("parsed: {scenario:?}"),
            Err(err) => err,
        }
    }

    /// The error for `HEADER` + `steps`, asserting its line number and part of its message.
    fn step_err(steps: &str, line: usize, message: &str) {
        let err = err(&format!("{HEADER}{steps}"));
        assert_eq!(err.line, line, "{err}");
        assert!(err.message.contains(message), "`{message}` not in: {err}");
    }

    fn header_err(text: &str, line: usize, message: &str) {
        let err = err(text);
        assert_eq!(err.line, line, "{err}");
        assert!(err.message.contains(message), "`{message}` not in: {err}");
    }

    fn tp(partition: i32) -> Tp {
        Tp::new("t", partition)
    }

    #[test]
    fn header_and_description() {
        let s = parse(
            "# First line of the description.\n\
             #\n\
             #   indented\n\
             \n\
             name  a scenario  with spaces   # a trailing comment\n\
             # not part of the description\n\
             brokers 3\n\
             config min.insync.replicas=2 unclean.recovery.strategy=Balanced\n\
             config replica.lag.time.max.ms=10000\n\
             topic t partitions=2 replication-factor=3 replicas=1,2,3;3,1,2 \
               config.min.insync.replicas=1 config.flush.messages=1\n\
             topic u replication-factor=1 partitions=1\n\
             modes keel\n\
             heal\n",
        )
        .unwrap();
        assert_eq!(s.name, "a scenario  with spaces");
        assert_eq!(
            s.description,
            ["First line of the description.", "", "  indented"]
        );
        assert_eq!(s.brokers, 3);
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            s.configs,
            [
                pair("min.insync.replicas", "2"),
                pair("unclean.recovery.strategy", "Balanced"),
                pair("replica.lag.time.max.ms", "10000"),
            ]
        );
        assert_eq!(
            s.topics,
            [
                TopicSpec {
                    name: "t".into(),
                    partitions: 2,
                    replication_factor: 3,
                    assignment: Some(vec![vec![1, 2, 3], vec![3, 1, 2]]),
                    configs: vec![
                        pair("min.insync.replicas", "1"),
                        pair("flush.messages", "1")
                    ],
                },
                TopicSpec {
                    name: "u".into(),
                    partitions: 1,
                    replication_factor: 1,
                    assignment: None,
                    configs: vec![],
                },
            ]
        );
        assert_eq!(s.topic("u").map(|t| t.partitions), Some(1));
        assert_eq!(s.modes, [Mode::Keel]);
        assert_eq!(
            s.steps,
            [Line {
                line: 13,
                mode: None,
                item: Step::Heal
            }]
        );
    }

    #[test]
    fn defaults() {
        let s = parse(&format!(
            "{HEADER}await ready 1\nproduce t/0\nproduce t/1 acks=1\n"
        ))
        .unwrap();
        assert!(s.description.is_empty());
        assert!(s.configs.is_empty());
        assert_eq!(s.modes, [Mode::Keel, Mode::Classic]);
        assert_eq!(s.topics[0].assignment, None);
        assert!(s.topics[0].configs.is_empty());
        let items: Vec<Step> = s.steps.into_iter().map(|line| line.item).collect();
        assert_eq!(
            items,
            [
                Step::Await {
                    cond: Condition::Ready(1),
                    within: Duration::from_secs(30)
                },
                Step::Produce {
                    tp: tp(0),
                    count: 1,
                    acks: Acks::All
                },
                Step::Produce {
                    tp: tp(1),
                    count: 1,
                    acks: Acks::Leader
                },
            ]
        );
    }

    #[test]
    fn node_steps() {
        let b = Node::Broker;
        assert_eq!(step("start 2"), Step::Start(b(2)));
        assert_eq!(step("start controller"), Step::Start(Node::Controller));
        assert_eq!(step("shutdown 1"), Step::Shutdown(b(1)));
        assert_eq!(step("restart controller"), Step::Restart(Node::Controller));
        assert_eq!(step("wipe 3"), Step::Wipe(3));
        assert_eq!(step("pause 2"), Step::Pause(b(2)));
        assert_eq!(step("resume 2"), Step::Resume(b(2)));
        assert_eq!(step("isolate controller"), Step::Isolate(Node::Controller));
        assert_eq!(step("heal"), Step::Heal);
        assert_eq!(step("release"), Step::Release);
        assert_eq!(
            step("hold 1 -> controller AlterPartition"),
            Step::Hold {
                from: Node::Broker(1),
                to: Node::Controller,
                api: "AlterPartition".to_string(),
                answer: false,
            }
        );
        assert_eq!(
            step("hold 1 -> controller GetReplicaLogInfo answer"),
            Step::Hold {
                from: Node::Broker(1),
                to: Node::Controller,
                api: "GetReplicaLogInfo".to_string(),
                answer: true,
            }
        );
    }

    // Shows: the storage-fault steps (issue 19) parse with their defaults, `log-dirs` bounds the
    // `dir=` of steps and conditions, the storage expectations parse, and every form prints back
    // to itself.
    #[test]
    fn storage_fault_steps() {
        let s = parse(
            "name s\nbrokers 3\nlog-dirs 2\ntopic t partitions=2 replication-factor=3\n\
             corrupt 1 t/0\ncorrupt 2 t/1 segment=last at=30 bytes=16\ncorrupt 3 t/0 segment=2\n\
             disk-full 1\ndisk-full 2 dir=1\ndisk-error 1 write\ndisk-error 2 read dir=0\n\
             disk-error 3 fsync\ndisk-lie 1 torn\ndisk-lie 2 misdirected dir=1\n\
             disk-lie 3 lost\nheal-disk 2\nawait dir-offline 1 dir=0 within 5s\n\
             await dir-online 2\nexpect dir-offline 3\nexpect quarantined 1 t/0 >= 4000\n\
             expect missing 3 t/1 = 0\nexpect log-dir 1 t/1 = 1\n",
        )
        .unwrap();
        assert_eq!(s.log_dirs, 2);
        let items: Vec<Step> = s.steps.iter().map(|l| l.item.clone()).collect();
        assert_eq!(
            items[..3],
            [
                Step::Corrupt {
                    broker: 1,
                    tp: tp(0),
                    segment: SegmentChoice::Index(0),
                    at: None,
                    bytes: 1
                },
                Step::Corrupt {
                    broker: 2,
                    tp: tp(1),
                    segment: SegmentChoice::Last,
                    at: Some(30),
                    bytes: 16
                },
                Step::Corrupt {
                    broker: 3,
                    tp: tp(0),
                    segment: SegmentChoice::Index(2),
                    at: None,
                    bytes: 1
                },
            ]
        );
        let disk = |broker, fault, dir| Step::Disk { broker, fault, dir };
        assert_eq!(
            items[3..11],
            [
                disk(1, DiskFault::Full, None),
                disk(2, DiskFault::Full, Some(1)),
                disk(1, DiskFault::WriteErrors, None),
                disk(2, DiskFault::ReadErrors, Some(0)),
                disk(3, DiskFault::FailedFsync, None),
                disk(1, DiskFault::TornWrite, None),
                disk(2, DiskFault::MisdirectedWrite, Some(1)),
                disk(3, DiskFault::LostWrite, None),
            ]
        );
        assert_eq!(items[11], Step::HealDisk(2));
        assert_eq!(
            items[12],
            Step::Await {
                cond: Condition::DirOffline {
                    node: 1,
                    dir: Some(0),
                    offline: true
                },
                within: Duration::from_secs(5)
            }
        );
        assert_eq!(
            items[15..],
            [
                Step::Expect(Expectation::Quarantined {
                    node: 1,
                    tp: tp(0),
                    cmp: Cmp::Ge,
                    bytes: 4000
                }),
                Step::Expect(Expectation::Missing {
                    node: 3,
                    tp: tp(1),
                    cmp: Cmp::Eq,
                    count: 0
                }),
                Step::Expect(Expectation::LogDir {
                    node: 1,
                    tp: tp(1),
                    dir: 1
                }),
            ]
        );
        let text = s.to_string();
        assert!(text.contains("log-dirs 2\n"), "{text}");
        assert!(text.contains("corrupt 1 t/0 segment=0 bytes=1\n"), "{text}");
        assert!(text.contains("disk-lie 2 misdirected dir=1\n"), "{text}");
        let reparsed = parse(&text).unwrap();
        let strip = |s: &Scenario| {
            let mut s = s.clone();
            s.steps.iter_mut().for_each(|line| line.line = 0);
            s
        };
        assert_eq!(strip(&s), strip(&reparsed));
        assert_eq!(reparsed.to_string(), text);
    }

    // Shows: malformed storage steps name the line and the problem.
    #[test]
    fn storage_fault_errors() {
        step_err("corrupt 1\n", 4, "incomplete");
        step_err("corrupt 4 t/0\n", 4, "broker 4 out of range");
        step_err("corrupt 1 t/0 segment=x\n", 4, "segment must be");
        step_err("corrupt 1 t/0 bytes=0\n", 4, "at least 1");
        step_err("corrupt 1 t/0 where=3\n", 4, "unknown key `where`");
        step_err("corrupt 1 t/0 at=1 at=2\n", 4, "duplicate key");
        step_err("disk-full\n", 4, "incomplete");
        step_err("disk-full 1 dir=1\n", 4, "dir=1 out of range");
        step_err("disk-full 1 disk=0\n", 4, "unknown key `disk`");
        step_err("disk-error 1\n", 4, "incomplete");
        step_err("disk-error 1 sync\n", 4, "unknown fault `sync`");
        step_err("disk-lie 1 torn dir=0 dir=0\n", 4, "unexpected");
        step_err("heal-disk\n", 4, "incomplete");
        step_err("await dir-offline 1 dir=2\n", 4, "out of range");
        step_err(
            "await quarantined 1 t/0 > 0\n",
            4,
            "only be checked by `expect`",
        );
        step_err("expect missing 1 t/0\n", 4, "incomplete");
        step_err("expect log-dir 1 t/0 1\n", 4, "expected `expect log-dir");
        header_err(
            "name x\nbrokers 3\nlog-dirs 0\nheal\n",
            3,
            "out of range 1..=4",
        );
        header_err(
            "name x\nbrokers 3\nlog-dirs 2\nlog-dirs 2\nheal\n",
            4,
            "duplicate",
        );
    }

    // Shows: `controllers` sets the quorum (1, 3 or 5; after `brokers`), `controller-<i>` names
    // one controller in range, and the text form round-trips.
    #[test]
    fn controller_quorum() {
        let s = parse(
            "name q\nbrokers 3\ncontrollers 3\ntopic t partitions=1 replication-factor=3\n\
             pause controller\nresume controller\ncrash controller-2\nstart controller-2\n",
        )
        .unwrap();
        assert_eq!(s.controllers, 3);
        assert_eq!(
            s.steps[2].item,
            Step::Crash {
                node: Node::ControllerAt(2),
                lose_unflushed: false,
                torn: false,
            }
        );
        let again = parse(&s.to_string()).unwrap();
        assert_eq!(again.controllers, 3);
        let items = |s: &Scenario| s.steps.iter().map(|l| l.item.clone()).collect::<Vec<_>>();
        assert_eq!(items(&again), items(&s));
        assert_eq!(parse(HEADER_WITH_HEAL).unwrap().controllers, 1);
        header_err("name q\nbrokers 3\ncontrollers 2\nheal\n", 3, "1, 3 or 5");
        header_err(
            "name q\ncontrollers 3\nbrokers 3\nheal\n",
            2,
            "after `brokers`",
        );
        header_err(
            "name q\nbrokers 3\ncontrollers 3\nstart controller-3\n",
            4,
            "out of range",
        );
    }

    const HEADER_WITH_HEAL: &str = "name q\nbrokers 3\nheal\n";

    #[test]
    fn crash_flags() {
        let crash = |lose_unflushed, torn| Step::Crash {
            node: Node::Broker(2),
            lose_unflushed,
            torn,
        };
        assert_eq!(step("crash 2"), crash(false, false));
        assert_eq!(step("crash 2 lose-unflushed"), crash(true, false));
        assert_eq!(step("crash 2 lose-unflushed torn"), crash(true, true));
        assert_eq!(step("crash 2 torn lose-unflushed"), crash(true, true));
        assert_eq!(
            step("crash controller lose-unflushed"),
            Step::Crash {
                node: Node::Controller,
                lose_unflushed: true,
                torn: false
            }
        );
    }

    #[test]
    fn network_steps() {
        assert_eq!(
            step("partition 1,2 | 3,controller"),
            Step::Partition(
                vec![Node::Broker(1), Node::Broker(2)],
                vec![Node::Broker(3), Node::Controller]
            )
        );
        assert_eq!(
            step("partition 3|controller"),
            Step::Partition(vec![Node::Broker(3)], vec![Node::Controller])
        );
    }

    #[test]
    fn durations() {
        assert_eq!(step("wait 500ms"), Step::Wait(Duration::from_millis(500)));
        assert_eq!(step("wait 2s"), Step::Wait(Duration::from_secs(2)));
        assert_eq!(step("wait 1m"), Step::Wait(Duration::from_secs(60)));
        assert_eq!(step("wait 0s"), Step::Wait(Duration::ZERO));
        for bad in [
            "5", "5h", "1.5s", "s", "ms", "-1s", "+1s", "5 s", "1e3ms", "2S",
        ] {
            step_err(&format!("wait {bad}\n"), 4, "");
        }
        step_err("wait 1.5s\n", 4, "malformed duration `1.5s`");
        step_err("wait 99999999999999999999s\n", 4, "out of range");
        step_err("wait 307445734561825861m\n", 4, "out of range");
    }

    #[test]
    fn await_and_conditions() {
        let within = |cond, secs| Step::Await {
            cond,
            within: Duration::from_secs(secs),
        };
        assert_eq!(
            step("await leader t/0 = 2 within 10s"),
            within(
                Condition::Leader {
                    tp: tp(0),
                    is: Some(2)
                },
                10
            )
        );
        assert_eq!(
            step("await leader t/1 = none"),
            within(
                Condition::Leader {
                    tp: tp(1),
                    is: None
                },
                30
            )
        );
        assert_eq!(
            step("await isr t/0 = 3,1,2,1"),
            within(
                Condition::Isr {
                    tp: tp(0),
                    is: vec![1, 2, 3]
                },
                30
            )
        );
        assert_eq!(
            step("await isr t/0 = none within 1m"),
            within(
                Condition::Isr {
                    tp: tp(0),
                    is: vec![]
                },
                60
            )
        );
        assert_eq!(
            step("await elr t/0 = 3,2"),
            within(
                Condition::Elr {
                    tp: tp(0),
                    is: vec![2, 3]
                },
                30
            )
        );
        assert_eq!(
            step("await last-known-elr t/0 = 3"),
            within(
                Condition::LastKnownElr {
                    tp: tp(0),
                    is: vec![3]
                },
                30
            )
        );
        for (op, cmp) in [
            ("=", Cmp::Eq),
            (">=", Cmp::Ge),
            ("<=", Cmp::Le),
            (">", Cmp::Gt),
            ("<", Cmp::Lt),
        ] {
            assert_eq!(
                step(&format!("await leader-epoch t/0 {op} 2")),
                within(
                    Condition::LeaderEpoch {
                        tp: tp(0),
                        cmp,
                        value: 2
                    },
                    30
                )
            );
        }
        assert_eq!(
            step("await leader-epoch t/0 > -1"),
            within(
                Condition::LeaderEpoch {
                    tp: tp(0),
                    cmp: Cmp::Gt,
                    value: -1
                },
                30
            )
        );
        assert_eq!(
            step("await fenced 2"),
            within(
                Condition::Fenced {
                    node: 2,
                    fenced: true
                },
                30
            )
        );
        assert_eq!(
            step("await unfenced 2"),
            within(
                Condition::Fenced {
                    node: 2,
                    fenced: false
                },
                30
            )
        );
        assert_eq!(step("await ready 3"), within(Condition::Ready(3), 30));
    }

    #[test]
    fn data_steps() {
        assert_eq!(
            step("produce t/0 count=10 acks=all"),
            Step::Produce {
                tp: tp(0),
                count: 10,
                acks: Acks::All
            }
        );
        assert_eq!(
            step("produce t/1 acks=1 count=3"),
            Step::Produce {
                tp: tp(1),
                count: 3,
                acks: Acks::Leader
            }
        );
        assert_eq!(step("consume t/1"), Step::Consume(tp(1)));
    }

    #[test]
    fn alter_config() {
        assert_eq!(
            step("alter-config topic t min.insync.replicas=1"),
            Step::AlterConfig {
                resource: ConfigResource::Topic("t".into()),
                key: "min.insync.replicas".into(),
                value: Some("1".into())
            }
        );
        assert_eq!(
            step("alter-config cluster unclean.recovery.strategy=Proactive"),
            Step::AlterConfig {
                resource: ConfigResource::Cluster,
                key: "unclean.recovery.strategy".into(),
                value: Some("Proactive".into())
            }
        );
        assert_eq!(
            step("alter-config topic t unclean.leader.election.enable="),
            Step::AlterConfig {
                resource: ConfigResource::Topic("t".into()),
                key: "unclean.leader.election.enable".into(),
                value: None
            }
        );
    }

    #[test]
    fn expectations() {
        let expect = |text: &str| match step(&format!("expect {text}")) {
            Step::Expect(expectation) => expectation,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            expect("leader t/0 = 2"),
            Expectation::Holds(Condition::Leader {
                tp: tp(0),
                is: Some(2)
            })
        );
        assert_eq!(
            expect("isr t/0 = none"),
            Expectation::Holds(Condition::Isr {
                tp: tp(0),
                is: vec![]
            })
        );
        assert_eq!(expect("ready 1"), Expectation::Holds(Condition::Ready(1)));
        assert_eq!(
            expect("lost t/0 = 0"),
            Expectation::Lost {
                tp: tp(0),
                cmp: Cmp::Eq,
                count: 0
            }
        );
        assert_eq!(
            expect("lost t/1 >= 1"),
            Expectation::Lost {
                tp: tp(1),
                cmp: Cmp::Ge,
                count: 1
            }
        );
        assert_eq!(
            expect("acked t/0 >= 10"),
            Expectation::Acked {
                tp: tp(0),
                cmp: Cmp::Ge,
                count: 10
            }
        );
        assert_eq!(
            expect("offline t/0"),
            Expectation::Offline {
                tp: tp(0),
                offline: true
            }
        );
        assert_eq!(
            expect("online t/0"),
            Expectation::Offline {
                tp: tp(0),
                offline: false
            }
        );
    }

    #[test]
    fn mode_prefix() {
        let lines = steps(
            "keel: expect lost t/0 = 0\n\
             classic: expect lost t/0 >= 1   # the loss ELR prevents\n\
             heal\n\
             keel:crash 2\n",
        );
        let modes: Vec<(usize, Option<Mode>)> =
            lines.iter().map(|line| (line.line, line.mode)).collect();
        assert_eq!(
            modes,
            [
                (4, Some(Mode::Keel)),
                (5, Some(Mode::Classic)),
                (6, None),
                (7, Some(Mode::Keel))
            ]
        );
        assert_eq!(
            lines[3].item,
            Step::Crash {
                node: Node::Broker(2),
                lose_unflushed: false,
                torn: false
            }
        );
        assert!(lines[0].applies_to(Mode::Keel) && !lines[0].applies_to(Mode::Classic));
        assert!(lines[2].applies_to(Mode::Keel) && lines[2].applies_to(Mode::Classic));
        assert_eq!(lines[1].to_string(), "classic: expect lost t/0 >= 1");

        let s = parse(&format!("{HEADER}keel: heal\nclassic: heal\nheal\n")).unwrap();
        assert_eq!(
            s.steps_for(Mode::Keel).map(|l| l.line).collect::<Vec<_>>(),
            [4, 6]
        );
        assert_eq!(
            s.steps_for(Mode::Classic)
                .map(|l| l.line)
                .collect::<Vec<_>>(),
            [5, 6]
        );

        step_err("heal\nkeel:\n", 5, "must be followed by a step");
        step_err("kraft: heal\n", 4, "unknown mode prefix `kraft:`");
        header_err(
            "name x\nkeel: brokers 3\nheal\n",
            2,
            "applies to steps only",
        );
        header_err(
            "name x\nbrokers 1\nmodes keel\nclassic: heal\n",
            4,
            "does not run in classic mode",
        );
    }

    #[test]
    fn comments_and_blank_lines() {
        let s = parse(
            "\n   \n# desc # with a hash\nname n#o\n\tbrokers\t2 # two\n\n#\nheal#x\n   # end\n",
        )
        .unwrap();
        assert_eq!(s.description, ["desc # with a hash"]);
        assert_eq!(s.name, "n");
        assert_eq!(s.brokers, 2);
        assert_eq!(s.steps[0].line, 8);
        let s = parse("name n\r\nbrokers 1\r\nheal\r\n").unwrap();
        assert_eq!(s.steps[0].line, 3);
    }

    /// Every step kind, parsed, displayed and parsed again, gives the same AST; the displayed
    /// form is canonical (displaying it again gives the same text).
    #[test]
    fn round_trip() {
        let source = "\
            start 2\nstart controller\ncrash 1\ncrash 2 lose-unflushed\n\
            crash controller lose-unflushed torn\nshutdown 3\nrestart 1\nwipe 2\npause 2\n\
            resume controller\nisolate 3\npartition 1,2 | 3,controller\npartition controller|1\n\
            heal\nwait 500ms\nwait 2s\nwait 1m\nwait 90s\nwait 1500ms\nwait 0ms\n\
            await leader t/0 = 2 within 10s\nawait leader t/1 = none\n\
            await isr t/0 = 3,2,1 within 2m\nawait isr t/0 = none\nawait elr t/0 = 2,3\n\
            await elr t/0 = none\nawait last-known-elr t/0 = 3\n\
            await leader-epoch t/0 >= 2\nawait leader-epoch t/0 = -1\n\
            await leader-epoch t/0 < 7\nawait fenced 2\nawait unfenced 2\nawait ready 1\n\
            produce t/0\nproduce t/0 count=10 acks=all\nproduce t/1 acks=1\nconsume t/0\n\
            alter-config topic t min.insync.replicas=1\n\
            alter-config cluster unclean.recovery.strategy=Proactive\n\
            alter-config topic t unclean.leader.election.enable=\n\
            expect leader t/0 = 2\nexpect leader t/0 = none\nexpect isr t/0 = 1,2,3\n\
            expect elr t/0 = none\nexpect last-known-elr t/0 = 1\n\
            expect leader-epoch t/0 > 0\nexpect leader-epoch t/0 <= 4\nexpect fenced 3\n\
            expect unfenced 3\nexpect ready 2\nexpect lost t/0 = 0\nexpect lost t/0 >= 1\n\
            expect acked t/0 >= 10\nexpect acked t/1 < 3\nexpect offline t/0\n\
            expect online t/1\nkeel: expect lost t/0 = 0\nclassic: expect lost t/0 >= 1\n\
            hold 1 -> controller AlterPartition\nhold controller -> 2 Fetch\n\
            hold 2 -> controller GetReplicaLogInfo answer\nrelease\n\
            elect t/0 preferred\nelect t/1 unclean\nelect t/0 unclean balanced\n\
            elect t/1 leader=2\n";
        let parsed = steps(source);
        assert_eq!(parsed.len(), source.lines().count());
        let displayed: Vec<String> = parsed.iter().map(ToString::to_string).collect();
        let reparsed = steps(&(displayed.join("\n") + "\n"));
        assert_eq!(parsed, reparsed);
        let again: Vec<String> = reparsed.iter().map(ToString::to_string).collect();
        assert_eq!(displayed, again);

        // Canonical forms of a few items.
        assert_eq!(displayed[10], "isolate 3");
        assert_eq!(displayed[12], "partition controller | 1");
        assert_eq!(displayed[17], "wait 90s");
        assert_eq!(displayed[18], "wait 1500ms");
        assert_eq!(displayed[19], "wait 0s");
        assert_eq!(displayed[21], "await leader t/1 = none within 30s");
        assert_eq!(displayed[22], "await isr t/0 = 1,2,3 within 2m");
        assert_eq!(displayed[33], "produce t/0 count=1 acks=all");
        assert_eq!(displayed[35], "produce t/1 count=1 acks=1");
        assert_eq!(
            displayed[39],
            "alter-config topic t unclean.leader.election.enable="
        );
        assert_eq!(displayed[displayed.len() - 10], "keel: expect lost t/0 = 0");
        assert_eq!(
            displayed[displayed.len() - 8],
            "hold 1 -> controller AlterPartition"
        );
        assert_eq!(
            displayed[displayed.len() - 6],
            "hold 2 -> controller GetReplicaLogInfo answer"
        );
        assert_eq!(displayed[displayed.len() - 3], "elect t/1 unclean");
        assert_eq!(displayed[displayed.len() - 2], "elect t/0 unclean balanced");
        assert_eq!(displayed[displayed.len() - 1], "elect t/1 leader=2");
    }

    /// The transaction steps and expectation: parsed, displayed canonically, parsed again;
    /// malformed ones refused with the line.
    #[test]
    fn transaction_steps() {
        assert_eq!(
            step("txn tx t/0,t/1 count=5 commit"),
            Step::Txn {
                id: "tx".into(),
                tps: vec![tp(0), tp(1)],
                count: 5,
                v2: false,
                end: TxnStepEnd::Commit,
                expect: TxnOutcome::Ok,
            }
        );
        assert_eq!(
            step("txn z t/1 v2 open expect=fenced"),
            Step::Txn {
                id: "z".into(),
                tps: vec![tp(1)],
                count: 1,
                v2: true,
                end: TxnStepEnd::Open,
                expect: TxnOutcome::Fenced,
            }
        );
        assert_eq!(
            step("txn-end z abort expect=failed"),
            Step::TxnEnd {
                id: "z".into(),
                commit: false,
                expect: TxnOutcome::Failed,
            }
        );
        assert_eq!(step("consume-committed t/1"), Step::ConsumeCommitted(tp(1)));
        assert_eq!(
            step("expect committed t/0 >= 3"),
            Step::Expect(Expectation::Committed {
                tp: tp(0),
                cmp: Cmp::Ge,
                count: 3
            })
        );
        let source = "txn a.b-c_1 t/0 abort\ntxn-end a.b-c_1 commit\n\
            hold 1 -> 2 WriteTxnMarkers\nexpect committed t/1 = 0\n";
        let parsed = steps(source);
        let displayed: Vec<String> = parsed.iter().map(ToString::to_string).collect();
        assert_eq!(
            displayed,
            [
                "txn a.b-c_1 t/0 count=1 abort expect=ok",
                "txn-end a.b-c_1 commit expect=ok",
                "hold 1 -> 2 WriteTxnMarkers",
                "expect committed t/1 = 0"
            ]
        );
        assert_eq!(steps(&(displayed.join("\n") + "\n")), parsed);

        step_err("txn tx t/0 count=2\n", 4, "missing commit, abort or open");
        step_err("txn tx t/0 commit abort\n", 4, "given twice");
        step_err("txn tx t/0,t/0 commit\n", 4, "named twice");
        step_err("txn tx t/2 commit\n", 4, "out of range");
        step_err("txn tx t/0 count=0 commit\n", 4, "at least 1");
        step_err("txn t!x t/0 commit\n", 4, "not a transactional id");
        step_err(
            "txn tx t/0 commit expect=maybe\n",
            4,
            "ok, fenced or failed",
        );
        step_err("txn-end tx\n", 4, "txn-end <id>");
        step_err("txn-end tx finish\n", 4, "commit or abort");
    }

    #[test]
    fn scenario_round_trip() {
        let source = "# A description.\n#\n# Second paragraph.\nname round trip\nbrokers 4\n\
            config min.insync.replicas=2 log.flush.interval.messages=1\n\
            topic t partitions=2 replication-factor=3 replicas=1,2,3;4,3,2 config.flush.ms=10\n\
            topic u partitions=1 replication-factor=1\nmodes classic keel\n\
            crash 4 lose-unflushed torn\nkeel: await elr t/1 = 2 within 5s\n";
        let parsed = parse(source).unwrap();
        let text = parsed.to_string();
        let reparsed = parse(&text).unwrap();
        // Line numbers may differ (config pairs print one per line); everything else is equal.
        let strip = |s: &Scenario| {
            let mut s = s.clone();
            s.steps.iter_mut().for_each(|line| line.line = 0);
            s
        };
        assert_eq!(strip(&parsed), strip(&reparsed));
        assert_eq!(parsed.modes, [Mode::Classic, Mode::Keel]);
        assert_eq!(text, reparsed.to_string());
    }

    #[test]
    fn error_display() {
        let err = err("name x\nbrokers 3\ncrash 4   # no such broker\n");
        assert_eq!(
            err.to_string(),
            "line 3: broker 4 out of range: the brokers are 1..=3: `crash 4   # no such broker`"
        );
        let boxed: Box<dyn std::error::Error> = Box::new(err);
        assert!(boxed.to_string().starts_with("line 3: "));
    }

    #[test]
    fn header_errors() {
        header_err("", 1, "missing `name");
        header_err("name x\n", 1, "missing `brokers");
        header_err("name x\nbrokers 3\n", 2, "no steps");
        header_err("# only a comment\n\n", 2, "missing `name");
        header_err("brokers 3\nheal\n", 2, "missing `name");
        header_err("name x\nheal\n", 2, "missing `brokers");
        header_err("name\nbrokers 3\n", 1, "expected `name <text>`");
        header_err("name x\nname y\n", 2, "duplicate `name`");
        header_err("name x\nbrokers 3\nbrokers 3\n", 3, "duplicate `brokers`");
        header_err("name x\nbrokers 0\nheal\n", 2, "out of range 1..=9");
        header_err("name x\nbrokers 10\nheal\n", 2, "out of range 1..=9");
        header_err("name x\nbrokers three\nheal\n", 2, "non-negative integer");
        header_err("name x\nbrokers 3 4\nheal\n", 2, "unexpected `4`");
        header_err("name x\nbrokers\nheal\n", 2, "incomplete");
        header_err("name x\nbrokers 3\nconfig\nheal\n", 3, "incomplete");
        header_err(
            "name x\nbrokers 3\nconfig a\nheal\n",
            3,
            "expected <key>=<value>",
        );
        header_err("name x\nbrokers 3\nconfig =1\nheal\n", 3, "missing key");
        header_err("name x\nbrokers 3\nconfig a=\nheal\n", 3, "empty value");
        header_err(
            "name x\nbrokers 3\nconfig a=1 a=2\nheal\n",
            3,
            "duplicate key `a`",
        );
        header_err(
            "name x\nbrokers 3\nconfig a=1\nconfig a=2\nheal\n",
            4,
            "duplicate key `a`",
        );
        header_err("name x\nbrokers 3\nmodes\nheal\n", 3, "incomplete");
        header_err(
            "name x\nbrokers 3\nmodes kraft\nheal\n",
            3,
            "unknown mode `kraft`",
        );
        header_err(
            "name x\nbrokers 3\nmodes keel keel\nheal\n",
            3,
            "duplicate mode",
        );
        header_err(
            "name x\nbrokers 3\nmodes keel\nmodes classic\nheal\n",
            4,
            "duplicate `modes`",
        );
        header_err(
            "name x\nbrokers 3\nheal\nbrokers 4\n",
            4,
            "after the first step (line 3)",
        );
        header_err(
            "name x\nbrokers 3\nheal\nname y\n",
            4,
            "after the first step",
        );
        header_err(
            "name x\nbrokers 3\nheal\nconfig a=1\n",
            4,
            "after the first step",
        );
        header_err(
            "name x\nbrokers 3\nheal\ntopic t partitions=1 replication-factor=1\n",
            4,
            "after the first step",
        );
        header_err(
            "name x\nbrokers 3\nheal\nmodes keel\n",
            4,
            "after the first step",
        );
        header_err(
            "name x\nbrokers 3\nfrobnicate 2\n",
            3,
            "unknown directive or step `frobnicate`",
        );
    }

    #[test]
    fn topic_errors() {
        let t = |topic: &str, message: &str| {
            header_err(&format!("name x\nbrokers 3\n{topic}\nheal\n"), 3, message);
        };
        header_err(
            "name x\ntopic t partitions=1 replication-factor=1\nbrokers 3\nheal\n",
            2,
            "`brokers` must come before `topic`",
        );
        t("topic", "incomplete");
        t(
            "topic partitions=1 replication-factor=1",
            "expected a topic name",
        );
        t(
            "topic a/b partitions=1 replication-factor=1",
            "invalid topic name",
        );
        t(
            "topic .. partitions=1 replication-factor=1",
            "invalid topic name",
        );
        t("topic t replication-factor=1", "missing `partitions=<n>`");
        t("topic t partitions=1", "missing `replication-factor=<n>`");
        t(
            "topic t partitions=0 replication-factor=1",
            "partitions=0 out of range",
        );
        t(
            "topic t partitions=-1 replication-factor=1",
            "non-negative integer",
        );
        t(
            "topic t partitions=1 replication-factor=4",
            "out of range 1..=3",
        );
        t(
            "topic t partitions=1 replication-factor=0",
            "out of range 1..=3",
        );
        t(
            "topic t partitions=1 replication-factor=1 partitions=2",
            "duplicate key `partitions`",
        );
        t(
            "topic t partitions=1 replication-factor=1 retention=1",
            "unknown key `retention`",
        );
        t(
            "topic t partitions=1 replication-factor=1 oops",
            "expected <key>=<value>",
        );
        t(
            "topic t partitions=1 replication-factor=1 config.=1",
            "missing config key",
        );
        t(
            "topic t partitions=1 replication-factor=1 config.a=",
            "empty value",
        );
        t(
            "topic t partitions=1 replication-factor=1 config.a=1 config.a=2",
            "duplicate key `config.a`",
        );
        t(
            "topic t partitions=2 replication-factor=1 replicas=1",
            "1 replica list(s) but the topic has 2",
        );
        t(
            "topic t partitions=1 replication-factor=2 replicas=1,2;2,1",
            "2 replica list(s)",
        );
        t(
            "topic t partitions=1 replication-factor=3 replicas=1,2",
            "2 replica(s) but replication-factor=3",
        );
        t(
            "topic t partitions=1 replication-factor=2 replicas=1,1",
            "duplicate replica 1",
        );
        t(
            "topic t partitions=1 replication-factor=2 replicas=1,4",
            "broker 4 out of range",
        );
        t(
            "topic t partitions=1 replication-factor=2 replicas=0,1",
            "broker 0 out of range",
        );
        t(
            "topic t partitions=1 replication-factor=2 replicas=1,",
            "empty item",
        );
        t(
            "topic t partitions=1 replication-factor=1 replicas=controller",
            "not `controller`",
        );
        header_err(
            "name x\nbrokers 3\ntopic t partitions=1 replication-factor=1\n\
             topic t partitions=1 replication-factor=1\nheal\n",
            4,
            "duplicate topic `t`",
        );
    }

    #[test]
    fn step_errors() {
        // Unknown words and wrong arity.
        step_err("heal\nstop 1\n", 5, "unknown directive or step `stop`");
        step_err("heal now\n", 4, "unexpected `now`");
        step_err("start\n", 4, "incomplete");
        step_err("start 1 2\n", 4, "unexpected `2`");
        step_err("crash\n", 4, "incomplete");
        step_err("crash 1 gently\n", 4, "unknown word `gently`");
        step_err("crash 1 torn\n", 4, "`torn` requires `lose-unflushed`");
        step_err(
            "crash 1 lose-unflushed lose-unflushed\n",
            4,
            "duplicate `lose-unflushed`",
        );
        step_err("wipe controller\n", 4, "not `controller`");
        step_err("consume\n", 4, "incomplete");
        // Out-of-range broker ids.
        step_err(
            "start 4\n",
            4,
            "broker 4 out of range: the brokers are 1..=3",
        );
        step_err("pause 0\n", 4, "broker 0 out of range");
        step_err("resume -1\n", 4, "found `-1`");
        step_err("isolate leader\n", 4, "found `leader`");
        step_err("wait 1s\nawait ready 9\n", 5, "broker 9 out of range");
        step_err("expect fenced 4\n", 4, "out of range");
        step_err("expect isr t/0 = 1,2,4\n", 4, "broker 4 out of range");
        step_err("expect leader t/0 = 4\n", 4, "broker 4 out of range");
        // Partitions of the network.
        step_err("partition 1,2 3\n", 4, "missing `|`");
        step_err("partition 1 | 2 | 3\n", 4, "more than one `|`");
        step_err("partition | 1\n", 4, "empty side");
        step_err("partition 1, 2 | 3\n", 4, "no spaces");
        step_err("partition 1,1 | 2\n", 4, "duplicate node 1");
        step_err("partition 1,2 | 2,3\n", 4, "node 2 is on both sides");
        step_err("partition 1 | 4\n", 4, "broker 4 out of range");
        // Topic partitions.
        step_err("consume u/0\n", 4, "unknown topic `u`");
        step_err(
            "consume t/2\n",
            4,
            "partition 2 out of range: topic `t` has 2 partition(s)",
        );
        step_err("consume t\n", 4, "expected <topic>/<partition>");
        step_err("consume t/x\n", 4, "non-negative integer");
        step_err("consume t/-1\n", 4, "non-negative integer");
        step_err("expect lost u/0 = 0\n", 4, "unknown topic `u`");
        step_err("await leader t/5 = 1\n", 4, "partition 5 out of range");
        // Produce.
        step_err("produce t/0 count=0\n", 4, "at least 1");
        step_err("produce t/0 count=ten\n", 4, "non-negative integer");
        step_err("produce t/0 count=99999999999\n", 4, "out of range");
        step_err("produce t/0 acks=0\n", 4, "acks must be `all` or `1`");
        step_err("produce t/0 count=1 count=2\n", 4, "duplicate key `count`");
        step_err("produce t/0 size=1\n", 4, "unknown key `size`");
        step_err("produce t/0 10\n", 4, "expected <key>=<value>");
        // Alter config.
        step_err(
            "alter-config broker 1 a=b\n",
            4,
            "unknown config resource `broker`",
        );
        step_err("alter-config topic u a=b\n", 4, "unknown topic `u`");
        step_err("alter-config topic t\n", 4, "incomplete");
        step_err("alter-config cluster a=1 b=2\n", 4, "unexpected `b=2`");
        step_err("alter-config cluster =1\n", 4, "missing key");
        // Await and conditions.
        step_err("await\n", 4, "incomplete");
        step_err(
            "await leader t/0 = 1 within\n",
            4,
            "missing duration after `within`",
        );
        step_err(
            "await leader t/0 = 1 within 5s now\n",
            4,
            "unexpected `now`",
        );
        step_err(
            "await leader t/0 = 1 within 5\n",
            4,
            "malformed duration `5`",
        );
        step_err("await leader t/0 = 1 within 5 s\n", 4, "unexpected `s`");
        step_err("await lost t/0 = 0\n", 4, "only be checked by `expect`");
        step_err("await leaders t/0 = 1\n", 4, "unknown condition `leaders`");
        step_err("await leader t/0 >= 1\n", 4, "expected `=`, found `>=`");
        step_err("await leader t/0 1\n", 4, "incomplete");
        step_err("await leader t/0 = 1 2\n", 4, "unexpected `2`");
        step_err("await isr t/0 = 1,,2\n", 4, "empty item");
        step_err("await leader-epoch t/0 => 1\n", 4, "expected a comparison");
        step_err("await leader-epoch t/0 >= x\n", 4, "must be an integer");
        step_err("await ready controller\n", 4, "not `controller`");
        // Expect.
        step_err("expect\n", 4, "incomplete");
        step_err("expect durable t/0\n", 4, "unknown expectation `durable`");
        step_err("expect lost t/0 = -1\n", 4, "non-negative integer");
        step_err("expect acked t/0 10\n", 4, "incomplete");
        step_err("expect offline t/0 now\n", 4, "unexpected `now`");
        // Hold.
        step_err(
            "hold 1 controller Fetch\n",
            4,
            "expected `hold <node> -> <node>",
        );
        step_err("hold 1 -> 1 Fetch\n", 4, "two different nodes");
        step_err("hold 1 -> controller Fetches\n", 4, "unknown API `Fetches`");
        step_err(
            "hold 1 -> controller Fetch answers\n",
            4,
            "unexpected `answers`",
        );
        step_err(
            "hold 1 -> controller Fetch answer now\n",
            4,
            "unexpected `now`",
        );
        // Elect.
        step_err("elect t/0\n", 4, "incomplete");
        step_err("elect t/0 cleanly\n", 4, "unknown election type `cleanly`");
        step_err("elect t/0 leader=4\n", 4, "broker 4 out of range");
        step_err("elect t/0 leader=controller\n", 4, "not `controller`");
        step_err("elect t/0 leader\n", 4, "unknown election type `leader`");
        step_err("elect t/0 unclean proactive\n", 4, "unknown recovery mode");
        step_err("elect t/0 unclean balanced now\n", 4, "unexpected `now`");
        step_err("elect t/0 preferred balanced\n", 4, "unexpected `balanced`");
        step_err("elect t/0 leader=1 balanced\n", 4, "unexpected `balanced`");
        step_err("elect u/0 leader=1\n", 4, "unknown topic `u`");
    }

    #[test]
    fn elect_kinds() {
        assert_eq!(
            step("elect t/1 leader=3"),
            Step::Elect {
                tp: Tp {
                    topic: "t".into(),
                    partition: 1
                },
                kind: ElectKind::Leader(3)
            }
        );
        assert_eq!(
            step("elect t/0 unclean balanced"),
            Step::Elect {
                tp: Tp {
                    topic: "t".into(),
                    partition: 0
                },
                kind: ElectKind::Unclean { balanced: true }
            }
        );
    }

    /// The complete example of `docs/scenarios.md` parses, with the expectations it describes.
    #[test]
    fn documented_example_parses() {
        let doc = include_str!("../../../docs/scenarios.md");
        let section = &doc[doc.find("## Example").expect("an Example section")..];
        let start = section.find("```text\n").expect("a text block") + "```text\n".len();
        let end = start + section[start..].find("```").expect("the block's end");
        let s = parse(&section[start..end]).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(s.brokers, 3);
        assert_eq!(s.modes, Mode::ALL);
        let last: Vec<String> = s
            .steps
            .iter()
            .rev()
            .take(2)
            .map(|l| l.to_string())
            .collect();
        assert_eq!(
            last,
            ["classic: expect lost t/0 >= 1", "keel: expect lost t/0 = 0"]
        );
    }
}
