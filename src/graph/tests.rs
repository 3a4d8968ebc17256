//! Unit tests of graph building, JSON and inference.

use super::infer::{Known, infer_shapes, infer_types};
use super::*;

mod json {
    pub use super::super::json::from_json;
    /// The JSON outside numpy-shape mode.
    pub fn to_json_off(s: &super::Symbol) -> String {
        super::super::json::to_json(s, 0)
    }
}
use crate::dtype::DType;

fn var(name: &str) -> Symbol {
    Symbol::variable(name)
}

/// `op(args..., name=name, params)` as the Python package builds it: an atomic symbol composed.
fn apply(op: &str, name: &str, args: &[Symbol], params: &[(&str, &str)]) -> Symbol {
    let mut s = Symbol::atomic(Symbol::op_def(op).unwrap(), params).unwrap();
    s.compose(name, args, &[]).unwrap();
    s
}

fn mlp() -> Symbol {
    let fc1 = apply(
        "FullyConnected",
        "fc1",
        &[var("data")],
        &[("num_hidden", "16")],
    );
    let act = apply("Activation", "relu1", &[fc1], &[("act_type", "relu")]);
    let fc2 = apply("FullyConnected", "fc2", &[act], &[("num_hidden", "4")]);
    apply("softmax", "out", &[fc2], &[])
}

#[test]
fn composition_creates_the_missing_inputs_with_mxnets_names() {
    let s = mlp();
    assert_eq!(
        s.input_names(InputKind::ReadOnly),
        ["data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"]
    );
    assert_eq!(s.list_outputs(), ["out_output"]);
    assert_eq!(
        s.internals().list_outputs(),
        [
            "data",
            "fc1_weight",
            "fc1_bias",
            "fc1_output",
            "relu1_output",
            "fc2_weight",
            "fc2_bias",
            "fc2_output",
            "out_output"
        ]
    );
    // the created variables carry the op's attributes
    let w = &s.list_inputs(InputKind::All)[1];
    assert_eq!(w.attrs().get("num_hidden").map(String::as_str), Some("16"));
    // an unnamed node names its variables after the inputs alone
    let bare = apply(
        "FullyConnected",
        "",
        &[],
        &[("num_hidden", "2"), ("no_bias", "True")],
    );
    assert_eq!(bare.input_names(InputKind::All), ["data", "weight"]);
}

#[test]
fn batchnorm_statistics_are_auxiliary_states_and_hidden_outputs_count() {
    let bn = apply("BatchNorm", "bn", &[var("x")], &[]);
    assert_eq!(
        bn.input_names(InputKind::ReadOnly),
        ["x", "bn_gamma", "bn_beta"]
    );
    assert_eq!(
        bn.input_names(InputKind::Auxiliary),
        ["bn_moving_mean", "bn_moving_var"]
    );
    assert_eq!(bn.list_outputs(), ["bn_output"]);
    let inputs = bn.outputs[0].node.inputs();
    assert_eq!(
        inputs[3].version, 1,
        "a mutated variable's version is bumped"
    );
    assert_eq!(inputs[1].version, 0);
    assert_eq!(
        inputs[4].node.attrs().get("__init__").map(String::as_str),
        Some("[\"one\", {}]")
    );
    let json = json::to_json_off(&bn);
    assert!(
        json.contains("\"node_row_ptr\": [0, 1, 2, 3, 4, 5, 8]"),
        "{json}"
    );
    let both = apply(
        "BatchNorm",
        "b2",
        &[var("x")],
        &[("output_mean_var", "True")],
    );
    assert_eq!(both.list_outputs(), ["b2_output", "b2_mean", "b2_var"]);
    // a mutated input must be a variable
    let mut s = Symbol::atomic(Symbol::op_def("BatchNorm").unwrap(), &[]).unwrap();
    let e = s
        .compose("b3", &[var("x"), var("g"), var("b"), mlp(), var("v")], &[])
        .unwrap_err();
    assert!(
        e.message().contains("Mutation target can only be Variable"),
        "{e}"
    );
}

