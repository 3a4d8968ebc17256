//! The local KVStore's core: sums per dtype against a serial reference, the threaded split,
//! asynchrony and ordering through the engine, the updater, and every error with its message.

use half::{bf16, f16};
use mxrt::engine::{Engine, FnProperty, PushArgs};
use mxrt::kvstore::{KVStore, KeyKind, KeyValueStore, Keys, ReduceConfig, StoreKind, reduce};
use mxrt::ndarray::NDArray;
use mxrt::ndarray::format::StorageType;
use mxrt::{Context, DType, ErrorKind};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
fn arr(v: &[f32]) -> NDArray {
    let a = NDArray::new(&[v.len() as i64], Context::cpu(0), DType::F32, false).unwrap();
    a.sync_copy_from_bytes(&f32_bytes(v)).unwrap();
    a
}
fn read(a: &NDArray) -> Vec<f32> {
    to_f32(&a.to_bytes().unwrap())
}
fn bytes_arr(shape: &[i64], dtype: DType, bytes: &[u8]) -> NDArray {
    let a = NDArray::new(shape, Context::cpu(0), dtype, false).unwrap();
    a.sync_copy_from_bytes(bytes).unwrap();
    a
}

/// A deterministic pseudo-random byte pattern turned into valid values of `dtype`.
fn values(dtype: DType, n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::with_capacity(n * dtype.size());
    for _ in 0..n {
        let r = next();
        let small = ((r % 2001) as f64 - 1000.0) / 8.0; // exact in every float type
        match dtype {
            DType::F32 => out.extend((small as f32).to_le_bytes()),
            DType::F64 => out.extend((small * 1.1).to_le_bytes()),
            DType::F16 => out.extend(f16::from_f64(small).to_le_bytes()),
            DType::BF16 => out.extend(bf16::from_f64(small).to_le_bytes()),
            DType::Bool => out.push((r % 3 == 0) as u8),
            _ => out.extend(&r.to_le_bytes()[..dtype.size()]),
        }
    }
    out
}

/// The serial reference: out = in0; out += in1; ... element by element (floats in input order,
/// halves accumulated in f32 and rounded once, integers wrapping, bool as "any").
fn reference(dtype: DType, ins: &[Vec<u8>]) -> Vec<u8> {
    let sz = dtype.size();
    let n = ins[0].len() / sz;
    let mut out = Vec::with_capacity(ins[0].len());
    for i in 0..n {
        let el = |k: usize| &ins[k][i * sz..(i + 1) * sz];
        macro_rules! fold {
            ($t:ty, $add:expr) => {{
                let mut acc = <$t>::from_le_bytes(el(0).try_into().unwrap());
                for k in 1..ins.len() {
                    acc = $add(acc, <$t>::from_le_bytes(el(k).try_into().unwrap()));
                }
                out.extend(acc.to_le_bytes());
            }};
        }
        match dtype {
            DType::F32 => fold!(f32, |a: f32, b: f32| a + b),
            DType::F64 => fold!(f64, |a: f64, b: f64| a + b),
            DType::F16 | DType::BF16 => {
                let conv = |b: &[u8]| {
                    let bits = u16::from_le_bytes(b.try_into().unwrap());
                    if dtype == DType::F16 {
                        f16::from_bits(bits).to_f32()
                    } else {
                        bf16::from_bits(bits).to_f32()
                    }
                };
                let mut acc = conv(el(0));
                for k in 1..ins.len() {
                    acc += conv(el(k));
                }
                let bits = if dtype == DType::F16 {
                    f16::from_f32(acc).to_bits()
                } else {
                    bf16::from_f32(acc).to_bits()
                };
                out.extend(bits.to_le_bytes());
            }
            DType::U8 => fold!(u8, u8::wrapping_add),
            DType::I8 => fold!(i8, i8::wrapping_add),
            DType::I16 => fold!(i16, i16::wrapping_add),
            DType::U16 => fold!(u16, u16::wrapping_add),
            DType::I32 => fold!(i32, i32::wrapping_add),
            DType::U32 => fold!(u32, u32::wrapping_add),
            DType::I64 => fold!(i64, i64::wrapping_add),
            DType::U64 => fold!(u64, u64::wrapping_add),
            DType::Bool => out.push((0..ins.len()).any(|k| el(k)[0] != 0) as u8),
        }
    }
    out
}

