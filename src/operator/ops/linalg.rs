//! Matrix products: `dot`, `batch_dot` and `FullyConnected`, on the GEMM kernel.

use crate::ndarray::format::StorageType;
use crate::operator::stype::{self, StorageRule};
use super::{Entries, inputs, same_dtype};
use crate::error::{Error, Result};
use crate::operator::kernel::gemm::{Operand, matmul};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::def::{
    GradCtx, ParamList, PartialShape, ShapeRule, Signature, Val, param_flag, param_int,
};
use crate::operator::param;
use super::nn::{as_refs, passed};

fn transposes(call: &Call<'_>) -> Result<(bool, bool)> {
    let p = call.params;
    let ta = p.or("transpose_a", param::boolean, "a boolean", false)?;
    let tb = p.or("transpose_b", param::boolean, "a boolean", false)?;
    // the output's storage (StorageRule of dot); the kernel computes densely either way
    if let Some(s) = p.optional("forward_stype", param::choice, "a storage type")?
        && !matches!(s.as_str(), "default" | "row_sparse" | "csr")
    {
        return Err(Error::invalid(format!(
            "operator {}: forward_stype '{s}' is not a storage type (default, row_sparse, csr)",
            call.name
        )));
    }
    Ok((ta, tb))
}

/// `dot(a, b)`: `a` flattened to 2-D over all axes but its last (first, transposed), `b` over all
/// but its first (last, transposed); 1-D · 1-D is an inner product.
fn dot(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    same_dtype(call, 0, 1)?;
    let (ta, tb) = transposes(call)?;
    let (a, b) = (&ins[0], &ins[1]);
    if a.shape.is_empty() || b.shape.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: operands must have at least one dimension",
            call.name
        )));
    }
    let split = |s: &[i64], lead: bool| -> (i64, i64, Vec<i64>) {
        // (kept dims product, contracted dim, kept dims)
        if lead {
            (s[1..].iter().product(), s[0], s[1..].to_vec())
        } else {
            (
                s[..s.len() - 1].iter().product(),
                s[s.len() - 1],
                s[..s.len() - 1].to_vec(),
            )
        }
    };
    let (m, ka, mut out) = split(&a.shape, ta);
    let (n, kb, rest) = split(&b.shape, !tb);
    if ka != kb {
        return Err(Error::invalid(format!(
            "operator {}: shapes {:?} and {:?} do not align for dot (transpose_a={ta}, transpose_b={tb})",
            call.name,
            &a.shape[..],
            &b.shape[..]
        )));
    }
    out.extend(rest);
    if out.is_empty() {
        out.push(1);
    }
    let (m, n, k) = (m as usize, n as usize, ka as usize);
    let dtype = a.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&out, dtype)],
        move |kargs| {
            crate::with_element!(dtype, T => {
                let (x, y) = (kargs.inputs[0].slice::<T>(), kargs.inputs[1].slice::<T>());
                matmul(m, n, k, Operand { data: x, transposed: ta }, Operand { data: y, transposed: tb },
                    kargs.outputs[0].slice_mut::<T>(), false);
            });
            Ok(())
        },
    ))
}

fn batch_dot(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    same_dtype(call, 0, 1)?;
    let (ta, tb) = transposes(call)?;
    let (a, b) = (&ins[0], &ins[1]);
    if a.shape.len() < 3
        || a.shape.len() != b.shape.len()
        || a.shape[..a.shape.len() - 2] != b.shape[..b.shape.len() - 2]
    {
        return Err(Error::invalid(format!(
            "operator {}: batch_dot needs arrays of at least 3 dimensions with equal batch dimensions, got {:?} and {:?}",
            call.name,
            &a.shape[..],
            &b.shape[..]
        )));
    }
    let nd = a.shape.len();
    let (ar, ac) = (a.shape[nd - 2], a.shape[nd - 1]);
    let (br, bc) = (b.shape[nd - 2], b.shape[nd - 1]);
    let (m, ka) = if ta { (ac, ar) } else { (ar, ac) };
    let (kb, n) = if tb { (bc, br) } else { (br, bc) };
    if ka != kb {
        return Err(Error::invalid(format!(
            "operator {}: shapes {:?} and {:?} do not align for batch_dot",
            call.name,
            &a.shape[..],
            &b.shape[..]
        )));
    }
    let batch: usize = a.shape[..nd - 2].iter().map(|&d| d as usize).product();
    let mut out = a.shape[..nd - 2].to_vec();
    out.extend([m, n]);
    let (m, n, k) = (m as usize, n as usize, ka as usize);
    let dtype = a.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&out, dtype)],
        move |kargs| {
            crate::with_element!(dtype, T => {
                let (x, y) = (kargs.inputs[0].slice::<T>(), kargs.inputs[1].slice::<T>());
                let o = kargs.outputs[0].slice_mut::<T>();
                for i in 0..batch {
                    matmul(m, n, k,
                        Operand { data: &x[i * m * k..(i + 1) * m * k], transposed: ta },
                        Operand { data: &y[i * k * n..(i + 1) * k * n], transposed: tb },
                        &mut o[i * m * n..(i + 1) * m * n], false);
                }
            });
            Ok(())
        },
    ))
}