#[test]
fn composition_errors_follow_mxnet() {
    let def = Symbol::op_def("FullyConnected").unwrap();
    let mut s = Symbol::atomic(def, &[("num_hidden", "2")]).unwrap();
    let e = s
        .compose("f", &[var("a"), var("b"), var("c"), var("d")], &[])
        .unwrap_err();
    assert!(
        e.message()
            .contains("Incorrect number of arguments, requires 3, provided 4")
    );
    let e = s
        .compose("f", &[], &[("wrong".into(), var("w"))])
        .unwrap_err();
    assert!(
        e.message()
            .starts_with("Symbol.ComposeKeyword argument name wrong not found.")
    );
    assert!(
        e.message().contains("\t[0]data\n\t[1]weight\n\t[2]bias"),
        "{e}"
    );
    let e = Symbol::atomic(def, &[("num_hiden", "2")]).unwrap_err();
    assert!(
        e.message().contains("Cannot find argument 'num_hiden'"),
        "{e}"
    );
    let e = Symbol::atomic(def, &[]).unwrap_err();
    assert!(e.message().contains("Required parameter num_hidden"), "{e}");
    let e = Symbol::atomic(def, &[("num_hidden", "2"), ("weight_lr_mult", "2")]).unwrap_err();
    assert!(e.message().contains("is deprecated"), "{e}");
    let e = var("v").compose("x", &[var("a")], &[]).unwrap_err();
    assert_eq!(e.message(), "Variable cannot be composed");
    // a composed graph takes keyword arguments only and replaces variables
    let mut g = mlp();
    assert!(g.compose("", &[var("z")], &[]).is_err());
    g.compose("", &[], &[("data".into(), var("z"))]).unwrap();
    assert_eq!(g.input_names(InputKind::All)[0], "z");
}

#[test]
fn composing_a_symbol_into_itself_is_refused() {
    let mut g = apply("exp", "e", &[var("x")], &[]);
    let copy = g.clone();
    let e = g.compose("", &[], &[("x".into(), copy)]).unwrap_err();
    assert!(e.message().contains("cycle"), "{e}");
    // the graph is unchanged and still walks
    assert_eq!(g.input_names(InputKind::All), ["x"]);
}

#[test]
fn copy_is_deep_and_attributes_are_shared_by_shallow_copies() {
    let s = mlp();
    let deep = s.deep_copy();
    let shallow = s.clone();
    s.set_attr("__tag__", "1").unwrap();
    assert_eq!(shallow.get_attr("__tag__").as_deref(), Some("1"));
    assert_eq!(deep.get_attr("__tag__"), None);
    assert_eq!(json::to_json_off(&deep), json::to_json_off(&mlp()));
    // hidden keys: bare given, stored hidden, listed both ways
    let v = var("w");
    v.set_attr("lr_mult", "2").unwrap();
    assert_eq!(v.get_attr("lr_mult").as_deref(), Some("2"));
    let listed = v.list_attrs(false);
    assert!(listed.contains(&("w$__lr_mult__".into(), "2".into())));
    assert!(listed.contains(&("w$lr_mult".into(), "2".into())));
    // a refused parameter leaves the node unchanged
    let fc = apply("FullyConnected", "f", &[var("d")], &[("num_hidden", "3")]);
    assert!(fc.set_attr("bogus", "1").is_err());
    assert_eq!(fc.get_attr("bogus"), None);
    assert!(Symbol::group(&[fc.clone(), v]).set_attr("x", "1").is_err());
}

#[test]
fn json_has_mxnets_layout() {
    let mut s = Symbol::atomic(Symbol::op_def("elemwise_add").unwrap(), &[]).unwrap();
    s.compose("_plus0", &[var("a"), var("b")], &[]).unwrap();
    let expected = "{\n  \"nodes\": [\n    {\n      \"op\": \"null\", \n      \"name\": \"a\", \n      \"inputs\": []\n    }, \n    {\n      \"op\": \"null\", \n      \"name\": \"b\", \n      \"inputs\": []\n    }, \n    {\n      \"op\": \"elemwise_add\", \n      \"name\": \"_plus0\", \n      \"inputs\": [[0, 0, 0], [1, 0, 0]]\n    }\n  ], \n  \"arg_nodes\": [0, 1], \n  \"node_row_ptr\": [0, 1, 2, 3], \n  \"heads\": [[2, 0, 0]], \n  \"attrs\": {\"mxnet_version\": [\"int\", 10901]}\n}";
    assert_eq!(json::to_json_off(&s), expected);
    // numpy-shape mode adds its flag before the version
    let np = super::json::to_json(&s, 1);
    assert!(np.ends_with("\"attrs\": {\n    \"is_np_shape\": [\"int\", 1], \n    \"mxnet_version\": [\"int\", 10901]\n  }\n}"), "{np}");
}