#[test]
fn push_sums_every_dtype_like_a_serial_reference() {
    // 5 inputs for one key (odd count, over several accumulator blocks and a ragged tail)
    let n = 5000;
    for dtype in DType::ALL {
        let kv = KVStore::create("local").unwrap();
        let ins: Vec<Vec<u8>> = (0..5).map(|k| values(dtype, n, k + 1)).collect();
        let arrays: Vec<NDArray> = ins
            .iter()
            .map(|b| bytes_arr(&[50, 100], dtype, b))
            .collect();
        let zero = NDArray::new(&[50, 100], Context::cpu(0), dtype, false).unwrap();
        zero.sync_copy_from_bytes(&vec![0u8; n * dtype.size()])
            .unwrap();
        kv.init(Keys::Int(&[9]), &[&zero]).unwrap();
        let refs: Vec<&NDArray> = arrays.iter().collect();
        kv.push(Keys::Int(&[9; 5]), &refs, 0).unwrap();
        let out = NDArray::new(&[50, 100], Context::cpu(0), dtype, false).unwrap();
        kv.pull(Keys::Int(&[9]), &[&out], 0, true).unwrap();
        assert_eq!(
            out.to_bytes().unwrap(),
            reference(dtype, &ins),
            "dtype {}",
            dtype.name()
        );
    }
}

#[test]
fn big_arrays_are_split_across_threads_with_the_same_result() {
    let n = 1 << 18;
    let par = ReduceConfig {
        bigarray_bound: 1000,
        nthreads: 4,
    };
    let ser = ReduceConfig {
        bigarray_bound: usize::MAX,
        nthreads: 1,
    };
    assert!(par.is_parallel(n) && !ser.is_parallel(n));
    assert!(!ReduceConfig::default().is_parallel(999_999));
    assert!(ReduceConfig::default().is_parallel(1_000_000));
    for dtype in [DType::F32, DType::F16, DType::I64] {
        let ins: Vec<Vec<u8>> = (0..4).map(|k| values(dtype, n, 100 + k)).collect();
        let want = reference(dtype, &ins);
        for cfg in [par, ser] {
            let mut out = vec![0xAAu8; n * dtype.size()];
            // reduce on byte vectors: allocate aligned copies via u64 storage
            let aligned: Vec<Vec<u64>> = ins
                .iter()
                .map(|b| {
                    let mut v = vec![0u64; b.len().div_ceil(8)];
                    // SAFETY: v has at least b.len() bytes.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            b.as_ptr(),
                            v.as_mut_ptr() as *mut u8,
                            b.len(),
                        )
                    };
                    v
                })
                .collect();
            let mut out_al = vec![0u64; out.len().div_ceil(8)];
            let ptrs: Vec<*const u8> = aligned.iter().map(|v| v.as_ptr() as *const u8).collect();
            // SAFETY: every buffer holds n aligned elements of dtype; the output is distinct.
            unsafe { reduce::reduce(dtype, out_al.as_mut_ptr() as *mut u8, &ptrs, n, &cfg) };
            // SAFETY: out_al holds at least out.len() bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    out_al.as_ptr() as *const u8,
                    out.as_mut_ptr(),
                    out.len(),
                )
            };
            assert_eq!(out, want, "dtype {} cfg {cfg:?}", dtype.name());
        }
        // and through a store configured to split
        let kv = KVStore::with_config("local", par).unwrap();
        let arrays: Vec<NDArray> = ins
            .iter()
            .map(|b| bytes_arr(&[n as i64], dtype, b))
            .collect();
        kv.init(Keys::Int(&[0]), &[&arrays[0]]).unwrap();
        let refs: Vec<&NDArray> = arrays.iter().collect();
        kv.push(Keys::Int(&[0; 4]), &refs, 0).unwrap();
        let outs: Vec<NDArray> = (0..3)
            .map(|_| NDArray::new(&[n as i64], Context::cpu(0), dtype, false).unwrap())
            .collect();
        let orefs: Vec<&NDArray> = outs.iter().collect();
        kv.pull(Keys::Int(&[0; 3]), &orefs, 0, true).unwrap();
        for o in &outs {
            assert_eq!(o.to_bytes().unwrap(), want);
        }
    }
}

