//! The Symbol API of MXNet 1.9.1 (`MXSymbol*`, the `NNSymbol*` names the Python package
//! resolves): creating, composing and listing graphs, attributes, JSON, shape and dtype
//! inference. The graphs themselves are `crate::graph`.
//!
//! A SymbolHandle holds a `Symbol` behind a lock (`MXSymbolCompose` changes it in place). Strings,
//! string arrays, handle arrays and shape arrays a function returns live in this thread's
//! buffers until its next call of a function returning the same kind, as in MXNet.

use super::args;
use super::error::api_call;
use super::handle::{self, Handle, HandleKind};
use super::operator::{AtomicSymbolCreator, op_arg};
use super::types::SymbolHandle;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::infer::{Inferred, Known, infer_shapes, infer_types};
use crate::graph::{InputKind, Symbol, json};
use crate::operator::registry::Registry;
use parking_lot::Mutex;
use std::any::Any;
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::sync::Arc;

/// What a SymbolHandle points to.
pub(crate) struct CSymbol(Mutex<Symbol>);

impl Handle for CSymbol {
    const KIND: HandleKind = HandleKind::Symbol;
}

pub(crate) fn sym(h: SymbolHandle, arg: &str) -> Result<Symbol> {
    Ok(handle::borrow::<CSymbol>(h, arg)?.0.lock().clone())
}

pub(crate) fn new_handle(s: Symbol) -> SymbolHandle {
    handle::into_handle(Arc::new(CSymbol(Mutex::new(s))))
}

/// The numpy-shape mode's code, which the JSON records.
fn np_shape() -> i32 {
    crate::ndarray::np_shape::current().code()
}

/// This thread's returned values (valid until the next call that returns the same kind).
#[derive(Default)]
struct Returned {
    strings: Vec<CString>,
    string_ptrs: Vec<*const c_char>,
    text: CString,
    handles: Vec<SymbolHandle>,
    shapes: Option<Box<dyn Any>>,
    types: [Vec<c_int>; 3],
}

thread_local! {
    static RETURNED: RefCell<Returned> = RefCell::new(Returned::default());
}

/// `s` as a C string (a NUL ends it there, as it would in C).
fn c_string(s: &str) -> CString {
    let end = s.find('\0').unwrap_or(s.len());
    CString::new(&s[..end]).expect("cut at the first NUL")
}

/// Returns `list` as a C string array.
///
/// # Safety
/// The out-parameters are valid for writes.
unsafe fn return_strings(
    list: &[String],
    out_size: *mut u32,
    out: *mut *mut *const c_char,
) -> Result<()> {
    // SAFETY: per the contract.
    let (size, out) = unsafe { (args::out(out_size, "out_size")?, args::out(out, "out")?) };
    RETURNED.with(|r| {
        let mut r = r.borrow_mut();
        r.strings = list.iter().map(|s| c_string(s)).collect();
        r.string_ptrs = r.strings.iter().map(|c| c.as_ptr()).collect();
        *size = list.len() as u32;
        *out = r.string_ptrs.as_mut_ptr();
    });
    Ok(())
}

/// Returns one string.
fn return_text(s: &str) -> *const c_char {
    RETURNED.with(|r| {
        let mut r = r.borrow_mut();
        r.text = c_string(s);
        r.text.as_ptr()
    })
}

/// Writes a new handle for `s` to `out`.
///
/// # Safety
/// `out` is valid for a write.
unsafe fn put_symbol(out: *mut SymbolHandle, s: Symbol) -> Result<()> {
    // SAFETY: per the contract.
    let out = unsafe { args::out(out, "out")? };
    *out = new_handle(s);
    Ok(())
}

/// Lists every operator as an atomic symbol creator (the handles of `NNGetOpHandle`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolListAtomicSymbolCreators(
    out_size: *mut u32,
    out_array: *mut *mut AtomicSymbolCreator,
) -> c_int {
    api_call("MXSymbolListAtomicSymbolCreators", || {
        // SAFETY: API contract: out-parameters.
        unsafe { args::static_list(out_size, out_array, super::operator::creators()) }
    })
}

/// The name of an atomic symbol creator's op.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolGetAtomicSymbolName(
    creator: AtomicSymbolCreator,
    name: *mut *const c_char,
) -> c_int {
    api_call("MXSymbolGetAtomicSymbolName", || {
        let id = op_arg(creator, "creator")?;
        // SAFETY: API contract: out-parameter.
        let name = unsafe { args::out(name, "name")? };
        *name = super::operator::op_name_ptr(id);
        Ok(())
    })
}

