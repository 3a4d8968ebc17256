//! The operator registry's C functions (MXNet 1.9.1): listing op names, op handles and their
//! argument information, the data-iterator list, the global-function list of MXNet's FFI, custom
//! op registration. Imperative invoke is in `imperative.rs`.
//!
//! Op and data-iterator handles point into a table built once (`CTable`) and never freed, so they
//! stay valid for the life of the process, as MXNet's do; the package writes them into generated
//! code. A pointer that is not one of them is refused.

use super::args;
use super::error::api_call;
use crate::error::{Error, Result};
use crate::operator::registry::{ArgInfo, OpId, Registry};
use parking_lot::Mutex;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::OnceLock;

/// An op (`nnvm::Op*` in MXNet): from `NNGetOpHandle`, used by `MXSymbolGetAtomicSymbolInfo` and
/// `MXImperativeInvoke`.
pub type OpHandle = *mut c_void;
/// MXNet's name for an op handle in the symbol and imperative functions.
pub type AtomicSymbolCreator = *mut c_void;
/// A data iterator's creator (from `MXListDataIters`).
pub type DataIterCreator = *mut c_void;
/// A legacy NDArray function (`MXListFunctions`; mxrt lists none).
pub type FunctionHandle = *const c_void;
/// A global function of MXNet's FFI (`MXNetFuncGetGlobal`; mxrt has none).
pub type MXNetFunctionHandle = *mut c_void;
/// A data iterator (`MXDataIterCreateIter`; mxrt creates none yet).
pub type DataIterHandle = *mut c_void;
/// MXNet's `struct MXCallbackList`, through which a custom operator hands its callbacks (opaque
/// here, declared as `struct MXCallbackList`: mxrt only stores the creator).
pub struct MXCallbackList {
    _private: [u8; 0],
}
/// A custom operator's property creator (`MXCustomOpRegister`), as MXNet declares it.
pub type CustomOpPropCreator = Option<
    unsafe extern "C" fn(
        *const c_char,
        c_int,
        *mut *const c_char,
        *mut *const c_char,
        *mut MXCallbackList,
    ) -> c_int,
>;

/// Argument information as NUL-terminated strings and the pointer arrays C reads.
struct CArgs {
    _strings: Vec<CString>,
    names: Vec<*const c_char>,
    types: Vec<*const c_char>,
    descriptions: Vec<*const c_char>,
}

impl CArgs {
    fn new(args: &[ArgInfo]) -> Self {
        let mut strings = Vec::with_capacity(args.len() * 3);
        let (mut names, mut types, mut descriptions) = (vec![], vec![], vec![]);
        for a in args {
            for (s, list) in [
                (&a.name, &mut names),
                (&a.type_info, &mut types),
                (&a.description, &mut descriptions),
            ] {
                let c = c_string(s);
                // the CString's buffer is on the heap: moving it into `strings` keeps the pointer
                list.push(c.as_ptr());
                strings.push(c);
            }
        }
        CArgs {
            _strings: strings,
            names,
            types,
            descriptions,
        }
    }
}

/// One op or data iterator as C sees it.
struct CEntry {
    name: CString,
    description: CString,
    key_var_num_args: CString,
    args: CArgs,
}

/// The registry's strings for C, built on first use and never freed.
struct CTable {
    /// Every listed name, in MXNet's order (`MXListAllOpNames`).
    _names: Vec<CString>,
    name_ptrs: Vec<*const c_char>,
    /// Indexed by `OpId`; an op handle points to its entry.
    ops: Vec<CEntry>,
    iters: Vec<CEntry>,
    iter_ptrs: Vec<DataIterCreator>,
}

// SAFETY: the raw pointers point into the table's own strings and entries, which are never
// mutated or freed after the table is built; sharing them between threads only shares reads.
unsafe impl Send for CTable {}
// SAFETY: as above.
unsafe impl Sync for CTable {}

/// `s` as a C string (MXNet's texts hold no NUL; one would end the string there).
fn c_string(s: &str) -> CString {
    let end = s.find('\0').unwrap_or(s.len());
    CString::new(&s[..end]).expect("cut at the first NUL")
}

