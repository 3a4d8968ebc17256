//! Sliding-window rearrangements: `im2col` / `col2im` (each the other's gradient) and
//! `_contrib_AdaptiveAvgPooling2D` (average pooling to a given output size).

use super::conv::float_dtype;
use super::misc::{read, write};
use super::{Entries, inputs};
use crate::error::{Error, Result};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;

/// `kernel`, `stride`, `dilate`, `pad` as MXNet's `SlidingParser` reads them.
#[derive(Clone)]
struct Window {
    kernel: Vec<usize>,
    stride: Vec<usize>,
    dilate: Vec<usize>,
    pad: Vec<usize>,
}

fn window(call: &Call<'_>) -> Result<Window> {
    let p = call.params;
    let kernel = p.required("kernel", param::shape, "a shape")?;
    let nd = kernel.len();
    if !(1..=3).contains(&nd) {
        return Err(Error::invalid(format!(
            "operator {}: {nd}D convolution not supported",
            call.name
        )));
    }
    let get = |key: &str, default: i64, what: &str| -> Result<Vec<i64>> {
        let v = p.or(key, param::shape, "a shape", Vec::new())?;
        let v = if v.is_empty() { vec![default; nd] } else { v };
        if v.len() != nd {
            return Err(Error::invalid(format!(
                "operator {}: {what} must have the same number of dimensions with kernel_size,\
                 but kernel_size is set to {kernel:?} while {key} is {v:?}",
                call.name
            )));
        }
        Ok(v)
    };
    let stride = get("stride", 1, "Stride")?;
    let dilate = get("dilate", 1, "Dilate")?;
    let pad = get("pad", 0, "Padding")?;
    for (name, v) in [
        ("kernel", &kernel),
        ("stride", &stride),
        ("dilate", &dilate),
    ] {
        if v.iter().any(|&d| d <= 0) {
            return Err(Error::invalid(format!(
                "operator {}: incorrect {name} size: {v:?}",
                call.name
            )));
        }
    }
    if pad.iter().any(|&d| d < 0) {
        return Err(Error::invalid(format!(
            "operator {}: negative pad {pad:?}",
            call.name
        )));
    }
    let u = |v: Vec<i64>| v.into_iter().map(|d| d as usize).collect();
    Ok(Window {
        kernel: u(kernel),
        stride: u(stride),
        dilate: u(dilate),
        pad: u(pad),
    })
}

impl Window {
    /// The positions along each spatial axis for an image of `spatial` size.
    fn positions(&self, call: &Call<'_>, spatial: &[usize], what: &str) -> Result<Vec<usize>> {
        (0..self.kernel.len())
            .map(|i| {
                let padded = spatial[i] + 2 * self.pad[i];
                let ext = 1 + (self.kernel[i] - 1) * self.dilate[i];
                if ext > padded {
                    return Err(Error::invalid(format!(
                        "operator {}: kernel size exceed {what}",
                        call.name
                    )));
                }
                Ok((padded - ext) / self.stride[i] + 1)
            })
            .collect()
    }

    /// For one channel: calls `f(col_index, image_index)` for every column entry that reads the
    /// image (padding skipped), `col_index` within the channel's `K * L` block.
    fn each(&self, spatial: &[usize], pos: &[usize], mut f: impl FnMut(usize, usize)) {
        let nd = self.kernel.len();
        let kk: usize = self.kernel.iter().product();
        let l: usize = pos.iter().product();
        let mut koff = vec![0usize; nd];
        let mut o = vec![0usize; nd];
        for ki in 0..kk {
            let mut r = ki;
            for d in (0..nd).rev() {
                koff[d] = r % self.kernel[d];
                r /= self.kernel[d];
            }
            for li in 0..l {
                let mut r = li;
                for d in (0..nd).rev() {
                    o[d] = r % pos[d];
                    r /= pos[d];
                }
                let mut at = 0usize;
                let mut inside = true;
                for d in 0..nd {
                    let p = (o[d] * self.stride[d] + koff[d] * self.dilate[d]) as i64
                        - self.pad[d] as i64;
                    if p < 0 || p >= spatial[d] as i64 {
                        inside = false;
                        break;
                    }
                    at = at * spatial[d] + p as usize;
                }
                if inside {
                    f(ki * l + li, at);
                }
            }
        }
    }
}