/// A new symbol of one op node with parameters `keys[i]=vals[i]`, not yet composed. Unknown or
/// missing required parameters are an error; an op mxrt does not implement is an error naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolCreateAtomicSymbol(
    creator: AtomicSymbolCreator,
    num_param: u32,
    keys: *mut *const c_char,
    vals: *mut *const c_char,
    out: *mut SymbolHandle,
) -> c_int {
    api_call("MXSymbolCreateAtomicSymbol", || {
        let id = op_arg(creator, "creator")?;
        let name = Registry::global().op(id).name.as_str();
        let n = num_param as usize;
        // SAFETY: API contract: `num_param` strings each.
        let (ks, vs) = unsafe {
            (
                args::slice(keys.cast_const(), n, "keys")?,
                args::slice(vals.cast_const(), n, "vals")?,
            )
        };
        let mut pairs = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: API contract: NUL-terminated strings.
            let (k, v) = unsafe {
                (
                    args::c_str(ks[i], &format!("keys[{i}]"))?,
                    args::c_str(vs[i], &format!("vals[{i}]"))?,
                )
            };
            pairs.push((k, v));
        }
        let def = Symbol::op_def(name)?;
        let s = Symbol::atomic(def, &pairs)?;
        // SAFETY: API contract: out-parameter.
        unsafe { put_symbol(out, s) }
    })
}

/// A new symbol of one variable named `name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolCreateVariable(
    name: *const c_char,
    out: *mut SymbolHandle,
) -> c_int {
    api_call("MXSymbolCreateVariable", || {
        // SAFETY: API contract: a C string.
        let name = unsafe { args::c_str(name, "name")? };
        // SAFETY: API contract: out-parameter.
        unsafe { put_symbol(out, Symbol::variable(name)) }
    })
}

/// The symbols' handles at `ptr`.
///
/// # Safety
/// `ptr` is NULL or points to `n` handles.
unsafe fn symbols(ptr: *const SymbolHandle, n: usize, arg: &str) -> Result<Vec<Symbol>> {
    // SAFETY: per the contract.
    let hs = unsafe { args::slice(ptr, n, arg)? };
    hs.iter()
        .enumerate()
        .map(|(i, &h)| handle::borrow_at::<CSymbol>(h, arg, i).map(|s| s.0.lock().clone()))
        .collect()
}

/// A symbol of all outputs of the given symbols, in order.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolCreateGroup(
    num_symbols: u32,
    symbols_: *mut SymbolHandle,
    out: *mut SymbolHandle,
) -> c_int {
    api_call("MXSymbolCreateGroup", || {
        // SAFETY: API contract: `num_symbols` handles.
        let list = unsafe { symbols(symbols_.cast_const(), num_symbols as usize, "symbols")? };
        // SAFETY: API contract: out-parameter.
        unsafe { put_symbol(out, Symbol::group(&list)) }
    })
}

/// Composes `sym` in place with `args` (positional when `keys` is NULL, else by input name).
///
/// # Safety
/// As for [`MXSymbolCompose`].
unsafe fn compose(
    sym_h: SymbolHandle,
    name: *const c_char,
    num_args: u32,
    keys: *mut *const c_char,
    args_: *mut SymbolHandle,
) -> Result<()> {
    let target = handle::borrow::<CSymbol>(sym_h, "sym")?;
    // SAFETY: API contract: a C string or NULL.
    let name = unsafe { args::opt_c_str(name, "name")? }.unwrap_or("");
    let n = num_args as usize;
    // SAFETY: API contract: `num_args` handles.
    let list = unsafe { symbols(args_.cast_const(), n, "args")? };
    let mut positional = Vec::new();
    let mut named = Vec::new();
    if keys.is_null() {
        positional = list;
    } else {
        // SAFETY: API contract: `num_args` strings.
        let ks = unsafe { args::slice(keys.cast_const(), n, "keys")? };
        for (i, s) in list.into_iter().enumerate() {
            // SAFETY: API contract: NUL-terminated strings.
            let k = unsafe { args::c_str(ks[i], &format!("keys[{i}]"))? };
            named.push((k.to_string(), s));
        }
    }
    let mut s = target.0.lock();
    let mut work = s.clone();
    work.compose(name, &positional, &named)?;
    *s = work;
    Ok(())
}

/// Applies `sym` to arguments, in place: an uncomposed op takes `args` by position (`keys`
/// NULL) or by input name, creating variables `<name>_<input>` for the inputs not given; a
/// composed graph takes keyword arguments only, replacing its variables of those names.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolCompose(
    sym: SymbolHandle,
    name: *const c_char,
    num_args: u32,
    keys: *mut *const c_char,
    args: *mut SymbolHandle,
) -> c_int {
    // SAFETY: forwarded API contract.
    api_call("MXSymbolCompose", || unsafe {
        compose(sym, name, num_args, keys, args)
    })
}

