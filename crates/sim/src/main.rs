//! `keel-sim`: run scenario files, the randomized fault search, the determinism check and the
//! classic-vs-Keel report.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use keel_sim::report::{self, Row};
use keel_sim::runner::{self, Outcome};
use keel_sim::scenario::{self, Mode as ScenarioMode, Scenario};
use keel_sim::search;
use keel_sim::world::Mode;

#[derive(Parser)]
#[command(name = "keel-sim", about = "Keel's deterministic cluster simulator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Keel,
    Classic,
}

#[derive(Subcommand)]
enum Command {
    /// Runs scenario files (or every `*.scenario` in a directory) in the modes they name.
    Run {
        /// Scenario files or directories.
        paths: Vec<PathBuf>,
        /// Only this mode.
        #[arg(long, value_enum)]
        mode: Option<ModeArg>,
        /// The seed (network latencies, ids).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print every event as it happens.
        #[arg(long)]
        trace: bool,
    },
    /// Randomized fault search over seeds; exits non-zero if any seed violates an invariant.
    Search {
        /// How many seeds.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Run only this seed (with --trace to see what happened).
        #[arg(long)]
        seed: Option<u64>,
        /// Simulated seconds of faults per seed.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Seeds run in parallel (each is single-threaded).
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        #[arg(long)]
        trace: bool,
    },
    /// Runs a seed twice and compares the trace hashes.
    Determinism {
        #[arg(long, default_value_t = 7)]
        seed: u64,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Runs every scenario in both modes and prints (or writes) docs/durability.md.
    Report {
        /// Scenario files or directories (default: crates/sim/scenarios).
        paths: Vec<PathBuf>,
        /// Write the whole report to this file instead of printing the table.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if std::env::var_os("KEEL_SIM_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("KEEL_SIM_LOG"))
            .with_writer(std::io::stderr)
            .try_init();
    }
    match cli.command {
        Command::Run {
            paths,
            mode,
            seed,
            trace,
        } => run(&paths, mode, seed, trace),
        Command::Search {
            seeds,
            start,
            seed,
            seconds,
            jobs,
            trace,
        } => {
            let range = match seed {
                Some(s) => s..s + 1,
                None => start..start + seeds,
            };
            search_cmd(range, Duration::from_secs(seconds), jobs, trace)
        }
        Command::Determinism { seed, seconds } => {
            let a = search::run_seed(seed, Duration::from_secs(seconds), false);
            let b = search::run_seed(seed, Duration::from_secs(seconds), false);
            println!(
                "seed {seed}: trace hashes {:016x} and {:016x} ({} steps, {} steps)",
                a.trace_hash, b.trace_hash, a.steps, b.steps
            );
            if a.trace_hash == b.trace_hash && a.steps == b.steps {
                println!("deterministic");
                ExitCode::SUCCESS
            } else {
                println!("NOT deterministic");
                ExitCode::FAILURE
            }
        }
        Command::Report { paths, out, seed } => report_cmd(&paths, out.as_deref(), seed),
    }
}

fn scenario_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let paths = if paths.is_empty() {
        vec![PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios"
        ))]
    } else {
        paths.to_vec()
    };
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "scenario"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path);
        }
    }
    Ok(files)
}

fn load(path: &Path) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    scenario::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn modes(s: &Scenario, only: Option<ModeArg>) -> Vec<Mode> {
    s.modes
        .iter()
        .map(|m| match m {
            ScenarioMode::Keel => Mode::Keel,
            ScenarioMode::Classic => Mode::Classic,
        })
        .filter(|m| match only {
            Some(ModeArg::Keel) => *m == Mode::Keel,
            Some(ModeArg::Classic) => *m == Mode::Classic,
            None => true,
        })
        .collect()
}

fn describe(o: &Outcome) -> String {
    let parts: Vec<String> = o
        .partitions
        .iter()
        .map(|p| {
            format!(
                "{}-{}: {} acked, lost {}, offline {:.1}s, leader {}",
                p.tp.0,
                p.tp.1,
                p.acked,
                p.lost.map_or("?".to_string(), |n| n.to_string()),
                p.offline.as_secs_f64(),
                p.leader
                    .map_or("none".to_string(), |(b, e)| format!("{b} (epoch {e})"))
            )
        })
        .collect();
    parts.join("; ")
}

