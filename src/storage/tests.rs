//! Facade-level tests: managers per context, strategies through the environment, reuse, stats,
//! empty_cache, out-of-memory retry, trim bound, hooks, gpu backends and shared memory.

use super::*;
use crate::context::Context;
use crate::error::{ErrorKind, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn storage_with(pairs: &[(&str, &str)]) -> Storage {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Storage::with_env(move |name| map.get(name).cloned())
}

/// A device backend over host memory that counts what it holds and can be told it is full.
#[derive(Default)]
struct FakeDevice {
    live_bytes: AtomicUsize,
    allocations: AtomicUsize,
    capacity: AtomicUsize,
    reported_free: Mutex<Option<MemoryInfo>>,
}

impl FakeDevice {
    fn with_capacity(capacity: usize) -> Arc<Self> {
        let d = FakeDevice::default();
        d.capacity.store(capacity, Ordering::SeqCst);
        Arc::new(d)
    }
}

impl DeviceMemory for FakeDevice {
    fn allocate(&self, size: usize) -> Result<NonNull<u8>> {
        let live = self.live_bytes.load(Ordering::SeqCst);
        if live + size > self.capacity.load(Ordering::SeqCst) {
            return Err(crate::Error::out_of_memory("fake device is full"));
        }
        self.live_bytes.fetch_add(size, Ordering::SeqCst);
        self.allocations.fetch_add(1, Ordering::SeqCst);
        HostMemory::new().allocate(size)
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, size: usize) {
        self.live_bytes.fetch_sub(size, Ordering::SeqCst);
        // SAFETY: forwarded contract; the block came from `HostMemory::allocate(size)`.
        unsafe { HostMemory::new().deallocate(ptr, size) }
    }
    fn memory_info(&self) -> Option<MemoryInfo> {
        *self.reported_free.lock()
    }
}

fn with_fake_gpu(storage: &Storage, device: Arc<FakeDevice>) {
    storage.set_gpu_backend(Some(Arc::new(move |_id| {
        Ok(device.clone() as Arc<dyn DeviceMemory>)
    })));
}

#[test]
fn cpu_alloc_keeps_ctx_and_size_and_zero_is_null() {
    let s = storage_with(&[]);
    let cpu = Context::cpu(0);
    for _ in 0..2 {
        let a = s.alloc(cpu, 1024).unwrap();
        assert_eq!(a.ctx(), cpu);
        assert_eq!(a.len(), 1024);
        assert!(!a.as_ptr().is_null());
        assert_eq!(a.as_ptr() as usize % HOST_ALIGNMENT, 0);
        // SAFETY: the block has 1024 writable bytes.
        unsafe { std::ptr::write_bytes(a.as_ptr(), 7, 1024) };
    }
    let empty = s.alloc(cpu, 0).unwrap();
    assert!(empty.as_ptr().is_null() && empty.is_empty());
    assert!(empty.share().is_err());
    // Size 0 alone creates the manager (as MXNet's Alloc does).
    let s2 = storage_with(&[]);
    assert!(s2.stats(Context::cpu_pinned(2)).is_none());
    drop(s2.alloc(Context::cpu_pinned(2), 0).unwrap());
    assert_eq!(
        s2.stats(Context::cpu_pinned(2)).unwrap(),
        PoolStats::default()
    );
}

#[test]
fn naive_pool_reuses_blocks_and_counts() {
    let s = storage_with(&[("MXNET_CPU_MEM_POOL_PAGE_SIZE", "4096")]);
    let cpu = Context::cpu(0);
    let a = s.alloc(cpu, 1000).unwrap();
    let p = a.as_ptr();
    let st = s.stats(cpu).unwrap();
    assert_eq!(
        (st.bytes_in_use, st.bytes_cached, st.misses, st.hits),
        (4096, 0, 1, 0)
    );
    drop(a);
    let st = s.stats(cpu).unwrap();
    assert_eq!(
        (st.bytes_in_use, st.bytes_cached, st.frees, st.blocks_cached),
        (0, 4096, 1, 1)
    );
    // Any size in the same 4096-byte page bucket reuses the block; cpu(3) shares cpu(0)'s manager.
    let b = s.alloc(Context::cpu(3), 4096).unwrap();
    assert_eq!(b.as_ptr(), p);
    assert_eq!(b.ctx(), Context::cpu(3));
    let c = s.alloc(cpu, 4097).unwrap();
    assert_ne!(c.as_ptr(), p);
    let st = s.stats(cpu).unwrap();
    assert_eq!(
        (
            st.hits,
            st.misses,
            st.allocs,
            st.bytes_in_use,
            st.peak_in_use
        ),
        (1, 2, 3, 4096 + 8192, 12288)
    );
    drop((b, c));
    assert_eq!(s.stats(cpu).unwrap().bytes_cached, 12288);
}

#[test]
fn host_blocks_round_to_64_bytes_by_default() {
    let s = storage_with(&[]);
    for ctx in [Context::cpu(0), Context::cpu_pinned(0)] {
        let scalars: Vec<_> = (0..4).map(|_| s.alloc(ctx, 8).unwrap()).collect();
        let b = s.alloc(ctx, 100).unwrap();
        let st = s.stats(ctx).unwrap();
        assert_eq!(st.bytes_in_use, 4 * 64 + 128, "{ctx}");
        for a in &scalars {
            assert_eq!(a.as_ptr() as usize % 64, 0, "{ctx}: 64-byte aligned");
        }
        let p = b.as_ptr();
        drop(b);
        // the next size in the same 64-byte bucket reuses the block
        let c = s.alloc(ctx, 65).unwrap();
        assert_eq!(c.as_ptr(), p, "{ctx}");
        drop((scalars, c));
    }
    // GPU pools keep 4 KiB pages
    with_fake_gpu(&s, FakeDevice::with_capacity(1 << 20));
    let g = s.alloc(Context::gpu(0), 8).unwrap();
    assert_eq!(s.stats(Context::gpu(0)).unwrap().bytes_in_use, 4096);
    drop(g);
}

#[test]
fn round_pool_matches_mxnet_storage_test() {
    // tests/cpp/storage/storage_test.cc (GPU Round pool, cutoff 20) replayed on both a host pool and a
    // fake gpu device.
    let s = storage_with(&[
        ("MXNET_CPU_MEM_POOL_TYPE", "Round"),
        ("MXNET_CPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "20"),
        ("MXNET_CPU_MEM_POOL_PAGE_SIZE", "4096"),
        ("MXNET_GPU_MEM_POOL_TYPE", "Round"),
        ("MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "20"),
    ]);
    with_fake_gpu(&s, FakeDevice::with_capacity(1 << 30));
    for ctx in [Context::cpu(0), Context::gpu(0)] {
        let a = s.alloc(ctx, 32).unwrap();
        let b = s.alloc(ctx, 2097153).unwrap();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        drop((a, b));
        let a = s.alloc(ctx, 4095).unwrap();
        assert_eq!((a.as_ptr(), a.len()), (pa, 4095), "{ctx}");
        drop(a);
        let b = s.alloc(ctx, 3145728).unwrap();
        assert_eq!((b.as_ptr(), b.len()), (pb, 3145728), "{ctx}");
        let st = s.stats(ctx).unwrap();
        assert_eq!(
            (st.hits, st.misses, st.bytes_in_use),
            (2, 2, 3 << 20),
            "{ctx}"
        );
        drop(b);
        assert!(s.alloc(ctx, 0).unwrap().as_ptr().is_null());
        // A size in a different bucket does not reuse: 4097 needs an 8 KiB block.
        let c = s.alloc(ctx, 4097).unwrap();
        assert_eq!(s.stats(ctx).unwrap().misses, 3, "{ctx}");
        drop(c);
    }
}

#[test]
fn unpooled_goes_to_the_device_every_time() {
    let s = storage_with(&[("MXNET_GPU_MEM_POOL_TYPE", "Unpooled")]);
    let dev = FakeDevice::with_capacity(1 << 20);
    with_fake_gpu(&s, dev.clone());
    let g = Context::gpu(1);
    let a = s.alloc(g, 100).unwrap();
    assert_eq!(dev.live_bytes.load(Ordering::SeqCst), 100);
    drop(a);
    assert_eq!(dev.live_bytes.load(Ordering::SeqCst), 0);
    let _b = s.alloc(g, 100).unwrap();
    let st = s.stats(g).unwrap();
    assert_eq!(
        (
            st.hits,
            st.misses,
            st.frees,
            st.bytes_cached,
            st.bytes_in_use
        ),
        (0, 2, 1, 0, 100)
    );
    assert_eq!(dev.allocations.load(Ordering::SeqCst), 2);
}

#[test]
fn empty_cache_releases_and_reports_unallocated_gpu() {
    let s = storage_with(&[]);
    let e = s.empty_cache(Context::gpu(0)).unwrap_err();
    assert_eq!(e.message(), NOT_ALLOCATED_MESSAGE);
    // Host types succeed even before any allocation.
    for ctx in [
        Context::cpu(0),
        Context::cpu_pinned(0),
        Context::cpu_shared(0),
    ] {
        s.empty_cache(ctx).unwrap();
    }
    let dev = FakeDevice::with_capacity(1 << 24);
    with_fake_gpu(&s, dev.clone());
    let g = Context::gpu(0);
    let keep = s.alloc(g, 5000).unwrap();
    drop(s.alloc(g, 100).unwrap());
    drop(s.alloc(g, 9000).unwrap());
    assert_eq!(dev.live_bytes.load(Ordering::SeqCst), 8192 + 4096 + 12288);
    s.empty_cache(g).unwrap();
    let st = s.stats(g).unwrap();
    assert_eq!(
        (
            st.bytes_cached,
            st.blocks_cached,
            st.blocks_released,
            st.bytes_in_use
        ),
        (0, 0, 2, 8192)
    );
    assert_eq!(dev.live_bytes.load(Ordering::SeqCst), 8192);
    // gpu(1) never allocated: still an error although gpu(0) did.
    assert!(s.empty_cache(Context::gpu(1)).is_err());
    drop(keep);
    assert_eq!(s.stats(g).unwrap().bytes_cached, 8192);
}

#[test]
fn gpu_without_backend_is_a_clear_error() {
    let s = storage_with(&[]);
    let e = s.alloc(Context::gpu(0), 16).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotSupported);
    assert!(
        e.message()
            .contains("Compile with USE_CUDA=1 to enable GPU usage"),
        "{e}"
    );
    assert!(s.stats(Context::gpu(0)).is_none());
    let e = s.alloc(Context::gpu(-1), 16).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // cpu_pinned is ordinary host memory; each id has its own manager.
    let a = s.alloc(Context::cpu_pinned(0), 10).unwrap();
    let b = s.alloc(Context::cpu_pinned(20), 10).unwrap();
    assert_eq!(s.stats(Context::cpu_pinned(0)).unwrap().bytes_in_use, 64);
    assert_eq!(s.stats(Context::cpu_pinned(20)).unwrap().bytes_in_use, 64);
    assert!(s.stats(Context::cpu_pinned(1)).is_none());
    drop((a, b));
}

#[test]
fn bad_environment_fails_at_first_use_and_can_be_fixed() {
    let env: Arc<Mutex<HashMap<String, String>>> = Arc::new(Mutex::new(HashMap::new()));
    env.lock()
        .insert("MXNET_CPU_MEM_POOL_TYPE".into(), "Bogus".into());
    let e2 = env.clone();
    let s = Storage::with_env(move |name| e2.lock().get(name).cloned());
    let e = s.alloc(Context::cpu(0), 8).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.message()
            .contains("Unknown memory pool strategy specified: Bogus."),
        "{e}"
    );
    assert!(s.stats(Context::cpu(0)).is_none());
    env.lock()
        .insert("MXNET_CPU_MEM_POOL_TYPE".into(), "Round".into());
    env.lock()
        .insert("MXNET_CPU_MEM_POOL_ROUND_LINEAR_CUTOFF".into(), "99".into());
    let e = s.alloc(Context::cpu(0), 8).unwrap_err();
    assert!(
        e.message()
            .contains("MXNET_CPU_MEM_POOL_ROUND_LINEAR_CUTOFF"),
        "{e}"
    );
    env.lock().remove("MXNET_CPU_MEM_POOL_ROUND_LINEAR_CUTOFF");
    let a = s.alloc(Context::cpu(0), 8).unwrap();
    // Round with the default host page, 64 bytes.
    assert_eq!(s.stats(Context::cpu(0)).unwrap().bytes_in_use, 64);
    drop(a);
    // GPU variables are separate and only read for gpu managers.
    env.lock()
        .insert("MXNET_GPU_MEM_POOL_PAGE_SIZE".into(), "3".into());
    with_fake_gpu(&s, FakeDevice::with_capacity(1 << 20));
    let e = s.alloc(Context::gpu(0), 8).unwrap_err();
    assert_eq!(
        e.message(),
        "MXNET_GPU_MEM_POOL_PAGE_SIZE cannot be set to a value smaller than 32. Got 3."
    );
}

#[test]
fn failed_allocation_releases_cache_then_retries() {
    let s = storage_with(&[("MXNET_CPU_MEM_POOL_PAGE_SIZE", "4096")]);
    let cpu = Context::cpu(0);
    drop(s.alloc(cpu, 100).unwrap());
    drop(s.alloc(cpu, 10000).unwrap());
    assert_eq!(s.stats(cpu).unwrap().bytes_cached, 4096 + 12288);

    // A hit does not touch the device, so pending failures do not affect it.
    s.fail_next_allocations(1);
    let hit = s.alloc(cpu, 100).unwrap();
    assert_eq!(s.stats(cpu).unwrap().hits, 1);
    // A miss: the first device call fails, the cache is released, the retry succeeds.
    let big = s.alloc(cpu, 50000).unwrap();
    let st = s.stats(cpu).unwrap();
    assert_eq!((st.bytes_cached, st.blocks_released, st.misses), (0, 1, 3));
    assert_eq!(st.bytes_in_use, 4096 + 53248);

    // Two failures: the retry fails too; the error is OutOfMemory and nothing leaks.
    s.fail_next_allocations(2);
    let e = s.alloc(cpu, 70000).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert!(e.message().starts_with("Memory allocation failed"), "{e}");
    assert!(e.message().contains("70000 bytes"), "{e}");
    let st = s.stats(cpu).unwrap();
    assert_eq!(st.bytes_in_use, 4096 + 53248);
    // The failures are used up: the next allocation works.
    drop(s.alloc(cpu, 70000).unwrap());
    drop((hit, big));

    // Same on cpu_shared (its only device call is creating the segment).
    s.fail_next_allocations(1);
    let e = s.alloc(Context::cpu_shared(0), 10).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
}

#[test]
fn real_device_exhaustion_uses_the_cache_release() {
    // A 64 KiB device: cached blocks of other sizes must be given back to fit a new one.
    let s = storage_with(&[("MXNET_GPU_MEM_POOL_RESERVE", "0")]);
    let dev = FakeDevice::with_capacity(64 * 1024);
    with_fake_gpu(&s, dev.clone());
    let g = Context::gpu(0);
    let small: Vec<_> = (0..6).map(|_| s.alloc(g, 4096).unwrap()).collect();
    drop(small);
    // 24 KiB cached; a 48 KiB block does not fit next to it, but does once the cache is released.
    let a = s.alloc(g, 48 * 1024).unwrap();
    assert_eq!(dev.live_bytes.load(Ordering::SeqCst), 48 * 1024);
    let e = s.alloc(g, 32 * 1024).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert!(e.message().contains("fake device is full"), "{e}");
    drop(a);
}

#[test]
fn reserve_rule_releases_cache_before_a_miss() {
    let s = storage_with(&[("MXNET_GPU_MEM_POOL_RESERVE", "10")]);
    let dev = FakeDevice::with_capacity(1 << 30);
    with_fake_gpu(&s, dev.clone());
    let g = Context::gpu(0);
    *dev.reported_free.lock() = Some(MemoryInfo {
        free: 1 << 20,
        total: 2 << 20,
    });
    drop(s.alloc(g, 4096).unwrap());
    drop(s.alloc(g, 8192).unwrap());
    assert_eq!(s.stats(g).unwrap().bytes_cached, 4096 + 8192);
    // Plenty free: a miss keeps the cache.
    let a = s.alloc(g, 3 * 4096).unwrap();
    assert_eq!(s.stats(g).unwrap().bytes_cached, 4096 + 8192);
    drop(a);
    // Free memory minus the new block would go below 10% of total: the cache goes first.
    *dev.reported_free.lock() = Some(MemoryInfo {
        free: 220 * 1024,
        total: 2 << 20,
    });
    let b = s.alloc(g, 16 * 4096).unwrap();
    let st = s.stats(g).unwrap();
    assert_eq!((st.bytes_cached, st.blocks_released), (0, 3));
    drop(b);
}

#[test]
fn trim_keeps_footprint_within_twice_the_peak() {
    use rand::{Rng, SeedableRng};
    let s = storage_with(&[]);
    let dev = FakeDevice::with_capacity(usize::MAX / 2);
    with_fake_gpu(&s, dev.clone());
    let g = Context::gpu(0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut live: Vec<Allocation> = Vec::new();
    let mut worst_ratio: f64 = 0.0;
    for step in 0..4000 {
        // Phases with drifting size ranges make an exact-size pool accumulate stale buckets.
        let base = 4096 * (1 + (step / 500) * 7);
        if live.len() < 40 && rng.gen_bool(0.55) {
            live.push(s.alloc(g, base + rng.gen_range(0..64) * 4096).unwrap());
        } else if !live.is_empty() {
            let i = rng.gen_range(0..live.len());
            live.swap_remove(i);
        }
        let st = s.stats(g).unwrap();
        assert!(st.bytes_cached <= 2 * st.peak_in_use, "step {step}: {st:?}");
        assert!(
            st.bytes_in_use + st.bytes_cached <= 2 * st.peak_in_use,
            "step {step}: {st:?}"
        );
        // The device holds exactly what the pool accounts for.
        assert_eq!(
            dev.live_bytes.load(Ordering::SeqCst),
            st.bytes_in_use + st.bytes_cached
        );
        worst_ratio =
            worst_ratio.max((st.bytes_in_use + st.bytes_cached) as f64 / st.peak_in_use as f64);
    }
    let st = s.stats(g).unwrap();
    // The cache still does its job, and trimming happened.
    assert!(st.hits > 100, "{st:?}");
    assert!(st.blocks_released > 0, "{st:?}");
    assert!(worst_ratio > 1.0 && worst_ratio <= 2.0, "{worst_ratio}");
    drop(live);
}

#[test]
fn trim_prefers_least_recently_used_buckets() {
    let s = storage_with(&[("MXNET_GPU_MEM_POOL_RESERVE", "0")]);
    let dev = FakeDevice::with_capacity(1 << 30);
    with_fake_gpu(&s, dev.clone());
    let g = Context::gpu(0);
    // Peak 3 pages in use at once: footprint allowed up to 6 pages.
    let (a, b, c) = (
        s.alloc(g, 4096).unwrap(),
        s.alloc(g, 8192).unwrap(),
        s.alloc(g, 4096 * 64).unwrap(),
    );
    drop(c);
    let peak = s.stats(g).unwrap().peak_in_use;
    assert_eq!(peak, 4096 * 67);
    drop(a); // 4 KiB bucket used after the 8 KiB one...
    drop(b); // ...no: 8 KiB freed last, 4 KiB before, 256 KiB first (least recent).
    // In use 0, cached 67 pages; a new 100-page block needs the cache to shrink to
    // 2 * 100 - 100 = 100 pages: nothing to evict yet.
    let d = s.alloc(g, 4096 * 100).unwrap();
    assert_eq!(s.stats(g).unwrap().blocks_released, 0);
    // Peak now 100 pages, in use 100 + 150 = 250 > peak: limit 2*250 - 250 = 250 >= 67 cached.
    let e = s.alloc(g, 4096 * 150).unwrap();
    assert_eq!(s.stats(g).unwrap().blocks_released, 0);
    drop((d, e));
    // Cached: 67 + 250 = 317 pages, peak 250. A 300-page block: in use 300, peak 300, allowed
    // cache 300 pages: evict the least recently used buckets (256 KiB, 4 KiB, 8 KiB: all older
    // than the 100/150-page ones) until <= 300. 317 - 64 = 253 after the first one.
    let f = s.alloc(g, 4096 * 300).unwrap();
    let st = s.stats(g).unwrap();
    assert_eq!(
        (st.blocks_released, st.bytes_cached),
        (1, 4096 * 253),
        "{st:?}"
    );
    // The small buckets survived: reusing them is a hit.
    let hits = st.hits;
    drop(s.alloc(g, 4096).unwrap());
    drop(s.alloc(g, 8192).unwrap());
    assert_eq!(s.stats(g).unwrap().hits, hits + 2);
    drop(f);
}

static HOOK_BYTES: AtomicUsize = AtomicUsize::new(0);
static HOOK_EVENTS: AtomicUsize = AtomicUsize::new(0);
fn hook(e: &MemoryEvent) {
    if e.ctx == Context::cpu_pinned(7) {
        HOOK_EVENTS.fetch_add(1, Ordering::SeqCst);
        HOOK_BYTES.store(e.bytes_in_use, Ordering::SeqCst);
        assert!(e.block_size >= e.size);
        assert_eq!(e.kind == MemoryEventKind::Alloc, e.bytes_in_use > 0);
    }
}

#[test]
fn memory_hook_sees_allocs_and_frees() {
    let s = storage_with(&[("MXNET_CPU_MEM_POOL_PAGE_SIZE", "4096")]);
    s.set_memory_hook(Some(hook));
    let ctx = Context::cpu_pinned(7);
    let a = s.alloc(ctx, 10).unwrap();
    assert_eq!(HOOK_BYTES.load(Ordering::SeqCst), 4096);
    drop(a);
    assert_eq!(HOOK_BYTES.load(Ordering::SeqCst), 0);
    drop(s.alloc(ctx, 0).unwrap()); // empty: no event
    assert_eq!(HOOK_EVENTS.load(Ordering::SeqCst), 2);
    s.set_memory_hook(None);
    drop(s.alloc(ctx, 10).unwrap());
    assert_eq!(HOOK_EVENTS.load(Ordering::SeqCst), 2);
}

#[test]
fn concurrent_alloc_free_keeps_counts_consistent() {
    // Miri interprets every step: a tenth of the work still interleaves the four threads.
    let per_thread: usize = if cfg!(miri) { 200 } else { 2000 };
    let s = Arc::new(storage_with(&[]));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for i in 0..per_thread {
                    held.push(s.alloc(Context::cpu(t), 64 + (i % 7) * 3000).unwrap());
                    if held.len() > 5 {
                        held.remove(i % 5);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = s.stats(Context::cpu(0)).unwrap();
    assert_eq!(st.bytes_in_use, 0);
    assert_eq!(st.allocs, 4 * per_thread as u64);
    assert_eq!(st.frees, 4 * per_thread as u64);
    assert_eq!(st.hits + st.misses, 4 * per_thread as u64);
    assert!(st.hits > 4 * per_thread as u64 * 7 / 8, "{st:?}");
    assert!(st.bytes_cached <= 2 * st.peak_in_use);
}

#[test]
fn allocation_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Allocation>();
    check::<Storage>();
}

fn shm_path(pid: i32, id: i32) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/dev/shm{}", segment_name(pid, id)))
}

#[test]
#[cfg_attr(miri, ignore)] // shm_open and fork are foreign functions Miri cannot run
fn shared_memory_across_fork() {
    let s = storage_with(&[]);
    let a = s.alloc(Context::cpu_shared(0), 1000).unwrap();
    assert_eq!(a.as_ptr() as usize % HOST_ALIGNMENT, 0);
    // SAFETY: 1000 writable bytes.
    unsafe { std::ptr::write_bytes(a.as_ptr(), 0, 1000) };
    let (pid, id) = a.share().unwrap();
    assert_eq!(pid, std::process::id() as i32);
    assert!(shm_path(pid, id).exists());
    // SAFETY: `a` is a live cpu_shared block.
    assert_eq!(
        unsafe { SharedMemoryManager::ref_count(NonNull::new(a.as_ptr()).unwrap()) },
        2
    );
    // The Linux/MXNet form as well: a descriptor the child inherits.
    let (fd_pid, fd) = a.share_fd().unwrap();
    assert_eq!(fd_pid, pid);
    // SAFETY: `a` is a live cpu_shared block.
    assert_eq!(
        unsafe { SharedMemoryManager::ref_count(NonNull::new(a.as_ptr()).unwrap()) },
        3
    );

    // SAFETY: the child only attaches, writes and leaves with `_exit`; it never returns into the
    // test harness.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let code = std::panic::catch_unwind(|| {
            let child_storage = storage_with(&[]);
            let b = child_storage.attach_shared(pid, id, 1000).unwrap();
            // The inherited descriptor is the child's own copy; attaching takes it over.
            let c = child_storage.attach_shared(pid, fd, 600).unwrap();
            // SAFETY: the attached mappings have 1000 and 600 writable bytes.
            unsafe {
                for i in 0..1000 {
                    *b.as_ptr().add(i) = (i % 251) as u8;
                }
                *c.as_ptr().add(599) = 0xEE;
            }
            drop((b, c));
            0
        })
        .unwrap_or(3);
        // SAFETY: leaving the forked child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status}"
    );
    // SAFETY: reading the 1000 bytes the child wrote through its own mapping.
    let seen = unsafe { std::slice::from_raw_parts(a.as_ptr(), 1000) };
    assert_eq!(seen[599], 0xEE);
    assert!(
        seen.iter()
            .enumerate()
            .all(|(i, &v)| i == 599 || v == (i % 251) as u8)
    );
    // SAFETY: `a` is a live cpu_shared block.
    assert_eq!(
        unsafe { SharedMemoryManager::ref_count(NonNull::new(a.as_ptr()).unwrap()) },
        1
    );
    assert!(shm_path(pid, id).exists());
    let st = s.stats(Context::cpu_shared(0)).unwrap();
    assert_eq!((st.bytes_in_use, st.allocs), (1000, 1));
    drop(a);
    assert!(
        !shm_path(pid, id).exists(),
        "segment must be unlinked after the last reference"
    );
    assert_eq!(s.stats(Context::cpu_shared(0)).unwrap().bytes_in_use, 0);
}