/// nnvm's name for [`MXSymbolCompose`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn NNSymbolCompose(
    sym: SymbolHandle,
    name: *const c_char,
    num_args: u32,
    keys: *mut *const c_char,
    args: *mut SymbolHandle,
) -> c_int {
    // SAFETY: forwarded API contract.
    api_call("NNSymbolCompose", || unsafe {
        compose(sym, name, num_args, keys, args)
    })
}

/// A deep copy of `symbol` (every node copied).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolCopy(symbol: SymbolHandle, out: *mut SymbolHandle) -> c_int {
    api_call("MXSymbolCopy", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: out-parameter.
        unsafe { put_symbol(out, s.deep_copy()) }
    })
}

/// A new handle with the same outputs as `src` (nodes shared).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXShallowCopySymbol(src: SymbolHandle, out: *mut SymbolHandle) -> c_int {
    api_call("MXShallowCopySymbol", || {
        let s = sym(src, "src")?;
        // SAFETY: API contract: out-parameter.
        unsafe { put_symbol(out, s) }
    })
}

/// Frees a symbol handle (other handles sharing its nodes stay valid).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolFree(symbol: SymbolHandle) -> c_int {
    api_call("MXSymbolFree", || {
        handle::take::<CSymbol>(symbol, "symbol").map(drop)
    })
}

/// nnvm's name for [`MXSymbolFree`] (what the Python package calls).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn NNSymbolFree(symbol: SymbolHandle) -> c_int {
    api_call("NNSymbolFree", || {
        handle::take::<CSymbol>(symbol, "symbol").map(drop)
    })
}

/// MXNet's debug string of the graph.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolPrint(symbol: SymbolHandle, out_str: *mut *const c_char) -> c_int {
    api_call("MXSymbolPrint", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_str, "out_str")? };
        *out = return_text(&s.debug_string());
        Ok(())
    })
}

/// The head node's name (`*success` = 1), or `*success` = 0 and NULL for a grouped symbol.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolGetName(
    symbol: SymbolHandle,
    out: *mut *const c_char,
    success: *mut c_int,
) -> c_int {
    api_call("MXSymbolGetName", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: out-parameters.
        let (out, success) = unsafe { (args::out(out, "out")?, args::out(success, "success")?) };
        match s.name() {
            Some(n) => {
                *out = return_text(&n);
                *success = 1;
            }
            None => {
                *out = std::ptr::null();
                *success = 0;
            }
        }
        Ok(())
    })
}

/// Attribute `key` of a single-node symbol (`*success` = 0 and NULL when absent).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolGetAttr(
    symbol: SymbolHandle,
    key: *const c_char,
    out: *mut *const c_char,
    success: *mut c_int,
) -> c_int {
    api_call("MXSymbolGetAttr", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: a C string and out-parameters.
        let (key, out, success) = unsafe {
            (
                args::c_str(key, "key")?,
                args::out(out, "out")?,
                args::out(success, "success")?,
            )
        };
        match s.get_attr(key) {
            Some(v) => {
                *out = return_text(&v);
                *success = 1;
            }
            None => {
                *out = std::ptr::null();
                *success = 0;
            }
        }
        Ok(())
    })
}

/// Sets attribute `key` of a single-node symbol (`name` renames it; an op's parameters are
/// checked, and a refused value changes nothing).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolSetAttr(
    symbol: SymbolHandle,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    api_call("MXSymbolSetAttr", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: C strings.
        let (key, value) = unsafe { (args::c_str(key, "key")?, args::c_str(value, "value")?) };
        s.set_attr(key, value)
    })
}

/// # Safety
/// The out-parameters are valid for writes.
unsafe fn list_attrs(
    symbol: SymbolHandle,
    shallow: bool,
    out_size: *mut u32,
    out: *mut *mut *const c_char,
) -> Result<()> {
    let s = sym(symbol, "symbol")?;
    let pairs = s.list_attrs(shallow);
    let flat: Vec<String> = pairs
        .iter()
        .flat_map(|(k, v)| [k.clone(), v.clone()])
        .collect();
    // SAFETY: per the contract.
    unsafe { return_strings(&flat, out_size, out)? };
    // SAFETY: checked non-NULL by return_strings; `out_size` counts pairs, as in MXNet.
    unsafe { *out_size = pairs.len() as u32 };
    Ok(())
}