fn run(paths: &[PathBuf], only: Option<ModeArg>, seed: u64, trace: bool) -> ExitCode {
    let files = match scenario_files(paths) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("keel-sim: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = 0;
    for file in &files {
        let scenario = match load(file) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("keel-sim: {e}");
                failed += 1;
                continue;
            }
        };
        for mode in modes(&scenario, only) {
            let started = Instant::now();
            let o = runner::run(&scenario, mode, seed, trace);
            let wall = started.elapsed();
            match &o.failure {
                None => println!(
                    "PASS {} [{}] {:.1}s simulated in {:.1}s, trace {:016x}: {}",
                    file.display(),
                    mode.name(),
                    o.sim_time.as_secs_f64(),
                    wall.as_secs_f64(),
                    o.trace_hash,
                    describe(&o)
                ),
                Some(f) => {
                    failed += 1;
                    println!(
                        "FAIL {} [{}] seed {seed}: {f}\n  replay: cargo run --release -p keel-sim -- run {} --mode {} --seed {seed} --trace",
                        file.display(),
                        mode.name(),
                        file.display(),
                        mode.name()
                    );
                }
            }
        }
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        println!("{failed} failed");
        ExitCode::FAILURE
    }
}

fn search_cmd(
    seeds: std::ops::Range<u64>,
    seconds: Duration,
    jobs: usize,
    trace: bool,
) -> ExitCode {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(seeds.start));
    let failures = Arc::new(Mutex::new(Vec::new()));
    // Storage faults injected, and the seeds that drew them.
    let disk = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let total = seeds.end - seeds.start;
    let mut workers = Vec::new();
    for _ in 0..jobs.max(1) {
        let next = next.clone();
        let failures = failures.clone();
        let disk = disk.clone();
        let end = seeds.end;
        workers.push(std::thread::spawn(move || loop {
            let seed = next.fetch_add(1, Ordering::SeqCst);
            if seed >= end {
                return;
            }
            // Each seed on its own thread, so a panic is reported as that seed's failure.
            let result = std::thread::Builder::new()
                .name(format!("seed-{seed}"))
                .spawn(move || search::run_seed(seed, seconds, trace))
                .expect("spawn a seed thread")
                .join();
            if let Ok(o) = &result {
                disk.0.fetch_add(o.disk_faults, Ordering::SeqCst);
                disk.1.fetch_add(u64::from(o.disk_faults > 0), Ordering::SeqCst);
            }
            match result {
                Ok(o) if o.failures.is_empty() => println!(
                    "seed {seed}: ok ({} faults, {} of the disk, {} acks=all records, {}{} steps, {:.1}s, trace {:016x}) {}",
                    o.faults,
                    o.disk_faults,
                    o.acked,
                    o.txns.map_or(String::new(), |(c, a, u, read)| format!(
                        "{c} transactions committed, {a} aborted, {u} undecided by their producer, {read} records read committed ({} transformed exactly once), ",
                        o.etl_outputs
                    )),
                    o.steps,
                    o.wall.as_secs_f64(),
                    o.trace_hash,
                    o.swarm
                ),
                Ok(o) => {
                    println!(
                        "seed {seed}: FAIL {}\n  {}\n  replay: cargo run --release -p keel-sim -- search --seed {seed} --seconds {} --trace",
                        o.swarm,
                        o.failures.join("\n  "),
                        seconds.as_secs()
                    );
                    failures.lock().unwrap_or_else(|e| e.into_inner()).push(seed);
                }
                Err(_) => {
                    println!(
                        "seed {seed}: FAIL (panicked)\n  replay: cargo run --release -p keel-sim -- search --seed {seed} --seconds {} --trace",
                        seconds.as_secs()
                    );
                    failures.lock().unwrap_or_else(|e| e.into_inner()).push(seed);
                }
            }
        }));
    }
    for w in workers {
        let _ = w.join();
    }
    let failed = failures.lock().unwrap_or_else(|e| e.into_inner()).clone();
    println!(
        "{total} seeds, {} failed, {} storage faults in {} seeds, {:.0}s wall{}",
        failed.len(),
        disk.0.load(Ordering::SeqCst),
        disk.1.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(": {failed:?}")
        }
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn report_cmd(paths: &[PathBuf], out: Option<&Path>, seed: u64) -> ExitCode {
    let files = match scenario_files(paths) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("keel-sim: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut rows = Vec::new();
    let mut failed = false;
    for file in files {
        let scenario = match load(&file) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("keel-sim: {e}");
                return ExitCode::FAILURE;
            }
        };
        let outcomes: Vec<Outcome> = [Mode::Keel, Mode::Classic]
            .into_iter()
            .filter(|m| modes(&scenario, None).contains(m))
            .map(|m| runner::run(&scenario, m, seed, false))
            .collect();
        for o in &outcomes {
            if let Some(f) = &o.failure {
                failed = true;
                eprintln!("FAIL {} [{}]: {f}", file.display(), o.mode.name());
            }
        }
        rows.push(Row {
            file,
            scenario,
            outcomes,
        });
    }
    let table = report::table(&rows);
    match out {
        None => print!("{table}"),
        Some(path) => {
            let text = report::document(&rows, &table, seed);
            if let Err(e) = std::fs::write(path, text) {
                eprintln!("keel-sim: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            println!("wrote {}", path.display());
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
