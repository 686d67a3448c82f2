//! The `keel` command: format log directories, run a broker, or run a ready-made local
//! development broker.

mod acls;
mod admin;
mod alloc_guard;
mod bench;
mod dev_secure;
mod groups;
mod quotas;
mod records;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use base64::Engine;
use clap::{Args, Parser, Subcommand};
use keel_log::storage::{OsStorage, Storage};
use keel_log::LogDir;
use keel_node::clock::{Clock, SystemClock};
use keel_node::config::{self, BrokerConfig};
use keel_node::net::TcpNetwork;
use tokio_util::sync::CancellationToken;
use tracing::info;
use uuid::Uuid;

#[global_allocator]
static GLOBAL: alloc_guard::GuardedAllocator = alloc_guard::GuardedAllocator;

#[derive(Parser, Debug)]
#[command(
    name = "keel",
    version,
    about = "A Kafka-compatible, durability-first log broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Format the log directories named by a config file (like kafka-storage.sh format).
    Format {
        #[command(flatten)]
        config: ConfigArgs,
        /// Cluster id (Kafka's 22-character URL-safe base64 UUID, as `keel random-cluster-id`
        /// prints); generated when omitted.
        #[arg(long, short = 't')]
        cluster_id: Option<String>,
        /// Kafka's `kafka-storage.sh format --standalone`: this controller is the whole quorum.
        /// Checks that the config says so (no other voter; Keel's quorum is the static one of
        /// the config, so nothing more is written).
        #[arg(long, short = 's')]
        standalone: bool,
        /// Kafka's `kafka-storage.sh format --add-scram`: a SCRAM credential the new cluster
        /// starts with, e.g. 'SCRAM-SHA-512=[name=admin,password=admin-secret]' (also
        /// `iterations=`, `salt=` and `saltedpassword=`, base64). Repeatable. Written where this
        /// node's controller reads it at its first start (a broker-only node has none).
        #[arg(
            long = "add-scram",
            short = 'S',
            value_name = "MECHANISM=[name=...,password=...]"
        )]
        add_scram: Vec<String>,
    },
    /// Run a broker from a config file.
    Server {
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Run a local development broker: formats on first use, data under --data-dir.
    Dev {
        /// Where the data lives.
        #[arg(long, default_value = "./keel-data")]
        data_dir: PathBuf,
        /// Client port on 127.0.0.1.
        #[arg(long, default_value_t = 9092)]
        port: u16,
        /// Controllers in the Raft quorum (1, 3 or 5); the cluster survives the loss of any
        /// minority of them.
        #[arg(long, default_value_t = 3, value_parser = parse_controller_count)]
        controllers: u16,
        /// Extra broker properties (`key=value`), applied last.
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Port of the Prometheus endpoint (`http://127.0.0.1:PORT/metrics`) every node of the
        /// dev cluster reports into [default: 9464; when 9464 is taken, dev runs without it and
        /// says so].
        #[arg(long, value_name = "PORT")]
        metrics_port: Option<u16>,
        /// Serve no metrics endpoint.
        #[arg(long)]
        no_metrics: bool,
        /// SASL_SSL everywhere (clients, replication, controllers) with a throwaway CA and a
        /// SCRAM-SHA-512 admin user made under <data-dir>/secure; prints the client settings.
        #[arg(long)]
        secure: bool,
    },
    /// Print a new random cluster id (Kafka's `kafka-storage.sh random-uuid`).
    #[command(alias = "random-uuid")]
    RandomClusterId,
    /// Topics of a running cluster: create, list, describe (leader, ISR, ELR, LastKnownELR,
    /// what a leaderless partition waits for), delete.
    Topics {
        #[command(flatten)]
        bootstrap: admin::Bootstrap,
        #[command(subcommand)]
        command: admin::TopicsCommand,
    },
    /// Configs of a topic, a broker or the cluster default: get, set.
    Configs {
        #[command(flatten)]
        bootstrap: admin::Bootstrap,
        #[command(subcommand)]
        command: admin::ConfigsCommand,
    },
    /// Elect leaders: the preferred replica, an unclean election (KIP-966 unclean recovery), or
    /// a named broker.
    Elect {
        #[command(flatten)]
        bootstrap: admin::Bootstrap,
        #[command(flatten)]
        args: admin::ElectArgs,
    },
    /// Consumer groups: list, describe (members, committed offsets, lag), reset offsets, delete.
    Groups {
        #[command(flatten)]
        bootstrap: admin::Bootstrap,
        #[command(subcommand)]
        command: groups::GroupsCommand,
    },
    /// ACLs of a running cluster: list, add, remove (the options of kafka-acls.sh).
    Acls {
        #[command(flatten)]
        bootstrap: admin::Bootstrap,
        #[command(subcommand)]
        command: acls::AclsCommand,
    },
    /// Client quotas of a running cluster: list, set (producer_byte_rate, consumer_byte_rate per
    /// user and/or client id).
    Quotas {
        #[command(flatten)]
        bootstrap: admin::Bootstrap,
        #[command(subcommand)]
        command: quotas::QuotasCommand,
    },
    /// Records of a running cluster: delete every record below an offset (DeleteRecords, like
    /// kafka-delete-records.sh).
    Records {
        #[command(flatten)]
        bootstrap: admin::Bootstrap,
        #[command(subcommand)]
        command: records::RecordsCommand,
    },
    /// Partitions that are offline (and what each waits for), under min ISR or under-replicated.
    Status {
        #[command(flatten)]
        bootstrap: admin::Bootstrap,
        #[command(flatten)]
        args: admin::StatusArgs,
    },
    /// Drive a running cluster with producers and consumers; print throughput and latency.
    Bench(bench::BenchArgs),
    /// Run golden controller cases (TOML, format in docs/testing-golden.md); exits non-zero if
    /// any case fails.
    Golden {
        /// Case files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// A small runtime for one admin command.
fn admin_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

#[derive(Args, Debug)]
struct ConfigArgs {
    /// A Kafka-style `.properties` file.
    #[arg(long, short = 'c')]
    config: PathBuf,
    /// Properties (`key=value`) that override the file's.
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

/// Runs the command; an error is printed as one line (its causes joined with `: `) and exits 1 —
/// never anyhow's report with a backtrace, which `main` returning the error would print when
/// `RUST_BACKTRACE` is set.
fn main() -> std::process::ExitCode {
    init_logging();
    match run_command(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes joined with `: `, leaving out a cause its message already ends with
/// (errors that print their source themselves).
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            // openraft reports every vote and every retry to an unreachable voter; Keel logs
            // what matters (active/standby changes, the quorum stopping). `KEEL_LOG=info,
            // openraft=info` shows Raft's own lines.
            tracing_subscriber::EnvFilter::try_from_env("KEEL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn run_command(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Format {
            config,
            cluster_id,
            standalone,
            add_scram,
        } => {
            if let Some(id) = &cluster_id {
                check_cluster_id(id)?;
            }
            let props = load_props(&config.config, &config.overrides)?;
            let cluster_id = cluster_id.unwrap_or_else(random_cluster_id);
            if standalone {
                check_standalone(&props)?;
            }
            // Refused before anything is written.
            let bootstrap =
                keel_node::controller_server::bootstrap::parse_add_scrams(&add_scram, &SystemClock)
                    .map_err(anyhow::Error::msg)?;
            let mut metadata_dir = None;
            let (node_id, dirs) = match Role::of(&props)? {
                Role::Broker => {
                    let config = BrokerConfig::from_properties(&props)?;
                    let mut dirs = config.log_dirs.clone();
                    match keel_node::runtime::LocalController::for_broker(&config)? {
                        // Combined mode with its own metadata.log.dir formats that too.
                        keel_node::runtime::LocalController::Combined(c) => {
                            if !dirs.contains(&c.metadata_log_dir) {
                                dirs.push(c.metadata_log_dir.clone());
                            }
                            metadata_dir = Some(c.metadata_log_dir);
                        }
                        keel_node::runtime::LocalController::InProcess(c) => {
                            metadata_dir = Some(c.metadata_log_dir);
                        }
                        keel_node::runtime::LocalController::None => {}
                    }
                    (config.node_id, dirs)
                }
                Role::Controller => {
                    let config =
                        keel_node::controller_server::ControllerServerConfig::from_properties(
                            &props,
                        )?;
                    metadata_dir = Some(config.metadata_log_dir.clone());
                    (config.node_id, vec![config.metadata_log_dir])
                }
            };
            format_dirs(node_id, &dirs, &cluster_id)?;
            if !bootstrap.is_empty() {
                match &metadata_dir {
                    Some(dir) => {
                        keel_node::controller_server::bootstrap::write(
                            &OsStorage::new(),
                            dir,
                            &bootstrap,
                        )?;
                        println!(
                            "Wrote {} SCRAM credential(s) to the bootstrap metadata in {}",
                            bootstrap.len(),
                            dir.display()
                        );
                    }
                    None => eprintln!(
                        "keel: --add-scram ignored: this node runs no controller \
                         (process.roles=broker); format the controllers with it"
                    ),
                }
            }
            println!(
                "Formatted {} log dir(s) for cluster {cluster_id}",
                dirs.len()
            );
            Ok(())
        }
        Command::Server { config } => {
            let props = load_props(&config.config, &config.overrides)?;
            match Role::of(&props)? {
                Role::Broker => run(BrokerConfig::from_properties(&props)?),
                Role::Controller => run_controller(&props),
            }
        }
        Command::Dev {
            data_dir,
            port,
            controllers,
            overrides,
            metrics_port,
            no_metrics,
            secure,
        } => {
            // Checked before anything is formatted (the nodes' configs check it again).
            let mut asked = BTreeMap::new();
            apply_overrides(&mut asked, &overrides)?;
            config::check_security(&asked)?;
            dev(
                &data_dir,
                port,
                controllers,
                &overrides,
                (!no_metrics).then_some(metrics_port),
                secure,
            )
        }
        Command::Bench(args) => bench::run(args),
        Command::Topics { bootstrap, command } => {
            bootstrap.install_network()?;
            admin_runtime()?.block_on(admin::topics(bootstrap, command))
        }
        Command::Groups { bootstrap, command } => {
            bootstrap.install_network()?;
            admin_runtime()?.block_on(groups::groups(bootstrap, command))
        }
        Command::Acls { bootstrap, command } => {
            bootstrap.install_network()?;
            admin_runtime()?.block_on(acls::acls(bootstrap, command))
        }
        Command::Quotas { bootstrap, command } => {
            bootstrap.install_network()?;
            admin_runtime()?.block_on(quotas::quotas(bootstrap, command))
        }
        Command::Records { bootstrap, command } => {
            bootstrap.install_network()?;
            admin_runtime()?.block_on(records::records(bootstrap, command))
        }
        Command::Configs { bootstrap, command } => {
            bootstrap.install_network()?;
            admin_runtime()?.block_on(admin::configs(bootstrap, command))
        }
        Command::Elect { bootstrap, args } => {
            bootstrap.install_network()?;
            admin_runtime()?.block_on(admin::elect(bootstrap, args))
        }
        Command::Status { bootstrap, args } => {
            bootstrap.install_network()?;
            admin_runtime()?.block_on(admin::status(bootstrap, args))
        }
        Command::Golden { files } => golden(&files),
        Command::RandomClusterId => {
            println!("{}", random_cluster_id());
            Ok(())
        }
    }
}

/// Runs every case of every file; prints each file's report.
fn golden(files: &[PathBuf]) -> anyhow::Result<()> {
    let (mut passed, mut failed) = (0, 0);
    for file in files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let report = keel_controller::golden::run(&text);
        println!("== {}\n{report}", file.display());
        passed += report.passed_count();
        failed += report.failed();
        if !report.passed() && report.failed() == 0 {
            // A file that does not parse fails as a whole.
            failed += 1;
        }
    }
    println!("golden: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// Kafka's cluster-id form: a random UUID as 22 characters of URL-safe base64, never one that
/// starts with `-` (it would read as an option when passed to `keel format --cluster-id`).
fn random_cluster_id() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SystemClock.new_kafka_id().as_bytes())
}

/// Characters of Kafka's cluster id: a 16-byte UUID in URL-safe base64 without padding.
const CLUSTER_ID_CHARS: usize = 22;

/// Refuses a cluster id that is not Kafka's form (`Uuid.fromString`: URL-safe base64 of 16
/// bytes), as `kafka-storage.sh format -t` does, before anything is written. Like Java's
/// decoder, the unused low bits of the last character are not checked (Kafka's documentation
/// uses `MkU3OEVBNTcwNTJENDM2Qk`, whose last character has them set).
fn check_cluster_id(id: &str) -> anyhow::Result<()> {
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_encode_padding(false)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone)
            .with_decode_allow_trailing_bits(true),
    );
    let decoded = engine.decode(id);
    match decoded {
        Ok(bytes) if id.len() == CLUSTER_ID_CHARS && bytes.len() == 16 => Ok(()),
        _ => anyhow::bail!(
            "cluster id {id:?} is not a Kafka cluster id: {CLUSTER_ID_CHARS} characters of \
             URL-safe base64 encoding a 16-byte UUID (`keel random-cluster-id` prints one)"
        ),
    }
}

