//! What an operator is: given its inputs' shapes and dtypes and its parameters, it decides at
//! invoke time what it will produce ([`Plan::outputs`]), which inputs it also writes, what
//! resource it needs, and the kernel that will run later inside an engine op.
//!
//! Shape and dtype inference therefore happen on the calling thread, so a bad shape is an error
//! from the invoke itself (as in MXNet), while the kernel runs in the engine like any other op.
//! The same split serves the symbolic executor later: inference without running anything.

use super::param::Params;
use super::tensor::Tensor;
use crate::context::Context;
use crate::dtype::DType;
use crate::error::Result;
use crate::engine::Engine;
use crate::ndarray::{NDArray, Shape};
use crate::resource::{Resource, ResourceRequest};
use std::any::Any;
use std::sync::Arc;

/// State an operator creates when it is invoked and its gradient op uses later (MXNet's
/// `OpStatePtr`): the `Custom` operator's created Python operator. The autograd tape keeps it
/// with the recorded op and hands it to the gradient's stateful ops ([`Call::state`]).
pub type OpState = Arc<dyn Any + Send + Sync>;

/// An op that pushes its own engine work instead of one kernel op (see [`Plan::launch`]): it gets
/// the engine, the inputs, the outputs (allocated or given) and the device, after allocation.
pub type Launch = Box<dyn FnOnce(&Engine, &[NDArray], &[NDArray], Context) -> Result<()> + Send>;

/// An array's shape and dtype: what inference works on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    pub shape: Shape,
    pub dtype: DType,
}

impl TensorDesc {
    pub fn new(shape: &[i64], dtype: DType) -> Self {
        TensorDesc {
            shape: Shape::from_slice(shape),
            dtype,
        }
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().map(|&d| d.max(0) as usize).product()
    }
}

/// One invoke as an operator sees it.
pub struct Call<'a> {
    /// The name the op was invoked by (an alias keeps its own name for messages).
    pub name: &'a str,
    pub inputs: &'a [TensorDesc],
    pub params: &'a Params<'a>,
    /// The outputs the caller gave (`out=`), if any: ops whose result dtype is free (copies,
    /// fills) follow them.
    pub given_outputs: Option<&'a [TensorDesc]>,
    /// The device of the first input, if any.
    pub input_ctx: Option<Context>,
    /// Training mode of the invoking thread (`Dropout` drops, `BatchNorm` uses batch statistics).
    pub training: bool,
    /// The forward's state, for a gradient op invoked with one ([`OpState`]).
    pub state: Option<&'a OpState>,
    /// The values of the input the definition names in `reads_values`, as numbers, when the
    /// caller could read them (an invoke on NDArrays); `None` in graph inference.
    pub input_values: Option<&'a [f64]>,
}

/// How a kernel may touch outputs that share memory with inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aliasing {
    /// The kernel reads inputs as slices: an output that overlaps an input is computed into a
    /// scratch array and copied back by the runner, so the kernel never sees the overlap.
    Staged,
    /// The kernel works index by index through raw pointers and reads element `i` of every input
    /// before writing element `i` of any output: an output may be exactly an input (`x += y`,
    /// optimizer updates). Partial overlaps are still staged.
    Elementwise,
}

/// What runs inside the engine op.
pub type Kernel = Box<dyn FnOnce(&mut KernelArgs<'_>) -> Result<()> + Send>;

/// An elementwise map that may run on any matching part of its tensors (see [`Plan::map`]): given
/// inputs and outputs of one length, it sets element `i` of each output from element `i` of the
/// inputs only. Graph fusion runs it block by block on slices of the arrays.
pub type BlockKernel = Arc<dyn Fn(&[Tensor], &[Tensor]) + Send + Sync>;

/// The arrays and resource a kernel gets.
pub struct KernelArgs<'a> {
    pub inputs: &'a [Tensor],
    pub outputs: &'a mut [Tensor],
    /// The resource the plan asked for.
    pub resource: Option<&'a Resource>,
}

