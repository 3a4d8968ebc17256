//! Elementwise fusion: runs a run of elementwise nodes of a planned graph as one pass over memory.
//!
//! An op whose plan is an elementwise map ([`Plan::map`](crate::operator::op::Plan::map):
//! unary math, activations, scalar ops, same-shape binary ops, `clip`, ...) sets each output
//! element from the input elements at the same index only, so its kernel may run on any slice of
//! its arrays. Consecutive such nodes of a planned graph whose inputs and output all have one
//! length and one dtype form a [`Group`]. The group runs block by block: the element range is
//! split over the intra-op pool, and each thread takes its part in blocks of [`BLOCK_BYTES`]
//! per value, running every node of the group on the block before the next block, so the values
//! stay in the cache between nodes. A value that only nodes of the group read lives in a small
//! per-thread block buffer (a slot) and never reaches memory; a value read after the group (or a
//! graph output) is written to its array or scratch buffer as the unfused run would.
//!
//! Each node runs its own kernel on the block slices, so every element gets the same arithmetic
//! as the unfused run: the results are bit for bit the same. `MXRT_FUSION=0` turns fusion off.
//!
//! Why the scratch buffers of the unfused plan stay valid: the planner reuses a buffer once its
//! value's last reader has run. Inside a group, a block of a later node is written only after
//! every earlier node of the group has read the same block, and all values of a group have one
//! dtype, so the elements a node writes in a reused buffer are exactly the ones the old value's
//! readers have already read (threads work on disjoint element ranges of every buffer).

use super::fast::{FastStep, Loc};
use crate::dtype::DType;
use crate::operator::op::BlockKernel;
use crate::operator::tensor::Tensor;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::OnceLock;

/// The most nodes one group takes: planning a group looks for each member's inputs among the
/// earlier members (quadratic in its length), so a longer run becomes several groups, each
/// still one pass over its values.
const MAX_GROUP: usize = 64;

/// Bytes of one block of one value (a few of them fit the L1/L2 cache together).
const BLOCK_BYTES: usize = 32 << 10;

/// Whether graphs are fused: not when `MXRT_FUSION` is `0` (read once).
pub(super) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("MXRT_FUSION").map_or(true, |v| v.trim() != "0"))
}

/// Where a node of a group reads or writes a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Src {
    /// The value's array or scratch buffer, at the block's offset.
    Ext(Loc),
    /// A per-thread block buffer.
    Slot(usize),
}

/// One node of a group.
#[derive(Debug)]
pub(super) struct FusedOp {
    pub(super) inputs: SmallVec<[Src; 4]>,
    pub(super) output: Src,
}

/// Consecutive elementwise steps `first..first + ops.len()` of a plan, run block by block.
#[derive(Debug)]
pub(super) struct Group {
    pub(super) first: usize,
    pub(super) ops: Vec<FusedOp>,
    /// Elements of every value.
    len: usize,
    dtype: DType,
    /// Block buffers per thread.
    slots: usize,
}

/// The length and dtype of a step that can join a group: an elementwise map with one output
/// whose inputs and output all have that length and dtype.
fn signature(step: &FastStep) -> Option<(usize, DType)> {
    if !step.fusable || step.out_descs.len() != 1 {
        return None;
    }
    let out = &step.out_descs[0];
    let len = out.size();
    let same = |d: &crate::operator::op::TensorDesc| d.dtype == out.dtype && d.size() == len;
    (len > 0 && step.in_descs.iter().all(same)).then_some((len, out.dtype))
}

/// The groups of `steps` (in step order); `graph_outputs` are the graph's output values as
/// (node, output) pairs of the graph's positions ([`FastStep::node`]).
pub(super) fn find_groups(steps: &[FastStep], graph_outputs: &[(usize, usize)]) -> Vec<Group> {
    // the steps reading each value, found once: a group's planning asks for every member's
    let mut readers: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
    for (j, st) in steps.iter().enumerate() {
        for &v in &st.in_values {
            readers.entry(v).or_default().push(j);
        }
    }
    let mut groups = Vec::new();
    let mut s = 0;
    while s < steps.len() {
        let Some(sig) = signature(&steps[s]) else {
            s += 1;
            continue;
        };
        let mut e = s + 1;
        while e < steps.len() && e - s < MAX_GROUP && signature(&steps[e]) == Some(sig) {
            e += 1;
        }
        if e - s >= 2 {
            groups.push(build(steps, s, e, sig, graph_outputs, &readers));
        }
        s = e;
    }
    groups
}

