// One-off probe for tests/test_devicefit_llama.py: load a GGUF on the CPU, create a context, and let
// llama.cpp log its KV / recurrent-state allocation (moetools code, linked against libllama).
// usage: probe MODEL N_CTX N_SEQ TYPE_K TYPE_V FA(0/1) SWA_FULL(0/1) UNIFIED(0/1) UBATCH [BATCH [N_OUTPUTS_MAX]]
// (N_OUTPUTS_MAX: llama-server sets it to -np x (1 + draft tokens); 0, the default, means the batch)
// PROBE_ASSISTANT=DRAFT.gguf (environment): then a second context for that draft with ctx_other = the
// first (a gemma4-assistant reads its KV), the MTP context type and one output row per sequence, as
// common_speculative_init_result makes it for -md with --spec-type draft-mtp.
// PROBE_MTP=1 (environment): the model is loaded with its NextN/MTP tensors (load_mtp) and a second
// context of the MTP type is made on it, as common_speculative_init_result does for --spec-type draft-mtp
// (ctx_other = the first, no recurrent-state snapshots, one output row per sequence).
// Weight repacking is off (use_extra_bufts = false, as -nr) and nothing is allocated (no_alloc): llama.cpp
// sizes every buffer it would allocate and logs it, so header-only sparse models cost no RAM.
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
static ggml_type type_of(const char * s) {
    if (!strcmp(s, "f16")) return GGML_TYPE_F16;
    if (!strcmp(s, "bf16")) return GGML_TYPE_BF16;
    if (!strcmp(s, "f32")) return GGML_TYPE_F32;
    if (!strcmp(s, "q8_0")) return GGML_TYPE_Q8_0;
    if (!strcmp(s, "q4_0")) return GGML_TYPE_Q4_0;
    if (!strcmp(s, "q4_1")) return GGML_TYPE_Q4_1;
    if (!strcmp(s, "q5_0")) return GGML_TYPE_Q5_0;
    if (!strcmp(s, "q5_1")) return GGML_TYPE_Q5_1;
    abort();
}
int main(int argc, char ** argv) {
    if (argc < 10) return 2;
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    mp.no_alloc = true;  // metadata only, allocations simulated (as common/fit.cpp does)
    mp.load_mode = LLAMA_LOAD_MODE_NONE;
    const bool mtp = getenv("PROBE_MTP") != nullptr;
    mp.load_mtp = mtp;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "PROBE: load failed\n"); return 1; }
    auto cp = llama_context_default_params();
    cp.n_ctx = atoi(argv[2]);
    cp.n_seq_max = atoi(argv[3]);
    cp.type_k = type_of(argv[4]);
    cp.type_v = type_of(argv[5]);
    cp.flash_attn_type = atoi(argv[6]) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.swa_full = atoi(argv[7]);
    cp.kv_unified = atoi(argv[8]);
    cp.n_ubatch = atoi(argv[9]);
    cp.n_batch = argc > 10 ? atoi(argv[10]) : 2048;
    cp.n_outputs_max = argc > 11 ? atoi(argv[11]) : 0;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "PROBE: context failed\n"); return 1; }
    fprintf(stderr, "PROBE: ok\n");
    const char * assistant = getenv("PROBE_ASSISTANT");
    if (mtp) {
        auto dp = cp;
        dp.ctx_other = ctx;
        dp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
        dp.n_rs_seq = 0;
        dp.n_outputs_max = cp.n_seq_max;
        dp.n_outputs_max_per_seq = 1;
        fprintf(stderr, "PROBE: mtp context\n");
        llama_context * mctx = llama_init_from_model(model, dp);
        if (!mctx) { fprintf(stderr, "PROBE: mtp context failed\n"); return 1; }
        fprintf(stderr, "PROBE: mtp ok\n");
        llama_free(mctx);
    }
    if (assistant) {
        llama_model * draft = llama_model_load_from_file(assistant, mp);
        if (!draft) { fprintf(stderr, "PROBE: draft load failed\n"); return 1; }
        auto dp = cp;
        dp.ctx_other = ctx;
        dp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
        dp.n_outputs_max = cp.n_seq_max;
        fprintf(stderr, "PROBE: draft context\n");
        llama_context * dctx = llama_init_from_model(draft, dp);
        if (!dctx) { fprintf(stderr, "PROBE: draft context failed\n"); return 1; }
        fprintf(stderr, "PROBE: draft ok\n");
        llama_free(dctx);
        llama_model_free(draft);
    }
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
