//! One definition per operator: everything mxrt knows about an op lives in its [`OpDef`], written
//! next to the op's forward code in its family module (`ops/*.rs`) and registered once:
//!
//! - `forward`: the [`Operator`] that plans an invoke: parameters, shape and dtype inference, the
//!   CPU kernel, the GPU kernel if there is one (`Plan::gpu`).
//! - `grad`: its gradient, *expressed as other operators* through a [`GradGraph`]: the autograd
//!   tape runs it on NDArrays (recording it again for higher-order gradients), and a symbolic
//!   executor builds backward graph nodes from the same definition.
//! - `stype`: which storage the outputs the library allocates get when inputs are sparse.
//!
//! Adding a differentiable op is one change in one place:
//!
//! ```ignore
//! t.def("exp", &Exp).grad(|g| {           // d/dx exp(x) = exp(x): reuse the output
//!     let dx = g.mul(g.dy(0), g.y(0))?;
//!     Ok(vec![Some(dx)])
//! });
//! ```

use super::op::{OpState, Operator};
use super::stype::StorageRule;
use crate::error::{Error, Result};

/// A value in a gradient computation: an index the [`GradGraph`] gives meaning to (an NDArray
/// on the tape, a graph node entry in a symbolic executor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Val(pub u32);

/// Where gradient definitions put the operators they apply.
///
/// Definitions never look at shapes: the values of a symbolic graph have none when its backward
/// graph is built. Operators that need one take a "like" input (`broadcast_like`,
/// `_mxrt_sum_to_like`) and learn it when they run.
pub trait GradGraph {
    /// Applies operator `op` (an MXNet op name or one of mxrt's internal `_mxrt_*` ops) to
    /// `inputs` with `params` in MXNet's string syntax; returns its outputs.
    fn apply(&mut self, op: &'static str, inputs: &[Val], params: &[(&str, &str)])
    -> Result<Vec<Val>>;

    /// Applies a *stateful* gradient op: one that also needs the state its forward created
    /// ([`GradCtx::state`]; the `Custom` operator's backward calls the operator the forward
    /// created). A graph that cannot carry state refuses it.
    fn apply_stateful(
        &mut self,
        op: &'static str,
        inputs: &[Val],
        params: &[(&str, &str)],
        state: &OpState,
    ) -> Result<Vec<Val>> {
        let _ = (inputs, params, state);
        Err(Error::not_supported(format!(
            "the gradient op {op} needs its forward's state, which this graph does not keep"
        )))
    }
}

/// How an operator's inputs get their gradients.
#[derive(Clone, Copy)]
pub enum Gradient {
    /// MXNet registers no gradient: a backward pass that reaches the op with a gradient fails
    /// naming it (optimizer updates, random sampling, creation ops).
    None,
    /// The gradient of every input is zero (comparisons, `argmax`, rounding, `BlockGrad`).
    Zero,
    /// The inputs' gradients as operators applied to the forward's values.
    Ops(GradFn),
}

/// A gradient definition: one entry per forward input, `None` where the input gets no gradient
/// (an index, a mask) or does not need one ([`GradCtx::needs`]).
pub type GradFn = fn(&mut GradCtx<'_>) -> Result<Vec<Option<Val>>>;

/// What a gradient definition sees: the forward's inputs, outputs and parameters, the gradients
/// arriving at its outputs, and the graph to apply operators in.
pub struct GradCtx<'a> {
    pub graph: &'a mut dyn GradGraph,
    pub inputs: &'a [Val],
    pub outputs: &'a [Val],
    /// One gradient per forward output (zeros where nothing arrived).
    pub ograds: &'a [Val],
    /// The forward's parameters as the caller gave them.
    pub params: &'a [(String, String)],
    /// Which inputs need a gradient; definitions may skip the others.
    pub needs: &'a [bool],
    /// The forward's name (for messages).
    pub name: &'a str,
    /// Whether the forward ran in training mode (`Dropout` dropped, `BatchNorm` used the
    /// batch's statistics).
    pub training: bool,
    /// The state the forward created, if it created one ([`OpState`]).
    pub state: Option<&'a OpState>,
}

impl<'a> GradCtx<'a> {
    /// Forward input `i`.
    pub fn x(&self, i: usize) -> Val {
        self.inputs[i]
    }
    /// Forward output `i`.
    pub fn y(&self, i: usize) -> Val {
        self.outputs[i]
    }
    /// The gradient arriving at output `i`.
    pub fn dy(&self, i: usize) -> Val {
        self.ograds[i]
    }
    /// Whether input `i` needs a gradient.
    pub fn needs(&self, i: usize) -> bool {
        self.needs.get(i).copied().unwrap_or(false)
    }
    /// The forward's parameter `key` as given (quotes around strings removed).
    pub fn param(&self, key: &str) -> Option<&'a str> {
        let params: &'a [(String, String)] = self.params;
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim_matches(|c| c == '\'' || c == '"'))
    }
    /// Parameter `key` if given and not `None`.
    pub fn param_set(&self, key: &str) -> Option<&'a str> {
        self.param(key).filter(|v| !v.eq_ignore_ascii_case("none"))
    }
    /// Boolean parameter `key` (MXNet's spellings), `default` when absent.
    pub fn flag(&self, key: &str, default: bool) -> bool {
        match self.param_set(key) {
            Some(v) => matches!(v, "1" | "True" | "true"),
            None => default,
        }
    }
    /// Float parameter `key`, `default` when absent.
    pub fn float(&self, key: &str, default: f64) -> Result<f64> {
        match self.param_set(key) {
            Some(v) => v.trim().parse().map_err(|_| {
                Error::invalid(format!(
                    "gradient of {}: parameter {key}={v} is not a number",
                    self.name
                ))
            }),
            None => Ok(default),
        }
    }
    /// The forward's parameters among `keys`, to pass on to a gradient op.
    pub fn pass(&self, keys: &[&str]) -> Vec<(&'a str, &'a str)> {
        let params: &'a [(String, String)] = self.params;
        params
            .iter()
            .filter(|(k, _)| keys.contains(&k.as_str()))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    /// Applies `op` and returns its only (first) output.
    pub fn op(&mut self, op: &'static str, inputs: &[Val], params: &[(&str, &str)]) -> Result<Val> {
        Ok(self.graph.apply(op, inputs, params)?[0])
    }
    /// Applies `op` and returns all its outputs.
    pub fn ops(
        &mut self,
        op: &'static str,
        inputs: &[Val],
        params: &[(&str, &str)],
    ) -> Result<Vec<Val>> {
        self.graph.apply(op, inputs, params)
    }

    pub fn mul(&mut self, a: Val, b: Val) -> Result<Val> {
        self.op("elemwise_mul", &[a, b], &[])
    }
    pub fn div(&mut self, a: Val, b: Val) -> Result<Val> {
        self.op("elemwise_div", &[a, b], &[])
    }
    pub fn add(&mut self, a: Val, b: Val) -> Result<Val> {
        self.op("elemwise_add", &[a, b], &[])
    }
    pub fn sub(&mut self, a: Val, b: Val) -> Result<Val> {
        self.op("elemwise_sub", &[a, b], &[])
    }
    pub fn neg(&mut self, a: Val) -> Result<Val> {
        self.op("negative", &[a], &[])
    }
    /// `a * s` for a number `s`.
    pub fn scale(&mut self, a: Val, s: f64) -> Result<Val> {
        let s = s.to_string();
        self.op("_mul_scalar", &[a], &[("scalar", &s)])
    }
    /// `a + s` for a number `s`.
    pub fn shift(&mut self, a: Val, s: f64) -> Result<Val> {
        let s = s.to_string();
        self.op("_plus_scalar", &[a], &[("scalar", &s)])
    }
    /// `a` summed over the axes it was broadcast along, to the shape of `like`.
    pub fn sum_to(&mut self, a: Val, like: Val) -> Result<Val> {
        self.op("_mxrt_sum_to_like", &[a, like], &[])
    }
    pub fn zeros_like(&mut self, a: Val) -> Result<Val> {
        self.op("zeros_like", &[a], &[])
    }
    pub fn ones_like(&mut self, a: Val) -> Result<Val> {
        self.op("ones_like", &[a], &[])
    }
}

