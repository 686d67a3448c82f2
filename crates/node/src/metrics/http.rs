//! The `/metrics` endpoint: a minimal HTTP/1.1 server over any [`Listener`]. `GET /metrics`
//! (a query string is ignored) answers the registry in the Prometheus text format; any other
//! path is 404, any other method 405. One request per connection (`Connection: close`), which
//! is what Prometheus' scraper handles well; request heads are bounded in size and time.
//!
//! Config ([`MetricsEndpoint::from_properties`]): `metrics.port` — unset or `-1` is off, a port
//! (0 = any free port) turns it on — and `metrics.host`, by default the host of the node's
//! first listener, so the endpoint is reachable where clients reach the node.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{Metrics, CONTENT_TYPE};
use crate::config::ConfigError;
use crate::net::{Listener, Network, Stream};

/// `metrics.port`: the port of the `/metrics` endpoint; unset or -1 = no endpoint.
pub const METRICS_PORT: &str = "metrics.port";
/// `metrics.host`: the address the endpoint binds (default: the first listener's host).
pub const METRICS_HOST: &str = "metrics.host";
/// The path Prometheus scrapes.
pub const METRICS_PATH: &str = "/metrics";
/// Largest request head (request line and headers) read.
const REQUEST_HEAD_MAX_BYTES: usize = 8 * 1024;
/// How long a client may take to send its request head.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing an answer may take.
const RESPONSE_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait in the accept queue.
const CONNECTIONS_MAX: usize = 64;

/// Where the endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsEndpoint {
    /// Bind address; empty = every interface.
    pub host: String,
    /// Port; 0 = any free port.
    pub port: u16,
}

impl MetricsEndpoint {
    /// Reads `metrics.port` and `metrics.host`; `None` when the endpoint is off. A bad port is
    /// an error naming `metrics.port`.
    pub fn from_properties(
        props: &BTreeMap<String, String>,
        default_host: &str,
    ) -> Result<Option<MetricsEndpoint>, ConfigError> {
        let Some(text) = props.get(METRICS_PORT) else {
            return Ok(None);
        };
        let port = match text.trim().parse::<i32>() {
            Ok(-1) => return Ok(None),
            Ok(port) => u16::try_from(port).ok(),
            Err(_) => None,
        }
        .ok_or_else(|| ConfigError::InvalidValue {
            key: METRICS_PORT.to_string(),
            value: text.clone(),
            reason: "expected -1 (off) or a port number 0-65535".to_string(),
        })?;
        let host = props
            .get(METRICS_HOST)
            .map_or(default_host, |h| h.trim())
            .to_string();
        Ok(Some(MetricsEndpoint { host, port }))
    }

    /// `host:port` for messages (an empty host shown as `0.0.0.0`).
    pub fn describe(&self, port: u16) -> String {
        let host = if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        };
        format!("{host}:{port}")
    }
}

/// The endpoint could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen for metrics on {address} ({METRICS_PORT}): {source}")]
pub struct MetricsBindError {
    pub address: String,
    #[source]
    pub source: std::io::Error,
}

