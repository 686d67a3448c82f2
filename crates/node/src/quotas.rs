//! Client quota enforcement, as Kafka's `ClientQuotaManager` does it: the bytes a client
//! produces (`producer_byte_rate`), the bytes it is sent by Fetch (`consumer_byte_rate`) and the
//! time its requests take to handle (`request_percentage`, [`HandlerTime`]) are measured as a
//! rate over `quota.window.num` windows of `quota.window.size.seconds` (Kafka's
//! `Rate` over a `SampledStat`); a request that takes the rate over the quota that applies
//! ([`keel_controller::quota::resolve`]) gets `throttle_time_ms = (rate - quota) / quota ×
//! window` in its response, and its connection is not read for that long (KIP-219's muting).
//! Replication is never throttled by client quotas.
//!
//! One difference from Kafka, on purpose: Kafka takes the elapsed time as at least
//! `window.num - 1` whole windows, which lets a new (or long idle) client send ten seconds'
//! worth at once; when those bytes leave the window the client may burst again, and a greedy
//! client's rate swings by a quarter either way over half a minute. Keel takes it as at least
//! one window: the burst is one window's worth and the rate holds within a few percent over
//! any 30 s (the unit tests below show both).
//!
//! Usage is kept per (user, client-id) pair Kafka's metric tags name: clients share a quota set
//! for their user alone or their client id alone. A pair idle for a whole quota window is
//! forgotten, so client-chosen ids cannot grow the table without bound.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use keel_controller::quota::{self, ClientQuotas};

/// `quota.window.num`.
pub const QUOTA_WINDOW_NUM: &str = "quota.window.num";
/// `quota.window.size.seconds`.
pub const QUOTA_WINDOW_SIZE_SECONDS: &str = "quota.window.size.seconds";
/// Kafka's default for `quota.window.num`.
pub const DEFAULT_QUOTA_WINDOW_NUM: u32 = 11;
/// Kafka's default for `quota.window.size.seconds`.
pub const DEFAULT_QUOTA_WINDOW_SIZE_SECONDS: u32 = 1;
/// The longest throttle one request gets (Kafka bounds none for byte rates; Keel keeps a muted
/// connection from outliving a client's request timeout many times over).
pub const THROTTLE_MS_MAX: u64 = 300_000;

/// The measurement windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaWindows {
    /// `quota.window.num` (at least 1).
    pub num: u32,
    /// `quota.window.size.seconds` in milliseconds (at least 1 s).
    pub size_ms: u64,
}

impl Default for QuotaWindows {
    fn default() -> Self {
        QuotaWindows {
            num: DEFAULT_QUOTA_WINDOW_NUM,
            size_ms: u64::from(DEFAULT_QUOTA_WINDOW_SIZE_SECONDS) * 1000,
        }
    }
}

/// What a quota limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    /// Bytes produced (`producer_byte_rate`).
    Produce,
    /// Bytes fetched by consumers (`consumer_byte_rate`).
    Fetch,
    /// Connections accepted from one ip (`connection_creation_rate`, KIP-612).
    Connection,
    /// Time handling requests, in percent of one thread (`request_percentage`, KIP-124).
    Request,
}

impl QuotaKind {
    fn key(self) -> &'static str {
        match self {
            QuotaKind::Produce => quota::PRODUCER_BYTE_RATE,
            QuotaKind::Fetch => quota::CONSUMER_BYTE_RATE,
            QuotaKind::Connection => quota::CONNECTION_CREATION_RATE,
            QuotaKind::Request => quota::REQUEST_PERCENTAGE,
        }
    }
}

/// What `request_percentage` counts of a request that took `nanos` of handler time: percent of
/// one thread for one second (Kafka's `nanosToPercentage`), so that the rate is a percentage.
pub fn percentage_seconds(nanos: u64) -> f64 {
    nanos as f64 * 100.0 / 1e9
}

