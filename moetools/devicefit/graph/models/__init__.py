"""Bespoke graphs, one module per llama.cpp src/models/<arch>.cpp whose graph the generic layer loop
(graph/trunk.py) does not cover. Kept free of imports."""
