//! Element types: MXNet's `mshadow::TypeFlag` codes and sizes.

use crate::error::{Error, Result};

/// An element type. The numeric values are MXNet's type codes and part of the C ABI and the file
/// format. Codes 8–11 exist in MXNet's enum but MXNet 1.9.1 refuses to create arrays of them; mxrt
/// accepts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DType {
    F32 = 0,
    F64 = 1,
    F16 = 2,
    U8 = 3,
    I32 = 4,
    I8 = 5,
    I64 = 6,
    Bool = 7,
    I16 = 8,
    U16 = 9,
    U32 = 10,
    U64 = 11,
    BF16 = 12,
}

impl DType {
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::U8,
        DType::I32,
        DType::I8,
        DType::I64,
        DType::Bool,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::BF16,
    ];

    /// Converts a type code; unknown codes are an error with MXNet's wording.
    pub fn from_code(code: i32) -> Result<Self> {
        usize::try_from(code)
            .ok()
            .and_then(|i| DType::ALL.get(i).copied())
            .ok_or_else(|| Error::invalid(format!("Unknown type enum {code}")))
    }
    pub fn code(self) -> i32 {
        self as i32
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }
    /// numpy's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::U8 => "uint8",
            DType::I32 => "int32",
            DType::I8 => "int8",
            DType::I64 => "int64",
            DType::Bool => "bool",
            DType::I16 => "int16",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::BF16 => "bfloat16",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_sizes() {
        for (i, d) in DType::ALL.iter().enumerate() {
            assert_eq!(d.code(), i as i32);
            assert_eq!(DType::from_code(i as i32).unwrap(), *d);
        }
        assert_eq!(DType::F16.size(), 2);
        assert_eq!(DType::I64.size(), 8);
        assert_eq!(
            DType::from_code(13).unwrap_err().message(),
            "Unknown type enum 13"
        );
        assert!(DType::from_code(-1).is_err());
    }
}