/// `FullyConnected(data, weight[, bias])`: `data · weightᵀ + bias`, data flattened to 2-D
/// (`flatten=True`) or applied over its last axis.
fn fully_connected(call: &Call<'_>) -> Result<Plan> {
    let p = call.params;
    let hidden = p.required("num_hidden", param::int, "an integer")?;
    let no_bias = p.or("no_bias", param::boolean, "a boolean", false)?;
    let flatten = p.or("flatten", param::boolean, "a boolean", true)?;
    let ins = inputs(call, if no_bias { 2 } else { 3 })?;
    for i in 1..ins.len() {
        same_dtype(call, 0, i)?;
    }
    let (x, w) = (&ins[0], &ins[1]);
    if x.shape.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: data must have at least one dimension",
            call.name
        )));
    }
    let (rows, k, mut out) = if flatten {
        let k: i64 = x.shape[1..].iter().product();
        (x.shape[0], k, vec![x.shape[0]])
    } else {
        let k = x.shape[x.shape.len() - 1];
        (
            x.shape[..x.shape.len() - 1].iter().product(),
            k,
            x.shape[..x.shape.len() - 1].to_vec(),
        )
    };
    out.push(hidden);
    if w.shape[..] != [hidden, k] {
        return Err(Error::invalid(format!(
            "operator {}: weight has shape {:?}, expected {:?}",
            call.name,
            &w.shape[..],
            [hidden, k]
        )));
    }
    if !no_bias && ins[2].shape[..] != [hidden] {
        return Err(Error::invalid(format!(
            "operator {}: bias has shape {:?}, expected [{hidden}]",
            call.name,
            &ins[2].shape[..]
        )));
    }
    let (m, n, k) = (rows as usize, hidden as usize, k as usize);
    let dtype = x.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&out, dtype)],
        move |kargs| {
            crate::with_element!(dtype, T => {
                let o = kargs.outputs[0].slice_mut::<T>();
                let accumulate = !no_bias;
                if !no_bias {
                    let b = kargs.inputs[2].slice::<T>();
                    for r in 0..m {
                        o[r * n..(r + 1) * n].copy_from_slice(b);
                    }
                }
                matmul(m, n, k,
                    Operand { data: kargs.inputs[0].slice::<T>(), transposed: false },
                    Operand { data: kargs.inputs[1].slice::<T>(), transposed: true },
                    o, accumulate);
            });
            Ok(())
        },
    ))
}

