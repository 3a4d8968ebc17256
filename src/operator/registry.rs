//! The operator table: every operator name MXNet 1.9.1 lists, the op each resolves to (aliases
//! share one op) and each op's argument information, as MXNet reports it.
//!
//! The table is data (`data/mxnet-1.9.1-ops.json`, written by `scripts/make-op-table.py` from the
//! reference library), parsed once on first use. MXNet's Python package generates its `mx.nd.*`
//! functions from it, so listing every name with its real arguments makes the generated functions
//! the same on both libraries; an op the table lists and mxrt does not implement fails when it is
//! invoked, naming the op.

use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::OnceLock;

/// The table as shipped.
const TABLE_JSON: &str = include_str!("../../data/mxnet-1.9.1-ops.json");

/// Which names register MXNet's `FListInputNames` and `FListOutputNames` attributes
/// (`data/mxnet-1.9.1-io-names.json`, written by `scripts/make-io-names.py` from MXNet's
/// sources, which the C API does not expose): monitors name an op's inputs `<node>_<name>` by
/// the first (`<node>_input<i>` without it), a CachedOp's hook its outputs by the second (the
/// output's index without it).
const IO_NAMES_JSON: &str = include_str!("../../data/mxnet-1.9.1-io-names.json");

/// The ops whose registrations list their input or output names (see [`IO_NAMES_JSON`]).
#[derive(Debug)]
pub struct IoNames {
    inputs: std::collections::HashSet<String>,
    outputs: std::collections::HashSet<String>,
}

impl IoNames {
    /// The table shipped with mxrt.
    pub fn global() -> &'static IoNames {
        static NAMES: OnceLock<IoNames> = OnceLock::new();
        NAMES.get_or_init(|| {
            let root: Value = serde_json::from_str(IO_NAMES_JSON)
                .expect("data/mxnet-1.9.1-io-names.json is JSON");
            let set = |key: &str| {
                root[key]
                    .as_array()
                    .expect("data/mxnet-1.9.1-io-names.json lists inputs and outputs")
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            };
            IoNames { inputs: set("inputs"), outputs: set("outputs") }
        })
    }

    /// Whether `op` (any of MXNet's names for it) registers `FListInputNames`.
    pub fn lists_inputs(&self, op: &str) -> bool {
        self.inputs.contains(op)
    }

    /// Whether `op` registers `FListOutputNames`.
    pub fn lists_outputs(&self, op: &str) -> bool {
        self.outputs.contains(op)
    }
}

/// An op's index in the table: stable for the life of the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(pub u32);

/// One argument of an op: name, type string (`NDArray-or-Symbol`, `Shape(tuple), optional,
/// default=None`, ...) and description, as MXNet writes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgInfo {
    pub name: String,
    pub type_info: String,
    pub description: String,
}

/// What MXNet reports about an op (`MXSymbolGetAtomicSymbolInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpInfo {
    /// The op's own name (an alias resolves to it).
    pub name: String,
    pub description: String,
    pub arguments: Vec<ArgInfo>,
    /// The argument that counts a variable number of inputs (`num_args`), or empty.
    pub key_var_num_args: String,
    pub return_type: Option<String>,
}

impl OpInfo {
    /// The op's array inputs, in order: the arguments typed `NDArray-or-Symbol` or
    /// `NDArray-or-Symbol[]`.
    pub fn array_inputs(&self) -> impl Iterator<Item = &ArgInfo> {
        self.arguments
            .iter()
            .filter(|a| a.type_info.starts_with("NDArray-or-Symbol"))
    }

    /// The op's parameters: every argument that is not an array input.
    pub fn parameters(&self) -> impl Iterator<Item = &ArgInfo> {
        self.arguments
            .iter()
            .filter(|a| !a.type_info.starts_with("NDArray-or-Symbol"))
    }
}

/// What MXNet reports about a data iterator (`MXDataIterGetIterInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IterInfo {
    pub name: String,
    pub description: String,
    pub arguments: Vec<ArgInfo>,
}

/// The operator and data-iterator table.
#[derive(Debug)]
pub struct Registry {
    /// Every listed name with its op, in MXNet's order.
    names: Vec<(String, OpId)>,
    ops: Vec<OpInfo>,
    by_name: HashMap<String, OpId>,
    data_iters: Vec<IterInfo>,
}

