//! One Stepwise node: the engine and its workers, the HTTP server, the optional metrics
//! listener and the optional retention cleaner over one store, started together by
//! [`Node::start`] and stopped together by [`Node::shutdown`]. `stepwise serve`, the
//! in-process `stepwise chat`, the benchmarks and the end-to-end tests all start their
//! servers here, so they run the same thing.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use stepwise_core::SharedClock;
use stepwise_engine::{AgentRegistry, Engine, EngineConfig, ToolSet};
use stepwise_store::{RetentionPolicy, Store};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cleaner::{self, Cleaner};
use crate::listeners::{BoundAddr, Listener, UnixBindError};
use crate::{AppState, ConnectionConfig, ServerConfig};

/// How long [`Node::shutdown`] waits for the HTTP server to finish its requests in flight.
const SERVER_GRACE: Duration = Duration::from_secs(2);
/// How long it waits for the metrics listener, the cleaner and the store's save queue, each.
const PART_GRACE: Duration = Duration::from_secs(1);

/// Where the HTTP server listens.
#[derive(Debug)]
pub enum Listen {
    /// Bind this address (port 0: one the OS picks; [`Node::local_addr`] says which).
    Addr(SocketAddr),
    /// A listener the caller bound already.
    Bound(TcpListener),
    /// A Unix domain socket at this path, mode 0600 (a dead server's socket file is
    /// replaced; a live server's is refused).
    Unix(PathBuf),
}

impl Listen {
    async fn bind(self) -> Result<Listener, NodeError> {
        match self {
            Listen::Addr(addr) => TcpListener::bind(addr)
                .await
                .map(Listener::Tcp)
                .map_err(|source| NodeError::Listen { addr, source }),
            Listen::Bound(listener) => Ok(Listener::Tcp(listener)),
            #[cfg(unix)]
            Listen::Unix(path) => Ok(Listener::Unix(crate::listeners::UnixSocket::bind(&path)?)),
            #[cfg(not(unix))]
            Listen::Unix(path) => Err(NodeError::UnixListen(UnixBindError::Io {
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "Unix sockets need a Unix system",
                ),
            })),
        }
    }
}

/// The retention cleaner's schedule and rules.
#[derive(Clone)]
pub struct CleanerSettings {
    /// Time between two passes (the first runs at start); with `daily_at`, the time before a
    /// failed pass is tried again.
    pub interval: Duration,
    /// Run once a day at this UTC time of day (seconds after midnight) instead, not at start.
    pub daily_at: Option<u32>,
    pub policy: RetentionPolicy,
    /// Whose "now" each pass uses ([`stepwise_core::system_clock`] outside tests).
    pub clock: SharedClock,
}

/// Everything a node is started with. [`NodeSettings::new`] gives a node on a loopback
/// port with the engine's and server's defaults; set the fields that differ.
pub struct NodeSettings {
    /// Workers, lease, max attempts, poll interval, default agent, tool timeout.
    pub engine: EngineConfig,
    pub agents: AgentRegistry,
    pub tools: ToolSet,
    /// Start the engine's workers. Off, nothing runs executions on this node (the HTTP
    /// benchmark measures the API and the store's write path alone).
    pub run_workers: bool,
    /// Auth, body and rate limits, event stream caps, accepted `related_type`s.
    pub server: ServerConfig,
    /// Connection timeouts and cap.
    pub connections: ConnectionConfig,
    pub listen: Listen,
    /// More listeners for the same API (`serve --listen` given several times: a Unix socket
    /// and a TCP port at once).
    pub also_listen: Vec<Listen>,
    /// Also serve `GET /metrics` alone on this address.
    pub metrics_listen: Option<SocketAddr>,
    /// Run the retention cleaner; `None`, no cleaner.
    pub cleaner: Option<CleanerSettings>,
}

