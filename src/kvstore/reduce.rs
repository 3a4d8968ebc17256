//! The element-wise sum of N arrays into an output (CommCPU's `ReduceSumCPU`).
//!
//! The output is written once and every input read once: the arrays are walked in blocks of
//! [`BLOCK`] elements, each block summed in a small accumulator that stays in L1 (the inputs are
//! added in order, so float results equal a serial `out = in0; out += in1; ...`). float16 and
//! bfloat16 are accumulated in float32 and rounded once; integers wrap; bool is a logical or.
//! Arrays of at least `bigarray_bound` elements are split into tasks run on `nthreads` threads
//! ([`crate::parallel::for_tasks`]: the calling engine worker and threads of mxrt's pool).

use crate::dtype::DType;
use crate::error::{Error, Result};
use half::{bf16, f16};

/// Elements summed per accumulator block (and per task granule).
pub const BLOCK: usize = 2048;
/// Elements per parallel task: a multiple of [`BLOCK`].
const TASK: usize = 16 * BLOCK;

/// MXNet's defaults: `MXNET_KVSTORE_BIGARRAY_BOUND` and `MXNET_KVSTORE_REDUCTION_NTHREADS`.
pub const DEFAULT_BIGARRAY_BOUND: usize = 1_000_000;
pub const DEFAULT_REDUCTION_NTHREADS: usize = 4;

/// How big reductions are split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReduceConfig {
    /// Arrays with at least this many elements are reduced by several threads.
    pub bigarray_bound: usize,
    /// Threads used above the bound (1 = always serial).
    pub nthreads: usize,
}

impl Default for ReduceConfig {
    fn default() -> Self {
        ReduceConfig {
            bigarray_bound: DEFAULT_BIGARRAY_BOUND,
            nthreads: DEFAULT_REDUCTION_NTHREADS,
        }
    }
}

fn env_usize(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(v) if v.trim().is_empty() => Ok(default),
        Ok(v) => v.trim().parse::<usize>().map_err(|_| {
            Error::invalid(format!(
                "{name}={v:?} is not a non-negative integer (default {default})"
            ))
        }),
        Err(_) => Ok(default),
    }
}

impl ReduceConfig {
    /// Reads `MXNET_KVSTORE_BIGARRAY_BOUND` and `MXNET_KVSTORE_REDUCTION_NTHREADS` (empty or unset
    /// = MXNet's default).
    pub fn from_env() -> Result<Self> {
        Ok(ReduceConfig {
            bigarray_bound: env_usize("MXNET_KVSTORE_BIGARRAY_BOUND", DEFAULT_BIGARRAY_BOUND)?,
            nthreads: env_usize(
                "MXNET_KVSTORE_REDUCTION_NTHREADS",
                DEFAULT_REDUCTION_NTHREADS,
            )?,
        })
    }

    /// True if an array of `len` elements is split across threads.
    pub fn is_parallel(&self, len: usize) -> bool {
        self.nthreads > 1 && len >= self.bigarray_bound
    }
}

/// An element type that can be summed: `Acc` is what a block accumulates in.
trait Elem: Copy + Send + Sync + 'static {
    type Acc: Copy + Default;
    fn load(self) -> Self::Acc;
    fn add(a: Self::Acc, b: Self) -> Self::Acc;
    fn store(a: Self::Acc) -> Self;
}

/// Types that accumulate in themselves; `a, b => sum` says how two of them add.
macro_rules! self_acc_elem {
    ($a:ident, $b:ident => $sum:expr; $($t:ty),*) => {$(
        impl Elem for $t {
            type Acc = $t;
            #[inline(always)]
            fn load(self) -> $t { self }
            #[inline(always)]
            fn add($a: $t, $b: $t) -> $t { $sum }
            #[inline(always)]
            fn store(a: $t) -> $t { a }
        }
    )*};
}
self_acc_elem!(a, b => a + b; f32, f64);
self_acc_elem!(a, b => a.wrapping_add(b); u8, i8, i16, u16, i32, u32, i64, u64);

macro_rules! half_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            type Acc = f32;
            #[inline(always)]
            fn load(self) -> f32 { self.to_f32() }
            #[inline(always)]
            fn add(a: f32, b: $t) -> f32 { a + b.to_f32() }
            #[inline(always)]
            fn store(a: f32) -> $t { <$t>::from_f32(a) }
        }
    )*};
}
half_elem!(f16, bf16);

/// bool stored as one byte (0 or 1): the sum is "any input true".
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Bool(u8);

impl Elem for Bool {
    type Acc = u8;
    #[inline(always)]
    fn load(self) -> u8 {
        self.0
    }
    #[inline(always)]
    fn add(a: u8, b: Bool) -> u8 {
        a | b.0
    }
    #[inline(always)]
    fn store(a: u8) -> Bool {
        Bool((a != 0) as u8)
    }
}