/// Every node's attributes: `2 * *out_size` strings, `"<node>$<key>", value` pairs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolListAttr(
    symbol: SymbolHandle,
    out_size: *mut u32,
    out: *mut *mut *const c_char,
) -> c_int {
    // SAFETY: forwarded API contract.
    api_call("MXSymbolListAttr", || unsafe {
        list_attrs(symbol, false, out_size, out)
    })
}

/// The head node's attributes: `2 * *out_size` strings, key and value pairs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolListAttrShallow(
    symbol: SymbolHandle,
    out_size: *mut u32,
    out: *mut *mut *const c_char,
) -> c_int {
    // SAFETY: forwarded API contract.
    api_call("MXSymbolListAttrShallow", || unsafe {
        list_attrs(symbol, true, out_size, out)
    })
}

/// The arguments' names (variables no op writes), in MXNet's order.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolListArguments(
    symbol: SymbolHandle,
    out_size: *mut u32,
    out_str_array: *mut *mut *const c_char,
) -> c_int {
    api_call("MXSymbolListArguments", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: out-parameters.
        unsafe { return_strings(&s.input_names(InputKind::ReadOnly), out_size, out_str_array) }
    })
}

/// The outputs' names (`<node>_output`, `<node>_output<i>`, a variable's own name).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolListOutputs(
    symbol: SymbolHandle,
    out_size: *mut u32,
    out_str_array: *mut *mut *const c_char,
) -> c_int {
    api_call("MXSymbolListOutputs", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: out-parameters.
        unsafe { return_strings(&s.list_outputs(), out_size, out_str_array) }
    })
}

/// The auxiliary states' names (variables an op writes, such as BatchNorm's moving statistics).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolListAuxiliaryStates(
    symbol: SymbolHandle,
    out_size: *mut u32,
    out_str_array: *mut *mut *const c_char,
) -> c_int {
    api_call("MXSymbolListAuxiliaryStates", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: out-parameters.
        unsafe {
            return_strings(
                &s.input_names(InputKind::Auxiliary),
                out_size,
                out_str_array,
            )
        }
    })
}

/// The inputs' names: `option` 0 all, 1 arguments, 2 auxiliary states.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn NNSymbolListInputNames(
    symbol: SymbolHandle,
    option: c_int,
    out_size: *mut u32,
    out_str_array: *mut *mut *const c_char,
) -> c_int {
    api_call("NNSymbolListInputNames", || {
        let s = sym(symbol, "symbol")?;
        let kind = match option {
            0 => InputKind::All,
            1 => InputKind::ReadOnly,
            2 => InputKind::Auxiliary,
            o => {
                return Err(Error::invalid(format!(
                    "option {o} is not 0 (all), 1 (arguments) or 2 (auxiliary states)"
                )));
            }
        };
        // SAFETY: API contract: out-parameters.
        unsafe { return_strings(&s.input_names(kind), out_size, out_str_array) }
    })
}

/// The number of outputs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolGetNumOutputs(
    symbol: SymbolHandle,
    output_count: *mut u32,
) -> c_int {
    api_call("MXSymbolGetNumOutputs", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: out-parameter.
        *unsafe { args::out(output_count, "output_count")? } = s.outputs.len() as u32;
        Ok(())
    })
}

/// A symbol of every variable and every op output of the graph.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolGetInternals(
    symbol: SymbolHandle,
    out: *mut SymbolHandle,
) -> c_int {
    api_call("MXSymbolGetInternals", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: out-parameter.
        unsafe { put_symbol(out, s.internals()) }
    })
}

/// A symbol of the inputs of the output nodes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolGetChildren(
    symbol: SymbolHandle,
    out: *mut SymbolHandle,
) -> c_int {
    api_call("MXSymbolGetChildren", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: out-parameter.
        unsafe { put_symbol(out, s.children()) }
    })
}

/// Output `index` as a symbol.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolGetOutput(
    symbol: SymbolHandle,
    index: u32,
    out: *mut SymbolHandle,
) -> c_int {
    api_call("MXSymbolGetOutput", || {
        let s = sym(symbol, "symbol")?.output(index as usize)?;
        // SAFETY: API contract: out-parameter.
        unsafe { put_symbol(out, s) }
    })
}

/// Returns new handles for `list` through `*out` and `*size`.
///
/// # Safety
/// The out-parameters are valid for writes.
unsafe fn return_symbols(
    list: Vec<Symbol>,
    out: *mut *mut SymbolHandle,
    size: *mut c_int,
) -> Result<()> {
    // SAFETY: per the contract.
    let (out, size) = unsafe { (args::out(out, "inputs")?, args::out(size, "input_size")?) };
    let n = c_int::try_from(list.len()).map_err(|_| Error::invalid("too many symbols"))?;
    RETURNED.with(|r| {
        let mut r = r.borrow_mut();
        r.handles = list.into_iter().map(new_handle).collect();
        *out = r.handles.as_mut_ptr();
    });
    *size = n;
    Ok(())
}

