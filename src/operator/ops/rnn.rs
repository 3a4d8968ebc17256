//! `RNN`: MXNet's fused recurrent layers (`rnn_relu`, `rnn_tanh`, `lstm`, `gru`; stacked,
//! bidirectional) on the kernels of [`crate::operator::kernel::rnn`], and
//! `_rnn_param_concat` (registered with `Concat`, in `shape.rs`).
//!
//! The forward has one hidden output besides MXNet's (`output`, and with `state_outputs` the
//! final `state_output` and LSTM `statecell_output`): the reserve of intermediate values the
//! backward through time needs. The gradient is one internal op,
//! `_mxrt_rnn_grad(data, parameters, state, [state_cell], reserve, d_output, [d_state_output,
//! [d_statecell_output]])` with the forward's parameters, giving the gradients of the data, the
//! parameters, the initial state and the initial cell. Like MXNet's own backward it has no
//! gradient itself.
//!
//! As on MXNet's CPU kernels: `use_sequence_length` is refused (MXNet needs cuDNN for it);
//! the LSTM state clipping parameters are ignored for float32 (as MXNet's oneDNN kernel ignores
//! them) and refused for float64. `projection_size` (LSTMP) trains here too, where MXNet's CPU
//! kernels refuse it (its forward equals MXNet's; its gradients are those of the LSTMP's
//! definition, checked against an unrolled network of basic ops); dropout between the layers of
//! an LSTMP in training mode is refused. Dropout between layers
//! (`p > 0`, training mode) drops each element of every layer's output but the last's with
//! probability `p` and scales the rest by `1 / (1 - p)`, as MXNet's native CPU kernel; the
//! factors follow the kernel's reserve in the hidden output, so the backward reuses them.

use super::nn::as_refs;
use super::{Entries, dims};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{GradCtx, ParamList, PartialShape, ShapeRule, Signature, Val};
use crate::operator::kernel::rnn::{
    Cell, RnnGeom, RnnGrads, backward, forward, lstmp_backward, lstmp_forward, lstmp_param_size,
    lstmp_reserve_size,
};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;
use crate::resource::ResourceRequest;

/// The parameters of an `RNN` node.
#[derive(Clone, Copy, Debug)]
struct RnnParams {
    cell: Cell,
    layers: usize,
    dirs: usize,
    hidden: usize,
    state_outputs: bool,
    p: f64,
    /// LSTM state clipping was asked for: MXNet's float32 CPU kernel (oneDNN) ignores it, its
    /// float64 one refuses it.
    clip: bool,
    /// LSTMP's projection size (`projection_size`).
    proj: Option<usize>,
}

impl RnnParams {
    fn lstm(&self) -> bool {
        self.cell == Cell::Lstm
    }
    /// Array inputs of the forward.
    fn num_inputs(&self) -> usize {
        if self.lstm() { 4 } else { 3 }
    }
    /// Visible outputs of the forward.
    fn num_outputs(&self) -> usize {
        match (self.state_outputs, self.lstm()) {
            (false, _) => 1,
            (true, false) => 2,
            (true, true) => 3,
        }
    }
    fn geom(&self, x: &[i64]) -> RnnGeom {
        let x = dims(x);
        RnnGeom {
            cell: self.cell,
            layers: self.layers,
            dirs: self.dirs,
            seq: x[0],
            batch: x[1],
            input: x[2],
            hidden: self.hidden,
        }
    }
    /// Dropout factors kept after the kernel's reserve: one per element of every layer's output
    /// but the last's, when `p > 0` (ones in predict mode).
    fn drop_len(&self, g: &RnnGeom) -> usize {
        if self.p > 0.0 && self.layers > 1 && self.proj.is_none() {
            (self.layers - 1) * g.seq * g.batch * self.dirs * self.hidden
        } else {
            0
        }
    }
    /// The hidden reserve output's length: the kernel's reserve, then the dropout factors
    /// (none for LSTMP).
    fn reserve_len(&self, g: &RnnGeom) -> usize {
        if let Some(proj) = self.proj {
            return lstmp_reserve_size(g, proj);
        }
        g.reserve_size() + self.drop_len(g)
    }
    /// The flat parameters' length.
    fn param_size(&self, g: &RnnGeom) -> usize {
        match self.proj {
            Some(pr) => lstmp_param_size(g, pr),
            None => g.param_size(),
        }
    }
    /// Width of the recurrent state and of each direction's output (`projection_size` for
    /// LSTMP, else `state_size`).
    fn out_width(&self) -> usize {
        self.proj.unwrap_or(self.hidden)
    }
    /// `state`'s shape for data of shape `x`.
    fn state_shape(&self, x: &[i64]) -> Vec<i64> {
        vec![
            (self.layers * self.dirs) as i64,
            x[1],
            self.out_width() as i64,
        ]
    }
    /// `state_cell`'s shape for data of shape `x`.
    fn cell_shape(&self, x: &[i64]) -> Vec<i64> {
        vec![(self.layers * self.dirs) as i64, x[1], self.hidden as i64]
    }
    /// `output`'s shape for data of shape `x`.
    fn output_shape(&self, x: &[i64]) -> Vec<i64> {
        vec![x[0], x[1], (self.dirs * self.out_width()) as i64]
    }
}