impl NodeSettings {
    /// A node with these agents and the built-in tools on `127.0.0.1:0`, the engine's
    /// default configuration, [`ServerConfig::default`] (no limits, open while no key
    /// exists), the default connection limits, workers running, no metrics listener and
    /// no cleaner.
    pub fn new(agents: AgentRegistry) -> Self {
        NodeSettings {
            engine: EngineConfig::default(),
            agents,
            tools: ToolSet::builtin(),
            run_workers: true,
            server: ServerConfig::default(),
            connections: ConnectionConfig::default(),
            listen: Listen::Addr(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
            also_listen: Vec::new(),
            metrics_listen: None,
            cleaner: None,
        }
    }
}

/// Why a node did not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    UnixListen(#[from] UnixBindError),
    #[error("cannot read the listen address")]
    LocalAddr(#[source] std::io::Error),
    #[error("cannot listen on {addr} for metrics")]
    MetricsListen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the metrics listen address")]
    MetricsLocalAddr(#[source] std::io::Error),
}

/// How the parts of a node stopped; each `false` was also logged as a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Every running execution reached a step boundary and went back to the queue within
    /// the grace time (otherwise its lease expires and it resumes on the next start).
    pub workers: bool,
    /// The HTTP server (and the metrics listener, if any) closed its connections in time.
    pub server: bool,
    /// The store's save queue drained.
    pub flushed: bool,
}

/// A running node.
pub struct Node<S: Store> {
    state: AppState<S>,
    addresses: Vec<BoundAddr>,
    metrics_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    metrics: Option<JoinHandle<std::io::Result<()>>>,
    cleaner: Option<Cleaner>,
}

impl<S: Store> Node<S> {
    /// Binds the listeners, builds the engine and the server state over `store`, and
    /// starts the workers, the cleaner, the metrics listener and the HTTP server. Nothing
    /// is started when a listener cannot be bound.
    pub async fn start(settings: NodeSettings, store: S) -> Result<Node<S>, NodeError> {
        Self::start_with(settings, store, crate::Mounts::none()).await
    }

