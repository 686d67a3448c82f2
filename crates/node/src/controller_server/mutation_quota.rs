//! The controller mutation quota (KIP-599, `controller_mutation_rate`): how many partitions a
//! second a client may create or delete through CreateTopics, CreatePartitions and DeleteTopics,
//! enforced by the active controller for the whole cluster, as Kafka's
//! `ControllerMutationQuotaManager` does.
//!
//! The rate is a token bucket: it holds at most `rate × controller.quota.window.num ×
//! controller.quota.window.size.seconds` partitions (the burst), refills at `rate` a second, and
//! starts full. A topic is admitted while the bucket is not below zero, and its partitions are
//! then taken from it — one topic may take it below zero, so a single request for more than the
//! burst is not refused forever. Below zero, the client is throttled for the time the bucket
//! takes to climb back to zero.
//!
//! What happens to a topic that arrives below zero depends on the request's version, as in
//! Kafka: from CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 the topic is refused
//! with THROTTLING_QUOTA_EXCEEDED (the client retries it after the throttle); older versions
//! cannot carry that error, so the topic is carried out and only the throttle applies.
//!
//! Partitions of a topic that fails (a bad name, a standby controller, ...) are given back: only
//! what was carried out counts. `validate_only` requests neither count nor are refused.
//!
//! Buckets are kept per (user, client-id) as Kafka's metric tags name them
//! ([`keel_controller::quota::resolve`]); a bucket full again is forgotten, so client-chosen ids
//! cannot grow the table without bound.

use std::collections::HashMap;
use std::sync::Mutex;

use keel_controller::quota::{self, ClientQuotas};
use keel_controller::types::TopicId;
use keel_controller::ClusterImage;
use keel_wire::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use keel_wire::kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use keel_wire::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use keel_wire::kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, TopicName,
};
use keel_wire::ResponseError;

use crate::error::ApiError;

/// `controller.quota.window.num`.
pub const CONTROLLER_QUOTA_WINDOW_NUM: &str = "controller.quota.window.num";
/// `controller.quota.window.size.seconds`.
pub const CONTROLLER_QUOTA_WINDOW_SIZE_SECONDS: &str = "controller.quota.window.size.seconds";
/// Kafka's default for `controller.quota.window.num`.
pub const DEFAULT_CONTROLLER_QUOTA_WINDOW_NUM: u32 = 11;
/// Kafka's default for `controller.quota.window.size.seconds`.
pub const DEFAULT_CONTROLLER_QUOTA_WINDOW_SIZE_SECONDS: u32 = 1;

/// The table size from which full buckets are forgotten.
const SWEEP_AT_LEAST: usize = 1024;

/// Who a mutation is charged to: the principal's name and the request's client id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutator {
    pub user: String,
    pub client_id: String,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at_ms: u64,
    /// The rate and burst it was last used with (a quota can change).
    rate: f64,
    burst: f64,
}

impl Bucket {
    fn refill(&mut self, now_ms: u64) {
        let elapsed_s = now_ms.saturating_sub(self.at_ms) as f64 / 1000.0;
        self.tokens = (self.tokens + self.rate * elapsed_s).min(self.burst);
        self.at_ms = self.at_ms.max(now_ms);
    }
}

/// The bucket table, and its size at which full buckets are next forgotten.
#[derive(Debug, Default)]
struct Buckets {
    map: HashMap<(String, String), Bucket>,
    sweep_at: usize,
}

/// The active controller's mutation buckets.
#[derive(Debug)]
pub struct MutationQuotas {
    /// `controller.quota.window.num × controller.quota.window.size.seconds`, in seconds.
    burst_seconds: f64,
    buckets: Mutex<Buckets>,
    started: tokio::time::Instant,
}

/// One request's admission: whether its version can be refused, and the bucket it draws on.
#[derive(Debug)]
pub struct Admission<'a> {
    quotas: &'a MutationQuotas,
    /// `None`: no quota applies to the client.
    limit: Option<(f64, (String, String))>,
    strict: bool,
}

impl MutationQuotas {
    /// Buckets holding `window_num × window_size_seconds` seconds of their rate.
    pub fn new(window_num: u32, window_size_seconds: u32) -> MutationQuotas {
        MutationQuotas {
            burst_seconds: f64::from(window_num.max(1)) * f64::from(window_size_seconds.max(1)),
            buckets: Mutex::default(),
            started: tokio::time::Instant::now(),
        }
    }