/// `keel format --standalone`: the config must run a controller whose quorum is itself alone.
fn check_standalone(props: &BTreeMap<String, String>) -> anyhow::Result<()> {
    let controller = keel_node::controller_server::ControllerServerConfig::from_properties(props)
        .context("--standalone formats a controller")?;
    if let [(id, _)] = controller.quorum_voters.as_slice() {
        if *id == controller.node_id {
            return Ok(());
        }
    }
    anyhow::bail!(
        "--standalone: controller.quorum.voters names {} voters; a standalone controller is the \
         only one (drop --standalone for a quorum of several)",
        controller.quorum_voters.len()
    )
}

fn load_props(path: &Path, overrides: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    let mut props = config::parse_properties(&text)
        .with_context(|| format!("in config file {}", path.display()))?;
    apply_overrides(&mut props, overrides)?;
    Ok(props)
}

/// What `keel server` runs, from `process.roles` (KRaft's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A broker: `process.roles=broker` with `controller.quorum.voters` (a cluster member),
    /// `broker,controller` (KRaft's combined mode), or no `process.roles` and no voters (a
    /// single-node cluster that runs its controller in-process).
    Broker,
    /// `process.roles=controller`: the controller listener over the metadata log.
    Controller,
}

impl Role {
    fn of(props: &BTreeMap<String, String>) -> anyhow::Result<Role> {
        let roles: Vec<&str> = props
            .get("process.roles")
            .map(|r| {
                r.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let controller = roles.contains(&"controller");
        let broker = roles.contains(&"broker");
        if let Some(unknown) = roles
            .iter()
            .find(|r| **r != "controller" && **r != "broker")
        {
            anyhow::bail!(
                "process.roles: unknown role {unknown:?} (expected broker and/or controller)"
            );
        }
        match (broker, controller) {
            (false, true) => Ok(Role::Controller),
            _ => Ok(Role::Broker),
        }
    }
}

/// Runs the controller role until SIGINT/SIGTERM.
fn run_controller(props: &BTreeMap<String, String>) -> anyhow::Result<()> {
    let config = keel_node::controller_server::ControllerServerConfig::from_properties(props)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("keel-controller")
        .build()?;
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        spawn_signal_handler(shutdown.clone())?;
        spawn_reload_handler(config.tls_reload.clone())?;
        keel_node::controller_server::run(
            config,
            Arc::new(OsStorage::new()),
            Arc::new(SystemClock),
            shutdown,
            |addr| eprintln!("keel: controller ready at {addr}"),
        )
        .await?;
        Ok(())
    })
}