#[test]
fn json_round_trips() {
    for s in [
        mlp(),
        apply("BatchNorm", "bn", &[mlp()], &[("fix_gamma", "False")]),
    ] {
        let text = json::to_json_off(&s);
        let back = json::from_json(&text).unwrap();
        assert_eq!(json::to_json_off(&back), text);
        assert_eq!(
            back.input_names(InputKind::All),
            s.input_names(InputKind::All)
        );
    }
    // more than ten numbers: one per line
    let many: Vec<Symbol> = (0..12).map(|i| var(&format!("v{i}"))).collect();
    let text = json::to_json_off(&Symbol::group(&many));
    assert!(
        text.contains("\"arg_nodes\": [\n    0, \n    1, "),
        "{text}"
    );
    assert_eq!(json::to_json_off(&json::from_json(&text).unwrap()), text);
}

#[test]
fn legacy_json_is_upgraded() {
    let legacy = r#"{"nodes": [
        {"op": "null", "param": {}, "name": "data", "inputs": [], "backward_source_id": -1},
        {"op": "null", "param": {}, "name": "w", "inputs": [], "attr": {"lr_mult": "2"}},
        {"op": "FullyConnected", "param": {"num_hidden": "4", "no_bias": "True"}, "name": "fc",
         "inputs": [[0, 0], [1, 0]], "attr": {"weight_wd_mult": "0"}},
        {"op": "BatchNorm", "param": {}, "name": "bn", "inputs": [[2, 0]]}],
        "arg_nodes": [0, 1], "heads": [[3, 0]]}"#;
    let s = json::from_json(legacy).unwrap();
    assert_eq!(
        s.input_names(InputKind::Auxiliary),
        ["bn_moving_mean", "bn_moving_var"]
    );
    let w = &s.list_inputs(InputKind::All)[1];
    let attrs = w.attrs();
    assert_eq!(attrs.get("__lr_mult__").map(String::as_str), Some("2"));
    assert_eq!(attrs.get("__wd_mult__").map(String::as_str), Some("0"));
    let mm = &s.list_inputs(InputKind::Auxiliary)[0];
    assert_eq!(
        mm.attrs().get("__init__").map(String::as_str),
        Some("[\"zero\", {}]")
    );
}

#[test]
fn malformed_json_is_refused_with_a_reason() {
    for (text, reason) in [
        ("{", "not JSON"),
        ("[]", "not an object"),
        (
            r#"{"nodes": [], "arg_nodes": [], "heads": [], "zz": 1}"#,
            "Unknown field zz",
        ),
        (
            r#"{"nodes": [{"op": "exp", "name": "e", "inputs": [[0, 0, 0]]}], "arg_nodes": [], "heads": [[0, 0, 0]]}"#,
            "not listed before it",
        ),
        (
            r#"{"nodes": [{"op": "NoSuchOp", "name": "x", "inputs": []}], "arg_nodes": [], "heads": []}"#,
            "Failed loading Op x of type NoSuchOp",
        ),
        (
            r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}], "arg_nodes": [0], "heads": [[0, 5, 0]]}"#,
            "missing output",
        ),
        (
            r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}], "arg_nodes": [0], "heads": [[99999999999, 0]]}"#,
            "does not exist",
        ),
        (
            r#"{"nodes": [{"op": "null", "name": 3, "inputs": []}], "arg_nodes": [0], "heads": []}"#,
            "no \"name\" string",
        ),
        (
            r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "exp", "name": "e", "inputs": [[0, 0, 0], [0, 0, 0]]}], "arg_nodes": [0], "heads": [[1, 0]]}"#,
            "takes 1 inputs, 2 given",
        ),
    ] {
        let e = json::from_json(text).unwrap_err();
        assert!(e.message().contains(reason), "{text}: {e}");
    }
}