#[test]
#[cfg_attr(miri, ignore)] // shm_open is a foreign function Miri cannot run
fn shared_memory_attach_in_process_and_errors() {
    let s = storage_with(&[]);
    let a = s.alloc(Context::cpu_shared(3), 64).unwrap();
    assert_eq!(a.ctx(), Context::cpu_shared(3));
    let (pid, id) = a.share().unwrap();
    let b = s.attach_shared(pid, id, 64).unwrap();
    assert_ne!(a.as_ptr(), b.as_ptr());
    // SAFETY: both map the same 64 bytes.
    unsafe {
        *a.as_ptr().add(5) = 42;
        assert_eq!(*b.as_ptr().add(5), 42);
    }
    // Too large a size for the segment.
    let e = s.attach_shared(pid, id, 5000).unwrap_err();
    assert!(e.message().contains("fewer than the 5000 requested"), "{e}");
    assert!(s.attach_shared(pid, id, 0).unwrap().is_empty());
    drop(a);
    assert!(
        shm_path(pid, id).exists(),
        "b still holds the reference a shared"
    );
    drop(b);
    assert!(!shm_path(pid, id).exists());
    let e = s.attach_shared(pid, id, 64).unwrap_err();
    assert!(e.message().contains(&segment_name(pid, id)), "{e}");
    // Descriptor form: the same fd on every call, one reference each; the receiver's copy is
    // taken over (closed) by a successful attach.
    let a = s.alloc(Context::cpu_shared(0), 64).unwrap();
    let (pid, fd) = a.share_fd().unwrap();
    assert_eq!(a.share_fd().unwrap(), (pid, fd));
    // SAFETY: `a` is a live cpu_shared block.
    assert_eq!(
        unsafe { SharedMemoryManager::ref_count(NonNull::new(a.as_ptr()).unwrap()) },
        3
    );
    // SAFETY: duplicating a descriptor we hold.
    let copy = unsafe { libc::dup(fd) };
    assert!(copy >= 0);
    let b = s.attach_shared(pid, copy, 64).unwrap();
    // SAFETY: F_GETFD on a closed descriptor just fails.
    assert_eq!(
        unsafe { libc::fcntl(copy, libc::F_GETFD) },
        -1,
        "attach closes the received fd"
    );
    // SAFETY: both map the same 64 bytes.
    unsafe {
        *b.as_ptr() = 9;
        assert_eq!(*a.as_ptr(), 9);
    }
    // A wrong creator pid, or a descriptor of something else, is refused and left open.
    // SAFETY: duplicating a descriptor we hold.
    let copy = unsafe { libc::dup(fd) };
    let e = s.attach_shared(pid + 1, copy, 64).unwrap_err();
    assert!(
        e.message().contains("not an mxrt shared-memory segment"),
        "{e}"
    );
    // SAFETY: `copy` is still open (refused attaches do not close it); closing our own dup.
    assert_eq!(unsafe { libc::close(copy) }, 0);
    let file = std::fs::File::open("/proc/self/status").unwrap();
    let e = s
        .attach_shared(pid, std::os::fd::AsRawFd::as_raw_fd(&file), 64)
        .unwrap_err();
    assert!(e.message().contains("fewer than the 64 requested"), "{e}");
    let e = s.attach_shared(pid, 999_999, 64).unwrap_err();
    assert!(e.message().contains("Invalid file descriptor"), "{e}");
    let (pid_a, id_a) = a.share().unwrap();
    drop((a, b));
    // Two references (the second share_fd, the share) were never attached: the segment stays,
    // as in MXNet. Attach them to clean up.
    assert!(shm_path(pid_a, id_a).exists());
    drop(s.attach_shared(pid_a, id_a, 64).unwrap());
    drop(s.attach_shared(pid_a, id_a, 64).unwrap());
    assert!(!shm_path(pid_a, id_a).exists());

    // Ordinary memory has no shared handle and cannot be attached.
    let c = s.alloc(Context::cpu(0), 8).unwrap();
    assert!(c.share().unwrap_err().message().contains("cpu_shared"));
    assert!(c.share_fd().unwrap_err().message().contains("cpu_shared"));
}

