//! The `kmirror` command.
//!
//! `broker` runs the reference broker; `protocol` describes the protocol surface this build
//! speaks; `dump-log` prints partition logs; `mirrors` manages a cluster's mirrors;
//! `quickstart` demonstrates mirroring and failover between two local brokers.
//!
//! Exit codes: 0 success, 1 the command ran and found damage (dump-log), 2 usage or I/O error.

mod cli;

use clap::{Parser, Subcommand};
use cli::failover::{Failover, LagLimits};
use cli::mirrors::MirrorsAction;
use cli::topics::{TopicChange, TopicFilter, TopicSelection};
use kmirror::broker::Broker;
use kmirror::broker::config::{BrokerConfig, parse_properties};
use kmirror::broker::quorum_config::ClusterConfig;
use kmirror::controller::Controller;
use kmirror::controller::quorum::{Quorum, QuorumConfig};
use kmirror::mirror::BrokerHost;
use kmirror::storage::dump;
use kmirror_actors::engine::EngineRuntime;
use kmirror_protocol::errors;
use kmirror_protocol::messages::MirrorApiKey;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Broker-embedded Kafka cluster mirroring (KIP-1279).
#[derive(Debug, Parser)]
#[command(name = "kmirror", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the reference broker until SIGINT or SIGTERM.
    Broker {
        /// A Kafka-style server.properties.
        #[arg(long)]
        config: PathBuf,
    },
    /// Print the KIP-1279 API keys and versions, and the error codes, this build speaks.
    Protocol,
    /// Print the batches of a partition log directory (or one .log segment file), read-only.
    DumpLog {
        /// A partition directory or a segment file.
        path: PathBuf,
    },
    /// Manage the mirrors of a kmirror cluster (like kafka-cluster-mirrors.sh).
    Mirrors(Box<MirrorsArgs>),
    /// Mirror and fail over on this machine with nothing set up first: a source and a
    /// destination broker on free ports, a topic with a steady producer, a mirror, a live
    /// table, then the failover. Ctrl-C stops everything.
    Quickstart {
        /// Seconds of mirroring shown before the failover.
        #[arg(long, default_value_t = 20)]
        mirror_seconds: u64,
        /// Records (of 1,000 bytes) produced per second to the source.
        #[arg(long, default_value_t = 3000)]
        records_per_second: u32,
        /// End after the failover demonstration instead of waiting for Ctrl-C.
        #[arg(long)]
        exit_after_failover: bool,
    },
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("action").required(true).args([
    "create", "list", "delete", "start", "stop", "pause", "resume", "describe", "alter",
    "describe_configs", "failover", "verify"
])))]
struct MirrorsArgs {
    /// A broker of the destination cluster, host:port.
    #[arg(long)]
    bootstrap_server: String,
    /// Create a mirror (needs --mirror and --mirror-config).
    #[arg(long)]
    create: bool,
    /// List the mirrors.
    #[arg(long)]
    list: bool,
    /// Delete a mirror whose topics are all stopped (needs --mirror); they stay, writable.
    #[arg(long)]
    delete: bool,
    /// Start mirroring topics (needs --mirror and --topics).
    #[arg(long)]
    start: bool,
    /// Stop (fail over) mirrored topics: they become writable (needs --mirror and --topics).
    #[arg(long)]
    stop: bool,
    /// Fail over once caught up: wait until every partition of the topics is MIRRORING with a
    /// lag of at most --max-lag records, then stop them; stops nothing if that does not happen
    /// within --timeout (needs --mirror and --topics; pause the producers first).
    #[arg(long)]
    failover: bool,
    /// With --failover: the greatest lag, in records, a partition may have when stopped (0
    /// unless --max-lag-seconds is given).
    #[arg(long, value_name = "RECORDS")]
    max_lag: Option<i64>,
    /// With --failover: the greatest lag in time a partition may have when stopped: it holds
    /// everything the source wrote up to this many seconds ago.
    #[arg(long, value_name = "SECONDS")]
    max_lag_seconds: Option<f64>,
    /// With --failover: print what a stop would do now (the cut, the records and open
    /// transactions it removes, the lag in records and in time, whether the source answers);
    /// nothing changes.
    #[arg(long, requires = "failover")]
    dry_run: bool,
    /// With --failover: stop every topic of --topics at one point in time, the newest source
    /// time all their partitions have mirrored through (docs/failover.md).
    #[arg(long, requires = "failover")]
    consistent: bool,
    /// With --failover --consistent: cut this many records beyond what a plain stop cuts (the
    /// number the command names when it refuses).
    #[arg(long, value_name = "RECORDS", requires = "consistent")]
    discard_records: Option<i64>,
    /// With --failover: how long to wait for the lag (e.g. 30s, 5m; a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    timeout: String,
    /// Compare the mirror's partitions with the source by their batches' offsets and CRCs
    /// (needs --mirror; every topic of the mirror unless --topics): exits 1 on a difference.
    #[arg(long)]
    verify: bool,
    /// With --verify: start at this offset of each partition (the log start by default).
    #[arg(
        long,
        value_name = "OFFSET",
        requires = "verify",
        conflicts_with = "last"
    )]
    from_offset: Option<i64>,
    /// With --verify: only the last N offsets of each partition.
    #[arg(long, value_name = "N", requires = "verify")]
    last: Option<i64>,
    /// With --verify: the most MB per second each broker reads from the source for it.
    #[arg(long, value_name = "MB_PER_SECOND", requires = "verify")]
    rate: Option<f64>,
    /// Pause mirrored topics (needs --mirror and --topics).
    #[arg(long)]
    pause: bool,
    /// Resume paused topics (needs --mirror and --topics).
    #[arg(long)]
    resume: bool,
    /// Describe mirrors and their partitions (all, or --mirror).
    #[arg(long)]
    describe: bool,
    /// Change a mirror's configs (needs --mirror, and --mirror-config with the keys to set
    /// and/or --delete-config), without a restart: new credentials or certificates are used
    /// from the next connection to the source, new fetch settings by new fetchers at once.
    #[arg(long)]
    alter: bool,
    /// With --alter: keys to remove from the mirror's configs, comma-separated.
    #[arg(long, value_delimiter = ',')]
    delete_config: Vec<String>,
    /// Show a mirror's configs, secrets hidden (needs --mirror).
    #[arg(long)]
    describe_configs: bool,
    /// Topics, comma-separated, or a regular expression over whole topic names (the source's
    /// for --start, the mirror's otherwise).
    #[arg(long, value_delimiter = ',')]
    topics: Vec<String>,
    /// With --describe: only FAILED partitions.
    #[arg(long)]
    failed: bool,
    /// With --describe: redraw the table every SECONDS (2 by default) until Ctrl-C, with each
    /// partition's rate.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
    watch: Option<u64>,
    /// With --start of stopped topics: discard this many records written on this cluster
    /// since their failover (the number the broker names when it refuses the start).
    #[arg(long, value_name = "RECORDS")]
    discard_local_writes: Option<i64>,
    /// With --create: the destination broker checks the configs and the source cluster
    /// (connection, authentication, cluster id, topics) and creates nothing.
    #[arg(long, requires = "create")]
    validate_only: bool,
    /// The mirror's name.
    #[arg(long)]
    mirror: Option<String>,
    /// A properties file with the mirror's configs (bootstrap.servers of the source, ...).
    #[arg(long)]
    mirror_config: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Broker { config } => run_broker(&config),
        Command::Protocol => {
            print_protocol();
            ExitCode::SUCCESS
        }
        Command::DumpLog { path } => dump_log(&path),
        Command::Mirrors(args) => mirrors(*args),
        Command::Quickstart {
            mirror_seconds,
            records_per_second,
            exit_after_failover,
        } => cli::quickstart::run(cli::quickstart::Options {
            mirror_seconds,
            records_per_second,
            exit_after_failover,
        }),
    }
}