/// One new variable symbol per edge from a variable into an op node.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolGetInputSymbols(
    sym_: SymbolHandle,
    inputs: *mut *mut SymbolHandle,
    input_size: *mut c_int,
) -> c_int {
    api_call("MXSymbolGetInputSymbols", || {
        let s = sym(sym_, "sym")?;
        // SAFETY: API contract: out-parameters.
        unsafe { return_symbols(s.input_symbols(), inputs, input_size) }
    })
}

/// Cuts the subgraph the head node belongs to (its `__subgraph_name__` attribute) out of the
/// graph, in place: every edge entering it becomes a new variable named after the entry; the
/// original entries are returned. A head without the attribute returns nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolCutSubgraph(
    sym_: SymbolHandle,
    inputs: *mut *mut SymbolHandle,
    input_size: *mut c_int,
) -> c_int {
    api_call("MXSymbolCutSubgraph", || {
        let s = sym(sym_, "sym")?;
        // SAFETY: API contract: out-parameters.
        unsafe { return_symbols(s.cut_subgraph(), inputs, input_size) }
    })
}

/// The graph in MXNet 1.9.1's JSON format.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolSaveToJSON(
    symbol: SymbolHandle,
    out_json: *mut *const c_char,
) -> c_int {
    api_call("MXSymbolSaveToJSON", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_json, "out_json")? };
        *out = return_text(&json::to_json(&s, np_shape()));
        Ok(())
    })
}

/// A symbol from MXNet's JSON (any release's; older formats are upgraded).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolCreateFromJSON(
    json_: *const c_char,
    out: *mut SymbolHandle,
) -> c_int {
    api_call("MXSymbolCreateFromJSON", || {
        // SAFETY: API contract: a C string.
        let text = unsafe { args::c_str(json_, "json")? };
        let s = json::from_json(text)?;
        // SAFETY: API contract: out-parameter.
        unsafe { put_symbol(out, s) }
    })
}

/// Writes the graph's JSON to file `fname`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolSaveToFile(symbol: SymbolHandle, fname: *const c_char) -> c_int {
    api_call("MXSymbolSaveToFile", || {
        let s = sym(symbol, "symbol")?;
        // SAFETY: API contract: a C string.
        let fname = unsafe { args::c_str(fname, "fname")? };
        std::fs::write(fname, json::to_json(&s, np_shape()))
            .map_err(|e| Error::io(format!("fname: cannot write {fname}: {e}")))
    })
}

/// A symbol from a JSON file.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolCreateFromFile(
    fname: *const c_char,
    out: *mut SymbolHandle,
) -> c_int {
    api_call("MXSymbolCreateFromFile", || {
        // SAFETY: API contract: a C string.
        let fname = unsafe { args::c_str(fname, "fname")? };
        let text = std::fs::read_to_string(fname)
            .map_err(|e| Error::io(format!("fname: cannot read {fname}: {e}")))?;
        let s = json::from_json(&text)?;
        // SAFETY: API contract: out-parameter.
        unsafe { put_symbol(out, s) }
    })
}

/// A copy of the graph without AMP casts (mxrt's graphs have none: a copy).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolRemoveAmpCast(
    sym_handle: SymbolHandle,
    ret_sym_handle: *mut SymbolHandle,
) -> c_int {
    api_call("MXSymbolRemoveAmpCast", || {
        let s = sym(sym_handle, "sym_handle")?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(ret_sym_handle, "ret_sym_handle")? };
        *out = new_handle(s.remove_amp_cast());
        Ok(())
    })
}

/// An uncomposed symbol of the head node's op with its attributes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXGenAtomicSymbolFromSymbol(
    sym_handle: SymbolHandle,
    ret_sym_handle: *mut SymbolHandle,
) -> c_int {
    api_call("MXGenAtomicSymbolFromSymbol", || {
        let s = sym(sym_handle, "sym_handle")?.atomic_from_head()?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(ret_sym_handle, "ret_sym_handle")? };
        *out = new_handle(s);
        Ok(())
    })
}