/// Pushes an op that writes `a` and blocks until `gate` opens; returns the gate.
fn block_writes(a: &NDArray) -> Arc<AtomicBool> {
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    let var = [a.var().unwrap().clone()];
    Engine::global()
        .unwrap()
        .push_fn(
            PushArgs::new(Context::cpu(0))
                .writes(&var)
                .prop(FnProperty::CpuPrioritized),
            move |_| {
                while !g.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            },
        )
        .unwrap();
    gate
}

#[test]
fn push_is_asynchronous_and_a_pull_sees_the_push_before_it() {
    let kv = KVStore::create("local").unwrap();
    kv.init(Keys::Int(&[1, 2]), &[&arr(&[0.0; 4]), &arr(&[0.0; 4])])
        .unwrap();
    let a = arr(&[1.0; 4]);
    let b = arr(&[2.0; 4]);
    let gate = block_writes(&a);
    // push returns although its input is still being written
    kv.push(Keys::Int(&[1, 1]), &[&a, &b], 0).unwrap();
    let out1 = arr(&[-1.0; 4]);
    kv.pull(Keys::Int(&[1]), &[&out1], 0, true).unwrap();
    // another key is not held up by key 1
    let c = arr(&[5.0; 4]);
    kv.push(Keys::Int(&[2]), &[&c], 0).unwrap();
    let out2 = arr(&[-1.0; 4]);
    kv.pull(Keys::Int(&[2]), &[&out2], 0, true).unwrap();
    assert_eq!(read(&out2), vec![5.0; 4]);
    gate.store(true, Ordering::Release);
    assert_eq!(read(&out1), vec![3.0; 4]);
    // many rounds: each pull sees the push just before it
    for r in 0..20 {
        let v = arr(&[r as f32; 4]);
        kv.push(Keys::Int(&[2, 2, 2]), &[&v, &v, &v], 0).unwrap();
        let out = arr(&[0.0; 4]);
        kv.pull(Keys::Int(&[2]), &[&out], r, true).unwrap();
        assert_eq!(read(&out), vec![3.0 * r as f32; 4], "round {r}");
    }
}

#[test]
fn the_stored_value_is_a_copy_of_the_pushed_arrays() {
    let kv = KVStore::create("local").unwrap();
    let init = arr(&[1.0, 2.0]);
    kv.init(Keys::Str(&["w"]), &[&init]).unwrap();
    init.sync_copy_from_bytes(&f32_bytes(&[9.0, 9.0])).unwrap();
    let out = arr(&[0.0, 0.0]);
    kv.pull(Keys::Str(&["w"]), &[&out], 0, true).unwrap();
    assert_eq!(read(&out), vec![1.0, 2.0]);
    // one value, and several values
    for vals in [
        vec![arr(&[4.0, 5.0])],
        vec![arr(&[1.0, 1.0]), arr(&[3.0, 4.0])],
    ] {
        let refs: Vec<&NDArray> = vals.iter().collect();
        let keys = vec!["w"; refs.len()];
        kv.push(Keys::Str(&keys), &refs, 0).unwrap();
        for v in &vals {
            v.sync_copy_from_bytes(&f32_bytes(&[-7.0, -7.0])).unwrap();
        }
        kv.pull(Keys::Str(&["w"]), &[&out], 0, true).unwrap();
        assert_eq!(read(&out), vec![4.0, 5.0]);
    }
}

