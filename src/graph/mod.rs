//! Symbolic graphs: MXNet's `Symbol` (nnvm's graph of nodes) in plain Rust.
//!
//! A [`Node`] is a variable or an application of an operator: its name, its attributes (the op's
//! parameters as strings plus hidden `__key__` attributes) and its inputs, each an [`Entry`]
//! `(node, output index, version)`. A [`Symbol`] is a list of output entries; symbols share
//! nodes through `Arc`s, and a node's fields sit behind a lock because MXNet's Symbol API edits
//! nodes in place (composition fills an operator's inputs, attributes are set on shared nodes).
//!
//! An operator's inputs, outputs and mutated inputs come from its definition
//! ([`crate::operator::def::GraphDef`]), so graphs only hold ops mxrt implements. The modules:
//! this one builds and lists graphs (MXNet's naming rules), `json` writes and reads MXNet's JSON
//! format byte for byte, `infer` runs shape and dtype inference through the ops' plans. Before
//! an executor runs a graph, `cse` merges common subexpressions, `grad_check` refuses graphs
//! whose gradients would reach an op without one, and `bind_prep` gives creation ops their
//! inferred shapes and sparse variables their storage.
//!
//! A graph is a DAG: composition refuses to close a cycle and the JSON reader only lets a node
//! read nodes listed before it, so every walk terminates.

pub mod cse;
pub mod exec;
pub mod bind_prep;
pub mod grad_check;
pub mod infer;
pub mod json;
pub mod predict;
pub mod tape;
#[cfg(test)]
mod tests;

use crate::error::{Error, Result};
use crate::operator::def::{OpDef, Signature};
use crate::operator::registry::Registry;
use crate::operator::table;
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

/// A node shared by symbols.
pub type NodeRef = Arc<Node>;

/// One node of a graph.
#[derive(Debug)]
pub struct Node {
    data: RwLock<NodeData>,
}

/// Dropping a graph drops its nodes one at a time from a list rather than each input from
/// its reader's drop, so a long chain of nodes (a graph loaded from a file of any depth)
/// cannot exhaust the stack.
impl Drop for Node {
    fn drop(&mut self) {
        let d = self.data.get_mut();
        let mut pending: Vec<NodeRef> = d.inputs.drain(..).map(|e| e.node).collect();
        pending.append(&mut d.control_deps);
        while let Some(n) = pending.pop() {
            // the last owner empties the node before it goes, so its own drop finds no inputs
            if let Ok(mut node) = Arc::try_unwrap(n) {
                let d = node.data.get_mut();
                pending.extend(d.inputs.drain(..).map(|e| e.node));
                pending.append(&mut d.control_deps);
            }
        }
    }
}

/// A node's contents.
#[derive(Clone, Debug)]
pub struct NodeData {
    /// The operator, `None` for a variable.
    pub op: Option<&'static OpDef>,
    pub name: String,
    /// Parameters and attributes, sorted by key (MXNet writes them sorted).
    pub attrs: BTreeMap<String, String>,
    pub inputs: Vec<Entry>,
    pub control_deps: Vec<NodeRef>,
    /// A variable's version: how many ops composed so far write it.
    pub version: u32,
}

/// One output of a node.
#[derive(Clone, Debug)]
pub struct Entry {
    pub node: NodeRef,
    pub index: u32,
    pub version: u32,
}

impl Entry {
    fn same(&self, other: &Entry) -> bool {
        Arc::ptr_eq(&self.node, &other.node) && self.index == other.index
    }
}

/// The attribute keys MXNet stores hidden (`__key__`) when given bare.
pub const HIDDEN_KEYS: [&str; 5] = [
    "ctx_group",
    "lr_mult",
    "wd_mult",
    "force_mirroring",
    "mirror_stage",
];

/// Whether `key` is a hidden attribute (`__x__`), which op parameter parsers skip.
pub fn is_hidden(key: &str) -> bool {
    key.len() > 4 && key.starts_with("__") && key.ends_with("__")
}

impl Node {
    fn new(data: NodeData) -> NodeRef {
        Arc::new(Node {
            data: RwLock::new(data),
        })
    }