/// Plans the group of steps `s..e`: which values stay in block buffers, and their slots.
fn build(
    steps: &[FastStep],
    s: usize,
    e: usize,
    (len, dtype): (usize, DType),
    graph_outputs: &[(usize, usize)],
    readers_of: &HashMap<(usize, usize), Vec<usize>>,
) -> Group {
    // the steps reading step i's output
    let readers = |i: usize| {
        readers_of
            .get(&(steps[i].node, 0))
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .copied()
    };
    let local: Vec<bool> = (s..e)
        .map(|i| {
            !graph_outputs.contains(&(steps[i].node, 0)) && readers(i).all(|j| (s..e).contains(&j))
        })
        .collect();
    // the last reader of each local value
    let last: Vec<usize> = (s..e).map(|i| readers(i).max().unwrap_or(i)).collect();
    let mut slot_of: Vec<Option<usize>> = vec![None; e - s];
    let mut free: Vec<usize> = Vec::new();
    let mut slots = 0;
    let mut ops = Vec::with_capacity(e - s);
    for i in s..e {
        let step = &steps[i];
        let inputs = step
            .in_values
            .iter()
            .zip(&step.inputs)
            .map(|(&(node, _), &loc)| {
                match (s..i).find(|&j| steps[j].node == node).map(|j| j - s) {
                    Some(k) if local[k] => {
                        Src::Slot(slot_of[k].expect("a local value keeps its slot until read"))
                    }
                    _ => Src::Ext(loc),
                }
            })
            .collect();
        let output = if local[i - s] {
            let slot = free.pop().unwrap_or_else(|| {
                slots += 1;
                slots - 1
            });
            slot_of[i - s] = Some(slot);
            Src::Slot(slot)
        } else {
            Src::Ext(step.outputs[0])
        };
        // slots whose last reader is this step (or unread outputs) are free for the next steps
        for k in 0..=(i - s) {
            if last[k] <= i
                && let Some(slot) = slot_of[k].take()
            {
                free.push(slot);
            }
        }
        ops.push(FusedOp { inputs, output });
    }
    Group {
        first: s,
        ops,
        len,
        dtype,
        slots,
    }
}

/// A base address that the pool's threads may share; each touches disjoint element ranges.
#[derive(Clone, Copy)]
struct Addr(*mut u8);
// SAFETY: the addresses are of arrays and scratch buffers that the running engine op owns; the
// threads of one group access disjoint element ranges of them.
unsafe impl Send for Addr {}
// SAFETY: as above.
unsafe impl Sync for Addr {}

#[derive(Clone, Copy)]
enum At {
    Base(Addr),
    Slot(usize),
}

/// Scratch memory, aligned for every dtype.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

impl Group {
    /// The step after the group's last.
    pub(super) fn end(&self) -> usize {
        self.first + self.ops.len()
    }

    /// Runs the group: `kernels[k]` is the block kernel of step `first + k`; `addr` gives the
    /// start of the array or scratch buffer at a location.
    ///
    /// # Safety
    /// Every location the group names must be the start of a live array or buffer of at least
    /// `len` elements of the group's dtype, exclusively this run's to use as the unfused steps
    /// would (inputs read, outputs written), aligned for the dtype.
    pub(super) unsafe fn run(&self, kernels: &[BlockKernel], addr: impl Fn(Loc) -> *mut u8) {
        let at = |src: Src| match src {
            Src::Ext(loc) => At::Base(Addr(addr(loc))),
            Src::Slot(j) => At::Slot(j),
        };
        let ops: Vec<(SmallVec<[At; 4]>, At)> = self
            .ops
            .iter()
            .map(|op| (op.inputs.iter().map(|&s| at(s)).collect(), at(op.output)))
            .collect();
        let (dtype, dsize) = (self.dtype, self.dtype.size());
        let block = (BLOCK_BYTES / dsize).max(1);
        let cost = self.ops.len();
        crate::parallel::for_ranges(self.len, cost, |start, end| {
            let mut scratch = vec![Line([0; 64]); (self.slots * block * dsize).div_ceil(64)];
            let base = scratch.as_mut_ptr().cast::<u8>();
            crate::parallel::serial(|| {
                let mut b = start;
                while b < end {
                    let n = block.min(end - b);
                    let shape = [n as i64];
                    let ptr = |a: At| match a {
                        // SAFETY: `b + n <= len`: inside the array (the caller's contract).
                        At::Base(p) => unsafe { p.0.add(b * dsize) },
                        // SAFETY: slot `j < slots` of `block` elements in `scratch`.
                        At::Slot(j) => unsafe { base.add(j * block * dsize) },
                    };
                    for ((ins, out), kernel) in ops.iter().zip(kernels) {
                        // SAFETY: each address holds `n` elements of `dtype` (above); this
                        // thread alone touches elements `b..b + n` of the arrays and its own
                        // slots; an output is a slot or array no input of the same node is
                        // (fresh slots, and the planner's distinct buffers), except that an
                        // elementwise map allows exact aliasing anyway.
                        let inputs: SmallVec<[Tensor; 4]> = ins
                            .iter()
                            .map(|&a| unsafe { Tensor::new(ptr(a), &shape, dtype, true) })
                            .collect();
                        // SAFETY: as above.
                        let outputs = [unsafe { Tensor::new(ptr(*out), &shape, dtype, true) }];
                        kernel(&inputs, &outputs);
                    }
                    b += n;
                }
            });
            drop(scratch);
        });
    }
}
