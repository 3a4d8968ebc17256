//! Recording: invokes that go on the tape, variables, and views made while recording.

use super::node::{Entry, GradReq, Node, OpRecord, Variable, entry_of, set_entry};
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use crate::operator::imperative::{self, Invoke};
use crate::operator::mode;
use std::sync::atomic::AtomicBool;

/// MXNet's message for an op whose output is already in a graph.
pub const ASSIGN_IN_GRAPH: &str = "Assigning to NDArrays that are already in a computational \
graph will cause undefined behavior when evaluating gradients. Please call backward first to \
clear the graph or do this out side of a record section. Also note that you cannot use inplace \
operations like +=, *=, relu(x, out=x), y[idx]=x, etc inside a record section.";

/// Runs an operator, recording it when this thread records and an input is in a graph.
pub fn invoke(call: Invoke<'_>) -> Result<Vec<NDArray>> {
    let (mut outputs, visible) = invoke_all(call)?;
    outputs.truncate(visible);
    Ok(outputs)
}

/// [`invoke`], returning the op's hidden outputs too (after the visible ones; a monitor reports
/// them as MXNet's do) and how many of the outputs are visible.
pub fn invoke_all(call: Invoke<'_>) -> Result<(Vec<NDArray>, usize)> {
    // NDArray functions (`_cvimdecode`) are never recorded, as in MXNet
    if !mode::is_recording()
        || crate::operator::ops::image::ndarray_function(call.op).is_some()
    {
        return imperative::invoke_all(call);
    }
    let entries: Vec<Option<Entry>> = call.inputs.iter().map(entry_of).collect();
    if entries.iter().all(Option::is_none) {
        return imperative::invoke_all(call);
    }
    // checked before the op runs, so a refused call changes nothing
    if let Some(outs) = &call.outputs
        && let Some(i) = outs.iter().position(|o| entry_of(o).is_some())
    {
        return Err(Error::invalid(format!(
            "operator {}: output {i}: {ASSIGN_IN_GRAPH}",
            call.called_as
        )));
    }
    let called_as = call.called_as;
    let params: Vec<(String, String)> = call
        .params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let inputs: Vec<NDArray> = call.inputs.iter().map(NDArray::detach).collect();
    let resolved = imperative::resolve(&call)?;
    let op = resolved.def.name;
    let outputs = imperative::allocate(&call, &resolved)?;
    let visible = resolved.plan.num_visible();
    let state = resolved.plan.state.clone();
    imperative::dispatch(crate::engine::Engine::global()?, resolved, call.inputs, &outputs)?;
    // the node keeps the hidden outputs too (the gradient reads them); only the visible ones
    // are entries of the graph
    record(op, called_as, params, entries, inputs, &outputs, visible, state);
    Ok((outputs, visible))
}

/// Puts an op that has run on the tape and points its outputs at it.
#[allow(clippy::too_many_arguments)] // one per field of the record
fn record(
    op: &'static str,
    called_as: &'static str,
    params: Vec<(String, String)>,
    inputs: Vec<Option<Entry>>,
    saved_inputs: Vec<NDArray>,
    outputs: &[NDArray],
    visible: usize,
    state: Option<crate::operator::op::OpState>,
) {
    let node = Node::op(OpRecord {
        op,
        called_as,
        params,
        inputs,
        saved_inputs,
        saved_outputs: outputs.iter().map(NDArray::detach).collect(),
        training: mode::is_training(),
        custom: None,
        state,
    });
    for (i, o) in outputs.iter().enumerate().take(visible) {
        set_entry(
            o,
            Some(Entry {
                node: node.clone(),
                index: i as u32,
            }),
        );
    }
}

/// Records a custom function (`autograd.Function`): `outputs` were computed from `inputs` with
/// recording paused; a backward reaching them calls `f` instead of a gradient definition.
/// Recording must be on.
pub fn record_custom(
    inputs: &[NDArray],
    outputs: &[NDArray],
    f: std::sync::Arc<dyn super::node::CustomBackward>,
) -> Result<()> {
    if !mode::is_recording() {
        return Err(Error::invalid(
            "a custom function is recorded only while recording (inside autograd.record())",
        ));
    }
    if let Some(i) = outputs.iter().position(|o| entry_of(o).is_some()) {
        return Err(Error::invalid(format!("output {i}: {ASSIGN_IN_GRAPH}")));
    }
    if let Some(i) = inputs.iter().chain(outputs).position(NDArray::is_none) {
        return Err(Error::invalid(format!("array {i} is a none array")));
    }
    let node = Node::op(OpRecord {
        op: "_CustomFunction",
        called_as: "_CustomFunction",
        params: Vec::new(),
        inputs: inputs.iter().map(entry_of).collect(),
        saved_inputs: inputs.iter().map(NDArray::detach).collect(),
        saved_outputs: outputs.iter().map(NDArray::detach).collect(),
        training: mode::is_training(),
        custom: Some(f),
        state: None,
    });
    for (i, o) in outputs.iter().enumerate() {
        set_entry(o, Some(Entry { node: node.clone(), index: i as u32 }));
    }
    Ok(())
}

/// Records a view made by the C API while recording (MXNet's `SliceWithRecord`,
/// `ReshapeWithRecord`): `view` is `op(input)` with `params`.
pub fn record_view(
    op: &'static str,
    params: &[(&str, String)],
    input: &NDArray,
    view: &NDArray,
) -> Result<()> {
    if !mode::is_recording() {
        return Ok(());
    }
    let Some(e) = entry_of(input) else {
        return Ok(());
    };
    record(
        op,
        op,
        params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        vec![Some(e)],
        vec![input.detach()],
        std::slice::from_ref(view),
        1,
        None,
    );
    Ok(())
}

/// Marks `vars[i]` as a variable whose gradient goes to `grads[i]` with `reqs[i]`
/// (`MXAutogradMarkVariables`). An array already in a graph becomes a new leaf.
pub fn mark_variables(vars: &[NDArray], reqs: &[GradReq], grads: &[NDArray]) -> Result<()> {
    if vars.len() != reqs.len() || vars.len() != grads.len() {
        return Err(Error::invalid(format!(
            "{} variables, {} requests and {} gradients given",
            vars.len(),
            reqs.len(),
            grads.len()
        )));
    }
    for (i, (v, g)) in vars.iter().zip(grads).enumerate() {
        if v.is_none() || g.is_none() {
            return Err(Error::invalid(format!(
                "variable {i} or its gradient is a none array"
            )));
        }
        if v.shape() != g.shape() {
            return Err(Error::invalid(format!(
                "variable {i} has shape {:?}, its gradient {:?}",
                v.shape(),
                g.shape()
            )));
        }
    }
    for ((v, &req), g) in vars.iter().zip(reqs).zip(grads) {
        let node = Node::variable(Variable {
            grad: g.detach(),
            req,
            fresh: AtomicBool::new(false),
        });
        set_entry(v, Some(Entry { node, index: 0 }));
    }
    Ok(())
}
