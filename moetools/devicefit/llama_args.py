"""llama.cpp's command-line flags (common/arg.cpp at 0c1e57098), for `device-fit --check`: every
spelling add_opt(common_arg(...)) declares, by how many values it takes (common/arg.h's common_arg
constructors: a handler of (params) or (params, bool) takes none, of (params, int|string) one, of
(params, string, string) two; common_params_parse_ex reads them as the next arguments, never as
`--flag=value`, and turns `_` into `-` in a `--` flag). The tables are benchmarks/gen_llama_args.py's
output over that arg.cpp, wrapped.

Which of them device-fit models, which change memory or speed without being modelled, and which
change neither is decided in devicefit/check.py.
"""

ARITY_0 = (
    "--agent --backend-sampling --cache-idle-slots --cache-list --cache-prompt --check --check-tensors "
    "--completion-bash --cont-batching --context-shift --conversation --cors-credentials --cpu-moe --cpu-moe-draft "
    "--dflash --diffusion-visual --display-prompt --eagle3 --embd-gemma-default --embedding --embeddings --escape "
    "--fim-qwen-1.5b-default --fim-qwen-14b-spec --fim-qwen-30b-default --fim-qwen-3b-default --fim-qwen-7b-default "
    "--fim-qwen-7b-spec --gpt-oss-120b-default --gpt-oss-20b-default --hellaswag --help --ids --ignore-eos "
    "--in-prefix-bos --interactive --interactive-first --jinja --kl-divergence --kv-offload --kv-unified "
    "--list-devices --log-disable --log-jsonl --log-prefix --log-timestamps --log-verbose --lora-init-without-apply "
    "--metrics --mmproj-auto --mmproj-offload --models-autoload --mtp --multiline-input --multiple-choice "
    "--no-agent --no-bos --no-cache-idle-slots --no-cache-prompt --no-cont-batching --no-context-shift "
    "--no-conversation --no-cors-credentials --no-display-prompt --no-escape --no-host --no-jinja --no-kv-offload "
    "--no-kv-unified --no-log-jsonl --no-log-prefix --no-log-timestamps --no-mmproj --no-mmproj-auto "
    "--no-mmproj-offload --no-models-autoload --no-op-offload --no-parse-special --no-perf --no-ppl "
    "--no-prefill-assistant --no-reasoning-preserve --no-repack --no-show-timings --no-skip-chat-parsing --no-slots "
    "--no-spec-draft-backend-sampling --no-ui --no-ui-mcp-proxy --no-warmup --no-webui --no-webui-mcp-proxy "
    "--offline --op-offload --parse-special --perf --ppl --prefill-assistant --process-output --prompt-cache-all "
    "--prompt-cache-ro --props --reasoning-preserve --repack --rerank --reranking --reuse-port --save-logits "
    "--show-count --show-statistics --show-timings --simple-io --single-turn --skip-chat-parsing --slots "
    "--spec-default --spec-draft-backend-sampling --spec-draft-cpu-moe --special --spm-infill --stdin --swa-full "
    "--ui --ui-mcp-proxy --usage --verbose --verbose-prompt --version --vision-gemma-12b-default "
    "--vision-gemma-4b-default --warmup --webui --webui-mcp-proxy --winogrande -ag -bs -cb -cl -cmoe -cmoed -cnv -e "
    "-h -i -if -kvo -kvu -mli -nkvo -no-ag -no-cnv -no-kvu -nocb -nr -pps -sp -st -tgs -v "
).split()