/// The time a request's handler runs — the sum of its future's polls, without the time it
/// waits (for replication, a long poll, the controller) — which is what Kafka's request handler
/// thread time is to `request_percentage`. [`HandlerTime::so_far`] may be asked from inside a
/// poll (when the answer is encoded, to throttle it).
#[derive(Debug)]
pub struct HandlerTime {
    base: std::time::Instant,
    /// Nanoseconds of the polls that ended.
    total_ns: std::sync::atomic::AtomicU64,
    /// When the running poll started (nanoseconds since `base`, plus one; 0: none runs).
    poll_started_ns: std::sync::atomic::AtomicU64,
    /// What [`HandlerTime::take`] handed out.
    taken_ns: std::sync::atomic::AtomicU64,
}

impl Default for HandlerTime {
    fn default() -> Self {
        HandlerTime {
            base: std::time::Instant::now(),
            total_ns: Default::default(),
            poll_started_ns: Default::default(),
            taken_ns: Default::default(),
        }
    }
}

impl HandlerTime {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Runs one poll of the handler, counting its time.
    pub fn poll<R>(&self, poll: impl FnOnce() -> R) -> R {
        use std::sync::atomic::Ordering::Relaxed;
        let start = self.now_ns();
        self.poll_started_ns.store(start + 1, Relaxed);
        let result = poll();
        self.poll_started_ns.store(0, Relaxed);
        self.total_ns
            .fetch_add(self.now_ns().saturating_sub(start), Relaxed);
        result
    }

    /// The handler's time so far, the running poll's included.
    pub fn so_far_ns(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let running = match self.poll_started_ns.load(Relaxed) {
            0 => 0,
            started => self.now_ns().saturating_sub(started - 1),
        };
        self.total_ns.load(Relaxed) + running
    }

    /// The time so far that an earlier `take` did not hand out: a request's time is recorded
    /// when its answer is made (and throttles it), the encoding after that once it is done.
    pub fn take_ns(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self.so_far_ns();
        now.saturating_sub(self.taken_ns.swap(now, Relaxed))
    }
}

/// One sample: what was recorded from `start_ms` on.
#[derive(Clone, Copy, Debug)]
struct Sample {
    start_ms: u64,
    value: f64,
}

/// One (kind, user, client-id)'s samples, oldest first (Kafka's `SampledStat`).
#[derive(Debug, Default)]
struct Usage {
    samples: VecDeque<Sample>,
    last_ms: u64,
}

impl Usage {
    fn purge(&mut self, now_ms: u64, w: QuotaWindows) {
        let expire = u64::from(w.num) * w.size_ms;
        while self
            .samples
            .front()
            .is_some_and(|s| now_ms.saturating_sub(s.start_ms) >= expire)
        {
            self.samples.pop_front();
        }
    }

    fn record(&mut self, value: f64, now_ms: u64, w: QuotaWindows) {
        self.purge(now_ms, w);
        let start_new = self
            .samples
            .back()
            .is_none_or(|s| now_ms.saturating_sub(s.start_ms) >= w.size_ms);
        if start_new {
            self.samples.push_back(Sample {
                start_ms: now_ms,
                value: 0.0,
            });
            while self.samples.len() > w.num as usize {
                self.samples.pop_front();
            }
        }
        if let Some(s) = self.samples.back_mut() {
            s.value += value;
        }
        self.last_ms = now_ms;
    }

    /// The rate in units a second, and the window it is measured over (Kafka's
    /// `Rate.windowSize`).
    fn rate(&mut self, now_ms: u64, w: QuotaWindows) -> (f64, u64) {
        self.purge(now_ms, w);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        let oldest = self.samples.front().map_or(now_ms, |s| s.start_ms);
        let mut elapsed = now_ms.saturating_sub(oldest);
        // Kafka's rule with a floor of one whole window (Kafka's is `num - 1`; see above).
        if elapsed < w.size_ms {
            elapsed += w.size_ms;
        }
        let window_ms = elapsed.max(1);
        (total / (window_ms as f64 / 1000.0), window_ms)
    }
}

type UsageKey = (QuotaKind, String, String);

