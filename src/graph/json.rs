//! MXNet's JSON graph format: what `Symbol.tojson()` writes, byte for byte as MXNet 1.9.1's dmlc
//! JSON writer lays it out, and the reader, which also upgrades the JSON of older releases
//! (`param`/`attr` keys, hidden keys given bare, auxiliary states not saved before 0.9).
//!
//! Layout: objects are multi-line (members on their own lines, indented two spaces per level,
//! `", "` before the newline between members); maps with one entry and arrays of at most ten
//! numbers or `[node, index, version]` triples stay on one line; strings escape `\r \n \\ \t "`.

use super::{Entry, HIDDEN_KEYS, Node, NodeData, NodeRef, Symbol, op_params, post_order};
use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

/// The version MXNet 1.9.1 writes (`mxnet_version`).
pub const MXNET_VERSION: i64 = 10901;

/// A writer in the layout of dmlc's `JSONWriter`.
struct Writer {
    out: String,
    /// Per open scope: multi-line, members written so far.
    scopes: Vec<(bool, usize)>,
}

impl Writer {
    fn separator(&mut self) {
        if self.scopes.last().is_none_or(|s| s.0) {
            self.out.push('\n');
            for _ in 0..self.scopes.len() * 2 {
                self.out.push(' ');
            }
        }
    }
    fn begin(&mut self, open: char, multi_line: bool) {
        self.out.push(open);
        self.scopes.push((multi_line, 0));
    }
    fn end(&mut self, close: char) {
        let (multi, n) = self.scopes.pop().expect("an open scope");
        if multi && n != 0 {
            self.separator();
        }
        self.out.push(close);
    }
    /// Starts the next member or item: the comma and the line break.
    fn item(&mut self) {
        if self.scopes.last().is_some_and(|s| s.1 > 0) {
            self.out.push_str(", ");
        }
        self.separator();
        if let Some(s) = self.scopes.last_mut() {
            s.1 += 1;
        }
    }
    fn key(&mut self, k: &str) {
        self.item();
        self.string(k);
        self.out.push_str(": ");
    }
    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '\r' => self.out.push_str("\\r"),
                '\n' => self.out.push_str("\\n"),
                '\\' => self.out.push_str("\\\\"),
                '\t' => self.out.push_str("\\t"),
                '"' => self.out.push_str("\\\""),
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
    fn numbers(&mut self, v: &[u64]) {
        self.begin('[', v.len() > 10);
        for x in v {
            self.item();
            let _ = write!(self.out, "{x}");
        }
        self.end(']');
    }
    fn entries(&mut self, v: &[[u64; 3]]) {
        self.begin('[', v.len() > 10);
        for t in v {
            self.item();
            self.numbers(t);
        }
        self.end(']');
    }
    fn map(&mut self, m: &BTreeMap<String, String>) {
        self.begin('{', m.len() > 1);
        for (k, v) in m {
            self.key(k);
            self.string(v);
        }
        self.end('}');
    }
}

