//! The Neuron device model: memories, engines, DMA, semaphores, notifications, scheduler
