//! The real trn2 ("cayman") instruction encoding, decoded from evidence (see docs/isa/cayman.md).
