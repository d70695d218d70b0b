"""device-fit's memory model, split along llama.cpp's memory classes (src/llama-kv-cache*.cpp,
llama-memory-recurrent.cpp, llama-memory-hybrid*.cpp). Kept free of imports: import the submodules by
their full dotted path."""