    /// [`Node::start`] with `mounts` served beside the core API (the binary mounts the
    /// front-end protocols: `stepwise_protocols::mounts`).
    pub async fn start_with(
        settings: NodeSettings,
        store: S,
        mounts: crate::Mounts<S>,
    ) -> Result<Node<S>, NodeError> {
        let mut listeners = Vec::with_capacity(1 + settings.also_listen.len());
        for listen in std::iter::once(settings.listen).chain(settings.also_listen) {
            listeners.push(listen.bind().await?);
        }
        let addresses = listeners
            .iter()
            .map(Listener::bound_addr)
            .collect::<Result<Vec<_>, _>>()
            .map_err(NodeError::LocalAddr)?;
        let metrics_listener = match settings.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| NodeError::MetricsListen { addr, source })?,
            ),
            None => None,
        };
        let metrics_addr = match &metrics_listener {
            Some(listener) => Some(listener.local_addr().map_err(NodeError::MetricsLocalAddr)?),
            None => None,
        };

        let engine = Engine::with_tools(
            store.clone(),
            settings.agents,
            settings.tools,
            settings.engine,
        );
        let mut server = settings.server;
        if let Some(cleaner) = &settings.cleaner {
            server.retention = cleaner.policy;
        }
        let state = AppState::new(engine.clone(), server).with_mounts(mounts);
        if settings.run_workers {
            engine.spawn_runners();
        }
        let (stop, stopped) = watch::channel(false);
        let cleaner = settings.cleaner.map(|c| {
            let schedule = match c.daily_at {
                Some(second_of_day) => cleaner::Schedule::DailyAt {
                    second_of_day,
                    retry: c.interval,
                },
                None => cleaner::Schedule::Every(c.interval),
            };
            cleaner::spawn(store, c.policy, schedule, c.clock, stopped.clone())
        });
        let metrics = metrics_listener.map(|listener| {
            tokio::spawn(crate::launch_metrics(
                listener,
                state.clone(),
                until_stopped(stopped.clone()),
            ))
        });
        let connections = settings.connections;
        tracing::info!(
            header_timeout_secs = connections.header_timeout.as_secs(),
            body_timeout_secs = connections.body_timeout.as_secs(),
            idle_timeout_secs = connections.idle_timeout.as_secs(),
            max_connections = connections.max_connections,
            "connection limits"
        );
        let server = tokio::spawn(crate::launch_with(
            listeners,
            state.clone(),
            connections,
            until_stopped(stopped),
        ));
        Ok(Node {
            state,
            addresses,
            metrics_addr,
            stop,
            server,
            metrics,
            cleaner,
        })
    }

    /// The address of the HTTP server's first TCP listener.
    ///
    /// # Panics
    /// When the node listens on Unix sockets only (see [`Node::addresses`]).
    pub fn local_addr(&self) -> SocketAddr {
        self.addresses
            .iter()
            .find_map(|a| match a {
                BoundAddr::Tcp(addr) => Some(*addr),
                BoundAddr::Unix(_) => None,
            })
            .expect("this node listens on no TCP address: see Node::addresses")
    }

    /// Every address the HTTP server listens on, in the order of the settings.
    pub fn addresses(&self) -> &[BoundAddr] {
        &self.addresses
    }

    /// `http://` and [`Node::local_addr`].
    pub fn base_url(&self) -> String {
        format!("http://{}", self.local_addr())
    }

    /// The address of the metrics listener, when there is one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    pub fn engine(&self) -> &Engine<S> {
        &self.state.engine
    }

    /// What the handlers share (engine, configuration, caches).
    pub fn state(&self) -> &AppState<S> {
        &self.state
    }

    pub fn store(&self) -> &S {
        self.state.store()
    }

    /// The graceful stop: no new connections or claims and live event streams end (the
    /// cleaner stops too); running executions stop at their next step boundary within
    /// `grace` and go back to the queue (resumable); requests in flight finish; then the
    /// store's save queue drains.
    pub async fn shutdown(self, grace: Duration) -> Stopped {
        let _ = self.stop.send(true);
        // Workers stop at their next step boundary and give their executions back.
        let workers = self.state.engine.shutdown(grace).await;
        if !workers {
            tracing::warn!(
                "some executions did not reach a step boundary in time; their leases will expire and they resume on the next start"
            );
        }
        let mut server = match tokio::time::timeout(SERVER_GRACE, self.server).await {
            Ok(Ok(Ok(()))) => true,
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %e, "the HTTP server stopped with an error");
                false
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the HTTP server task failed");
                false
            }
            Err(_) => {
                tracing::warn!("open connections did not close in time");
                false
            }
        };
        if let Some(metrics) = self.metrics {
            server &= match tokio::time::timeout(PART_GRACE, metrics).await {
                Ok(Ok(Ok(()))) => true,
                Ok(Ok(Err(e))) => {
                    tracing::warn!(error = %e, "the metrics listener stopped with an error");
                    false
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "the metrics listener task failed");
                    false
                }
                Err(_) => {
                    tracing::warn!("metrics connections did not close in time");
                    false
                }
            };
        }
        if let Some(cleaner) = self.cleaner {
            cleaner.join(PART_GRACE).await;
        }
        let flushed = match tokio::time::timeout(PART_GRACE, self.state.store().flush()).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "draining the save queue failed");
                false
            }
            Err(_) => {
                tracing::warn!("draining the save queue took too long");
                false
            }
        };
        Stopped {
            workers,
            server,
            flushed,
        }
    }
}

