//! MXNet's predictor (`c_predict_api.h`): a graph loaded from its JSON with the parameters of a
//! `.params` file, bound once for inference on fixed input shapes.
//!
//! A [`Predictor`] is an [`Executor`] without gradients whose arguments are the parameters
//! (`arg:<name>` records of the file), auxiliary states (`aux:<name>`) and zero-filled input
//! arrays the caller fills by name. Shapes and dtypes come from inference over the given input
//! shapes and the parameters' dtypes; creation fails unless every entry of the graph is known.
//! Predictors made by [`Predictor::reshape`] or [`Predictor::create_many`] share the parameter
//! and auxiliary arrays and have input and output arrays of their own.

use super::exec::{Executor, Monitor, copy_into, view_or_new, zeros};
use super::infer::{Known, infer_shapes, infer_types};
use super::json::from_json;
use super::{InputKind, Symbol};
use crate::autograd::GradReq;
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ndarray::{NDArray, load_list, np_shape};
use std::collections::{HashMap, HashSet};

/// What a predictor is made from (the arguments of `MXPredCreate*`).
pub struct PredictorSpec<'a> {
    pub json: &'a str,
    pub params: &'a [u8],
    pub ctx: Context,
    /// Shapes of the inputs, by name.
    pub input_shapes: Vec<(String, Vec<i64>)>,
    /// Node names whose first output the predictor returns instead of the graph's outputs
    /// (`MXPredCreatePartialOut`); empty for the graph's own outputs.
    pub output_keys: Vec<String>,
    /// Dtypes of arguments the parameter file does not give (`MXPredCreateEx`).
    pub dtypes: Vec<(String, DType)>,
}

/// A graph bound for inference (see the module documentation).
pub struct Predictor {
    exec: Executor,
    /// Argument name to its position (any argument can be set, as in MXNet).
    key2arg: HashMap<String, usize>,
    /// The input names given at creation (their arrays are not shared with reshaped copies).
    input_keys: Vec<String>,
    out_shapes: Vec<Vec<i64>>,
    out_dtypes: Vec<DType>,
}

fn complete(s: &Option<Vec<i64>>) -> bool {
    s.as_ref().is_some_and(|v| v.iter().all(|&d| d > 0))
}

/// The first output of node `key`'s (`<key>_output`) among the graph's internals.
fn partial_outputs(sym: &Symbol, keys: &[String]) -> Result<Symbol> {
    let internals = sym.internals();
    let names = internals.list_outputs();
    let mut outs = Vec::with_capacity(keys.len());
    for (i, k) in keys.iter().enumerate() {
        let want = format!("{k}_output");
        let j = names.iter().position(|n| *n == want).ok_or_else(|| {
            Error::invalid(format!(
                "output_keys[{i}]: didn't find node name: {want} among the graph's outputs"
            ))
        })?;
        outs.push(internals.output(j)?);
    }
    Ok(Symbol::group(&outs))
}

impl Predictor {
    /// Loads the graph and parameters and binds one predictor.
    pub fn create(spec: &PredictorSpec) -> Result<Predictor> {
        Ok(Self::create_many(spec, 1)?.remove(0))
    }