    /// A new variable named `name`.
    pub fn variable(name: &str) -> NodeRef {
        Node::new(NodeData {
            op: None,
            name: name.to_string(),
            attrs: BTreeMap::new(),
            inputs: Vec::new(),
            control_deps: Vec::new(),
            version: 0,
        })
    }

    /// A copy of the node's contents.
    pub fn data(&self) -> NodeData {
        self.data.read().clone()
    }
    pub fn name(&self) -> String {
        self.data.read().name.clone()
    }
    pub fn op(&self) -> Option<&'static OpDef> {
        self.data.read().op
    }
    pub fn is_variable(&self) -> bool {
        self.data.read().op.is_none()
    }
    pub fn inputs(&self) -> Vec<Entry> {
        self.data.read().inputs.clone()
    }
    pub fn attrs(&self) -> BTreeMap<String, String> {
        self.data.read().attrs.clone()
    }
    /// The op's parameters: the attributes that are not hidden.
    pub fn params(&self) -> Vec<(String, String)> {
        op_params(&self.data.read().attrs)
    }
    /// The node's signature (a variable: no inputs, one output named after it).
    pub fn signature(&self) -> Result<Signature> {
        let d = self.data.read();
        match d.op {
            None => Ok(Signature::simple(&[])),
            Some(def) => signature(def, &op_params(&d.attrs)),
        }
    }
    /// Every output the op has, hidden ones included (1 for a variable).
    pub fn num_outputs(&self) -> usize {
        self.signature().map(|s| s.outputs.len()).unwrap_or(1)
    }
}

