//! The [`ResourceManager`]: creates each device's resources on first request, hands them out
//! (round robin where a device has several copies) and reseeds generators through the engine.

use super::config::ResourceConfig;
use super::parallel::ParallelRandom;
use super::random::{RandomGenerator, StreamId};
use super::request::{Resource, ResourceRequest, State};
use super::temp::TempSpace;
use crate::context::{Context, DeviceType};
use crate::engine::{Engine, EngineKind, PushArgs};
use crate::error::{Error, Result};
use crate::storage::Storage;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

/// One device's resources.
struct DeviceSet {
    random: Resource,
    parallel: Vec<Resource>,
    temp: Vec<Resource>,
    next_parallel: usize,
    next_temp: usize,
}

struct ManagerState {
    /// The seed of the last `seed` call (0 at start, as in MXNet).
    global_seed: u32,
    /// Seeds set for one device by `seed_context` since the last `seed`.
    device_seeds: HashMap<Context, u32>,
    devices: BTreeMap<Context, DeviceSet>,
}

/// Hands ops their resources: per device one kRandom generator, `cpu_parallel_random_copies`
/// kParallelRandom generators and `cpu_temp_copies` kTempSpace buffers (GPU counts for GPUs).
/// Every resource has an engine variable; ops using a resource list it as mutable, so the engine
/// runs them one at a time, and reseeding is an op on the same variables, ordered after the ops
/// pushed before it.
///
/// All host device types (cpu, cpu_pinned, cpu_shared, any id) share the CPU's resources, as in
/// MXNet. mxrt has no GPU random generators or temp space: requesting them is an error (seeding a
/// GPU is accepted and remembered).
pub struct ResourceManager<'e> {
    engine: &'e Engine,
    storage: &'static Storage,
    config: ResourceConfig,
    state: Mutex<ManagerState>,
}

/// The device whose resources serve `ctx`.
fn device_key(ctx: Context) -> Result<Context> {
    match ctx.dev_type {
        DeviceType::Gpu if ctx.dev_id < 0 => Err(Error::invalid(format!(
            "invalid gpu device id {}",
            ctx.dev_id
        ))),
        DeviceType::Gpu => Ok(ctx),
        _ => Ok(Context::cpu(0)),
    }
}

fn stream_id(seed: u32, ctx: Context, req: ResourceRequest, copy: usize) -> StreamId {
    StreamId {
        seed,
        ctx,
        kind: req.code() as u32,
        copy: copy as u32,
        stream: 0,
    }
}

impl<'e> ResourceManager<'e> {
    /// A manager whose ops run on `engine`, with temp space from the process's storage (with
    /// its GPU backends, [`crate::gpu::storage`]) and copy counts from the environment.
    pub fn new(engine: &'e Engine) -> Result<Self> {
        Ok(Self::with_config(
            engine,
            crate::gpu::storage(),
            ResourceConfig::from_env()?,
        ))
    }

    pub fn with_config(
        engine: &'e Engine,
        storage: &'static Storage,
        config: ResourceConfig,
    ) -> Self {
        ResourceManager {
            engine,
            storage,
            config,
            state: Mutex::new(ManagerState {
                global_seed: 0,
                device_seeds: HashMap::new(),
                devices: BTreeMap::new(),
            }),
        }
    }

