//! Typed addresses: a device address (what DMA descriptors and instructions name), a bus
//! (host physical) address of coherent host memory, and a user-space virtual address.
//!
//! Newtypes in the manner of `vm-memory`'s `GuestAddress`: mixing the three is a type error,
//! arithmetic is checked (`checked_add`, `checked_offset_from`) and the unchecked forms do not
//! exist. The conversions between device and bus addresses need the architecture's host bit.

use crate::arch::Arch;
use std::fmt;

macro_rules! address {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u64);

        impl $name {
            /// The raw value.
            pub const fn raw(self) -> u64 {
                self.0
            }
            /// `self + off`, `None` on overflow.
            pub fn checked_add(self, off: u64) -> Option<Self> {
                self.0.checked_add(off).map(Self)
            }
            /// `self - base`, `None` if `base` lies above `self`.
            pub fn checked_offset_from(self, base: Self) -> Option<u64> {
                self.0.checked_sub(base.0)
            }
            /// `self` rounded up to a multiple of `align` (a power of two), `None` on overflow
            /// or a bad alignment.
            pub fn checked_align_up(self, align: u64) -> Option<Self> {
                if !align.is_power_of_two() {
                    return None;
                }
                self.0.checked_add(align - 1).map(|v| Self(v & !(align - 1)))
            }
            /// The exclusive end of `len` bytes from `self`, `None` on overflow.
            pub fn end(self, len: u64) -> Option<Self> {
                self.checked_add(len)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "(0x{:x})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "0x{:x}", self.0)
            }
        }
    };
}

address!(
    /// An address in the device's address space: HBM, a NeuronCore's TPB window, or host memory
    /// (a bus address with the architecture's host bit set).
    DevAddr
);
address!(
    /// A bus (host physical) address of coherent host memory, without the host bit.
    BusAddr
);
address!(
    /// A virtual address in a user process (ioctl argument pointers, mapping addresses).
    UserAddr
);

impl BusAddr {
    /// The device address the device uses for this host memory (`pci_host_base` ORed in).
    pub const fn to_dev(self, arch: Arch) -> DevAddr {
        DevAddr(self.0 | arch.host_base_bit())
    }
}

impl DevAddr {
    /// Whether this device address names host memory.
    pub const fn is_host(self, arch: Arch) -> bool {
        self.0 & arch.host_base_bit() != 0
    }
    /// The bus address of host memory this device address names, `None` if it names device
    /// memory.
    pub const fn to_bus(self, arch: Arch) -> Option<BusAddr> {
        if self.is_host(arch) {
            Some(BusAddr(self.0 & !arch.host_base_bit()))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_checked() {
        let a = DevAddr(u64::MAX - 1);
        assert_eq!(a.checked_add(1), Some(DevAddr(u64::MAX)));
        assert_eq!(a.checked_add(2), None);
        assert_eq!(
            DevAddr(0x1000).checked_offset_from(DevAddr(0x800)),
            Some(0x800)
        );
        assert_eq!(DevAddr(0x800).checked_offset_from(DevAddr(0x1000)), None);
        assert_eq!(
            UserAddr(0x1001).checked_align_up(0x1000),
            Some(UserAddr(0x2000))
        );
        assert_eq!(
            UserAddr(0x1000).checked_align_up(0x1000),
            Some(UserAddr(0x1000))
        );
        assert_eq!(UserAddr(1).checked_align_up(3), None);
        assert_eq!(UserAddr(u64::MAX).checked_align_up(16), None);
        assert_eq!(format!("{:?}", BusAddr(0x10)), "BusAddr(0x10)");
        assert_eq!(DevAddr(0x10).to_string(), "0x10");
    }

    #[test]
    fn bus_and_device_addresses_convert_through_the_host_bit() {
        for arch in Arch::ALL {
            let bus = BusAddr(0x1234_5000);
            let dev = bus.to_dev(arch);
            assert!(dev.is_host(arch));
            assert_eq!(dev.to_bus(arch), Some(bus));
            assert_eq!(
                DevAddr(0x1234_5000).to_bus(arch),
                None,
                "HBM is not host memory"
            );
        }
    }
}