    /// The admission of one request of `who`, by the quotas of `quotas`; `strict`: the request's
    /// version can carry THROTTLING_QUOTA_EXCEEDED.
    /// `who` is `None` for the cluster's own requests, which are never charged.
    pub fn admission<'a>(
        &'a self,
        quotas: &ClientQuotas,
        who: Option<&Mutator>,
        strict: bool,
    ) -> Admission<'a> {
        Admission {
            quotas: self,
            limit: who
                .and_then(|who| {
                    quota::resolve(
                        quotas,
                        quota::CONTROLLER_MUTATION_RATE,
                        &who.user,
                        &who.client_id,
                    )
                })
                .filter(|(rate, _)| *rate > 0.0),
            strict,
        }
    }

    fn with_bucket<R>(
        &self,
        rate: f64,
        key: &(String, String),
        now_ms: u64,
        f: impl FnOnce(&mut Bucket) -> R,
    ) -> R {
        let burst = rate * self.burst_seconds;
        let mut guard = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let buckets = &mut *guard;
        // Forget the buckets that are full again (a new one starts full), each time the table
        // doubles: the sweep costs nothing per request.
        if buckets.map.len() >= buckets.sweep_at.max(SWEEP_AT_LEAST) {
            buckets.map.retain(|_, b| {
                b.refill(now_ms);
                b.tokens < b.burst
            });
            buckets.sweep_at = buckets.map.len() * 2;
        }
        let bucket = buckets.map.entry(key.clone()).or_insert(Bucket {
            tokens: burst,
            at_ms: now_ms,
            rate,
            burst,
        });
        bucket.refill(now_ms);
        (bucket.rate, bucket.burst) = (rate, burst);
        bucket.tokens = bucket.tokens.min(burst);
        f(bucket)
    }

    /// Milliseconds on this controller's monotonic clock.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How many buckets are kept.
    pub fn tracked(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
    }
}

/// Milliseconds until `tokens` below zero climb back to zero at `rate` a second.
fn throttle_ms(tokens: f64, rate: f64) -> u64 {
    if tokens >= 0.0 {
        return 0;
    }
    let ms = (-tokens / rate * 1000.0).ceil();
    // Bounded: a bucket never goes further below zero than one topic's partitions, but a rate
    // of 1e-9 would still ask for centuries.
    (ms as u64).min(crate::quotas::THROTTLE_MS_MAX)
}

impl Admission<'_> {
    /// Admits a topic of `partitions` mutations at `now_ms`: `Err(throttle)` when the request
    /// is strict and the bucket is below zero (the topic is refused), else the partitions are
    /// taken.
    pub fn admit(&self, partitions: u32, now_ms: u64) -> Result<(), u64> {
        let Some((rate, key)) = &self.limit else {
            return Ok(());
        };
        self.quotas.with_bucket(*rate, key, now_ms, |b| {
            if self.strict && b.tokens < 0.0 {
                return Err(throttle_ms(b.tokens, *rate).max(1));
            }
            b.tokens -= f64::from(partitions);
            Ok(())
        })
    }

    /// Gives back `partitions` taken by [`Admission::admit`] for a topic that failed.
    pub fn give_back(&self, partitions: u32, now_ms: u64) {
        if let Some((rate, key)) = &self.limit {
            self.quotas.with_bucket(*rate, key, now_ms, |b| {
                b.tokens = (b.tokens + f64::from(partitions)).min(b.burst);
            });
        }
    }

    /// [`Admission::throttle_ms`] as a response's `throttle_time_ms`.
    pub fn throttle_ms_i32(&self, now_ms: u64) -> i32 {
        i32::try_from(self.throttle_ms(now_ms)).unwrap_or(i32::MAX)
    }

    /// The throttle the response carries: how long until the bucket is back at zero.
    pub fn throttle_ms(&self, now_ms: u64) -> u64 {
        match &self.limit {
            None => 0,
            Some((rate, key)) => self
                .quotas
                .with_bucket(*rate, key, now_ms, |b| throttle_ms(b.tokens, *rate)),
        }
    }
}

/// The partitions each admitted topic took, by topic name, to give back for the ones that
/// fail.
#[derive(Debug, Default)]
pub struct Charged(Vec<(String, u32)>);

