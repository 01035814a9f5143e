//! The fake neuron.ko: ioctl dispatch and validation, process table, mem chunks, mmap
