//! libnrt-like runtime: loads NEFFs and executes them through the driver ABI only
