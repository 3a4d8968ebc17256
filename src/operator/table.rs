//! The kernel table: which of MXNet's operators mxrt implements, by op name. The registry
//! (`registry.rs`) lists every op MXNet has; an op listed there and absent here fails when
//! invoked, naming the op. `implemented()` marks the subset (`mxrt --ops`-style listings and the
//! tests read it).

use super::def::{Entries, OpDef};
use super::ops;
use std::collections::HashMap;
use std::sync::OnceLock;

fn table() -> &'static HashMap<&'static str, OpDef> {
    static TABLE: OnceLock<HashMap<&'static str, OpDef>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut entries = Entries::default();
        ops::register_all(&mut entries);
        let mut map = HashMap::with_capacity(entries.0.len());
        for def in entries.0 {
            let name = def.name;
            let previous = map.insert(name, def);
            assert!(previous.is_none(), "operator {name} registered twice");
        }
        map
    })
}

/// The definition of MXNet's op `name` (the op's own name, not an alias) or of one of mxrt's
/// internal `_mxrt_*` ops.
pub fn lookup(name: &str) -> Option<&'static OpDef> {
    table().get(name)
}

/// The names of the implemented ops, sorted.
pub fn implemented() -> Vec<&'static str> {
    let mut v: Vec<_> = table().keys().copied().collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::registry::Registry;

    #[test]
    #[cfg_attr(miri, ignore)] // parses the 700 KB op table: hours of safe JSON code under Miri
    fn every_implemented_op_is_an_mxnet_op_under_its_own_name() {
        let reg = Registry::global();
        for name in implemented() {
            if name.starts_with("_mxrt_") {
                continue; // mxrt's internal gradient ops
            }
            let id = reg
                .lookup(name)
                .unwrap_or_else(|| panic!("{name} is not an MXNet 1.9.1 op"));
            assert_eq!(
                reg.op(id).name,
                name,
                "{name} is an alias; register the op's own name"
            );
        }
    }

    /// Every operator that takes arrays has a gradient case in tests/python/grad_cases_*.py
    /// (its name in quotes in a case's `covers`): a gradient checked against libmxnet.so and
    /// central differences, a zero gradient on both libraries, or a refusal on both. So an op
    /// MXNet differentiates cannot be left without its gradient, or without its check.
    #[test]
    #[cfg_attr(miri, ignore)] // as above
    fn every_operator_taking_arrays_has_a_gradient_case() {
        use crate::operator::def::Gradient;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python");
        let mut text = String::new();
        for entry in std::fs::read_dir(&dir).expect("tests/python") {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with("grad_cases_") && name.ends_with(".py") {
                text.push_str(&std::fs::read_to_string(&path).expect("readable"));
            }
        }
        let reg = Registry::global();
        let mut missing = Vec::new();
        for name in implemented() {
            if name.starts_with("_mxrt_") {
                continue;
            }
            let info = reg.op(reg.lookup(name).expect("an MXNet op"));
            let takes_arrays =
                info.array_inputs().next().is_some() || !info.key_var_num_args.is_empty();
            if takes_arrays && !text.contains(&format!("\"{name}\"")) {
                let kind = match lookup(name).expect("implemented").grad {
                    Gradient::Ops(_) => "gradient",
                    Gradient::Zero => "zero gradient",
                    Gradient::None => "no gradient",
                };
                missing.push(format!("{name} ({kind})"));
            }
        }
        assert!(missing.is_empty(), "operators without a gradient case: {missing:?}");
    }
}