/// An operator as mxrt defines it (see the module documentation).
pub struct OpDef {
    /// MXNet's op name (aliases resolve to it through the registry), or `_mxrt_*` for mxrt's
    /// internal gradient ops.
    pub name: &'static str,
    pub forward: &'static dyn Operator,
    pub grad: Gradient,
    pub stype: StorageRule,
    /// How the op appears in a symbolic graph: its inputs' and outputs' names, the inputs it
    /// mutates (auxiliary states), and the backward shape and dtype rules of graph inference.
    pub graph: GraphDef,
    /// The input whose values the forward needs when it plans (an output shape that depends on
    /// data, `_contrib_boolean_mask`): an invoke waits for it and passes its values as
    /// [`super::op::Call::input_values`].
    pub reads_values: Option<usize>,
}

/// An op's parameters as a graph node holds them (hidden `__key__` attributes excluded).
pub type ParamList = [(String, String)];

/// The op's place in a graph for given parameters (MXNet's `FListInputNames`,
/// `FMutateInputs`, `FNumOutputs`, `FNumVisibleOutputs`, `FListOutputNames`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The inputs' names, in order; `None`: any number of inputs (variadic without a count).
    pub inputs: Option<Vec<String>>,
    /// Inputs the op writes (auxiliary states such as BatchNorm's moving statistics).
    pub mutates: Vec<usize>,
    /// Every output's name (its count is the op's output count, hidden outputs included).
    pub outputs: Vec<String>,
    /// How many outputs a symbol of the op shows.
    pub visible: usize,
}

