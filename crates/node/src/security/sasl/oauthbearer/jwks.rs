//! The broker's verification keys: a JWKS read from `sasl.oauthbearer.jwks.endpoint.url` (a
//! `file:` URL or `http(s)://`) when the listener starts, then again every
//! `sasl.oauthbearer.jwks.endpoint.refresh.ms` and soon after a token names a key the set does
//! not hold (Kafka's `RefreshingHttpsJwks` and `RefreshingHttpsJwksVerificationKeyResolver`).
//!
//! A refresh runs on a thread of its own (reading a file or an HTTP GET blocks), retried with
//! backoff from `...retry.backoff.ms` up to `...retry.backoff.max.ms`; a failed refresh keeps the
//! keys in use. Refreshes for unknown keys are bounded: one per key id per minute (at most 16 ids
//! remembered, ids over 1,000 characters never refresh, as Kafka) and, beyond Kafka, at most one
//! per second in all, so tokens with made-up key ids cannot turn the broker into a load generator
//! against its identity provider. Documents over [`JWKS_MAX_BYTES`] are refused.

use std::io::Read;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use super::jwt::{parse_jwks, Jwk};

/// The largest JWKS document read, in bytes.
pub const JWKS_MAX_BYTES: u64 = 1024 * 1024;
/// How long one HTTP request for the JWKS may take.
pub const JWKS_HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Kafka's `RefreshingHttpsJwks.MISSING_KEY_ID_CACHE_MAX_ENTRIES`.
const MISSING_KEY_ID_CACHE_MAX_ENTRIES: usize = 16;
/// Kafka's `RefreshingHttpsJwks.MISSING_KEY_ID_CACHE_IN_FLIGHT_MS`: how long an unknown key id
/// waits before it may ask for another refresh.
pub const MISSING_KEY_ID_CACHE_IN_FLIGHT_MS: i64 = 60_000;
/// Kafka's `RefreshingHttpsJwks.MISSING_KEY_ID_MAX_KEY_LENGTH`.
pub const MISSING_KEY_ID_MAX_KEY_LENGTH: usize = 1000;
/// The shortest time between two refreshes asked for by unknown keys (Keel's own bound).
pub const EXPEDITED_REFRESH_MIN_GAP: Duration = Duration::from_secs(1);

/// Where the JWKS comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksLocation {
    File(PathBuf),
    Http(String),
}

impl JwksLocation {
    /// The location a `sasl.oauthbearer.jwks.endpoint.url` names: `file:/path`,
    /// `file:///path` (or `file://localhost/path`), `http://...` or `https://...` (Kafka's
    /// `ConfigurationUtils.validateUrl` allows these three schemes).
    pub fn parse(url: &str) -> Result<JwksLocation, String> {
        let url = url.trim();
        let (scheme, rest) = url
            .split_once(':')
            .ok_or_else(|| format!("{url:?} is not a URL"))?;
        match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                let path = match rest.strip_prefix("//") {
                    Some(authority_and_path) => {
                        let slash = authority_and_path
                            .find('/')
                            .ok_or_else(|| format!("{url:?} has no path"))?;
                        let host = &authority_and_path[..slash];
                        if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                            return Err(format!(
                                "{url:?} names host {host:?}; a file URL must be local"
                            ));
                        }
                        &authority_and_path[slash..]
                    }
                    None => rest,
                };
                if !path.starts_with('/') {
                    return Err(format!("{url:?} does not name an absolute path"));
                }
                if path.contains('%') {
                    return Err(format!(
                        "{url:?}: percent-encoded file paths are not supported"
                    ));
                }
                Ok(JwksLocation::File(PathBuf::from(path)))
            }
            "http" | "https" => {
                if !rest.starts_with("//") || rest.len() <= 2 {
                    return Err(format!("{url:?} has no host"));
                }
                Ok(JwksLocation::Http(url.to_string()))
            }
            other => Err(format!(
                "{url:?} has the unsupported scheme {other:?} (file, http and https are supported)"
            )),
        }
    }
}

impl std::fmt::Display for JwksLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JwksLocation::File(path) => write!(f, "file:{}", path.display()),
            JwksLocation::Http(url) => f.write_str(url),
        }
    }
}

/// Reads the JWKS from its location.
#[derive(Debug, Clone)]
pub struct JwksSource {
    location: JwksLocation,
    agent: Option<ureq::Agent>,
}

