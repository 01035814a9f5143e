//! Typed wrappers over the driver ABI: each builds the real argument struct and issues the
//! real command value through the [`DeviceFile`] seam (the runtime's "ndl" layer).
#![allow(unsafe_code)]

use neuron_abi::consts::{MemType, MMAP_BLOCK_TPB};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::udma::UdmaDesc;
use neuron_abi::{DeviceFile, Errno};
use std::sync::Arc;
use zerocopy::{FromZeros, IntoBytes};

/// Issue `cmd` with the argument struct `arg` through any device file.
pub fn ioctl_struct<T: IntoBytes + zerocopy::FromBytes>(
    dev: &dyn DeviceFile,
    cmd: u32,
    arg: &mut T,
) -> Result<(), Errno> {
    // SAFETY: `arg` is the exclusively borrowed argument struct for `cmd`, sized as the ABI
    // expects; any user pointers inside it were set by the caller to live buffers.
    unsafe { dev.ioctl(cmd, arg.as_mut_bytes().as_mut_ptr()) }.map(|_| ())
}

/// A mem chunk as the runtime knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub handle: u64,
    pub pa: u64,
    pub size: u64,
    pub host: bool,
}

/// The driver library: one device, typed calls.
#[derive(Clone)]
pub struct Driver {
    pub dev: Arc<dyn DeviceFile>,
    /// The GpSimd microcode staged after every core reset (`firmware`); none: not staged.
    pub ucode: Option<Arc<crate::firmware::PoolUcode>>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Driver")
    }
}

impl Driver {
    pub fn new(dev: Arc<dyn DeviceFile>) -> Self {
        Driver { dev, ucode: None }
    }

    /// The same, staging `ucode` into every core it resets.
    pub fn with_ucode(dev: Arc<dyn DeviceFile>, ucode: Arc<crate::firmware::PoolUcode>) -> Self {
        Driver {
            dev,
            ucode: Some(ucode),
        }
    }

    fn call<T: IntoBytes + zerocopy::FromBytes>(&self, cmd: u32, arg: &mut T) -> Result<(), Errno> {
        ioctl_struct(&*self.dev, cmd, arg)
    }

    pub fn basic_info(&self) -> Result<DeviceBasicInfo, Errno> {
        let mut a = DeviceBasicInfo::new_zeroed();
        self.call(NEURON_IOCTL_DEVICE_BASIC_INFO, &mut a)?;
        Ok(a)
    }

    pub fn compatible_version(&self) -> Result<CompatibleVersion, Errno> {
        let mut a = CompatibleVersion::new_zeroed();
        self.call(NEURON_IOCTL_COMPATIBLE_VERSION, &mut a)?;
        Ok(a)
    }

    pub fn mem_alloc(
        &self,
        size: u64,
        host: bool,
        nc: u32,
        mem_type: MemType,
    ) -> Result<Chunk, Errno> {
        let mut handle = 0u64;
        let mut a = MemAllocV2MemType {
            size,
            align: 0,
            host_memory: host as u32,
            dram_channel: 0,
            dram_region: 0,
            nc_id: nc,
            mem_type: mem_type.0,
            mem_handle: &mut handle as *mut u64 as u64,
            ..FromZeros::new_zeroed()
        };
        self.call(NEURON_IOCTL_MEM_ALLOC_V2MT, &mut a)?;
        let mut info = MemGetExtendedInfo {
            mem_handle: handle,
            ..FromZeros::new_zeroed()
        };
        self.call(NEURON_IOCTL_MEM_GET_EXTENDED_INFO, &mut info)?;
        Ok(Chunk {
            handle,
            pa: info.pa,
            size: info.size,
            host: info.host_memory != 0,
        })
    }

    pub fn mem_free(&self, handle: u64) -> Result<(), Errno> {
        let mut a = MemFree { mem_handle: handle };
        self.call(NEURON_IOCTL_MEM_FREE, &mut a)
    }

    pub fn copy_to(&self, c: &Chunk, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let mut a = MemBufCopy64 {
            mem_handle: c.handle,
            buffer: data.as_ptr() as u64,
            size: data.len() as u64,
            offset,
            copy_to_mem_handle: 1,
            ..FromZeros::new_zeroed()
        };
        self.call(NEURON_IOCTL_MEM_BUF_COPY64, &mut a)
    }

    pub fn copy_from(&self, c: &Chunk, offset: u64, out: &mut [u8]) -> Result<(), Errno> {
        let mut a = MemBufCopy64 {
            mem_handle: c.handle,
            buffer: out.as_mut_ptr() as u64,
            size: out.len() as u64,
            offset,
            copy_to_mem_handle: 0,
            ..FromZeros::new_zeroed()
        };
        self.call(NEURON_IOCTL_MEM_BUF_COPY64, &mut a)
    }

    pub fn copy_descriptors(
        &self,
        ring: &Chunk,
        descs: &[UdmaDesc],
        queue_type: u32,
    ) -> Result<(), Errno> {
        let bytes = descs.as_bytes();
        let mut a = DmaCopyDescriptors64 {
            mem_handle: ring.handle,
            buffer: bytes.as_ptr() as u64,
            num_descs: descs.len() as u32,
            offset: 0,
            queue_type,
            ..FromZeros::new_zeroed()
        };
        self.call(NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, &mut a)
    }