    pub fn engine(&self) -> &'e Engine {
        self.engine
    }

    pub fn config(&self) -> &ResourceConfig {
        &self.config
    }

    /// The seed of the last [`seed`](Self::seed) (0 before any).
    pub fn global_seed(&self) -> u32 {
        self.state.lock().global_seed
    }

    fn new_device(&self, key: Context, seed: u32) -> DeviceSet {
        let tracked = self.engine.kind() != EngineKind::Naive;
        let gpu = key.dev_type == DeviceType::Gpu;
        let (n_parallel, n_temp) = if gpu {
            (
                self.config.gpu_parallel_random_copies,
                self.config.gpu_temp_copies,
            )
        } else {
            (
                self.config.cpu_parallel_random_copies,
                self.config.cpu_temp_copies,
            )
        };
        let random = Resource::new(
            ResourceRequest::Random,
            key,
            0,
            tracked,
            State::Random(Arc::new(Mutex::new(RandomGenerator::new(stream_id(
                seed,
                key,
                ResourceRequest::Random,
                0,
            ))))),
        );
        let parallel = (0..n_parallel.max(1))
            .map(|i| {
                let base = stream_id(seed, key, ResourceRequest::ParallelRandom, i);
                let p = ParallelRandom::new(base, self.config.parallel_streams);
                Resource::new(
                    ResourceRequest::ParallelRandom,
                    key,
                    i,
                    tracked,
                    State::Parallel(Arc::new(Mutex::new(p))),
                )
            })
            .collect();
        let temp = (0..n_temp.max(1))
            .map(|i| {
                Resource::new(
                    ResourceRequest::TempSpace,
                    key,
                    i,
                    tracked,
                    State::Temp(Mutex::new(TempSpace::new(self.storage, key))),
                )
            })
            .collect();
        DeviceSet {
            random,
            parallel,
            temp,
            next_parallel: 0,
            next_temp: 0,
        }
    }

    /// A resource of type `req` for ops on `ctx`. kRandom is the device's one generator;
    /// kTempSpace and kParallelRandom cycle through the device's copies in request order.
    pub fn request(&self, ctx: Context, req: ResourceRequest) -> Result<Resource> {
        let key = device_key(ctx)?;
        if key.dev_type == DeviceType::Gpu {
            return Err(Error::not_supported(format!(
                "cannot request {} on {ctx}: mxrt has no GPU resources yet",
                req.name()
            )));
        }
        let mut st = self.state.lock();
        let st = &mut *st;
        let seed = st.device_seeds.get(&key).copied().unwrap_or(st.global_seed);
        let set = st
            .devices
            .entry(key)
            .or_insert_with(|| self.new_device(key, seed));
        Ok(match req {
            ResourceRequest::Random => set.random.clone(),
            ResourceRequest::TempSpace => {
                let r = set.temp[set.next_temp].clone();
                set.next_temp = (set.next_temp + 1) % set.temp.len();
                r
            }
            ResourceRequest::ParallelRandom => {
                let r = set.parallel[set.next_parallel].clone();
                set.next_parallel = (set.next_parallel + 1) % set.parallel.len();
                r
            }
        })
    }

    /// Reseeds every generator of every device (`MXRandomSeed`). Each reseed is an op writing the
    /// generator's variable: it runs after the ops pushed before this call that use the
    /// generator, and ops pushed after it see the new seed. Returns without waiting. Generators
    /// created later start from `seed` too.
    pub fn seed(&self, seed: u32) -> Result<()> {
        let mut st = self.state.lock();
        st.global_seed = seed;
        st.device_seeds.clear();
        for (&key, set) in &st.devices {
            self.push_reseed(key, set, seed)?;
        }
        Ok(())
    }

    /// Reseeds the generators of `ctx`'s device only (`MXRandomSeedContext`), as
    /// [`seed`](Self::seed) does. For a device without resources yet (any GPU, which has
    /// none) the seed is remembered for when they are created.
    pub fn seed_context(&self, seed: u32, ctx: Context) -> Result<()> {
        let key = device_key(ctx)?;
        let mut st = self.state.lock();
        st.device_seeds.insert(key, seed);
        if let Some(set) = st.devices.get(&key) {
            self.push_reseed(key, set, seed)?;
        }
        Ok(())
    }

    fn push_reseed(&self, key: Context, set: &DeviceSet, seed: u32) -> Result<()> {
        let in_use = |r: &Resource| {
            format!("reseeding {r} found it in use by an op that does not hold its variable")
        };
        if let State::Random(g) = &set.random.inner.state {
            let (g, id, msg) = (
                g.clone(),
                stream_id(seed, key, ResourceRequest::Random, 0),
                in_use(&set.random),
            );
            self.engine.push_fn(
                PushArgs::new(key)
                    .writes(std::slice::from_ref(set.random.var()))
                    .name("ResourceRandomSetSeed"),
                move |_| {
                    g.try_lock().ok_or_else(|| msg.clone())?.reseed(id);
                    Ok(())
                },
            )?;
        }
        for (i, r) in set.parallel.iter().enumerate() {
            if let State::Parallel(p) = &r.inner.state {
                let (p, id, msg) = (
                    p.clone(),
                    stream_id(seed, key, ResourceRequest::ParallelRandom, i),
                    in_use(r),
                );
                self.engine.push_fn(
                    PushArgs::new(key)
                        .writes(std::slice::from_ref(r.var()))
                        .name("ResourceParallelRandomSetSeed"),
                    move |_| {
                        p.try_lock().ok_or_else(|| msg.clone())?.reseed(id);
                        Ok(())
                    },
                )?;
            }
        }
        Ok(())
    }
}

static GLOBAL: OnceLock<Result<ResourceManager<'static>>> = OnceLock::new();

impl ResourceManager<'static> {
    /// The process-wide manager the C API uses: the global engine and storage, copy counts from
    /// the environment (read once; a bad value is reported by every call).
    pub fn global() -> Result<&'static ResourceManager<'static>> {
        GLOBAL
            .get_or_init(|| ResourceManager::new(Engine::global()?))
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl std::fmt::Debug for ResourceManager<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("ResourceManager")
            .field("global_seed", &st.global_seed)
            .field("devices", &st.devices.keys().collect::<Vec<_>>())
            .finish()
    }
}