pub(crate) fn register(t: &mut Entries) {
    // dot(csr.T, dense) is row_sparse, as in MXNet
    t.push(("dot", &dot))
        .stype(StorageRule::Custom(|p, ins| {
            match stype::param(p, "forward_stype").map(|s| s.trim_matches(|c| c == '\'' || c == '"')) {
                Some("row_sparse") => return StorageType::RowSparse,
                Some("csr") => return StorageType::Csr,
                Some("default") => return StorageType::Default,
                _ => {}
            }
            if ins.first() == Some(&StorageType::Csr)
                && stype::truthy(stype::param(p, "transpose_a"))
                && ins.get(1) == Some(&StorageType::Default)
            {
                StorageType::RowSparse
            } else {
                StorageType::Default
            }
        }))
        .grad(|g| {
            let p = passed(g, &["transpose_a", "transpose_b"]);
            matmul_grads(g, g.x(0), g.x(1), g.dy(0), &as_refs(&p))
        });
    t.push(("batch_dot", &batch_dot))
        .grad(batch_dot_grad)
        .shape_rule(ShapeRule::Rule(batch_dot_shapes));
    t.push(("FullyConnected", &fully_connected))
        .grad(fully_connected_grad)
        .signature(|p| {
            Ok(if param_flag(p, "no_bias", false)? {
                Signature::simple(&["data", "weight"])
            } else {
                Signature::simple(&["data", "weight", "bias"])
            })
        })
        .shape_rule(ShapeRule::Rule(fully_connected_shapes));
    t.def("_mxrt_matmul", &|c: &Call<'_>| matmul_op(c, Role::Product)).grad(|g| {
        let p = g.params.to_vec();
        matmul_grads(g, g.x(0), g.x(1), g.dy(0), &as_refs(&p))
    });
    t.def("_mxrt_matmul_grad_a", &|c: &Call<'_>| matmul_op(c, Role::GradA)).grad(|g| {
        // dA = G_A(dC, B) is bilinear: <go, G_A(dC, B)> = <dC, go·B>
        let p = g.params.to_vec();
        let p = as_refs(&p);
        let (dc, b, go) = (g.x(0), g.x(1), g.dy(0));
        let ddc = if g.needs(0) { Some(g.op("_mxrt_matmul", &[go, b], &p)?) } else { None };
        let db = if g.needs(1) { Some(g.op("_mxrt_matmul_grad_b", &[go, dc, b], &p)?) } else { None };
        Ok(vec![ddc, db, None])
    });
    // dot(csr, B)'s gradient for B, csrᵀ·dC, is row_sparse (rows of B no row of the csr
    // touches get none), as MXNet's dot backward gives it
    t.def("_mxrt_matmul_grad_b", &|c: &Call<'_>| matmul_op(c, Role::GradB))
        .stype(StorageRule::Custom(|p, ins| {
            let transposed = ["transpose_a", "transpose_b"]
                .iter()
                .any(|k| stype::truthy(stype::param(p, k)));
            if ins.first() == Some(&StorageType::Csr) && !transposed {
                StorageType::RowSparse
            } else {
                StorageType::Default
            }
        }))
        .grad(|g| {
        // dB = G_B(A, dC): <go, G_B(A, dC)> = <dC, A·go>
        let p = g.params.to_vec();
        let p = as_refs(&p);
        let (a, dc, go) = (g.x(0), g.x(1), g.dy(0));
        let da = if g.needs(0) { Some(g.op("_mxrt_matmul_grad_a", &[dc, go, a], &p)?) } else { None };
        let ddc = if g.needs(1) { Some(g.op("_mxrt_matmul", &[a, go], &p)?) } else { None };
        Ok(vec![da, ddc, None])
    });
}

/// The gradients of `C = A·B` (`dot`, `_mxrt_matmul` with `p`): `G_A(dC, B)` and `G_B(A, dC)`.
fn matmul_grads(
    g: &mut GradCtx<'_>,
    a: Val,
    b: Val,
    dc: Val,
    p: &[(&str, &str)],
) -> Result<Vec<Option<Val>>> {
    let da = if g.needs(0) { Some(g.op("_mxrt_matmul_grad_a", &[dc, b, a], p)?) } else { None };
    let db = if g.needs(1) { Some(g.op("_mxrt_matmul_grad_b", &[a, dc, b], p)?) } else { None };
    Ok(vec![da, db])
}

/// `batch_dot`'s gradients, batch_dots themselves (so every order is differentiable):
/// with `C = op(A)·op(B)`, `dA = dC·op(B)ᵀ` (or its transpose) and `dB = op(A)ᵀ·dC` (or its
/// transpose).
fn batch_dot_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let (ta, tb) = (g.flag("transpose_a", false), g.flag("transpose_b", false));
    let (a, b, dc) = (g.x(0), g.x(1), g.dy(0));
    let t = |v: bool| if v { "True" } else { "False" };
    // (left, right, transpose_a, transpose_b) for each operand
    let (for_a, for_b) = match (ta, tb) {
        (false, false) => ((dc, b, false, true), (a, dc, true, false)),
        (false, true) => ((dc, b, false, false), (dc, a, true, false)),
        (true, false) => ((b, dc, false, true), (a, dc, false, false)),
        (true, true) => ((b, dc, true, true), (dc, a, true, true)),
    };
    let mut out = Vec::with_capacity(2);
    for (i, (l, r, x, y)) in [for_a, for_b].into_iter().enumerate() {
        out.push(if g.needs(i) {
            Some(g.op("batch_dot", &[l, r], &[("transpose_a", t(x)), ("transpose_b", t(y))])?)
        } else {
            None
        });
    }
    Ok(out)
}