    /// `n` predictors sharing parameters (`MXPredCreateMultiThread`).
    pub fn create_many(spec: &PredictorSpec, n: usize) -> Result<Vec<Predictor>> {
        let mut sym = from_json(spec.json).map_err(|e| e.context("symbol_json_str"))?;
        if !spec.output_keys.is_empty() {
            sym = partial_outputs(&sym, &spec.output_keys)?;
        }
        let arg_names = sym.input_names(InputKind::ReadOnly);
        let aux_names = sym.input_names(InputKind::Auxiliary);
        let (arrays, names) =
            load_list(spec.params, np_shape::current()).map_err(|e| e.context("param_bytes"))?;
        if names.len() != arrays.len() {
            return Err(Error::invalid(
                "param_bytes: Invalid param file format (the arrays have no names)",
            ));
        }
        let (arg_set, aux_set): (HashSet<&str>, HashSet<&str>) = (
            arg_names.iter().map(String::as_str).collect(),
            aux_names.iter().map(String::as_str).collect(),
        );
        let mut params: HashMap<String, NDArray> = HashMap::new();
        for (name, a) in names.iter().zip(arrays) {
            let key = match (name.strip_prefix("arg:"), name.strip_prefix("aux:")) {
                (Some(k), _) if arg_set.contains(k) => k,
                (_, Some(k)) if aux_set.contains(k) => k,
                _ => continue,
            };
            params.insert(key.to_owned(), a);
        }
        // shapes: the inputs given (names the graph does not have are ignored, as in MXNet)
        let all: HashSet<&str> = arg_set.union(&aux_set).copied().collect();
        let shapes: Vec<(String, Vec<i64>)> = spec
            .input_shapes
            .iter()
            .filter(|(k, _)| all.contains(k.as_str()))
            .cloned()
            .collect();
        let unknown: Vec<&str> = spec
            .input_shapes
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !all.contains(k))
            .collect();
        let s = infer_shapes(&sym, &Known::Named(shapes))?;
        let missing: Vec<&str> = arg_names
            .iter()
            .zip(&s.args)
            .chain(aux_names.iter().zip(&s.aux))
            .filter(|(_, sh)| !complete(sh))
            .map(|(n, _)| n.as_str())
            .collect();
        if !missing.is_empty() || s.outputs.iter().any(|o| !complete(o)) {
            let mut msg = String::from(
                "The shape information of is not enough to get the shapes: unknown shapes of ",
            );
            if missing.is_empty() {
                msg.push_str("some outputs");
            } else {
                msg.push_str(&missing.join(", "));
            }
            if !unknown.is_empty() {
                msg.push_str(&format!(
                    " (input_keys not in the graph: {}; its inputs: {})",
                    unknown.join(", "),
                    arg_names.join(", ")
                ));
            }
            return Err(Error::invalid(msg));
        }
        // dtypes: the parameters', then the ones provided, float32 for the rest
        let dtypes: Vec<(String, DType)> = arg_names
            .iter()
            .chain(&aux_names)
            .map(|n| {
                let t = match params.get(n) {
                    Some(a) => a.dtype(),
                    None => spec
                        .dtypes
                        .iter()
                        .find(|(k, _)| k == n)
                        .map(|(_, t)| *t)
                        .unwrap_or(DType::F32),
                };
                (n.clone(), t)
            })
            .collect();
        let t = infer_types(&sym, &Known::Named(dtypes))?;
        if t.args
            .iter()
            .chain(&t.aux)
            .chain(&t.outputs)
            .any(Option::is_none)
        {
            return Err(Error::invalid(
                "The type information is not enough, please provide input arg_types with \
                 provided_arg_dtype_names and provided_arg_dtypes.",
            ));
        }
        let unwrap = |v: &Option<Vec<i64>>| v.clone().unwrap_or_default();
        let load = |name: &str, shape: &[i64], dt: DType| -> Result<NDArray> {
            let a = zeros(shape, dt, spec.ctx)?;
            if let Some(p) = params.get(name) {
                if p.shape() != shape {
                    return Err(Error::invalid(format!(
                        "param_bytes: {name} has shape {:?}, the graph needs {shape:?}",
                        p.shape()
                    )));
                }
                copy_into(p, &a).map_err(|e| e.context(format!("param_bytes: {name}")))?;
            }
            Ok(a)
        };
        let mut args = Vec::with_capacity(arg_names.len());
        for (i, n) in arg_names.iter().enumerate() {
            args.push(load(
                n,
                &unwrap(&s.args[i]),
                t.args[i].unwrap_or(DType::F32),
            )?);
        }
        let mut aux = Vec::with_capacity(aux_names.len());
        for (i, n) in aux_names.iter().enumerate() {
            aux.push(load(n, &unwrap(&s.aux[i]), t.aux[i].unwrap_or(DType::F32))?);
        }
        let input_keys: Vec<String> = spec
            .input_shapes
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| arg_set.contains(k.as_str()))
            .collect();
        let out_shapes: Vec<Vec<i64>> = s.outputs.iter().map(unwrap).collect();
        let out_dtypes: Vec<DType> = t.outputs.iter().map(|d| d.unwrap_or(DType::F32)).collect();
        let mut out = Vec::with_capacity(n);
        for k in 0..n {
            // parameters are shared; each predictor has inputs of its own
            let mut mine = args.clone();
            if k > 0 {
                for (i, name) in arg_names.iter().enumerate() {
                    if input_keys.contains(name) {
                        mine[i] = zeros(args[i].shape(), args[i].dtype(), spec.ctx)?;
                    }
                }
            }
            out.push(Self::bind(
                &sym,
                spec.ctx,
                mine,
                aux.clone(),
                input_keys.clone(),
                out_shapes.clone(),
                out_dtypes.clone(),
            )?);
        }
        Ok(out)
    }

    fn bind(
        sym: &Symbol,
        ctx: Context,
        args: Vec<NDArray>,
        aux: Vec<NDArray>,
        input_keys: Vec<String>,
        out_shapes: Vec<Vec<i64>>,
        out_dtypes: Vec<DType>,
    ) -> Result<Predictor> {
        let n = args.len();
        let exec = Executor::bind(sym, ctx, args, vec![None; n], vec![GradReq::Null; n], aux)?;
        let key2arg = exec
            .arg_names
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), i))
            .collect();
        Ok(Predictor {
            exec,
            key2arg,
            input_keys,
            out_shapes,
            out_dtypes,
        })
    }

    /// A predictor for new input shapes sharing this one's parameters (`MXPredReshape`): only
    /// the inputs' shapes may change.
    pub fn reshape(&self, input_shapes: &[(String, Vec<i64>)]) -> Result<Predictor> {
        let sym = self.exec.symbol().clone();
        let names = &self.exec.arg_names;
        let aux_names = &self.exec.aux_names;
        let known: Vec<(String, Vec<i64>)> = input_shapes
            .iter()
            .filter(|(k, _)| names.contains(k) || aux_names.contains(k))
            .cloned()
            .collect();
        let s = infer_shapes(&sym, &Known::Named(known))?;
        if s.args
            .iter()
            .chain(&s.aux)
            .chain(&s.outputs)
            .any(|x| !complete(x))
        {
            return Err(Error::invalid(
                "The shape information of is not enough to get the shapes",
            ));
        }
        let mut args = Vec::with_capacity(names.len());
        for (i, n) in names.iter().enumerate() {
            let old = &self.exec.args[i];
            let new = s.args[i].clone().unwrap_or_default();
            let given = input_shapes.iter().any(|(k, _)| k == n);
            if new.as_slice() == old.shape() && !given {
                args.push(old.clone());
            } else if given {
                // as in MXNet, the new input shares the old one's memory when it fits
                args.push(view_or_new(old, &new, old.dtype(), self.exec.ctx)?);
            } else {
                return Err(Error::invalid(format!(
                    "arg {n} shape has been changed ({:?} to {new:?}), only allow to change the \
                     shape of input data.",
                    old.shape()
                )));
            }
        }
        for (i, n) in aux_names.iter().enumerate() {
            let old = &self.exec.aux[i];
            if s.aux[i].as_deref() != Some(old.shape()) {
                return Err(Error::invalid(format!(
                    "aux {n} shape has been changed, only allow to change the shape of input data."
                )));
            }
        }
        let out_shapes = s
            .outputs
            .iter()
            .map(|o| o.clone().unwrap_or_default())
            .collect();
        let mut p = Self::bind(
            &sym,
            self.exec.ctx,
            args,
            self.exec.aux.clone(),
            self.input_keys.clone(),
            out_shapes,
            self.out_dtypes.clone(),
        )?;
        p.exec.copy_monitor_from(&self.exec);
        Ok(p)
    }

    pub fn num_outputs(&self) -> usize {
        self.out_shapes.len()
    }

    fn check_index(&self, index: usize) -> Result<()> {
        if index >= self.out_shapes.len() {
            return Err(Error::invalid(format!(
                "Index exceed number of outputs: index {index}, the predictor has {} outputs",
                self.out_shapes.len()
            )));
        }
        Ok(())
    }

    pub fn output_shape(&self, index: usize) -> Result<&[i64]> {
        self.check_index(index)?;
        Ok(&self.out_shapes[index])
    }

    pub fn output_dtype(&self, index: usize) -> Result<DType> {
        self.check_index(index)?;
        Ok(self.out_dtypes[index])
    }

    /// Copies `data` into argument `key` (an input or a parameter), converting to its dtype.
    pub fn set_input(&self, key: &str, data: &[f32]) -> Result<()> {
        let Some(&i) = self.key2arg.get(key) else {
            return Err(Error::invalid(format!(
                "cannot find input key {key} (the graph's arguments: {})",
                self.exec.arg_names.join(", ")
            )));
        };
        let dst = &self.exec.args[i];
        if data.len() != dst.size() {
            return Err(Error::invalid(format!(
                "size: {} values given for input {key} of shape {:?} ({} values)",
                data.len(),
                dst.shape(),
                dst.size()
            )));
        }
        // SAFETY: the f32 values' own bytes (any byte pattern is a valid u8, alignment 1).
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
        };
        if dst.dtype() == DType::F32 {
            dst.sync_copy_from_bytes(bytes)
        } else {
            let tmp = NDArray::new(dst.shape(), Context::cpu(0), DType::F32, false)?;
            tmp.sync_copy_from_bytes(bytes)?;
            copy_into(&tmp, dst)
        }
    }

    pub fn forward(&mut self) -> Result<()> {
        self.exec.forward(false)
    }

    /// Runs node `step`; returns the steps left.
    pub fn partial_forward(&mut self, step: usize) -> Result<usize> {
        self.exec.partial_forward(false, step)
    }

    /// Output `index` as float32 values into `out` (its size must be the output's).
    pub fn get_output(&self, index: usize, out: &mut [f32]) -> Result<()> {
        self.check_index(index)?;
        let a = &self.exec.outputs[index];
        if out.len() != a.size() {
            return Err(Error::invalid(format!(
                "size: a buffer of {} values for output {index} of shape {:?} ({} values)",
                out.len(),
                a.shape(),
                a.size()
            )));
        }
        let src = if a.dtype() == DType::F32 && a.ctx().is_some_and(|c| c.is_host()) {
            a.clone()
        } else {
            let tmp = NDArray::new(a.shape(), Context::cpu(0), DType::F32, false)?;
            copy_into(a, &tmp)?;
            tmp
        };
        // SAFETY: the caller's f32 buffer as bytes: every byte pattern written is a valid f32
        // (alignment 1 for the byte view, the same memory and length).
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(out))
        };
        src.sync_copy_to_bytes(bytes)
    }

    pub fn set_monitor(&mut self, m: Option<Monitor>, all: bool) {
        self.exec.set_monitor(m, all);
    }
}

/// The arrays of an MXNet list file as float32 values (`MXNDListCreate`).
pub struct NDList {
    pub keys: Vec<String>,
    pub shapes: Vec<Vec<i64>>,
    pub data: Vec<Vec<f32>>,
}

impl NDList {
    pub fn load(bytes: &[u8]) -> Result<NDList> {
        let (arrays, mut keys) = load_list(bytes, np_shape::current())?;
        if keys.is_empty() {
            keys = vec![String::new(); arrays.len()];
        }
        let mut shapes = Vec::with_capacity(arrays.len());
        let mut data = Vec::with_capacity(arrays.len());
        for (i, a) in arrays.iter().enumerate() {
            let tmp = NDArray::new(a.shape(), Context::cpu(0), DType::F32, false)?;
            copy_into(a, &tmp).map_err(|e| e.context(format!("array {i}")))?;
            let mut bytes = vec![0u8; tmp.nbytes()];
            tmp.sync_copy_to_bytes(&mut bytes)?;
            shapes.push(a.shape().to_vec());
            data.push(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_ne_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
            );
        }
        Ok(NDList { keys, shapes, data })
    }
}