#[test]
fn shapes_spread_forward_and_backward() {
    let s = mlp();
    let r = infer_shapes(&s, &Known::Named(vec![("data".into(), vec![8, 20])])).unwrap();
    assert!(r.complete);
    let want: Vec<Option<Vec<i64>>> = [vec![8, 20], vec![16, 20], vec![16], vec![4, 16], vec![4]]
        .into_iter()
        .map(Some)
        .collect();
    assert_eq!(r.args, want);
    assert_eq!(r.outputs, vec![Some(vec![8, 4])]);
    // nothing known: nothing inferred, not complete
    let r = infer_shapes(&s, &Known::Named(vec![])).unwrap();
    assert!(!r.complete && r.outputs == vec![None]);
    // an inconsistent weight names the node and both shapes
    let e = infer_shapes(
        &s,
        &Known::Named(vec![
            ("data".into(), vec![8, 20]),
            ("fc1_weight".into(), vec![16, 21]),
        ]),
    )
    .unwrap_err();
    assert!(
        e.message().contains(
            "Error in operator fc1: Shape inconsistent, Provided = [16,21], inferred shape=[16,20]"
        ),
        "{e}"
    );
    // a partly known weight (Gluon's deferred initialisation) is completed from the data
    let w = var("w");
    w.set_attr("__shape__", "(10, 0)").unwrap();
    let fc = apply(
        "FullyConnected",
        "d",
        &[var("x"), w],
        &[("num_hidden", "10")],
    );
    let r = infer_shapes(&fc, &Known::Named(vec![("x".into(), vec![3, 7])])).unwrap();
    assert_eq!(r.args[1], Some(vec![10, 7]));
    // elementwise ops give their inputs each other's shape, backward too
    let a = var("a");
    let sum = apply("elemwise_add", "p", &[a.clone(), var("b")], &[]);
    let prod = apply(
        "elemwise_mul",
        "m",
        &[apply("exp", "e", &[sum], &[]), a],
        &[],
    );
    let r = infer_shapes(&prod, &Known::Positional(vec![vec![2, 5]])).unwrap();
    assert!(r.complete);
    assert_eq!(r.args, vec![Some(vec![2, 5]), Some(vec![2, 5])]);
    // unknown names are MXNet's keyword error
    let e = infer_shapes(&prod, &Known::Named(vec![("q".into(), vec![1])])).unwrap_err();
    assert!(
        e.message()
            .starts_with("InferShapeKeyword argument name q not found."),
        "{e}"
    );
    // BatchNorm's statistics and hidden outputs from the channel count
    let bn = apply("BatchNorm", "bn", &[var("x")], &[]);
    let r = infer_shapes(&bn, &Known::Named(vec![("x".into(), vec![4, 6, 3])])).unwrap();
    assert!(r.complete);
    assert_eq!(r.aux, vec![Some(vec![6]), Some(vec![6])]);
}

#[test]
fn dtypes_spread_and_conflicts_are_errors() {
    let s = mlp();
    let r = infer_types(&s, &Known::Named(vec![("data".into(), DType::F64)])).unwrap();
    assert!(r.complete);
    assert!(r.args.iter().all(|t| *t == Some(DType::F64)));
    let r = infer_types(&s, &Known::Named(vec![])).unwrap();
    assert!(!r.complete && r.outputs == vec![None]);
    let cast = apply("Cast", "c", &[var("x")], &[("dtype", "float16")]);
    let r = infer_types(&cast, &Known::Named(vec![("x".into(), DType::F32)])).unwrap();
    assert_eq!(r.outputs, vec![Some(DType::F16)]);
    let add = apply("elemwise_add", "p", &[var("a"), var("b")], &[]);
    let e = infer_types(
        &add,
        &Known::Named(vec![("a".into(), DType::F32), ("b".into(), DType::F64)]),
    )
    .unwrap_err();
    assert!(e.message().contains("Error in operator p"), "{e}");
}

#[test]
fn debug_strings_follow_mxnet() {
    assert_eq!(var("x").debug_string(), "Variable:x\n");
    let atomic = Symbol::atomic(Symbol::op_def("exp").unwrap(), &[]).unwrap();
    assert_eq!(atomic.debug_string(), "AtomicFunctor  Op:exp\n");
    let e = apply("exp", "e", &[var("a")], &[]);
    assert_eq!(
        e.debug_string(),
        "Symbol Outputs:\n\toutput[0]=e(0)\nVariable:a\n--------------------\nOp:exp, Name=e\nInputs:\n\targ[0]=a(0) version=0\n"
    );
}

#[test]
fn subgraphs_are_cut_at_their_inputs() {
    let x = var("x");
    let inner = apply("exp", "in1", &[apply("negative", "outer", &[x], &[])], &[]);
    inner.set_attr("__subgraph_name__", "sg").unwrap();
    let cut = inner.cut_subgraph();
    assert_eq!(cut.len(), 1);
    assert_eq!(cut[0].list_outputs(), ["outer_output"]);
    assert_eq!(inner.input_names(InputKind::All), ["outer_output"]);
    assert!(var("y").cut_subgraph().is_empty());
}