impl JwksSource {
    /// A source at `location`; HTTPS trusts `roots` (PEM certificates) when given, else the
    /// Mozilla roots (`webpki-roots`).
    pub fn new(location: JwksLocation, roots: Option<&[u8]>) -> Result<JwksSource, String> {
        let agent = match &location {
            JwksLocation::File(_) => None,
            JwksLocation::Http(_) => {
                let root_certs = match roots {
                    None => ureq::tls::RootCerts::WebPki,
                    Some(pem) => {
                        let certs = ureq::tls::parse_pem(pem)
                            .filter_map(|item| match item {
                                Ok(ureq::tls::PemItem::Certificate(cert)) => Some(Ok(cert)),
                                Ok(_) => None,
                                Err(e) => Some(Err(e)),
                            })
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(|e| format!("the truststore is not PEM: {e}"))?;
                        if certs.is_empty() {
                            return Err("the truststore holds no certificate".into());
                        }
                        ureq::tls::RootCerts::new_with_certs(&certs)
                    }
                };
                let config = ureq::Agent::config_builder()
                    .timeout_global(Some(JWKS_HTTP_TIMEOUT))
                    .http_status_as_error(true)
                    .tls_config(
                        ureq::tls::TlsConfig::builder()
                            .root_certs(root_certs)
                            .build(),
                    )
                    .build();
                Some(ureq::Agent::new_with_config(config))
            }
        };
        Ok(JwksSource { location, agent })
    }

    /// Where it reads from.
    pub fn location(&self) -> &JwksLocation {
        &self.location
    }