/// Symbolic gradients: not implemented in MXNet 1.9.1 either (always -1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolGrad(
    sym_: SymbolHandle,
    num_wrt: u32,
    wrt: *mut *const c_char,
    out: *mut SymbolHandle,
) -> c_int {
    api_call("MXSymbolGrad", || {
        sym(sym_, "sym")?;
        let _ = (num_wrt, wrt, out);
        Err(Error::not_supported(
            "MXSymbolGrad: not implemented (as in MXNet 1.9.1)",
        ))
    })
}

// ---------------------------------------------------------------------------------------------
// Inference

/// The known values' names (`None`: positional).
///
/// # Safety
/// `keys` is NULL or points to `n` C strings.
unsafe fn key_list(keys: *mut *const c_char, n: usize) -> Result<Option<Vec<String>>> {
    if keys.is_null() {
        return Ok(None);
    }
    // SAFETY: per the contract.
    let ks = unsafe { args::slice(keys.cast_const(), n, "keys")? };
    ks.iter()
        .enumerate()
        // SAFETY: per the contract.
        .map(|(i, &k)| unsafe { args::c_str(k, &format!("keys[{i}]")) }.map(str::to_string))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

fn known<T>(names: Option<Vec<String>>, values: Vec<T>) -> Known<T> {
    match names {
        None => Known::Positional(values),
        Some(n) => Known::Named(n.into_iter().zip(values).collect()),
    }
}

/// The shapes given in CSR form: shape `i` is `data[ind[i]..ind[i+1]]`.
///
/// # Safety
/// `ind` points to `n + 1` indices and `data` to at least `ind[n]` dimensions.
unsafe fn given_shapes<I: Copy + TryInto<usize>, D: Copy + TryInto<i64>>(
    n: usize,
    ind: *const I,
    data: *const D,
) -> Result<Vec<Vec<i64>>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: per the contract.
    let ind = unsafe { args::slice(ind, n + 1, "arg_ind_ptr")? };
    let ind: Vec<usize> = ind
        .iter()
        .map(|&i| {
            i.try_into()
                .map_err(|_| Error::invalid("arg_ind_ptr: a negative index"))
        })
        .collect::<Result<_>>()?;
    if ind.windows(2).any(|w| w[1] < w[0]) {
        return Err(Error::invalid("arg_ind_ptr is not non-decreasing"));
    }
    // SAFETY: per the contract.
    let data = unsafe { args::slice(data, ind[n], "arg_shape_data")? };
    (0..n)
        .map(|i| {
            data[ind[i]..ind[i + 1]]
                .iter()
                .map(|&d| {
                    d.try_into()
                        .ok()
                        .filter(|&d: &i64| d >= -1)
                        .map(|d| d.max(0))
                        .ok_or_else(|| {
                            Error::invalid(format!("arg_shape_data: bad dimension in shape {i}"))
                        })
                })
                .collect()
        })
        .collect()
}

/// Shapes returned in MXNet's layout: per group (arguments, outputs, auxiliary states) an
/// array of ndims and an array of pointers to the dimensions.
struct ShapeOut<N, T> {
    ndims: [Vec<N>; 3],
    dims: [Vec<Vec<T>>; 3],
    ptrs: [Vec<*const T>; 3],
}

/// The out-parameters of one group.
type GroupOut<S, N, T> = (*mut S, *mut *const N, *mut *mut *const T);

