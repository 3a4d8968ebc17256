//! What every kind of store offers: the local store ([`KVStore`](super::KVStore)) and the
//! distributed ones (`crate::dist`). The C API holds a `Box<dyn KeyValueStore>` and calls these;
//! calls that only a distributed store has default to an error saying so.
//!
//! The distributed store sits above this module: it registers its factory here
//! ([`register_distributed`]) and [`create`] calls it for "dist" type strings.

use super::keys::Keys;
use super::updater::{IntUpdater, StrUpdater};
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use std::sync::OnceLock;

/// A server's controller: called with a command head and body (MXNet's
/// `MXKVStoreServerController`).
pub type Controller<'a> = &'a mut dyn FnMut(i32, &str);

/// A profiler call meant for the servers of a distributed job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerProfilerCommand {
    /// `MXSetProcessProfilerConfig`'s key/value pairs.
    Config(Vec<(String, String)>),
    /// `MXSetProcessProfilerState`: run (true) or stop.
    State(bool),
    /// `MXProcessProfilePause`.
    Pause(bool),
    /// `MXDumpProcessProfile`: `finished`.
    Dump(bool),
}

impl ServerProfilerCommand {
    /// The command's text on the wire (a command-5 body): a verb, then `key=value` lines.
    pub fn encode(&self) -> String {
        match self {
            ServerProfilerCommand::Config(pairs) => {
                let mut s = String::from("config");
                for (k, v) in pairs {
                    s.push('\n');
                    s.push_str(k);
                    s.push('=');
                    s.push_str(v);
                }
                s
            }
            ServerProfilerCommand::State(on) => format!("state\n{}", *on as i32),
            ServerProfilerCommand::Pause(on) => format!("pause\n{}", *on as i32),
            ServerProfilerCommand::Dump(finished) => format!("dump\n{}", *finished as i32),
        }
    }

    pub fn decode(body: &str) -> Result<ServerProfilerCommand> {
        let mut lines = body.split('\n');
        let verb = lines.next().unwrap_or("");
        let flag = |l: Option<&str>| l == Some("1");
        Ok(match verb {
            "config" => ServerProfilerCommand::Config(
                lines
                    .filter(|l| !l.is_empty())
                    .map(|l| {
                        let (k, v) = l.split_once('=').unwrap_or((l, ""));
                        (k.to_owned(), v.to_owned())
                    })
                    .collect(),
            ),
            "state" => ServerProfilerCommand::State(flag(lines.next())),
            "pause" => ServerProfilerCommand::Pause(flag(lines.next())),
            "dump" => ServerProfilerCommand::Dump(flag(lines.next())),
            other => {
                return Err(Error::invalid(format!(
                    "unknown server profiler command {other:?} (accepted: config, state, pause, dump)"
                )));
            }
        })
    }
}