impl Charged {
    /// Gives back what the failed topics of a response took (`(name, error code)` of each).
    pub fn settle<'a>(
        self,
        admission: &Admission<'_>,
        now_ms: u64,
        results: impl Iterator<Item = (&'a str, i16)>,
    ) {
        let mut charged = self.0;
        for (name, code) in results {
            if code == 0 {
                continue;
            }
            if let Some(i) = charged.iter().position(|(n, _)| n == name) {
                let (_, partitions) = charged.swap_remove(i);
                admission.give_back(partitions, now_ms);
            }
        }
    }
}

impl Charged {
    /// Gives back everything: the request failed as a whole (the controller lost its
    /// leadership, say).
    pub fn give_back_all(self, admission: &Admission<'_>, now_ms: u64) {
        for (_, partitions) in self.0 {
            admission.give_back(partitions, now_ms);
        }
    }
}

/// Names given more than once in a request: every copy fails (Kafka's INVALID_REQUEST), so
/// none is charged.
fn repeated<'a>(names: impl Iterator<Item = &'a str>) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashSet::new();
    let mut twice = std::collections::HashSet::new();
    for name in names {
        if !seen.insert(name) {
            twice.insert(name.to_string());
        }
    }
    twice
}

/// The error of a topic refused for the quota.
fn throttled(throttle_ms: u64) -> ApiError {
    ApiError::new(
        ResponseError::ThrottlingQuotaExceeded,
        format!(
            "The throttling quota has been exceeded: controller_mutation_rate; retry in \
             {throttle_ms} ms"
        ),
    )
}

/// Admits the topics of `request` one by one; takes the refused ones out of it and answers
/// them.
fn admit_each<T, R>(
    admission: &Admission<'_>,
    now_ms: u64,
    topics: &mut Vec<T>,
    partitions: impl Fn(&T) -> (String, u32),
    refusal: impl Fn(&T, &ApiError) -> R,
) -> (Charged, Vec<R>) {
    let mut charged = Charged::default();
    let mut refused = Vec::new();
    topics.retain(|t| {
        let (name, n) = partitions(t);
        match admission.admit(n, now_ms) {
            Ok(()) => {
                charged.0.push((name, n));
                true
            }
            Err(throttle) => {
                refused.push(refusal(t, &throttled(throttle)));
                false
            }
        }
    });
    (charged, refused)
}

/// CreateTopics: a topic takes its partitions (`num.partitions` for -1, else its count or its
/// assignments). `validate_only` requests take nothing, and neither does a topic that will fail
/// for what the image already says (it exists; it is named twice) — as Kafka charges a topic
/// once it passed its checks. One that fails a later check gives its partitions back
/// ([`Charged::settle`]).
pub fn admit_creations(
    admission: &Admission<'_>,
    now_ms: u64,
    default_partitions: u32,
    image: &ClusterImage,
    request: &mut CreateTopicsRequest,
) -> (Charged, Vec<CreatableTopicResult>) {
    if request.validate_only {
        return Default::default();
    }
    let twice = repeated(request.topics.iter().map(|t| t.name.as_str()));
    admit_each(
        admission,
        now_ms,
        &mut request.topics,
        |t| {
            if twice.contains(t.name.as_str()) || image.topic_id(t.name.as_str()).is_some() {
                return (t.name.to_string(), 0);
            }
            let n = if !t.assignments.is_empty() {
                u32::try_from(t.assignments.len()).unwrap_or(u32::MAX)
            } else if t.num_partitions == -1 {
                default_partitions
            } else {
                u32::try_from(t.num_partitions).unwrap_or(0)
            };
            (t.name.to_string(), n)
        },
        |t, e| crate::handlers::create_topics::failed(t.name.clone(), e),
    )
}

/// CreatePartitions: a topic takes the partitions it would gain. `validate_only` requests take
/// nothing.
pub fn admit_new_partitions(
    admission: &Admission<'_>,
    now_ms: u64,
    image: &ClusterImage,
    request: &mut CreatePartitionsRequest,
) -> (Charged, Vec<CreatePartitionsTopicResult>) {
    if request.validate_only {
        return Default::default();
    }
    let twice = repeated(request.topics.iter().map(|t| t.name.as_str()));
    admit_each(
        admission,
        now_ms,
        &mut request.topics,
        |t| {
            // An unknown topic (or one named twice) fails: nothing to charge.
            let Some(topic) = image
                .topic_id(t.name.as_str())
                .and_then(|id| image.topic(id))
                .filter(|_| !twice.contains(t.name.as_str()))
            else {
                return (t.name.to_string(), 0);
            };
            let wanted = usize::try_from(t.count).unwrap_or(0);
            let gained = wanted.saturating_sub(topic.partitions.len());
            (
                t.name.to_string(),
                u32::try_from(gained).unwrap_or(u32::MAX),
            )
        },
        |t, e| {
            CreatePartitionsTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(e.code())
                .with_error_message(e.message_str())
        },
    )
}