/// The graph as MXNet 1.9.1 writes it; `np_shape` is the numpy-shape mode's code (0 off), which
/// MXNet records as the graph attribute `is_np_shape` when it is on.
pub fn to_json(sym: &Symbol, np_shape: i32) -> String {
    let order = post_order(&sym.outputs);
    let ids: HashMap<*const Node, u64> = order
        .iter()
        .enumerate()
        .map(|(i, n)| (Arc::as_ptr(n), i as u64))
        .collect();
    let id = |n: &NodeRef| ids[&Arc::as_ptr(n)];
    let triple = |e: &Entry| [id(&e.node), u64::from(e.index), u64::from(e.version)];
    let mut w = Writer {
        out: String::new(),
        scopes: Vec::new(),
    };
    w.begin('{', true);
    w.key("nodes");
    w.begin('[', true);
    let mut arg_nodes = Vec::new();
    let mut row_ptr = vec![0u64];
    for (i, n) in order.iter().enumerate() {
        let d = n.data();
        if d.op.is_none() {
            arg_nodes.push(i as u64);
        }
        row_ptr.push(row_ptr[i] + n.num_outputs() as u64);
        w.item();
        w.begin('{', true);
        w.key("op");
        w.string(d.op.map(|o| o.name).unwrap_or("null"));
        w.key("name");
        w.string(&d.name);
        if !d.attrs.is_empty() {
            w.key("attrs");
            w.map(&d.attrs);
        }
        w.key("inputs");
        let inputs: Vec<[u64; 3]> = d.inputs.iter().map(triple).collect();
        w.entries(&inputs);
        if !d.control_deps.is_empty() {
            w.key("control_deps");
            let deps: Vec<u64> = d.control_deps.iter().map(id).collect();
            w.numbers(&deps);
        }
        w.end('}');
    }
    w.end(']');
    w.key("arg_nodes");
    w.numbers(&arg_nodes);
    w.key("node_row_ptr");
    w.numbers(&row_ptr);
    w.key("heads");
    let heads: Vec<[u64; 3]> = sym.outputs.iter().map(triple).collect();
    w.entries(&heads);
    w.key("attrs");
    w.begin('{', np_shape != 0);
    if np_shape != 0 {
        w.key("is_np_shape");
        w.begin('[', false);
        w.item();
        w.string("int");
        w.item();
        let _ = write!(w.out, "{np_shape}");
        w.end(']');
    }
    w.key("mxnet_version");
    w.begin('[', false);
    w.item();
    w.string("int");
    w.item();
    let _ = write!(w.out, "{MXNET_VERSION}");
    w.end(']');
    w.end('}');
    w.end('}');
    w.out
}

fn bad(msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("invalid symbol JSON: {msg}"))
}

/// Checks that `obj` has only `allowed` keys (dmlc's reader refuses any other).
fn known_fields(obj: &serde_json::Map<String, Value>, allowed: &[&str], what: &str) -> Result<()> {
    for k in obj.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(bad(format!(
                "JSONReader: Unknown field {k} in {what}, candidates are: {}",
                allowed.join(", ")
            )));
        }
    }
    Ok(())
}

fn index(v: &Value, what: &str) -> Result<u64> {
    v.as_u64()
        .ok_or_else(|| bad(format!("{what} is not a non-negative integer: {v}")))
}

/// The string values of an attribute object (numbers and booleans written as text).
fn string_map(v: &Value, what: &str) -> Result<Vec<(String, String)>> {
    let obj = v
        .as_object()
        .ok_or_else(|| bad(format!("{what} is not an object")))?;
    obj.iter()
        .map(|(k, v)| {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return Err(bad(format!("{what}: value of {k} is not a string"))),
            };
            Ok((k.clone(), s))
        })
        .collect()
}

