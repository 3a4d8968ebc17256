//! Checked conversions of raw C arguments. Each returns an `InvalidArgument` error naming the
//! argument instead of dereferencing NULL.

use crate::error::{Error, Result};
use std::ffi::{CStr, c_char};

/// `ptr` as a mutable reference for an out-parameter.
///
/// # Safety
/// A non-NULL `ptr` must be valid for writes of `T` and not aliased for `'a`.
pub(crate) unsafe fn out<'a, T>(ptr: *mut T, name: &str) -> Result<&'a mut T> {
    // SAFETY: the caller promises a non-NULL pointer is valid; NULL is rejected by as_mut.
    unsafe { ptr.as_mut() }.ok_or_else(|| Error::invalid(format!("{name} is NULL")))
}

/// `ptr` as a shared reference.
///
/// # Safety
/// A non-NULL `ptr` must be valid for reads of `T` for `'a`.
pub(crate) unsafe fn reference<'a, T>(ptr: *const T, name: &str) -> Result<&'a T> {
    // SAFETY: the caller promises a non-NULL pointer is valid; NULL is rejected by as_ref.
    unsafe { ptr.as_ref() }.ok_or_else(|| Error::invalid(format!("{name} is NULL")))
}

/// A NUL-terminated string that must be UTF-8.
///
/// # Safety
/// A non-NULL `ptr` must point to a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn c_str<'a>(ptr: *const c_char, name: &str) -> Result<&'a str> {
    // SAFETY: forwarded contract.
    unsafe { c_str_named(ptr, || name.to_string()) }
}

/// [`c_str`] with the argument's name made only for an error.
///
/// # Safety
/// As for [`c_str`].
unsafe fn c_str_named<'a>(ptr: *const c_char, name: impl Fn() -> String) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(Error::invalid(format!("{} is NULL", name())));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str()
        .map_err(|_| Error::invalid(format!("{} is not valid UTF-8", name())))
}

/// Element `i` of the string array `name` (`name[i]` in messages, formatted only on error:
/// this runs once per parameter of every invoke).
///
/// # Safety
/// As for [`c_str`].
pub(crate) unsafe fn c_str_at<'a>(ptr: *const c_char, name: &str, i: usize) -> Result<&'a str> {
    // SAFETY: forwarded contract.
    unsafe { c_str_named(ptr, || format!("{name}[{i}]")) }
}

/// Like [`c_str`], but NULL gives `None`.
///
/// # Safety
/// As for [`c_str`].
pub(crate) unsafe fn opt_c_str<'a>(ptr: *const c_char, name: &str) -> Result<Option<&'a str>> {
    if ptr.is_null() {
        Ok(None)
    } else {
        // SAFETY: forwarded contract.
        unsafe { c_str(ptr, name) }.map(Some)
    }
}

/// A C array of `len` elements; NULL is accepted only when `len` is 0.
///
/// # Safety
/// A non-NULL `ptr` must be valid for reads of `len` elements for `'a`.
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize, name: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::invalid(format!(
            "{name} is NULL but its count is {len}"
        )));
    }
    if len
        .checked_mul(size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Error::invalid(format!("{name}: count {len} is too large")));
    }
    // SAFETY: non-NULL, size fits isize, and the caller promises `len` readable elements.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A signed C count that must not be negative.
pub(crate) fn count(n: i64, name: &str) -> Result<usize> {
    usize::try_from(n).map_err(|_| Error::invalid(format!("{name} must be non-negative, got {n}")))
}

/// A writable C array of `len` elements (NULL only when `len` is 0).
///
/// # Safety
/// A non-NULL `ptr` must be valid for writes of `len` elements and not aliased during the call.
pub(crate) unsafe fn slice_mut<'a, T>(ptr: *mut T, len: usize, name: &str) -> Result<&'a mut [T]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Error::invalid(format!(
            "{name} is NULL but its count is {len}"
        )));
    }
    if len
        .checked_mul(size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Error::invalid(format!("{name}: count {len} is too large")));
    }
    // SAFETY: non-NULL, size fits isize, and the caller promises `len` writable elements.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// Hands C a list that lives for the whole process (the registry's tables): its length to
/// `out_size`, its first element to `out_array` (an empty list gives a dangling, non-NULL
/// pointer, as MXNet's empty vectors do).
///
/// # Safety
/// Non-NULL `out_size` and `out_array` must be valid for writes.
pub(crate) unsafe fn static_list<T, N: TryFrom<usize>>(
    out_size: *mut N,
    out_array: *mut *mut T,
    list: &'static [T],
) -> Result<()> {
    // SAFETY: forwarded contract for both out-parameters.
    let (size, array) = unsafe { (out(out_size, "out_size")?, out(out_array, "out_array")?) };
    *size = N::try_from(list.len())
        .map_err(|_| Error::invalid(format!("{} entries do not fit out_size", list.len())))?;
    // C's pointer is mutable by type only: the caller reads the list
    *array = list.as_ptr().cast_mut();
    Ok(())
}