/// Resolves once `stop` turns true or its sender is gone (a dropped node stops serving).
async fn until_stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use futures_util::StreamExt;
    use serde_json::{Value, json};
    use stepwise_core::{ManualClock, SessionStatus, Timestamp};
    use stepwise_engine::{DEMO_AGENT, DemoAgent};
    use stepwise_store::{NewSession, SessionPatch, Tenant};
    use stepwise_store_sqlite::{SqliteOptions, SqliteStore};

    use super::*;
    use stepwise_store::prelude::*;

    const DEADLINE: Duration = Duration::from_secs(30);

    fn demo_agents() -> AgentRegistry {
        let mut agents = AgentRegistry::new();
        agents.register(
            DEMO_AGENT,
            DemoAgent::with_step_delay(Duration::from_millis(1)),
        );
        agents
    }

    /// Polls `check` until it answers `Some`, failing after the deadline.
    async fn wait_for<T, F: Future<Output = Option<T>>>(mut check: impl FnMut() -> F) -> T {
        tokio::time::timeout(DEADLINE, async {
            loop {
                if let Some(value) = check().await {
                    return value;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("condition not met before the deadline")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_runs_a_message_serves_metrics_and_stops_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("stepwise.db")).unwrap();
        let settings = NodeSettings {
            metrics_listen: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
            ..NodeSettings::new(demo_agents())
        };
        let node = Node::start(settings, store).await.unwrap();
        let base = node.base_url();
        let metrics_addr = node.metrics_addr().expect("a metrics listener");
        let client = reqwest::Client::new();

        let posted: Value = client
            .post(format!("{base}/v1/messages"))
            .json(&json!({"content": "2+3*4"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let execution = posted["execution"]["id"].as_str().unwrap().to_string();
        let session = posted["session_id"].as_str().unwrap().to_string();
        let done = wait_for(|| {
            let url = format!("{base}/v1/executions/{execution}");
            let client = client.clone();
            async move {
                let body: Value = client.get(url).send().await.ok()?.json().await.ok()?;
                (body["status"] == "completed").then_some(body)
            }
        })
        .await;
        assert_eq!(done["output"], json!("14"), "the workers ran it: {done}");

        let metrics = client
            .get(format!("http://{metrics_addr}/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(metrics.status(), 200);
        assert!(metrics.text().await.unwrap().contains("stepwise_"));

        // A live event stream does not hold up the stop: it ends.
        let stream = client
            .get(format!("{base}/v1/sessions/{session}/events"))
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        let reader = tokio::spawn(async move {
            let mut body = stream.bytes_stream();
            while let Some(Ok(_)) = body.next().await {}
        });

        let stopped = node.shutdown(Duration::from_secs(5)).await;
        assert_eq!(
            stopped,
            Stopped {
                workers: true,
                server: true,
                flushed: true
            }
        );
        tokio::time::timeout(DEADLINE, reader)
            .await
            .expect("the event stream ended")
            .unwrap();
        assert!(
            client.get(format!("{base}/healthz")).send().await.is_err(),
            "nothing listens after the stop"
        );
    }

    #[tokio::test]
    async fn a_taken_address_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("stepwise.db")).unwrap();
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = taken.local_addr().unwrap();
        let settings = NodeSettings {
            listen: Listen::Addr(addr),
            ..NodeSettings::new(demo_agents())
        };
        let Err(error) = Node::start(settings, store).await else {
            panic!("a second listener on {addr} started");
        };
        assert!(matches!(error, NodeError::Listen { addr: a, .. } if a == addr));
        assert_eq!(error.to_string(), format!("cannot listen on {addr}"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pre_bound_listener_is_served_and_the_cleaner_runs() {
        let dir = tempfile::tempdir().unwrap();
        let now = Timestamp::now();
        let clock = ManualClock::new(now.minus_days(100));
        let store = SqliteStore::open_with(
            &dir.path().join("stepwise.db"),
            SqliteOptions {
                clock: clock.clone(),
                ..SqliteOptions::default()
            },
        )
        .unwrap();
        // A session completed 100 days ago: past the default retention.
        let tenant = Tenant::new("t1").unwrap();
        let old = store
            .create_session(
                &tenant,
                NewSession {
                    user_id: "u1".into(),
                    ..NewSession::default()
                },
            )
            .await
            .unwrap();
        store
            .update_session(
                &tenant,
                old.id,
                SessionPatch {
                    status: Some(SessionStatus::Completed),
                    ..SessionPatch::default()
                },
            )
            .await
            .unwrap();
        store.flush().await.unwrap();
        clock.set(now);

        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let settings = NodeSettings {
            listen: Listen::Bound(listener),
            cleaner: Some(CleanerSettings {
                interval: Duration::from_secs(3600),
                daily_at: None,
                policy: RetentionPolicy::default(),
                clock: clock.clone(),
            }),
            ..NodeSettings::new(demo_agents())
        };
        let node = Node::start(settings, store.clone()).await.unwrap();
        assert_eq!(node.local_addr(), addr);
        let health = reqwest::get(format!("{}/healthz", node.base_url()))
            .await
            .unwrap();
        assert_eq!(health.status(), 200);

        // The first pass runs at start.
        wait_for(|| {
            let store = store.clone();
            let tenant = tenant.clone();
            async move {
                store
                    .get_session(&tenant, old.id)
                    .await
                    .unwrap()
                    .is_none()
                    .then_some(())
            }
        })
        .await;
        let stopped = node.shutdown(Duration::from_secs(5)).await;
        assert!(stopped.workers && stopped.server && stopped.flushed);
    }
}