/// Parses the parameters through `get` (a raw value by key, quotes kept; `None` when absent).
fn parse(op: &str, get: &dyn Fn(&str) -> Option<String>) -> Result<RnnParams> {
    let bad = |msg: String| Error::invalid(format!("operator {op}: {msg}"));
    let value = |key: &str| {
        get(key)
            .map(|v| v.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
            .filter(|v| v != "None")
    };
    let int = |key: &str, min: i64| -> Result<usize> {
        let v = value(key)
            .ok_or_else(|| bad(format!("Required parameter {key} of int is not presented")))?;
        match param::int(&v) {
            Some(i) if i >= min => Ok(i as usize),
            _ => Err(bad(format!(
                "parameter '{key}' must be an integer of at least {min}, got '{v}'"
            ))),
        }
    };
    let boolean = |key: &str| -> Result<bool> {
        match value(key) {
            None => Ok(false),
            Some(v) => param::boolean(&v)
                .ok_or_else(|| bad(format!("parameter '{key}' must be a boolean, got '{v}'"))),
        }
    };
    let mode = value("mode").ok_or_else(|| {
        bad(
            "Required parameter mode of {'gru', 'lstm', 'rnn_relu', 'rnn_tanh'} is not presented"
                .into(),
        )
    })?;
    let cell = match mode.as_str() {
        "rnn_relu" => Cell::Relu,
        "rnn_tanh" => Cell::Tanh,
        "lstm" => Cell::Lstm,
        "gru" => Cell::Gru,
        _ => {
            return Err(bad(format!(
                "Invalid Input: '{mode}', valid values are: {{'gru', 'lstm', 'rnn_relu', 'rnn_tanh'}}"
            )));
        }
    };
    let hidden = int("state_size", 1)?;
    let layers = int("num_layers", 1)?;
    let p = match value("p") {
        None => 0.0,
        Some(v) => match param::float(&v) {
            Some(f) if (0.0..=1.0).contains(&f) => f,
            _ => {
                return Err(bad(format!(
                    "parameter 'p' must be a number in [0, 1], got '{v}'"
                )));
            }
        },
    };
    let proj = match value("projection_size") {
        None => None,
        Some(_) => Some(int("projection_size", 1)?),
    };
    let mut clip = false;
    for key in ["lstm_state_clip_min", "lstm_state_clip_max"] {
        if let Some(v) = value(key) {
            param::float(&v)
                .ok_or_else(|| bad(format!("parameter '{key}' must be a number, got '{v}'")))?;
            clip = true;
        }
    }
    boolean("lstm_state_clip_nan")?;
    if boolean("use_sequence_length")? {
        return Err(bad(
            "RNN use_sequence_length option is only available for cuDNN at the moment. Not supported on CPU".into(),
        ));
    }
    Ok(RnnParams {
        cell,
        layers,
        dirs: if boolean("bidirectional")? { 2 } else { 1 },
        hidden,
        state_outputs: boolean("state_outputs")?,
        p,
        clip,
        proj,
    })
}

fn parse_call(call: &Call<'_>) -> Result<RnnParams> {
    let params = call.params;
    parse(call.name, &|k| params.raw(k).map(str::to_string))
}

fn parse_list(p: &ParamList) -> Result<RnnParams> {
    parse("RNN", &|k| {
        p.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.to_string())
    })
}