/// The image layout an im2col/col2im call works on: batch, channels, spatial size, positions.
struct Layout {
    n: usize,
    c: usize,
    spatial: Vec<usize>,
    pos: Vec<usize>,
}

impl Layout {
    fn image(&self) -> usize {
        self.spatial.iter().product()
    }
    fn cols(&self, w: &Window) -> usize {
        w.kernel.iter().product::<usize>() * self.pos.iter().product::<usize>()
    }
}

/// Image to columns (`col` written) or columns back to the image (`im` summed).
fn transfer(w: &Window, lay: &Layout, im: &mut [f64], col: &mut [f64], to_col: bool) {
    let (isz, csz) = (lay.image(), lay.cols(w));
    for b in 0..lay.n * lay.c {
        let (ib, cb) = (b * isz, b * csz);
        w.each(&lay.spatial, &lay.pos, |ci, ii| {
            if to_col {
                col[cb + ci] = im[ib + ii];
            } else {
                im[ib + ii] += col[cb + ci];
            }
        });
    }
}

fn image_layout(call: &Call<'_>, w: &Window, shape: &[i64]) -> Result<Layout> {
    let nd = w.kernel.len();
    if shape.len() != nd + 2 {
        return Err(Error::invalid(format!(
            "operator {}: the image must have {} dimensions (batch, channel and {nd} spatial) \
             for a {nd}-D kernel, got shape {shape:?}",
            call.name,
            nd + 2
        )));
    }
    let spatial: Vec<usize> = shape[2..].iter().map(|&d| d.max(0) as usize).collect();
    let pos = w.positions(call, &spatial, "input")?;
    Ok(Layout {
        n: shape[0].max(0) as usize,
        c: shape[1].max(0) as usize,
        spatial,
        pos,
    })
}

fn im2col_plan(call: &Call<'_>, w: Window, lay: Layout, dtype: crate::dtype::DType) -> Plan {
    let kk: usize = w.kernel.iter().product();
    let l: usize = lay.pos.iter().product();
    let out = [lay.n as i64, (lay.c * kk) as i64, l as i64];
    let _ = call;
    Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        let mut im = read(&k.inputs[0]);
        let mut col = vec![0f64; k.outputs[0].len()];
        transfer(&w, &lay, &mut im, &mut col, true);
        write(&mut k.outputs[0], &col);
        Ok(())
    })
}

/// `im2col(data; kernel, stride, dilate, pad)`: `(N, C, *spatial)` to
/// `(N, C * prod(kernel), positions)`.
fn im2col(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    float_dtype(call, x.dtype)?;
    let w = window(call)?;
    let lay = image_layout(call, &w, &x.shape)?;
    Ok(im2col_plan(call, w, lay, x.dtype))
}

/// Columns `(N, C*K, L)` summed back into images of `spatial` size.
fn col2im_plan(call: &Call<'_>, w: Window, col: &TensorDesc, spatial: &[i64]) -> Result<Plan> {
    let sp: Vec<usize> = spatial.iter().map(|&d| d.max(0) as usize).collect();
    let pos = w.positions(call, &sp, "output size")?;
    let kk: usize = w.kernel.iter().product();
    let l: usize = pos.iter().product();
    if col.shape.len() != 3 {
        return Err(Error::invalid(format!(
            "operator {}: the columns must be 3-dimensional (batch, channel * kernel, \
             positions), got {:?}",
            call.name,
            &col.shape[..]
        )));
    }
    if col.shape[2] as usize != l {
        return Err(Error::invalid(format!(
            "operator {}: output size does not match convolution parameters",
            call.name
        )));
    }
    if col.shape[1] as usize % kk != 0 {
        return Err(Error::invalid(format!(
            "operator {}: the second dim of input shape should be multiples of kernel size",
            call.name
        )));
    }
    let lay = Layout {
        n: col.shape[0].max(0) as usize,
        c: col.shape[1] as usize / kk,
        spatial: sp,
        pos,
    };
    let mut out = vec![lay.n as i64, lay.c as i64];
    out.extend_from_slice(spatial);
    Ok(Plan::new(
        vec![TensorDesc::new(&out, col.dtype)],
        move |k| {
            let mut col = read(&k.inputs[0]);
            let mut im = vec![0f64; k.outputs[0].len()];
            transfer(&w, &lay, &mut im, &mut col, false);
            write(&mut k.outputs[0], &im);
            Ok(())
        },
    ))
}

