"""device-fit's memory tables of architecture names as they stood at main a9f6c85 (moetools/devicefit/memory/
archsets.py, removed in issue 28): the registry (moetools/arch/) now holds these facts, and
tests/test_arch_registry.py checks it against them name by name. Frozen test data: never edit to follow
the registry."""

# Architectures whose loader sets a sliding window (src/models/*.cpp, load_arch_hparams):
# arch -> (when, built-in period, dense_first, n_swa default or None if the key is required, type).
#   when: "always"; "key>0" (only if attention.sliding_window is present and > 0);
#         "key!=0" (unless the key is present and 0); "array" (the per-layer pattern key is required);
#         "64 blocks" (exaone4.cpp: only a 64-block trunk, EXAONE-4.0-32B, gets sliding-window layers).
#   a fixed n_swa (llama4, smallthinker) overrides the key, as those loaders do.
SWA_RULES = {
    "gpt-oss": ("always", 2, False, None, "standard"),
    "gemma2": ("always", 2, False, 4096, "standard"),
    "gemma3": ("key>0", 6, False, None, "standard"),
    "cohere2": ("always", 4, False, None, "standard"),
    "cohere2moe": ("always", 4, True, None, "standard"),
    "exaone-moe": ("always", 4, False, None, "standard"),
    "exaone4": ("64 blocks", 4, False, 4096, "standard"),
    "muse-glimmer": ("always", 4, False, None, "standard"),
    "olmo2": ("key>0", 4, False, None, "standard"),
    "afmoe": ("key>0", 4, False, None, "standard"),
    "mellum": ("key>0", 4, False, None, "standard"),
    "laguna": ("key>0", 4, True, None, "standard"),
    "plamo3": ("key>0", 8, False, None, "standard"),
    "llama4": ("key!=0", 4, False, 8192, "chunked"),
    "gemma3n": ("always", 5, False, None, "standard"),
    "gemma4": ("array", 0, False, None, "standard"),
    "smallthinker": ("key>0", 4, True, 4096, "standard"),
    "mimo2": ("array", 0, False, None, "standard"),
    "maple": ("array", 0, False, None, "standard"),
    "granite_swa": ("array", 0, False, None, "standard"),
    "step35": ("array", 0, False, None, "standard"),
    "spark2_5": ("array", 0, False, None, "standard"),
    "lfm2": ("key>0", 0, False, None, "standard"),  # every attention layer slides (lfm2.cpp: is_swa = !is_recr)
    "dots3note": ("array", 0, False, None, "standard"),
    "gemma4-assistant": ("array", 0, False, None, "standard"),
}
# Drafts whose every layer reads the target context's KV instead of its own (gemma4-assistant.cpp with
# create_memory's share callback over ctx_other: sliding-window layers the target's last-but-one layer,
# full layers its last). Their caches are listed with the cells they attend to and no bytes: llama.cpp
# allocates them no KV buffer (its size lines count the borrowed layers).
BORROWED_KV_ARCHES = ("gemma4-assistant",)
FIXED_SWA = {"llama4": 8192, "smallthinker": 4096}

# Hybrid models whose recurrent layers are the Kimi Delta Attention ones (head_count_kv 0).
KDA_ARCHES = ("kimi-k3", "kimi-linear", "bailingmoe3")
# Hybrids whose recurrent layers are lightning (linear) attention (minimax-01.cpp): `attention.recurrent_layers`,
# else all but every `full_attention_interval`-th (default 8); state n_embd_s = head_k^2 x n_head (llama_hparams
# n_embd_head_la), no conv state (n_embd_r falls through to the Mamba formula without ssm keys: 0).
LIGHTNING_ARCHES = ("minimax-01",)
# Hybrid models whose recurrent layers are gated delta nets: `attention.recurrent_layers`, else every
# layer but each `full_attention_interval`-th (default 4) of the trunk (src/models/qwen3next.cpp, qwen35moe.cpp, qwen35.cpp,
# qwen4exp.cpp).
GDN_ARCHES = ("qwen3next", "qwen35", "qwen35moe", "qwen4exp")
# Recurrent and hybrid architectures sized from their loaders (src/models/*.cpp load_arch_hparams) and
# llama_model::create_memory's filters: arch -> (state kind, which trunk layers are recurrent, which
# layers attend).
#   recurrent: "all" every trunk layer; "hkv0" head_count_kv 0; "hkv0_ff0" head_count_kv 0 and
#              feed_forward_length 0 (Nemotron-H: the MoE/MLP layers are neither).
#   attention: "none"; "not_recurrent" every other block, NextN included (the hybrid's default filter);
#              "all" every block (Falcon-H1 runs both in each layer); "ff0" not recurrent and
#              feed_forward_length 0 (Nemotron-H).
RECURRENT_RULES = {
    "mamba": ("mamba", "all", "none"),
    "mamba2": ("mamba", "all", "none"),
    "rwkv6": ("rwkv", "all", "none"),
    "rwkv6qwen2": ("rwkv", "all", "none"),
    "rwkv7": ("rwkv", "all", "none"),
    "arwkv7": ("rwkv", "all", "none"),
    "jamba": ("mamba", "hkv0", "not_recurrent"),
    "granitehybrid": ("mamba", "hkv0", "not_recurrent"),
    "plamo2": ("mamba", "hkv0", "not_recurrent"),
    "falcon-h1": ("mamba", "all", "all"),
    "nemotron_h": ("mamba", "hkv0_ff0", "ff0"),
    "nemotron_h_moe": ("mamba", "hkv0_ff0", "ff0"),
    "lfm2": ("shortconv", "hkv0", "not_recurrent"),
    "lfm2moe": ("shortconv", "hkv0", "not_recurrent"),
}
HYBRID_ARCHES = KDA_ARCHES + GDN_ARCHES + LIGHTNING_ARCHES + tuple(arch for arch, rule in RECURRENT_RULES.items() if rule[2] != "none")
# DSA sparse attention: an extra indexer K cache (src/llama-kv-cache-dsa.cpp).
DSA_ARCHES = ("deepseek32", "glm-dsa", "dots3note", "hy_v4", "glm5-next")