/// A broker's client quota usage.
#[derive(Debug, Default)]
pub struct QuotaUsage {
    windows: QuotaWindows,
    usage: Mutex<(HashMap<UsageKey, Usage>, u64)>,
}

impl QuotaUsage {
    /// Usage measured over `windows`.
    pub fn new(windows: QuotaWindows) -> QuotaUsage {
        QuotaUsage {
            windows,
            usage: Mutex::default(),
        }
    }

    /// Records a connection accepted from `ip` at `now_ms` against its `connection_creation_rate`
    /// and answers how long it is to be held unanswered before it is closed (0: within the
    /// rate, or no quota applies). As Kafka's `ConnectionQuotas`, a connection over the rate
    /// is not counted: it is refused, and the ones accepted are what the quota limits. The
    /// throttle is at most one window, as Kafka's `ConnectionQuotas` bounds it.
    pub fn record_connection(
        &self,
        quotas: &ClientQuotas,
        ip: core::net::IpAddr,
        now_ms: u64,
    ) -> u64 {
        let Some(limit) = quota::ip_connection_rate(quotas, ip) else {
            return 0;
        };
        let w = self.windows;
        let mut guard = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let (usage, last_sweep) = &mut *guard;
        Self::sweep(usage, last_sweep, now_ms, w);
        let key = (
            QuotaKind::Connection,
            ip.to_canonical().to_string(),
            String::new(),
        );
        let entry = usage.entry(key).or_default();
        entry.record(1.0, now_ms, w);
        let (rate, window_ms) = entry.rate(now_ms, w);
        if rate <= limit {
            return 0;
        }
        entry.record(-1.0, now_ms, w);
        let throttle = ((rate - limit) / limit.max(f64::MIN_POSITIVE) * window_ms as f64).round();
        (throttle as u64).clamp(1, w.size_ms)
    }

    /// Forgets the keys idle for a whole quota window (their rate is 0 by then), at most once a
    /// window.
    fn sweep(
        usage: &mut HashMap<UsageKey, Usage>,
        last_sweep: &mut u64,
        now_ms: u64,
        w: QuotaWindows,
    ) {
        let expire = u64::from(w.num) * w.size_ms;
        if now_ms.saturating_sub(*last_sweep) >= expire {
            usage.retain(|_, s| now_ms.saturating_sub(s.last_ms) < expire);
            *last_sweep = now_ms;
        }
    }

    /// Records `value` (bytes) for `user` (the principal's name) with `client_id` at `now_ms`
    /// and answers how long the client is throttled (0: within its quota, or no quota applies).
    pub fn record(
        &self,
        quotas: &ClientQuotas,
        kind: QuotaKind,
        user: &str,
        client_id: &str,
        value: f64,
        now_ms: u64,
    ) -> u64 {
        let Some((limit, (u, c))) = quota::resolve(quotas, kind.key(), user, client_id) else {
            return 0;
        };
        let w = self.windows;
        let mut guard = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let (usage, last_sweep) = &mut *guard;
        Self::sweep(usage, last_sweep, now_ms, w);
        let entry = usage.entry((kind, u, c)).or_default();
        entry.record(value, now_ms, w);
        let (rate, window_ms) = entry.rate(now_ms, w);
        if rate <= limit {
            return 0;
        }
        let throttle = ((rate - limit) / limit * window_ms as f64).round();
        // Kafka bounds a request quota's throttle by one window (ClientRequestQuotaManager's
        // maxThrottleTimeMs): a client muted longer would miss its group's heartbeats.
        let max = match kind {
            QuotaKind::Request => w.size_ms,
            _ => THROTTLE_MS_MAX,
        };
        (throttle as u64).min(max)
    }

    /// Takes back `value` recorded by [`QuotaUsage::record`] for a response that was not sent
    /// (a throttled Fetch is answered empty, as Kafka's `unrecordQuotaSensor`).
    pub fn unrecord(
        &self,
        quotas: &ClientQuotas,
        kind: QuotaKind,
        user: &str,
        client_id: &str,
        value: f64,
        now_ms: u64,
    ) {
        if let Some((_, (u, c))) = quota::resolve(quotas, kind.key(), user, client_id) {
            let mut guard = self.usage.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(entry) = guard.0.get_mut(&(kind, u, c)) {
                entry.record(-value, now_ms, self.windows);
            }
        }
    }