/// A graph read from MXNet's JSON (any release's), upgraded as MXNet 1.9.1 upgrades it. Every
/// op must be one mxrt implements; a node may only read nodes listed before it.
pub fn from_json(text: &str) -> Result<Symbol> {
    let root: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON ({e})")))?;
    let obj = root
        .as_object()
        .ok_or_else(|| bad("the top level is not an object"))?;
    known_fields(
        obj,
        &["nodes", "arg_nodes", "node_row_ptr", "heads", "attrs"],
        "the graph",
    )?;
    let version = obj
        .get("attrs")
        .and_then(|a| a.get("mxnet_version"))
        .and_then(|v| v.get(1))
        .and_then(Value::as_i64)
        .unwrap_or(800);
    let jnodes = obj
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no \"nodes\" array"))?;
    let mut nodes: Vec<NodeRef> = Vec::with_capacity(jnodes.len().min(1 << 20));
    for (i, jn) in jnodes.iter().enumerate() {
        let o = jn
            .as_object()
            .ok_or_else(|| bad(format!("node {i} is not an object")))?;
        known_fields(
            o,
            &[
                "op",
                "name",
                "attrs",
                "attr",
                "param",
                "inputs",
                "control_deps",
                "subgraphs",
                "backward_source_id",
            ],
            &format!("node {i}"),
        )?;
        let op = o
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("node {i} has no \"op\" string")))?;
        let name = o
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("node {i} has no \"name\" string")))?;
        if o.get("subgraphs")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            return Err(Error::not_supported(format!(
                "node {i} ({name}) has subgraphs (control-flow operators are not implemented by mxrt)"
            )));
        }
        let mut attrs: Vec<(String, String)> = Vec::new();
        for key in ["param", "attr", "attrs"] {
            if let Some(v) = o.get(key) {
                attrs.extend(string_map(v, &format!("node {i} ({name}) \"{key}\""))?);
            }
        }
        let def = if op == "null" {
            None
        } else {
            Some(Symbol::op_def(op).map_err(|e| {
                Error::new(
                    e.kind(),
                    format!("Failed loading Op {name} of type {op}: {e}"),
                )
            })?)
        };
        let jin = o
            .get("inputs")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("node {i} ({name}) has no \"inputs\" array")))?;
        let mut inputs = Vec::with_capacity(jin.len());
        for (j, t) in jin.iter().enumerate() {
            let what = format!("input {j} of node {i} ({name})");
            let t = t
                .as_array()
                .filter(|t| t.len() == 2 || t.len() == 3)
                .ok_or_else(|| bad(format!("{what} is not [node, index, version]")))?;
            let src = index(&t[0], &what)? as usize;
            let node = nodes.get(src).cloned().ok_or_else(|| {
                bad(format!(
                    "{what} reads node {src}, which is not listed before it"
                ))
            })?;
            let out_index = index(&t[1], &what)?;
            let version = t.get(2).map(|v| index(v, &what)).transpose()?.unwrap_or(0);
            let outputs = node.num_outputs() as u64;
            if out_index >= outputs {
                return Err(bad(format!(
                    "{what} reads output {out_index} of node {src}, which has {outputs}"
                )));
            }
            inputs.push(Entry {
                node,
                index: out_index as u32,
                version: u32::try_from(version).map_err(|_| bad(format!("{what}: version")))?,
            });
        }
        let mut control_deps = Vec::new();
        if let Some(c) = o.get("control_deps") {
            let c = c
                .as_array()
                .ok_or_else(|| bad(format!("node {i}: control_deps is not an array")))?;
            for d in c {
                let src = index(d, "a control dependency")? as usize;
                control_deps.push(nodes.get(src).cloned().ok_or_else(|| {
                    bad(format!(
                        "node {i}: control dependency {src} is not listed before it"
                    ))
                })?);
            }
        }
        let dict = upgrade_attrs(version, def, attrs, &inputs);
        if let Some(def) = def {
            super::check_params(def, &dict).map_err(|e| {
                Error::new(
                    e.kind(),
                    format!("Failed loading Op {name} of type {op}: {e}"),
                )
            })?;
        }
        let node = Arc::new(Node {
            data: parking_lot::RwLock::new(NodeData {
                op: def,
                name: name.to_string(),
                attrs: dict,
                inputs,
                control_deps,
                version: 0,
            }),
        });
        if def.is_some() {
            let sig = node
                .signature()
                .map_err(|e| e.context(format!("node {i} ({name})")))?;
            let have = node.data.read().inputs.len();
            match &sig.inputs {
                Some(names) if have < names.len() && version < 900 => {
                    add_missing_inputs(&node, names)
                }
                Some(names) if have != names.len() => {
                    return Err(bad(format!(
                        "node {i} ({name}): operator {op} takes {} inputs, {have} given",
                        names.len()
                    )));
                }
                _ => {}
            }
            if version < 904
                && let Some(f) = node.op().and_then(|d| d.graph.input_var_attr)
            {
                for (k, e) in node.inputs().iter().enumerate() {
                    if e.node.is_variable()
                        && let Some((key, v)) = f(k)
                    {
                        let mut vd = e.node.data.write();
                        vd.attrs
                            .entry(key.to_string())
                            .or_insert_with(|| v.to_string());
                    }
                }
            }
            if version < 905 && matches!(op, "argmax" | "argmin") {
                let mut d = node.data.write();
                if d.attrs.get("axis").map(String::as_str) == Some("-1") {
                    d.attrs.remove("axis");
                }
            }
        }
        nodes.push(node);
    }
    if let Some(args) = obj.get("arg_nodes") {
        let args = args
            .as_array()
            .ok_or_else(|| bad("\"arg_nodes\" is not an array"))?;
        for a in args {
            let k = index(a, "an arg_nodes entry")? as usize;
            let n = nodes
                .get(k)
                .ok_or_else(|| bad(format!("arg_nodes lists node {k}, which does not exist")))?;
            if !n.is_variable() {
                return Err(bad(format!(
                    "arg_nodes lists node {k} ({}), which is not a variable",
                    n.name()
                )));
            }
        }
    } else {
        return Err(bad("no \"arg_nodes\" array"));
    }
    let heads = obj
        .get("heads")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no \"heads\" array"))?;
    let mut outputs = Vec::with_capacity(heads.len());
    for (j, t) in heads.iter().enumerate() {
        let what = format!("head {j}");
        let t = t
            .as_array()
            .filter(|t| t.len() == 2 || t.len() == 3)
            .ok_or_else(|| bad(format!("{what} is not [node, index, version]")))?;
        let src = index(&t[0], &what)? as usize;
        let node = nodes
            .get(src)
            .cloned()
            .ok_or_else(|| bad(format!("{what} names node {src}, which does not exist")))?;
        let out_index = index(&t[1], &what)?;
        if out_index >= node.num_outputs() as u64 {
            return Err(bad(format!("{what} reads a missing output {out_index}")));
        }
        let version = t.get(2).map(|v| index(v, &what)).transpose()?.unwrap_or(0);
        outputs.push(Entry {
            node,
            index: out_index as u32,
            version: u32::try_from(version).map_err(|_| bad(format!("{what}: version")))?,
        });
    }
    Ok(Symbol { outputs })
}