/// Binds the endpoint on `network` and serves `metrics` until `shutdown`; returns the task and
/// the bound port.
pub async fn start(
    endpoint: &MetricsEndpoint,
    network: &dyn Network,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(tokio::task::JoinHandle<()>, u16), MetricsBindError> {
    let (listener, port) = network
        .listen(&endpoint.host, endpoint.port)
        .await
        .map_err(|source| MetricsBindError {
            address: endpoint.describe(endpoint.port),
            source,
        })?;
    info!(address = %endpoint.describe(port), "metrics endpoint listening (GET {METRICS_PATH})");
    Ok((tokio::spawn(serve(listener, metrics, shutdown)), port))
}

/// Accepts connections until `shutdown` is cancelled.
pub async fn serve<L: Listener>(mut listener: L, metrics: Metrics, shutdown: CancellationToken) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        if connections.len() >= CONNECTIONS_MAX {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                _ = connections.join_next() => continue,
            }
        }
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let metrics = metrics.clone();
                    connections.spawn(async move {
                        if let Err(e) = answer(stream, &metrics).await {
                            debug!(%peer, error = %e, "metrics connection ended");
                        }
                    });
                }
                Err(e) => {
                    warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

/// Routes a request head (everything up to the blank line).
fn route(head: &[u8]) -> Route {
    let Some(line) = head
        .split(|b| *b == b'\n')
        .next()
        .and_then(|l| std::str::from_utf8(l).ok())
    else {
        return Route::BadRequest;
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return Route::BadRequest;
    }
    if method != "GET" && method != "HEAD" {
        return Route::MethodNotAllowed;
    }
    let path = target.split(['?', '#']).next().unwrap_or_default();
    if path == METRICS_PATH {
        Route::Metrics
    } else {
        Route::NotFound
    }
}

/// Reads one request head and answers it.
async fn answer(mut stream: Box<dyn Stream>, metrics: &Metrics) -> std::io::Result<()> {
    let head = tokio::time::timeout(REQUEST_READ_TIMEOUT, read_head(&mut stream))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request head timeout"))??;
    let is_head = head.starts_with(b"HEAD ");
    let (status, content_type, body) = match route(&head) {
        Route::Metrics => ("200 OK", CONTENT_TYPE, metrics.encode()),
        Route::NotFound => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            format!("not found: metrics are at {METRICS_PATH}\n"),
        ),
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_string(),
        ),
        Route::BadRequest => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "bad request\n".to_string(),
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !is_head {
        response.extend_from_slice(body.as_bytes());
    }
    tokio::time::timeout(RESPONSE_WRITE_TIMEOUT, async {
        stream.write_all(&response).await?;
        stream.shutdown().await
    })
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "response write timeout"))?
}

/// Reads until the blank line that ends a request head (at most [`REQUEST_HEAD_MAX_BYTES`]).
async fn read_head(stream: &mut Box<dyn Stream>) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(head);
        }
        if head.len() >= REQUEST_HEAD_MAX_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "request head too large",
            ));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            // The client closed its side: answer what arrived if it holds a request line.
            return if head.contains(&b'\n') {
                Ok(head)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        head.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: only GET/HEAD of /metrics is served; other paths 404, other methods 405,
    // garbage 400 (issue 7, "Metrics").
    #[test]
    fn routes_requests() {
        let cases: [(&[u8], Route); 7] = [
            (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Route::Metrics),
            (b"GET /metrics?x=1 HTTP/1.0\r\n\r\n", Route::Metrics),
            (b"HEAD /metrics HTTP/1.1\r\n\r\n", Route::Metrics),
            (b"GET / HTTP/1.1\r\n\r\n", Route::NotFound),
            (b"GET /metricsx HTTP/1.1\r\n\r\n", Route::NotFound),
            (b"POST /metrics HTTP/1.1\r\n\r\n", Route::MethodNotAllowed),
            (b"\x00\x00\x00\x10garbage\r\n\r\n", Route::BadRequest),
        ];
        for (head, expected) in cases {
            assert_eq!(route(head), expected, "{}", String::from_utf8_lossy(head));
        }
    }

    // Shows: metrics.port unset or -1 is off; a port turns it on at the default host unless
    // metrics.host says otherwise; a bad value names the key.
    #[test]
    fn reads_config() {
        let props = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let read = |pairs: &[(&str, &str)]| MetricsEndpoint::from_properties(&props(pairs), "h");
        assert_eq!(read(&[]).unwrap(), None);
        assert_eq!(read(&[("metrics.port", "-1")]).unwrap(), None);
        assert_eq!(
            read(&[("metrics.port", "9464")]).unwrap(),
            Some(MetricsEndpoint {
                host: "h".into(),
                port: 9464
            })
        );
        assert_eq!(
            read(&[("metrics.port", " 0 "), ("metrics.host", "127.0.0.1")]).unwrap(),
            Some(MetricsEndpoint {
                host: "127.0.0.1".into(),
                port: 0
            })
        );
        for bad in ["65536", "-2", "x", ""] {
            let err = read(&[("metrics.port", bad)]).unwrap_err().to_string();
            assert!(err.contains("metrics.port"), "{bad}: {err}");
        }
    }
}