fn table() -> &'static CTable {
    static TABLE: OnceLock<CTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let r = Registry::global();
        let names: Vec<CString> = r.names().iter().map(|(n, _)| c_string(n)).collect();
        let name_ptrs = names.iter().map(|c| c.as_ptr()).collect();
        let ops = (0..r.op_count())
            .map(|i| {
                let op = r.op(OpId(i as u32));
                CEntry {
                    name: c_string(&op.name),
                    description: c_string(&op.description),
                    key_var_num_args: c_string(&op.key_var_num_args),
                    args: CArgs::new(&op.arguments),
                }
            })
            .collect();
        let iters: Vec<CEntry> = r
            .data_iters()
            .iter()
            .map(|it| CEntry {
                name: c_string(&it.name),
                description: c_string(&it.description),
                key_var_num_args: c_string(""),
                args: CArgs::new(&it.arguments),
            })
            .collect();
        let mut t = CTable {
            _names: names,
            name_ptrs,
            ops,
            iters,
            iter_ptrs: Vec::new(),
        };
        t.iter_ptrs = t
            .iters
            .iter()
            .map(|e| e as *const CEntry as *mut c_void)
            .collect();
        t
    })
}

/// The index of the entry `ptr` points to in `entries`, if it points to one.
fn entry_index(entries: &[CEntry], ptr: *const c_void) -> Option<usize> {
    let size = std::mem::size_of::<CEntry>();
    let offset = (ptr as usize).checked_sub(entries.as_ptr() as usize)?;
    (offset % size == 0 && offset / size < entries.len()).then_some(offset / size)
}

/// The op behind an op handle.
pub(crate) fn op_arg(handle: *const c_void, name: &str) -> Result<OpId> {
    if handle.is_null() {
        return Err(Error::invalid(format!("{name} is NULL")));
    }
    entry_index(&table().ops, handle)
        .map(|i| OpId(i as u32))
        .ok_or_else(|| {
            Error::invalid(format!(
                "{name} ({handle:p}) is not an operator handle (get one from NNGetOpHandle)"
            ))
        })
}

/// Writes `entry`'s strings to the out-parameters that are not NULL.
///
/// # Safety
/// Each non-NULL pointer is valid for a write of its type.
#[allow(clippy::too_many_arguments)] // MXNet's out-parameters
unsafe fn report(
    entry: &'static CEntry,
    name: *mut *const c_char,
    description: *mut *const c_char,
    num_args: *mut u32,
    arg_names: *mut *mut *const c_char,
    arg_types: *mut *mut *const c_char,
    arg_descriptions: *mut *mut *const c_char,
    key_var_num_args: *mut *const c_char,
) {
    let a = &entry.args;
    // SAFETY: the caller's contract; every value points into the never-freed table.
    unsafe {
        put(name, entry.name.as_ptr());
        put(description, entry.description.as_ptr());
        put(num_args, a.names.len() as u32);
        // C's `const char **` is mutable by type only: nobody writes through it
        put(arg_names, a.names.as_ptr().cast_mut());
        put(arg_types, a.types.as_ptr().cast_mut());
        put(arg_descriptions, a.descriptions.as_ptr().cast_mut());
        put(key_var_num_args, entry.key_var_num_args.as_ptr());
    }
}

/// Writes `value` to `out` unless it is NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: per the contract.
        unsafe { out.write(value) };
    }
}

/// Lists every operator name MXNet 1.9.1 has (aliases included), 1,167 names, in a table that
/// stays valid for the life of the process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXListAllOpNames(
    out_size: *mut u32,
    out_array: *mut *mut *const c_char,
) -> c_int {
    api_call("MXListAllOpNames", || {
        // SAFETY: API contract: out-parameters.
        let (size, array) = unsafe {
            (
                args::out(out_size, "out_size")?,
                args::out(out_array, "out_array")?,
            )
        };
        let t = table();
        *size = t.name_ptrs.len() as u32;
        *array = t.name_ptrs.as_ptr().cast_mut();
        Ok(())
    })
}