    /// How many (kind, user, client-id) pairs are tracked.
    pub fn tracked(&self) -> usize {
        self.usage.lock().unwrap_or_else(|p| p.into_inner()).0.len()
    }
}

#[cfg(test)]
mod tests {
    use keel_controller::quota::{QuotaEntity, QuotaValue};

    use super::*;

    fn quotas(entity: &[(&'static str, Option<&'static str>)], key: &str, v: f64) -> ClientQuotas {
        let mut q = ClientQuotas::new();
        q.entry(QuotaEntity::of(entity.iter().copied()))
            .or_default()
            .insert(key.to_string(), QuotaValue(v));
        q
    }

    /// Bytes a greedy client (one request of `request` bytes as soon as each throttle ends)
    /// gets acknowledged between `from_ms` and `to_ms`, as a multiple of `quota` per second.
    fn greedy(quota_bps: f64, request: f64, from_ms: u64, to_ms: u64) -> f64 {
        let q = quotas(
            &[(quota::USER, Some("u"))],
            quota::PRODUCER_BYTE_RATE,
            quota_bps,
        );
        let usage = QuotaUsage::new(QuotaWindows::default());
        let (mut now, mut sent) = (0u64, 0.0);
        while now < to_ms {
            let t = usage.record(&q, QuotaKind::Produce, "u", "c", request, now);
            if now >= from_ms {
                sent += request;
            }
            now += t.max(1);
        }
        sent / ((to_ms - from_ms) as f64 / 1000.0) / quota_bps
    }

    // Shows: a client over its quota is throttled by Kafka's formula — (rate - quota) / quota ×
    // window — and a greedy client waiting out each throttle is held within 5 % of its quota
    // over every 30 s, whether it sends 10 kB or 3 MB at a time; no quota, no throttle.
    #[test]
    fn throttle_follows_kafkas_formula_and_holds_the_rate() {
        let q = quotas(
            &[(quota::USER, Some("u"))],
            quota::PRODUCER_BYTE_RATE,
            1000.0,
        );
        let usage = QuotaUsage::new(QuotaWindows::default());
        // 3,000 bytes at once: 3,000 B/s over the first window, three times the quota → 2 s.
        assert_eq!(
            usage.record(&q, QuotaKind::Produce, "u", "c", 3_000.0, 0),
            2_000
        );
        assert_eq!(
            usage.record(&q, QuotaKind::Produce, "other", "c", 1e9, 0),
            0,
            "no quota applies to another user"
        );
        assert_eq!(usage.record(&q, QuotaKind::Fetch, "u", "c", 1e9, 0), 0);
        let mib = 1048576.0;
        for request in [10_000.0, 100_000.0, 1e6, 3e6] {
            for (from, to) in [(0, 30_000), (15_000, 45_000), (30_000, 60_000)] {
                let held = greedy(mib, request, from, to);
                assert!(
                    (0.95..=1.05).contains(&held),
                    "{request} B requests, {from}..{to} ms: {held}"
                );
            }
        }
    }