/// Stores `r` in this thread's buffer and writes the three groups and `complete`.
///
/// # Safety
/// Every out-parameter is valid for writes.
unsafe fn return_shapes<S, N, T>(
    r: Inferred<Vec<i64>>,
    groups: [GroupOut<S, N, T>; 3],
    complete: *mut c_int,
    partial: bool,
) -> Result<()>
where
    S: TryFrom<usize> + 'static,
    N: TryFrom<i64> + Copy + 'static,
    T: TryFrom<i64> + Copy + 'static,
{
    // with NumPy shape semantics on, MXNet reports an unknown shape as ndim -1 and an unknown
    // dimension as -1 (0 through the unsigned legacy functions, which cannot hold -1)
    let unknown = if np_shape() != 0 { -1 } else { 0 };
    // SAFETY: per the contract (checked before anything is written).
    let complete = unsafe { args::out(complete, "complete")? };
    for (i, g) in groups.iter().enumerate() {
        let names = ["in", "out", "aux"][i];
        if g.0.is_null() || g.1.is_null() || g.2.is_null() {
            return Err(Error::invalid(format!(
                "{names}_shape_* out-parameters: one is NULL"
            )));
        }
    }
    let conv = |v: &[Option<Vec<i64>>]| -> Result<(Vec<N>, Vec<Vec<T>>)> {
        let mut nd = Vec::with_capacity(v.len());
        let mut dims = Vec::with_capacity(v.len());
        for s in v {
            let ndim = s.as_ref().map_or(unknown, |d| d.len() as i64);
            let ndim = N::try_from(ndim).or_else(|_| N::try_from(ndim.max(0)));
            nd.push(ndim.map_err(|_| Error::invalid("ndim out of range"))?);
            dims.push(
                s.iter()
                    .flatten()
                    .map(|&x| {
                        let x = if x > 0 { x } else { unknown };
                        T::try_from(x)
                            .or_else(|_| T::try_from(x.max(0)))
                            .map_err(|_| Error::invalid("dimension out of range"))
                    })
                    .collect::<Result<Vec<T>>>()?,
            );
        }
        Ok((nd, dims))
    };
    let (a, b, c) = (conv(&r.args)?, conv(&r.outputs)?, conv(&r.aux)?);
    let mut out: ShapeOut<N, T> = ShapeOut {
        ndims: [a.0, b.0, c.0],
        dims: [a.1, b.1, c.1],
        ptrs: [Vec::new(), Vec::new(), Vec::new()],
    };
    for g in 0..3 {
        out.ptrs[g] = out.dims[g].iter().map(|d| d.as_ptr()).collect();
    }
    let sizes = [r.args.len(), r.outputs.len(), r.aux.len()];
    let mut boxed: Box<ShapeOut<N, T>> = Box::new(out);
    for (g, (size, ndim, data)) in groups.into_iter().enumerate() {
        let n = S::try_from(sizes[g]).map_err(|_| Error::invalid("too many shapes"))?;
        // SAFETY: checked non-NULL above; valid per the contract. The arrays live in the boxed
        // buffer, which stays in this thread's storage until the next inference call.
        unsafe {
            size.write(n);
            ndim.write(boxed.ndims[g].as_ptr());
            data.write(boxed.ptrs[g].as_mut_ptr());
        }
    }
    *complete = c_int::from(partial || r.complete);
    RETURNED.with(|ret| ret.borrow_mut().shapes = Some(boxed as Box<dyn Any>));
    Ok(())
}

macro_rules! infer_shape_fn {
    ($(#[$doc:meta])* $name:ident, $ind:ty, $data:ty, $size:ty, $ndim:ty, $dim:ty, $partial:expr) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            sym_: SymbolHandle,
            num_args: u32,
            keys: *mut *const c_char,
            arg_ind_ptr: *const $ind,
            arg_shape_data: *const $data,
            in_shape_size: *mut $size,
            in_shape_ndim: *mut *const $ndim,
            in_shape_data: *mut *mut *const $dim,
            out_shape_size: *mut $size,
            out_shape_ndim: *mut *const $ndim,
            out_shape_data: *mut *mut *const $dim,
            aux_shape_size: *mut $size,
            aux_shape_ndim: *mut *const $ndim,
            aux_shape_data: *mut *mut *const $dim,
            complete: *mut c_int,
        ) -> c_int {
            api_call(stringify!($name), || {
                let s = sym(sym_, "sym")?;
                let n = num_args as usize;
                // SAFETY: API contract: `num_args` keys (or NULL) and shapes in CSR form.
                let (names, shapes) = unsafe {
                    (key_list(keys, n)?, given_shapes(n, arg_ind_ptr, arg_shape_data)?)
                };
                let r = infer_shapes(&s, &known(names, shapes))?;
                // SAFETY: API contract: out-parameters.
                unsafe {
                    return_shapes(
                        r,
                        [
                            (in_shape_size, in_shape_ndim, in_shape_data),
                            (out_shape_size, out_shape_ndim, out_shape_data),
                            (aux_shape_size, aux_shape_ndim, aux_shape_data),
                        ],
                        complete,
                        $partial,
                    )
                }
            })
        }
    };
}

infer_shape_fn!(
    /// Shapes of the arguments, outputs and auxiliary states from known input shapes (`keys`
    /// name inputs; NULL: the first arguments in order); `*complete` = 1 when every shape of the
    /// graph is known. Unknown dimensions are 0, unknown shapes have ndim 0.
    MXSymbolInferShape, u32, u32, u32, u32, u32, false
);
infer_shape_fn!(
    /// [`MXSymbolInferShape`] that returns what is known with `*complete` = 1.
    MXSymbolInferShapePartial, u32, u32, u32, u32, u32, true
);
infer_shape_fn!(
    /// [`MXSymbolInferShape`] with `int` dimensions.
    MXSymbolInferShapeEx, u32, c_int, u32, c_int, c_int, false
);
infer_shape_fn!(
    /// [`MXSymbolInferShapePartial`] with `int` dimensions.
    MXSymbolInferShapePartialEx, u32, c_int, u32, c_int, c_int, true
);
infer_shape_fn!(
    /// [`MXSymbolInferShape`] with 64-bit dimensions.
    MXSymbolInferShapeEx64, i64, i64, usize, c_int, i64, false
);
infer_shape_fn!(
    /// [`MXSymbolInferShapePartial`] with 64-bit dimensions.
    MXSymbolInferShapePartialEx64, i64, i64, usize, c_int, i64, true
);