/// Writes the handle of the operator `op_name` (an alias gives its op's handle). Handles stay
/// valid for the life of the process. An unknown name is an error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn NNGetOpHandle(op_name: *const c_char, op_out: *mut OpHandle) -> c_int {
    api_call("NNGetOpHandle", || {
        // SAFETY: API contract: a C string and an out-parameter.
        let (name, out) = unsafe {
            (
                args::c_str(op_name, "op_name")?,
                args::out(op_out, "op_out")?,
            )
        };
        let id = Registry::global().lookup(name).ok_or_else(|| {
            Error::invalid(format!(
                "op_name: no operator named '{name}' (MXListAllOpNames lists them)"
            ))
        })?;
        *out = &table().ops[id.0 as usize] as *const CEntry as OpHandle;
        Ok(())
    })
}

/// Describes an operator: its name, description, arguments (names, type strings and
/// descriptions as MXNet writes them), the argument that counts variable inputs (or "") and its
/// return type (always NULL, as in MXNet). Strings stay valid for the life of the process; NULL
/// out-parameters are skipped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSymbolGetAtomicSymbolInfo(
    creator: AtomicSymbolCreator,
    name: *mut *const c_char,
    description: *mut *const c_char,
    num_args: *mut u32,
    arg_names: *mut *mut *const c_char,
    arg_type_infos: *mut *mut *const c_char,
    arg_descriptions: *mut *mut *const c_char,
    key_var_num_args: *mut *const c_char,
    return_type: *mut *const c_char,
) -> c_int {
    api_call("MXSymbolGetAtomicSymbolInfo", || {
        let id = op_arg(creator, "creator")?;
        let entry = &table().ops[id.0 as usize];
        // SAFETY: API contract: each out-parameter is NULL or writable.
        unsafe {
            report(
                entry,
                name,
                description,
                num_args,
                arg_names,
                arg_type_infos,
                arg_descriptions,
                key_var_num_args,
            );
            put(return_type, std::ptr::null());
        }
        Ok(())
    })
}

/// Lists MXNet's legacy NDArray functions: mxrt has none (the package uses operators instead).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXListFunctions(
    out_size: *mut u32,
    out_array: *mut *mut FunctionHandle,
) -> c_int {
    api_call("MXListFunctions", || {
        // SAFETY: API contract: out-parameters.
        let (size, array) = unsafe {
            (
                args::out(out_size, "out_size")?,
                args::out(out_array, "out_array")?,
            )
        };
        *size = 0;
        *array = std::ptr::NonNull::dangling().as_ptr();
        Ok(())
    })
}

/// Lists the global functions of MXNet's FFI (which back `mx.np`): mxrt has none yet, so the
/// package imports without `mx.np` functions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNetFuncListGlobalNames(
    out_size: *mut c_int,
    out_array: *mut *mut *const c_char,
) -> c_int {
    api_call("MXNetFuncListGlobalNames", || {
        // SAFETY: API contract: out-parameters.
        let (size, array) = unsafe {
            (
                args::out(out_size, "out_size")?,
                args::out(out_array, "out_array")?,
            )
        };
        *size = 0;
        *array = std::ptr::NonNull::dangling().as_ptr();
        Ok(())
    })
}

/// Looks up a global function of MXNet's FFI by name: an error, since mxrt lists none.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNetFuncGetGlobal(
    name: *const c_char,
    out: *mut MXNetFunctionHandle,
) -> c_int {
    api_call("MXNetFuncGetGlobal", || {
        // SAFETY: API contract: a C string and an out-parameter.
        let (name, _) = unsafe { (args::c_str(name, "name")?, args::out(out, "out")?) };
        Err(Error::not_supported(format!(
            "name: no global function '{name}': mxrt does not implement MXNet's FFI functions \
             (mx.np, mx.npx) yet"
        )))
    })
}