/// Sums `ins` element-wise into `out` (all the same length).
#[inline(always)]
fn sum_into<T: Elem>(out: &mut [T], ins: &[&[T]]) {
    // two to four inputs: one fused pass, no accumulator
    let n = out.len();
    match ins {
        [a, b] => {
            for (i, o) in out.iter_mut().enumerate().take(n) {
                *o = T::store(T::add(a[i].load(), b[i]));
            }
            return;
        }
        [a, b, c] => {
            let (a, b, c) = (&a[..n], &b[..n], &c[..n]);
            for i in 0..n {
                out[i] = T::store(T::add(T::add(a[i].load(), b[i]), c[i]));
            }
            return;
        }
        [a, b, c, d] => {
            let (a, b, c, d) = (&a[..n], &b[..n], &c[..n], &d[..n]);
            for i in 0..n {
                out[i] = T::store(T::add(T::add(T::add(a[i].load(), b[i]), c[i]), d[i]));
            }
            return;
        }
        _ => {}
    }
    sum_blocked(out, ins)
}

/// Sums `ins` element-wise into `out` block by block through an accumulator.
#[inline(always)]
fn sum_blocked<T: Elem>(out: &mut [T], ins: &[&[T]]) {
    let mut acc = [T::Acc::default(); BLOCK];
    let mut start = 0;
    for out_block in out.chunks_mut(BLOCK) {
        let n = out_block.len();
        let end = start + n;
        let acc = &mut acc[..n];
        for (a, &x) in acc.iter_mut().zip(&ins[0][start..end]) {
            *a = x.load();
        }
        for input in &ins[1..] {
            for (a, &x) in acc.iter_mut().zip(&input[start..end]) {
                *a = T::add(*a, x);
            }
        }
        for (o, &a) in out_block.iter_mut().zip(acc.iter()) {
            *o = T::store(a);
        }
        start = end;
    }
}

/// A destination/source pointer that may cross into the pool's threads.
#[derive(Clone, Copy)]
struct Ptr(*mut u8);
// SAFETY: only dereferenced for disjoint output ranges and shared input reads (see `reduce`).
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

impl Ptr {
    /// The pointer (a method, so closures capture the whole Send wrapper).
    fn get(self) -> *mut u8 {
        self.0
    }
}

fn reduce_typed<T: Elem>(out: *mut u8, ins: &[*const u8], len: usize, cfg: &ReduceConfig) {
    let out = Ptr(out);
    let ins: smallvec::SmallVec<[Ptr; 8]> = ins.iter().map(|&p| Ptr(p as *mut u8)).collect();
    let run = |begin: usize, end: usize| {
        // SAFETY: per `reduce`'s contract each input holds `len` readable elements of T, the
        // output `len` writable ones not overlapping any input, and [begin, end) is a range no
        // other task touches in the output.
        let (o, i): (&mut [T], smallvec::SmallVec<[&[T]; 8]>) = unsafe {
            (
                std::slice::from_raw_parts_mut((out.get() as *mut T).add(begin), end - begin),
                ins.iter()
                    .map(|p| {
                        std::slice::from_raw_parts((p.get() as *const T).add(begin), end - begin)
                    })
                    .collect(),
            )
        };
        sum_into(o, &i);
    };
    if cfg.is_parallel(len) {
        let ntasks = len.div_ceil(TASK);
        crate::parallel::for_tasks(ntasks, cfg.nthreads, |t| {
            run(t * TASK, ((t + 1) * TASK).min(len))
        });
    } else {
        run(0, len);
    }
}

/// Sums `ins` (each `len` elements of `dtype`) into `out`.
///
/// # Safety
/// Every input pointer must be valid for reads of `len` elements and the output for writes of
/// `len` elements, all aligned for `dtype`; the output must not overlap any input; nothing else
/// may write these ranges during the call. `ins` must not be empty.
pub unsafe fn reduce(
    dtype: DType,
    out: *mut u8,
    ins: &[*const u8],
    len: usize,
    cfg: &ReduceConfig,
) {
    assert!(!ins.is_empty(), "reduce of no inputs");
    if len == 0 {
        return;
    }
    match dtype {
        DType::F32 => reduce_typed::<f32>(out, ins, len, cfg),
        DType::F64 => reduce_typed::<f64>(out, ins, len, cfg),
        DType::F16 => reduce_typed::<f16>(out, ins, len, cfg),
        DType::BF16 => reduce_typed::<bf16>(out, ins, len, cfg),
        DType::U8 => reduce_typed::<u8>(out, ins, len, cfg),
        DType::I8 => reduce_typed::<i8>(out, ins, len, cfg),
        DType::I16 => reduce_typed::<i16>(out, ins, len, cfg),
        DType::U16 => reduce_typed::<u16>(out, ins, len, cfg),
        DType::I32 => reduce_typed::<i32>(out, ins, len, cfg),
        DType::U32 => reduce_typed::<u32>(out, ins, len, cfg),
        DType::I64 => reduce_typed::<i64>(out, ins, len, cfg),
        DType::U64 => reduce_typed::<u64>(out, ins, len, cfg),
        DType::Bool => reduce_typed::<Bool>(out, ins, len, cfg),
    }
}