/// The topics an optional `--topics` names: `None` without it, a usage error's message when it
/// names nothing or its pattern does not parse.
fn optional_topics(values: Vec<String>) -> Result<Option<TopicSelection>, String> {
    if values.is_empty() {
        return Ok(None);
    }
    TopicSelection::parse(values).map(Some)
}

fn mirrors(args: MirrorsArgs) -> ExitCode {
    let usage = |message: &str| {
        eprintln!("kmirror mirrors: {message}");
        ExitCode::from(2)
    };
    let action = if args.create {
        match (args.mirror, args.mirror_config) {
            (Some(mirror), Some(config)) => MirrorsAction::Create {
                mirror,
                config,
                validate_only: args.validate_only,
            },
            _ => return usage("--create needs --mirror and --mirror-config"),
        }
    } else if args.delete {
        match args.mirror {
            Some(mirror) => MirrorsAction::Delete { mirror },
            None => return usage("--delete needs --mirror"),
        }
    } else if args.alter {
        match args.mirror {
            Some(mirror) if args.mirror_config.is_some() || !args.delete_config.is_empty() => {
                MirrorsAction::Alter {
                    mirror,
                    set: args.mirror_config,
                    delete: args.delete_config,
                }
            }
            _ => return usage("--alter needs --mirror and --mirror-config and/or --delete-config"),
        }
    } else if args.describe_configs {
        match args.mirror {
            Some(mirror) => MirrorsAction::DescribeConfigs { mirror },
            None => return usage("--describe-configs needs --mirror"),
        }
    } else if args.describe {
        // The filter is built before anything is reached: a pattern that is no regular
        // expression is a usage error whether the cluster is up or not.
        let topics = match optional_topics(args.topics) {
            Ok(topics) => topics,
            Err(e) => return usage(&e),
        };
        let topics = match topics.map(TopicFilter::new).transpose() {
            Ok(topics) => topics,
            Err(failure) => return failure.exit(),
        };
        MirrorsAction::Describe {
            mirror: args.mirror,
            topics,
            failed: args.failed,
            json: args.json,
            watch: args
                .watch
                .map(|seconds| std::time::Duration::from_secs(seconds.max(1))),
        }
    } else if args.list {
        MirrorsAction::List { json: args.json }
    } else if args.verify {
        let Some(mirror) = args.mirror else {
            return usage("--verify needs --mirror");
        };
        let start = match (args.from_offset, args.last) {
            (Some(n), _) if n >= 0 => cli::verify::Start::Offset(n),
            (None, Some(n)) if n > 0 => cli::verify::Start::Last(n),
            (None, None) => cli::verify::Start::Beginning,
            _ => return usage("--from-offset must be 0 or more, --last more than 0"),
        };
        let rate = match args.rate {
            Some(mb) if !(0.001..1e9).contains(&mb) => {
                return usage("--rate must be 0.001 (1 KB per second) or more MB per second");
            }
            mb => mb.map(|mb| (mb * 1e6) as i64),
        };
        let topics = match optional_topics(args.topics) {
            Ok(topics) => topics,
            Err(e) => return usage(&e),
        };
        MirrorsAction::Verify(cli::verify::Verify {
            mirror,
            topics,
            start,
            rate,
            json: args.json,
        })
    } else if args.failover {
        let timeout = match cli::failover::parse_duration(&args.timeout) {
            Ok(timeout) => timeout,
            Err(e) => return usage(&e),
        };
        if args.max_lag.is_some_and(|n| n < 0) {
            return usage("--max-lag must be 0 or more");
        }
        let max_lag_ms = match args.max_lag_seconds {
            Some(s) if !(0.0..=1e9).contains(&s) => {
                return usage("--max-lag-seconds must be 0 or more");
            }
            seconds => seconds.map(|s| (s * 1000.0) as i64),
        };
        let (Some(mirror), false) = (args.mirror, args.topics.is_empty()) else {
            return usage("--failover needs --mirror and --topics");
        };
        let topics = match TopicSelection::parse(args.topics) {
            Ok(topics) => topics,
            Err(e) => return usage(&e),
        };
        MirrorsAction::Failover(Failover {
            mirror,
            topics,
            limits: LagLimits {
                records: args.max_lag,
                ms: max_lag_ms,
            },
            timeout,
            dry_run: args.dry_run,
            consistent: args.consistent,
            discard_records: args.discard_records,
            json: args.json,
        })
    } else {
        let change = if args.start {
            TopicChange::Start {
                discard_local_records: args.discard_local_writes.unwrap_or(-1),
            }
        } else if args.stop {
            TopicChange::Stop {
                cut_timestamp_ms: -1,
            }
        } else if args.pause {
            TopicChange::Pause
        } else {
            TopicChange::Resume
        };
        let (Some(mirror), false) = (args.mirror, args.topics.is_empty()) else {
            return usage("--start, --stop, --pause and --resume need --mirror and --topics");
        };
        match TopicSelection::parse(args.topics) {
            Ok(topics) => MirrorsAction::Topics {
                change,
                mirror,
                topics,
            },
            Err(e) => return usage(&format!("{e}; nothing was changed")),
        }
    };
    cli::mirrors::run(&args.bootstrap_server, action)
}

