"""Full-size presets (header-only, sparse), `tiny(arch)` and `python -m moetools.synth`."""

import os

from moetools.synth.families.deepseek import deepseek2, deepseek32
from moetools.synth.families.gemma import gemma3n, gemma4
from moetools.synth.families.glm import glm4moe
from moetools.synth.families.kimi import kimi_k3
from moetools.synth.families.llama import llama_moe
from moetools.synth.families.minimax import minimax_01, minimax_m2
from moetools.synth.families.other import gpt_oss
from moetools.synth.families.qwen import qwen35moe, qwen3moe
from moetools.synth.families.ssm import nemotron_h_moe
from moetools.synth.spec import F16, IQ2_XS, IQ3_XXS, MXFP4, Q4_0, Q4_K, Q6_K, Q8_0, Types, more_bits_blocks
from moetools.synth.writer import write_model
from moetools.synth.families import llama as _llama
from moetools.synth.families import qwen as _qwen
from moetools.synth.families import deepseek as _deepseek
from moetools.synth.families import kimi as _kimi
from moetools.synth.families import glm as _glm
from moetools.synth.families import minimax as _minimax
from moetools.synth.families import gemma as _gemma
from moetools.synth.families import ssm as _ssm
from moetools.synth.families import rwkv as _rwkv
from moetools.synth.families import other as _other


# every family's tiny builders, by architecture name (and the tests' aliases: mixtral, dense, lfm2-swa)
BUILDERS = {}
for _family in (_llama, _qwen, _deepseek, _kimi, _glm, _minimax, _gemma, _ssm, _rwkv, _other):
    BUILDERS.update(_family.BUILDERS)


