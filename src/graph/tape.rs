//! The graph of a recorded computation as a symbol (`autograd.get_symbol`,
//! `MXAutogradGetSymbol`): the autograd tape's nodes from an array's entry back to its leaves.
//!
//! Names follow MXNet's: recorded ops are `node_<N>`, marked variables `var<N>`, and inputs
//! that were in no graph when the op ran (constants) `null<N>`, where `N` is the tape node's
//! number (a fresh one for a constant).

use super::{Entry, Node, NodeData, NodeRef, Symbol};
use crate::autograd::node::{self as tape, NodeKind};
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The recorded graph that computes `a`.
pub fn recorded_symbol(a: &NDArray) -> Result<Symbol> {
    let Some(head) = tape::entry_of(a) else {
        return Err(Error::invalid(
            "NDArray is not part of a computation graph. Did you forget to turn on recording?",
        ));
    };
    let mut built: HashMap<usize, NodeRef> = HashMap::new();
    let node = convert(&head.node, &mut built)?;
    Ok(Symbol {
        outputs: vec![Entry {
            node,
            index: head.index,
            version: 0,
        }],
    })
}

fn variable(name: String) -> NodeRef {
    Node::new(NodeData {
        op: None,
        name,
        attrs: BTreeMap::new(),
        inputs: Vec::new(),
        control_deps: Vec::new(),
        version: 0,
    })
}

/// The graph node of tape node `n` (built once per tape node). Iterative, so deep tapes do not
/// exhaust the stack.
fn convert(root: &Arc<tape::Node>, built: &mut HashMap<usize, NodeRef>) -> Result<NodeRef> {
    let key = |n: &Arc<tape::Node>| Arc::as_ptr(n) as usize;
    let mut stack: Vec<(Arc<tape::Node>, bool)> = vec![(root.clone(), false)];
    while let Some((n, inputs_done)) = stack.pop() {
        if built.contains_key(&key(&n)) {
            continue;
        }
        let guard = match &n.kind {
            NodeKind::Variable(_) => {
                built.insert(key(&n), variable(format!("var{}", n.id)));
                continue;
            }
            NodeKind::Op(r) => r.lock(),
        };
        let Some(rec) = guard.as_ref() else {
            return Err(Error::invalid(
                "the recorded graph has been freed by a backward without retain_graph",
            ));
        };
        if !inputs_done {
            let pending: Vec<Arc<tape::Node>> = rec
                .inputs
                .iter()
                .flatten()
                .map(|e| e.node.clone())
                .filter(|m| !built.contains_key(&key(m)))
                .collect();
            stack.push((n.clone(), true));
            for m in pending.into_iter().rev() {
                stack.push((m, false));
            }
            continue;
        }
        if rec.custom.is_some() {
            return Err(Error::not_supported(format!(
                "the recorded graph holds a custom function (node_{}), which a symbol cannot \
                 express",
                n.id
            )));
        }
        let def = Symbol::op_def(rec.op)?;
        let mut inputs = Vec::with_capacity(rec.inputs.len());
        for e in &rec.inputs {
            inputs.push(match e {
                Some(e) => Entry {
                    node: built[&key(&e.node)].clone(),
                    index: e.index,
                    version: 0,
                },
                None => Entry {
                    node: variable(format!("null{}", tape::fresh_id())),
                    index: 0,
                    version: 0,
                },
            });
        }
        let node = Node::new(NodeData {
            op: Some(def),
            name: format!("node_{}", n.id),
            attrs: rec.params.iter().cloned().collect(),
            inputs,
            control_deps: Vec::new(),
            version: 0,
        });
        built.insert(key(&n), node);
    }
    Ok(built[&key(root)].clone())
}