fn check_dtype(call: &Call<'_>, ins: &[TensorDesc]) -> Result<DType> {
    let dtype = ins[0].dtype;
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(Error::invalid(format!(
            "operator {}: mxrt's RNN takes float32 and float64 data, not {}",
            call.name,
            dtype.name()
        )));
    }
    for (i, t) in ins.iter().enumerate() {
        if t.dtype != dtype {
            return Err(Error::invalid(format!(
                "operator {}: input {i} is {} but data is {} (one dtype for all inputs)",
                call.name,
                t.dtype.name(),
                dtype.name()
            )));
        }
    }
    Ok(dtype)
}

fn expect_shape(call: &Call<'_>, name: &str, got: &[i64], want: &[i64]) -> Result<()> {
    if got != want {
        return Err(Error::invalid(format!(
            "operator {}: Shape inconsistent, Provided = {got:?}, inferred shape={want:?} ({name})",
            call.name
        )));
    }
    Ok(())
}

/// Checks the data's, parameters' and states' shapes; the geometry.
fn check_shapes(call: &Call<'_>, p: &RnnParams, ins: &[TensorDesc]) -> Result<RnnGeom> {
    let x = &ins[0].shape;
    if x.len() != 3 {
        return Err(Error::invalid(format!(
            "operator {}: Input data should be rank-3 tensor of dim [sequence length, batch size, input size] (data has shape {:?})",
            call.name,
            &x[..]
        )));
    }
    let g = p.geom(x);
    expect_shape(
        call,
        "parameters",
        &ins[1].shape,
        &[p.param_size(&g) as i64],
    )?;
    expect_shape(call, "state", &ins[2].shape, &p.state_shape(x))?;
    if p.lstm() {
        expect_shape(call, "state_cell", &ins[3].shape, &p.cell_shape(x))?;
    }
    Ok(g)
}

fn rnn_forward(call: &Call<'_>) -> Result<Plan> {
    let p = parse_call(call)?;
    if call.inputs.len() != p.num_inputs() {
        return Err(Error::invalid(format!(
            "operator {}: Input shape mismatch. Expected {} input parameters but got {}.",
            call.name,
            p.num_inputs(),
            call.inputs.len()
        )));
    }
    // MXNet's native kernel checks this where it drops (its oneDNN kernel never drops)
    if p.p >= 1.0 && call.training && p.layers > 1 {
        return Err(Error::invalid(format!(
            "operator {}: unsupported dropout value, should be 0 <= dropout < 1",
            call.name
        )));
    }
    let ins = call.inputs;
    let dtype = check_dtype(call, ins)?;
    let g = check_shapes(call, &p, ins)?;
    if p.clip && dtype == DType::F64 {
        return Err(Error::invalid(format!(
            "operator {}: LSTM state clipping is only supported for GPU with CuDNN later than 7.2.1",
            call.name
        )));
    }
    let x = &ins[0].shape;
    let mut outs = vec![TensorDesc::new(&p.output_shape(x), dtype)];
    if p.state_outputs {
        outs.push(TensorDesc::new(&p.state_shape(x), dtype));
        if p.lstm() {
            outs.push(TensorDesc::new(&p.cell_shape(x), dtype));
        }
    }
    let visible = outs.len();
    if let Some(proj) = p.proj {
        return lstmp_plan(call, &p, g, proj, outs, dtype);
    }
    outs.push(TensorDesc::new(&[p.reserve_len(&g) as i64], dtype));
    let lstm = p.lstm();
    let (drop_len, keep) = (p.drop_len(&g), 1.0 - p.p);
    let drop = drop_len > 0 && call.training;
    let plan = Plan::new(outs, move |k| {
        let n = k.outputs.len();
        let (vis, rest) = k.outputs.split_at_mut(n - 1);
        let (y, states) = vis.split_at_mut(1);
        // MXNet's CPU kernel: a unit is dropped with probability p, kept ones scaled by 1/(1-p)
        let factors: Vec<f64> = if drop {
            let res = k
                .resource
                .ok_or_else(|| Error::invalid("RNN dropout without its generator"))?;
            let mut rng = res.random()?;
            (0..drop_len)
                .map(|_| {
                    if rng.next_unit() < keep {
                        1.0 / keep
                    } else {
                        0.0
                    }
                })
                .collect()
        } else {
            vec![1.0; drop_len]
        };
        with_real!(dtype, T => {
            let (rs, mask) = rest[0].slice_mut::<T>().split_at_mut(g.reserve_size());
            for (m, &f) in mask.iter_mut().zip(&factors) {
                *m = f as T;
            }
            let mask: &[T] = mask;
            let mut st = states.iter_mut();
            let hy = st.next().map(|t| t.slice_mut::<T>());
            let cy = st.next().map(|t| t.slice_mut::<T>());
            let cx = if lstm { Some(k.inputs[3].slice::<T>()) } else { None };
            forward::<T>(
                &g,
                k.inputs[0].slice::<T>(),
                k.inputs[1].slice::<T>(),
                k.inputs[2].slice::<T>(),
                cx,
                y[0].slice_mut::<T>(),
                hy,
                cy,
                rs,
                (drop_len > 0).then_some(mask),
            );
        });
        Ok(())
    })
    .with_visible(visible);
    Ok(if drop {
        plan.with_resource(ResourceRequest::Random)
    } else {
        plan
    })
}