/// Micro benchmark of the pool hit path (not a test; run explicitly):
/// `cargo test --release --lib storage::tests::bench_pool_hit -- --ignored --nocapture`.
/// Prints the best of 5 runs for: 1 KiB alloc+free on a warm Naive pool, the same unpooled, and
/// 1 KiB alloc+free from 2 threads at once on one pool (per operation, per thread).
#[test]
#[ignore]
fn bench_pool_hit() {
    fn run(s: &Storage, n: u32) -> f64 {
        let t = std::time::Instant::now();
        for _ in 0..n {
            let a = s.alloc(Context::cpu(0), 1024).unwrap();
            std::hint::black_box(a.as_ptr());
        }
        t.elapsed().as_nanos() as f64 / f64::from(n)
    }
    let n = 1_000_000;
    let pooled = storage_with(&[]);
    let unpooled = storage_with(&[("MXNET_CPU_MEM_POOL_TYPE", "Unpooled")]);
    let best = |f: &dyn Fn() -> f64| (0..5).map(|_| f()).fold(f64::INFINITY, f64::min);
    let hit = best(&|| run(&pooled, n));
    assert_eq!(pooled.stats(Context::cpu(0)).unwrap().misses, 1);
    let raw = best(&|| run(&unpooled, n));
    let shared = Arc::new(storage_with(&[]));
    let two = best(&|| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let s = shared.clone();
                std::thread::spawn(move || run(&s, n))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold(0.0, f64::max)
    });
    println!(
        "1 KiB alloc+free: pool hit {hit:.1} ns, unpooled {raw:.1} ns, 2 threads on one pool {two:.1} ns"
    );
}

#[test]
fn pinned_backend_slot_is_used_when_registered() {
    let s = storage_with(&[
        ("MXNET_CPU_MEM_POOL_RESERVE", "0"),
        ("MXNET_CPU_MEM_POOL_PAGE_SIZE", "4096"),
    ]);
    let dev = FakeDevice::with_capacity(1 << 20);
    let d2 = dev.clone();
    s.set_pinned_backend(Some(Arc::new(move |id| {
        assert_eq!(id, 1);
        Ok(d2.clone() as Arc<dyn DeviceMemory>)
    })));
    let a = s.alloc(Context::cpu_pinned(1), 100).unwrap();
    assert_eq!(dev.live_bytes.load(Ordering::SeqCst), 4096);
    // Plain cpu never uses it.
    let b = s.alloc(Context::cpu(1), 100).unwrap();
    assert_eq!(dev.allocations.load(Ordering::SeqCst), 1);
    drop((a, b));
    s.empty_cache(Context::cpu_pinned(1)).unwrap();
    assert_eq!(dev.live_bytes.load(Ordering::SeqCst), 0);
}