    /// The document's usable keys.
    pub fn fetch(&self) -> Result<Vec<Jwk>, String> {
        let bytes = match (&self.location, &self.agent) {
            (JwksLocation::File(path), _) => {
                let file = std::fs::File::open(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let mut bytes = Vec::new();
                file.take(JWKS_MAX_BYTES + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                bytes
            }
            (JwksLocation::Http(url), Some(agent)) => agent
                .get(url)
                .call()
                .map_err(|e| format!("GET {url}: {e}"))?
                .body_mut()
                .with_config()
                .limit(JWKS_MAX_BYTES + 1)
                .read_to_vec()
                .map_err(|e| format!("GET {url}: {e}"))?,
            (JwksLocation::Http(_), None) => {
                return Err("no HTTP client for an http(s) JWKS endpoint".into())
            }
        };
        if bytes.len() as u64 > JWKS_MAX_BYTES {
            return Err(format!(
                "{} is larger than {JWKS_MAX_BYTES} bytes",
                self.location
            ));
        }
        let set = parse_jwks(&bytes).map_err(|e| format!("{}: {e}", self.location))?;
        if !set.ignored.is_empty() {
            tracing::warn!(
                location = %self.location,
                ignored = ?set.ignored,
                "JWKS keys that cannot verify tokens are ignored"
            );
        }
        Ok(set.keys)
    }
}

/// How often and how persistently the keys are refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshTiming {
    /// `sasl.oauthbearer.jwks.endpoint.refresh.ms`.
    pub refresh: Duration,
    /// `sasl.oauthbearer.jwks.endpoint.retry.backoff.ms`.
    pub retry_backoff: Duration,
    /// `sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms`.
    pub retry_backoff_max: Duration,
}

/// The keys in use, shared by the exchanges of a listener and its refresh thread.
#[derive(Debug)]
struct Shared {
    location: JwksLocation,
    keys: RwLock<Arc<Vec<Jwk>>>,
    /// Unknown key id → when it may ask for a refresh again (clock ms), least recently
    /// asked first (Kafka keeps an access-ordered map of 16).
    missing: Mutex<Vec<(String, i64)>>,
    /// Wakes the refresh thread early; dropping it stops the thread.
    wake: Mutex<mpsc::Sender<()>>,
}

/// The verification keys of one listener's OAUTHBEARER.
#[derive(Debug, Clone)]
pub struct KeyResolver {
    shared: Arc<Shared>,
}

impl KeyResolver {
    /// Reads the keys now (a failure stops the listener's start, as Kafka's
    /// `RefreshingHttpsJwks.init` stops the broker's) and refreshes them in the background.
    pub fn start(source: JwksSource, timing: RefreshTiming) -> Result<KeyResolver, String> {
        let keys = source.fetch()?;
        tracing::info!(
            location = %source.location(),
            keys = keys.len(),
            refresh_ms = timing.refresh.as_millis() as u64,
            "OAUTHBEARER verification keys read"
        );
        let (wake, woken) = mpsc::channel();
        let shared = Arc::new(Shared {
            location: source.location().clone(),
            keys: RwLock::new(Arc::new(keys)),
            missing: Mutex::new(Vec::new()),
            wake: Mutex::new(wake),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("keel-jwks-refresh".into())
            .spawn(move || refresh_loop(weak, source, timing, woken))
            .map_err(|e| format!("cannot start the JWKS refresh thread: {e}"))?;
        Ok(KeyResolver { shared })
    }

    /// The keys in use.
    pub fn keys(&self) -> Arc<Vec<Jwk>> {
        self.shared
            .keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Where they come from.
    pub fn location(&self) -> &JwksLocation {
        &self.shared.location
    }

    /// A token named `kid` (or no key id) and no key suits it: asks for a refresh unless that
    /// key id asked less than a minute ago (clock `now_ms`) or is too long (Kafka's
    /// `RefreshingHttpsJwks.maybeExpediteRefresh`). Returns whether a refresh was asked for.
    pub fn on_unknown_key(&self, kid: Option<&str>, now_ms: i64) -> bool {
        let kid = kid.unwrap_or("");
        if kid.len() > MISSING_KEY_ID_MAX_KEY_LENGTH {
            return false;
        }
        {
            let mut missing = self
                .shared
                .missing
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(index) = missing.iter().position(|(id, _)| id == kid) {
                let (id, next_check_ms) = missing.remove(index);
                if next_check_ms > now_ms {
                    missing.push((id, next_check_ms));
                    return false;
                }
            }
            missing.push((kid.to_string(), now_ms + MISSING_KEY_ID_CACHE_IN_FLIGHT_MS));
            if missing.len() > MISSING_KEY_ID_CACHE_MAX_ENTRIES {
                missing.remove(0);
            }
        }
        let wake = self.shared.wake.lock().unwrap_or_else(|p| p.into_inner());
        wake.send(()).is_ok()
    }
}

/// The refresh thread: every `timing.refresh`, or when woken, reads the keys again; ends when
/// the resolver is dropped.
fn refresh_loop(
    shared: Weak<Shared>,
    source: JwksSource,
    timing: RefreshTiming,
    woken: mpsc::Receiver<()>,
) {
    let mut next_scheduled = Instant::now() + timing.refresh;
    let mut last_expedited: Option<Instant> = None;
    loop {
        let wait = next_scheduled.saturating_duration_since(Instant::now());
        let expedited = match woken.recv_timeout(wait) {
            Ok(()) => true,
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if expedited {
            if let Some(gap) = last_expedited
                .map(|at| EXPEDITED_REFRESH_MIN_GAP.saturating_sub(at.elapsed()))
                .filter(|gap| !gap.is_zero())
            {
                std::thread::sleep(gap);
            }
            last_expedited = Some(Instant::now());
        } else {
            next_scheduled = Instant::now() + timing.refresh;
        }
        // Asks that arrived meanwhile are answered by this refresh.
        while woken.try_recv().is_ok() {}
        let result = fetch_with_retry(&source, timing);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match result {
            Ok(keys) => {
                {
                    let mut missing = shared.missing.lock().unwrap_or_else(|p| p.into_inner());
                    missing.retain(|(id, _)| !keys.iter().any(|k| k.kid() == Some(id.as_str())));
                }
                let count = keys.len();
                *shared.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
                tracing::info!(location = %shared.location, keys = count, expedited, "OAUTHBEARER verification keys refreshed");
            }
            Err(e) => tracing::warn!(
                location = %shared.location,
                error = %e,
                "OAUTHBEARER verification keys could not be refreshed; the keys in use stay"
            ),
        }
    }
}

/// One refresh with Kafka's `Retry`: attempts `retry_backoff`, doubling, apart until
/// `retry_backoff_max` has passed.
fn fetch_with_retry(source: &JwksSource, timing: RefreshTiming) -> Result<Vec<Jwk>, String> {
    let end = Instant::now() + timing.retry_backoff_max;
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        let error = match source.fetch() {
            Ok(keys) => return Ok(keys),
            Err(e) => e,
        };
        let backoff = timing
            .retry_backoff
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1).min(30)));
        let wait = backoff.min(end.saturating_duration_since(Instant::now()));
        if wait.is_zero() {
            return Err(format!("{error} (after {attempt} attempts)"));
        }
        tracing::debug!(attempt, error = %error, "JWKS refresh attempt failed; retrying");
        std::thread::sleep(wait);
    }
}
