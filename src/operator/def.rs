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

use super::op::Operator;
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
        });
        self.0.last_mut().expect("just pushed")
    }

    /// [`Entries::def`] for a `(name, operator)` pair.
    pub fn push(&mut self, (name, forward): (&'static str, &'static dyn Operator)) -> &mut OpDef {
        self.def(name, forward)
    }
}