/// FullyConnected's gradients: `y = x₂·Wᵀ + b` is `_mxrt_matmul(x, W)` with x viewed as rows
/// (its first axis with flatten, all but its last without) and W transposed; the bias gets `dy`
/// summed to its shape.
/// FullyConnected in graph inference: the weight is `(num_hidden, inputs per row)` and the bias
/// `(num_hidden,)`, from the data's shape (all of it after the first axis with `flatten`, its
/// last axis without).
fn fully_connected_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let hidden = param_int(p, "num_hidden", 0)?;
    let flatten = param_flag(p, "flatten", true)?;
    let mut out: Vec<PartialShape> = vec![None; ins.len()];
    // nothing is said before the data's rank is known, as in MXNet
    let Some(mut x) = ins.first().cloned().flatten().filter(|x| !x.is_empty()) else {
        return Ok((out, Vec::new()));
    };
    // the output's leading dimensions are the data's (MXNet's FullyConnectedShape): a batch
    // known only downstream, as a `begin_state` of `zeros(shape=(0, H))`, comes back this way
    // (MXNet fills nothing back through a FullyConnected that keeps its leading axes)
    if let Some(Some(y)) = outs.first().filter(|_| flatten) {
        let lead = 1;
        if y.len() == lead + 1 {
            for (d, &v) in x.iter_mut().zip(&y[..lead]) {
                if *d <= 0 && v > 0 {
                    *d = v;
                }
            }
            out[0] = Some(x.clone());
        }
    }
    // the output from the data's known dimensions (MXNet's FullyConnectedShape)
    let y = if flatten {
        vec![x[0], hidden]
    } else {
        let mut y = x.clone();
        *y.last_mut().expect("rank checked") = hidden;
        y
    };
    let k = if flatten {
        if x[1..].iter().all(|&d| d > 0) { x[1..].iter().product() } else { 0 }
    } else {
        x[x.len() - 1]
    };
    if ins.len() > 1 {
        out[1] = Some(vec![hidden, k]);
    }
    if ins.len() > 2 {
        out[2] = Some(vec![hidden]);
    }
    Ok((out, vec![Some(y)]))
}

/// `batch_dot`'s output from inputs whose batch dimensions may be unknown (MXNet's
/// BatchDotShape): once both ranks and the contracted dimensions are known, the output has the
/// lhs's batch dimensions and the two free ones.
fn batch_dot_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    _outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let none = || Ok((vec![None; ins.len()], Vec::new()));
    let (Some(Some(l)), Some(Some(r))) = (ins.first(), ins.get(1)) else {
        return none();
    };
    let n = l.len();
    if n < 3 || r.len() != n {
        return none();
    }
    let ta = param_flag(p, "transpose_a", false)?;
    let tb = param_flag(p, "transpose_b", false)?;
    if l[n - 1] <= 0 || r[n - 2] <= 0 {
        return none();
    }
    let (m, lk) = if ta { (l[n - 1], l[n - 2]) } else { (l[n - 2], l[n - 1]) };
    let (rn, rk) = if tb { (r[n - 2], r[n - 1]) } else { (r[n - 1], r[n - 2]) };
    let batch_ok = l[..n - 2]
        .iter()
        .zip(&r[..n - 2])
        .all(|(&a, &b)| a <= 0 || b <= 0 || a == b);
    if !batch_ok || (lk > 0 && rk > 0 && lk != rk) {
        return Err(Error::invalid(format!(
            "batch_dot shape error: {l:?} X {r:?} trans_a={ta} trans_b={tb}"
        )));
    }
    let mut y = l[..n - 2].to_vec();
    y.extend([m, rn]);
    Ok((vec![None; ins.len()], vec![Some(y)]))
}

fn fully_connected_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let flatten = g.flag("flatten", true);
    let split = if flatten { "first" } else { "last" };
    let p = [("transpose_b", "True"), ("a_split", split), ("b_split", "last")];
    let (x, w, dy) = (g.x(0), g.x(1), g.dy(0));
    let mut out = matmul_grads(g, x, w, dy, &p)?;
    if g.inputs.len() > 2 {
        out.push(if g.needs(2) { Some(g.sum_to(dy, g.x(2))?) } else { None });
    }
    Ok(out)
}

/// Which product a matmul op computes.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// `_mxrt_matmul(A, B)`: `C = op(A')·op(B')`.
    Product,
    /// `_mxrt_matmul_grad_a(dC, B, A)`: the gradient of A, shaped like A.
    GradA,
    /// `_mxrt_matmul_grad_b(A, dC, B)`: the gradient of B, shaped like B.
    GradB,
}