/// Logs to stderr: JSON lines (`kmirror.log.format=json`) or text, coloured on a terminal only.
fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}

/// Transparent huge pages off for this process. The allocator advises them for its segments,
/// and the first touch of each fresh 2 MiB page zeroes all of it at once: a catch-up whose
/// Fetches in flight grow allocates hundreds of megabytes of answer buffers, and on a virtual
/// machine that backs memory on first touch that zeroing ran at 185 MB/s, held both cores for
/// up to a second and doubled the mirror's CPU per GB (docs/design.md §11, "Memory").
fn disable_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::warn!(error = %e, "transparent huge pages could not be turned off for this process");
    }
}

fn run_broker(path: &Path) -> ExitCode {
    let config = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|text| parse_properties(&text).map_err(|e| format!("{}: {e}", path.display())))
        .and_then(|props| {
            BrokerConfig::from_properties(&props).map_err(|e| format!("{}: {e}", path.display()))
        });
    let (config, unknown) = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kmirror broker: {e}");
            return ExitCode::from(2);
        }
    };
    init_logs(config.log_json);
    disable_huge_pages();
    for key in unknown {
        tracing::warn!(key, "unknown configuration key ignored");
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kmirror broker: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(serve_until_signal(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kmirror broker: {e}");
            ExitCode::from(1)
        }
    }
}