/// The parameters among `attrs` (hidden attributes left out).
pub fn op_params(attrs: &BTreeMap<String, String>) -> Vec<(String, String)> {
    attrs
        .iter()
        .filter(|(k, _)| !is_hidden(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The most inputs or outputs a node may declare through a count parameter (`num_args`,
/// `num_outputs`): each costs a name and a slot in every walk, so a count from a damaged
/// graph file must not size them unchecked.
pub const MAX_ARITY: usize = 1 << 16;

/// Op `def`'s signature for `params`: its definition's, or MXNet's table's array arguments as
/// inputs and one output.
pub fn signature(def: &'static OpDef, params: &[(String, String)]) -> Result<Signature> {
    for (k, v) in params {
        if matches!(k.as_str(), "num_args" | "num_outputs")
            && v.trim().parse::<i128>().is_ok_and(|n| n > MAX_ARITY as i128)
        {
            return Err(Error::invalid(format!(
                "operator {}: {k} = {v} is more than the {MAX_ARITY} mxrt's graphs allow",
                def.name
            )));
        }
    }
    if let Some(f) = def.graph.signature {
        return f(params).map_err(|e| Error::invalid(format!("operator {}: {e}", def.name)));
    }
    let reg = Registry::global();
    let Some(info) = reg.lookup(def.name).map(|id| reg.op(id)) else {
        return Ok(Signature::simple(&["data"]));
    };
    let variadic = !info.key_var_num_args.is_empty()
        || info
            .array_inputs()
            .any(|a| a.type_info.starts_with("NDArray-or-Symbol[]"));
    if variadic {
        let count = params
            .iter()
            .find(|(k, _)| !info.key_var_num_args.is_empty() && *k == info.key_var_num_args)
            .and_then(|(_, v)| v.trim().parse::<usize>().ok());
        let mut sig = Signature::simple(&[]);
        sig.inputs = count.map(|n| (0..n).map(|i| format!("arg{i}")).collect());
        return Ok(sig);
    }
    let names: Vec<&str> = info.array_inputs().map(|a| a.name.as_str()).collect();
    Ok(Signature::simple(&names).mutating(def.graph.mutates))
}

/// A symbol: a list of output entries of a graph.
#[derive(Clone, Debug, Default)]
pub struct Symbol {
    pub outputs: Vec<Entry>,
}

/// What [`Symbol::list_inputs`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    All,
    /// Variables no op writes (arguments).
    ReadOnly,
    /// Variables some op writes (auxiliary states).
    Auxiliary,
}

/// Checks an op's parameters the way MXNet's parsers do at symbol creation: every key known
/// (hidden `__x__` keys pass), every required one present.
pub fn check_params(def: &'static OpDef, attrs: &BTreeMap<String, String>) -> Result<()> {
    let reg = Registry::global();
    let Some(info) = reg.lookup(def.name).map(|id| reg.op(id)) else {
        return Ok(());
    };
    if !def.declares_params() {
        return Ok(());
    }
    let described = || {
        let list: Vec<String> = attrs.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        format!("in operator {}(name=\"\", {})", def.name, list.join(", "))
    };
    for k in attrs.keys() {
        if is_hidden(k) {
            continue;
        }
        if !info.parameters().any(|a| a.name == *k) {
            let possible: Vec<&str> = info.parameters().map(|a| a.name.as_str()).collect();
            return Err(Error::invalid(format!(
                "Cannot find argument '{k}', Possible Arguments: {}, {}",
                possible.join(", "),
                described()
            )));
        }
    }
    for p in info.parameters() {
        if p.type_info.contains("required") && !attrs.contains_key(&p.name) {
            return Err(Error::invalid(format!(
                "Required parameter {} of {} is not presented, {}",
                p.name,
                p.type_info.split(',').next().unwrap_or(""),
                described()
            )));
        }
    }
    Ok(())
}

/// Visits every node reachable from `heads` once, inputs before the nodes reading them (inputs
/// in order, then control dependencies), in MXNet's order.
pub fn post_order(heads: &[Entry]) -> Vec<NodeRef> {
    let mut order = Vec::new();
    let mut seen: HashSet<*const Node> = HashSet::new();
    // explicit stack: (node, next child to visit)
    let mut stack: Vec<(NodeRef, usize)> = Vec::new();
    for h in heads {
        if !seen.insert(Arc::as_ptr(&h.node)) {
            continue;
        }
        stack.push((h.node.clone(), 0));
        while let Some((node, next)) = stack.last_mut() {
            let child = {
                let d = node.data.read();
                let n_in = d.inputs.len();
                if *next < n_in {
                    Some(d.inputs[*next].node.clone())
                } else {
                    d.control_deps.get(*next - n_in).cloned()
                }
            };
            *next += 1;
            match child {
                Some(c) => {
                    if seen.insert(Arc::as_ptr(&c)) {
                        stack.push((c, 0));
                    }
                }
                None => {
                    let (n, _) = stack.pop().expect("non-empty");
                    order.push(n);
                }
            }
        }
    }
    order
}

/// Whether `target` is reachable from `from` (inputs and control dependencies).
fn reaches(from: &[Entry], target: &NodeRef) -> bool {
    post_order(from).iter().any(|n| Arc::ptr_eq(n, target))
}

impl Symbol {
    /// A symbol of one new variable.
    pub fn variable(name: &str) -> Symbol {
        Symbol {
            outputs: vec![Entry {
                node: Node::variable(name),
                index: 0,
                version: 0,
            }],
        }
    }

    /// An op node without inputs yet (to be composed), with `attrs` as given: hidden keys
    /// given bare (`lr_mult`) are stored as `__lr_mult__`; keys ending in one
    /// (`weight_lr_mult`) are refused as in MXNet. The parameters are checked.
    pub fn atomic(def: &'static OpDef, attrs: &[(&str, &str)]) -> Result<Symbol> {
        let mut dict = BTreeMap::new();
        for &(k, v) in attrs {
            let mut key = k.to_string();
            for h in HIDDEN_KEYS {
                match k.rfind(h) {
                    Some(0) => {
                        key = format!("__{k}__");
                        break;
                    }
                    Some(pos) if pos + h.len() == k.len() => {
                        return Err(Error::invalid(format!(
                            "setting variable attributes with {k} is deprecated. please instead \
                             use\nw = Variable({h}={v})\nsym = YourSymbolName({}=w)",
                            &k[..pos.saturating_sub(1)]
                        )));
                    }
                    _ => {}
                }
            }
            dict.insert(key, v.to_string());
        }
        check_params(def, &dict)?;
        let node = Node::new(NodeData {
            op: Some(def),
            name: String::new(),
            attrs: dict,
            inputs: Vec::new(),
            control_deps: Vec::new(),
            version: 0,
        });
        let sig = node.signature()?;
        Ok(Symbol {
            outputs: (0..sig.visible)
                .map(|i| Entry {
                    node: node.clone(),
                    index: i as u32,
                    version: 0,
                })
                .collect(),
        })
    }

    /// The operator named `op` (an alias resolves to its op), or an error naming it.
    pub fn op_def(op: &str) -> Result<&'static OpDef> {
        let reg = Registry::global();
        let name = reg
            .lookup(op)
            .map(|id| reg.op(id).name.as_str())
            .unwrap_or(op);
        table::lookup(name).ok_or_else(|| {
            Error::not_supported(format!("operator {op} is not implemented by mxrt"))
        })
    }

    /// The outputs of all `symbols`, in order (nodes are shared, not copied).
    pub fn group(symbols: &[Symbol]) -> Symbol {
        Symbol {
            outputs: symbols.iter().flat_map(|s| s.outputs.clone()).collect(),
        }
    }

    /// The single node all outputs belong to, if they share one.
    pub fn head_node(&self) -> Option<NodeRef> {
        let first = self.outputs.first()?;
        self.outputs
            .iter()
            .all(|e| Arc::ptr_eq(&e.node, &first.node))
            .then(|| first.node.clone())
    }

    /// Whether the symbol is an op node that has not been composed yet.
    fn is_atomic(&self) -> bool {
        self.head_node()
            .is_some_and(|n| !n.is_variable() && n.data.read().inputs.is_empty())
    }

    /// A deep copy: every reachable node copied, edges rewired.
    pub fn deep_copy(&self) -> Symbol {
        let order = post_order(&self.outputs);
        let mut map: HashMap<*const Node, NodeRef> = HashMap::new();
        for n in &order {
            let mut d = n.data();
            for e in &mut d.inputs {
                e.node = map[&Arc::as_ptr(&e.node)].clone();
            }
            for c in &mut d.control_deps {
                *c = map[&Arc::as_ptr(c)].clone();
            }
            map.insert(Arc::as_ptr(n), Node::new(d));
        }
        Symbol {
            outputs: self
                .outputs
                .iter()
                .map(|e| Entry {
                    node: map[&Arc::as_ptr(&e.node)].clone(),
                    ..e.clone()
                })
                .collect(),
        }
    }

    /// Applies the symbol to inputs, in place (MXNet's `Compose`): an atomic op takes `args` in
    /// order and `kwargs` by input name, creating variables `<name>_<input>` for the others; a
    /// composed graph takes `kwargs` only, replacing its variables of those names. A non-empty
    /// `name` renames the head node.
    pub fn compose(
        &mut self,
        name: &str,
        args: &[Symbol],
        kwargs: &[(String, Symbol)],
    ) -> Result<()> {
        let head = self
            .outputs
            .first()
            .map(|e| e.node.clone())
            .ok_or_else(|| Error::invalid("cannot compose an empty symbol"))?;
        // a group may list variables among its outputs (`get_internals()`): those are
        // replaced like the graph's other variables
        if head.is_variable() && self.outputs.len() == 1 {
            return Err(Error::invalid("Variable cannot be composed"));
        }
        for (i, a) in args.iter().enumerate() {
            if a.outputs.len() != 1 {
                return Err(Error::invalid(format!(
                    "Argument {i} is a tuple, single value is required"
                )));
            }
        }
        for (k, a) in kwargs {
            if a.outputs.len() != 1 {
                return Err(Error::invalid(format!(
                    "Keyword Argument {k} is a tuple, single value is required"
                )));
            }
        }
        if self.is_atomic() {
            self.compose_atomic(&head, name, args, kwargs)
        } else {
            if !args.is_empty() {
                return Err(Error::invalid(
                    "General composition only support kwargs for now",
                ));
            }
            self.compose_general(kwargs)?;
            if !name.is_empty() {
                head.data.write().name = name.to_string();
            }
            Ok(())
        }
    }

    fn compose_atomic(
        &mut self,
        n: &NodeRef,
        name: &str,
        args: &[Symbol],
        kwargs: &[(String, Symbol)],
    ) -> Result<()> {
        let def = n.op().expect("an op node");
        let sig = n.signature()?;
        for a in args.iter().chain(kwargs.iter().map(|(_, s)| s)) {
            if reaches(&a.outputs, n) {
                return Err(Error::invalid(
                    "an argument of the composition contains the symbol itself (a cycle)",
                ));
            }
        }
        if !name.is_empty() {
            n.data.write().name = name.to_string();
        }
        let node_name = n.name();
        let mut inputs: Vec<Entry> = args.iter().map(|a| a.outputs[0].clone()).collect();
        let variadic_count = Registry::global()
            .lookup(def.name)
            .map(|id| !Registry::global().op(id).key_var_num_args.is_empty())
            .unwrap_or(false);
        match &sig.inputs {
            None => {
                if !kwargs.is_empty() {
                    return Err(Error::invalid(
                        "Variable length function do not accept kwargs",
                    ));
                }
            }
            Some(_) if variadic_count && !kwargs.is_empty() => {
                return Err(Error::invalid(
                    "Variable length function do not accept kwargs",
                ));
            }
            Some(names) => {
                if args.len() > names.len() {
                    return Err(Error::invalid(format!(
                        "Incorrect number of arguments, requires {}, provided {}",
                        names.len(),
                        args.len()
                    )));
                }
                let mut matched = 0;
                let attrs = n.attrs();
                for arg_name in &names[args.len()..] {
                    if let Some((_, s)) = kwargs.iter().find(|(k, _)| k == arg_name) {
                        inputs.push(s.outputs[0].clone());
                        matched += 1;
                    } else {
                        let var_name = if node_name.is_empty() {
                            arg_name.clone()
                        } else {
                            format!("{node_name}_{arg_name}")
                        };
                        let v = Node::variable(&var_name);
                        v.data.write().attrs = attrs.clone();
                        inputs.push(Entry {
                            node: v,
                            index: 0,
                            version: 0,
                        });
                    }
                }
                if matched != kwargs.len() {
                    let keys: Vec<&str> = kwargs.iter().map(|(k, _)| k.as_str()).collect();
                    return Err(keyword_mismatch(
                        "Symbol.Compose",
                        &keys,
                        &names[args.len()..],
                    ));
                }
            }
        }
        for &i in &sig.mutates {
            if let Some(e) = inputs.get(i)
                && !e.node.is_variable()
            {
                return Err(Error::invalid(format!(
                    "Mutation target can only be Variable: input {i} of {} is {}",
                    def.name,
                    e.node.name()
                )));
            }
        }
        n.data.write().inputs = inputs;
        update_versions(n, &sig)?;
        if let Some(f) = def.graph.input_var_attr {
            for (i, e) in n.inputs().iter().enumerate() {
                if e.node.is_variable()
                    && let Some((k, v)) = f(i)
                {
                    let mut d = e.node.data.write();
                    d.attrs
                        .entry(k.to_string())
                        .or_insert_with(|| v.to_string());
                }
            }
        }
        // the output entries keep the node; their versions stay 0
        Ok(())
    }

    fn compose_general(&mut self, kwargs: &[(String, Symbol)]) -> Result<()> {
        let order = post_order(&self.outputs);
        let mut replace: HashMap<*const Node, Entry> = HashMap::new();
        let mut matched = 0;
        for n in &order {
            if n.is_variable()
                && let Some((_, s)) = kwargs.iter().find(|(k, _)| *k == n.name())
            {
                replace.insert(Arc::as_ptr(n), s.outputs[0].clone());
                matched += 1;
            }
        }
        if matched != kwargs.len() {
            let keys: Vec<&str> = kwargs.iter().map(|(k, _)| k.as_str()).collect();
            let names: Vec<String> = self
                .list_inputs(InputKind::All)
                .iter()
                .map(|n| n.name())
                .collect();
            return Err(keyword_mismatch("Symbol.Compose", &keys, &names));
        }
        // a replacement that reaches a node of this graph other than a replaced variable would
        // close a cycle
        let own: HashSet<*const Node> = order
            .iter()
            .filter(|n| !replace.contains_key(&Arc::as_ptr(n)))
            .map(Arc::as_ptr)
            .collect();
        for e in replace.values() {
            if post_order(std::slice::from_ref(e))
                .iter()
                .any(|n| own.contains(&Arc::as_ptr(n)))
            {
                return Err(Error::invalid(
                    "an argument of the composition reads the symbol it is composed into (a cycle)",
                ));
            }
        }
        for n in &order {
            let mut changed = false;
            {
                let mut d = n.data.write();
                for e in &mut d.inputs {
                    if let Some(r) = replace.get(&Arc::as_ptr(&e.node)) {
                        *e = r.clone();
                        changed = true;
                    }
                }
            }
            if changed {
                let sig = n.signature()?;
                update_versions(n, &sig)?;
            }
        }
        for e in &mut self.outputs {
            if let Some(r) = replace.get(&Arc::as_ptr(&e.node)) {
                *e = r.clone();
            }
        }
        Ok(())
    }

    /// Variables reachable from the outputs, in MXNet's order (post-order DFS).
    pub fn list_inputs(&self, kind: InputKind) -> Vec<NodeRef> {
        let order = post_order(&self.outputs);
        if kind == InputKind::All {
            return order.into_iter().filter(|n| n.is_variable()).collect();
        }
        let mut mutated: HashSet<*const Node> = HashSet::new();
        for n in &order {
            if n.is_variable() {
                continue;
            }
            if let Ok(sig) = n.signature() {
                let inputs = n.inputs();
                for i in sig.mutates {
                    if let Some(e) = inputs.get(i) {
                        mutated.insert(Arc::as_ptr(&e.node));
                    }
                }
            }
        }
        order
            .into_iter()
            .filter(|n| n.is_variable())
            .filter(|n| mutated.contains(&Arc::as_ptr(n)) == (kind == InputKind::Auxiliary))
            .collect()
    }

    /// The names of [`Symbol::list_inputs`].
    pub fn input_names(&self, kind: InputKind) -> Vec<String> {
        self.list_inputs(kind).iter().map(|n| n.name()).collect()
    }

    /// The outputs' names: a variable's name, `<node>_<output name>` for an op.
    pub fn list_outputs(&self) -> Vec<String> {
        self.outputs.iter().map(entry_name).collect()
    }

    /// Every variable and every visible op output, in post order.
    pub fn internals(&self) -> Symbol {
        let mut outputs = Vec::new();
        for n in post_order(&self.outputs) {
            if n.is_variable() {
                let version = n.data.read().version;
                outputs.push(Entry {
                    node: n,
                    index: 0,
                    version,
                });
            } else {
                let visible = n.signature().map(|s| s.visible).unwrap_or(1);
                for i in 0..visible {
                    outputs.push(Entry {
                        node: n.clone(),
                        index: i as u32,
                        version: 0,
                    });
                }
            }
        }
        Symbol { outputs }
    }

    /// The inputs of each distinct output node.
    pub fn children(&self) -> Symbol {
        let mut seen = HashSet::new();
        let mut outputs = Vec::new();
        for e in &self.outputs {
            if seen.insert(Arc::as_ptr(&e.node)) {
                outputs.extend(e.node.inputs());
            }
        }
        Symbol { outputs }
    }

    /// Output `index` as a symbol.
    pub fn output(&self, index: usize) -> Result<Symbol> {
        if index >= self.outputs.len() {
            return Err(Error::invalid(format!(
                "Symbol only accept nonnegative index: index {index} of a symbol with {} outputs",
                self.outputs.len()
            )));
        }
        Ok(Symbol {
            outputs: vec![self.outputs[index].clone()],
        })
    }

    /// The head node's name when all outputs belong to one node.
    pub fn name(&self) -> Option<String> {
        self.head_node().map(|n| n.name())
    }

    /// Attribute `key` of the single head node (`name` gives its name; a bare hidden key also
    /// finds `__key__`).
    pub fn get_attr(&self, key: &str) -> Option<String> {
        let n = self.head_node()?;
        if key == "name" {
            return Some(n.name());
        }
        let d = n.data.read();
        d.attrs.get(key).cloned().or_else(|| {
            HIDDEN_KEYS
                .contains(&key)
                .then(|| d.attrs.get(&format!("__{key}__")).cloned())
                .flatten()
        })
    }

    /// Sets attribute `key` on the single head node (`name` renames it; bare hidden keys are
    /// stored as `__key__`). An op node's parameters are checked again; a refused value leaves
    /// the node as it was.
    pub fn set_attr(&self, key: &str, value: &str) -> Result<()> {
        let n = self
            .head_node()
            .ok_or_else(|| Error::invalid("Symbol.SetAttrs only works for non-grouped symbol"))?;
        if key == "name" {
            n.data.write().name = value.to_string();
            return Ok(());
        }
        let key = if HIDDEN_KEYS.contains(&key) {
            format!("__{key}__")
        } else {
            key.to_string()
        };
        let mut d = n.data.write();
        let mut attrs = d.attrs.clone();
        attrs.insert(key, value.to_string());
        if let Some(def) = d.op {
            check_params(def, &attrs)?;
            signature(def, &op_params(&attrs))?;
        }
        d.attrs = attrs;
        Ok(())
    }

    /// `(node$key, value)` for every attribute of every node in post order, plus `node$x` for
    /// each hidden `__x__` of [`HIDDEN_KEYS`] (`shallow`: the head node's, without prefix).
    pub fn list_attrs(&self, shallow: bool) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let nodes = if shallow {
            self.outputs
                .first()
                .map(|e| vec![e.node.clone()])
                .unwrap_or_default()
        } else {
            post_order(&self.outputs)
        };
        for n in nodes {
            let d = n.data.read();
            for (k, v) in &d.attrs {
                let prefix = if shallow {
                    String::new()
                } else {
                    format!("{}$", d.name)
                };
                out.push((format!("{prefix}{k}"), v.clone()));
                if let Some(bare) = k.strip_prefix("__").and_then(|k| k.strip_suffix("__"))
                    && HIDDEN_KEYS.contains(&bare)
                {
                    out.push((format!("{prefix}{bare}"), v.clone()));
                }
            }
        }
        out
    }

    /// MXNet's debug string (`Symbol.debug_str()`).
    pub fn debug_string(&self) -> String {
        let mut s = String::new();
        if self.outputs.len() == 1 && self.outputs[0].node.is_variable() {
            let _ = writeln!(s, "Variable:{}", self.outputs[0].node.name());
            return s;
        }
        if self.is_atomic() {
            let op = self.outputs[0].node.op().map(|d| d.name).unwrap_or("");
            let _ = writeln!(s, "AtomicFunctor  Op:{op}");
            return s;
        }
        s.push_str("Symbol Outputs:\n");
        for (i, e) in self.outputs.iter().enumerate() {
            let _ = writeln!(s, "\toutput[{i}]={}({})", e.node.name(), e.index);
        }
        for n in post_order(&self.outputs) {
            let d = n.data.read();
            match d.op {
                None => {
                    let _ = writeln!(s, "Variable:{}", d.name);
                }
                Some(def) => {
                    s.push_str("--------------------\n");
                    let _ = writeln!(s, "Op:{}, Name={}", def.name, d.name);
                    s.push_str("Inputs:\n");
                    for (i, e) in d.inputs.iter().enumerate() {
                        let _ = write!(s, "\targ[{i}]={}({})", e.node.name(), e.index);
                        if e.node.is_variable() {
                            let _ = write!(s, " version={}", e.version);
                        }
                        s.push('\n');
                    }
                    if !d.attrs.is_empty() {
                        s.push_str("Attrs:\n");
                        for (k, v) in &d.attrs {
                            let _ = writeln!(s, "\t{k}={v}");
                        }
                    }
                    if !d.control_deps.is_empty() {
                        s.push_str("Control deps:\n");
                        for (i, c) in d.control_deps.iter().enumerate() {
                            let _ = writeln!(s, "\tcdep[{i}]={}", c.name());
                        }
                    }
                }
            }
        }
        s
    }

    /// One new variable per edge from a variable into an op node, in post order (MXNet's
    /// `GetInputSymbols`, used by the control-flow ops).
    pub fn input_symbols(&self) -> Vec<Symbol> {
        let mut out = Vec::new();
        for n in post_order(&self.outputs) {
            if n.is_variable() {
                continue;
            }
            for e in n.inputs() {
                if e.node.is_variable() {
                    out.push(Symbol {
                        outputs: vec![Entry {
                            node: e.node.clone(),
                            index: 0,
                            version: 0,
                        }],
                    });
                }
            }
        }
        out
    }

    /// An atomic symbol of the head node's op with its attributes (single-node symbols only).
    pub fn atomic_from_head(&self) -> Result<Symbol> {
        let n = self.head_node().ok_or_else(|| {
            Error::invalid(
                "Generating atomic symbol from other symbol only works for nongrouped symbol.",
            )
        })?;
        let d = n.data();
        let def = d.op.ok_or_else(|| {
            Error::invalid("Generating atomic symbol from a variable is not possible")
        })?;
        let attrs: Vec<(&str, &str)> = d
            .attrs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        // hidden keys are stored already; `atomic` keeps `__x__` keys as they are
        Symbol::atomic(def, &attrs)
    }

    /// A copy without `amp_cast`/`amp_multicast` nodes (mxrt has neither op, so a deep copy).
    pub fn remove_amp_cast(&self) -> Symbol {
        self.deep_copy()
    }

    /// Whether two symbols have the same output entries.
    pub fn same_outputs(&self, other: &Symbol) -> bool {
        self.outputs.len() == other.outputs.len()
            && self
                .outputs
                .iter()
                .zip(&other.outputs)
                .all(|(a, b)| a.same(b))
    }
}

/// The name of output `e`.
pub fn entry_name(e: &Entry) -> String {
    let d = e.node.data.read();
    let Some(def) = d.op else {
        return d.name.clone();
    };
    let out_name = signature(def, &op_params(&d.attrs))
        .ok()
        .and_then(|s| s.outputs.get(e.index as usize).cloned())
        .unwrap_or_else(|| format!("output{}", e.index));
    if d.name.is_empty() {
        out_name
    } else {
        format!("{}_{out_name}", d.name)
    }
}

/// Refreshes the versions of a node's variable inputs and bumps the versions of the variables
/// it writes (MXNet's `UpdateNodeVersion`).
fn update_versions(n: &NodeRef, sig: &Signature) -> Result<()> {
    let mut d = n.data.write();
    for e in &mut d.inputs {
        if !Arc::ptr_eq(&e.node, n) && e.node.is_variable() {
            e.version = e.node.data.read().version;
        }
    }
    for &i in &sig.mutates {
        if let Some(e) = d.inputs.get_mut(i) {
            if !e.node.is_variable() {
                return Err(Error::invalid(format!(
                    "Mutation target can only be Variable: input {i} is {}",
                    e.node.name()
                )));
            }
            let mut v = e.node.data.write();
            v.version += 1;
            e.version = v.version;
        }
    }
    Ok(())
}

/// MXNet's message for keyword arguments that match no input.
pub fn keyword_mismatch<S: AsRef<str>>(source: &str, keys: &[&str], candidates: &[S]) -> Error {
    let mut msg = String::new();
    for k in keys {
        if !candidates.iter().any(|c| c.as_ref() == *k) {
            let _ = write!(msg, "{source}Keyword argument name {k} not found.");
            break;
        }
    }
    msg.push_str("\nCandidate arguments:\n");
    for (i, c) in candidates.iter().enumerate() {
        let _ = writeln!(msg, "\t[{i}]{}", c.as_ref());
    }
    Error::invalid(msg)
}

impl Symbol {
    /// Cuts the subgraph the first output's node belongs to (its `__subgraph_name__`
    /// attribute) out of the graph, in place: every edge from a node outside the subgraph into
    /// one inside becomes a new variable named after the entry (one per distinct entry). Returns
    /// the original entries, one symbol each; nothing when the node has no such attribute.
    pub fn cut_subgraph(&self) -> Vec<Symbol> {
        let Some(first) = self.outputs.first() else {
            return Vec::new();
        };
        let Some(sub) = first.node.attrs().get("__subgraph_name__").cloned() else {
            return Vec::new();
        };
        let inside = |n: &NodeRef| n.data.read().attrs.get("__subgraph_name__") == Some(&sub);
        let mut cut: Vec<(Entry, Entry)> = Vec::new();
        for n in post_order(&self.outputs) {
            if !inside(&n) {
                continue;
            }
            let mut d = n.data.write();
            for e in &mut d.inputs {
                if inside(&e.node) {
                    continue;
                }
                let var = match cut.iter().find(|(orig, _)| orig.same(e)) {
                    Some((_, v)) => v.clone(),
                    None => {
                        let v = Entry {
                            node: Node::variable(&entry_name(e)),
                            index: 0,
                            version: 0,
                        };
                        cut.push((e.clone(), v.clone()));
                        v
                    }
                };
                *e = var;
            }
        }
        cut.into_iter()
            .map(|(orig, _)| Symbol {
                outputs: vec![orig],
            })
            .collect()
    }
}