/// LSTMP (MXNet's CPU kernels have no training for it; here it trains, without dropout).
fn lstmp_plan(
    call: &Call<'_>,
    p: &RnnParams,
    g: RnnGeom,
    proj: usize,
    mut outs: Vec<TensorDesc>,
    dtype: DType,
) -> Result<Plan> {
    if !p.lstm() {
        return Err(Error::invalid(format!(
            "operator {}: Projection is only supported for LSTM.",
            call.name
        )));
    }
    if proj > p.hidden {
        return Err(Error::invalid(format!(
            "operator {}: State size must be larger than projection size.",
            call.name
        )));
    }
    if call.training && p.p > 0.0 && p.layers > 1 {
        return Err(Error::invalid(format!(
            "operator {}: mxrt has no dropout between the layers of an LSTM with projection (p = {})",
            call.name, p.p
        )));
    }
    let visible = outs.len();
    outs.push(TensorDesc::new(&[p.reserve_len(&g) as i64], dtype));
    Ok(Plan::new(outs, move |k| {
        let n = k.outputs.len();
        let (vis, rest) = k.outputs.split_at_mut(n - 1);
        let (y, states) = vis.split_at_mut(1);
        let i = k.inputs;
        with_real!(dtype, T => {
            let mut st = states.iter_mut();
            let hy = st.next().map(|t| t.slice_mut::<T>());
            let cy = st.next().map(|t| t.slice_mut::<T>());
            lstmp_forward::<T>(
                &g,
                proj,
                i[0].slice::<T>(),
                i[1].slice::<T>(),
                i[2].slice::<T>(),
                i[3].slice::<T>(),
                y[0].slice_mut::<T>(),
                hy,
                cy,
                Some(rest[0].slice_mut::<T>()),
            );
        });
        Ok(())
    })
    .with_visible(visible))
}

/// `_mxrt_rnn_grad(data, parameters, state, [state_cell], reserve, d_output, [d_state_output,
/// [d_statecell_output]])`: the gradients of the data, parameters, state and state cell.
fn rnn_backward(call: &Call<'_>) -> Result<Plan> {
    let p = parse_call(call)?;
    let nf = p.num_inputs();
    let want = nf + 1 + p.num_outputs();
    if call.inputs.len() != want {
        return Err(Error::invalid(format!(
            "operator {} takes {want} inputs, {} given",
            call.name,
            call.inputs.len()
        )));
    }
    let ins = call.inputs;
    let dtype = check_dtype(call, ins)?;
    let g = check_shapes(call, &p, &ins[..nf])?;
    expect_shape(call, "reserve", &ins[nf].shape, &[p.reserve_len(&g) as i64])?;
    let drop_len = p.drop_len(&g);
    let x = &ins[0].shape;
    expect_shape(
        call,
        "output gradient",
        &ins[nf + 1].shape,
        &p.output_shape(x),
    )?;
    for i in nf + 2..want {
        let want_shape = if i == nf + 3 {
            p.cell_shape(x)
        } else {
            p.state_shape(x)
        };
        expect_shape(call, "state gradient", &ins[i].shape, &want_shape)?;
    }
    let outs: Vec<TensorDesc> = ins[..nf].to_vec();
    let (lstm, so, proj) = (p.lstm(), p.state_outputs, p.proj);
    Ok(Plan::new(outs, move |k| {
        let i = k.inputs;
        with_real!(dtype, T => {
            let (dx, rest) = k.outputs.split_at_mut(1);
            let (dw, rest) = rest.split_at_mut(1);
            let (dhx, rest) = rest.split_at_mut(1);
            let cx = if lstm { Some(i[3].slice::<T>()) } else { None };
            let dhy = if so { Some(i[nf + 2].slice::<T>()) } else { None };
            let dcy = if so && lstm { Some(i[nf + 3].slice::<T>()) } else { None };
            if let Some(proj) = proj {
                lstmp_backward::<T>(
                    &g,
                    proj,
                    i[0].slice::<T>(),
                    i[1].slice::<T>(),
                    i[2].slice::<T>(),
                    i[3].slice::<T>(),
                    i[nf].slice::<T>(),
                    i[nf + 1].slice::<T>(),
                    dhy,
                    dcy,
                    RnnGrads {
                        dx: dx[0].slice_mut::<T>(),
                        dw: dw[0].slice_mut::<T>(),
                        dhx: dhx[0].slice_mut::<T>(),
                        dcx: rest.first_mut().map(|t| t.slice_mut::<T>()),
                    },
                );
                return Ok(());
            }
            let (rs, mask) = i[nf].slice::<T>().split_at(g.reserve_size());
            backward::<T>(
                &g,
                i[0].slice::<T>(),
                i[1].slice::<T>(),
                i[2].slice::<T>(),
                cx,
                rs,
                i[nf + 1].slice::<T>(),
                dhy,
                dcy,
                RnnGrads {
                    dx: dx[0].slice_mut::<T>(),
                    dw: dw[0].slice_mut::<T>(),
                    dhx: dhx[0].slice_mut::<T>(),
                    dcx: rest.first_mut().map(|t| t.slice_mut::<T>()),
                },
                (drop_len > 0).then_some(mask),
            );
        });
        Ok(())
    }))
}