/// What an invoke will do.
pub struct Plan {
    pub outputs: Vec<TensorDesc>,
    /// Inputs the kernel also writes (the `*_update` optimizers' weights and states).
    pub mutates: Vec<usize>,
    pub aliasing: Aliasing,
    pub resource: Option<ResourceRequest>,
    /// Where the outputs live when there are no inputs (creation ops' `ctx`).
    pub ctx: Option<Context>,
    pub kernel: Kernel,
    /// What the op does when its arrays are on a GPU (`None`: it cannot run there).
    pub gpu: Option<GpuKernel>,
    /// How many of `outputs` the caller sees (`None`: all). The others are hidden outputs
    /// (MXNet's `FNumVisibleOutputs`, e.g. `Dropout`'s mask): the library allocates them, the
    /// autograd tape keeps them for the op's gradient, and an invoke returns only the visible
    /// ones (and takes only those as `out=`).
    pub visible: Option<usize>,
    /// State the op created (the autograd tape keeps it for the op's gradient).
    pub state: Option<OpState>,
    /// Instead of `kernel`: the op pushes its own engine work (`Custom`, whose Python callbacks
    /// run outside the engine's workers). Runs after the outputs are allocated.
    pub launch: Option<Launch>,
    /// The kernel as a reusable elementwise map over slices, when it is one ([`Plan::map`]).
    pub block: Option<BlockKernel>,
}

/// An op's work on GPU arrays. Every variant runs on the device (or copies between devices):
/// GPU memory is never read or written by host code.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GpuKernel {
    /// Every output element set to the value converted to the output's dtype.
    Fill(f64),
    /// The output is a copy of input 0 (same dtype), from or to any device.
    Copy,
    /// The output is the sum of the inputs (same shape and dtype, all on the output's GPU).
    Sum,
    /// The output is `input 0 op input 1` elementwise (same shape and dtype, on one GPU).
    Binary(GpuBinary),
}

/// The two-operand elementwise kernels (besides addition, which is [`GpuKernel::Sum`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuBinary {
    Sub,
    Mul,
}

impl Plan {
    /// A plan with one output and a staged kernel.
    pub fn new(
        outputs: Vec<TensorDesc>,
        kernel: impl FnOnce(&mut KernelArgs<'_>) -> Result<()> + Send + 'static,
    ) -> Plan {
        Plan {
            outputs,
            mutates: Vec::new(),
            aliasing: Aliasing::Staged,
            resource: None,
            ctx: None,
            kernel: Box::new(kernel),
            gpu: None,
            visible: None,
            state: None,
            launch: None,
            block: None,
        }
    }

    /// An elementwise plan whose kernel is the map `f` over whole tensors. `f` must compute
    /// element `i` of every output from element `i` of the inputs alone (all of one length), so
    /// it also runs on slices of them (it is kept as [`Plan::block`] for fusion).
    pub fn map(
        outputs: Vec<TensorDesc>,
        f: impl Fn(&[Tensor], &[Tensor]) + Send + Sync + 'static,
    ) -> Plan {
        let f: BlockKernel = Arc::new(f);
        let whole = f.clone();
        let mut plan = Plan::new(outputs, move |k| {
            whole(k.inputs, k.outputs);
            Ok(())
        })
        .elementwise();
        plan.block = Some(f);
        plan
    }

    /// Only the first `n` outputs are visible; the rest are hidden (see [`Plan::visible`]).
    pub fn with_visible(mut self, n: usize) -> Plan {
        self.visible = Some(n);
        self
    }

    /// The number of outputs the caller sees.
    pub fn num_visible(&self) -> usize {
        self.visible.unwrap_or(self.outputs.len()).min(self.outputs.len())
    }

    pub fn elementwise(mut self) -> Plan {
        self.aliasing = Aliasing::Elementwise;
        self
    }

    pub fn mutating(mut self, inputs: &[usize]) -> Plan {
        self.mutates = inputs.to_vec();
        self
    }

    pub fn with_resource(mut self, req: ResourceRequest) -> Plan {
        self.resource = Some(req);
        self
    }

    pub fn on(mut self, ctx: Option<Context>) -> Plan {
        self.ctx = ctx;
        self
    }

    /// The op can also run on GPU arrays, doing `kernel` there.
    pub fn with_gpu(mut self, kernel: GpuKernel) -> Plan {
        self.gpu = Some(kernel);
        self
    }
}

/// An operator: plans an invoke from its inputs and parameters.
pub trait Operator: Sync {
    fn plan(&self, call: &Call<'_>) -> Result<Plan>;
}

/// Plain functions are operators.
impl<F: Fn(&Call<'_>) -> Result<Plan> + Sync> Operator for F {
    fn plan(&self, call: &Call<'_>) -> Result<Plan> {
        self(call)
    }
}