    // Shows: clients of one user share a quota set for the user alone; under a quota of
    // (user, client-id) defaults each pair has its own; idle pairs are forgotten.
    #[test]
    fn usage_is_kept_per_kafka_metric_tags_and_forgotten_when_idle() {
        let user_quota = quotas(
            &[(quota::USER, Some("u"))],
            quota::PRODUCER_BYTE_RATE,
            1000.0,
        );
        let usage = QuotaUsage::new(QuotaWindows::default());
        assert_eq!(
            usage.record(&user_quota, QuotaKind::Produce, "u", "a", 600.0, 0),
            0
        );
        // The same user from another client id: over the shared quota now.
        assert!(usage.record(&user_quota, QuotaKind::Produce, "u", "b", 600.0, 0) > 0);
        assert_eq!(usage.tracked(), 1);

        let pair_defaults = quotas(
            &[(quota::USER, None), (quota::CLIENT_ID, None)],
            quota::PRODUCER_BYTE_RATE,
            1000.0,
        );
        let usage = QuotaUsage::new(QuotaWindows::default());
        for client in ["a", "b", "c"] {
            assert_eq!(
                usage.record(&pair_defaults, QuotaKind::Produce, "u", client, 600.0, 0),
                0,
                "{client} has its own quota"
            );
        }
        assert_eq!(usage.tracked(), 3);
        usage.record(&pair_defaults, QuotaKind::Produce, "u", "d", 1.0, 11_000);
        assert_eq!(usage.tracked(), 1, "the idle pairs are forgotten");
    }

    // Shows: handler time is the time inside polls (a wait between them does not count), as
    // much as is running when it is asked; what was taken is not taken again.
    #[test]
    fn handler_time_counts_polls_and_is_taken_once() {
        let time = HandlerTime::default();
        time.poll(|| std::thread::sleep(std::time::Duration::from_millis(20)));
        // Not polling: a wait is not handler time.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let inside = time.poll(|| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            time.take_ns()
        });
        assert!((30_000_000..50_000_000).contains(&inside), "{inside}");
        assert!(time.take_ns() < 5_000_000, "taken once");
        assert_eq!(
            percentage_seconds(10_000_000),
            1.0,
            "10 ms is 1 % of a second"
        );
    }

    // Shows: an unrecorded value no longer counts (a throttled Fetch sends nothing).
    #[test]
    fn unrecord_takes_a_value_back() {
        let q = quotas(
            &[(quota::CLIENT_ID, None)],
            quota::CONSUMER_BYTE_RATE,
            1000.0,
        );
        let usage = QuotaUsage::new(QuotaWindows::default());
        assert!(usage.record(&q, QuotaKind::Fetch, "u", "c", 50_000.0, 0) > 0);
        usage.unrecord(&q, QuotaKind::Fetch, "u", "c", 50_000.0, 0);
        assert_eq!(usage.record(&q, QuotaKind::Fetch, "u", "c", 500.0, 0), 0);
    }

    // Shows: an ip may open `connection_creation_rate` connections a second; the next is refused
    // for (rate - quota) / quota × window and not counted, so the ip may connect again once the
    // rate falls; other ips and ips without a quota are not limited.
    #[test]
    fn connections_over_an_ips_rate_are_refused_and_not_counted() {
        let mut q = ClientQuotas::new();
        q.entry(QuotaEntity::of([(quota::IP, Some("10.0.0.1"))]))
            .or_default()
            .insert(quota::CONNECTION_CREATION_RATE.to_string(), QuotaValue(2.0));
        let usage = QuotaUsage::new(QuotaWindows::default());
        let ip = |s: &str| s.parse::<core::net::IpAddr>().unwrap();
        assert_eq!(usage.record_connection(&q, ip("10.0.0.1"), 0), 0);
        assert_eq!(usage.record_connection(&q, ip("10.0.0.1"), 10), 0);
        // A third at 20 ms: 3 over 1.02 s against 2/s → (2.94 - 2) / 2 × 1.02 s.
        assert_eq!(usage.record_connection(&q, ip("10.0.0.1"), 20), 480);
        assert_eq!(usage.record_connection(&q, ip("::ffff:10.0.0.1"), 30), 470);
        for n in 0..100 {
            assert_eq!(usage.record_connection(&q, ip("10.0.0.2"), n), 0);
        }
        // The refused ones were not counted: at 1.5 s two in 1.5 s is within 2/s.
        assert_eq!(usage.record_connection(&q, ip("10.0.0.1"), 1_500), 0);
        // A steady client just under its rate is never refused.
        let mut refused = 0;
        for n in 0..200u64 {
            refused += u64::from(usage.record_connection(&q, ip("10.0.0.1"), 3_000 + n * 550) > 0);
        }
        assert_eq!(refused, 0);
    }
}