ARITY_1 = (
    "--adaptive-decay --adaptive-target --alias --api-key --api-key-file --api-prefix --attention --audio "
    "--batch-size --binary-file --cache-ram --cache-reuse --cache-type-k --cache-type-k-draft --cache-type-v "
    "--cache-type-v-draft --chat-template --chat-template-file --chat-template-kwargs --checkpoint-min-step --chunk "
    "--chunk-separator --chunk-size --chunks --cls-separator --color --context-file --control-vector "
    "--control-vector-scaled --cors-headers --cors-methods --cors-origins --cpu-mask --cpu-mask-batch "
    "--cpu-mask-batch-draft --cpu-mask-draft --cpu-range --cpu-range-batch --cpu-range-batch-draft "
    "--cpu-range-draft --cpu-strict --cpu-strict-batch --cpu-strict-batch-draft --cpu-strict-draft "
    "--ctx-checkpoints --ctx-size --defrag-thold --device --device-draft --diffusion-add-gumbel-noise "
    "--diffusion-alg-temp --diffusion-algorithm --diffusion-block-length --diffusion-cfg-scale --diffusion-eps "
    "--diffusion-steps --docker-repo --draft --draft-max --draft-min --draft-n --draft-n-min --draft-p-min "
    "--draft-p-split --dry-allowed-length --dry-base --dry-multiplier --dry-penalty-last-n --dry-sequence-breaker "
    "--dynatemp-exp --dynatemp-range --embd-normalize --embd-output-format --embd-separator --epochs --file --fit "
    "--fit-ctx --fit-print --fit-target --flash-attn --frequency-penalty --from-chunk --gpu-layers "
    "--gpu-layers-draft --grammar --grammar-file --grp-attn-n --grp-attn-w --hellaswag-tasks --hf-file --hf-repo "
    "--hf-repo-draft --hf-token --host --image --image-max-tokens --image-min-tokens --in-file --in-prefix "
    "--in-suffix --json-schema --json-schema-file --junk --keep --kl-divergence-base --kv-unified-per-slot "
    "--lazy-mode --learning-rate --learning-rate-decay-epochs --learning-rate-min --load-mode --log-colors "
    "--log-file --log-prompts-dir --log-verbosity --logit-bias --logits-output-dir --lookup-cache-dynamic "
    "--lookup-cache-static --lora --lora-scaled --main-gpu --mcp-servers-config --mcp-servers-json --media-path "
    "--method --min-p --mirostat --mirostat-ent --mirostat-lr --mmproj --mmproj-device --mmproj-url --model "
    "--model-draft --model-url --models-dir --models-max --models-preset --mtmd-batch-max-tokens "
    "--multiple-choice-tasks --n-cpu-ffn --n-cpu-moe --n-cpu-moe-draft --n-gpu-layers --n-gpu-layers-draft "
    "--n-predict --negative-file --numa --optimizer --output --output-file --output-format --output-frequency "
    "--override-kv --override-tensor --override-tensor-draft --parallel --path --pca-batch --pca-iter --poll "
    "--poll-batch --poll-batch-draft --poll-draft --pooling --port --pos --positive-file --ppl-output-type "
    "--ppl-stride --predict --presence-penalty --print-token-count --prio --prio-batch --prio-batch-draft "
    "--prio-draft --prompt --prompt-cache --reasoning --reasoning-budget --reasoning-budget-message "
    "--reasoning-effort --reasoning-format --repeat-last-n --repeat-penalty --reverse-prompt --rope-freq-base "
    "--rope-freq-scale --rope-scale --rope-scaling --rpc --sampler-seq --samplers --sampling-seq --save-all-logits "
    "--save-frequency --seed --sequences --server-base --sleep-idle-seconds --slot-prompt-similarity "
    "--slot-save-path --spec-draft-cpu-mask --spec-draft-cpu-mask-batch --spec-draft-cpu-range "
    "--spec-draft-cpu-range-batch --spec-draft-cpu-strict --spec-draft-cpu-strict-batch --spec-draft-device "
    "--spec-draft-hf --spec-draft-model --spec-draft-n-cpu-moe --spec-draft-n-max --spec-draft-n-min "
    "--spec-draft-ncmoe --spec-draft-ngl --spec-draft-override-tensor --spec-draft-p-min --spec-draft-p-split "
    "--spec-draft-poll --spec-draft-poll-batch --spec-draft-prio --spec-draft-prio-batch --spec-draft-threads "
    "--spec-draft-threads-batch --spec-draft-type-k --spec-draft-type-v --spec-ngram-map-k-min-hits "
    "--spec-ngram-map-k-size-m --spec-ngram-map-k-size-n --spec-ngram-map-k4v-min-hits --spec-ngram-map-k4v-size-m "
    "--spec-ngram-map-k4v-size-n --spec-ngram-min-hits --spec-ngram-mod-n-match --spec-ngram-mod-n-max "
    "--spec-ngram-mod-n-min --spec-ngram-simple-min-hits --spec-ngram-simple-size-m --spec-ngram-simple-size-n "
    "--spec-ngram-size-m --spec-ngram-size-n --spec-synth-len --spec-synth-rates --spec-type --split-mode "
    "--sse-ping-interval --ssl-cert-file --ssl-key-file --swa-checkpoints --system-prompt --system-prompt-file "
    "--tags --temp --temperature --tensor-filter --tensor-split --threads --threads-batch --threads-batch-draft "
    "--threads-draft --threads-http --timeout --tools --tools-runtime --top-k --top-n-sigma --top-nsigma --top-p "
    "--tts-lang --tts-speaker-file --typical --typical-p --ubatch-size --ui-config --ui-config-file --val-split "
    "--verbosity --video --video-ffmpeg-dir --video-fps --video-timestamp-interval --webui-config "
    "--webui-config-file --weight-decay --winogrande-tasks --xtc-probability --xtc-threshold --yarn-attn-factor "
    "--yarn-beta-fast --yarn-beta-slow --yarn-ext-factor --yarn-orig-ctx -C -Cb -Cbd -Cd -Cr -Crb -Crbd -Crd -a -b "
    "-bf -c -cms -co -cram -ctk -ctkd -ctv -ctvd -ctxcp -decay-epochs -dev -devd -dr -dt -epochs -f -fa -fit -fitc "
    "-fitp -fitt -gan -gaw -hf -hfd -hff -hfr -hfrd -hft -j -jf -l -lcd -lcs -lm -lr -lr-min -lv -lzm -m -md -mg "
    "-mm -mmdev -mmu -mu -n -ncffn -ncmoe -ncmoed -ngl -ngld -np -npl -npp -ns -ntg -o -ofreq -opt -ot -otd -p -ptc "
    "-r -rea -s -sm -sps -sys -sysf -t -tb -tbd -td -to -ts -ub -val-split -wd "
).split()

ARITY_2 = (
    "--control-vector-layer-range "
).split()

# spellings of llama.cpp before --load-mode (-lm) replaced them, still in users' scripts
OLDER = {"--no-mmap": 0, "--mmap": 0, "--mlock": 0, "--direct-io": 0, "-dio": 0, "--no-direct-io": 0, "-ndio": 0}


def arity(flag):
    """Values `flag` takes, or None when llama.cpp does not know it."""
    if flag in _TABLE:
        return _TABLE[flag]
    return OLDER.get(flag)


_TABLE = {**{flag: 0 for flag in ARITY_0}, **{flag: 1 for flag in ARITY_1}, **{flag: 2 for flag in ARITY_2}}