    pub fn queue_init(
        &self,
        eng: u32,
        qid: u32,
        tx: &Chunk,
        rx: &Chunk,
        ndesc: u32,
    ) -> Result<(), Errno> {
        let mut a = DmaQueueInit {
            eng_id: eng,
            qid,
            tx_desc_count: ndesc,
            rx_desc_count: ndesc,
            tx_handle: tx.handle,
            rx_handle: rx.handle,
            rxc_handle: 0,
            axi_port: 0,
            ..FromZeros::new_zeroed()
        };
        self.call(NEURON_IOCTL_DMA_QUEUE_INIT, &mut a)
    }

    pub fn copy_start(&self, eng: u32, qid: u32, n: u32) -> Result<(), Errno> {
        let mut a = DmaQueueCopyStart {
            eng_id: eng,
            qid,
            tx_desc_count: n,
            rx_desc_count: n,
        };
        self.call(NEURON_IOCTL_DMA_QUEUE_COPY_START, &mut a)
    }

    /// Create a host-memory notification queue; returns (mmap offset, mem handle).
    pub fn nq_init(
        &self,
        nc: u32,
        nq_type: u32,
        engine: u32,
        size: u32,
    ) -> Result<(u64, u64), Errno> {
        let mut a = NotificationsInitV2 {
            nq_dev_id: nc,
            nq_dev_type: 0,
            nq_type,
            engine_index: engine,
            size,
            on_host_memory: 1,
            ..FromZeros::new_zeroed()
        };
        self.call(NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &mut a)?;
        Ok((a.mmap_offset, a.mem_handle))
    }

    /// RESOURCE_MMAP_INFO for a TPB resource: (offset = device address key, size).
    pub fn tpb_resource(&self, nc: u32, resource: u32) -> Result<(u64, u64), Errno> {
        let mut a = ResourceMmapInfo {
            block: MMAP_BLOCK_TPB,
            block_id: nc,
            resource,
            ..FromZeros::new_zeroed()
        };
        self.call(NEURON_IOCTL_RESOURCE_MMAP_INFO, &mut a)?;
        Ok((a.offset, a.size))
    }

    /// Write `data` to device address `dst` through the driver (PROGRAM_ENGINE_NC64).
    pub fn program_engine(&self, nc: u32, dst: u64, data: &[u8]) -> Result<(), Errno> {
        let mut a = ProgramEngineNc64 {
            nc_id: nc,
            _pad0: 0,
            dst,
            buffer: data.as_ptr() as u64,
            size: data.len() as u64,
            offset: 0,
        };
        self.call(NEURON_IOCTL_PROGRAM_ENGINE_NC64, &mut a)
    }

    pub fn sem_write(&self, nc: u32, index: u32, value: u32) -> Result<(), Errno> {
        let mut a = Semaphore {
            nc_id: nc,
            semaphore_index: index,
            value,
        };
        self.call(NEURON_IOCTL_SEMAPHORE_WRITE, &mut a)
    }

    /// PRINTK: write `msg` (at most 511 bytes, truncated at a character boundary) to the
    /// kernel log, as the runtime does for `NEURON_HW_ERR=` lines.
    pub fn printk(&self, msg: &str) -> Result<(), Errno> {
        let mut end = msg.len().min(511);
        while !msg.is_char_boundary(end) {
            end -= 1;
        }
        let mut buf = msg.as_bytes()[..end].to_vec();
        buf.push(0);
        let mut a = Printk {
            buffer: buf.as_ptr() as u64,
            size: buf.len() as u32,
            action: 0,
        };
        self.call(NEURON_IOCTL_PRINTK, &mut a)
    }

    pub fn sem_increment(&self, nc: u32, index: u32, value: u32) -> Result<(), Errno> {
        let mut a = Semaphore {
            nc_id: nc,
            semaphore_index: index,
            value,
        };
        self.call(NEURON_IOCTL_SEMAPHORE_INCREMENT, &mut a)
    }

    pub fn sem_read(&self, nc: u32, index: u32) -> Result<u32, Errno> {
        let mut a = Semaphore {
            nc_id: nc,
            semaphore_index: index,
            value: 0,
        };
        self.call(NEURON_IOCTL_SEMAPHORE_READ, &mut a)?;
        Ok(a.value)
    }

    pub fn nc_reset(&self, nc_map: u32) -> Result<(), Errno> {
        let mut a = DeviceReset {
            nc_map,
            request_id: 0,
        };
        self.call(NEURON_IOCTL_NC_RESET, &mut a)?;
        let mut r = DeviceReady {
            request_id: a.request_id,
            result: 0,
        };
        self.call(NEURON_IOCTL_NC_RESET_READY, &mut r)?;
        if r.result != 0 {
            return Err(Errno::EIO);
        }
        // A reset core has lost its GpSimd microcode: ship it again before anything runs.
        if let Some(u) = &self.ucode {
            for nc in (0..32).filter(|nc| nc_map & (1 << nc) != 0) {
                u.stage(self, nc)?;
            }
        }
        Ok(())
    }
}