# Full-size presets (header-only, sparse). Types are those of common community quantizations.
PRESETS = {
    "kimi-k3": lambda: kimi_k3(
        Types(expert=IQ2_XS, expert_down=IQ3_XXS, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="Kimi-K3 (synthetic, header-faithful)", n_layer=93, n_embd=7168, n_head=32, kda_head=128,
        n_ff=18432, n_ff_exp=2048, latent=4096, n_expert=896, top_k=16, q_lora=1536, kv_lora=512, rope=64,
        qk_nope=128, v_head=128, vocab=163840, merges=163328, ctx=262144, file_type=17),
    "kimi-k2": lambda: deepseek2(
        Types(expert=IQ2_XS, expert_down=IQ3_XXS, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="Kimi-K2 (synthetic)", n_layer=61, n_embd=7168, n_head=64, n_ff=18432, n_ff_exp=2048,
        n_expert=384, top_k=8, n_dense=1, q_lora=1536, kv_lora=512, rope=64, qk_nope=128, v_head=128,
        vocab=163840, merges=163328, ctx=131072, file_type=17),
    "deepseek-v3": lambda: deepseek2(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="DeepSeek-V3 (synthetic)", n_layer=61, n_embd=7168, n_head=128, n_ff=18432, n_ff_exp=2048,
        n_expert=256, top_k=8, n_dense=3, q_lora=1536, kv_lora=512, rope=64, qk_nope=128, v_head=128,
        vocab=129280, ctx=163840, file_type=15),
    "qwen3-235b": lambda: qwen3moe(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="Qwen3-235B-A22B (synthetic)", n_layer=94, n_embd=4096, n_head=64, n_head_kv=4, head=128,
        n_ff=12288, n_ff_exp=1536, n_expert=128, top_k=8, vocab=151936, ctx=40960, file_type=15),
    # The model of ../shared/traces/qwen.route.csv (Qwen3-30B-A3B Q4_K_M): its preamble's expert bytes
    # (3,059,712 with a Q6_K down, 2,654,208 with Q4_K) are this preset's, block by block.
    "qwen3-30b-a3b": lambda: qwen3moe(
        Types(expert=Q4_K, expert_down=Q6_K, expert_down_blocks=more_bits_blocks(48), resident=Q4_K, embed=Q4_K,
              output=Q6_K),
        name="Qwen3-30B-A3B (synthetic)", n_layer=48, n_embd=2048, n_head=32, n_head_kv=4, head=128,
        n_ff=6144, n_ff_exp=768, n_expert=128, top_k=8, vocab=151936, ctx=40960, file_type=15),
    "gpt-oss-120b": lambda: gpt_oss(
        Types(expert=MXFP4, resident=Q8_0, embed=Q8_0, output=Q8_0),
        name="gpt-oss-120b (synthetic)", n_layer=36, n_embd=2880, n_head=64, n_head_kv=8, head=64,
        n_ff_exp=2880, n_expert=128, top_k=4, swa=128, vocab=201088, ctx=131072, file_type=38),
    # Qwen/Qwen3.5-35B-A3B and Qwen/Qwen3-Next-80B-A3B-Instruct config.json: 2048 wide, 16 query heads and
    # 2 KV heads of 256 (gated queries), 16 key / 32 value linear-attention heads of 128, conv 4, a
    # full-attention layer every 4th, 512-wide experts and shared expert, rotary 25% of the head.
    # Plus one NextN/MTP block (re-read 2026-12-01: Qwen3.5 text configs carry mtp_num_hidden_layers 1;
    # Qwen3-Next ships mtp.* tensors; llama.cpp's conversion/qwen.py _QwenMtpMixin exports that block and
    # nextn_predict_layers unless --no-mtp), as a GGUF converted at 0c1e57098 has it.
    "qwen3.5-35b-a3b": lambda: qwen35moe(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K), name="Qwen3.5-35B-A3B (synthetic)",
        arch="qwen35moe", n_layer=40, n_embd=2048, n_head=16, n_head_kv=2, head=256, rope=64, n_ff_exp=512,
        n_ff_shexp=512, n_expert=256, top_k=8, k_heads=16, v_heads=32, state=128, nextn=1, vocab=248320,
        ctx=262144, file_type=15),
    "qwen3-next-80b-a3b": lambda: qwen35moe(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K), name="Qwen3-Next-80B-A3B (synthetic)",
        arch="qwen3next", n_layer=48, n_embd=2048, n_head=16, n_head_kv=2, head=256, rope=64, n_ff_exp=512,
        n_ff_shexp=512, n_expert=512, top_k=10, k_heads=16, v_heads=32, state=128, nextn=1, vocab=151936,
        ctx=262144, file_type=15),
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B (Megatron-Bridge Nemotron3NanoProvider / its config.json):
    # 52 blocks "MEMEM*EMEMEM*...", 2688 wide, 32 query / 2 KV heads of 128, Mamba-2 64 heads of 64,
    # state 128, 8 groups, conv 4, 128 experts of 1856 (top-6) plus a 3712-wide shared expert.
    # Re-read 2026-12-01 from NVIDIA-NeMo Megatron-Bridge models/nemotronh/nemotron_h_provider.py
    # (Nemotron3NanoProvider over NemotronHModelProvider: mamba_num_groups 8, mamba_head_dim 64,
    # num_query_groups 2, moe_router_topk_scaling_factor 2.5, moe_router_num_groups 1): all as above;
    # one router group, which llama.cpp's conversion/nemotron.py writes as expert_group_count.
    "nemotron-3-nano-30b-a3b": lambda: nemotron_h_moe(
        Types(expert=Q4_0, resident=Q8_0, embed=Q8_0, output=Q8_0), name="Nemotron-3-Nano-30B-A3B (synthetic)",
        pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", n_embd=2688, n_head=32, n_head_kv=2,
        head=128, n_ff_exp=1856, n_ff_shexp=3712, n_expert=128, top_k=6, conv=4, ssm_heads=64, ssm_head=64,
        state=128, groups=8, expert_groups=1, vocab=131072, ctx=262144, file_type=15),
    # deepseek-ai/DeepSeek-V3.2 config.json: DeepSeek-V3's widths, an indexer of 64 heads of 128 picking
    # 2048 tokens, one NextN/MTP block (62 blocks in the GGUF). Re-read 2026-12-01 from copies of
    # DeepseekV32ForCausalLM's config.json in public repos (a Rust test fixture `deepseek_v32_config`, a
    # DSA_MODEL_DIMS table): as above, plus n_group 8 / topk_group 4 (grouped routing), which
    # llama.cpp's converter writes as expert_group_count / expert_group_used_count: they were missing.
    "deepseek-v3.2": lambda: deepseek32(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K),
        name="DeepSeek-V3.2 (synthetic)", n_layer=61, n_embd=7168, n_head=128, n_ff=18432, n_ff_exp=2048,
        n_expert=256, top_k=8, n_dense=3, q_lora=1536, kv_lora=512, rope=64, qk_nope=128, v_head=128,
        idx_heads=64, idx_head=128, idx_top_k=2048, nextn=1, expert_groups=8, expert_groups_used=4, vocab=129280,
        ctx=163840, file_type=15),
    # zai-org/GLM-4.5-Air config.json: 46 layers + 1 NextN block, 4096 wide, 96 query / 8 KV heads of 128
    # (half rotary, q/k/v biases), one dense block of 10944, 128 experts of 1408 (top-8) + 1 shared.
    # Rows of 1408/704 values (2688 for Nemotron) do not fill Q4_K's 256-value blocks: those are Q8_0/Q4_0.
    # Re-read 2026-12-01 from slime's scripts/models/glm4.5-106B-A12B.sh (Megatron args of the same
    # checkpoint: 1 dense + 45 MoE layers, 96 heads / 8 query groups of 128, rotary 0.5, q/k/v biases, no
    # q/k norm, ffn 10944, experts and shared expert 1408, top-8 of 128, vocab 151552, rope 1e6): all as
    # above; config.json's n_group 1 / topk_group 1 are written as llama.cpp's converter does.
    "glm-4.5-air": lambda: glm4moe(
        Types(expert=Q4_K, expert_down=Q8_0, resident=Q8_0, embed=Q4_K, output=Q6_K), name="GLM-4.5-Air (synthetic)",
        n_layer=46, nextn=1, n_embd=4096, n_head=96, n_head_kv=8, head=128, n_ff=10944, n_ff_exp=1408,
        n_expert=128, top_k=8, n_shared=1, n_dense=1, expert_groups=1, expert_groups_used=1, vocab=151552,
        ctx=131072, file_type=15),
    # MiniMaxAI/MiniMax-M2 config.json: 62 layers, 3072 wide, 48 query / 8 KV heads of 128 (64 rotary),
    # 256 experts of 1536 (top-8), no shared expert. Re-read 2026-12-01 from copies of its config.json in
    # public repos (MiniMaxM2ForCausalLM: vocab 200064, max_position_embeddings 196608, use_qk_norm
    # per_layer, no n_group): all as above. Its 3 MTP modules are not converted by llama.cpp
    # (conversion/minimax.py keeps no mtp tensors for the text model), so the preset has none.
    "minimax-m2": lambda: minimax_m2(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K), name="MiniMax-M2 (synthetic)",
        n_layer=62, n_embd=3072, n_head=48, n_head_kv=8, head=128, rope=64, n_ff_exp=1536, n_expert=256,
        top_k=8, vocab=200064, ctx=196608, file_type=15),
    # MiniMaxAI/MiniMax-Text-01 config.json: 80 layers, 6144 wide, 64 query / 8 KV heads of 128
    # (rotary_dim 64), attn_type_list: seven lightning-attention layers then one softmax layer, 32 experts
    # of 9216 (top-2), vocab 200064, 10,240,000-token context; llama.cpp's conversion writes the layernorm
    # alphas as residual_scale. Re-read 2026-12-02 from copies of MiniMax-M1's config.json in public repos
    # (the same 456B layout: MiniMaxM1ForCausalLM, attn_type_list [0]*7+[1] x 10, rotary_dim 64,
    # shared_intermediate_size 0) and transformers' MiniMax-VL-01 test of the legacy Text-01 text config.
    "minimax-text-01": lambda: minimax_01(
        Types(expert=Q4_K, resident=Q8_0, embed=Q4_K, output=Q6_K), name="MiniMax-Text-01 (synthetic)",
        n_layer=80, n_embd=6144, n_head=64, n_head_kv=8, head=128, n_ff=9216, n_expert=32, top_k=2,
        vocab=200064, ctx=10240000, file_type=15),
    # google/gemma-4-26B-A4B config.json (values as cross-checked in public GGUF readers): 30 layers,
    # 2816 wide, 16 query heads; sliding layers 8 KV heads of 256 with a 1024 window, every 6th layer full
    # with 2 KV heads of 512; a 2112-wide dense MLP beside 128 experts of 704 (top-8); tied embeddings.
    # Re-read 2026-12-02 from copies of its text_config in public repos (Gemma4ForConditionalGeneration:
    # num_global_key_value_heads 2, global_head_dim 512, attention_k_eq_v true, layer_types 5 sliding +
    # 1 full, max_position_embeddings 262144, vocab 262144): all as above.
    "gemma-4-26b-a4b": lambda: gemma4(
        Types(expert=Q4_K, expert_down=Q8_0, resident=Q8_0, embed=Q6_K, output=Q6_K), name="gemma-4-26B-A4B (synthetic)",
        n_layer=30, n_embd=2816, n_head=16, n_head_kv=2, n_head_kv_swa=8, head=512, head_swa=256, n_ff=2112,
        n_ff_exp=704, n_expert=128, top_k=8, swa=1024, full_every=6, vocab=262144, ctx=262144, file_type=15),
    # google/gemma-3n-E4B config.json (text_config): 35 layers, 2048 wide, 8 query / 2 KV heads of 256,
    # a 512-token window with every 5th layer full, the last 15 layers sharing the KV of layers 18/19
    # (num_kv_shared_layers; llama.cpp's n_layer_kv_from_start 20), a 16384-wide FFN in every layer (the
    # first 10 with activation sparsity), AltUp 4 streams, LAuReL rank 64, 256-wide per-layer inputs;
    # the 262144 text tokens llama.cpp's converter keeps (not MoE: the KV-sharing / AltUp layout at width).
    "gemma-3n-e4b": lambda: gemma3n(
        Types(resident=Q8_0, embed=Q6_K, output=Q6_K), name="gemma-3n-E4B (synthetic)", n_layer=35, n_embd=2048,
        n_head=8, n_head_kv=2, head=256, n_ff=16384, swa=512, vocab=262144, ctx=32768, file_type=7),
    "llama3-8b": lambda: llama_moe(
        Types(resident=F16, embed=F16, output=F16), name="Llama-3-8B (synthetic)", n_expert=0, n_layer=32,
        n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, vocab=128256, ctx=8192, file_type=1),
}


def preset(name):
    """The full-size spec of a preset (`kimi-k3`, `kimi-k2`, `qwen3-235b`, ...)."""
    return PRESETS[name]()


def tiny(name, types=Types(), **params):
    """A tiny spec of an architecture (a key of BUILDERS: `mixtral`, `qwen3moe`, `deepseek2`, ...)."""
    return BUILDERS[name](types, **params)


def main(argv=None):
    """`python -m moetools.synth PRESET OUT.gguf [--shards N]`: write a header-only sparse model."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m moetools.synth", description=main.__doc__)
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("output", help="output path (NAME.gguf; shards become NAME-0000k-of-0000N.gguf)")
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args(argv)
    folder = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(folder, exist_ok=True)
    for path in write_model(preset(args.preset), args.output, sparse=True, shards=args.shards):
        print(path)