/// `col2im(data; output_size, kernel, stride, dilate, pad)`: sums columns back into images.
fn col2im(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    float_dtype(call, x.dtype)?;
    let size = call
        .params
        .required("output_size", param::shape, "a shape")?;
    let w = window(call)?;
    if size.len() != w.kernel.len() {
        return Err(Error::invalid(format!(
            "operator {}: Output size must have the same number of dimensions with \
             kernel_size,but kernel_size is set to {:?} while output size is {size:?}",
            call.name, w.kernel
        )));
    }
    if size.iter().any(|&d| d <= 0) {
        return Err(Error::invalid(format!(
            "operator {}: incorrect output size: {size:?}",
            call.name
        )));
    }
    col2im_plan(call, w, &x, &size)
}

/// `_mxrt_im2col_grad(dy, data)`: col2im of `dy` into `data`'s shape.
fn im2col_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let w = window(call)?;
    let x = &ins[1];
    if x.shape.len() != w.kernel.len() + 2 {
        return Err(Error::invalid(format!(
            "operator {}: bad data shape",
            call.name
        )));
    }
    let plan = col2im_plan(call, w, &ins[0], &x.shape[2..])?;
    if plan.outputs[0].shape != x.shape {
        return Err(Error::invalid(format!(
            "operator {}: gradient of shape {:?} for data of shape {:?}",
            call.name,
            &ins[0].shape[..],
            &x.shape[..]
        )));
    }
    Ok(plan)
}

// ---------------------------------------------------------------------------------------------
// AdaptiveAvgPooling2D

/// The output's height and width from `output_size` (none: 1x1; one: square).
fn adaptive_size(call: &Call<'_>) -> Result<(usize, usize)> {
    let s = call
        .params
        .or("output_size", param::shape, "a shape", Vec::new())?;
    if s.iter().any(|&d| d <= 0) {
        return Err(Error::invalid(format!(
            "operator {}: output_size must be positive, got {s:?}",
            call.name
        )));
    }
    Ok(match s.len() {
        1 => (s[0] as usize, s[0] as usize),
        2 => (s[0] as usize, s[1] as usize),
        _ => (1, 1),
    })
}

/// MXNet's window of output cell `a` of `b` over `c` input cells (computed in float32).
fn cell(a: usize, b: usize, c: usize) -> (usize, usize) {
    let start = ((a * c) as f32 / b as f32).floor() as usize;
    let end = (((a + 1) * c) as f32 / b as f32).ceil() as usize;
    (start, end.min(c))
}

fn adaptive_check(call: &Call<'_>, x: &TensorDesc) -> Result<()> {
    float_dtype(call, x.dtype)?;
    if x.shape.len() != 4 {
        return Err(Error::invalid(format!(
            "operator {}: data must be 4-dimensional (N, C, H, W), got {:?}",
            call.name,
            &x.shape[..]
        )));
    }
    Ok(())
}