pub trait KeyValueStore: Send + Sync {
    /// The lower-cased type string the store was created with.
    fn type_name(&self) -> &str;
    fn init(&self, keys: Keys<'_>, values: &[&NDArray]) -> Result<()>;
    fn push(&self, keys: Keys<'_>, values: &[&NDArray], priority: i32) -> Result<()>;
    fn pull(&self, keys: Keys<'_>, outs: &[&NDArray], priority: i32, ignore_sparse: bool)
    -> Result<()>;
    /// Pulls the rows listed in `row_ids[i]` of each key's row_sparse value into `outs[i]`.
    fn pull_row_sparse(
        &self,
        keys: Keys<'_>,
        outs: &[&NDArray],
        row_ids: &[&NDArray],
        priority: i32,
    ) -> Result<()>;
    /// Push then pull (MXNet's `PushPull`).
    fn push_pull(
        &self,
        vkeys: Keys<'_>,
        okeys: Keys<'_>,
        values: &[&NDArray],
        outs: &[&NDArray],
        priority: i32,
    ) -> Result<()> {
        self.push(vkeys, values, priority)?;
        self.pull(okeys, outs, priority, true)
    }
    /// Init then pull (MXNet's `Broadcast`).
    fn broadcast(
        &self,
        vkeys: Keys<'_>,
        okeys: Keys<'_>,
        values: &[&NDArray],
        outs: &[&NDArray],
        priority: i32,
    ) -> Result<()> {
        self.init(vkeys, values)?;
        self.pull(okeys, outs, priority, true)
    }
    fn set_updater(&self, updater: Option<IntUpdater>);
    fn set_str_updater(&self, updater: Option<StrUpdater>);
    fn set_gradient_compression(&self, params: &[(&str, &str)]) -> Result<()>;
    /// This process's rank among the workers (0 for a local store).
    fn rank(&self) -> i32;
    /// The number of workers (1 for a local store).
    fn group_size(&self) -> i32;
    /// How many of the processes `node_id` names (ps-lite's ids: 1 the scheduler, 2 the
    /// servers, 4 the workers, their sums, or one process: `8 + 2r` server r, `9 + 2r` worker r)
    /// gave no sign of life within `timeout_sec` seconds. A local store has none.
    fn num_dead_nodes(&self, node_id: i32, timeout_sec: i32) -> Result<i32> {
        let _ = (node_id, timeout_sec);
        Ok(0)
    }
    /// Waits until every worker has reached the barrier.
    fn barrier(&self) -> Result<()>;
    fn set_barrier_before_exit(&self, on: bool);
    /// Serves the workers until they are done (server processes of distributed stores).
    fn run_server(&self, controller: Controller<'_>) -> Result<()> {
        let _ = controller;
        Err(self.no_servers("cannot run a server"))
    }
    /// Runs a command on every server; returns once all have run it.
    fn send_command_to_servers(&self, head: i32, body: &str) -> Result<()> {
        let _ = (head, body);
        Err(self.no_servers("cannot send a command to the servers"))
    }
    /// Forwards a profiler command to the servers (`MXSetProcessProfilerConfig` and friends with
    /// `profile_process` = server). A local store has no servers: nothing happens, as in MXNet.
    fn server_profiler_command(&self, command: &ServerProfilerCommand) -> Result<()> {
        let _ = command;
        Ok(())
    }
    /// Called by `MXKVStoreFree` before the store is dropped: a distributed worker finishes its
    /// requests, meets the other workers at the exit barrier and lets the servers stop.
    fn shutdown(&self) -> Result<()> {
        Ok(())
    }
    #[doc(hidden)]
    fn no_servers(&self, what: &str) -> Error {
        Error::not_supported(format!(
            "{what}: '{}' is a local kvstore, which has no servers; servers belong to \
             distributed ('dist_*') stores",
            self.type_name()
        ))
    }
}

impl KeyValueStore for super::KVStore {
    fn type_name(&self) -> &str {
        super::KVStore::type_name(self)
    }
    fn init(&self, keys: Keys<'_>, values: &[&NDArray]) -> Result<()> {
        super::KVStore::init(self, keys, values)
    }
    fn push(&self, keys: Keys<'_>, values: &[&NDArray], priority: i32) -> Result<()> {
        super::KVStore::push(self, keys, values, priority)
    }
    fn pull(
        &self,
        keys: Keys<'_>,
        outs: &[&NDArray],
        priority: i32,
        ignore_sparse: bool,
    ) -> Result<()> {
        super::KVStore::pull(self, keys, outs, priority, ignore_sparse)
    }
    fn pull_row_sparse(
        &self,
        keys: Keys<'_>,
        outs: &[&NDArray],
        row_ids: &[&NDArray],
        priority: i32,
    ) -> Result<()> {
        super::KVStore::pull_row_sparse(self, keys, outs, row_ids, priority)
    }
    fn set_updater(&self, updater: Option<IntUpdater>) {
        super::KVStore::set_updater(self, updater)
    }
    fn set_str_updater(&self, updater: Option<StrUpdater>) {
        super::KVStore::set_str_updater(self, updater)
    }
    fn set_gradient_compression(&self, params: &[(&str, &str)]) -> Result<()> {
        super::KVStore::set_gradient_compression(self, params)
    }
    fn rank(&self) -> i32 {
        super::KVStore::rank(self)
    }
    fn group_size(&self) -> i32 {
        super::KVStore::group_size(self)
    }
    fn barrier(&self) -> Result<()> {
        super::KVStore::barrier(self);
        Ok(())
    }
    fn set_barrier_before_exit(&self, on: bool) {
        super::KVStore::set_barrier_before_exit(self, on)
    }
}

/// Creates a distributed store from its MXNet type string (one containing "dist").
pub type DistributedFactory = fn(&str) -> Result<Box<dyn KeyValueStore>>;

static DISTRIBUTED: OnceLock<DistributedFactory> = OnceLock::new();

/// Registers the factory [`create`] uses for "dist" type strings. The distributed store
/// (`crate::dist`, above this module) registers itself: `mxrt::dist::create` does, and so does
/// the C API before its first call. The first registration stays.
pub fn register_distributed(factory: DistributedFactory) {
    let _ = DISTRIBUTED.set(factory);
}

/// True if `type_name` names a distributed store: "dist" in it, except the NCCL, Horovod and
/// BytePS backends (the local parser names those in its error).
pub fn is_distributed(type_name: &str) -> bool {
    let t = type_name.to_lowercase();
    let other_backend = ["nccl", "horovod", "byteps"].iter().any(|b| t.contains(b));
    t.contains("dist") && !other_backend
}

/// Creates a store from an MXNet type string: a local store, or with "dist" in the name a
/// distributed one (through the registered factory, see [`register_distributed`]).
pub fn create(type_name: &str) -> Result<Box<dyn KeyValueStore>> {
    if !is_distributed(type_name) {
        return Ok(Box::new(super::KVStore::create(type_name)?));
    }
    match DISTRIBUTED.get() {
        Some(factory) => factory(type_name),
        None if cfg!(feature = "dist") => Err(Error::invalid(format!(
            "kvstore type '{type_name}' is a distributed store and none is registered: create \
             it with mxrt::dist::create (which registers the distributed kinds here)"
        ))),
        None => Err(Error::not_supported(format!(
            "kvstore type '{type_name}' is a distributed store and needs MPI, which this build \
             of libmxrt does not have. Install Open MPI (Debian/Ubuntu: apt-get install \
             openmpi-bin; it provides libmpi.so.40): the mxrt Python package then loads its MPI \
             build by itself (mxrt.activate, python -m mxrt, mxrt-launch). From source, build \
             with the cargo feature `dist` (make lib, or cargo build --release --features dist)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::ServerProfilerCommand as C;

    #[test]
    fn server_profiler_commands_round_trip() {
        for c in [
            C::Config(vec![
                ("profile_all".into(), "true".into()),
                ("filename".into(), "/tmp/a=b.json".into()),
            ]),
            C::State(true),
            C::State(false),
            C::Pause(true),
            C::Dump(false),
        ] {
            assert_eq!(C::decode(&c.encode()).unwrap(), c);
        }
        let e = C::decode("reboot").unwrap_err();
        assert!(e.message().contains("unknown server profiler command"), "{e}");
    }
}
