//! Storage types in an invoke: which storage the outputs the library allocates get, and which
//! optimizer updates are lazy (touch only the rows a row_sparse gradient stores).
//!
//! Kernels are dense. An op given sparse arrays computes on dense copies of them and writes a
//! sparse output back in its storage type (MXNet's storage fallback, which its own ops without
//! a sparse kernel use too), so values are exactly the dense op's. What sparse storage changes
//! is decided here: the outputs' storage (as MXNet's storage inference gives it for the ops that
//! keep sparsity) and the rows lazy updates may write.

use crate::ndarray::format::StorageType;

/// Unary ops that map zero to zero, so a sparse input gives an output of the same storage.
const ZERO_PRESERVING: &[&str] = &[
    "abs",
    "sign",
    "round",
    "rint",
    "ceil",
    "floor",
    "trunc",
    "fix",
    "square",
    "sqrt",
    "sin",
    "tan",
    "arcsin",
    "arctan",
    "sinh",
    "tanh",
    "arcsinh",
    "arctanh",
    "expm1",
    "log1p",
    "relu",
    "negative",
    "radians",
    "degrees",
    "_copy",
    "copy",
    "identity",
    "zeros_like",
    "_mul_scalar",
    "_div_scalar",
    "clip",
    "_copyto",
    "Cast",
    "cast",
];

/// Ops whose output keeps the storage its inputs share (sums and products of sparse arrays).
const SAME_STORAGE: &[&str] = &[
    "elemwise_add",
    "_plus",
    "_add",
    "elemwise_sub",
    "_minus",
    "_sub",
    "elemwise_mul",
    "_mul",
    "_grad_add",
    "add_n",
    "ElementWiseSum",
    "_internal._plus",
];

/// The storage of each of `n` outputs the library allocates for `op` given its inputs'.
pub fn output_stypes(
    op: &str,
    params: &[(&str, &str)],
    inputs: &[StorageType],
    n: usize,
) -> Vec<StorageType> {
    let param = |k: &str| params.iter().find(|(name, _)| *name == k).map(|(_, v)| *v);
    let first = inputs.first().copied().unwrap_or(StorageType::Default);
    let stype = match op {
        "cast_storage" => match param("stype").map(|s| s.trim_matches('\'')) {
            Some("row_sparse") => StorageType::RowSparse,
            Some("csr") => StorageType::Csr,
            _ => StorageType::Default,
        },
        "_sparse_retain" | "sparse_retain" | "_contrib_sparse_retain" => StorageType::RowSparse,
        "dot"
            if first == StorageType::Csr
                && param("transpose_a").is_some_and(|v| matches!(v, "True" | "true" | "1"))
                && inputs.get(1) == Some(&StorageType::Default) =>
        {
            StorageType::RowSparse
        }
        // rows of a csr array are a csr array (without steps), as in MXNet
        "slice" | "crop"
            if first == StorageType::Csr
                && param("step").is_none_or(|v| matches!(v.trim(), "()" | "[]" | "(1,)" | "(None,)")) =>
        {
            StorageType::Csr
        }
        _ if ZERO_PRESERVING.contains(&op) && inputs.len() == 1 => first,
        _ if SAME_STORAGE.contains(&op)
            && !inputs.is_empty()
            && inputs.iter().all(|&s| s == first) =>
        {
            first
        }
        _ => StorageType::Default,
    };
    vec![stype; n]
}

/// Optimizer updates that, given a row_sparse gradient (input 1), update only its stored rows
/// when `lazy_update` is true (its default); the sparse forms of `ftrl_update` (row_sparse
/// weights) and `_sparse_adagrad_update` always are.
pub fn lazy_update_rows(op: &str, params: &[(&str, &str)], inputs: &[StorageType]) -> bool {
    if inputs.get(1) != Some(&StorageType::RowSparse) {
        return false;
    }
    let lazy = params
        .iter()
        .find(|(k, _)| *k == "lazy_update")
        .is_none_or(|(_, v)| matches!(*v, "True" | "true" | "1"));
    match op {
        "sgd_update" | "sgd_mom_update" | "adam_update" => lazy,
        // MXNet's sparse FTRL kernel takes row_sparse weights; a dense weight falls back to
        // the dense update of every row
        "ftrl_update" => inputs[0] == StorageType::RowSparse,
        "_sparse_adagrad_update" => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use StorageType::*;

    #[test]
    fn outputs_keep_sparsity_where_mxnet_does() {
        assert_eq!(
            output_stypes("cast_storage", &[("stype", "csr")], &[Default], 1),
            [Csr]
        );
        assert_eq!(
            output_stypes("_mul_scalar", &[("scalar", "2")], &[RowSparse], 1),
            [RowSparse]
        );
        assert_eq!(
            output_stypes("_plus_scalar", &[("scalar", "2")], &[RowSparse], 1),
            [Default]
        );
        assert_eq!(output_stypes("elemwise_add", &[], &[Csr, Csr], 1), [Csr]);
        assert_eq!(
            output_stypes("elemwise_add", &[], &[Csr, Default], 1),
            [Default]
        );
        assert_eq!(
            output_stypes("dot", &[("transpose_a", "True")], &[Csr, Default], 1),
            [RowSparse]
        );
        assert_eq!(output_stypes("dot", &[], &[Csr, Default], 1), [Default]);
        let rows = [("begin", "(1,)"), ("end", "(3,)")];
        assert_eq!(output_stypes("slice", &rows, &[Csr], 1), [Csr]);
        assert_eq!(output_stypes("slice", &rows, &[RowSparse], 1), [Default]);
    }

    #[test]
    fn lazy_updates_need_a_row_sparse_gradient() {
        assert!(lazy_update_rows("sgd_update", &[], &[Default, RowSparse]));
        assert!(!lazy_update_rows(
            "sgd_update",
            &[("lazy_update", "False")],
            &[Default, RowSparse]
        ));
        assert!(!lazy_update_rows("sgd_update", &[], &[Default, Default]));
        assert!(lazy_update_rows(
            "ftrl_update",
            &[("lazy_update", "False")],
            &[RowSparse, RowSparse]
        ));
        assert!(!lazy_update_rows("ftrl_update", &[], &[Default, RowSparse]));
    }
}
