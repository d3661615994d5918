"""UI strings of the page ``app_pages/context_parallel.py`` (namespace ``context_parallel.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "context_parallel.nav": {
        "en": "Context parallelism",
        "zh": "上下文并行",
    },
    "context_parallel.caption": {
        "en": "A long prompt split over ranks: KV can be gathered, KDA states cannot be added. Each slice is an "
              "affine map of its incoming state; a prefix scan over the maps gives every rank its true start.",
        "zh": "把长提示词拆到多个 rank：KV 可以收集，KDA 状态却不能相加。每个切片都是其输入状态的仿射映射；对这些映射做"
              "前缀扫描，就得到每个 rank 真正的起点。",
    },
    "context_parallel.title": {
        "en": "Context parallelism: states do not add",
        "zh": "上下文并行：状态不能相加",
    },
    "context_parallel.intro": {
        "en": "The trained tiny model prefills {T} tokens of `docs/kda.md` split over {R} ranks, each holding one "
              "contiguous slice. For an MLA layer a rank only needs the other ranks' latent KV rows: gathered. For a "
              "KDA layer, the state a rank must start from depends on every token before its slice. Each slice maps "
              "its incoming state S to A S + B -- A the product of its tokens' (I - beta k k^T) Diag(alpha), the "
              "latest on the left, and B the slice run from a zero state -- so the ranks all-gather their maps and "
              "each folds the earlier ones: a prefix scan. Below: layer {layer}, head 0, everything in float64.",
        "zh": "训练过的小模型对 `docs/kda.md` 的 {T} 个 token 做 prefill，拆到 {R} 个 rank 上，每个 rank 持有一段连续的切片。"
              "对 MLA 层，rank 只需要其他 rank 的潜在 KV 行，做一次 all-gather 即可。对 KDA 层，rank 的起始状态取决于"
              "其切片之前的所有 token。每个切片把输入状态 S 映射为 A S + B——A 是各 token 的 (I - beta k k^T) "
              "Diag(alpha) 之积（最新的在最左），B 是该切片从零状态运行的结果——于是各 rank 对映射做 all-gather，再各自"
              "折叠之前的映射：这就是前缀扫描。下面展示第 {layer} 层的第 0 个头，全部用 float64 计算。",
    },
    "context_parallel.ranks_label": {
        "en": "Ranks",
        "zh": "rank 数",
    },
    "context_parallel.step_label": {
        "en": "Rank whose incoming state is shown",
        "zh": "显示哪个 rank 的输入状态",
    },
    "context_parallel.maps_text": {
        "en": "Each rank computes its map from its own tokens only, in parallel: A from the chunk form's factors "
              "(the UT transform's W), B by running the slice from zero. Neither depends on another rank.",
        "zh": "每个 rank 只用自己的 token 并行地计算映射：A 来自 chunk 形式的因子（UT 变换的 W），B 是切片从零运行的"
              "结果。两者都不依赖其他 rank。",
    },
    "context_parallel.step_text": {
        "en": "Rank {r} starts at token {lo}. The scan folds the maps of ranks 0 .. {prev}: its state equals the "
              "recurrence's after {lo} tokens (relative error {e_scan:.1e}). Starting from zero misses it by "
              "{e_zero:.0%}; adding the earlier ranks' states from zero by {e_add:.0%}.",
        "zh": "rank {r} 从第 {lo} 个 token 开始。扫描折叠了 rank 0 .. {prev} 的映射：得到的状态等于递推在 {lo} 个 token "
              "之后的状态（相对误差 {e_scan:.1e}）。从零开始则偏差 {e_zero:.0%}；把之前各 rank 从零算出的状态相加，偏差 "
              "{e_add:.0%}。",
    },
    "context_parallel.step_text_first": {
        "en": "Rank 0 starts at token 0, from the initial state (zero here, or a prefix-cache hit's state): nothing "
              "to fold. Step to rank 1.",
        "zh": "rank 0 从第 0 个 token 开始，起点是初始状态（这里为零，或前缀缓存命中的状态）：没有要折叠的东西。请切换到 "
              "rank 1。",
    },
    "context_parallel.wrong_text": {
        "en": "The same {R} ranks run the whole model with each way of choosing the incoming states (the real "
              "context-parallel forward, only the scan swapped). The scan stays within {scan:.0e} of the "
              "single-process logits; the wrong ways move them by {zero:.2f} and {add:.2f}. The state handed to "
              "decoding (after the whole prompt, head 0 of layer {layer}) is off by {f_zero:.1%} (from zero: this "
              "model forgets fast, so the last slice alone comes close) and {f_add:.0%} (added). With one earlier "
              "rank, adding happens to be exact (the incoming state is B of rank 0); from two on it is not.",
        "zh": "同样的 {R} 个 rank 用每一种选择输入状态的方式跑完整个模型（真实的上下文并行前向，只替换扫描）。扫描与单进程"
              "logits 的差在 {scan:.0e} 以内；错误的方式分别让 logits 偏移 {zero:.2f} 和 {add:.2f}。交给 decode 的状态"
              "（整个提示词之后，第 {layer} 层第 0 个头）偏差 {f_zero:.1%}（从零开始：这个模型遗忘得快，只靠最后一段也"
              "很接近）和 {f_add:.0%}（相加）。只有一个之前的 rank 时，相加恰好是对的（输入状态就是 rank 0 的 B）；"
              "从两个起就不对了。",
    },
    "context_parallel.bytes_text": {
        "en": "What one of 4 ranks sends per prefill: a KDA layer's map is HV x K x (K + V) fp32 whatever the prompt "
              "length (4 MiB per layer at 48B, 80 MiB over its 20 KDA layers); the MLA rows grow with the prompt; "
              "gathering the KDA layers' inputs instead would grow with it too, and far faster. In this run each "
              "rank sent {sent} bytes.",
        "zh": "4 个 rank 中的一个每次 prefill 发送的字节：一个 KDA 层的映射是 HV x K x (K + V) 个 fp32，与提示词长度无关"
              "（48B 上每层 4 MiB，20 个 KDA 层共 80 MiB）；MLA 行随提示词增长；若改为收集 KDA 层的输入，也会随之增长，"
              "而且快得多。本次运行中每个 rank 发送了 {sent} 字节。",
    },
    "context_parallel.method.scan": {
        "en": "prefix scan",
        "zh": "前缀扫描",
    },
    "context_parallel.method.zero": {
        "en": "every rank from zero",
        "zh": "每个 rank 从零开始",
    },
    "context_parallel.method.add": {
        "en": "states added",
        "zh": "状态相加",
    },
    "context_parallel.volume.kda_maps": {
        "en": "KDA maps",
        "zh": "KDA 映射",
    },
    "context_parallel.volume.conv_tails": {
        "en": "conv tails",
        "zh": "卷积尾部",
    },
    "context_parallel.volume.mla_rows": {
        "en": "MLA latent rows",
        "zh": "MLA 潜在行",
    },
    "context_parallel.volume.kda_inputs_instead": {
        "en": "KDA inputs, if gathered instead",
        "zh": "若改为收集 KDA 输入",
    },
    "context_parallel.fig.maps_title": {
        "en": "Each rank's map of its slice (layer {layer}, head 0)",
        "zh": "每个 rank 对其切片的映射（第 {layer} 层，第 0 个头）",
    },
    "context_parallel.fig.map_a": {
        "en": "rank {r}: A (tokens {lo}-{hi})",
        "zh": "rank {r}：A（token {lo}-{hi}）",
    },
    "context_parallel.fig.map_b": {
        "en": "rank {r}: B",
        "zh": "rank {r}：B",
    },
    "context_parallel.fig.incoming_title": {
        "en": "Rank {r}'s incoming state (the state after token {lo})",
        "zh": "rank {r} 的输入状态（第 {lo} 个 token 之后的状态）",
    },
    "context_parallel.fig.incoming": {
        "en": "{method}: error {err:.1e}",
        "zh": "{method}：误差 {err:.1e}",
    },
    "context_parallel.fig.logits_title": {
        "en": "The whole model over {R} ranks: distance to one process",
        "zh": "整个模型在 {R} 个 rank 上：与单进程的差距",
    },
    "context_parallel.fig.volume_tiny": {
        "en": "tiny model",
        "zh": "小模型",
    },
    "context_parallel.fig.volume_48b": {
        "en": "Kimi-Linear-48B",
        "zh": "Kimi-Linear-48B",
    },
    "context_parallel.fig.volume_x": {
        "en": "prompt tokens",
        "zh": "提示词 token 数",
    },
    "context_parallel.watch": {
        "en": "- **States do not add.** At rank 1 the sum is rank 0's state itself (exact); step to rank 2: the sum "
              "of the earlier ranks' zero-start states is far from the true state, because each later token decays "
              "and erases what came before.\n"
              "- **Maps do compose.** The scan's state equals the recurrence's to float64 precision, and the whole "
              "model over the ranks gives the single-process logits.\n"
              "- **Flat bytes.** A map is the same size for 8k or 1M tokens; what grows is MLA's KV.",
        "zh": "- **状态不能相加。** 在 rank 1，这个和就是 rank 0 的状态本身（精确）；切换到 rank 2：之前各 rank "
              "从零算出的状态之和与真实状态相差很远，因为后来的每个 token 都会衰减并擦除之前的内容。\n"
              "- **映射可以复合。** 扫描得到的状态与递推在 float64 精度下相同，整个模型在多个 rank 上得到单进程的 logits。\n"
              "- **字节数不变。** 8k 和 1M 个 token 的映射一样大；增长的是 MLA 的 KV。",
    },
}