/// Runs this node until SIGINT or SIGTERM (or its Raft core stops), along one start-up path
/// per role: a single-node broker, a broker of a cluster (broker-only or combined), or a
/// controller-only node.
async fn serve_until_signal(config: BrokerConfig) -> Result<(), String> {
    if let Some(metrics) = config.metrics_listener {
        kmirror::metrics::install_exporter(metrics)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(address = %format!("http://{metrics}/metrics"), "metrics for Prometheus");
    }
    let Some(cluster) = config.cluster.clone() else {
        // A single node is its own (and only) controller.
        metrics::gauge!(kmirror::metrics::CONTROLLER_ACTIVE).set(1.0);
        metrics::gauge!(kmirror::metrics::FENCED_BROKERS).set(0.0);
        metrics::gauge!(kmirror::metrics::OFFLINE_PARTITIONS).set(0.0);
        let broker = Broker::open(config).map_err(|e| e.to_string())?;
        return serve_broker(broker, None).await;
    };
    if cluster.roles.is_broker() {
        let quorum = start_quorum(&config, cluster).await?;
        let broker = Broker::open_clustered(config, quorum.clone())
            .await
            .map_err(|e| e.to_string())?;
        serve_broker(broker, Some(quorum)).await
    } else {
        // No broker locks the log directory here: the controller holds it for the Raft log.
        let _dir_lock =
            kmirror::storage::LogDirLock::acquire(&config.log_dir).map_err(|e| e.to_string())?;
        let quorum = start_quorum(&config, cluster).await?;
        tracing::info!(
            node = config.node_id,
            "kmirror controller started (no client listener)"
        );
        let failure = until_stop(Some(&quorum)).await?;
        tracing::info!("shutting down");
        quorum.shutdown().await;
        finish(failure)
    }
}