#[test]
fn push_pull_and_broadcast() {
    let kv = KVStore::create("Local_AllReduce_CPU").unwrap();
    assert_eq!(kv.type_name(), "local_allreduce_cpu");
    let outs = [arr(&[0.0; 3]), arr(&[0.0; 3])];
    kv.broadcast(
        Keys::Int(&[4]),
        Keys::Int(&[4, 4]),
        &[&arr(&[1.0, 2.0, 3.0])],
        &[&outs[0], &outs[1]],
        0,
    )
    .unwrap();
    assert_eq!(read(&outs[0]), vec![1.0, 2.0, 3.0]);
    assert_eq!(read(&outs[1]), vec![1.0, 2.0, 3.0]);
    let e = kv
        .broadcast(
            Keys::Int(&[4]),
            Keys::Int(&[4]),
            &[&arr(&[0.0; 3])],
            &[&outs[0]],
            0,
        )
        .unwrap_err();
    assert!(e.message().starts_with("duplicate init of key 4"), "{e}");
    kv.push_pull(
        Keys::Int(&[4, 4]),
        Keys::Int(&[4]),
        &[&arr(&[7.0; 3]), &arr(&[2.0; 3])],
        &[&outs[1]],
        0,
    )
    .unwrap();
    assert_eq!(read(&outs[1]), vec![9.0; 3]);
}

type Calls = Arc<Mutex<Vec<(String, Vec<f32>, Vec<f32>)>>>;

#[test]
fn updater_runs_once_per_unique_key_with_the_right_key_kind() {
    // int keys
    let kv = KVStore::create("local").unwrap();
    let calls: Calls = Default::default();
    let c = calls.clone();
    let thread = std::thread::current().id();
    kv.set_updater(Some(Arc::new(
        move |key: i32, merged: &NDArray, stored: &NDArray| {
            assert_eq!(
                std::thread::current().id(),
                thread,
                "updater runs on the pushing thread"
            );
            assert_eq!(stored.ctx(), Some(Context::cpu_pinned(0)));
            c.lock()
                .push((format!("int {key}"), read(merged), read(stored)));
            // stored += merged, through the engine
            let bytes: Vec<f32> = read(stored)
                .iter()
                .zip(read(merged))
                .map(|(a, b)| a + b)
                .collect();
            stored.sync_copy_from_bytes(&f32_bytes(&bytes)).unwrap();
        },
    )));
    kv.init(Keys::Int(&[5, 3]), &[&arr(&[10.0]), &arr(&[20.0])])
        .unwrap();
    kv.push(
        Keys::Int(&[5, 3, 5]),
        &[&arr(&[1.0]), &arr(&[2.0]), &arr(&[4.0])],
        0,
    )
    .unwrap();
    assert_eq!(
        *calls.lock(),
        vec![
            ("int 3".to_owned(), vec![2.0], vec![20.0]),
            ("int 5".to_owned(), vec![5.0], vec![10.0]),
        ]
    );
    let out = arr(&[0.0]);
    kv.pull(Keys::Int(&[5]), &[&out], 0, true).unwrap();
    assert_eq!(read(&out), vec![15.0]);

    // string keys: the string updater gets the names; without one the int updater gets the ids
    let kv = KVStore::create("device").unwrap();
    let calls: Calls = Default::default();
    let (c1, c2) = (calls.clone(), calls.clone());
    kv.set_updater(Some(Arc::new(move |key: i32, m: &NDArray, s: &NDArray| {
        c1.lock().push((format!("int {key}"), read(m), read(s)));
    })));
    kv.set_str_updater(Some(Arc::new(
        move |key: &str, m: &NDArray, s: &NDArray| {
            c2.lock().push((format!("str {key}"), read(m), read(s)));
        },
    )));
    kv.init(Keys::Str(&["b", "a"]), &[&arr(&[1.0]), &arr(&[2.0])])
        .unwrap();
    kv.push(
        Keys::Str(&["a", "b", "a"]),
        &[&arr(&[1.0]), &arr(&[3.0]), &arr(&[5.0])],
        0,
    )
    .unwrap();
    // ordered by id: "b" was initialised first (id 0)
    assert_eq!(
        *calls.lock(),
        vec![
            ("str b".to_owned(), vec![3.0], vec![1.0]),
            ("str a".to_owned(), vec![6.0], vec![2.0]),
        ]
    );
    calls.lock().clear();
    kv.set_str_updater(None);
    kv.push(Keys::Str(&["a"]), &[&arr(&[8.0])], 0).unwrap();
    assert_eq!(
        *calls.lock(),
        vec![("int 1".to_owned(), vec![8.0], vec![2.0])]
    );
    // without updaters the sum replaces the value
    kv.set_updater(None);
    kv.push(Keys::Str(&["a", "a"]), &[&arr(&[8.0]), &arr(&[1.0])], 0)
        .unwrap();
    let out = arr(&[0.0]);
    kv.pull(Keys::Str(&["a"]), &[&out], 0, true).unwrap();
    assert_eq!(read(&out), vec![9.0]);
    assert_eq!(calls.lock().len(), 1);
}

