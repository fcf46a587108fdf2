"""Reading an Nsight Systems export: input checks and conversion, the canonical tables every nsys version is
mapped to, and the private cache of those tables."""