/// Copies `src` (`bytes` long) into every destination, split across the pool like a reduction
/// when `len` (elements) is big.
///
/// # Safety
/// `src` valid for reads of `bytes`, each destination for writes of `bytes`; destinations must
/// not overlap each other or `src`, and nothing else may write them during the call.
pub unsafe fn broadcast(
    src: *const u8,
    dsts: &[*mut u8],
    bytes: usize,
    len: usize,
    cfg: &ReduceConfig,
) {
    if bytes == 0 || dsts.is_empty() {
        return;
    }
    let src = Ptr(src as *mut u8);
    let dsts: smallvec::SmallVec<[Ptr; 8]> = dsts.iter().map(|&p| Ptr(p)).collect();
    let copy = |begin: usize, end: usize| {
        for d in &dsts {
            // SAFETY: per the contract; [begin, end) lies within `bytes`.
            unsafe {
                std::ptr::copy_nonoverlapping(src.get().add(begin), d.get().add(begin), end - begin)
            };
        }
    };
    if cfg.is_parallel(len) {
        // tasks of about TASK elements' bytes, at least 64 KiB
        let task_bytes = (bytes / len.max(1) * TASK).max(64 << 10);
        let ntasks = bytes.div_ceil(task_bytes);
        crate::parallel::for_tasks(ntasks, cfg.nthreads, |t| {
            copy(t * task_bytes, ((t + 1) * task_bytes).min(bytes))
        });
    } else {
        copy(0, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: Copy>(dtype: DType, ins: &[Vec<T>], cfg: &ReduceConfig) -> Vec<T> {
        let len = ins[0].len();
        let mut out = ins[0].clone();
        out.iter_mut().for_each(|x| *x = ins[ins.len() - 1][0]);
        let ptrs: Vec<*const u8> = ins.iter().map(|v| v.as_ptr() as *const u8).collect();
        // SAFETY: every vector has `len` elements of the dtype's type; `out` is distinct.
        unsafe { reduce(dtype, out.as_mut_ptr() as *mut u8, &ptrs, len, cfg) };
        out
    }

    #[test]
    fn f32_matches_serial_sum_bit_for_bit() {
        let n = 5000;
        let ins: Vec<Vec<f32>> = (0..5)
            .map(|k| {
                (0..n)
                    .map(|i| ((i * 7 + k * 13) % 101) as f32 * 0.37 - 11.1)
                    .collect()
            })
            .collect();
        let got = run(DType::F32, &ins, &ReduceConfig::default());
        for i in 0..n {
            let mut want = ins[0][i];
            for v in &ins[1..] {
                want += v[i];
            }
            assert_eq!(got[i].to_bits(), want.to_bits(), "element {i}");
        }
    }

    #[test]
    fn one_input_is_a_copy_and_bool_is_or() {
        let a = vec![1.5f64, -2.0, 3.25];
        assert_eq!(
            run(
                DType::F64,
                std::slice::from_ref(&a),
                &ReduceConfig::default()
            ),
            a
        );
        let b = run(
            DType::Bool,
            &[vec![0u8, 1, 0, 1], vec![0u8, 0, 1, 1]],
            &ReduceConfig::default(),
        );
        assert_eq!(b, vec![0, 1, 1, 1]);
        let w = run(
            DType::U8,
            &[vec![200u8, 1], vec![100u8, 2]],
            &ReduceConfig::default(),
        );
        assert_eq!(w, vec![44, 3]);
    }

    #[test]
    fn parallel_split_equals_serial() {
        // three tasks of TASK elements or more (fewer elements under Miri, which is slow)
        let n = if cfg!(miri) { 2 * TASK + 1 } else { 300_001 };
        let ins: Vec<Vec<i32>> = (0..3)
            .map(|k| (0..n).map(|i| (i as i32) * (k + 1)).collect())
            .collect();
        let par = ReduceConfig {
            bigarray_bound: 1000,
            nthreads: 3,
        };
        let ser = ReduceConfig {
            bigarray_bound: usize::MAX,
            nthreads: 1,
        };
        assert!(par.is_parallel(n));
        let a = run(DType::I32, &ins, &par);
        let b = run(DType::I32, &ins, &ser);
        assert_eq!(a, b);
        assert_eq!(a[n - 1], (n as i32 - 1) * 6);
    }

    #[test]
    fn broadcast_fills_every_destination() {
        // several tasks of 64 KiB (fewer under Miri, which is slow)
        let n = if cfg!(miri) { 2 * TASK + 7 } else { 100_000 };
        let src: Vec<u32> = (0..n as u32).collect();
        let mut d1 = vec![0u32; src.len()];
        let mut d2 = vec![7u32; src.len()];
        let cfg = ReduceConfig {
            bigarray_bound: 10,
            nthreads: 2,
        };
        // SAFETY: three distinct buffers of the same size.
        unsafe {
            broadcast(
                src.as_ptr() as *const u8,
                &[d1.as_mut_ptr() as *mut u8, d2.as_mut_ptr() as *mut u8],
                src.len() * 4,
                src.len(),
                &cfg,
            )
        };
        assert_eq!(d1, src);
        assert_eq!(d2, src);
    }
}