/// Calls `f(out_index, in_index, count)` for every input cell of every output cell.
fn adaptive_each(shape: &[i64], oh: usize, ow: usize, mut f: impl FnMut(usize, usize, usize)) {
    let (planes, ih, iw) = (
        (shape[0] * shape[1]).max(0) as usize,
        shape[2] as usize,
        shape[3] as usize,
    );
    for p in 0..planes {
        for y in 0..oh {
            let (h0, h1) = cell(y, oh, ih);
            for x in 0..ow {
                let (w0, w1) = cell(x, ow, iw);
                let count = (h1 - h0) * (w1 - w0);
                let o = (p * oh + y) * ow + x;
                for i in h0..h1 {
                    for j in w0..w1 {
                        f(o, (p * ih + i) * iw + j, count);
                    }
                }
            }
        }
    }
}

/// `_contrib_AdaptiveAvgPooling2D(data; output_size)`.
fn adaptive_pool(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    adaptive_check(call, &x)?;
    let (oh, ow) = adaptive_size(call)?;
    let shape = x.shape.to_vec();
    let out = [shape[0], shape[1], oh as i64, ow as i64];
    Ok(Plan::new(vec![TensorDesc::new(&out, x.dtype)], move |k| {
        let v = read(&k.inputs[0]);
        let mut o = vec![0f64; k.outputs[0].len()];
        adaptive_each(&shape, oh, ow, |oi, ii, _| o[oi] += v[ii]);
        let mut counts = vec![0usize; o.len()];
        adaptive_each(&shape, oh, ow, |oi, _, c| counts[oi] = c);
        for (o, &c) in o.iter_mut().zip(&counts) {
            if c > 0 {
                *o /= c as f64;
            }
        }
        write(&mut k.outputs[0], &o);
        Ok(())
    }))
}

/// `_mxrt_adaptive_avg_pool_grad(dy, data; output_size)`: each output cell's gradient spread
/// evenly over its window.
fn adaptive_pool_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let x = ins[1].clone();
    adaptive_check(call, &x)?;
    let (oh, ow) = adaptive_size(call)?;
    let shape = x.shape.to_vec();
    if ins[0].shape[..] != [shape[0], shape[1], oh as i64, ow as i64] {
        return Err(Error::invalid(format!(
            "operator {}: gradient of shape {:?} for the pooled output",
            call.name,
            &ins[0].shape[..]
        )));
    }
    Ok(Plan::new(
        vec![TensorDesc::new(&shape, ins[0].dtype)],
        move |k| {
            let dy = read(&k.inputs[0]);
            let mut o = vec![0f64; k.outputs[0].len()];
            adaptive_each(&shape, oh, ow, |oi, ii, c| o[ii] += dy[oi] / c as f64);
            write(&mut k.outputs[0], &o);
            Ok(())
        },
    ))
}

pub(crate) fn register(t: &mut Entries) {
    const W: &[&str] = &["kernel", "stride", "dilate", "pad"];
    t.def("im2col", &im2col).grad(|g| {
        let p = g.pass(W);
        Ok(vec![Some(g.op(
            "_mxrt_im2col_grad",
            &[g.dy(0), g.x(0)],
            &p,
        )?)])
    });
    t.def("_mxrt_im2col_grad", &im2col_grad).grad(|g| {
        let p = g.pass(W);
        Ok(vec![Some(g.op("im2col", &[g.dy(0)], &p)?), None])
    });
    t.def("col2im", &col2im).grad(|g| {
        let p = g.pass(W);
        Ok(vec![Some(g.op("im2col", &[g.dy(0)], &p)?)])
    });
    t.def("_contrib_AdaptiveAvgPooling2D", &adaptive_pool)
        .grad(|g| {
            let p = g.pass(&["output_size"]);
            Ok(vec![Some(g.op(
                "_mxrt_adaptive_avg_pool_grad",
                &[g.dy(0), g.x(0)],
                &p,
            )?)])
        });
    t.def("_mxrt_adaptive_avg_pool_grad", &adaptive_pool_grad)
        .grad(|g| {
            let p = g.pass(&["output_size"]);
            Ok(vec![
                Some(g.op("_contrib_AdaptiveAvgPooling2D", &[g.dy(0)], &p)?),
                None,
            ])
        });
}
