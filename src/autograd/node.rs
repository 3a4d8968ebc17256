//! The recorded graph: nodes and the entries arrays hold.
//!
//! An array's autograd slot (`NDArray::autograd_entry`) holds an [`Entry`]: a node and which of
//! its outputs the array is. A node is a *variable* (a leaf marked for gradients, with its
//! gradient buffer and request) or a recorded *op*. Op nodes own what their gradients need and
//! the entries of their inputs, so a graph lives exactly as long as an array that ends in it;
//! saved arrays are detached copies, so no node is reachable from itself. A backward without
//! `retain_graph` frees the op nodes it walked: their saved arrays are released and arrays that
//! point at them are no longer in a graph.

use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What a backward does with a variable's gradient (MXNet's `OpReqType` codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradReq {
    /// 0: no gradient.
    Null,
    /// 1: the gradient overwrites the buffer.
    Write,
    /// 3: the gradient is added to the buffer.
    Add,
}

impl GradReq {
    /// MXNet's code (0, 1, 3; 2 "inplace" is treated as write, as MXNet does for variables).
    pub fn from_code(code: u32) -> Option<GradReq> {
        match code {
            0 => Some(GradReq::Null),
            1 | 2 => Some(GradReq::Write),
            3 => Some(GradReq::Add),
            _ => None,
        }
    }

    /// MXNet's code of the request (what a custom function's backward callback receives).
    pub fn code(self) -> u32 {
        match self {
            GradReq::Null => 0,
            GradReq::Write => 1,
            GradReq::Add => 3,
        }
    }
}

/// A variable: a leaf of the graph that gets a gradient.
pub struct Variable {
    /// The gradient buffer (a detached copy of the array given to `MarkVariables`).
    pub grad: NDArray,
    pub req: GradReq,
    /// Set by a backward that wrote this gradient; read and cleared by `Trainer.step`.
    pub fresh: AtomicBool,
}

/// A recorded op.
pub struct OpRecord {
    /// The op definition's name (aliases resolved).
    pub op: &'static str,
    /// The name it was invoked by (messages).
    pub called_as: &'static str,
    pub params: Vec<(String, String)>,
    /// The entries of its inputs (`None`: a constant, an array that was in no graph).
    pub inputs: Vec<Option<Entry>>,
    /// Detached copies of its inputs and outputs, which its gradient reads.
    pub saved_inputs: Vec<NDArray>,
    pub saved_outputs: Vec<NDArray>,
    /// Training mode when it ran.
    pub training: bool,
    /// A custom function's backward (`autograd.Function`), which replaces the op's gradient.
    pub custom: Option<std::sync::Arc<dyn CustomBackward>>,
    /// The state the op created when it ran (`Custom`'s operator), for its gradient.
    pub state: Option<crate::operator::op::OpState>,
}

/// The backward of a custom function (`MXCustomFunctionRecord`): given the gradients of its
/// outputs, fills the gradients of its inputs (`igrads`, new arrays of the inputs' shapes and
/// dtypes) per `reqs`. Dropping it releases the function (its delete callback).
pub trait CustomBackward: Send + Sync {
    fn backward(
        &self,
        ograds: Vec<NDArray>,
        igrads: Vec<NDArray>,
        reqs: &[GradReq],
        is_train: bool,
    ) -> Result<()>;
}

pub enum NodeKind {
    Variable(Variable),
    /// `None` once a backward without `retain_graph` freed it.
    Op(Mutex<Option<OpRecord>>),
}

/// A node of a recorded graph.
pub struct Node {
    /// Process-wide number (MXNet names nodes `node_<M>` and variables `var<N>`).
    pub id: u64,
    pub kind: NodeKind,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A node number no node has (names of graph inputs made for constants).
pub fn fresh_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl Node {
    pub fn variable(v: Variable) -> Arc<Node> {
        Arc::new(Node {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            kind: NodeKind::Variable(v),
        })
    }

    pub fn op(r: OpRecord) -> Arc<Node> {
        Arc::new(Node {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            kind: NodeKind::Op(Mutex::new(Some(r))),
        })
    }

    pub fn as_variable(&self) -> Option<&Variable> {
        match &self.kind {
            NodeKind::Variable(v) => Some(v),
            NodeKind::Op(_) => None,
        }
    }

    /// Whether this is an op node a backward has freed.
    pub fn is_freed(&self) -> bool {
        match &self.kind {
            NodeKind::Op(r) => r.lock().is_none(),
            NodeKind::Variable(_) => false,
        }
    }

    /// Frees an op node: its saved arrays and input edges are released.
    pub fn free(&self) {
        if let NodeKind::Op(r) = &self.kind {
            r.lock().take();
        }
    }
}

/// Output `index` of `node`: what an array's autograd slot holds.
#[derive(Clone)]
pub struct Entry {
    pub node: Arc<Node>,
    pub index: u32,
}

impl Entry {
    /// A key identifying this entry (node and output).
    pub fn key(&self) -> (usize, u32) {
        (Arc::as_ptr(&self.node) as usize, self.index)
    }
}

/// The entry `a` has, if it is in a live graph (a freed op's outputs are in none).
pub fn entry_of(a: &NDArray) -> Option<Entry> {
    let any = a.autograd_entry()?;
    let e = any.downcast_ref::<Entry>()?;
    (!e.node.is_freed()).then(|| e.clone())
}

/// Like [`entry_of`], but tells a freed graph apart from no graph.
pub fn raw_entry_of(a: &NDArray) -> Option<Entry> {
    a.autograd_entry()?.downcast_ref::<Entry>().cloned()
}

/// Sets the entry of `a`.
pub fn set_entry(a: &NDArray, e: Option<Entry>) {
    a.set_autograd_entry(e.map(|e| Arc::new(e) as Arc<dyn std::any::Any + Send + Sync>));
}

/// The variable `a` is, if it is one.
fn variable_of(a: &NDArray) -> Option<Entry> {
    entry_of(a).filter(|e| e.node.as_variable().is_some())
}

/// The gradient buffer of a marked variable (`MXNDArrayGetGrad`): the buffer itself, shared.
pub fn grad_of(a: &NDArray) -> Option<NDArray> {
    let e = variable_of(a)?;
    Some(e.node.as_variable().expect("a variable").grad.clone())
}

/// The fresh-gradient flag of a marked variable (false for other arrays).
pub fn grad_state(a: &NDArray) -> bool {
    variable_of(a).is_some_and(|e| {
        e.node
            .as_variable()
            .expect("a variable")
            .fresh
            .load(Ordering::Acquire)
    })
}

/// Sets the fresh-gradient flag; an array that is not a marked variable is an error.
pub fn set_grad_state(a: &NDArray, fresh: bool) -> Result<()> {
    let e = variable_of(a).ok_or_else(|| {
        Error::invalid(
            "NDArray has not been marked as a variable and does not have gradient state",
        )
    })?;
    e.node
        .as_variable()
        .expect("a variable")
        .fresh
        .store(fresh, Ordering::Release);
    Ok(())
}