/// DeleteTopics: a topic takes its partitions (one unknown, or named twice, takes nothing).
pub fn admit_deletions(
    admission: &Admission<'_>,
    now_ms: u64,
    image: &ClusterImage,
    request: &mut DeleteTopicsRequest,
) -> (Charged, Vec<DeletableTopicResult>) {
    let count = |id: Option<TopicId>| {
        id.and_then(|id| image.topic(id))
            .map_or(0, |t| u32::try_from(t.partitions.len()).unwrap_or(u32::MAX))
    };
    let refusal = |name: Option<TopicName>, id: uuid::Uuid, e: &ApiError| {
        DeletableTopicResult::default()
            .with_name(name)
            .with_topic_id(id)
            .with_error_code(e.code())
            .with_error_message(e.message_str())
    };
    let twice = repeated(request.topic_names.iter().map(|n| n.as_str()));
    let (mut charged, mut refused) = admit_each(
        admission,
        now_ms,
        &mut request.topic_names,
        |name| match twice.contains(name.as_str()) {
            true => (name.to_string(), 0),
            false => (name.to_string(), count(image.topic_id(name.as_str()))),
        },
        |name, e| refusal(Some(name.clone()), uuid::Uuid::nil(), e),
    );
    let (by_state, refused_states) = admit_each(
        admission,
        now_ms,
        &mut request.topics,
        |t| {
            let id = match &t.name {
                Some(name) => image.topic_id(name.as_str()),
                None => Some(TopicId(t.topic_id)),
            };
            let name = match &t.name {
                Some(name) => name.to_string(),
                None => id
                    .and_then(|id| image.topic(id))
                    .map(|topic| topic.name.clone())
                    .unwrap_or_default(),
            };
            (name, count(id))
        },
        |t, e| refusal(t.name.clone(), t.topic_id, e),
    );
    charged.0.extend(by_state.0);
    refused.extend(refused_states);
    (charged, refused)
}

/// The name a DeleteTopics result answers for ("" when it has none).
pub fn deleted_name(result: &DeletableTopicResult) -> &str {
    result.name.as_deref().map_or("", |n| n.as_str())
}

#[cfg(test)]
mod tests {
    use keel_controller::quota::{QuotaEntity, QuotaValue};

    use super::*;

    fn rate(user: &str, rate: f64) -> ClientQuotas {
        let mut q = ClientQuotas::new();
        q.entry(QuotaEntity::of([(quota::USER, Some(user))]))
            .or_default()
            .insert(
                quota::CONTROLLER_MUTATION_RATE.to_string(),
                QuotaValue(rate),
            );
        q
    }

    fn who(user: &str) -> Mutator {
        Mutator {
            user: user.into(),
            client_id: "admin".into(),
        }
    }

    // Shows (KIP-599): a bucket starts with rate × 11 s of partitions; a topic is admitted while
    // it is not below zero and may take it below; then a strict request's topics are refused
    // with the time back to zero, a lenient one's carried out and throttled; the bucket refills
    // at the rate; other users and clients without a quota are not limited.
    #[test]
    fn a_token_bucket_of_eleven_seconds_admits_then_refuses_strict_topics() {
        let q = rate("alice", 2.0);
        let quotas = MutationQuotas::new(11, 1);
        let strict = quotas.admission(&q, Some(&who("alice")), true);
        assert_eq!(strict.admit(20, 0), Ok(()));
        assert_eq!(strict.throttle_ms(0), 0);
        // 2 tokens left: a topic of 10 is admitted and takes the bucket to -8.
        assert_eq!(strict.admit(10, 0), Ok(()));
        assert_eq!(strict.throttle_ms(0), 4_000);
        assert_eq!(strict.admit(1, 0), Err(4_000));
        assert_eq!(strict.admit(1, 3_000), Err(1_000));
        // Back to zero at 4 s: admitted again.
        assert_eq!(strict.admit(1, 4_000), Ok(()));
        let lenient = quotas.admission(&q, Some(&who("alice")), false);
        assert_eq!(lenient.admit(5, 4_000), Ok(()));
        assert_eq!(lenient.throttle_ms(4_000), 3_000);
        // Given back: a failed topic does not count.
        lenient.give_back(6, 4_000);
        assert_eq!(lenient.throttle_ms(4_000), 0);
        // The bucket never holds more than the burst.
        assert_eq!(strict.admit(23, 1_000_000), Ok(()));
        assert_eq!(strict.admit(1, 1_000_000), Err(500));

        let bob = quotas.admission(&q, Some(&who("bob")), true);
        for _ in 0..100 {
            assert_eq!(bob.admit(1_000, 0), Ok(()));
        }
        assert_eq!(bob.throttle_ms(0), 0);
        assert_eq!(
            quotas.tracked(),
            1,
            "no bucket for a client without a quota"
        );
    }