/// Attributes as MXNet 1.9.1 keeps them: before 1.9.1, hidden keys given bare become `__key__`
/// and `<input>_<key>` ones on an op move to that input's variable as `__key__`.
fn upgrade_attrs(
    version: i64,
    def: Option<&'static crate::operator::def::OpDef>,
    attrs: Vec<(String, String)>,
    inputs: &[Entry],
) -> BTreeMap<String, String> {
    let mut dict = BTreeMap::new();
    let mut hidden = Vec::new();
    for (k, v) in attrs {
        let matches = HIDDEN_KEYS.iter().any(|h| match k.rfind(h) {
            Some(0) => true,
            Some(pos) => pos + h.len() == k.len(),
            None => false,
        });
        if version < 10901 && matches {
            hidden.push((k, v));
        } else {
            dict.insert(k, v);
        }
    }
    let names = def
        .and_then(|d| super::signature(d, &op_params(&dict)).ok())
        .and_then(|s| s.inputs);
    for (k, v) in hidden {
        let mut placed = false;
        for h in HIDDEN_KEYS {
            match k.rfind(h) {
                Some(0) if k.len() == h.len() => {
                    dict.insert(format!("__{h}__"), v.clone());
                    placed = true;
                    break;
                }
                Some(pos) if pos > 1 && pos + h.len() == k.len() => {
                    let arg = &k[..pos - 1];
                    if let Some(i) = names.as_ref().and_then(|n| n.iter().position(|a| a == arg))
                        && let Some(e) = inputs.get(i)
                        && e.node.is_variable()
                    {
                        e.node
                            .data
                            .write()
                            .attrs
                            .insert(format!("__{h}__"), v.clone());
                        placed = true;
                    }
                    break;
                }
                _ => {}
            }
        }
        if !placed {
            dict.insert(k, v);
        }
    }
    dict
}

/// Creates the variables a node of a release before 0.9 did not save (auxiliary states), named
/// `<node>_<input>` with the node's attributes.
fn add_missing_inputs(node: &NodeRef, names: &[String]) {
    let mut d = node.data.write();
    let attrs = d.attrs.clone();
    let start = d.inputs.len();
    for arg in &names[start..] {
        let v = Node::variable(&format!("{}_{arg}", d.name));
        v.data.write().attrs = attrs.clone();
        d.inputs.push(Entry {
            node: v,
            index: 0,
            version: 0,
        });
    }
}