impl Signature {
    /// `inputs` named as given, one output named `output`.
    pub fn simple(inputs: &[&str]) -> Signature {
        Signature {
            inputs: Some(inputs.iter().map(|s| s.to_string()).collect()),
            mutates: Vec::new(),
            outputs: vec!["output".into()],
            visible: 1,
        }
    }
    /// `n` outputs named `output0`, `output1`, ... (`output` when `n` is 1), all visible.
    pub fn with_outputs(mut self, n: usize) -> Signature {
        self.outputs = if n == 1 {
            vec!["output".into()]
        } else {
            (0..n).map(|i| format!("output{i}")).collect()
        };
        self.visible = n;
        self
    }
    /// Outputs with these names, of which the first `visible` are shown.
    pub fn named_outputs(mut self, names: &[&str], visible: usize) -> Signature {
        self.outputs = names.iter().map(|s| s.to_string()).collect();
        self.visible = visible.min(names.len());
        self
    }
    /// The op writes these inputs.
    pub fn mutating(mut self, inputs: &[usize]) -> Signature {
        self.mutates = inputs.to_vec();
        self
    }
}

/// The signature for a node's parameters.
pub type SignatureFn = fn(&ParamList) -> Result<Signature>;

/// A shape in graph inference: `None` when nothing is known; a known rank with 0 for each
/// unknown dimension otherwise (MXNet's legacy convention).
pub type PartialShape = Option<Vec<i64>>;

/// Shape inference beyond the plan: shapes for the inputs and the outputs, from the
/// parameters and the inputs' and outputs' shapes as far as known (`None` where the rule has
/// nothing to say). The graph merges them with what is known and reports a conflict naming
/// the node.
pub type InferShapesFn = fn(
    &ParamList,
    &[PartialShape],
    &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)>;

/// Parameter `key` of a graph node's parameters (quotes around strings removed).
pub fn param<'a>(params: &'a ParamList, key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.trim().trim_matches(|c| c == '\'' || c == '"'))
        .filter(|v| !v.eq_ignore_ascii_case("none"))
}

/// Boolean parameter `key` (MXNet's spellings), `default` when absent.
pub fn param_flag(params: &ParamList, key: &str, default: bool) -> Result<bool> {
    match param(params, key) {
        None => Ok(default),
        Some(v) => super::param::boolean(v)
            .ok_or_else(|| Error::invalid(format!("parameter {key}={v} is not a boolean"))),
    }
}

/// Integer parameter `key`, `default` when absent.
pub fn param_int(params: &ParamList, key: &str, default: i64) -> Result<i64> {
    match param(params, key) {
        None => Ok(default),
        Some(v) => super::param::int(v)
            .ok_or_else(|| Error::invalid(format!("parameter {key}={v} is not an integer"))),
    }
}

/// How graph inference relates an op's shapes beyond running its plan forward.
#[derive(Clone, Copy)]
pub enum ShapeRule {
    /// Only forward: outputs from the plan once every input shape is known.
    Forward,
    /// Elementwise: every input and output has one shape, so any known one gives the others.
    Same,
    /// Inputs (and hidden outputs) from parameters and other shapes (weights from the data,
    /// statistics from the channel count), then the plan forward.
    Rule(InferShapesFn),
}