fn apply_overrides(
    props: &mut BTreeMap<String, String>,
    overrides: &[String],
) -> anyhow::Result<()> {
    for o in overrides {
        let (key, value) =
            config::parse_override(o).with_context(|| format!("bad --override {o:?}"))?;
        props.insert(key, value);
    }
    Ok(())
}

fn format_dirs(node_id: i32, dirs: &[PathBuf], cluster_id: &str) -> anyhow::Result<()> {
    let storage: Arc<dyn Storage> = Arc::new(OsStorage::new());
    for dir in dirs {
        LogDir::format(storage.clone(), dir, cluster_id, node_id, Uuid::new_v4())
            .with_context(|| format!("cannot format {}", dir.display()))?;
    }
    Ok(())
}

fn run(config: BrokerConfig) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("keel")
        .build()?;
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        spawn_signal_handler(shutdown.clone())?;
        spawn_reload_handler(config.tls_reload.clone())?;
        keel_node::runtime::run(
            config,
            Arc::new(OsStorage::new()),
            Arc::new(SystemClock),
            Arc::new(TcpNetwork),
            shutdown,
            |ready: &keel_node::runtime::Ready| {
                eprintln!("keel: ready bootstrap.servers={}", ready.bootstrap)
            },
        )
        .await
    })
}

