"""Host memory is reused across calls (storage_reuse_script.py): on libmxrt no fresh pages per
call once warm (MXNet 1.9.1 does not pool host memory: its calls fault in about half of each
16 MiB output, as glibc gives some of it back), the pool serves the calls from its cache,
MXStorageEmptyCache gives the cache back and the next call allocates again;
MXNET_CPU_MEM_POOL_TYPE=Unpooled turns the pool off."""

from conftest import json_results, libmxrt

FRESH_OUTPUT_PAGES = (4 << 20) * 4 // 4096


def test_outputs_reuse_memory():
    real = json_results("storage_reuse_script.py", "mxnet")
    ours = json_results("storage_reuse_script.py", str(libmxrt()))
    assert real["err"] < 1e-5 and ours["err"] < 1e-5, (real, ours)
    # a call that faulted in its whole output would take 4096 pages
    assert ours["faults_per_call"] < FRESH_OUTPUT_PAGES / 8, ours


def test_pool_serves_calls_and_empty_cache_releases():
    r = json_results("storage_reuse_script.py", str(libmxrt()))
    # (a call now and then may find one more output in flight than any before)
    assert r["misses"] <= 2 and r["hits"] >= 8, r
    assert r["cached_before_empty"] >= (4 << 20) * 4, r
    assert r["cached_after_empty"] == 0, r
    assert r["misses_after_empty"] >= 1, r


def test_unpooled_pool_type_is_honoured():
    r = json_results("storage_reuse_script.py", str(libmxrt()),
                     (("MXNET_CPU_MEM_POOL_TYPE", "Unpooled"),))
    assert r["err"] < 1e-5, r
    assert r["hits"] == 0 and r["misses"] >= 10, r
    assert r["cached_before_empty"] == 0, r
