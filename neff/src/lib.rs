//! NEFF container: 1024-byte header, gzip'd tar payload, typed JSON views, .npy
