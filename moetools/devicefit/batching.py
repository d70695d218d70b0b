"""The batch sizes and threads of a plan: which -ub/-b is fastest for what the user prefers, and -t.

A larger -ub makes every ubatch carry more prompt tokens past the same per-ubatch cost (above all, the copy
of CPU-held expert weights to the GPU: speed/prompt.py), so prompt processing speeds up almost in
proportion; but each device's compute buffer grows with -ub and takes VRAM from experts, so decode can
slow down. The trade-off is shown as the context one is: one row per -ub, the chosen one marked.

--prefer says what to maximise:
- decode: tokens generated per second (prompt speed breaks ties within 1%);
- prompt: prompt tokens per second (decode breaks ties within 1%);
- balanced (the default): the shortest time for a chat request of BALANCED_PROMPT prompt tokens and
  BALANCED_GENERATED generated tokens, prompt / pp + generated / tg.
"""

import math

PREFERENCES = ("balanced", "decode", "prompt")
UBATCH_CANDIDATES = (512, 1024, 2048, 4096)
DEFAULT_UBATCH = 512  # llama.cpp's -ub
BALANCED_PROMPT = 4096
BALANCED_GENERATED = 512
TIE = 0.01


def request_seconds(tok_s, pp_tok_s):
    """Seconds for the balanced preference's request (inf where a speed is 0)."""
    if tok_s <= 0 or pp_tok_s <= 0:
        return float("inf")
    return BALANCED_PROMPT / pp_tok_s + BALANCED_GENERATED / tok_s


def score(plan, prefer):
    """A key that sorts the best plan last for `prefer` (speeds within TIE count as equal)."""

    def rounded(value):  # equal within 1%: compare on a log grid of 1% steps
        return math.floor(math.log(value) / math.log1p(TIE)) if value > 0 else -math.inf

    if prefer == "decode":
        return (rounded(plan.tok_s), plan.pp_tok_s)
    if prefer == "prompt":
        return (rounded(plan.pp_tok_s), plan.tok_s)
    return (-request_seconds(plan.tok_s, plan.pp_tok_s), plan.tok_s)


def candidates(context):
    """The -ub values to try beside the default at this context, largest first (llama.cpp caps
    n_ubatch at the context)."""
    values = sorted({min(ub, context) for ub in UBATCH_CANDIDATES if ub != DEFAULT_UBATCH}, reverse=True)
    return [ub for ub in values if ub > DEFAULT_UBATCH]


def choose_ubatch(evaluate, chosen, kv, prefer):
    """(best plan, rows) of the -ub search at the chosen plan's context. evaluate(kv settings) ->
    DevicePlan; rows: [(ubatch, batch, plan)] of the -ub values evaluated, in -ub order. -b follows -ub
    where -ub exceeds it (llama.cpp would clamp -ub to -b).

    Each -ub replays its own graphs (the compute buffers grow with it: a K3-class model's take a fifth of a
    second), so the search walks down from the largest and stops at the first that fits and beats the
    default: prompt speed grows with -ub, so for --prefer prompt that is the best; for balanced it is the
    largest -ub whose prompt gain outweighs its decode loss (a smaller one could balance slightly better:
    the table shows what was evaluated). --prefer decode
    keeps llama.cpp's default (-ub only adds compute buffer to a token's decode)."""
    rows = [(kv.ubatch, kv.batch, chosen)]
    if prefer == "decode":
        return chosen, rows
    best = chosen
    for ub in candidates(chosen.context):
        settings = kv.replace(ubatch=ub, batch=max(kv.batch, ub))
        plan = evaluate(settings)
        rows.append((settings.ubatch, settings.batch, plan))
        if plan.fits and score(plan, prefer) > score(best, prefer):
            best = plan
            break  # the largest -ub that fits and beats the default: the prompt's best, and balanced's
    return best, sorted(rows, key=lambda row: row[0])


def threads_note(settings, cpu_active_bytes):
    """What -t buys decode, when the CPU reads weights per token: a note, or None."""
    if cpu_active_bytes <= 0:
        return None
    enough = saturating_threads(settings)
    if settings.threads < enough:
        return (f"-t {settings.threads}: decode's CPU reads are thread-bound ({settings.threads} x "
                f"{settings.thread_bw / 1e9:.0f} GB/s); {enough} threads would reach the RAM's rate")
    return None


def saturating_threads(settings):
    """The fewest threads at which decode's CPU reads reach the RAM's rate (more add nothing to decode;
    prompt processing's CPU work still gains)."""
    from moetools.devicefit.speed.decode import numa_factor

    ram = settings.ram_peak() * settings.cpu_efficiency * numa_factor(settings)
    return max(1, math.ceil(ram / settings.thread_bw))
