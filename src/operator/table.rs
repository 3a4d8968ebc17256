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
}
