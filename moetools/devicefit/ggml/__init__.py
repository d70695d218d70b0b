"""ggml's runtime as device-fit replays it: the allocator (ggml-alloc.c), its compiled form, the
backend scheduler (ggml-backend.cpp) and the fused split path. Names no architecture; see README.md
for the order in which a change to ggml is carried over. Kept free of imports (submodules are imported
by their full dotted path)."""