/// How graph inference relates an op's dtypes (codes of [`crate::dtype::DType`]).
#[derive(Clone, Copy)]
pub enum TypeRule {
    /// Every input and output has one dtype (most ops).
    Same,
    /// Outputs of this dtype (from the parameters); inputs unconstrained.
    Fixed(fn(&ParamList) -> Option<crate::dtype::DType>),
    /// Each output's dtype from the parameters and the inputs' dtypes as far as known (`None`
    /// where the rule has nothing to say); inputs unconstrained.
    Outputs(fn(&ParamList, &[Option<crate::dtype::DType>]) -> Vec<Option<crate::dtype::DType>>),
}

/// The attribute (key, value) a variable composed into input `i` gets, if any.
pub type InputVarAttrFn = fn(usize) -> Option<(&'static str, &'static str)>;

/// What the graph layer needs of an op (see [`OpDef::graph`]).
#[derive(Clone, Copy)]
pub struct GraphDef {
    /// `None`: MXNet's op table's array arguments as inputs, one output.
    pub signature: Option<SignatureFn>,
    pub shape: ShapeRule,
    pub dtype: TypeRule,
    /// Attributes a variable composed into input `i` gets unless it has the key
    /// (`FSetInputVarAttrOnCompose`: BatchNorm's statistics' initialisers).
    pub input_var_attr: Option<InputVarAttrFn>,
    /// The inputs the op writes, for ops without a signature function (optimizer states).
    pub mutates: &'static [usize],
}

impl Default for GraphDef {
    fn default() -> Self {
        GraphDef {
            signature: None,
            shape: ShapeRule::Forward,
            dtype: TypeRule::Same,
            input_var_attr: None,
            mutates: &[],
        }
    }
}

impl OpDef {
    /// Whether MXNet's table declares parameters for the op (mxrt's internal ops do): an op
    /// without any ignores the parameters it is given, as MXNet's do.
    pub fn declares_params(&self) -> bool {
        let reg = super::registry::Registry::global();
        reg.lookup(self.name)
            .is_none_or(|id| reg.op(id).parameters().next().is_some())
    }

    /// The op's gradient as operators.
    pub fn grad(&mut self, f: GradFn) -> &mut OpDef {
        self.grad = Gradient::Ops(f);
        self
    }
    /// Every input's gradient is zero.
    pub fn zero_grad(&mut self) -> &mut OpDef {
        self.grad = Gradient::Zero;
        self
    }
    /// The outputs' storage rule.
    pub fn stype(&mut self, rule: StorageRule) -> &mut OpDef {
        self.stype = rule;
        self
    }
    /// The op's inputs, outputs and mutated inputs in a graph.
    pub fn signature(&mut self, f: SignatureFn) -> &mut OpDef {
        self.graph.signature = Some(f);
        self
    }
    /// The op's backward shape rule in graph inference.
    pub fn shape_rule(&mut self, rule: ShapeRule) -> &mut OpDef {
        self.graph.shape = rule;
        self
    }
    /// The op's dtype rule in graph inference.
    pub fn dtype_rule(&mut self, rule: TypeRule) -> &mut OpDef {
        self.graph.dtype = rule;
        self
    }
    /// The inputs the op writes (its auxiliary states in a graph).
    pub fn mutates(&mut self, inputs: &'static [usize]) -> &mut OpDef {
        self.graph.mutates = inputs;
        self
    }
    /// The forward plans with input `i`'s values (its output shape depends on them).
    pub fn reads_values(&mut self, i: usize) -> &mut OpDef {
        self.reads_values = Some(i);
        self
    }
    /// Attributes given to variables composed into the op's inputs.
    pub fn input_var_attr(&mut self, f: InputVarAttrFn) -> &mut OpDef {
        self.graph.input_var_attr = Some(f);
        self
    }
}

/// The definitions the op families register.
#[derive(Default)]
pub struct Entries(pub(crate) Vec<OpDef>);

impl Entries {
    /// Registers op `name`, without gradient and with dense outputs until the returned
    /// definition says otherwise.
    pub fn def(&mut self, name: &'static str, forward: &'static dyn Operator) -> &mut OpDef {
        self.0.push(OpDef {
            name,
            forward,
            grad: Gradient::None,
            stype: StorageRule::Dense,
            graph: GraphDef::default(),
            reads_values: None,
        });
        self.0.last_mut().expect("just pushed")
    }

    /// [`Entries::def`] for a `(name, operator)` pair.
    pub fn push(&mut self, (name, forward): (&'static str, &'static dyn Operator)) -> &mut OpDef {
        self.def(name, forward)
    }
}

impl std::fmt::Debug for OpDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OpDef({})", self.name)
    }
}