#[test]
fn an_updater_that_pushes_engine_ops_is_ordered_with_pulls() {
    let kv = KVStore::create("local").unwrap();
    kv.set_updater(Some(Arc::new(
        |_key: i32, merged: &NDArray, stored: &NDArray| {
            // stored -= 0.5 * merged, as an engine op
            let (m, s) = (merged.clone(), stored.clone());
            let reads = [m.var().unwrap().clone()];
            let writes = [s.var().unwrap().clone()];
            Engine::global()
                .unwrap()
                .push_fn(
                    PushArgs::new(Context::cpu(0)).reads(&reads).writes(&writes),
                    move |_| {
                        let (mp, sp) = (
                            m.data_ptr().unwrap() as *const f32,
                            s.data_ptr().unwrap() as *mut f32,
                        );
                        for i in 0..s.size() {
                            // SAFETY: both arrays hold s.size() f32s; the engine orders this op.
                            unsafe { *sp.add(i) -= 0.5 * *mp.add(i) };
                        }
                        Ok(())
                    },
                )
                .unwrap();
        },
    )));
    kv.init(Keys::Int(&[0]), &[&arr(&[10.0, 10.0])]).unwrap();
    let out = arr(&[0.0, 0.0]);
    for _ in 0..4 {
        kv.push(
            Keys::Int(&[0, 0]),
            &[&arr(&[1.0, 2.0]), &arr(&[1.0, 2.0])],
            0,
        )
        .unwrap();
        kv.pull(Keys::Int(&[0]), &[&out], 0, true).unwrap();
    }
    assert_eq!(read(&out), vec![6.0, 2.0]);
}