/// How an operand is viewed as a matrix: rows are its first axis (`first`) or all but its last
/// (`last`); returns (rows, cols, the row dims, the col dims).
fn view(shape: &[i64], first: bool) -> (usize, usize, Vec<i64>, Vec<i64>) {
    let at = if first { 1.min(shape.len()) } else { shape.len().saturating_sub(1) };
    let (r, c) = (shape[..at].to_vec(), shape[at..].to_vec());
    let p = |d: &[i64]| d.iter().map(|&v| v.max(0) as usize).product::<usize>();
    (p(&r), p(&c), r, c)
}

/// The matrix products behind `dot` and `FullyConnected` and their gradients. Operands are
/// viewed as matrices A' and B' (`a_split`/`b_split`: `first` or `last`, defaulting to `dot`'s
/// views for its transposes); `C = op(A')·op(B')` has A's kept dims then B's (or `(1,)`).
fn matmul_op(call: &Call<'_>, role: Role) -> Result<Plan> {
    let ins = inputs(call, if role == Role::Product { 2 } else { 3 })?;
    let (ta, tb) = transposes(call)?;
    let p = call.params;
    let split = |key: &str, default: bool| -> Result<bool> {
        Ok(match p.optional(key, param::choice, "first or last")?.as_deref() {
            None => default,
            Some("first") => true,
            Some("last") => false,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "operator {}: {key} must be first or last, got '{other}'",
                    call.name
                )));
            }
        })
    };
    let (a_first, b_first) = (split("a_split", ta)?, split("b_split", !tb)?);
    // the operands A and B whatever the role: (A, B, the other input)
    let (a, b, other) = match role {
        Role::Product => (&ins[0], &ins[1], None),
        Role::GradA => (&ins[2], &ins[1], Some(&ins[0])),
        Role::GradB => (&ins[0], &ins[2], Some(&ins[1])),
    };
    for i in 1..ins.len() {
        same_dtype(call, 0, i)?;
    }
    if a.shape.is_empty() || b.shape.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: operands must have at least one dimension",
            call.name
        )));
    }
    let (ar, ac, ard, acd) = view(&a.shape, a_first);
    let (br, bc, brd, bcd) = view(&b.shape, b_first);
    let (m, ka, mut kept) = if ta { (ac, ar, acd) } else { (ar, ac, ard) };
    let (kb, n, kept_b) = if tb { (bc, br, brd) } else { (br, bc, bcd) };
    if ka != kb {
        return Err(Error::invalid(format!(
            "operator {}: shapes {:?} and {:?} do not align (transpose_a={ta}, transpose_b={tb})",
            call.name,
            &a.shape[..],
            &b.shape[..]
        )));
    }
    let k = ka;
    kept.extend(kept_b);
    if kept.is_empty() {
        kept.push(1);
    }
    if let Some(dc) = other
        && dc.size() != m * n
    {
        return Err(Error::invalid(format!(
            "operator {}: the gradient has shape {:?}, the product {:?}",
            call.name,
            &dc.shape[..],
            kept
        )));
    }
    let out = match role {
        Role::Product => TensorDesc::new(&kept, a.dtype),
        Role::GradA => a.clone(),
        Role::GradB => b.clone(),
    };
    let dtype = a.dtype;
    Ok(Plan::new(vec![out], move |kargs| {
        crate::with_element!(dtype, T => {
            let i = kargs.inputs;
            let o = kargs.outputs[0].slice_mut::<T>();
            let op = |data, transposed| Operand { data, transposed };
            match role {
                Role::Product => matmul(m, n, k, op(i[0].slice::<T>(), ta), op(i[1].slice::<T>(), tb), o, false),
                Role::GradA => {
                    let (dc, b) = (i[0].slice::<T>(), i[1].slice::<T>());
                    if ta {
                        // dA' (k×m) = op(B') (k×n) · dC'ᵀ (n×m)
                        matmul(k, m, n, op(b, tb), op(dc, true), o, false)
                    } else {
                        // dA' (m×k) = dC' (m×n) · op(B')ᵀ (n×k)
                        matmul(m, k, n, op(dc, false), op(b, !tb), o, false)
                    }
                }
                Role::GradB => {
                    let (a, dc) = (i[0].slice::<T>(), i[1].slice::<T>());
                    if tb {
                        // dB' (n×k) = dC'ᵀ (n×m) · op(A') (m×k)
                        matmul(n, k, m, op(dc, true), op(a, ta), o, false)
                    } else {
                        // dB' (k×n) = op(A')ᵀ (k×m) · dC' (m×n)
                        matmul(k, n, m, op(a, !ta), op(dc, false), o, false)
                    }
                }
            }
        });
        Ok(())
    }))
}