/// SIGINT and SIGTERM start an orderly shutdown; a second signal exits at once.
fn spawn_signal_handler(shutdown: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => info!("SIGTERM received"),
            _ = interrupt.recv() => info!("SIGINT received"),
        }
        shutdown.cancel();
        tokio::select! {
            _ = terminate.recv() => {},
            _ = interrupt.recv() => {},
        }
        eprintln!("keel: second signal, exiting without a clean shutdown");
        std::process::exit(130);
    });
    Ok(())
}

/// What a client of `keel dev --secure` needs, printed before the ready line.
fn print_secure_settings(secure: &dev_secure::SecureDev, bootstrap: &str) {
    eprintln!(
        "keel: secure dev cluster: SASL_SSL with {} as user {} (throwaway CA and password in {})",
        dev_secure::MECHANISM,
        dev_secure::ADMIN_USER,
        secure.dir.display()
    );
    eprintln!(
        "keel: ACLs are on (StandardAuthorizer): {} is the super user; other users get what `keel acls add` grants them",
        dev_secure::ADMIN_USER
    );
    eprintln!(
        "keel: Kafka client properties (Java, Kafka's tools --command-config, keel --command-config), also in {}:",
        secure.dir.join("client.properties").display()
    );
    for line in secure.client_properties().lines() {
        eprintln!("    {line}");
    }
    eprintln!(
        "keel: librdkafka (confluent-kafka, kcat), also in {}:",
        secure.dir.join("librdkafka.properties").display()
    );
    for line in secure.librdkafka_properties().lines() {
        eprintln!("    {line}");
    }
    eprintln!(
        "keel: e.g. target/release/keel topics list --bootstrap-server {bootstrap} --command-config {}",
        secure.dir.join("client.properties").display()
    );
}