/// Starts this node's member of the metadata quorum (refusing a lost Raft log first).
async fn start_quorum(
    config: &BrokerConfig,
    cluster: ClusterConfig,
) -> Result<Arc<Quorum>, String> {
    // A learner has no vote: with its log gone it takes the quorum's log again.
    if cluster.roles.is_voter() {
        refuse_a_lost_quorum_log(&config.log_dir)?;
    }
    if cluster.secret.is_none() {
        tracing::warn!(
            "the controller listener is unauthenticated: anyone who reaches it can change the \
             metadata; set controller.quorum.secret.file on every node (docs/cluster.md)"
        );
    }
    let quorum = Quorum::start(
        QuorumConfig {
            node_id: config.node_id,
            roles: cluster.roles,
            address: cluster.controller_address,
            voters: cluster.voters,
            listener: cluster.controller_listener,
            dir: config.log_dir.join("__cluster_metadata").join("quorum"),
            request_timeout: std::time::Duration::from_secs(15),
            heartbeat_interval: cluster.heartbeat_interval,
            session_timeout: cluster.session_timeout,
            secret: cluster.secret,
            leader_rebalance: cluster.leader_rebalance,
        },
        Arc::new(std::sync::Mutex::new(Controller::replica())),
    )
    .await
    .map_err(|e| e.to_string())?;
    tracing::info!(address = %cluster.controller_listener, roles = cluster.roles.as_str(), "controller listening");
    Ok(quorum)
}

/// Waits for SIGINT, SIGTERM or, on a node of a cluster, its Raft core stopping: the failure
/// to report then, if any.
async fn until_stop(quorum: Option<&Quorum>) -> Result<Option<String>, String> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let quorum_failed = async {
        match quorum {
            Some(quorum) => quorum.failed().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(None),
        _ = terminate.recv() => Ok(None),
        why = quorum_failed => {
            tracing::error!(error = why, "the metadata quorum stopped on this node: shutting down");
            Ok(Some(format!("the metadata quorum stopped: {why}")))
        }
    }
}

/// How a node that stopped ends: the failure that stopped it, else cleanly.
fn finish(failure: Option<String>) -> Result<(), String> {
    if let Some(failure) = failure {
        return Err(failure);
    }
    tracing::info!("stopped cleanly");
    Ok(())
}

/// Serves clients with `broker` (and, in a cluster, follows `quorum`) until [`until_stop`].
async fn serve_broker(broker: Broker, quorum: Option<Arc<Quorum>>) -> Result<(), String> {
    let address = broker
        .config()
        .listener
        .ok_or("a broker needs a client listener (listeners)")?;
    let broker = broker.into_shared();
    // Replication's figures exist from the start (a single node's stay 0).
    metrics::gauge!(kmirror::metrics::UNDER_REPLICATED).set(0.0);
    metrics::gauge!(kmirror::metrics::UNDER_MIN_ISR).set(0.0);
    metrics::counter!(kmirror::metrics::ISR_SHRINKS).increment(0);
    metrics::counter!(kmirror::metrics::ISR_EXPANDS).increment(0);
    // Changes other nodes make reach this node's image through the quorum.
    let follower = quorum.as_ref().map(|_| broker.follow_metadata());
    // The mirroring engine on its own actix thread; it resumes the mirrors it finds.
    let engine = EngineRuntime::start(BrokerHost(broker.clone()))
        .map_err(|e| format!("starting the mirroring engine: {e}"))?;
    // Mirror partitions resume from `__mirror_state` before clients come: a topic stopped
    // (failed over) before this start takes writes from the first request.
    if let Err(e) = engine
        .engine()
        .settle(std::time::Duration::from_secs(10))
        .await
    {
        return Err(format!("the mirroring engine stopped while starting: {e}"));
    }
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| format!("listening on {address}: {e}"))?;
    tracing::info!(%address, cluster_id = broker.cluster_id(), "kmirror broker started");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(kmirror::broker::server::serve(
        broker.clone(),
        Some(engine.engine().clone()),
        listener,
        stopped,
    ));
    let retention = every(
        &broker,
        broker.config().retention_check_interval_ms,
        |broker, now| {
            let deleted = broker.housekeeping(now);
            if deleted > 0 {
                tracing::info!(segments = deleted, "retention deleted segments");
            }
        },
    );
    // Completing a transaction may wait for other brokers' WriteTxnMarkers: its own task.
    let transactions = {
        let broker = broker.clone();
        let every = std::time::Duration::from_millis(
            broker.config().transaction_cleanup_interval_ms as u64,
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let ended = broker
                    .abort_timed_out_transactions(kmirror::broker::now_ms())
                    .await;
                if ended > 0 {
                    tracing::info!(
                        transactions = ended,
                        "ended timed-out or stalled transactions"
                    );
                }
            }
        })
    };
    // KIP-848 members whose session passed leave their group even when nobody else asks.
    let consumer_groups = every(&broker, 1_000, |broker, _| {
        broker.groups().expire_consumer_members()
    });
    let failure = until_stop(quorum.as_deref()).await?;
    tracing::info!("shutting down");
    // A broker of a cluster hands its leadership over before it stops (not when its Raft
    // core failed: nobody answers it then).
    if quorum.is_some() && failure.is_none() {
        broker
            .controlled_shutdown(std::time::Duration::from_secs(10))
            .await;
    }
    let _ = stop.send(true);
    retention.abort();
    transactions.abort();
    consumer_groups.abort();
    let _ = server.await;
    engine.stop();
    if let Some(follower) = follower {
        follower.abort();
    }
    broker.close().map_err(|e| e.to_string())?;
    if let Some(quorum) = quorum {
        quorum.shutdown().await;
    }
    finish(failure)
}