/// # Safety
/// As for [`MXSymbolInferType`].
#[allow(clippy::too_many_arguments)]
unsafe fn infer_type(
    sym_: SymbolHandle,
    num_args: u32,
    keys: *mut *const c_char,
    arg_type_data: *const c_int,
    sizes: [*mut u32; 3],
    datas: [*mut *const c_int; 3],
    complete: *mut c_int,
    partial: bool,
) -> Result<()> {
    let s = sym(sym_, "sym")?;
    let n = num_args as usize;
    // SAFETY: API contract: `num_args` keys (or NULL) and dtype codes.
    let (names, codes) = unsafe {
        (
            key_list(keys, n)?,
            args::slice(arg_type_data, n, "arg_type_data")?,
        )
    };
    let mut types = Vec::with_capacity(n);
    let mut kept_names = Vec::new();
    for (i, &c) in codes.iter().enumerate() {
        // -1: unknown, skipped
        if c == -1 {
            continue;
        }
        types.push(DType::from_code(c).map_err(|e| e.context(format!("arg_type_data[{i}]")))?);
        if let Some(ns) = &names {
            kept_names.push(ns[i].clone());
        }
    }
    let r = infer_types(&s, &known(names.map(|_| kept_names), types))?;
    // SAFETY: API contract: out-parameters (checked before writing).
    let complete = unsafe { args::out(complete, "complete")? };
    for (g, (size, data)) in sizes.iter().zip(&datas).enumerate() {
        if size.is_null() || data.is_null() {
            return Err(Error::invalid(format!(
                "{}_type_* out-parameters: one is NULL",
                ["in", "out", "aux"][g]
            )));
        }
    }
    let groups = [&r.args, &r.outputs, &r.aux];
    RETURNED.with(|ret| {
        let mut ret = ret.borrow_mut();
        for g in 0..3 {
            ret.types[g] = groups[g]
                .iter()
                .map(|t| t.map_or(-1, DType::code))
                .collect();
            // SAFETY: checked non-NULL above; the arrays stay in this thread's buffer.
            unsafe {
                sizes[g].write(groups[g].len() as u32);
                datas[g].write(ret.types[g].as_ptr());
            }
        }
    });
    *complete = c_int::from(partial || r.complete);
    Ok(())
}

/// Dtypes (codes, -1 unknown) of the arguments, outputs and auxiliary states from known input
/// dtypes; `*complete` = 1 when every dtype of the graph is known.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn MXSymbolInferType(
    sym_: SymbolHandle,
    num_args: u32,
    keys: *mut *const c_char,
    arg_type_data: *const c_int,
    in_type_size: *mut u32,
    in_type_data: *mut *const c_int,
    out_type_size: *mut u32,
    out_type_data: *mut *const c_int,
    aux_type_size: *mut u32,
    aux_type_data: *mut *const c_int,
    complete: *mut c_int,
) -> c_int {
    api_call("MXSymbolInferType", || {
        // SAFETY: forwarded API contract.
        unsafe {
            infer_type(
                sym_,
                num_args,
                keys,
                arg_type_data,
                [in_type_size, out_type_size, aux_type_size],
                [in_type_data, out_type_data, aux_type_data],
                complete,
                false,
            )
        }
    })
}

/// [`MXSymbolInferType`] that returns what is known with `*complete` = 1.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn MXSymbolInferTypePartial(
    sym_: SymbolHandle,
    num_args: u32,
    keys: *mut *const c_char,
    arg_type_data: *const c_int,
    in_type_size: *mut u32,
    in_type_data: *mut *const c_int,
    out_type_size: *mut u32,
    out_type_data: *mut *const c_int,
    aux_type_size: *mut u32,
    aux_type_data: *mut *const c_int,
    complete: *mut c_int,
) -> c_int {
    api_call("MXSymbolInferTypePartial", || {
        // SAFETY: forwarded API contract.
        unsafe {
            infer_type(
                sym_,
                num_args,
                keys,
                arg_type_data,
                [in_type_size, out_type_size, aux_type_size],
                [in_type_data, out_type_data, aux_type_data],
                complete,
                true,
            )
        }
    })
}