#[test]
fn errors_name_what_is_wrong() {
    let msg = |r: mxrt::Result<()>| r.unwrap_err().message().to_owned();
    let kv = KVStore::create("local").unwrap();
    let a = arr(&[1.0, 2.0]);
    assert_eq!(
        msg(kv.pull(Keys::Int(&[7]), &[&a], 0, true)),
        "key 7 has not been inited"
    );
    assert_eq!(kv.key_kind(), Some(KeyKind::Int));
    assert_eq!(
        msg(kv.push(Keys::Int(&[7, 7]), &[&a, &a], 0)),
        "key 7 has not been inited"
    );
    assert!(msg(kv.init(Keys::Str(&["x"]), &[&a])).starts_with("Mixed key types are not allowed"));
    kv.init(Keys::Int(&[7]), &[&a]).unwrap();
    assert!(
        msg(kv.init(Keys::Int(&[7]), &[&a]))
            .starts_with("duplicate init of key 7. Please double check")
    );
    assert!(msg(kv.init(Keys::Int(&[8, 8]), &[&a, &a])).starts_with("duplicate init of key 8"));
    // a failed init stores nothing
    assert_eq!(
        msg(kv.pull(Keys::Int(&[8]), &[&a], 0, true)),
        "key 8 has not been inited"
    );
    let e = msg(kv.push(Keys::Int(&[7, 7]), &[&a, &arr(&[1.0, 2.0, 3.0])], 0));
    assert!(
        e.contains("value 1 pushed to key 7")
            && e.contains("shape mismatch")
            && e.contains("[3]")
            && e.contains("[2]"),
        "{e}"
    );
    let i32a = NDArray::new(&[2], Context::cpu(0), DType::I32, false).unwrap();
    let e = msg(kv.pull(Keys::Int(&[7, 7]), &[&a, &i32a], 0, true));
    assert!(
        e.contains("output 1 pulled from key 7")
            && e.contains("dtype mismatch")
            && e.contains("int32")
            && e.contains("float32"),
        "{e}"
    );
    let e = msg(kv.push(Keys::Int(&[7]), &[&NDArray::none()], 0));
    assert!(e.contains("none array"), "{e}");
    let e = msg(kv.push(Keys::Int(&[7, 7]), &[&a], 0));
    assert!(e.contains("2 keys but 1 values"), "{e}");
    // row_sparse_pull needs a row_sparse output and a row_sparse value: key 7 is dense
    let rows = NDArray::new(&[1], Context::cpu(0), DType::I64, false).unwrap();
    let e = msg(kv.pull_row_sparse(Keys::Int(&[7]), &[&a], &[&rows], 0));
    assert!(e.contains("output 0 for key 7 has default storage; it must be row_sparse"), "{e}");
    let rsp = NDArray::new_sparse(StorageType::RowSparse, a.shape(), Context::cpu(0), DType::F32, &[DType::I64]).unwrap();
    let e = msg(kv.pull_row_sparse(Keys::Int(&[7]), &[&rsp], &[&rows], 0));
    assert!(e.contains("PullRowSparse expects row_sparse src NDArray"), "{e}");
    let e = kv
        .set_gradient_compression(&[("type", "2bit")])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotSupported);

    let kv = KVStore::create("local").unwrap();
    kv.init(Keys::Str(&["w"]), &[&a]).unwrap();
    assert_eq!(
        msg(kv.push(Keys::Str(&["v"]), &[&a], 0)),
        "key v doesn't exist. Did you init?"
    );
    assert!(msg(kv.pull(Keys::Int(&[0]), &[&a], 0, true)).starts_with("Mixed key types"));

    // distributed stores come from kvstore::create (tests/dist runs them as MPI jobs)
    for t in ["dist_sync", "DIST_ASYNC", "dist_sync_device"] {
        let e = KVStore::create(t).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{t}");
        assert!(e.message().contains(t) && e.message().contains("kvstore::create"), "{e}");
    }
    #[cfg(not(feature = "dist"))]
    {
        let e = mxrt::kvstore::create("dist_sync").err().expect("no dist feature");
        assert_eq!(e.kind(), ErrorKind::NotSupported);
        assert!(e.message().contains("needs MPI") && e.message().contains("cargo feature `dist`"), "{e}");
    }
    let e = KVStore::create("nccl").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotSupported);
    assert!(e.message().contains("nccl"), "{e}");
    for t in ["", "bogus", "Local_Foo", "localx"] {
        let e = StoreKind::parse(t).unwrap_err();
        assert!(e.message().contains("unknown kvstore type"), "{e}");
    }
    for (t, k) in [
        ("local", StoreKind::Local),
        ("LOCAL", StoreKind::Local),
        ("local_allreduce_cpu", StoreKind::Local),
        ("local_update_cpu", StoreKind::Local),
        ("local_allreduce_device", StoreKind::Device),
        ("Device", StoreKind::Device),
    ] {
        assert_eq!(StoreKind::parse(t).unwrap(), k, "{t}");
    }
}

#[test]
fn a_value_pushed_from_the_stored_array_itself_is_handled() {
    // the updater can leak the stored array; pushing it back must not alias the reduction
    let kv = KVStore::create("local").unwrap();
    let leaked: Arc<Mutex<Option<NDArray>>> = Default::default();
    let l = leaked.clone();
    kv.set_updater(Some(Arc::new(move |_k: i32, _m: &NDArray, s: &NDArray| {
        *l.lock() = Some(s.clone());
    })));
    kv.init(Keys::Int(&[0]), &[&arr(&[1.0, 2.0])]).unwrap();
    kv.push(Keys::Int(&[0]), &[&arr(&[0.0, 0.0])], 0).unwrap();
    kv.set_updater(None);
    let stored = leaked.lock().take().unwrap();
    kv.push(Keys::Int(&[0, 0]), &[&stored, &arr(&[1.0, 1.0])], 0)
        .unwrap();
    let out = arr(&[0.0, 0.0]);
    kv.pull(Keys::Int(&[0]), &[&out], 0, true).unwrap();
    assert_eq!(read(&out), vec![2.0, 3.0]);
}

