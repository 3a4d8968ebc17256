//! Devices: MXNet's `Context` (`{dev_type, dev_id}`) with its device-type codes.

use crate::error::{Error, Result};
use std::fmt;

/// MXNet's device types. The numeric values are part of the C ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum DeviceType {
    Cpu = 1,
    Gpu = 2,
    CpuPinned = 3,
    CpuShared = 5,
}

impl DeviceType {
    /// Converts a C `dev_type` code; unknown codes are an error naming the value.
    pub fn from_code(code: i32) -> Result<Self> {
        match code {
            1 => Ok(DeviceType::Cpu),
            2 => Ok(DeviceType::Gpu),
            3 => Ok(DeviceType::CpuPinned),
            5 => Ok(DeviceType::CpuShared),
            _ => Err(Error::invalid(format!(
                "Unimplemented device {code} (known: 1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared)"
            ))),
        }
    }
    pub fn code(self) -> i32 {
        self as i32
    }
    /// The name MXNet prints for the type (`cpu`, `gpu`, `cpu_pinned`, `cpu_shared`).
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Gpu => "gpu",
            DeviceType::CpuPinned => "cpu_pinned",
            DeviceType::CpuShared => "cpu_shared",
        }
    }
}

/// A device: type and id. Ordered by type, then id, as in MXNet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Context {
    pub dev_type: DeviceType,
    pub dev_id: i32,
}

/// Largest device id MXNet accepts (`kMaxDevID`).
pub const MAX_DEV_ID: i32 = 16;

impl Context {
    pub const fn cpu(dev_id: i32) -> Self {
        Context {
            dev_type: DeviceType::Cpu,
            dev_id,
        }
    }
    pub const fn gpu(dev_id: i32) -> Self {
        Context {
            dev_type: DeviceType::Gpu,
            dev_id,
        }
    }
    pub const fn cpu_pinned(dev_id: i32) -> Self {
        Context {
            dev_type: DeviceType::CpuPinned,
            dev_id,
        }
    }
    pub const fn cpu_shared(dev_id: i32) -> Self {
        Context {
            dev_type: DeviceType::CpuShared,
            dev_id,
        }
    }

    /// Builds a context from the C codes, as `Context::Create` does: a negative id becomes 0 for
    /// cpu and cpu_shared; for gpu and cpu_pinned it would mean "the current CUDA device", which
    /// needs CUDA, so it is an error here.
    pub fn from_codes(dev_type: i32, dev_id: i32) -> Result<Self> {
        let dev_type = DeviceType::from_code(dev_type)?;
        let dev_id = if dev_id < 0 {
            match dev_type {
                DeviceType::Cpu | DeviceType::CpuShared => 0,
                DeviceType::Gpu | DeviceType::CpuPinned => {
                    return Err(Error::invalid(format!(
                        "device id {dev_id} for {} means the current CUDA device, which needs GPU support",
                        dev_type.name()
                    )));
                }
            }
        } else {
            dev_id
        };
        Ok(Context { dev_type, dev_id })
    }

    /// True for the host-memory device types (cpu, cpu_pinned, cpu_shared): MXNet's
    /// `dev_mask() == cpu::kDevMask`.
    pub fn is_host(self) -> bool {
        self.dev_type != DeviceType::Gpu
    }
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.dev_type.name(), self.dev_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_reject_unknown() {
        for code in [1, 2, 3, 5] {
            assert_eq!(DeviceType::from_code(code).unwrap().code(), code);
        }
        let err = DeviceType::from_code(4).unwrap_err();
        assert!(err.message().contains("Unimplemented device 4"), "{err}");
    }

    #[test]
    fn negative_ids() {
        assert_eq!(Context::from_codes(1, -3).unwrap(), Context::cpu(0));
        assert!(Context::from_codes(2, -1).is_err());
        assert!(Context::cpu(1) < Context::gpu(0));
    }
}
