"""Layer families (llama.cpp's models.h base classes): one module per mixer, each a builder
`(b, il, x, layer) -> tensor` that graph/trunk.py's registry picks by LayerShape.mixer. Kept free of imports."""