/// Lists the data iterators MXNet 1.9.1 has (CSVIter, MNISTIter, ImageRecordIter, ...); the
/// handles stay valid for the life of the process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXListDataIters(
    out_size: *mut u32,
    out_array: *mut *mut DataIterCreator,
) -> c_int {
    api_call("MXListDataIters", || {
        // SAFETY: API contract: out-parameters.
        let (size, array) = unsafe {
            (
                args::out(out_size, "out_size")?,
                args::out(out_array, "out_array")?,
            )
        };
        let t = table();
        *size = t.iter_ptrs.len() as u32;
        *array = t.iter_ptrs.as_ptr().cast_mut();
        Ok(())
    })
}

fn iter_arg(creator: DataIterCreator) -> Result<&'static CEntry> {
    if creator.is_null() {
        return Err(Error::invalid("creator is NULL"));
    }
    let t = table();
    entry_index(&t.iters, creator)
        .map(|i| &t.iters[i])
        .ok_or_else(|| {
            Error::invalid(format!(
                "creator ({creator:p}) is not a data iterator handle (get one from MXListDataIters)"
            ))
        })
}

/// Describes a data iterator: name, description and arguments, as MXNet reports them. NULL
/// out-parameters are skipped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterGetIterInfo(
    creator: DataIterCreator,
    name: *mut *const c_char,
    description: *mut *const c_char,
    num_args: *mut u32,
    arg_names: *mut *mut *const c_char,
    arg_type_infos: *mut *mut *const c_char,
    arg_descriptions: *mut *mut *const c_char,
) -> c_int {
    api_call("MXDataIterGetIterInfo", || {
        let entry = iter_arg(creator)?;
        // SAFETY: API contract: each out-parameter is NULL or writable.
        unsafe {
            report(
                entry,
                name,
                description,
                num_args,
                arg_names,
                arg_type_infos,
                arg_descriptions,
                std::ptr::null_mut(),
            )
        };
        Ok(())
    })
}

/// Creates a data iterator: not built yet in mxrt, so an error naming the iterator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterCreateIter(
    handle: DataIterCreator,
    num_param: u32,
    keys: *mut *const c_char,
    vals: *mut *const c_char,
    out: *mut DataIterHandle,
) -> c_int {
    api_call("MXDataIterCreateIter", || {
        let entry = iter_arg(handle)?;
        let _ = (num_param, keys, vals);
        // SAFETY: API contract: out-parameter.
        unsafe { args::out(out, "out")? };
        Err(Error::not_supported(format!(
            "data iterator {} is not implemented by mxrt yet",
            entry.name.to_string_lossy()
        )))
    })
}

/// Custom operators registered from Python (`mx.operator.register`), by name.
static CUSTOM_OPS: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

/// Registers a custom operator's property creator under `op_type` (MXNet 1.9.1). The
/// registration is kept; running a custom operator (`Custom`) is not implemented yet and fails
/// when invoked.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXCustomOpRegister(
    op_type: *const c_char,
    creator: CustomOpPropCreator,
) -> c_int {
    api_call("MXCustomOpRegister", || {
        // SAFETY: API contract: a C string.
        let name = unsafe { args::c_str(op_type, "op_type")? };
        let creator = creator.ok_or_else(|| Error::invalid("creator is NULL"))?;
        let mut ops = CUSTOM_OPS.lock();
        ops.retain(|(n, _)| n != name);
        ops.push((name.to_owned(), creator as usize));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // builds the C op table from the 700 KB JSON table: hours under Miri
    fn foreign_pointers_are_not_op_handles() {
        let t = table();
        let first = &t.ops[0] as *const CEntry as *const c_void;
        assert_eq!(op_arg(first, "h").unwrap(), OpId(0));
        let inside = (first as usize + 8) as *const c_void;
        assert!(
            op_arg(inside, "h").is_err(),
            "a pointer into an entry is not a handle"
        );
        let past = t.ops.as_ptr_range().end as *const c_void;
        assert!(op_arg(past, "h").is_err());
        let iter = t.iter_ptrs[0];
        assert!(op_arg(iter, "h").is_err(), "an iterator is not an op");
    }
}