fn rnn_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let p = parse_list(g.params)?;
    let params = g.params.to_vec();
    let nf = p.num_inputs();
    let mut ins: Vec<Val> = g.inputs[..nf].to_vec();
    // the reserve is the hidden output after the visible ones
    ins.push(g.y(p.num_outputs()));
    for i in 0..p.num_outputs() {
        ins.push(g.dy(i));
    }
    let grads = g.ops("_mxrt_rnn_grad", &ins, &as_refs(&params))?;
    Ok(grads.into_iter().map(Some).collect())
}

fn signature(p: &ParamList) -> Result<Signature> {
    let rp = parse_list(p)?;
    let mut ins = vec!["data", "parameters", "state"];
    if rp.lstm() {
        ins.push("state_cell");
    }
    let mut outs = vec!["output"];
    if rp.state_outputs {
        outs.push("state_output");
        if rp.lstm() {
            outs.push("statecell_output");
        }
    }
    let visible = outs.len();
    outs.push("reserve");
    Ok(Signature::simple(&ins).named_outputs(&outs, visible))
}

/// The parameters' and states' shapes from the data's, and the outputs'.
fn shapes(p: &ParamList, ins: &[PartialShape]) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let rp = parse_list(p)?;
    let mut for_ins: Vec<PartialShape> = vec![None; ins.len()];
    // the data's rank known, its unknown dimensions (0) stay unknown in what follows from them
    let Some(x) = ins
        .first()
        .cloned()
        .flatten()
        .filter(|x| x.len() == 3 && x.iter().all(|&d| d >= 0))
    else {
        return Ok((for_ins, Vec::new()));
    };
    let complete = x.iter().all(|&d| d > 0);
    let g = rp.geom(&[x[0].max(1), x[1].max(1), x[2]]);
    let (state, cell) = (rp.state_shape(&x), rp.cell_shape(&x));
    if ins.len() > 1 && x[2] > 0 {
        for_ins[1] = Some(vec![rp.param_size(&g) as i64]);
    }
    if ins.len() > 2 {
        for_ins[2] = Some(state.clone());
    }
    if ins.len() > 3 {
        for_ins[3] = Some(cell.clone());
    }
    let mut outs = vec![Some(rp.output_shape(&x))];
    if rp.num_outputs() > 1 {
        outs.push(Some(state));
    }
    if rp.num_outputs() > 2 {
        outs.push(Some(cell));
    }
    outs.push(complete.then(|| vec![rp.reserve_len(&g) as i64]));
    Ok((for_ins, outs))
}

pub(crate) fn register(t: &mut Entries) {
    t.def("RNN", &rnn_forward)
        .grad(rnn_grad)
        .signature(signature)
        .shape_rule(ShapeRule::Rule(|p, ins, _| shapes(p, ins)));
    t.def("_mxrt_rnn_grad", &rnn_backward);
}