/// Timing of the kernels alone (run with `cargo test --release --test kvstore -- --ignored`).
#[test]
#[ignore]
fn kernel_timing() {
    let n = 1 << 20;
    let ins: Vec<Vec<f32>> = (0..4).map(|k| vec![k as f32; n]).collect();
    let mut out = vec![0f32; n];
    let ptrs: Vec<*const u8> = ins.iter().map(|v| v.as_ptr() as *const u8).collect();
    for threads in [1, 2, 4] {
        let cfg = ReduceConfig {
            bigarray_bound: 1_000_000,
            nthreads: threads,
        };
        let t = std::time::Instant::now();
        for _ in 0..200 {
            // SAFETY: 4 inputs and one distinct output of n f32s.
            unsafe { reduce::reduce(DType::F32, out.as_mut_ptr() as *mut u8, &ptrs, n, &cfg) };
        }
        let dt = t.elapsed().as_secs_f64() / 200.0;
        let mut outs: Vec<Vec<f32>> = (0..4).map(|_| vec![0f32; n]).collect();
        let dsts: Vec<*mut u8> = outs.iter_mut().map(|v| v.as_mut_ptr() as *mut u8).collect();
        let t = std::time::Instant::now();
        for _ in 0..200 {
            // SAFETY: distinct buffers of n f32s.
            unsafe { reduce::broadcast(out.as_ptr() as *const u8, &dsts, n * 4, n, &cfg) };
        }
        let db = t.elapsed().as_secs_f64() / 200.0;
        println!(
            "threads {threads}: reduce 4x4MiB {:.0} us, broadcast 4x4MiB {:.0} us",
            dt * 1e6,
            db * 1e6
        );
    }
}

/// The distributed store sits above kvstore and registers its kinds with `kvstore::create`
/// itself. In a fresh process (a child of this test; DMLC_ROLE=scheduler, which starts no MPI):
/// Rust code gets a distributed store from `mxrt::dist::create` as its first call, and
/// `kvstore::create` makes them from then on; through the C API, `MXKVStoreCreate` as the
/// process's first call makes one.
#[cfg(feature = "dist")]
#[test]
fn distributed_stores_as_a_first_call() {
    for mode in ["rust", "c"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "distributed_store_first_call_child", "--ignored", "--nocapture"])
            .env("MXRT_DIST_FIRST_CALL_CHILD", mode)
            .env("DMLC_ROLE", "scheduler")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{mode}:\n{stdout}\n{stderr}"
        );
    }
}

#[cfg(feature = "dist")]
#[test]
#[ignore = "run by distributed_stores_as_a_first_call"]
fn distributed_store_first_call_child() {
    match std::env::var("MXRT_DIST_FIRST_CALL_CHILD").as_deref() {
        Ok("rust") => {
            let kv = mxrt::dist::create("dist_sync").unwrap();
            assert_eq!(kv.type_name(), "dist_sync");
            let kv = mxrt::kvstore::create("Dist_Async").unwrap();
            assert_eq!(kv.type_name(), "dist_async");
            // local type strings still make local stores
            assert_eq!(mxrt::dist::create("local").unwrap().type_name(), "local");
        }
        Ok("c") => {
            use mxrt::capi::kvstore::{MXKVStoreCreate, MXKVStoreFree, MXKVStoreGetType};
            let mut h = std::ptr::null_mut();
            // SAFETY: a C string and an out-parameter, as the C API asks.
            assert_eq!(unsafe { MXKVStoreCreate(c"dist_sync".as_ptr(), &mut h) }, 0);
            let mut t = std::ptr::null();
            // SAFETY: a live store handle and an out-parameter.
            assert_eq!(unsafe { MXKVStoreGetType(h, &mut t) }, 0);
            // SAFETY: the store's type string, valid while the store lives.
            assert_eq!(unsafe { std::ffi::CStr::from_ptr(t) }.to_str(), Ok("dist_sync"));
            // SAFETY: the handle made above, freed once.
            assert_eq!(unsafe { MXKVStoreFree(h) }, 0);
        }
        _ => {}
    }
}