impl Registry {
    /// The table shipped with mxrt.
    pub fn global() -> &'static Registry {
        static REGISTRY: OnceLock<Registry> = OnceLock::new();
        REGISTRY.get_or_init(|| {
            Registry::parse(TABLE_JSON).expect("data/mxnet-1.9.1-ops.json is a valid op table")
        })
    }

    /// Parses a table in the format `scripts/make-op-table.py` writes.
    pub fn parse(json: &str) -> Result<Registry> {
        let bad = |what: &str| Error::invalid(format!("op table: {what}"));
        let root: Value =
            serde_json::from_str(json).map_err(|e| bad(&format!("not JSON ({e})")))?;
        let ops = root["ops"]
            .as_array()
            .ok_or_else(|| bad("no \"ops\" array"))?
            .iter()
            .map(|o| {
                Ok(OpInfo {
                    name: string(&o["name"]).ok_or_else(|| bad("an op without a name"))?,
                    description: string(&o["description"]).unwrap_or_default(),
                    arguments: arguments(&o["arguments"]).ok_or_else(|| bad("bad arguments"))?,
                    key_var_num_args: string(&o["key_var_num_args"]).unwrap_or_default(),
                    return_type: string(&o["return_type"]),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut names = Vec::new();
        let mut by_name = HashMap::new();
        for entry in root["names"]
            .as_array()
            .ok_or_else(|| bad("no \"names\" array"))?
        {
            let name = string(&entry[0]).ok_or_else(|| bad("a name that is not a string"))?;
            let id = entry[1]
                .as_u64()
                .filter(|&i| (i as usize) < ops.len())
                .ok_or_else(|| bad(&format!("name {name} points to no op")))?;
            let id = OpId(id as u32);
            if by_name.insert(name.clone(), id).is_some() {
                return Err(bad(&format!("name {name} listed twice")));
            }
            names.push((name, id));
        }
        let data_iters = root["data_iters"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|i| {
                        Some(IterInfo {
                            name: string(&i["name"])?,
                            description: string(&i["description"]).unwrap_or_default(),
                            arguments: arguments(&i["arguments"])?,
                        })
                    })
                    .collect::<Option<Vec<_>>>()
            })
            .unwrap_or(Some(Vec::new()))
            .ok_or_else(|| bad("bad data iterator entry"))?;
        Ok(Registry {
            names,
            ops,
            by_name,
            data_iters,
        })
    }

    /// Every listed name with its op, in MXNet's order.
    pub fn names(&self) -> &[(String, OpId)] {
        &self.names
    }

    /// The op `name` (an op's own name or an alias) resolves to.
    pub fn lookup(&self, name: &str) -> Option<OpId> {
        self.by_name.get(name).copied()
    }

    /// Number of distinct ops.
    pub fn op_count(&self) -> usize {
        self.ops.len()
    }

    pub fn op(&self, id: OpId) -> &OpInfo {
        &self.ops[id.0 as usize]
    }

    pub fn data_iters(&self) -> &[IterInfo] {
        &self.data_iters
    }
}

fn string(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

fn arguments(v: &Value) -> Option<Vec<ArgInfo>> {
    v.as_array()?
        .iter()
        .map(|a| {
            Some(ArgInfo {
                name: string(&a[0])?,
                type_info: string(&a[1])?,
                description: string(&a[2])?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // parses the 700 KB op table: hours of safe JSON code under Miri
    fn the_shipped_table_lists_every_mxnet_name_and_op() {
        let r = Registry::global();
        assert_eq!(r.names().len(), 1167);
        assert_eq!(r.op_count(), 886);
        assert_eq!(r.data_iters().len(), 9);
        // an alias resolves to its op
        let plus = r.lookup("elemwise_add").expect("listed");
        assert_eq!(r.lookup("_plus"), Some(plus));
        let fc = r.op(r.lookup("FullyConnected").unwrap());
        let inputs: Vec<_> = fc.array_inputs().map(|a| a.name.as_str()).collect();
        assert_eq!(inputs, ["data", "weight", "bias"]);
        assert!(fc.parameters().any(|a| a.name == "num_hidden"));
        let concat = r.op(r.lookup("Concat").unwrap());
        assert_eq!(concat.key_var_num_args, "num_args");
        assert!(r.lookup("no_such_op").is_none());
    }

    #[test]
    #[cfg_attr(miri, ignore)] // parses the op table
    fn the_io_names_table_names_listed_ops_and_aliases_alike() {
        let io = IoNames::global();
        let r = Registry::global();
        for name in io.inputs.iter().chain(&io.outputs) {
            assert!(r.lookup(name).is_some(), "{name} is not one of MXNet's op names");
        }
        // registrations that list their inputs: legacy ops, nnvm ops setting the attribute,
        // the binary macros and their aliases; unary ops and Activation do not
        for op in ["FullyConnected", "SoftmaxOutput", "Convolution", "elemwise_add", "_plus"] {
            assert!(io.lists_inputs(op), "{op}");
        }
        for op in ["broadcast_add", "Concat", "BatchNorm", "where", "_sparse_elemwise_add"] {
            assert!(io.lists_inputs(op), "{op}");
        }
        for op in ["Activation", "sin", "relu", "_plus_scalar", "Reshape", "transpose"] {
            assert!(!io.lists_inputs(op), "{op}");
        }
        for op in ["Activation", "FullyConnected", "Dropout", "BatchNorm", "elemwise_add"] {
            assert!(io.lists_outputs(op), "{op}");
        }
        for op in ["sin", "_mul_scalar", "Reshape"] {
            assert!(!io.lists_outputs(op), "{op}");
        }
    }

    #[test]
    fn malformed_tables_are_refused_with_a_reason() {
        for (json, reason) in [
            ("[", "not JSON"),
            ("{}", "no \"ops\" array"),
            (
                r#"{"ops": [], "names": [["a", 0]]}"#,
                "name a points to no op",
            ),
            (
                r#"{"ops": [{"name": "a", "arguments": []}], "names": [["a", 0], ["a", 0]]}"#,
                "name a listed twice",
            ),
        ] {
            let e = Registry::parse(json).unwrap_err().to_string();
            assert!(e.contains(reason), "{json}: {e}");
        }
    }
}