/// SIGHUP reloads every TLS keystore and truststore (certificate rotation without a restart).
fn spawn_reload_handler(reload: keel_node::security::TlsReload) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            info!("SIGHUP received: reloading TLS keystores and truststores");
            reload.trigger();
        }
    });
    Ok(())
}

/// Brokers `keel dev` runs.
const DEV_BROKERS: u16 = 3;
/// The node id of `keel dev`'s controller.
/// The first dev controller's node id (the others follow: 100, 101, 102, ...).
const DEV_CONTROLLER_ID: i32 = 100;
/// `keel dev`'s Prometheus endpoint port (the OpenTelemetry exporters' customary 9464).
const DEV_METRICS_PORT: u16 = 9464;

fn parse_controller_count(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(n @ (1 | 3 | 5)) => Ok(n),
        _ => Err(format!(
            "{text:?}: a controller quorum has 1, 3 or 5 voters"
        )),
    }
}

/// `keel dev`: a Raft quorum of `controllers` controllers and three brokers in one process
/// (replication factor 3 and `min.insync.replicas=2` for new topics), data under `data_dir`,
/// formatted on first use; brokers on `port`, `port+1`, `port+2` of 127.0.0.1, controllers on
/// free ports. Ctrl-C stops the brokers one by one (controlled shutdown), then the controllers.
/// Every node reports into one metrics registry, served on 127.0.0.1:`metrics_port`
/// (`Some(None)`: the default port, skipped with a message when taken; `None`: no endpoint).
fn dev(
    data_dir: &Path,
    port: u16,
    controllers: u16,
    overrides: &[String],
    metrics_port: Option<Option<u16>>,
    secure: bool,
) -> anyhow::Result<()> {
    let last_port = port.checked_add(DEV_BROKERS - 1).with_context(|| {
        format!(
            "--port {port}: the dev brokers listen on {port} to {port}+{}, beyond 65535",
            DEV_BROKERS - 1
        )
    })?;
    if let Some(warning) = ephemeral_warning(
        "the dev brokers' ports",
        port,
        last_port,
        std::fs::read_to_string(EPHEMERAL_RANGE_FILE)
            .ok()
            .as_deref(),
    ) {
        eprintln!("keel: {warning}");
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    let data_dir = data_dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", data_dir.display()))?;
    let controller_ids: Vec<i32> = (0..i32::from(controllers))
        .map(|i| DEV_CONTROLLER_ID + i)
        .collect();
    let controller_dir = {
        let data_dir = data_dir.clone();
        move |id: i32| data_dir.join(format!("controller-{id}"))
    };
    if data_dir.join("controller").exists() && !controller_dir(DEV_CONTROLLER_ID).exists() {
        anyhow::bail!(
            "{} was made by a keel dev from before the controller quorum (it has controller/, \
             not controller-{DEV_CONTROLLER_ID}/): remove it or pass another --data-dir",
            data_dir.display()
        );
    }
    let secure = match secure {
        true => Some(dev_secure::SecureDev::prepare(&data_dir)?),
        false => None,
    };
    let broker_listener = match secure {
        Some(_) => "SASL_SSL",
        None => "PLAINTEXT",
    };
    let cluster_id = match read_cluster_id(&controller_dir(DEV_CONTROLLER_ID))? {
        Some(id) => id,
        None => {
            let id = random_cluster_id();
            eprintln!("keel: formatting {} for cluster {id}", data_dir.display());
            id
        }
    };
    // --secure: the admin credential is bootstrap metadata of every controller, as
    // `keel format --add-scram` writes it (one record, so every controller has the same salt).
    let admin_credential = secure
        .as_ref()
        .map(dev_secure::SecureDev::admin_credential)
        .transpose()?;
    for id in &controller_ids {
        let dir = controller_dir(*id);
        match read_cluster_id(&dir)? {
            Some(found) if found != cluster_id => anyhow::bail!(
                "{} belongs to cluster {found}, not {cluster_id}",
                dir.display()
            ),
            Some(_) => {
                if let Some(secure) = &secure {
                    secure.check_formatted(&dir)?;
                }
            }
            None => {
                format_dirs(*id, std::slice::from_ref(&dir), &cluster_id)?;
                if let Some(record) = &admin_credential {
                    keel_node::controller_server::bootstrap::write(
                        &OsStorage::new(),
                        &dir,
                        std::slice::from_ref(record),
                    )?;
                }
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("keel-dev")
        .build()?;
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        spawn_signal_handler(shutdown.clone())?;
        // One registry and one endpoint for the whole process; each node labels its series
        // with its node_id.
        let metrics = keel_node::metrics::Metrics::new();
        let metrics_stop = CancellationToken::new();
        let _stop_metrics = metrics_stop.clone().drop_guard();
        let mut metrics_bound = None;
        if let Some(chosen) = metrics_port {
            let endpoint = keel_node::metrics::MetricsEndpoint {
                host: "127.0.0.1".to_string(),
                port: chosen.unwrap_or(DEV_METRICS_PORT),
            };
            let started = keel_node::metrics::http::start(
                &endpoint,
                &TcpNetwork,
                metrics.clone(),
                metrics_stop.clone(),
            )
            .await;
            match started {
                Ok((_, bound)) => metrics_bound = Some(bound),
                // The default port is a convenience: a second dev cluster still starts.
                Err(e) if chosen.is_none() => eprintln!(
                    "keel: {e}; running without metrics (--metrics-port N to pick another port)"
                ),
                Err(e) => {
                    return Err(anyhow::Error::new(e)
                        .context("pass another --metrics-port or --no-metrics"))
                }
            }
        }
        let controller_props = |id: i32, voters: Option<&str>| -> anyhow::Result<_> {
            let mut props = BTreeMap::new();
            props.insert("node.id".to_string(), id.to_string());
            props.insert("process.roles".to_string(), "controller".to_string());
            props.insert(
                "listeners".to_string(),
                "CONTROLLER://127.0.0.1:0".to_string(),
            );
            props.insert(
                "controller.listener.names".to_string(),
                "CONTROLLER".to_string(),
            );
            props.insert(
                "metadata.log.dir".to_string(),
                controller_dir(id).display().to_string(),
            );
            props.insert("default.replication.factor".to_string(), "3".to_string());
            props.insert("min.insync.replicas".to_string(), "2".to_string());
            if let Some(secure) = &secure {
                props.extend(secure.node_props());
                props.insert(
                    "inter.broker.listener.name".to_string(),
                    broker_listener.to_string(),
                );
            }
            if let Some(voters) = voters {
                props.insert("controller.quorum.voters".to_string(), voters.to_string());
            }
            apply_overrides(&mut props, overrides)?;
            let mut config =
                keel_node::controller_server::ControllerServerConfig::from_properties(&props)?;
            config.metrics = metrics.clone();
            config.metrics_endpoint = None;
            Ok(config)
        };
        // Every controller runs on a runtime of its own (as it would in its own process), so
        // the brokers' work on this one cannot delay the quorum's heartbeats. Each binds its
        // listener there first: the voters' addresses are the bound ports.
        let controller_stop = CancellationToken::new();
        let mut starting = Vec::new();
        for id in &controller_ids {
            let config = controller_props(*id, None)?;
            let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
            let (voters_tx, voters_rx) = tokio::sync::oneshot::channel::<
                keel_node::controller_server::ControllerServerConfig,
            >();
            let (ready, started) = tokio::sync::oneshot::channel();
            let stop = controller_stop.clone();
            let task = keel_node::runtime::spawn_controller_runtime(
                &format!("keel-controller-{id}"),
                async move {
                    let (listener, endpoint) =
                        keel_node::controller_server::bind_tcp(&config).await?;
                    let _ = bound_tx.send(endpoint.port);
                    let Ok(config) = voters_rx.await else {
                        return Ok(());
                    };
                    keel_node::controller_server::serve(
                        config,
                        keel_node::controller_server::MetadataDir::Own,
                        Arc::new(OsStorage::new()),
                        Arc::new(SystemClock),
                        Arc::new(TcpNetwork),
                        listener,
                        endpoint,
                        stop,
                        move || {
                            let _ = ready.send(());
                        },
                    )
                    .await
                },
            );
            starting.push((*id, task, bound_rx, voters_tx, started));
        }
        let mut ports = Vec::new();
        let mut controller_tasks = Vec::new();
        let mut waiting = Vec::new();
        for (id, task, bound_rx, voters_tx, started) in starting {
            match bound_rx.await {
                Ok(port) => ports.push((id, port)),
                Err(_) => {
                    controller_stop.cancel();
                    return match task.await {
                        Ok(Err(e)) => Err(anyhow::Error::new(e)
                            .context(format!("dev controller {id} could not start"))),
                        Ok(Ok(())) => Err(anyhow::anyhow!(
                            "dev controller {id} stopped before serving"
                        )),
                        Err(e) => Err(e.into()),
                    };
                }
            }
            waiting.push((id, task, voters_tx, started));
        }
        let voters = ports
            .iter()
            .map(|(id, port)| format!("{id}@127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let last_controller = controller_ids.last().copied();
        for (id, task, voters_tx, started) in waiting {
            let mut config = controller_props(id, Some(&voters))?;
            // The last one to start finds every other voter listening: it campaigns at once
            // on a fresh quorum instead of waiting out the election timeout.
            config.campaign_when_pristine = Some(id) == last_controller;
            let _ = voters_tx.send(config);
            if started.await.is_err() {
                // It stopped before serving: report why instead of starting brokers that
                // would wait for it forever.
                controller_stop.cancel();
                return match task.await {
                    Ok(Err(e)) => Err(anyhow::Error::new(e)
                        .context(format!("dev controller {id} could not start"))),
                    Ok(Ok(())) => Err(anyhow::anyhow!(
                        "dev controller {id} stopped before serving"
                    )),
                    Err(e) => Err(e.into()),
                };
            }
            controller_tasks.push((id, task));
        }

        let mut brokers = Vec::new();
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<(u16, String)>();
        // A broker that stops before it is ready (a port taken, a directory it cannot use)
        // says why here, so the cluster fails at once instead of never printing ready.
        let (failed_tx, mut failed_rx) =
            tokio::sync::mpsc::unbounded_channel::<(u16, anyhow::Error)>();
        for index in 0..DEV_BROKERS {
            let log_dir = data_dir.join(format!("broker-{index}"));
            let mut props = BTreeMap::new();
            props.insert("node.id".to_string(), index.to_string());
            props.insert("process.roles".to_string(), "broker".to_string());
            props.insert("log.dirs".to_string(), log_dir.display().to_string());
            props.insert(
                "listeners".to_string(),
                format!("{broker_listener}://127.0.0.1:{}", port + index),
            );
            if let Some(secure) = &secure {
                props.extend(secure.node_props());
            }
            props.insert("controller.quorum.voters".to_string(), voters.clone());
            props.insert(
                "controller.listener.names".to_string(),
                "CONTROLLER".to_string(),
            );
            props.insert("min.insync.replicas".to_string(), "2".to_string());
            props.insert("default.replication.factor".to_string(), "3".to_string());
            apply_overrides(&mut props, overrides)?;
            let mut config = BrokerConfig::from_properties(&props)?;
            config.metrics = metrics.clone();
            config.metrics_endpoint = None;
            if !log_dir.join("meta.properties").exists() {
                format_dirs(config.node_id, &config.log_dirs, &cluster_id)?;
            }
            let stop = CancellationToken::new();
            let ready_tx = ready_tx.clone();
            let failed_tx = failed_tx.clone();
            let run = keel_node::runtime::run(
                config,
                Arc::new(OsStorage::new()),
                Arc::new(SystemClock),
                Arc::new(TcpNetwork),
                stop.clone(),
                move |ready: &keel_node::runtime::Ready| {
                    let _ = ready_tx.send((index, ready.bootstrap.clone()));
                },
            );
            let task = tokio::spawn(async move {
                match run.await {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        let _ = failed_tx.send((index, anyhow::anyhow!("{e:#}")));
                        Err(e)
                    }
                }
            });
            brokers.push((index, stop, task));
        }
        drop((ready_tx, failed_tx));
        let mut bootstrap = vec![String::new(); usize::from(DEV_BROKERS)];
        let mut ready = 0;
        let mut failed = None;
        while ready < DEV_BROKERS {
            tokio::select! {
                () = shutdown.cancelled() => break,
                got = failed_rx.recv() => if let Some((index, e)) = got {
                    failed = Some(e.context(format!("dev broker {index} could not start")));
                    break;
                },
                got = ready_rx.recv() => match got {
                    Some((index, addr)) => {
                        bootstrap[usize::from(index)] = addr;
                        ready += 1;
                    }
                    None => break,
                },
            }
        }
        if let Some(e) = failed {
            for (_, stop, task) in brokers {
                stop.cancel();
                let _ = task.await;
            }
            controller_stop.cancel();
            for (_, task) in controller_tasks {
                let _ = task.await;
            }
            return Err(e);
        }
        if ready == DEV_BROKERS {
            eprintln!(
                "keel: dev cluster (controllers {}, brokers 0-{}), data in {}",
                voters,
                DEV_BROKERS - 1,
                data_dir.display()
            );
            if let Some(secure) = &secure {
                print_secure_settings(secure, &bootstrap.join(","));
            }
            eprintln!("keel: ready bootstrap.servers={}", bootstrap.join(","));
            if let Some(bound) = metrics_bound {
                eprintln!("keel: metrics: http://127.0.0.1:{bound}/metrics");
            }
        }
        shutdown.cancelled().await;
        // One broker at a time, so each controlled shutdown can move leadership to the others.
        let mut result = Ok(());
        for (index, stop, task) in brokers.into_iter().rev() {
            stop.cancel();
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    eprintln!("keel: broker {index} stopped with an error: {e:#}");
                    result = Err(e);
                }
                Err(e) => result = Err(e.into()),
            }
        }
        controller_stop.cancel();
        for (id, task) in controller_tasks {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    eprintln!("keel: controller {id} stopped with an error: {e}");
                    result = Err(e.into());
                }
                Err(e) => result = Err(e.into()),
            }
        }
        result
    })
}

