"""UI strings of the page ``app_pages/kda_segments.py`` (namespace ``segments.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "kda_segments.nav": {
        "en": "Sequential but segmentable",
        "zh": "顺序计算，但可分段",
    },
    "kda_segments.caption": {
        "en": "Split a sequence anywhere and keep the order: the same state as one pass; swap two segments and it is not.",
        "zh": "在任意位置切分序列并保持顺序：得到与一次性计算相同的状态；交换两段则不然。",
    },
    "kda_segments.title": {
        "en": "Sequential but segmentable",
        "zh": "顺序计算，但可分段",
    },
    "kda_segments.intro": {
        "en": (
            "KDA is a recurrence: the state after token t depends on every earlier token, in order. "
            "Yet a sequence can be processed **in segments**: run the first segment, hand its final "
            "state to the second as its initial state, and so on. The result is the same state as one "
            "pass over the whole sequence, whatever the split points — this is what makes chunked "
            "prefill, prefix caching and resuming from a checkpoint exact. What you cannot do is change "
            "the order.\n\n"
            "Below, one random input sequence of {T} tokens ({H} heads, K = V = {D}) is processed three "
            "ways: in one pass with the token-by-token reference `recurrent_kda`; segment by segment, in "
            "order, with the chunk kernel `chunk_kda` (chunks of {C} tokens); and with two segments "
            "swapped. Pick the split points and step through the segment boundaries."
        ),
        "zh": (
            "KDA 是一个递推：第 t 个 token 之后的状态依赖于之前的每一个 token，而且依赖它们的顺序。"
            "但一个序列可以**分段**处理：先算第一段，把它的最终状态作为第二段的初始状态交给第二段，依此类推。"
            "无论切分点在哪里，结果都与对整个序列一次性计算得到的状态相同——正是这一点让分块预填充、前缀缓存"
            "和从 checkpoint 恢复是精确的。你不能做的是改变顺序。\n\n"
            "下面，一个 {T} 个 token 的随机输入序列（{H} 个头，K = V = {D}）以三种方式处理：用逐 token 的参考实现 "
            "`recurrent_kda` 一次性计算；用分块 kernel `chunk_kda`（每块 {C} 个 token）按顺序逐段计算；以及交换"
            "其中两段后再计算。选择切分点，然后逐个查看各段的边界。"
        ),
    },
    "kda_segments.seed_label": {
        "en": "random sequence (seed)",
        "zh": "随机序列（种子）",
    },
    "kda_segments.splits_label": {
        "en": "split points (token positions)",
        "zh": "切分点（token 位置）",
    },
    "kda_segments.swap_label": {
        "en": "segments to swap",
        "zh": "要交换的两段",
    },
    "kda_segments.head_label": {
        "en": "head",
        "zh": "头",
    },
    "kda_segments.step_label": {
        "en": "segment",
        "zh": "段",
    },
    "kda_segments.err.range": {
        "en": "Split point {s} does not lie strictly between 0 and {T}; pick positions inside the sequence.",
        "zh": "切分点 {s} 不在 0 和 {T} 之间（不含两端）；请选择序列内部的位置。",
    },
    "kda_segments.one_segment": {
        "en": "With no split point there is a single segment: nothing to compare and nothing to swap. Add a split point.",
        "zh": "没有切分点时只有一段：没有可比较的，也没有可交换的。请添加一个切分点。",
    },
    "kda_segments.current": {
        "en": "**Segment {j} of {n}**: tokens {s}..{e}, started from the state after {s} tokens{init}.",
        "zh": "**第 {j} 段（共 {n} 段）**：token {s}..{e}，从前 {s} 个 token 之后的状态开始{init}。",
    },
    "kda_segments.init_zero": {
        "en": " (zero: nothing before it)",
        "zh": "（零状态：之前没有任何 token）",
    },
    "kda_segments.init_prev": {
        "en": ", the final state of segment {p}",
        "zh": "，即第 {p} 段的最终状态",
    },
    "kda_segments.metric.boundary": {
        "en": "max |in order − one pass| here",
        "zh": "此处 max |按序分段 − 一次性|",
    },
    "kda_segments.metric.swapped": {
        "en": "max |swapped − one pass| at the end",
        "zh": "末尾 max |交换后 − 一次性|",
    },
    "kda_segments.metric.chunks": {
        "en": "max |chunk-start states − one pass|",
        "zh": "max |块起点状态 − 一次性|",
    },
    "kda_segments.fig.segment": {
        "en": "segment {n}",
        "zh": "第 {n} 段",
    },
    "kda_segments.fig.one_pass": {
        "en": "one pass: ||S|| after every token",
        "zh": "一次性计算：每个 token 之后的 ||S||",
    },
    "kda_segments.fig.in_order": {
        "en": "segments in order: state after each segment",
        "zh": "按序分段：每段之后的状态",
    },
    "kda_segments.fig.chunk_starts": {
        "en": "chunk-start states (free checkpoints)",
        "zh": "块起点状态（免费的 checkpoint）",
    },
    "kda_segments.fig.swapped": {
        "en": "two segments swapped: final state",
        "zh": "交换两段：最终状态",
    },
    "kda_segments.fig.x": {
        "en": "tokens processed",
        "zh": "已处理的 token 数",
    },
    "kda_segments.fig.y": {
        "en": "||S|| (all heads)",
        "zh": "||S||（所有头）",
    },
    "kda_segments.fig.timeline.title": {
        "en": "The state along the sequence; boundary after segment {j} (token {pos}) highlighted",
        "zh": "沿序列的状态；高亮第 {j} 段之后的边界（token {pos}）",
    },
    "kda_segments.fig.boundary.title": {
        "en": "Head {head}, state after {pos} tokens: segments in order vs one pass (one colour scale)",
        "zh": "头 {head}，前 {pos} 个 token 之后的状态：按序分段 vs 一次性计算（同一色标）",
    },
    "kda_segments.fig.panel.in_order": {
        "en": "in order, after segment {j}",
        "zh": "按序，第 {j} 段之后",
    },
    "kda_segments.fig.panel.one_pass": {
        "en": "one pass, after {pos} tokens",
        "zh": "一次性，前 {pos} 个 token 之后",
    },
    "kda_segments.fig.panel.diff": {
        "en": "difference (max {d})",
        "zh": "差值（最大 {d}）",
    },
    "kda_segments.fig.swap.title": {
        "en": "Head {head}, final state: swapping two segments changes it",
        "zh": "头 {head}，最终状态：交换两段会改变它",
    },
    "kda_segments.fig.panel.final": {
        "en": "one pass, after {T} tokens",
        "zh": "一次性，前 {T} 个 token 之后",
    },
    "kda_segments.fig.panel.swapped": {
        "en": "segments {a} and {b} swapped",
        "zh": "交换第 {a} 段和第 {b} 段",
    },
    "kda_segments.watch": {
        "en": (
            "- **Any split, same state.** Move the split points anywhere: the difference stays at "
            "float32 rounding (about 1e-7), although the segments run with a different kernel (chunked, "
            "matrix products inside each chunk) from the one-pass reference (token by token).\n"
            "- **Order matters.** Swapping two segments feeds the same tokens in another order; the "
            "decay and the delta rule do not commute, so the final state is different — by as much as "
            "the state itself when the swapped segments are recent.\n"
            "- **Free checkpoints.** The purple diamonds are the states at the start of every chunk of "
            "{C} tokens, returned by one `chunk_kda` call (`return_intermediate_states=True`). They lie "
            "exactly on the one-pass curve: a prefix cache can keep them and resume there later.\n"
            "- **Only there.** Between two saved positions nothing can be resumed: the state after token "
            "t exists only if the computation stopped at t and kept it."
        ),
        "zh": (
            "- **任意切分，状态相同。** 把切分点移到任何位置：差值都停留在 float32 舍入误差量级（约 1e-7），"
            "尽管各段用的 kernel（分块、块内矩阵乘）与一次性计算的参考实现（逐 token）不同。\n"
            "- **顺序很重要。** 交换两段，相同的 token 以另一种顺序输入；衰减和 delta 规则不可交换，所以最终"
            "状态不同——当被交换的段离末尾较近时，差值与状态本身一样大。\n"
            "- **免费的 checkpoint。** 紫色菱形是每个 {C} 个 token 的块起点的状态，由一次 `chunk_kda` 调用"
            "（`return_intermediate_states=True`）返回。它们恰好落在一次性计算的曲线上：前缀缓存可以保存它们，"
            "之后从那里继续。\n"
            "- **只能在那里。** 两个保存位置之间无法恢复：第 t 个 token 之后的状态，只有在计算恰好停在 t 并"
            "保存了它时才存在。"
        ),
    },
}