/// Refuses to start a node of a cluster whose Raft log is gone while its log directory holds
/// data: with an empty log it would vote as a new member under an old id and could drop
/// committed changes (docs/cluster.md). Restore the directory, or give the node a new `node.id`
/// and an empty log directory.
fn refuse_a_lost_quorum_log(log_dir: &Path) -> Result<(), String> {
    let quorum = log_dir.join("__cluster_metadata").join("quorum");
    // The Raft log file is created before anything else in the log directory.
    if quorum.join("log").exists() {
        return Ok(());
    }
    let holds_data = std::fs::read_dir(log_dir)
        .map(|entries| {
            entries
                .flatten()
                .any(|e| !matches!(e.file_name().to_str(), Some(".lock" | "__cluster_metadata")))
        })
        .unwrap_or(false);
    if holds_data {
        return Err(format!(
            "{} has no Raft log but {} holds data: this node's metadata was lost. \
             Restore {}, or start the node under a new node.id with an empty log directory \
             (a node must never rejoin the quorum under its old id with an empty log)",
            quorum.display(),
            log_dir.display(),
            quorum.display()
        ));
    }
    Ok(())
}

/// Runs `job` on a blocking thread every `interval_ms`.
fn every(
    broker: &Arc<Broker>,
    interval_ms: i64,
    job: fn(&Broker, i64),
) -> tokio::task::JoinHandle<()> {
    let broker = broker.clone();
    let every = std::time::Duration::from_millis(interval_ms as u64);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let broker = broker.clone();
            let _ =
                tokio::task::spawn_blocking(move || job(&broker, kmirror::broker::now_ms())).await;
        }
    })
}

fn dump_log(path: &Path) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = dump::dump(path, &mut out);
    // Output already written stays; a failed flush is reported like any other error.
    let flushed = out.flush();
    match (result, flushed) {
        (Ok(summary), Ok(())) if summary.corrupt_batches == 0 && summary.unreadable_bytes == 0 => {
            ExitCode::SUCCESS
        }
        (Ok(_), Ok(())) => ExitCode::from(1),
        (Err(e), _) => {
            eprintln!("kmirror dump-log: {e}");
            ExitCode::from(2)
        }
        (_, Err(e)) => {
            eprintln!("kmirror dump-log: writing output: {e}");
            ExitCode::from(2)
        }
    }
}

fn print_protocol() {
    println!("KIP-1279 APIs (flexible versions, request header v2):");
    println!("{:>5}  {:<20} versions", "key", "name");
    for api in MirrorApiKey::ALL {
        let (min, max) = api.versions();
        println!("{:>5}  {:<20} {min}-{max}", api.key(), api.name());
    }
    println!();
    println!("Error codes:");
    println!("{:>5}  {:<40} {:<9} message", "code", "name", "class");
    for info in errors::all() {
        println!(
            "{:>5}  {:<40} {:<9} {}",
            info.code,
            info.name,
            format!("{:?}", info.class).to_lowercase(),
            info.message
        );
    }
}
