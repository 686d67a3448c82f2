//! Running a broker: open (with recovery), bind, serve, run the periodic tasks, and shut down
//! in order when the cancellation token fires.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use keel_log::storage::Storage;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::broker::Broker;
use crate::clock::Clock;
use crate::config::BrokerConfig;
use crate::server;

/// Shortest period of the flush checker (flush.ms is checked at this granularity at most).
const FLUSH_CHECK_INTERVAL_MS_MIN: u64 = 100;
/// Longest period of the flush checker, so `flush.ms` topic overrides are honoured even when
/// `log.flush.scheduler.interval.ms` is left at Kafka's "never".
const FLUSH_CHECK_INTERVAL_MS_MAX: u64 = 1_000;

/// Where the broker listens, known once it is bound (the port may have been 0).
#[derive(Debug, Clone)]
pub struct Ready {
    pub local_addr: SocketAddr,
    /// `host:port` clients should use.
    pub bootstrap: String,
}

/// Runs a broker until `shutdown` is cancelled, then shuts it down cleanly. `on_ready` is
/// called once the listener accepts connections.
pub async fn run(
    config: BrokerConfig,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(&Ready),
) -> anyhow::Result<()> {
    for key in &config.unknown_keys {
        warn!(key = %key, "unknown config key ignored");
    }
    let listener_config = config.listeners[0].clone();
    let advertised = config.advertised().clone();
    let broker = {
        let (config, storage, clock) = (config.clone(), storage.clone(), clock.clone());
        tokio::task::spawn_blocking(move || Broker::open(config, storage, clock)).await??
    };
    let broker = Arc::new(broker);
    let bind_host = if listener_config.host.is_empty() {
        "0.0.0.0".to_string()
    } else {
        listener_config.host.clone()
    };
    let listener = TcpListener::bind((bind_host.as_str(), listener_config.port))
        .await
        .map_err(|e| {
            anyhow::anyhow!("cannot listen on {bind_host}:{}: {e}", listener_config.port)
        })?;
    let local_addr = listener.local_addr()?;
    let port = if advertised.port == 0 {
        local_addr.port()
    } else {
        advertised.port
    };
    let ready = Ready {
        local_addr,
        bootstrap: format!("{}:{port}", advertised.host),
    };
    info!(
        node_id = broker.config.node_id,
        cluster_id = %broker.cluster_id,
        broker_epoch = broker.broker_epoch,
        %local_addr,
        "broker started"
    );
    on_ready(&ready);

    let tasks = CancellationToken::new();
    let server_task = tokio::spawn(server::serve(listener, broker.clone(), shutdown.clone()));
    let background = spawn_background(broker.clone(), tasks.clone());

    shutdown.cancelled().await;
    info!("shutting down");
    tasks.cancel();
    let _ = server_task.await;
    for task in background {
        let _ = task.await;
    }
    let closing = broker.clone();
    tokio::task::spawn_blocking(move || closing.shutdown()).await??;
    Ok(())
}

fn spawn_background(
    broker: Arc<Broker>,
    stop: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let flush_ms = broker
        .config
        .log_flush_scheduler_interval_ms
        .clamp(FLUSH_CHECK_INTERVAL_MS_MIN, FLUSH_CHECK_INTERVAL_MS_MAX);
    let retention_ms = broker.config.log_retention_check_interval_ms.max(1);
    let checkpoint_ms = broker
        .config
        .replica_high_watermark_checkpoint_interval_ms
        .min(broker.config.log_flush_offset_checkpoint_interval_ms)
        .max(1);
    vec![
        periodic(broker.clone(), stop.clone(), flush_ms, |b| {
            b.flush_due_logs()
        }),
        periodic(broker.clone(), stop.clone(), retention_ms, |b| {
            b.apply_retention()
        }),
        periodic(broker, stop, checkpoint_ms, |b| {
            if let Err(e) = b.checkpoint() {
                warn!(error = %e, "checkpoint failed");
            }
        }),
    ]
}

/// Runs `work` every `period_ms` on the blocking pool (it does file IO) until `stop`.
fn periodic(
    broker: Arc<Broker>,
    stop: CancellationToken,
    period_ms: u64,
    work: fn(&Broker),
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_millis(period_ms));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticker.tick() => {
                    let broker = broker.clone();
                    let _ = tokio::task::spawn_blocking(move || work(&broker)).await;
                }
            }
        }
    })
}