    // Shows: a rate so small its throttle would be centuries is bounded.
    #[test]
    fn throttles_are_bounded() {
        let q = rate("alice", 1e-9);
        let quotas = MutationQuotas::new(11, 1);
        let a = quotas.admission(&q, Some(&who("alice")), true);
        assert_eq!(a.admit(1, 0), Ok(()));
        assert_eq!(a.throttle_ms(0), crate::quotas::THROTTLE_MS_MAX);
    }

    // Shows: buckets full again are forgotten as the table grows, so client-chosen ids under a
    // default quota cannot grow it without bound.
    #[test]
    fn full_buckets_are_forgotten() {
        let mut q = ClientQuotas::new();
        q.entry(QuotaEntity::of([(quota::CLIENT_ID, None)]))
            .or_default()
            .insert(quota::CONTROLLER_MUTATION_RATE.to_string(), QuotaValue(1.0));
        let quotas = MutationQuotas::new(11, 1);
        let take = |client: String, now_ms: u64| {
            let who = Mutator {
                user: "u".into(),
                client_id: client,
            };
            assert_eq!(
                quotas.admission(&q, Some(&who), true).admit(1, now_ms),
                Ok(())
            );
        };
        for i in 0..1_500 {
            take(format!("early-{i}"), 0);
        }
        assert_eq!(quotas.tracked(), 1_500, "none is full yet");
        for i in 0..600 {
            take(format!("late-{i}"), 100_000);
        }
        assert!(quotas.tracked() <= 600, "{}", quotas.tracked());
    }

    // Shows: a topic the image shows will fail (named twice; CreatePartitions of an unknown
    // topic) takes nothing, while the others take their partitions; a request that failed as a
    // whole gives everything back.
    #[test]
    fn topics_that_will_fail_take_nothing() {
        use keel_wire::kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
        use keel_wire::kafka_protocol::messages::create_topics_request::CreatableTopic;
        use keel_wire::kafka_protocol::protocol::StrBytes;
        let q = rate("alice", 1.0);
        let quotas = MutationQuotas::new(11, 1);
        let a = quotas.admission(&q, Some(&who("alice")), true);
        let image = ClusterImage::new();
        let name = |n: &str| TopicName(StrBytes::from_string(n.to_string()));
        let topic = |n: &str, partitions: i32| {
            CreatableTopic::default()
                .with_name(name(n))
                .with_num_partitions(partitions)
                .with_replication_factor(1)
        };
        let mut create = CreateTopicsRequest::default().with_topics(vec![
            topic("twice", 100),
            topic("twice", 100),
            topic("once", 5),
        ]);
        let (charged, refused) = admit_creations(&a, 0, 1, &image, &mut create);
        assert!(refused.is_empty() && create.topics.len() == 3);
        let mut grow =
            CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
                .with_name(name("unknown"))
                .with_count(1_000)]);
        let (nothing, refused) = admit_new_partitions(&a, 0, &image, &mut grow);
        assert!(refused.is_empty() && nothing.0.iter().all(|(_, n)| *n == 0));
        // 11 - 5 = 6 left; all of it back, then exactly the burst takes the bucket to zero.
        assert_eq!(a.throttle_ms(0), 0);
        charged.give_back_all(&a, 0);
        assert_eq!(a.admit(11, 0), Ok(()));
        assert_eq!(a.throttle_ms(0), 0);
        assert_eq!(a.admit(1, 0), Ok(()));
        assert_eq!(a.throttle_ms(0), 1_000);
    }
}
