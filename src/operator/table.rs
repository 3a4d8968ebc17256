//! The kernel table: which of MXNet's operators mxrt implements, by op name. The registry
//! (`registry.rs`) lists every op MXNet has; an op listed there and absent here fails when
//! invoked, naming the op. `implemented()` marks the subset (`mxrt --ops`-style listings and the
//! tests read it).

use super::op::Operator;
use super::ops;
use std::collections::HashMap;
use std::sync::OnceLock;

fn table() -> &'static HashMap<&'static str, &'static dyn Operator> {
    static TABLE: OnceLock<HashMap<&'static str, &'static dyn Operator>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut entries: ops::Entries = Vec::new();
        ops::register_all(&mut entries);
        let mut map = HashMap::with_capacity(entries.len());
        for (name, op) in entries {
            let previous = map.insert(name, op);
            assert!(previous.is_none(), "operator {name} registered twice");
        }
        map
    })
}

/// The operator implementing MXNet's op `name` (the op's own name, not an alias).
pub fn lookup(name: &str) -> Option<&'static dyn Operator> {
    table().get(name).copied()
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
    fn every_implemented_op_is_an_mxnet_op_under_its_own_name() {
        let reg = Registry::global();
        for name in implemented() {
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
}
