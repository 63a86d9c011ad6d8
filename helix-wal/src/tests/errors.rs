//! Every error of spec item 11: typed, no panic, nothing acknowledged damaged.