# MiniMax Sparse Attention (src/llama-kv-cache-msa.cpp): a second llama_kv_cache over the blocks past
# leading_dense_block_count with one head whose K is indexer.key_length wide and whose V keeps the
# model's value head width (hparams copied, only n_embd_head_k_full replaced), in the cache types.
MSA_ARCHES = ("minimax-m3",)

# Architectures llama.cpp runs whose memory this module does not model: refuse, never guess. Each names
# the memory llama.cpp builds for it that device-fit has no formula for.
UNSUPPORTED = {
    "gemma-embedding": "no KV cache (an embedding model device-fit does not plan)",
    "modern-bert": "no KV cache (an encoder device-fit does not plan)",
}
# llama_model::create_memory gives these no memory at all (encoders, diffusion models): device-fit
# plans autoregressive serving and refuses them.
NO_MEMORY = ("bert", "jina-bert-v2", "jina-bert-v3", "nomic-bert", "nomic-bert-moe", "neo-bert", "eurobert",
             "wavtokenizer-dec", "dream", "llada", "llada-moe", "rnd1")
# Every architecture name llama.cpp 0c1e570 knows (src/llama-arch.cpp LLM_ARCH_NAMES, less clip): any
# other is refused, as llama.cpp's loader refuses it ("unknown model architecture").
KNOWN_ARCHES = frozenset("""
llama llama4 deci falcon grok gpt2 gptj gptneox mpt baichuan starcoder refact bert modern-bert nomic-bert
nomic-bert-moe neo-bert jina-bert-v2 jina-bert-v3 eurobert bloom stablelm qwen qwen2 qwen2moe qwen2vl qwen3
qwen3moe qwen3next qwen3vl qwen3vlmoe qwen35 qwen35moe qwen4exp phi2 phi3 phimoe plamo plamo2 plamo3 codeshell
orion internlm2 minicpm minicpm3 gemma gemma2 gemma3 gemma3n gemma4 gemma4-assistant gemma-embedding starcoder2
mamba mamba2 maple jamba falcon-h1 xverse command-r cohere2 cohere2moe dbrx olmo olmo2 olmoe muse-glimmer
openelm arctic deepseek deepseek2 deepseek2-ocr deepseek32 deepseek4 chatglm glm4 glm4moe glm-dsa bitnet t5
t5encoder jais jais2 nemotron nemotron_h nemotron_h_moe exaone exaone4 exaone-moe rwkv6 rwkv6qwen2 rwkv7 arwkv7
granite granitemoe granitehybrid graniteswitch granite_swa chameleon wavtokenizer-dec plm bailingmoe bailingmoe2
bailingmoe3 dots1 dots3note arcee afmoe laguna ernie4_5 ernie4_5-moe hunyuan-moe hunyuan-dense hunyuan_vl hy_v3
hy_v4 smollm3 gpt-oss lfm2 lfm2moe dream smallthinker llada llada-moe seed_oss grovemoe apertus minimax-01
hrm_text minimax-m2 minimax-m3 cogvlm rnd1 pangu-embedded mistral3 eagle3 dflash mistral4 paddleocr mimo2 step35
spark2_5 llama-embed maincoder kimi-linear kimi-k3 glm5-next talkie mellum nanbeige qwen3tts pockettts
""".split())

# architectures llama_init_from_model runs without flash attention whatever -fa says (llama-context.cpp:
# "flash_attn is not compatible with Grok - forcing off"; grok's softcapped KQ is built outside FA)
FLASH_ATTN_FORCED_OFF = ("grok",)

# llm_arch_supports_rs_rollback (src/llama-arch.cpp): llama_context clamps n_rs_seq to 0 for the others
RS_ROLLBACK_ARCHES = ("kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
                      "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3")

GEMMA3N_KV_LAYERS = 20  # llama_model_gemma3n: n_layer_kv_from_start
