//! The operator registry's C functions (MXNet 1.9.1): listing op names, op handles and their
//! argument information, the data-iterator creators' table, the global-function list of MXNet's
//! FFI. Imperative invoke is in `imperative.rs`, custom operator registration in `custom_op.rs`,
//! the data iterators in `data_iter.rs`.
//!
//! Op and data-iterator creator handles point into a table built once (`CTable`) and never
//! freed, so they stay valid for the life of the process, as MXNet's do; the package writes them
//! into generated code. A pointer that is not one of them is refused.

use super::args;
use super::error::api_call;
use crate::error::{Error, Result};
use crate::operator::registry::{ArgInfo, OpId, Registry};
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::OnceLock;

/// An op (`nnvm::Op*` in MXNet): from `NNGetOpHandle`, used by `MXSymbolGetAtomicSymbolInfo` and
/// `MXImperativeInvoke`.
pub type OpHandle = *mut c_void;
/// MXNet's name for an op handle in the symbol and imperative functions.
pub type AtomicSymbolCreator = *mut c_void;
/// A legacy NDArray function (`MXListFunctions`; mxrt lists none).
pub type FunctionHandle = *const c_void;
/// A global function of MXNet's FFI (`MXNetFuncGetGlobal`; mxrt has none).
pub type MXNetFunctionHandle = *mut c_void;
/// MXNet's `struct MXCallbackList`, through which a custom operator hands its callbacks (opaque
/// in the header, declared as `struct MXCallbackList`; `custom_op.rs` has its layout).
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
pub(super) struct CEntry {
    pub(super) name: CString,
    description: CString,
    key_var_num_args: CString,
    args: CArgs,
}

/// The registry's strings for C, built on first use and never freed.
pub(super) struct CTable {
    /// Every listed name, in MXNet's order (`MXListAllOpNames`).
    _names: Vec<CString>,
    name_ptrs: Vec<*const c_char>,
    /// Indexed by `OpId`; an op handle points to its entry.
    ops: Vec<CEntry>,
    pub(super) iters: Vec<CEntry>,
    pub(super) iter_ptrs: Vec<*mut c_void>,
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

pub(super) fn table() -> &'static CTable {
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
pub(super) fn entry_index(entries: &[CEntry], ptr: *const c_void) -> Option<usize> {
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

/// Every op's handle, in the table's order (`MXSymbolListAtomicSymbolCreators`).
pub(crate) fn creators() -> &'static [AtomicSymbolCreator] {
    struct Creators(Vec<AtomicSymbolCreator>);
    // SAFETY: the pointers point into the never-freed table and are only compared or read.
    unsafe impl Send for Creators {}
    // SAFETY: as above.
    unsafe impl Sync for Creators {}
    static LIST: OnceLock<Creators> = OnceLock::new();
    &LIST
        .get_or_init(|| {
            Creators(
                table()
                    .ops
                    .iter()
                    .map(|e| e as *const CEntry as AtomicSymbolCreator)
                    .collect(),
            )
        })
        .0
}

/// The name of op `id` as a C string that lives for the process.
pub(crate) fn op_name_ptr(id: OpId) -> *const c_char {
    table().ops[id.0 as usize].name.as_ptr()
}

/// Writes `entry`'s strings to the out-parameters that are not NULL.
///
/// # Safety
/// Each non-NULL pointer is valid for a write of its type.
#[allow(clippy::too_many_arguments)] // MXNet's out-parameters
pub(super) unsafe fn report(
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
        unsafe { args::static_list(out_size, out_array, &table().name_ptrs) }
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
        unsafe { args::static_list(out_size, out_array, &[]) }
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
        unsafe { args::static_list(out_size, out_array, &[]) }
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