/// Where Linux keeps the range of ports it picks for outgoing connections.
const EPHEMERAL_RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// A warning when ports `first..=last` lie in the kernel's ephemeral range (`range`: the
/// contents of [`EPHEMERAL_RANGE_FILE`], "32768\t60999"): any outgoing connection may hold one
/// of them, and the listener then cannot bind it (or a restart cannot).
fn ephemeral_warning(what: &str, first: u16, last: u16, range: Option<&str>) -> Option<String> {
    let mut bounds = range?.split_whitespace().map(str::parse::<u32>);
    let (Some(Ok(low)), Some(Ok(high))) = (bounds.next(), bounds.next()) else {
        return None;
    };
    let overlaps = u32::from(first) <= high && u32::from(last) >= low;
    overlaps.then(|| {
        format!(
            "warning: {what} ({first}-{last}) are in the kernel's ephemeral port range \
             ({low}-{high}, {EPHEMERAL_RANGE_FILE}): an outgoing connection may take one of \
             them; pick --port below {low}"
        )
    })
}

/// The cluster id in a formatted directory's `meta.properties`, if it is formatted.
fn read_cluster_id(dir: &Path) -> anyhow::Result<Option<String>> {
    let path = dir.join(keel_log::META_PROPERTIES_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let meta = keel_log::MetaProperties::parse(&path, &text)?;
    Ok(Some(meta.cluster_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: `keel format -t` takes Kafka's cluster-id form only — 22 characters of URL-safe
    // base64 encoding 16 bytes, unused low bits unchecked as in Java (Kafka's documented
    // MkU3OEVBNTcwNTJENDM2Qk) — and every id `keel random-cluster-id` prints (issue 19).
    #[test]
    fn cluster_ids_in_kafkas_form_only() {
        for good in [
            "MkU3OEVBNTcwNTJENDM2Qk",
            "AAAAAAAAAAAAAAAAAAAAAA",
            "_-_-_-_-_-_-_-_-_-_-_w",
        ] {
            assert!(check_cluster_id(good).is_ok(), "{good}");
        }
        for _ in 0..100 {
            let id = random_cluster_id();
            assert!(check_cluster_id(&id).is_ok(), "{id}");
        }
        for bad in [
            "",
            "my-cluster",
            "MkU3OEVBNTcwNTJENDM2Q",
            "MkU3OEVBNTcwNTJENDM2QkA",
            "MkU3OEVBNTcwNTJENDM2Q+",
            "MkU3OEVBNTcwNTJENDM2Qk==",
            "MkU3OEVBNTcwNTJENDM2Q=",
        ] {
            let err = check_cluster_id(bad).unwrap_err().to_string();
            assert!(err.contains("22 characters"), "{bad}: {err}");
        }
    }

    // Shows: ports overlapping the kernel's ephemeral range get a warning naming the range;
    // ports below it, an unreadable or odd range file, get none (issue 20).
    #[test]
    fn ports_in_the_ephemeral_range_are_warned_about() {
        let range = Some("32768\t60999\n");
        assert_eq!(ephemeral_warning("p", 9092, 9094, range), None);
        assert_eq!(ephemeral_warning("p", 32766, 32767, range), None);
        let w = ephemeral_warning("p", 32767, 32769, range).expect("overlaps");
        assert!(w.contains("32768-60999"), "{w}");
        assert!(ephemeral_warning("p", 40000, 40002, range).is_some());
        assert!(ephemeral_warning("p", 60999, 61001, range).is_some());
        assert_eq!(ephemeral_warning("p", 61000, 61002, range), None);
        assert_eq!(ephemeral_warning("p", 40000, 40002, None), None);
        assert_eq!(ephemeral_warning("p", 40000, 40002, Some("garbage")), None);
    }

    // Shows: a CLI error is one line, its causes joined, a cause its message already ends with
    // left out (issue 19: no backtrace, one line).
    #[test]
    fn errors_print_as_one_line() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "address in use");
        let repeating = anyhow::Error::new(io).context("bind 0.0.0.0:9093: address in use");
        assert_eq!(
            one_line(&repeating.context("cannot start")),
            "cannot start: bind 0.0.0.0:9093: address in use"
        );
        let plain = anyhow::anyhow!("root").context("middle").context("top");
        assert_eq!(one_line(&plain), "top: middle: root");
    }
}
